#pragma once
/*
 * Seeded randomness for the unit tests: rng_next (xorshift64*) for all of
 * them (engine_fx.h and test_stress include it too, with their own
 * TC_TEST_SEED seeds); the allocator tests' seed (test_pool, test_quota,
 * test_slab_take: TC_SEED fixes it, CHECK_SEED prints it on a failure).
 * Include after <cmocka.h>.
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* The allocator tests' seed: TC_SEED, else from the clock. */
static inline uint64_t
alloc_test_seed(void)
{
    const char *env = getenv("TC_SEED");

    if (env != NULL && *env != '\0')
        return strtoull(env, NULL, 0);
    return (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
}

/* xorshift64* */
static inline uint64_t
rng_next(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

#define CHECK_SEED(cond, seed, ...)                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            print_error("seed=0x%llx (rerun with TC_SEED=0x%llx): ",           \
                        (unsigned long long)(seed),                            \
                        (unsigned long long)(seed));                           \
            print_error(__VA_ARGS__);                                          \
            print_error("\n");                                                 \
            fail_msg("%s", #cond);                                             \
        }                                                                      \
    } while (0)

/*
 * Unit tests for src/engine/topk.c: planted hot keys in a Zipf stream are found
 * with about their rates, cold keys leave after the window, an adversarial
 * stream of distinct keys keeps K entries. Seeded (TOPK_TEST_SEED=<n>
 * replays a run; the seed is printed when a randomized test fails).
 */
#include "src/engine/topk.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static uint64_t seed = 0x70c0ffee1234ull;

/* Counters in use: every entry fits in one list. */
static unsigned
in_use(const struct topk *t)
{
    static struct topk_entry all[TOPK_MAX_K];
    return topk_list(t, all, TOPK_MAX_K);
}

static uint64_t
rng(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double
unit(uint64_t *s)
{
    return (double)(rng(s) >> 11) / (double)(1ull << 53);
}

static uint64_t
hash_of(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)k[i]) * 1099511628211ull;
    return h;
}

static void
add_key(struct topk *t, const char *k, double w)
{
    topk_add(t, hash_of(k, strlen(k)), k, (uint32_t)strlen(k), w);
}

static double
count_of(struct topk *t, const char *k)
{
    return topk_count(t, hash_of(k, strlen(k)), k, (uint32_t)strlen(k));
}

#define NKEYS 10000

/* Zipf(1) over NKEYS keys by inverse CDF. */
struct zipf {
    double cdf[NKEYS];
};

static void
zipf_init(struct zipf *z)
{
    double sum = 0;
    for (int i = 0; i < NKEYS; i++)
        sum += 1.0 / (i + 1);
    double acc = 0;
    for (int i = 0; i < NKEYS; i++) {
        acc += 1.0 / (i + 1) / sum;
        z->cdf[i] = acc;
    }
}

static int
zipf_next(const struct zipf *z, uint64_t *s)
{
    double u = unit(s);
    int lo = 0, hi = NKEYS - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (z->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Steady rate from a count read before the tick's decay (as hotkey.c
 * does): count = r / (1 - a) for ticks of one second. */
static double
rate_of(double count, double a)
{
    return count * (1 - a);
}

static void
test_planted_zipf(void **state)
{
    (void)state;
    static struct zipf z;
    struct topk *t;
    uint64_t s = seed;
    const double a = exp(-1.0 / 5); /* 5 s window, 1 s ticks */
    const int per_tick = 20000;     /* ops per simulated second */
    char key[32];

    zipf_init(&z);
    assert_int_equal(topk_create(32, &t), 0);
    for (int tick = 0; tick < 40; tick++) {
        for (int i = 0; i < per_tick; i++) {
            double u = unit(&s);
            if (u < 0.10)
                add_key(t, "planted:a", 1); /* 2000/s */
            else if (u < 0.15)
                add_key(t, "planted:b", 1); /* 1000/s */
            else {
                snprintf(key, sizeof(key), "zipf:%d", zipf_next(&z, &s));
                add_key(t, key, 1);
            }
        }
        if (tick < 39)
            topk_decay(t, a);
    }
    double ra = rate_of(count_of(t, "planted:a"), a);
    double rb = rate_of(count_of(t, "planted:b"), a);
    if (ra < 1600 || ra > 2400 || rb < 800 || rb > 1200)
        print_message("seed %llu: rates a %.0f b %.0f\n",
                      (unsigned long long)seed, ra, rb);
    assert_true(ra > 1600 && ra < 2400);
    assert_true(rb > 800 && rb < 1200);

    /* the two planted keys lead; Zipf's first key (about 10% of the rest,
     * 1700/s) is between them */
    struct topk_entry top[4];
    assert_int_equal(topk_list(t, top, 4), 4);
    assert_true(top[0].count >= top[1].count);
    assert_memory_equal(top[0].key, "planted:a", 9);
    int found_b = 0;
    for (int i = 0; i < 3; i++)
        found_b |= top[i].klen == 9 && memcmp(top[i].key, "planted:b", 9) == 0;
    assert_true(found_b);
    topk_destroy(t);
}

static void
test_cold_leaves(void **state)
{
    (void)state;
    struct topk *t;
    const double a = exp(-1.0 / 2); /* 2 s window */

    assert_int_equal(topk_create(8, &t), 0);
    for (int tick = 0; tick < 10; tick++) {
        add_key(t, "was-hot", 1000);
        add_key(t, "steady", 100);
        topk_decay(t, a);
    }
    assert_true(count_of(t, "was-hot") > 1000);
    /* was-hot stops; after a few windows (here 10 windows) it is gone */
    for (int tick = 0; tick < 20; tick++) {
        add_key(t, "steady", 100);
        topk_decay(t, a);
    }
    assert_true(count_of(t, "was-hot") == 0);
    assert_true(count_of(t, "steady") > 100);
    assert_int_equal(in_use(t), 1);
    topk_destroy(t);
}

static void
test_distinct_bounded(void **state)
{
    (void)state;
    struct topk *t;
    char key[32];

    assert_int_equal(topk_create(16, &t), 0);
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof(key), "distinct:%d", i);
        add_key(t, key, 1);
        if (i % 8 == 0)
            add_key(t, "heavy", 1);
        assert_true(in_use(t) <= 16);
    }
    /* space-saving never loses a key heavier than N / K (12500 of 112500
     * here, against 7031) and never underestimates it */
    assert_true(count_of(t, "heavy") >= 12500);
    struct topk_entry all[16];
    unsigned n = topk_list(t, all, 16);
    assert_int_equal(n, 16);
    for (unsigned i = 1; i < n; i++)
        assert_true(all[i - 1].count >= all[i].count);
    topk_destroy(t);
}

static void
test_bad_args(void **state)
{
    (void)state;
    struct topk *t;
    assert_int_equal(topk_create(0, &t), -22);
    assert_int_equal(topk_create(TOPK_MAX_K + 1, &t), -22);
    assert_int_equal(topk_create(2, &t), 0);
    topk_add(t, 1, "x", 0, 1);  /* empty key: ignored */
    topk_add(t, 1, "x", 1, 0);  /* no weight: ignored */
    topk_add(t, 1, "x", 1, -1); /* negative: ignored */
    assert_int_equal(in_use(t), 0);
    struct topk_entry e[1];
    add_key(t, "a", 3);
    add_key(t, "b", 5);
    assert_int_equal(topk_list(t, e, 1), 1);
    assert_memory_equal(e[0].key, "b", 1);
    topk_destroy(t);
}

int
main(void)
{
    const char *s = getenv("TOPK_TEST_SEED");
    if (s)
        seed = strtoull(s, NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_zipf),
        cmocka_unit_test(test_cold_leaves),
        cmocka_unit_test(test_distinct_bounded),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

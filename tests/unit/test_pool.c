/*
 * Unit tests for alloc/pool.c. The pool never touches the pages, so the base
 * is an untouched aligned_alloc() buffer (only virtual memory is used).
 *
 * Randomised tests take their seed from TC_SEED if set, else from the clock,
 * and print it when they fail.
 */

#include "alloc/pool.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "seed_fx.h"

#define MAX_TEST_PAGES 320u

struct fixture {
    char *mem;
    uint32_t npages;
    struct pool *pool;
};

static struct fixture *
fixture_new(uint32_t npages, uint32_t limit)
{
    struct fixture *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    f->npages = npages;
    f->mem = aligned_alloc(POOL_PAGE_SIZE, (size_t)npages * POOL_PAGE_SIZE);
    assert_non_null(f->mem);
    assert_int_equal(
        pool_create(f->mem, (uint64_t)npages * POOL_PAGE_SIZE, limit, &f->pool),
        0);
    return f;
}

static void
fixture_free(struct fixture *f)
{
    if (f == NULL)
        return;
    pool_destroy(f->pool);
    free(f->mem);
    free(f);
}

static int
teardown(void **state)
{
    fixture_free(*state);
    *state = NULL;
    return 0;
}

/* --- tests --- */

static void
test_create_reports_geometry(void **state)
{
    struct fixture *f = fixture_new(10, 0);

    *state = f;
    assert_int_equal(pool_npages(f->pool), 10);
    assert_int_equal(pool_limit(f->pool), 10);
    assert_int_equal(pool_nfree(f->pool), 10);
    assert_ptr_equal(pool_base(f->pool), f->mem);
}

static void
test_create_with_limit(void **state)
{
    struct fixture *f = fixture_new(10, 4);
    uint32_t page;

    *state = f;
    assert_int_equal(pool_limit(f->pool), 4);
    assert_int_equal(pool_nfree(f->pool), 4);
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(pool_page_get(f->pool, &page), 0);
        assert_int_equal(page, i);
    }
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);
}

static void
test_bad_args(void **state)
{
    char *mem = aligned_alloc(POOL_PAGE_SIZE, 4 * (size_t)POOL_PAGE_SIZE);
    struct pool *p = (struct pool *)0x1;
    struct fixture *f;

    (void)state;
    assert_non_null(mem);
    /* unaligned base */
    assert_int_equal(pool_create(mem + 4096, 2 * POOL_PAGE_SIZE, 0, &p),
                     -EINVAL);
    assert_int_equal(pool_create(mem + 8, POOL_PAGE_SIZE, 0, &p), -EINVAL);
    /* length 0, below a page, not a multiple */
    assert_int_equal(pool_create(mem, 0, 0, &p), -EINVAL);
    assert_int_equal(pool_create(mem, POOL_PAGE_SIZE - 1, 0, &p), -EINVAL);
    assert_int_equal(pool_create(mem, POOL_PAGE_SIZE + 4096, 0, &p), -EINVAL);
    /* no base, limit beyond the mapping */
    assert_int_equal(pool_create(NULL, POOL_PAGE_SIZE, 0, &p), -EINVAL);
    assert_int_equal(pool_create(mem, 4 * (uint64_t)POOL_PAGE_SIZE, 5, &p),
                     -EINVAL);
    assert_ptr_equal(p, (struct pool *)0x1); /* untouched on failure */
    free(mem);

    f = fixture_new(4, 0);
    *state = f;
    assert_int_equal(pool_set_limit(f->pool, 0), -EINVAL);
    assert_int_equal(pool_set_limit(f->pool, 5), -EINVAL);
    assert_int_equal(pool_limit(f->pool), 4);
    assert_int_equal(pool_nfree(f->pool), 4);
    assert_int_equal(pool_set_limit(f->pool, 4), 0);
    assert_int_equal(pool_nfree(f->pool), 4);
}

static void
test_get_lowest_in_order(void **state)
{
    struct fixture *f = fixture_new(130, 0);
    uint32_t page;

    *state = f;
    for (uint32_t i = 0; i < 130; i++) {
        assert_int_equal(pool_page_get(f->pool, &page), 0);
        assert_int_equal(page, i);
        assert_int_equal(pool_nfree(f->pool), 130 - i - 1);
    }
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);
}

static void
test_never_hands_a_page_twice(void **state)
{
    const uint32_t n = 300; /* several bitmap words, a partial last one */
    struct fixture *f = fixture_new(n, 0);
    bool seen[MAX_TEST_PAGES] = {false};
    uint32_t page;

    *state = f;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(pool_page_get(f->pool, &page), 0);
        assert_true(page < n);
        assert_false(seen[page]);
        seen[page] = true;
    }
    for (uint32_t i = 0; i < n; i++)
        assert_true(seen[i]);
    assert_int_equal(pool_nfree(f->pool), 0);
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);
}

static void
test_put_get_round_trip(void **state)
{
    struct fixture *f = fixture_new(200, 0);
    uint32_t page;

    *state = f;
    for (uint32_t i = 0; i < 200; i++)
        assert_int_equal(pool_page_get(f->pool, &page), 0);

    pool_page_put(f->pool, 150);
    assert_int_equal(pool_nfree(f->pool), 1);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 150);
    assert_int_equal(pool_nfree(f->pool), 0);

    /* lowest first, whatever the order of the puts */
    pool_page_put(f->pool, 199);
    pool_page_put(f->pool, 70);
    pool_page_put(f->pool, 3);
    pool_page_put(f->pool, 64);
    assert_int_equal(pool_nfree(f->pool), 4);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 3);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 64);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 70);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 199);
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);

    /* a page put back below the search position is found again */
    pool_page_put(f->pool, 0);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 0);
}

static void
test_limit_shrink_grow(void **state)
{
    struct fixture *f = fixture_new(200, 0);
    uint32_t page;

    *state = f;
    for (uint32_t i = 0; i < 100; i++) {
        assert_int_equal(pool_page_get(f->pool, &page), 0);
        assert_int_equal(page, i);
    }
    assert_int_equal(pool_nfree(f->pool), 100);

    /* shrink to 50: the free pages 100..199 leave, 50..99 are in use */
    assert_int_equal(pool_set_limit(f->pool, 50), 0);
    assert_int_equal(pool_limit(f->pool), 50);
    assert_int_equal(pool_nfree(f->pool), 0);
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);

    /* an in-use page above the new limit stays out when put back */
    pool_page_put(f->pool, 70);
    pool_page_put(f->pool, 99);
    assert_int_equal(pool_nfree(f->pool), 0);
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);

    /* below the limit a put frees the page as usual */
    pool_page_put(f->pool, 10);
    assert_int_equal(pool_nfree(f->pool), 1);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 10);

    /* grow to 150: 70, 99 and 100..149 come back, 50..98 but 70 are
     * still in use and must not */
    assert_int_equal(pool_set_limit(f->pool, 150), 0);
    assert_int_equal(pool_limit(f->pool), 150);
    assert_int_equal(pool_nfree(f->pool), 2 + 50);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 70);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 99);
    for (uint32_t i = 100; i < 150; i++) {
        assert_int_equal(pool_page_get(f->pool, &page), 0);
        assert_int_equal(page, i);
    }
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);

    /* a page that was in use across shrink and grow comes back normally */
    pool_page_put(f->pool, 60);
    assert_int_equal(pool_nfree(f->pool), 1);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 60);

    /* grow to the whole mapping; shrink to the same limit is a no-op */
    assert_int_equal(pool_set_limit(f->pool, 200), 0);
    assert_int_equal(pool_nfree(f->pool), 50);
    assert_int_equal(pool_set_limit(f->pool, 200), 0);
    assert_int_equal(pool_nfree(f->pool), 50);
    for (uint32_t i = 150; i < 200; i++) {
        assert_int_equal(pool_page_get(f->pool, &page), 0);
        assert_int_equal(page, i);
    }
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);
}

static void
test_limit_shrink_then_grow_without_puts(void **state)
{
    struct fixture *f = fixture_new(130, 0);
    uint32_t page;

    *state = f;
    /* shrink to a word boundary and below it, then grow past both */
    assert_int_equal(pool_set_limit(f->pool, 64), 0);
    assert_int_equal(pool_nfree(f->pool), 64);
    assert_int_equal(pool_set_limit(f->pool, 1), 0);
    assert_int_equal(pool_nfree(f->pool), 1);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 0);
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);
    assert_int_equal(pool_set_limit(f->pool, 129), 0);
    assert_int_equal(pool_nfree(f->pool), 128);
    for (uint32_t i = 1; i < 129; i++) {
        assert_int_equal(pool_page_get(f->pool, &page), 0);
        assert_int_equal(page, i);
    }
    assert_int_equal(pool_page_get(f->pool, &page), -ENOSPC);
    assert_int_equal(pool_set_limit(f->pool, 130), 0);
    assert_int_equal(pool_page_get(f->pool, &page), 0);
    assert_int_equal(page, 129);
}

/*
 * Random get/put/set_limit bursts checked against a reference model: a page
 * is free exactly when it is below the limit and not in use, and a get must
 * return the lowest such page.
 */
static void
test_random_bursts_exact(void **state)
{
    const uint32_t n = 300;
    struct fixture *f = fixture_new(n, 0);
    bool inuse[MAX_TEST_PAGES] = {false};
    uint32_t held[MAX_TEST_PAGES];
    uint32_t nheld = 0, limit = n;
    uint64_t seed = alloc_test_seed(), rng = seed | 1;

    *state = f;
    for (int op = 0; op < 200000; op++) {
        uint64_t r = rng_next(&rng) % 100;
        uint32_t expect_free = 0, lowest = POOL_NO_PAGE, page;
        int rc;

        for (uint32_t i = 0; i < limit; i++) {
            if (!inuse[i]) {
                if (lowest == POOL_NO_PAGE)
                    lowest = i;
                expect_free++;
            }
        }
        CHECK_SEED(pool_nfree(f->pool) == expect_free, seed,
                   "op %d: nfree %u, expected %u", op, pool_nfree(f->pool),
                   expect_free);

        if (r < 50) {
            rc = pool_page_get(f->pool, &page);
            if (lowest == POOL_NO_PAGE) {
                CHECK_SEED(rc == -ENOSPC, seed, "op %d: get rc %d", op, rc);
            } else {
                CHECK_SEED(rc == 0 && page == lowest, seed,
                           "op %d: get rc %d page %u, expected %u", op, rc,
                           page, lowest);
                inuse[page] = true;
                held[nheld++] = page;
            }
        } else if (r < 98) {
            if (nheld > 0) {
                uint32_t k = (uint32_t)(rng_next(&rng) % nheld);

                page = held[k];
                held[k] = held[--nheld];
                inuse[page] = false;
                pool_page_put(f->pool, page);
            }
        } else {
            limit = 1 + (uint32_t)(rng_next(&rng) % n);
            CHECK_SEED(pool_set_limit(f->pool, limit) == 0, seed,
                       "op %d: set_limit %u", op, limit);
            CHECK_SEED(pool_limit(f->pool) == limit, seed,
                       "op %d: limit %u, expected %u", op, pool_limit(f->pool),
                       limit);
        }
    }
    while (nheld > 0)
        pool_page_put(f->pool, held[--nheld]);
    assert_int_equal(pool_set_limit(f->pool, n), 0);
    assert_int_equal(pool_nfree(f->pool), n);
}

/* --- two threads: no page is ever owned twice --- */

#define THREAD_PAGES 96u

struct share {
    struct pool *pool;
    _Atomic int owner[THREAD_PAGES]; /* 0 free, else thread id */
    _Atomic int bad;
    uint64_t seed;
};

struct worker {
    struct share *sh;
    int id;
};

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct share *sh = w->sh;
    uint32_t held[THREAD_PAGES];
    uint32_t nheld = 0;
    uint64_t rng = (sh->seed ^ (uint64_t)w->id * 0x9E3779B97F4A7C15ull) | 1;
    time_t start = time(NULL);

    for (int op = 0; op < 100000 && time(NULL) - start < 20; op++) {
        uint32_t page;

        if (nheld == 0 || (nheld < THREAD_PAGES && rng_next(&rng) % 2)) {
            int expected = 0;

            if (pool_page_get(sh->pool, &page) != 0)
                continue;
            if (page >= THREAD_PAGES ||
                !atomic_compare_exchange_strong_explicit(
                    &sh->owner[page], &expected, w->id, memory_order_acq_rel,
                    memory_order_acquire))
                atomic_store_explicit(&sh->bad, 1, memory_order_relaxed);
            held[nheld++] = page;
        } else {
            uint32_t k = (uint32_t)(rng_next(&rng) % nheld);

            page = held[k];
            held[k] = held[--nheld];
            atomic_store_explicit(&sh->owner[page], 0, memory_order_release);
            pool_page_put(sh->pool, page);
        }
    }
    while (nheld > 0) {
        uint32_t page = held[--nheld];

        atomic_store_explicit(&sh->owner[page], 0, memory_order_release);
        pool_page_put(sh->pool, page);
    }
    return NULL;
}

static void
test_two_threads(void **state)
{
    struct fixture *f = fixture_new(THREAD_PAGES, 0);
    struct share *sh = calloc(1, sizeof(*sh));
    struct worker w[2];
    pthread_t t[2];

    *state = f;
    assert_non_null(sh);
    sh->pool = f->pool;
    sh->seed = alloc_test_seed();
    for (int i = 0; i < 2; i++) {
        w[i].sh = sh;
        w[i].id = i + 1;
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    CHECK_SEED(atomic_load_explicit(&sh->bad, memory_order_relaxed) == 0,
               sh->seed, "a page was handed to two owners");
    assert_int_equal(pool_nfree(f->pool), THREAD_PAGES);
    free(sh);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_create_reports_geometry, teardown),
        cmocka_unit_test_teardown(test_create_with_limit, teardown),
        cmocka_unit_test_teardown(test_bad_args, teardown),
        cmocka_unit_test_teardown(test_get_lowest_in_order, teardown),
        cmocka_unit_test_teardown(test_never_hands_a_page_twice, teardown),
        cmocka_unit_test_teardown(test_put_get_round_trip, teardown),
        cmocka_unit_test_teardown(test_limit_shrink_grow, teardown),
        cmocka_unit_test_teardown(test_limit_shrink_then_grow_without_puts,
                                  teardown),
        cmocka_unit_test_teardown(test_random_bursts_exact, teardown),
        cmocka_unit_test_teardown(test_two_threads, teardown),
    };

    return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}

/*
 * Unit tests for alloc/slab.c's per-chunk last-access times (meta l, me
 * la=): ages, the 16 h cap, the 16-bit wrap, the hourly rebase and its tick,
 * and a rebase racing with a thread that sets times (run under TSan with
 * the rest of the unit suite). Split from test_slab.c, which tests the
 * allocator itself.
 */
#include "alloc/slab.h"

#include "alloc/pool.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

struct fixture {
    char *mem;
    struct pool *pool;
    struct slab *slab;
};

/* npages pages, classes 64 << i (factor 2). */
static struct fixture *
fixture_new(uint32_t npages)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct slab_config cfg = {
        .min_chunk = 64,
        .growth_factor = 2.0,
        .chunk_max = POOL_PAGE_SIZE,
    };
    uint64_t len = (uint64_t)npages * POOL_PAGE_SIZE;

    assert_non_null(f);
    f->mem = aligned_alloc(POOL_PAGE_SIZE, len);
    assert_non_null(f->mem);
    assert_int_equal(pool_create(f->mem, len, 0, &f->pool), 0);
    assert_int_equal(slab_create(&cfg, f->pool, &f->slab), 0);
    return f;
}

static int
teardown(void **state)
{
    struct fixture *f = *state;

    if (f != NULL) {
        slab_destroy(f->slab);
        pool_destroy(f->pool);
        free(f->mem);
        free(f);
    }
    *state = NULL;
    return 0;
}

/* Take one chunk of class cls. */
static uint64_t
take1(struct fixture *f, unsigned cls)
{
    uint64_t off = UINT64_MAX;

    assert_int_equal(slab_take(f->slab, cls, &off, 1), 1);
    assert_int_equal(slab_class_of(f->slab, off), cls);
    return off;
}

static void
test_atime(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    const uint32_t t0 = 1700000000u;
    uint64_t a = take1(f, 0), b = take1(f, 0), big = take1(f, 5);

    slab_atime_set(f->slab, a, t0);
    slab_atime_set(f->slab, b, t0 + 7);
    slab_atime_set(f->slab, big, t0 + 1);
    assert_int_equal(slab_atime_age(f->slab, a, t0), 0);
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 5), 5);
    assert_int_equal(slab_atime_age(f->slab, b, t0 + 10), 3);
    assert_int_equal(slab_atime_age(f->slab, big, t0 + 10), 9);
    assert_int_equal(slab_atime_age(f->slab, a, t0 + SLAB_ATIME_CAP - 1),
                     SLAB_ATIME_CAP - 1);
    assert_int_equal(slab_atime_age(f->slab, a, t0 + SLAB_ATIME_CAP + 9),
                     SLAB_ATIME_CAP);
    /* a free page has no times: "as old as it gets" */
    assert_int_equal(slab_atime_age(f->slab, 3ull * POOL_PAGE_SIZE, t0),
                     SLAB_ATIME_CAP);

    slab_atime_copy(f->slab, b, a);
    assert_int_equal(slab_atime_age(f->slab, b, t0 + 5), 5);

    /* without a rebase, 2^16 + 4 s later the time reads as 4 s old */
    uint32_t late = t0 + 65536 + 4;
    assert_int_equal(slab_atime_age(f->slab, a, late), 4);
    /* a rebase within the cap and the margin clamps a and b (both at t0)
     * and nothing fresher */
    slab_atime_set(f->slab, big, t0 + SLAB_ATIME_CAP);
    assert_true(slab_atime_rebase(f->slab, t0 + SLAB_ATIME_CAP + 100) >= 2);
    assert_int_equal(slab_atime_age(f->slab, a, t0 + SLAB_ATIME_CAP + 100),
                     SLAB_ATIME_CAP);
    assert_int_equal(slab_atime_age(f->slab, big, t0 + SLAB_ATIME_CAP + 100),
                     100);
    /* one more rebase before the wrap keeps them at the cap */
    assert_true(slab_atime_rebase(f->slab, t0 + SLAB_ATIME_CAP + 3700) >= 2);
    assert_int_equal(slab_atime_age(f->slab, a, late), SLAB_ATIME_CAP);
    assert_int_equal(slab_atime_age(f->slab, b, late), SLAB_ATIME_CAP);
    assert_int_equal(slab_atime_age(f->slab, big, late), 65536 + 4 - 57600);

    /* the tick: runs at once, then once per period */
    assert_true(slab_atime_tick(f->slab, t0));
    assert_false(slab_atime_tick(f->slab, t0 + 1));
    assert_false(slab_atime_tick(f->slab, t0 + SLAB_ATIME_PERIOD - 1));
    assert_true(slab_atime_tick(f->slab, t0 + SLAB_ATIME_PERIOD));
    /* a clock that went back by more than a period runs it too */
    assert_true(slab_atime_tick(f->slab, t0 - 2 * SLAB_ATIME_PERIOD));
    assert_int_equal(slab_check(f->slab), 0);
}

struct atime_writer {
    struct slab *slab;
    uint64_t off[4];
    uint32_t now;
};

/* Sets the chunks' times while the main thread rebases (TSan checks the
 * accesses). */
static void *
atime_writer_main(void *arg)
{
    struct atime_writer *w = arg;
    for (uint32_t i = 0; i < 20000; i++)
        slab_atime_set(w->slab, w->off[i % 4], w->now - (i % 3));
    for (int i = 0; i < 4; i++)
        slab_atime_set(w->slab, w->off[i], w->now);
    return NULL;
}

/* A rebase racing with readers' sets clamps what is old and never undoes a
 * fresh time. */
static void
test_atime_concurrent(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    const uint32_t t0 = 1700000000u, now = t0 + SLAB_ATIME_CAP + 100;
    struct atime_writer w = {.slab = f->slab, .now = now};
    uint64_t old[4];
    for (int i = 0; i < 4; i++) {
        old[i] = take1(f, (unsigned)(i % 2));
        slab_atime_set(f->slab, old[i], t0);
        w.off[i] = take1(f, (unsigned)(i % 2));
        slab_atime_set(f->slab, w.off[i], t0);
    }
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, atime_writer_main, &w), 0);
    for (uint32_t r = 0; r < 200; r++)
        slab_atime_rebase(f->slab, now);
    assert_int_equal(pthread_join(tid, NULL), 0);
    slab_atime_rebase(f->slab, now);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(slab_atime_age(f->slab, w.off[i], now), 0);
        assert_int_equal(slab_atime_age(f->slab, old[i], now), SLAB_ATIME_CAP);
        /* clamped, so 2^16 s after t0 it still reads as the cap */
        assert_int_equal(slab_atime_age(f->slab, old[i], t0 + 65536 + 5),
                         SLAB_ATIME_CAP);
    }
    assert_int_equal(slab_check(f->slab), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_atime, teardown),
        cmocka_unit_test_teardown(test_atime_concurrent, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

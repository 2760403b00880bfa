/*
 * Unit tests for alloc/slab.c, written from alloc/slab.h: draining a page
 * (picked, out of service, its live chunks listed, finished back to the pool
 * or aborted) and a class's tables regrown while another thread prefetches
 * with no lock (meant for TSan too).
 */

#include "alloc/slab.h"

#include "alloc/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "slab_fx.h"

/* --- draining --- */

/* Class 128 KiB (8 a page) over 3 pages: A full, B with 6 free, C full. */
struct drain_setup {
    unsigned cls;
    uint64_t c[24];
    uint32_t pg[3];
};

static void
drain_setup(struct fixture *f, struct drain_setup *d)
{
    d->cls = class_of_size(f->slab, 131072);
    for (int i = 0; i < 24; i++)
        d->c[i] = take1(f, d->cls);
    for (int p = 0; p < 3; p++) {
        d->pg[p] = page_of(d->c[p * 8]);
        for (int i = 0; i < 8; i++)
            assert_int_equal(page_of(d->c[p * 8 + i]), d->pg[p]);
    }
    for (int i = 8; i < 14; i++)
        give1(f, d->cls, d->c[i]);
}

static void
test_drain_full_cycle(void **state)
{
    struct fixture *f = fixture_new(4);
    struct drain_setup d;
    uint32_t page, nfree;
    uint64_t live[8], off;
    unsigned n;

    *state = f;
    drain_setup(f, &d);
    assert_int_equal(slab_drain_pick(f->slab, d.cls, 0, &page), 0);
    assert_int_equal(page, d.pg[1]);
    assert_true(slab_chunk_usable(f->slab, d.c[8]));
    assert_int_equal(slab_drain_begin(f->slab, page), 0);
    assert_int_equal(slab_drain_begin(f->slab, page), -EINVAL);
    assert_false(slab_chunk_usable(f->slab, d.c[8]));
    assert_false(slab_chunk_usable(f->slab, d.c[14]));
    assert_true(slab_chunk_usable(f->slab, d.c[0]));
    assert_true(slab_chunk_usable(f->slab, d.c[23]));

    /* takes never come from the draining page: with its 6 free chunks out
     * of service the class needs the last pool page, then is exhausted */
    for (int i = 0; i < 8; i++) {
        off = take1(f, d.cls);
        assert_int_not_equal(page_of(off), d.pg[1]);
    }
    assert_int_equal(pool_nfree(f->pool), 0);
    assert_int_equal(slab_take(f->slab, d.cls, &off, 8), -ENOSPC);

    n = slab_drain_live_from(f->slab, page, 0, live, 8);
    assert_int_equal(n, 2);
    assert_true(in_list(live, n, d.c[14]));
    assert_true(in_list(live, n, d.c[15]));
    n = slab_drain_live_from(f->slab, page, 0, live, 1);
    assert_int_equal(n, 1);

    assert_int_equal(slab_drain_finish(f->slab, page), -EBUSY);
    give1(f, d.cls, d.c[14]);
    assert_int_equal(slab_drain_finish(f->slab, page), -EBUSY);
    assert_false(slab_chunk_usable(f->slab, d.c[8]));
    /* a chunk given back to a draining page is not handed out again */
    assert_int_equal(slab_take(f->slab, d.cls, &off, 8), -ENOSPC);
    give1(f, d.cls, d.c[15]);
    assert_int_equal(slab_drain_live_from(f->slab, page, 0, live, 8), 0);

    nfree = pool_nfree(f->pool);
    assert_int_equal(slab_drain_finish(f->slab, page), 0);
    assert_int_equal(pool_nfree(f->pool), nfree + 1);
    assert_int_equal(slab_class_of(f->slab, d.c[8]), SLAB_NO_CLASS);
    struct slab_class_stats st = stats_of(f->slab, d.cls);

    assert_int_equal(st.pages, 3);
    assert_int_equal(st.pages_added, 4);
    assert_int_equal(st.pages_removed, 1);
    assert_int_equal(st.free_chunks, 0);
    assert_int_equal(slab_check(f->slab), 0);

    /* the page is an ordinary free page again: another class gets it and
     * the format hook sees it once more */
    unsigned before = f->nhook;
    unsigned c64 = class_of_size(f->slab, 64);

    off = take1(f, c64);
    assert_int_equal(page_of(off), d.pg[1]);
    assert_int_equal(f->nhook, before + 1);
    assert_int_equal(f->hook[before].chunk_size, 64);
    assert_int_equal(slab_check(f->slab), 0);
}

static void
test_drain_abort(void **state)
{
    struct fixture *f = fixture_new(3);
    struct drain_setup d;
    uint64_t off, got[6];
    unsigned ngot = 0;
    int n;

    *state = f;
    drain_setup(f, &d); /* uses every pool page */
    assert_int_equal(pool_nfree(f->pool), 0);
    assert_int_equal(slab_drain_begin(f->slab, d.pg[1]), 0);
    assert_int_equal(slab_take(f->slab, d.cls, &off, 1), -ENOSPC);

    slab_drain_abort(f->slab, d.pg[1]);
    assert_true(slab_chunk_usable(f->slab, d.c[8]));
    while (ngot < 6 &&
           (n = slab_take(f->slab, d.cls, got + ngot, 6 - ngot)) > 0) {
        for (int k = 0; k < n; k++) {
            check_taken(f, d.cls, got[ngot + k]);
            assert_int_equal(page_of(got[ngot + k]), d.pg[1]);
        }
        ngot += (unsigned)n;
    }
    assert_int_equal(ngot, 6);
    assert_int_equal(slab_take(f->slab, d.cls, &off, 1), -ENOSPC);
    assert_int_equal(stats_of(f->slab, d.cls).pages_removed, 0);

    /* and it can be drained again after an abort */
    assert_int_equal(slab_drain_begin(f->slab, d.pg[1]), 0);
    assert_int_equal(slab_drain_finish(f->slab, d.pg[1]), -EBUSY);
    slab_drain_abort(f->slab, d.pg[1]);
    assert_int_equal(slab_check(f->slab), 0);
}

static void
test_drain_pick(void **state)
{
    struct fixture *f = fixture_new(8);
    unsigned cls = class_of_size(f->slab, 131072);
    unsigned other = class_of_size(f->slab, 65536);
    uint64_t c[40];
    uint32_t page;

    *state = f;
    assert_int_equal(slab_drain_pick(f->slab, cls, 0, &page), -ENOENT);
    for (int i = 0; i < 40; i++) /* pages 0..4 in order (lowest first) */
        c[i] = take1(f, cls);
    for (int p = 0; p < 5; p++)
        assert_int_equal(page_of(c[p * 8]), p);
    take1(f, other); /* page 5 belongs to another class */

    give1(f, cls, c[1 * 8 + 0]); /* page 1: 4 free */
    give1(f, cls, c[1 * 8 + 1]);
    give1(f, cls, c[1 * 8 + 2]);
    give1(f, cls, c[1 * 8 + 3]);
    give1(f, cls, c[3 * 8 + 5]); /* page 3: 2 free */
    give1(f, cls, c[3 * 8 + 6]);
    give1(f, cls, c[4 * 8 + 7]); /* page 4: 1 free */

    assert_int_equal(slab_drain_pick(f->slab, cls, 0, &page), 0);
    assert_int_equal(page, 1);
    assert_int_equal(slab_drain_pick(f->slab, cls, 2, &page), 0);
    assert_int_equal(page, 3);
    assert_int_equal(slab_drain_pick(f->slab, cls, 4, &page), 0);
    assert_int_equal(page, 4);
    assert_int_equal(slab_drain_pick(f->slab, cls, 5, &page), -ENOENT);
    assert_int_equal(slab_drain_pick(f->slab, cls, 7, &page), -ENOENT);
    assert_int_equal(slab_drain_pick(f->slab, other, 0, &page), 0);
    assert_int_equal(page, 5);
    assert_int_equal(slab_drain_pick(f->slab, other, 6, &page), -ENOENT);

    /* full pages can be picked too (pool shrink needs them) */
    for (int i = 0; i < 7; i++)
        take1(f, cls);
    assert_int_equal(stats_of(f->slab, cls).free_chunks, 0);
    assert_int_equal(slab_drain_pick(f->slab, cls, 2, &page), 0);
    assert_true(page >= 2 && page <= 4);

    /* not in use / bad page numbers */
    assert_int_equal(slab_drain_begin(f->slab, 7), -EINVAL);
    assert_int_equal(slab_drain_begin(f->slab, 1000), -EINVAL);
    assert_int_equal(slab_check(f->slab), 0);
}

/* A page already draining is not picked again. */
static void
test_drain_pick_skips_draining(void **state)
{
    struct fixture *f = fixture_new(4);
    struct drain_setup d;
    uint32_t page;

    *state = f;
    drain_setup(f, &d);
    assert_int_equal(slab_drain_begin(f->slab, d.pg[1]), 0);
    if (slab_drain_pick(f->slab, d.cls, 0, &page) == 0)
        assert_int_not_equal(page, d.pg[1]);
    slab_drain_abort(f->slab, d.pg[1]);
}

/* --- tables replaced under lock-free readers --- */

/*
 * A page that served a class of big chunks (tables of one word) goes back
 * to the pool and joins the class of 64-byte chunks, whose tables are 256
 * times larger, while another thread prefetches the chunk words of every
 * page as a multiget does with the locations its bucket peeks return:
 * hints read with no lock and no ordering. Under TSan this fails if the
 * table pointer is a plain field or the old table is freed at once.
 */
#define REGROW_PAGES 8
#define REGROW_READS 2000000

struct regrow {
    struct slab *slab;
    unsigned big, small;
    int grown_big, grown_small, drained;
    _Atomic bool done; /* relaxed: the reader must learn nothing more */
};

static void *
regrow_writer(void *arg)
{
    struct regrow *r = arg;

    while (slab_grow(r->slab, r->big) == 0)
        r->grown_big++;
    for (uint32_t pg = 0; pg < REGROW_PAGES; pg++)
        if (slab_drain_begin(r->slab, pg) == 0 &&
            slab_drain_finish(r->slab, pg) == 0)
            r->drained++;
    while (slab_grow(r->slab, r->small) == 0)
        r->grown_small++;
    atomic_store_explicit(&r->done, true, memory_order_relaxed);
    return NULL;
}

static void
test_regrow_under_prefetch(void **state)
{
    struct fixture *f = fixture_new(REGROW_PAGES);
    struct regrow r = {.slab = f->slab};
    pthread_t writer;
    long passes_after = 0;

    *state = f;
    r.big = class_of_size(f->slab, POOL_PAGE_SIZE);
    r.small = class_of_size(f->slab, 64);
    assert_int_equal(pthread_create(&writer, NULL, regrow_writer, &r), 0);
    /* bounded: a few passes after the writer is seen done, or the cap */
    for (long i = 0; i < REGROW_READS && passes_after < 4; i++) {
        bool done = atomic_load_explicit(&r.done, memory_order_relaxed);
        uint64_t in_page = (uint64_t)i * 64 % POOL_PAGE_SIZE;
        for (uint32_t pg = 0; pg < REGROW_PAGES; pg++)
            slab_prefetch(f->slab, ((uint64_t)pg << POOL_PAGE_SHIFT) + in_page);
        passes_after += done;
    }
    assert_int_equal(pthread_join(writer, NULL), 0);
    assert_int_equal(r.grown_big, REGROW_PAGES);
    assert_int_equal(r.drained, REGROW_PAGES);
    assert_int_equal(r.grown_small, REGROW_PAGES);
    assert_int_equal(slab_check(f->slab), 0);
    /* the new tables are in use: every 64-byte chunk can be taken */
    for (uint32_t i = 0; i < REGROW_PAGES * (POOL_PAGE_SIZE / 64); i++)
        take1(f, r.small);
    assert_int_equal(stats_of(f->slab, r.small).free_chunks, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_drain_full_cycle, teardown),
        cmocka_unit_test_teardown(test_drain_abort, teardown),
        cmocka_unit_test_teardown(test_drain_pick, teardown),
        cmocka_unit_test_teardown(test_drain_pick_skips_draining, teardown),
        cmocka_unit_test_teardown(test_regrow_under_prefetch, teardown),
    };

    return cmocka_run_group_tests_name("slab_drain", tests, NULL, NULL);
}

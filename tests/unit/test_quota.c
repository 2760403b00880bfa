/*
 * Unit tests for alloc/quota.c, written from alloc/quota.h: thread-local
 * stashes over the slab. The pool's memory is an untouched aligned_alloc()
 * buffer (no format hook, and the allocator never writes the chunks).
 *
 * Randomised tests take their seed from TC_SEED if set, else from the clock,
 * and print it when they fail. The two-thread tests are meant for TSan too.
 */

#include "alloc/quota.h"

#include "alloc/pool.h"
#include "alloc/slab.h"
#include "src/base/compiler.h"
#include "src/base/err.h"

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
#include "slab_fx.h"

/* --- fixture --- */

/* The quotas a test created, destroyed before the slab by teardown_quotas. */
static struct quota *fq[2];

static int
teardown_quotas(void **state)
{
    quota_destroy(fq[0]);
    quota_destroy(fq[1]);
    fq[0] = fq[1] = NULL;
    return teardown(state);
}

static uint64_t
class_total(const struct slab *s, unsigned cls)
{
    struct slab_class_stats st = stats_of(s, cls);

    return (uint64_t)st.pages * st.perpage;
}

/* Allocate, and check the chunk is in the pool, on a chunk boundary of its
 * class, and not held already. */
static uint64_t
alloc1(struct fixture *f, struct quota *q, unsigned cls)
{
    uint64_t off = UINT64_MAX;
    uint32_t size = slab_chunk_size(f->slab, cls);

    assert_int_equal(quota_alloc(q, cls, &off), 0);
    assert_true(off < (uint64_t)f->npages * POOL_PAGE_SIZE);
    assert_int_equal(off % POOL_PAGE_SIZE % size, 0);
    assert_int_equal(slab_class_of(f->slab, off), cls);
    if (!seen_add(f, off))
        fail_msg("chunk at offset %llu handed out twice",
                 (unsigned long long)off);
    return off;
}

static void
free1(struct fixture *f, struct quota *q, unsigned cls, uint64_t off)
{
    seen_del(f, off);
    quota_free(q, cls, off);
}

/* --- single-thread tests --- */

static void
test_create_args(void **state)
{
    struct fixture *f = fixture_new_nohook(1);
    struct quota *q = (struct quota *)0x1;

    *state = f;
    assert_int_equal(quota_create(f->slab, 257, &q), -EINVAL);
    assert_int_equal(quota_create(f->slab, 100000, &q), -EINVAL);
    assert_ptr_equal(q, (struct quota *)0x1);
    assert_int_equal(quota_create(f->slab, 0, &fq[0]), 0);
    assert_int_equal(quota_create(f->slab, 256, &fq[1]), 0);
    quota_destroy(fq[1]);
    assert_int_equal(quota_create(f->slab, 1, &fq[1]), 0);
    assert_int_equal(quota_refills(fq[0]), 0);
    for (unsigned c = 0; c < slab_nclasses(f->slab); c++)
        assert_int_equal(quota_stashed(fq[0], c), 0);
    quota_destroy(NULL);
}

/* Every chunk of the pool comes out exactly once, then -ENOSPC. */
static void
test_exhaust(void **state)
{
    struct fixture *f = fixture_new_nohook(2);
    unsigned cls = class_of_size(f->slab, 131072); /* 8 a page */
    uint64_t off, got[16];

    *state = f;
    assert_int_equal(quota_create(f->slab, 4, &fq[0]), 0);
    for (int i = 0; i < 16; i++)
        got[i] = alloc1(f, fq[0], cls);
    assert_int_equal(quota_alloc(fq[0], cls, &off), -ENOSPC);
    assert_int_equal(quota_alloc(fq[0], cls, &off), -ENOSPC);
    assert_int_equal(quota_stashed(fq[0], cls), 0);
    assert_int_equal(pool_nfree(f->pool), 0);

    /* another class has no page left either */
    assert_int_equal(quota_alloc(fq[0], class_of_size(f->slab, 64), &off),
                     -ENOSPC);

    for (int i = 0; i < 16; i++)
        free1(f, fq[0], cls, got[i]);
    quota_flush(fq[0]);
    assert_int_equal(stats_of(f->slab, cls).free_chunks, 16);
    assert_int_equal(slab_check(f->slab), 0);
}

static void
test_exhaust_small_class(void **state)
{
    struct fixture *f = fixture_new_nohook(2);
    unsigned cls = class_of_size(f->slab, 64);
    uint64_t off, n = 0;

    *state = f;
    assert_int_equal(quota_create(f->slab, 0, &fq[0]), 0);
    while (quota_alloc(fq[0], cls, &off) == 0) {
        assert_true(seen_add(f, off));
        assert_true(++n <= 2 * (POOL_PAGE_SIZE / 64));
    }
    assert_int_equal(n, 2 * (POOL_PAGE_SIZE / 64));
    assert_int_equal(stats_of(f->slab, cls).free_chunks, 0);
}

/* Default batch 32, over a class with 16384 chunks a page: one refill per
 * 32 allocations, each one slab_take call. */
static void
test_refills(void **state)
{
    struct fixture *f = fixture_new_nohook(2);
    unsigned cls = class_of_size(f->slab, 64);

    *state = f;
    assert_int_equal(quota_create(f->slab, 0, &fq[0]), 0);
    for (unsigned k = 0; k < 10; k++) {
        for (unsigned i = 0; i < 32; i++) {
            alloc1(f, fq[0], cls);
            assert_int_equal(quota_refills(fq[0]), k + 1);
            assert_int_equal(quota_stashed(fq[0], cls), 31 - i);
        }
    }
    assert_int_equal(stats_of(f->slab, cls).takes, 10);

    /* batch 5 on a second quota */
    assert_int_equal(quota_create(f->slab, 5, &fq[1]), 0);
    for (unsigned i = 0; i < 50; i++)
        alloc1(f, fq[1], cls);
    assert_int_equal(quota_refills(fq[1]), 10);
    assert_int_equal(quota_refills(fq[0]), 10);
}

/* Freeing into a quota: the stash grows, and when full gives a batch back in
 * one step (not chunk by chunk); nothing is lost on the way. */
static void
test_free_overflow(void **state)
{
    struct fixture *f = fixture_new_nohook(2);
    unsigned cls = class_of_size(f->slab, 64);
    enum { N = 2000, BATCH = 16 };
    uint64_t *got = malloc(N * sizeof(uint64_t));
    unsigned drops = 0, max_stash = 0;

    *state = f;
    assert_non_null(got);
    assert_int_equal(quota_create(f->slab, BATCH, &fq[0]), 0);
    for (unsigned i = 0; i < N; i++)
        got[i] = alloc1(f, fq[0], cls);
    quota_flush(fq[0]);
    assert_int_equal(quota_stashed(fq[0], cls), 0);

    uint64_t total = class_total(f->slab, cls);
    struct slab_class_stats st0 = stats_of(f->slab, cls);

    assert_int_equal(st0.free_chunks, total - N);
    for (unsigned i = 0; i < N; i++) {
        unsigned s0 = quota_stashed(fq[0], cls);
        uint64_t f0 = stats_of(f->slab, cls).free_chunks;

        free1(f, fq[0], cls, got[i]);
        unsigned s1 = quota_stashed(fq[0], cls);
        uint64_t f1 = stats_of(f->slab, cls).free_chunks;

        assert_int_equal(s1 + f1, s0 + f0 + 1);
        if (s1 > max_stash)
            max_stash = s1;
        if (f1 > f0) {
            drops++;
            if (f1 - f0 < 2)
                fail_msg("free %u: stash gave back %llu chunk(s), not a "
                         "batch",
                         i, (unsigned long long)(f1 - f0));
            if (f1 - f0 + 1 < s0 / 2 || f1 - f0 > s0 / 2 + 2)
                fail_msg("free %u: stash of %u gave back %llu, not about "
                         "half",
                         i, s0, (unsigned long long)(f1 - f0));
        }
    }
    assert_true(drops > 0);
    assert_true(max_stash >= BATCH);
    assert_true(max_stash < N / 4);
    quota_flush(fq[0]);
    assert_int_equal(stats_of(f->slab, cls).free_chunks, total);
    assert_int_equal(stats_of(f->slab, cls).gives - st0.gives, N);
    free(got);
}

static void
test_flush_and_destroy(void **state)
{
    struct fixture *f = fixture_new_nohook(8);
    const uint32_t sizes[] = {64, 4096, 131072};
    unsigned cls[3];
    uint64_t keep[3][20];

    *state = f;
    assert_int_equal(quota_create(f->slab, 0, &fq[0]), 0);
    for (int i = 0; i < 3; i++) {
        cls[i] = class_of_size(f->slab, sizes[i]);
        for (int k = 0; k < 20; k++)
            keep[i][k] = alloc1(f, fq[0], cls[i]);
        for (int k = 0; k < 10; k++)
            free1(f, fq[0], cls[i], keep[i][k]);
    }
    quota_flush(fq[0]);
    for (unsigned c = 0; c < slab_nclasses(f->slab); c++)
        assert_int_equal(quota_stashed(fq[0], c), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(stats_of(f->slab, cls[i]).free_chunks + 10,
                         class_total(f->slab, cls[i]));
    assert_int_equal(slab_check(f->slab), 0);

    /* free the rest into the quota and destroy it: all back in the slab */
    for (int i = 0; i < 3; i++)
        for (int k = 10; k < 20; k++)
            free1(f, fq[0], cls[i], keep[i][k]);
    alloc1(f, fq[0], cls[0]); /* one chunk stays held */
    quota_destroy(fq[0]);
    fq[0] = NULL;
    for (int i = 0; i < 3; i++)
        assert_int_equal(stats_of(f->slab, cls[i]).free_chunks + (i == 0),
                         class_total(f->slab, cls[i]));
    assert_int_equal(slab_check(f->slab), 0);
}

/* Random alloc/free through two quotas (one thread owns both; chunks freed
 * into either): per class, slab free + stashed + held == pages * perpage. */
static void
test_accounting_random(void **state)
{
    struct fixture *f = fixture_new_nohook(12);
    const uint32_t sizes[] = {64, 1024, 16384, 131072, 524288};
    enum { NC = ARRAY_SIZE(sizes), MAXHELD = 8000 };
    unsigned cls[NC];
    uint64_t *held[NC];
    unsigned nheld[NC] = {0};
    uint64_t seed = alloc_test_seed(), rng = seed | 1;

    *state = f;
    assert_int_equal(quota_create(f->slab, 8, &fq[0]), 0);
    assert_int_equal(quota_create(f->slab, 32, &fq[1]), 0);
    for (unsigned i = 0; i < NC; i++) {
        cls[i] = class_of_size(f->slab, sizes[i]);
        held[i] = malloc(MAXHELD * sizeof(uint64_t));
        assert_non_null(held[i]);
    }
    for (int burst = 0; burst < 300; burst++) {
        for (int op = 0; op < 200; op++) {
            unsigned i = (unsigned)(rng_next(&rng) % NC);
            struct quota *q = fq[rng_next(&rng) % 2];

            if (rng_next(&rng) % 100 < 52 && nheld[i] < MAXHELD) {
                uint64_t off;
                int rc = quota_alloc(q, cls[i], &off);

                if (rc == -ENOSPC)
                    continue;
                CHECK_SEED(rc == 0, seed, "alloc rc %d", rc);
                CHECK_SEED(slab_class_of(f->slab, off) == cls[i], seed,
                           "burst %d: chunk of class %u from class %u", burst,
                           slab_class_of(f->slab, off), cls[i]);
                CHECK_SEED(seen_add(f, off), seed,
                           "burst %d: offset %llu handed out twice", burst,
                           (unsigned long long)off);
                held[i][nheld[i]++] = off;
            } else if (nheld[i] > 0) {
                unsigned j = (unsigned)(rng_next(&rng) % nheld[i]);
                uint64_t off = held[i][j];

                held[i][j] = held[i][--nheld[i]];
                free1(f, q, cls[i], off);
            }
        }
        if (burst % 50 == 49)
            quota_flush(fq[burst % 2]);
        for (unsigned i = 0; i < NC; i++) {
            struct slab_class_stats st = stats_of(f->slab, cls[i]);
            uint64_t stashed =
                quota_stashed(fq[0], cls[i]) + quota_stashed(fq[1], cls[i]);

            CHECK_SEED(st.free_chunks + stashed + nheld[i] ==
                           (uint64_t)st.pages * st.perpage,
                       seed,
                       "burst %d class %u: free %llu + stashed %llu + held "
                       "%u != %u",
                       burst, sizes[i], (unsigned long long)st.free_chunks,
                       (unsigned long long)stashed, nheld[i],
                       st.pages * st.perpage);
        }
        int rc = slab_check(f->slab);

        CHECK_SEED(rc == 0, seed, "burst %d: slab_check %d: %s", burst, rc,
                   err_msg());
    }
    for (unsigned i = 0; i < NC; i++) {
        while (nheld[i] > 0)
            free1(f, fq[0], cls[i], held[i][--nheld[i]]);
        free(held[i]);
    }
    quota_flush(fq[0]);
    quota_flush(fq[1]);
    for (unsigned i = 0; i < NC; i++)
        assert_int_equal(stats_of(f->slab, cls[i]).free_chunks,
                         class_total(f->slab, cls[i]));
    assert_int_equal(slab_check(f->slab), 0);
}

/* Chunks of a page that starts draining while they sit in a stash are given
 * back, not handed out. */
static void
test_draining_stash(void **state)
{
    struct fixture *f = fixture_new_nohook(6);
    unsigned cls = class_of_size(f->slab, 65536); /* 16 a page */
    uint64_t first, off, live[16];
    uint32_t page;

    *state = f;
    assert_int_equal(quota_create(f->slab, 32, &fq[0]), 0);
    first = alloc1(f, fq[0], cls);
    page = page_of(first);
    assert_true(quota_stashed(fq[0], cls) > 0); /* the rest of the page */
    assert_int_equal(slab_drain_begin(f->slab, page), 0);

    for (int i = 0; i < 40; i++) {
        off = alloc1(f, fq[0], cls);
        if (page_of(off) == page)
            fail_msg("alloc %d: chunk %llu of the draining page %u", i,
                     (unsigned long long)off, page);
    }
    assert_int_equal(slab_drain_live_from(f->slab, page, 0, live, 16), 1);
    assert_int_equal(live[0], first);

    /* freed into the stash, the chunk still blocks the drain until the
     * stash goes back */
    free1(f, fq[0], cls, first);
    off = alloc1(f, fq[0], cls);
    assert_int_not_equal(page_of(off), page);
    quota_flush(fq[0]);
    assert_int_equal(slab_drain_finish(f->slab, page), 0);
    assert_int_equal(slab_class_of(f->slab, first), SLAB_NO_CLASS);
    assert_int_equal(slab_check(f->slab), 0);
}

/* --- two threads --- */

struct shared {
    struct fixture *f;
    unsigned cls[4];
    unsigned ncls;
    uint64_t seed;
    _Atomic uint8_t *owner; /* one byte per 64 bytes of pool: 0 or thread */
    _Atomic int bad;
    _Atomic uint64_t bad_off;
    pthread_barrier_t go; /* test_two_threads_stress: after the first op */
};

struct worker {
    struct shared *sh;
    int id;
    struct quota *q;
    uint64_t *held;
    unsigned *held_cls;
    unsigned nheld;
    unsigned maxheld;
    uint64_t ops, allocs, frees, enospc;
    int rc;
};

static void
claim(struct shared *sh, int id, uint64_t off)
{
    uint8_t expected = 0;

    if (!atomic_compare_exchange_strong_explicit(
            &sh->owner[off / 64], &expected, (uint8_t)id, memory_order_relaxed,
            memory_order_relaxed)) {
        atomic_store_explicit(&sh->bad_off, off, memory_order_relaxed);
        atomic_store_explicit(&sh->bad, 1, memory_order_relaxed);
    }
}

static void
release(struct shared *sh, uint64_t off)
{
    atomic_store_explicit(&sh->owner[off / 64], 0, memory_order_relaxed);
}

/* Allocate only (no frees), up to maxheld or -ENOSPC in every class. */
static void *
alloc_only_main(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    uint64_t rng = (sh->seed ^ (uint64_t)w->id * 0x9E3779B97F4A7C15ull) | 1;
    unsigned full = 0;

    w->rc = quota_create(sh->f->slab, 16, &w->q);
    if (w->rc != 0)
        return NULL;
    while (w->nheld < w->maxheld && full < 1000) {
        unsigned ci = (unsigned)(rng_next(&rng) % sh->ncls);
        uint64_t off;

        if (quota_alloc(w->q, sh->cls[ci], &off) != 0) {
            full++;
            continue;
        }
        claim(sh, w->id, off);
        w->held[w->nheld] = off;
        w->held_cls[w->nheld++] = ci;
    }
    return NULL;
}

static void
test_two_threads_distinct(void **state)
{
    struct fixture *f = fixture_new_nohook(8);
    const uint32_t sizes[] = {64, 2048, 65536, 262144};
    struct shared sh = {.f = f, .ncls = 4};
    struct worker w[2];
    pthread_t t[2];

    *state = f;
    sh.seed = alloc_test_seed();
    sh.owner = calloc(8ull * POOL_PAGE_SIZE / 64, 1);
    assert_non_null(sh.owner);
    for (int i = 0; i < 4; i++)
        sh.cls[i] = class_of_size(f->slab, sizes[i]);
    for (int i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].sh = &sh;
        w[i].id = i + 1;
        w[i].maxheld = 60000;
        w[i].held = malloc(w[i].maxheld * sizeof(uint64_t));
        w[i].held_cls = malloc(w[i].maxheld * sizeof(unsigned));
        assert_non_null(w[i].held);
        assert_non_null(w[i].held_cls);
        assert_int_equal(pthread_create(&t[i], NULL, alloc_only_main, &w[i]),
                         0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(w[0].rc, 0);
    assert_int_equal(w[1].rc, 0);
    CHECK_SEED(atomic_load_explicit(&sh.bad, memory_order_relaxed) == 0,
               sh.seed, "offset %llu handed to both threads",
               (unsigned long long)atomic_load_explicit(&sh.bad_off,
                                                        memory_order_relaxed));
    /* and the set check, single-threaded now */
    for (int i = 0; i < 2; i++)
        for (unsigned k = 0; k < w[i].nheld; k++)
            CHECK_SEED(seen_add(f, w[i].held[k]), sh.seed,
                       "offset %llu handed out twice",
                       (unsigned long long)w[i].held[k]);

    /* the owners are gone: give everything back through a quota of ours
     * and destroy theirs from this thread */
    assert_int_equal(quota_create(f->slab, 0, &fq[0]), 0);
    for (int i = 0; i < 2; i++) {
        for (unsigned k = 0; k < w[i].nheld; k++)
            quota_free(fq[0], sh.cls[w[i].held_cls[k]], w[i].held[k]);
        quota_destroy(w[i].q);
        free(w[i].held);
        free(w[i].held_cls);
    }
    quota_flush(fq[0]);
    for (int i = 0; i < 4; i++)
        assert_int_equal(stats_of(f->slab, sh.cls[i]).free_chunks,
                         class_total(f->slab, sh.cls[i]));
    assert_int_equal(slab_check(f->slab), 0);
    free((void *)sh.owner);
}

/* Random alloc/free of a class mix over a shared small pool, each thread
 * with its own quota; bounded by op count and wall clock. */
static void *
stress_main(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    uint64_t rng = (sh->seed ^ (uint64_t)w->id * 0x9E3779B97F4A7C15ull) | 1;
    time_t start = time(NULL);

    bool started = false;

    w->rc = quota_create(sh->f->slab, w->id == 1 ? 8 : 32, &w->q);
    if (w->rc != 0) {
        pthread_barrier_wait(&sh->go);
        return NULL;
    }
    for (w->ops = 0; w->ops < 100000; w->ops++) {
        /* each thread's first op (an allocation: nothing is held) comes
         * before either starts its mix, so each gets a chunk however the
         * two are scheduled (one that started late could otherwise find
         * every page held by the other) */
        if (w->ops == 1) {
            pthread_barrier_wait(&sh->go);
            started = true;
        }
        if ((w->ops & 1023) == 1023 && time(NULL) - start >= 20)
            break;
        bool do_alloc = w->nheld == 0 ||
                        (w->nheld < w->maxheld && rng_next(&rng) % 100 < 55);

        if (do_alloc) {
            unsigned ci = (unsigned)(rng_next(&rng) % sh->ncls);
            uint64_t off;
            int rc = quota_alloc(w->q, sh->cls[ci], &off);

            if (rc == -ENOSPC) {
                w->enospc++;
                continue;
            }
            if (rc != 0 || slab_class_of(sh->f->slab, off) != sh->cls[ci]) {
                atomic_store_explicit(&sh->bad, 2, memory_order_relaxed);
                continue;
            }
            claim(sh, w->id, off);
            w->held[w->nheld] = off;
            w->held_cls[w->nheld++] = ci;
            w->allocs++;
        } else {
            unsigned j = (unsigned)(rng_next(&rng) % w->nheld);
            uint64_t off = w->held[j];
            unsigned ci = w->held_cls[j];

            w->nheld--;
            w->held[j] = w->held[w->nheld];
            w->held_cls[j] = w->held_cls[w->nheld];
            release(sh, off);
            quota_free(w->q, sh->cls[ci], off);
            w->frees++;
        }
        if ((w->ops % 5000) == 4999 && (rng_next(&rng) & 1))
            quota_flush(w->q);
    }
    if (!started)
        pthread_barrier_wait(&sh->go);
    while (w->nheld > 0) {
        w->nheld--;
        release(sh, w->held[w->nheld]);
        quota_free(w->q, sh->cls[w->held_cls[w->nheld]], w->held[w->nheld]);
    }
    quota_flush(w->q);
    return NULL;
}

static void
test_two_threads_stress(void **state)
{
    struct fixture *f = fixture_new_nohook(6);
    const uint32_t sizes[] = {64, 1024, 65536, 262144};
    struct shared sh = {.f = f, .ncls = 4};
    struct worker w[2];
    pthread_t t[2];

    *state = f;
    sh.seed = alloc_test_seed();
    assert_int_equal(pthread_barrier_init(&sh.go, NULL, 2), 0);
    sh.owner = calloc(6ull * POOL_PAGE_SIZE / 64, 1);
    assert_non_null(sh.owner);
    for (int i = 0; i < 4; i++)
        sh.cls[i] = class_of_size(f->slab, sizes[i]);
    for (int i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].sh = &sh;
        w[i].id = i + 1;
        w[i].maxheld = 3000;
        w[i].held = malloc(w[i].maxheld * sizeof(uint64_t));
        w[i].held_cls = malloc(w[i].maxheld * sizeof(unsigned));
        assert_non_null(w[i].held);
        assert_non_null(w[i].held_cls);
        assert_int_equal(pthread_create(&t[i], NULL, stress_main, &w[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&sh.go);
    assert_int_equal(w[0].rc, 0);
    assert_int_equal(w[1].rc, 0);
    CHECK_SEED(atomic_load_explicit(&sh.bad, memory_order_relaxed) == 0,
               sh.seed,
               "bad %d: offset %llu handed to both threads (1) or wrong "
               "class/rc (2)",
               atomic_load_explicit(&sh.bad, memory_order_relaxed),
               (unsigned long long)atomic_load_explicit(&sh.bad_off,
                                                        memory_order_relaxed));
    print_message(
        "stress: ops %llu+%llu allocs %llu+%llu enospc %llu+%llu\n",
        (unsigned long long)w[0].ops, (unsigned long long)w[1].ops,
        (unsigned long long)w[0].allocs, (unsigned long long)w[1].allocs,
        (unsigned long long)w[0].enospc, (unsigned long long)w[1].enospc);
    assert_true(w[0].allocs > 0 && w[1].allocs > 0);

    int rc = slab_check(f->slab);

    CHECK_SEED(rc == 0, sh.seed, "slab_check %d: %s", rc, err_msg());
    uint32_t pages = 0;

    for (int i = 0; i < 4; i++) {
        struct slab_class_stats st = stats_of(f->slab, sh.cls[i]);

        CHECK_SEED(quota_stashed(w[0].q, sh.cls[i]) == 0 &&
                       quota_stashed(w[1].q, sh.cls[i]) == 0,
                   sh.seed, "class %u: stash not empty after flush", sizes[i]);
        CHECK_SEED(st.free_chunks == (uint64_t)st.pages * st.perpage, sh.seed,
                   "class %u: free %llu != %u pages * %u", sizes[i],
                   (unsigned long long)st.free_chunks, st.pages, st.perpage);
        pages += st.pages;
    }
    CHECK_SEED(pages + pool_nfree(f->pool) == 6, sh.seed,
               "%u class pages + %u free pool pages != 6", pages,
               pool_nfree(f->pool));
    for (int i = 0; i < 2; i++) {
        quota_destroy(w[i].q);
        free(w[i].held);
        free(w[i].held_cls);
    }
    free((void *)sh.owner);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_create_args, teardown_quotas),
        cmocka_unit_test_teardown(test_exhaust, teardown_quotas),
        cmocka_unit_test_teardown(test_exhaust_small_class, teardown_quotas),
        cmocka_unit_test_teardown(test_refills, teardown_quotas),
        cmocka_unit_test_teardown(test_free_overflow, teardown_quotas),
        cmocka_unit_test_teardown(test_flush_and_destroy, teardown_quotas),
        cmocka_unit_test_teardown(test_accounting_random, teardown_quotas),
        cmocka_unit_test_teardown(test_draining_stash, teardown_quotas),
        cmocka_unit_test_teardown(test_two_threads_distinct, teardown_quotas),
        cmocka_unit_test_teardown(test_two_threads_stress, teardown_quotas),
    };

    return cmocka_run_group_tests_name("quota", tests, NULL, NULL);
}

/*
 * Unit tests for alloc/slab.c, written from alloc/slab.h: taking and giving
 * chunks (never one twice, reuse, exact counts, random bursts checked by
 * slab_check), the format hook's calls, and a page adopted at a restart.
 * The fixture (slab_fx.h) holds a bitmap of the chunks held.
 *
 * Randomised tests take their seed from TC_SEED if set, else from the clock,
 * and print it when they fail.
 */

#include "alloc/slab.h"

#include "alloc/pool.h"
#include "src/base/compiler.h"
#include "src/base/err.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "seed_fx.h"
#include "slab_fx.h"

/* Exhaust an 8-page pool with a mix of classes: every chunk distinct,
 * inside the pool, aligned in its page; then -ENOSPC everywhere. */
static void
test_take_never_twice(void **state)
{
    struct fixture *f = fixture_new(8);
    const uint32_t sizes[] = {64, 128, 1024, 131072, 524288};
    unsigned cls[ARRAY_SIZE(sizes)];
    uint64_t taken[ARRAY_SIZE(sizes)] = {0};
    bool done[ARRAY_SIZE(sizes)] = {false};
    uint64_t offs[64];
    uint64_t seed = alloc_test_seed(), rng = seed | 1;
    unsigned ndone = 0, rounds = 0;

    *state = f;
    for (unsigned i = 0; i < ARRAY_SIZE(sizes); i++)
        cls[i] = class_of_size(f->slab, sizes[i]);
    while (ndone < ARRAY_SIZE(sizes)) {
        unsigned i = (unsigned)(rng_next(&rng) % ARRAY_SIZE(sizes));
        unsigned want = 1 + (unsigned)(rng_next(&rng) % 64);
        int n;

        CHECK_SEED(++rounds < 1000000, seed, "take loop does not end");
        if (done[i])
            continue;
        n = slab_take(f->slab, cls[i], offs, want);
        if (n == -ENOSPC) {
            done[i] = true;
            ndone++;
            continue;
        }
        CHECK_SEED(n >= 1 && (unsigned)n <= want, seed,
                   "slab_take(want %u) returned %d", want, n);
        for (int k = 0; k < n; k++)
            check_taken(f, cls[i], offs[k]);
        taken[i] += (unsigned)n;
    }
    assert_int_equal(pool_nfree(f->pool), 0);
    uint64_t pages = 0;

    for (unsigned i = 0; i < ARRAY_SIZE(sizes); i++) {
        struct slab_class_stats st = stats_of(f->slab, cls[i]);

        assert_int_equal(st.chunk_size, sizes[i]);
        assert_int_equal(st.perpage, POOL_PAGE_SIZE / sizes[i]);
        assert_int_equal(taken[i], (uint64_t)st.pages * st.perpage);
        assert_int_equal(st.free_chunks, 0);
        assert_int_equal(st.pages_added, st.pages);
        assert_int_equal(slab_take(f->slab, cls[i], offs, 1), -ENOSPC);
        pages += st.pages;
    }
    assert_int_equal(pages, 8);
    assert_int_equal(slab_check(f->slab), 0);
}

static void
test_take_small_class_thousands(void **state)
{
    struct fixture *f = fixture_new(8);
    unsigned cls = class_of_size(f->slab, 64);
    uint64_t offs[256];
    uint64_t total = 0;

    *state = f;
    for (;;) {
        int n = slab_take(f->slab, cls, offs, 256);

        if (n == -ENOSPC)
            break;
        assert_true(n >= 1 && n <= 256);
        for (int k = 0; k < n; k++)
            check_taken(f, cls, offs[k]);
        total += (unsigned)n;
        assert_true(total <= 8ull * (POOL_PAGE_SIZE / 64));
    }
    assert_int_equal(total, 8ull * (POOL_PAGE_SIZE / 64));
    assert_int_equal(pool_nfree(f->pool), 0);
    assert_int_equal(slab_check(f->slab), 0);
}

static void
test_give_then_take_reuses(void **state)
{
    struct fixture *f = fixture_new(2);
    unsigned cls = class_of_size(f->slab, 131072); /* 8 a page */
    uint64_t all[16], back[5], got[5], off;
    int n;

    *state = f;
    for (int i = 0; i < 16; i++)
        all[i] = take1(f, cls);
    assert_int_equal(slab_take(f->slab, cls, &off, 1), -ENOSPC);

    give1(f, cls, all[3]);
    assert_int_equal(slab_take(f->slab, cls, &off, 4), 1);
    assert_int_equal(off, all[3]);
    check_taken(f, cls, off);

    /* five back, from both pages; exactly those five come out again */
    back[0] = all[0];
    back[1] = all[7];
    back[2] = all[9];
    back[3] = all[12];
    back[4] = all[15];
    for (int i = 0; i < 5; i++)
        give1(f, cls, back[i]);
    assert_int_equal(stats_of(f->slab, cls).free_chunks, 5);
    unsigned ngot = 0;

    while ((n = slab_take(f->slab, cls, got + ngot, 5 - ngot)) > 0) {
        for (int k = 0; k < n; k++)
            check_taken(f, cls, got[ngot + k]);
        ngot += (unsigned)n;
        if (ngot == 5)
            break;
    }
    assert_int_equal(ngot, 5);
    assert_int_equal(slab_take(f->slab, cls, &off, 1), -ENOSPC);
    qsort(back, 5, sizeof(uint64_t), cmp_u64);
    qsort(got, 5, sizeof(uint64_t), cmp_u64);
    assert_memory_equal(back, got, sizeof(back));
    assert_int_equal(slab_check(f->slab), 0);
}

static void
test_stats_exact(void **state)
{
    struct fixture *f = fixture_new(4);
    unsigned cls = class_of_size(f->slab, 4096); /* 256 a page */
    uint64_t offs[300];
    struct slab_class_stats st;
    int n, calls = 0;
    unsigned held = 0;

    *state = f;
    st = stats_of(f->slab, cls);
    assert_int_equal(st.chunk_size, 4096);
    assert_int_equal(st.perpage, 256);
    assert_int_equal(st.pages, 0);
    assert_int_equal(st.free_chunks, 0);
    assert_int_equal(st.takes, 0);
    assert_int_equal(st.gives, 0);
    assert_int_equal(st.pages_added, 0);
    assert_int_equal(st.pages_removed, 0);

    while (held < 300) {
        n = slab_take(f->slab, cls, offs + held, 300 - held);
        assert_true(n >= 1);
        for (int k = 0; k < n; k++)
            check_taken(f, cls, offs[held + k]);
        held += (unsigned)n;
        calls++;
    }
    st = stats_of(f->slab, cls);
    assert_int_equal(st.pages, 2);
    assert_int_equal(st.pages_added, 2);
    assert_int_equal(st.free_chunks, 2 * 256 - 300);
    assert_int_equal(st.takes, calls);
    assert_int_equal(pool_nfree(f->pool), 2);

    slab_give(f->slab, cls, offs, 100);
    slab_give(f->slab, cls, offs + 100, 1);
    st = stats_of(f->slab, cls);
    assert_int_equal(st.free_chunks, 2 * 256 - 300 + 101);
    assert_int_equal(st.gives, 101);
    assert_int_equal(st.takes, calls);
    assert_int_equal(st.pages_removed, 0);

    /* a failed take is not counted */
    struct slab_class_stats big0 =
        stats_of(f->slab, slab_nclasses(f->slab) - 1);
    uint64_t off;

    assert_int_equal(slab_take(f->slab, slab_nclasses(f->slab) - 1, &off, 1),
                     1);
    assert_int_equal(slab_take(f->slab, slab_nclasses(f->slab) - 1, &off, 1),
                     1);
    assert_int_equal(slab_take(f->slab, slab_nclasses(f->slab) - 1, &off, 1),
                     -ENOSPC);
    struct slab_class_stats big1 =
        stats_of(f->slab, slab_nclasses(f->slab) - 1);
    assert_int_equal(big1.takes - big0.takes, 2);
    assert_int_equal(big1.pages, 2);
    assert_int_equal(big1.perpage, 1);
    assert_int_equal(slab_check(f->slab), 0);
}

/* Random take/give bursts over several classes: slab_check() stays 0 and
 * the per-class counts add up exactly. */
static void
test_random_bursts_check(void **state)
{
    struct fixture *f = fixture_new(16);
    const uint32_t sizes[] = {64, 512, 8192, 65536, 262144};
    enum { NC = ARRAY_SIZE(sizes), MAXHELD = 20000 };
    unsigned cls[NC];
    uint64_t *held[NC];
    unsigned nheld[NC] = {0};
    uint64_t offs[64];
    uint64_t seed = alloc_test_seed(), rng = seed | 1;

    *state = f;
    for (unsigned i = 0; i < NC; i++) {
        cls[i] = class_of_size(f->slab, sizes[i]);
        held[i] = malloc(MAXHELD * sizeof(uint64_t));
        assert_non_null(held[i]);
    }
    for (int burst = 0; burst < 200; burst++) {
        for (int op = 0; op < 100; op++) {
            unsigned i = (unsigned)(rng_next(&rng) % NC);
            unsigned want = 1 + (unsigned)(rng_next(&rng) % 64);

            if (rng_next(&rng) % 100 < 55) {
                int n;

                if (nheld[i] + want > MAXHELD)
                    continue;
                n = slab_take(f->slab, cls[i], offs, want);
                if (n == -ENOSPC)
                    continue;
                CHECK_SEED(n >= 1 && (unsigned)n <= want, seed,
                           "burst %d: take returned %d", burst, n);
                for (int k = 0; k < n; k++) {
                    check_taken(f, cls[i], offs[k]);
                    held[i][nheld[i]++] = offs[k];
                }
            } else {
                unsigned n = want < nheld[i] ? want : nheld[i];

                for (unsigned k = 0; k < n; k++) {
                    unsigned j = (unsigned)(rng_next(&rng) % nheld[i]);

                    offs[k] = held[i][j];
                    held[i][j] = held[i][--nheld[i]];
                    seen_del(f, offs[k]);
                }
                if (n > 0)
                    slab_give(f->slab, cls[i], offs, n);
            }
        }
        int rc = slab_check(f->slab);

        CHECK_SEED(rc == 0, seed, "burst %d: slab_check %d: %s", burst, rc,
                   err_msg());
        uint32_t pages = 0;

        for (unsigned i = 0; i < NC; i++) {
            struct slab_class_stats st = stats_of(f->slab, cls[i]);

            pages += st.pages;
            CHECK_SEED(st.free_chunks + nheld[i] ==
                           (uint64_t)st.pages * st.perpage,
                       seed, "burst %d class %u: free %llu + held %u != %u",
                       burst, sizes[i], (unsigned long long)st.free_chunks,
                       nheld[i], st.pages * st.perpage);
        }
        CHECK_SEED(pages + pool_nfree(f->pool) == 16, seed,
                   "burst %d: %u class pages + %u free pool pages", burst,
                   pages, pool_nfree(f->pool));
    }
    for (unsigned i = 0; i < NC; i++) {
        slab_give(f->slab, cls[i], held[i], nheld[i]);
        struct slab_class_stats st = stats_of(f->slab, cls[i]);

        assert_int_equal(st.free_chunks, (uint64_t)st.pages * st.perpage);
        free(held[i]);
    }
    assert_int_equal(slab_check(f->slab), 0);
}

/* --- format hook --- */

static void
test_format_hook(void **state)
{
    struct fixture *f = fixture_new(4);
    unsigned c64 = class_of_size(f->slab, 64);
    unsigned c128k = class_of_size(f->slab, 131072);
    uint64_t off;

    *state = f;
    assert_int_equal(f->nhook, 0);
    off = take1(f, c64);
    assert_int_equal(f->nhook, 1);
    assert_ptr_equal(f->hook[0].page,
                     f->mem + (uint64_t)page_of(off) * POOL_PAGE_SIZE);
    assert_int_equal(f->hook[0].chunk_size, 64);
    assert_int_equal(f->hook[0].nchunks, POOL_PAGE_SIZE / 64);
    assert_int_equal(f->hook[0].depth, 0);

    /* more chunks from the same page: no new call */
    for (int i = 0; i < 100; i++)
        take1(f, c64);
    assert_int_equal(f->nhook, 1);

    /* a second class, two pages: one call per page */
    for (int i = 0; i < 9; i++)
        off = take1(f, c128k);
    assert_int_equal(f->nhook, 3);
    for (unsigned i = 1; i < 3; i++) {
        assert_int_equal(f->hook[i].chunk_size, 131072);
        assert_int_equal(f->hook[i].nchunks, 8);
        assert_int_equal(f->hook[i].depth, 0);
        assert_int_equal((uintptr_t)f->hook[i].page % POOL_PAGE_SIZE, 0);
        assert_true(f->hook[i].page >= f->mem &&
                    f->hook[i].page < f->mem + 4 * (uint64_t)POOL_PAGE_SIZE);
    }
    assert_ptr_not_equal(f->hook[1].page, f->hook[2].page);
    assert_ptr_not_equal(f->hook[0].page, f->hook[1].page);
    assert_ptr_equal(f->hook[2].page,
                     f->mem + (uint64_t)page_of(off) * POOL_PAGE_SIZE);
    assert_int_equal(stats_of(f->slab, c128k).pages_added, 2);
}

/* A restart hands a page to a class with some chunks in use: those are
 * never handed out, the others are, the page no longer is free in the
 * pool, and a page not free there is refused. */
static void
test_adopt_page(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    unsigned cls = 3; /* 512-byte chunks: 2048 a page */
    uint32_t per = POOL_PAGE_SIZE / slab_chunk_size(f->slab, cls);
    uint64_t used[64] = {0};
    used[0] = 0x5;                   /* chunks 0 and 2 */
    used[per / 64 - 1] = 1ull << 63; /* the last chunk */

    assert_int_equal(slab_adopt_page(f->slab, 2, cls, used), 0);
    assert_int_equal(slab_class_of(f->slab, 2ull << POOL_PAGE_SHIFT), cls);
    assert_int_equal(pool_nfree(f->pool), 3);
    assert_int_equal(slab_adopt_page(f->slab, 2, cls, used), -EBUSY);
    assert_int_equal(slab_adopt_page(f->slab, 1, 99, used), -EINVAL);
    struct slab_class_stats st;
    slab_class_stats(f->slab, cls, &st);
    assert_int_equal(st.pages, 1);
    assert_int_equal(st.free_chunks, per - 3);
    assert_int_equal(slab_check(f->slab), 0);

    /* every free chunk comes out once, none of the three in use */
    uint64_t base = 2ull << POOL_PAGE_SHIFT;
    uint64_t offs[64];
    uint32_t taken = 0;
    while (taken < per - 3) {
        int n = slab_take_existing(f->slab, cls, offs, 64);
        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
            uint64_t idx = (offs[i] - base) / slab_chunk_size(f->slab, cls);
            assert_true(offs[i] >= base && idx < per);
            assert_true(idx != 0 && idx != 2 && idx != per - 1);
        }
        taken += (uint32_t)n;
    }
    assert_int_equal(slab_take_existing(f->slab, cls, offs, 1), -ENOSPC);
    assert_int_equal(slab_check(f->slab), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_adopt_page, teardown),
        cmocka_unit_test_teardown(test_take_never_twice, teardown),
        cmocka_unit_test_teardown(test_take_small_class_thousands, teardown),
        cmocka_unit_test_teardown(test_give_then_take_reuses, teardown),
        cmocka_unit_test_teardown(test_stats_exact, teardown),
        cmocka_unit_test_teardown(test_random_bursts_check, teardown),
        cmocka_unit_test_teardown(test_format_hook, teardown),
    };

    return cmocka_run_group_tests_name("slab_take", tests, NULL, NULL);
}

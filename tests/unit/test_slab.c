/*
 * Unit tests for alloc/slab.c, written from alloc/slab.h. The slab never
 * writes the chunks and the format hook here only records its calls, so the
 * pool's memory is an untouched aligned_alloc() buffer.
 *
 * Randomised tests take their seed from TC_SEED if set, else from the clock,
 * and print it when they fail.
 */

#include "alloc/slab.h"

#include "alloc/pool.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/lock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "seed_fx.h"

/* --- fixture --- */

#define MAX_HOOK_CALLS 256

struct hook_call {
    char *page;
    uint32_t chunk_size;
    uint32_t nchunks;
    int depth; /* lock_held_depth() inside the hook */
};

struct fixture {
    char *mem;
    uint32_t npages;
    struct pool *pool;
    struct slab *slab;
    unsigned nhook;
    struct hook_call hook[MAX_HOOK_CALLS];
    uint64_t *seen; /* bitmap over the pool, one bit per 8 bytes */
};

static void
format_hook(void *arg, char *page, uint32_t chunk_size, uint32_t nchunks)
{
    struct fixture *f = arg;

    if (f->nhook < MAX_HOOK_CALLS) {
        f->hook[f->nhook].page = page;
        f->hook[f->nhook].chunk_size = chunk_size;
        f->hook[f->nhook].nchunks = nchunks;
        f->hook[f->nhook].depth = lock_held_depth();
    }
    f->nhook++;
}

/* min_chunk 64, factor 2, chunk_max 1 MiB: classes 64 << i, i = 0..14. */
static struct fixture *
fixture_new_cfg(uint32_t npages, const struct slab_config *cfg_in)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct slab_config cfg = *cfg_in;
    uint64_t len = (uint64_t)npages * POOL_PAGE_SIZE;

    assert_non_null(f);
    f->npages = npages;
    f->mem = aligned_alloc(POOL_PAGE_SIZE, len);
    assert_non_null(f->mem);
    f->seen = calloc(len / 8 / 64 + 1, sizeof(uint64_t));
    assert_non_null(f->seen);
    assert_int_equal(pool_create(f->mem, len, 0, &f->pool), 0);
    cfg.format = format_hook;
    cfg.format_arg = f;
    assert_int_equal(slab_create(&cfg, f->pool, &f->slab), 0);
    return f;
}

static struct fixture *
fixture_new(uint32_t npages)
{
    struct slab_config cfg = {
        .min_chunk = 64,
        .growth_factor = 2.0,
        .chunk_max = POOL_PAGE_SIZE,
    };

    return fixture_new_cfg(npages, &cfg);
}

static int
teardown(void **state)
{
    struct fixture *f = *state;

    if (f != NULL) {
        slab_destroy(f->slab);
        pool_destroy(f->pool);
        free(f->seen);
        free(f->mem);
        free(f);
    }
    *state = NULL;
    return 0;
}

/* Mark off as held; false if it already was. */
static bool
seen_add(struct fixture *f, uint64_t off)
{
    uint64_t i = off / 8;
    uint64_t bit = 1ull << (i % 64);

    if (f->seen[i / 64] & bit)
        return false;
    f->seen[i / 64] |= bit;
    return true;
}

static void
seen_del(struct fixture *f, uint64_t off)
{
    uint64_t i = off / 8;

    f->seen[i / 64] &= ~(1ull << (i % 64));
}

static bool
seen_has(const struct fixture *f, uint64_t off)
{
    uint64_t i = off / 8;

    return f->seen[i / 64] & (1ull << (i % 64));
}

static unsigned
class_of_size(const struct slab *s, uint32_t size)
{
    for (unsigned c = 0; c < slab_nclasses(s); c++)
        if (slab_chunk_size(s, c) == size)
            return c;
    fail_msg("no class of size %u", size);
    return 0;
}

static uint32_t
page_of(uint64_t off)
{
    return (uint32_t)(off >> POOL_PAGE_SHIFT);
}

static struct slab_class_stats
stats_of(const struct slab *s, unsigned cls)
{
    struct slab_class_stats st;

    memset(&st, 0xa5, sizeof(st));
    slab_class_stats(s, cls, &st);
    return st;
}

/* A taken chunk must be inside the pool, on a chunk boundary of its page,
 * fit in the page, belong to its class, and not be held already. */
static void
check_taken(struct fixture *f, unsigned cls, uint64_t off)
{
    uint32_t size = slab_chunk_size(f->slab, cls);
    uint64_t in_page = off % POOL_PAGE_SIZE;

    assert_true(off < (uint64_t)f->npages * POOL_PAGE_SIZE);
    assert_int_equal(in_page % size, 0);
    assert_true(in_page + size <= POOL_PAGE_SIZE);
    assert_int_equal(slab_class_of(f->slab, off), cls);
    if (!seen_add(f, off))
        fail_msg("chunk at offset %llu handed out twice",
                 (unsigned long long)off);
}

/* Take one chunk, checked. */
static uint64_t
take1(struct fixture *f, unsigned cls)
{
    uint64_t off = UINT64_MAX;

    assert_int_equal(slab_take(f->slab, cls, &off, 1), 1);
    check_taken(f, cls, off);
    return off;
}

static void
give1(struct fixture *f, unsigned cls, uint64_t off)
{
    assert_true(seen_has(f, off));
    seen_del(f, off);
    slab_give(f->slab, cls, &off, 1);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* --- class geometry --- */

static void
check_geometry(const struct slab *s, uint32_t min_chunk, double factor,
               uint32_t chunk_max)
{
    unsigned n = slab_nclasses(s);

    assert_true(n >= 2);
    assert_true(n <= SLAB_MAX_CLASSES);
    assert_true(slab_chunk_size(s, 0) >= min_chunk);
    assert_true(slab_chunk_size(s, 0) < min_chunk + 8);
    for (unsigned c = 0; c < n; c++) {
        uint32_t size = slab_chunk_size(s, c);

        if (size % 8 != 0)
            fail_msg("class %u: size %u is not 8-aligned", c, size);
        if (c == 0)
            continue;
        uint32_t prev = slab_chunk_size(s, c - 1);

        if (size <= prev)
            fail_msg("class %u: size %u not above %u", c, size, prev);
        if (c < n - 1 && fabs((double)size - prev * factor) > 8.0 * factor)
            fail_msg("class %u: size %u does not grow by %.2f from %u", c, size,
                     factor, prev);
        if (c == n - 1 && (double)size > prev * factor * factor + 8.0)
            fail_msg("last class %u: size %u jumps too far from %u", c, size,
                     prev);
    }
    assert_int_equal(slab_chunk_size(s, n - 1), chunk_max);
}

static void
test_geometry_default(void **state)
{
    struct slab_config cfg = {0};
    struct fixture *f = fixture_new_cfg(2, &cfg);

    *state = f;
    check_geometry(f->slab, 64, 1.25, 512 * 1024);
    assert_int_equal(slab_chunk_size(f->slab, 0), 64);
}

static void
test_geometry_factor2(void **state)
{
    struct fixture *f = fixture_new(2);

    *state = f;
    assert_int_equal(slab_nclasses(f->slab), 15);
    for (unsigned c = 0; c < 15; c++)
        assert_int_equal(slab_chunk_size(f->slab, c), 64u << c);
    check_geometry(f->slab, 64, 2.0, POOL_PAGE_SIZE);
}

static void
test_geometry_unaligned_min(void **state)
{
    struct slab_config cfg = {
        .min_chunk = 20,
        .growth_factor = 1.1,
        .chunk_max = 4000, /* 54 classes: within SLAB_MAX_CLASSES */
    };
    struct fixture *f = fixture_new_cfg(2, &cfg);

    *state = f;
    check_geometry(f->slab, 20, 1.1, 4000);
}

/* A factor too small to reach chunk_max within SLAB_MAX_CLASSES: the slab
 * must refuse the settings or still grow by the factor, never close the gap
 * with one giant last class. */
static void
test_geometry_too_many_classes(void **state)
{
    char *mem = aligned_alloc(POOL_PAGE_SIZE, POOL_PAGE_SIZE);
    struct pool *p;
    struct slab *s = NULL;
    struct slab_config cfg = {
        .min_chunk = 20,
        .growth_factor = 1.1,
        .chunk_max = 100000, /* about 88 classes at 1.1 */
    };
    int rc;

    (void)state;
    assert_non_null(mem);
    assert_int_equal(pool_create(mem, POOL_PAGE_SIZE, 0, &p), 0);
    err_clear();
    rc = slab_create(&cfg, p, &s);
    if (rc == -EINVAL) {
        assert_true(err_msg()[0] != '\0');
    } else {
        assert_int_equal(rc, 0);
        check_geometry(s, 20, 1.1, 100000);
        slab_destroy(s);
    }
    pool_destroy(p);
    free(mem);
}

/* A chunk step: 16-byte classes from min_chunk to 32 steps (512 bytes),
 * then exactly the classes the factor gives without a step. */
static void
test_geometry_chunk_step(void **state)
{
    struct slab_config plain_cfg = {.min_chunk = 80, .growth_factor = 1.25};
    struct slab_config cfg = plain_cfg;
    cfg.chunk_step = 16;
    struct fixture *plain = fixture_new_cfg(2, &plain_cfg);
    struct fixture *f = fixture_new_cfg(2, &cfg);
    unsigned n = slab_nclasses(f->slab), pn = slab_nclasses(plain->slab);
    unsigned i = 0;

    *state = f;
    for (uint32_t size = 80; size <= 512; size += 16, i++)
        assert_int_equal(slab_chunk_size(f->slab, i), size);
    assert_int_equal(i, 28);
    /* above 512: the plain classes, one for one */
    unsigned j = 0;
    while (slab_chunk_size(plain->slab, j) <= 512)
        j++;
    assert_int_equal(slab_chunk_size(plain->slab, j), 552);
    assert_int_equal(n - i, pn - j);
    for (; i < n; i++, j++)
        assert_int_equal(slab_chunk_size(f->slab, i),
                         slab_chunk_size(plain->slab, j));
    assert_int_equal(n, 60);
    assert_true(n <= SLAB_MAX_CLASSES);
    /* 100-byte values with a 32-byte header and a 16-byte key: 148 bytes
     * go in 160-byte chunks, not the factor's 176 */
    assert_int_equal(slab_chunk_size(f->slab, slab_class_for(f->slab, 148)),
                     160);
    assert_int_equal(
        slab_chunk_size(plain->slab, slab_class_for(plain->slab, 148)), 176);
    slab_destroy(plain->slab);
    pool_destroy(plain->pool);
    free(plain->seen);
    free(plain->mem);
    free(plain);
}

/* A factor whose own classes leave little room under SLAB_MAX_CLASSES:
 * the fine classes end lower, and the factor's classes are kept. */
static void
test_geometry_chunk_step_crowded(void **state)
{
    struct slab_config plain_cfg = {.min_chunk = 80, .growth_factor = 1.2};
    struct slab_config cfg = plain_cfg;
    cfg.chunk_step = 16;
    struct fixture *plain = fixture_new_cfg(2, &plain_cfg);
    struct fixture *f = fixture_new_cfg(2, &cfg);
    unsigned n = slab_nclasses(f->slab), pn = slab_nclasses(plain->slab);

    *state = f;
    assert_int_equal(pn, 49);
    assert_true(n > pn && n <= SLAB_MAX_CLASSES);
    assert_int_equal(slab_chunk_size(f->slab, 1), 96);
    /* the largest classes are the factor's */
    for (unsigned i = 1; i <= 20; i++)
        assert_int_equal(slab_chunk_size(f->slab, n - i),
                         slab_chunk_size(plain->slab, pn - i));
    slab_destroy(plain->slab);
    pool_destroy(plain->pool);
    free(plain->seen);
    free(plain->mem);
    free(plain);
}

/* A step where the factor grows by less: the factor's step wins. */
static void
test_geometry_chunk_step_small_factor(void **state)
{
    struct slab_config cfg = {
        .min_chunk = 64,
        .growth_factor = 1.05,
        .chunk_max = 1024,
        .chunk_step = 64,
    };
    struct fixture *f = fixture_new_cfg(2, &cfg);
    unsigned n = slab_nclasses(f->slab);

    *state = f;
    for (unsigned i = 1; i < n; i++) {
        uint32_t prev = slab_chunk_size(f->slab, i - 1);
        uint32_t size = slab_chunk_size(f->slab, i);
        uint32_t by_factor = ALIGN_UP((uint32_t)(prev * 1.05), 8u);
        if (by_factor <= prev)
            by_factor = prev + 8;
        assert_true(size > prev && size % 8 == 0);
        if (size < 1024)
            assert_true(size <= by_factor);
    }
}

/* A regular class that rounds up to chunk_max must not repeat it. */
static void
test_geometry_top_edge(void **state)
{
    struct slab_config cfg = {
        .min_chunk = 100,
        .growth_factor = 1.5,
        .chunk_max = 160,
    };
    struct fixture *f = fixture_new_cfg(2, &cfg);

    *state = f;
    check_geometry(f->slab, 100, 1.5, 160);
}

static void
test_config_invalid(void **state)
{
    char *mem = aligned_alloc(POOL_PAGE_SIZE, POOL_PAGE_SIZE);
    struct pool *p;
    struct slab *s = (struct slab *)0x1;
    const struct slab_config bad[] = {
        {.min_chunk = 8, .growth_factor = 1.25},
        {.min_chunk = 64, .growth_factor = 1.0},
        {.min_chunk = 64, .growth_factor = 0.5},
        {.min_chunk = 64,
         .growth_factor = 1.25,
         .chunk_max = POOL_PAGE_SIZE + 8},
        {.min_chunk = 4096, .growth_factor = 1.25, .chunk_max = 1024},
        /* a last class that is not 8-aligned */
        {.min_chunk = 64, .growth_factor = 1.25, .chunk_max = 100001},
        /* a step that is not a multiple of 8, or spans past a page */
        {.min_chunk = 64, .growth_factor = 1.25, .chunk_step = 12},
        {.min_chunk = 64,
         .growth_factor = 1.25,
         .chunk_step = POOL_PAGE_SIZE / SLAB_STEP_SPAN + 8},
    };

    (void)state;
    assert_non_null(mem);
    assert_int_equal(pool_create(mem, POOL_PAGE_SIZE, 0, &p), 0);
    for (unsigned i = 0; i < ARRAY_SIZE(bad); i++)
        if (slab_create(&bad[i], p, &s) != -EINVAL)
            fail_msg("config %u was not refused with -EINVAL", i);
    assert_ptr_equal(s, (struct slab *)0x1);
    pool_destroy(p);
    free(mem);
}

static void
test_class_for(void **state)
{
    struct slab_config cfg = {0};
    struct fixture *f = fixture_new_cfg(2, &cfg);
    const struct slab *s;
    unsigned n;

    *state = f;
    s = f->slab;
    n = slab_nclasses(s);
    assert_int_equal(slab_class_for(s, 1), 0);
    for (unsigned c = 0; c < n; c++) {
        uint32_t size = slab_chunk_size(s, c);

        assert_int_equal(slab_class_for(s, size), c);
        assert_int_equal(slab_class_for(s, size - 1), c);
        if (c > 0)
            assert_int_equal(slab_class_for(s, slab_chunk_size(s, c - 1) + 1),
                             c);
        if (c + 1 < n)
            assert_int_equal(slab_class_for(s, size + 1), c + 1);
    }
    assert_int_equal(slab_class_for(s, slab_chunk_size(s, n - 1) + 1), -1);
    assert_int_equal(slab_class_for(s, POOL_PAGE_SIZE + 1), -1);
    assert_int_equal(slab_class_for(s, UINT32_MAX), -1);
}

/* Every size up to past the class table's end (and past chunk_max) finds
 * the class a linear walk finds: the first one at least that big, or -1.
 * Settings with fine steps, an unaligned min_chunk, and
 * classes past the table (1 MiB chunks). */
static void
test_class_for_every_size(void **state)
{
    const struct slab_config cfgs[] = {
        {0},
        {.min_chunk = 72, .chunk_step = 16, .chunk_max = 100000},
        {.min_chunk = 100, .growth_factor = 1.15, .chunk_max = 20000},
        {.min_chunk = 64, .growth_factor = 2.0, .chunk_max = POOL_PAGE_SIZE},
        {.min_chunk = 48, .chunk_step = 8, .chunk_max = 1000},
    };

    for (unsigned i = 0; i < ARRAY_SIZE(cfgs); i++) {
        struct fixture *f = fixture_new_cfg(1, &cfgs[i]);
        const struct slab *s = f->slab;
        unsigned n = slab_nclasses(s);
        uint32_t top = slab_chunk_size(s, n - 1);
        uint32_t end = top + 64 < 40000 ? top + 64 : 40000;

        *state = f;
        for (uint32_t size = 0; size <= end; size++) {
            int want = -1;
            for (unsigned c = 0; c < n; c++)
                if (slab_chunk_size(s, c) >= size) {
                    want = (int)c;
                    break;
                }
            if (slab_class_for(s, size) != want)
                fail_msg("config %u, size %u: class %d, not %d", i, size,
                         slab_class_for(s, size), want);
        }
        teardown(state);
    }
}

/* --- take / give --- */

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

/* --- CLOCK and full scans --- */

static bool
in_list(const uint64_t *a, unsigned n, uint64_t off)
{
    for (unsigned i = 0; i < n; i++)
        if (a[i] == off)
            return true;
    return false;
}

static bool
has_dups(const uint64_t *a, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = i + 1; j < n; j++)
            if (a[i] == a[j])
                return true;
    return false;
}

static void
test_scan_clock(void **state)
{
    struct fixture *f = fixture_new(2);
    unsigned cls = class_of_size(f->slab, 131072);
    struct slab_cursor cur = {0, 0};
    uint64_t c[8], out[16];
    unsigned n;

    *state = f;
    for (int i = 0; i < 8; i++)
        c[i] = take1(f, cls);
    assert_int_equal(page_of(c[0]), page_of(c[7]));
    slab_ref(f->slab, c[0]);
    slab_ref(f->slab, c[2]);
    slab_ref(f->slab, c[4]);
    slab_ref(f->slab, c[4]); /* twice is the same */

    /* first pass: the referenced ones are skipped (and their bits cleared) */
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 16);
    assert_int_equal(n, 5);
    assert_false(has_dups(out, n));
    for (int i = 0; i < 8; i++)
        assert_int_equal(in_list(out, n, c[i]), i != 0 && i != 2 && i != 4);

    /* second pass: everything is offered */
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 16);
    assert_int_equal(n, 8);
    assert_false(has_dups(out, n));
    for (int i = 0; i < 8; i++)
        assert_true(in_list(out, n, c[i]));

    /* a referenced chunk is skipped again once; a free chunk never shows */
    slab_ref(f->slab, c[1]);
    give1(f, cls, c[6]);
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 16);
    assert_int_equal(n, 6);
    for (int i = 0; i < 8; i++)
        assert_int_equal(in_list(out, n, c[i]), i != 1 && i != 6);
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 16);
    assert_int_equal(n, 7);
    assert_false(in_list(out, n, c[6]));

    /* max bounds the output */
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 3);
    assert_true(n <= 3);
    assert_int_equal(slab_check(f->slab), 0);
}

static void
test_scan_all(void **state)
{
    struct fixture *f = fixture_new(4);
    unsigned cls = class_of_size(f->slab, 65536); /* 16 a page */
    struct slab_cursor cur = {0, 0};
    uint64_t c[40], live[40], out[64];
    unsigned nlive = 0, n;

    *state = f;
    for (int i = 0; i < 40; i++) /* 3 pages, the last one half full */
        c[i] = take1(f, cls);
    assert_int_equal(stats_of(f->slab, cls).pages, 3);
    for (int i = 0; i < 40; i++) {
        if (i % 3 == 1 || i == 17) {
            give1(f, cls, c[i]);
        } else {
            live[nlive++] = c[i];
            if (i % 5 == 0)
                slab_ref(f->slab, c[i]); /* refs do not hide chunks */
        }
    }

    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, 3 * 16, out, 64);
    assert_int_equal(n, nlive);
    assert_false(has_dups(out, n));
    for (unsigned i = 0; i < nlive; i++)
        assert_true(in_list(out, n, live[i]));

    /* and again, from wherever the cursor stopped: the same set */
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, 3 * 16, out, 64);
    assert_int_equal(n, nlive);
    for (unsigned i = 0; i < nlive; i++)
        assert_true(in_list(out, n, live[i]));

    /* small budgets: successive scans over one full turn cover each live
     * chunk exactly once */
    unsigned total = 0;
    uint64_t acc[64];

    for (int k = 0; k < 6; k++) {
        n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, 8, acc + total,
                      64 - total);
        total += n;
    }
    assert_int_equal(total, nlive);
    assert_false(has_dups(acc, total));
    assert_int_equal(slab_check(f->slab), 0);
}

/* Budget and max together: calls with a small max make progress and, over
 * enough calls, offer every live chunk. */
static void
test_scan_max_progress(void **state)
{
    struct fixture *f = fixture_new(2);
    unsigned cls = class_of_size(f->slab, 65536);
    struct slab_cursor cur = {0, 0};
    uint64_t c[16], out[4];
    bool offered[16] = {false};

    *state = f;
    for (int i = 0; i < 16; i++)
        c[i] = take1(f, cls);
    for (int call = 0; call < 6; call++) {
        unsigned n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, 64, out, 3);

        assert_int_equal(n, 3);
        for (unsigned k = 0; k < n; k++)
            for (int i = 0; i < 16; i++)
                if (out[k] == c[i])
                    offered[i] = true;
    }
    for (int i = 0; i < 16; i++)
        if (!offered[i])
            fail_msg("chunk %d never offered in 6 scans of max 3", i);
}

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

/* Last access times: exact below the cap, capped above it, kept apart per
 * chunk, copied on a move, and clamped by the rebase before the 16-bit
 * seconds wrap. */
static void
test_class_of_bounds(void **state)
{
    struct fixture *f = fixture_new(2);
    unsigned cls = class_of_size(f->slab, 64);
    uint64_t off;

    *state = f;
    assert_int_equal(slab_class_of(f->slab, 0), SLAB_NO_CLASS);
    off = take1(f, cls);
    assert_int_equal(slab_class_of(f->slab, off), cls);
    assert_int_equal(slab_class_of(f->slab, POOL_PAGE_SIZE + 64),
                     SLAB_NO_CLASS); /* free pool page */
    assert_int_equal(slab_class_of(f->slab, 2ull * POOL_PAGE_SIZE),
                     SLAB_NO_CLASS); /* beyond the pool */
    assert_int_equal(slab_class_of(f->slab, UINT64_MAX), SLAB_NO_CLASS);
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
        cmocka_unit_test_teardown(test_geometry_default, teardown),
        cmocka_unit_test_teardown(test_adopt_page, teardown),
        cmocka_unit_test_teardown(test_geometry_factor2, teardown),
        cmocka_unit_test_teardown(test_geometry_chunk_step, teardown),
        cmocka_unit_test_teardown(test_geometry_chunk_step_small_factor,
                                  teardown),
        cmocka_unit_test_teardown(test_geometry_chunk_step_crowded, teardown),
        cmocka_unit_test_teardown(test_geometry_unaligned_min, teardown),
        cmocka_unit_test(test_geometry_too_many_classes),
        cmocka_unit_test_teardown(test_geometry_top_edge, teardown),
        cmocka_unit_test_teardown(test_config_invalid, teardown),
        cmocka_unit_test_teardown(test_class_for, teardown),
        cmocka_unit_test_teardown(test_class_for_every_size, teardown),
        cmocka_unit_test_teardown(test_take_never_twice, teardown),
        cmocka_unit_test_teardown(test_take_small_class_thousands, teardown),
        cmocka_unit_test_teardown(test_give_then_take_reuses, teardown),
        cmocka_unit_test_teardown(test_stats_exact, teardown),
        cmocka_unit_test_teardown(test_random_bursts_check, teardown),
        cmocka_unit_test_teardown(test_format_hook, teardown),
        cmocka_unit_test_teardown(test_scan_clock, teardown),
        cmocka_unit_test_teardown(test_scan_all, teardown),
        cmocka_unit_test_teardown(test_scan_max_progress, teardown),
        cmocka_unit_test_teardown(test_drain_full_cycle, teardown),
        cmocka_unit_test_teardown(test_drain_abort, teardown),
        cmocka_unit_test_teardown(test_drain_pick, teardown),
        cmocka_unit_test_teardown(test_drain_pick_skips_draining, teardown),
        cmocka_unit_test_teardown(test_class_of_bounds, teardown),
        cmocka_unit_test_teardown(test_regrow_under_prefetch, teardown),
    };

    return cmocka_run_group_tests_name("slab", tests, NULL, NULL);
}

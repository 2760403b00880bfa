#pragma once
/*
 * Shared fixture of the slab tests (tests/unit/test_slab*.c but
 * test_slab_atime and test_slab_ablate, which keep their own): a pool over an
 * untouched aligned_alloc() buffer (the slab never writes the chunks), a slab
 * over it whose format hook only records its calls, and a bitmap of the
 * chunks held, so that a chunk handed out twice fails the test. test_quota.c
 * uses it too, with no format hook (fixture_new_nohook). Include after
 * <cmocka.h>.
 */
#include "alloc/slab.h"

#include "alloc/pool.h"
#include "src/base/lock.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static inline void
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

/* The pool and the bitmap of a fixture; no slab yet. */
static inline struct fixture *
fixture_alloc(uint32_t npages)
{
    struct fixture *f = calloc(1, sizeof(*f));
    uint64_t len = (uint64_t)npages * POOL_PAGE_SIZE;

    assert_non_null(f);
    f->npages = npages;
    f->mem = aligned_alloc(POOL_PAGE_SIZE, len);
    assert_non_null(f->mem);
    f->seen = calloc(len / 8 / 64 + 1, sizeof(uint64_t));
    assert_non_null(f->seen);
    assert_int_equal(pool_create(f->mem, len, 0, &f->pool), 0);
    return f;
}

/* A slab over the fixture's pool whose format hook records its calls. */
static inline struct fixture *
fixture_new_cfg(uint32_t npages, const struct slab_config *cfg_in)
{
    struct fixture *f = fixture_alloc(npages);
    struct slab_config cfg = *cfg_in;

    cfg.format = format_hook;
    cfg.format_arg = f;
    assert_int_equal(slab_create(&cfg, f->pool, &f->slab), 0);
    return f;
}

/* min_chunk 64, factor 2, chunk_max 1 MiB: classes 64 << i, i = 0..14. */
static inline struct slab_config
fixture_default_cfg(void)
{
    struct slab_config cfg = {
        .min_chunk = 64,
        .growth_factor = 2.0,
        .chunk_max = POOL_PAGE_SIZE,
    };

    return cfg;
}

static inline struct fixture *
fixture_new(uint32_t npages)
{
    struct slab_config cfg = fixture_default_cfg();

    return fixture_new_cfg(npages, &cfg);
}

/* The default classes with no format hook, for tests that add pages from
 * several threads at once (the hook's record is for one thread). */
static inline struct fixture *
fixture_new_nohook(uint32_t npages)
{
    struct fixture *f = fixture_alloc(npages);
    struct slab_config cfg = fixture_default_cfg();

    assert_int_equal(slab_create(&cfg, f->pool, &f->slab), 0);
    return f;
}

static inline void
fixture_free(struct fixture *f)
{
    slab_destroy(f->slab);
    pool_destroy(f->pool);
    free(f->seen);
    free(f->mem);
    free(f);
}

/* cmocka teardown: the fixture a test left in *state, if any. */
static inline int
teardown(void **state)
{
    struct fixture *f = *state;

    if (f != NULL)
        fixture_free(f);
    *state = NULL;
    return 0;
}

/* Mark off as held; false if it already was. */
static inline bool
seen_add(struct fixture *f, uint64_t off)
{
    uint64_t i = off / 8;
    uint64_t bit = 1ull << (i % 64);

    if (f->seen[i / 64] & bit)
        return false;
    f->seen[i / 64] |= bit;
    return true;
}

static inline void
seen_del(struct fixture *f, uint64_t off)
{
    uint64_t i = off / 8;

    f->seen[i / 64] &= ~(1ull << (i % 64));
}

static inline bool
seen_has(const struct fixture *f, uint64_t off)
{
    uint64_t i = off / 8;

    return f->seen[i / 64] & (1ull << (i % 64));
}

static inline unsigned
class_of_size(const struct slab *s, uint32_t size)
{
    for (unsigned c = 0; c < slab_nclasses(s); c++)
        if (slab_chunk_size(s, c) == size)
            return c;
    fail_msg("no class of size %u", size);
    return 0;
}

static inline uint32_t
page_of(uint64_t off)
{
    return (uint32_t)(off >> POOL_PAGE_SHIFT);
}

static inline struct slab_class_stats
stats_of(const struct slab *s, unsigned cls)
{
    struct slab_class_stats st;

    memset(&st, 0xa5, sizeof(st));
    slab_class_stats(s, cls, &st);
    return st;
}

/* A taken chunk must be inside the pool, on a chunk boundary of its page,
 * fit in the page, belong to its class, and not be held already. */
static inline void
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
static inline uint64_t
take1(struct fixture *f, unsigned cls)
{
    uint64_t off = UINT64_MAX;

    assert_int_equal(slab_take(f->slab, cls, &off, 1), 1);
    check_taken(f, cls, off);
    return off;
}

static inline void
give1(struct fixture *f, unsigned cls, uint64_t off)
{
    assert_true(seen_has(f, off));
    seen_del(f, off);
    slab_give(f->slab, cls, &off, 1);
}

static inline int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Whether off is among a[0..n), and whether a[0..n) holds a value twice. */
static inline bool
in_list(const uint64_t *a, unsigned n, uint64_t off)
{
    for (unsigned i = 0; i < n; i++)
        if (a[i] == off)
            return true;
    return false;
}

static inline bool
has_dups(const uint64_t *a, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = i + 1; j < n; j++)
            if (a[i] == a[j])
                return true;
    return false;
}

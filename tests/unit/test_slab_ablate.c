/*
 * Unit tests of the slab's experiment-only ablation switches,
 * written from alloc/slab.h and alloc/slab_layout.h: with meta_write set,
 * every page keeps a header of its allocation state at its start (mirrored
 * through the hook, which here stores into the malloc'd "pool" and counts),
 * the header's chunks are never handed out, and the mirror agrees with the
 * slab's own counts; with format_in_lock, the format hook runs with the class
 * lock held.
 *
 * Randomised tests take their seed from TC_SEED if set, else from the clock,
 * and print it when they fail.
 */

#include "alloc/slab.h"

#include "alloc/pool.h"
#include "alloc/slab_layout.h"
#include "src/base/lock.h"

#include <errno.h>
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

#define NPAGES 8u

struct fx {
    char *mem;
    struct pool *pool;
    struct slab *slab;
    uint64_t meta_writes;
    uint64_t meta_outside;  /* writes outside a page's header bytes */
    uint64_t meta_unlocked; /* header writes with no lock held */
    unsigned formats;
    int format_depth; /* lock_held_depth() in the last format call */
};

static void
meta_hook(void *arg, uint64_t *dst, uint64_t v)
{
    struct fx *f = arg;
    uint64_t off = (uint64_t)((char *)dst - f->mem);
    uint64_t in_page = off % POOL_PAGE_SIZE;
    unsigned cls = slab_class_of(f->slab, off);

    f->meta_writes++;
    /* the header of the page's class, as slab_layout.h sizes it; a page
     * leaving its class has its header line rewritten as free */
    uint64_t limit = cls == SLAB_NO_CLASS
                         ? sizeof(struct slab_pmeta)
                         : (uint64_t)slab_reserved(f->slab, cls) *
                               slab_chunk_size(f->slab, cls);
    if (in_page + 8 > limit || off % 8)
        f->meta_outside++;
    if (lock_held_depth() == 0)
        f->meta_unlocked++;
    __atomic_store_n(dst, v, __ATOMIC_RELAXED);
}

static void
format_hook(void *arg, char *page, uint32_t chunk_size, uint32_t nchunks)
{
    struct fx *f = arg;
    (void)page;
    (void)chunk_size;
    (void)nchunks;
    f->formats++;
    f->format_depth = lock_held_depth();
}

static struct fx *
fx_new(bool meta, bool in_lock)
{
    struct fx *f = calloc(1, sizeof(*f));
    uint64_t len = (uint64_t)NPAGES * POOL_PAGE_SIZE;
    assert_non_null(f);
    f->mem = aligned_alloc(POOL_PAGE_SIZE, len);
    assert_non_null(f->mem);
    memset(f->mem, 0, len);
    assert_int_equal(pool_create(f->mem, len, 0, &f->pool), 0);
    struct slab_config cfg = {
        .min_chunk = 64,
        .growth_factor = 2.0,
        .chunk_max = POOL_PAGE_SIZE / 2,
        .format = format_hook,
        .format_arg = f,
        .meta_write = meta ? meta_hook : NULL,
        .meta_arg = f,
        .format_in_lock = in_lock,
    };
    assert_int_equal(slab_create(&cfg, f->pool, &f->slab), 0);
    return f;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    if (f) {
        slab_destroy(f->slab);
        pool_destroy(f->pool);
        free(f->mem);
        free(f);
    }
    return 0;
}

static const struct slab_pmeta *
header(const struct fx *f, uint32_t pg)
{
    return (const struct slab_pmeta *)(f->mem + (uint64_t)pg * POOL_PAGE_SIZE);
}

/* The PMEM header of every page owned by cls agrees with the slab: magic
 * and class, free count equal to its free bits, and the counts summing to
 * the class's free chunks. */
static void
check_headers(const struct fx *f, unsigned cls)
{
    struct slab_class_stats st;
    uint32_t nwords =
        (POOL_PAGE_SIZE / slab_chunk_size(f->slab, cls) + 63) / 64;
    uint64_t free_sum = 0;
    slab_class_stats(f->slab, cls, &st);
    for (uint32_t pg = 0; pg < NPAGES; pg++) {
        if (slab_class_of(f->slab, (uint64_t)pg * POOL_PAGE_SIZE) != cls)
            continue;
        const struct slab_pmeta *h = header(f, pg);
        uint64_t id = h->word[SLAB_PMETA_ID];
        assert_int_equal((uint32_t)id, SLAB_PMETA_MAGIC);
        assert_int_equal((id >> 32) & 0xff, cls);
        uint32_t nfree = (uint32_t)h->word[SLAB_PMETA_COUNT];
        uint32_t bits = 0;
        for (uint32_t w = 0; w < nwords; w++)
            bits += (uint32_t)__builtin_popcountll(h->bits[w]);
        assert_int_equal(bits, nfree);
        free_sum += nfree;
    }
    assert_int_equal(free_sum, st.free_chunks);
}

static unsigned
seed_from_env(void)
{
    const char *e = getenv("TC_SEED");
    return e ? (unsigned)strtoul(e, NULL, 10) : (unsigned)time(NULL);
}

/* Reserved chunks are never handed out; header writes stay inside the
 * reserved bytes, are made under the class lock (take/give), and mirror the
 * allocation state through random take/give bursts. */
static void
test_meta_header_mirrors_state(void **state)
{
    struct fx *f = *state = fx_new(true, false);
    unsigned seed = seed_from_env();
    srand(seed);
    print_message("seed %u (TC_SEED to replay)\n", seed);

    unsigned cls = (unsigned)slab_class_for(f->slab, 128); /* 128 B */
    uint32_t size = slab_chunk_size(f->slab, cls);
    uint32_t res = slab_reserved(f->slab, cls);
    /* 64-byte header line + 2 x 128 bitmap words = 2112 bytes */
    assert_int_equal(res, (SLAB_PMETA_BYTES(128) + size - 1) / size);
    assert_true(res * size < 4096); /* on the first 4 KiB stripe */

    static uint64_t held[20000];
    unsigned nheld = 0;
    for (int round = 0; round < 40; round++) {
        if (rand() % 3 && nheld + 256 <= 20000) {
            int n = slab_take(f->slab, cls, held + nheld, 256);
            if (n > 0)
                nheld += (unsigned)n;
        } else if (nheld) {
            unsigned n = 1 + (unsigned)rand() % (nheld < 300 ? nheld : 300);
            slab_give(f->slab, cls, held + nheld - n, n);
            nheld -= n;
        }
        assert_int_equal(slab_check(f->slab), 0);
        check_headers(f, cls);
    }
    for (unsigned i = 0; i < nheld; i++)
        assert_true(held[i] % POOL_PAGE_SIZE >= (uint64_t)res * size);
    assert_true(f->meta_writes > 0);
    assert_int_equal(f->meta_outside, 0);
    assert_int_equal(f->meta_unlocked, 0);
}

/* CLOCK bits reach the mirror: slab_ref sets the chunk's bit (lock-free),
 * the scan clears it, give clears it. */
static void
test_meta_clock_bits(void **state)
{
    struct fx *f = *state = fx_new(true, false);
    unsigned cls = (unsigned)slab_class_for(f->slab, 256);
    uint32_t size = slab_chunk_size(f->slab, cls);
    uint32_t nwords = (POOL_PAGE_SIZE / size + 63) / 64;
    uint64_t off;
    assert_int_equal(slab_take(f->slab, cls, &off, 1), 1);
    uint32_t pg = (uint32_t)(off / POOL_PAGE_SIZE);
    uint32_t idx = (uint32_t)(off % POOL_PAGE_SIZE) / size;
    const uint64_t *ref = header(f, pg)->bits + nwords;

    assert_false(ref[idx / 64] & (1ull << (idx % 64)));
    slab_ref(f->slab, off);
    assert_true(ref[idx / 64] & (1ull << (idx % 64)));
    struct slab_cursor cur = {0, 0};
    uint64_t found[4];
    /* first pass clears the bit, returns nothing for this chunk */
    (void)slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, POOL_PAGE_SIZE / size,
                    found, 4);
    assert_false(ref[idx / 64] & (1ull << (idx % 64)));
    slab_ref(f->slab, off);
    slab_give(f->slab, cls, &off, 1);
    assert_false(ref[idx / 64] & (1ull << (idx % 64)));
}

/* A scan never reports the header's chunks as items, and a drained page
 * (all item chunks free) goes back to the pool. */
static void
test_meta_scan_and_drain(void **state)
{
    struct fx *f = *state = fx_new(true, false);
    unsigned cls = (unsigned)slab_class_for(f->slab, 64);
    uint32_t size = slab_chunk_size(f->slab, cls);
    uint32_t res = slab_reserved(f->slab, cls);
    uint32_t usable = POOL_PAGE_SIZE / size - res;
    uint64_t *offs = calloc(usable, sizeof(*offs));
    assert_non_null(offs);
    unsigned got = 0;
    while (got < usable) {
        int n = slab_take(f->slab, cls, offs + got, usable - got);
        assert_true(n > 0);
        got += (unsigned)n;
    }
    uint32_t pg = (uint32_t)(offs[0] / POOL_PAGE_SIZE);
    for (unsigned i = 0; i < got; i++)
        assert_int_equal(offs[i] / POOL_PAGE_SIZE, pg); /* one page */

    struct slab_cursor cur = {0, 0};
    static uint64_t seen[20000];
    unsigned n =
        slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, usable, seen, 20000);
    assert_int_equal(n, usable);
    for (unsigned i = 0; i < n; i++)
        assert_true(seen[i] % POOL_PAGE_SIZE >= (uint64_t)res * size);
    n = slab_drain_live_from(f->slab, pg, 0, seen, 20000);
    assert_int_equal(n, usable);

    assert_int_equal(slab_drain_begin(f->slab, pg), 0);
    slab_give(f->slab, cls, offs, got);
    assert_int_equal(slab_drain_finish(f->slab, pg), 0);
    assert_int_equal(slab_class_of(f->slab, (uint64_t)pg * POOL_PAGE_SIZE),
                     SLAB_NO_CLASS);
    assert_int_equal(slab_check(f->slab), 0);
    assert_int_equal(f->meta_outside, 0);
    free(offs);
}

/* Off (the default): no chunk reserved, no header written. */
static void
test_meta_off_writes_nothing(void **state)
{
    struct fx *f = *state = fx_new(false, false);
    uint64_t offs[64];
    for (unsigned cls = 0; cls < slab_nclasses(f->slab); cls++)
        assert_int_equal(slab_reserved(f->slab, cls), 0);
    assert_int_equal(slab_take(f->slab, 0, offs, 64), 64);
    assert_int_equal(offs[0] % POOL_PAGE_SIZE, 0); /* chunk 0 is an item */
    slab_give(f->slab, 0, offs, 64);
    assert_int_equal(f->meta_writes, 0);
    for (size_t i = 0; i < 64; i++)
        assert_int_equal(f->mem[i], 0);
}

/* The largest class cannot give up its only chunk to a header. */
static void
test_meta_needs_two_chunks(void **state)
{
    (void)state;
    char *mem = aligned_alloc(POOL_PAGE_SIZE, 4 * POOL_PAGE_SIZE);
    struct pool *pool;
    struct slab *s = NULL;
    assert_non_null(mem);
    assert_int_equal(pool_create(mem, 4ull * POOL_PAGE_SIZE, 0, &pool), 0);
    struct slab_config cfg = {
        .min_chunk = 64,
        .growth_factor = 2.0,
        .chunk_max = POOL_PAGE_SIZE,
        .meta_write = meta_hook,
    };
    assert_int_equal(slab_create(&cfg, pool, &s), -EINVAL);
    pool_destroy(pool);
    free(mem);
}

/* format_in_lock: the format hook runs inside the class lock; by default
 * outside every lock. */
static void
test_format_in_lock(void **state)
{
    struct fx *f = *state = fx_new(false, true);
    uint64_t off;
    assert_int_equal(slab_take(f->slab, 2, &off, 1), 1);
    assert_int_equal(f->formats, 1);
    assert_int_equal(f->format_depth, 1);
    teardown(state);

    f = *state = fx_new(false, false);
    assert_int_equal(slab_take(f->slab, 2, &off, 1), 1);
    assert_int_equal(f->formats, 1);
    assert_int_equal(f->format_depth, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_meta_header_mirrors_state, teardown),
        cmocka_unit_test_teardown(test_meta_clock_bits, teardown),
        cmocka_unit_test_teardown(test_meta_scan_and_drain, teardown),
        cmocka_unit_test_teardown(test_meta_off_writes_nothing, teardown),
        cmocka_unit_test(test_meta_needs_two_chunks),
        cmocka_unit_test_teardown(test_format_in_lock, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests for alloc/seg.c, written from alloc/seg.h: segments of the
 * packed store over the page pool. The pool's memory is an aligned_alloc()
 * buffer filled with a pattern (so that what the module writes can be told
 * from what was there); the PMEM writes go through tier/pm.c's helpers,
 * wrapped to record whether a lock was held.
 *
 * Randomised tests take their seed from TC_SEED if set, else from the clock,
 * and print it when they fail. The two-thread test is meant for TSan too.
 */

#include "alloc/seg.h"

#include "alloc/pool.h"
#include "alloc/seg_layout.h"
#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/lock.h"
#include "tier/nvs.h"
#include "tier/pm.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "seed_fx.h"

#define FAKE_NOW 1700000000u
#define POOL_PATTERN 0xee

/* --- PMEM helpers that record the deepest lock nesting they ran under --- */

static _Atomic int max_depth;
static _Atomic uint64_t pm_calls;

static void
note_depth(void)
{
    int d = lock_held_depth();
    int m = atomic_load(&max_depth);

    while (d > m && !atomic_compare_exchange_weak(&max_depth, &m, d))
        ;
    atomic_fetch_add(&pm_calls, 1);
}

static void
rec_copy(void *dst, const void *src, size_t n)
{
    note_depth();
    pm_copy(dst, src, n);
}

static void
rec_store32(uint32_t *dst, uint32_t v)
{
    note_depth();
    pm_store32(dst, v);
}

static void
rec_fence(void)
{
    pm_fence();
}

/* --- fixture --- */

struct fixture {
    char *mem;
    uint32_t npages;
    _Atomic uint64_t seq;
    struct pool *pool;
    struct seg *seg;
    uint32_t *seen; /* bitmap over the pool, one bit per 4 bytes */
};

static uint32_t fixture_open_max; /* the next fixture's cap (0: none) */

static struct fixture *
fixture_new(uint32_t npages, uint64_t seq0)
{
    struct fixture *f = calloc(1, sizeof(*f));
    uint64_t len = (uint64_t)npages * POOL_PAGE_SIZE;
    struct seg_config cfg = {
        .ops = {rec_copy, rec_store32, rec_fence, nvs_crc32c},
        .open_count = 7,
        .open_max = fixture_open_max,
    };

    assert_non_null(f);
    f->npages = npages;
    f->mem = aligned_alloc(POOL_PAGE_SIZE, len);
    assert_non_null(f->mem);
    memset(f->mem, POOL_PATTERN, len);
    f->seen = calloc(len / 4 / 32 + 1, sizeof(uint32_t));
    assert_non_null(f->seen);
    atomic_store(&f->seq, seq0);
    cfg.seq = &f->seq;
    assert_int_equal(pool_create(f->mem, len, 0, &f->pool), 0);
    assert_int_equal(seg_create(&cfg, f->pool, &f->seg), 0);
    clock_set_fake(FAKE_NOW);
    atomic_store(&max_depth, 0);
    atomic_store(&pm_calls, 0);
    return f;
}

static int
teardown(void **state)
{
    struct fixture *f = *state;

    clock_set_fake(0);
    if (f != NULL) {
        seg_destroy(f->seg);
        pool_destroy(f->pool);
        free(f->seen);
        free(f->mem);
        free(f);
    }
    *state = NULL;
    return 0;
}

/* Mark the 4-byte units of [off, off + n) held; false if one already was. */
static bool
seen_add(struct fixture *f, uint64_t off, uint32_t n)
{
    for (uint64_t u = off / 4; u < (off + n + 3) / 4; u++) {
        uint32_t bit = 1u << (u % 32);

        if (f->seen[u / 32] & bit)
            return false;
        f->seen[u / 32] |= bit;
    }
    return true;
}

static const struct seg_header *
header_of(struct fixture *f, uint32_t page)
{
    return (const struct seg_header *)(f->mem +
                                       ((uint64_t)page << POOL_PAGE_SHIFT));
}

static uint32_t
page_of(uint64_t off)
{
    return (uint32_t)(off >> POOL_PAGE_SHIFT);
}

static uint32_t
in_page(uint64_t off)
{
    return (uint32_t)(off & (POOL_PAGE_SIZE - 1));
}

static void
check(struct fixture *f)
{
    int rc = seg_check(f->seg);

    if (rc != 0)
        fail_msg("seg_check: %s", err_msg());
}

static enum seg_state
state_of(struct fixture *f, uint32_t page)
{
    struct seg_info si;

    seg_info(f->seg, page, &si);
    return si.state;
}

/* --- tests --- */

static void
test_bad_args(void **state)
{
    struct fixture *f = fixture_new(4, 0);
    struct seg_config cfg = {
        .seq = &f->seq,
        .ops = {rec_copy, rec_store32, rec_fence, nvs_crc32c},
    };
    struct seg_open o;
    struct seg *s = NULL;
    uint64_t off;

    *state = f;
    cfg.seq = NULL;
    assert_int_equal(seg_create(&cfg, f->pool, &s), -EINVAL);
    cfg.seq = &f->seq;
    cfg.ops.crc32c = NULL;
    assert_int_equal(seg_create(&cfg, f->pool, &s), -EINVAL);
    assert_null(s);

    seg_open_init(&o, 1);
    assert_int_equal(seg_reserve(f->seg, &o, 0, 0, &off), -EINVAL);
    assert_int_equal(seg_reserve(f->seg, &o, SEG_NBUCKETS, 8, &off), -EINVAL);
    assert_int_equal(seg_reserve(f->seg, &o, 0, SEG_PAYLOAD + 1, &off), -E2BIG);
    /* nothing was opened by the refusals */
    assert_int_equal(pool_nfree(f->pool), 4);
}

static void
test_buckets(void **state)
{
    (void)state;
    assert_int_equal(seg_bucket_of(0), 0);
    assert_int_equal(seg_bucket_of(1), 1);
    assert_int_equal(seg_bucket_of(15), 1);
    assert_int_equal(seg_bucket_of(16), 2);
    assert_int_equal(seg_bucket_of(UINT32_MAX), 15);
    assert_int_equal(seg_bucket_ttl_lo(0), 0);
    assert_int_equal(seg_bucket_ttl_lo(15), 1u << 17);
    for (unsigned b = 1; b < SEG_NBUCKETS; b++) {
        uint32_t lo = seg_bucket_ttl_lo(b);

        assert_true(lo > seg_bucket_ttl_lo(b - 1));
        assert_int_equal(seg_bucket_of(lo), b);
        if (b > 1)
            assert_int_equal(seg_bucket_of(lo - 1), b - 1);
    }
}

/* Random sizes into one bucket: spans are 4-aligned, past the header,
 * inside the page, back to back, never overlapping; a span that does not
 * fit seals its segment and starts the next. */
static void
test_reserve_spans(void **state)
{
    struct fixture *f = fixture_new(16, 0);
    uint64_t seed = alloc_test_seed(), rng = seed | 1;
    struct seg_open o;
    uint64_t prev_end = 0;
    uint32_t prev_page = SEG_NO_PAGE, pages = 0;

    *state = f;
    seg_open_init(&o, 3);
    for (int i = 0; i < 20000; i++) {
        uint32_t n = 1 + (uint32_t)(rng_next(&rng) % 1200);
        uint32_t n4 = (n + 3) & ~3u;
        uint64_t off;

        CHECK_SEED(seg_reserve(f->seg, &o, 0, n, &off) == 0, seed, "reserve %d",
                   i);
        CHECK_SEED(off % 4 == 0, seed, "unaligned %llu",
                   (unsigned long long)off);
        CHECK_SEED(in_page(off) >= SEG_HEADER_SIZE, seed, "in the header");
        CHECK_SEED(in_page(off) + n4 <= POOL_PAGE_SIZE, seed, "past the page");
        CHECK_SEED(seen_add(f, off, n4), seed, "overlap at %llu",
                   (unsigned long long)off);
        if (page_of(off) == prev_page) {
            CHECK_SEED(off == prev_end, seed, "not back to back");
        } else {
            if (prev_page != SEG_NO_PAGE) {
                struct seg_info si;

                /* it did not fit, so the old one was sealed */
                CHECK_SEED(in_page(prev_end) + n4 > POOL_PAGE_SIZE ||
                               in_page(prev_end) == 0,
                           seed, "left a page with room");
                seg_info(f->seg, prev_page, &si);
                CHECK_SEED(si.state == SEG_SEALED, seed, "old not sealed");
                CHECK_SEED(si.write_off == in_page(prev_end - 1) + 1, seed,
                           "sealed write_off");
            }
            CHECK_SEED(in_page(off) == SEG_HEADER_SIZE, seed,
                       "new segment starts after its header");
            CHECK_SEED(state_of(f, page_of(off)) == SEG_OPEN, seed,
                       "new not open");
            pages++;
            prev_page = page_of(off);
        }
        prev_end = off + n4;
    }
    assert_true(pages >= 11); /* ~12 MB asked of 1 MiB pages */
    assert_true(pages <= 16);
    check(f);
}

static void
test_full_segment_seals(void **state)
{
    struct fixture *f = fixture_new(4, 0);
    struct seg_open o;
    struct seg_info si;
    struct seg_stats st;
    uint64_t a, b;

    *state = f;
    seg_open_init(&o, 1);
    assert_int_equal(seg_reserve(f->seg, &o, 2, SEG_PAYLOAD, &a), 0);
    assert_int_equal(in_page(a), SEG_HEADER_SIZE);
    seg_info(f->seg, page_of(a), &si);
    assert_int_equal(si.state, SEG_OPEN);
    assert_int_equal(si.write_off, POOL_PAGE_SIZE);
    assert_int_equal(si.bucket, 2);
    assert_int_equal(si.owner, 1);

    assert_int_equal(seg_reserve(f->seg, &o, 2, 4, &b), 0);
    assert_int_not_equal(page_of(a), page_of(b));
    assert_int_equal(in_page(b), SEG_HEADER_SIZE);
    assert_int_equal(state_of(f, page_of(a)), SEG_SEALED);
    assert_int_equal(state_of(f, page_of(b)), SEG_OPEN);
    seg_stats(f->seg, &st);
    assert_int_equal(st.open, 1);
    assert_int_equal(st.sealed, 1);
    assert_int_equal(st.opened, 2);

    /* seal by hand; the next reserve opens another */
    seg_seal(f->seg, &o, 2);
    assert_int_equal(state_of(f, page_of(b)), SEG_SEALED);
    assert_int_equal(o.page[2], SEG_NO_PAGE);
    seg_seal(f->seg, &o, 2); /* none open: nothing */
    seg_stats(f->seg, &st);
    assert_int_equal(st.open, 0);
    assert_int_equal(st.sealed, 2);
    check(f);
}

/* Sequence blocks come from the caller's counter, which other users take
 * single values from too: every block is fresh, blocks of later opens are
 * higher, and a span's sequence lies in its segment's block. */
static void
test_seq_blocks(void **state)
{
    struct fixture *f = fixture_new(8, 1000);
    struct seg_open o1, o2;
    uint64_t last_base = 0, singles[16];
    uint64_t base[16];
    uint32_t page[16];
    unsigned nb = 0;

    *state = f;
    seg_open_init(&o1, 1);
    seg_open_init(&o2, 2);
    for (unsigned i = 0; i < 8; i++) {
        struct seg_open *o = i % 2 ? &o2 : &o1;
        uint64_t off, before = atomic_load(&f->seq);
        struct seg_info si;

        assert_int_equal(seg_reserve(f->seg, o, i / 2, 100, &off), 0);
        seg_info(f->seg, page_of(off), &si);
        assert_int_equal(si.seq_base, before + 1);
        assert_int_equal(atomic_load(&f->seq), before + SEG_SEQ_BLOCK);
        assert_true(si.seq_base > last_base);
        last_base = si.seq_base;
        assert_int_equal(seg_seq_of(f->seg, off),
                         si.seq_base + SEG_HEADER_SIZE / 4);
        base[nb] = si.seq_base;
        page[nb++] = page_of(off);
        /* a slab item's value taken between opens */
        singles[i] = atomic_fetch_add(&f->seq, 1) + 1;
    }
    for (unsigned i = 0; i < nb; i++) {
        for (unsigned j = 0; j < nb; j++) {
            if (i != j)
                assert_int_not_equal(page[i], page[j]);
            assert_false(singles[j] >= base[i] &&
                         singles[j] < base[i] + SEG_SEQ_BLOCK);
            if (i < j)
                assert_true(base[i] + SEG_SEQ_BLOCK <= base[j]);
        }
    }
    /* within a segment, sequences rise with the offset */
    {
        uint64_t a, b;

        assert_int_equal(seg_reserve(f->seg, &o1, 0, 40, &a), 0);
        assert_int_equal(seg_reserve(f->seg, &o1, 0, 40, &b), 0);
        assert_int_equal(seg_seq_of(f->seg, b), seg_seq_of(f->seg, a) + 10);
    }
    check(f);
}

/* Eviction order is open order (seq_base), whatever the seal order; open
 * segments are stepped over. */
static void
test_age_order(void **state)
{
    struct fixture *f = fixture_new(8, 0);
    struct seg_open o, o4;
    uint32_t page[5], got;
    static const unsigned seal_order[] = {3, 1, 0, 2};

    *state = f;
    seg_open_init(&o, 1);
    seg_open_init(&o4, 2); /* a thread keeps 4 open: bucket 4 another's */
    for (unsigned b = 0; b < 5; b++) {
        uint64_t off;

        assert_int_equal(seg_reserve(f->seg, b < 4 ? &o : &o4, b, 64, &off), 0);
        page[b] = page_of(off);
    }
    assert_int_equal(seg_evict_oldest(f->seg, &got), -ENOENT);
    for (unsigned i = 0; i < 4; i++)
        seg_seal(f->seg, &o, seal_order[i]);
    /* bucket 4's segment stays open: never returned */
    for (unsigned b = 0; b < 4; b++) {
        assert_int_equal(seg_evict_oldest(f->seg, &got), 0);
        assert_int_equal(got, page[b]);
        assert_int_equal(state_of(f, got), SEG_EVICTING);
    }
    assert_int_equal(seg_evict_oldest(f->seg, &got), -ENOENT);
    assert_int_equal(state_of(f, page[4]), SEG_OPEN);
    assert_int_equal(seg_evict(f->seg, page[4]), -EBUSY);

    /* an evicting segment freed, then a later one sealed and evicted */
    assert_int_equal(seg_free(f->seg, page[0]), 0);
    seg_seal(f->seg, &o4, 4);
    assert_int_equal(seg_evict_oldest(f->seg, &got), 0);
    assert_int_equal(got, page[4]);
    check(f);
}

static void
test_free_returns_pages(void **state)
{
    struct fixture *f = fixture_new(6, 0);
    struct seg_open o;
    struct seg_stats st;
    uint32_t page[4], got;

    *state = f;
    seg_open_init(&o, 1);
    assert_int_equal(pool_nfree(f->pool), 6);
    for (unsigned b = 0; b < 4; b++) {
        uint64_t off;

        assert_int_equal(seg_reserve(f->seg, &o, b, 8, &off), 0);
        page[b] = page_of(off);
    }
    assert_int_equal(pool_nfree(f->pool), 2);

    assert_int_equal(seg_free(f->seg, page[0]), -EBUSY); /* open */
    seg_seal_all(f->seg, &o);
    for (unsigned b = 0; b < SEG_NBUCKETS; b++)
        assert_int_equal(o.page[b], SEG_NO_PAGE);

    /* a sealed one freed directly, one through eviction */
    assert_int_equal(seg_free(f->seg, page[2]), 0);
    assert_int_equal(pool_nfree(f->pool), 3);
    assert_int_equal(state_of(f, page[2]), SEG_FREE);
    assert_int_equal(seg_free(f->seg, page[2]), -EBUSY); /* twice */
    assert_int_equal(pool_nfree(f->pool), 3);
    assert_int_equal(seg_evict_oldest(f->seg, &got), 0);
    assert_int_equal(got, page[0]);
    assert_int_equal(pool_nfree(f->pool), 3); /* evicting holds its page */
    assert_int_equal(seg_free(f->seg, got), 0);
    assert_int_equal(pool_nfree(f->pool), 4);
    /* the freed page 2 is not offered for eviction */
    assert_int_equal(seg_evict_oldest(f->seg, &got), 0);
    assert_int_equal(got, page[1]);
    assert_int_equal(seg_free(f->seg, got), 0);
    assert_int_equal(seg_free(f->seg, page[3]), 0);
    assert_int_equal(pool_nfree(f->pool), 6);
    seg_stats(f->seg, &st);
    assert_int_equal(st.open + st.sealed + st.evicting, 0);
    assert_int_equal(st.opened, 4);
    assert_int_equal(st.freed, 4);
    check(f);
}

/* A restart adopts segments from their PMEM headers: sealed, in the age
 * list by seq_base whatever the adoption order, their pages taken. */
static void
test_adopt(void **state)
{
    struct fixture *f = fixture_new(5, 100);
    struct seg_config cfg = {
        .ops = {rec_copy, rec_store32, rec_fence, nvs_crc32c},
        .seq = &f->seq,
    };
    struct seg_open o;
    struct seg_info si;
    uint32_t page[3], got;
    uint64_t seq[3];

    *state = f;
    seg_open_init(&o, 1);
    for (unsigned b = 0; b < 3; b++) {
        uint64_t off;

        assert_int_equal(seg_reserve(f->seg, &o, b, 8, &off), 0);
        page[b] = page_of(off);
        seq[b] = seg_seq_of(f->seg, off) - in_page(off) / 4;
    }
    seg_seal_all(f->seg, &o);
    /* a restart: new DRAM state over the same pages */
    seg_destroy(f->seg);
    pool_destroy(f->pool);
    assert_int_equal(
        pool_create(f->mem, (uint64_t)f->npages * POOL_PAGE_SIZE, 0, &f->pool),
        0);
    assert_int_equal(seg_create(&cfg, f->pool, &f->seg), 0);

    assert_int_equal(seg_adopt(f->seg, page[0], 12), -EINVAL); /* unaligned */
    assert_int_equal(seg_adopt(f->seg, page[0], 4), -EINVAL);  /* in header */
    assert_int_equal(seg_adopt(f->seg, 4, 64), -EINVAL);       /* no header */
    assert_int_equal(seg_adopt(f->seg, page[2], 72), 0);
    assert_int_equal(seg_adopt(f->seg, page[0], 64), 0);
    assert_int_equal(seg_adopt(f->seg, page[1], POOL_PAGE_SIZE), 0);
    assert_int_equal(seg_adopt(f->seg, page[1], 64), -EBUSY); /* twice */
    assert_int_equal(pool_nfree(f->pool), 2);
    check(f);
    seg_info(f->seg, page[2], &si);
    assert_int_equal(si.state, SEG_SEALED);
    assert_int_equal(si.seq_base, seq[2]);
    assert_int_equal(si.write_off, 72);
    assert_int_equal(si.bucket, 2);
    assert_int_equal(si.exp_base, FAKE_NOW + seg_bucket_ttl_lo(2));
    assert_int_equal(
        seg_seq_of(f->seg, ((uint64_t)page[1] << POOL_PAGE_SHIFT) + 64),
        seq[1] + 16);
    /* oldest first, whatever the adoption order */
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(seg_evict_oldest(f->seg, &got), 0);
        assert_int_equal(got, page[i]);
        assert_int_equal(seg_free(f->seg, got), 0);
    }
    assert_int_equal(pool_nfree(f->pool), 5);
    check(f);
}

/* An empty pool: the reserve fails and the open segment stays as it was;
 * a page freed lets it through. */
static void
test_enospc_keeps_open(void **state)
{
    struct fixture *f = fixture_new(2, 0);
    struct seg_open o;
    struct seg_info si;
    uint64_t a, b, c;

    *state = f;
    seg_open_init(&o, 1);
    assert_int_equal(seg_reserve(f->seg, &o, 0, SEG_PAYLOAD - 8, &a), 0);
    assert_int_equal(seg_reserve(f->seg, &o, 1, 8, &b), 0);
    assert_int_equal(pool_nfree(f->pool), 0);
    assert_int_equal(seg_reserve(f->seg, &o, 0, 12, &c), -ENOSPC);
    seg_info(f->seg, page_of(a), &si);
    assert_int_equal(si.state, SEG_OPEN);
    assert_int_equal(si.write_off, POOL_PAGE_SIZE - 8);
    assert_int_equal(o.page[0], page_of(a));
    /* what still fits still goes there */
    assert_int_equal(seg_reserve(f->seg, &o, 0, 8, &c), 0);
    assert_int_equal(c, a + SEG_PAYLOAD - 8);

    seg_seal(f->seg, &o, 1);
    assert_int_equal(seg_free(f->seg, page_of(b)), 0);
    assert_int_equal(seg_reserve(f->seg, &o, 0, 12, &c), 0);
    assert_int_equal(page_of(c), page_of(b));
    assert_int_equal(state_of(f, page_of(a)), SEG_SEALED);
    check(f);
}

/* With open_max 2, a third owner gets -EUSERS and takes no page; an
 * owner at the cap may still replace its full segment; once one seals,
 * the third opens. */
static void
test_open_cap(void **state)
{
    fixture_open_max = 2;
    struct fixture *f = fixture_new(8, 0);
    fixture_open_max = 0;
    struct seg_open o1, o2, o3;
    struct seg_stats st;
    uint64_t a, b, c;

    *state = f;
    seg_open_init(&o1, 1);
    seg_open_init(&o2, 2);
    seg_open_init(&o3, 3);
    assert_int_equal(seg_reserve(f->seg, &o1, 0, SEG_PAYLOAD, &a), 0);
    assert_int_equal(seg_reserve(f->seg, &o2, 0, 8, &b), 0);
    uint32_t nfree = pool_nfree(f->pool);
    assert_int_equal(seg_reserve(f->seg, &o3, 0, 8, &c), -EUSERS);
    assert_int_equal(pool_nfree(f->pool), nfree);
    assert_int_equal(o3.page[0], SEG_NO_PAGE);
    /* o1's segment is full: its next one replaces it */
    assert_int_equal(seg_reserve(f->seg, &o1, 0, 8, &c), 0);
    assert_int_equal(state_of(f, page_of(a)), SEG_SEALED);
    seg_stats(f->seg, &st);
    assert_int_equal(st.open, 2);
    assert_int_equal(st.open_max, 2);
    /* a second bucket of o2 would be one more segment: its open one takes
     * the span instead */
    assert_int_equal(seg_reserve(f->seg, &o2, 1, 8, &c), 0);
    assert_int_equal(page_of(c), page_of(b));
    assert_int_equal(o2.page[1], SEG_NO_PAGE);
    seg_seal(f->seg, &o2, 0);
    assert_int_equal(seg_reserve(f->seg, &o3, 0, 8, &c), 0);
    seg_stats(f->seg, &st);
    assert_int_equal(st.open, 2);
    assert_true(seg_dram_bytes(f->seg) >= 8 * 64);
    check(f);
}

static uint32_t
expect_hcrc(const struct seg_header *h)
{
    uint32_t crc = nvs_crc32c(0, h, offsetof(struct seg_header, hcrc));

    return crc ? crc : 1;
}

/* The header as the design lays it out, committed by hcrc, written with no
 * lock held; 0 in hcrc after eviction and after a free. */
static void
test_header(void **state)
{
    struct fixture *f = fixture_new(4, 41);
    static const uint8_t zero[28];
    const struct seg_header *h;
    struct seg_open o;
    struct seg_info si;
    uint64_t off, off2;
    uint32_t page, got;
    const uint8_t *pay;

    *state = f;
    seg_open_init(&o, 9);
    assert_int_equal(seg_reserve(f->seg, &o, 5, 100, &off), 0);
    page = page_of(off);
    h = header_of(f, page);
    seg_info(f->seg, page, &si);
    assert_int_equal(h->magic, SEG_MAGIC);
    assert_memory_equal(h, "TCSG", 4);
    assert_int_equal(h->version, SEG_VERSION);
    assert_int_equal(h->ttl_bucket, 5);
    assert_int_equal(h->sflags, 0);
    assert_int_equal(h->seq_base, 42);
    assert_int_equal(h->seq_base, si.seq_base);
    assert_int_equal(h->created, FAKE_NOW);
    assert_int_equal(h->exp_base, FAKE_NOW + seg_bucket_ttl_lo(5));
    assert_int_equal(si.exp_base, h->exp_base);
    assert_int_equal(h->page, page);
    assert_int_equal(h->open_count, 7);
    assert_memory_equal(h->reserved, zero, sizeof(zero));
    assert_int_equal(h->hcrc, expect_hcrc(h));
    assert_true(seg_header_valid(f->seg, page));
    /* the first slot is zeroed, the rest of the page left alone */
    pay = (const uint8_t *)h + SEG_HEADER_SIZE;
    for (unsigned i = 0; i < SEG_FIRST_SLOT_ZERO; i++)
        assert_int_equal(pay[i], 0);
    assert_int_equal(pay[SEG_FIRST_SLOT_ZERO], POOL_PATTERN);
    /* every PMEM write ran with no lock held */
    assert_true(atomic_load(&pm_calls) >= 2);
    assert_int_equal(atomic_load(&max_depth), 0);

    /* a header of another page, or a changed byte, is not valid */
    assert_false(seg_header_valid(f->seg, page + 1));
    ((uint8_t *)f->mem)[((uint64_t)page << POOL_PAGE_SHIFT) + 20] ^= 1;
    assert_false(seg_header_valid(f->seg, page));
    ((uint8_t *)f->mem)[((uint64_t)page << POOL_PAGE_SHIFT) + 20] ^= 1;
    assert_true(seg_header_valid(f->seg, page));

    /* eviction zeroes hcrc at once */
    seg_seal(f->seg, &o, 5);
    assert_int_equal(seg_evict_oldest(f->seg, &got), 0);
    assert_int_equal(got, page);
    assert_int_equal(h->hcrc, 0);
    assert_false(seg_header_valid(f->seg, page));
    assert_int_equal(seg_free(f->seg, page), 0);
    assert_int_equal(h->hcrc, 0);

    /* a free of a sealed segment zeroes it too; the reused page gets a
     * new header */
    assert_int_equal(seg_reserve(f->seg, &o, 0, 100, &off2), 0);
    assert_int_equal(page_of(off2), page); /* lowest free page again */
    assert_true(seg_header_valid(f->seg, page));
    assert_int_equal(h->ttl_bucket, 0);
    assert_int_equal(h->exp_base, FAKE_NOW);
    assert_int_equal(h->seq_base, 42 + SEG_SEQ_BLOCK);
    seg_seal(f->seg, &o, 0);
    assert_int_equal(seg_free(f->seg, page), 0);
    assert_int_equal(h->hcrc, 0);
    assert_int_equal(atomic_load(&max_depth), 0);
    check(f);
}

/* --- two threads --- */

#define THREAD_RESERVES 4000

struct worker {
    struct fixture *f;
    uint16_t id;
    uint64_t seed;
    int rc;
    uint64_t off[THREAD_RESERVES];
    uint32_t len[THREAD_RESERVES];
};

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = w->seed | 1;
    struct seg_open o;

    seg_open_init(&o, w->id);
    for (int i = 0; i < THREAD_RESERVES; i++) {
        uint32_t n = 4 * (1 + (uint32_t)(rng_next(&rng) % 300));
        unsigned b = (unsigned)(rng_next(&rng) % 3);
        int rc = seg_reserve(w->f->seg, &o, b, n, &w->off[i]);

        if (rc != 0) {
            w->rc = rc;
            break;
        }
        w->len[i] = n;
        /* fill the span with the thread's mark: an overlap shows below */
        pm_set(w->f->mem + w->off[i], w->id, n);
    }
    seg_seal_all(w->f->seg, &o);
    return NULL;
}

static void
test_two_threads(void **state)
{
    /* 2 x 4000 x 602 B on average: about 5 MB, 3 buckets a thread */
    struct fixture *f = fixture_new(24, 0);
    uint64_t seed = alloc_test_seed();
    struct worker *w = calloc(2, sizeof(*w));
    pthread_t t[2];
    struct seg_stats st;
    uint32_t got, nfreed = 0;

    *state = f;
    assert_non_null(w);
    for (int i = 0; i < 2; i++) {
        w[i].f = f;
        w[i].id = (uint16_t)(0x11 * (i + 1));
        w[i].seed = seed + (uint64_t)i;
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_SEED(w[i].rc == 0, seed, "thread %d: %d", i, w[i].rc);
        for (int k = 0; k < THREAD_RESERVES; k++) {
            const uint8_t *p = (const uint8_t *)f->mem + w[i].off[k];

            CHECK_SEED(seen_add(f, w[i].off[k], w[i].len[k]), seed,
                       "overlap at %llu", (unsigned long long)w[i].off[k]);
            CHECK_SEED(p[0] == w[i].id && p[w[i].len[k] - 1] == w[i].id, seed,
                       "span overwritten");
        }
    }
    check(f);
    seg_stats(f->seg, &st);
    assert_int_equal(st.open, 0);
    assert_int_equal(st.sealed, st.opened);
    assert_int_equal(pool_nfree(f->pool) + st.sealed, 24);
    while (seg_evict_oldest(f->seg, &got) == 0 && nfreed < 24) {
        assert_int_equal(seg_free(f->seg, got), 0);
        nfreed++;
    }
    assert_int_equal(nfreed, st.opened);
    assert_int_equal(pool_nfree(f->pool), 24);
    assert_int_equal(atomic_load(&max_depth), 0);
    free(w);
}

/* Two threads reserve in a pool too small for what they ask while this
 * one evicts the oldest sealed segment and frees it: every span lies in
 * an open segment of its thread, every evicted one has hcrc 0 at once,
 * and the pages all come back. */

#define EVICT_RESERVES 3000
#define EVICT_DEADLINE_NS (60ull * 1000000000ull)

struct evict_worker {
    struct fixture *f;
    uint16_t id;
    uint64_t seed;
    uint64_t deadline;
    int rc;
    int bad; /* spans outside an open segment of this thread */
    _Atomic bool done;
};

static void *
evict_worker_main(void *arg)
{
    struct evict_worker *w = arg;
    uint64_t rng = w->seed | 1;
    struct seg_open o;

    seg_open_init(&o, w->id);
    for (int i = 0; i < EVICT_RESERVES && w->rc == 0; i++) {
        uint32_t n = 4 * (1 + (uint32_t)(rng_next(&rng) % 2000));
        unsigned b = (unsigned)(rng_next(&rng) % 2);
        struct seg_info si;
        uint64_t off;
        int rc;

        /* no free page: seal what this thread holds, so the evictor has
         * something, and wait (bounded) for a page */
        while ((rc = seg_reserve(w->f->seg, &o, b, n, &off)) == -ENOSPC &&
               clock_nsec() < w->deadline) {
            seg_seal_all(w->f->seg, &o);
            sched_yield();
        }
        if (rc != 0) {
            w->rc = rc;
            break;
        }
        seg_info(w->f->seg, page_of(off), &si);
        if (si.state != SEG_OPEN || si.owner != w->id ||
            in_page(off) + n > si.write_off)
            w->bad++;
        pm_set(w->f->mem + off, w->id, n);
    }
    seg_seal_all(w->f->seg, &o);
    atomic_store(&w->done, true);
    return NULL;
}

static void
test_evict_while_reserving(void **state)
{
    /* 2 x 3000 x ~4 KB: about 24 MB through 6 pages */
    struct fixture *f = fixture_new(6, 0);
    uint64_t seed = alloc_test_seed();
    struct evict_worker w[2];
    pthread_t t[2];
    struct seg_stats st;
    uint64_t deadline = clock_nsec() + EVICT_DEADLINE_NS, evicted = 0;
    uint32_t got;
    int zero_bad = 0;

    *state = f;
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 2; i++) {
        w[i].f = f;
        w[i].id = (uint16_t)(0x21 * (i + 1));
        w[i].seed = seed + (uint64_t)i;
        w[i].deadline = deadline;
        assert_int_equal(pthread_create(&t[i], NULL, evict_worker_main, &w[i]),
                         0);
    }
    while (!(atomic_load(&w[0].done) && atomic_load(&w[1].done)) &&
           clock_nsec() < deadline) {
        if (seg_evict_oldest(f->seg, &got) != 0) {
            sched_yield();
            continue;
        }
        if (header_of(f, got)->hcrc != 0 || state_of(f, got) != SEG_EVICTING)
            zero_bad++;
        assert_int_equal(seg_free(f->seg, got), 0);
        evicted++;
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_SEED(w[i].rc == 0, seed, "thread %d: %d", i, w[i].rc);
        CHECK_SEED(w[i].bad == 0, seed, "thread %d: %d spans outside", i,
                   w[i].bad);
    }
    assert_int_equal(zero_bad, 0);
    check(f);
    while (seg_evict_oldest(f->seg, &got) == 0 && evicted < 100000) {
        assert_int_equal(seg_free(f->seg, got), 0);
        evicted++;
    }
    seg_stats(f->seg, &st);
    assert_true(st.opened > 6); /* pages were reused */
    assert_int_equal(st.freed, st.opened);
    assert_int_equal(evicted, st.opened);
    assert_int_equal(pool_nfree(f->pool), 6);
    assert_int_equal(atomic_load(&max_depth), 0);
    check(f);
}

/* TTL buckets: 4 open a thread; a fifth bucket's span goes to the nearest
 * longer bucket's segment (0, no expiry, the longest), or, with none
 * longer, to a new segment of its own that replaces the least recently
 * used; a span given back is taken again. */
static void
test_bucket_policy(void **state)
{
    struct fixture *f = fixture_new(12, 0);
    struct seg_open o;
    uint64_t off[SEG_NBUCKETS], x, y;
    static const unsigned open4[] = {3, 5, 7, 9};

    *state = f;
    seg_open_init(&o, 1);
    for (unsigned i = 0; i < 4; i++)
        assert_int_equal(seg_reserve(f->seg, &o, open4[i], 8, &off[open4[i]]),
                         0);
    assert_int_equal(o.nopen, 4);
    /* bucket 4: 5 is the nearest longer */
    assert_int_equal(seg_pick_bucket(&o, 4), 5);
    assert_int_equal(seg_open_exp_base(f->seg, &o, 4),
                     FAKE_NOW + seg_bucket_ttl_lo(5));
    assert_int_equal(seg_reserve(f->seg, &o, 4, 8, &x), 0);
    assert_int_equal(page_of(x), page_of(off[5]));
    assert_int_equal(o.page[4], SEG_NO_PAGE);
    /* bucket 1: 3 */
    assert_int_equal(seg_reserve(f->seg, &o, 1, 8, &x), 0);
    assert_int_equal(page_of(x), page_of(off[3]));
    /* given back: the next span takes its place */
    seg_unreserve(f->seg, &o, x, 8);
    assert_int_equal(seg_reserve(f->seg, &o, 1, 12, &y), 0);
    assert_int_equal(y, x);
    /* bucket 12: none longer open: its own, replacing the least recently
     * used (7: 3 and 5 took spans since, 9 was opened after it) */
    assert_int_equal(seg_pick_bucket(&o, 12), 12);
    assert_int_equal(seg_open_exp_base(f->seg, &o, 12), 0);
    assert_int_equal(seg_reserve(f->seg, &o, 12, 8, &x), 0);
    assert_int_equal(o.nopen, 4);
    assert_int_equal(o.page[7], SEG_NO_PAGE);
    assert_int_equal(state_of(f, page_of(off[7])), SEG_SEALED);
    assert_int_equal(o.page[12], page_of(x));
    /* bucket 0 is longer than any: a set of it replaces one too (9, now
     * the least recently used), and then takes bucket 15's sets */
    assert_int_equal(seg_reserve(f->seg, &o, 0, 8, &x), 0);
    assert_int_equal(o.page[9], SEG_NO_PAGE);
    assert_int_equal(o.nopen, 4);
    assert_int_equal(seg_reserve(f->seg, &o, 15, 8, &y), 0);
    assert_int_equal(page_of(y), page_of(x));
    /* no page left for a fifth bucket's own: seg_seal_for seals the one
     * it would replace */
    assert_true(seg_seal_for(f->seg, &o, 14));
    assert_int_equal(o.nopen, 3);
    seg_seal_all(f->seg, &o);
    assert_int_equal(o.nopen, 0);
    assert_false(seg_seal_for(f->seg, &o, 14));
    check(f);
}

/* exp_max: raised to the latest expiry, never lowered; a sealed segment
 * goes once it has passed, an open one never, a flushed one (its whole
 * block) at once. */
static void
test_evict_expired(void **state)
{
    struct fixture *f = fixture_new(8, 0);
    struct seg_open o;
    struct seg_info si;
    uint64_t a, b, c;
    uint32_t got;

    *state = f;
    seg_open_init(&o, 1);
    assert_int_equal(seg_reserve(f->seg, &o, 2, 8, &a), 0);
    assert_int_equal(seg_reserve(f->seg, &o, 3, 8, &b), 0);
    assert_int_equal(seg_reserve(f->seg, &o, 4, 8, &c), 0);
    seg_exp_raise(f->seg, a, FAKE_NOW + 20);
    seg_exp_raise(f->seg, a, FAKE_NOW + 10); /* never lowered */
    seg_exp_raise(f->seg, b, FAKE_NOW + 30);
    seg_exp_raise(f->seg, c, FAKE_NOW + 5);
    seg_info(f->seg, page_of(a), &si);
    assert_int_equal(si.exp_max, FAKE_NOW + 20);
    /* c's is open: never handed out */
    assert_int_equal(seg_evict_expired(f->seg, FAKE_NOW + 100, 0, 8, &got),
                     -ENOENT);
    seg_seal(f->seg, &o, 2);
    seg_seal(f->seg, &o, 3);
    assert_int_equal(seg_evict_expired(f->seg, FAKE_NOW + 19, 0, 8, &got),
                     -ENOENT);
    assert_int_equal(seg_evict_expired(f->seg, FAKE_NOW + 20, 0, 8, &got), 0);
    assert_int_equal(got, page_of(a));
    assert_int_equal(state_of(f, got), SEG_EVICTING);
    assert_int_equal(seg_free(f->seg, got), 0);
    seg_info(f->seg, got, &si);
    assert_int_equal(si.exp_max, UINT32_MAX); /* free: never a candidate */
    /* b's segment: not expired, but a flush covered its whole block */
    seg_info(f->seg, page_of(b), &si);
    assert_int_equal(
        seg_evict_expired(f->seg, FAKE_NOW + 20, si.seq_base, 8, &got),
        -ENOENT);
    assert_int_equal(seg_evict_expired(f->seg, FAKE_NOW + 20,
                                       si.seq_base + SEG_SEQ_BLOCK - 1, 8,
                                       &got),
                     0);
    assert_int_equal(got, page_of(b));
    check(f);
}

/* seg_reserve_open, the inline fast path: -EAGAIN with nothing changed
 * when b has no open segment or the span does not fit (seg_reserve then
 * opens one), else the span seg_reserve would have given, the bump seen by
 * seg_info; seg_rec_exp_raise raises exp_max as seg_exp_raise does. */
static void
test_reserve_open_inline(void **state)
{
    struct fixture *f = fixture_new(4, 0);
    char *recs = seg_records(f->seg);
    struct seg_open o;
    struct seg_info si;
    uint64_t a = 0, b = 0, x = 77;

    *state = f;
    seg_open_init(&o, 1);
    assert_int_equal(seg_reserve_open(recs, &o, 2, 8, &x), -EAGAIN);
    assert_int_equal(x, 77);
    assert_int_equal(seg_reserve(f->seg, &o, 2, 8, &a), 0);
    uint32_t tick = o.tick;
    assert_int_equal(seg_reserve_open(recs, &o, 2, 10, &b), 0);
    assert_int_equal(b, a + 8);
    assert_int_equal(o.tick, tick + 1);
    assert_int_equal(o.used[2], o.tick);
    seg_info(f->seg, page_of(a), &si);
    assert_int_equal(si.write_off, SEG_HEADER_SIZE + 8 + 12);
    assert_int_equal(seg_reserve_open(recs, &o, 3, 8, &x), -EAGAIN);
    assert_int_equal(seg_reserve_open(recs, &o, 2, 0, &x), -EAGAIN);
    /* the rest of the page fits exactly; then nothing does */
    uint32_t rest = POOL_PAGE_SIZE - si.write_off;
    assert_int_equal(seg_reserve_open(recs, &o, 2, rest + 4, &x), -EAGAIN);
    seg_info(f->seg, page_of(a), &si);
    assert_int_equal(si.write_off, SEG_HEADER_SIZE + 20);
    assert_int_equal(seg_reserve_open(recs, &o, 2, rest, &x), 0);
    assert_int_equal(x, b + 12);
    assert_int_equal(seg_reserve_open(recs, &o, 2, 4, &x), -EAGAIN);
    seg_info(f->seg, page_of(a), &si);
    assert_int_equal(si.write_off, POOL_PAGE_SIZE);
    assert_int_equal(si.exp_max, 0);
    seg_rec_exp_raise(recs, a, FAKE_NOW + 20);
    seg_rec_exp_raise(recs, a, FAKE_NOW + 10); /* never lowered */
    seg_info(f->seg, page_of(a), &si);
    assert_int_equal(si.exp_max, FAKE_NOW + 20);
    check(f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_bad_args, teardown),
        cmocka_unit_test_teardown(test_buckets, teardown),
        cmocka_unit_test_teardown(test_reserve_spans, teardown),
        cmocka_unit_test_teardown(test_full_segment_seals, teardown),
        cmocka_unit_test_teardown(test_seq_blocks, teardown),
        cmocka_unit_test_teardown(test_age_order, teardown),
        cmocka_unit_test_teardown(test_free_returns_pages, teardown),
        cmocka_unit_test_teardown(test_enospc_keeps_open, teardown),
        cmocka_unit_test_teardown(test_open_cap, teardown),
        cmocka_unit_test_teardown(test_bucket_policy, teardown),
        cmocka_unit_test_teardown(test_evict_expired, teardown),
        cmocka_unit_test_teardown(test_header, teardown),
        cmocka_unit_test_teardown(test_adopt, teardown),
        cmocka_unit_test_teardown(test_two_threads, teardown),
        cmocka_unit_test_teardown(test_evict_while_reserving, teardown),
        cmocka_unit_test_teardown(test_reserve_open_inline, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

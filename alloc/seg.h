#pragma once
/*
 * Segments of the packed small-item store (doc/design/small-items.md,
 * "Segments"): a segment is one pool page, filled front to back by one
 * thread with 4-byte aligned spans, then sealed, and in the end evicted and
 * freed whole. This module knows pages, offsets and sequence numbers, not
 * items: the caller writes what goes into a span.
 *
 * - A DRAM record per pool page (struct seg_rec in seg.c, 64 bytes): state
 *   (free, open, sealed, evicting), seq_base, created, exp_base, write
 *   offset, owner thread and TTL bucket, links of the age list.
 * - Each thread keeps its open segments in a struct seg_open of its own,
 *   one per TTL bucket: seg_reserve() takes no lock while the span fits.
 *   When it does not, a new page comes from the pool (the pool lock), the
 *   new segment is linked and given its sequence block (the segment lock,
 *   DRAM only), the old one sealed, and the new one's PMEM header written
 *   with no lock held.
 * - Sequence blocks: opening takes SEG_SEQ_BLOCK values from the caller's
 *   counter (the engine's CAS counter, which holds the last value handed
 *   out: the block is [old + 1, old + SEG_SEQ_BLOCK]); a span's sequence is
 *   seq_base + its offset in the page / 4, unique across segments.
 * - Age order: segments are linked at open, in seq_base order (the block is
 *   taken under the same lock); seg_evict_oldest() takes the oldest sealed
 *   one, stepping over open ones.
 * - PMEM: every store goes through the caller's helpers (struct seg_ops:
 *   the engine passes tier/pm.c's and nvs_crc32c), since alloc/ sits below
 *   tier/ and never calls libpmem.
 *
 * Concurrency: see the top of alloc/seg.c.
 */

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/pool.h"
#include "alloc/seg_layout.h"

#define SEG_SEQ_BLOCK (1ull << 18) /* POOL_PAGE_SIZE / 4 positions */
#define SEG_NBUCKETS 16u
/* Open segments a thread keeps at most (its latest buckets). */
#define SEG_OPEN_PER_THREAD 4u
#define SEG_NO_PAGE POOL_NO_PAGE
/* Largest span: the page after its header. */
#define SEG_PAYLOAD (POOL_PAGE_SIZE - SEG_HEADER_SIZE)

struct seg;

typedef void seg_copy_fn(void *pmem_dst, const void *src, size_t n);
typedef void seg_store32_fn(uint32_t *pmem_dst, uint32_t v);
typedef void seg_fence_fn(void);
typedef uint32_t seg_crc32c_fn(uint32_t crc, const void *p, uint64_t n);

/* The PMEM write helpers (tier/pm.h's pm_copy, pm_store32, pm_fence) and
 * the CRC32C (tier/nvs.h's nvs_crc32c, continuing from crc, 0 to start). */
struct seg_ops {
    seg_copy_fn *copy;
    seg_store32_fn *store32;
    seg_fence_fn *fence;
    seg_crc32c_fn *crc32c;
};

struct seg_config {
    /* The counter sequence blocks come from; the caller owns it and may
     * take single values from it too (fetch_add 1, + 1). */
    _Atomic uint64_t *seq;
    struct seg_ops ops;
    uint32_t open_count; /* stored in every header (diagnostics) */
    /* Optional: called with a page the store just took, before its
     * header is written, no lock held (the engine marks the page as a
     * segment in its restart page table). */
    void (*page_open)(void *arg, uint32_t page);
    void *page_arg;
    /* At most this many segments open at once (0: no cap). A small pool
     * whose every page is some thread's open segment has none to evict. */
    uint32_t open_max;
};

/* A thread's open segments, at most one per TTL bucket (SEG_NO_PAGE:
 * none) and SEG_OPEN_PER_THREAD in all. Lives in the thread's context;
 * only its owner uses it. */
struct seg_open {
    uint32_t page[SEG_NBUCKETS];
    uint32_t used[SEG_NBUCKETS]; /* tick of the bucket's last reserve */
    uint32_t tick;
    uint16_t nopen;         /* pages that are not SEG_NO_PAGE */
    uint16_t owner;         /* the thread's number, kept in its records */
    pthread_t owner_thread; /* debug checks */
    bool uncapped;          /* opens past cfg->open_max (the engine's merge
                               eviction: one segment a bucket, not a thread's) */
};

enum seg_state {
    SEG_FREE = 0,
    SEG_OPEN,
    SEG_SEALED,
    SEG_EVICTING,
};

/* A snapshot of one record. */
struct seg_info {
    uint32_t dead; /* bytes dead (seg_dead_add) */
    enum seg_state state;
    uint8_t bucket;
    uint16_t owner;
    uint32_t write_off; /* next free byte in the page */
    uint32_t created;
    uint32_t exp_base;
    uint32_t exp_max; /* the latest expiry of its items (seg_exp_raise) */
    uint64_t seq_base;
};

struct seg_stats {
    uint32_t open;
    uint32_t open_max; /* the cap, 0 none */
    uint32_t sealed;
    uint32_t evicting;
    uint64_t opened; /* segments opened since create */
    uint64_t freed;  /* segments freed since create */
};

/* cfg->seq and every op are required. 0, -EINVAL or -ENOMEM. */
int seg_create(const struct seg_config *cfg, struct pool *pool,
               struct seg **out);
/* DRAM only: pages still held stay taken in the pool. */
void seg_destroy(struct seg *s);

/* Lowest TTL (seconds) of bucket b: 0, 1, 2^(b+2) for 2..14, 2^17. */
uint32_t seg_bucket_ttl_lo(unsigned b);
/* The bucket of a TTL in seconds (0: never expires). */
unsigned seg_bucket_of(uint32_t ttl);

/* An empty set of open segments for the calling thread, numbered owner. */
void seg_open_init(struct seg_open *o, uint16_t owner);

/* A span of n bytes (rounded up to 4) for a set of TTL bucket b: *off is
 * its pool offset (page << POOL_PAGE_SHIFT | offset in the page, the
 * offset at least SEG_HEADER_SIZE and 4-aligned). The segment it takes
 * (seg_pick_bucket): o's open one of b; with SEG_OPEN_PER_THREAD others
 * open, the nearest longer bucket's (0, no expiry, is the longest), else
 * a new one of b that replaces o's least recently used (sealed). When the
 * span does not fit a new segment of that bucket is opened and the full
 * one sealed; when the cap of open segments (open_max) refuses a new one
 * that replaces none, o's nearest other open segment takes the span. 0;
 * -EINVAL (b out of range, n 0); -E2BIG (n > SEG_PAYLOAD); -ENOSPC (the
 * pool has no free page) or -EUSERS (the cap, and o has no segment to
 * take it): o's segments stay as they were. Context: o's owner. Locks:
 * none while the span fits, else pool, then the segment lock, one after
 * the other. PMEM: the new segment's header, no lock held. */
int seg_reserve(struct seg *s, struct seg_open *o, unsigned b, uint32_t n,
                uint64_t *off);

/* The bucket whose segment a reserve for b uses (it may need opening). */
unsigned seg_pick_bucket(const struct seg_open *o, unsigned b);

/* The exp_base of the open segment a reserve for b takes now, or 0 when
 * it would open one (whose exp_base is then about now + the bucket's
 * lowest TTL). Context: o's owner. */
uint32_t seg_open_exp_base(const struct seg *s, const struct seg_open *o,
                           unsigned b);
/* The seq_base of that segment, or UINT64_MAX when a reserve for b would
 * open one (its block is then above every sequence given so far).
 * Context: o's owner. */
uint64_t seg_open_seq_base(const struct seg *s, const struct seg_open *o,
                           unsigned b);

/* Give back the span at off of n bytes, the last one o reserved (its
 * segment still o's open one): the next reserve may take the place
 * again. Context: o's owner. No lock, no PMEM. */
void seg_unreserve(struct seg *s, struct seg_open *o, uint64_t off, uint32_t n);

/* The exp_base of the segment holding pool offset off (not free). */
uint32_t seg_exp_base(const struct seg *s, uint64_t off);

/* The fields of a segment's record that the engine's get and set read
 * for every packed item, inline (a call each cost a get some 20
 * instructions): seg_records() gives the array of records, one of
 * SEG_REC_SIZE bytes a pool page, fixed for s's life; seq_base and
 * exp_base sit at these offsets in a record (seg.c asserts them). Read
 * as seg_seq_of and seg_exp_base do: plain loads of fields written at the
 * segment's open, before any of its items was published. write_off and
 * exp_max, relaxed atomics, are bumped and raised inline likewise
 * (seg_reserve_open, seg_rec_exp_raise: a set's every reserve). */
#define SEG_REC_SIZE 64u
#define SEG_REC_SEQ_BASE 0u
#define SEG_REC_EXP_BASE 8u
#define SEG_REC_WRITE_OFF 16u /* _Atomic uint32_t, the owner's while open */
#define SEG_REC_EXP_MAX 20u   /* _Atomic uint32_t, seg_exp_raise's */
#define SEG_REC_DEAD 24u      /* _Atomic uint32_t, seg_dead_add's */
char *seg_records(const struct seg *s);

/* seg_seq_of's segment part: the seq_base of the segment holding pool
 * offset off, from seg_records' array. */
static inline uint64_t
seg_rec_seq_base(const char *recs, uint64_t off)
{
    uint64_t v;
    __builtin_memcpy(
        &v, recs + (off >> POOL_PAGE_SHIFT) * SEG_REC_SIZE + SEG_REC_SEQ_BASE,
        sizeof(v));
    return v;
}

/* seg_exp_base from seg_records' array. */
static inline uint32_t
seg_rec_exp_base(const char *recs, uint64_t off)
{
    uint32_t v;
    __builtin_memcpy(
        &v, recs + (off >> POOL_PAGE_SHIFT) * SEG_REC_SIZE + SEG_REC_EXP_BASE,
        sizeof(v));
    return v;
}

/* An item of the segment holding pool offset off (open or sealed)
 * expires at exp (UINT32_MAX: never): its exp_max rises to it if below.
 * A relaxed atomic max, any thread, no lock (a store, a touch in place,
 * a restart's scan). */
void seg_exp_raise(struct seg *s, uint64_t off, uint32_t exp);

/* seg_exp_raise on seg_records' array, inline (a set's usual case is one
 * load that finds exp_max already at or above exp). */
static inline void
seg_rec_exp_raise(char *recs, uint64_t off, uint32_t exp)
{
    _Atomic uint32_t *m =
        (_Atomic uint32_t *)(void *)(recs +
                                     (off >> POOL_PAGE_SHIFT) * SEG_REC_SIZE +
                                     SEG_REC_EXP_MAX);
    uint32_t cur = atomic_load_explicit(m, memory_order_relaxed);

    while (cur < exp &&
           !atomic_compare_exchange_weak_explicit(
               m, &cur, exp, memory_order_relaxed, memory_order_relaxed))
        ;
}

/* seg_reserve's fast path, inline: a span of n bytes (1..SEG_PAYLOAD,
 * rounded up to 4) in o's open segment of bucket b itself, when it has
 * one and the span fits: 0 with *off, as seg_reserve would give it (it
 * picks b's own open segment first too). Else -EAGAIN and nothing
 * changed: seg_reserve decides (a new segment, another bucket's, the
 * cap). Context: o's owner (write_off is the owner's while open). No
 * lock, no PMEM. */
static inline int
seg_reserve_open(char *recs, struct seg_open *o, unsigned b, uint32_t n,
                 uint64_t *off)
{
    uint32_t page = o->page[b];
    uint32_t n4 = (n + 3) & ~3u;

    assert(pthread_equal(o->owner_thread, pthread_self()));
    if (page == SEG_NO_PAGE || n == 0)
        return -EAGAIN;
    _Atomic uint32_t *w =
        (_Atomic uint32_t *)(void *)(recs + (uint64_t)page * SEG_REC_SIZE +
                                     SEG_REC_WRITE_OFF);
    uint32_t woff = atomic_load_explicit(w, memory_order_relaxed);
    if (n4 > POOL_PAGE_SIZE - woff) /* also n > SEG_PAYLOAD */
        return -EAGAIN;
    atomic_store_explicit(w, woff + n4, memory_order_relaxed);
    o->used[b] = ++o->tick;
    *off = ((uint64_t)page << POOL_PAGE_SHIFT) | woff;
    return 0;
}

/* seg_dead_add on seg_records' array, inline (a packed set's replaced
 * item: the call cost it some 10 instructions). */
static inline void
seg_rec_dead_add(char *recs, uint64_t off, uint32_t n)
{
    atomic_fetch_add_explicit(
        (_Atomic uint32_t *)(void *)(recs +
                                     (off >> POOL_PAGE_SHIFT) * SEG_REC_SIZE +
                                     SEG_REC_DEAD),
        n, memory_order_relaxed);
}

/* Take a sealed segment whose items have all expired (exp_max <= now) or
 * are all flushed (its whole sequence block at or below flush_seq) out of
 * the age list for eviction, as seg_evict: 0 with *page, or -ENOENT. Looks
 * at about budget records from a cursor the callers share (the flushed
 * one is the oldest sealed: looked at first), reading exp_max with no
 * lock and taking the segment lock for a candidate only. */
int seg_evict_expired(struct seg *s, uint32_t now, uint64_t flush_seq,
                      uint32_t budget, uint32_t *page);

/* Seal o's open segment of bucket b (none: nothing), or all of them (a
 * thread that leaves). Context: o's owner. Locks: the segment lock. */
void seg_seal(struct seg *s, struct seg_open *o, unsigned b);
void seg_seal_all(struct seg *s, struct seg_open *o);
/* Seal o's open segment on page (none: nothing). */
void seg_seal_page(struct seg *s, struct seg_open *o, uint32_t page);
/* No page and nothing sealed: seal the segment a reserve for b would use
 * or replace (else o's least recently used) so that it can be evicted.
 * False when o has none open. */
bool seg_seal_for(struct seg *s, struct seg_open *o, unsigned b);

/* Take a sealed segment out of the age list for eviction: hcrc = 0 stored
 * after the state change, with no lock held, before this returns, so its
 * items are gone after a crash even before the caller unlinks them.
 * seg_evict: that page, 0 or -EBUSY (not sealed). seg_evict_oldest: the
 * oldest sealed segment (lowest seq_base) in *page, 0 or -ENOENT. Locks:
 * the segment lock. */
int seg_evict(struct seg *s, uint32_t page);
int seg_evict_oldest(struct seg *s, uint32_t *page);
/* As seg_evict_oldest, but of the oldest window sealed segments the one
 * with the fewest live bytes (its span written less its dead bytes,
 * seg_dead_add), the oldest of those on a tie, and only if those are at
 * most live_max: -ENOENT otherwise. O(window) records under the segment
 * lock, DRAM only. */
int seg_evict_emptiest(struct seg *s, uint32_t window, uint32_t live_max,
                       uint32_t *page);

/* n bytes of the segment holding pool offset off are dead (an item that
 * left the index, a span never committed): they count against its live
 * bytes until it is freed. A relaxed atomic add, any thread, no lock. */
void seg_dead_add(struct seg *s, uint64_t off, uint32_t n);

/* Free a sealed or evicting segment: its page goes back to the pool, hcrc
 * 0 first if not yet (the caller has waited out any readers). 0, or -EBUSY
 * (free or open). Locks: segment, then pool, one after the other. */
int seg_free(struct seg *s, uint32_t page);

/* A restart takes page, whose PMEM header is valid (seg_header_valid), as
 * a sealed segment: its record from the header (seq_base, created,
 * exp_base, bucket), exp_max 0 (the scan raises it for each item it
 * restores: seg_exp_raise) and write_off (where its walk ended), linked in the
 * age list by seq_base, its page taken from the pool. 0; -EINVAL (write_off
 * outside the page or not 4-aligned, an invalid header); -EBUSY (the record
 * is not free, or the pool does not have the page free). Any thread: the
 * pool, then the segment lock, one after the other. PMEM: reads only. */
int seg_adopt(struct seg *s, uint32_t page, uint32_t write_off);

/* The sequence of the span at pool offset off (of a segment not free). */
uint64_t seg_seq_of(const struct seg *s, uint64_t off);

/* Whether page's PMEM header is a valid one of this page (magic, version,
 * page, hcrc). Reads PMEM only. */
bool seg_header_valid(const struct seg *s, uint32_t page);

/* Debug walker (tests): the age list runs head to tail in rising
 * seq_base through every open and sealed record and nothing else, its
 * links agree both ways, the state counts match the records, and no
 * write offset lies outside its page. 0, or -EUCLEAN with the first
 * broken rule in err_msg(). Locks: the segment lock. */
int seg_check(struct seg *s);

/* Snapshots. Locks: the segment lock. */
void seg_info(struct seg *s, uint32_t page, struct seg_info *out);
void seg_stats(struct seg *s, struct seg_stats *out);
/* The DRAM the store keeps (its records and itself), in bytes. */
uint64_t seg_dram_bytes(const struct seg *s);

#pragma once
/*
 * The packed small-item store in the engine (doc/design/small-items.md,
 * slice 3): which stores it takes, the span and write of an item, its
 * rewrite for a touch that does not fit the item's form, and FIFO
 * eviction of whole segments. The index, the store path's publication
 * and the reads are the engine's own (store.c, fetch.c), which call these.
 * See packed.c for the rules.
 */

#include "src/engine/cache.h"
#include "src/engine/pitem.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

/* A store's steps before its write are inline (packed_size,
 * packed_cas_below, packed_reserve_at's usual case): a call each, and
 * seg.c's for the open segment's sequence block, cost a packed set some
 * 50 instructions. */

/* The bytes a packed item of this shape takes, or 0 when it does not go
 * to the packed store (off, too large, a value the NVMe tier could
 * spill). exptime: absolute, 0 never; cas_new: a chosen CAS or 0. */
static inline uint32_t
packed_size(const struct cache *c, uint32_t klen, uint64_t vlen, uint32_t flags,
            uint32_t exptime, uint64_t cas_new)
{
    if (vlen > PITEM_VLEN_MAX || klen == 0 || klen > PITEM_KLEN_MAX)
        return 0;
    /* a value the flash tier could spill stays in a slab */
    if (c->ext && vlen >= c->cfg.ext_item_size)
        return 0;
    unsigned iflags = (flags > PITEM_CFLAGS_MASK ? PITEM_HAS_FLAGS : 0u) |
                      (exptime ? PITEM_HAS_EXP : 0u) |
                      (cas_new ? PITEM_HAS_CAS : 0u);
    uint32_t size = pitem_size_of(klen, (uint32_t)vlen, iflags);
    return size <= c->packed_max ? size : 0;
}

/* The TTL bucket of a set whose expiry is exptime (absolute, 0 never). */
static inline unsigned
packed_bucket(uint32_t exptime, uint32_t now)
{
    if (exptime == 0)
        return 0;
    return seg_bucket_of(exptime > now ? exptime - now : 1);
}

/* Segment records seg_evict_expired looks at for a store that needs a
 * page, and expired segments the maintenance step evicts at most. */
#define PACKED_EXPIRE_LOOK 256u
#define PACKED_EXPIRE_STEP 64u

/* Yields a copy waits at most for a flush setting its watermark before it
 * checks the flush (cache_flush_spares_copy), past which it is dropped. */
#define PACKED_FLUSH_WAIT 64u

/* Whether a packed store of expiry exptime replacing a version whose CAS
 * is old_cas should carry a CAS of its own: the thread's open segment for
 * it took its sequence block before old_cas was given (a derived CAS
 * would not be above it). A hint, read before the span is reserved: the
 * publication checks again (store.c). Context: the calling thread's.
 * packed_cas_below_b: for bucket b, packed_bucket(exptime, now). */
static inline bool
packed_cas_below_b(struct cache_thread *t, unsigned b, uint64_t old_cas)
{
    if (!old_cas)
        return false;
    /* seg_open_seq_base: the bucket's own open segment's block when it
     * has one (seg_pick_bucket takes it first), else seg.c's choice */
    uint32_t page = t->so.page[b];
    uint64_t base = page != SEG_NO_PAGE
                        ? seg_rec_seq_base(t->cache->seg_rec,
                                           (uint64_t)page << POOL_PAGE_SHIFT)
                        : seg_open_seq_base(t->cache->seg, &t->so, b);
    return old_cas >= base;
}
static inline bool
packed_cas_below(struct cache_thread *t, uint32_t exptime, uint32_t now,
                 uint64_t old_cas)
{
    return packed_cas_below_b(t, packed_bucket(exptime, now), old_cas);
}

/* A span for an item of size bytes (packed_size's: with exp32 when
 * exptime, the absolute expiry, is not 0) in one of the calling thread's
 * open segments, the one of exptime's TTL bucket where it can: 0 with
 * *head (the engine offset, see cache_packed_off), or -ENOSPC when the
 * pool has no page and no sealed segment to evict (the caller uses a
 * slab). The span is 4 bytes shorter when exptime fits its segment's
 * exp16 (packed_write writes that form). Evicts an expired segment, else
 * the oldest sealed one, when the pool has no page. Context: no lock, no
 * RCU read section (eviction waits for a grace period). */
int packed_reserve(struct cache_thread *t, uint32_t size, uint32_t exptime,
                   uint64_t *head);

/* Whether a span at pool offset off (just reserved) lies at or below the
 * flush watermark: its segment opened before a flush_all. */
static inline bool
packed_span_flushed(const struct cache *c, uint64_t off)
{
    return seg_rec_seq_base(c->seg_rec, off) +
               (off & (POOL_PAGE_SIZE - 1)) / 4 <=
           atomic_load_explicit(&c->flush_cas, memory_order_acquire);
}

/* packed_reserve_b past its usual case (packed.c): a new segment,
 * another bucket's, eviction, the cap, a flush_all's seal. */
int packed_reserve_slow(struct cache_thread *t, unsigned b, uint32_t size,
                        uint32_t exptime, uint32_t now, uint64_t *head,
                        uint32_t *span);

/* packed_reserve at now, the caller's clock_now() (a store's: one read
 * of the clock a store, not one a step), for bucket b
 * (packed_bucket(exptime, now)); *span (optional): the span's bytes, the
 * item's size in the form its segment takes (size, or 4 less with
 * exp16). */
static inline int
packed_reserve_b(struct cache_thread *t, unsigned b, uint32_t size,
                 uint32_t exptime, uint32_t now, uint64_t *head, uint32_t *span)
{
    struct cache *c = t->cache;
    uint32_t page = t->so.page[b];
    uint64_t off;

    /* the usual case inline: b's own open segment (the one seg_reserve
     * picks first), the form its exp_base gives, the span fits and the
     * segment is not older than a flush_all; the rest in
     * packed_reserve_slow */
    if (likely(page != SEG_NO_PAGE)) {
        uint64_t poff = (uint64_t)page << POOL_PAGE_SHIFT;
        uint32_t n = exptime && pitem_exp16_fits(
                                    seg_rec_exp_base(c->seg_rec, poff), exptime)
                         ? size - 4
                         : size;
        if (likely(seg_reserve_open(c->seg_rec, &t->so, b, n, &off) == 0)) {
            if (likely(!packed_span_flushed(c, off))) {
                *head = cache_packed_off(off);
                if (span)
                    *span = n;
                return 0;
            }
            seg_unreserve(c->seg, &t->so, off, n);
        }
    }
    return packed_reserve_slow(t, b, size, exptime, now, head, span);
}
static inline int
packed_reserve_at(struct cache_thread *t, uint32_t size, uint32_t exptime,
                  uint32_t now, uint64_t *head, uint32_t *span)
{
    return packed_reserve_b(t, packed_bucket(exptime, now), size, exptime, now,
                            head, span);
}

/* What packed_write stores. */
struct packed_item {
    const void *key;
    uint32_t klen;
    const struct iovec *value;
    int nvalue;
    uint32_t vlen;
    uint32_t flags;
    uint32_t exptime; /* absolute, 0 never */
    uint64_t cas;     /* nonzero: carried in cas64, else derived */
    bool exp32;       /* an expiry in exp32 whatever the span's segment
                         (a merge's copy: its size is fixed before the
                         segment is known, and a touch is carried over
                         into exp32 after it) */
};

/* Write the item into the span at head (packed_reserve's for its size
 * and exptime, the calling thread's): committed when this returns, its
 * segment's exp_max raised. Returns its CAS. PMEM: the item, no lock
 * held (and fenced: the caller's fence before its publication is not
 * needed for it). */
uint64_t packed_write(struct cache *c, uint64_t head,
                      const struct packed_item *it);
/* packed_write at now, the store's clock_now() (its segment's access
 * time). */
uint64_t packed_write_at(struct cache *c, uint64_t head,
                         const struct packed_item *it, uint32_t now);

/* packed_write_at of a plain set's item (pitem_plain: no flags32, no
 * cas64, the value in one piece; its key, value, lengths and client flags
 * filled, its expiry's form filled here from exptime and the span's
 * segment): its derived CAS. Inline: a set's every write (the call cost
 * it some 20 instructions). */
static inline uint64_t
packed_write_plain(struct cache *c, uint64_t head, struct pitem_plain *p,
                   uint32_t exptime, uint32_t now)
{
    uint64_t poff = cache_packed_pool(head);
    uint64_t page = poff & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    uint32_t in = (uint32_t)(poff - page);
    uint64_t seq_base = seg_rec_seq_base(c->seg_rec, page);
    uint32_t exp_base = seg_rec_exp_base(c->seg_rec, page);
    /* the form packed_reserve_at sized the span for (write_item_at's) */
    bool fits = pitem_exp16_fits(exp_base, exptime);
    p->exp16 = fits ? pitem_exp16_of(exp_base, exptime) : 0;
    p->exp32 = fits ? 0 : exptime;
    /* PMEM: the item, a fence, the commit: no lock held */
    (void)pitem_write_plain(c->base + page, POOL_PAGE_SIZE, in, seq_base, p);
    /* DRAM: the segment lasts as long as its latest item */
    seg_rec_exp_raise(c->seg_rec, poff, exptime ? exptime : UINT32_MAX);
    cache_packed_touch(c, poff, now); /* a store is an access */
    return seq_base + in / 4;
}

/* Make room: c->packed_evict's (merge eviction, packed_merge.c) when
 * registered, else packed_evict_fifo. 1 when pages were freed (or another
 * thread's merge just made some), 0 when nothing is sealed. Context: no
 * lock, no RCU read section. */
int packed_evict_oldest(struct cache_thread *t);

/* Evict a sealed segment whose items have all expired (its exp_max has
 * passed) or are all flushed, found among about look records (DRAM
 * only): its items leave the index, counted as expired (or evicted, one
 * a touch raced), and packed_segments_expired rises. 1 when one went,
 * else 0. Context: as packed_evict_oldest. */
int packed_evict_expired(struct cache_thread *t, uint32_t look);

/* FIFO: evict the oldest sealed segment: its items leave the index
 * (counted as evictions or reclaimed), its page goes back to the pool
 * after a grace period. 1 when one was evicted, 0 when none is sealed.
 * Context: as packed_evict_oldest. */
int packed_evict_fifo(struct cache_thread *t);

/* For eviction walks (here and packed_merge.c). */

/* Remove the index entry of the packed item v (engine offset off) if its
 * slot still names it: the slot's word (its FETCHED bit tells the
 * unfetched counters), or 0 when another unlinker (a replace, a delete, a
 * reap, the sweep or an eviction) took it first and will invalidate it.
 * Locks: the key's bucket, DRAM only. */
struct pitem_view;
uint64_t packed_unlink_named(struct cache *c, const struct pitem_view *v,
                             uint64_t off);

/* Until the item at off of the segment at seg is dead (commit 1): an
 * unlinker's last touch of it (bounded, in case). */
void packed_wait_dead(char *seg, uint32_t off);

/* packed_write's pending form: commit = 2, for a copy that
 * packed_commit_copy commits once it is published. Returns its check16.
 * PMEM: the item, no lock held. */
uint16_t packed_write_copy(struct cache *c, uint64_t head,
                           const struct packed_item *it);

/* A pending copy at head, published: committed (2 -> check16) unless a
 * writer that replaced or removed it meanwhile stored 1 (then that writer
 * accounted it). Inside a read section of its own, as the design's
 * pending rule asks. PMEM: one 2-byte compare-and-swap, no lock held. */
void packed_commit_copy(struct cache *c, uint64_t head, uint16_t check);

/* Evict the segment on page (a pool shrink): 1 when it was evicted, 0 when
 * the page holds no segment, -EBUSY when its segment is open (its owner
 * seals it when full, or when it leaves). Context: as
 * packed_evict_oldest. */
int packed_evict_page(struct cache_thread *t, uint32_t page);
/* The expiry sweep's part: sealed segments whose items all expired go
 * whole (packed_evict_expired, up to PACKED_EXPIRE_STEP), then the
 * expired (or flushed) items of sealed segments leave the index, counted as the
 * slab sweep's are (expired_unfetched, tc_sweep_reclaimed) and invalidated.
 * Looks at pages from a cursor until it walked about budget items or every page
 * once. The number unlinked. Context: the sweep's (c->admin held), no lock, no
 * RCU read section. */
int packed_sweep(struct cache_thread *t, unsigned budget);

/* Whether page holds a segment (open, sealed or being evicted). */
bool packed_page_held(struct cache *c, uint32_t page);

/* A touch whose expiry the packed item at loc cannot take in place (its
 * exp16 does not reach it): a copy with the new expiry (exp16 or exp32,
 * as its new segment allows) and the item's CAS, published
 * if the index still holds loc for hash (else dropped: a writer won) and
 * no flush_all covers the item read (else dropped: the flush covers it,
 * the touch came before it). TC_OK, -EAGAIN (changed or flushed
 * meanwhile) or -ENOMEM. Context: no lock, no RCU read section. */
int packed_rewrite_exp(struct cache_thread *t, uint64_t hash, uint64_t loc,
                       uint32_t exptime);

/*
 * The packed small-item store in the engine (see packed.h and
 * doc/design/small-items.md). Slabs keep everything else; the index holds
 * both kinds (cache.h, "Packed items").
 *
 * What goes here: a plain set, add, replace or cas (store.c's
 * store_plain) whose item takes at most packed_item_max bytes and whose
 * value the NVMe tier would not spill. Every other write of a packed key
 * (append, incr, meta I, a recache...) rewrites it into a slab through
 * store.c, whose publication finds and replaces the packed entry, and
 * invalidates the packed copy before it answers.
 *
 * Write: a span reserved in one of the calling thread's open segments,
 * the one of the set's TTL bucket where it can (alloc/seg.c: at most 4
 * open a thread, a fifth bucket to the nearest longer one's), 4 bytes
 * shorter when the expiry fits the segment's exp16 (the span's size is
 * guessed from the segment the reserve would take, given back and taken
 * again when it took another: packed_write finds the form from the span's
 * segment), pitem_write (the 2-byte commit last; a plain set's by
 * packed_write_plain and pitem_write_plain, the same bytes), the
 * segment's exp_max raised (DRAM), then store.c's publication under the
 * bucket lock, then the replaced item's invalidation (commit = 1 for a
 * packed one) before the answer.
 *
 * Flush: a packed item's sequence (seq_base + offset / 4) is fixed when
 * its segment opens, so a segment opened before a flush_all would give
 * later items sequences at or below the flush watermark: a reservation in
 * such a segment is dropped (its slot stays 0: the segment's items end
 * there) and the segment sealed, the item goes to a new one. A delayed
 * flush that is due is applied before the reservation (store.c's
 * prepare_packed), so a set that finds it due is never covered by it. One
 * that another thread fires between a set's reservation and its
 * publication covers that item (at most one a thread): the set ran
 * concurrently with the flush, as a slab item whose CAS was taken just
 * before it fired.
 *
 * Eager expiry: a sealed segment whose exp_max (DRAM, raised by every
 * write and in-place touch) has passed, or whose whole sequence block a
 * flush_all covered, is evicted as below, chosen without reading PMEM
 * (seg_evict_expired), by the maintenance step and by a store or slab
 * class that needs a page before FIFO; counted in packed_segments_expired.
 *
 * Eviction: merge (packed_merge.c, registered in c->packed_evict), or
 * FIFO (-o packed_evict=fifo, and a pool shrink's pages).
 *
 * FIFO: with no free page, the oldest sealed segment is taken
 * (seg_evict_oldest stores hcrc = 0 first), walked, and each committed
 * item's slot removed if it still names it (bucket lock); after one grace
 * period the page goes back to the pool. No index entry outlives its
 * segment: an item is published only while its segment is its writer's
 * open one, and only sealed segments are evicted. An item another thread
 * unlinked (a replace, a delete, a reader's reap, a touch's rewrite) is
 * accounted and invalidated by that thread after its unlink, reading and
 * writing the segment: the walk finds such an item committed but no
 * longer in the index, and waits until its commit reads dead (the
 * unlinker's last touch of it) before the page may go. Every committed
 * item of a sealed segment is either in the index or being retired so:
 * its writer published it or invalidated it (a failed store) before it
 * reserved again, and only a reserve seals.
 *
 * Open segments: at most seg's open_max (the engine: 1/8 of the pages);
 * a store past it goes to a slab (seg_reserve's -EUSERS), so that a small
 * pool with many threads keeps sealed segments to evict. With no free page
 * and nothing sealed, a thread seals its own full segment and evicts it.
 *
 * Expiry sweep (packed_sweep, under the sweep's c->admin): expired
 * segments whole first (above), then sealed segments' committed items, each
 * expired or flushed one unlinked if its slot still names it (bucket lock),
 * counted as UNLINK_SWEPT and invalidated (commit = 1) as any unlinker's. The
 * walk runs inside an RCU read section begun before it saw the segment sealed:
 * its eviction waits for a grace period before the page goes. Open segments are
 * not walked.
 *
 * Concurrency: no state of its own beyond struct cache's seg (alloc/seg.c
 * states its lock) and each thread's struct seg_open (its owner's only).
 * Locks: a bucket lock at a time, for DRAM work only. PMEM writes (items,
 * a touch's exp16 or exp32, commit = 1) with no lock held.
 *
 * Copies (a touch's rewrite): written pending (commit 2), published, the
 * source invalidated, then committed by a compare-and-swap 2 -> check16 in
 * a read section. A copy whose source a flush_all covers is not published
 * (cache_flush_spares_copy, under the bucket lock): its own sequence may
 * be above the watermark when its span came after the flush. A writer that
 * replaces or removes a pending copy waits (cache_defer_free) until it is
 * committed before it stores 1 and answers: by then the source is dead, so a
 * crash after that answer brings back neither the copy nor its source (whose
 * derived sequence may be above the writer's item: "derived order is not
 * real-time order").
 *
 * Restart: segment pages are marked RESTART_PAGE_SEGMENT before their
 * header is written; the restart scan (restart.c, scan_segment) walks a
 * segment with a valid header, stores 1 over pending copies, restores its
 * committed items newest-wins against slab items and other copies by the
 * derived sequence, and adopts the segment sealed (seg_adopt).
 *
 * Not built yet (the design's later slices): shared segments past the
 * open cap, donor rules between slabs and segments.
 */
#include "src/engine/packed.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/crashpoint.h"
#include "src/engine/cache.h"
#include "src/engine/cache_packed.h"
#include "src/engine/pitem.h"
#include "tier/pm.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <urcu/urcu-memb.h>

/* Whether the span at pool offset poff takes exptime as exp16. */
static inline bool
span_exp16(const struct cache *c, uint64_t poff, uint32_t exptime)
{
    return pitem_exp16_fits(seg_rec_exp_base(c->seg_rec, poff), exptime);
}

/* One segment fewer: an expired one (exp_max passed, decided in DRAM),
 * else the oldest sealed (merge or FIFO), unless eviction is off (-M: a
 * full cache answers -ENOMEM, as the slabs' reclaim does). 1 when one
 * went, else 0. */
static int
evict_one(struct cache_thread *t)
{
    return packed_evict_expired(t, PACKED_EXPIRE_LOOK) ||
           (t->cache->cfg.evict && packed_evict_oldest(t));
}

int
packed_reserve(struct cache_thread *t, uint32_t size, uint32_t exptime,
               uint64_t *head)
{
    return packed_reserve_at(t, size, exptime, clock_now(), head, NULL);
}

int
packed_reserve_slow(struct cache_thread *t, unsigned b, uint32_t size,
                    uint32_t exptime, uint32_t now, uint64_t *head,
                    uint32_t *span)
{
    struct cache *c = t->cache;
    /* size has exp32 when the item expires; exp16 takes 4 bytes less.
     * The form follows the segment the span lands in (its exp_base), so
     * the span's size is guessed from the segment it would take now and
     * given back and taken again when the reserve opened another one:
     * packed_write finds the form again from the span's segment. */
    uint32_t base = seg_open_exp_base(c->seg, &t->so, b);
    bool want16 =
        pitem_exp16_fits(base ? base : now + seg_bucket_ttl_lo(b), exptime);
    uint64_t off;
    int rc = -ENOSPC;

    for (int tries = 0; tries < 8; tries++) {
        uint32_t n = want16 && exptime ? size - 4 : size;
        rc = seg_reserve(c->seg, &t->so, b, n, &off);
        if (rc == -EUSERS) /* the cap of open segments: a slab takes it */
            return -ENOSPC;
        if (rc == -ENOSPC) {
            if (evict_one(t))
                continue;
            /* every segment is open: this thread's own (too full for
             * this item) is sealed, to be evicted on the next round */
            if (!seg_seal_for(c->seg, &t->so, b))
                return -ENOSPC;
            continue;
        }
        if (rc)
            return rc;
        /* opened before a flush_all: later sequences would read flushed */
        if (unlikely(packed_span_flushed(c, off))) {
            seg_seal_page(c->seg, &t->so, (uint32_t)(off >> POOL_PAGE_SHIFT));
            rc = -ENOSPC;
            continue;
        }
        bool fits = span_exp16(c, off, exptime);
        if (exptime && fits != want16) { /* another segment than guessed */
            seg_unreserve(c->seg, &t->so, off, n);
            want16 = fits;
            rc = -ENOSPC;
            continue;
        }
        *head = cache_packed_off(off);
        if (span)
            *span = n;
        return 0;
    }
    return rc;
}

/* packed_write's body; pending: commit = 2 (a copy that a
 * compare-and-swap commits after its publication). Returns check16. */
static uint16_t
write_item_at(struct cache *c, uint64_t head, const struct packed_item *it,
              bool pending, uint32_t now)
{
    uint64_t poff = cache_packed_pool(head);
    uint64_t page = poff & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    uint32_t in = (uint32_t)(poff - page);
    uint64_t seq_base = seg_rec_seq_base(c->seg_rec, page);
    uint32_t exp_base = seg_rec_exp_base(c->seg_rec, page);
    struct pitem_desc d = {
        .key = it->key,
        .klen = it->klen,
        .value = it->value,
        .nvalue = (unsigned)it->nvalue,
        .vlen = it->vlen,
        .flags = it->flags,
        .has_exp32 = it->exp32 ? it->exptime != 0
                               : !pitem_exp16_fits(exp_base, it->exptime),
        .exp32 = it->exptime,
        .exp16 = pitem_exp16_of(exp_base, it->exptime),
        .has_cas = it->cas != 0,
        .cas = it->cas,
    };
    /* PMEM: header, key and value, the next slot's zero word, a fence,
     * the commit: no lock held */
    uint16_t check =
        pitem_write(c->base + page, POOL_PAGE_SIZE, in, seq_base, &d, pending);
    /* DRAM: the segment lasts as long as its latest item */
    seg_rec_exp_raise(c->seg_rec, poff, it->exptime ? it->exptime : UINT32_MAX);
    cache_packed_touch(c, poff, now); /* a store is an access */
    return check;
}

/* write_item_at the clock's time */
static uint16_t
write_item(struct cache *c, uint64_t head, const struct packed_item *it,
           bool pending)
{
    return write_item_at(c, head, it, pending, clock_now());
}

uint64_t
packed_write_at(struct cache *c, uint64_t head, const struct packed_item *it,
                uint32_t now)
{
    write_item_at(c, head, it, false, now);
    return it->cas ? it->cas : cache_packed_seq(c, head);
}

uint64_t
packed_write(struct cache *c, uint64_t head, const struct packed_item *it)
{
    return packed_write_at(c, head, it, clock_now());
}

uint16_t
packed_write_copy(struct cache *c, uint64_t head, const struct packed_item *it)
{
    return write_item(c, head, it, true);
}

/* A pending copy at head, published, its source invalidated: committed
 * (2 -> check16) unless a writer that replaced or removed it stored 1
 * meanwhile (then that writer accounted it; it waits for this commit, so
 * only when its bounded wait ran out). Inside a read section, as the
 * design's pending rule asks. PMEM: one 2-byte compare-and-swap, no lock
 * held. */
void
packed_commit_copy(struct cache *c, uint64_t head, uint16_t check)
{
    uint64_t poff = cache_packed_pool(head);
    uint64_t page = poff & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    cache_read_lock();
    (void)pitem_commit_pending(c->base + page, (uint32_t)(poff - page), check);
    cache_read_unlock();
}

void
packed_wait_dead(char *seg, uint32_t off)
{
    const _Atomic uint16_t *commit =
        (const _Atomic uint16_t *)(seg + off + PITEM_COMMIT_OFFSET);
    for (unsigned i = 0; i < (1u << 24); i++) {
        if (atomic_load_explicit(commit, memory_order_acquire) ==
            PITEM_COMMIT_DEAD) {
            TSAN_ACQUIRE((void *)commit);
            return;
        }
        sched_yield();
    }
}

uint64_t
packed_unlink_named(struct cache *c, const struct pitem_view *v, uint64_t off)
{
    uint64_t hash = cache_hash(c, v->key, v->klen);
    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot = htab_find_loc_locked(b, cache_loc(off));
    uint64_t word = slot ? atomic_load_explicit(slot, memory_order_relaxed) : 0;
    if (slot) {
        /* the walk's view has its CAS: no second look at it */
        cache_floor_raise(c, hash, v->cas);
        htab_remove_locked(c->htab, slot);
    }
    htab_unlock(b);
    return word;
}

/* The items of a segment seg_evict took leave the index; its page goes
 * back to the pool after a grace period. */
static void
evict_walk(struct cache_thread *t, uint32_t page, bool expired)
{
    struct cache *c = t->cache;
    uint64_t pbase = (uint64_t)page << POOL_PAGE_SHIFT;
    uint32_t now = clock_now();
    struct pitem_walk w;
    struct pitem_view v;
    int64_t gone = 0; /* bytes of committed items, now dead */

    /* hcrc is 0 already: after a crash none of these comes back */
    pitem_walk_init(&w, c->base + pbase, POOL_PAGE_SIZE,
                    seg_seq_of(c->seg, pbase), false);
    TC_CRASH_POINT("packed.evict.cleared"); /* hcrc 0, every item linked */
    while (pitem_walk_next(&w, &v) == 1) {
        uint64_t off = cache_packed_off(pbase + v.off);
        gone += v.size;
        uint64_t word = packed_unlink_named(c, &v, off);
        TC_CRASH_POINT("packed.evict.unlinked");
        if (!word) {
            /* replaced or deleted: its unlinker counts and invalidates it
             * (a few instructions after its unlink; bounded, in case) */
            packed_wait_dead(c->base + pbase, v.off);
            continue;
        }
        /* the slot's word: its FETCHED bit for evicted_unfetched */
        off = cache_off(htab_slot_loc(word));
        cache_account_unlink(t, off, cache_packed_dead(c, off, &v, now),
                             UNLINK_EVICTED);
    }
    /* what the walk saw dead, and what its unlinks (here or by writers)
     * counted dead, leaves with the segment */
    cache_stat_add(t, ST_PACKED_BYTES_DEAD, -(gone + (int64_t)w.dead_bytes));
    /* readers that found an item of it before its unlink finish first */
    urcu_memb_synchronize_rcu();
    cache_rcu_synced();
    seg_free(c->seg, page);
    cache_stat_inc(t,
                   expired ? ST_PACKED_SEGS_EXPIRED : ST_PACKED_SEGS_EVICTED);
}

int
packed_evict_oldest(struct cache_thread *t)
{
    /* merge eviction registers itself at open (packed_merge.c) */
    if (t->cache->packed_evict)
        return t->cache->packed_evict(t);
    return packed_evict_fifo(t);
}

int
packed_evict_fifo(struct cache_thread *t)
{
    uint32_t page;
    if (seg_evict_oldest(t->cache->seg, &page) != 0)
        return 0;
    evict_walk(t, page, false);
    return 1;
}

int
packed_evict_expired(struct cache_thread *t, uint32_t look)
{
    struct cache *c = t->cache;
    uint32_t page;
    if (!c->seg || seg_evict_expired(c->seg, clock_now(),
                                     atomic_load_explicit(&c->flush_cas,
                                                          memory_order_acquire),
                                     look, &page) != 0)
        return 0;
    evict_walk(t, page, true);
    return 1;
}

int
packed_evict_page(struct cache_thread *t, uint32_t page)
{
    struct cache *c = t->cache;
    struct seg_info si;
    seg_info(c->seg, page, &si);
    if (si.state != SEG_SEALED || seg_evict(c->seg, page) != 0)
        return si.state == SEG_FREE ? 0 : -EBUSY;
    evict_walk(t, page, false);
    return 1;
}

/* packed_sweep on one page: the items walked, *n the ones unlinked. */
static unsigned
sweep_page(struct cache_thread *t, uint32_t page, uint32_t now, int *n)
{
    struct cache *c = t->cache;
    uint64_t pbase = (uint64_t)page << POOL_PAGE_SHIFT;
    struct seg_info si;
    struct pitem_walk w;
    struct pitem_view v;
    unsigned walked = 0;

    /* a sealed segment seen inside the section stays until it ends: its
     * eviction waits for a grace period before the page goes */
    cache_read_lock();
    seg_info(c->seg, page, &si);
    if (si.state != SEG_SEALED) {
        cache_read_unlock();
        return 0;
    }
    pitem_walk_init(&w, c->base + pbase, POOL_PAGE_SIZE, si.seq_base, false);
    while (pitem_walk_next(&w, &v) == 1) {
        walked++;
        uint64_t off = cache_packed_off(pbase + v.off);
        enum cache_dead dead = cache_packed_dead(c, off, &v, now);
        if (dead == CACHE_LIVE)
            continue;
        uint64_t word = packed_unlink_named(c, &v, off);
        if (!word)
            continue; /* replaced, deleted, reaped or evicted meanwhile */
        /* the slot's word: its FETCHED bit for expired_unfetched */
        off = cache_off(htab_slot_loc(word));
        cache_account_unlink(t, off, dead, UNLINK_SWEPT);
        cache_stat_inc(t, ST_SWEEP_RECLAIMED);
        cache_defer_free(t, off); /* commit = 1: an eviction waits for it */
        (*n)++;
    }
    cache_read_unlock();
    return walked;
}

int
packed_sweep(struct cache_thread *t, unsigned budget)
{
    struct cache *c = t->cache;
    if (!c->seg)
        return 0;
    uint32_t npages = pool_npages(c->pool);
    uint32_t now = clock_now();
    unsigned walked = 0;
    int n = 0;
    /* whole segments whose items all expired first: no PMEM read to
     * decide, and what they free the item walk need not look at */
    for (unsigned i = 0; i < PACKED_EXPIRE_STEP; i++)
        if (!packed_evict_expired(t, npages))
            break;
    for (uint32_t i = 0; i < npages && walked < budget; i++) {
        uint32_t page = c->packed_sweep_page;
        c->packed_sweep_page = page + 1 < npages ? page + 1 : 0;
        walked += sweep_page(t, page, now, &n);
    }
    return n;
}

bool
packed_page_held(struct cache *c, uint32_t page)
{
    struct seg_info si;
    if (!c->seg)
        return false;
    seg_info(c->seg, page, &si);
    return si.state != SEG_FREE;
}

int
packed_rewrite_exp(struct cache_thread *t, uint64_t hash, uint64_t loc,
                   uint32_t exptime)
{
    struct cache *c = t->cache;
    uint64_t off = cache_off(loc);
    struct pitem_view v;
    char kbuf[PITEM_KLEN_MAX];
    char vbuf[PITEM_VLEN_MAX];
    uint64_t head;

    /* a copy of the item, read while the index holds it */
    cache_read_lock();
    bool held = htab_holds_rcu(c->htab, hash, loc) &&
                cache_packed_view(c, off, &v) == 0;
    if (held) {
        memcpy(kbuf, v.key, v.klen);
        pm_read(vbuf, v.value, v.vlen);
    }
    cache_read_unlock();
    if (!held)
        return -EAGAIN;
    /* the source's sequence: what a flush_all judges it by, and so its
     * copy too (cache_flush_spares_copy) */
    uint64_t src_seq = cache_packed_seq(c, off);
    TC_CRASH_POINT("packed.copy.read"); /* the source read, no span yet */
    uint32_t size =
        pitem_size_of(v.klen, v.vlen,
                      (v.flags > PITEM_CFLAGS_MASK ? PITEM_HAS_FLAGS : 0u) |
                          (exptime ? PITEM_HAS_EXP : 0u) | PITEM_HAS_CAS);
    if (packed_reserve(t, size, exptime, &head) != 0)
        return -ENOMEM;
    struct iovec iov = {vbuf, v.vlen};
    struct packed_item it = {kbuf,    v.klen,  &iov,  1,    v.vlen,
                             v.flags, exptime, v.cas, false};
    /* pending until published: after a crash it never outranks a set that
     * replaced it before committing (the design's "Pending copies") */
    uint16_t check = write_item(c, head, &it, true);
    cache_account(t, head, 1);
    cache_stat_inc(t, ST_PACKED_COPIES);

    /* a flush setting its watermark takes a few stores: waited out
     * (bounded), so that the check below rarely drops the touch for it */
    for (unsigned i = 0; i < PACKED_FLUSH_WAIT && cache_flush_busy(c); i++)
        sched_yield();
    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot = htab_find_loc_locked(b, loc);
    /* a flush_all that covers the source covers the copy: not published
     * (the source stays, flushed), as the design's flush rule for copies */
    bool spared = slot && cache_flush_spares_copy(c, src_seq);
    if (spared) {
        /* a touch keeps what the item had: fetched (meta h), the recache
         * win handed out, the reference for eviction */
        uint64_t bits =
            atomic_load_explicit(slot, memory_order_relaxed) & CACHE_LOC_PBITS;
        htab_replace_locked(slot, hash, cache_loc(head) | bits);
    }
    htab_unlock(b);
    if (!spared) {
        /* a writer replaced or removed the source first and retires it,
         * or a flush covers it (a reader reaps it); the copy, never seen,
         * dies here (not by cache_defer_free, which would wait for this
         * thread to commit it) */
        cache_account(t, head, -1);
        cache_packed_invalidate(c, head);
        return -EAGAIN;
    }
    TC_CRASH_POINT("packed.copy.published"); /* still pending */
    /* The source dies before the copy commits, and a writer that replaces
     * or deletes the copy waits for that commit before it invalidates the
     * copy and answers (cache_defer_free): no answer leaves the source
     * valid behind it, whose derived sequence may outrank that writer's
     * item at a restart (a delete leaves nothing to outrank it). A crash
     * between the two loses the key: a miss, as a page move's. */
    cache_account_unlink(t, off, CACHE_LIVE, UNLINK_REPLACED);
    cache_defer_free(t, off);
    packed_commit_copy(c, head, check);
    return TC_OK;
}

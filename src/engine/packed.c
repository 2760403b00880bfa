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
 * Write: a span reserved in the calling thread's open segment
 * (alloc/seg.c, TTL bucket 0 until TTL buckets are built: items carry
 * exp32 when they expire), pitem_write (the 2-byte commit last), then
 * store.c's publication under the bucket lock, then the replaced item's
 * invalidation (commit = 1 for a packed one) before the answer.
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
 * Expiry sweep (packed_sweep, under the sweep's c->admin): sealed
 * segments' committed items, each expired or flushed one unlinked if its
 * slot still names it (bucket lock), counted as UNLINK_SWEPT and
 * invalidated (commit = 1) as any unlinker's. The walk runs inside an RCU
 * read section begun before it saw the segment sealed: its eviction waits
 * for a grace period before the page goes. Open segments are not walked.
 *
 * Concurrency: no state of its own beyond struct cache's seg (alloc/seg.c
 * states its lock) and each thread's struct seg_open (its owner's only).
 * Locks: a bucket lock at a time, for DRAM work only. PMEM writes (items,
 * a touch's exp32, commit = 1) with no lock held.
 *
 * Copies (a touch's rewrite): written pending (commit 2), published, then
 * committed by a compare-and-swap 2 -> check16 in a read section; a
 * writer that replaced or removed the copy meanwhile stored 1, so the swap
 * fails and a crash never brings back a copy that lost to it.
 *
 * Restart: segment pages are marked RESTART_PAGE_SEGMENT before their
 * header is written; the restart scan (restart.c, scan_segment) walks a
 * segment with a valid header, stores 1 over pending copies, restores its
 * committed items newest-wins against slab items and other copies by the
 * derived sequence, and adopts the segment sealed (seg_adopt).
 *
 * Not built yet (the design's later slices): TTL buckets and eager expiry
 * of whole segments, exp16, shared segments past the open cap, donor
 * rules between slabs and segments.
 */
#include "src/engine/packed.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/crashpoint.h"
#include "src/engine/cache.h"
#include "src/engine/pitem.h"
#include "tier/pm.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <urcu/urcu-memb.h>

uint32_t
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

/* A segment was opened (its first span) or freed. */
static void
count_segment(struct cache_thread *t, int sign)
{
    cache_stat_add(t, ST_PACKED_SEGMENTS, sign);
}

int
packed_reserve(struct cache_thread *t, uint32_t size, uint64_t *head)
{
    struct cache *c = t->cache;
    uint64_t off;
    int rc = -ENOSPC;

    for (int tries = 0; tries < 4; tries++) {
        rc = seg_reserve(c->seg, &t->so, 0, size, &off);
        if (rc == -EUSERS) /* the cap of open segments: a slab takes it */
            return -ENOSPC;
        if (rc == -ENOSPC) {
            if (packed_evict_oldest(t))
                continue;
            /* every segment is open: this thread's own (too full for
             * this item) is sealed, to be evicted on the next round */
            if (t->so.page[0] == SEG_NO_PAGE)
                return -ENOSPC;
            seg_seal(c->seg, &t->so, 0);
            continue;
        }
        if (rc)
            return rc;
        if ((off & (POOL_PAGE_SIZE - 1)) == PITEM_SEG_START)
            count_segment(t, 1);
        /* opened before a flush_all: later sequences would read flushed */
        if (unlikely(
                seg_seq_of(c->seg, off) <=
                atomic_load_explicit(&c->flush_cas, memory_order_acquire))) {
            seg_seal(c->seg, &t->so, 0);
            rc = -ENOSPC;
            continue;
        }
        *head = cache_packed_off(off);
        return 0;
    }
    return rc;
}

/* packed_write's body; pending: commit = 2 (a copy that a
 * compare-and-swap commits after its publication). Returns check16. */
static uint16_t
write_item(struct cache *c, uint64_t head, const struct packed_item *it,
           bool pending)
{
    uint64_t poff = cache_packed_pool(head);
    uint64_t page = poff & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    uint32_t in = (uint32_t)(poff - page);
    uint64_t seq_base = seg_seq_of(c->seg, page);
    struct pitem_desc d = {
        .key = it->key,
        .klen = it->klen,
        .value = it->value,
        .nvalue = (unsigned)it->nvalue,
        .vlen = it->vlen,
        .flags = it->flags,
        .has_exp32 = it->exptime != 0,
        .exp32 = it->exptime,
        .has_cas = it->cas != 0,
        .cas = it->cas,
    };
    /* PMEM: header, key and value, the next slot's zero word, a fence,
     * the commit: no lock held */
    uint16_t check =
        pitem_write(c->base + page, POOL_PAGE_SIZE, in, seq_base, &d, pending);
    cache_packed_touch(c, poff, clock_now()); /* a store is an access */
    return check;
}

uint64_t
packed_write(struct cache *c, uint64_t head, const struct packed_item *it)
{
    write_item(c, head, it, false);
    return it->cas ? it->cas : cache_packed_seq(c, head);
}

uint16_t
packed_write_copy(struct cache *c, uint64_t head, const struct packed_item *it)
{
    return write_item(c, head, it, true);
}

/* A pending copy at head, published: committed (2 -> check16) unless a
 * writer that replaced or removed it meanwhile stored 1 (then that writer
 * accounted it). Inside a read section, as the design's pending rule
 * asks. PMEM: one 2-byte compare-and-swap, no lock held. */
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
    struct htab_bucket *b = htab_lock(c->htab, cache_hash(c, v->key, v->klen));
    _Atomic uint64_t *slot = htab_find_loc_locked(b, cache_loc(off));
    uint64_t word = slot ? atomic_load_explicit(slot, memory_order_relaxed) : 0;
    if (slot)
        htab_remove_locked(c->htab, slot);
    htab_unlock(b);
    return word;
}

/* The items of a segment seg_evict took leave the index; its page goes
 * back to the pool after a grace period. */
static void
evict_walk(struct cache_thread *t, uint32_t page)
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
    while (pitem_walk_next(&w, &v) == 1) {
        uint64_t off = cache_packed_off(pbase + v.off);
        gone += v.size;
        uint64_t word = packed_unlink_named(c, &v, off);
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
    count_segment(t, -1);
    cache_stat_inc(t, ST_PACKED_SEGS_EVICTED);
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
    evict_walk(t, page);
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
    evict_walk(t, page);
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
    uint32_t size =
        pitem_size_of(v.klen, v.vlen,
                      (v.flags > PITEM_CFLAGS_MASK ? PITEM_HAS_FLAGS : 0u) |
                          (exptime ? PITEM_HAS_EXP : 0u) | PITEM_HAS_CAS);
    if (packed_reserve(t, size, &head) != 0)
        return -ENOMEM;
    struct iovec iov = {vbuf, v.vlen};
    struct packed_item it = {kbuf,   v.klen,  &iov,    1,
                             v.vlen, v.flags, exptime, v.cas};
    /* pending until published: after a crash it never outranks a set that
     * replaced it before committing (the design's "Pending copies") */
    uint16_t check = write_item(c, head, &it, true);
    cache_account(t, head, 1);
    cache_stat_inc(t, ST_PACKED_COPIES);

    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot = htab_find_loc_locked(b, loc);
    if (slot)
        htab_replace_locked(slot, hash, cache_loc(head));
    htab_unlock(b);
    if (slot) {
        TC_CRASH_POINT("packed.copy.published"); /* still pending */
        packed_commit_copy(c, head, check);
    }
    uint64_t gone = slot ? off : head;
    /* the loser (the old item, or the copy when a writer won) is
     * invalidated before the answer */
    if (slot)
        cache_account_unlink(t, off, CACHE_LIVE, UNLINK_REPLACED);
    else
        cache_account(t, head, -1);
    cache_defer_free(t, gone);
    return slot ? TC_OK : -EAGAIN;
}

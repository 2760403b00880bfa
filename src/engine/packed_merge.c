/*
 * Merge eviction of packed segments (see packed_merge.h and
 * doc/design/small-items.md, "Eviction"): Segcache's answer to FIFO
 * dropping items that are still read.
 *
 * A merge, when the pool has no page for a segment (packed_reserve) or a
 * slab class (reclaim.c): the oldest (up to) PACKED_MERGE_N sealed
 * segments are taken out of the age list (seg_evict_oldest: hcrc = 0
 * first, so that after a crash nothing of them comes back, whatever the
 * merge had done). Each is walked in turn; for each committed item, under
 * its bucket lock:
 *   - not in the index any more: its unlinker invalidates it (waited for,
 *     as FIFO does);
 *   - the slot's REF bit clear, the item expired or flushed, or the merge's
 *     copy budget (one segment's payload a merge: at most one page written
 *     for up to PACKED_MERGE_N freed) spent: unlinked, an eviction;
 *   - else copied: a pending copy (commit 2) carrying the item's CAS in
 *     cas64, its client flags and absolute expiry, appended to the merge's
 *     own open segment; then published (the slot replaced, under the
 *     bucket lock, only if it still names the source: a set or a delete
 *     that came first wins, and the copy is invalidated unpublished; and
 *     only if no flush_all covers the source since it was judged, whose
 *     watermark may be below the copy: cache_flush_spares_copy, else the
 *     copy is invalidated unpublished and the item dropped); then
 *     committed (2 -> check16, packed_commit_copy: a writer that replaced
 *     or removed the copy meanwhile stored 1, and the swap fails). The new
 *     slot has REF clear (read again, or the next merge drops it) and keeps
 *     FETCHED and WIN.
 * The walk done, a grace period, then the page goes back to the pool. The
 * next segment's copies may then take that page: the merge's open segment
 * is sealed when full and the next one opened, from a free page, in the
 * middle of a merge; with none free, the REF'd items left are dropped.
 *
 * Crashes: the sources are gone from the first step; a copy comes back
 * only once committed, and then it is the item the index held (published
 * and not yet replaced: a writer that replaces it stores 1 before it
 * answers). A crash between a copy's write and its commit loses the item
 * (a miss), never brings back one that a later set or delete replaced.
 *
 * Touch in place (exp16 or exp32, fetch.c) races a copy: a touch that
 * found the source before the publication stores its expiry there. After
 * the grace period that ends every such touch, each copy with an expiry
 * whose source's expiry changed is given it, by a compare-and-swap of the
 * copy's exp32 (a copy always carries its expiry in exp32) from the value
 * copied (a touch of the copy since then wins). A touch that must rewrite
 * (an expiry its item's form cannot hold) and loses the race to a merge is
 * dropped, as against a writer (packed_rewrite_exp's -EAGAIN).
 *
 * The merge's open segment: struct packed_merge's seg_open (one segment
 * per TTL bucket, the victim's, with seg's policy for a fifth), kept open from
 * one merge to the next so that a merge that copies little does not seal
 * a nearly empty segment. It is not counted in seg's cap of open
 * segments (seg_open's uncapped: the cap is on threads'); a pool shrink
 * finds it sealed at the next merge (when its page is above the target)
 * or at close.
 *
 * The spare page: a merge starts because no page is free, yet its first
 * victim's kept items need one when the merge's segment is full (or not
 * yet open). So the merge holds one free page (taken at open, and again
 * at the end of a merge, from the pages it freed) and puts it back into
 * the pool just before its segment needs a new page. A pool shrink gets
 * it back at the next merge when it lies above the target, and at close.
 * An eviction that finds no sealed segment takes back what the merge
 * holds (merge_give_back): the spare, else its open segments, sealed.
 *
 * Concurrency:
 *   m->lock        a plain mutex, the merge's ownership token (as
 *                  c->admin): one merge at a time owns m->so, m->fix and
 *                  the victims it took. It is held across PMEM writes (the
 *                  copies) and grace periods, so it is outside the lock
 *                  ranks and the no-PMEM-write checks, and taken with no
 *                  lock held and outside any RCU read section; no get
 *                  waits on it, only a store or an allocation that needs a
 *                  page while another thread merges (it then retries).
 *   m->so          the lock holder's (seg_open's owner is re-set to the
 *                  holder when it takes the lock).
 *   victims        EVICTING records, out of seg's age list: no other
 *                  eviction takes them.
 *   bucket locks   one at a time, DRAM work only; PMEM writes (copies,
 *                  commits, expiry fix-ups) with no lock held but m->lock.
 */
#include "src/engine/packed_merge.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/crashpoint.h"
#include "src/base/err.h"
#include "src/engine/cache.h"
#include "src/engine/cache_packed.h"
#include "src/engine/packed.h"
#include "src/engine/pitem.h"
#include "tier/pm.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <urcu/urcu-memb.h>

/* A copy with an expiry, for the fix-up after the grace period. */
struct merge_fix {
    uint64_t hash;
    uint64_t src, dst; /* pool offsets of the source and the copy */
    uint32_t exp;      /* the expiry copied */
};

struct packed_merge {
    pthread_mutex_t lock;
    struct seg_open so;
    uint32_t spare;        /* a free page held for the next segment of so */
    struct merge_fix *fix; /* this segment's copies with an expiry */
    uint32_t nfix, cap;
};

/* One merge's progress. */
struct merge_run {
    struct cache_thread *t;
    struct packed_merge *m;
    uint64_t pbase;  /* the victim's pool offset */
    unsigned bucket; /* its TTL bucket: the copies' */
    uint32_t now;
    uint32_t budget; /* bytes the merge may still copy */
    bool compact;    /* every live item copied, REF kept (merge_compact) */
};

/* The victims: the oldest n sealed segments, each out of the age list and
 * its hcrc 0 (seg_evict_oldest), of any TTL bucket (the design's "of one
 * bucket" is not built: copies go to their own bucket's segment, and
 * carry exp32, so a mixed merge is correct, only less eager). How many it
 * took. Locks: the segment lock, in seg_evict_oldest. */
static unsigned
merge_victims(struct seg *s, uint32_t *pages, unsigned n)
{
    unsigned k = 0;
    while (k < n && seg_evict_oldest(s, &pages[k]) == 0)
        k++;
    return k;
}

/* A span for a copy in the merge's open segment of r's bucket: 0 with
 * *head (an engine offset), or -ENOSPC (no page, even the spare taken by
 * another thread first). A segment opened before a flush_all is sealed:
 * its sequences would read flushed (packed_reserve's rule). */
static int
reserve_copy(struct merge_run *r, uint32_t size, uint64_t *head)
{
    struct cache *c = r->t->cache;
    uint64_t off;
    for (int tries = 0; tries < 3; tries++) {
        int rc = seg_reserve(c->seg, &r->m->so, r->bucket, size, &off);
        if (rc == -ENOSPC && r->m->spare != SEG_NO_PAGE) {
            /* the page held for this: back to the pool, taken at once
             * (another thread may take it first: then no room) */
            pool_page_put(c->pool, r->m->spare);
            r->m->spare = SEG_NO_PAGE;
            continue;
        }
        if (rc)
            return rc;
        if (seg_seq_of(c->seg, off) >
            atomic_load_explicit(&c->flush_cas, memory_order_acquire)) {
            *head = cache_packed_off(off);
            return 0;
        }
        seg_seal(c->seg, &r->m->so, r->bucket);
    }
    return -ENOSPC;
}

/* Note a published copy with an expiry (no room: not noted, the race it
 * covers is then not covered for it). */
static void
note_fix(struct packed_merge *m, uint64_t hash, uint64_t src, uint64_t dst,
         uint32_t exp)
{
    if (m->nfix == m->cap) {
        uint32_t cap = m->cap ? 2 * m->cap : 1024;
        struct merge_fix *f = realloc(m->fix, cap * sizeof(*f));
        if (!f)
            return;
        m->fix = f;
        m->cap = cap;
    }
    m->fix[m->nfix++] = (struct merge_fix){hash, src, dst, exp};
}

/* The item v (engine offset off) copied, published and committed: 0; or
 * -ENOSPC, no room (nothing written, the caller drops it); or -ESTALE, a
 * flush_all covers the item since it was judged (cache_flush_spares_copy:
 * the copy dies unpublished, the caller drops the item). When a writer
 * replaced or removed the source first, the copy dies unpublished and the
 * source is left to that writer: 0 too. */
static int
copy_item(struct merge_run *r, const struct pitem_view *v, uint64_t off,
          uint64_t hash)
{
    struct cache_thread *t = r->t;
    struct cache *c = t->cache;
    /* absolute, 0 never (an exp16 item's counted from its segment) */
    uint32_t exp = cache_packed_exp(c, off, v);
    uint32_t size =
        pitem_size_of(v->klen, v->vlen,
                      (v->flags > PITEM_CFLAGS_MASK ? PITEM_HAS_FLAGS : 0u) |
                          (exp ? PITEM_HAS_EXP : 0u) | PITEM_HAS_CAS);
    uint64_t head;
    if (size > r->budget || reserve_copy(r, size, &head) != 0) {
        r->budget = 0; /* the rest goes too: no page, or the page written */
        return -ENOSPC;
    }
    r->budget -= size;
    struct iovec iov = {(void *)v->value, v->vlen};
    struct packed_item it = {v->key, v->klen, &iov,
                             1,      v->vlen, v->flags,
                             exp,    v->cas,  .exp32 = true};
    /* PMEM: pending until published, no lock held */
    uint16_t check = packed_write_copy(c, head, &it);
    cache_account(t, head, 1);
    cache_stat_inc(t, ST_PACKED_COPIES);
    TC_CRASH_POINT("packed.merge.copied");

    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot = htab_find_loc_locked(b, cache_loc(off));
    uint64_t word = slot ? atomic_load_explicit(slot, memory_order_relaxed) : 0;
    /* a flush_all since the item was judged live covers it, and so its
     * copy (judged above the watermark by its own sequence otherwise):
     * not published, the item dropped by the caller */
    bool flushed =
        slot && !cache_flush_spares_copy(c, cache_packed_seq(c, off));
    /* REF clear in the new location (a compaction's keeps it: the item
     * was not judged), FETCHED and WIN kept */
    uint64_t bits =
        CACHE_LOC_FETCHED | CACHE_LOC_WIN | (r->compact ? CACHE_LOC_REF : 0);
    if (slot && !flushed)
        htab_replace_locked(slot, hash,
                            cache_loc(head) | (htab_slot_loc(word) & bits));
    htab_unlock(b);
    if (flushed) {
        cache_account(t, head, -1);
        cache_packed_invalidate(c, head);
        return -ESTALE;
    }
    if (!slot) {
        /* the writer that came first unlinked the source and invalidates
         * it; the copy was never seen */
        cache_account(t, head, -1);
        cache_packed_invalidate(c, head);
        packed_wait_dead(c->base + r->pbase, v->off);
        return 0;
    }
    TC_CRASH_POINT("packed.merge.published"); /* still pending */
    packed_commit_copy(c, head, check);
    /* the source leaves the books, the copy stays in them */
    cache_account_unlink(t, cache_off(htab_slot_loc(word)), CACHE_LIVE,
                         UNLINK_REPLACED);
    cache_stat_inc(t, ST_PACKED_ITEMS_MERGED);
    if (exp)
        note_fix(r->m, hash, cache_packed_pool(off), cache_packed_pool(head),
                 exp);
    return 0;
}

/* One committed item v of the victim: kept (copied) or dropped. */
static void
merge_item(struct merge_run *r, const struct pitem_view *v)
{
    struct cache *c = r->t->cache;
    uint64_t off = cache_packed_off(r->pbase + v->off);
    uint64_t hash = cache_hash(c, v->key, v->klen);
    enum cache_dead dead = cache_packed_dead(c, off, v, r->now);

    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot = htab_find_loc_locked(b, cache_loc(off));
    uint64_t word = slot ? atomic_load_explicit(slot, memory_order_relaxed) : 0;
    bool keep = slot && (r->compact || (word & CACHE_LOC_REF)) &&
                dead == CACHE_LIVE && r->budget > 0;
    if (slot && !keep) {
        cache_floor_raise(c, hash, v->cas); /* a removal: cache_packed.h */
        htab_remove_locked(c->htab, slot);
    }
    htab_unlock(b);
    if (!slot) {
        /* replaced or deleted: its unlinker counts and invalidates it */
        packed_wait_dead(c->base + r->pbase, v->off);
        return;
    }
    if (keep) {
        TC_CRASH_POINT("packed.merge.judged"); /* live, not yet copied */
        int rc = copy_item(r, v, off, hash);
        if (rc == 0)
            return;
        /* no room, or flushed since judged: dropped, as FIFO would */
        if (rc == -ESTALE)
            dead = cache_packed_dead(c, off, v, r->now);
        word = packed_unlink_named(c, v, off);
        if (!word) {
            packed_wait_dead(c->base + r->pbase, v->off);
            return;
        }
    }
    /* the slot's word: its FETCHED bit for evicted_unfetched */
    cache_account_unlink(r->t, cache_off(htab_slot_loc(word)), dead,
                         UNLINK_EVICTED);
}

/* After the grace period: a touch that stored an expiry in a source after
 * its copy read it has ended; the copy gets that expiry unless it was
 * touched itself since (then its value differs from the one copied) or it
 * left the index. PMEM: a 4-byte compare-and-swap per such copy, in a
 * read section (the copy's segment stays while the index holds it). */
static void
fix_expiries(struct cache *c, struct packed_merge *m)
{
    cache_read_lock();
    for (uint32_t i = 0; i < m->nfix; i++) {
        const struct merge_fix *f = &m->fix[i];
        /* the source's expiry as a touch left it (exp16 or exp32); the
         * copy's exp32 follows its 8-byte header (pitem_layout.h) */
        uint64_t soff = cache_packed_off(f->src);
        struct pitem_view sv;
        if (cache_packed_view(c, soff, &sv) != 0)
            continue;
        uint32_t exp = cache_packed_exp(c, soff, &sv);
        uint32_t *dst =
            (uint32_t *)(void *)(c->base + f->dst + sizeof(struct pitem_hdr));
        if (exp == f->exp ||
            !htab_holds_rcu(c->htab, f->hash,
                            cache_loc(cache_packed_off(f->dst))))
            continue;
        /* DRAM first: the copy's segment is not expired around it */
        seg_exp_raise(c->seg, f->dst, exp ? exp : UINT32_MAX);
        (void)pm_cas32(dst, f->exp, exp);
    }
    cache_read_unlock();
    m->nfix = 0;
}

/* Merge one victim page: its items kept or dropped, then, after a grace
 * period, its page back to the pool. */
static void
merge_segment(struct merge_run *r, uint32_t page)
{
    struct cache_thread *t = r->t;
    struct cache *c = t->cache;
    struct seg_info si;
    struct pitem_walk w;
    struct pitem_view v;
    int64_t gone = 0; /* bytes of committed items, now dead */

    seg_info(c->seg, page, &si);
    r->pbase = (uint64_t)page << POOL_PAGE_SHIFT;
    r->bucket = si.bucket;
    pitem_walk_init(&w, c->base + r->pbase, POOL_PAGE_SIZE, si.seq_base, false);
    while (pitem_walk_next(&w, &v) == 1) {
        gone += v.size;
        merge_item(r, &v);
    }
    /* as FIFO's walk: what it saw dead, and what the unlinks counted
     * dead, leave with the segment */
    cache_stat_add(t, ST_PACKED_BYTES_DEAD, -(gone + (int64_t)w.dead_bytes));
    /* readers (and touches) that found an item of it finish first */
    urcu_memb_synchronize_rcu();
    cache_rcu_synced();
    fix_expiries(c, r->m);
    seg_free(c->seg, page);
    cache_stat_inc(t, r->compact ? ST_PACKED_SEGS_COMPACTED
                                 : ST_PACKED_SEGS_EVICTED);
}

/* Compaction: up to n segments, each the one with the fewest live bytes
 * of the PACKED_MERGE_WINDOW oldest sealed ones (seg_evict_emptiest), when
 * those are at most PACKED_COMPACT_LIVE_PCT percent of its payload, walked
 * as victims whose live items are all copied, REF kept: each costs at most
 * that share of a page written for a page freed, and drops no item the
 * index holds (unless no page is left for the copies). Without it a
 * rewritten item's bytes stay dead until its segment is the oldest: under
 * an overwrite-heavy load, about two thirds of a segment by then. How
 * many it compacted. */
static unsigned
merge_compact(struct merge_run *r, unsigned n)
{
    uint32_t page;
    unsigned k = 0;
    r->compact = true;
    while (k < n &&
           seg_evict_emptiest(r->t->cache->seg, PACKED_MERGE_WINDOW,
                              SEG_PAYLOAD / 100u * PACKED_COMPACT_LIVE_PCT,
                              &page) == 0) {
        r->budget = SEG_PAYLOAD;
        merge_segment(r, page);
        k++;
    }
    r->compact = false;
    return k;
}

/* No sealed segment to take: the pages the merge holds go back, so that
 * a slab class that needs a page is not refused while the merge keeps
 * one idle (a small pool: its spare and a segment of few copies can be a
 * third of it). The spare to the pool first; else its open segments
 * sealed, the next call's victims. How many it gave (0 or 1). Under
 * m->lock. */
static unsigned
merge_give_back(struct cache *c, struct packed_merge *m)
{
    if (m->spare != SEG_NO_PAGE) {
        pool_page_put(c->pool, m->spare);
        m->spare = SEG_NO_PAGE;
        return 1;
    }
    if (m->so.nopen == 0)
        return 0;
    seg_seal_all(c->seg, &m->so);
    return 1;
}

/* Takes m->lock: true when this thread waited for another's merge, which
 * left a free page (the caller retries instead of merging again). */
static bool
merge_lock(struct cache *c, struct packed_merge *m)
{
    if (pthread_mutex_trylock(&m->lock) == 0)
        return false;
    pthread_mutex_lock(&m->lock);
    return pool_nfree(c->pool) > 0;
}

int
packed_merge_evict(struct cache_thread *t)
{
    struct cache *c = t->cache;
    struct packed_merge *m = c->merge;
    uint32_t pages[PACKED_MERGE_N];

    if (merge_lock(c, m)) {
        pthread_mutex_unlock(&m->lock);
        return 1;
    }
    m->so.owner_thread = pthread_self();
    /* a pool shrink waits for open segments above its target */
    uint32_t target =
        atomic_load_explicit(&c->shrink_target, memory_order_relaxed);
    for (unsigned b = 0; target && b < SEG_NBUCKETS; b++)
        if (m->so.page[b] != SEG_NO_PAGE && m->so.page[b] >= target)
            seg_seal(c->seg, &m->so, b);
    if (target && m->spare != SEG_NO_PAGE && m->spare >= target) {
        pool_page_put(c->pool, m->spare);
        m->spare = SEG_NO_PAGE;
    }

    struct merge_run r = {
        .t = t,
        .m = m,
        .now = clock_now(),
        .budget = SEG_PAYLOAD,
    };
    /* mostly dead segments first: their pages cost no item. One alone
     * may free no page at all (its copies can take the page it frees,
     * through the spare), and a caller that waits for a page would loop
     * on it: with fewer than two, the oldest merge as well (at least
     * three pages for one page of copies). */
    unsigned n = merge_compact(&r, PACKED_MERGE_N);
    if (n < 2) {
        unsigned k = merge_victims(c->seg, pages, PACKED_MERGE_N);
        r.budget = SEG_PAYLOAD;
        for (unsigned i = 0; i < k; i++)
            merge_segment(&r, pages[i]);
        n += k;
    }
    if (n == 0)
        n = merge_give_back(c, m);
    /* a page for the next merge's first copies: it starts with no free
     * page, and its first victim's kept items need one */
    else if (m->spare == SEG_NO_PAGE && pool_page_get(c->pool, &m->spare) != 0)
        m->spare = SEG_NO_PAGE;
    pthread_mutex_unlock(&m->lock);
    return n > 0;
}

/* Module close: the merge's open segment sealed (a restart adopts every
 * segment sealed anyway), its state freed. */
static void
merge_close(struct cache *c)
{
    struct packed_merge *m = c->merge;
    if (!m)
        return;
    m->so.owner_thread = pthread_self();
    seg_seal_all(c->seg, &m->so);
    if (m->spare != SEG_NO_PAGE)
        pool_page_put(c->pool, m->spare);
    c->packed_evict = NULL;
    c->merge = NULL;
    pthread_mutex_destroy(&m->lock);
    free(m->fix);
    free(m);
}

int
packed_merge_open(struct cache *c)
{
    static const struct cache_module merge_module = {.close = merge_close};
    if (!c->seg || c->cfg.packed_evict != TC_PACKED_EVICT_MERGE)
        return 0;
    struct packed_merge *m = calloc(1, sizeof(*m));
    if (!m || pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        err_set("no DRAM for the packed store's merge");
        return -ENOMEM;
    }
    seg_open_init(&m->so, (uint16_t)atomic_fetch_add_explicit(
                              &c->seg_owners, 1, memory_order_relaxed));
    m->so.uncapped = true; /* one segment a bucket, beside the threads' */
    if (pool_page_get(c->pool, &m->spare) != 0)
        m->spare = SEG_NO_PAGE;
    c->merge = m;
    int rc = cache_add_module(c, &merge_module);
    if (rc) {
        merge_close(c);
        err_set("too many engine modules for the packed store's merge");
        return rc;
    }
    c->packed_evict = packed_merge_evict;
    return 0;
}

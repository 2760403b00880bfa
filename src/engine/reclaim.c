/*
 * Item memory under pressure: allocating an item's chunks, and getting
 * memory back when there are none: CLOCK eviction (offering each cold
 * victim to the spill hook a tier registered first), the expiry sweep and
 * page draining (moving live items off a page, for page reassignment and
 * pool shrink). Allocation and eviction call each other (an allocation
 * evicts; a drain allocates for the items it moves), hence one file. The
 * maintenance thread that runs the sweep is src/engine/maint.c.
 *
 * Eviction state is DRAM only: the slab's per-chunk reference bits, set by
 * readers and cleared by the CLOCK hand (slab_scan). A candidate chunk's
 * header is read from PMEM without the index vouching for it, so it may be
 * free, half-written or stale: read_victim() copies it with bounds checks,
 * and the item is taken only if the index, under the bucket lock, still
 * points at exactly that chunk.
 *
 * Concurrency:
 *   c->admin (a maintenance token, see src/engine/cache.h) serialises sweep
 *     cursors, reassignment and shrink; no other lock is held when it is
 *     taken. t->in_admin marks the
 *     thread holding it so that allocation under it never reassigns pages
 *     (which would take admin again). A page drain copies items (PMEM
 *     writes) while holding it, so only callers that cannot go on without
 *     a page wait for it (RECLAIM_WAIT: an allocation whose class has
 *     nothing left to evict, shrink, the tc_slab_reassign command); the
 *     flash tier's header-page chances take it only when free
 *     (RECLAIM_TRY) and retry after a later eviction batch.
 *   c->move[]: page moves waiting for chunks other threads hold, under
 *     admin (their page field also read relaxed, unlocked, for stats).
 *   c->evict_cur[cls]: under the class lock, inside slab_scan().
 *   c->shrink_target: written by tc_set_mem_limit, read and cleared under
 *     admin; an atomic, since the maintenance thread peeks at it unlocked
 *     (relaxed). The read that starts a shrink is acquire, pairing with
 *     tc_set_mem_limit's release store made after it lowered the limit.
 *   c->spill: set at open and close (reclaim_set_spill), read-only while
 *     threads use the cache.
 *   Item copies during relocation happen with no lock held.
 */
#include "src/engine/reclaim.h"

#include "src/base/crashpoint.h"
#include "src/base/clock.h"
#include "src/engine/cache.h"
#include "src/engine/cache_packed.h"
#include "src/engine/packed.h"
#include "tier/pm.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <urcu/urcu-memb.h>

#define EVICT_BATCH 32
#define EVICT_BUDGET 4096
#define DRAIN_BATCH 1024
#define DRAIN_ROUNDS 8
/* Walks of a waiting move's page per later attempt: the first moves items
 * published on it since, the second sees chunks given back meanwhile. */
#define SETTLE_ROUNDS 2
/* How long a page move may wait for chunks other threads hold before it is
 * given up for another page: far longer than a server worker takes to give
 * its stash back (its next request, or its poll before a short wait). */
#define MOVE_PATIENCE_NS (500ull * 1000 * 1000)

struct victim {
    uint64_t head; /* offset of the head chunk */
    uint64_t hash;
};

/* --- allocation --- */

/* Whether the class owns any page (else eviction there finds nothing). */
static bool
class_has_pages(struct cache *c, unsigned cls)
{
    struct slab_class_stats st;
    slab_class_stats(c->slab, cls, &st);
    return st.pages > 0;
}

/* The classes a store of plan takes chunks from: a bit a class. */
static uint64_t
plan_classes(struct cache *c, const struct item_plan *plan)
{
    uint64_t m = 1ull << slab_class_for(c->slab, plan->head_size);
    if (plan->nchain > 1)
        m |= 1ull << slab_class_for(c->slab, c->chunk_max);
    if (plan->nchain > 0)
        m |= 1ull << slab_class_for(c->slab, plan->last_size);
    return m;
}

static int reassign(struct cache_thread *t, int src, int dst,
                    enum reclaim_how how, uint64_t keep);

/*
 * One chunk of class cls for a store of plan, the quota's stash empty:
 * evict cold items of the class (CLOCK may need several passes to find
 * one); else wait for pending deferred frees; else take a page from
 * another class, never the one page of a class plan needs too (taken from
 * under it, that class would take it back, and so on: with nobody but this
 * thread to give chunks back, for good). 0, -EBUSY (a page move waits for
 * chunks other threads hold, or this one: come back, holding no chunk) or
 * -ENOMEM.
 */
static __attribute__((noinline, cold)) int
alloc_chunk_slow(struct cache_thread *t, unsigned cls,
                 const struct item_plan *plan, uint64_t *off)
{
    struct cache *c = t->cache;
    int evict_misses = 0;

    for (int attempt = 0; attempt < 32; attempt++) {
        if (attempt > 0 && quota_alloc(t->quota, cls, off) == 0)
            return 0;
        /* memory freed but waiting for readers comes first: cheaper than
         * evicting, and eviction must not outrun it */
        if (attempt == 0 && cache_reclaim_limbo(t) > 0)
            continue;
        if (c->cfg.evict && evict_misses < 8) {
            if (reclaim_evict(t, cls) > 0)
                continue;
            if (++evict_misses < 8 && class_has_pages(c, cls))
                continue;
        }
        if (cache_reclaim_limbo(t) > 0)
            continue;
        if (t->in_admin)
            break; /* a drain's own copy: it must not move pages */
        /* the packed store gives a page back: a segment whose items all
         * expired, else its oldest (a class with no page to evict from
         * would else fail) */
        if (c->seg && packed_evict_expired(t, PACKED_EXPIRE_LOOK))
            continue;
        if (c->seg && c->cfg.evict && packed_evict_oldest(t))
            continue;
        /* a page with room elsewhere (with -M too: its items move into
         * free chunks, none is evicted) */
        int rc = reassign(t, -1, (int)cls, RECLAIM_WAIT, plan_classes(c, plan));
        if (rc == 0)
            continue;
        /* with evictions on, a class (this or another) with nothing to
         * evict or move right now has chunks other threads hold (their
         * stashes, items being written, frees awaiting readers) or this
         * one does (the item's chunks so far). They come back at those
         * threads' next operation (quota_gen asks), this one's below. */
        if (c->cfg.evict && (rc == -EBUSY || rc == -ENOENT))
            return -EBUSY;
        return -ENOMEM;
    }
    /* other threads took every chunk this found first: come back too */
    return c->cfg.evict && !t->in_admin ? -EBUSY : -ENOMEM;
}

/* One chunk for size: from the quota, else as alloc_chunk_slow(). Its
 * class in *cls. */
static inline __attribute__((always_inline)) int
alloc_chunk(struct cache_thread *t, uint32_t size, const struct item_plan *plan,
            uint64_t *off, unsigned *cls)
{
    *cls = (unsigned)slab_class_for(t->cache->slab, size);
    if (likely(quota_alloc(t->quota, *cls, off) == 0))
        return 0;
    return alloc_chunk_slow(t, *cls, plan, off);
}

/* Give back the first n tails of an item whose allocation failed with rc;
 * returns rc. Out of the way of the store's hot path. */
static __attribute__((noinline, cold)) int
alloc_item_undo(struct cache_thread *t, uint64_t *tails, unsigned n, int rc)
{
    while (n-- > 0)
        quota_free(t->quota, slab_class_of(t->cache->slab, tails[n]), tails[n]);
    return rc;
}

/* The chunks of plan, all or none: 0, -EBUSY or -ENOMEM. Inlined in both
 * callers: reclaim_alloc_item's first attempt is the store's hot path. */
static inline __attribute__((always_inline)) int
alloc_item_once(struct cache_thread *t, const struct item_plan *plan,
                uint64_t *head, uint64_t *tails, unsigned *head_cls)
{
    struct cache *c = t->cache;
    unsigned cls;
    int rc;

    for (unsigned i = 0; i < plan->nchain; i++) {
        uint32_t size = i + 1 == plan->nchain ? plan->last_size : c->chunk_max;
        if ((rc = alloc_chunk(t, size, plan, &tails[i], &cls)) != 0)
            return alloc_item_undo(t, tails, i, rc);
    }
    if ((rc = alloc_chunk(t, plan->head_size, plan, head, head_cls)) != 0)
        return alloc_item_undo(t, tails, plan->nchain, rc);
    return 0;
}

/* Wait a little for other threads to give chunks back: yield first, then
 * sleep, up to a millisecond. */
static void
alloc_backoff(unsigned tries)
{
    if (tries < 4) {
        sched_yield();
        return;
    }
    long ns = tries < 14 ? 1000l << (tries - 4) : 1000l * 1000;
    struct timespec ts = {0, ns < 1000 * 1000 ? ns : 1000 * 1000};
    nanosleep(&ts, NULL);
}

/*
 * With evictions on, a store never fails while the pool has pages that can
 * be evicted or moved: when the only way to memory is a page move that
 * waits for chunks other threads hold (or this one: a chained item's
 * chunks taken so far may sit on the page a move picked), this thread
 * gives back everything it holds (those chunks, its stash, its deferred
 * frees) and comes back, for at most cfg.alloc_wait_ms (3 s by default; a
 * page move itself gives up on a page after MOVE_PATIENCE_NS, so this
 * leaves room for several donors: only a thread that sleeps with a stash
 * without tc_thread_quiesce, or a machine far too loaded, makes a store
 * wait that long). Each attempt goes on with the waiting moves itself
 * (reassign settles them first), so a move that waited for this thread's
 * own chunks ends at the next attempt. A thread alone with its cache (no
 * maintenance thread, no other user) does not sleep: nobody else can give
 * anything back, so what its own attempts cannot finish stays as it is,
 * and after ALONE_TRIES of them the store fails at once. The first
 * attempt is the whole cost when memory is there: no clock read, no
 * counter.
 */
/* Attempts of a thread alone with its cache: the first gives back what it
 * held and finishes the moves that waited for it, the next take the pages
 * those moves freed (a chained item may need a page for its last piece's
 * class and one for its head's). */
#define ALONE_TRIES 4

/* reclaim_alloc_item's wait, out of its way: the first attempt said
 * -EBUSY. */
static __attribute__((noinline, cold)) int
alloc_item_wait(struct cache_thread *t, const struct item_plan *plan,
                uint64_t *head, uint64_t *tails, unsigned *head_cls)
{
    uint64_t start = clock_nsec();

    cache_stat_inc(t, ST_ALLOC_WAITS);
    for (unsigned tries = 0;; tries++) {
        bool alone = cache_thread_alone(t);
        cache_thread_quiesce(t);
        if (!alone)
            alloc_backoff(tries);
        int rc = alloc_item_once(t, plan, head, tails, head_cls);
        if (rc != -EBUSY)
            return rc;
        if (alone && tries + 1 >= ALONE_TRIES)
            return -ENOMEM;
        if (clock_nsec() - start >
            (uint64_t)t->cache->cfg.alloc_wait_ms * 1000000)
            return -ENOMEM;
    }
}

int
reclaim_alloc_item_cls(struct cache_thread *t, const struct item_plan *plan,
                       uint64_t *head, uint64_t *tails, unsigned *head_cls)
{
    int rc = alloc_item_once(t, plan, head, tails, head_cls);
    if (likely(rc == 0))
        return 0;
    return rc == -EBUSY ? alloc_item_wait(t, plan, head, tails, head_cls) : rc;
}

int
reclaim_alloc_head_slow(struct cache_thread *t, const struct item_plan *plan,
                        unsigned cls, uint64_t *head)
{
    int rc = alloc_chunk_slow(t, cls, plan, head);
    if (likely(rc == 0))
        return 0;
    return rc == -EBUSY ? alloc_item_wait(t, plan, head, NULL, &cls) : rc;
}

int
reclaim_alloc_item(struct cache_thread *t, const struct item_plan *plan,
                   uint64_t *head, uint64_t *tails)
{
    unsigned cls;
    return reclaim_alloc_item_cls(t, plan, head, tails, &cls);
}

/* --- eviction --- */

void
reclaim_set_spill(struct cache *c, const struct reclaim_spill *s)
{
    c->spill = s;
}

/*
 * Copy a candidate's key out of a chunk nobody vouches for. The chunk may
 * be written concurrently (a fresh item not yet published): the bytes are
 * read one at a time through volatile loads, bounds-checked, and trusted
 * only after the index confirms the location under the bucket lock. TSan
 * is told this read is intended.
 */
/* Size of the chunk at off, read from its page's class once: the page may
 * leave its class (a drain) at any moment, so a caller holding no lock
 * must not look twice. False when no class owns it. */
static bool
chunk_size_of(const struct cache *c, uint64_t off, uint32_t *size)
{
    unsigned cls = slab_class_of(c->slab, off);
    if (cls == SLAB_NO_CLASS)
        return false;
    *size = slab_chunk_size(c->slab, cls);
    return true;
}

__attribute__((no_sanitize_thread)) static bool
read_victim(const struct cache *c, uint64_t off, struct victim *v)
{
    const volatile uint8_t *p = (const volatile uint8_t *)(c->base + off);
    uint32_t size;
    char key[TC_KEY_MAX];

    if (!chunk_size_of(c, off, &size))
        return false;
    if (p[0] == ITEM_KIND_TAIL) {
        uint64_t head = 0;
        for (unsigned i = 0; i < 8; i++)
            head |= (uint64_t)p[8 + i] << (8 * i);
        if (head % 8 ||
            head >= (uint64_t)pool_npages(c->pool) << POOL_PAGE_SHIFT ||
            !chunk_size_of(c, head, &size))
            return false;
        off = head;
        p = (const volatile uint8_t *)(c->base + off);
    }
    uint8_t klen = p[1];
    if (!item_kind_is_head(p[0]) || klen == 0 || klen > TC_KEY_MAX ||
        sizeof(struct item_hdr) + klen > size)
        return false;
    for (unsigned i = 0; i < klen; i++)
        key[i] = (char)p[sizeof(struct item_hdr) + i];
    v->head = off;
    v->hash = cache_hash(c, key, klen);
    return true;
}

/* Unlink the victim if the index still holds it: its liveness under the
 * lock in *dead. Locks: one bucket. */
static bool
unlink_victim(struct cache *c, const struct victim *v, bool dead_only,
              enum cache_dead *dead)
{
    struct htab_bucket *b = htab_lock(c->htab, v->hash);
    _Atomic uint64_t *slot = htab_find_loc_locked(b, cache_loc(v->head));
    bool taken = false;
    if (slot) {
        *dead = cache_item_dead(c, item_at(c->base, v->head), clock_now());
        if (!dead_only || *dead != CACHE_LIVE) {
            cache_floor_unlink(c, v->hash, v->head);
            htab_remove_locked(c->htab, slot);
            taken = true;
        }
    }
    htab_unlock(b);
    return taken;
}

int
reclaim_evict(struct cache_thread *t, unsigned cls)
{
    struct cache *c = t->cache;
    uint64_t offs[EVICT_BATCH], freed[EVICT_BATCH];
    unsigned n = slab_scan(c->slab, cls, &c->evict_cur[cls], SLAB_SCAN_CLOCK,
                           EVICT_BUDGET, offs, EVICT_BATCH);
    unsigned nfreed = 0;

    for (unsigned i = 0; i < n; i++) {
        struct victim v;
        enum cache_dead dead;
        if (!read_victim(c, offs[i], &v))
            continue;
        /* a cold value big enough moves to flash (the spill hook): its
         * item left the index for a flash header and is freed like an
         * evicted one */
        if (c->spill && c->spill->spill(t, v.head, v.hash)) {
            freed[nfreed++] = v.head;
            continue;
        }
        if (!unlink_victim(c, &v, false, &dead))
            continue;
        cache_account_unlink(t, v.head, dead, UNLINK_EVICTED);
        freed[nfreed++] = v.head;
    }
    if (!nfreed) {
        if (c->spill)
            c->spill->after_evict(t, cls);
        return 0;
    }
    TC_CRASH_POINT("evict.unlinked");
    /* PMEM: the victims must not come back after a crash (item_layout.h);
     * no lock is held here */
    for (unsigned i = 0; i < nfreed; i++)
        cache_invalidate(c, freed[i]);
    /* The memory is needed now: wait for readers instead of deferring. */
    urcu_memb_synchronize_rcu();
    cache_rcu_synced();
    for (unsigned i = 0; i < nfreed; i++)
        cache_free_now(t, freed[i]);
    if (c->spill)
        c->spill->after_evict(t, cls);
    return (int)nfreed;
}

int
reclaim_sweep(struct cache_thread *t, unsigned budget)
{
    struct cache *c = t->cache;
    uint64_t offs[64];
    int reclaimed = 0;
    unsigned ncls = slab_nclasses(c->slab);
    unsigned packed_budget = budget;

    pthread_mutex_lock(&c->admin);
    for (unsigned step = 0; step < ncls && budget > 0; step++) {
        unsigned cls = c->sweep_cls;
        unsigned look = MIN(budget, 4096u);
        unsigned n = slab_scan(c->slab, cls, &c->sweep_cur[cls], SLAB_SCAN_ALL,
                               look, offs, ARRAY_SIZE(offs));
        budget -= look;
        for (unsigned i = 0; i < n; i++) {
            struct victim v;
            enum cache_dead dead;
            if (!read_victim(c, offs[i], &v) ||
                !unlink_victim(c, &v, true, &dead))
                continue;
            cache_account_unlink(t, v.head, dead, UNLINK_SWEPT);
            cache_stat_inc(t, ST_SWEEP_RECLAIMED);
            cache_defer_free(t, v.head);
            reclaimed++;
        }
        /* stay on a class until its cursor wraps, then move on */
        if (c->sweep_cur[cls].page_idx == 0 && c->sweep_cur[cls].chunk < look)
            c->sweep_cls = (cls + 1) % ncls;
    }
    /* the packed store's sealed segments, as many items again */
    reclaimed += packed_sweep(t, packed_budget);
    pthread_mutex_unlock(&c->admin);
    cache_defer_flush(t);
    return reclaimed;
}

/* --- relocation --- */

/* Chunks for a moved item from free chunks the classes already have (no
 * new page, no eviction): 0 or -ENOSPC. */
static int
alloc_existing(struct cache *c, const struct item_plan *plan, uint64_t *head,
               uint64_t *tails)
{
    unsigned i;
    for (i = 0; i < plan->nchain; i++) {
        uint32_t size = i + 1 == plan->nchain ? plan->last_size : c->chunk_max;
        int cls = slab_class_for(c->slab, size);
        if (slab_take_existing(c->slab, (unsigned)cls, &tails[i], 1) != 1)
            goto err_give;
    }
    int cls = slab_class_for(c->slab, plan->head_size);
    if (slab_take_existing(c->slab, (unsigned)cls, head, 1) == 1)
        return 0;
err_give:
    while (i-- > 0)
        slab_give(c->slab, slab_class_of(c->slab, tails[i]), &tails[i], 1);
    return -ENOSPC;
}

/* Copy the live item at v->head into fresh chunks (never from a draining
 * page) and switch the index; if there is no room, evict it instead.
 * new_pages: the copy may take pages from the pool (shrink) or only free
 * chunks the classes already hold (reassignment, as memcached's
 * rebalancer). True when the item stays where it is (-M and no room).
 * Context: admin held, no other lock, no RCU section. */
static bool
relocate(struct cache_thread *t, const struct victim *v, bool new_pages)
{
    struct cache *c = t->cache;
    struct item_desc hdr;
    struct item_plan plan;
    uint64_t head, tails[ITEM_MAX_TAILS], old = cache_loc(v->head);
    enum cache_dead dead;

    /* the header is read only while the index holds the item: else the
     * chunk may be free and being rewritten (nothing to move then) */
    cache_read_lock();
    bool held = htab_holds_rcu(c->htab, v->hash, old);
    if (held)
        item_hdr_load(&hdr, item_at(c->base, v->head));
    cache_read_unlock();
    if (!held)
        return false;
    item_plan(hdr.klen, hdr.iflags, hdr.vlen, c->chunk_max, &plan);
    if (hdr.kind == ITEM_KIND_FLASH) /* a header chunk, value on flash */
        plan = (struct item_plan){.head_size =
                                      item_flash_size(hdr.klen, hdr.iflags)};
    int rc = new_pages ? reclaim_alloc_item(t, &plan, &head, tails)
                       : alloc_existing(c, &plan, &head, tails);
    if (rc != 0 && !c->cfg.evict)
        return true; /* -M: never evict; the page stays, the drain fails */
    if (rc != 0) {
        /* no room to move it: a cold value big enough goes to flash
         * rather than away, as at eviction */
        if (c->spill && c->spill->spill(t, v->head, v->hash)) {
            cache_defer_free(t, v->head);
            return false;
        }
        if (unlink_victim(c, v, false, &dead)) {
            cache_account_unlink(t, v->head, dead, UNLINK_EVICTED);
            cache_defer_free(t, v->head);
        }
        return false;
    }

    /* PMEM: copy with no lock held; the old item cannot be freed while we
     * are in the read section, and the swap below checks it is current.
     * The copy is committed only once published (item_layout.h): a writer
     * that replaces or removes it after the swap invalidates it before it
     * answers, and the commit then fails; the source is invalidated before
     * the swap, so that writer never leaves it valid behind (a crash
     * between the two loses the key, a miss). */
    cache_read_lock();
    const struct item_hdr *it = item_at(c->base, v->head);
    /* The copy keeps the source's store sequence, not a new one: a set of
     * this key that took its sequence before this move and publishes after
     * the check below answers before the copy is found stale and
     * invalidated; a crash in between must find the acknowledged item
     * newer than the copy of the one it replaced (item_layout.h). */
    bool same = htab_holds_rcu(c->htab, v->hash, old) &&
                item_seq(it) == hdr.seq && it->kind == hdr.kind &&
                item_kind_is_head(hdr.kind) &&
                item_committed(__atomic_load_n(&it->commit, __ATOMIC_RELAXED));
    uint32_t word = 0;
    if (same && hdr.kind == ITEM_KIND_FLASH) {
        hdr.exptime = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
        word = item_write_flash(c->base, head, &hdr, item_key(it),
                                item_flash_loc(it), true);
        pm_fence();
    } else if (same) {
        struct iovec iov[ITEM_MAX_TAILS + 1];
        int n = item_value_iov(c->base, it, c->chunk_max, iov);
        struct item_src src = {iov, n};
        hdr.exptime = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
        word = item_write(c->base, head, &plan, tails, &hdr, item_key(it), &src,
                          true);
        pm_fence();
        slab_atime_copy(c->slab, head, v->head); /* meta l survives a move */
    }
    TC_CRASH_POINT("move.copied");
    if (same)
        item_invalidate(c->base, v->head);

    struct htab_bucket *b = htab_lock(c->htab, v->hash);
    _Atomic uint64_t *slot = same ? htab_find_loc_locked(b, old) : NULL;
    if (slot)
        htab_replace_locked(slot, v->hash, cache_loc(head));
    htab_unlock(b);
    if (slot) {
        TC_CRASH_POINT("move.published");
        /* failed: a writer replaced the copy and retires it */
        (void)item_commit_copy(c->base, head, word);
    }
    cache_read_unlock();
    if (slot)
        cache_defer_free(t, v->head); /* CAS kept: clients see no change */
    else
        cache_free_unpublished(t, &plan, head, tails);
    return false;
}

/* Whether the index still holds the item at v->head: a chunk on a draining
 * page that it does not (a free chunk in a thread's stash, an item being
 * written or already replaced) keeps its stale header, and copying that
 * would be wasted (the swap in relocate would find it gone). Locks: one
 * bucket. */
static bool
victim_current(struct cache *c, const struct victim *v)
{
    struct htab_bucket *b = htab_lock(c->htab, v->hash);
    bool cur = htab_find_loc_locked(b, cache_loc(v->head)) != NULL;
    htab_unlock(b);
    return cur;
}

/* Relocate the live chunks of a draining page, walking it once: how many
 * live items stayed (-M, no room elsewhere). */
static unsigned
drain_round(struct cache_thread *t, uint32_t page, bool new_pages)
{
    struct cache *c = t->cache;
    uint64_t offs[DRAIN_BATCH];
    uint32_t from = 0;
    unsigned n, stuck = 0, busy = 0;

    do {
        n = slab_drain_live_from(c->slab, page, from, offs, DRAIN_BATCH);
        for (unsigned i = 0; i < n; i++) {
            struct victim v;
            if (!read_victim(c, offs[i], &v) || !victim_current(c, &v))
                busy++; /* held elsewhere: a stash, a write, limbo */
            else if (relocate(t, &v, new_pages))
                stuck++;
        }
        if (n)
            from =
                (uint32_t)((offs[n - 1] & (POOL_PAGE_SIZE - 1)) /
                               slab_chunk_size(
                                   c->slab, slab_class_of(c->slab, offs[0])) +
                           1);
    } while (n == DRAIN_BATCH);
    /* chunks that stay allocated (stashed, in flight) wait for the next
     * round; the moved items' old chunks come back from limbo here */
    cache_reclaim_limbo(t);
    quota_flush(t->quota);
    cache_stat_add(t, ST_REASSIGN_BUSY_ITEMS, busy);
    return stuck;
}

/* Empty a draining page into the pool, in up to rounds walks: 0, -ENOSPC
 * (live items stayed: -M and no room for them) or -EBUSY (what is left
 * are chunks other threads hold: free ones in their stashes, items being
 * written; they come back at those threads' next operation). Context:
 * admin held. */
static int
drain_page(struct cache_thread *t, uint32_t page, bool new_pages, int rounds)
{
    struct cache *c = t->cache;
    unsigned stuck = 0;
    for (int round = 0; round < rounds; round++) {
        if (slab_drain_finish(c->slab, page) == 0)
            return 0;
        stuck = drain_round(t, page, new_pages);
    }
    if (slab_drain_finish(c->slab, page) == 0)
        return 0;
    return stuck ? -ENOSPC : -EBUSY;
}

/* Begin and empty one page for reassignment: 0 (the page is in the pool)
 * or as drain_page(), the page still draining (or -EINVAL from
 * slab_drain_begin: it never began). Context: admin held. */
static int
drain_for_reassign(struct cache_thread *t, uint32_t page)
{
    struct cache *c = t->cache;
    quota_flush(t->quota);
    int rc = slab_drain_begin(c->slab, page);
    if (rc)
        return rc;
    /* other threads give their stashes back at their next operation */
    atomic_fetch_add_explicit(&c->quota_gen, 1, memory_order_relaxed);
    return drain_page(t, page, false, DRAIN_ROUNDS);
}

/* The class to take a page from for dst, or -1: not dst nor one in avoid
 * (a bit a class), nor one in keep (the classes the store that asks needs
 * too) with one page only; a class with more than one page, or whose one
 * page is all free, before the others; then the most free bytes; then the
 * most pages. Bytes, not chunks: a page of small chunks has thousands
 * free. Ranked by free chunks, with only the one page of a small class
 * taken, a store of a chained item whose head and last tail needed two
 * such classes sent one page back and forth between them and was
 * refused. *kept: a class was passed over for keep only. */
static int
pick_donor(struct cache *c, int dst, uint64_t avoid, uint64_t keep, bool *kept)
{
    int best = -1;
    bool best_spare = false;
    uint64_t best_free = 0, best_pages = 0;
    *kept = false;
    for (unsigned i = 0; i < slab_nclasses(c->slab); i++) {
        struct slab_class_stats st;
        slab_class_stats(c->slab, i, &st);
        if ((int)i == dst || (avoid >> i & 1) || st.pages == 0)
            continue;
        if ((keep >> i & 1) && st.pages == 1) {
            *kept = true;
            continue;
        }
        bool spare = st.pages > 1 || st.free_chunks >= st.perpage;
        uint64_t free_bytes = st.free_chunks * st.chunk_size;
        if (best < 0 || spare > best_spare ||
            (spare == best_spare &&
             (free_bytes > best_free ||
              (free_bytes == best_free && st.pages > best_pages)))) {
            best = (int)i;
            best_spare = spare;
            best_free = free_bytes;
            best_pages = st.pages;
        }
    }
    return best;
}

/* Pick a page of class src and empty it into the pool (its items moved,
 * spilled or evicted): 0 or a negative errno, the page back in service.
 * Context: admin held. */
static int
drain_one_of(struct cache_thread *t, unsigned src)
{
    uint32_t page;
    int rc = slab_drain_pick(t->cache->slab, src, 0, &page);
    if (rc == 0 && (rc = drain_for_reassign(t, page)) != 0 && rc != -EINVAL)
        slab_drain_abort(t->cache->slab, page);
    return rc;
}

/* Take admin for t: 0, or -EBUSY when t holds it already or (how
 * RECLAIM_TRY) another thread does, which may be draining a page for a
 * while (writing PMEM). */
static int
admin_enter(struct cache_thread *t, enum reclaim_how how)
{
    if (t->in_admin)
        return -EBUSY;
    if (how == RECLAIM_TRY) {
        if (pthread_mutex_trylock(&t->cache->admin) != 0)
            return -EBUSY;
    } else {
        pthread_mutex_lock(&t->cache->admin);
    }
    t->in_admin = true;
    return 0;
}

static void
admin_leave(struct cache_thread *t)
{
    t->in_admin = false;
    pthread_mutex_unlock(&t->cache->admin);
}

/* Empty one page of class src, as for a reassignment, and take it from the
 * pool into *page, for the caller to keep: 0, or a negative errno (also
 * when another class took the freed page first, and -EBUSY when admin is
 * busy and how is RECLAIM_TRY). Context: no lock, no RCU section. Locks:
 * admin. */
int
reclaim_take_page(struct cache_thread *t, int src, uint32_t *page,
                  enum reclaim_how how)
{
    struct cache *c = t->cache;

    if (src < 0 || src >= (int)slab_nclasses(c->slab))
        return -EINVAL;
    if (admin_enter(t, how) != 0)
        return -EBUSY;
    int rc = drain_one_of(t, (unsigned)src);
    if (rc == 0)
        rc = pool_page_get(c->pool, page);
    if (rc == 0)
        cache_stat_inc(t, ST_REASSIGNS);
    admin_leave(t);
    return rc;
}

/* --- page moves --- */

/* A drained page is in the pool: hand one to dst now (unless -1) so that
 * it is dst's even if another class asks first. */
static void
move_done(struct cache_thread *t, int dst)
{
    if (dst >= 0)
        slab_grow(t->cache->slab, (unsigned)dst);
    cache_stat_inc(t, ST_REASSIGNS);
}

static void
move_clear(struct cache *c, unsigned i)
{
    atomic_store_explicit(&c->move[i].page, UINT32_MAX, memory_order_relaxed);
}

bool
reclaim_move_waiting(struct cache *c)
{
    for (unsigned i = 0; i < CACHE_MOVES_MAX; i++)
        if (atomic_load_explicit(&c->move[i].page, memory_order_relaxed) !=
            UINT32_MAX)
            return true;
    return false;
}

/*
 * Go on with page move i, which was waiting for chunks other threads held:
 * walk the page again (items published on it since, limbo frees) and
 * finish it. 0: it waits no more (*done: the dst it went to, or -2 when it
 * did not finish); -EBUSY: still waiting. One that has waited past
 * MOVE_PATIENCE_NS is given up, its page back in service, and its class
 * goes into *avoid so that the caller picks another donor (a thread that
 * holds a stash and never comes back, e.g. an embedder's thread asleep
 * without tc_thread_quiesce, would hold it for good). Context: admin held.
 */
static int
move_settle(struct cache_thread *t, unsigned i, int *done, uint64_t *avoid)
{
    struct cache *c = t->cache;
    uint32_t page =
        atomic_load_explicit(&c->move[i].page, memory_order_relaxed);

    *done = -2;
    if (page == UINT32_MAX)
        return 0;
    /* a shrink may have taken the page meanwhile */
    if (!slab_page_draining(c->slab, page) ||
        slab_class_of(c->slab, (uint64_t)page << POOL_PAGE_SHIFT) !=
            c->move[i].cls) {
        move_clear(c, i);
        return 0;
    }
    int rc = drain_page(t, page, false, SETTLE_ROUNDS);
    if (rc == 0) {
        *done = c->move[i].dst;
        move_done(t, c->move[i].dst);
    } else if (rc == -EBUSY &&
               clock_nsec() - c->move[i].since_ns < MOVE_PATIENCE_NS) {
        /* ask again: since the last ask, threads may have unlinked items
         * of the page (a set replacing one) into their deferred frees */
        atomic_fetch_add_explicit(&c->quota_gen, 1, memory_order_relaxed);
        *avoid |= 1ull << c->move[i].cls;
        return -EBUSY;
    } else {
        slab_drain_abort(c->slab, page);
        *avoid |= 1ull << c->move[i].cls;
        cache_stat_inc(t, ST_REASSIGN_GAVE_UP);
    }
    move_clear(c, i);
    return 0;
}

/* Start moving a page of class src to dst (-1: to the pool): 0 when done,
 * -EBUSY when it waits for chunks other threads hold (in move slot i,
 * which move_settle goes on with), another negative errno when it failed
 * (the page back in service). Context: admin held, slot i free. */
static int
move_start(struct cache_thread *t, unsigned i, unsigned src, int dst)
{
    struct cache *c = t->cache;
    uint32_t page;
    int rc = slab_drain_pick(c->slab, src, 0, &page);
    if (rc)
        return rc;
    rc = drain_for_reassign(t, page);
    if (rc == 0) {
        move_done(t, dst);
    } else if (rc == -EBUSY) {
        atomic_store_explicit(&c->move[i].page, page, memory_order_relaxed);
        c->move[i].cls = src;
        c->move[i].dst = dst;
        c->move[i].since_ns = clock_nsec();
    } else if (rc != -EINVAL) {
        slab_drain_abort(c->slab, page);
    }
    return rc;
}

/*
 * Waiting page moves are gone on with first; one that finishes for dst
 * answers the call. Else, with a move slot free, a new move starts from a
 * class no waiting move drains: a donor page whose chunks sit in other
 * threads' stashes does not hold up the next one. With every slot taken
 * and waiting, the answer is -EBUSY (the caller comes back; see
 * reclaim_alloc_item). A waiting page stays draining, so the work done on
 * it (items moved, spilled or evicted) is not thrown away, and no thread
 * waits for chunks while it holds admin. keep: the classes the store that
 * asks takes chunks from; the one page of such a class is no donor. When
 * that leaves none, dst has no page and no move waits, the pool has fewer
 * pages than the store needs classes, whatever other threads give back:
 * -ENOSPC (the store fails at once).
 */
static int
reassign(struct cache_thread *t, int src, int dst, enum reclaim_how how,
         uint64_t keep)
{
    struct cache *c = t->cache;
    int n = (int)slab_nclasses(c->slab);
    uint64_t avoid = 0;
    int done, rc = -EBUSY, slot = -1;
    bool got = false, kept = false;

    if (dst < 0 || dst >= n || src >= n || src == dst || src < -1)
        return -EINVAL;
    if (admin_enter(t, how) != 0)
        return -EBUSY;
    for (unsigned i = 0; i < CACHE_MOVES_MAX; i++) {
        if (move_settle(t, i, &done, &avoid) == 0) {
            got |= done == dst;
            slot = (int)i;
        }
    }
    if (got && src < 0)
        rc = 0; /* a waiting move was for dst: it has its page */
    else if (slot >= 0 && src < 0 &&
             (src = pick_donor(c, dst, avoid, keep, &kept)) < 0)
        rc = kept && !avoid && !class_has_pages(c, (unsigned)dst) ? -ENOSPC
                                                                  : -ENOENT;
    else if (slot >= 0 && (src < 0 || !(avoid >> src & 1)))
        rc = move_start(t, (unsigned)slot, (unsigned)src, dst);
    admin_leave(t);
    return rc;
}

int
reclaim_reassign(struct cache_thread *t, int src, int dst, enum reclaim_how how)
{
    return reassign(t, src, dst, how, 0);
}

void
reclaim_settle(struct cache_thread *t)
{
    uint64_t avoid = 0;
    int done;
    if (admin_enter(t, RECLAIM_WAIT) != 0)
        return;
    for (unsigned i = 0; i < CACHE_MOVES_MAX; i++)
        move_settle(t, i, &done, &avoid);
    admin_leave(t);
}

/* Give the memory of free pages at or above the limit back to the system. */
static void
discard_above(struct cache *c, uint32_t limit)
{
    for (uint32_t p = limit; p < pool_npages(c->pool); p++)
        if (slab_class_of(c->slab, (uint64_t)p << POOL_PAGE_SHIFT) ==
                SLAB_NO_CLASS &&
            !packed_page_held(c, p))
            region_discard(c->region, (uint64_t)p << POOL_PAGE_SHIFT,
                           POOL_PAGE_SIZE);
}

int
reclaim_shrink(struct cache_thread *t)
{
    struct cache *c = t->cache;
    uint32_t page;
    int rc = 0;

    if (admin_enter(t, RECLAIM_WAIT) != 0)
        return -EBUSY; /* t holds admin (a shrink from inside a drain) */
    /* acquire: pairs with tc_set_mem_limit's release store, after the pool
     * limit was lowered */
    uint32_t target =
        atomic_load_explicit(&c->shrink_target, memory_order_acquire);
    for (unsigned cls = 0; target && cls < slab_nclasses(c->slab); cls++) {
        /* stop allocation from every page above the target first, so
         * moved items land below it */
        while (slab_drain_pick(c->slab, cls, target, &page) == 0)
            slab_drain_begin(c->slab, page);
    }
    atomic_fetch_add_explicit(&c->quota_gen, 1, memory_order_relaxed);
    for (uint32_t p = target; target && p < pool_npages(c->pool); p++) {
        if (slab_class_of(c->slab, (uint64_t)p << POOL_PAGE_SHIFT) ==
            SLAB_NO_CLASS)
            continue;
        quota_flush(t->quota);
        if (drain_page(t, p, true, DRAIN_ROUNDS) != 0)
            rc = -EBUSY;
    }
    /* the packed store's segments above it go whole; an open one stays
     * until its owner seals it (the shrink is tried again) */
    for (uint32_t p = target; target && c->seg && p < pool_npages(c->pool); p++)
        if (packed_evict_page(t, p) < 0)
            rc = -EBUSY;
    if (target) {
        TC_CRASH_POINT("shrink.drained");
        discard_above(c, target);
        if (rc == 0)
            atomic_store_explicit(&c->shrink_target, 0, memory_order_relaxed);
    }
    admin_leave(t);
    return rc;
}

/*
 * Packed items' fields for any engine path that meets one (src/engine/
 * packed.c stores them, doc/design/small-items.md), and the item-kind-blind
 * death, CAS and expiry of an engine offset (slab, DRAM or packed). No
 * shared state of its own: the caller keeps the item live (an RCU section
 * or its bucket lock), as src/engine/cache.h says.
 */
#include "src/engine/cache_packed.h"

#include "src/engine/pitem.h"
#include "src/base/compiler.h"
#include "tier/nvs.h"
#include "tier/pm.h"

#include <sched.h>
#include <stdatomic.h>

void
cache_packed_invalidate(struct cache *c, uint64_t off)
{
    /* the segment and the offset in it: a pool offset may pass 4 GiB */
    uint64_t poff = cache_packed_pool(off);
    uint64_t page = poff & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    pitem_invalidate(c->base + page, (uint32_t)(poff - page));
}

enum cache_dead
cache_off_dead(const struct cache *c, uint64_t off, uint32_t now)
{
    if (cache_off_packed(off))
        return cache_packed_state(c, off, now, NULL);
    return cache_item_dead(c, cache_item_at(c, off), now);
}

uint64_t
cache_off_cas(const struct cache *c, uint64_t off)
{
    if (cache_off_packed(off)) {
        uint64_t cas = 0;
        (void)cache_packed_state(c, off, 0, &cas);
        return cas;
    }
    return item_cas(cache_item_at(c, off));
}

uint32_t
cache_off_exptime(const struct cache *c, uint64_t off)
{
    if (cache_off_packed(off)) {
        struct pitem_view v;
        return cache_packed_view(c, off, &v) == 0 ? cache_packed_exp(c, off, &v)
                                                  : 0;
    }
    return __atomic_load_n(&cache_item_at(c, off)->exptime, __ATOMIC_RELAXED);
}

enum cache_dead
cache_flash_dead(const struct cache *c, const struct item_hdr *it)
{
    /* a DRAM check in the store, no I/O (it is a PMEM header, never a
     * copy: every caller passes item_at()) */
    if (c->nvs && !nvs_loc_live(c->nvs, item_flash_loc(it)))
        return CACHE_LOST;
    return CACHE_LIVE;
}

/* Until the packed item at head is not a pending copy: one a writer
 * unlinked may be a touch's copy whose publisher has yet to invalidate its
 * source and commit it (packed_rewrite_exp), a few instructions away. An
 * answer after its invalidation must not leave that source valid behind
 * (a restart would bring it back). Bounded, in case. */
void
cache_packed_wait_not_pending(struct cache *c, uint64_t head)
{
    const _Atomic uint16_t *commit =
        (const _Atomic uint16_t *)(void *)(c->base + cache_packed_pool(head) +
                                           PITEM_COMMIT_OFFSET);
    for (unsigned i = 0; i < (1u << 24); i++) {
        /* acquire: pairs with the publisher's compare-and-swap, after
         * its store over the source */
        if (atomic_load_explicit(commit, memory_order_acquire) !=
            PITEM_COMMIT_PENDING)
            return;
        sched_yield();
    }
}

void
cache_retire_packed(struct cache_thread *t, uint64_t head, uint32_t now)
{
    struct cache *c = t->cache;
    uint64_t poff = cache_packed_pool(head);
    uint32_t size;
    /* cache_account_unlink's packed case with why REPLACED (the counters
     * of expired_unfetched and evictions do not apply), then
     * cache_defer_free_special's: one look at the header gives the state
     * and the size (account_packed's), no call; the item was the index's
     * (the caller unlinked it): its lengths need no checks */
    if (cache_packed_state_held(c, head, now, &size) != CACHE_LIVE)
        cache_stat_inc(t, ST_RECLAIMED);
    cache_account_packed(t, size, -1);
    seg_rec_dead_add(c->seg_rec, poff, size); /* seg_dead_add's */
    _Atomic uint16_t *commit =
        (_Atomic uint16_t *)(void *)(c->base + poff + PITEM_COMMIT_OFFSET);
    if (unlikely(atomic_load_explicit(commit, memory_order_acquire) ==
                 PITEM_COMMIT_PENDING))
        cache_packed_wait_not_pending(c, head);
    /* PMEM: commit = 1 (cache_packed_invalidate's store), as in
     * cache_defer_free_special */
    TSAN_RELEASE((void *)commit);
    pm_store16((uint16_t *)(void *)commit, PITEM_COMMIT_DEAD);
}

#pragma once
/*
 * Item memory under pressure (see reclaim.c): allocating an item's chunks,
 * which may evict, wait for limbo or move a page; CLOCK eviction and its
 * spill hook; the expiry sweep; page reassignment and pool shrink.
 */

#include <stdbool.h>
#include <stdint.h>

struct cache;
struct cache_thread;
struct item_plan;

/* Chunks for an item per plan: the head in *head, tails in tails[]. May
 * evict (when enabled). 0 or -ENOMEM. Context: no lock, no RCU section. */
int reclaim_alloc_item(struct cache_thread *t, const struct item_plan *plan,
                       uint64_t *head, uint64_t *tails);
/* reclaim_alloc_item, and the head chunk's slab class in *head_cls (a
 * store's accounting then need not look it up). */
int reclaim_alloc_item_cls(struct cache_thread *t, const struct item_plan *plan,
                           uint64_t *head, uint64_t *tails, unsigned *head_cls);
/* reclaim_alloc_item_cls's way on for a one-chunk plan (no tails) whose
 * class cls the caller's stash could not serve (quota_alloc failed). */
int reclaim_alloc_head_slow(struct cache_thread *t,
                            const struct item_plan *plan, unsigned cls,
                            uint64_t *head);

/*
 * Eviction's spill hook, registered by a tier below the pool that keeps
 * cold values (the NVMe tier, src/engine/ext.c) so that eviction need not
 * know it. Called only on the eviction and page-drain paths.
 *   spill        a cold victim at head (hash its key's): true when it left
 *                the index for the tier (the caller frees it after a grace
 *                period, as an evicted item); false: evict it as usual.
 *                Context: no lock held, no RCU read section.
 *   after_evict  after each eviction batch of class cls (a spill may have
 *                asked for a page). Context: no lock, no RCU section.
 */
struct reclaim_spill {
    bool (*spill)(struct cache_thread *t, uint64_t head, uint64_t hash);
    void (*after_evict)(struct cache_thread *t, unsigned cls);
};
/* Register (or with NULL remove) the spill hook. Context: at open or
 * close, with no other thread using the cache. */
void reclaim_set_spill(struct cache *c, const struct reclaim_spill *s);

/* Evict up to a batch of cold items of class cls, wait for readers and
 * free them into the thread's quota: the number freed. */
int reclaim_evict(struct cache_thread *t, unsigned cls);
/* Expiry sweep over budget chunks: items reclaimed. Locks: admin. */
int reclaim_sweep(struct cache_thread *t, unsigned budget);
/* Whether a reassignment waits for admin or gives up with -EBUSY while
 * another thread holds it (see src/engine/reclaim.c). */
enum reclaim_how { RECLAIM_WAIT, RECLAIM_TRY };
/* Move a page of class src (-1: the best donor) to class dst: 0 or a
 * negative errno. Locks: admin. */
int reclaim_reassign(struct cache_thread *t, int src, int dst,
                     enum reclaim_how how);
/* Empty a page of class src into *page, for the caller to keep. */
int reclaim_take_page(struct cache_thread *t, int src, uint32_t *page,
                      enum reclaim_how how);
/* Go on with the page moves that wait for chunks other threads hold
 * (finish them, or give them up once they waited too long). Locks: admin. */
void reclaim_settle(struct cache_thread *t);
/* Whether a page move waits (a hint: no lock). */
bool reclaim_move_waiting(struct cache *c);
/* Drain the pages at or above c->shrink_target. Locks: admin. */
int reclaim_shrink(struct cache_thread *t);

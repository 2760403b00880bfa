/*
 * delete (text, meta md, binary, tc_delete) and the drop of a key whose
 * set failed (store_drop): the key's entry unlinked under its bucket
 * lock, its CAS floor raised (a set that recreates the key compares with
 * it), the item accounted and freed after a grace period (invalidated in
 * PMEM now, before the answer: cache_defer_free).
 *
 * Concurrency: no state of its own; see src/engine/cache.h. Lock taken:
 * one bucket lock, briefly, for the DRAM-only unlink; PMEM written
 * (cache_defer_free's invalidation) after it is released.
 */
#include "src/engine/store.h"
#include "src/engine/store_int.h"

#include "src/base/clock.h"
#include "src/base/crashpoint.h"

static int
delete_key(struct cache_thread *t, const void *key, uint32_t klen,
           uint64_t cas_in, bool count)
{
    struct cache *c = t->cache;
    struct cache_key k = {c, key, klen};
    uint64_t hash = cache_hash(c, key, klen);
    uint32_t now = clock_now();
    int rc = TC_NOT_FOUND;
    uint64_t loc = 0;
    enum cache_dead dead = CACHE_LIVE;

    cache_flush_check(c, now);
    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot = htab_find_locked(b, hash, cache_match_key, &k);
    if (slot) {
        loc = htab_slot_loc(atomic_load_explicit(slot, memory_order_relaxed));
        dead = old_dead(c, cache_off(loc), now);
        if (dead == CACHE_LIVE && cas_in &&
            old_cas(c, cache_off(loc)) != cas_in) {
            rc = TC_EXISTS;
            loc = 0;
        } else {
            /* a set that recreates the key compares with it (publish) */
            cache_floor_unlink(c, hash, cache_off(loc));
            htab_remove_locked(c->htab, slot);
            rc = dead == CACHE_LIVE ? TC_OK : TC_NOT_FOUND;
        }
    }
    htab_unlock(b);

    unsigned cls = SLAB_NO_CLASS;
    TC_CRASH_POINT("delete.unlinked");
    if (loc) {
        /* unlinked by this thread, freed after a grace period: still ours */
        cls = cache_class_at(c, cache_off(loc));
        cache_account_unlink(t, cache_off(loc), dead, UNLINK_DELETED);
        cache_defer_free(t, cache_off(loc));
    }

    if (count && rc == TC_OK)
        cache_cls_inc(t, cls, CLS_DELETE_HITS);
    else if (count)
        cache_stat_inc(t, ST_DELETE_MISSES);
    return rc;
}

int
store_delete(struct cache_thread *t, const void *key, uint32_t klen,
             uint64_t cas_in)
{
    return delete_key(t, key, klen, cas_in, true);
}

int
store_drop(struct cache_thread *t, const void *key, uint32_t klen)
{
    return delete_key(t, key, klen, 0, false);
}

/*
 * Packed items' fields for any engine path that meets one (src/engine/
 * packed.c stores them, doc/design/small-items.md), and the item-kind-blind
 * death, CAS and expiry of an engine offset (slab, DRAM or packed). No
 * shared state of its own: the caller keeps the item live (an RCU section
 * or its bucket lock), as src/engine/cache.h says.
 */
#include "src/engine/cache_packed.h"

#include "src/engine/pitem.h"
#include "tier/nvs.h"

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

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

int
cache_packed_view(const struct cache *c, uint64_t off, struct pitem_view *v)
{
    uint64_t poff = cache_packed_pool(off);
    uint64_t page = poff & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    return pitem_parse(c->base + page, POOL_PAGE_SIZE, seg_seq_of(c->seg, page),
                       (uint32_t)(poff - page), v);
}

void
cache_packed_invalidate(struct cache *c, uint64_t off)
{
    /* the segment and the offset in it: a pool offset may pass 4 GiB */
    uint64_t poff = cache_packed_pool(off);
    uint64_t page = poff & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    pitem_invalidate(c->base + page, (uint32_t)(poff - page));
}

uint32_t
cache_packed_exp(const struct cache *c, uint64_t off,
                 const struct pitem_view *v)
{
    if (v->iflags & PITEM_HAS_EXP || !v->exp16)
        return v->exp32; /* exp32, or 0: never */
    return pitem_view_exp(v, seg_exp_base(c->seg, cache_packed_pool(off)));
}

uint64_t
cache_packed_seq(const struct cache *c, uint64_t off)
{
    return seg_seq_of(c->seg, cache_packed_pool(off));
}

enum cache_dead
cache_packed_dead(const struct cache *c, uint64_t off,
                  const struct pitem_view *v, uint32_t now)
{
    uint32_t exp = cache_packed_exp(c, off, v);
    if (exp != 0 && exp <= now)
        return CACHE_EXPIRED;
    /* the derived sequence, whatever CAS the item carries (as a slab
     * item's seq); acquire as in cache_item_dead */
    if (cache_packed_seq(c, off) <=
        atomic_load_explicit(&c->flush_cas, memory_order_acquire))
        return CACHE_FLUSHED;
    return CACHE_LIVE;
}

enum cache_dead
cache_off_dead(const struct cache *c, uint64_t off, uint32_t now)
{
    if (cache_off_packed(off)) {
        struct pitem_view v;
        if (cache_packed_view(c, off, &v) != 0)
            return CACHE_LOST;
        return cache_packed_dead(c, off, &v, now);
    }
    return cache_item_dead(c, cache_item_at(c, off), now);
}

uint64_t
cache_off_cas(const struct cache *c, uint64_t off)
{
    if (cache_off_packed(off)) {
        struct pitem_view v;
        return cache_packed_view(c, off, &v) == 0 ? v.cas : 0;
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

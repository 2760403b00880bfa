#pragma once
/* Packed items' fields and any item's death, CAS and expiry
 * (src/engine/cache_packed.c). */

#include "src/engine/cache.h"

/* Packed items' fields (src/engine/pitem.h), for any engine path that
 * meets one: off is the engine offset (cache_off of the location). The
 * item is live for the caller (an RCU section or its bucket lock).
 * cache_packed_view: 0, or -EBADMSG (not an item). cache_packed_seq: its
 * derived sequence. cache_off_*: any item's (slab, DRAM or packed) death,
 * CAS and expiry. */
struct pitem_view;
int cache_packed_view(const struct cache *c, uint64_t off,
                      struct pitem_view *v);
uint64_t cache_packed_seq(const struct cache *c, uint64_t off);
/* The absolute expiry (0 never) of a packed item cache_packed_view read:
 * its exp32, or its exp16 counted from its segment's exp_base. */
uint32_t cache_packed_exp(const struct cache *c, uint64_t off,
                          const struct pitem_view *v);
/* commit = 1 for the packed item at off (pitem_invalidate on its
 * segment). PMEM: one 2-byte store, no lock held. */
void cache_packed_invalidate(struct cache *c, uint64_t off);
enum cache_dead cache_packed_dead(const struct cache *c, uint64_t off,
                                  const struct pitem_view *v, uint32_t now);
enum cache_dead cache_off_dead(const struct cache *c, uint64_t off,
                               uint32_t now);
uint64_t cache_off_cas(const struct cache *c, uint64_t off);
uint32_t cache_off_exptime(const struct cache *c, uint64_t off);

#pragma once
/*
 * Merge eviction of the packed store's segments (doc/design/small-items.md,
 * "Eviction", item 3; Segcache's): the oldest (up to) PACKED_MERGE_N sealed
 * segments go at once; the items read since their last merge (the index
 * slot's REF bit) are copied into the merge's own open segment, the rest
 * are dropped. See packed_merge.c for the rules.
 *
 * It sits above packed.c: packed_reserve reaches it through the hook it
 * registers (struct cache's packed_evict), with -o packed_evict=merge (the
 * default; fifo leaves the hook NULL).
 */

#include <stdint.h>

struct cache;
struct cache_thread;

/* Segments a merge takes at most. */
#define PACKED_MERGE_N 4u

/* With the packed store on and cfg.packed_evict merge: the merge's state
 * and hook, and a module whose close seals its open segment. 0, or
 * -ENOMEM. Context: tc_open, before any thread context exists. */
int packed_merge_open(struct cache *c);

/* One merge (what the hook runs): 1 when segments were evicted (or
 * another thread's merge, waited for, left a free page), 0 when none is
 * sealed. Context: no lock, no RCU read section (it waits for grace
 * periods). */
int packed_merge_evict(struct cache_thread *t);

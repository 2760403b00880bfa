#pragma once
/*
 * Merge eviction of the packed store's segments (doc/design/small-items.md,
 * "Eviction", item 3; Segcache's): the oldest (up to) PACKED_MERGE_N sealed
 * segments go at once; the items read since their last merge (the index
 * slot's REF bit) are copied into the merge's own open segment, the rest
 * are dropped. Before it, mostly dead segments are compacted (below). See
 * packed_merge.c for the rules.
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
/* Before a merge, compaction: of the PACKED_MERGE_WINDOW oldest sealed
 * segments, the one with the fewest live bytes, if they are at most
 * PACKED_COMPACT_LIVE_PCT percent of its payload, has every live item
 * copied (REF kept) and its page freed (up to PACKED_MERGE_N a call; the
 * merge runs only when none qualifies): the dead bytes that rewrites and
 * deletes leave behind come back without an item dropped. */
#ifndef PACKED_MERGE_WINDOW
#define PACKED_MERGE_WINDOW 64u
#endif
#ifndef PACKED_COMPACT_LIVE_PCT
#define PACKED_COMPACT_LIVE_PCT 50u
#endif

/* With the packed store on and cfg.packed_evict merge: the merge's state
 * and hook, and a module whose close seals its open segment. 0, or
 * -ENOMEM. Context: tc_open, before any thread context exists. */
int packed_merge_open(struct cache *c);

/* One merge (what the hook runs): 1 when segments were evicted (or
 * another thread's merge, waited for, left a free page), 0 when none is
 * sealed. Context: no lock, no RCU read section (it waits for grace
 * periods). */
int packed_merge_evict(struct cache_thread *t);

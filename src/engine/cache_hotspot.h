#pragma once
/*
 * Write-hotspot tracking and PMEM latency emulation for a cache (see
 * src/engine/cache_hotspot.c). The public calls are tc_hotspot_*() in
 * src/tiercache.h.
 */

#include "src/engine/cache.h"

/* Per c->cfg: make and attach the tracker (hotspot_dimms > 0) and set the
 * PMEM helpers' latency (pm_write_ns / pm_read_ns). 0, -EINVAL (bad option),
 * -EBUSY (another cache in this process is tracked) or -ENOMEM, with a
 * sentence in err_msg(). Context: cache_open(), after the slab exists,
 * before any other thread uses the cache. */
int cache_hotspot_open(struct cache *c);
/* Undo cache_hotspot_open() (also after a partial one). Context:
 * cache_close(), no other thread in the cache. */
void cache_hotspot_close(struct cache *c);

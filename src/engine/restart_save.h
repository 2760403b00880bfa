#pragma once
/*
 * The saved index (layout: src/engine/restart_save_layout.h): a clean close
 * writes the DRAM index, the CAS counter and the hash seed to
 * c->cfg.restart_file, after the modules above (flash writer, hot keys)
 * have closed and before the region marks the pool clean; the next open of
 * that pool, finding it clean, reattaches from the file instead of scanning
 * the pool: the index entries go back into their buckets, the pages back
 * to their classes with the chunks the entries name (and their tails) in
 * use, and every restored item is accounted. The file is used once: it is
 * removed at the next open, whatever that open does with it.
 *
 * A file that fails any check (size, checksums, pool identity and settings,
 * index sizing, an entry that names no committed item of this pool) is not
 * used, with one log line; the caller then scans. The checks run before
 * anything is changed, so a rejected file leaves the cache as it found it.
 *
 * Concurrency: both run single-threaded (the load at open before the cache
 * is shared, the save at close after every thread context is gone). PMEM:
 * the load invalidates the items it drops (expired, flushed, on flash) and
 * writes the page table, with no lock held.
 */

#include "src/engine/cache.h"

/* Register the close hook that saves the index (a no-op without
 * c->cfg.restart_file). Call once the items are attached, so a cache whose
 * attach failed never saves. 0 or -ENOSPC. */
int restart_save_register(struct cache *c);

/* Reattach a clean pool from the saved index: 1 when done (info filled),
 * 0 when there is no usable file (info->reason says why, one log line for
 * a rejected file; nothing changed: the caller scans), or a negative errno
 * (-ENOMEM) with err_msg set. Removes the file. */
int restart_save_load(struct cache *c, struct tc_open_info *info, uint32_t now);

/* Remove a saved index the start cannot use (a cold or crash start). */
void restart_save_discard(const struct cache *c);

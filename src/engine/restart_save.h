#pragma once
/*
 * The saved state (layout: src/engine/restart_save_layout.h): a clean close
 * writes the CAS counter and the item count to c->cfg.restart_file, after the
 * modules above (flash writer, hot keys) have closed and before the region
 * marks the pool clean; the next open of that pool, finding it clean, scans the
 * pool as after a crash (src/engine/restart.h: the scan needs nothing else) and
 * resumes the CAS counter where the close left it, which the scan alone
 * cannot know. The file is used once: it is removed at the next open,
 * whatever that open does with it.
 *
 * A file that fails a check (size, checksum, pool identity and settings)
 * is not used, with one log line: the counter then resumes above every CAS
 * the scan saw, as after a crash.
 *
 * Concurrency: both run single-threaded (the load at open before the cache
 * is shared, the save at close after every thread context is gone). No
 * PMEM write.
 */

#include "src/engine/cache.h"

/* Register the close hook that saves the state (a no-op without
 * c->cfg.restart_file). Call once the items are attached, so a cache whose
 * attach failed never saves. 0 or -ENOSPC. */
int restart_save_register(struct cache *c);

/* Read the state a clean close saved: 1 with *cas_seq and *items (the
 * item count at the close) set and
 * info->reason "with the saved state", or 0 when there is no usable file
 * (info->reason says why; one log line for a rejected file). Removes the
 * file. */
int restart_save_load(struct cache *c, struct tc_open_info *info,
                      uint64_t *cas_seq, uint64_t *items);

/* Remove a saved state the start cannot use (a cold or crash start). */
void restart_save_discard(const struct cache *c);

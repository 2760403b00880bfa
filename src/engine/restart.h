#pragma once
/*
 * Bringing a pool's items back at open (DESIGN "What survives a restart";
 * the layouts: src/engine/item_layout.h, src/engine/restart_layout.h).
 *
 * restart_attach() runs once, right after cache_open() and before any
 * module or thread uses the cache. A pool the region reattached, with
 * restart metadata matching this cache's settings, is scanned: every page
 * the page table names is cut at its class's chunks; a chunk holding a
 * committed item whose bounds (and, unless the pool was closed clean, its
 * checksum: item_layout.h) check, not expired, not older
 * than the persisted flush (and, with no flash tier configured, not a flash
 * header: with one, ext_open then checks each flash header's locator
 * against the segments the store takes back), goes into the index (of two
 * copies of a key the newer sequence wins), every other committed item is
 * invalidated; the pages that hold restored items join their classes with
 * those chunks in use, the others go back to the pool; the CAS counter
 * resumes above every CAS and sequence seen. A pool closed clean is
 * scanned the same way (the scan needs nothing the close could save), and
 * its CAS counter resumes at least where the close left it, when the state
 * saved then passes its checks (src/engine/restart_save.h). Any
 * other pool is formatted (a cold start, one log line). c->start says
 * what happened.
 *
 * Concurrency: at open, before the cache is shared; the scan itself runs
 * on the caller and up to cfg.restart_threads - 1 threads it starts and
 * joins (src/engine/restart.c says what they share). PMEM: writes
 * (invalidations, the page table, the metadata) with no lock held; the
 * index bucket lock is taken around each insertion (no PMEM write inside
 * it). It also applies cfg.durability (tier/pm.h, pm_set_persist).
 */

#include "src/engine/cache.h"

/* 0, or a negative errno (-ENOMEM) with err_msg set. */
int restart_attach(struct cache *c);

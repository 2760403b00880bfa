#pragma once
/*
 * Hot keys: sampled write and read rates per key (a streaming top-K each,
 * src/engine/topk.c), and the DRAM hot pool (tier/dpool.c) for the items of
 * write-hot keys, where repeated writes replace a DRAM copy instead of
 * writing PMEM (DESIGN rule 1). Engine internals; the public view is
 * tc_hotkeys() and the hotkey_* stats.
 *
 * Placement: a write of a key in the hot set goes to a DRAM block (a
 * promotion when the key's item was in PMEM or absent); a write of any
 * other key, or when the pool is full, goes to PMEM (a demotion when the
 * item was in DRAM). The maintenance tick rebuilds the hot set from the
 * write rates (enter at hot_write_rate writes/s, leave below half of it)
 * and moves DRAM items whose key left the hot set back to PMEM, and
 * removes dead (expired or flushed) DRAM items.
 */

#include <stdbool.h>
#include <stdint.h>

#include "src/engine/item.h"
#include "src/tiercache.h"

struct cache;
struct cache_thread;
struct hotkey;

/* Create c->hot and the DRAM hot pool c->dram from c->cfg (both NULL when
 * hot_pool_size is 0) and register the per-thread hooks: 0, -EINVAL or
 * -ENOMEM with err_msg set. Context: at open, after cache_open, before
 * any thread uses the cache. */
int hotkey_create(struct cache *c);
/* Undo hotkey_create (cache_close calls it, as a module hook). */
void hotkey_destroy(struct cache *c);

/* A thread's sample buffer (t->hk): created with the thread context,
 * destroyed with it (module hooks). 0 or -ENOMEM. */
int hotkey_thread_init(struct cache_thread *t);
void hotkey_thread_fini(struct cache_thread *t);

/* Write path: sample the write and, for a hot key whose item fits, take a
 * DRAM block for it: 0 with *head its offset (CACHE_DRAM_OFF | address),
 * or -ENOENT (use PMEM). Context: no lock, no RCU section. */
int hotkey_place(struct cache_thread *t, uint64_t hash, const void *key,
                 uint32_t klen, const struct item_plan *plan, uint64_t *head);
/* Write a plain item into its DRAM block (the DRAM twin of item_write). */
void hotkey_write(uint64_t head, const struct item_plan *plan,
                  const struct item_desc *hdr, const void *key,
                  const struct item_src *val);
/* A store replaced old (0: none) by head: promotion, demotion and bytes
 * saved counters. */
void hotkey_count_store(struct cache_thread *t, uint64_t old_off, uint64_t head,
                        uint32_t vlen);

/* Read path: sample a hit. */
void hotkey_note_read(struct cache_thread *t, uint64_t hash, const void *key,
                      uint32_t klen);

/* Maintenance (the background thread each second, or tc_maintain): merge
 * the samples, rebuild the hot set, demote cooled items, remove dead DRAM
 * items. Context: no lock, no RCU section. */
void hotkey_tick(struct cache_thread *t);

/* At a clean close (tc_close, after the maintenance thread stopped and
 * before cache_close runs the flash writer's drain and saves the state):
 * move every live item of the DRAM hot pool to PMEM (the tick's demotion:
 * a committed PMEM copy, then the index switched to it), so that the
 * next start's scan finds it. An item the pool
 * has no room for (full, evictions off) stays in DRAM and is lost: one
 * log line counts them. Context: no other thread uses the cache. */
void hotkey_write_back(struct cache *c);

/* tc_hotkeys(): the current top keys by write (by_reads false) or read
 * rate. */
int hotkey_list(struct cache *c, bool by_reads, struct tc_hotkey *out, int max);
/* tc_set_hot_write_rate(). */
void hotkey_set_rate(struct cache *c, uint32_t rate);
uint64_t hotkey_pool_bytes(const struct cache *c);

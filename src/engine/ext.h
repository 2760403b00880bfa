#pragma once
/*
 * The engine's side of the NVMe tier (the store is tier/nvs.h): spilling
 * cold values at eviction, reading flash items back (blocking for the
 * embedding API, asynchronous for the server), recache, compaction from
 * the maintenance step, and the tier's figures. Its state is opaque
 * (c->ext, t->ext); eviction reaches it through the spill hook it
 * registers. See ext.c (spill, compaction) and ext_read.c (reads).
 */

#include <stdbool.h>
#include <stdint.h>

#include "src/tiercache.h"
#include "tier/nvs.h"

struct cache;
struct cache_thread;
struct item_hdr;
struct item_desc;

/* Copy a flash item's value (read by the tier) back into the pool in place
 * of its header at index location expect, keeping its CAS, flags and
 * expiry: TC_OK, or -EAGAIN when the item changed meanwhile. The write
 * path's store_recache (src/engine/store.h), handed to ext_open so that
 * the tier does not call back into the file that calls it. */
typedef int ext_recache_fn(struct cache_thread *t, const void *key,
                           uint32_t klen, const struct item_desc *hdr,
                           uint64_t expect, const void *val);

/* Open the store named by c->cfg.ext_* and hang the tier off c (c->ext,
 * c->nvs, the spill hook, per-thread state): 0, or a negative errno with
 * one sentence in err_msg(). Nothing to do when ext_npaths is 0. Context:
 * at open, after cache_open, before any thread uses the cache. */
int ext_open(struct cache *c, ext_recache_fn *recache);
/* Undo ext_open (cache_close calls it, as a module hook). */
void ext_close(struct cache *c);
/* Destroy the thread's rings (its context is going away), after waiting
 * for their reads in flight. Context: the thread of t, or tc_close for a
 * thread that has stopped calling (its rings are adopted). */
void ext_thread_fini(struct cache_thread *t);

/* A flash item met by a reader: what it copied inside its read section. */
struct ext_hit {
    uint64_t hash;
    uint64_t loc; /* the header's index location */
    struct nvs_loc nl;
    struct tc_item_info info;
    bool touch; /* a gat: counted as a touch */
};
/* Copy a flash header's fields into h (inside a read section). */
void ext_hit_fill(struct ext_hit *h, const struct item_hdr *it, uint64_t hash,
                  uint64_t loc);

/* Read a flash item's value on the thread's own ring, waiting for it, and
 * call fn: TC_OK, or TC_NOT_FOUND when the read failed (counted; the
 * stale header is unlinked). May recache. Context: no RCU section. */
int ext_serve(struct cache_thread *t, const void *key, uint32_t klen,
              const struct ext_hit *h, tc_value_fn *fn, void *arg);
/* The value of a flash item in a fresh malloc'd buffer (*buf, which the
 * caller frees), for read-modify-write commands: 0 or a negative errno
 * (counted, header unlinked as above). */
int ext_read_copy(struct cache_thread *t, const void *key, uint32_t klen,
                  uint64_t hash, uint64_t loc, const struct nvs_loc *nl,
                  char **buf);

/* The deadline of a blocking read (ext_serve, ext_read_copy) when
 * ext_read_timeout_ms is 0: that 0 means no deadline for the server's
 * asynchronous reads (a parked connection), but a blocking caller gets
 * this long bound, so a lost completion cannot hang it forever. A global
 * so that tests can shorten it (not exported: no tc_ prefix). */
#define EXT_BLOCK_TIMEOUT_MS 30000
extern uint32_t ext_block_timeout_ms;

/* A flash hit met by fetch_get: head_only answers from the header; with
 * o->async and an owner set, the read is queued and fn called with
 * info.pending (EXT_PENDING: counted when it completes); else as
 * ext_serve. */
#define EXT_PENDING 100
struct tc_get_opts;
int ext_get(struct cache_thread *t, const void *key, uint32_t klen,
            struct ext_hit *h, const struct tc_get_opts *o, tc_value_fn *fn,
            void *arg);

/* tc_async_* for the calling thread (see src/tiercache.h). */
int ext_async_fd(struct cache_thread *t);
void ext_async_owner(struct cache_thread *t, void *owner);
int ext_async_ring(struct cache_thread *t, void *ring, uint64_t tag);
int ext_async_complete(struct cache_thread *t, uint64_t user_data, int res);
unsigned ext_async_busy(struct cache_thread *t);
void ext_async_detach(struct cache_thread *t);
int ext_async_submit(struct cache_thread *t);
int ext_async_reap(struct cache_thread *t, tc_async_fn *fn, void *arg);
void ext_async_cancel(struct cache_thread *t, void *owner);
/* A reaped read of a flash hit: counts it (hit or miss), unlinks a failed
 * item's header, recaches when due. TC_OK or TC_NOT_FOUND. */
int ext_async_done(struct cache_thread *t, const void *key, uint32_t klen,
                   const struct ext_hit *h, const struct nvs_read *rd);

/* Compaction steps for the maintenance step (src/engine/maint.c). */
void ext_maintain(struct cache_thread *t);
/* The tier's figures into out: the ext_ and extstore_ fields that are not
 * engine counters (those are TC_STATS_COUNTERS rows, copied by tc_stats). */
void ext_stats(struct cache *c, struct tc_stats *out);
/* "stats reset" for the store's own counters and read latency percentiles
 * (the engine's ST_EXT_* counters reset with the other counters). */
void ext_stats_reset(struct cache *c);

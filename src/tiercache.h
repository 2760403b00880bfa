#pragma once
/*
 * tiercache embedding API.
 *
 * A cache keeps its metadata (hash index, slab managers, page info, CLOCK
 * bits) in DRAM and its items in a slab allocator over a PMEM pool file
 * mapped with libpmem (a file in /dev/shm emulates PMEM). Semantics follow
 * memcached's: keys of 1..250 bytes, 32-bit client flags, memcached's expiry
 * rules, 64-bit CAS, incr/decr on 64-bit unsigned decimal values.
 *
 * Threads
 *   Any thread may call any function on an open cache. A thread's first call
 *   registers it (RCU reader, per-thread chunk quota, per-thread stats);
 *   tc_thread_register() does that up front and tc_thread_unregister() gives
 *   the thread's resources back (also done at thread exit). tc_open() and
 *   tc_close() must not race with other calls on the same cache; every other
 *   thread must have stopped calling into the cache before tc_close().
 *
 * Returns
 *   0 (TC_OK) on success or hit; a positive enum tc_result for an ordinary
 *   outcome (miss, exists, not stored); a negative errno for an error:
 *   -EINVAL bad argument (key length 0 or > TC_KEY_MAX), -E2BIG item larger
 *   than item_size_max, -ENOMEM no room (pool full and eviction off, or
 *   nothing evictable).
 *
 * Ownership
 *   Keys and values passed in are copied; the caller keeps them. Values
 *   handed to a tc_value_fn point into the cache and are valid only during
 *   the callback; tc_get_copy() copies into the caller's buffer.
 *
 * Only tc_-prefixed symbols are exported from libtiercache.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TC_API __attribute__((visibility("default")))

#define TC_KEY_MAX 250
/* tiercache's own release. */
#define TC_RELEASE "0.1.0"
/* What the VERSION command and "stats" report: memcached's numbering first,
 * since clients and tools (libmemcached among them) parse the major version
 * and refuse 0, then tiercache's release. */
#define TC_VERSION "1.6.0-tiercache-" TC_RELEASE

enum tc_result {
    TC_OK = 0,
    TC_NOT_FOUND = 1,   /* miss (absent, expired or flushed) */
    TC_EXISTS = 2,      /* cas mismatch */
    TC_NOT_STORED = 3,  /* add on present key, replace/append/prepend on
                           absent key */
    TC_NON_NUMERIC = 4, /* incr/decr on a value that is not a decimal
                           64-bit unsigned number */
};

enum tc_store_mode {
    TC_SET = 0,
    TC_ADD = 1,
    TC_REPLACE = 2,
    TC_APPEND = 3,  /* keeps the item's flags and expiry */
    TC_PREPEND = 4, /* keeps the item's flags and expiry */
    TC_CAS = 5,     /* store only if the item's CAS equals cas_in */
};

struct tc_config {
    const char *pool_path;   /* default "/dev/shm/tiercache.pool" */
    uint64_t pool_size;      /* bytes of the pool file; default 64 MiB */
    uint64_t mem_limit;      /* bytes of pages that may be used (memcached's
                                -m); 0 = the whole pool */
    uint32_t min_chunk;      /* smallest slab chunk, bytes; default 64 */
    double growth_factor;    /* slab growth factor; default 1.25 */
    uint32_t chunk_max;      /* largest slab chunk; default 512 KiB */
    uint32_t item_size_max;  /* largest item (key+value+header); default 1 MiB;
                                items above chunk_max are chained over
                                several chunks */
    bool evict;              /* default true; false = memcached's -M */
    uint64_t expected_items; /* sizes the hash index; 0 = derive from the
                                pool size (one entry per 128 pool bytes) */
    uint32_t quota_batch;    /* chunks a thread takes from a class at once;
                                default 32 */
    bool background;         /* run the maintenance thread (expiry sweep, page
                                reassignment); default true. Off, the embedder
                                calls tc_maintain(). */
    uint32_t sweep_budget;   /* chunks the expiry sweep looks at per step;
                                default 1024 */
};

enum tc_win {
    TC_WIN_NONE = 0,  /* nothing to recache */
    TC_WIN_YOU = 1,   /* this caller should recache (meta W) */
    TC_WIN_TAKEN = 2, /* another caller already got the win (meta Z) */
};

struct tc_item_info {
    uint32_t flags;   /* client flags */
    uint32_t exptime; /* absolute unix seconds, 0 = never */
    uint64_t cas;
    uint32_t vlen;        /* value length in bytes */
    bool fetched;         /* read before this request (meta h) */
    bool stale;           /* invalidated, served until replaced (meta X) */
    uint8_t win;          /* enum tc_win (meta W / Z) */
    uint8_t slab_class;   /* slab class of the item's head chunk, from 0
                             (meta me cls=, which counts from 1) */
    uint32_t last_access; /* seconds since the item was last stored or read
                             (before this read; meta l, me la=): exact up to
                             TC_LAST_ACCESS_CAP, which means "at least" */
};

/* 16 hours: older accesses read as this (2 bytes of DRAM per item keep the
 * time; the maintenance thread or tc_maintain rebases it hourly). */
#define TC_LAST_ACCESS_CAP 57600u

/* Called on a hit with the value in niov pieces (one unless the item is
 * chained). The pointers are valid only during the call. */
typedef void tc_value_fn(void *arg, const struct tc_item_info *info,
                         const struct iovec *iov, int niov);

struct tc_stats {
    /* memcached's names and meanings */
    uint64_t curr_items;
    uint64_t total_items;
    uint64_t bytes;          /* bytes of live items (header+key+value) */
    uint64_t limit_maxbytes; /* mem_limit */
    uint64_t evictions;      /* live items removed to make room */
    uint64_t reclaimed;      /* expired items whose memory was reused */
    uint64_t expired_unfetched;
    uint64_t evicted_unfetched;
    uint64_t cmd_get; /* keys requested by get/gat */
    uint64_t cmd_set; /* store requests of any mode */
    uint64_t cmd_touch;
    uint64_t cmd_flush;
    uint64_t get_hits;
    uint64_t get_misses;
    uint64_t get_expired;
    uint64_t get_flushed;
    uint64_t delete_hits;
    uint64_t delete_misses;
    uint64_t incr_hits;
    uint64_t incr_misses;
    uint64_t decr_hits;
    uint64_t decr_misses;
    uint64_t cas_hits;
    uint64_t cas_misses;
    uint64_t cas_badval;
    uint64_t touch_hits;
    uint64_t touch_misses;
    uint64_t store_too_large;
    uint64_t store_no_memory;
    uint64_t slab_reassign_count; /* pages moved between classes */
    uint64_t total_malloced;      /* bytes of pages owned by slab classes */
    /* tiercache's own (prefix tc_ in the server's stats) */
    uint64_t pmem_bytes;       /* pool size, data area */
    uint64_t pmem_pages_total; /* pages under the limit */
    uint64_t pmem_pages_free;  /* pages in the pool, not in any class */
    bool pmem_is_pmem;         /* libpmem says real PMEM */
    uint64_t dram_index_bytes; /* hash index (buckets + overflow) */
    uint64_t dram_meta_bytes;  /* page info, bitmaps, class tables */
    uint64_t quota_refills;    /* batches taken by thread quotas */
    uint64_t index_buckets;
    uint64_t index_overflow_buckets;
    uint64_t sweep_reclaimed; /* expired items freed by the sweep */
};

struct tc_slab_stats {
    uint32_t chunk_size;
    uint32_t chunks_per_page;
    uint32_t total_pages;
    uint64_t total_chunks;
    uint64_t used_chunks; /* live items of this class */
    uint64_t free_chunks; /* in the class (not counting thread stashes) */
};

struct tc_cache;

/* Fill cfg with the defaults above. */
TC_API void tc_config_init(struct tc_config *cfg);

/* Open (create or reuse) the pool file and build the cache. 0, or a negative
 * errno with one sentence in tc_errmsg(). */
TC_API int tc_open(const struct tc_config *cfg, struct tc_cache **out);
/* Stop the maintenance thread, free every DRAM structure, mark the pool
 * file clean and unmap it. NULL is a no-op. */
TC_API void tc_close(struct tc_cache *c);

/* The calling thread's last error sentence ("" if none). */
TC_API const char *tc_errmsg(void);

TC_API int tc_thread_register(struct tc_cache *c);
TC_API void tc_thread_unregister(struct tc_cache *c);
/* A registered thread about to sleep (a server worker before it blocks for
 * events) gives back what it holds for later: its stash of free chunks and
 * its batch of frees awaiting a grace period. Cheap; without it an idle
 * thread can delay page reassignment and keep freed memory. */
TC_API void tc_thread_quiesce(struct tc_cache *c);

/* Retrieval. exptime values follow memcached: 0 never, 1..2592000 seconds
 * from now, larger an absolute unix time, negative already expired. */
TC_API int tc_get(struct tc_cache *c, const void *key, size_t klen,
                  tc_value_fn *fn, void *arg);
/* get-and-touch: on a hit the expiry is set first, then fn sees the item. */
TC_API int tc_gat(struct tc_cache *c, const void *key, size_t klen,
                  int64_t exptime, tc_value_fn *fn, void *arg);
/* Copy variant: on a hit copies min(vlen, cap) bytes into buf and fills
 * *info (info->vlen is the full length). info may be NULL. */
TC_API int tc_get_copy(struct tc_cache *c, const void *key, size_t klen,
                       void *buf, size_t cap, struct tc_item_info *info);

/* Retrieval with the meta protocol's options. A hit returns TC_OK after
 * calling fn; info->win says whether this caller should recache (a stale
 * item, a TTL below recache_below, or a placeholder made by vivify). */
struct tc_get_opts {
    bool touch; /* set the expiry first (meta T, gat) */
    int64_t exptime;
    bool vivify; /* on a miss, store an empty placeholder item
                    with vivify_exptime and return TC_NOT_FOUND
                    with *vivified set: the caller won (meta N) */
    int64_t vivify_exptime;
    uint32_t recache_below; /* win when the remaining TTL (seconds) is
                               below this (meta R); 0 = off */
    bool no_bump;           /* do not mark the item used (meta u) */
    bool *vivified;         /* out, may be NULL */
};
TC_API int tc_get_ex(struct tc_cache *c, const void *key, size_t klen,
                     const struct tc_get_opts *opts, tc_value_fn *fn,
                     void *arg);

/* Storage with the meta protocol's options (ms). */
struct tc_store_opts {
    uint64_t cas_in;  /* TC_CAS, or with any mode when cas_check */
    bool cas_check;   /* compare cas_in for any mode (meta C) */
    uint64_t cas_new; /* nonzero: use as the new item's CAS (meta E) */
    bool invalidate;  /* meta I: when cas_in is older than the item's
                         CAS, store the item marked stale instead of
                         failing */
    bool vivify;      /* append/prepend on a miss store the value as a
                         new item (meta N) */
    int64_t vivify_exptime;
};
TC_API int tc_store_ex(struct tc_cache *c, enum tc_store_mode mode,
                       const void *key, size_t klen, const void *val,
                       size_t vlen, uint32_t flags, int64_t exptime,
                       const struct tc_store_opts *opts, uint64_t *cas_out);

/* Mark an item stale instead of deleting it (meta md I): it keeps being
 * served, flagged stale, and the next reader wins the recache. exptime >= 0
 * sets a new expiry (meta T), < 0 keeps it. cas_in 0 = unconditional.
 * TC_OK, TC_NOT_FOUND, TC_EXISTS. */
TC_API int tc_invalidate(struct tc_cache *c, const void *key, size_t klen,
                         uint64_t cas_in, int64_t exptime);

/* Arithmetic with the meta protocol's options (ma). */
struct tc_arith_opts {
    bool vivify; /* on a miss, store `initial` (meta N, J) */
    uint64_t initial;
    int64_t vivify_exptime;
    uint64_t cas_in; /* nonzero: must match (meta C) */
    bool touch;      /* set the expiry on success (meta T) */
    int64_t exptime;
};
/* *value the new value; *info (may be NULL) the new item's header. */
TC_API int tc_arith_ex(struct tc_cache *c, const void *key, size_t klen,
                       bool incr, uint64_t delta,
                       const struct tc_arith_opts *opts, uint64_t *value,
                       struct tc_item_info *info);

/* Storage. cas_in is used by TC_CAS only; *cas_out (may be NULL) receives
 * the new item's CAS. TC_OK when stored, else TC_NOT_STORED, TC_EXISTS,
 * TC_NOT_FOUND (TC_CAS on a missing key) or an error. */
TC_API int tc_store(struct tc_cache *c, enum tc_store_mode mode,
                    const void *key, size_t klen, const void *val, size_t vlen,
                    uint32_t flags, int64_t exptime, uint64_t cas_in,
                    uint64_t *cas_out);
/* Shorthand for tc_store(TC_SET, ...). */
TC_API int tc_set(struct tc_cache *c, const void *key, size_t klen,
                  const void *val, size_t vlen, uint32_t flags,
                  int64_t exptime);

/* incr (wraps at 2^64) or decr (stops at 0). *value receives the new value,
 * *cas_out (may be NULL) the new CAS. TC_NOT_FOUND, TC_NON_NUMERIC. The
 * stored value is the decimal text, as memcached keeps it. */
TC_API int tc_incr(struct tc_cache *c, const void *key, size_t klen,
                   uint64_t delta, uint64_t *value, uint64_t *cas_out);
TC_API int tc_decr(struct tc_cache *c, const void *key, size_t klen,
                   uint64_t delta, uint64_t *value, uint64_t *cas_out);

/* Remove a key without counting a delete (memcached drops the old value
 * when a store fails). TC_OK or TC_NOT_FOUND. */
TC_API int tc_drop(struct tc_cache *c, const void *key, size_t klen);

/* A server refused a store before the engine saw it (the value is larger
 * than item_size_max and was discarded unread): count it as memcached does
 * (cmd_set, store_too_large) and, with drop_old, remove the key's old value
 * without counting a delete. */
TC_API void tc_store_refused(struct tc_cache *c, const void *key, size_t klen,
                             bool drop_old);

/* cas_in 0: unconditional. Otherwise TC_EXISTS on mismatch. */
TC_API int tc_delete(struct tc_cache *c, const void *key, size_t klen,
                     uint64_t cas_in);
TC_API int tc_touch(struct tc_cache *c, const void *key, size_t klen,
                    int64_t exptime);

/* Invalidate every item stored before now + delay seconds (delay <= 0:
 * now). A later flush replaces a pending delayed one, as in memcached. */
TC_API int tc_flush_all(struct tc_cache *c, int64_t delay);

/* Grow or shrink the usable pool online (memcached's cache_memlimit).
 * Shrinking moves live items off the released pages (evicting only when the
 * rest of the pool has no room). 0, -EINVAL (below 1 MiB or above the
 * pool's data area, which is pool_size less its 2 MiB header), -EBUSY (some
 * pages could not be emptied yet; retried by maintenance). */
TC_API int tc_set_mem_limit(struct tc_cache *c, uint64_t bytes);

/* Move one page from slab class src to dst (memcached's "slabs reassign"),
 * moving its live items to other pages of src. src -1: pick the class with
 * the most free chunks. 0, -EINVAL, -ENOENT (src has no page), -EBUSY. */
TC_API int tc_slab_reassign(struct tc_cache *c, int src, int dst);

/* One step of maintenance on the calling thread: expiry sweep with the
 * configured budget, freeing what waits for a grace period, pending
 * memlimit drains, the hourly rebase of last access times (without the
 * maintenance thread, call it at least every hour or so for last_access
 * to stay right past 16 h). Returns the number of expired items the sweep
 * removed. */
TC_API int tc_maintain(struct tc_cache *c);

TC_API void tc_stats(struct tc_cache *c, struct tc_stats *out);
TC_API int tc_slab_nclasses(struct tc_cache *c);
TC_API int tc_slab_stats(struct tc_cache *c, int cls,
                         struct tc_slab_stats *out);
/* Zero the counters memcached's "stats reset" zeroes. */
TC_API void tc_stats_reset(struct tc_cache *c);

/* Debug walker over every invariant (index <-> slabs agree, bitmaps match
 * counts). 0 or -EFAULT with the first problem in tc_errmsg(). Slow; tests
 * call it after bursts of mutations with no other thread running. */
TC_API int tc_check(struct tc_cache *c);

/* Tests: freeze the cache clock at unix time t (0 = real clock) and move it
 * forward. Process-wide. */
TC_API void tc_clock_set(uint32_t t);
TC_API void tc_clock_advance(uint32_t secs);

#ifdef __cplusplus
}
#endif

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
 *   the thread's resources back (also done at thread exit, and by tc_close()
 *   for threads still registered, NVMe read rings included). tc_open() and
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
#include <stdio.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TC_API __attribute__((visibility("default")))

#define TC_KEY_MAX 250
/* An exptime up to this many seconds (30 days) is relative to now, a larger
 * one an absolute unix time: memcached's rule. */
#define TC_EXPTIME_RELATIVE_MAX 2592000
/* The engine's per-item base header, counted with the key and the value
 * against item_size_max (as memcached counts its own item header). Client
 * flags other than 0 and a CAS the client chose take up to 12 bytes more,
 * not counted against item_size_max (src/engine/item_layout.h). */
#define TC_ITEM_HEADER_SIZE 24
/* An item larger than the largest chunk is chained: its value continues in
 * at most TC_ITEM_MAX_TAILS tail chunks, each starting with a header of
 * TC_ITEM_TAIL_HEADER_SIZE bytes, so item_size_max stays below
 * TC_ITEM_MAX_TAILS x (chunk_max - TC_ITEM_TAIL_HEADER_SIZE). */
#define TC_ITEM_MAX_TAILS 255
#define TC_ITEM_TAIL_HEADER_SIZE 16
/* item_size_max when tc_config_init sets it. */
#define TC_ITEM_SIZE_MAX_DEFAULT (1u << 20)
/* The pool file holds a header area of this size in front of the item
 * memory: N bytes of items need a pool_size of N + TC_POOL_HEADER_SIZE. */
#define TC_POOL_HEADER_SIZE (2u << 20)
/* The smallest data area a pool file has: pool_size is at least this plus
 * TC_POOL_HEADER_SIZE. A smaller mem_limit caps the use within it. */
#define TC_POOL_MIN_ITEMS (4u << 20)
#define TC_EXT_MAX_PATHS 8
#define TC_EXT_RECACHE_AUTO UINT32_MAX
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

/* tc_config.packed_evict (doc/design/small-items.md, "Eviction") */
enum tc_packed_evict {
    TC_PACKED_EVICT_MERGE = 0,
    TC_PACKED_EVICT_FIFO = 1,
};

enum tc_durability {
    TC_DURABILITY_PROCESS = 0, /* ordered stores: a process crash */
    TC_DURABILITY_POWER = 1,   /* flushed and drained: power loss */
};

struct tc_config {
    const char *pool_path;   /* default "/dev/shm/tiercache.pool" */
    uint64_t pool_size;      /* bytes of the pool file; default 64 MiB */
    uint64_t mem_limit;      /* bytes of pages that may be used (memcached's
                                -m); 0 = the whole pool */
    uint32_t min_chunk;      /* smallest slab chunk, bytes; default 64 */
    double growth_factor;    /* slab growth factor; default 1.25 */
    uint32_t chunk_max;      /* largest slab chunk; default 512 KiB */
    uint32_t chunk_step;     /* fine slab classes: below 32 x this many bytes
                                a class is at most this much bigger than the
                                one before (a multiple of 8); default 16,
                                0 = growth_factor only (memcached's) */
    uint32_t item_size_max;  /* largest item (key+value+header); default 1 MiB;
                                items above chunk_max are chained over
                                several chunks */
    bool evict;              /* default true; false = memcached's -M */
    uint64_t expected_items; /* sizes the hash index's first table; it
                                doubles as it fills; 0 = 65536 */
    uint32_t quota_batch;    /* chunks a thread takes from a class at once;
                                default 32 */
    bool background;         /* run the maintenance thread (expiry sweep, page
                                reassignment); default true. Off, the embedder
                                calls tc_maintain(). */
    bool large_pages;        /* memcached's -L: a pool on tmpfs is copied
                                onto 2 MiB pages at open where the kernel
                                does that (MADV_COLLAPSE, Linux 6.1; about
                                2 s a GiB the first time, the pages then
                                stay with the file), and one line says
                                which pages the pool got, with the remedy
                                when not 2 MiB ones; default false. The
                                pool is always mapped 2 MiB-aligned and
                                advised for huge pages. */
    uint32_t sweep_budget;   /* chunks the expiry sweep looks at per step;
                                default 1024 */
    /* Write-hotspot tracking and PMEM latency emulation (doc/hotspots.md,
     * "The tracker", "Latency emulation"). */
    uint32_t hotspot_dimms;      /* emulated DIMMs the tracker maps writes
                                    onto, up to TC_HOTSPOT_MAX_DIMMS; 0 = off
                                    (default). One tracked cache per
                                    process: a second tc_open() with it on
                                    fails with -EBUSY. */
    uint32_t hotspot_interleave; /* bytes per DIMM stripe; default 4096 */
    uint32_t hotspot_sample;     /* record one PMEM write in this many (per
                                    thread); default 1 = every write */
    uint32_t pm_write_ns;        /* busy-wait per 64-byte line written to
                                    PMEM; 0 = off (default). Process-wide:
                                    set by tc_open() when nonzero, cleared
                                    by that cache's tc_close(). */
    uint32_t pm_read_ns;         /* the same per line of value read */
    /* EXPERIMENT ONLY, off by default: reproduce Tair MDB's bad layouts
     * (doc/hotspots.md, "Ablation switches"). Never for production. */
    bool ablate_meta_in_pmem; /* page info also written into a header at the
                                 start of every 1 MiB PMEM page (a write hot
                                 spot on one DIMM); the page's first chunks
                                 hold no items */
    bool ablate_init_in_lock; /* items written and pages formatted with the
                                 slab class lock held */
    /* Hot keys (doc/hotspots.md, "Hot keys in DRAM"): items of keys
     * written at least hot_write_rate times a second live in a DRAM pool of
     * hot_pool_size bytes, where their writes do not touch PMEM. */
    uint64_t hot_pool_size;  /* bytes; 0 = off (default), which also turns
                                hot-key tracking off */
    uint32_t hot_write_rate; /* writes/s that make a key hot; default 1000;
                                a key goes back to PMEM below half of it */
    uint32_t hotkey_window;  /* seconds the rates average over; default 10 */
    uint32_t hotkey_k;       /* keys tracked by write and by read rate;
                                default 64, at most 1024 */
    uint32_t hotkey_sample;  /* sample one operation in this many; default
                                16 (1 = every one) */
    /* Packed small items (doc/design/small-items.md): a set, add, replace
     * or cas whose item takes at most this many bytes (8 + flags above 15
     * (4) + an expiry (4) + a chosen CAS (8) + key + value) is appended to
     * a 1 MiB segment instead of a slab chunk; segments are evicted whole,
     * oldest first; they survive a restart as slab items do. Default
     * 1024; 0 = off (every item in a slab chunk). */
    uint32_t packed_item_max;
    /* How the packed store makes room: TC_PACKED_EVICT_MERGE (default)
     * merges the oldest 4 segments into one, keeping the items read since
     * their last merge; TC_PACKED_EVICT_FIFO drops the oldest segment. */
    enum tc_packed_evict packed_evict;

    /* NVMe tier (memcached's extstore options; off while ext_npaths is 0).
     * Values of at least ext_item_size bytes that the eviction scan finds
     * cold (CLOCK reference bit clear) move to the files below; their
     * header and key stay in the pool. */
    unsigned ext_npaths;
    const char *ext_path[TC_EXT_MAX_PATHS]; /* file or block device, opened
                                               O_DIRECT (not on tmpfs) */
    uint64_t ext_size[TC_EXT_MAX_PATHS];    /* bytes used of each */
    uint32_t ext_item_size;                 /* default 512 */
    uint32_t ext_item_age;        /* memcached's ext_item_age: only victims
                                     idle this many seconds spill, younger
                                     ones are evicted; UINT32_MAX (default)
                                     or 0 = no limit; above 2 h counts as
                                     2 h (the access time's cap) */
    uint32_t ext_page_size;       /* segment bytes; default 64 MiB */
    uint32_t ext_wbuf_size;       /* write buffer bytes; default 4 MiB */
    uint32_t ext_recache_window;  /* entries of the re-read filter: a flash
                                     item read three times within about
                                     this many flash reads is copied back
                                     into the pool; 0 = off; default
                                     TC_EXT_RECACHE_AUTO: one entry per
                                     4 KiB of pool, 1,024 to 4M */
    uint32_t ext_recache_rate;    /* copy 1 in this many flash reads back
                                     into the pool; 0 = never; default
                                     2000 */
    double ext_max_frag;          /* compact a segment this dead (0..1);
                                     default 0.8 */
    uint32_t ext_read_timeout_ms; /* a flash read not back by then is a
                                     miss; 0 = none; default 1000 */
    uint32_t ext_threads;         /* I/O threads where io_uring is refused;
                                     default 2 */
    bool ext_no_uring;            /* use those threads even with io_uring */
    uint32_t alloc_wait_ms;       /* how long a store may wait for a page
                                     move (chunks of the page other threads
                                     hold) before it fails with -ENOMEM;
                                     evictions on only; default 3000 (0:
                                     one retry, no wait) */

    /* Restart (doc/operating.md, "Restart"): tc_open on an existing,
     * compatible pool file brings its items back (tc_open_info says what
     * happened). */
    bool no_restart; /* format the pool whatever it holds; default false */
    unsigned restart_threads; /* threads of the restart scan; 0 (default):
                                 one per CPU, at most 16 */
    /* What an answered store, delete or flush survives (doc/operating.md,
     * "Durability"): TC_DURABILITY_PROCESS (default) a crash of the
     * process, TC_DURABILITY_POWER power loss too, on real PMEM (every
     * PMEM write flushed and drained; elsewhere the same as process, one
     * log line says so). */
    enum tc_durability durability;
    /* Where tc_close saves what the next open's scan of the pool cannot
     * find there (the CAS counter at the close); the open removes it.
     * NULL (default): not saved (the counter then resumes above the
     * restored items' CAS values). tiercached: the pool file's path +
     * ".meta". */
    const char *restart_file;
};

enum tc_win {
    TC_WIN_NONE = 0,  /* nothing to recache */
    TC_WIN_YOU = 1,   /* this caller should recache (meta W) */
    TC_WIN_TAKEN = 2, /* another caller already got the win (meta Z) */
};

struct tc_item_info {
    uint32_t flags;          /* client flags */
    uint32_t exptime;        /* absolute unix seconds, 0 = never */
    uint32_t exptime_before; /* the expiry before this call's touch or
                                arith (meta t ahead of T) */
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
    bool flash;           /* the value lives on the NVMe tier (read from it
                             for this call) */
    uint64_t pending;     /* nonzero: an asynchronous flash read (see
                             tc_async_owner) will bring the value; fn got no
                             value (iov NULL, niov 0) */
};

/* 2 hours: older accesses read as this (13 bits of the 2 bytes of DRAM per
 * item that also hold its CLOCK bits keep the time; the maintenance thread
 * or tc_maintain rebases it every 5 minutes). */
#define TC_LAST_ACCESS_CAP 7200u

/* Called on a hit with the value in niov pieces (one unless the item is
 * chained). The pointers are valid only during the call. */
typedef void tc_value_fn(void *arg, const struct tc_item_info *info,
                         const struct iovec *iov, int niov);

/* What tc_stats() reports. The engine's counters among these fields are
 * the rows of TC_STATS_COUNTERS below; the other fields are read from the
 * engine's structures when asked. The layout is API: fields are only ever
 * added at the end. */
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
    uint64_t dram_meta_bytes;  /* page info, bitmaps, class tables,
                                  segment records */
    uint64_t quota_refills;    /* batches taken by thread quotas */
    uint64_t index_buckets;    /* home buckets of the index now */
    uint64_t index_overflow_buckets;
    bool index_growing;       /* the index is doubling */
    uint64_t sweep_reclaimed; /* expired items freed by the sweep */
    /* hot keys (zero when the hot pool is off) */
    uint64_t hotkey_current;          /* items in the DRAM hot pool now */
    uint64_t hotkey_promotions;       /* items that entered the DRAM pool */
    uint64_t hotkey_demotions;        /* keys whose item went back to PMEM */
    uint64_t hotkey_pmem_bytes_saved; /* value bytes written to DRAM
                                         instead of PMEM */
    uint64_t hot_pool_bytes;          /* bytes of the DRAM pool in use */
    uint64_t hot_pool_limit;          /* hot_pool_size */

    /* NVMe tier; memcached's extstore names where they match */
    bool ext_enabled;
    bool ext_uring;                /* false: the pread/pwrite fallback */
    uint32_t ext_recache_window;   /* re-read filter slots in use (the
                                      config's, rounded up to a power of
                                      two, or the default's); 0 = off */
    uint64_t ext_items;            /* items whose value is on flash */
    uint64_t ext_item_bytes;       /* their value bytes */
    uint64_t ext_spilled;          /* values the eviction moved to flash */
    uint64_t ext_spill_busy;       /* evicted instead: the flash was behind */
    uint64_t get_extstore;         /* hits served from flash */
    uint64_t get_aborted_extstore; /* flash reads failed: I/O error or
                                      timeout (a miss) */
    uint64_t miss_from_extstore;   /* flash values gone (segment reused) */
    uint64_t badcrc_from_extstore; /* flash reads failing their check */
    uint64_t recache_from_extstore;
    uint64_t ext_read_timeouts;
    uint64_t ext_write_errors; /* flash buffer writes that failed (their
                                  values read back as misses) */
    uint64_t extstore_bytes_written;
    uint64_t extstore_objects_written;
    uint64_t extstore_bytes_read;
    uint64_t extstore_objects_read;
    uint64_t extstore_page_reclaims;
    uint64_t extstore_objects_lost;
    uint64_t extstore_compact_rescues;
    uint64_t extstore_compact_skipped;
    uint64_t extstore_bytes_used;
    uint64_t extstore_bytes_dead;
    uint64_t extstore_limit_maxbytes;
    uint64_t extstore_pages_free;
    uint64_t extstore_io_queue; /* flash reads in flight */
    uint64_t ext_read_p50_ns, ext_read_p99_ns, ext_read_p999_ns;
    /* page moves: one waits now for chunks held elsewhere (a thread's
     * stash, a write in progress); such chunks a move found, each time it
     * looked; moves given up (waited too long, the page back in service);
     * stores that waited for a move */
    bool slab_reassign_running;
    uint64_t slab_reassign_busy_items;
    uint64_t slab_reassign_gave_up;
    uint64_t store_waits;
    uint64_t ext_reads_shared;   /* flash gets that joined a read of the
                                    same value already in flight */
    uint64_t ext_reads_net_ring; /* flash reads completed on the caller's
                                    io_uring (tc_async_ring) */
    /* the packed small-item store (zero when packed_item_max is 0) */
    uint64_t packed_items;            /* packed items in the index */
    uint64_t packed_segments;         /* segments open or sealed */
    uint64_t packed_segments_open;    /* of those, open (capped at 1/8
                                         of the pages) */
    uint64_t packed_bytes_live;       /* bytes of those items */
    uint64_t packed_bytes_dead;       /* replaced or deleted, not yet
                                         evicted with their segment */
    uint64_t packed_segments_evicted; /* segments evicted whole */
    uint64_t packed_segments_expired; /* segments freed whole because
                                         every item in them had expired
                                         (or was flushed) */
    uint64_t packed_cas_lifted;       /* packed stores given a CAS of their own
                                         (8 bytes): the derived one was not above
                                         the replaced version's (or a removed
                                         one's: the CAS floor) */
    uint64_t packed_items_merged;     /* items a merge eviction kept (copied
                                         into a new segment) */
    uint64_t packed_copies;           /* pending copies written (merges,
                                         touches that rewrite) */
    uint64_t packed_segments_compacted; /* mostly dead segments a merge
                                           freed by copying every live
                                           item out of them */
};

/*
 * The engine's counters, one row each:
 *
 *   X(id, field, name, kind)
 *     id     the engine's per-thread slot for it (internal)
 *     field  its member of struct tc_stats, a uint64_t (the build checks
 *            that the member exists and has that type)
 *     name   its line in tiercached's "stats" reply
 *     kind   COUNTER counts events; tc_stats_reset() zeroes it.
 *            GAUGE is a level (items, bytes) kept as per-thread ups and
 *            downs: reset leaves it alone and a read never goes below 0.
 *
 * The rows come in runs, in the order of the "stats" reply; the server
 * prints each run at its place among figures of its own
 * (src/server/stats.c). Adding a counter: a row in the run where its line
 * belongs, its field in struct tc_stats, and the increment where the event
 * happens; the engine's slot, the copy in tc_stats() and the "stats" line
 * come from the row.
 */
/* clang-format off */
#define TC_STATS_COUNTERS(X)                                                   \
    TC_STATS_CMD(X) TC_STATS_HIT(X) TC_STATS_SLAB(X) TC_STATS_ITEM(X)          \
    TC_STATS_SWEEP(X) TC_STATS_HOTKEY(X) TC_STATS_EXTSTORE(X) TC_STATS_EXT(X) \
    TC_STATS_PACKED(X)

/* the "cmd_*" lines */
#define TC_STATS_CMD(X)                                                        \
    X(CMD_GET,   cmd_get,   "cmd_get",   COUNTER)                              \
    X(CMD_SET,   cmd_set,   "cmd_set",   COUNTER)                              \
    X(CMD_FLUSH, cmd_flush, "cmd_flush", COUNTER)                              \
    X(CMD_TOUCH, cmd_touch, "cmd_touch", COUNTER)

/* hits and misses per command */
#define TC_STATS_HIT(X)                                                        \
    X(GET_HITS,        get_hits,        "get_hits",        COUNTER)            \
    X(GET_MISSES,      get_misses,      "get_misses",      COUNTER)            \
    X(GET_EXPIRED,     get_expired,     "get_expired",     COUNTER)            \
    X(GET_FLUSHED,     get_flushed,     "get_flushed",     COUNTER)            \
    X(DELETE_MISSES,   delete_misses,   "delete_misses",   COUNTER)            \
    X(DELETE_HITS,     delete_hits,     "delete_hits",     COUNTER)            \
    X(INCR_MISSES,     incr_misses,     "incr_misses",     COUNTER)            \
    X(INCR_HITS,       incr_hits,       "incr_hits",       COUNTER)            \
    X(DECR_MISSES,     decr_misses,     "decr_misses",     COUNTER)            \
    X(DECR_HITS,       decr_hits,       "decr_hits",       COUNTER)            \
    X(CAS_MISSES,      cas_misses,      "cas_misses",      COUNTER)            \
    X(CAS_HITS,        cas_hits,        "cas_hits",        COUNTER)            \
    X(CAS_BADVAL,      cas_badval,      "cas_badval",      COUNTER)            \
    X(TOUCH_HITS,      touch_hits,      "touch_hits",      COUNTER)            \
    X(TOUCH_MISSES,    touch_misses,    "touch_misses",    COUNTER)            \
    X(STORE_TOO_LARGE, store_too_large, "store_too_large", COUNTER)            \
    X(STORE_NO_MEMORY, store_no_memory, "store_no_memory", COUNTER)

/* "slabs_moved", after the slab reassign figures */
#define TC_STATS_SLAB(X)                                                       \
    X(REASSIGNS,           slab_reassign_count, "slabs_moved", COUNTER)        \
    X(REASSIGN_BUSY_ITEMS, slab_reassign_busy_items,                           \
                           "slab_reassign_busy_items", COUNTER)                \
    X(REASSIGN_GAVE_UP,    slab_reassign_gave_up,                              \
                           "tc_slab_reassign_gave_up", COUNTER)                \
    X(ALLOC_WAITS,         store_waits, "tc_store_waits", COUNTER)

/* items and their bytes */
#define TC_STATS_ITEM(X)                                                       \
    X(BYTES,             bytes,             "bytes",             GAUGE)        \
    X(CURR_ITEMS,        curr_items,        "curr_items",        GAUGE)        \
    X(TOTAL_ITEMS,       total_items,       "total_items",       COUNTER)      \
    X(EXPIRED_UNFETCHED, expired_unfetched, "expired_unfetched", COUNTER)      \
    X(EVICTED_UNFETCHED, evicted_unfetched, "evicted_unfetched", COUNTER)      \
    X(EVICTIONS,         evictions,         "evictions",         COUNTER)      \
    X(RECLAIMED,         reclaimed,         "reclaimed",         COUNTER)

/* the expiry sweep, after the index figures */
#define TC_STATS_SWEEP(X)                                                      \
    X(SWEEP_RECLAIMED, sweep_reclaimed, "tc_sweep_reclaimed", COUNTER)

/* the DRAM hot pool's items */
#define TC_STATS_HOTKEY(X)                                                     \
    X(HOT_ITEMS,       hotkey_current,    "hotkey_current",    GAUGE)          \
    X(HOT_PROMOTIONS,  hotkey_promotions, "hotkey_promotions", COUNTER)        \
    X(HOT_DEMOTIONS,   hotkey_demotions,  "hotkey_demotions",  COUNTER)        \
    X(HOT_BYTES_SAVED, hotkey_pmem_bytes_saved,                                \
                       "hotkey_pmem_bytes_saved", COUNTER)

/* the NVMe tier, memcached's extstore names (printed only with a tier) */
#define TC_STATS_EXTSTORE(X)                                                   \
    X(EXT_GETS,     get_extstore,          "get_extstore",          COUNTER)   \
    X(EXT_ABORTED,  get_aborted_extstore,  "get_aborted_extstore",  COUNTER)   \
    X(EXT_MISS,     miss_from_extstore,    "miss_from_extstore",    COUNTER)   \
    X(EXT_BADCRC,   badcrc_from_extstore,  "badcrc_from_extstore",  COUNTER)   \
    X(EXT_RECACHE,  recache_from_extstore, "recache_from_extstore", COUNTER)   \
    X(EXT_INFLIGHT, extstore_io_queue,     "extstore_io_queue",     GAUGE)

/* the NVMe tier, tiercache's own (printed only with a tier) */
#define TC_STATS_EXT(X)                                                        \
    X(EXT_ITEMS,      ext_items,         "tc_ext_items",         GAUGE)        \
    X(EXT_BYTES,      ext_item_bytes,    "tc_ext_item_bytes",    GAUGE)        \
    X(EXT_SPILLED,    ext_spilled,       "tc_ext_spilled",       COUNTER)      \
    X(EXT_SPILL_BUSY, ext_spill_busy,    "tc_ext_spill_busy",    COUNTER)      \
    X(EXT_TIMEOUTS,   ext_read_timeouts, "tc_ext_read_timeouts", COUNTER)      \
    X(EXT_SHARED,     ext_reads_shared,  "tc_ext_reads_shared",  COUNTER)      \
    X(EXT_NET_RING,   ext_reads_net_ring, "tc_ext_reads_net_ring", COUNTER)
/* the packed small-item store (printed only with it on) */
#define TC_STATS_PACKED(X)                                                     \
    X(PACKED_ITEMS,      packed_items,      "packed_items",      GAUGE)        \
    X(PACKED_SEGMENTS,   packed_segments,   "packed_segments",   GAUGE)        \
    X(PACKED_SEGS_OPEN,  packed_segments_open, "packed_segments_open", GAUGE)  \
    X(PACKED_BYTES_LIVE, packed_bytes_live, "packed_bytes_live", GAUGE)        \
    X(PACKED_BYTES_DEAD, packed_bytes_dead, "packed_bytes_dead", GAUGE)        \
    X(PACKED_SEGS_EVICTED, packed_segments_evicted,                            \
                           "packed_segments_evicted", COUNTER)                 \
    X(PACKED_SEGS_EXPIRED, packed_segments_expired,                            \
                           "packed_segments_expired", COUNTER)                 \
    X(PACKED_CAS_LIFTED, packed_cas_lifted, "packed_cas_lifted", COUNTER)     \
    X(PACKED_ITEMS_MERGED, packed_items_merged,                                \
                           "packed_items_merged", COUNTER)                     \
    X(PACKED_COPIES,     packed_copies,     "packed_copies",     COUNTER)      \
    X(PACKED_SEGS_COMPACTED, packed_segments_compacted,                        \
                           "packed_segments_compacted", COUNTER)
/* clang-format on */

/* One key of the hot-key view (tc_hotkeys). Rates are estimates from
 * sampled operations, averaged over hotkey_window seconds. */
struct tc_hotkey {
    char key[TC_KEY_MAX]; /* not NUL-terminated */
    uint8_t klen;
    bool in_dram;      /* its item lives in the DRAM hot pool now */
    uint64_t hash;     /* the cache's hash of the key (internal) */
    double write_rate; /* writes per second */
    double read_rate;  /* read hits per second */
};

struct tc_slab_stats {
    uint32_t chunk_size;
    uint32_t chunks_per_page;
    uint32_t total_pages;
    uint64_t total_chunks;
    uint64_t used_chunks; /* live items of this class */
    uint64_t free_chunks; /* in the class (not counting thread stashes) */
    /* memcached's per-class command counters: the events of tc_stats'
     * counters of the same names whose item is of this class (a flash
     * item's is its header's, also when its read completes asynchronously;
     * a store too large for any class has none) */
    uint64_t get_hits;
    uint64_t cmd_set;
    uint64_t delete_hits;
    uint64_t incr_hits;
    uint64_t decr_hits;
    uint64_t cas_hits;
    uint64_t cas_badval;
    uint64_t touch_hits;
};

struct tc_cache;

/* What tc_open found in the pool file (tc_open_info). */
enum tc_start_kind {
    TC_START_COLD = 0,      /* formatted: nothing came back */
    TC_START_WARM = 1,      /* after a clean close, items scanned back */
    TC_START_RECOVERED = 2, /* after a crash, items scanned back */
};

struct tc_open_info {
    enum tc_start_kind kind;
    uint64_t items;   /* items restored into the index */
    uint64_t bytes;   /* their bytes, as the "bytes" stat counts them */
    uint64_t dropped; /* committed items found and not restored, the sum of: */
    uint64_t dropped_expired; /* past their expiry */
    uint64_t dropped_flushed; /* older than a flush_all */
    uint64_t dropped_older;   /* a newer copy of the same key won */
    uint64_t dropped_torn;    /* failed the checksum or bounds checks */
    uint64_t dropped_flash;   /* on the NVMe tier: none configured now, or
                                 its record is not on the flash any more */
    uint64_t dropped_no_room; /* the index had no room left */
    double seconds;           /* time the restore (the scan) took */
    unsigned scan_threads;    /* threads the scan ran on */
    char reason[120];         /* a cold start's reason; a warm start's
                                 "with the saved state", or "without saved
                                 state: " and why not; "" after a crash */
};

/* Fill cfg with the defaults above. */
TC_API void tc_config_init(struct tc_config *cfg);

/* Open (create or reuse) the pool file and build the cache. 0, or a negative
 * errno with one sentence in tc_errmsg(). An existing pool file of the
 * same size, format version, item_size_max and slab classes has its items
 * brought back by a scan of the pool (after a clean close or a crash
 * alike: only committed items with a good checksum, the newest copy of a
 * key, none expired or flushed, none on the NVMe tier unless one is
 * configured), and after a clean close the CAS counter resumes where it
 * was, from cfg->restart_file when that passes its checks; any other file,
 * or cfg->no_restart, is formatted (a cold start, one log line saying
 * why). */
TC_API int tc_open(const struct tc_config *cfg, struct tc_cache **out);
/* What the open found and did. */
TC_API void tc_open_info(struct tc_cache *c, struct tc_open_info *out);
/* Stop the maintenance thread, move the DRAM hot pool's items to the pool
 * (those it has room for), save the CAS counter to cfg->restart_file (when
 * set), free every DRAM structure, mark the pool file clean and unmap it.
 * NULL is a no-op. */
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
/* Cheaper: gives back the stash and the deferred frees only when a page move
 * asked for them since (every other call makes that check too). For a thread
 * about to wait a little (a server worker before a short blocking wait): a
 * page move, and the stores behind it, would wait for it. */
TC_API void tc_thread_poll(struct tc_cache *c);

/* Retrieval. exptime values follow memcached: 0 never,
 * 1..TC_EXPTIME_RELATIVE_MAX seconds from now, larger an absolute unix time,
 * negative already expired. */
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
    uint32_t recache_below;    /* win when the remaining TTL (seconds) is
                                  below this (meta R); 0 = off */
    bool recache_before_touch; /* R looks at the expiry before this
                                  call's touch (meta R ahead of T) */
    bool no_win;    /* a read that cannot hand out the recache win (a text or
                       binary get) leaves it for the next meta reader */
    bool no_bump;   /* do not mark the item used (meta u) */
    bool *vivified; /* out, may be NULL */
    uint64_t *vivified_cas; /* out, may be NULL: the placeholder's CAS */
    uint64_t vivify_cas;    /* nonzero: the placeholder's CAS (meta E) */
    bool async;     /* a flash item may answer pending (see tc_async_owner)
                       instead of blocking on its read */
    bool head_only; /* fn needs the header only: a flash item's value is
                       not read, fn gets no value (iov NULL, niov 0) */
};
TC_API int tc_get_ex(struct tc_cache *c, const void *key, size_t klen,
                     const struct tc_get_opts *opts, tc_value_fn *fn,
                     void *arg);

/*
 * Batched retrieval: the keys of a multiget, of a pipelined read or of an
 * embedder's batch in one call. The result is that of one tc_get_ex() per
 * key, in key order (the same callbacks, misses, expiry and stats counters),
 * but the work is done in groups of up to 16 keys: every key of a group is
 * hashed and its index bucket prefetched, then the items its bucket points
 * at, and only then is each key looked up and its value copied, so the DRAM
 * misses of different keys overlap instead of following one another. A
 * flash item's value is read as tc_get_ex() reads it (opts->async applies).
 */
struct tc_key {
    const void *key;
    size_t klen;
};
/* Called for each hit of tc_get_many, in key order, as a tc_value_fn would
 * be; i is the key's index in keys. Return true to go on, false to stop
 * after this key (the keys after it are not looked up, nor counted). */
typedef bool tc_many_fn(void *arg, size_t i, const struct tc_item_info *info,
                        const struct iovec *iov, int niov);
/* Look up keys[0..n): opts as for tc_get_ex (NULL: as tc_get), except
 * vivify, which is refused (-EINVAL). fn may be NULL. rcs (may be NULL)
 * receives, for each key done, its return as tc_get_ex would give it:
 * TC_OK, TC_NOT_FOUND, or -EINVAL for a bad key length (that key only; the
 * others are served). Returns the number of keys done (n unless fn stopped
 * early), or a negative errno: -EINVAL (n > INT_MAX, vivify), -ENOMEM. */
TC_API int tc_get_many(struct tc_cache *c, const struct tc_key *keys, size_t n,
                       const struct tc_get_opts *opts, tc_many_fn *fn,
                       void *arg, int *rcs);

/* A hint for a caller about to get these keys one call at a time (a server
 * running the pipelined requests it has already read): start loading what
 * those gets will read, their index buckets and then their items, so the
 * misses overlap. Looks nothing up for real, counts nothing, changes
 * nothing; keys of a bad length are skipped. */
TC_API void tc_prefetch(struct tc_cache *c, const struct tc_key *keys,
                        size_t n);

/*
 * Asynchronous reads of the NVMe tier, for an event loop (the server): a
 * get of a flash item then does not block the thread.
 *
 * The thread sets an owner (its connection) with tc_async_owner() before
 * running requests. A tc_get_ex() with opts->async that finds a flash item
 * queues a read on the thread's own ring, calls fn with info->pending set
 * (an id) and no value, and returns TC_OK; the caller reserves
 * info->vlen bytes for the value. tc_async_submit() sends every queued
 * read in one batch; when tc_async_fd() becomes readable,
 * tc_async_reap() calls back with each finished read's value (niov 1) or
 * with none (niov 0: the read failed, which is a miss). A read's value has
 * been checked (segment generation, key, length, CRC32C) by the store.
 * Everything here is per calling thread.
 */
/* The thread's completion eventfd (creating its ring): >= 0, or -ENOENT
 * when the cache has no NVMe tier, or a negative errno. */
TC_API int tc_async_fd(struct tc_cache *c);
/* Instead of tc_async_fd: the thread's reads go on the caller's io_uring
 * (ring: liburing's struct io_uring *, the event loop's own), so that one
 * io_uring_enter of the loop submits them and collects their completions
 * with its other I/O. Each read's user_data is tag | n with n < 2^32 (the
 * low 32 bits of tag must be 0); every completion carrying the tag goes to
 * tc_async_complete, then tc_async_reap answers as with the eventfd. The
 * cache's NVMe files (and read buffers) are registered with the ring where
 * the kernel lets it. 0, -ENOENT (no NVMe tier), -ENOTSUP (the tier reads
 * without io_uring here: use tc_async_fd), -EEXIST (the thread's ring
 * exists already), or a negative errno. Before the ring goes away: hand
 * completions over until tc_async_busy() is 0 (bounded: a read's I/O ends
 * when the device answers), then tc_async_detach(). */
TC_API int tc_async_ring(struct tc_cache *c, void *ring, uint64_t tag);
/* A completion of the caller's ring with the tag: 1 when it finished a
 * read for tc_async_reap, else 0. */
TC_API int tc_async_complete(struct tc_cache *c, uint64_t user_data, int res);
/* Reads of the thread whose I/O is still on the caller's ring. */
TC_API unsigned tc_async_busy(struct tc_cache *c);
/* The caller's ring goes away: reads still on it finish as failed (a
 * miss) at the next reap, and later gets read the blocking way. */
TC_API void tc_async_detach(struct tc_cache *c);
/* The owner of the reads the thread queues next; NULL turns queuing off
 * (flash reads block, as for the embedding API). */
TC_API void tc_async_owner(struct tc_cache *c, void *owner);
/* Submit the queued reads: how many, or a negative errno. */
TC_API int tc_async_submit(struct tc_cache *c);
/* A finished read: iov/niov hold the value (niov 1) or nothing (niov 0: a
 * miss). Valid only during the call. */
typedef void tc_async_fn(void *arg, void *owner, uint64_t id,
                         const struct iovec *iov, int niov);
/* Call fn for every finished read whose owner is still set (never
 * waits): the number of reads finished. */
TC_API int tc_async_reap(struct tc_cache *c, tc_async_fn *fn, void *arg);
/* The owner goes away: its reads still in flight finish without a call. */
TC_API void tc_async_cancel(struct tc_cache *c, void *owner);

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
/* The same, the new CAS being cas_new when nonzero (meta md I E). */
TC_API int tc_invalidate_ex(struct tc_cache *c, const void *key, size_t klen,
                            uint64_t cas_in, int64_t exptime, uint64_t cas_new);

/* Arithmetic with the meta protocol's options (ma). */
struct tc_arith_opts {
    bool vivify; /* on a miss, store `initial` (meta N, J) */
    uint64_t initial;
    int64_t vivify_exptime;
    uint64_t cas_in; /* nonzero: must match (meta C) */
    bool touch;      /* set the expiry on success (meta T) */
    int64_t exptime;
    bool *vivified;   /* out, may be NULL: the miss created the item */
    uint64_t cas_new; /* nonzero: the new item's CAS (meta E) */
};
/* *value the new value; *info (may be NULL) the new item's header. As
 * memcached, a stale item stays stale when the new number fits in the old
 * value's length (rewritten in place), and a longer one is a new item, no
 * longer stale, with the old expiry. */
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
 * stored value is the decimal text, as memcached keeps it: a number shorter
 * than the old value is padded with spaces to the old length (memcached
 * rewrites it in place so). */
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
 * moving its live items to other pages of src. src -1: pick a class with a
 * page to spare and the most free bytes. 0, -EINVAL, -ENOENT (src has no
 * page), -EBUSY (other threads still hold chunks of the page: the move
 * goes on as they give them back, or is given up after half a second; or
 * two such moves wait already). */
TC_API int tc_slab_reassign(struct tc_cache *c, int src, int dst);

/* One live item as tc_walk reports it (memcached's metadump fields). */
struct tc_walk_item {
    const void *key; /* valid during the call only */
    uint32_t klen;
    uint32_t flags;
    uint32_t exptime;     /* absolute unix seconds, 0 = never */
    uint32_t last_access; /* seconds since last stored or read, as in
                             tc_item_info (not changed by the walk) */
    uint64_t cas;
    uint32_t vlen;
    uint32_t size;      /* header + key + value bytes */
    uint8_t slab_class; /* from 0 */
    bool fetched;       /* read since it was stored */
    bool flash;         /* its value is on the NVMe tier */
};
/* Called once per live item; the walk stops early, returning fn's value,
 * when fn returns non-zero. */
typedef int tc_walk_fn(void *arg, const struct tc_walk_item *item);
#define TC_WALK_DONE UINT64_MAX
/* Walk the live items through the index, a slice per call, safe beside any
 * number of concurrent reads and writes: start with *cursor 0; each call
 * visits whole index buckets from *cursor until about budget items were
 * passed to fn (at least one bucket), and leaves in *cursor where the next
 * call goes on, TC_WALK_DONE once the index is done. An item present for
 * the whole walk is visited once; one stored, deleted or replaced meanwhile
 * may or may not be (and a key deleted and stored again while its bucket
 * is read may show twice). fn runs inside a read-side section: it must not
 * block nor call the cache. Items are not marked used. Returns the number
 * of items visited, fn's non-zero value, or -ENOMEM. */
TC_API int tc_walk(struct tc_cache *c, uint64_t *cursor, unsigned budget,
                   tc_walk_fn *fn, void *arg);

/* One step of maintenance on the calling thread: expiry sweep with the
 * configured budget, the hot-key step (rates, hot set, moving cooled or
 * dead items out of the DRAM pool), freeing what waits for a grace period,
 * pending memlimit drains, the rebase of last access times every 5 minutes
 * (without the maintenance thread, call it at least every minute or so for
 * last_access to stay right past 2 h). Returns the number of expired items
 * the sweep removed (DRAM items removed by the hot-key step are not in
 * it). */
TC_API int tc_maintain(struct tc_cache *c);

TC_API void tc_stats(struct tc_cache *c, struct tc_stats *out);

/* The current top keys by write rate (by_reads false) or by read rate,
 * heaviest first, as of the last maintenance step: how many were written
 * to out (at most max; 0 when the hot pool is off). */
TC_API int tc_hotkeys(struct tc_cache *c, bool by_reads, struct tc_hotkey *out,
                      int max);
/* Change hot_write_rate while running (at least 1); takes effect at the
 * next maintenance step. No-op when the hot pool is off. */
TC_API void tc_set_hot_write_rate(struct tc_cache *c, uint32_t rate);
TC_API int tc_slab_nclasses(struct tc_cache *c);
TC_API int tc_slab_stats(struct tc_cache *c, int cls,
                         struct tc_slab_stats *out);
/* Zero the counters memcached's "stats reset" zeroes, the NVMe tier's
 * included (extstore_* counters, get_extstore, miss/badcrc/recache, read
 * timeouts and the read latency percentiles); gauges (curr_items, bytes,
 * extstore_bytes_used, tc_ext_items, extstore_pages_free, ...) stay. */
TC_API void tc_stats_reset(struct tc_cache *c);

/* Write-hotspot tracker (tc_config.hotspot_dimms > 0). */
#define TC_HOTSPOT_MAX_DIMMS 64
#define TC_HOTSPOT_TOP_MAX 64
/* The tracker's block: tc_hotspot_block.block is a file offset divided by
 * this. */
#define TC_HOTSPOT_BLOCK_SIZE 4096
struct tc_hotspot {
    unsigned dimms; /* 0: tracking is off (nothing else is filled) */
    uint64_t dimm_bytes[TC_HOTSPOT_MAX_DIMMS];  /* sampled bytes per DIMM */
    double skew;                                /* max / mean of dimm_bytes */
    uint64_t sampled_bytes;                     /* sum of dimm_bytes */
    uint64_t dimm_writes[TC_HOTSPOT_MAX_DIMMS]; /* writes touching each */
    uint32_t interleave;
    uint32_t sample;    /* one write in this many is recorded */
    uint64_t map_bytes; /* bytes of the mapped pool file */
};
/* One block of the mapped pool file (block = file offset /
 * TC_HOTSPOT_BLOCK_SIZE). */
struct tc_hotspot_block {
    uint64_t block;
    uint64_t bytes;   /* sampled bytes written */
    uint64_t writes;  /* sampled writes that touched it */
    const char *what; /* "region_meta", "item_header", "item_value",
                         "page_meta", "mixed" or "unknown" */
};
/* 0 (out->dimms 0 when tracking is off). */
TC_API int tc_hotspot_get(struct tc_cache *c, struct tc_hotspot *out);
/* The k (<= TC_HOTSPOT_TOP_MAX) most written blocks, most first: how many
 * were filled, or -ENOTSUP when tracking is off. */
TC_API int tc_hotspot_top(struct tc_cache *c, struct tc_hotspot_block *out,
                          unsigned k);
/* Zero the tracker's counters: 0 or -ENOTSUP. */
TC_API int tc_hotspot_reset(struct tc_cache *c);
/* Write the CSV dump (doc/hotspots.md, "The dump format") to f: 0,
 * -ENOTSUP (tracking off) or -EIO. */
TC_API int tc_hotspot_dump(struct tc_cache *c, FILE *f);

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

#pragma once
/*
 * Engine internals shared by the engine's files: src/engine/cache.c
 * (thread contexts, item frees and limbo, accounting, the shared rules,
 * the cache's memory), src/engine/reclaim.c (allocation, eviction, expiry
 * sweep, page moves), src/engine/maint.c (the maintenance step and thread),
 * src/engine/store.c (writes, deletes), src/engine/fetch.c (reads,
 * touches), and the modules that hang off a cache through opaque handles:
 * src/engine/hotkey.c (c->hot) and src/engine/ext.c (c->ext, the NVMe
 * tier). Not installed; the public API is src/tiercache.h.
 *
 * Calls point down only, file to file (tools/callcycles checks it):
 *   tiercache.c       the API; tc_open opens the modules below in turn
 *   maint.c           the maintenance step and thread
 *   store.c fetch.c   writes and deletes; reads and touches
 *   ext.c hotkey.c    the NVMe tier; hot keys and the DRAM hot pool
 *   reclaim.c         allocation, eviction, expiry sweep, page moves
 *   packed_merge.c    merge eviction of packed segments (a hook in packed.c)
 *   packed.c          the packed small-item store's writes and evictions
 *   cache.c           contexts, frees, accounting, rules, memory
 * Where a lower file must reach a higher one, the higher one registers a
 * hook: per-thread state and teardown (struct cache_module), eviction's
 * spill (struct reclaim_spill, src/engine/reclaim.h), the NVMe tier's
 * recache (the store function ext_open is given). None runs on a get, nor
 * on a set that does not have to evict.
 *
 * Concurrency (the whole engine's picture; doc/architecture.md repeats it):
 *   index            see src/engine/htab.h: RCU readers, bucket spin locks.
 *   item chunks      written before publication with no lock held; after
 *                    publication only exptime changes (one 4-byte store).
 *   freed chunks     an item unlinked from the index is freed only after an
 *                    RCU grace period: its thread's deferred batch goes on
 *                    the cache's limbo list, which whoever needs memory
 *                    empties after one synchronize_rcu (cache.c); eviction
 *                    waits with synchronize_rcu for its own victims. The
 *                    slab's outgrown page tables (alloc/slab.h) are freed
 *                    with the limbo list, after the same grace period.
 *   cache->cas_seq, flush_cas, flush_at
 *                    atomics; see the functions that use them.
 *   cache->admin     serialises maintenance: the expiry sweep cursors, page
 *                    reassignment, memlimit drains. It is an ownership
 *                    token, not a lock over shared DRAM state: relocation
 *                    copies items (PMEM writes) while a thread holds it, so
 *                    it is a plain mutex outside the rank and no-PMEM-write
 *                    checks, and no hot path waits on it (only an
 *                    allocation whose class has nothing left to evict;
 *                    the flash tier's header-page refills use trylock).
 *   cache->limbo_lock guards the limbo list.
 *   cache->threads_lock guards the list of thread contexts and the stats of
 *                    threads that left (a plain mutex, rank-free: held with
 *                    no other lock except by the hot-key tick, which takes
 *                    it inside its own lock and takes each thread's sample
 *                    buffer lock inside it; see src/engine/hotkey.c).
 *   cache->modules   written at open, before any thread context exists;
 *                    read-only after.
 *   cache->bg_*      the maintenance thread's (src/engine/maint.c); a
 *                    writer kicks it through bg_kick and bg_cond.
 *   cache->hot       hot-key tracking and the DRAM hot pool:
 * src/engine/hotkey.c states its rules. DRAM-resident items follow the same
 *                    publication and grace-period rules as PMEM ones.
 *   evict_cur[cls]   guarded by that slab class's lock (slab_scan takes it).
 *   struct cache_thread: owner thread only, except stats, which other
 *                    threads read with relaxed loads when summing.
 *   RCU flavour      liburcu memb: read-side sections cost two thread-local
 *                    stores and need no periodic quiescent state, which an
 *                    embedding application's threads cannot promise.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <urcu/urcu-memb.h>
/* The read-side lock and unlock inline (_urcu_memb_read_lock/unlock):
 * liburcu keeps each under ten lines so that code of any license may
 * inline them. As calls into the shared library they cost a get some 75
 * instructions (two calls, each with its own thread-local lookup). Under
 * TSan they stay calls: inline, TSan would see liburcu's own lock-free
 * words (the grace-period futex) without the library's synchronisation,
 * which it does not instrument. */
#include <urcu/static/urcu-memb.h>
#if defined(__SANITIZE_THREAD__)
#define CACHE_RCU_LOCK urcu_memb_read_lock
#define CACHE_RCU_UNLOCK urcu_memb_read_unlock
#else
#define CACHE_RCU_LOCK _urcu_memb_read_lock
#define CACHE_RCU_UNLOCK _urcu_memb_read_unlock
#endif

#include "alloc/pool.h"
#include "alloc/quota.h"
#include "alloc/seg.h"
#include "alloc/slab.h"
#include "src/base/compiler.h"
#include "src/base/hash.h"
#include "src/base/lock.h"
#include "src/engine/htab.h"
#include "src/engine/item.h"
#include "src/engine/pitem_layout.h"
#include "src/tiercache.h"
#include "tier/dpool.h"
#include "tier/region.h"

#define CACHE_DEFER_BATCH 64
#define CACHE_REALTIME_MAXDELTA TC_EXPTIME_RELATIVE_MAX

/* Per-thread counters, summed on demand: one slot ST_<id> per row of
 * TC_STATS_COUNTERS (src/tiercache.h), the counters first, then the gauges
 * from ST_FIRST_GAUGE on (kept as per-thread deltas, which may be negative
 * per thread). Owner writes with relaxed load+store (no lock prefix);
 * readers use relaxed loads. */
#define CACHE_ST_COUNTER_COUNTER(id) ST_##id,
#define CACHE_ST_COUNTER_GAUGE(id)
#define CACHE_ST_GAUGE_COUNTER(id)
#define CACHE_ST_GAUGE_GAUGE(id) ST_##id,
#define CACHE_ST_COUNTER(id, field, name, kind) CACHE_ST_COUNTER_##kind(id)
#define CACHE_ST_GAUGE(id, field, name, kind) CACHE_ST_GAUGE_##kind(id)
/* clang-format off */
enum cache_stat {
    TC_STATS_COUNTERS(CACHE_ST_COUNTER)
    ST_FIRST_GAUGE,
    ST_BEFORE_FIRST_GAUGE = ST_FIRST_GAUGE - 1, /* the first gauge takes
                                                   ST_FIRST_GAUGE's value */
    TC_STATS_COUNTERS(CACHE_ST_GAUGE)
    ST_COUNT
};
/* clang-format on */

/* Per-class command counters, memcached's "stats slabs" lines (named as
 * there, in its order). An event with an item to take a class from is
 * counted in its class only (cache_cls_inc: a flash hit in its header's
 * class, also when its read completes later); one without (a store too
 * large for any class) in the ST_ slot
 * of the same name. The total ("stats") is the ST_ slot plus every class
 * (cache_stats_sum adds them): one counter per event either way, so the
 * hot paths pay no more than for the total alone. Per thread, summed on
 * demand (cache_class_cmds). */
#define CACHE_CLS_STATS(X)                                                     \
    X(GET_HITS, "get_hits")                                                    \
    X(CMD_SET, "cmd_set")                                                      \
    X(DELETE_HITS, "delete_hits")                                              \
    X(INCR_HITS, "incr_hits")                                                  \
    X(DECR_HITS, "decr_hits")                                                  \
    X(CAS_HITS, "cas_hits")                                                    \
    X(CAS_BADVAL, "cas_badval")                                                \
    X(TOUCH_HITS, "touch_hits")
#define CACHE_CLS_ENUM(id, name) CLS_##id,
enum cache_cls_stat { CACHE_CLS_STATS(CACHE_CLS_ENUM) CLS_COUNT };
#undef CACHE_CLS_ENUM
/* CLS_<id> -> ST_<id> */
#define CACHE_CLS_TOTAL(id, name) ST_##id,
static const enum cache_stat cache_cls_total[CLS_COUNT] = {
    CACHE_CLS_STATS(CACHE_CLS_TOTAL)};
#undef CACHE_CLS_TOTAL

struct cache;
struct cache_thread;
struct dpool;
struct ext;
struct ext_thread;
struct hotspot;
struct hotkey;
struct hotkey_tbuf;
struct nvs;
struct reclaim_spill;

/*
 * A module above this file with state per cache or per thread (the hot
 * keys, the flash tier) registers one of these at open, before any thread
 * context exists (cache_add_module). Each member may be NULL.
 *   thread_init  with every new thread context, before it joins
 *                c->threads: 0, or a negative errno with err_msg set (the
 *                context is not created).
 *   thread_fini  when a context goes away, while it is still on
 *                c->threads (it may still count, allocate and free).
 *   close        at cache_close, after every thread context is gone and
 *                before the cache's memory goes.
 * Teardown calls run in reverse order of registration.
 */
struct cache_module {
    int (*thread_init)(struct cache_thread *t);
    void (*thread_fini)(struct cache_thread *t);
    void (*close)(struct cache *c);
};
#define CACHE_MAX_MODULES 4

struct cache_thread {
    struct cache *cache;
    struct quota *quota;
    struct hotkey_tbuf *hk; /* hot-key samples (src/engine/hotkey.c), or NULL */
    struct cache_thread *next; /* cache->threads list */
    bool in_admin;      /* holds cache->admin: allocation must not reassign */
    uint32_t quota_gen; /* cache->quota_gen when this thread last flushed */
    unsigned ndefer;
    uint64_t defer[CACHE_DEFER_BATCH]; /* head offsets awaiting a grace
                                          period */
    struct ext_thread *ext;            /* the flash tier's per-thread state
                                          (src/engine/ext.c), or NULL */
    struct seg_open so; /* open packed segments (src/engine/packed.c);
                           used only when cache->seg */
    _Atomic int64_t stat[ST_COUNT] CACHE_ALIGNED;
    _Atomic int64_t cls_chunks[SLAB_MAX_CLASSES]; /* chunks of live items */
    /* one cache line per class: a thread's hits on one class touch one */
    _Atomic int64_t cls_cmd[SLAB_MAX_CLASSES][CLS_COUNT] CACHE_ALIGNED;
};

/* Page moves that may wait at once (src/engine/reclaim.c) */
#define CACHE_MOVES_MAX 2

/* Words of the packed store's CAS floor (struct cache's cas_floor) */
#define CACHE_FLOOR_BITS 12
#define CACHE_FLOOR_N (1u << CACHE_FLOOR_BITS)

/* Sizes struct cache's packed_cls covers: the slab item of a packed item
 * up to 1 KiB and more (larger ones look their class up by a call). */
#define CACHE_PACKED_CLS_N 1536u

struct cache {
    uint64_t id; /* unique per open, so a stale thread slot never matches */
    struct tc_config cfg;
    struct region *region;
    struct pool *pool;
    struct slab *slab;
    struct htab *htab;
    char *base;
    uint64_t hash_seed;
    uint32_t chunk_max;

    _Atomic uint64_t cas_seq CACHE_ALIGNED;
    _Atomic uint64_t flush_cas;   /* items with cas <= this are flushed */
    _Atomic uint64_t flush_epoch; /* odd while a flush sets flush_cas
                                     (cache_flush_set; one at a time) */
    _Atomic uint32_t flush_at;    /* pending delayed flush time, 0 none */
    _Atomic uint32_t quota_gen;   /* bumped by a page drain: every thread
                                     gives its stashed chunks back at its
                                     next operation (relaxed: a hint) */
    pthread_mutex_t limbo_lock;   /* guards limbo (never held with another) */
    struct limbo_batch *limbo;    /* unlinked items awaiting a grace period */
    _Atomic uint64_t limbo_items; /* relaxed: a hint */

    pthread_mutex_t admin CACHE_ALIGNED;
    struct slab_cursor sweep_cur[SLAB_MAX_CLASSES];
    unsigned sweep_cls;
    uint32_t packed_sweep_page;     /* the next page the sweep looks at */
    _Atomic uint32_t shrink_target; /* pages wanted after a pending shrink,
                                       0 none */
    /* Page moves waiting for chunks other threads hold (their stashes,
     * items being written): each stays draining, and the next reassignment
     * or maintenance step finishes it (src/engine/reclaim.c). Under admin. */
    struct {
        _Atomic uint32_t page; /* UINT32_MAX: none; stats peek (relaxed) */
        unsigned cls;          /* the class it leaves */
        int dst;               /* the class it goes to, or -1: the pool */
        uint64_t since_ns;
    } move[CACHE_MOVES_MAX];

    pthread_mutex_t threads_lock;
    struct cache_thread *threads;
    int64_t retired[ST_COUNT]; /* stats of threads that left */
    int64_t retired_cls[SLAB_MAX_CLASSES];
    int64_t retired_cls_cmd[SLAB_MAX_CLASSES][CLS_COUNT];
    uint64_t retired_refills;
    int64_t reset_base[ST_COUNT]; /* subtracted after "stats reset" */
    int64_t reset_cls_cmd[SLAB_MAX_CLASSES][CLS_COUNT]; /* likewise */

    pthread_t bg;
    bool bg_running;
    _Atomic bool bg_stop;
    _Atomic bool bg_kick; /* a writer asked for limbo to be freed now */
    pthread_mutex_t bg_lock;
    pthread_cond_t bg_cond;

    struct slab_cursor evict_cur[SLAB_MAX_CLASSES];
    /* write-hotspot tracking and latency emulation (src/engine/cache_hotspot.c)
     */
    struct hotspot *hotspot; /* NULL: tracking off */
    bool pm_latency;         /* this cache set the PMEM helpers' latency */

    struct hotkey *hot; /* hot keys (src/engine/hotkey.c), NULL when the
                           hot pool is off */
    struct dpool *dram; /* the DRAM hot pool (tier/dpool.h) its items live
                           in, made and destroyed by hotkey.c; NULL: off */

    /* the packed small-item store (src/engine/packed.c): NULL when
     * packed_item_max is 0 */
    struct seg *seg;
    char *seg_rec;       /* seg_records(seg): its records, used inline */
    uint32_t packed_max; /* cfg.packed_item_max, 0 with no store */
    bool divert;         /* hot || seg: a store may go elsewhere than
                            a slab (set at open: cache.c, hotkey.c) */
    _Atomic uint32_t seg_owners; /* numbers for struct seg_open */
    /* per pool page: the latest time an item of its segment was stored
     * or read (meta l of a packed item: never above its true age);
     * relaxed, stored only when it changes */
    _Atomic uint32_t *packed_time;
    /* how the packed store makes room: NULL, FIFO (packed.c); else the
     * hook merge eviction (src/engine/packed_merge.c, above packed.c)
     * registers at open, with its state. Read-only after open. */
    int (*packed_evict)(struct cache_thread *t);
    struct packed_merge *merge;

    struct ext *ext; /* the NVMe tier (src/engine/ext.c), NULL when off */
    struct nvs *nvs; /* its store (tier/nvs.h): flash headers point into
                        it; set by ext_open, NULL when off */
    /* eviction's spill hook (src/engine/reclaim.h), NULL: evict only */
    const struct reclaim_spill *spill;

    struct cache_module modules[CACHE_MAX_MODULES];
    unsigned nmodules;

    struct tc_open_info start; /* what the open found (src/engine/restart.c);
                                  read-only after open */

    /* the packed store's CAS floor (used only with c->seg): the highest
     * CAS of an item removed other than by a replacement, by the top
     * CACHE_FLOOR_BITS of its key's hash (src/engine/cache_packed.h,
     * cache_floor_*); raised and read under the key's bucket lock,
     * relaxed. Inline: a set reads it with no pointer to load. */
    _Atomic uint64_t cas_floor[CACHE_FLOOR_N] CACHE_ALIGNED;

    /* the slab class of a slab item of n bytes (item_plan's head_size),
     * slab_class_for's, for n below CACHE_PACKED_CLS_N: a packed set's
     * counters are its would-be slab item's class's (store.c), looked
     * up here with no call. Filled at open with the packed store;
     * read-only after. */
    uint8_t packed_cls[CACHE_PACKED_CLS_N];
};

/* --- cache.c --- */

/* RCU read-side sections. Under TSan, each section's end releases a token
 * that code running after a grace period acquires (cache_rcu_synced), so
 * TSan sees what the grace period guarantees. */
extern char cache_rcu_token;

static inline void
cache_read_lock(void)
{
    CACHE_RCU_LOCK();
}

static inline void
cache_read_unlock(void)
{
    TSAN_RELEASE(&cache_rcu_token);
    CACHE_RCU_UNLOCK();
}

/* Call after a grace period ended (after synchronize_rcu, before freeing
 * what the readers could still see). */
static inline void
cache_rcu_synced(void)
{
    TSAN_ACQUIRE(&cache_rcu_token);
}

/* The cache's memory (pool, slabs, index), its thread registry and the
 * write-hotspot tracker: 0, or a negative errno with err_msg set. The
 * modules above (hot keys, flash tier, maintenance thread) are opened by
 * the caller after it (src/engine/tiercache.c). */
int cache_open(const struct tc_config *cfg, struct cache **out);
/* Every thread context (module thread_fini hooks), then the modules' close
 * hooks, then the memory. The maintenance thread must have stopped. */
void cache_close(struct cache *c);
/* The one log line of an open cache (after its modules opened too). */
void cache_log_open(const struct cache *c);
/* Register a module's hooks (see struct cache_module): 0 or -ENOSPC.
 * Context: at open, before any thread context exists. */
int cache_add_module(struct cache *c, const struct cache_module *m);

/* Key comparison for htab lookups. */
struct cache_key {
    const struct cache *c;
    const void *key;
    uint32_t klen;
};
bool cache_match_key(void *arg, uint64_t loc);
/* htab_rehash_fn: the hash of the key of the item at loc. */
uint64_t cache_rehash(void *arg, uint64_t loc);
/* The index's first table when tc_config.expected_items is 0 (about 68K
 * items before it first doubles: 1.25 MiB), and the home buckets a writer
 * moves while it doubles (htab_set_grow). */
#define CACHE_INDEX_ITEMS 65536
#define CACHE_INDEX_HELP 8
/* The same, for a caller that prefetched the chunk's DRAM word already (a
 * batched get). */
bool cache_match_key_warm(void *arg, uint64_t loc);
/* cache_match_key for a key in a struct cache_word_key: also keeps the
 * chunk's DRAM word it prefetches (slab_prefetch_word; NULL for an item
 * in DRAM) and its class, so that the touch after a match (the last call)
 * need not find them again. Inline, for htab_lookup_rcu_inline. */
struct cache_word_key {
    struct cache_key k; /* first: the match callback's argument */
    void *word;
    unsigned cls;
};
static inline __attribute__((always_inline)) bool
cache_match_key_word(void *arg, uint64_t loc);

/* The calling thread's context for c, registering it on first use; NULL
 * only when DRAM runs out (err_msg says so). */
struct cache_thread *cache_thread_get_slow(struct cache *c);
/* The calling thread's (cache id -> context) table, owned by cache.c: most
 * threads use one cache, so slot 0 is checked here without a call. */
struct cache_tls_slot {
    uint64_t id;
    struct cache *cache;
    struct cache_thread *ctx;
};
extern __thread struct cache_tls_slot cache_tls[];
static inline struct cache_thread *
cache_thread_get(struct cache *c)
{
    const struct cache_tls_slot *s = &cache_tls[0];
    if (likely(s->cache == c && s->id == c->id)) {
        struct cache_thread *t = s->ctx;
        if (likely(t->quota_gen ==
                   atomic_load_explicit(&c->quota_gen, memory_order_relaxed)))
            return t;
    }
    return cache_thread_get_slow(c);
}
/* Give back the calling thread's stash and deferred frees (tc_thread_quiesce
 * and a drain's request). */
void cache_thread_quiesce(struct cache_thread *t);
/* Whether t is the only thread registered with its cache (no maintenance
 * thread, no other user): nobody else holds chunks of it. Locks:
 * threads_lock. */
bool cache_thread_alone(struct cache_thread *t);
void cache_thread_put(struct cache *c);

static inline void
cache_stat_add(struct cache_thread *t, enum cache_stat s, int64_t n)
{
    int64_t v = atomic_load_explicit(&t->stat[s], memory_order_relaxed);
    atomic_store_explicit(&t->stat[s], v + n, memory_order_relaxed);
}
#define cache_stat_inc(t, s) cache_stat_add((t), (s), 1)

/* The books of a packed item of size bytes that entered (sign 1) or left
 * (-1) the index; leaving, its bytes become dead bytes of its segment
 * until the segment goes. Inline: a packed set's new item, whose size its
 * writer knows (no parse of its header). */
static inline void
cache_account_packed(struct cache_thread *t, int64_t size, int sign)
{
    cache_stat_add(t, ST_CURR_ITEMS, sign);
    cache_stat_add(t, ST_BYTES, sign * size);
    cache_stat_add(t, ST_PACKED_ITEMS, sign);
    cache_stat_add(t, ST_PACKED_BYTES_LIVE, sign * size);
    if (sign < 0)
        cache_stat_add(t, ST_PACKED_BYTES_DEAD, size);
}

/* One more event s on an item of class cls; SLAB_NO_CLASS (no item):
 * counted in the total's own slot. */
static inline void
cache_cls_inc(struct cache_thread *t, unsigned cls, enum cache_cls_stat s)
{
    if (unlikely(cls >= SLAB_MAX_CLASSES)) {
        cache_stat_inc(t, cache_cls_total[s]);
        return;
    }
    int64_t v = atomic_load_explicit(&t->cls_cmd[cls][s], memory_order_relaxed);
    atomic_store_explicit(&t->cls_cmd[cls][s], v + 1, memory_order_relaxed);
}

/* The per-class command counters of class cls, summed over threads, less
 * what "stats reset" took away. */
void cache_class_cmds(struct cache *c, unsigned cls, int64_t out[CLS_COUNT]);
/* After "stats reset": the present sums become the new zero. */
void cache_class_cmds_reset(struct cache *c);

void cache_stats_sum(struct cache *c, int64_t *sum);
/* Chunks of live items in class cls, summed over threads. */
int64_t cache_class_chunks(struct cache *c, unsigned cls);

/* Locations in the index: chunk offset / 8 + 1, so 0 means empty. */
static inline uint64_t
cache_loc(uint64_t off)
{
    return (off >> 3) + 1;
}

static inline uint64_t
cache_off(uint64_t loc)
{
    return (loc - 1) << 3;
}

/* The index hash of a key, inline on the get and set paths. */
static inline __attribute__((always_inline)) uint64_t
cache_hash(const struct cache *c, const void *key, uint32_t klen)
{
    return hash_bytes_inline(key, klen, c->hash_seed);
}

/*
 * Item offsets. A PMEM item is named by its head chunk's offset from the
 * pool base (below 2^50: pools are at most 16 TiB). An item in the DRAM
 * hot pool (src/engine/hotkey.c) is named by CACHE_DRAM_OFF | its address,
 * which is 8-aligned and below 2^47 (x86-64 user space; hotkey.c refuses any
 * other), so both kinds map through cache_loc() into the index's 48 bits
 * and back. Every place that turns an offset into an item goes through
 * cache_item_at(); per-chunk DRAM bits through the cache_bit_* helpers.
 * DRAM items are always plain (no tails).
 */
#define CACHE_DRAM_OFF (1ull << 50)
#define CACHE_DRAM_ADDR_LIMIT (1ull << 47)

static inline bool
cache_off_dram(uint64_t off)
{
    return (off & CACHE_DRAM_OFF) != 0;
}

/*
 * Packed items (src/engine/packed.c, doc/design/small-items.md): their
 * index location is bits 47 and 46 (CACHE_LOC_PACKED) | the pool offset
 * / 4, bits 45..42 (CACHE_LOC_PBITS: REF, FETCHED, WIN, spare) masked
 * wherever one is decoded or compared (htab_loc_same). A DRAM location
 * never has bit 46 (its address / 8 is below 2^44). cache_off() of a
 * packed location has bits 50 and 49 set (CACHE_PACKED_OFF), so that the
 * one test of bit 50 that the hot paths make anyway (cache_off_dram: "not
 * a slab chunk") sends packed items off the slab path too: whatever may
 * meet a packed offset tests cache_off_packed() (bit 49) before it treats
 * the offset as a DRAM item's. cache_packed_pool() undoes the encoding;
 * cache_loc() of a packed offset gives the location back, so that the
 * store path handles it as an offset until it must look at the item.
 */
#define CACHE_LOC_PACKED ((1ull << 47) | HTAB_LOC_KIND)
#define CACHE_LOC_PBITS HTAB_LOC_VOLATILE
#define CACHE_LOC_REF (1ull << 45)     /* read since stored (merge: later) */
#define CACHE_LOC_FETCHED (1ull << 44) /* meta h */
#define CACHE_LOC_WIN (1ull << 43)     /* the recache win handed out */
#define CACHE_PACKED_OFF (1ull << 49)
/* DRAM or packed: not a slab chunk (one bit: both have it) */
#define CACHE_SPECIAL_OFF CACHE_DRAM_OFF

static inline bool
cache_off_packed(uint64_t off)
{
    return (off & CACHE_PACKED_OFF) != 0;
}

static inline bool
cache_loc_packed(uint64_t loc)
{
    return (loc & HTAB_LOC_KIND) != 0;
}

/* The pool offset of a packed item's engine offset (cache_off of its
 * location), the REF/FETCHED/WIN bits dropped. */
static inline uint64_t
cache_packed_pool(uint64_t off)
{
    return (((off & ((1ull << 45) - 1)) >> 3) + 1) << 2;
}

/* Whether the slot a packed item's offset came from had its FETCHED bit
 * (cache_off keeps the location's bits 45..42 in bits 48..45). */
static inline bool
cache_packed_fetched(uint64_t off)
{
    return (off & (CACHE_LOC_FETCHED << 3)) != 0;
}

/* The engine offset of the packed item at pool offset poff (4-aligned). */
static inline uint64_t
cache_packed_off(uint64_t poff)
{
    return ((CACHE_LOC_PACKED | (poff >> 2)) - 1) << 3;
}

_Static_assert((((CACHE_LOC_PACKED | 1) - 1) << 3) ==
                   (CACHE_DRAM_OFF | CACHE_PACKED_OFF),
               "a packed offset has the DRAM bit and its own");

static inline void *
cache_dram_ptr(uint64_t off)
{
    return (void *)(uintptr_t)(off & ~CACHE_DRAM_OFF);
}

/* A packed item at pool offset poff was stored or read at now. */
static inline void
cache_packed_touch(struct cache *c, uint64_t poff, uint32_t now)
{
    _Atomic uint32_t *p = &c->packed_time[poff >> POOL_PAGE_SHIFT];
    if (atomic_load_explicit(p, memory_order_relaxed) != now)
        atomic_store_explicit(p, now, memory_order_relaxed);
}

/* Seconds since an item of the packed item's segment was last stored or
 * read (at most its own last access's age). */
static inline uint32_t
cache_packed_age(const struct cache *c, uint64_t poff, uint32_t now)
{
    uint32_t t = atomic_load_explicit(&c->packed_time[poff >> POOL_PAGE_SHIFT],
                                      memory_order_relaxed);
    uint32_t age = now > t ? now - t : 0;
    return age < TC_LAST_ACCESS_CAP ? age : TC_LAST_ACCESS_CAP;
}

/* The key compare of an item in DRAM or packed (a slab chunk's is
 * inline in each match function). PMEM: reads the key. */
bool cache_match_special(const struct cache_key *k, uint64_t off);

/* Whether the packed item at engine offset off has this key. PMEM: reads
 * its header and key. */
static inline bool
cache_packed_key_equals(const struct cache *c, uint64_t off, const void *key,
                        uint32_t klen)
{
    const unsigned char *p =
        (const unsigned char *)c->base + cache_packed_pool(off);
    if (p[0] != klen)
        return false;
    const unsigned char *k =
        p + sizeof(struct pitem_hdr) + ((p[1] & PITEM_HAS_EXP) ? 4u : 0u);
    return item_key_bytes_equal(k, key, klen);
}

static inline const struct item_hdr *
cache_item_at(const struct cache *c, uint64_t off)
{
    if (unlikely(cache_off_dram(off)))
        return (const struct item_hdr *)cache_dram_ptr(off);
    return item_at(c->base, off);
}

/* cache_match_key without the chunk word's prefetch, inline: a store's
 * compare under its bucket lock (nothing on a store's path reads the
 * replaced chunk's DRAM word: its books take the page's class). */
static inline __attribute__((always_inline)) bool
cache_match_key_store(void *arg, uint64_t loc)
{
    const struct cache_key *k = arg;
    uint64_t off = cache_off(loc);
    if (unlikely(off & CACHE_SPECIAL_OFF))
        return cache_off_packed(off)
                   ? cache_packed_key_equals(k->c, off, k->key, k->klen)
                   : cache_match_special(k, off);
    return item_key_equals(item_at(k->c->base, off), k->key, k->klen);
}

static inline __attribute__((always_inline)) bool
cache_match_key_word(void *arg, uint64_t loc)
{
    struct cache_word_key *wk = arg;
    uint64_t off = cache_off(loc);
    wk->word = NULL;
    if (unlikely(off & CACHE_SPECIAL_OFF))
        return cache_off_packed(off) ? cache_packed_key_equals(
                                           wk->k.c, off, wk->k.key, wk->k.klen)
                                     : cache_match_special(&wk->k, off);
    wk->word = slab_prefetch_word(wk->k.c->slab, off, &wk->cls);
    return item_key_equals(item_at(wk->k.c->base, off), wk->k.key, wk->k.klen);
}

/* Flag bits of a DRAM item's block (dpool_flags), in place of the slab's
 * per-chunk bits. HOT_WRITTEN: the item bytes are complete (release store,
 * for the maintenance walk). */
#define HOT_WRITTEN 0x01
#define HOT_FETCHED 0x02
#define HOT_CLAIMED 0x04

static inline void
cache_bit_ref(struct cache *c, uint64_t off)
{
    if (unlikely(cache_off_dram(off))) {
        _Atomic uint8_t *f = dpool_flags(cache_dram_ptr(off));
        if (!(atomic_load_explicit(f, memory_order_relaxed) & HOT_FETCHED))
            atomic_fetch_or_explicit(f, HOT_FETCHED, memory_order_relaxed);
        return;
    }
    slab_ref(c->slab, off);
}

static inline bool
cache_bit_fetched(const struct cache *c, uint64_t off)
{
    if (unlikely(cache_off_dram(off)))
        return atomic_load_explicit(dpool_flags(cache_dram_ptr(off)),
                                    memory_order_relaxed) &
               HOT_FETCHED;
    return slab_fetched(c->slab, off);
}

static inline bool
cache_bit_claimed(const struct cache *c, uint64_t off)
{
    if (unlikely(cache_off_dram(off)))
        return atomic_load_explicit(dpool_flags(cache_dram_ptr(off)),
                                    memory_order_relaxed) &
               HOT_CLAIMED;
    return slab_claimed(c->slab, off);
}

/* True for the first claimer of the item's recache win. */
static inline bool
cache_bit_claim(struct cache *c, uint64_t off)
{
    if (unlikely(cache_off_dram(off)))
        return !(atomic_fetch_or_explicit(dpool_flags(cache_dram_ptr(off)),
                                          HOT_CLAIMED, memory_order_relaxed) &
                 HOT_CLAIMED);
    return slab_claim(c->slab, off);
}

/* Last access time (meta l, me la=). A DRAM item keeps none: it is there
 * because it is written hot_write_rate times a second and leaves within a
 * maintenance step of cooling, so its age reads as 0. */
static inline void
cache_atime_set(struct cache *c, uint64_t off, uint32_t now)
{
    if (likely(!cache_off_dram(off)))
        slab_atime_set(c->slab, off, now);
}

static inline uint32_t
cache_atime_age(const struct cache *c, uint64_t off, uint32_t now)
{
    if (unlikely(cache_off_dram(off)))
        return 0;
    return slab_atime_age(c->slab, off, now);
}

/* Slab class of a PMEM item; for a DRAM one, the class its size maps to
 * (what meta's "me" reports). */
unsigned cache_class_of(const struct cache *c, uint64_t off);
/* cache_class_of with the common case (a PMEM chunk) inline. Context: the
 * item at off is live for the caller (an RCU section, the bucket lock, or
 * its own unpublished chunk) when off is in DRAM. */
static inline unsigned
cache_class_at(const struct cache *c, uint64_t off)
{
    if (likely(!(off & CACHE_SPECIAL_OFF)))
        return slab_class_of(c->slab, off);
    return cache_class_of(c, off);
}

/* A read hit's DRAM bookkeeping in one call (slab_touch: one DRAM line for
 * a PMEM item): *out gets the item's fetched and win bits, age and class
 * before this access, then, if bump, its CLOCK bit and time are set. */
void cache_touch_dram(struct cache *c, uint64_t off, bool bump,
                      struct slab_seen *out);
static inline void
cache_touch(struct cache *c, uint64_t off, uint32_t now, bool bump,
            struct slab_seen *out)
{
    if (unlikely(cache_off_dram(off))) {
        cache_touch_dram(c, off, bump, out);
        return;
    }
    slab_touch(c->slab, off, now, bump, out);
}

/* cache_touch with bump, for a reader that wants only the class back (a
 * copy of the value without its description). */
static inline unsigned
cache_touch_cls(struct cache *c, uint64_t off, uint32_t now)
{
    if (unlikely(cache_off_dram(off))) {
        struct slab_seen seen;
        cache_touch_dram(c, off, true, &seen);
        return seen.cls;
    }
    return slab_touch_cls(c->slab, off, now);
}

/* A store's head chunk before it is published: bits cleared (the win
 * claimed, the item fetched, as bits SLAB_FRESH_* say) and the access time
 * set, in one store for a PMEM item. */
static inline void
cache_fresh(struct cache *c, uint64_t off, uint32_t now, unsigned bits)
{
    if (unlikely(off & CACHE_SPECIAL_OFF)) {
        if (cache_off_packed(off)) /* no per-chunk word */
            return;
        /* a fresh DRAM block's flags are already clear */
        if (bits & SLAB_FRESH_WIN)
            cache_bit_claim(c, off);
        if (bits & SLAB_FRESH_FETCHED)
            atomic_fetch_or_explicit(dpool_flags(cache_dram_ptr(off)),
                                     HOT_FETCHED, memory_order_relaxed);
        return;
    }
    slab_fresh(c->slab, off, now, bits);
}

/* memcached's exptime rule: 0 never, up to 30 days relative, else absolute
 * unix time, negative already expired (returned as 1, long past). */
uint32_t cache_exptime(int64_t exptime, uint32_t now);

/* Applies a delayed flush whose time has come. Call before any decision
 * that depends on flush state, with no lock held. */
void cache_flush_apply(struct cache *c, uint32_t now);

/* A flush's watermark: flush_cas = the counter now, inside an odd
 * flush_epoch (flushes take turns on it). With no lock held. */
void cache_flush_set(struct cache *c);

/* Whether a copy of an item whose derived sequence is src_seq (a touch's
 * rewrite, a merge's copy) may replace it in the index: false when a
 * flush_all covers the source, or is setting its watermark now (its
 * counter read may precede the copy's sequence block, and then the
 * watermark would not cover the copy as it covers the source). Call after
 * the copy's span was reserved (its segment's block taken by this thread,
 * or under a lock its opener released), just before the publication,
 * under the bucket lock. With the seq_cst fences of this and
 * cache_flush_set, a copy published with true is either below the
 * watermark of every later flush (its block taken before that flush read
 * the counter) or judged against a watermark already stored. */
bool cache_flush_spares_copy(const struct cache *c, uint64_t src_seq);

/* Whether a flush is setting its watermark now (cache_flush_set). */
static inline bool
cache_flush_busy(const struct cache *c)
{
    return atomic_load_explicit(&c->flush_epoch, memory_order_acquire) & 1;
}
static inline __attribute__((always_inline)) void
cache_flush_check(struct cache *c, uint32_t now)
{
    /* inline: no flush pending is one load and a test */
    uint32_t at = atomic_load_explicit(&c->flush_at, memory_order_acquire);
    if (unlikely(at != 0) && now >= at)
        cache_flush_apply(c, now);
}
/* Store flush_cas and flush_at in the pool's restart metadata
 * (src/engine/restart_layout.h), before a flush answers. PMEM: two stores
 * in the region header; no lock may be held. */
void cache_flush_persist(struct cache *c);

enum cache_dead {
    CACHE_LIVE = 0,
    CACHE_EXPIRED = 1,
    CACHE_FLUSHED = 2,
    CACHE_LOST = 3, /* a flash item whose segment was reused */
};

/* A flash item's part of cache_item_dead: CACHE_LOST when the store
 * reused its segment, else CACHE_LIVE. */
enum cache_dead cache_flash_dead(const struct cache *c,
                                 const struct item_hdr *it);
/* Whether an item is still visible at now. Inline: every get and store
 * asks. */
static inline enum cache_dead
cache_item_dead(const struct cache *c, const struct item_hdr *it, uint32_t now)
{
    uint32_t exp = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    if (exp != 0 && exp <= now)
        return CACHE_EXPIRED;
    /* acquire pairs with the release store in cache_flush_check/flush_all */
    if (item_seq(it) <=
        atomic_load_explicit(&c->flush_cas, memory_order_acquire))
        return CACHE_FLUSHED;
    if (unlikely(it->kind == ITEM_KIND_FLASH))
        return cache_flash_dead(c, it);
    return CACHE_LIVE;
}

/* The next store sequence (item_layout.h's seq): one per item written,
 * whatever CAS it carries. */
static inline uint64_t
cache_seq_next(struct cache *c)
{
    return atomic_fetch_add_explicit(&c->cas_seq, 1, memory_order_relaxed) + 1;
}

/* Invalidate an item in PMEM (item_invalidate); nothing for a DRAM one.
 * PMEM: one 8-byte store; no lock may be held. */
static inline void
cache_invalidate(struct cache *c, uint64_t off)
{
    if (likely(!cache_off_dram(off)))
        item_invalidate(c->base, off);
}

/* Give back the chunks of an item that was never published (invalidated
 * first: it was committed). */
void cache_free_unpublished(struct cache_thread *t,
                            const struct item_plan *plan, uint64_t head,
                            const uint64_t *tails);
/* Deferred entries are head offsets (8-aligned); the low bit marks a
 * chained item, whose tails must be read from its header when freed. A
 * plain item is freed without touching PMEM. */
#define CACHE_DEFER_CHAINED 1ull
/* cache_defer_free's batch is full: put it on the limbo list, and wake the
 * maintenance thread or free limbo here when it has grown. */
void cache_defer_full(struct cache_thread *t);
/* cache_defer_free of a DRAM item (deferred as a chunk is) or a packed
 * one (invalidated now: commit = 1; its segment's page goes whole). */
void cache_defer_free_special(struct cache_thread *t, uint64_t head);
/* Free an item unlinked from the index after a grace period. It is
 * invalidated in PMEM now, before the caller answers (a delete, a
 * replacing store) or the chunk can be reused. No lock may be held.
 * Inline: every replacing set's path. */
static inline void
cache_defer_free(struct cache_thread *t, uint64_t head)
{
    struct cache *c = t->cache;
    if (unlikely(head & CACHE_SPECIAL_OFF)) {
        cache_defer_free_special(t, head);
        return;
    }
    /* Context: the caller unlinked the item, so its header is still
     * intact, and likely in the CPU cache; PMEM: its commit word goes to 0
     * before the unlink is answered (item_layout.h) */
    item_invalidate(c->base, head);
    t->defer[t->ndefer++] =
        head | (item_at(c->base, head)->nchain ? CACHE_DEFER_CHAINED : 0);
    if (unlikely(t->ndefer >= CACHE_DEFER_BATCH))
        cache_defer_full(t);
}
/* Put the thread's deferred batch on the cache's limbo list now. */
void cache_defer_flush(struct cache_thread *t);
/* Take everything in limbo (this thread's batch too) and the slab's retired
 * page tables, wait for one grace period and free them, the items into the
 * thread's quota: the number of items freed.
 * Context: no lock, no RCU read section. */
int cache_reclaim_limbo(struct cache_thread *t);
/* Free an unlinked item's chunks right away into the thread's quota (the
 * caller has waited for a grace period). */
void cache_free_now(struct cache_thread *t, uint64_t head);

/* An item entered (sign 1) or left (sign -1) the index: curr_items, bytes
 * and per-class chunk counts. Reads the item's header and tail list.
 * Returns the head chunk's class (SLAB_NO_CLASS for a DRAM item). */
unsigned cache_account(struct cache_thread *t, uint64_t head, int sign);
/* cache_account(t, head, 1) for a new one-chunk item whose head chunk's
 * class (cls) and "bytes" (its plan's total) the store knows: no header
 * read, no class lookup. Inline: every store's path. */
static inline void
cache_account_new(struct cache_thread *t, unsigned cls, uint64_t bytes)
{
    cache_stat_add(t, ST_CURR_ITEMS, 1);
    cache_stat_add(t, ST_BYTES, (int64_t)bytes);
    int64_t v = atomic_load_explicit(&t->cls_chunks[cls], memory_order_relaxed);
    atomic_store_explicit(&t->cls_chunks[cls], v + 1, memory_order_relaxed);
}
/* Why an item left the index, for memcached's counters. */
enum cache_unlink {
    UNLINK_DELETED,  /* delete, or a failed set dropping the old value */
    UNLINK_REPLACED, /* a store put a new item in its place */
    UNLINK_EVICTED,  /* taken to make room (evictions, or reclaimed if it
                        was dead already) */
    UNLINK_SWEPT,    /* expired, found by the sweep */
    UNLINK_REAPED,   /* expired or flushed, found by a reader */
};
/* An item left the index: cache_account(-1) plus the counters memcached
 * keeps for the reason and its state (`dead`, enum cache_dead). */
void cache_account_unlink(struct cache_thread *t, uint64_t head, int dead,
                          enum cache_unlink why);
/* cache_account_unlink(UNLINK_REPLACED), its tests of why folded: every
 * replacing set's path. Not for a packed item (cache_account_unlink). */
void cache_account_replaced(struct cache_thread *t, uint64_t head, int dead);
/* cache_retire_packed: src/engine/cache_packed.h. */

/* Bytes an item accounts for in the "bytes" stat. */
uint64_t cache_item_bytes(const struct cache *c, const struct item_hdr *it);

/* Unlink the item at loc if the index still holds it for this hash: true
 * when this call removed it (the caller then frees it). A removal: the
 * key's CAS floor is raised (cache_floor_unlink). */
bool cache_unlink_loc(struct cache *c, uint64_t hash, uint64_t loc);

/*
 * The public embedding API (src/tiercache.h): argument checks, the calling
 * thread's context, then the engine. The only file whose functions are
 * exported; they carry the tc_ prefix of the installed header rather than
 * this file's stem. tc_open puts an engine together: the cache's core,
 * then the modules above it (hot keys, the flash tier, handed the write
 * path's recache), then the maintenance thread.
 *
 * Concurrency: no state of its own; see src/engine/cache.h.
 */
#include "src/tiercache.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/engine/cache.h"
#include "src/engine/cache_check.h"
#include "src/engine/ext.h"
#include "src/engine/fetch.h"
#include "src/engine/hotkey.h"
#include "src/engine/maint.h"
#include "src/engine/packed_merge.h"
#include "src/engine/reclaim.h"
#include "src/engine/restart.h"
#include "src/engine/store.h"
#include "tier/hotspot.h"
#include "tier/region_layout.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

_Static_assert(TC_POOL_HEADER_SIZE + TC_POOL_MIN_ITEMS == REGION_MIN_SIZE,
               "the public smallest pool is the region's");
_Static_assert(TC_POOL_HEADER_SIZE == REGION_DATA_OFFSET,
               "the pool header the API states is the region's");

struct tc_cache {
    struct cache c;
};

static inline struct cache *
engine(struct tc_cache *tc)
{
    return &tc->c;
}

/* The calling thread's context; NULL after a bad key or no DRAM. */
static struct cache_thread *
enter(struct tc_cache *tc, size_t klen, int *rc)
{
    if (klen == 0 || klen > TC_KEY_MAX) {
        *rc = -EINVAL;
        return NULL;
    }
    struct cache_thread *t = cache_thread_get(engine(tc));
    if (!t)
        *rc = -ENOMEM;
    return t;
}

/* The library's defaults. tiercached starts from them and sets every
 * option its table (src/server/options.def) passes on, to the same values
 * except where the server has its reasons, each said at its row there and
 * checked by tests/unit/test_settings.c:
 *   pool_path, pool_size, mem_limit: from -p, -m and -o pool_size;
 *   min_chunk: memcached's -n 48 room after the 24-byte header, 72 bytes;
 *     here the whole chunk, one cache line;
 *   hot_pool_size: 8 MiB; here off, as an embedder budgets its own DRAM
 *     and opts in. */
TC_API void
tc_config_init(struct tc_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->pool_path = REGION_DEFAULT_PATH;
    cfg->pool_size = 64ull << 20;
    cfg->min_chunk = 64; /* one cache line; tiercached: 72 (see above) */
    cfg->growth_factor = 1.25;
    cfg->chunk_max = POOL_PAGE_SIZE / 2;
    cfg->chunk_step = 16;
    cfg->item_size_max = TC_ITEM_SIZE_MAX_DEFAULT;
    cfg->evict = true;
    cfg->quota_batch = 32;
    cfg->alloc_wait_ms = 3000;
    cfg->background = true;
    cfg->sweep_budget = 1024;
    cfg->hotspot_interleave = 4096;
    cfg->hotspot_sample = 1;
    cfg->hot_pool_size = 0; /* off; tiercached: 8 MiB (see above) */
    cfg->hot_write_rate = 1000;
    cfg->hotkey_window = 10;
    cfg->hotkey_k = 64;
    cfg->hotkey_sample = 16;
    cfg->ext_item_size = 512;
    cfg->ext_item_age = UINT32_MAX;
    cfg->ext_page_size = 64u << 20;
    cfg->ext_wbuf_size = 4u << 20;
    cfg->ext_recache_rate = 2000;
    cfg->ext_recache_window = TC_EXT_RECACHE_AUTO;
    cfg->ext_max_frag = 0.8;
    cfg->ext_read_timeout_ms = 1000;
    cfg->ext_threads = 2;
    cfg->packed_item_max = 1024; /* doc/design/small-items.md, slice 8 */
}

TC_API int
tc_open(const struct tc_config *cfg, struct tc_cache **out)
{
    struct cache *c;
    err_clear();
    int rc = cache_open(cfg, &c);
    if (rc)
        return rc;
    if ((rc = restart_attach(c)) != 0 || (rc = packed_merge_open(c)) != 0 ||
        (rc = hotkey_create(c)) != 0 ||
        (rc = ext_open(c, store_recache)) != 0 ||
        (c->cfg.background && (rc = maint_start(c)) != 0)) {
        cache_close(c); /* closes the modules that opened */
        return rc;
    }
    cache_log_open(c);
    /* struct tc_cache is the engine's struct under the public name */
    *out = (struct tc_cache *)c;
    return 0;
}

TC_API void
tc_close(struct tc_cache *tc)
{
    if (!tc)
        return;
    maint_stop(engine(tc));
    /* the hot pool's items go to PMEM while the flash writer still runs
     * (an eviction they cause may spill to it) and before cache_close
     * drains it and saves the index */
    hotkey_write_back(engine(tc));
    cache_close(engine(tc));
}

TC_API void
tc_open_info(struct tc_cache *tc, struct tc_open_info *out)
{
    *out = engine(tc)->start;
}

TC_API const char *
tc_errmsg(void)
{
    return err_msg();
}

TC_API int
tc_thread_register(struct tc_cache *tc)
{
    return cache_thread_get(engine(tc)) ? 0 : -ENOMEM;
}

TC_API void
tc_thread_unregister(struct tc_cache *tc)
{
    cache_thread_put(engine(tc));
}

TC_API void
tc_thread_quiesce(struct tc_cache *tc)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    if (t)
        cache_thread_quiesce(t);
}

TC_API void
tc_thread_poll(struct tc_cache *tc)
{
    cache_thread_get(engine(tc)); /* gives back when a page move asks */
}

TC_API int
tc_get_ex(struct tc_cache *tc, const void *key, size_t klen,
          const struct tc_get_opts *opts, tc_value_fn *fn, void *arg)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    if (!t)
        return rc;
    if (opts->vivified)
        *opts->vivified = false;
    for (int i = 0; i < 2; i++) {
        rc = fetch_get(t, key, (uint32_t)klen, opts, fn, arg);
        if (rc != TC_NOT_FOUND || !opts->vivify)
            return rc;
        int made = store_vivify(t, key, (uint32_t)klen, opts->vivify_exptime,
                                opts->vivify_cas, opts->vivified_cas);
        if (made == TC_OK) {
            if (opts->vivified)
                *opts->vivified = true;
            return TC_NOT_FOUND;
        }
        if (made != TC_NOT_STORED)
            return made;
        /* another client vivified it meanwhile: read that one */
    }
    return rc;
}

TC_API int
tc_get(struct tc_cache *tc, const void *key, size_t klen, tc_value_fn *fn,
       void *arg)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? fetch_get_plain(t, key, (uint32_t)klen, fn, arg) : rc;
}

TC_API int
tc_get_many(struct tc_cache *tc, const struct tc_key *keys, size_t n,
            const struct tc_get_opts *opts, tc_many_fn *fn, void *arg, int *rcs)
{
    if (n > INT_MAX || (opts && opts->vivify) || (n && !keys))
        return -EINVAL;
    if (n == 0)
        return 0;
    struct cache_thread *t = cache_thread_get(engine(tc));
    if (!t)
        return -ENOMEM;
    return (int)fetch_get_many(t, keys, n, opts, fn, arg, rcs);
}

TC_API void
tc_prefetch(struct tc_cache *tc, const struct tc_key *keys, size_t n)
{
    if (n == 0 || !keys)
        return;
    struct cache_thread *t = cache_thread_get(engine(tc));
    if (t)
        fetch_prefetch(t, keys, n);
}

TC_API int
tc_gat(struct tc_cache *tc, const void *key, size_t klen, int64_t exptime,
       tc_value_fn *fn, void *arg)
{
    struct tc_get_opts o = {.touch = true, .exptime = exptime, .no_win = true};
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? fetch_get(t, key, (uint32_t)klen, &o, fn, arg) : rc;
}

TC_API int
tc_async_fd(struct tc_cache *tc)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    return t ? ext_async_fd(t) : -ENOMEM;
}

TC_API int
tc_async_ring(struct tc_cache *tc, void *ring, uint64_t tag)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    return t ? ext_async_ring(t, ring, tag) : -ENOMEM;
}

TC_API int
tc_async_complete(struct tc_cache *tc, uint64_t user_data, int res)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    return t ? ext_async_complete(t, user_data, res) : 0;
}

TC_API unsigned
tc_async_busy(struct tc_cache *tc)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    return t ? ext_async_busy(t) : 0;
}

TC_API void
tc_async_detach(struct tc_cache *tc)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    if (t)
        ext_async_detach(t);
}

TC_API void
tc_async_owner(struct tc_cache *tc, void *owner)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    if (t)
        ext_async_owner(t, owner);
}

TC_API int
tc_async_submit(struct tc_cache *tc)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    return t ? ext_async_submit(t) : -ENOMEM;
}

TC_API int
tc_async_reap(struct tc_cache *tc, tc_async_fn *fn, void *arg)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    return t ? ext_async_reap(t, fn, arg) : -ENOMEM;
}

TC_API void
tc_async_cancel(struct tc_cache *tc, void *owner)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    if (t)
        ext_async_cancel(t, owner);
}

TC_API int
tc_get_copy(struct tc_cache *tc, const void *key, size_t klen, void *buf,
            size_t cap, struct tc_item_info *info)
{
    struct fetch_copy a = {buf, cap, info};
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? fetch_get_copy(t, key, (uint32_t)klen, &a) : rc;
}

TC_API int
tc_store_ex(struct tc_cache *tc, enum tc_store_mode mode, const void *key,
            size_t klen, const void *val, size_t vlen, uint32_t flags,
            int64_t exptime, const struct tc_store_opts *opts,
            uint64_t *cas_out)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? store_ex(t, mode, key, (uint32_t)klen, val, vlen, flags, exptime,
                        opts, cas_out)
             : rc;
}

/* tc_store's body, inline in tc_set too (its mode a constant there: one
 * call fewer on every set). */
static inline __attribute__((always_inline)) int
store_api(struct tc_cache *tc, enum tc_store_mode mode, const void *key,
          size_t klen, const void *val, size_t vlen, uint32_t flags,
          int64_t exptime, uint64_t cas_in, uint64_t *cas_out)
{
    struct tc_store_opts o = {.cas_in = cas_in};
    /* where store_ex would reach store_plain (no meta options), go there
     * directly: a layer fewer on every set (cachegrind: some 50
     * instructions) */
    bool plain = mode == TC_SET || mode == TC_ADD || mode == TC_REPLACE ||
                 mode == TC_CAS;
    if (!plain || vlen > UINT32_MAX)
        return tc_store_ex(tc, mode, key, klen, val, vlen, flags, exptime, &o,
                           cas_out);
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? store_plain(t, mode, key, (uint32_t)klen, val, vlen, flags,
                           exptime, &o, cas_out)
             : rc;
}

TC_API int
tc_store(struct tc_cache *tc, enum tc_store_mode mode, const void *key,
         size_t klen, const void *val, size_t vlen, uint32_t flags,
         int64_t exptime, uint64_t cas_in, uint64_t *cas_out)
{
    return store_api(tc, mode, key, klen, val, vlen, flags, exptime, cas_in,
                     cas_out);
}

TC_API int
tc_set(struct tc_cache *tc, const void *key, size_t klen, const void *val,
       size_t vlen, uint32_t flags, int64_t exptime)
{
    /* store_plain's set copy (store_set), which finds the thread's context
     * itself: this is a jump, the arguments where they came */
    if (likely(klen - 1 < TC_KEY_MAX && vlen <= UINT32_MAX))
        return store_set(engine(tc), key, (uint32_t)klen, val, (uint32_t)vlen,
                         flags, exptime);
    return store_api(tc, TC_SET, key, klen, val, vlen, flags, exptime, 0, NULL);
}

TC_API int
tc_arith_ex(struct tc_cache *tc, const void *key, size_t klen, bool incr,
            uint64_t delta, const struct tc_arith_opts *opts, uint64_t *value,
            struct tc_item_info *info)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? store_arith(t, incr, key, (uint32_t)klen, delta, opts, value,
                           info)
             : rc;
}

static int
arith(struct tc_cache *tc, const void *key, size_t klen, bool incr,
      uint64_t delta, uint64_t *value, uint64_t *cas_out)
{
    struct tc_item_info info;
    int rc = tc_arith_ex(tc, key, klen, incr, delta, NULL, value, &info);
    if (rc == TC_OK && cas_out)
        *cas_out = info.cas;
    return rc;
}

TC_API int
tc_incr(struct tc_cache *tc, const void *key, size_t klen, uint64_t delta,
        uint64_t *value, uint64_t *cas_out)
{
    return arith(tc, key, klen, true, delta, value, cas_out);
}

TC_API int
tc_decr(struct tc_cache *tc, const void *key, size_t klen, uint64_t delta,
        uint64_t *value, uint64_t *cas_out)
{
    return arith(tc, key, klen, false, delta, value, cas_out);
}

TC_API int
tc_invalidate_ex(struct tc_cache *tc, const void *key, size_t klen,
                 uint64_t cas_in, int64_t exptime, uint64_t cas_new)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? store_invalidate(t, key, (uint32_t)klen, cas_in, exptime,
                                cas_new)
             : rc;
}

TC_API int
tc_invalidate(struct tc_cache *tc, const void *key, size_t klen,
              uint64_t cas_in, int64_t exptime)
{
    return tc_invalidate_ex(tc, key, klen, cas_in, exptime, 0);
}

TC_API int
tc_delete(struct tc_cache *tc, const void *key, size_t klen, uint64_t cas_in)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? store_delete(t, key, (uint32_t)klen, cas_in) : rc;
}

TC_API int
tc_drop(struct tc_cache *tc, const void *key, size_t klen)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? store_drop(t, key, (uint32_t)klen) : rc;
}

TC_API void
tc_store_refused(struct tc_cache *tc, const void *key, size_t klen,
                 bool drop_old)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    if (!t)
        return;
    cache_stat_inc(t, ST_CMD_SET);
    cache_stat_inc(t, ST_STORE_TOO_LARGE);
    if (drop_old)
        store_drop(t, key, (uint32_t)klen);
}

TC_API int
tc_touch(struct tc_cache *tc, const void *key, size_t klen, int64_t exptime)
{
    int rc;
    struct cache_thread *t = enter(tc, klen, &rc);
    return t ? fetch_touch(t, key, (uint32_t)klen, exptime) : rc;
}

TC_API int
tc_flush_all(struct tc_cache *tc, int64_t delay)
{
    struct cache *c = engine(tc);
    struct cache_thread *t = cache_thread_get(c);
    uint32_t now = clock_now();

    if (!t)
        return -ENOMEM;
    cache_stat_inc(t, ST_CMD_FLUSH);
    if (delay > 0) {
        /* memcached: the delay follows the exptime rules, so a value past
         * 30 days is an absolute time */
        atomic_store_explicit(&c->flush_at, cache_exptime(delay, now),
                              memory_order_release);
        cache_flush_persist(c); /* before the answer: a restart keeps it */
        return TC_OK;
    }
    atomic_store_explicit(&c->flush_at, 0, memory_order_release);
    cache_flush_set(c);
    cache_flush_persist(c); /* before the answer: a restart keeps it */
    return TC_OK;
}

TC_API int
tc_set_mem_limit(struct tc_cache *tc, uint64_t bytes)
{
    struct cache *c = engine(tc);
    struct cache_thread *t = cache_thread_get(c);
    uint64_t pages = bytes >> POOL_PAGE_SHIFT;

    if (!t)
        return -ENOMEM;
    if (pages < 1 || pages > pool_npages(c->pool)) {
        err_set("memory limit %llu bytes is outside 1 MiB .. %llu MiB",
                (unsigned long long)bytes,
                (unsigned long long)pool_npages(c->pool));
        return -EINVAL;
    }
    uint32_t old = pool_limit(c->pool);
    pool_set_limit(c->pool, (uint32_t)pages);
    c->cfg.mem_limit = pages << POOL_PAGE_SHIFT;
    if (pages >= old) {
        /* pages a pending shrink was draining below the new limit go back
         * into service; admin keeps maintenance from draining meanwhile */
        pthread_mutex_lock(&c->admin);
        for (uint32_t p = 0; p < pages; p++)
            if (slab_page_draining(c->slab, p))
                slab_drain_abort(c->slab, p);
        atomic_store_explicit(&c->shrink_target, 0, memory_order_relaxed);
        pthread_mutex_unlock(&c->admin);
        return 0;
    }
    /* release: whoever sees the target (reclaim_shrink) sees the lowered
     * pool limit too */
    atomic_store_explicit(&c->shrink_target, (uint32_t)pages,
                          memory_order_release);
    return reclaim_shrink(t);
}

TC_API int
tc_slab_reassign(struct tc_cache *tc, int src, int dst)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    return t ? reclaim_reassign(t, src, dst, RECLAIM_WAIT) : -ENOMEM;
}

TC_API int
tc_walk(struct tc_cache *tc, uint64_t *cursor, unsigned budget, tc_walk_fn *fn,
        void *arg)
{
    struct cache_thread *t = cache_thread_get(engine(tc));
    if (!t)
        return -ENOMEM;
    if (*cursor == TC_WALK_DONE)
        return 0;
    return fetch_walk(t, cursor, budget, fn, arg);
}

TC_API int
tc_maintain(struct tc_cache *tc)
{
    struct cache *c = engine(tc);
    struct cache_thread *t = cache_thread_get(c);
    if (!t)
        return -ENOMEM;
    cache_flush_check(c, clock_now());
    return maint_step(t);
}

/* A counter's sum as reported; a gauge's sum can read below zero while
 * threads move it up and down between the loads. */
#define STAT_VALUE_COUNTER(v) ((uint64_t)(v))
#define STAT_VALUE_GAUGE(v) ((v) > 0 ? (uint64_t)(v) : 0)

/* Each row of TC_STATS_COUNTERS names a uint64_t field of struct tc_stats
 * (the copy in tc_stats() fails to compile without the field). */
#define STAT_IS_U64(id, field, name, kind)                                     \
    _Static_assert(                                                            \
        _Generic(((struct tc_stats *)0)->field, uint64_t : 1, default : 0),    \
        "struct tc_stats." #field " is not a uint64_t");
TC_STATS_COUNTERS(STAT_IS_U64)
#undef STAT_IS_U64

TC_API void
tc_stats(struct tc_cache *tc, struct tc_stats *out)
{
    struct cache *c = engine(tc);
    int64_t s[ST_COUNT];

    cache_stats_sum(c, s);
    memset(out, 0, sizeof(*out));
    out->limit_maxbytes = (uint64_t)pool_limit(c->pool) << POOL_PAGE_SHIFT;
#define STAT_COPY(id, field, name, kind)                                       \
    out->field = STAT_VALUE_##kind(s[ST_##id]);
    TC_STATS_COUNTERS(STAT_COPY)
#undef STAT_COPY
    out->slab_reassign_running = reclaim_move_waiting(c);
    out->hot_pool_bytes = hotkey_pool_bytes(c);
    out->hot_pool_limit = c->cfg.hot_pool_size;
    ext_stats(c, out);

    uint64_t free_pages = pool_nfree(c->pool);
    out->pmem_bytes = region_data_size(c->region);
    out->pmem_pages_total = pool_limit(c->pool);
    out->pmem_pages_free = free_pages;
    out->total_malloced = 0;
    for (unsigned i = 0; i < slab_nclasses(c->slab); i++) {
        struct slab_class_stats st;
        slab_class_stats(c->slab, i, &st);
        out->total_malloced += (uint64_t)st.pages << POOL_PAGE_SHIFT;
    }
    if (c->seg) { /* the packed store's segments are pages in use too */
        struct seg_stats ss;
        seg_stats(c->seg, &ss);
        out->total_malloced += (uint64_t)(ss.open + ss.sealed + ss.evicting)
                               << POOL_PAGE_SHIFT;
        /* the rows' counters are never moved: the records know */
        out->packed_segments_open = ss.open;
        out->packed_segments = ss.open + ss.sealed;
    }
    out->pmem_is_pmem = region_is_pmem(c->region);
    out->dram_index_bytes = htab_dram_bytes(c->htab);
    out->dram_meta_bytes = slab_dram_bytes(c->slab);
    if (c->seg) /* the segment records and each page's packed time */
        out->dram_meta_bytes +=
            seg_dram_bytes(c->seg) +
            (uint64_t)pool_npages(c->pool) * sizeof(*c->packed_time);
    out->index_buckets = htab_nbuckets(c->htab);
    out->index_overflow_buckets = htab_noverflow(c->htab);
    out->index_growing = htab_growing(c->htab);
    pthread_mutex_lock(&c->threads_lock);
    out->quota_refills = c->retired_refills;
    for (struct cache_thread *t = c->threads; t; t = t->next)
        out->quota_refills += quota_refills(t->quota);
    pthread_mutex_unlock(&c->threads_lock);
}

TC_API int
tc_hotkeys(struct tc_cache *tc, bool by_reads, struct tc_hotkey *out, int max)
{
    struct cache *c = engine(tc);
    if (!cache_thread_get(c))
        return -ENOMEM;
    return hotkey_list(c, by_reads, out, max);
}

TC_API void
tc_set_hot_write_rate(struct tc_cache *tc, uint32_t rate)
{
    hotkey_set_rate(engine(tc), rate);
}

TC_API void
tc_stats_reset(struct tc_cache *tc)
{
    struct cache *c = engine(tc);
    int64_t s[ST_COUNT];
    cache_stats_sum(c, s);
    pthread_mutex_lock(&c->threads_lock);
    for (int i = 0; i < ST_FIRST_GAUGE; i++)
        c->reset_base[i] += s[i];
    pthread_mutex_unlock(&c->threads_lock);
    cache_class_cmds_reset(c);
    ext_stats_reset(c);
}

TC_API int
tc_slab_nclasses(struct tc_cache *tc)
{
    return (int)slab_nclasses(engine(tc)->slab);
}

TC_API int
tc_slab_stats(struct tc_cache *tc, int cls, struct tc_slab_stats *out)
{
    struct cache *c = engine(tc);
    struct slab_class_stats st;
    if (cls < 0 || cls >= (int)slab_nclasses(c->slab))
        return -EINVAL;
    slab_class_stats(c->slab, (unsigned)cls, &st);
    out->chunk_size = st.chunk_size;
    out->chunks_per_page = st.perpage;
    out->total_pages = st.pages;
    out->total_chunks = (uint64_t)st.pages * st.perpage;
    out->free_chunks = st.free_chunks;
    out->used_chunks = (uint64_t)cache_class_chunks(c, (unsigned)cls);
    int64_t cmd[CLS_COUNT];
    cache_class_cmds(c, (unsigned)cls, cmd);
    out->get_hits = (uint64_t)cmd[CLS_GET_HITS];
    out->cmd_set = (uint64_t)cmd[CLS_CMD_SET];
    out->delete_hits = (uint64_t)cmd[CLS_DELETE_HITS];
    out->incr_hits = (uint64_t)cmd[CLS_INCR_HITS];
    out->decr_hits = (uint64_t)cmd[CLS_DECR_HITS];
    out->cas_hits = (uint64_t)cmd[CLS_CAS_HITS];
    out->cas_badval = (uint64_t)cmd[CLS_CAS_BADVAL];
    out->touch_hits = (uint64_t)cmd[CLS_TOUCH_HITS];
    return 0;
}

/* --- write-hotspot tracker (tier/hotspot.h) --- */

_Static_assert(TC_HOTSPOT_MAX_DIMMS == HOTSPOT_MAX_DIMMS,
               "public and tracker DIMM limits agree");
_Static_assert(TC_HOTSPOT_BLOCK_SIZE == HOTSPOT_BLOCK_SIZE,
               "the API's hotspot block is the tracker's");
_Static_assert(TC_HOTSPOT_TOP_MAX == HOTSPOT_TOP_MAX,
               "public and tracker top-list limits agree");

TC_API int
tc_hotspot_get(struct tc_cache *tc, struct tc_hotspot *out)
{
    const struct hotspot *h = engine(tc)->hotspot;

    memset(out, 0, sizeof(*out));
    if (!h)
        return 0;
    out->dimms = hotspot_dimm_bytes(h, out->dimm_bytes, TC_HOTSPOT_MAX_DIMMS);
    hotspot_dimm_writes(h, out->dimm_writes, TC_HOTSPOT_MAX_DIMMS);
    for (unsigned d = 0; d < out->dimms; d++)
        out->sampled_bytes += out->dimm_bytes[d];
    out->skew = hotspot_skew(h);
    out->interleave = hotspot_config(h)->interleave;
    out->sample = hotspot_config(h)->sample_every;
    out->map_bytes = hotspot_map_bytes(h);
    return 0;
}

static int
hotspot_off(void)
{
    err_set("write-hotspot tracking is off (hotspot_dimms=0)");
    return -ENOTSUP;
}

TC_API int
tc_hotspot_top(struct tc_cache *tc, struct tc_hotspot_block *out, unsigned k)
{
    const struct hotspot *h = engine(tc)->hotspot;
    struct hotspot_block b[HOTSPOT_TOP_MAX];

    if (!h)
        return hotspot_off();
    unsigned n = hotspot_top(h, b, k);
    for (unsigned i = 0; i < n; i++)
        out[i] = (struct tc_hotspot_block){b[i].index, b[i].bytes, b[i].writes,
                                           hotspot_kind_name(b[i].what)};
    return (int)n;
}

TC_API int
tc_hotspot_reset(struct tc_cache *tc)
{
    struct hotspot *h = engine(tc)->hotspot;

    if (!h)
        return hotspot_off();
    hotspot_reset(h);
    return 0;
}

TC_API int
tc_hotspot_dump(struct tc_cache *tc, FILE *f)
{
    const struct hotspot *h = engine(tc)->hotspot;

    if (!h)
        return hotspot_off();
    return hotspot_dump(h, f);
}

TC_API int
tc_check(struct tc_cache *tc)
{
    return cache_check(engine(tc));
}

TC_API void
tc_clock_set(uint32_t t)
{
    clock_set_fake(t);
}

TC_API void
tc_clock_advance(uint32_t secs)
{
    clock_advance(secs);
}

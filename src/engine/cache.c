/*
 * The cache's core: its memory (pool, slabs, index) opened and closed,
 * per-thread contexts, item frees (limbo), accounting, the shared rules
 * (expiry, flush, CAS) and the invariant check. It calls no engine file
 * above it: the modules that keep per-thread state (hot keys, the flash
 * tier) register hooks (struct cache_module). The concurrency picture of
 * the whole engine is at the top of src/engine/cache.h.
 *
 * Concurrency (this file):
 *   registry_lock   guards the list of live caches (ids), so that a thread
 *                   exiting after a cache closed does not touch it.
 *   cache_tls[]     the calling thread's (cache id -> context) table; owner
 *                   thread only.
 *   c->threads_lock guards c->threads, c->retired*, c->reset_base and
 *                   c->reset_cls_cmd.
 *   c->cas_seq      relaxed fetch_add: uniqueness is all CAS needs; order
 *                   with the index comes from the bucket lock.
 *   c->flush_at / flush_cas: see cache_flush_check(); flush_epoch (odd
 *                   while a flush sets flush_cas, one flush at a time):
 *                   see cache_flush_set().
 *   c->modules      written by cache_add_module at open, before any thread
 *                   context exists; read-only after.
 */
#include "src/engine/cache.h"
#include "src/engine/cache_packed.h"

#include "src/base/crashpoint.h"
#include "src/base/clock.h"
#include "src/base/err.h"
#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/engine/cache_hotspot.h"
#include "src/engine/pitem.h"
#include "src/engine/restart_layout.h"
#include "tier/dpool.h"
#include "tier/nvs.h"
#include "tier/pm.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/urcu-memb.h>

#define TLS_SLOTS 8
/* Caches open at once in a process (the registry of live ids). */
#define CACHE_MAX_OPEN 64

/* cache_tls[0] is read inline by cache.h's cache_thread_get. */
__thread struct cache_tls_slot cache_tls[TLS_SLOTS];
static __thread unsigned tls_count;
static __thread bool tls_rcu_registered;

char cache_rcu_token;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static uint64_t next_cache_id = 1;
static struct cache *live[CACHE_MAX_OPEN];
static uint64_t live_id[CACHE_MAX_OPEN];

static bool
id_is_live(uint64_t id)
{
    for (unsigned i = 0; i < ARRAY_SIZE(live); i++)
        if (live_id[i] == id)
            return true;
    return false;
}

/* --- per-thread contexts --- */

static void thread_exit(void *unused);

static void
exit_key_create(void)
{
    pthread_key_create(&exit_key, thread_exit);
}

/* The first n modules' thread_fini hooks on t, last first. */
static void
modules_thread_fini(struct cache_thread *t, unsigned n)
{
    struct cache *c = t->cache;
    while (n-- > 0)
        if (c->modules[n].thread_fini)
            c->modules[n].thread_fini(t);
}

/* Every module's thread_init hook on t: 0, or the first failure (the
 * hooks that ran are undone). Not inlined: it would cost the fast path of
 * cache_thread_get, which inlines ctx_create, a register. */
static __attribute__((noinline)) int
modules_thread_init(struct cache_thread *t)
{
    struct cache *c = t->cache;
    for (unsigned i = 0; i < c->nmodules; i++) {
        if (c->modules[i].thread_init && c->modules[i].thread_init(t) != 0) {
            modules_thread_fini(t, i);
            return -ENOMEM;
        }
    }
    return 0;
}

static void
ctx_destroy(struct cache *c, struct cache_thread *t)
{
    cache_defer_flush(t);
    /* the modules' state goes while t is still listed: the flash tier's
     * reads in flight end (counting, maybe recaching) on it */
    modules_thread_fini(t, c->nmodules);
    /* unlink first: tc_stats walks c->threads under threads_lock and reads
     * each quota, which must not be freed under it */
    pthread_mutex_lock(&c->threads_lock);
    for (struct cache_thread **p = &c->threads; *p; p = &(*p)->next) {
        if (*p == t) {
            *p = t->next;
            break;
        }
    }
    for (int s = 0; s < ST_COUNT; s++)
        c->retired[s] +=
            atomic_load_explicit(&t->stat[s], memory_order_relaxed);
    for (int i = 0; i < SLAB_MAX_CLASSES; i++)
        c->retired_cls[i] +=
            atomic_load_explicit(&t->cls_chunks[i], memory_order_relaxed);
    for (int i = 0; i < SLAB_MAX_CLASSES; i++)
        for (int s = 0; s < CLS_COUNT; s++)
            c->retired_cls_cmd[i][s] +=
                atomic_load_explicit(&t->cls_cmd[i][s], memory_order_relaxed);
    c->retired_refills += quota_refills(t->quota);
    pthread_mutex_unlock(&c->threads_lock);
    /* a thread that leaves seals its open segments: FIFO eviction may
     * take them */
    if (c->seg && pthread_equal(t->so.owner_thread, pthread_self()))
        seg_seal_all(c->seg, &t->so);
    quota_destroy(t->quota);
    free(t);
}

static struct cache_thread *
ctx_create(struct cache *c)
{
    struct cache_thread *t = aligned_alloc(CACHE_LINE, sizeof(*t));
    if (!t) {
        err_set("no DRAM for a thread context");
        return NULL;
    }
    memset(t, 0, sizeof(*t));
    t->cache = c;
    seg_open_init(&t->so, (uint16_t)atomic_fetch_add_explicit(
                              &c->seg_owners, 1, memory_order_relaxed));
    if (quota_create(c->slab, c->cfg.quota_batch, &t->quota) != 0) {
        err_set("no DRAM for a thread quota");
        free(t);
        return NULL;
    }
    if (modules_thread_init(t) != 0) {
        quota_destroy(t->quota);
        free(t);
        return NULL;
    }
    pthread_mutex_lock(&c->threads_lock);
    t->next = c->threads;
    c->threads = t;
    pthread_mutex_unlock(&c->threads_lock);
    return t;
}

static void
tls_remove(unsigned i)
{
    cache_tls[i] = cache_tls[--tls_count];
    memset(&cache_tls[tls_count], 0, sizeof(cache_tls[0]));
    if (tls_count == 0 && tls_rcu_registered) {
        urcu_memb_unregister_thread();
        tls_rcu_registered = false;
    }
}

/* Drop slots whose cache has closed. Locks: registry_lock. */
static void
tls_prune_locked(void)
{
    for (unsigned i = 0; i < tls_count;) {
        if (!id_is_live(cache_tls[i].id))
            tls_remove(i);
        else
            i++;
    }
}

static void
thread_exit(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&registry_lock);
    while (tls_count) {
        struct cache_tls_slot s = cache_tls[0];
        if (id_is_live(s.id))
            ctx_destroy(s.cache, s.ctx);
        tls_remove(0);
    }
    pthread_mutex_unlock(&registry_lock);
}

struct cache_thread *
cache_thread_get_slow(struct cache *c)
{
    for (unsigned i = 0; i < tls_count; i++) {
        if (cache_tls[i].cache == c && cache_tls[i].id == c->id) {
            struct cache_thread *t = cache_tls[i].ctx;
            if (unlikely(
                    t->quota_gen !=
                    atomic_load_explicit(&c->quota_gen, memory_order_relaxed)))
                cache_thread_quiesce(t);
            return t;
        }
    }

    pthread_once(&exit_once, exit_key_create);
    pthread_mutex_lock(&registry_lock);
    tls_prune_locked();
    uint64_t id = c->id;
    struct cache_thread *t = NULL;
    if (tls_count == TLS_SLOTS)
        err_set("a thread may use at most %d caches at once", TLS_SLOTS);
    else if (id_is_live(id))
        t = ctx_create(c);
    if (t) {
        if (!tls_rcu_registered) {
            urcu_memb_register_thread();
            tls_rcu_registered = true;
        }
        cache_tls[tls_count++] = (struct cache_tls_slot){id, c, t};
        pthread_setspecific(exit_key, (void *)1);
    }
    pthread_mutex_unlock(&registry_lock);
    return t;
}

void
cache_thread_quiesce(struct cache_thread *t)
{
    struct cache *c = t->cache;
    t->quota_gen = atomic_load_explicit(&c->quota_gen, memory_order_relaxed);
    quota_flush(t->quota);
    cache_defer_flush(t);
    /* a pool shrink waits for open segments above its target: sealed
     * here, the shrink evicts them */
    uint32_t target =
        atomic_load_explicit(&c->shrink_target, memory_order_relaxed);
    if (c->seg && target)
        for (unsigned b = 0; b < SEG_NBUCKETS; b++)
            if (t->so.page[b] != SEG_NO_PAGE && t->so.page[b] >= target)
                seg_seal(c->seg, &t->so, b);
}

bool
cache_thread_alone(struct cache_thread *t)
{
    struct cache *c = t->cache;
    pthread_mutex_lock(&c->threads_lock);
    bool alone = c->threads == t && t->next == NULL;
    pthread_mutex_unlock(&c->threads_lock);
    return alone;
}

void
cache_thread_put(struct cache *c)
{
    pthread_mutex_lock(&registry_lock);
    for (unsigned i = 0; i < tls_count; i++) {
        if (cache_tls[i].cache == c && id_is_live(cache_tls[i].id)) {
            ctx_destroy(c, cache_tls[i].ctx);
            tls_remove(i);
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
}

/* Locks: threads_lock. */
static void
class_cmds_locked(struct cache *c, unsigned cls, int64_t out[CLS_COUNT])
{
    for (int s = 0; s < CLS_COUNT; s++)
        out[s] = c->retired_cls_cmd[cls][s];
    for (struct cache_thread *t = c->threads; t; t = t->next)
        for (int s = 0; s < CLS_COUNT; s++)
            out[s] +=
                atomic_load_explicit(&t->cls_cmd[cls][s], memory_order_relaxed);
}

void
cache_stats_sum(struct cache *c, int64_t *sum)
{
    pthread_mutex_lock(&c->threads_lock);
    for (int s = 0; s < ST_COUNT; s++)
        sum[s] = c->retired[s];
    for (struct cache_thread *t = c->threads; t; t = t->next)
        for (int s = 0; s < ST_COUNT; s++)
            sum[s] += atomic_load_explicit(&t->stat[s], memory_order_relaxed);
    /* the events counted in their class (cache_cls_inc) */
    for (unsigned i = 0; i < SLAB_MAX_CLASSES; i++) {
        int64_t cls[CLS_COUNT];
        class_cmds_locked(c, i, cls);
        for (int s = 0; s < CLS_COUNT; s++)
            sum[cache_cls_total[s]] += cls[s];
    }
    for (int s = 0; s < ST_FIRST_GAUGE; s++)
        sum[s] -= c->reset_base[s];
    pthread_mutex_unlock(&c->threads_lock);
}

void
cache_class_cmds(struct cache *c, unsigned cls, int64_t out[CLS_COUNT])
{
    pthread_mutex_lock(&c->threads_lock);
    class_cmds_locked(c, cls, out);
    for (int s = 0; s < CLS_COUNT; s++)
        out[s] -= c->reset_cls_cmd[cls][s];
    pthread_mutex_unlock(&c->threads_lock);
}

void
cache_class_cmds_reset(struct cache *c)
{
    pthread_mutex_lock(&c->threads_lock);
    for (unsigned i = 0; i < SLAB_MAX_CLASSES; i++)
        class_cmds_locked(c, i, c->reset_cls_cmd[i]);
    pthread_mutex_unlock(&c->threads_lock);
}

int64_t
cache_class_chunks(struct cache *c, unsigned cls)
{
    pthread_mutex_lock(&c->threads_lock);
    int64_t n = c->retired_cls[cls];
    for (struct cache_thread *t = c->threads; t; t = t->next)
        n += atomic_load_explicit(&t->cls_chunks[cls], memory_order_relaxed);
    pthread_mutex_unlock(&c->threads_lock);
    return n;
}

unsigned
cache_class_of(const struct cache *c, uint64_t off)
{
    if (cache_off_packed(off))
        return SLAB_NO_CLASS;
    if (!cache_off_dram(off))
        return slab_class_of(c->slab, off);
    const struct item_hdr *it = cache_item_at(c, off);
    int cls = slab_class_for(
        c->slab, (uint32_t)(sizeof(*it) + it->klen + (uint64_t)it->vlen));
    return cls < 0 ? 0 : (unsigned)cls;
}

void
cache_touch_dram(struct cache *c, uint64_t off, bool bump,
                 struct slab_seen *out)
{
    out->fetched = cache_bit_fetched(c, off);
    out->claimed = cache_bit_claimed(c, off);
    out->age = 0; /* a DRAM item keeps no time (cache_atime_age) */
    out->cls = (uint8_t)cache_class_of(c, off);
    if (bump)
        cache_bit_ref(c, off);
}

/* Returns the chunk's class, SLAB_NO_CLASS for a DRAM item. */
static inline unsigned
class_add(struct cache_thread *t, uint64_t off, int sign)
{
    if (cache_off_dram(off)) {
        cache_stat_add(t, ST_HOT_ITEMS, sign);
        return SLAB_NO_CLASS; /* no slab chunk */
    }
    unsigned cls = slab_class_of(t->cache->slab, off);
    int64_t v = atomic_load_explicit(&t->cls_chunks[cls], memory_order_relaxed);
    atomic_store_explicit(&t->cls_chunks[cls], v + sign, memory_order_relaxed);
    return cls;
}

/* cache_item_bytes(), inline for cache_account(), every store's path. */
static inline __attribute__((always_inline)) uint64_t
item_bytes(const struct cache *c, const struct item_hdr *it)
{
    struct item_plan plan;
    /* one chunk (most items): item_plan's total without the call */
    uint64_t plain = item_hko_size(it->klen, it->iflags) + (uint64_t)it->vlen;
    if (unlikely(it->kind == ITEM_KIND_FLASH))
        return item_flash_size(it->klen, it->iflags);
    if (plain <= c->chunk_max)
        return plain;
    item_plan(it->klen, it->iflags, it->vlen, c->chunk_max, &plan);
    return plan.total;
}

/* cache_account's body: inlined into cache_account_unlink as well (every
 * replaced item's path: the call cost a set some 20 instructions). */
static inline __attribute__((always_inline)) unsigned
account(struct cache_thread *t, uint64_t head, int sign)
{
    struct cache *c = t->cache;
    const struct item_hdr *it = cache_item_at(c, head);

    cache_stat_add(t, ST_CURR_ITEMS, sign);
    cache_stat_add(t, ST_BYTES, sign * (int64_t)item_bytes(c, it));
    if (it->kind == ITEM_KIND_FLASH) {
        cache_stat_add(t, ST_EXT_ITEMS, sign);
        cache_stat_add(t, ST_EXT_BYTES, sign * (int64_t)it->vlen);
        return class_add(t, head, sign);
    }
    unsigned cls = class_add(t, head, sign);
    if (unlikely(it->nchain)) {
        const uint64_t *tails = item_tails(it);
        for (unsigned i = 0; i < it->nchain; i++)
            class_add(t, tails[i], sign);
    }
    return cls;
}

/* A packed item entered (sign 1) or left (-1) the index; leaving, its
 * bytes become dead bytes of its segment until the segment goes. */
static __attribute__((noinline)) void
account_packed(struct cache_thread *t, uint64_t head, int sign)
{
    /* the lengths only: the item is the index's, or its writer's */
    int64_t size = pitem_size_at(t->cache->base + cache_packed_pool(head));
    cache_account_packed(t, size, sign);
    if (sign < 0) /* its segment's own count, for merge's choice of victims */
        seg_dead_add(t->cache->seg, cache_packed_pool(head), (uint32_t)size);
}

unsigned
cache_account(struct cache_thread *t, uint64_t head, int sign)
{
    if (unlikely(cache_off_packed(head))) {
        account_packed(t, head, sign);
        return SLAB_NO_CLASS;
    }
    return account(t, head, sign);
}

/* cache_account_unlink's body: inline there and in
 * cache_account_replaced, where why is a constant. */
static inline __attribute__((always_inline)) void
account_unlink(struct cache_thread *t, uint64_t head, int dead,
               enum cache_unlink why)
{
    struct cache *c = t->cache;
    const struct item_hdr *it = cache_item_at(c, head);
    /* the flash copy is dead now: only the store's books change (ext.c) */
    if (it->kind == ITEM_KIND_FLASH && c->nvs)
        nvs_release(c->nvs, item_flash_loc(it));
    account(t, head, -1);
    /* the fetched bit only where a counter needs it (not a replaced
     * item's: every set's path) */
    if (dead == CACHE_EXPIRED && why != UNLINK_DELETED &&
        why != UNLINK_REPLACED && !cache_bit_fetched(c, head))
        cache_stat_inc(t, ST_EXPIRED_UNFETCHED);
    /* memcached's "reclaimed": memory of a dead item used for a new one */
    if (dead != CACHE_LIVE && (why == UNLINK_REPLACED || why == UNLINK_EVICTED))
        cache_stat_inc(t, ST_RECLAIMED);
    if (dead == CACHE_LIVE && why == UNLINK_EVICTED) {
        cache_stat_inc(t, ST_EVICTIONS);
        if (!cache_bit_fetched(c, head))
            cache_stat_inc(t, ST_EVICTED_UNFETCHED);
    }
}

void
cache_account_unlink(struct cache_thread *t, uint64_t head, int dead,
                     enum cache_unlink why)
{
    if (unlikely(cache_off_packed(head))) {
        /* as account_unlink; the fetched bit is the slot's, which the
         * offset carries when it came from the slot */
        bool fetched = cache_packed_fetched(head);
        account_packed(t, head, -1);
        if (dead == CACHE_EXPIRED && why != UNLINK_DELETED &&
            why != UNLINK_REPLACED && !fetched)
            cache_stat_inc(t, ST_EXPIRED_UNFETCHED);
        if (dead != CACHE_LIVE &&
            (why == UNLINK_REPLACED || why == UNLINK_EVICTED))
            cache_stat_inc(t, ST_RECLAIMED);
        if (dead == CACHE_LIVE && why == UNLINK_EVICTED) {
            cache_stat_inc(t, ST_EVICTIONS);
            if (!fetched)
                cache_stat_inc(t, ST_EVICTED_UNFETCHED);
        }
        return;
    }
    account_unlink(t, head, dead, why);
}

void
cache_account_replaced(struct cache_thread *t, uint64_t head, int dead)
{
    account_unlink(t, head, dead, UNLINK_REPLACED);
}

/* --- rules --- */

uint32_t
cache_exptime(int64_t exptime, uint32_t now)
{
    if (exptime == 0)
        return 0;
    if (exptime < 0)
        return 1; /* long past: the item is born expired */
    if (exptime <= CACHE_REALTIME_MAXDELTA)
        return now + (uint32_t)exptime;
    return exptime > UINT32_MAX ? UINT32_MAX : (uint32_t)exptime;
}

/*
 * A delayed flush becomes a CAS watermark the moment its time comes: every
 * item stored before then has a smaller CAS. The thread that wins the
 * exchange on flush_at publishes the watermark; a reader that loses the race
 * may judge one item by the old watermark, which is the same as the flush
 * arriving a moment later.
 */
void
cache_flush_apply(struct cache *c, uint32_t now)
{
    uint32_t at = atomic_load_explicit(&c->flush_at, memory_order_acquire);
    if (likely(at == 0) || now < at)
        return;
    if (atomic_compare_exchange_strong_explicit(
            &c->flush_at, &at, 0, memory_order_acq_rel, memory_order_acquire)) {
        cache_flush_set(c);
        cache_flush_persist(c); /* Context: callers hold no lock */
    }
}

/*
 * A copy (a touch's rewrite, a merge's) reads its source, then reserves a
 * span whose segment may open after a flush_all read the counter: its
 * derived sequence is then above the watermark while its source's is
 * below, and the copy would bring the flushed key back, live and after a
 * restart. So the flush marks the span between its counter read and its
 * watermark store (flush_epoch odd), and a copy checks, under its bucket
 * lock just before it publishes, that no flush is in that span and that
 * the stored watermark is below its source (cache_flush_spares_copy).
 * Fences X (the copy's, after its block was taken) and Y (the flush's,
 * after its epoch went odd) are ordered one way or the other: Y first,
 * the copy sees the odd epoch or a later one, and then the watermark the
 * flush stored before it went even; X first, the flush's counter read
 * sees the copy's block taken, and its watermark covers the copy.
 */
void
cache_flush_set(struct cache *c)
{
    uint64_t e = atomic_load_explicit(&c->flush_epoch, memory_order_relaxed);
    /* one flush at a time: the epoch's parity says whether one is in its
     * span (bounded by how long another takes to store two words) */
    while ((e & 1) || !atomic_compare_exchange_weak_explicit(
                          &c->flush_epoch, &e, e + 1, memory_order_seq_cst,
                          memory_order_relaxed)) {
        sched_yield();
        e = atomic_load_explicit(&c->flush_epoch, memory_order_relaxed);
    }
    atomic_thread_fence(memory_order_seq_cst); /* Y */
    uint64_t seq = atomic_load_explicit(&c->cas_seq, memory_order_relaxed);
    TC_CRASH_POINT("cache.flush.read"); /* the counter read, not stored */
    /* release pairs with the acquire in cache_item_dead() */
    atomic_store_explicit(&c->flush_cas, seq, memory_order_release);
    atomic_store_explicit(&c->flush_epoch, e + 2, memory_order_release);
}

bool
cache_flush_spares_copy(const struct cache *c, uint64_t src_seq)
{
    atomic_thread_fence(memory_order_seq_cst); /* X */
    if (cache_flush_busy(c))
        return false;
    return src_seq > atomic_load_explicit(&c->flush_cas, memory_order_acquire);
}

uint64_t
cache_item_bytes(const struct cache *c, const struct item_hdr *it)
{
    return item_bytes(c, it);
}

/* --- item memory --- */

/* Give a DRAM item's block back to the hot pool. Kept out of line, the
 * rare case, so that the PMEM frees around it stay inlined. */
static __attribute__((noinline)) void
dram_free(struct cache *c, uint64_t off)
{
    dpool_free(c->dram, cache_dram_ptr(off));
}

void
cache_free_unpublished(struct cache_thread *t, const struct item_plan *plan,
                       uint64_t head, const uint64_t *tails)
{
    struct slab *s = t->cache->slab;
    if (cache_off_packed(head)) {
        /* its span stays in the segment, dead */
        cache_packed_invalidate(t->cache, head);
        return;
    }
    if (cache_off_dram(head)) {
        dram_free(t->cache, head);
        return;
    }
    item_invalidate(t->cache->base, head);
    for (unsigned i = 0; i < plan->nchain; i++)
        quota_free(t->quota, slab_class_of(s, tails[i]), tails[i]);
    quota_free(t->quota, slab_class_of(s, head), head);
}

void
cache_free_now(struct cache_thread *t, uint64_t head)
{
    struct cache *c = t->cache;
    if (cache_off_dram(head)) {
        dram_free(c, head);
        return;
    }
    const struct item_hdr *it = item_at(c->base, head);
    const uint64_t *tails = item_tails(it);
    for (unsigned i = 0; i < it->nchain; i++)
        quota_free(t->quota, slab_class_of(c->slab, tails[i]), tails[i]);
    quota_free(t->quota, slab_class_of(c->slab, head), head);
}

/*
 * Deferred frees. A thread collects the items it unlinks in a batch; a full
 * batch goes on the cache's limbo list. Whoever needs memory (a failed
 * allocation, a page drain, the maintenance thread every second, a writer
 * when limbo grows long) takes the whole list, waits for one grace period
 * and frees everything on it. One synchronize_rcu thus covers many batches,
 * and no helper thread or rcu_barrier is involved.
 */
struct limbo_batch {
    struct limbo_batch *next;
    unsigned n;
    uint64_t head[CACHE_DEFER_BATCH];
};

/* Items in limbo past which a writer wakes the maintenance thread to free
 * them, and past which (or past the soft bound when there is no such
 * thread) it frees them itself, bounding the memory waiting there. */
#define LIMBO_SOFT_ITEMS 4096
#define LIMBO_HARD_ITEMS 65536

/* Inlined into the limbo loop: as a call it costs every set that replaces
 * an item some 9 instructions (cachegrind). */
static inline __attribute__((always_inline)) void
free_entry(struct cache_thread *t, uint64_t e)
{
    if (cache_off_dram(e))
        dram_free(t->cache, e);
    else if (e & CACHE_DEFER_CHAINED)
        cache_free_now(t, e & ~CACHE_DEFER_CHAINED);
    else
        quota_free_chunk(t->quota, e);
}

int
cache_reclaim_limbo(struct cache_thread *t)
{
    struct cache *c = t->cache;
    int n = 0;

    cache_defer_flush(t);
    pthread_mutex_lock(&c->limbo_lock);
    struct limbo_batch *list = c->limbo;
    c->limbo = NULL;
    pthread_mutex_unlock(&c->limbo_lock);
    /* the slab's outgrown page tables ride along: a multiget's location
     * hints may still prefetch through them (alloc/slab.h) */
    struct slab_retired *tables = slab_retired_take(c->slab);
    /* and the index's old tables, once a doubling ended */
    struct htab_retired *index = htab_retired_take(c->htab);
    if (!list && !tables && !index)
        return 0;
    /* every item on the list was unlinked before it was queued, and every
     * table retired before it was taken, so one grace period from here
     * covers them all */
    urcu_memb_synchronize_rcu();
    cache_rcu_synced();
    slab_retired_free(c->slab, tables);
    htab_retired_free(c->htab, index);
    while (list) {
        struct limbo_batch *b = list;
        list = b->next;
        for (unsigned i = 0; i < b->n; i++)
            free_entry(t, b->head[i]);
        n += (int)b->n;
        atomic_fetch_sub_explicit(&c->limbo_items, b->n, memory_order_relaxed);
        free(b);
    }
    return n;
}

void
cache_defer_flush(struct cache_thread *t)
{
    struct cache *c = t->cache;
    if (!t->ndefer)
        return;
    struct limbo_batch *b = malloc(sizeof(*b));
    if (!b) {
        /* No DRAM for the batch: wait for readers here instead. */
        urcu_memb_synchronize_rcu();
        cache_rcu_synced();
        for (unsigned i = 0; i < t->ndefer; i++)
            free_entry(t, t->defer[i]);
        t->ndefer = 0;
        return;
    }
    unsigned n = t->ndefer;
    b->n = n;
    memcpy(b->head, t->defer, n * sizeof(uint64_t));
    t->ndefer = 0;
    /* count before publishing: once b is on the list another thread may
     * reclaim and free it */
    atomic_fetch_add_explicit(&c->limbo_items, n, memory_order_relaxed);
    pthread_mutex_lock(&c->limbo_lock);
    b->next = c->limbo;
    c->limbo = b;
    pthread_mutex_unlock(&c->limbo_lock);
}

void
cache_defer_full(struct cache_thread *t)
{
    struct cache *c = t->cache;
    cache_defer_flush(t);
    uint64_t n = atomic_load_explicit(&c->limbo_items, memory_order_relaxed);
    if (c->bg_running && n > LIMBO_SOFT_ITEMS && n <= LIMBO_HARD_ITEMS) {
        if (!atomic_exchange_explicit(&c->bg_kick, true, memory_order_relaxed))
            pthread_cond_signal(&c->bg_cond);
    } else if (n > LIMBO_SOFT_ITEMS) {
        /* Context: callers free outside any read section, so waiting for
         * a grace period here is allowed */
        cache_reclaim_limbo(t);
    }
}

bool
cache_match_special(const struct cache_key *k, uint64_t off)
{
    if (cache_off_packed(off))
        return cache_packed_key_equals(k->c, off, k->key, k->klen);
    return item_key_equals(cache_item_at(k->c, off), k->key, k->klen);
}

bool
cache_match_key_warm(void *arg, uint64_t loc)
{
    const struct cache_key *k = arg;
    uint64_t off = cache_off(loc);
    if (unlikely(off & CACHE_SPECIAL_OFF))
        return cache_match_special(k, off);
    return item_key_equals(item_at(k->c->base, off), k->key, k->klen);
}

/* The index's pend hook (htab_set_pend_hook): overflow buckets it
 * unlinked pile up for a grace period; the maintenance thread takes them
 * (cache_reclaim_limbo) at its next kick instead of its next second.
 * Under a bucket lock: an exchange and a signal, no lock. */
static void
cache_index_kick(void *arg)
{
    struct cache *c = arg;
    if (c->bg_running &&
        !atomic_exchange_explicit(&c->bg_kick, true, memory_order_relaxed))
        pthread_cond_signal(&c->bg_cond);
}

/* The index's rehash function (htab_set_grow): the full hash of the key of
 * the item at loc, which its home bucket's lock keeps indexed (so not
 * freed). PMEM: reads the key. */
uint64_t
cache_rehash(void *arg, uint64_t loc)
{
    const struct cache *c = arg;
    uint64_t off = cache_off(loc);
    if (cache_off_packed(off)) {
        struct pitem_view v;
        if (cache_packed_view(c, off, &v) != 0)
            return 0;
        return cache_hash(c, v.key, v.klen);
    }
    const struct item_hdr *it = cache_item_at(c, off);
    return cache_hash(c, item_key(it), it->klen);
}

bool
cache_match_key(void *arg, uint64_t loc)
{
    const struct cache_key *k = arg;
    uint64_t off = cache_off(loc);
    if (unlikely(off & CACHE_SPECIAL_OFF))
        return cache_match_special(k, off);
    /* overlap the miss on the chunk's CLOCK bits with the one on the item */
    slab_prefetch(k->c->slab, off);
    return item_key_equals(item_at(k->c->base, off), k->key, k->klen);
}

void
cache_defer_free_special(struct cache_thread *t, uint64_t head)
{
    struct cache *c = t->cache;
    if (cache_off_packed(head)) {
        cache_packed_wait_not_pending(c, head);
        /* PMEM: commit = 1 before the unlink is answered; the span is
         * reclaimed with its segment. The unlinker's last touch of the
         * item: FIFO eviction waits for it (the release orders this
         * thread's reads of it before, for TSan; x86 keeps that order) */
        TSAN_RELEASE(c->base + cache_packed_pool(head) + PITEM_COMMIT_OFFSET);
        cache_packed_invalidate(c, head);
        return;
    }
    t->defer[t->ndefer++] =
        head | (cache_item_at(c, head)->nchain ? CACHE_DEFER_CHAINED : 0);
    if (unlikely(t->ndefer >= CACHE_DEFER_BATCH))
        cache_defer_full(t);
}

bool
cache_unlink_loc(struct cache *c, uint64_t hash, uint64_t loc)
{
    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot = htab_find_loc_locked(b, loc);
    if (slot) {
        cache_floor_unlink(c, hash, cache_off(loc));
        htab_remove_locked(c->htab, slot);
    }
    htab_unlock(b);
    return slot != NULL;
}

/* --- lifecycle --- */

static void
format_page(void *arg, char *page, uint32_t chunk_size, uint32_t nchunks)
{
    struct cache *c = arg;
    /* ablation only (ablate_init_in_lock): slab.c holds the class lock */
    bool in_lock = unlikely(c->cfg.ablate_init_in_lock);
    if (in_lock)
        pm_unchecked_begin();
    /* PMEM: the page's class in the page table first, so that a scan
     * after a crash cuts the page at this class's chunks
     * (src/engine/restart_layout.h) */
    uint32_t npages;
    uint8_t *table = region_page_table(c->region, &npages);
    uint64_t pg = (uint64_t)(page - c->base) >> POOL_PAGE_SHIFT;
    int cls = slab_class_for(c->slab, chunk_size);
    if (pg < npages && cls >= 0) {
        uint8_t b = (uint8_t)(cls + 1);
        pm_copy(&table[pg], &b, 1);
    }
    TC_CRASH_POINT("page.format");
    /* PMEM: mark every chunk empty so that a scan (or a future warm
     * restart) never mistakes a fresh page's bytes for items. No lock is
     * held here (slab.c calls the hook between its locks). */
    for (uint32_t i = 0; i < nchunks; i++)
        pm_set(page + (uint64_t)i * chunk_size, ITEM_KIND_EMPTY, 1);
    if (in_lock)
        pm_unchecked_end();
}

/* EXPERIMENT ONLY (ablate_meta_in_pmem): a word of a page's PMEM header,
 * stored under the slab class lock on purpose. */
static void
pmeta_write(void *arg, uint64_t *pmem_dst, uint64_t v)
{
    (void)arg;
    pm_unchecked_begin();
    pm_store64(pmem_dst, v);
    pm_unchecked_end();
}

void
cache_flush_persist(struct cache *c)
{
    struct restart_meta *m = region_user(c->region);
    pm_store32(&m->flush_at,
               atomic_load_explicit(&c->flush_at, memory_order_acquire));
    pm_store64(&m->flush_cas,
               atomic_load_explicit(&c->flush_cas, memory_order_acquire));
}

static int
check_config(const struct tc_config *cfg)
{
    uint32_t chunk_max = cfg->chunk_max ? cfg->chunk_max : POOL_PAGE_SIZE / 2;
    uint32_t tail_room = chunk_max - (uint32_t)sizeof(struct item_tail);
    uint64_t tails = cfg->item_size_max / tail_room + 1;

    if (cfg->item_size_max < 1024 || tails > ITEM_MAX_TAILS ||
        cfg->item_size_max > (1u << 30)) {
        err_set("item_size_max %u is out of range (1 KiB to %llu bytes with "
                "chunk_max %u)",
                cfg->item_size_max,
                (unsigned long long)ITEM_MAX_TAILS * tail_room, chunk_max);
        return -EINVAL;
    }
    if (cfg->chunk_max &&
        (cfg->chunk_max < 1024 || cfg->chunk_max > POOL_PAGE_SIZE)) {
        err_set("chunk_max %u is out of range (1 KiB to 1 MiB)",
                cfg->chunk_max);
        return -EINVAL;
    }
    return 0;
}

/* The packed store's PMEM helpers (struct seg_ops). */
static void
seg_pm_copy(void *dst, const void *src, size_t n)
{
    pm_copy(dst, src, n);
}

static void
seg_pm_store32(uint32_t *dst, uint32_t v)
{
    pm_store32(dst, v);
}

static void
seg_pm_fence(void)
{
    pm_fence();
}

/* A page becomes a segment: its restart page table byte says so before
 * its header is written (restart_layout.h: not a slab class, so a restart
 * scan never reads it as slab chunks). PMEM: one byte, no lock held. */
static void
seg_page_open(void *arg, uint32_t page)
{
    struct cache *c = arg;
    uint32_t npages;
    uint8_t *table = region_page_table(c->region, &npages);
    if (page < npages) {
        uint8_t b = RESTART_PAGE_SEGMENT;
        pm_copy(&table[page], &b, 1);
    }
}

static int
open_packed(struct cache *c)
{
    if (!c->cfg.packed_item_max)
        return 0;
    struct seg_config sc = {
        .seq = &c->cas_seq,
        .ops = {seg_pm_copy, seg_pm_store32, seg_pm_fence, nvs_crc32c},
        .page_open = seg_page_open,
        .page_arg = c,
    };
    /* open segments at most 1/8 of the pages (one at least): beyond it a
     * store goes to a slab, so that sealed segments are left to evict
     * (doc/design/small-items.md, "Risks") */
    uint32_t pages = pool_limit(c->pool);
    sc.open_max = pages / 8 ? pages / 8 : 1;
    c->packed_time = calloc(pool_npages(c->pool), sizeof(*c->packed_time));
    if (!c->packed_time) {
        err_set("no DRAM for the packed store's segment times");
        return -ENOMEM;
    }
    int rc = seg_create(&sc, c->pool, &c->seg);
    if (rc)
        return rc;
    c->seg_rec = seg_records(c->seg);
    c->packed_max = c->cfg.packed_item_max;
    for (uint32_t n = 0; n < CACHE_PACKED_CLS_N; n++) {
        int cls = slab_class_for(c->slab, n);
        c->packed_cls[n] = cls < 0 ? SLAB_NO_CLASS : (uint8_t)cls;
    }
    return 0;
}

static int
open_memory(struct cache *c)
{
    struct region_config rc = {c->cfg.pool_path, c->cfg.pool_size,
                               c->cfg.large_pages};
    int rcode = region_open(&rc, &c->region);
    if (rcode)
        return rcode;
    if (c->cfg.large_pages)
        region_advise_huge(c->region); /* logs what it got */

    uint64_t len = region_data_size(c->region);
    uint32_t limit = 0;
    if (c->cfg.mem_limit) {
        uint64_t pages = c->cfg.mem_limit >> POOL_PAGE_SHIFT;
        limit = (uint32_t)MIN(MAX(pages, 1ull), len >> POOL_PAGE_SHIFT);
    }
    rcode = pool_create(region_data(c->region), len, limit, &c->pool);
    if (rcode)
        return rcode;
    c->base = pool_base(c->pool);

    struct slab_config sc = {
        .min_chunk = c->cfg.min_chunk,
        .growth_factor = c->cfg.growth_factor,
        .chunk_max = c->cfg.chunk_max,
        .chunk_step = c->cfg.chunk_step,
        .format = format_page,
        .format_arg = c,
        /* experiment only, off by default: Tair MDB's layouts, measured */
        .meta_write = c->cfg.ablate_meta_in_pmem ? pmeta_write : NULL,
        .format_in_lock = c->cfg.ablate_init_in_lock,
    };
    rcode = slab_create(&sc, c->pool, &c->slab);
    if (rcode)
        return rcode;
    c->chunk_max = slab_chunk_size(c->slab, slab_nclasses(c->slab) - 1);

    /* The index starts small and doubles as it fills (src/engine/htab.h):
     * expected_items only sizes its first table. */
    uint64_t expected = c->cfg.expected_items;
    if (!expected)
        expected = CACHE_INDEX_ITEMS;
    rcode = htab_create(expected, &c->htab);
    if (rcode)
        return rcode;
    htab_set_grow(c->htab, cache_rehash, c, CACHE_INDEX_HELP);
    htab_set_pend_hook(c->htab, cache_index_kick, c);
    rcode = open_packed(c);
    if (rcode)
        return rcode;
    c->divert = c->seg != NULL;
    return cache_hotspot_open(c);
}

static void
close_memory(struct cache *c)
{
    cache_hotspot_close(c);
    if (c->seg)
        seg_destroy(c->seg);
    free(c->packed_time);
    htab_destroy(c->htab);
    slab_destroy(c->slab);
    pool_destroy(c->pool);
    region_close(c->region);
}

static int
registry_add(struct cache *c)
{
    int rc = -EMFILE;
    pthread_mutex_lock(&registry_lock);
    for (unsigned i = 0; i < ARRAY_SIZE(live); i++) {
        if (!live[i]) {
            live[i] = c;
            live_id[i] = c->id = next_cache_id++;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (rc)
        err_set("too many open caches (at most %zu)", ARRAY_SIZE(live));
    return rc;
}

static void
registry_remove(struct cache *c)
{
    pthread_mutex_lock(&registry_lock);
    for (unsigned i = 0; i < ARRAY_SIZE(live); i++) {
        if (live[i] == c) {
            live[i] = NULL;
            live_id[i] = 0;
        }
    }
    tls_prune_locked();
    pthread_mutex_unlock(&registry_lock);
}

int
cache_open(const struct tc_config *cfg, struct cache **out)
{
    int rc = check_config(cfg);
    if (rc)
        return rc;
    struct cache *c = aligned_alloc(CACHE_LINE, sizeof(*c));
    if (!c) {
        err_set("no DRAM for the cache");
        return -ENOMEM;
    }
    memset(c, 0, sizeof(*c));
    c->cfg = *cfg;
    c->hash_seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)clock_nsec();
    atomic_init(&c->cas_seq, 0);
    atomic_init(&c->flush_epoch, 0);
    pthread_mutex_init(&c->admin, NULL);
    for (unsigned i = 0; i < CACHE_MOVES_MAX; i++)
        atomic_init(&c->move[i].page, UINT32_MAX);
    pthread_mutex_init(&c->threads_lock, NULL);
    pthread_mutex_init(&c->limbo_lock, NULL);
    pthread_mutex_init(&c->bg_lock, NULL);
    pthread_cond_init(&c->bg_cond, NULL);

    rc = open_memory(c);
    if (rc)
        goto err_close;
    rc = registry_add(c);
    if (rc)
        goto err_close;
    *out = c;
    return 0;

err_close:
    close_memory(c);
    pthread_mutex_destroy(&c->admin);
    free(c);
    return rc;
}

void
cache_close(struct cache *c)
{
    /* Other threads have stopped (API contract): free everything in limbo
     * before the slab goes away. */
    pthread_mutex_lock(&c->threads_lock);
    for (struct cache_thread *t = c->threads; t; t = t->next)
        cache_defer_flush(t);
    pthread_mutex_unlock(&c->threads_lock);
    struct cache_thread *self = cache_thread_get(c);
    if (self)
        cache_reclaim_limbo(self);
    while (c->threads)
        ctx_destroy(c, c->threads);
    registry_remove(c);
    for (unsigned i = c->nmodules; i-- > 0;)
        if (c->modules[i].close)
            c->modules[i].close(c);
    close_memory(c);
    pthread_mutex_destroy(&c->admin);
    pthread_mutex_destroy(&c->threads_lock);
    pthread_mutex_destroy(&c->limbo_lock);
    pthread_mutex_destroy(&c->bg_lock);
    pthread_cond_destroy(&c->bg_cond);
    free(c);
}

void
cache_log_open(const struct cache *c)
{
    log_info("cache open: %s, %llu MiB pool (%s), %u slab classes",
             region_path(c->region),
             (unsigned long long)(region_data_size(c->region) >> 20),
             region_is_pmem(c->region) ? "PMEM" : "emulated PMEM",
             slab_nclasses(c->slab));
}

int
cache_add_module(struct cache *c, const struct cache_module *m)
{
    if (c->nmodules == CACHE_MAX_MODULES)
        return -ENOSPC;
    c->modules[c->nmodules++] = *m;
    return 0;
}

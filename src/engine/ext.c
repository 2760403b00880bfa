/*
 * The engine's side of the NVMe tier. The store (tier/nvs.h)
 * keeps values in log-structured segments; the engine decides what goes
 * there and keeps each spilled item as a flash header in PMEM (kind
 * ITEM_KIND_FLASH: header, key, struct nvs_loc; src/engine/item_layout.h).
 *
 * The tier hangs off a cache through opaque handles (c->ext, t->ext) and
 * hooks, so that no file below calls back into it: ext_open registers the
 * spill hook eviction calls (reclaim_set_spill), the per-thread state and
 * teardown (cache_add_module), and takes the function that stores a
 * recached value (store_recache, passed in by the caller that opens it).
 *
 * Spill: the eviction scan (reclaim.c) offers every cold victim, an item
 * whose CLOCK reference bit the hand found clear. A live one with a value
 * of at least ext_item_size bytes is appended to the store's write buffer
 * (inside an RCU read section, so its chunks cannot be reused under the
 * copy; nvs_append never blocks on I/O), then a header chunk is taken from
 * the thread's quota without evicting anything, written with no lock held
 * and swapped into the index in place of the item, copy-on-write: the old
 * item is freed by the eviction batch after its grace period. When the
 * store is behind (-EAGAIN) or no header chunk is free, the victim is
 * evicted as before; a missing header chunk also asks for one page to be
 * moved to the header class once the batch is done.
 *
 * Reads: a flash header found by a reader is copied out inside the read
 * section; the value is read after it through the store, which checks the
 * segment generation, key, length and CRC32C. Any failure (-EBADMSG, -EIO,
 * -ETIMEDOUT, -ESTALE) is a miss plus a counter, and the header is
 * unlinked if the index still holds it. A header whose segment has been
 * reused is recognised without I/O (cache_item_dead says CACHE_LOST).
 * Recache copies a flash hit's value back into the pool, swapping it for
 * the header only if the index still holds that header (the flash copy is
 * released with the header). Two rules pick the hits: memcached's, one
 * flash hit in ext_recache_rate (per thread), and a re-read filter: a
 * direct-mapped table of ext_recache_window slots, each holding a key-hash
 * tag and a count of the reads it saw; the third read of a key while its
 * slot still holds it recaches. A key keeps its slot only until another
 * flash read lands there, so a key must be read about three times in
 * ext_recache_window flash reads: hot keys (skewed loads, keys spilled
 * before they turned hot) come back after a few reads, while a uniform
 * load, where no key is hotter than what recache would evict, rarely
 * passes (a recache costs a PMEM write and, later, a spill).
 *
 * Asynchronous reads (the server's): a get of a locator the thread is
 * already reading joins that read as a waiter instead of reading again
 * (the thread's by_loc table); the completion answers the reader and its
 * waiters, with the value or, when the read failed, a miss for each (the
 * failure itself counted and the header unlinked once). Only within a
 * thread: a waiter on another thread's read would need that thread to
 * wake it and keep the buffer until it copied the value.
 *
 * Deletes, overwrites, expiry and flushes never touch the flash: when a
 * flash header leaves the index, cache_account_unlink() tells the store the
 * record is dead (nvs_release), for compaction.
 *
 * Compaction (maintenance thread): nvs_compact_step() offers every live
 * record of a mostly dead segment; it is kept when the index still points
 * at that locator and the item was read since it was stored (FETCHED bit),
 * and a moved record gets a new header swapped in, the same way as a spill.
 *
 * Concurrency:
 *   c->nvs, c->ext        set at open, read-only after, freed at close;
 *                         the store is thread-safe (tier/nvs.h).
 *   x->hdr_page           the header reserve: set at open, taken by an
 *                         atomic exchange (hdr_reserve_use, ext_close),
 *                         refilled by a compare-exchange from empty
 *                         (hdr_reserve_refill), so one owner at a time.
 *   t->ext (struct ext_thread): owner thread only; created with the
 *                         thread context and destroyed with it (module
 *                         hooks); at tc_close, the closing thread takes
 *                         over the rings of threads that stopped calling
 *                         (ext_thread_fini, nvs_ring_adopt).
 *   x->reread             allocated at open, freed at close; slots are
 *                         read and written relaxed by any reader: a lost
 *                         update only delays or skips one recache.
 *   flash headers         written before publication with no lock held;
 *                         after it only exptime changes (touch), as for
 *                         any item.
 *   ext_block_timeout_ms  a constant, except that tests set it while
 *                         no read is in flight.
 *   Locks taken: one index bucket, briefly, per swap.
 */
#include "src/engine/ext.h"

#include "src/base/crashpoint.h"
#include "src/base/clock.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "src/engine/cache.h"
#include "src/engine/reclaim.h"
#include "tier/pm.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static int reap_batch(struct cache_thread *t, tc_async_fn *fn, void *arg,
                      int wait_nr);

/* The tier's state per cache (c->ext). */
struct ext {
    ext_recache_fn *recache; /* stores a recached value (store.c) */
    /* the re-read filter: per slot a key-hash tag (high 30 bits) and the
     * reads seen (low 2 bits); atomic, relaxed; NULL when off */
    uint32_t *reread;
    uint64_t reread_mask;
    /* the header reserve: a free pool page for the flash-header class
     * that fills up next, refilled after use; UINT32_MAX: none */
    _Atomic uint32_t hdr_page;
};

/* Buckets of a thread's table of asynchronous reads by locator (a power
 * of two, about the ring's depth). */
#define EXT_PEND_BUCKETS 256

/* The tier's state per thread context (t->ext), owner thread only. */
struct ext_thread {
    struct nvs_ring *ring;    /* blocking flash reads, lazily */
    struct nvs_ring *aring;   /* asynchronous ones (the server) */
    uint32_t recache_ctr;     /* flash hits since the last recache */
    int want_page;            /* header class short of chunks, or -1 */
    int refill;               /* the header class that used the reserve,
                                 which is refilled from the next other
                                 class evicting; or -1 */
    void *owner;              /* tc_async_owner; NULL: reads block */
    struct ext_pending *pend; /* asynchronous reads in flight */
    /* the same reads by locator (chained on hnext), so that a second get
     * of a value already being read joins that read */
    struct ext_pending *by_loc[EXT_PEND_BUCKETS];
};

/* Reads in flight on one thread's ring. */
#define EXT_RING_DEPTH 256
/* Bytes compaction reads per step, and steps per maintenance tick. */
#define EXT_COMPACT_BUDGET (8u << 20)
#define EXT_COMPACT_STEPS 4

/* Slots of the re-read filter: ext_recache_window rounded up to a power of
 * two; the default is one slot per 4 KiB of pool (about one per item of the
 * ext_item_size a spill tier is for), 1,024 to 4M. */
static uint64_t
reread_slots(const struct tc_config *cfg)
{
    uint64_t want = cfg->ext_recache_window;
    if (want == TC_EXT_RECACHE_AUTO) {
        want = cfg->pool_size >> 12;
        want = want < 1024 ? 1024 : want > (4u << 20) ? (4u << 20) : want;
    }
    if (!want)
        return 0;
    uint64_t n = 1;
    while (n < want)
        n <<= 1;
    return n;
}

static int
reread_open(struct ext *x, const struct tc_config *cfg)
{
    uint64_t n = reread_slots(cfg);
    x->reread = NULL;
    x->reread_mask = 0;
    if (!n)
        return 0;
    x->reread = calloc(n, sizeof(uint32_t));
    if (!x->reread) {
        err_set("no memory for the %llu-slot flash re-read filter",
                (unsigned long long)n);
        return -ENOMEM;
    }
    x->reread_mask = n - 1;
    return 0;
}

/* Count a flash hit of the key with this hash in the re-read filter: true
 * on its third read while the slot kept it (the slot is then cleared). */
static bool
reread_due(struct ext *x, uint64_t hash)
{
    if (!x->reread)
        return false;
    /* the slot from the low bits, the tag from the high ones, so that keys
     * sharing a slot differ in their tags */
    uint32_t *slot = &x->reread[hash & x->reread_mask];
    uint32_t tag = (uint32_t)(hash >> 32) & ~3u;
    uint32_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    uint32_t next = (v & ~3u) == tag ? v + 1 : tag;
    if ((next & 3u) >= 2) {
        __atomic_store_n(slot, 0, __ATOMIC_RELAXED);
        return true;
    }
    __atomic_store_n(slot, next, __ATOMIC_RELAXED);
    return false;
}

/* forward: the hooks ext_open registers */
static int thread_init(struct cache_thread *t);
static bool spill_hook(struct cache_thread *t, uint64_t head, uint64_t hash);
static void after_evict_hook(struct cache_thread *t, unsigned cls);

static const struct reclaim_spill spill_ops = {
    .spill = spill_hook,
    .after_evict = after_evict_hook,
};

static const struct cache_module ext_module = {
    .thread_init = thread_init,
    .thread_fini = ext_thread_fini,
    .close = ext_close,
};

/*
 * Reattach after a restart (the store's side: tier/nvs.h). The scan
 * (src/engine/restart.c) put the flash headers it found in the index like
 * any item; here each one's locator is offered to the store, which keeps
 * those whose segment came back at that generation with the value inside
 * its written extents. Any other header is dropped as a read of it would
 * be (unlinked, invalidated, its chunk freed, counted in c->start's
 * dropped_flash), so no header with a dead locator stays behind to match
 * a later generation of its segment. Then the store turns what was kept
 * into each segment's live and dead bytes.
 * Context: ext_open, before any other thread uses the cache.
 */
struct flash_list {
    struct cache *c;
    uint64_t *v; /* index locations of flash headers */
    size_t n, cap;
};

static int
collect_flash(void *arg, uint64_t loc)
{
    struct flash_list *a = arg;
    uint64_t off = cache_off(loc);
    if (cache_off_dram(off) ||
        cache_item_at(a->c, off)->kind != ITEM_KIND_FLASH)
        return 0;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1024;
        uint64_t *v = realloc(a->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = loc;
    return 0;
}

static int
reattach(struct cache *c)
{
    struct flash_list a = {.c = c};
    struct tc_open_info *info = &c->start;
    struct nvs_reattach_info ri;
    uint64_t t0 = clock_nsec(), lost = 0;

    int rc = htab_foreach(c->htab, collect_flash, &a);
    struct cache_thread *t = cache_thread_get(c);
    if (rc == 0 && !t)
        rc = -ENOMEM;
    if (rc) {
        free(a.v);
        err_set("no DRAM to reattach the flash tier");
        return rc;
    }
    size_t keep = 0;
    for (size_t i = 0; i < a.n; i++) {
        const struct item_hdr *it = item_at(c->base, cache_off(a.v[i]));
        if (!nvs_reattach_ref(c->nvs, item_flash_loc(it), it->klen))
            a.v[keep++] = a.v[i]; /* to drop, after the books are done */
    }
    nvs_reattach_done(c->nvs, &ri);
    for (size_t i = 0; i < keep; i++) {
        uint64_t off = cache_off(a.v[i]);
        const struct item_hdr *it = item_at(c->base, off);
        uint64_t hash = cache_hash(c, item_key(it), it->klen);
        if (!cache_unlink_loc(c, hash, a.v[i]))
            continue;
        info->items--;
        info->bytes -= cache_item_bytes(c, it);
        cache_account_unlink(t, off, CACHE_LOST, UNLINK_REAPED);
        cache_defer_free(t, off);
        lost++;
    }
    cache_thread_put(c); /* flushes its deferred frees */
    free(a.v);
    info->dropped_flash += lost;
    info->dropped += lost;
    log_info("flash tier: %llu of %zu items on flash reattached in %.3f s "
             "(%llu segments back, %llu of them freed as holding none; "
             "%llu extents, %llu records; %llu bytes read), %llu dropped "
             "(their record is not on the flash any more)",
             (unsigned long long)ri.kept, a.n,
             (double)(clock_nsec() - t0) / 1e9,
             (unsigned long long)ri.segs_reattached,
             (unsigned long long)ri.segs_freed, (unsigned long long)ri.extents,
             (unsigned long long)ri.records, (unsigned long long)ri.bytes_read,
             (unsigned long long)lost);
    return 0;
}

int
ext_open(struct cache *c, ext_recache_fn *recache)
{
    const struct tc_config *cfg = &c->cfg;
    struct nvs_config nc;

    if (!cfg->ext_npaths)
        return 0;
    if (cfg->ext_npaths > NVS_MAX_PATHS) {
        err_set("at most %d ext_path options", NVS_MAX_PATHS);
        return -EINVAL;
    }
    memset(&nc, 0, sizeof(nc));
    nc.npaths = cfg->ext_npaths;
    for (unsigned i = 0; i < nc.npaths; i++) {
        nc.path[i] = cfg->ext_path[i];
        nc.size[i] = cfg->ext_size[i];
    }
    nc.seg_size = cfg->ext_page_size;
    nc.wbuf_size = cfg->ext_wbuf_size;
    nc.nwbuf = 4;
    nc.read_timeout_ms = cfg->ext_read_timeout_ms;
    nc.io_threads = cfg->ext_threads;
    nc.no_uring = cfg->ext_no_uring;
    /* a pool whose items came back may hold flash headers: take back the
     * segments their values are in */
    nc.reattach = c->start.kind != TC_START_COLD;
    struct ext *x = calloc(1, sizeof(*x));
    if (!x) {
        err_set("no DRAM for the flash tier");
        return -ENOMEM;
    }
    x->recache = recache;
    atomic_init(&x->hdr_page, UINT32_MAX);
    int rc = reread_open(x, cfg);
    if (rc)
        goto err_free;
    rc = nvs_open(&nc, &c->nvs);
    if (rc)
        goto err_reread;
    rc = cache_add_module(c, &ext_module);
    if (rc) {
        err_set("too many modules on one cache");
        goto err_nvs;
    }
    /* the header reserve: a pool attached with no free page has none */
    uint32_t page;
    if (pool_page_get(c->pool, &page) != 0)
        page = UINT32_MAX;
    atomic_store_explicit(&x->hdr_page, page, memory_order_relaxed);
    c->ext = x;
    reclaim_set_spill(c, &spill_ops);
    if (nc.reattach && (rc = reattach(c)) != 0) {
        ext_close(c);
        return rc;
    }
    return 0;

err_nvs:
    nvs_close(c->nvs);
    c->nvs = NULL;
err_reread:
    free(x->reread);
err_free:
    free(x);
    return rc;
}

void
ext_close(struct cache *c)
{
    struct ext *x = c->ext;
    if (!x)
        return;
    reclaim_set_spill(c, NULL);
    uint32_t page = atomic_exchange_explicit(&x->hdr_page, UINT32_MAX,
                                             memory_order_relaxed);
    if (page != UINT32_MAX)
        pool_page_put(c->pool, page);
    nvs_close(c->nvs);
    c->nvs = NULL;
    free(x->reread);
    free(x);
    c->ext = NULL;
}

/*
 * The header reserve. A spill needs a chunk of the flash-header class for
 * its key length, taken without evicting (it runs inside an eviction).
 * On a fresh cache that class has no page yet when the first evictions
 * come, and the pool is full by then: without help, every victim of the
 * first batch was evicted, and the page moved to the header class after it
 * (after_evict_hook) was drained by evicting a page of victims. So ext_open
 * sets one free page aside, and a spill that finds no header chunk gives
 * it to its class. The same happens each time a header class fills up, so
 * after the eviction batch that used the reserve, the evicting thread
 * refills it (hdr_reserve_refill) with a page of the class it was evicting
 * from, whose items are spilled into the header page just given (or moved,
 * or evicted when they cannot spill). Headers thus never wait for a page
 * while victims are evicted in the meantime.
 * Context: eviction, no lock held. Locks: pool, then class (slab_grow).
 */
static bool
hdr_reserve_use(struct cache *c, unsigned cls)
{
    /* relaxed: the exchange alone makes one caller the page's owner */
    uint32_t page = atomic_exchange_explicit(&c->ext->hdr_page, UINT32_MAX,
                                             memory_order_relaxed);
    if (page == UINT32_MAX)
        return false;
    /* back to the pool and at once to cls (as reclaim_reassign does: a
     * class growing in between may take it, then this spill evicts) */
    pool_page_put(c->pool, page);
    return slab_grow(c->slab, cls) == 0;
}

/* Put a page of class cls into the empty header reserve (see above):
 * false when that failed (-EBUSY: a chunk of the drained page sat in
 * another thread's stash, which it gives back at its next operation, or
 * another thread held admin, draining a page: spilling never waits for
 * that), to be tried again after the next eviction batch.
 * Context: after an eviction batch, no lock held. Locks: admin (reclaim,
 * trylock). */
static bool
hdr_reserve_refill(struct cache_thread *t, unsigned cls)
{
    struct cache *c = t->cache;
    uint32_t page, none = UINT32_MAX;

    if (atomic_load_explicit(&c->ext->hdr_page, memory_order_relaxed) !=
        UINT32_MAX)
        return true;
    if (reclaim_take_page(t, (int)cls, &page, RECLAIM_TRY) != 0)
        return false;
    if (!atomic_compare_exchange_strong_explicit(&c->ext->hdr_page, &none, page,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed))
        pool_page_put(c->pool, page); /* another thread refilled it */
    return true;
}

static int
thread_init(struct cache_thread *t)
{
    struct ext_thread *e = calloc(1, sizeof(*e));
    if (!e) {
        err_set("no DRAM for a thread's flash-tier state");
        return -ENOMEM;
    }
    e->want_page = -1;
    e->refill = -1;
    t->ext = e;
    return 0;
}

void
ext_thread_fini(struct cache_thread *t)
{
    struct ext_thread *e = t->ext;
    if (!e)
        return;
    /* tc_close tears down the contexts of threads that stopped calling
     * without tc_thread_unregister (API contract: they are gone or idle):
     * their rings change hands first; on the owner this is a no-op */
    nvs_ring_adopt(e->ring);
    nvs_ring_adopt(e->aring);
    /* reads still in flight: wait for them (each ends by its deadline) */
    for (int i = 0; e->pend && i < 1000; i++) {
        ext_async_submit(t);
        reap_batch(t, NULL, NULL, 1);
    }
    if (e->ring)
        nvs_ring_destroy(e->ring);
    if (e->aring)
        nvs_ring_destroy(e->aring);
    free(e);
    t->ext = NULL;
}

static bool
loc_equal(const struct nvs_loc *a, const struct nvs_loc *b)
{
    return a->seg == b->seg && a->gen == b->gen && a->off == b->off &&
           a->vlen == b->vlen && a->crc == b->crc;
}

/* --- swapping a header in --- */

/*
 * Write a flash header for hdr/key/nl into a chunk from the thread's quota
 * (evicting only when may_evict: never on the eviction path) and swap it into
 * the index for the item at old, if the index still holds old and its expiry is
 * still hdr->exptime (a touch meanwhile must not be lost). The new chunk in
 * *out. 0, -ENOSPC (no free chunk) or -EAGAIN (the item changed). Context: no
 * lock, no RCU section.
 *
 * The header is a copy and commits after its publication (item_layout.h):
 * written with ITEM_COMMIT_PENDING, the source checked and invalidated just
 * before the switch (no PMEM write under the bucket lock), then committed by
 * a compare-and-swap in the read section of the switch. A delete (or a set into
 * the DRAM hot pool) that removes the header after the switch invalidates it
 * before it answers, and leaves no valid source behind; a crash between the
 * source's invalidation and the commit loses the key, a miss. A touch that
 * lands between the check and the switch changes the source's expiry: the
 * header takes the new one at the switch (a touch after the switch, on the
 * source it looked up before, is lost, as against any copy's switch).
 */
static int
swap_in_header(struct cache_thread *t, uint64_t hash, uint64_t old,
               const struct item_desc *hdr, const void *key,
               const struct nvs_loc *nl, bool may_evict, uint64_t *out)
{
    struct cache *c = t->cache;
    struct item_plan plan = {.head_size =
                                 item_flash_size(hdr->klen, hdr->iflags)};
    int cls = slab_class_for(c->slab, plan.head_size);
    uint64_t off;

    /* The new header keeps the old item's store sequence (hdr->seq, a
     * snapshot of it), as a page move's copy does: a set of this key that
     * took its sequence before this swap and publishes after it must win
     * over the copy after a crash (item_layout.h). Not committed: the old
     * item is already invalidated. */
    if (!item_committed(
            __atomic_load_n(&item_at(c->base, old)->commit, __ATOMIC_RELAXED)))
        return -EAGAIN;
    if (cls < 0)
        return -ENOSPC;
    int rc = may_evict ? reclaim_alloc_item(t, &plan, &off, NULL)
                       : quota_alloc(t->quota, (unsigned)cls, &off);
    if (rc && !may_evict && hdr_reserve_use(c, (unsigned)cls)) {
        t->ext->refill = cls;
        rc = quota_alloc(t->quota, (unsigned)cls, &off);
    }
    if (rc) {
        t->ext->want_page = cls;
        return -ENOSPC;
    }
    /* PMEM: the header is written before it is visible, no lock held */
    uint32_t word = item_write_flash(c->base, off, hdr, key, nl, true);
    pm_fence();
    slab_reset_bits(c->slab, off);
    cache_account(t, off, 1);

    /* The read section keeps the new chunk from reuse until the commit,
     * and old from reuse once the index is seen holding it. Checked, then
     * invalidated with no lock held, then switched if still held. */
    cache_read_lock();
    const struct item_hdr *it = item_at(c->base, old);
    struct htab_bucket *b = htab_lock(c->htab, hash);
    bool ok = htab_find_loc_locked(b, cache_loc(old)) &&
              __atomic_load_n(&it->exptime, __ATOMIC_RELAXED) == hdr->exptime &&
              cache_item_dead(c, it, clock_now()) == CACHE_LIVE;
    htab_unlock(b);
    if (ok) {
        item_invalidate(c->base, old);
        TC_CRASH_POINT(may_evict ? "compact.checked" : "spill.checked");
    }
    /* A touch since the check (a lockless store into the source's expiry)
     * must reach the header: the source is invalidated already, so the
     * switch must happen while the index holds it. The new expiry is put
     * into the header outside the lock (it is not visible yet), then the
     * switch is tried again; each round needs yet another touch of this
     * key inside that window. */
    uint32_t want = hdr->exptime;
    while (ok) {
        b = htab_lock(c->htab, hash);
        _Atomic uint64_t *slot = htab_find_loc_locked(b, cache_loc(old));
        uint32_t exp = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
        if (slot && exp == want)
            htab_replace_locked(slot, hash, cache_loc(off));
        htab_unlock(b);
        if (!slot)
            ok = false; /* a writer replaced or removed it */
        if (!slot || exp == want)
            break;
        want = exp;
        pm_store32(
            (uint32_t *)(c->base + off + offsetof(struct item_hdr, exptime)),
            exp);
    }
    if (ok) {
        TC_CRASH_POINT(may_evict ? "compact.published" : "spill.published");
        /* failed: a writer replaced the header and retires it */
        (void)item_commit_copy(c->base, off, word);
    }
    cache_read_unlock();
    if (!ok) {
        cache_account(t, off, -1);
        item_invalidate(c->base, off); /* never published nor committed */
        quota_free(t->quota, (unsigned)cls, off);
        return -EAGAIN;
    }
    *out = off;
    return 0;
}

/* --- spill --- */

/* memcached's ext_item_age: only items idle at least that long spill; a
 * younger victim is evicted. UINT32_MAX (the default) is no age limit. Ages
 * come from the slab's per-chunk access time, which saturates at
 * SLAB_ATIME_CAP: a limit above it counts as the cap. */
static bool
ext_old_enough(struct cache *c, uint64_t head)
{
    uint32_t want = c->cfg.ext_item_age;
    if (want == UINT32_MAX || want == 0)
        return true;
    if (want > SLAB_ATIME_CAP)
        want = SLAB_ATIME_CAP;
    return slab_atime_age(c->slab, head, clock_now()) >= want;
}

/* Eviction found the item at head cold (the spill hook, see
 * src/engine/reclaim.h): if its value is big enough, append it to the
 * store and swap a flash header into the index in its place. */
static bool
spill_hook(struct cache_thread *t, uint64_t head, uint64_t hash)
{
    struct cache *c = t->cache;
    struct item_desc hdr;
    char key[TC_KEY_MAX];
    struct nvs_loc nl;
    uint64_t off;
    int rc = -ENOENT;

    if (!c->nvs)
        return false;
    cache_read_lock();
    const struct item_hdr *it = item_at(c->base, head);
    item_hdr_load(&hdr, it);
    /* a spill must save pool memory: the header's chunk is smaller than
     * the item's (an ext_item_size below that has no effect) */
    unsigned cls = slab_class_of(c->slab, head);
    if (hdr.kind == ITEM_KIND_HEAD && hdr.vlen >= c->cfg.ext_item_size &&
        ext_old_enough(c, head) && hdr.klen > 0 && hdr.klen <= TC_KEY_MAX &&
        cls != SLAB_NO_CLASS &&
        (hdr.nchain || item_flash_size(hdr.klen, hdr.iflags) <
                           slab_chunk_size(c->slab, cls))) {
        memcpy(key, item_key(it), hdr.klen);
        struct cache_key k = {c, key, hdr.klen};
        /* only the item the index holds: inside this section its chunks
         * cannot be freed, so the value copied below is the item's */
        if (htab_lookup_rcu(c->htab, hash, cache_match_key, &k) ==
                cache_loc(head) &&
            cache_item_dead(c, it, clock_now()) == CACHE_LIVE) {
            struct iovec iov[ITEM_MAX_TAILS + 1];
            int n = item_value_iov(c->base, it, c->chunk_max, iov);
            rc = nvs_append(c->nvs, key, hdr.klen, iov, n, &nl);
        }
    }
    cache_read_unlock();
    if (rc == -EAGAIN)
        cache_stat_inc(t, ST_EXT_SPILL_BUSY);
    if (rc)
        return false;
    rc = swap_in_header(t, hash, head, &hdr, key, &nl, false, &off);
    if (rc) {
        nvs_release(c->nvs, &nl);
        return false;
    }
    cache_account(t, head, -1);
    cache_stat_inc(t, ST_EXT_SPILLED);
    return true;
}

/* After an eviction batch of class cls (the after_evict hook): a spill
 * that found no free header chunk asks for one page to move from cls to
 * the header class, and a used header reserve is refilled. */
static void
after_evict_hook(struct cache_thread *t, unsigned cls)
{
    struct ext_thread *e = t->ext;
    int want = e->want_page;
    e->want_page = -1;
    /* not from the header class itself: that would drop headers */
    if (e->refill >= 0 && (unsigned)e->refill != cls && !t->in_admin &&
        hdr_reserve_refill(t, cls))
        e->refill = -1;
    if (want < 0 || (unsigned)want == cls || t->in_admin)
        return;
    /* another thread may have given the class the reserve meanwhile: a
     * reassignment now would evict a page of victims for nothing */
    struct slab_class_stats st;
    slab_class_stats(t->cache->slab, (unsigned)want, &st);
    if (st.free_chunks > 0)
        return;
    /* headers are small: one page holds thousands, so this is rare; with
     * admin busy the next spill short of a header asks again */
    reclaim_reassign(t, (int)cls, want, RECLAIM_TRY);
}

/* --- reads --- */

void
ext_hit_fill(struct ext_hit *h, const struct item_hdr *it, uint64_t hash,
             uint64_t loc)
{
    h->hash = hash;
    h->loc = loc;
    h->nl = *item_flash_loc(it);
}

/* A failed read: count it; when the record itself failed (-EBADMSG, -EIO,
 * -ETIMEDOUT, -ESTALE), drop the header if the index still holds it. */
static void
read_failed(struct cache_thread *t, uint64_t hash, uint64_t loc, int res)
{
    switch (res) {
    case -ESTALE:
        cache_stat_inc(t, ST_EXT_MISS);
        break;
    case -EBADMSG:
        cache_stat_inc(t, ST_EXT_BADCRC);
        break;
    case -ETIMEDOUT:
        cache_stat_inc(t, ST_EXT_TIMEOUTS);
        cache_stat_inc(t, ST_EXT_ABORTED);
        break;
    case -EIO:
        cache_stat_inc(t, ST_EXT_ABORTED);
        break;
    default: /* -EBUSY, -ENOMEM: the ring, not the record; keep it */
        cache_stat_inc(t, ST_EXT_ABORTED);
        return;
    }
    if (!cache_unlink_loc(t->cache, hash, loc))
        return;
    cache_account_unlink(t, cache_off(loc), CACHE_LOST, UNLINK_REAPED);
    cache_defer_free(t, cache_off(loc));
}

static int
ring_get(struct cache_thread *t, struct nvs_ring **r)
{
    if (!*r) {
        int rc = nvs_ring_create(t->cache->nvs, EXT_RING_DEPTH, r);
        if (rc)
            return rc;
    }
    (void)t;
    return 0;
}

uint32_t ext_block_timeout_ms = EXT_BLOCK_TIMEOUT_MS;

/* One read on the thread's blocking ring, waited for. The result in
 * rd->res; on 0 the caller calls nvs_read_done(t->ext->ring, rd). The wait
 * always ends: by ext_read_timeout_ms, or when that is 0 (no deadline for
 * the server's asynchronous reads), by ext_block_timeout_ms, so that a
 * lost completion cannot hang a tc_ caller or a read-modify-write. */
static void
read_wait(struct cache_thread *t, struct nvs_read *rd)
{
    if (!t->cache->cfg.ext_read_timeout_ms)
        rd->timeout_ms = ext_block_timeout_ms;
    struct ext_thread *e = t->ext;
    int rc = ring_get(t, &e->ring);
    if (rc == 0)
        rc = nvs_read_prep(e->ring, rd);
    if (rc == 0 && (rc = nvs_ring_submit(e->ring)) > 0)
        rc = 0;
    if (rc) {
        rd->res = rc < 0 ? rc : -EIO;
        rd->value = NULL;
        return;
    }
    /* this ring carries one read at a time: what comes back is rd */
    struct nvs_read *done = NULL;
    for (;;) {
        int n = nvs_ring_reap(e->ring, &done, 1, 1);
        if (n == 1)
            break;
        if (n <= 0) { /* 0: rd is not in flight (cannot happen) */
            rd->res = n < 0 ? n : -EIO;
            rd->value = NULL;
            return;
        }
    }
}

/* A blocking read of key's value at nl, checked by the store: 0 with the
 * value in rd->value (the caller then calls nvs_read_done), or the error,
 * after read_failed() dropped the header at loc and counted it. */
static int
read_checked(struct cache_thread *t, const void *key, uint32_t klen,
             uint64_t hash, uint64_t loc, const struct nvs_loc *nl,
             struct nvs_read *rd)
{
    memset(rd, 0, sizeof(*rd)); /* timeout_ms 0: the store's */
    rd->loc = *nl;
    rd->key = key;
    rd->klen = (uint8_t)klen;
    cache_stat_add(t, ST_EXT_INFLIGHT, 1);
    read_wait(t, rd);
    cache_stat_add(t, ST_EXT_INFLIGHT, -1);
    if (!rd->res)
        return 0;
    read_failed(t, hash, loc, rd->res);
    if (t->ext->ring)
        nvs_read_done(t->ext->ring, rd); /* frees the ring's slot */
    return rd->res;
}

static void
recache_maybe(struct cache_thread *t, const void *key, uint32_t klen,
              const struct ext_hit *h, const char *value)
{
    struct cache *c = t->cache;
    uint32_t rate = c->cfg.ext_recache_rate;
    bool due = reread_due(c->ext, h->hash);
    if (rate && ++t->ext->recache_ctr >= rate) {
        t->ext->recache_ctr = 0;
        due = true;
    }
    if (!due)
        return;
    struct item_desc hdr = {
        .klen = (uint8_t)klen,
        .iflags = h->info.stale ? ITEM_STALE : 0,
        .vlen = h->info.vlen,
        .flags = h->info.flags,
        .exptime = h->info.exptime,
        .cas = h->info.cas,
    };
    if (c->ext->recache(t, key, klen, &hdr, h->loc, value) == TC_OK)
        cache_stat_inc(t, ST_EXT_RECACHE);
}

/* One get answered by a reaped read: a hit or a miss. The read itself
 * (the failure's counter and unlink, recache) is dealt with once, by the
 * get that issued it (first); the gets that joined it only count. */
static int
async_answer(struct cache_thread *t, const void *key, uint32_t klen,
             const struct ext_hit *h, const struct nvs_read *rd, bool first)
{
    if (rd->res) {
        if (first)
            read_failed(t, h->hash, h->loc, rd->res);
        cache_stat_inc(t, h->touch ? ST_TOUCH_MISSES : ST_GET_MISSES);
        return TC_NOT_FOUND;
    }
    /* in the class of the item's header, as a flash hit served at once
     * (fetch_after) is; misses have no class */
    cache_cls_inc(t, h->info.slab_class,
                  h->touch ? CLS_TOUCH_HITS : CLS_GET_HITS);
    cache_stat_inc(t, ST_EXT_GETS);
    if (first)
        recache_maybe(t, key, klen, h, rd->value);
    return TC_OK;
}

int
ext_async_done(struct cache_thread *t, const void *key, uint32_t klen,
               const struct ext_hit *h, const struct nvs_read *rd)
{
    return async_answer(t, key, klen, h, rd, true);
}

int
ext_serve(struct cache_thread *t, const void *key, uint32_t klen,
          const struct ext_hit *h, tc_value_fn *fn, void *arg)
{
    struct nvs_read rd;
    if (read_checked(t, key, klen, h->hash, h->loc, &h->nl, &rd))
        return TC_NOT_FOUND;
    cache_stat_inc(t, ST_EXT_GETS);
    struct iovec iov = {(void *)rd.value, rd.loc.vlen};
    if (fn)
        fn(arg, &h->info, &iov, 1);
    recache_maybe(t, key, klen, h, rd.value);
    nvs_read_done(t->ext->ring, &rd);
    return TC_OK;
}

int
ext_read_copy(struct cache_thread *t, const void *key, uint32_t klen,
              uint64_t hash, uint64_t loc, const struct nvs_loc *nl, char **buf)
{
    struct nvs_read rd;
    int rc = read_checked(t, key, klen, hash, loc, nl, &rd);
    if (rc)
        return rc;
    *buf = malloc(nl->vlen ? nl->vlen : 1);
    if (*buf)
        memcpy(*buf, rd.value, nl->vlen);
    nvs_read_done(t->ext->ring, &rd);
    return *buf ? 0 : -ENOMEM;
}

/* --- asynchronous reads (tc_async_*) --- */

/* One read in flight on the thread's asynchronous ring: what completing it
 * needs, with its own copy of the key (the store compares it). A get of the
 * same locator while the read is pending does not read again: it joins as
 * a waiter (its own h, owner and id; rd unused), answered from the same
 * completion, value or miss. */
struct ext_pending {
    struct nvs_read rd;
    struct ext_hit h;
    void *owner;                     /* NULL once cancelled */
    struct ext_pending *prev, *next; /* the thread's reads (not waiters) */
    struct ext_pending *hnext;       /* its by_loc chain (not waiters) */
    struct ext_pending *waiters;     /* gets that joined, newest first */
    uint8_t klen;
    char key[TC_KEY_MAX];
};

static unsigned
pend_bucket(const struct nvs_loc *nl)
{
    uint64_t k = ((uint64_t)nl->seg << 32 | nl->off) * 0x9e3779b97f4a7c15ull;
    return (unsigned)(k >> 56) & (EXT_PEND_BUCKETS - 1);
}

/* The thread's pending read of nl, or NULL. */
static struct ext_pending *
pend_find(struct ext_thread *e, const struct nvs_loc *nl)
{
    struct ext_pending *p = e->by_loc[pend_bucket(nl)];
    while (p && !loc_equal(&p->rd.loc, nl))
        p = p->hnext;
    return p;
}

static void
pend_unhash(struct ext_thread *e, struct ext_pending *p)
{
    struct ext_pending **pp = &e->by_loc[pend_bucket(&p->rd.loc)];
    while (*pp && *pp != p)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = p->hnext;
}

int
ext_async_fd(struct cache_thread *t)
{
    if (!t->cache->nvs)
        return -ENOENT;
    int rc = ring_get(t, &t->ext->aring);
    return rc ? rc : nvs_ring_fd(t->ext->aring);
}

void
ext_async_owner(struct cache_thread *t, void *owner)
{
    if (t->ext)
        t->ext->owner = owner;
}

/* Queue an asynchronous read of h: 0, or a negative errno (then the
 * caller reads it the blocking way). */
static int
pend(struct cache_thread *t, const void *key, uint32_t klen,
     const struct ext_hit *h, uint64_t *id)
{
    struct ext_thread *e = t->ext;
    if (ring_get(t, &e->aring) != 0)
        return -ENOMEM;
    struct ext_pending *lead = pend_find(e, &h->nl);
    struct ext_pending *p =
        calloc(1, lead ? offsetof(struct ext_pending, klen) : sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->h = *h;
    p->owner = e->owner;
    if (lead) { /* the same record is being read: wait for that read */
        p->waiters = lead->waiters;
        lead->waiters = p;
        cache_stat_inc(t, ST_EXT_SHARED);
        *id = (uint64_t)(uintptr_t)p;
        return 0;
    }
    p->klen = (uint8_t)klen;
    memcpy(p->key, key, klen);
    p->rd.loc = h->nl;
    p->rd.key = p->key;
    p->rd.klen = p->klen;
    p->rd.udata = p;
    int rc = nvs_read_prep(e->aring, &p->rd);
    if (rc) {
        free(p);
        return rc; /* -EBUSY: the ring is full */
    }
    p->next = e->pend;
    if (p->next)
        p->next->prev = p;
    e->pend = p;
    unsigned b = pend_bucket(&p->rd.loc);
    p->hnext = e->by_loc[b];
    e->by_loc[b] = p;
    *id = (uint64_t)(uintptr_t)p;
    return 0;
}

int
ext_get(struct cache_thread *t, const void *key, uint32_t klen,
        struct ext_hit *h, const struct tc_get_opts *o, tc_value_fn *fn,
        void *arg)
{
    if (o->head_only) {
        if (fn)
            fn(arg, &h->info, NULL, 0);
        return TC_OK;
    }
    if (o->async && t->ext->owner &&
        pend(t, key, klen, h, &h->info.pending) == 0) {
        if (fn)
            fn(arg, &h->info, NULL, 0);
        return EXT_PENDING;
    }
    return ext_serve(t, key, klen, h, fn, arg);
}

int
ext_async_submit(struct cache_thread *t)
{
    if (!t->ext || !t->ext->aring)
        return 0;
    int n = nvs_ring_submit(t->ext->aring);
    if (n > 0)
        cache_stat_add(t, ST_EXT_INFLIGHT, n);
    return n;
}

static void
unlink_pending(struct cache_thread *t, struct ext_pending *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        t->ext->pend = p->next;
    if (p->next)
        p->next->prev = p->prev;
}

/* Reap what is done (wait_nr 0: never waits). */
static int
reap_batch(struct cache_thread *t, tc_async_fn *fn, void *arg, int wait_nr)
{
    struct nvs_read *done[32];
    int n = nvs_ring_reap(t->ext->aring, done, 32, wait_nr);
    for (int i = 0; i < n; i++) {
        struct ext_pending *p = done[i]->udata;
        cache_stat_add(t, ST_EXT_INFLIGHT, -1);
        unlink_pending(t, p);
        pend_unhash(t->ext, p);
        /* the reader, then the gets that joined it, in arrival order
         * (each connection fills its own holes in its own order) */
        struct ext_pending *w = p->waiters, *rev = NULL;
        while (w) {
            struct ext_pending *nx = w->waiters;
            w->waiters = rev;
            rev = w;
            w = nx;
        }
        struct iovec iov = {(void *)p->rd.value, p->rd.loc.vlen};
        for (w = p; w; w = w == p ? rev : w->waiters) {
            int rc = async_answer(t, p->key, p->klen, &w->h, &p->rd, w == p);
            if (w->owner && fn)
                fn(arg, w->owner, (uint64_t)(uintptr_t)w, &iov,
                   rc == TC_OK ? 1 : 0);
        }
        nvs_read_done(t->ext->aring, &p->rd);
        for (w = rev; w;) {
            struct ext_pending *nx = w->waiters;
            free(w);
            w = nx;
        }
        free(p);
    }
    return n;
}

int
ext_async_reap(struct cache_thread *t, tc_async_fn *fn, void *arg)
{
    int total = 0, n;
    if (!t->ext || !t->ext->aring)
        return 0;
    do {
        n = reap_batch(t, fn, arg, 0);
        if (n > 0)
            total += n;
    } while (n == 32);
    return total;
}

void
ext_async_cancel(struct cache_thread *t, void *owner)
{
    if (!t->ext)
        return;
    for (struct ext_pending *p = t->ext->pend; p; p = p->next)
        for (struct ext_pending *w = p; w; w = w->waiters)
            if (w->owner == owner)
                w->owner = NULL;
}

/* --- compaction --- */

/* The index location of the flash header for key whose locator is nl, or
 * 0. Context: inside a read section. */
static uint64_t
find_header_rcu(struct cache *c, const void *key, uint8_t klen,
                const struct nvs_loc *nl, uint64_t hash)
{
    struct cache_key k = {c, key, klen};
    uint64_t loc = htab_lookup_rcu(c->htab, hash, cache_match_key, &k);
    if (!loc)
        return 0;
    const struct item_hdr *it = cache_item_at(c, cache_off(loc));
    if (it->kind != ITEM_KIND_FLASH || !loc_equal(item_flash_loc(it), nl))
        return 0;
    return loc;
}

static bool
compact_keep(void *arg, const void *key, uint8_t klen,
             const struct nvs_loc *old)
{
    struct cache_thread *t = arg;
    struct cache *c = t->cache;
    uint64_t hash = cache_hash(c, key, klen);
    cache_read_lock();
    uint64_t loc = find_header_rcu(c, key, klen, old, hash);
    bool keep = loc && slab_fetched(c->slab, cache_off(loc)) &&
                cache_item_dead(c, cache_item_at(c, cache_off(loc)),
                                clock_now()) == CACHE_LIVE;
    cache_read_unlock();
    return keep;
}

static void
compact_moved(void *arg, const void *key, uint8_t klen,
              const struct nvs_loc *old, const struct nvs_loc *new_loc)
{
    struct cache_thread *t = arg;
    struct cache *c = t->cache;
    uint64_t hash = cache_hash(c, key, klen), off;
    struct item_desc hdr;

    cache_read_lock();
    uint64_t loc = find_header_rcu(c, key, klen, old, hash);
    if (loc)
        item_hdr_load(&hdr, cache_item_at(c, cache_off(loc)));
    cache_read_unlock();
    /* the maintenance thread may evict for the new header (a record
     * without one is lost anyway) */
    if (!loc || swap_in_header(t, hash, cache_off(loc), &hdr, key, new_loc,
                               true, &off) != 0) {
        nvs_release(c->nvs, new_loc);
        return;
    }
    /* same size, same class: the counts do not move; the old header goes
     * after a grace period, without releasing its (moved) record */
    TC_CRASH_POINT("compact.swapped");
    cache_account(t, cache_off(loc), -1);
    slab_ref(c->slab, off);
    cache_defer_free(t, cache_off(loc));
}

void
ext_maintain(struct cache_thread *t)
{
    struct cache *c = t->cache;
    if (!c->nvs)
        return;
    for (int i = 0; i < EXT_COMPACT_STEPS; i++) {
        int rc =
            nvs_compact_step(c->nvs, c->cfg.ext_max_frag, EXT_COMPACT_BUDGET,
                             compact_keep, compact_moved, t);
        if (rc <= 0)
            break;
    }
    cache_defer_flush(t);
}

/* --- figures --- */

void
ext_stats_reset(struct cache *c)
{
    if (c->nvs)
        nvs_stats_reset(c->nvs);
}

void
ext_stats(struct cache *c, struct tc_stats *out)
{
    struct nvs_stats ns;

    out->ext_enabled = c->nvs != NULL;
    out->ext_recache_window =
        c->ext && c->ext->reread ? (uint32_t)(c->ext->reread_mask + 1) : 0;
    if (!c->nvs)
        return;
    nvs_get_stats(c->nvs, &ns);
    out->ext_uring = ns.uring;
    out->ext_write_errors = ns.write_errors;
    out->extstore_bytes_written = ns.bytes_written;
    out->extstore_objects_written = ns.objects_written;
    out->extstore_bytes_read = ns.bytes_read;
    out->extstore_objects_read = ns.objects_read;
    out->extstore_page_reclaims = ns.page_reclaims;
    out->extstore_objects_lost = ns.objects_lost;
    out->extstore_compact_rescues = ns.compact_rescues;
    out->extstore_compact_skipped = ns.compact_skipped;
    out->extstore_bytes_used = ns.bytes_used;
    out->extstore_bytes_dead = ns.bytes_dead;
    out->extstore_limit_maxbytes = ns.bytes_total;
    out->extstore_pages_free = ns.segs_free;
    out->ext_read_p50_ns = ns.read_lat_p50_ns;
    out->ext_read_p99_ns = ns.read_lat_p99_ns;
    out->ext_read_p999_ns = ns.read_lat_p999_ns;
}

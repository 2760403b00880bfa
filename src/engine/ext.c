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
 * Reads, recache and the re-read filter are in ext_read.c (with their
 * rules); both files share src/engine/ext_int.h.
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
 *   t->ext (struct ext_thread): owner thread only (see ext_read.c);
 *                         thread_init creates it, ext_thread_fini
 *                         (ext_read.c) destroys it.
 *   x->reread             the re-read filter: see ext_read.c; allocated
 *                         at open, freed at close.
 *   flash headers         written before publication with no lock held;
 *                         after it only exptime changes (touch), as for
 *                         any item.
 *   Locks taken: one index bucket, briefly, per swap.
 */
#include "src/engine/ext.h"
#include "src/engine/ext_int.h"

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

/* Bytes compaction reads per step, and steps per maintenance tick. */
#define EXT_COMPACT_BUDGET (8u << 20)
#define EXT_COMPACT_STEPS 4

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
    if ((off & CACHE_SPECIAL_OFF) ||
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
    int rc = ext_reread_open(x, cfg);
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

/* --- swapping a header in --- */

/* Rounds of a swap's switch chasing touches of its key (swap_in_header). */
#define SWAP_TOUCH_ROUNDS 16u

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
     * key inside that window. A key touched that often gives up after
     * SWAP_TOUCH_ROUNDS: the index keeps the source, served as before; it
     * is invalidated already, so a crash loses it (a miss, never an older
     * value). */
    uint32_t want = hdr->exptime;
    for (unsigned round = 0; ok; round++) {
        if (round == SWAP_TOUCH_ROUNDS) {
            ok = false;
            break;
        }
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
        TC_CRASH_POINT(may_evict ? "compact.retouched" : "spill.retouched");
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
    /* only the item the index holds, and its header read only once the
     * index is seen holding it: before, the chunk may be free and being
     * rewritten by a store. Inside this section its chunks cannot be
     * freed, so the header, key and value read below are the item's. */
    if (htab_holds_rcu(c->htab, hash, cache_loc(head))) {
        item_hdr_load(&hdr, it);
        /* a spill must save pool memory: the header's chunk is smaller
         * than the item's (an ext_item_size below that has no effect) */
        unsigned cls = slab_class_of(c->slab, head);
        if (hdr.kind == ITEM_KIND_HEAD && hdr.vlen >= c->cfg.ext_item_size &&
            ext_old_enough(c, head) && hdr.klen > 0 && hdr.klen <= TC_KEY_MAX &&
            cls != SLAB_NO_CLASS &&
            (hdr.nchain || item_flash_size(hdr.klen, hdr.iflags) <
                               slab_chunk_size(c->slab, cls)) &&
            cache_item_dead(c, it, clock_now()) == CACHE_LIVE) {
            memcpy(key, item_key(it), hdr.klen);
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

/* --- compaction --- */

/* The index location of the flash header for key whose locator is nl, or
 * 0. Context: inside a read section. */
static uint64_t
find_header_rcu(struct cache *c, const void *key, uint8_t klen,
                const struct nvs_loc *nl, uint64_t hash)
{
    struct cache_key k = {c, key, klen};
    uint64_t loc = htab_lookup_rcu(c->htab, hash, cache_match_key, &k);
    if (!loc || cache_loc_packed(loc))
        return 0;
    const struct item_hdr *it = cache_item_at(c, cache_off(loc));
    if (it->kind != ITEM_KIND_FLASH || !ext_loc_equal(item_flash_loc(it), nl))
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

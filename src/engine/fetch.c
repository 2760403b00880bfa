/*
 * The read path: get, gat, touch (deletes are in store.c, with the other
 * writes of the index).
 *
 * A get runs inside one RCU read section: index lookup (DRAM, comparing the
 * key in PMEM only on a tag match), expiry and flush checks, the CLOCK bit
 * and the access time (DRAM), and the caller's callback over the value in
 * place. A read never writes PMEM. An expired or flushed item met on the way is
 * unlinked after the section and freed after a grace period.
 *
 * A flash item is described inside the section like any other;
 * its value is read after the section through the NVMe store (ext.c),
 * which checks it, so the section never spans I/O.
 *
 * touch and gat change an item's exptime in place with one aligned 4-byte
 * store through the PMEM helpers, with no lock held: rewriting a whole item
 * to move its expiry would cost far more PMEM bandwidth than it saves, and a
 * concurrent overwrite simply wins (the touch is ordered before it).
 *
 * Concurrency: no state of its own; see src/engine/cache.h.
 */
#include "src/engine/fetch.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/engine/cache.h"
#include "src/engine/hotkey.h"
#include "src/engine/ext.h"
#include "tier/pm.h"

#include <urcu/urcu-memb.h>

_Static_assert(SLAB_ATIME_CAP == TC_LAST_ACCESS_CAP,
               "tiercache.h states the slab's access time cap");

/* Unlink a dead item met by a reader, if it is still in the index. */
static void
reap_dead(struct cache_thread *t, uint64_t hash, uint64_t loc,
          enum cache_dead dead)
{
    if (!cache_unlink_loc(t->cache, hash, loc))
        return;
    cache_account_unlink(t, cache_off(loc), dead, UNLINK_REAPED);
    cache_defer_free(t, cache_off(loc));
}

/* Whether this reader should recache (meta W), someone already got that
 * (Z), or neither; claimed: the win bit as cache_touch saw it. The claim is
 * a DRAM bit of the chunk: a read never writes PMEM. */
static uint8_t
win_state(struct cache *c, const struct item_hdr *it, uint64_t off,
          const struct tc_get_opts *o, uint32_t now, bool claimed,
          uint32_t exp_before)
{
    uint32_t exp = o->recache_before_touch
                       ? exp_before
                       : __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    /* an expiry this call's touch put in the past counts as below any R */
    bool due = (it->iflags & ITEM_STALE) ||
               (o->recache_below && exp != 0 &&
                (exp <= now || exp - now < o->recache_below));
    if (claimed)
        return TC_WIN_TAKEN;
    if (!due || o->no_win)
        return TC_WIN_NONE;
    return cache_bit_claim(c, off) ? TC_WIN_YOU : TC_WIN_TAKEN;
}

/* Set an item's expiry in place: one atomic 4-byte store, through the
 * PMEM helpers unless the item is in the DRAM hot pool. */
static void
store_exptime(struct item_hdr *it, uint64_t off, uint32_t exptime)
{
    if (cache_off_dram(off))
        __atomic_store_n(&it->exptime, exptime, __ATOMIC_RELAXED);
    else
        pm_store32(&it->exptime, exptime);
}

/* A live item inside the read section: touch, mark used, describe. */
static void
describe_rcu(struct cache *c, struct item_hdr *it, uint64_t off,
             const struct tc_get_opts *o, uint32_t now,
             struct tc_item_info *out)
{
    struct tc_item_info info;
    struct slab_seen seen;

    info.exptime_before = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    if (o->touch)
        store_exptime(it, off, cache_exptime(o->exptime, now));
    /* one call on one DRAM word: the fetched and win bits and the age
     * before this access (memcached's h, l and la=), then the CLOCK bit
     * and the time set */
    cache_touch(c, off, now, !o->no_bump, &seen);
    info.fetched = seen.fetched;
    info.win = win_state(c, it, off, o, now, seen.claimed, info.exptime_before);
    info.last_access = seen.age;
    info.flags = it->flags;
    info.exptime = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    info.cas = it->cas;
    info.vlen = it->vlen;
    info.stale = it->iflags & ITEM_STALE;
    info.slab_class = seen.cls;
    info.flash = it->kind == ITEM_KIND_FLASH;
    info.pending = 0;
    *out = info;
}

/* Serve a live item in PMEM inside the read section: describe, call fn. */
static void
serve_rcu(struct cache *c, struct item_hdr *it, uint64_t off,
          const struct tc_get_opts *o, uint32_t now, tc_value_fn *fn, void *arg)
{
    struct tc_item_info info;
    struct iovec iov[ITEM_MAX_TAILS + 1];

    describe_rcu(c, it, off, o, now, &info);
    int n = item_value_iov(c->base, it, c->chunk_max, iov);
    if (fn) {
        /* the value is read in place: latency emulation charges it here */
        for (int i = 0; i < n; i++)
            pm_note_read(iov[i].iov_base, iov[i].iov_len);
        fn(arg, &info, iov, n);
    }
}

/* A flash item: described here, its value read after the section. */
static void
flash_rcu(struct cache *c, struct item_hdr *it, uint64_t loc, uint64_t hash,
          const struct tc_get_opts *o, uint32_t now, struct ext_hit *h)
{
    describe_rcu(c, it, cache_off(loc), o, now, &h->info);
    h->info.pending = 0;
    ext_hit_fill(h, it, hash, loc);
    h->touch = o->touch;
}

int
fetch_get(struct cache_thread *t, const void *key, uint32_t klen,
          const struct tc_get_opts *o, tc_value_fn *fn, void *arg)
{
    struct cache *c = t->cache;
    struct cache_key k = {c, key, klen};
    uint64_t hash = cache_hash(c, key, klen);
    uint32_t now = clock_now();
    enum cache_dead dead = CACHE_LIVE;
    struct ext_hit h;
    bool flash = false;

    cache_flush_check(c, now);
    cache_stat_inc(t, ST_CMD_GET);
    if (o->touch)
        cache_stat_inc(t, ST_CMD_TOUCH);
    cache_read_lock();
    uint64_t loc = htab_lookup_rcu(c->htab, hash, cache_match_key, &k);
    if (loc) {
        struct item_hdr *it =
            (struct item_hdr *)cache_item_at(c, cache_off(loc));
        dead = cache_item_dead(c, it, now);
        flash = it->kind == ITEM_KIND_FLASH;
        if (dead == CACHE_LIVE && flash)
            flash_rcu(c, it, loc, hash, o, now, &h);
        else if (dead == CACHE_LIVE)
            serve_rcu(c, it, cache_off(loc), o, now, fn, arg);
    }
    cache_read_unlock();
    if (c->hot && loc && dead == CACHE_LIVE)
        hotkey_note_read(t, hash, key, klen);

    /* the value of a flash item is read now, outside the section; a
     * failed read is a miss (counted and the header dropped by ext.c) */
    if (loc && dead == CACHE_LIVE && flash) {
        int rc = ext_get(t, key, klen, &h, o, fn, arg);
        if (rc == EXT_PENDING)
            return TC_OK; /* counted when the read completes */
        if (rc != TC_OK)
            loc = 0;
    }

    /* memcached counts a gat as a touch: touch_hits/misses, not
     * get_hits/misses */
    if (loc && dead == CACHE_LIVE) {
        cache_stat_inc(t, o->touch ? ST_TOUCH_HITS : ST_GET_HITS);
        return TC_OK;
    }
    cache_stat_inc(t, o->touch ? ST_TOUCH_MISSES : ST_GET_MISSES);
    if (dead == CACHE_EXPIRED)
        cache_stat_inc(t, ST_GET_EXPIRED);
    else if (dead == CACHE_FLUSHED)
        cache_stat_inc(t, ST_GET_FLUSHED);
    else if (dead == CACHE_LOST)
        cache_stat_inc(t, ST_EXT_MISS);
    if (dead != CACHE_LIVE)
        reap_dead(t, hash, loc, dead);
    return TC_NOT_FOUND;
}

int
fetch_touch(struct cache_thread *t, const void *key, uint32_t klen,
            int64_t exptime)
{
    struct cache *c = t->cache;
    struct cache_key k = {c, key, klen};
    uint64_t hash = cache_hash(c, key, klen);
    uint32_t now = clock_now();
    enum cache_dead dead = CACHE_LIVE;

    cache_flush_check(c, now);
    cache_stat_inc(t, ST_CMD_TOUCH);
    cache_read_lock();
    uint64_t loc = htab_lookup_rcu(c->htab, hash, cache_match_key, &k);
    if (loc) {
        struct item_hdr *it =
            (struct item_hdr *)cache_item_at(c, cache_off(loc));
        dead = cache_item_dead(c, it, now);
        if (dead == CACHE_LIVE) {
            store_exptime(it, cache_off(loc), cache_exptime(exptime, now));
            cache_bit_ref(c, cache_off(loc));
            cache_atime_set(c, cache_off(loc), now);
        }
    }
    cache_read_unlock();

    if (loc && dead == CACHE_LIVE) {
        cache_stat_inc(t, ST_TOUCH_HITS);
        return TC_OK;
    }
    cache_stat_inc(t, ST_TOUCH_MISSES);
    if (dead != CACHE_LIVE)
        reap_dead(t, hash, loc, dead);
    return TC_NOT_FOUND;
}

/* ---- walk (tc_walk) ------------------------------------------------------ */

struct walk {
    struct cache *c;
    uint32_t now;
    tc_walk_fn *fn;
    void *arg;
    unsigned seen;
};

/* One index entry, inside the read section: a live item goes to fn,
 * described without touching it. */
static int
walk_entry(void *arg, uint64_t loc)
{
    struct walk *w = arg;
    struct cache *c = w->c;
    uint64_t off = cache_off(loc);
    const struct item_hdr *it = cache_item_at(c, off);

    if (cache_item_dead(c, it, w->now) != CACHE_LIVE)
        return 0;
    struct tc_walk_item v = {
        .key = item_key(it),
        .klen = it->klen,
        .flags = it->flags,
        .exptime = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED),
        .last_access = cache_atime_age(c, off, w->now),
        .cas = it->cas,
        .vlen = it->vlen,
        .size = (uint32_t)(TC_ITEM_HEADER_SIZE + it->klen + (uint64_t)it->vlen),
        .slab_class = (uint8_t)cache_class_of(c, off),
        .fetched = cache_bit_fetched(c, off),
        .flash = it->kind == ITEM_KIND_FLASH,
    };
    w->seen++;
    return w->fn(w->arg, &v);
}

/* One read section per bucket chain, so a long walk never holds back a
 * grace period for more than a chain's worth of items. */
int
fetch_walk(struct cache_thread *t, uint64_t *cursor, unsigned budget,
           tc_walk_fn *fn, void *arg)
{
    struct cache *c = t->cache;
    struct walk w = {c, clock_now(), fn, arg, 0};
    uint64_t n = htab_nbuckets(c->htab);
    uint64_t i = *cursor;

    cache_flush_check(c, w.now);
    while (i < n) {
        cache_read_lock();
        int rc = htab_bucket_visit_rcu(c->htab, i, walk_entry, &w);
        cache_read_unlock();
        i++;
        if (rc != 0) {
            *cursor = i < n ? i : TC_WALK_DONE;
            return rc;
        }
        if (w.seen >= budget)
            break;
    }
    *cursor = i < n ? i : TC_WALK_DONE;
    return (int)w.seen;
}

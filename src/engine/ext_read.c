/*
 * The flash tier's reads (the rest of the tier is ext.c): a flash item's
 * value read back through the store, blocking for the embedding API and
 * read-modify-write commands, or queued on the thread's asynchronous ring
 * for the server; recache and the re-read filter that picks what comes
 * back into the pool; a thread's rings, destroyed with its context.
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
 *
 * Concurrency:
 *   c->nvs, c->ext        read-only here (set at open, freed at close;
 *                         ext.c); the store is thread-safe (tier/nvs.h).
 *   t->ext (struct ext_thread): owner thread only; created with the
 *                         thread context (ext.c, a module hook) and
 *                         destroyed with it (ext_thread_fini); at
 *                         tc_close, the closing thread takes over the
 *                         rings of threads that stopped calling
 *                         (ext_thread_fini, nvs_ring_adopt).
 *   x->reread             allocated at open, freed at close (ext.c);
 *                         slots are read and written relaxed by any
 *                         reader: a lost update only delays or skips one
 *                         recache.
 *   ext_block_timeout_ms  a constant, except that tests set it while
 *                         no read is in flight.
 *   Locks taken: one index bucket, briefly, to unlink a header whose read
 *   failed (cache_unlink_loc); the recache hook's (store.c).
 */
#include "src/engine/ext.h"
#include "src/engine/ext_int.h"

#include "src/base/err.h"
#include "src/engine/cache.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static int reap_batch(struct cache_thread *t, tc_async_fn *fn, void *arg,
                      int wait_nr);

/* Reads in flight on one thread's ring. */
#define EXT_RING_DEPTH 256

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

int
ext_reread_open(struct ext *x, const struct tc_config *cfg)
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
    while (p && !ext_loc_equal(&p->rd.loc, nl))
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

int
ext_async_ring(struct cache_thread *t, void *ring, uint64_t tag)
{
    struct ext_thread *e = t->ext;
    if (!t->cache->nvs)
        return -ENOENT;
    if (e->aring) {
        err_set("this thread's flash reads already have a ring");
        return -EEXIST;
    }
    return nvs_ring_create_on(t->cache->nvs, EXT_RING_DEPTH, ring, tag,
                              &e->aring);
}

int
ext_async_complete(struct cache_thread *t, uint64_t user_data, int res)
{
    if (!t->ext || !t->ext->aring)
        return 0;
    int n = nvs_ring_complete(t->ext->aring, user_data, res);
    if (n > 0)
        cache_stat_inc(t, ST_EXT_NET_RING);
    return n;
}

unsigned
ext_async_busy(struct cache_thread *t)
{
    return t->ext && t->ext->aring ? nvs_ring_busy(t->ext->aring) : 0;
}

void
ext_async_detach(struct cache_thread *t)
{
    if (t->ext && t->ext->aring)
        nvs_ring_detach(t->ext->aring);
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

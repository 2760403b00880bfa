/*
 * Hot keys: sampling, the write/read top-K, the hot set that decides
 * placement, and the DRAM hot pool's items (see src/engine/hotkey.h).
 *
 * Concurrency:
 *   t->hk (struct hotkey_tbuf), one per thread context, made and freed
 *                    with it (module hooks, hotkey_create registers
 *                    them); the pointer is cleared under c->threads_lock
 *                    before the buffer is freed, so the tick (which reads
 *                    it under that lock) never sees a freed one:
 *     rng            owner thread only, no lock
 *     w[], r[]       the thread's sampled keys; tbuf->lock (a plain mutex,
 *                    leaf) taken by the owner once per sampled operation
 *                    (1 in hotkey_sample) and by the tick to drain them
 *   h->lock          guards h->w, h->r (the top-K), h->view_*, h->last_ns:
 *                    only the tick and hotkey_list take it. Lock order (the
 *                    tick): h->lock -> c->threads_lock -> tbuf->lock. None
 *                    of them is ranked: no PMEM write and no bucket lock
 *                    happens under any of them.
 *   h->set[2][]      the hot set, two tables of key hashes (0 = empty):
 *                    writers read h->set[h->cur] with relaxed loads after
 *                    an acquire load of h->cur; the tick fills the other
 *                    table and publishes it with a release store of h->cur.
 *                    A writer delayed over two ticks may see a table being
 *                    rebuilt: placement is a hint, never a correctness
 *                    matter (any item may live in DRAM or PMEM).
 *   h->rate          atomic (tc_set_hot_write_rate), relaxed
 *   c->hot, c->dram  set by hotkey_create at open, read-only after; the
 *                    pool (tier/dpool.c) is thread-safe, and cache.c frees
 *                    DRAM items into it.
 *   DRAM items       written before publication with plain stores, then
 *                    HOT_WRITTEN is set with a release store (the tick's
 *                    walk reads the header only after an acquire load of
 *                    it); after publication only exptime changes (atomic).
 *                    Freed after a grace period like PMEM items (cache.c).
 *   The tick's walk runs under the pool's list locks (tier/dpool.c) and
 *   only copies keys out; demotions and removals happen after it, with the
 *   engine's usual rules: PMEM copy outside any lock, index switch under
 *   the bucket lock only if it still holds the DRAM item. At a clean close
 *   hotkey_write_back() walks and demotes the same way, every item, with
 *   no other thread left.
 */
#include "src/engine/hotkey.h"

#include "src/engine/cache.h"
#include "src/engine/cache_packed.h"
#include "src/engine/reclaim.h"
#include "src/engine/topk.h"

#include "src/base/crashpoint.h"
#include "src/base/clock.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "tier/dpool.h"
#include "tier/region.h"
#include "tier/pm.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TBUF_SLOTS 128 /* distinct keys a thread samples between ticks */
#define TBUF_PROBE 4
#define HOTSET_SLOTS (2 * TOPK_MAX_K)
#define WALK_BATCH 64
#define WALK_ROUNDS 16

struct tsample {
    uint64_t hash;
    uint32_t n; /* samples since the last drain, 0 = free slot */
    uint8_t klen;
    char key[TC_KEY_MAX];
};

struct hotkey_tbuf {
    pthread_mutex_t lock;
    uint64_t rng;
    struct tsample w[TBUF_SLOTS];
    struct tsample r[TBUF_SLOTS];
};

struct hotkey {
    struct dpool *pool;
    uint32_t sample;
    uint32_t window;
    uint32_t k;
    uint32_t item_max; /* largest item placed in DRAM */
    _Atomic uint32_t rate;

    _Atomic unsigned cur;
    _Atomic uint64_t set[2][HOTSET_SLOTS];

    pthread_mutex_t lock;
    struct topk *w, *r;
    uint64_t last_ns;
    struct tc_hotkey *view_w, *view_r;
    unsigned nview_w, nview_r;
};

/* --- the hot set --- */

static uint64_t
set_key(uint64_t hash)
{
    return hash ? hash : 1;
}

static bool
set_has(const _Atomic uint64_t *set, uint64_t hash)
{
    uint64_t want = set_key(hash);
    for (unsigned i = 0; i < HOTSET_SLOTS; i++) {
        uint64_t v = atomic_load_explicit(&set[(want + i) % HOTSET_SLOTS],
                                          memory_order_relaxed);
        if (v == want)
            return true;
        if (v == 0)
            return false;
    }
    return false;
}

static void
set_add(_Atomic uint64_t *set, uint64_t hash)
{
    uint64_t want = set_key(hash);
    for (unsigned i = 0; i < HOTSET_SLOTS; i++) {
        _Atomic uint64_t *s = &set[(want + i) % HOTSET_SLOTS];
        uint64_t v = atomic_load_explicit(s, memory_order_relaxed);
        if (v == want)
            return;
        if (v == 0) {
            atomic_store_explicit(s, want, memory_order_relaxed);
            return;
        }
    }
}

static bool
is_hot(struct hotkey *h, uint64_t hash)
{
    /* acquire pairs with the release store of cur in rebuild_set() */
    unsigned cur = atomic_load_explicit(&h->cur, memory_order_acquire);
    return set_has(h->set[cur], hash);
}

/* --- lifecycle --- */

int
hotkey_create(struct cache *c)
{
    const struct tc_config *cfg = &c->cfg;
    if (!cfg->hot_pool_size)
        return 0;
    struct hotkey *h = calloc(1, sizeof(*h));
    if (!h) {
        err_set("no DRAM for hot-key tracking");
        return -ENOMEM;
    }
    h->sample = cfg->hotkey_sample ? cfg->hotkey_sample : 16;
    h->window = cfg->hotkey_window ? cfg->hotkey_window : 10;
    h->k = cfg->hotkey_k ? cfg->hotkey_k : 64;
    atomic_init(&h->rate, cfg->hot_write_rate ? cfg->hot_write_rate : 1000);
    h->item_max = (uint32_t)MIN((uint64_t)c->chunk_max, cfg->hot_pool_size / 8);
    pthread_mutex_init(&h->lock, NULL);
    h->last_ns = clock_rate_nsec();
    int rc = -EINVAL;
    if (h->k > TOPK_MAX_K) {
        err_set("hotkey_k %u is above %u", h->k, TOPK_MAX_K);
        goto err_free;
    }
    rc = -ENOMEM;
    h->view_w = calloc(h->k, sizeof(h->view_w[0]));
    h->view_r = calloc(h->k, sizeof(h->view_r[0]));
    if (!h->view_w || !h->view_r || topk_create(h->k, &h->w) != 0 ||
        topk_create(h->k, &h->r) != 0) {
        err_set("no DRAM for hot-key tracking");
        goto err_free;
    }
    if ((rc = dpool_create(cfg->hot_pool_size, &h->pool)) != 0)
        goto err_free;
    static const struct cache_module hotkey_module = {
        .thread_init = hotkey_thread_init,
        .thread_fini = hotkey_thread_fini,
        .close = hotkey_destroy,
    };
    if ((rc = cache_add_module(c, &hotkey_module)) != 0) {
        err_set("too many modules on one cache");
        dpool_destroy(h->pool);
        goto err_free;
    }
    c->hot = h;
    c->dram = h->pool;
    c->divert = true; /* a store may go to the hot pool (store.c) */
    return 0;

err_free:
    topk_destroy(h->w);
    topk_destroy(h->r);
    free(h->view_w);
    free(h->view_r);
    pthread_mutex_destroy(&h->lock);
    free(h);
    return rc;
}

void
hotkey_destroy(struct cache *c)
{
    struct hotkey *h = c->hot;
    if (!h)
        return;
    dpool_destroy(h->pool); /* the index goes too: no item outlives it */
    topk_destroy(h->w);
    topk_destroy(h->r);
    free(h->view_w);
    free(h->view_r);
    pthread_mutex_destroy(&h->lock);
    free(h);
    c->hot = NULL;
    c->dram = NULL;
    c->divert = c->seg != NULL;
}

int
hotkey_thread_init(struct cache_thread *t)
{
    if (!t->cache->hot)
        return 0;
    struct hotkey_tbuf *b = calloc(1, sizeof(*b));
    if (!b) {
        err_set("no DRAM for a thread's hot-key samples");
        return -ENOMEM;
    }
    pthread_mutex_init(&b->lock, NULL);
    b->rng = clock_nsec() ^ (uintptr_t)b;
    t->hk = b;
    return 0;
}

void
hotkey_thread_fini(struct cache_thread *t)
{
    struct hotkey_tbuf *b = t->hk;
    if (!b)
        return;
    /* t is still on c->threads: out of the tick's sight first */
    pthread_mutex_lock(&t->cache->threads_lock);
    t->hk = NULL;
    pthread_mutex_unlock(&t->cache->threads_lock);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* --- sampling --- */

/* One in h->sample operations lands in the thread's table. */
static void
sample(struct hotkey *h, struct hotkey_tbuf *b, struct tsample *tab,
       uint64_t hash, const void *key, uint32_t klen)
{
    if (h->sample > 1) {
        /* xorshift64: owner-only state */
        uint64_t x = b->rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b->rng = x;
        if (x % h->sample)
            return;
    }
    pthread_mutex_lock(&b->lock);
    struct tsample *single = NULL;
    for (unsigned i = 0; i < TBUF_PROBE; i++) {
        struct tsample *s = &tab[(hash + i) % TBUF_SLOTS];
        if (s->n == 0) {
            single = s;
            break;
        }
        if (s->hash == hash && s->klen == klen &&
            memcmp(s->key, key, klen) == 0) {
            s->n++;
            goto out;
        }
        if (s->n == 1 && !single)
            single = s;
    }
    /* A free slot, or else one holding a key sampled only once so far
     * (its one sample is lost): in a long-tailed stream the table would
     * otherwise fill with once-seen keys early in each tick and drop the
     * later samples of keys that matter. If every probed slot holds a key
     * seen more than once, this sample is dropped. */
    if (single) {
        single->hash = hash;
        single->klen = (uint8_t)klen;
        memcpy(single->key, key, klen);
        single->n = 1;
    }
out:
    pthread_mutex_unlock(&b->lock);
}

void
hotkey_note_read(struct cache_thread *t, uint64_t hash, const void *key,
                 uint32_t klen)
{
    if (t->hk)
        sample(t->cache->hot, t->hk, t->hk->r, hash, key, klen);
}

/* --- the write path --- */

int
hotkey_place(struct cache_thread *t, uint64_t hash, const void *key,
             uint32_t klen, const struct item_plan *plan, uint64_t *head)
{
    struct hotkey *h = t->cache->hot;
    void *p;

    if (!t->hk)
        return -ENOENT;
    sample(h, t->hk, t->hk->w, hash, key, klen);
    if (plan->nchain || plan->head_size > h->item_max || !is_hot(h, hash))
        return -ENOENT;
    if (dpool_alloc(h->pool, plan->head_size, &p) != 0)
        return -ENOENT; /* pool full: PMEM it is */
    if ((uintptr_t)p >= CACHE_DRAM_ADDR_LIMIT) {
        dpool_free(h->pool, p); /* cannot be named in 48 bits */
        return -ENOENT;
    }
    *head = CACHE_DRAM_OFF | (uintptr_t)p;
    return 0;
}

void
hotkey_write(uint64_t head, const struct item_plan *plan,
             const struct item_desc *hdr, const void *key,
             const struct item_src *val)
{
    char *p = cache_dram_ptr(head);
    struct item_hdr h = {
        .kind = ITEM_KIND_HEAD,
        .klen = hdr->klen,
        .iflags = hdr->iflags,
        .vlen = hdr->vlen,
        .exptime = hdr->exptime,
        .seq_hi = (uint32_t)(hdr->seq >> 32),
        .seq_lo = (uint32_t)hdr->seq, /* no CRC: a DRAM copy commits nowhere */
    };
    size_t at = sizeof(h) + h.klen;

    (void)plan;
    memcpy(p, &h, sizeof(h));
    memcpy(p + sizeof(h), key, h.klen);
    if (h.iflags & ITEM_HAS_FLAGS) {
        memcpy(p + at, &hdr->flags, sizeof(hdr->flags));
        at += sizeof(hdr->flags);
    }
    if (h.iflags & ITEM_HAS_CAS) {
        memcpy(p + at, &hdr->cas, sizeof(hdr->cas));
        at += sizeof(hdr->cas);
    }
    for (int i = 0; i < val->niov; i++) {
        if (!val->iov[i].iov_len)
            continue; /* an empty value may come as {NULL, 0} */
        memcpy(p + at, val->iov[i].iov_base, val->iov[i].iov_len);
        at += val->iov[i].iov_len;
    }
    /* release pairs with the acquire in walk_visit() */
    atomic_fetch_or_explicit(dpool_flags(p), HOT_WRITTEN, memory_order_release);
}

void
hotkey_count_store(struct cache_thread *t, uint64_t old_off, uint64_t head,
                   uint32_t vlen)
{
    /* a packed offset has the DRAM bit too (cache.h) */
    bool was = old_off && cache_off_dram(old_off) && !cache_off_packed(old_off);
    if (cache_off_dram(head) && !cache_off_packed(head)) {
        cache_stat_add(t, ST_HOT_BYTES_SAVED, vlen);
        if (!was)
            cache_stat_inc(t, ST_HOT_PROMOTIONS);
    } else if (was) {
        cache_stat_inc(t, ST_HOT_DEMOTIONS);
    }
}

/* --- the tick --- */

/* Fold every thread's samples into the top-K. Locks: h->lock held; takes
 * c->threads_lock, then each buffer's lock. */
static void
merge_locked(struct cache *c, struct hotkey *h)
{
    pthread_mutex_lock(&c->threads_lock);
    for (struct cache_thread *t = c->threads; t; t = t->next) {
        struct hotkey_tbuf *b = t->hk;
        if (!b)
            continue;
        pthread_mutex_lock(&b->lock);
        for (unsigned i = 0; i < TBUF_SLOTS; i++) {
            struct tsample *s = &b->w[i];
            if (s->n)
                topk_add(h->w, s->hash, s->key, s->klen,
                         (double)s->n * h->sample);
            s->n = 0;
            s = &b->r[i];
            if (s->n)
                topk_add(h->r, s->hash, s->key, s->klen,
                         (double)s->n * h->sample);
            s->n = 0;
        }
        pthread_mutex_unlock(&b->lock);
    }
    pthread_mutex_unlock(&c->threads_lock);
}

/* Fill a view (heaviest first) with rates from both top-Ks. Locks:
 * h->lock. */
static unsigned
view_locked(struct hotkey *h, bool by_reads, double scale,
            struct tc_hotkey *out)
{
    struct topk_entry *e = malloc(h->k * sizeof(*e));
    if (!e)
        return 0;
    struct topk *first = by_reads ? h->r : h->w;
    struct topk *other = by_reads ? h->w : h->r;
    unsigned n = topk_list(first, e, h->k);
    for (unsigned i = 0; i < n; i++) {
        struct tc_hotkey *v = &out[i];
        memset(v, 0, sizeof(*v));
        memcpy(v->key, e[i].key, e[i].klen);
        v->klen = e[i].klen;
        v->hash = e[i].hash;
        double o = topk_count(other, e[i].hash, e[i].key, e[i].klen) * scale;
        v->write_rate = by_reads ? o : e[i].count * scale;
        v->read_rate = by_reads ? e[i].count * scale : o;
    }
    free(e);
    return n;
}

/* The next hot set from the write view: in at the rate, out below half of
 * it (hysteresis, so a key near the threshold does not flap). Locks:
 * h->lock (the only writer of the tables). */
static void
rebuild_set_locked(struct hotkey *h)
{
    unsigned cur = atomic_load_explicit(&h->cur, memory_order_relaxed);
    unsigned nxt = 1 - cur;
    double rate = atomic_load_explicit(&h->rate, memory_order_relaxed);

    for (unsigned i = 0; i < HOTSET_SLOTS; i++)
        atomic_store_explicit(&h->set[nxt][i], 0, memory_order_relaxed);
    for (unsigned i = 0; i < h->nview_w; i++) {
        const struct tc_hotkey *v = &h->view_w[i];
        if (v->write_rate >= rate ||
            (v->write_rate >= rate / 2 && set_has(h->set[cur], v->hash)))
            set_add(h->set[nxt], v->hash);
    }
    /* release pairs with the acquire in is_hot() */
    atomic_store_explicit(&h->cur, nxt, memory_order_release);
}

struct cand {
    uint64_t off;
    uint64_t hash;
    bool dead;
    uint8_t klen;
    char key[TC_KEY_MAX];
};

struct walk {
    struct cache *c;
    struct hotkey *h;
    uint32_t now;
    unsigned skip; /* candidates to pass over (met in an earlier round) */
    unsigned n;
    struct cand cand[WALK_BATCH];
};

/* Under a pool list lock: collect DRAM items that are dead or whose key
 * left the hot set. Reads DRAM only. */
static int
walk_visit(void *arg, void *p)
{
    struct walk *w = arg;
    /* acquire pairs with the release in hotkey_write() */
    if (!(atomic_load_explicit(dpool_flags(p), memory_order_acquire) &
          HOT_WRITTEN))
        return 0;
    const struct item_hdr *it = p;
    uint64_t hash = cache_hash(w->c, item_key(it), it->klen);
    bool dead = cache_item_dead(w->c, it, w->now) != CACHE_LIVE;
    if (!dead && is_hot(w->h, hash))
        return 0;
    if (w->skip) {
        w->skip--;
        return 0;
    }
    struct cand *cd = &w->cand[w->n++];
    cd->off = CACHE_DRAM_OFF | (uintptr_t)p;
    cd->hash = hash;
    cd->dead = dead;
    cd->klen = it->klen;
    memcpy(cd->key, item_key(it), it->klen);
    return w->n == WALK_BATCH;
}

/* Remove a dead DRAM item if the index still holds it. */
static void
drop_dead(struct cache_thread *t, const struct cand *cd)
{
    struct cache *c = t->cache;
    enum cache_dead dead = CACHE_LIVE;
    struct htab_bucket *b = htab_lock(c->htab, cd->hash);
    _Atomic uint64_t *slot = htab_find_loc_locked(b, cache_loc(cd->off));
    if (slot) {
        /* the index holds it, so it is not freed under us */
        dead = cache_item_dead(c, cache_item_at(c, cd->off), clock_now());
        if (dead != CACHE_LIVE) {
            cache_floor_unlink(c, cd->hash, cd->off);
            htab_remove_locked(c->htab, slot);
        } else
            slot = NULL;
    }
    htab_unlock(b);
    if (!slot)
        return;
    cache_account_unlink(t, cd->off, dead, UNLINK_SWEPT);
    cache_stat_inc(t, ST_SWEEP_RECLAIMED);
    cache_defer_free(t, cd->off);
}

/* Copy a DRAM item to PMEM and switch the index if it still holds that
 * item with the expiry copied; the CAS is kept (clients see no change).
 * Context: no lock, no RCU section. */
static void
demote(struct cache_thread *t, const struct cand *cd)
{
    struct cache *c = t->cache;
    struct cache_key k = {c, cd->key, cd->klen};
    uint64_t loc = cache_loc(cd->off), head, tails[ITEM_MAX_TAILS];
    struct item_desc hdr;
    struct item_plan plan;
    bool moved = false;

    cache_read_lock();
    bool same = htab_lookup_rcu(c->htab, cd->hash, cache_match_key, &k) == loc;
    if (same)
        item_hdr_load(&hdr, cache_item_at(c, cd->off));
    cache_read_unlock();
    if (!same)
        return; /* replaced or removed meanwhile */
    item_plan(hdr.klen, hdr.iflags, hdr.vlen, c->chunk_max, &plan);
    if (reclaim_alloc_item(t, &plan, &head, tails) != 0)
        return; /* no PMEM: it stays in DRAM until the next tick */

    /* The read section keeps the DRAM item from being freed (and its
     * address reused) until the switch below is done. */
    cache_read_lock();
    if (htab_lookup_rcu(c->htab, cd->hash, cache_match_key, &k) == loc) {
        const struct item_hdr *it = cache_item_at(c, cd->off);
        struct iovec iov[1];
        struct item_src src = {iov,
                               item_value_iov(c->base, it, c->chunk_max, iov)};
        hdr.exptime = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
        /* PMEM: the copy, before publication, no lock held; committed only
         * once published (item_layout.h): a set of the key that replaces
         * the DRAM item first makes the switch below fail, one that
         * replaces the copy after it invalidates the copy before it
         * answers, and the commit then fails. The copy keeps the DRAM
         * item's sequence, and with it the CAS (item_layout.h): newer
         * than the PMEM item the DRAM one replaced, older than a set that
         * replaces it */
        uint32_t word = item_write(c->base, head, &plan, tails, &hdr,
                                   item_key(it), &src, true);
        pm_fence();
        TC_CRASH_POINT("hot.demote");
        slab_reset_bits(c->slab, head);
        cache_account(t, head, 1);
        struct htab_bucket *b = htab_lock(c->htab, cd->hash);
        _Atomic uint64_t *slot = htab_find_loc_locked(b, loc);
        /* a touch since the copy would be lost: try again next tick */
        if (slot &&
            __atomic_load_n(&it->exptime, __ATOMIC_RELAXED) == hdr.exptime) {
            htab_replace_locked(slot, cd->hash, cache_loc(head));
            moved = true;
        }
        htab_unlock(b);
        if (!moved) {
            cache_account(t, head, -1);
        } else {
            TC_CRASH_POINT("hot.demote.published");
            /* failed: a writer replaced the copy and retires it */
            (void)item_commit_copy(c->base, head, word);
        }
    }
    cache_read_unlock();
    if (!moved) {
        cache_free_unpublished(t, &plan, head, tails);
        return;
    }
    cache_account(t, cd->off, -1);
    cache_stat_inc(t, ST_HOT_DEMOTIONS);
    cache_defer_free(t, cd->off);
}

/* Demote the cooled DRAM items and remove the dead ones. */
static void
walk_pool(struct cache_thread *t)
{
    struct cache *c = t->cache;
    struct walk *w = malloc(sizeof(*w));
    if (!w)
        return;
    unsigned skip = 0;
    for (int round = 0; round < WALK_ROUNDS; round++) {
        w->c = c;
        w->h = c->hot;
        w->now = clock_now();
        w->skip = skip;
        w->n = 0;
        dpool_walk(c->hot->pool, walk_visit, w);
        for (unsigned i = 0; i < w->n; i++) {
            if (w->cand[i].dead)
                drop_dead(t, &w->cand[i]);
            else
                demote(t, &w->cand[i]);
        }
        if (w->n < WALK_BATCH)
            break;
        /* items that stayed (replaced meanwhile, no PMEM) are met again
         * next round unless passed over (blocks already unlinked stay in
         * the list until their grace period ends): move past them */
        skip += w->n;
    }
    free(w);
    cache_defer_flush(t);
}

void
hotkey_tick(struct cache_thread *t)
{
    struct cache *c = t->cache;
    struct hotkey *h = c->hot;
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    uint64_t now = clock_rate_nsec();
    /* steps closer than 1 ms (tc_maintain in a loop, a frozen test clock)
     * count as 1 ms, and so does a step back (a test clock set or
     * cleared) */
    double dt = now > h->last_ns ? (double)(now - h->last_ns) / 1e9 : 0;
    dt = MAX(dt, 0.001);
    h->last_ns = now;
    merge_locked(c, h);
    double a = exp(-dt / h->window);
    /* a steady r per second settles, before the decay, at a count of
     * r * dt / (1 - a) */
    double scale = (1 - a) / dt;
    h->nview_w = view_locked(h, false, scale, h->view_w);
    h->nview_r = view_locked(h, true, scale, h->view_r);
    topk_decay(h->w, a);
    topk_decay(h->r, a);
    rebuild_set_locked(h);
    pthread_mutex_unlock(&h->lock);
    walk_pool(t);
}

/* --- at a clean close --- */

/* Under a pool list lock: collect every written DRAM item, live or dead
 * (the tick's walk_visit, without the hot-set test). Reads DRAM only. */
static int
close_visit(void *arg, void *p)
{
    struct walk *w = arg;
    /* acquire pairs with the release in hotkey_write() */
    if (!(atomic_load_explicit(dpool_flags(p), memory_order_acquire) &
          HOT_WRITTEN))
        return 0;
    if (w->skip) {
        w->skip--;
        return 0;
    }
    const struct item_hdr *it = p;
    struct cand *cd = &w->cand[w->n++];
    cd->off = CACHE_DRAM_OFF | (uintptr_t)p;
    cd->hash = cache_hash(w->c, item_key(it), it->klen);
    cd->dead = cache_item_dead(w->c, it, w->now) != CACHE_LIVE;
    cd->klen = it->klen;
    memcpy(cd->key, item_key(it), it->klen);
    return w->n == WALK_BATCH;
}

/* Whether the index names the candidate's DRAM item. */
static bool
cand_held(struct cache *c, const struct cand *cd)
{
    struct cache_key k = {c, cd->key, cd->klen};
    cache_read_lock();
    bool held = htab_lookup_rcu(c->htab, cd->hash, cache_match_key, &k) ==
                cache_loc(cd->off);
    cache_read_unlock();
    return held;
}

void
hotkey_write_back(struct cache *c)
{
    if (!c->hot)
        return;
    struct cache_thread *t = cache_thread_get(c);
    struct walk *w = malloc(sizeof(*w));
    if (!t || !w) {
        free(w);
        log_warn("pool %s: no DRAM to write the hot pool back at close; its "
                 "items miss after the restart",
                 region_path(c->region));
        return;
    }
    uint64_t moved = 0, lost = 0;
    unsigned skip = 0;
    for (;;) {
        /* free what is unlinked now (no reader runs at close): the blocks
         * the last round moved, so that this walk meets only the ones it
         * passed over, and PMEM chunks awaiting their grace period, so
         * that the copies find them */
        cache_reclaim_limbo(t);
        w->c = c;
        w->h = c->hot;
        w->now = clock_now();
        w->skip = skip;
        w->n = 0;
        dpool_walk(c->hot->pool, close_visit, w);
        for (unsigned i = 0; i < w->n; i++) {
            const struct cand *cd = &w->cand[i];
            if (!cand_held(c, cd)) {
                skip++; /* not the index's: not ours to move or free */
                continue;
            }
            if (cd->dead) {
                drop_dead(t, cd);
                continue;
            }
            demote(t, cd);
            if (cand_held(c, cd)) {
                lost++; /* no PMEM for its copy: it stays */
                skip++;
            } else {
                moved++;
            }
        }
        if (w->n < WALK_BATCH)
            break;
    }
    free(w);
    if (moved)
        log_info("pool %s: %llu items of the DRAM hot pool written back at "
                 "close",
                 region_path(c->region), (unsigned long long)moved);
    if (lost)
        log_warn("pool %s: %llu items of the DRAM hot pool not written back "
                 "at close (no room in the pool); they miss after the "
                 "restart",
                 region_path(c->region), (unsigned long long)lost);
}

/* --- the operator's view --- */

int
hotkey_list(struct cache *c, bool by_reads, struct tc_hotkey *out, int max)
{
    struct hotkey *h = c->hot;
    if (!h || max <= 0)
        return 0;
    pthread_mutex_lock(&h->lock);
    unsigned n = by_reads ? h->nview_r : h->nview_w;
    if (n > (unsigned)max)
        n = (unsigned)max;
    memcpy(out, by_reads ? h->view_r : h->view_w, n * sizeof(out[0]));
    pthread_mutex_unlock(&h->lock);
    for (unsigned i = 0; i < n; i++) {
        struct cache_key k = {c, out[i].key, out[i].klen};
        cache_read_lock();
        uint64_t loc =
            htab_lookup_rcu(c->htab, out[i].hash, cache_match_key, &k);
        out[i].in_dram =
            loc && !cache_loc_packed(loc) && cache_off_dram(cache_off(loc));
        cache_read_unlock();
    }
    return (int)n;
}

void
hotkey_set_rate(struct cache *c, uint32_t rate)
{
    if (c->hot)
        atomic_store_explicit(&c->hot->rate, rate ? rate : 1,
                              memory_order_relaxed);
}

uint64_t
hotkey_pool_bytes(const struct cache *c)
{
    return c->hot ? dpool_used(c->hot->pool) : 0;
}

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
#include "src/engine/cache_packed.h"
#include "src/engine/hotkey.h"
#include "src/engine/ext.h"
#include "src/engine/packed.h"
#include "src/engine/pitem.h"
#include "tier/pm.h"

#include <errno.h>

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
static inline __attribute__((always_inline)) uint8_t
win_state(struct cache *c, const struct item_hdr *it, uint64_t off,
          const struct tc_get_opts *o, uint32_t now, bool claimed,
          uint32_t exp_before)
{
    if (claimed)
        return TC_WIN_TAKEN;
    if (o->no_win) /* a plain get: decided without reading the item */
        return TC_WIN_NONE;
    uint32_t exp = o->recache_before_touch
                       ? exp_before
                       : __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    /* an expiry this call's touch put in the past counts as below any R */
    bool due = (it->iflags & ITEM_STALE) ||
               (o->recache_below && exp != 0 &&
                (exp <= now || exp - now < o->recache_below));
    if (!due)
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

/* A live item inside the read section: touch, mark used, describe.
 * Inlined, as serve_rcu, and written straight into *out (built aside and
 * copied, the description cost a get some 30 instructions more). */
static inline __attribute__((always_inline)) void
describe_word_rcu(struct cache *c, struct item_hdr *it, uint64_t off,
                  const struct tc_get_opts *o, uint32_t now, void *word,
                  unsigned wcls, bool pmeta, struct tc_item_info *out)
{
    struct slab_seen seen;

    out->exptime_before = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    if (o->touch)
        store_exptime(it, off, cache_exptime(o->exptime, now));
    /* one call on one DRAM word: the fetched and win bits and the age
     * before this access (memcached's h, l and la=), then the CLOCK bit
     * and the time set; through the chunk's word when the caller found it
     * already (word: a batch's bucket pass, class wcls) */
    if (word) { /* inline: no call */
        slab_touch_seen_word(c->slab, off, word, now, !o->no_bump, pmeta,
                             &seen);
        seen.cls = (uint8_t)wcls;
    } else {
        cache_touch(c, off, now, !o->no_bump, &seen);
    }
    out->fetched = seen.fetched;
    out->win = win_state(c, it, off, o, now, seen.claimed, out->exptime_before);
    out->last_access = seen.age;
    out->flags = item_flags(it);
    out->exptime = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    out->cas = item_cas(it);
    out->vlen = it->vlen;
    out->stale = it->iflags & ITEM_STALE;
    out->slab_class = seen.cls;
    out->flash = it->kind == ITEM_KIND_FLASH;
    out->pending = 0;
}

static inline __attribute__((always_inline)) void
describe_rcu(struct cache *c, struct item_hdr *it, uint64_t off,
             const struct tc_get_opts *o, uint32_t now,
             struct tc_item_info *out)
{
    describe_word_rcu(c, it, off, o, now, NULL, 0, false, out);
}

/* Copy the value's pieces into a->buf, up to a->cap bytes. */
static void
copy_iov(const struct fetch_copy *a, const struct iovec *iov, int niov)
{
    size_t at = 0;
    for (int i = 0; i < niov && at < a->cap; i++) {
        size_t n = MIN(iov[i].iov_len, a->cap - at);
        memcpy((char *)a->buf + at, iov[i].iov_base, n);
        at += n;
    }
}

/* tc_get_copy's callback for a flash item's value (read after the
 * section by ext.c); a PMEM item is copied by copy_rcu without it. */
void
fetch_copy_value(void *arg, const struct tc_item_info *info,
                 const struct iovec *iov, int niov)
{
    struct fetch_copy *a = arg;
    copy_iov(a, iov, niov);
    if (a->info)
        *a->info = *info;
}

/* A copy out's destination and the key it looked up, whose compare kept
 * the chunk's DRAM word. */
struct copy_at {
    struct fetch_copy *cp;
    const struct cache_word_key *wk;
};

/* A live plain item's copy out (tc_get_copy) inside the read section: the
 * description written into the caller's, or, when it wants none, only the
 * bump (through the word the key compare found) and the class the hit is
 * counted in; a one-chunk value copied here, without an iovec or a
 * callback. Returns the class. */
static inline __attribute__((always_inline)) unsigned
copy_rcu(struct cache *c, struct item_hdr *it, uint64_t off,
         const struct tc_get_opts *o, uint32_t now, const struct copy_at *ca)
{
    struct fetch_copy *cp = ca->cp;
    unsigned cls;
    if (cp->info) {
        describe_rcu(c, it, off, o, now, cp->info);
        cls = cp->info->slab_class;
    } else if (likely(ca->wk->word != NULL)) {
        slab_touch_word(c->slab, off, ca->wk->word, now);
        cls = ca->wk->cls;
    } else {
        cls = cache_touch_cls(c, off, now);
    }
    if (likely(it->nchain == 0)) {
        const void *v = item_value(it);
        uint32_t vlen = it->vlen;
        if (unlikely(pm_reads_noted())) /* latency emulation: the read */
            pm_note_read(v, vlen);
        size_t n = MIN((size_t)vlen, cp->cap);
        if (n)
            memcpy(cp->buf, v, n);
        return cls;
    }
    struct iovec iov[ITEM_MAX_TAILS + 1];
    int niov = item_value_iov_chained(c->base, it, c->chunk_max, iov);
    for (int i = 0; i < niov; i++)
        pm_note_read(iov[i].iov_base, iov[i].iov_len);
    copy_iov(cp, iov, niov);
    return cls;
}

/* Serve a live item in PMEM inside the read section: describe, call fn
 * (ca: copy it out instead, copy_rcu). Returns its slab class (which the
 * description already looked up). */
static inline __attribute__((always_inline)) unsigned
serve_rcu(struct cache *c, struct item_hdr *it, uint64_t off,
          const struct tc_get_opts *o, uint32_t now, tc_value_fn *fn, void *arg,
          const struct copy_at *ca)
{
    struct tc_item_info info;
    struct iovec iov[ITEM_MAX_TAILS + 1];

    if (ca)
        return copy_rcu(c, it, off, o, now, ca);
    describe_rcu(c, it, off, o, now, &info);
    int n = item_value_iov(c->base, it, c->chunk_max, iov);
    if (fn) {
        /* the value is read in place: latency emulation charges it here */
        for (int i = 0; i < n; i++)
            pm_note_read(iov[i].iov_base, iov[i].iov_len);
        fn(arg, &info, iov, n);
    }
    return info.slab_class;
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

/* What a lookup inside the read section found, for the work after it. */
struct fetch_res {
    uint64_t loc; /* 0: no entry */
    enum cache_dead dead;
    bool flash;
    unsigned cls;      /* a live item's class (its header's, if on flash) */
    uint32_t prewrite; /* with flash: not a flash item but a packed one
                          whose touch needs a rewrite with this expiry */
    struct ext_hit h;  /* a live flash item: its locator and description */
};

/* The packed item at engine offset off: its view and state. A touch to
 * expiry exp (touch) is stored in place when it fits the item's form
 * (exp32 takes any; exp16 one in [exp_base, exp_base + 65534], or never),
 * its segment's exp_max raised first (DRAM) so that eager expiry does not
 * take the segment from under it; else *rewrite gets exp (the caller
 * rewrites it after the section: packed_rewrite_exp). Context: inside the
 * read section that found it. PMEM: a 2- or 4-byte store for a touch that
 * changes the expiry. */
static enum cache_dead
packed_touch_rcu(struct cache *c, uint64_t off, struct pitem_view *v,
                 bool touch, uint32_t exp, uint32_t now, uint32_t *rewrite)
{
    *rewrite = 0;
    if (cache_packed_view(c, off, v) != 0)
        return CACHE_LOST;
    enum cache_dead dead = cache_packed_dead(c, off, v, now);
    if (dead != CACHE_LIVE || !touch)
        return dead;
    uint64_t poff = cache_packed_pool(off);
    uint64_t page = poff & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    uint32_t in = (uint32_t)(poff - page);
    if (v->iflags & PITEM_HAS_EXP) {
        if (v->exp32 == exp)
            return dead;
        seg_exp_raise(c->seg, poff, exp ? exp : UINT32_MAX);
        pitem_set_exp32(c->base + page, in, exp);
        return dead;
    }
    uint32_t base = seg_exp_base(c->seg, poff);
    if (!pitem_exp16_fits(base, exp)) {
        *rewrite = exp;
        return dead;
    }
    uint16_t e16 = pitem_exp16_of(base, exp);
    if (v->exp16 != e16) {
        seg_exp_raise(c->seg, poff, exp ? exp : UINT32_MAX);
        pitem_set_exp16(c->base + page, in, e16);
    }
    return dead;
}

/* A live packed item's description (fetch_packed_rcu), and its recache
 * win (as win_state: taken, not for this reader, not due, or claimed now
 * by setting the slot's bit). exp: a touch's new expiry. */
static void
packed_info(struct cache *c, uint64_t loc, uint64_t hash,
            const struct pitem_view *v, const struct tc_get_opts *o,
            uint32_t now, uint32_t exp, struct tc_item_info *info)
{
    uint64_t off = cache_off(loc);
    memset(info, 0, sizeof(*info));
    info->exptime_before = cache_packed_exp(c, off, v);
    info->exptime = o->touch ? exp : info->exptime_before;
    info->flags = v->flags;
    info->cas = v->cas;
    info->vlen = v->vlen;
    info->stale = (v->iflags & PITEM_STALE) != 0;
    info->fetched = (loc & CACHE_LOC_FETCHED) != 0;
    info->last_access = cache_packed_age(c, cache_packed_pool(off), now);
    info->win = TC_WIN_NONE;
    if (loc & CACHE_LOC_WIN) {
        info->win = TC_WIN_TAKEN;
    } else if (!o->no_win) {
        uint32_t e =
            o->recache_before_touch ? info->exptime_before : info->exptime;
        bool due = info->stale || (o->recache_below && e != 0 &&
                                   (e <= now || e - now < o->recache_below));
        if (due)
            info->win = htab_set_bits_rcu(c->htab, hash, loc, CACHE_LOC_WIN)
                            ? TC_WIN_YOU
                            : TC_WIN_TAKEN;
    }
}

/* fetch_rcu_loc for a packed item: served from its segment. Its fetched
 * and win bits are its index slot's (set by a compare-and-swap of the slot:
 * slot, the one the lookup found it in, or NULL: htab_set_bits_rcu), its
 * access time its segment's (cache_packed_age). A copy out that wants no
 * description (tc_get_copy's usual call) builds none. Out of line: a slab
 * item's get pays only the test that sends it here. */
static __attribute__((noinline)) void
fetch_packed_rcu(struct cache *c, uint64_t loc, uint64_t hash,
                 _Atomic uint64_t *slot, const struct tc_get_opts *o,
                 uint32_t now, tc_value_fn *fn, void *arg,
                 const struct copy_at *ca, struct fetch_res *r)
{
    uint64_t off = cache_off(loc);
    uint64_t poff = cache_packed_pool(off);
    struct pitem_view v;
    struct tc_item_info info;
    uint32_t exp = 0;

    r->cls = SLAB_NO_CLASS;
    if (o->touch) {
        exp = cache_exptime(o->exptime, now);
        r->dead = packed_touch_rcu(c, off, &v, true, exp, now, &r->prewrite);
    } else {
        r->prewrite = 0;
        r->dead = likely(cache_packed_view(c, off, &v) == 0)
                      ? cache_packed_dead(c, off, &v, now)
                      : CACHE_LOST;
    }
    if (r->dead != CACHE_LIVE)
        return;
    r->flash = r->prewrite != 0; /* the rewrite after the section */
    bool described = !ca || ca->cp->info;
    if (described) /* before the bump: the age before this access */
        packed_info(c, loc, hash, &v, o, now, exp, &info);
    if (!o->no_bump) {
        const uint64_t bits = CACHE_LOC_REF | CACHE_LOC_FETCHED;
        if ((loc & bits) != bits) {
            if (slot)
                htab_slot_set_bits_rcu(slot, loc, bits);
            else
                htab_set_bits_rcu(c->htab, hash, loc, bits);
        }
        cache_packed_touch(c, poff, now);
    }
    if (unlikely(pm_reads_noted())) /* latency emulation: the read */
        pm_note_read(v.value, v.vlen);
    if (ca) {
        if (ca->cp->info)
            *ca->cp->info = info;
        size_t n = MIN((size_t)v.vlen, ca->cp->cap);
        if (n)
            memcpy(ca->cp->buf, v.value, n);
        return;
    }
    if (fn) {
        struct iovec iov = {(void *)v.value, v.vlen};
        fn(arg, &info, &iov, 1);
    }
}

/* fetch_packed_rcu for a plain tc_get_copy that wants no description
 * (its usual call): the item's state and value from one look at its
 * header (pitem_peek) and its segment's record, then the bump and the
 * copy, as fetch_packed_rcu's. */
static inline __attribute__((always_inline)) void
copy_packed_rcu(struct cache *c, uint64_t loc, _Atomic uint64_t *slot,
                uint32_t now, struct fetch_copy *cp, struct fetch_res *r)
{
    uint64_t poff = cache_packed_pool(cache_off(loc));
    uint32_t in = (uint32_t)(poff & (POOL_PAGE_SIZE - 1));
    const char *it = c->base + poff;
    uint32_t vat, vlen, exp;

    r->cls = SLAB_NO_CLASS;
    r->prewrite = 0;
    if (unlikely(!pitem_peek(it, POOL_PAGE_SIZE - in,
                             seg_rec_exp_base(c->seg_rec, poff), &vat, &vlen,
                             &exp))) {
        r->dead = CACHE_LOST;
        return;
    }
    r->dead = cache_packed_judge(
        c, exp, seg_rec_seq_base(c->seg_rec, poff) + in / 4, now);
    if (r->dead != CACHE_LIVE)
        return;
    /* one compare-and-swap from the word the lookup saw: a slot changed
     * meanwhile keeps what it has (the bits are hints) */
    const uint64_t bits = CACHE_LOC_REF | CACHE_LOC_FETCHED;
    if ((loc & bits) != bits) {
        uint64_t w = atomic_load_explicit(slot, memory_order_relaxed);
        if ((w & HTAB_LOC_MASK) == loc)
            atomic_compare_exchange_strong_explicit(
                slot, &w, w | bits, memory_order_relaxed, memory_order_relaxed);
    }
    cache_packed_touch(c, poff, now);
    if (unlikely(pm_reads_noted())) /* latency emulation: the read */
        pm_note_read(it + vat, vlen);
    size_t n = MIN((size_t)vlen, cp->cap);
    if (n)
        memcpy(cp->buf, it + vat, n);
}

/* Serve what the index holds for a key at loc (0: nothing), a live plain
 * item in place (ca: copied out, see serve_rcu). Context: inside the read
 * section that found loc. */
static inline __attribute__((always_inline)) void
fetch_rcu_loc(struct cache *c, uint64_t loc, uint64_t hash,
              _Atomic uint64_t *slot, const struct tc_get_opts *o, uint32_t now,
              tc_value_fn *fn, void *arg, const struct copy_at *ca,
              struct fetch_res *r)
{
    r->dead = CACHE_LIVE;
    r->flash = false;
    r->loc = loc;
    if (!r->loc)
        return;
    uint64_t off = cache_off(r->loc);
    struct item_hdr *it;
    if (unlikely(off & CACHE_SPECIAL_OFF)) {
        if (cache_off_packed(off)) {
            /* (o is a constant where ca is not NULL: only the info test
             * is left) */
            if (ca && slot && !o->touch && o->no_win && !o->no_bump &&
                !ca->cp->info)
                copy_packed_rcu(c, r->loc, slot, now, ca->cp, r);
            else
                fetch_packed_rcu(c, r->loc, hash, slot, o, now, fn, arg, ca, r);
            return;
        }
        it = (struct item_hdr *)cache_dram_ptr(off);
    } else {
        it = (struct item_hdr *)item_at(c->base, off);
    }
    r->dead = cache_item_dead(c, it, now);
    r->flash = it->kind == ITEM_KIND_FLASH;
    if (r->dead == CACHE_LIVE && r->flash) {
        r->prewrite = 0;
        flash_rcu(c, it, r->loc, hash, o, now, &r->h);
        r->cls = r->h.info.slab_class;
    } else if (r->dead == CACHE_LIVE) {
        r->cls = serve_rcu(c, it, cache_off(r->loc), o, now, fn, arg, ca);
    }
}

/* Look a key up and serve a live plain item. Context: inside the read
 * section. Inlined into both callers: as a call, it and fetch_after cost
 * a single get some 60 instructions (cachegrind). */
static inline __attribute__((always_inline)) void
fetch_rcu(struct cache *c, struct cache_key *k, uint64_t hash,
          htab_match_fn *match, const struct tc_get_opts *o, uint32_t now,
          tc_value_fn *fn, void *arg, const struct copy_at *ca,
          struct fetch_res *r)
{
    /* a copy's compare is inline (cache_match_key_word), so its scan is,
     * which gives a packed item's bump the slot */
    _Atomic uint64_t *slot = NULL;
    uint64_t loc =
        ca ? htab_lookup_slot_rcu_inline(c->htab, hash, match, k, &slot)
           : htab_lookup_rcu(c->htab, hash, match, k);
    fetch_rcu_loc(c, loc, hash, slot, o, now, fn, arg, ca, r);
}

/* Does fetch_after have more to do than count (read flash, unlink)? */
static inline bool
fetch_after_heavy(const struct fetch_res *r)
{
    return r->loc && (r->dead != CACHE_LIVE || r->flash);
}

/* After the section (or inside it when !fetch_after_heavy): the flash read,
 * the hit and miss counters, the unlink of a dead item. */
static inline __attribute__((always_inline)) int
fetch_after(struct cache_thread *t, const void *key, uint32_t klen,
            uint64_t hash, const struct tc_get_opts *o, tc_value_fn *fn,
            void *arg, struct fetch_res *r)
{
    uint64_t loc = r->loc;
    enum cache_dead dead = r->dead;

    /* the value of a flash item is read now, outside the section; a
     * failed read is a miss (counted and the header dropped by ext.c) */
    if (loc && dead == CACHE_LIVE && r->flash && r->prewrite) {
        /* a packed item's touch that did not fit it: served already; a
         * writer that replaced it meanwhile wins */
        (void)packed_rewrite_exp(t, hash, loc, r->prewrite);
    } else if (loc && dead == CACHE_LIVE && r->flash) {
        int rc = ext_get(t, key, klen, &r->h, o, fn, arg);
        if (rc == EXT_PENDING)
            return TC_OK; /* counted when the read completes */
        if (rc != TC_OK)
            loc = 0;
    }

    /* memcached counts a gat as a touch: touch_hits/misses, not
     * get_hits/misses */
    if (loc && dead == CACHE_LIVE) {
        cache_cls_inc(t, r->cls, o->touch ? CLS_TOUCH_HITS : CLS_GET_HITS);
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

static inline void
fetch_count(struct cache_thread *t, const struct tc_get_opts *o)
{
    cache_stat_inc(t, ST_CMD_GET);
    if (o->touch)
        cache_stat_inc(t, ST_CMD_TOUCH);
}

/* A get with options o: inlined into fetch_get and, with its options a
 * constant, into fetch_get_plain and fetch_get_copy (cp: a copy out, fn
 * and arg then fetch_copy_value and cp). */
static inline __attribute__((always_inline)) int
fetch_get_with(struct cache_thread *t, const void *key, uint32_t klen,
               const struct tc_get_opts *o, tc_value_fn *fn, void *arg,
               struct fetch_copy *cp)
{
    struct cache *c = t->cache;
    uint64_t hash = cache_hash(c, key, klen);
    uint32_t now = clock_now();
    struct fetch_res r;

    cache_flush_check(c, now);
    fetch_count(t, o);
    cache_read_lock();
    if (cp) { /* the compare keeps the chunk's word for the touch */
        /* word and cls: written by every compare, read after a match */
        struct cache_word_key wk;
        wk.k = (struct cache_key){c, key, klen};
        struct copy_at ca = {cp, &wk};
        fetch_rcu(c, &wk.k, hash, cache_match_key_word, o, now, fn, arg, &ca,
                  &r);
    } else {
        struct cache_key k = {c, key, klen};
        fetch_rcu(c, &k, hash, cache_match_key, o, now, fn, arg, NULL, &r);
    }
    cache_read_unlock();
    if (c->hot && r.loc && r.dead == CACHE_LIVE)
        hotkey_note_read(t, hash, key, klen);
    return fetch_after(t, key, klen, hash, o, fn, arg, &r);
}

int
fetch_get(struct cache_thread *t, const void *key, uint32_t klen,
          const struct tc_get_opts *o, tc_value_fn *fn, void *arg)
{
    return fetch_get_with(t, key, klen, o, fn, arg, NULL);
}

/* A plain get's options are known here: their tests fold away (touch,
 * recache win, bump; cachegrind: 10 instructions a get). */
static const struct tc_get_opts fetch_plain = {.no_win = true};

int
fetch_get_plain(struct cache_thread *t, const void *key, uint32_t klen,
                tc_value_fn *fn, void *arg)
{
    return fetch_get_with(t, key, klen, &fetch_plain, fn, arg, NULL);
}

int
fetch_get_copy(struct cache_thread *t, const void *key, uint32_t klen,
               struct fetch_copy *cp)
{
    return fetch_get_with(t, key, klen, &fetch_plain, fetch_copy_value, cp, cp);
}

/*
 * Batched gets. A group of up to FETCH_GROUP keys goes through three passes
 * so that the DRAM misses of different keys overlap: hash every key and
 * prefetch its home bucket; then, inside the read section, read each chain
 * (by now arriving: one call for the group, htab_first_many_rcu) and keep
 * the first location its tag matches and its slot, prefetch that item and,
 * for a slab chunk, its DRAM word (one call: slab_prefetch_words), kept
 * too; then serve each key in order. A key whose first tag match has its
 * key is served from that location: the location was read (with acquire)
 * in this same read section, so the item cannot be freed under it, and the
 * get takes effect when the bucket was read (a key deleted or set again
 * after that answers the value the bucket held). A live slab or packed
 * item is served inline, as the single get's copy path serves it: the
 * compare and the touch through what the pass kept (the chunk word, the
 * slot for a packed item's bits), no second scan, the callback called
 * directly; a key with no tag match in its chain is a miss without a
 * second look. Anything else (a key that differs from its first match, a
 * DRAM or dead item, a flash item, a touch of a packed one, every key
 * after the section was closed) goes out of line (many_slow) through
 * fetch_get's own code. A key whose work needs the section closed (a flash
 * read, the unlink of a dead item) closes it, does that work, and opens a
 * new one; the commands, the fast paths' hits and the hot-key samples of
 * a group are counted after its section. The serving pass is built apart
 * for a group of slab items only and of packed items only (the plain
 * options): with both stores' fast paths in one loop, either's registers
 * spilled (cachegrind: some 10 instructions a key).
 */
#define FETCH_GROUP 16
/* Item lines prefetched per tag match: the header, key and the start of
 * the value of a small item. */
#define FETCH_ITEM_LINES 3

struct many_call {
    tc_many_fn *fn;
    void *arg;
    size_t i;
    bool stop;
};

static void
many_value(void *arg, const struct tc_item_info *info, const struct iovec *iov,
           int niov)
{
    struct many_call *m = arg;
    if (!m->fn(m->arg, m->i, info, iov, niov))
        m->stop = true;
}

static inline bool
key_ok(const struct tc_key *k)
{
    return k->klen != 0 && k->klen <= TC_KEY_MAX;
}

/* Prefetch the items the home bucket's tag matches point at (tc_prefetch). */
static void
prefetch_items(struct cache *c, uint64_t hash)
{
    uint64_t locs[HTAB_SLOTS];
    unsigned n = htab_peek(c->htab, hash, locs);
    for (unsigned j = 0; j < n; j++) {
        uint64_t off = cache_off(locs[j]);
        const char *it = cache_off_packed(off)
                             ? c->base + cache_packed_pool(off)
                             : (const char *)cache_item_at(c, off);
        for (int l = 0; l < FETCH_ITEM_LINES; l++)
            __builtin_prefetch(it + l * CACHE_LINE, 0, 3);
        if (likely(!(off & CACHE_SPECIAL_OFF)))
            slab_prefetch(c->slab, off);
    }
}

/* The bucket pass's prefetch of the item at loc (0: none) for the key
 * whose compare and value read follow: its first lines. Returns its
 * offset if it is a slab chunk, whose DRAM word the caller prefetches
 * (slab_prefetch_words), else SLAB_NO_OFF. */
static inline __attribute__((always_inline)) uint64_t
many_prefetch(struct cache *c, uint64_t loc)
{
    uint64_t off = cache_off(loc);
    uint64_t slab_off = SLAB_NO_OFF;
    const char *it;

    if (!loc)
        return SLAB_NO_OFF;
    if (likely(!(off & CACHE_SPECIAL_OFF))) {
        it = (const char *)item_at(c->base, off);
        slab_off = off;
    } else if (cache_off_packed(off)) {
        it = c->base + cache_packed_pool(off);
    } else {
        it = (const char *)cache_dram_ptr(off);
    }
    for (int l = 0; l < FETCH_ITEM_LINES; l++)
        __builtin_prefetch(it + l * CACHE_LINE, 0, 3);
    return slab_off;
}

/* Whether the item at loc (the bucket pass's, read in this section) has
 * the key: a slab chunk's and a packed item's compare inline. */
static inline __attribute__((always_inline)) bool
many_key_equals(struct cache *c, uint64_t loc, const void *key, uint32_t klen)
{
    uint64_t off = cache_off(loc);
    if (unlikely(off & CACHE_SPECIAL_OFF)) {
        if (cache_off_packed(off))
            return cache_packed_key_equals(c, off, key, klen);
        struct cache_key k = {c, key, klen};
        return cache_match_special(&k, off);
    }
    return item_key_equals(item_at(c->base, off), key, klen);
}

/* A live slab item a batch key found (its chunk word and class from the
 * bucket pass, its key compared equal), served: described (the touch
 * through the word), handed to the caller's callback (no many_value; a
 * callback that says stop sets *stop and call->stop), its hit counted.
 * False, with nothing done, for an item the slow path must serve (dead,
 * on flash). Context: inside the read section its bucket pass ran in. */
static inline __attribute__((always_inline)) bool
many_slab_rcu(struct cache_thread *t, uint64_t off, void *word, unsigned cls,
              bool pmeta, const struct tc_get_opts *o, uint32_t now,
              struct many_call *call, size_t at, bool *stop)
{
    struct cache *c = t->cache;
    struct item_hdr *it = (struct item_hdr *)item_at(c->base, off);
    struct tc_item_info info;
    struct iovec iov[ITEM_MAX_TAILS + 1];

    if (unlikely(cache_item_dead(c, it, now) != CACHE_LIVE ||
                 it->kind == ITEM_KIND_FLASH))
        return false;
    describe_word_rcu(c, it, off, o, now, word, cls, pmeta, &info);
    if (call->fn) {
        int n = item_value_iov(c->base, it, c->chunk_max, iov);
        if (unlikely(pm_reads_noted())) /* latency emulation: the read */
            for (int j = 0; j < n; j++)
                pm_note_read(iov[j].iov_base, iov[j].iov_len);
        if (!call->fn(call->arg, at, &info, iov, n))
            *stop = call->stop = true;
    }
    return true; /* counted in its class by the caller (many_hits) */
}

/* What a fast path did with a key at its bucket pass's location. */
enum many_how {
    MANY_LOOKUP, /* not its key there: a full lookup (or a miss) */
    MANY_AT_LOC, /* its key, for the slow path to serve from there */
    MANY_SERVED, /* served and counted (but for its hit: the caller's) */
};

/* The same for a packed item, without a touch (a touch may need a
 * rewrite: the slow path's), its key compared here too (as
 * cache_packed_key_equals) so that its header is decoded once: its state
 * and description from one look at that header (pitem_peek, the flags and
 * CAS beside the value), its REF and FETCHED bits set through the slot
 * the bucket pass read, as fetch_packed_rcu does with the slot. */
static inline __attribute__((always_inline)) enum many_how
many_packed_rcu(struct cache_thread *t, uint64_t loc, _Atomic uint64_t *slot,
                uint64_t hash, const struct tc_key *key,
                const struct tc_get_opts *o, uint32_t now,
                struct many_call *call, size_t at, bool *stop)
{
    struct cache *c = t->cache;
    uint64_t poff = cache_packed_pool(cache_off(loc));
    uint32_t in = (uint32_t)(poff & (POOL_PAGE_SIZE - 1));
    const char *it = c->base + poff;
    uint32_t vat, vlen, exp;
    struct tc_item_info info;
    uint8_t fl = (uint8_t)it[1];

    if ((uint8_t)it[0] != key->klen ||
        !item_key_bytes_equal((const unsigned char *)it +
                                  sizeof(struct pitem_hdr) +
                                  ((fl & PITEM_HAS_EXP) ? 4u : 0u),
                              key->key, (uint32_t)key->klen))
        return MANY_LOOKUP;
    if (unlikely(!pitem_peek(it, POOL_PAGE_SIZE - in,
                             seg_rec_exp_base(c->seg_rec, poff), &vat, &vlen,
                             &exp)))
        return MANY_AT_LOC;
    uint64_t seq = seg_rec_seq_base(c->seg_rec, poff) + in / 4;
    if (unlikely(cache_packed_judge(c, exp, seq, now) != CACHE_LIVE))
        return MANY_AT_LOC;
    /* as packed_info, before the bump: the age before this access */
    uint32_t tail = vat - ((fl & PITEM_HAS_CAS) ? 8u : 0u);
    info.flags = fl & PITEM_CFLAGS_MASK;
    if (fl & PITEM_HAS_FLAGS)
        __builtin_memcpy(&info.flags, it + tail - 4, 4);
    info.cas = seq;
    if (fl & PITEM_HAS_CAS)
        __builtin_memcpy(&info.cas, it + tail, 8);
    info.exptime = exp;
    info.exptime_before = exp;
    info.vlen = vlen;
    info.fetched = (loc & CACHE_LOC_FETCHED) != 0;
    info.stale = (fl & PITEM_STALE) != 0;
    info.slab_class = 0;
    /* the segment's time read once for the age and the bump below (as
     * cache_packed_age and cache_packed_touch) */
    _Atomic uint32_t *ptime = &c->packed_time[poff >> POOL_PAGE_SHIFT];
    uint32_t then = atomic_load_explicit(ptime, memory_order_relaxed);
    uint32_t age = now > then ? now - then : 0;
    info.last_access = age < TC_LAST_ACCESS_CAP ? age : TC_LAST_ACCESS_CAP;
    info.flash = false;
    info.pending = 0;
    info.win = TC_WIN_NONE;
    if (loc & CACHE_LOC_WIN) {
        info.win = TC_WIN_TAKEN;
    } else if (!o->no_win) {
        bool due = info.stale || (o->recache_below && exp != 0 &&
                                  (exp <= now || exp - now < o->recache_below));
        if (due)
            info.win = htab_set_bits_rcu(c->htab, hash, loc, CACHE_LOC_WIN)
                           ? TC_WIN_YOU
                           : TC_WIN_TAKEN;
    }
    if (!o->no_bump) {
        /* one compare-and-swap from the word the bucket pass saw, as
         * copy_packed_rcu's: a slot changed meanwhile keeps what it has
         * (the bits are hints) */
        const uint64_t bits = CACHE_LOC_REF | CACHE_LOC_FETCHED;
        if ((loc & bits) != bits) {
            uint64_t sw = atomic_load_explicit(slot, memory_order_relaxed);
            if ((sw & HTAB_LOC_MASK) == loc)
                atomic_compare_exchange_strong_explicit(slot, &sw, sw | bits,
                                                        memory_order_relaxed,
                                                        memory_order_relaxed);
        }
        if (then != now)
            atomic_store_explicit(ptime, now, memory_order_relaxed);
    }
    if (call->fn) {
        struct iovec iov = {(void *)(it + vat), vlen};
        if (unlikely(pm_reads_noted())) /* latency emulation: the read */
            pm_note_read(iov.iov_base, vlen);
        if (!call->fn(call->arg, at, &info, &iov, 1))
            *stop = call->stop = true;
    }
    return MANY_SERVED; /* its hit counted by the caller (many_hits) */
}

/* A batch key the fast paths did not serve: looked up in full (loc 0),
 * or served from loc (the bucket pass's, its key compared equal) as a
 * single get serves it, then counted, a flash read or the unlink of a
 * dead item done with the section closed (and a new one opened: *fresh
 * false). Returns the key's code. Out of line: the group's loop keeps
 * only the fast paths. */
static __attribute__((noinline)) int
many_slow(struct cache_thread *t, const struct tc_key *key, uint64_t hash,
          uint64_t loc, _Atomic uint64_t *slot, const struct tc_get_opts *o,
          uint32_t now, struct many_call *call, size_t at, bool *fresh,
          bool *noted)
{
    struct cache *c = t->cache;
    tc_value_fn *vfn = call->fn ? many_value : NULL;
    struct fetch_res r;
    int rc;

    call->i = at; /* for many_value */
    if (loc) {
        fetch_rcu_loc(c, loc, hash, slot, o, now, vfn, call, NULL, &r);
    } else {
        struct cache_key k = {c, key->key, (uint32_t)key->klen};
        fetch_rcu(c, &k, hash, cache_match_key, o, now, vfn, call, NULL, &r);
    }
    *noted = c->hot && r.loc && r.dead == CACHE_LIVE;
    if (fetch_after_heavy(&r)) {
        cache_read_unlock();
        rc = fetch_after(t, key->key, (uint32_t)key->klen, hash, o, vfn, call,
                         &r);
        cache_read_lock();
        *fresh = false;
    } else {
        rc = fetch_after(t, key->key, (uint32_t)key->klen, hash, o, vfn, call,
                         &r);
    }
    return rc;
}

/* n more hits of class cls (SLAB_NO_CLASS: the total's slot), as n calls
 * of cache_cls_inc: a group's fast-path hits, counted in runs of one class
 * (one load and store a run, not a key). */
static inline void
many_hits(struct cache_thread *t, unsigned cls, enum cache_cls_stat s,
          int64_t n)
{
    if (n == 0)
        return;
    if (unlikely(cls >= SLAB_MAX_CLASSES)) {
        cache_stat_add(t, cache_cls_total[s], n);
        return;
    }
    int64_t v = atomic_load_explicit(&t->cls_cmd[cls][s], memory_order_relaxed);
    atomic_store_explicit(&t->cls_cmd[cls][s], v + n, memory_order_relaxed);
}

/* A batch key's record through the three passes: its hash and the first
 * tag match in its chain (f, htab_first_many_rcu), then a slab chunk's
 * DRAM word and class (w, slab_prefetch_words), so that serving neither
 * scans the bucket again nor finds the word again (the single get's copy
 * path does the same). One array of them: one index for the passes. */
struct many_key {
    struct htab_first f;
    struct slab_word_ref w; /* w.word NULL: not a slab chunk */
};

/* What a group's serving pass leaves for after its read section: the
 * hot-key samples and the fast paths' hits (a run of one slab class, and
 * packed ones). */
struct many_tally {
    uint32_t note; /* keys whose hits the hot-key tracker samples */
    unsigned run_cls;
    int64_t run, packed_hits;
};

/* The store kinds a serving pass is built for (many_serve): a group's
 * loop without the other kind's fast path keeps its registers for its
 * own (an item of a kind left out goes the slow way, served the same). */
#define MANY_SLAB 1u
#define MANY_PACKED 2u

/* A group's serving pass (the third), inside the read section the bucket
 * pass ran in (closed and opened again by a key whose work needs it
 * closed: fresh false from there on). Returns the keys done. Inlined
 * with kinds a constant. */
static inline __attribute__((always_inline)) size_t
many_serve(struct cache_thread *t, const struct tc_key *keys, size_t base,
           size_t m, const struct tc_get_opts *o, struct many_call *call,
           const struct many_key *mk, uint32_t bad, int *rc_at, uint32_t now,
           bool pmeta, unsigned kinds, struct many_tally *y)
{
    struct cache *c = t->cache;
    const enum cache_cls_stat hs = o->touch ? CLS_TOUCH_HITS : CLS_GET_HITS;
    bool fresh = true; /* still in the section the bucket pass ran in */
    bool stop = false; /* the callback said so (call->stop) */
    size_t i;

    for (i = 0; i < m && !stop; i++) {
        const struct many_key *k = &mk[i];
        uint64_t loc = k->f.loc;
        uint64_t off = cache_off(loc);
        bool noted = false;
        int rc;

        enum many_how how = MANY_LOOKUP;
        if (likely(fresh && loc)) {
            if ((kinds & MANY_PACKED) && cache_off_packed(off) && !o->touch) {
                how = many_packed_rcu(t, loc, k->f.slot, k->f.hash, &keys[i], o,
                                      now, call, base + i, &stop);
                y->packed_hits += how == MANY_SERVED;
            } else if ((kinds & MANY_SLAB) && likely(k->w.word != NULL)) {
                /* a slab chunk (a word only for one): its compare inline */
                if (item_key_equals(item_at(c->base, off), keys[i].key,
                                    (uint32_t)keys[i].klen)) {
                    how = MANY_AT_LOC;
                    if (likely(many_slab_rcu(t, off, k->w.word, k->w.cls, pmeta,
                                             o, now, call, base + i, &stop))) {
                        how = MANY_SERVED;
                        if (unlikely(k->w.cls != y->run_cls)) {
                            many_hits(t, y->run_cls, hs, y->run);
                            y->run_cls = k->w.cls;
                            y->run = 0;
                        }
                        y->run++;
                    }
                }
            } else if (many_key_equals(c, loc, keys[i].key,
                                       (uint32_t)keys[i].klen)) {
                how = MANY_AT_LOC; /* in DRAM, or packed with a touch */
            }
        }
        if (likely(how == MANY_SERVED)) {
            rc = TC_OK;
            noted = c->hot != NULL;
        } else if (how == MANY_AT_LOC) {
            rc = many_slow(t, &keys[i], k->f.hash, loc, k->f.slot, o, now, call,
                           base + i, &fresh, &noted);
            stop = call->stop;
        } else if (unlikely(bad & (1u << i))) {
            rc = -EINVAL;
        } else if (likely(fresh && !loc)) {
            /* not in the index as the bucket pass saw it */
            cache_stat_inc(t, o->touch ? ST_TOUCH_MISSES : ST_GET_MISSES);
            rc = TC_NOT_FOUND;
        } else {
            rc = many_slow(t, &keys[i], k->f.hash, 0, NULL, o, now, call,
                           base + i, &fresh, &noted);
            stop = call->stop;
        }
        if (unlikely(noted))
            y->note |= 1u << i;
        rc_at[i] = rc;
    }
    return i;
}

/* One group: the number of keys done (m unless the callback stopped).
 * Inlined into fetch_get_many's two cases (any options, and tc_get_many's
 * without options, whose tests then fold away; with split, its serving
 * pass is built three times: a group of slab items only, of packed items
 * only, and any other). */
static inline __attribute__((always_inline)) size_t
fetch_group(struct cache_thread *t, const struct tc_key *keys, size_t base,
            size_t m, const struct tc_get_opts *o, struct many_call *call,
            int *rcs, bool split)
{
    struct cache *c = t->cache;
    struct many_key mk[FETCH_GROUP];
    uint32_t bad = 0; /* keys that are not keys (-EINVAL) */
    int spare[FETCH_GROUP];
    int *rc_at = rcs ? rcs + base : spare; /* no test a key */
    uint32_t now = clock_now();
    uint64_t mask;
    size_t i;

    const struct htab_bucket *tb = htab_prefetch_table(c->htab, &mask);
    for (i = 0; i < m; i++) {
        if (unlikely(!key_ok(&keys[i]))) {
            bad |= 1u << i;
            mk[i].f.hash = 0; /* looked at in the bucket pass, not used */
            continue;
        }
        uint64_t h = cache_hash(c, keys[i].key, (uint32_t)keys[i].klen);
        mk[i].f.hash = h;
        __builtin_prefetch(&tb[h & mask], 0, 3);
    }
    cache_flush_check(c, now);
    cache_read_lock();
    /* one pass over the buckets (one call), the items' prefetches, then
     * their chunk words' (one call) */
    htab_first_many_rcu(c->htab, &mk[0].f, (unsigned)m, sizeof(mk[0]));
    for (uint32_t b = bad; unlikely(b); b &= b - 1)
        mk[__builtin_ctz(b)].f.loc = 0; /* no item: tested as a miss is */
    bool slab = false;                  /* any slab chunk */
    uint64_t any = 0; /* the locations or'ed: any packed one's bit */
    for (i = 0; i < m; i++) {
        uint64_t loc = mk[i].f.loc;
        mk[i].w.off = many_prefetch(c, loc);
        mk[i].w.word = NULL;
        slab |= mk[i].w.off != SLAB_NO_OFF;
        any |= loc;
    }
    unsigned kinds = (slab ? MANY_SLAB : 0) | /* of the group's items */
                     (cache_loc_packed(any) ? MANY_PACKED : 0);
    bool pmeta = false; /* the slab's ablation (slab_touch_seen_word) */
    if (kinds & MANY_SLAB) {
        slab_prefetch_words(c->slab, &mk[0].w, (unsigned)m, sizeof(mk[0]));
        pmeta = slab_pmeta_on(c->slab);
    }
    struct many_tally y = {0, SLAB_NO_CLASS, 0, 0};
    if (split && kinds == MANY_SLAB)
        i = many_serve(t, keys, base, m, o, call, mk, bad, rc_at, now, pmeta,
                       MANY_SLAB, &y);
    else if (split && kinds == MANY_PACKED)
        i = many_serve(t, keys, base, m, o, call, mk, bad, rc_at, now, pmeta,
                       MANY_PACKED, &y);
    else
        i = many_serve(t, keys, base, m, o, call, mk, bad, rc_at, now, pmeta,
                       MANY_SLAB | MANY_PACKED, &y);
    cache_read_unlock();
    many_hits(t, y.run_cls, o->touch ? CLS_TOUCH_HITS : CLS_GET_HITS, y.run);
    many_hits(t, SLAB_NO_CLASS, CLS_GET_HITS, y.packed_hits);
    /* the keys' get (and touch) commands, counted once for the group: the
     * keys done that are keys */
    int64_t gets =
        (int64_t)i - __builtin_popcount(bad & (uint32_t)((1ull << i) - 1));
    cache_stat_add(t, ST_CMD_GET, gets);
    if (o->touch)
        cache_stat_add(t, ST_CMD_TOUCH, gets);
    uint32_t note = c->hot ? y.note : 0;
    for (size_t j = 0; note && j < i; j++)
        if (note & (1u << j))
            hotkey_note_read(t, mk[j].f.hash, keys[j].key,
                             (uint32_t)keys[j].klen);
    return i;
}

size_t
fetch_get_many(struct cache_thread *t, const struct tc_key *keys, size_t n,
               const struct tc_get_opts *o, tc_many_fn *fn, void *arg, int *rcs)
{
    struct many_call call = {.fn = fn, .arg = arg};
    size_t done = 0;

    if (!o) { /* tc_get_many without options: a plain get's */
        while (done < n && !call.stop) {
            size_t m = MIN(n - done, (size_t)FETCH_GROUP);
            done += fetch_group(t, keys + done, done, m, &fetch_plain, &call,
                                rcs, true);
        }
        return done;
    }
    while (done < n && !call.stop) {
        size_t m = MIN(n - done, (size_t)FETCH_GROUP);
        done += fetch_group(t, keys + done, done, m, o, &call, rcs, false);
    }
    return done;
}

void
fetch_prefetch(struct cache_thread *t, const struct tc_key *keys, size_t n)
{
    struct cache *c = t->cache;
    uint64_t hash[FETCH_GROUP];

    for (size_t done = 0; done < n;) {
        size_t m = MIN(n - done, (size_t)FETCH_GROUP);
        const struct tc_key *k = keys + done;

        for (size_t i = 0; i < m; i++) {
            if (!key_ok(&k[i]))
                continue;
            hash[i] = cache_hash(c, k[i].key, (uint32_t)k[i].klen);
            htab_prefetch_read(c->htab, hash[i]);
        }
        /* the section only keeps the locations' memory from being reused
         * while they are turned into addresses; nothing is dereferenced */
        cache_read_lock();
        for (size_t i = 0; i < m; i++)
            if (key_ok(&k[i]))
                prefetch_items(c, hash[i]);
        cache_read_unlock();
        done += m;
    }
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
    unsigned cls = SLAB_NO_CLASS;
    uint32_t rewrite = 0;

    cache_flush_check(c, now);
    cache_stat_inc(t, ST_CMD_TOUCH);
    cache_read_lock();
    uint64_t loc = htab_lookup_rcu(c->htab, hash, cache_match_key, &k);
    if (loc && cache_loc_packed(loc)) {
        struct pitem_view v;
        dead = packed_touch_rcu(c, cache_off(loc), &v, true,
                                cache_exptime(exptime, now), now, &rewrite);
        if (dead == CACHE_LIVE) {
            /* an access, as a slab item's (cache_bit_ref): fetched and
             * referenced, as memcached's touch marks its item fetched;
             * a rewrite below keeps the bits */
            if ((loc & (CACHE_LOC_REF | CACHE_LOC_FETCHED)) !=
                (CACHE_LOC_REF | CACHE_LOC_FETCHED))
                htab_set_bits_rcu(c->htab, hash, loc,
                                  CACHE_LOC_REF | CACHE_LOC_FETCHED);
            cache_packed_touch(c, cache_packed_pool(cache_off(loc)), now);
        }
    } else if (loc) {
        struct item_hdr *it =
            (struct item_hdr *)cache_item_at(c, cache_off(loc));
        dead = cache_item_dead(c, it, now);
        if (dead == CACHE_LIVE) {
            store_exptime(it, cache_off(loc), cache_exptime(exptime, now));
            cls = cache_class_at(c, cache_off(loc));
            cache_bit_ref(c, cache_off(loc));
            cache_atime_set(c, cache_off(loc), now);
        }
    }
    cache_read_unlock();
    if (rewrite && dead == CACHE_LIVE)
        (void)packed_rewrite_exp(t, hash, loc, rewrite);

    if (loc && dead == CACHE_LIVE) {
        cache_cls_inc(t, cls, CLS_TOUCH_HITS);
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

/* walk_entry of a packed item. Its fetched bit is its slot's (off keeps
 * the location's bits: cache_packed_fetched), set by a read since the key
 * was last written, kept by a touch's rewrite and a merge's copy, as
 * memcached's ITEM_FETCHED; its access time its segment's, as meta l's
 * (cache_packed_age: never older than its own). It has no slab class: it
 * reports the one its slab form would take, as a hot-pool item does
 * (cache_class_of), so that a class list finds it; its size is its packed
 * bytes (header, opt, key, value). */
static int
walk_packed(struct walk *w, uint64_t off)
{
    struct pitem_view v;
    if (cache_packed_view(w->c, off, &v) != 0 ||
        cache_packed_dead(w->c, off, &v, w->now) != CACHE_LIVE)
        return 0;
    int cls = slab_class_for(w->c->slab, (uint32_t)(TC_ITEM_HEADER_SIZE +
                                                    v.klen + (uint64_t)v.vlen));
    struct tc_walk_item item = {
        .key = v.key,
        .klen = v.klen,
        .flags = v.flags,
        .exptime = cache_packed_exp(w->c, off, &v),
        .last_access = cache_packed_age(w->c, cache_packed_pool(off), w->now),
        .cas = v.cas,
        .vlen = v.vlen,
        .size = v.size,
        .slab_class = (uint8_t)(cls < 0 ? 0 : cls),
        .fetched = cache_packed_fetched(off),
        .flash = false,
    };
    w->seen++;
    return w->fn(w->arg, &item);
}

/* One index entry, inside the read section: a live item goes to fn,
 * described without touching it. */
static int
walk_entry(void *arg, uint64_t loc)
{
    struct walk *w = arg;
    struct cache *c = w->c;
    uint64_t off = cache_off(loc);
    if (cache_off_packed(off))
        return walk_packed(w, off);
    const struct item_hdr *it = cache_item_at(c, off);

    if (cache_item_dead(c, it, w->now) != CACHE_LIVE)
        return 0;
    struct tc_walk_item v = {
        .key = item_key(it),
        .klen = it->klen,
        .flags = item_flags(it),
        .exptime = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED),
        .last_access = cache_atime_age(c, off, w->now),
        .cas = item_cas(it),
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

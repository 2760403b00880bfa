/*
 * The write path: set, add, replace, cas, append, prepend, incr, decr,
 * invalidate, vivify, the flash tier's recache (incr and decr in
 * src/engine/store_arith.c, delete, an unlink, in src/engine/
 * store_delete.c). A small plain store goes to the packed store whole, in
 * one call (store_packed: peek, span, write, publish, retire).
 *
 * Every write is copy-on-write: the new item is written into fresh chunks
 * with no lock held (PMEM writes happen only here, before publication), then
 * the bucket lock is taken for the DRAM-only decision and index switch, and
 * the old item is freed after a grace period. Read-modify-write commands
 * (append, prepend, incr, decr) read the old item, build the new one, and
 * publish only if the index still holds the item they read (else retry).
 *
 * Concurrency: no state of its own; see src/engine/cache.h. Lock taken: one
 * bucket lock, briefly, per publication. RCU read sections never span an
 * allocation (allocation may wait for a grace period).
 */
#include "src/engine/store.h"
#include "src/engine/store_int.h"

#include "src/engine/cache.h"
#include "src/engine/cache_packed.h"
#include "src/engine/ext.h"
#include "src/engine/hotkey.h"
#include "src/engine/packed.h"
#include "src/engine/pitem.h"
#include "src/engine/reclaim.h"

#include "src/base/crashpoint.h"
#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/num.h"
#include "tier/pm.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/urcu-memb.h>

/* The CAS of old, the version a packed store replaces: the peek's when
 * old is the packed version it read (the same location in the same
 * incarnation of its segment: a segment reopened on that page has
 * another sequence block; a packed item's CAS never changes in place),
 * else read again. */
static inline __attribute__((always_inline)) uint64_t
replaced_cas(const struct cache *c, const struct store_req *r, uint64_t old)
{
    uint64_t off = cache_off(old);
    if (r->peek_loc && htab_loc_same(r->peek_loc, old) &&
        cache_off_packed(off) && cache_packed_seq(c, off) == r->peek_seq)
        return r->peek_cas;
    return old_cas(c, off);
}

/* Decide under the bucket lock whether the new item may replace what the
 * index holds. Reads PMEM headers only. Returns TC_OK or a tc_result.
 * Inlined into publish(), as publish() into commit(). */
static inline __attribute__((always_inline)) int
decide_locked(struct cache *c, const struct store_req *r, uint64_t old,
              uint32_t now, bool packed)
{
    /* a plain set (any mode but these, no CAS to check) replaces what is
     * there whatever its state: not looked at (a call for a packed item);
     * a packed store is never a swap (prepare_packed) */
    if (!r->cas_check && r->mode != TC_ADD && r->mode != TC_REPLACE &&
        r->mode != TC_CAS && (packed || r->mode != STORE_SWAP))
        return TC_OK;
    bool live = old && old_dead(c, cache_off(old), now) == CACHE_LIVE;
    if (r->cas_check && r->mode != STORE_SWAP) {
        if (!live)
            return TC_NOT_FOUND;
        if (old_cas(c, cache_off(old)) != r->cas_in)
            return TC_EXISTS;
    }
    switch (r->mode) {
    case TC_ADD:
        return live ? TC_NOT_STORED : TC_OK;
    case TC_REPLACE:
        return live ? TC_OK : TC_NOT_STORED;
    case TC_CAS:
        if (!live)
            return TC_NOT_FOUND;
        return old_cas(c, cache_off(old)) == r->cas_in ? TC_OK : TC_EXISTS;
    case STORE_SWAP:
        /* a packed location's REF/FETCHED/WIN bits may have been set */
        if (!htab_loc_same(r->expect, old))
            return -EAGAIN;
        if (r->check_exptime &&
            cache_off_exptime(c, cache_off(old)) != r->expect_exptime)
            return -EAGAIN;
        return TC_OK;
    default:
        return TC_OK;
    }
}

/* A store's counters: cmd_set and the CAS outcome, in the class of its
 * item (cls, SLAB_NO_CLASS for none). */
static inline __attribute__((always_inline)) void
count_outcome(struct cache_thread *t, unsigned cls, int mode, int rc)
{
    cache_cls_inc(t, cls, CLS_CMD_SET);
    if (mode != TC_CAS)
        return;
    if (rc == TC_OK)
        cache_cls_inc(t, cls, CLS_CAS_HITS);
    else if (rc == TC_EXISTS)
        cache_cls_inc(t, cls, CLS_CAS_BADVAL);
    else if (rc == TC_NOT_FOUND)
        cache_stat_inc(t, ST_CAS_MISSES);
}

/* Switch the index to the new item. Locks: one bucket. Inlined into
 * commit(), every set's path, though recache_one() calls it too (out of
 * line, it and decide_locked() cost a set some 17-19 instructions more,
 * cachegrind), and into store_packed_tail() with packed true: a constant,
 * so that the slab store's copy has none of the peek's steps (its CAS
 * test below stays on the offset: so the slab store's path compiles as
 * before, some 6-9 instructions fewer than with either change). */
static inline __attribute__((always_inline)) int
publish(struct cache_thread *t, const struct store_req *r, uint64_t head,
        uint32_t now, const struct htab_hint *hint, uint64_t *old_out,
        bool packed)
{
    struct cache *c = t->cache;
    uint64_t loc = cache_loc(head);

    assert(packed == cache_off_packed(head));
    struct htab_bucket *b = htab_lock(c->htab, r->hash);
    _Atomic uint64_t *slot = NULL;
    /* a packed store whose peek found the key (its peek_* set: no CAS of
     * its own) in the slot it hinted, which still holds that word and
     * whose segment is the same incarnation: the item the peek compared
     * the key of (a packed location in one incarnation of its segment
     * names one item), so neither the key nor its CAS is read again */
    bool peeked = false;
    if (packed && !r->cas_new && r->peek_loc && hint &&
        (slot = htab_hinted_slot_locked(b, hint)) != NULL &&
        htab_slot_loc(hint->word[0]) == r->peek_loc &&
        cache_packed_seq(c, cache_off(r->peek_loc)) == r->peek_seq)
        peeked = true;
    else {
        struct cache_key k = {c, r->key, r->klen};
        slot = hint ? htab_find_hinted_locked(b, r->hash, cache_match_key_store,
                                              &k, hint)
                    : htab_find_locked(b, r->hash, cache_match_key_store, &k);
    }
    uint64_t old =
        slot ? htab_slot_loc(atomic_load_explicit(slot, memory_order_relaxed))
             : 0;
    int rc = decide_locked(c, r, old, now, packed);
    /* a packed item's derived CAS comes from its segment's block, taken
     * when the segment opened: the version it replaces may have a higher
     * one (a slab store, a segment opened later), and so may one removed
     * before it (the key's CAS floor, cache_packed.h); a key's CAS only
     * grows (memcached's, which meta's I mode compares) */
    if (unlikely(cache_off_packed(head)) && rc == TC_OK && !r->cas_new &&
        (peeked ? r->peek_cas
         : old  ? replaced_cas(c, r, old)
                : cache_floor_of(c, r->hash)) >= r->hdr.cas)
        rc = STORE_CAS_LOW;
    if (rc == TC_OK) {
        if (slot)
            htab_replace_locked(slot, r->hash, loc);
        else if (htab_insert_locked(c->htab, b, r->hash, loc) != 0)
            rc = -ENOMEM;
    }
    htab_unlock(b);
    *old_out = rc == TC_OK ? old : 0;
    return rc;
}

/* The CAS for a new item: the next of the counter, or the client's own
 * (meta E), which then also lifts the counter so that later CAS values stay
 * unique and above it. *store_seq: the item's store sequence (the commit
 * word's), taken from the counter in both cases. */
static uint64_t
next_cas(struct cache *c, uint64_t explicit_cas, uint64_t *store_seq)
{
    *store_seq = cache_seq_next(c);
    if (!explicit_cas)
        return *store_seq;
    uint64_t seq = atomic_load_explicit(&c->cas_seq, memory_order_relaxed);
    while (seq < explicit_cas &&
           !atomic_compare_exchange_weak_explicit(
               &c->cas_seq, &seq, explicit_cas, memory_order_relaxed,
               memory_order_relaxed))
        ;
    return explicit_cas;
}

/* The bytes of r's item in one slab chunk (header, key, opt, value), for
 * the class of its counters. */
static inline uint32_t
slab_item_size(const struct store_req *r)
{
    uint8_t opt = (uint8_t)((r->hdr.flags ? ITEM_HAS_FLAGS : 0) |
                            (r->cas_new ? ITEM_HAS_CAS : 0));
    return item_hko_size(r->klen, opt) + r->hdr.vlen;
}

/* reclaim_alloc_item_cls with a one-chunk item's first attempt inline
 * (its class, then its stash): the calls into reclaim.c only when the
 * stash is empty or the item chained. */
static inline __attribute__((always_inline)) int
alloc_item(struct cache_thread *t, const struct item_plan *plan, uint64_t *head,
           uint64_t *tails, unsigned *cls)
{
    if (unlikely(plan->nchain != 0))
        return reclaim_alloc_item_cls(t, plan, head, tails, cls);
    *cls = (unsigned)slab_class_for(t->cache->slab, plan->head_size);
    if (likely(quota_alloc(t->quota, *cls, head) == 0))
        return 0;
    return reclaim_alloc_head_slow(t, plan, *cls, head);
}

/* A span in the packed store for a plain store's small item: 0 with
 * *head, else -1 (it goes to a slab). */
/* Start loading the items the publish step will compare keys with: their
 * misses then overlap the item copy instead of stalling under the bucket
 * lock; the peek is kept in hint, so that publish looks at those slots
 * first instead of scanning the bucket again. */
static inline __attribute__((always_inline)) void
prefetch_old(struct cache *c, uint64_t hash, struct htab_hint *hint)
{
    unsigned n = htab_peek_hint(c->htab, hash, hint);
    for (unsigned i = 0; i < n; i++)
        __builtin_prefetch(
            cache_item_at(c, cache_off(htab_slot_loc(hint->word[i]))), 0, 3);
}

/* The CAS of the version a store would replace, or with none the key's
 * CAS floor (cache_packed.h): a hint read before the write (publish
 * decides). The home bucket's tag matches go to
 * hint, for publish's find under the lock (prefetch_old's peek, not made
 * again). Context: takes and leaves an RCU read section, as allocation
 * allows before it starts. */
static uint64_t
peek_cas(struct cache_thread *t, struct store_req *r, struct htab_hint *hint)
{
    struct cache *c = t->cache;
    struct cache_key k = {c, r->key, r->klen};
    uint64_t cas = 0;
    r->peek_loc = 0; /* none seen (yet) */
    /* the scan and compare inline (cache_match_key_store: no prefetch of
     * a chunk's word, which nothing here reads), as is a packed item's
     * CAS, an overwrite's usual case */
    cache_read_lock();
    uint64_t loc = htab_lookup_hint_rcu_inline(c->htab, r->hash,
                                               cache_match_key_store, &k, hint);
    if (loc) {
        uint64_t off = cache_off(loc);
        if (cache_off_packed(off)) {
            cas = cache_packed_cas_keyed(c, off); /* the match read it */
            r->peek_loc = loc; /* for publish: replaced_cas */
            r->peek_seq = cache_packed_seq(c, off);
            r->peek_cas = cas;
        } else
            cas = cache_off_cas(c, off);
    } else {
        /* none: the CAS of one removed (publish checks it again) */
        cas = cache_floor_of(c, r->hash);
    }
    cache_read_unlock();
    return cas;
}

/* hint: filled whenever this returns 0 (by the peek at the replaced
 * version's CAS, or by prefetch_old's peek when there is none to make). */
/* plan->total: the span's bytes (the item's size, for its books). */
static inline __attribute__((always_inline)) int
prepare_packed(struct cache_thread *t, struct store_req *r, uint64_t *head,
               struct item_plan *plan, struct htab_hint *hint)
{
    if (r->mode > TC_CAS || r->mode == TC_APPEND || r->mode == TC_PREPEND ||
        r->claim_win || r->recache || r->in_place ||
        (r->hdr.iflags & ITEM_STALE))
        return -1;
    uint64_t lift = 0;
    unsigned b = packed_bucket(r->hdr.exptime, r->now);
    if (r->cas_new) /* a chosen CAS: no peek, the hint as a slab store's */
        prefetch_old(t->cache, r->hash, hint);
    else if (packed_cas_below_b(t, b, peek_cas(t, r, hint)))
        lift = cache_seq_next(t->cache);
    uint32_t size = packed_size(t->cache, r->klen, r->hdr.vlen, r->hdr.flags,
                                r->hdr.exptime, r->cas_new | lift);
    if (!size)
        return -1;
    /* a delayed flush due now takes effect before the span is reserved
     * (commit's check would be too late: the span's sequence is fixed at
     * its segment's open, so packed_reserve seals a segment it covers) */
    cache_flush_check(t->cache, r->now);
    uint32_t span;
    if (packed_reserve_b(t, b, size, r->hdr.exptime, r->now, head, &span) != 0)
        return -1;
    plan->total = span;
    if (lift) { /* only now: a slab item takes its CAS as prepare planned */
        r->cas_new = lift;
        cache_stat_inc(t, ST_PACKED_CAS_LIFTED);
    }
    /* its counters' class (count_outcome): its would-be slab item's, as
     * req_class would find it (a packed item's books have none:
     * account_special does not look at r->cls) */
    uint32_t n = likely(plan->nchain == 0) /* prepare's item_plan */
                     ? plan->head_size + (lift ? item_opt_len(ITEM_HAS_CAS) : 0)
                     : slab_item_size(r);
    assert(n == slab_item_size(r));
    if (likely(n < CACHE_PACKED_CLS_N))
        r->cls = t->cache->packed_cls[n];
    return 0;
}

/* Write a packed item (prepare_packed's span): its CAS. A plain set's
 * (no CAS of its own, flags that fit the header, the value in one piece)
 * by packed_write_plain. */
static inline __attribute__((always_inline)) uint64_t
write_packed(struct cache *c, const struct store_req *r, uint64_t head)
{
    if (likely(!r->cas_new && r->hdr.flags <= PITEM_CFLAGS_MASK &&
               r->val.niov == 1)) {
        struct pitem_plain p = {.key = r->key,
                                .value = r->val.iov[0].iov_base,
                                .klen = r->klen,
                                .vlen = r->hdr.vlen,
                                .fl = r->hdr.flags};
        assert(r->val.iov[0].iov_len == r->hdr.vlen);
        return packed_write_plain(c, head, &p, r->hdr.exptime, r->now);
    }
    struct packed_item it = {r->key,         r->klen,     r->val.iov,
                             r->val.niov,    r->hdr.vlen, r->hdr.flags,
                             r->hdr.exptime, r->cas_new,  false};
    return packed_write_at(c, head, &it, r->now);
}

/* prepare(): the item was stored whole in the packed store (done: its
 * outcome). */
#define STORE_PACKED_DONE 1

/* Memory for the item r describes. 0, -E2BIG or -ENOMEM; or, with done
 * (store_one's), STORE_PACKED_DONE: a small item went to the packed store
 * and was stored there whole (store_packed), *done its outcome (cas_out
 * set as commit() sets it). Context: no lock and no RCU read section
 * (allocation may wait for a grace period). Inlined, as commit(), into
 * store_one and its two other callers (no done: theirs go to a slab). */
static int store_packed(struct cache_thread *t, struct store_req *r,
                        struct item_plan *plan, uint64_t *cas_out, int *rc);

static inline __attribute__((always_inline)) int
prepare(struct cache_thread *t, struct store_req *r, struct item_plan *plan,
        uint64_t *head, uint64_t *tails, uint64_t *cas_out, int *done)
{
    struct cache *c = t->cache;

    /* opt (item_layout.h): the client flags when not 0, the CAS when the
     * client chose it */
    r->hdr.iflags =
        (uint8_t)((r->hdr.iflags & ~(ITEM_HAS_FLAGS | ITEM_HAS_CAS)) |
                  (r->hdr.flags ? ITEM_HAS_FLAGS : 0) |
                  (r->cas_new ? ITEM_HAS_CAS : 0));
    item_plan(r->klen, r->hdr.iflags, r->hdr.vlen, c->chunk_max, plan);
    /* The limit counts header, key and value, not the chaining overhead,
     * so that what fits does not depend on chunk sizes. */
    if (sizeof(struct item_hdr) + r->klen + (uint64_t)r->hdr.vlen >
        c->cfg.item_size_max) {
        cache_stat_inc(t, ST_STORE_TOO_LARGE);
        return -E2BIG;
    }
    if (unlikely(c->divert)) {
        /* a write-hot key's item goes to the DRAM hot pool */
        if (c->hot &&
            hotkey_place(t, r->hash, r->key, r->klen, plan, head) == 0)
            return 0;
        /* a small one to the packed store, stored there whole (*done:
         * its outcome) */
        if (c->seg && done && store_packed(t, r, plan, cas_out, done) == 0)
            return STORE_PACKED_DONE;
    }
    if (alloc_item(t, plan, head, tails, &r->cls) != 0) {
        r->cls = SLAB_NO_CLASS;
        cache_stat_inc(t, ST_STORE_NO_MEMORY);
        return -ENOMEM;
    }
    return 0;
}

/* EXPERIMENT ONLY (ablate_init_in_lock): the item written with its
 * head chunk's slab class lock held, as Tair MDB initialised items inside
 * its slab lock. Breaks DESIGN rule 2 on purpose. Locks: slab class. */
static void
write_in_lock(struct cache *c, uint64_t head, const struct item_plan *plan,
              const uint64_t *tails, struct store_req *r)
{
    unsigned cls = slab_class_of(c->slab, head);
    slab_ablate_lock(c->slab, cls);
    pm_unchecked_begin();
    item_write(c->base, head, plan, tails, &r->hdr, r->key, &r->val, false);
    pm_unchecked_end();
    slab_ablate_unlock(c->slab, cls);
}

/* A packed item's derived CAS was not above the CAS of the version it was
 * to replace (publish: STORE_CAS_LOW): store it again with the counter's
 * next value as its own (cas64 in a packed item, 8 bytes), above every
 * CAS given so far. Out of line: a set of a key last written by a slab
 * store or a thread whose segment opened later. */
static __attribute__((noinline)) int
store_cas_above(struct cache_thread *t, struct store_req *r, uint64_t *cas_out)
{
    cache_stat_inc(t, ST_PACKED_CAS_LIFTED);
    r->cas_new = cache_seq_next(t->cache);
    return store_one(t, r, cas_out);
}

/* commit's books for an item that is not a one-chunk slab item of
 * prepare's class (not a packed one either: store_packed_tail), by
 * cache_account, with the class of a DRAM item's size. */
static inline __attribute__((always_inline)) void
account_special(struct cache_thread *t, struct store_req *r, uint64_t head)
{
    r->cls = cache_account(t, head, 1);
    if (unlikely(r->cls == SLAB_NO_CLASS)) /* DRAM: the class of its size */
        r->cls = cache_class_of(t->cache, head);
}

/* Write the prepared item and publish it; on failure its chunks go back.
 * *old receives the replaced item's location (0 if none), which the caller
 * retires with retire_old() once outside any RCU read section. hint: the
 * bucket's peek (prefetch_old), or NULL. Not a packed item
 * (store_packed_tail). */
static inline __attribute__((always_inline)) int
commit(struct cache_thread *t, struct store_req *r,
       const struct item_plan *plan, uint64_t head, const uint64_t *tails,
       const struct htab_hint *hint, uint64_t *old, uint64_t *cas_out)
{
    struct cache *c = t->cache;
    uint32_t now = r->now;

    /* a delayed flush whose time has come takes effect before this item
     * gets its CAS: its watermark must not cover an item stored after it */
    cache_flush_check(c, now);
    /* PMEM: the item is written here, before it is visible, with no lock
     * held (DESIGN rule 2); a hot key's item goes to its DRAM block */
    assert(!cache_off_packed(head));
    if (unlikely(head & CACHE_SPECIAL_OFF)) {
        r->hdr.cas = next_cas(c, r->cas_new, &r->hdr.seq);
        hotkey_write(head, plan, &r->hdr, r->key, &r->val);
    } else {
        r->hdr.cas = next_cas(c, r->cas_new, &r->hdr.seq);
        if (likely(!c->cfg.ablate_init_in_lock)) {
            if (likely(plan->nchain == 0 && plan->head_size <= ITEM_STAGE_MAX))
                item_write_one(c->base, head, &r->hdr, r->key, &r->val, false);
            else
                item_write(c->base, head, plan, tails, &r->hdr, r->key, &r->val,
                           false);
        } else {
            write_in_lock(c, head, plan, tails, r);
        }
    }
    pm_fence(); /* the bytes are in place before the index points at them */
    TC_CRASH_POINT("set.written");
    /* DRAM, before anyone can read it: a reused chunk starts unreferenced,
     * unfetched and with its recache win unclaimed (or claimed, meta
     * recache), and a store is an access (meta l) */
    cache_fresh(c, head, now,
                (r->claim_win ? SLAB_FRESH_WIN : 0) |
                    (r->keep_fetched ? SLAB_FRESH_FETCHED : 0));

    /* account while the chunk is still ours: once published, another
     * thread may replace, free and reuse it before we look again */
    if (likely(plan->nchain == 0 && r->cls != SLAB_NO_CLASS &&
               !cache_off_dram(head)))
        cache_account_new(t, r->cls, plan->total); /* prepare's class */
    else
        account_special(t, r, head);
    int rc = publish(t, r, head, now, hint, old, false);
    if (rc != TC_OK) {
        cache_account(t, head, -1);
        cache_free_unpublished(t, plan, head, tails);
        /* out of line, and off the published path's instructions */
        if (unlikely(rc == STORE_CAS_LOW))
            return store_cas_above(t, r, cas_out);
        return rc;
    }
    if (!r->recache && !r->in_place)
        cache_stat_inc(t, ST_TOTAL_ITEMS);
    if (c->hot)
        hotkey_count_store(t, *old ? cache_off(*old) : 0, head, r->hdr.vlen);
    if (cas_out)
        *cas_out = r->hdr.cas;
    return TC_OK;
}

/* retire_old of a DRAM item. */
static __attribute__((noinline)) void
retire_special(struct cache_thread *t, uint64_t off, uint32_t now)
{
    int dead = cache_off_dead(t->cache, off, now);
    cache_account_unlink(t, off, dead, UNLINK_REPLACED);
    cache_defer_free(t, off);
}

/* Account for and free (after a grace period) the item a store replaced. */
static inline __attribute__((always_inline)) void
retire_old(struct cache_thread *t, uint64_t old, uint32_t now)
{
    struct cache *c = t->cache;
    if (!old)
        return;
    uint64_t off = cache_off(old);
    if (unlikely(off & CACHE_SPECIAL_OFF)) {
        /* a packed one is invalidated now: packed_evict_oldest waits for
         * that before it frees its segment */
        if (cache_off_packed(off))
            cache_retire_packed(t, off, now);
        else
            retire_special(t, off, now);
        return;
    }
    int dead = cache_item_dead(c, item_at(c->base, off), now);
    cache_account_replaced(t, off, dead);
    cache_defer_free(t, off);
}

/* commit() of a packed item (prepare_packed's span), then the crash point
 * and retire_old() as store_one_inline's: written, accounted and
 * published as commit() does a slab item, in store_packed (a slab store's
 * path carries none of its steps, nor it a slab item's: no counter
 * value, no chunk word to make fresh, its books from its span's size). */
static inline __attribute__((always_inline)) int
store_packed_tail(struct cache_thread *t, struct store_req *r,
                  const struct item_plan *plan, uint64_t head,
                  const struct htab_hint *hint, uint64_t *cas_out)
{
    struct cache *c = t->cache;
    uint32_t now = r->now;
    uint64_t old = 0;

    /* no cache_flush_check as commit()'s: prepare_packed's, before the
     * span, is the one that matters (the item's sequence is its span's);
     * one another thread fires from here on covers the item, as any flush
     * running beside a set (packed.c, "Flush") */
    /* a packed item's CAS and sequence are its place in its segment's
     * block: no value of the counter, unless a chosen CAS (meta E, a
     * lift) must lift it */
    if (r->cas_new)
        r->hdr.cas = next_cas(c, r->cas_new, &r->hdr.seq);
    /* PMEM: the item, before it is visible, with no lock held (DESIGN
     * rule 2) */
    r->hdr.cas = write_packed(c, r, head);
    pm_fence(); /* the bytes are in place before the index points at them */
    TC_CRASH_POINT("set.written");
    /* the books while the item is still ours, from the span's size
     * (plan->total: no parse of the header just written); no class */
    assert(plan->total == pitem_size_at(c->base + cache_packed_pool(head)));
    cache_account_packed(t, (int64_t)plan->total, 1);
    int rc = publish(t, r, head, now, hint, &old, true);
    if (rc != TC_OK) {
        cache_account(t, head, -1);
        cache_free_unpublished(t, plan, head, NULL);
        /* out of line, and off the published path's instructions */
        if (unlikely(rc == STORE_CAS_LOW))
            rc = store_cas_above(t, r, cas_out);
    } else {
        /* never a recache's or an in-place rewrite's (prepare_packed) */
        assert(!r->recache && !r->in_place);
        cache_stat_inc(t, ST_TOTAL_ITEMS);
        if (c->hot)
            hotkey_count_store(t, old ? cache_off(old) : 0, head, r->hdr.vlen);
        if (cas_out)
            *cas_out = r->hdr.cas;
    }
    TC_CRASH_POINT("set.published");
    retire_old(t, old, now);
    return rc;
}

/* A store into the packed store, whole: prepare_packed, then
 * store_packed_tail, in one call from prepare() (one frame, the request's
 * fields loaded once). -1 when the item does not go there (prepare goes
 * on to a slab), else 0 with *rc, the store's outcome. */
static __attribute__((noinline)) int
store_packed(struct cache_thread *t, struct store_req *r,
             struct item_plan *plan, uint64_t *cas_out, int *rc)
{
    struct htab_hint hint; /* its own: a slab store peeks again */
    uint64_t head;
    if (prepare_packed(t, r, &head, plan, &hint) != 0)
        return -1;
    *rc = store_packed_tail(t, r, plan, head, &hint, cas_out);
    return 0;
}

/* Prepare, commit and retire: one whole store. Inlined into store_plain
 * (every set's path); the other callers share store_one's copy. */
static inline __attribute__((always_inline)) int
store_one_inline(struct cache_thread *t, struct store_req *r, uint64_t *cas_out)
{
    struct item_plan plan;
    uint64_t head, tails[ITEM_MAX_TAILS], old = 0;

    struct htab_hint hint;
    htab_prefetch(t->cache->htab, r->hash);
    int done;
    int rc = prepare(t, r, &plan, &head, tails, cas_out, &done);
    if (rc)
        return rc == STORE_PACKED_DONE ? done : rc;
    prefetch_old(t->cache, r->hash, &hint);
    rc = commit(t, r, &plan, head, tails, &hint, &old, cas_out);
    TC_CRASH_POINT("set.published");
    retire_old(t, old, r->now);
    return rc;
}

int
store_one(struct cache_thread *t, struct store_req *r, uint64_t *cas_out)
{
    return store_one_inline(t, r, cas_out);
}

/* The class a request's item has, or would have had if it was refused
 * before allocating (as memcached, which allocates first, counts it);
 * SLAB_NO_CLASS if too large for any. */
static unsigned
req_class(struct cache *c, const struct store_req *r)
{
    if (r->cls != SLAB_NO_CLASS)
        return r->cls;
    int cls = slab_class_for(c->slab, slab_item_size(r));
    return cls < 0 ? SLAB_NO_CLASS : (unsigned)cls;
}

/* A store whose outcome the index already decides (add on a live key, a
 * CAS that cannot match, replace of a missing key) is answered without
 * allocating: under memory pressure that would evict for nothing, or fail
 * with "out of memory" where memcached says "exists". The decision is
 * taken again under the bucket lock. */
static int
precheck_index(struct cache_thread *t, struct store_req *r, bool cas)
{
    struct item_desc old;
    uint64_t loc;
    bool hit = store_snapshot(t->cache, r, &old, &loc);
    if (cas)
        return !hit ? TC_NOT_FOUND : old.cas != r->cas_in ? TC_EXISTS : TC_OK;
    if (r->mode == TC_ADD)
        return hit ? TC_NOT_STORED : TC_OK;
    return hit ? TC_OK : TC_NOT_STORED;
}

/* Inline, so that the modes it does not answer for (a set) fold away
 * where the mode is a constant. */
static inline __attribute__((always_inline)) int
precheck(struct cache_thread *t, struct store_req *r)
{
    bool cas = r->cas_check || r->mode == TC_CAS;
    if (!cas && r->mode != TC_ADD && r->mode != TC_REPLACE)
        return TC_OK;
    return precheck_index(t, r, cas);
}

/* store_plain's body: inline in store_plain and in store_set, where the
 * mode, the options and cas_out are constants (the precheck, the CAS
 * counters and the options' copy fold away). */
static inline __attribute__((always_inline)) int
store_plain_inline(struct cache_thread *t, enum tc_store_mode mode,
                   const void *key, uint32_t klen, const void *val, size_t vlen,
                   uint32_t flags, int64_t exptime,
                   const struct tc_store_opts *o, uint64_t *cas_out)
{
    struct iovec iov = {(void *)val, vlen};
    struct store_req r;
    uint32_t now = clock_now();

    /* every field written once, by hand: req_init's zeroing (a rep stos)
     * and then the request's own stores wrote most of them twice */
    r.key = key;
    r.hash = cache_hash(t->cache, key, klen);
    r.hdr = (struct item_desc){.klen = (uint8_t)klen,
                               .vlen = (uint32_t)vlen,
                               .flags = flags,
                               .exptime = cache_exptime(exptime, now)};
    r.val = (struct item_src){&iov, 1};
    r.cas_in = o ? o->cas_in : 0;
    r.cas_new = o ? o->cas_new : 0;
    r.expect = 0;
    r.mode = mode;
    r.klen = klen;
    r.expect_exptime = 0;
    r.cls = SLAB_NO_CLASS;
    r.now = now;
    r.cas_check = o ? o->cas_check : false;
    r.claim_win = r.keep_fetched = r.check_exptime = false;
    r.recache = r.in_place = false;
    r.xloc = (struct nvs_loc){0};
    /* peek_loc, peek_seq, peek_cas: a packed store's, set by its peek */
    int rc = vlen > UINT32_MAX ? -E2BIG : precheck(t, &r);
    if (rc == TC_OK)
        rc = store_one_inline(t, &r, cas_out);
    count_outcome(t, rc == -E2BIG ? SLAB_NO_CLASS : req_class(t->cache, &r),
                  r.cas_check ? TC_CAS : mode, rc);
    /* memcached: a set that cannot be stored removes the old value rather
     * than leave stale data behind */
    if (mode == TC_SET && (rc == -E2BIG || rc == -ENOMEM))
        store_drop(t, key, klen);
    return rc;
}

int
store_plain(struct cache_thread *t, enum tc_store_mode mode, const void *key,
            uint32_t klen, const void *val, size_t vlen, uint32_t flags,
            int64_t exptime, const struct tc_store_opts *o, uint64_t *cas_out)
{
    return store_plain_inline(t, mode, key, klen, val, vlen, flags, exptime, o,
                              cas_out);
}

int
store_set(struct cache *c, const void *key, uint32_t klen, const void *val,
          uint32_t vlen, uint32_t flags, int64_t exptime)
{
    struct cache_thread *t = cache_thread_get(c);
    if (unlikely(!t))
        return -ENOMEM;
    return store_plain_inline(t, TC_SET, key, klen, val, vlen, flags, exptime,
                              NULL, NULL);
}

/* snapshot of a packed item: its fields as a slab item's header would
 * give them (a rewrite of it goes to a slab). Context: inside the read
 * section that found it. */
static bool
snapshot_packed(struct cache *c, uint64_t off, uint32_t now,
                struct item_desc *hdr)
{
    struct pitem_view v;
    memset(hdr, 0, sizeof(*hdr));
    if (cache_packed_view(c, off, &v) != 0)
        return false;
    hdr->kind = ITEM_KIND_HEAD;
    hdr->klen = v.klen;
    hdr->vlen = v.vlen;
    hdr->exptime = cache_packed_exp(c, off, &v);
    hdr->flags = v.flags;
    hdr->seq = cache_packed_seq(c, off);
    hdr->cas = v.cas;
    return cache_packed_dead(c, off, &v, now) == CACHE_LIVE;
}

/* The item the key maps to now, copied out: header and location. Miss when
 * absent or dead. Context: takes and leaves an RCU read section. */
bool
store_snapshot(struct cache *c, struct store_req *r, struct item_desc *hdr,
               uint64_t *loc)
{
    struct cache_key k = {c, r->key, r->klen};
    uint32_t now = r->now;

    cache_flush_check(c, now);
    cache_read_lock();
    *loc = htab_lookup_rcu(c->htab, r->hash, cache_match_key, &k);
    bool hit = *loc != 0;
    if (hit && cache_loc_packed(*loc)) {
        hit = snapshot_packed(c, cache_off(*loc), now, hdr);
    } else if (hit) {
        const struct item_hdr *it = cache_item_at(c, cache_off(*loc));
        hit = cache_item_dead(c, it, now) == CACHE_LIVE;
        item_hdr_load(hdr, it);
        if (hdr->kind == ITEM_KIND_FLASH)
            r->xloc = *item_flash_loc(it);
    }
    cache_read_unlock();
    return hit;
}

/* The new item keeps the old one's expiry as it is at publication: read it
 * now and have the swap check it did not change (touch does not move the
 * CAS). Context: inside a read section, it is the old item. */
void
store_carry_exptime(struct store_req *r, uint32_t exptime)
{
    r->expect_exptime = exptime;
    r->hdr.exptime = r->expect_exptime;
    r->check_exptime = true;
}

/*
 * Rewrite the item r->expect points at (whose header the caller read as
 * `old`) with header r->hdr and its old value, plus `add` appended or
 * prepended; keep_exptime carries the old item's expiry over. -EAGAIN when
 * the item changed meanwhile. The old value is
 * copied from PMEM inside a read section that starts after allocation, so
 * the old item cannot be freed under the copy.
 */
static int
rewrite(struct cache_thread *t, struct store_req *r,
        const struct item_desc *old, const void *add, size_t alen, bool append,
        bool keep_exptime, uint64_t *cas_out)
{
    struct cache *c = t->cache;
    struct item_plan plan;
    uint64_t head, tails[ITEM_MAX_TAILS], oldloc = 0;
    struct iovec iov[ITEM_MAX_TAILS + 2];
    char *fbuf = NULL;
    int rc;

    /* a flash item's value comes into DRAM first (blocking read); a failed
     * read dropped the item, which the retry then finds missing */
    if (old->kind == ITEM_KIND_FLASH &&
        (rc = ext_read_copy(t, r->key, r->klen, r->hash, r->expect, &r->xloc,
                            &fbuf)) != 0)
        return rc == -ENOMEM ? rc : -EAGAIN;
    rc = prepare(t, r, &plan, &head, tails, NULL, NULL);
    if (rc) {
        free(fbuf);
        return rc;
    }
    cache_read_lock();
    uint64_t xoff = cache_off(r->expect);
    struct iovec *vi = append || !alen ? iov : iov + 1;
    int n = 1;
    uint64_t cur_cas = 0;
    uint32_t cur_exp = 0;
    if (cache_off_packed(xoff)) {
        /* a packed item's rewrite goes to a slab (prepare: STORE_SWAP) */
        struct pitem_view v;
        if (cache_packed_view(c, xoff, &v) == 0) {
            vi[0] = (struct iovec){(void *)v.value, v.vlen};
            cur_cas = v.cas;
            cur_exp = cache_packed_exp(c, xoff, &v);
        }
    } else {
        const struct item_hdr *it = cache_item_at(c, xoff);
        if (fbuf)
            vi[0] = (struct iovec){fbuf, old->vlen};
        else
            n = item_value_iov(c->base, it, c->chunk_max, vi);
        cur_cas = item_cas(it);
        cur_exp = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
    }
    if (alen && append)
        iov[n] = (struct iovec){(void *)add, alen};
    else if (alen)
        iov[0] = (struct iovec){(void *)add, alen};
    r->val = (struct item_src){iov, n + (alen ? 1 : 0)};
    if (keep_exptime)
        store_carry_exptime(r, cur_exp);
    if (cur_cas == old->cas) {
        rc = commit(t, r, &plan, head, tails, NULL, &oldloc, cas_out);
    } else {
        cache_free_unpublished(t, &plan, head, tails);
        rc = -EAGAIN;
    }
    cache_read_unlock();
    free(fbuf);
    retire_old(t, oldloc, r->now);
    return rc;
}

/* store_concat's work; *cls receives the class to count its cmd_set in
 * (the new item's, else the one the appended data alone would take) */
static int
concat(struct cache_thread *t, bool append, const void *key, uint32_t klen,
       const void *val, size_t vlen, uint32_t flags,
       const struct tc_store_opts *o, uint64_t *cas_out, unsigned *cls)
{
    struct store_req r;
    struct item_desc old;

    req_init(&r, t, STORE_SWAP, key, klen);
    r.hdr.vlen = vlen > UINT32_MAX ? 0 : (uint32_t)vlen;
    *cls = req_class(t->cache, &r);
    for (int i = 0; i < RMW_RETRIES; i++) {
        req_init(&r, t, STORE_SWAP, key, klen);
        if (!store_snapshot(t->cache, &r, &old, &r.expect)) {
            if (!o || !o->vivify)
                return TC_NOT_STORED;
            /* meta N: a miss stores the value as a new item */
            struct tc_store_opts add = {.cas_new = o->cas_new};
            int rc = store_plain(t, TC_ADD, key, klen, val, vlen, flags,
                                 o->vivify_exptime, &add, cas_out);
            if (rc != TC_NOT_STORED)
                return rc;
            continue; /* created meanwhile: append to it */
        }
        if (o && o->cas_check && old.cas != o->cas_in)
            return TC_EXISTS;
        if ((uint64_t)old.vlen + vlen > UINT32_MAX)
            return -E2BIG;
        r.hdr = old;
        r.hdr.vlen = old.vlen + (uint32_t)vlen;
        /* memcached: the result is a new item, no longer stale, its recache
         * win free again */
        r.hdr.iflags &= (uint8_t)~ITEM_STALE;
        r.cas_new = o ? o->cas_new : 0;
        int rc = rewrite(t, &r, &old, val, vlen, append, true, cas_out);
        if (rc != -EAGAIN) {
            if (r.cls != SLAB_NO_CLASS)
                *cls = r.cls;
            return rc;
        }
    }
    return -EBUSY;
}

int
store_concat(struct cache_thread *t, bool append, const void *key,
             uint32_t klen, const void *val, size_t vlen, uint32_t flags,
             const struct tc_store_opts *o, uint64_t *cas_out)
{
    unsigned cls;
    int rc = concat(t, append, key, klen, val, vlen, flags, o, cas_out, &cls);
    cache_cls_inc(t, rc == -E2BIG ? SLAB_NO_CLASS : cls, CLS_CMD_SET);
    return rc;
}

int
store_invalidate(struct cache_thread *t, const void *key, uint32_t klen,
                 uint64_t cas_in, int64_t exptime, uint64_t cas_new)
{
    struct store_req r;
    struct item_desc old;

    for (int i = 0; i < RMW_RETRIES; i++) {
        req_init(&r, t, STORE_SWAP, key, klen);
        if (!store_snapshot(t->cache, &r, &old, &r.expect))
            return TC_NOT_FOUND;
        if (cas_in && old.cas != cas_in)
            return TC_EXISTS;
        r.hdr = old;
        r.hdr.iflags |= ITEM_STALE;
        r.cas_new = cas_new;
        /* memcached marks the item in place: still fetched if it was */
        r.keep_fetched = cache_loc_packed(r.expect)
                             ? (r.expect & CACHE_LOC_FETCHED) != 0
                             : cache_bit_fetched(t->cache, cache_off(r.expect));
        if (exptime >= 0)
            r.hdr.exptime = cache_exptime(exptime, clock_now());
        int rc = rewrite(t, &r, &old, NULL, 0, true, exptime < 0, NULL);
        if (rc != -EAGAIN)
            return rc;
    }
    return -EBUSY;
}

/* meta ms with I: when the client's CAS is older than the item's, the new
 * value is stored marked stale instead of being refused, keeping the old
 * item's expiry and its recache win (memcached: a win already handed out
 * stays taken, the next mg sees Z). */
/* Whether the chunk at loc still holds the item of this CAS and its recache
 * win is claimed. Context: outside an RCU read section. */
static bool
claimed_rcu(struct cache *c, uint64_t loc, uint64_t cas)
{
    if (cache_loc_packed(loc))
        return (loc & CACHE_LOC_WIN) != 0; /* the slot's bit, as read */
    cache_read_lock();
    bool claimed = item_cas(cache_item_at(c, cache_off(loc))) == cas &&
                   cache_bit_claimed(c, cache_off(loc));
    cache_read_unlock();
    return claimed;
}

/* *cls: the class of the stored item, or of the one it would have been
 * (req_class), for the counters. */
static int
store_or_stale(struct cache_thread *t, const void *key, uint32_t klen,
               const void *val, size_t vlen, uint32_t flags, int64_t exptime,
               const struct tc_store_opts *o, uint64_t *cas_out, unsigned *cls)
{
    struct iovec iov = {(void *)val, vlen};
    struct store_req r;
    struct item_desc old;
    int rc = -EBUSY;

    for (int i = 0; i < RMW_RETRIES; i++) {
        req_init(&r, t, STORE_SWAP, key, klen);
        r.hdr.vlen = (uint32_t)vlen;
        if (!store_snapshot(t->cache, &r, &old, &r.expect)) {
            rc = TC_NOT_FOUND;
            break;
        }
        if (o->cas_in > old.cas) {
            rc = TC_EXISTS;
            break;
        }
        bool stale = o->cas_in < old.cas;
        r.hdr.iflags = stale ? ITEM_STALE : 0;
        r.hdr.flags = flags;
        r.hdr.exptime =
            stale ? old.exptime : cache_exptime(exptime, clock_now());
        /* the win bit read in a section of its own, only while the chunk
         * still holds the item (a freed chunk's page may be joining another
         * class); a writer that moves the item after it makes the publish
         * fail (-EAGAIN) */
        r.claim_win = stale && claimed_rcu(t->cache, r.expect, old.cas);
        r.val = (struct item_src){&iov, 1};
        r.cas_new = o->cas_new;
        rc = store_one(t, &r, cas_out);
        if (rc != -EAGAIN)
            break;
    }
    if (rc == -EAGAIN)
        rc = -EBUSY;
    *cls = req_class(t->cache, &r);
    return rc;
}

int
store_ex(struct cache_thread *t, enum tc_store_mode mode, const void *key,
         uint32_t klen, const void *val, size_t vlen, uint32_t flags,
         int64_t exptime, const struct tc_store_opts *o, uint64_t *cas_out)
{
    if (vlen > UINT32_MAX)
        return -E2BIG;
    switch (mode) {
    case TC_APPEND:
    case TC_PREPEND:
        return store_concat(t, mode == TC_APPEND, key, klen, val, vlen, flags,
                            o, cas_out);
    case TC_CAS:
    case TC_SET:
    case TC_REPLACE:
        if (o && o->invalidate && (o->cas_check || mode == TC_CAS)) {
            unsigned cls;
            int rc = store_or_stale(t, key, klen, val, vlen, flags, exptime, o,
                                    cas_out, &cls);
            count_outcome(t, cls, TC_CAS, rc);
            return rc;
        }
        return store_plain(t, mode, key, klen, val, vlen, flags, exptime, o,
                           cas_out);
    case TC_ADD:
        return store_plain(t, mode, key, klen, val, vlen, flags, exptime, o,
                           cas_out);
    }
    return -EINVAL;
}

/*
 * A recache's own store: its item is a copy of the flash value and commits
 * after its publication, as a page move's copy does (item_layout.h), on a
 * path of its own so that commit(), every set's, keeps its instructions.
 * The copy keeps its source's store sequence (a set that took its sequence
 * before the copy and publishes after it must outrank it after a crash),
 * is written with ITEM_COMMIT_PENDING, the source (the flash header) is
 * invalidated once the index is seen holding it, and the copy is
 * committed by a compare-and-swap in the read section of the switch. A
 * delete (or a set into the DRAM hot pool) answering before the switch
 * makes it fail (the copy is freed, never committed); one answering after
 * it invalidates the copy, and leaves no valid source behind. A crash
 * between the source's invalidation and the commit loses the key, a miss.
 */
static int
recache_one(struct cache_thread *t, struct store_req *r)
{
    struct cache *c = t->cache;
    struct item_plan plan;
    uint64_t head, tails[ITEM_MAX_TAILS], old = 0;
    uint32_t word = 0;
    uint32_t now = r->now;

    int rc = prepare(t, r, &plan, &head, tails, NULL, NULL);
    if (rc)
        return rc;
    cache_flush_check(c, now);
    /* the source's sequence and CAS (store_recache) */
    r->hdr.cas = r->cas_new ? r->cas_new : r->hdr.seq;
    /* PMEM: the copy, before publication, no lock held */
    if (cache_off_dram(head))
        hotkey_write(head, &plan, &r->hdr, r->key, &r->val);
    else
        word = item_write(c->base, head, &plan, tails, &r->hdr, r->key, &r->val,
                          true);
    pm_fence();
    TC_CRASH_POINT("set.written");
    cache_fresh(c, head, now,
                (r->claim_win ? SLAB_FRESH_WIN : 0) |
                    (r->keep_fetched ? SLAB_FRESH_FETCHED : 0));
    r->cls = cache_account(t, head, 1);
    if (unlikely(r->cls == SLAB_NO_CLASS))
        r->cls = cache_class_of(c, head);

    /* the read section keeps the source from reuse once the index is seen
     * holding it, and the copy until its commit */
    cache_read_lock();
    struct cache_key k = {c, r->key, r->klen};
    struct htab_bucket *b = htab_lock(c->htab, r->hash);
    _Atomic uint64_t *slot = htab_find_locked(b, r->hash, cache_match_key, &k);
    bool held = slot && htab_slot_loc(atomic_load_explicit(
                            slot, memory_order_relaxed)) == r->expect;
    htab_unlock(b);
    rc = held ? TC_OK : -EAGAIN;
    if (held) {
        cache_invalidate(c, cache_off(r->expect));
        rc = publish(t, r, head, now, NULL, &old, false);
    }
    if (rc == TC_OK && word) {
        TC_CRASH_POINT("recache.published");
        /* failed: a writer replaced the copy and retires it */
        (void)item_commit_copy(c->base, head, word);
    }
    cache_read_unlock();
    if (rc != TC_OK) {
        cache_account(t, head, -1);
        cache_free_unpublished(t, &plan, head, tails);
        return rc;
    }
    if (c->hot)
        hotkey_count_store(t, old ? cache_off(old) : 0, head, r->hdr.vlen);
    retire_old(t, old, now);
    return TC_OK;
}

int
store_recache(struct cache_thread *t, const void *key, uint32_t klen,
              const struct item_desc *hdr, uint64_t expect, const void *val)
{
    struct iovec iov = {(void *)val, hdr->vlen};
    struct store_req r;

    req_init(&r, t, STORE_SWAP, key, klen);
    r.hdr = *hdr;
    r.hdr.klen = (uint8_t)klen;
    r.val = (struct item_src){&iov, 1};
    r.expect = expect;
    r.check_exptime = true;
    r.expect_exptime = hdr->exptime;
    r.recache = true;
    cache_read_lock();
    const struct item_hdr *src = cache_item_at(t->cache, cache_off(expect));
    bool live = item_committed(__atomic_load_n(&src->commit, __ATOMIC_RELAXED));
    r.hdr.seq = item_seq(src);
    cache_read_unlock();
    if (!live)
        return -EAGAIN; /* already replaced or removed */
    /* clients see no change: the CAS is the source's, kept in opt unless
     * it is the sequence */
    r.cas_new = hdr->cas != r.hdr.seq ? hdr->cas : 0;
    htab_prefetch(t->cache->htab, r.hash);
    return recache_one(t, &r);
}

/* meta mg N: an empty placeholder whose storer holds the recache win.
 * TC_OK when this call created it. */
int
store_vivify(struct cache_thread *t, const void *key, uint32_t klen,
             int64_t exptime, uint64_t cas_new, uint64_t *cas_out)
{
    struct iovec iov = {NULL, 0};
    struct store_req r;

    req_init(&r, t, TC_ADD, key, klen);
    r.hdr.exptime = cache_exptime(exptime, r.now);
    r.val = (struct item_src){&iov, 1};
    r.claim_win = true;
    r.cas_new = cas_new;
    return store_one(t, &r, cas_out);
}

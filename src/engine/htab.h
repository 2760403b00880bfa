#pragma once
/*
 * The hash index, all in DRAM: buckets of one cache line, each holding a spin
 * lock, a pointer to an overflow bucket and HTAB_SLOTS slots. A slot is one
 * 64-bit word: a 16-bit tag from the key's hash (never 0) and a 48-bit
 * location (the engine's encoding of where the item lives; never 0). A lookup
 * touches item memory (PMEM) only to compare the key of a tag match, through
 * the caller's match function.
 *
 * Concurrency:
 *   readers     lock-free, inside an RCU read-side section (liburcu memb):
 *               slots and next pointers are read with acquire loads.
 *   writers     hold the bucket's spin lock (LOCK_RANK_BUCKET) of the home
 *               bucket for every change to that bucket or its overflow
 *               chain; slots are written with release stores, one word at a
 *               time, so a reader sees the old or the new entry.
 *   overflow    buckets are allocated under the home bucket's lock and
 *               linked with a release store. A remove that leaves one with
 *               every slot empty unlinks it (under the home lock; its own
 *               next kept, so a reader standing on it goes on along the
 *               chain) and hands it to htab_retired_take: it is reused
 *               (reserve) or freed only after a grace period, by
 *               htab_retired_free, so under churn the overflow buckets stay
 *               about as many as the entries need.
 *   No PMEM writes happen here; the lock is held for DRAM work only.
 *
 * Growth: expected_items sizes the first table (about 70% full at that
 * count). Once a rehash function is set (htab_set_grow), the table doubles
 * when it holds more entries than 80% of its home slots (2^19 buckets:
 * 2,516,582), counted exactly: each thread counts its inserts and removes
 * in a stripe of its own (one cache line of 64, no shared counter
 * written), and a stripe that passes its share of the room left asks for
 * the stripes to be summed (htab_count; see htab_count.c). The entries
 * move to the doubled table a few home buckets at a time: by writers in
 * htab_lock (before they take their own bucket's lock) and by
 * htab_grow_step (the maintenance thread, tests). A moved bucket keeps its
 * entries (frozen: readers that looked at it before the move see them)
 * and has its moved flag set; lookups and writers that land on a moved
 * bucket go on to the doubled table. When the last bucket moved, the
 * doubled table becomes the table and the old one is retired:
 * htab_retired_take() before a grace period, htab_retired_free() after
 * it. See htab.c and htab_count.c for the rules.
 */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "src/base/compiler.h"
#include "src/base/lock.h"

#include <urcu/urcu-memb.h>
#include <urcu/static/urcu-memb.h>

#define HTAB_SLOTS 6
#define HTAB_LOC_BITS 48
#define HTAB_LOC_MASK ((1ull << HTAB_LOC_BITS) - 1)

struct htab_bucket {
    union {
        struct {
            struct spin lock;
            /* home buckets of a table being doubled: non-zero once this
             * bucket's entries are in the doubled table (set under lock,
             * release store) */
            _Atomic uint32_t moved;
        };
        /* overflow buckets (no lock, never moved): their home bucket
         * while linked (under its lock); once unlinked, the next on the
         * list waiting for a grace period or for reuse (htab.c) */
        struct htab_bucket *home;
    };
    struct htab_bucket *_Atomic next;
    _Atomic uint64_t slot[HTAB_SLOTS];
} CACHE_ALIGNED;

_Static_assert(sizeof(struct htab_bucket) == CACHE_LINE,
               "a bucket is one cache line");

struct htab;

/* Does the item at loc carry the key the caller is looking for? */
typedef bool htab_match_fn(void *arg, uint64_t loc);

int htab_create(uint64_t expected_items, struct htab **out);
void htab_destroy(struct htab *h);

/* The full hash of the entry at loc (the key's; the index keeps only the
 * tag). Called by the mover with that entry's home bucket locked, so the
 * item it names is still indexed. */
typedef uint64_t htab_rehash_fn(void *arg, uint64_t loc);
/* Let the table grow: fn rehashes entries; each htab_lock moves up to
 * help home buckets while a doubling is under way (0: only
 * htab_grow_step moves them). Call before other threads use h. */
void htab_set_grow(struct htab *h, htab_rehash_fn *fn, void *arg,
                   unsigned help);
/* Start a doubling now (a test, or a caller that knows better): 0,
 * -EALREADY when one is under way, -EINVAL without a rehash function,
 * -ENOMEM. */
int htab_grow_start(struct htab *h);
/* Start a doubling that is due and move up to nbuckets home buckets of
 * it: 1 while a doubling is left under way, 0 when none is, -ENOMEM.
 * Context: any thread holding no bucket lock. */
int htab_grow_step(struct htab *h, uint64_t nbuckets);
/* Move whatever is left of a doubling under way (restart's save). */
void htab_grow_finish(struct htab *h);
bool htab_growing(const struct htab *h);
/* Doublings since create. */
uint64_t htab_grows(const struct htab *h);
/* Replace an empty table, with no doubling under way and no other thread
 * using h, by one of nbuckets (a power of two) home buckets: a restart
 * that loads a saved index of that size. 0, -EINVAL, -ENOMEM. */
int htab_resize_empty(struct htab *h, uint64_t nbuckets);
/* Home buckets a table is made with for items entries (about 70% full
 * then): htab_create's rule, for htab_resize_empty. */
uint64_t htab_buckets_for(uint64_t items);

/* Called when enough unlinked overflow buckets wait for a take (a
 * caller that takes them seldom can be asked to take them now). Context:
 * a writer, under a bucket lock: it must not block. Set before other
 * threads use h. */
typedef void htab_pend_fn(void *arg);
void htab_set_pend_hook(struct htab *h, htab_pend_fn *fn, void *arg);
/* Old tables and unlinked overflow buckets: take them before a grace
 * period (NULL: nothing to free), free them after it (reserve buckets go
 * back to their table for reuse). */
struct htab_retired;
struct htab_retired *htab_retired_take(struct htab *h);
void htab_retired_free(struct htab *h, struct htab_retired *r);

static inline uint16_t
htab_tag(uint64_t hash)
{
    uint16_t t = (uint16_t)(hash >> 48);
    return t ? t : 1;
}

/* Location of the entry whose tag matches and for which match() is true, or
 * 0. Context: inside an RCU read-side section; the result is valid only
 * there. */
uint64_t htab_lookup_rcu(struct htab *h, uint64_t hash, htab_match_fn *match,
                         void *arg);

/* The bucket where htab_lookup_rcu starts: the home bucket of hash in the
 * table a reader must look in. Context: as htab_lookup_rcu. */
struct htab_bucket *htab_home_bucket_rcu(struct htab *h, uint64_t hash);
/* The scan of htab_lookup_rcu from bucket b, inline: each slot read with
 * acquire (it pairs with the release store of the slot by the writers, so
 * the item is complete before match reads it), then the overflow chain
 * (next, acquire). */
static inline __attribute__((always_inline)) uint64_t
htab_chain_lookup_rcu(struct htab_bucket *b, uint64_t hash,
                      htab_match_fn *match, void *arg)
{
    const uint64_t tag = htab_tag(hash);

    do {
#pragma GCC unroll 8 /* every slot (HTAB_SLOTS): no loop counter */
        for (int i = 0; i < HTAB_SLOTS; i++) {
            uint64_t w =
                atomic_load_explicit(&b->slot[i], memory_order_acquire);
            if ((w >> HTAB_LOC_BITS) == tag &&
                likely(match(arg, w & HTAB_LOC_MASK)))
                return w & HTAB_LOC_MASK;
        }
        b = atomic_load_explicit(&b->next, memory_order_acquire);
    } while (b != NULL);
    return 0;
}

/* htab_lookup_rcu inline, for a caller whose match is a constant that can
 * be inlined too (the single get: no indirect call, no saved registers). */
static inline __attribute__((always_inline)) uint64_t
htab_lookup_rcu_inline(struct htab *h, uint64_t hash, htab_match_fn *match,
                       void *arg)
{
    return htab_chain_lookup_rcu(htab_home_bucket_rcu(h, hash), hash, match,
                                 arg);
}

/* htab_lookup_rcu_inline that also gives the slot it found the entry in
 * (*slot, set on a hit only), for htab_slot_set_bits_rcu. */
static inline __attribute__((always_inline)) uint64_t
htab_lookup_slot_rcu_inline(struct htab *h, uint64_t hash, htab_match_fn *match,
                            void *arg, _Atomic uint64_t **slot)
{
    const uint64_t tag = htab_tag(hash);
    struct htab_bucket *b = htab_home_bucket_rcu(h, hash);

    do {
#pragma GCC unroll 8 /* every slot (HTAB_SLOTS): no loop counter */
        for (int i = 0; i < HTAB_SLOTS; i++) {
            uint64_t w =
                atomic_load_explicit(&b->slot[i], memory_order_acquire);
            if ((w >> HTAB_LOC_BITS) == tag &&
                likely(match(arg, w & HTAB_LOC_MASK))) {
                *slot = &b->slot[i];
                return w & HTAB_LOC_MASK;
            }
        }
        b = atomic_load_explicit(&b->next, memory_order_acquire);
    } while (b != NULL);
    return 0;
}

/* Whether the index holds the entry (hash's tag, loc) in hash's chain,
 * found without reading the item: a caller that has a location from
 * elsewhere (a chunk scan) reads the item only once this is true, since
 * before that the chunk may be free and being rewritten. The slot's
 * acquire load orders those reads after the item's writes. Context:
 * inside an RCU read-side section; true is valid only there. */
bool htab_holds_rcu(struct htab *h, uint64_t hash, uint64_t loc);

/* Set bits (within HTAB_LOC_VOLATILE) of the slot holding (hash's tag,
 * loc), the volatile bits ignored, by a compare-and-swap from the word
 * read: true when this call set them (none of them was set), false when
 * they were set already or the slot is gone. A writer's store, or a
 * doubling's copy of the bucket, may drop bits set meanwhile: they are
 * hints (a packed item's REF, FETCHED, WIN). Context: inside an RCU
 * read-side section. */
bool htab_set_bits_rcu(struct htab *h, uint64_t hash, uint64_t loc,
                       uint64_t bits);

/* Start loading the home bucket (a writer does this before writing its
 * item, so the bucket is in cache by the time it takes the lock). */
void htab_prefetch(struct htab *h, uint64_t hash);
/* A batch of readers: start loading the home bucket for reading (a batched
 * get prefetches every key's bucket before it looks any of them up, so the
 * DRAM misses overlap). */
void htab_prefetch_read(struct htab *h, uint64_t hash);
/* The current table's buckets and (*mask) its mask, for a batch of
 * readers that prefetches each key's home bucket inline, as
 * htab_prefetch_read does (&buckets[hash & mask], prefetched, never read
 * through: a doubling may retire the table meanwhile, whose range stays
 * mapped). One call a group instead of one a key. */
const struct htab_bucket *htab_prefetch_table(struct htab *h, uint64_t *mask);

/* A batched get's bucket pass for one key: hash (in), and the first tag
 * match in its chain (home bucket, then overflow buckets), as
 * htab_lookup_rcu meets it: loc (0: no tag match in the whole chain, so
 * the key is not in the index as this read section sees it) and the slot
 * it was read from. A key whose compare with loc fails is looked up in
 * full (htab_lookup_rcu: another tag match may follow). */
struct htab_first {
    uint64_t hash;
    uint64_t loc;
    _Atomic uint64_t *slot;
};
/* htab_first of n keys, the i-th at (char *)f + i * stride (the caller's
 * per-key records hold one each), each slot read with acquire as
 * htab_lookup_rcu's, so that a location found here may be used as a
 * lookup's once its key compared equal (the first tag match, if its key
 * is the caller's, is the entry htab_lookup_rcu returns). One call for the
 * group: a call a key cost a batch some ten instructions. Context: inside
 * an RCU read-side section; loc and slot are valid only there. */
void htab_first_many_rcu(struct htab *h, struct htab_first *f, unsigned n,
                         size_t stride);

/* Locations in the home bucket (not the overflow chain) whose tag
 * matches, read without the lock and never dereferenced here: for a writer,
 * a hint for prefetching the items it will compare keys with; for a reader
 * inside an RCU read-side section, locations it may use there as
 * htab_lookup_rcu's (slots read with acquire), once it compared the key
 * (a miss among them still needs the overflow chain: htab_lookup_rcu).
 * Outside a read section (a writer's hint) it may read a retired table,
 * whose range stays mapped and reads zero once freed: no locations. */
unsigned htab_peek(struct htab *h, uint64_t hash, uint64_t locs[HTAB_SLOTS]);

/* A writer's peek, kept for its find under the lock: the home bucket it
 * read and the tag matches there (slot index and slot word). */
struct htab_hint {
    const struct htab_bucket *home;
    unsigned n;
    uint8_t idx[HTAB_SLOTS];
    uint64_t word[HTAB_SLOTS];
};
/* htab_peek, keeping what htab_find_hinted_locked needs: how many tag
 * matches (their slot words in hint->word). */
unsigned htab_peek_hint(struct htab *h, uint64_t hash, struct htab_hint *hint);

/* htab_lookup_rcu_inline that also fills hint as htab_peek_hint does (the
 * home bucket and its tag matches), the matching entry's first, so that a
 * writer that looks before it writes (a packed set's peek at the CAS of
 * the version it replaces) neither scans the bucket again for its hint nor
 * misses it under the lock (htab_find_hinted_locked tries the first).
 * Context: inside an RCU read-side section (the location: valid only
 * there; the hint: checked again under the lock, as any). */
static inline __attribute__((always_inline)) uint64_t
htab_lookup_hint_rcu_inline(struct htab *h, uint64_t hash, htab_match_fn *match,
                            void *arg, struct htab_hint *hint)
{
    const uint64_t tag = (uint64_t)htab_tag(hash) << HTAB_LOC_BITS;
    struct htab_bucket *b = htab_home_bucket_rcu(h, hash);
    unsigned n = 0;

#pragma GCC unroll 8 /* every slot (HTAB_SLOTS): no loop counter */
    for (int i = 0; i < HTAB_SLOTS; i++) {
        /* Acquire: as htab_chain_lookup_rcu (match reads the item) */
        uint64_t w = atomic_load_explicit(&b->slot[i], memory_order_acquire);
        if ((w ^ tag) <= HTAB_LOC_MASK) {
            hint->idx[n] = (uint8_t)i;
            hint->word[n++] = w;
        }
    }
    hint->home = b;
    hint->n = n;
    for (unsigned i = 0; i < n; i++) {
        uint64_t w = hint->word[i];
        if (likely(match(arg, w & HTAB_LOC_MASK))) {
            if (i) { /* first, for the find under the lock */
                uint8_t x = hint->idx[i];
                hint->word[i] = hint->word[0];
                hint->idx[i] = hint->idx[0];
                hint->word[0] = w;
                hint->idx[0] = x;
            }
            return w & HTAB_LOC_MASK;
        }
    }
    b = atomic_load_explicit(&b->next, memory_order_acquire);
    return b ? htab_chain_lookup_rcu(b, hash, match, arg) : 0;
}

/* Writers. htab_lock() returns the home bucket, locked (in the doubled
 * table once the key's old bucket moved); it holds an RCU read-side
 * section of its own until htab_unlock, which keeps the bucket's table
 * from being freed (the thread registers with liburcu's memb flavour for
 * that to hold; an unregistered one must not run beside a table's free). */
struct htab_bucket *htab_lock(struct htab *h, uint64_t hash);
/* Under TSan: each htab_lock section's end releases this and
 * htab_retired_free (after a grace period) acquires it, so TSan sees what
 * the grace period guarantees. */
extern char htab_rcu_token;
/* Inline: every store's path (the release store and the read section's
 * end, which are liburcu's inline unlock but under TSan, which does not
 * see liburcu's own synchronisation: the call). */
static inline void
htab_unlock(struct htab_bucket *b)
{
    spin_release(&b->lock, LOCK_RANK_BUCKET);
    TSAN_RELEASE(&htab_rcu_token);
#if defined(__SANITIZE_THREAD__)
    urcu_memb_read_unlock();
#else
    _urcu_memb_read_unlock();
#endif
}

/* The slot holding the matching entry in b's chain, or NULL. Locks: b. */
_Atomic uint64_t *htab_find_locked(struct htab_bucket *b, uint64_t hash,
                                   htab_match_fn *match, void *arg);
/* Slot holding exactly this location in b's chain, or NULL. Locks: b. */
_Atomic uint64_t *htab_find_loc_locked(struct htab_bucket *b, uint64_t loc);

/* Put a new entry in a free slot of b's chain (allocating an overflow
 * bucket if all are full): 0 or -ENOMEM. Locks: b. */
int htab_insert_locked(struct htab *h, struct htab_bucket *b, uint64_t hash,
                       uint64_t loc);
/* Point an existing slot at a new location (same key). Locks: b. */
void htab_replace_locked(_Atomic uint64_t *slot, uint64_t hash, uint64_t loc);
/* Empty a slot (h: its entry count); an overflow bucket left empty is
 * unlinked from b's chain (freed after a grace period: htab_retired_take).
 * The slot pointer is invalid after. Locks: b. */
void htab_remove_locked(struct htab *h, _Atomic uint64_t *slot);

static inline uint64_t
htab_slot_loc(uint64_t word)
{
    return word & HTAB_LOC_MASK;
}

/* Location bits that change in place, without a new location: with bit
 * HTAB_LOC_KIND set (the engine's packed items, src/engine/cache.h), bits
 * 45..42 (REF, FETCHED, WIN, spare). Comparisons of locations ignore them
 * (htab_find_loc_locked, htab_holds_rcu). */
#define HTAB_LOC_KIND (1ull << 46)
#define HTAB_LOC_VOLATILE (0xfull << 42)

static inline bool
htab_loc_same(uint64_t a, uint64_t b)
{
    uint64_t ignore = (a & HTAB_LOC_KIND) ? HTAB_LOC_VOLATILE : 0;
    return ((a ^ b) & HTAB_LOC_MASK & ~ignore) == 0;
}

/* htab_set_bits_rcu on the slot a lookup in this same read section found
 * the entry in (htab_lookup_slot_rcu_inline), inline, without a second
 * scan: for hint bits only (REF, FETCHED), since a doubling that moved
 * the entry meanwhile leaves this slot behind, so the bits may be set
 * where nobody reads them again (lost, as htab_set_bits_rcu's may be). A
 * slot is memory of its table or overflow bucket until a grace period
 * after it was retired, and names loc only while it holds that entry. */
static inline void
htab_slot_set_bits_rcu(_Atomic uint64_t *slot, uint64_t loc, uint64_t bits)
{
    uint64_t w = atomic_load_explicit(slot, memory_order_relaxed);
    while (htab_loc_same(loc, w) && (w & bits) != bits &&
           !atomic_compare_exchange_weak_explicit(
               slot, &w, w | bits, memory_order_relaxed, memory_order_relaxed))
        ;
}

/* The first slot a peek found (hint), when the locked bucket is the one
 * peeked and that slot still holds the word the peek saw (hint->word[0]);
 * else NULL. Whose entry that is, is the caller's to know: its key, or a
 * location that names one item only (a packed item's, in its segment's
 * incarnation: store.c). Inline. Locks: b. */
static inline __attribute__((always_inline)) _Atomic uint64_t *
htab_hinted_slot_locked(struct htab_bucket *b, const struct htab_hint *hint)
{
    if (hint->n && hint->home == b) {
        _Atomic uint64_t *slot = &b->slot[hint->idx[0]];
        /* Relaxed: the bucket lock orders us after every writer. */
        if (atomic_load_explicit(slot, memory_order_relaxed) == hint->word[0])
            return slot;
    }
    return NULL;
}

/* htab_find_locked, trying first the first slot a peek found (hint): when
 * the locked bucket is the one peeked and that slot still holds what the
 * peek saw, match() decides without a scan (an overwrite's usual case:
 * keys are unique in the index, so a match is the entry); else the whole
 * chain is scanned. Inline: one load and the match on a set's path.
 * Locks: b. */
static inline __attribute__((always_inline)) _Atomic uint64_t *
htab_find_hinted_locked(struct htab_bucket *b, uint64_t hash,
                        htab_match_fn *match, void *arg,
                        const struct htab_hint *hint)
{
    if (hint->n && hint->home == b) {
        _Atomic uint64_t *slot = &b->slot[hint->idx[0]];
        /* Relaxed: the bucket lock orders us after every writer. */
        if (atomic_load_explicit(slot, memory_order_relaxed) == hint->word[0] &&
            match(arg, htab_slot_loc(hint->word[0])))
            return slot;
    }
    return htab_find_locked(b, hash, match, arg);
}

/* Visit every entry (no locks; for tc_check and tests with no writer
 * running). Stops when fn returns non-zero and returns that value. */
typedef int htab_visit_fn(void *arg, uint64_t loc);
int htab_foreach(struct htab *h, htab_visit_fn *fn, void *arg);
/* Visit the entries of home bucket i (< htab_nbuckets) and its overflow
 * chain, as a reader: entries changed meanwhile are seen old or new. Stops
 * when fn returns non-zero and returns that value. Context: inside an RCU
 * read-side section; the locations are valid only there. */
int htab_bucket_visit_rcu(struct htab *h, uint64_t i, htab_visit_fn *fn,
                          void *arg);

/* Home buckets of the table lookups start from (the old one while a
 * doubling is under way; htab_bucket_visit_rcu takes numbers below it). */
uint64_t htab_nbuckets(const struct htab *h);
uint64_t htab_noverflow(const struct htab *h); /* overflow buckets */
/* Entries in the index: the stripes' counts summed (exact when no writer
 * runs; off by the writes that ran while it was read otherwise). */
uint64_t htab_count(const struct htab *h);
uint64_t htab_dram_bytes(const struct htab *h);

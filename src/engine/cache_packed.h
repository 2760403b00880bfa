#pragma once
/* Packed items' fields and any item's death, CAS and expiry
 * (src/engine/cache_packed.c). */

#include "src/engine/cache.h"
#include "src/engine/pitem.h"

/* Packed items' fields (src/engine/pitem.h), for any engine path that
 * meets one: off is the engine offset (cache_off of the location). The
 * item is live for the caller (an RCU section or its bucket lock).
 * cache_packed_view: 0, or -EBADMSG (not an item). cache_packed_seq: its
 * derived sequence. cache_off_*: any item's (slab, DRAM or packed) death,
 * CAS and expiry. */

/* Inline: a packed get and set read each of these once or more; a call
 * and seg.c's calls for the record cost a get some 100 instructions. */
static inline __attribute__((always_inline)) int
cache_packed_view(const struct cache *c, uint64_t off, struct pitem_view *v)
{
    uint64_t poff = cache_packed_pool(off);
    uint32_t in = (uint32_t)(poff & (POOL_PAGE_SIZE - 1));
    return pitem_parse_inline(c->base + (poff - in), POOL_PAGE_SIZE,
                              seg_rec_seq_base(c->seg_rec, poff), in, v);
}

static inline uint64_t
cache_packed_seq(const struct cache *c, uint64_t off)
{
    uint64_t poff = cache_packed_pool(off);
    return seg_rec_seq_base(c->seg_rec, poff) +
           (poff & (POOL_PAGE_SIZE - 1)) / 4;
}

/* The absolute expiry (0 never) of exp16 e (0 never) of the packed item
 * at pool offset poff: counted from its segment's exp_base, which is read
 * only for an item that has one. */
static inline __attribute__((always_inline)) uint32_t
cache_packed_exp16(const struct cache *c, uint64_t poff, uint32_t e)
{
    return e ? seg_rec_exp_base(c->seg_rec, poff) + e - 1u : 0;
}

/* The absolute expiry (0 never) of a packed item cache_packed_view read:
 * its exp32, or its exp16 counted from its segment's exp_base. */
static inline uint32_t
cache_packed_exp(const struct cache *c, uint64_t off,
                 const struct pitem_view *v)
{
    if (v->iflags & PITEM_HAS_EXP)
        return v->exp32;
    return cache_packed_exp16(c, cache_packed_pool(off), v->exp16);
}

/* A packed item's state from its absolute expiry exp (0 never) and its
 * derived sequence seq (whatever CAS it carries, as a slab item's seq):
 * expired, else flushed (at or below the flush watermark; acquire as in
 * cache_item_dead), else live. */
static inline __attribute__((always_inline)) enum cache_dead
cache_packed_judge(const struct cache *c, uint32_t exp, uint64_t seq,
                   uint32_t now)
{
    if (exp != 0 && exp <= now)
        return CACHE_EXPIRED;
    if (seq <= atomic_load_explicit(&c->flush_cas, memory_order_acquire))
        return CACHE_FLUSHED;
    return CACHE_LIVE;
}

static inline enum cache_dead
cache_packed_dead(const struct cache *c, uint64_t off,
                  const struct pitem_view *v, uint32_t now)
{
    return cache_packed_judge(c, cache_packed_exp(c, off, v),
                              cache_packed_seq(c, off), now);
}

/* cache_packed_view and cache_packed_dead from one look at the header
 * (pitem_peek): the state of the packed item at off, and its CAS (*cas,
 * when cas is not NULL and the item is not CACHE_LOST). A store's checks
 * of the version it replaces. */
static inline __attribute__((always_inline)) enum cache_dead
cache_packed_state(const struct cache *c, uint64_t off, uint32_t now,
                   uint64_t *cas)
{
    uint64_t poff = cache_packed_pool(off);
    uint32_t in = (uint32_t)(poff & (POOL_PAGE_SIZE - 1));
    const char *it = c->base + poff;
    uint32_t vat, vlen, exp;
    if (!pitem_peek(it, POOL_PAGE_SIZE - in, seg_rec_exp_base(c->seg_rec, poff),
                    &vat, &vlen, &exp))
        return CACHE_LOST;
    uint64_t seq = seg_rec_seq_base(c->seg_rec, poff) + in / 4;
    if (cas) {
        *cas = seq; /* derived, or cas64: the 8 bytes before the value */
        if ((uint8_t)it[1] & PITEM_HAS_CAS)
            __builtin_memcpy(cas, it + vat - 8, 8);
    }
    return cache_packed_judge(c, exp, seq, now);
}

/* cache_packed_state's state, and the size, of a packed item its caller
 * unlinked from the index (a replaced version): its header is an item's
 * (its writer's, committed), so its lengths are read without
 * pitem_peek's checks, as pitem_size_at reads them; exp16 or exp32
 * (which a touch may store) with a relaxed atomic load. */
static inline __attribute__((always_inline)) enum cache_dead
cache_packed_state_held(const struct cache *c, uint64_t off, uint32_t now,
                        uint32_t *size)
{
    uint64_t poff = cache_packed_pool(off);
    const char *it = c->base + poff;
    uint8_t fl = (uint8_t)it[1];
    uint32_t exp;
    *size = pitem_size_at(it);
    if (fl & PITEM_HAS_EXP) {
        exp = __atomic_load_n(
            (const uint32_t *)(const void *)(it + sizeof(struct pitem_hdr)),
            __ATOMIC_RELAXED);
    } else {
        exp = cache_packed_exp16(
            c, poff,
            __atomic_load_n(
                (const uint16_t *)(const void *)(it + PITEM_EXP16_OFFSET),
                __ATOMIC_RELAXED));
    }
    return cache_packed_judge(c, exp, cache_packed_seq(c, off), now);
}

/* The CAS of the packed item at off whose key the caller just compared
 * (cache_packed_key_equals read its header and key: its lengths are an
 * item's): its derived CAS, or its cas64 right after its key and flags32.
 * cache_packed_state's *cas without the rest of the header's parse (a
 * set's peek at the version it replaces). */
static inline __attribute__((always_inline)) uint64_t
cache_packed_cas_keyed(const struct cache *c, uint64_t off)
{
    uint64_t poff = cache_packed_pool(off);
    const char *it = c->base + poff;
    uint64_t cas =
        seg_rec_seq_base(c->seg_rec, poff) + (poff & (POOL_PAGE_SIZE - 1)) / 4;
    uint8_t fl = (uint8_t)it[1];
    if (unlikely(fl & PITEM_HAS_CAS)) {
        uint32_t at = (uint32_t)sizeof(struct pitem_hdr) + (uint8_t)it[0] +
                      (fl & PITEM_HAS_EXP ? 4u : 0u) +
                      (fl & PITEM_HAS_FLAGS ? 4u : 0u);
        __builtin_memcpy(&cas, it + at, 8);
    }
    return cas;
}

/* Until the packed item at head (a writer unlinked it) is not a pending
 * copy: its publisher commits it a few instructions after the index
 * switch (packed_rewrite_exp), and an answer after the unlinker's commit
 * = 1 must not leave the copy's source valid behind. Bounded. */
void cache_packed_wait_not_pending(struct cache *c, uint64_t head);

/* A store replaced the packed item at head (engine offset): its state
 * and size looked at once, then as cache_account_unlink(UNLINK_REPLACED)
 * and cache_defer_free (commit = 1 before the store answers), with no
 * call. PMEM: a 2-byte store, no lock held. */
void cache_retire_packed(struct cache_thread *t, uint64_t head, uint32_t now);

/* commit = 1 for the packed item at off (pitem_invalidate on its
 * segment). PMEM: one 2-byte store, no lock held. */
void cache_packed_invalidate(struct cache *c, uint64_t off);
enum cache_dead cache_off_dead(const struct cache *c, uint64_t off,
                               uint32_t now);
uint64_t cache_off_cas(const struct cache *c, uint64_t off);
uint32_t cache_off_exptime(const struct cache *c, uint64_t off);

/*
 * The CAS floor (c->cas_floor, 32 KiB of DRAM, used with the packed store
 * only): a packed item's CAS is its place in its segment's block, taken
 * when the segment opened, so a key created again into an older open
 * segment would get a CAS below the one of its version that was removed
 * (delete, eviction, expiry's reap or sweep) and memcached's CAS only
 * grows (meta I compares them). Every such removal raises the floor word of the
 * key's hash bits to the removed item's CAS, under the key's bucket lock; a
 * packed store that finds no version to replace compares its CAS with
 * that word under the same lock (store.c's publish) and is stored again
 * with a CAS of the counter (cas64) when not above it. A replacement
 * needs none of it: the store compares with the version it replaces.
 * Flush_all needs none either: a packed item is never stored at or below
 * the watermark (packed_reserve_at), which is the counter at the flush,
 * above every CAS given before it. Keys sharing a word share its floor:
 * at worst a few more sets lifted (8 bytes each).
 *
 * Restart: the table starts empty. The counter resumes above every CAS
 * the scan finds, every segment's whole block and where a clean close
 * left it (restart.c, resume_counters), so every block opened after it is
 * above those. A removed item no longer in the pool is above that only
 * after a crash that lost the newest version of a key, when the counter
 * itself may give a slab item a CAS again: the same case, not the
 * floor's.
 */

/* The word of hash's key: the top bits, one shift (the slot tag's too;
 * any bits would do) */
#define CACHE_FLOOR_IDX(hash) ((hash) >> (64 - CACHE_FLOOR_BITS))

/* The floor of hash's key. Locks: its bucket lock held. */
static inline uint64_t
cache_floor_of(const struct cache *c, uint64_t hash)
{
    return atomic_load_explicit(&c->cas_floor[CACHE_FLOOR_IDX(hash)],
                                memory_order_relaxed);
}

/* Raise the floor of hash's key to cas (an atomic max). Locks: the
 * key's bucket lock held, the item still in the index. DRAM only. */
static inline void
cache_floor_raise(struct cache *c, uint64_t hash, uint64_t cas)
{
    _Atomic uint64_t *w = &c->cas_floor[CACHE_FLOOR_IDX(hash)];
    uint64_t cur = atomic_load_explicit(w, memory_order_relaxed);
    while (cur < cas &&
           !atomic_compare_exchange_weak_explicit(
               w, &cur, cas, memory_order_relaxed, memory_order_relaxed))
        ;
}

/* A removal (not a replacement) of the item at engine offset off, of any
 * kind, from hash's key: the floor raised to its CAS, when there is a
 * packed store. Locks: the key's bucket lock held, before the slot is
 * removed (the item is live for the caller). Reads its PMEM header. */
static inline void
cache_floor_unlink(struct cache *c, uint64_t hash, uint64_t off)
{
    if (c->seg)
        cache_floor_raise(c, hash, cache_off_cas(c, off));
}

/*
 * The DRAM hash index (see htab.h for the slot format and the rules).
 *
 * Concurrency:
 *   h->buckets, h->mask, h->nbuckets, h->map_bytes
 *                    set in htab_create, read-only until htab_destroy
 *   bucket->slot[i]  written only under the home bucket's spin lock
 *                    (LOCK_RANK_BUCKET), with release stores; read by
 *                    lock-free readers with acquire loads, by lock holders
 *                    with relaxed loads (the lock orders writers)
 *   bucket->next     written once per bucket, under the home bucket's lock,
 *                    with a release store after the new bucket is filled;
 *                    read with acquire loads; never unlinked or freed until
 *                    htab_destroy, so readers need no grace period for it
 *   overflow ->lock  unused: every chain is guarded by its home bucket's lock
 *   h->reserve_next  relaxed fetch_add: hands each reserve bucket to exactly
 *                    one writer (whatever home lock it holds); the bucket's
 *                    words are zero from htab_create and published by the
 *                    release store of next
 *   h->noverflow     relaxed counter, for stats only
 *   lock order       index bucket -> slab class -> page pool (lock.h);
 *                    only aligned_alloc (past the overflow reserve) is
 *                    called under a bucket lock
 *   No PMEM access here except through the caller's match function.
 */
#include "src/engine/htab.h"

#include "src/base/err.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Sizing: HTAB_SLOTS * 0.7 entries a bucket at expected_items. */
#define HTAB_FILL_NUM 7
#define HTAB_FILL_DEN 10
#define HTAB_MIN_BUCKETS 64ull
/* Past this the index would need more than 2^42 buckets (256 TiB). */
#define HTAB_MAX_ITEMS (1ull << 44)
/* Tables at least this big come from mmap: zero pages, backed lazily. */
#define HTAB_MMAP_BYTES (2 * MIB)
/* Overflow buckets are carved from a reserve after the home buckets, one
 * fetch_add each: aligned_alloc(64, 64) costs glibc 128-192 bytes of heap a
 * bucket and a malloc under the bucket lock. Measured overflow is about 9% of
 * the home buckets at 64% fill; past the reserve, aligned_alloc. */
#define HTAB_RESERVE_DIV 4

struct htab {
    struct htab_bucket *buckets; /* nbuckets home, then nreserve spare */
    uint64_t mask;               /* nbuckets - 1 */
    uint64_t nbuckets;           /* a power of two */
    uint64_t nreserve;
    size_t map_bytes; /* non-zero: buckets came from mmap, this long */
    /* Apart from the read-only fields above, which every lookup reads. */
    _Atomic uint64_t reserve_next CACHE_ALIGNED;
    _Atomic uint64_t noverflow;
};

static inline uint64_t
htab_word(uint64_t hash, uint64_t loc)
{
    return (uint64_t)htab_tag(hash) << HTAB_LOC_BITS | loc;
}

static inline struct htab_bucket *
htab_home(struct htab *h, uint64_t hash)
{
    return &h->buckets[hash & h->mask];
}

#ifndef NDEBUG
static bool
htab_is_locked(struct htab_bucket *b)
{
    return atomic_load_explicit(&b->lock.word, memory_order_relaxed) != 0;
}
#endif

static uint64_t
htab_size(uint64_t expected_items)
{
    /* ceil(expected_items / (HTAB_SLOTS * 0.7)) without floating point */
    uint64_t per = HTAB_SLOTS * HTAB_FILL_NUM;
    uint64_t want = (expected_items * HTAB_FILL_DEN + per - 1) / per;
    uint64_t n = HTAB_MIN_BUCKETS;

    while (n < want)
        n <<= 1;
    return n;
}

int
htab_create(uint64_t expected_items, struct htab **out)
{
    struct htab *h;
    size_t bytes;
    int rc;

    if (expected_items > HTAB_MAX_ITEMS) {
        err_set("hash index: %llu expected items is more than the %llu "
                "supported",
                (unsigned long long)expected_items,
                (unsigned long long)HTAB_MAX_ITEMS);
        return -EINVAL;
    }
    h = aligned_alloc(CACHE_LINE, sizeof(*h));
    if (h == NULL) {
        rc = -ENOMEM;
        goto err_msg;
    }
    memset(h, 0, sizeof(*h));
    h->nbuckets = htab_size(expected_items);
    h->mask = h->nbuckets - 1;
    h->nreserve = h->nbuckets / HTAB_RESERVE_DIV;
    bytes = (h->nbuckets + h->nreserve) * sizeof(struct htab_bucket);

    if (bytes >= HTAB_MMAP_BYTES) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            rc = -errno;
            goto err_free;
        }
#ifdef MADV_HUGEPAGE
        /* Lookups land on random buckets: fewer TLB misses. Advice only. */
        (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
        h->buckets = p;
        h->map_bytes = bytes;
    } else {
        h->buckets = aligned_alloc(CACHE_LINE, bytes);
        if (h->buckets == NULL) {
            rc = -ENOMEM;
            goto err_free;
        }
        /* Zero words: empty slots, no next, unlocked spins. */
        memset(h->buckets, 0, bytes);
    }
    atomic_init(&h->reserve_next, 0);
    atomic_init(&h->noverflow, 0);
    *out = h;
    return 0;

err_free:
    free(h);
err_msg:
    err_set("hash index: cannot allocate %llu buckets for %llu items",
            (unsigned long long)htab_size(expected_items),
            (unsigned long long)expected_items);
    return rc;
}

/* Reserve buckets handed out (reserve_next may run past the end). */
static uint64_t
htab_reserve_used(const struct htab *h)
{
    uint64_t n = atomic_load_explicit(&h->reserve_next, memory_order_relaxed);

    return MIN(n, h->nreserve);
}

static bool
htab_in_reserve(const struct htab *h, const struct htab_bucket *b)
{
    const struct htab_bucket *r = h->buckets + h->nbuckets;

    return b >= r && b < r + h->nreserve;
}

void
htab_destroy(struct htab *h)
{
    if (h == NULL)
        return;
    /* Nothing to free if every overflow bucket came from the reserve:
     * spares walking (and faulting in) a big mmap'd table. */
    if (htab_noverflow(h) > htab_reserve_used(h)) {
        for (uint64_t i = 0; i < h->nbuckets; i++) {
            struct htab_bucket *b =
                atomic_load_explicit(&h->buckets[i].next, memory_order_relaxed);

            while (b != NULL) {
                struct htab_bucket *next =
                    atomic_load_explicit(&b->next, memory_order_relaxed);

                if (!htab_in_reserve(h, b))
                    free(b);
                b = next;
            }
        }
    }
    if (h->map_bytes != 0)
        munmap(h->buckets, h->map_bytes);
    else
        free(h->buckets);
    free(h);
}

uint64_t
htab_lookup_rcu(struct htab *h, uint64_t hash, htab_match_fn *match, void *arg)
{
    const uint64_t tag = (uint64_t)htab_tag(hash) << HTAB_LOC_BITS;
    struct htab_bucket *b = htab_home(h, hash);

    do {
#pragma GCC unroll 8 /* every slot (HTAB_SLOTS): no loop counter */
        for (int i = 0; i < HTAB_SLOTS; i++) {
            /* Acquire: pairs with the release store of this slot in
             * htab_insert_locked / htab_replace_locked, so the item the
             * location names is complete before match() reads it. */
            uint64_t w =
                atomic_load_explicit(&b->slot[i], memory_order_acquire);

            if ((w & ~HTAB_LOC_MASK) == tag &&
                likely(match(arg, w & HTAB_LOC_MASK)))
                return w & HTAB_LOC_MASK;
        }
        /* Acquire: pairs with the release store of next in
         * htab_insert_locked, so the new bucket's zeroed words and first
         * entry are visible. */
        b = atomic_load_explicit(&b->next, memory_order_acquire);
    } while (b != NULL);
    return 0;
}

void
htab_prefetch(struct htab *h, uint64_t hash)
{
    __builtin_prefetch(htab_home(h, hash), 1, 3);
}

void
htab_prefetch_read(struct htab *h, uint64_t hash)
{
    __builtin_prefetch(htab_home(h, hash), 0, 3);
}

unsigned
htab_peek(struct htab *h, uint64_t hash, uint64_t locs[HTAB_SLOTS])
{
    const uint64_t tag = (uint64_t)htab_tag(hash) << HTAB_LOC_BITS;
    struct htab_bucket *b = htab_home(h, hash);
    unsigned n = 0;

    /* Acquire, as htab_lookup_rcu: a reader inside its read section may
     * use a location found here as a lookup's (after comparing the key);
     * other callers take it as a hint and look again. Acquire costs
     * nothing over relaxed on x86-64. Unrolled (8 >= HTAB_SLOTS: a pragma
     * takes no macro): five instructions a slot that does not match. */
#pragma GCC unroll 8
    for (int i = 0; i < HTAB_SLOTS; i++) {
        uint64_t w = atomic_load_explicit(&b->slot[i], memory_order_acquire);
        if ((w ^ tag) <= HTAB_LOC_MASK)
            locs[n++] = w & HTAB_LOC_MASK;
    }
    return n;
}

struct htab_bucket *
htab_lock(struct htab *h, uint64_t hash)
{
    struct htab_bucket *b = htab_home(h, hash);

    spin_acquire(&b->lock, LOCK_RANK_BUCKET);
    return b;
}

void
htab_unlock(struct htab_bucket *b)
{
    spin_release(&b->lock, LOCK_RANK_BUCKET);
}

_Atomic uint64_t *
htab_find_locked(struct htab_bucket *b, uint64_t hash, htab_match_fn *match,
                 void *arg)
{
    const uint64_t tag = (uint64_t)htab_tag(hash) << HTAB_LOC_BITS;

    assert(htab_is_locked(b));
    do {
        for (int i = 0; i < HTAB_SLOTS; i++) {
            /* Relaxed: the bucket lock orders us after every writer. */
            uint64_t w =
                atomic_load_explicit(&b->slot[i], memory_order_relaxed);

            if ((w & ~HTAB_LOC_MASK) == tag && match(arg, w & HTAB_LOC_MASK))
                return &b->slot[i];
        }
        b = atomic_load_explicit(&b->next, memory_order_relaxed);
    } while (b != NULL);
    return NULL;
}

_Atomic uint64_t *
htab_find_loc_locked(struct htab_bucket *b, uint64_t loc)
{
    assert(htab_is_locked(b));
    if (loc == 0)
        return NULL;
    do {
        for (int i = 0; i < HTAB_SLOTS; i++) {
            uint64_t w =
                atomic_load_explicit(&b->slot[i], memory_order_relaxed);

            if ((w & HTAB_LOC_MASK) == loc)
                return &b->slot[i];
        }
        b = atomic_load_explicit(&b->next, memory_order_relaxed);
    } while (b != NULL);
    return NULL;
}

/* A zeroed bucket, not yet reachable by anyone; NULL if out of memory. */
static struct htab_bucket *
htab_overflow_alloc(struct htab *h)
{
    struct htab_bucket *nb;
    uint64_t i;

    if (atomic_load_explicit(&h->reserve_next, memory_order_relaxed) <
        h->nreserve) {
        i = atomic_fetch_add_explicit(&h->reserve_next, 1,
                                      memory_order_relaxed);
        if (i < h->nreserve)
            return &h->buckets[h->nbuckets + i];
    }
    nb = aligned_alloc(CACHE_LINE, sizeof(*nb));
    if (nb != NULL)
        memset(nb, 0, sizeof(*nb));
    return nb;
}

int
htab_insert_locked(struct htab *h, struct htab_bucket *b, uint64_t hash,
                   uint64_t loc)
{
    const uint64_t word = htab_word(hash, loc);
    struct htab_bucket *last;
    struct htab_bucket *nb;

    assert(loc != 0 && loc <= HTAB_LOC_MASK);
    assert(b == htab_home(h, hash));
    assert(htab_is_locked(b));
    do {
        for (int i = 0; i < HTAB_SLOTS; i++) {
            if (atomic_load_explicit(&b->slot[i], memory_order_relaxed) == 0) {
                /* Release: pairs with the acquire load in htab_lookup_rcu;
                 * publishes the item written before this call. */
                atomic_store_explicit(&b->slot[i], word, memory_order_release);
                return 0;
            }
        }
        last = b;
        b = atomic_load_explicit(&b->next, memory_order_relaxed);
    } while (b != NULL);

    nb = htab_overflow_alloc(h);
    if (nb == NULL)
        return -ENOMEM;
    /* Relaxed: published by the release store of last->next below. */
    atomic_store_explicit(&nb->slot[0], word, memory_order_relaxed);
    /* Release: pairs with the acquire load of next in htab_lookup_rcu. */
    atomic_store_explicit(&last->next, nb, memory_order_release);
    atomic_fetch_add_explicit(&h->noverflow, 1, memory_order_relaxed);
    return 0;
}

void
htab_replace_locked(_Atomic uint64_t *slot, uint64_t hash, uint64_t loc)
{
    assert(loc != 0 && loc <= HTAB_LOC_MASK);
    assert(atomic_load_explicit(slot, memory_order_relaxed) >> HTAB_LOC_BITS ==
           htab_tag(hash));
    /* Release: pairs with the acquire load in htab_lookup_rcu; publishes
     * the new item. A reader sees the old location or the new one. */
    atomic_store_explicit(slot, htab_word(hash, loc), memory_order_release);
}

void
htab_remove_locked(_Atomic uint64_t *slot)
{
    assert(atomic_load_explicit(slot, memory_order_relaxed) != 0);
    /* Release: pairs with the acquire load in htab_lookup_rcu. Nothing is
     * published by a zero, but every slot store follows the same rule. */
    atomic_store_explicit(slot, 0, memory_order_release);
}

int
htab_bucket_visit_rcu(struct htab *h, uint64_t i, htab_visit_fn *fn, void *arg)
{
    struct htab_bucket *b = &h->buckets[i];

    do {
        for (int j = 0; j < HTAB_SLOTS; j++) {
            /* Acquire: as in htab_lookup_rcu. */
            uint64_t w =
                atomic_load_explicit(&b->slot[j], memory_order_acquire);
            int rc;

            if (w == 0)
                continue;
            rc = fn(arg, w & HTAB_LOC_MASK);
            if (rc != 0)
                return rc;
        }
        /* Acquire: as in htab_lookup_rcu. */
        b = atomic_load_explicit(&b->next, memory_order_acquire);
    } while (b != NULL);
    return 0;
}

int
htab_foreach(struct htab *h, htab_visit_fn *fn, void *arg)
{
    for (uint64_t i = 0; i < h->nbuckets; i++) {
        int rc = htab_bucket_visit_rcu(h, i, fn, arg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

uint64_t
htab_nbuckets(const struct htab *h)
{
    return h->nbuckets;
}

uint64_t
htab_noverflow(const struct htab *h)
{
    return atomic_load_explicit(&h->noverflow, memory_order_relaxed);
}

/* Home buckets, the reserve as far as it is backed (all of it when zeroed
 * by memset, the used part when mmap'd), and overflow buckets past it (not
 * counting malloc's own overhead for those). */
uint64_t
htab_dram_bytes(const struct htab *h)
{
    uint64_t used = htab_reserve_used(h);
    uint64_t n = h->nbuckets + htab_noverflow(h) - used;

    n += h->map_bytes != 0 ? used : h->nreserve;
    return sizeof(*h) + n * sizeof(struct htab_bucket);
}

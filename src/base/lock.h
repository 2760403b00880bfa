#pragma once
/*
 * Lock wrappers with ranks.
 *
 * Two kinds: struct lock (a pthread mutex, for slab classes, the page pool,
 * the NVMe store) and struct spin (a 32-bit spin lock that fits inside a
 * hash bucket's cache line). Both carry a rank; debug builds (NDEBUG not
 * defined) keep a per-thread stack of held ranks and abort when a thread
 * takes a lock whose rank is not strictly greater than the last one it holds.
 * Ranks, lowest taken first (the global order, also in doc/architecture.md):
 *
 *   LOCK_RANK_BUCKET  one hash-index bucket (src/engine/htab.c)
 *   LOCK_RANK_CLASS   one slab class (alloc/slab.c)
 *   LOCK_RANK_POOL    the page pool (alloc/pool.c)
 *   LOCK_RANK_NVS     the NVMe store's segment table (tier/nvs.c); above
 *                     every other rank, so that were the engine ever to
 *                     call the store with one of its locks held, the order
 *                     would still hold
 *
 * lock_held_depth() tells how many locks the calling thread holds (always 0
 * in release builds): the PMEM write helpers assert it is 0, which is how
 * "no PMEM writes inside a critical section" is checked.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum lock_rank {
    LOCK_RANK_BUCKET = 20,
    LOCK_RANK_CLASS = 30,
    LOCK_RANK_POOL = 40,
    LOCK_RANK_NVS = 50,
};

struct lock {
    pthread_mutex_t mutex;
    int rank;
};

struct spin {
    _Atomic uint32_t word; /* 0 free, 1 held */
};

int lock_init(struct lock *l, int rank);
void lock_fini(struct lock *l);
void lock_acquire(struct lock *l);
void lock_release(struct lock *l);

/* spin locks: zero-initialised memory is an unlocked spin. Release
 * builds (no ranks kept) take an uncontended one and release it inline:
 * a bucket lock on every store's path. */
#ifdef NDEBUG
void spin_acquire_slow(struct spin *s);
static inline void
spin_acquire(struct spin *s, int rank)
{
    (void)rank;
    /* Acquire: pairs with the release store in spin_release() of the
     * previous holder. */
    if (__builtin_expect(
            atomic_exchange_explicit(&s->word, 1, memory_order_acquire) != 0,
            0))
        spin_acquire_slow(s);
}
static inline void
spin_release(struct spin *s, int rank)
{
    (void)rank;
    /* Release: pairs with the acquiring exchange in spin_acquire() of the
     * next holder, publishing every write of this critical section. */
    atomic_store_explicit(&s->word, 0, memory_order_release);
}
#else
void spin_acquire(struct spin *s, int rank);
void spin_release(struct spin *s, int rank);
#endif

/* Number of locks (either kind) the calling thread holds; 0 when NDEBUG. */
int lock_held_depth(void);

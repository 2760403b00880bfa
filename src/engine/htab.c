/*
 * The DRAM hash index (see htab.h for the slot format and the rules).
 *
 * Concurrency:
 *   h->tab           the table lookups start from: release store when a
 *                    doubling ends (under h->grow_lock), acquire loads
 *   table fields     buckets, mask, nbuckets, nreserve, map_bytes:
 *                    set before the table is published, read-only after;
 *                    a table's descriptor lives until htab_destroy (its
 *                    buckets are freed after a grace period once retired),
 *                    so a stale descriptor is always readable
 *   t->next          the doubled table: release store under h->grow_lock
 *                    before any of t's buckets is marked moved; acquire
 *   t->state         IDLE, WANT (a writer's stripe passed its limit:
 *                    CAS from IDLE), GROWING (under h->grow_lock); a hint
 *                    for htab_lock to help (relaxed loads there); the
 *                    count's protocol (htab_count.c) uses seq_cst on it
 *   bucket->slot[i]  written only under the home bucket's spin lock
 *                    (LOCK_RANK_BUCKET), with release stores; read by
 *                    lock-free readers with acquire loads, by lock holders
 *                    with relaxed loads (the lock orders writers)
 *   bucket->moved    set once, by the mover, under the old home bucket's
 *                    lock, with a release store after the bucket's entries
 *                    are in the doubled table's two buckets (which nobody
 *                    else reaches before: they are reached only through
 *                    this flag); read with acquire by readers and by
 *                    htab_lock after it took the lock. A moved bucket's
 *                    chain is never written again, so a reader that read
 *                    the flag as 0 and walks the chain sees the entries as
 *                    they were when the move took them (as if its lookup
 *                    ran just before the move)
 *   bucket->next     written under the home bucket's lock: set with a
 *                    release store after the new bucket is filled (its
 *                    own next NULL); read with acquire loads
 *   unlink           a remove that leaves an overflow bucket b with every
 *                    slot empty (htab_remove_locked, under the home lock)
 *                    sets its predecessor's next to b->next (release) and
 *                    leaves b->next as it was: a reader standing on b goes
 *                    on to the rest of the chain, and sees every entry
 *                    there (entries never move within a chain; a new one
 *                    is put in a reachable bucket, never in b). b goes on
 *                    h->pend, is taken by htab_retired_take and reused or
 *                    freed by htab_retired_free after a grace period, so
 *                    no reader is still on it. A moved bucket's chain is
 *                    never unlinked: an unlink needs the home's lock held
 *                    and the home unmoved, and the mover reads a chain
 *                    under that same lock, so a doubling needs no rule
 *   overflow ->home  (the lock's and moved's words of a home bucket) the
 *                    home bucket, set when linked, read by the unlink,
 *                    both under the home lock; once unlinked, the link of
 *                    h->pend or t->free_head (h->ovf_lock). Overflow
 *                    buckets' locks are unused: every chain is guarded by
 *                    its home bucket's lock
 *   t->reserve_next  relaxed fetch_add: hands each reserve bucket to exactly
 *                    one writer (whatever home lock it holds); the bucket's
 *                    words are zero from the table's creation and published
 *                    by the release store of next
 *   t->free_head     reserve buckets unlinked and past their grace period,
 *                    all slots zero, for reuse: h->ovf_lock
 *   t->noverflow     relaxed counters: stats and htab_dram_bytes
 *   t->nheap
 *   h->ovf_lock      a mutex, innermost (taken under a bucket lock or
 *                    h->grow_lock, takes nothing): h->pend, h->npend
 *                    (read relaxed without it: a bound), every
 *                    t->free_head. The remover that brings h->npend to
 *                    the kick mark calls h->pend_hook (set before other
 *                    threads run) under its bucket lock, after ovf_lock;
 *                    past the cap it leaves an emptied bucket linked
 *   t->grow_items    entries past which t doubles: h->grow_lock
 *   h->stripe, seen  the entry count that asks for a doubling: see
 *                    htab_count.c
 *   h->grow_lock     a mutex, only ever tried (htab_lock's help) or taken
 *                    with no bucket lock held: starts and ends a doubling,
 *                    h->cursor (the next old bucket to move; one mover at a
 *                    time), h->retired, h->tables
 *   table memory     htab_lock runs an RCU read-side section (memb) until
 *                    htab_unlock; lookups run inside the caller's. An old
 *                    table's pages are given back by htab_retired_free,
 *                    which the caller runs after a grace period; its range
 *                    stays mapped (reading zero) until htab_destroy, so a
 *                    peek outside any section reads stale or zero slots,
 *                    never unmapped memory
 *   lock order       index bucket -> slab class -> page pool (lock.h);
 *                    only aligned_alloc (past the overflow reserve) and
 *                    h->ovf_lock are taken under a bucket lock;
 *                    h->grow_lock -> one index bucket at a time (the
 *                    mover) -> h->ovf_lock; the stripe counters are
 *                    atomics, no lock
 *   No PMEM access here except through the caller's match and rehash
 *   functions.
 */
#include "src/engine/htab.h"
#include "src/engine/htab_int.h"

#include "src/base/err.h"
#include "src/base/hugemap.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <urcu/urcu-memb.h>
/* Inline read-side lock, as the engine's (src/engine/cache.h): a call
 * under TSan, which does not see liburcu's own synchronisation (the
 * unlock: htab_unlock in htab.h). */
#include <urcu/static/urcu-memb.h>
#if defined(__SANITIZE_THREAD__)
#define HTAB_RCU_LOCK urcu_memb_read_lock
#else
#define HTAB_RCU_LOCK _urcu_memb_read_lock
#endif

/* Sizing: HTAB_SLOTS * 0.7 entries a bucket at expected_items. */
#define HTAB_FILL_NUM 7
#define HTAB_FILL_DEN 10
/* Doubling: past HTAB_SLOTS * 0.8 entries a bucket, counted exactly (the
 * stripes below). 2^19 buckets then hold 2,516,582 entries: the 2,164,480
 * packed 16/100-byte items of a 256 MiB pool (68.8% of the slots) stay in
 * them with 16% to spare. Overflow buckets at 80%: about 0.21 a home
 * bucket (keys spread evenly, Poisson 4.8 > 6); at 68.8%: 0.12. */
#define HTAB_GROW_NUM 4
#define HTAB_GROW_DEN 5
#define HTAB_MIN_BUCKETS 64ull
/* Past this the index would need more than 2^42 buckets (256 TiB). */
#define HTAB_MAX_ITEMS (1ull << 44)
#define HTAB_MAX_BUCKETS (1ull << 42)
/* Overflow buckets are carved from a reserve after the home buckets, one
 * fetch_add each: aligned_alloc(64, 64) costs glibc 128-192 bytes of heap a
 * bucket and a malloc under the bucket lock. Measured overflow is 0.09 of
 * the home buckets at 64% fill, 0.21 at 80% (where a table doubles);
 * past the reserve (a quarter; mmap'd, so backed only as it is handed
 * out), aligned_alloc. */
#define HTAB_RESERVE_DIV 4
/* Unlinked overflow buckets waiting for a grace period: past a table's
 * home buckets / KICK_DIV (or PEND_MIN) the pend hook asks for a take
 * (htab_set_pend_hook); at most home buckets / PEND_DIV (or PEND_MIN)
 * wait. Past that a bucket left empty stays linked (its chain reuses it;
 * it is unlinked once a later remove empties it again), so a caller that
 * takes them seldom holds a bounded number, not a growing pile of heap
 * buckets past the used reserve. Under churn about one insert in ten
 * makes an overflow bucket (a home bucket at 4 entries of 6 on average). */
#define HTAB_KICK_DIV 64
#define HTAB_PEND_DIV 8
#define HTAB_PEND_MIN 64
/* A failed start (no memory) tries again after this many more entries:
 * nbuckets * HTAB_SLOTS / RETRY_DIV. */
#define HTAB_RETRY_DIV 32
/* grow_items of a table that cannot double (HTAB_MAX_BUCKETS) */
#define HTAB_NEVER ((int64_t)1 << 62)

/* htab.h: what each htab_lock section's end releases under TSan */
char htab_rcu_token;

static inline uint64_t
htab_word(uint64_t hash, uint64_t loc)
{
    return (uint64_t)htab_tag(hash) << HTAB_LOC_BITS | loc;
}

/* The home bucket where a reader finds hash: the current table's, or, once
 * that one moved, the doubled table's (and so on). */
static inline struct htab_bucket *
htab_home_rcu(const struct htab *h, uint64_t hash)
{
    const struct htab_table *t = htab_cur(h);
    struct htab_bucket *b = &t->buckets[hash & t->mask];

    /* Acquire: pairs with the mover's release store of moved, so the
     * doubled table's buckets hold what the move put there. */
    while (unlikely(atomic_load_explicit(&b->moved, memory_order_acquire))) {
        t = atomic_load_explicit(&((struct htab_table *)t)->next,
                                 memory_order_acquire);
        b = &t->buckets[hash & t->mask];
    }
    return b;
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

/* A table of nbuckets home buckets, all words zero: 0 or -errno. */
static int
htab_table_create(uint64_t nbuckets, struct htab_table **out)
{
    struct htab_table *t = aligned_alloc(CACHE_LINE, sizeof(*t));
    size_t bytes;

    if (t == NULL)
        return -ENOMEM;
    memset(t, 0, sizeof(*t));
    t->nbuckets = nbuckets;
    t->mask = nbuckets - 1;
    t->nreserve = nbuckets / HTAB_RESERVE_DIV;
    bytes = (t->nbuckets + t->nreserve) * sizeof(struct htab_bucket);

    /* Always mmap: zero pages (empty slots, no next, unlocked spins, not
     * moved), backed as they are written, and a retired table's range
     * stays mapped (zero) once its pages are given back, so a writer's
     * peek outside a read section never faults (htab_peek). From 2 MiB up
     * it is 2 MiB-aligned on huge pages: lookups land on random buckets. */
    void *p = hugemap_map(&bytes);
    if (p == NULL) {
        free(t);
        return -ENOMEM;
    }
    t->buckets = p;
    t->map_bytes = bytes;
    atomic_init(&t->state, HTAB_IDLE);
    atomic_init(&t->next, NULL);
    t->grow_items =
        nbuckets >= HTAB_MAX_BUCKETS
            ? HTAB_NEVER
            : (int64_t)(nbuckets * HTAB_SLOTS * HTAB_GROW_NUM / HTAB_GROW_DEN);
    atomic_init(&t->reserve_next, 0);
    atomic_init(&t->noverflow, 0);
    *out = t;
    return 0;
}

static bool
htab_in_reserve(const struct htab_table *t, const struct htab_bucket *b)
{
    const struct htab_bucket *r = t->buckets + t->nbuckets;

    return b >= r && b < r + t->nreserve;
}

/* The table whose reserve b is in, or NULL (b came from aligned_alloc).
 * Locks: h->grow_lock, or no other thread uses h. */
static struct htab_table *
htab_reserve_of(struct htab *h, const struct htab_bucket *b)
{
    for (struct htab_table *t = h->tables; t != NULL; t = t->all_next)
        if (htab_in_reserve(t, b))
            return t;
    return NULL;
}

/* Free the unlinked buckets not yet taken: heap ones freed, reserve ones
 * dropped (their table goes with its pages). No other thread uses h. */
static void
htab_pend_drop(struct htab *h)
{
    struct htab_bucket *b =
        atomic_load_explicit(&h->pend, memory_order_relaxed);

    atomic_store_explicit(&h->pend, NULL, memory_order_relaxed);
    atomic_store_explicit(&h->npend, 0, memory_order_relaxed);
    while (b != NULL) {
        struct htab_bucket *next = b->home;

        if (htab_reserve_of(h, b) == NULL) {
            free(b);
            atomic_fetch_sub_explicit(&h->pend_heap, 1, memory_order_relaxed);
        }
        b = next;
    }
}

/* Free a table's overflow buckets and give back its pages: unmapped
 * (htab_destroy) or left mapped, reading zero (a retired table: see
 * htab_peek). Not its descriptor. */
static void
htab_table_free_buckets(struct htab_table *t, bool unmap)
{
    /* Nothing to free if every linked overflow bucket came from the
     * reserve: spares walking (and faulting in) a big mmap'd table. */
    if (atomic_load_explicit(&t->nheap, memory_order_relaxed) > 0) {
        for (uint64_t i = 0; i < t->nbuckets; i++) {
            struct htab_bucket *b =
                atomic_load_explicit(&t->buckets[i].next, memory_order_relaxed);

            while (b != NULL) {
                struct htab_bucket *next =
                    atomic_load_explicit(&b->next, memory_order_relaxed);

                if (!htab_in_reserve(t, b))
                    free(b);
                b = next;
            }
        }
    }
    if (unmap)
        munmap(t->buckets, t->map_bytes);
    else
        (void)madvise(t->buckets, t->map_bytes, MADV_DONTNEED);
    /* t->buckets stays as it was: a stale reader of the descriptor may
     * still read it, to prefetch; the caller sets t->freed */
}

int
htab_create(uint64_t expected_items, struct htab **out)
{
    struct htab_table *t;
    struct htab *h;
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
    rc = htab_table_create(htab_size(expected_items), &t);
    if (rc != 0)
        goto err_free;
    rc = pthread_mutex_init(&h->grow_lock, NULL);
    if (rc == 0) {
        rc = pthread_mutex_init(&h->ovf_lock, NULL);
        if (rc != 0)
            pthread_mutex_destroy(&h->grow_lock);
    }
    if (rc != 0) {
        rc = -rc;
        htab_table_free_buckets(t, true);
        free(t);
        goto err_free;
    }
    atomic_init(&h->pend, NULL);
    atomic_init(&h->pend_heap, 0);
    atomic_init(&h->npend, 0);
    h->tables = t;
    atomic_init(&h->tab, t);
    atomic_init(&h->grows, 0);
    /* no limits (nothing asks) until htab_set_grow hands them out */
    for (unsigned i = 0; i < HTAB_STRIPES; i++) {
        atomic_init(&h->stripe[i].n, 0);
        atomic_init(&h->stripe[i].limit, INT64_MAX);
    }
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

void
htab_destroy(struct htab *h)
{
    if (h == NULL)
        return;
    htab_pend_drop(h);
    while (h->tables != NULL) {
        struct htab_table *t = h->tables;

        h->tables = t->all_next;
        if (!t->freed)
            htab_table_free_buckets(t, true);
        else
            munmap(t->buckets, t->map_bytes);
        free(t);
    }
    pthread_mutex_destroy(&h->ovf_lock);
    pthread_mutex_destroy(&h->grow_lock);
    free(h);
}

void
htab_set_pend_hook(struct htab *h, htab_pend_fn *fn, void *arg)
{
    h->pend_hook = fn;
    h->pend_arg = arg;
}

void
htab_set_grow(struct htab *h, htab_rehash_fn *fn, void *arg, unsigned help)
{
    h->rehash = fn;
    h->rehash_arg = arg;
    h->help = help;
    pthread_mutex_lock(&h->grow_lock);
    htab_limits_set(h, atomic_load_explicit(&h->tab, memory_order_relaxed));
    pthread_mutex_unlock(&h->grow_lock);
}

/* The table whose home bucket b is: the current one or the doubled one (a
 * bucket a writer holds locked and unmoved is in one of these two).
 * Locks: b. */
static struct htab_table *
htab_table_of(struct htab *h, const struct htab_bucket *b)
{
    struct htab_table *t = htab_cur(h);

    while (b < t->buckets || b >= t->buckets + t->nbuckets) {
        t = atomic_load_explicit(&t->next, memory_order_acquire);
        assert(t != NULL);
    }
    return t;
}

/* A bucket of t with every word zero but ->home, not yet reachable by
 * anyone, for the chain of home (set as its ->home); NULL if out of
 * memory. Locks: home, or the mover's old bucket (home is private). */
static struct htab_bucket *
htab_overflow_alloc(struct htab *h, struct htab_table *t,
                    struct htab_bucket *home)
{
    struct htab_bucket *nb = NULL;
    uint64_t i;

    /* an unlinked reserve bucket, past its grace period: slots zero */
    if (atomic_load_explicit(&t->free_head, memory_order_relaxed) != NULL) {
        pthread_mutex_lock(&h->ovf_lock);
        nb = atomic_load_explicit(&t->free_head, memory_order_relaxed);
        if (nb != NULL)
            atomic_store_explicit(&t->free_head, nb->home,
                                  memory_order_relaxed);
        pthread_mutex_unlock(&h->ovf_lock);
        if (nb != NULL) {
            /* Relaxed: published by the release store of the link. */
            atomic_store_explicit(&nb->next, NULL, memory_order_relaxed);
            nb->home = home;
            return nb;
        }
    }
    if (atomic_load_explicit(&t->reserve_next, memory_order_relaxed) <
        t->nreserve) {
        i = atomic_fetch_add_explicit(&t->reserve_next, 1,
                                      memory_order_relaxed);
        if (i < t->nreserve) {
            nb = &t->buckets[t->nbuckets + i];
            nb->home = home;
            return nb;
        }
    }
    nb = aligned_alloc(CACHE_LINE, sizeof(*nb));
    if (nb == NULL)
        return NULL;
    memset(nb, 0, sizeof(*nb));
    nb->home = home;
    atomic_fetch_add_explicit(&t->nheap, 1, memory_order_relaxed);
    return nb;
}

/* --- growth --- */

/* Begin doubling t, the current table. Locks: h->grow_lock. */
static int
htab_grow_begin_locked(struct htab *h, struct htab_table *t)
{
    struct htab_table *nt;
    int rc;

    if (t->nbuckets >= HTAB_MAX_BUCKETS) {
        t->grow_items = HTAB_NEVER;
        /* seq_cst: before htab_limits_set's recheck (htab_count.c) */
        atomic_store_explicit(&t->state, HTAB_IDLE, memory_order_seq_cst);
        htab_limits_set(h, t);
        return -ENOSPC;
    }
    rc = htab_table_create(t->nbuckets * 2, &nt);
    if (rc != 0) {
        /* ask again after some more entries, not at every write */
        t->grow_items +=
            (int64_t)MAX(t->nbuckets * HTAB_SLOTS / HTAB_RETRY_DIV, 1ull);
        atomic_store_explicit(&t->state, HTAB_IDLE, memory_order_seq_cst);
        htab_limits_set(h, t);
        return rc;
    }
    nt->all_next = h->tables;
    h->tables = nt;
    h->cursor = 0;
    /* Release: pairs with the acquire load of next by whoever sees a
     * moved bucket of t; nt's zeroed words come before. */
    atomic_store_explicit(&t->next, nt, memory_order_release);
    atomic_store_explicit(&t->state, HTAB_GROWING, memory_order_relaxed);
    /* the limits of the doubled table: nt asks once it is current */
    htab_limits_set(h, nt);
    return 0;
}

/* Append word to the chain of b, a home bucket of nt nobody else reaches
 * yet: 0 or -ENOMEM. */
static int
htab_put_private(struct htab *h, struct htab_table *nt, struct htab_bucket *b,
                 uint64_t word)
{
    struct htab_bucket *home = b;
    struct htab_bucket *last;

    do {
        for (int i = 0; i < HTAB_SLOTS; i++) {
            if (atomic_load_explicit(&b->slot[i], memory_order_relaxed) == 0) {
                /* Relaxed: published by the release store of moved. */
                atomic_store_explicit(&b->slot[i], word, memory_order_relaxed);
                return 0;
            }
        }
        last = b;
        b = atomic_load_explicit(&b->next, memory_order_relaxed);
    } while (b != NULL);

    struct htab_bucket *nb = htab_overflow_alloc(h, nt, home);
    if (nb == NULL)
        return -ENOMEM;
    atomic_store_explicit(&nb->slot[0], word, memory_order_relaxed);
    atomic_store_explicit(&last->next, nb, memory_order_relaxed);
    atomic_fetch_add_explicit(&nt->noverflow, 1, memory_order_relaxed);
    return 0;
}

/* Empty the chain of a private bucket again (a move that ran out of
 * memory); its overflow buckets stay linked, empty, for the retry. */
static void
htab_clear_private(struct htab_bucket *b)
{
    for (; b != NULL; b = atomic_load_explicit(&b->next, memory_order_relaxed))
        for (int i = 0; i < HTAB_SLOTS; i++)
            atomic_store_explicit(&b->slot[i], 0, memory_order_relaxed);
}

/* Move old bucket i of t into nt's buckets i and i + t->nbuckets: 0 or
 * -ENOMEM (nothing moved). Locks: takes and drops bucket i's lock. PMEM:
 * the rehash function reads each entry's key. */
static int
htab_move_bucket(struct htab *h, struct htab_table *t, struct htab_table *nt,
                 uint64_t i)
{
    struct htab_bucket *ob = &t->buckets[i];
    struct htab_bucket *lo = &nt->buckets[i];
    struct htab_bucket *hi = &nt->buckets[i + t->nbuckets];
    int rc = 0;

    spin_acquire(&ob->lock, LOCK_RANK_BUCKET);
    assert(!atomic_load_explicit(&ob->moved, memory_order_relaxed));
    for (struct htab_bucket *b = ob; b != NULL && rc == 0;
         b = atomic_load_explicit(&b->next, memory_order_relaxed)) {
        for (int s = 0; s < HTAB_SLOTS; s++) {
            uint64_t w =
                atomic_load_explicit(&b->slot[s], memory_order_relaxed);
            uint64_t hash;

            if (w == 0)
                continue;
            hash = h->rehash(h->rehash_arg, w & HTAB_LOC_MASK);
            assert((hash & t->mask) == i);
            assert(htab_word(hash, w & HTAB_LOC_MASK) == w);
            rc = htab_put_private(h, nt, (hash & nt->mask) == i ? lo : hi, w);
            if (rc != 0)
                break;
        }
    }
    if (rc != 0) {
        htab_clear_private(lo);
        htab_clear_private(hi);
    } else {
        /* Release: pairs with the acquire loads of moved (readers,
         * htab_lock): lo's and hi's chains are complete before. */
        atomic_store_explicit(&ob->moved, 1, memory_order_release);
    }
    spin_release(&ob->lock, LOCK_RANK_BUCKET);
    return rc;
}

/* The last bucket moved: nt becomes the table, t is retired.
 * Locks: h->grow_lock. */
static void
htab_grow_end_locked(struct htab *h, struct htab_table *t,
                     struct htab_table *nt)
{
    /* Release: pairs with htab_cur's acquire. seq_cst (a release, and
     * more) for the count's protocol (htab_count.c): a stripe that
     * passed its limit while t was doubling asked t, which ignores it;
     * either its htab_want reads nt here, or the recheck sees its count. */
    atomic_store_explicit(&h->tab, nt, memory_order_seq_cst);
    t->retired_next = h->retired;
    h->retired = t;
    atomic_fetch_add_explicit(&h->grows, 1, memory_order_relaxed);
    htab_count_recheck(h, nt);
}

/* Start a doubling that is due, then move up to budget buckets: 1 while
 * one is left under way, 0 when none is, -errno. Locks: h->grow_lock. */
static int
htab_grow_work_locked(struct htab *h, uint64_t budget)
{
    struct htab_table *t = atomic_load_explicit(&h->tab, memory_order_relaxed);
    struct htab_table *nt;
    int rc;

    switch (atomic_load_explicit(&t->state, memory_order_relaxed)) {
    case HTAB_IDLE:
        return 0;
    case HTAB_WANT:
        /* A stripe passed its limit: the table doubles once it holds more
         * than grow_items entries, counted; else the room left is handed
         * out again. The sum is read while writers run: each stripe's
         * count is exact, the sum off by at most the writes that ran
         * while it was read. */
        if ((int64_t)htab_count(h) <= t->grow_items) {
            /* seq_cst: before htab_limits_set's recheck (htab_count.c) */
            atomic_store_explicit(&t->state, HTAB_IDLE, memory_order_seq_cst);
            htab_limits_set(h, t);
            return 0;
        }
        rc = htab_grow_begin_locked(h, t);
        if (rc != 0)
            return rc;
        break;
    default:
        break;
    }
    nt = atomic_load_explicit(&t->next, memory_order_relaxed);
    while (budget > 0 && h->cursor < t->nbuckets) {
        rc = htab_move_bucket(h, t, nt, h->cursor);
        if (rc != 0)
            return rc;
        h->cursor++;
        budget--;
    }
    if (h->cursor < t->nbuckets)
        return 1;
    htab_grow_end_locked(h, t, nt);
    return 0;
}

int
htab_grow_start(struct htab *h)
{
    struct htab_table *t;
    int rc;

    if (h->rehash == NULL)
        return -EINVAL;
    pthread_mutex_lock(&h->grow_lock);
    t = atomic_load_explicit(&h->tab, memory_order_relaxed);
    if (atomic_load_explicit(&t->state, memory_order_relaxed) == HTAB_GROWING)
        rc = -EALREADY;
    else
        rc = htab_grow_begin_locked(h, t);
    pthread_mutex_unlock(&h->grow_lock);
    return rc;
}

int
htab_grow_step(struct htab *h, uint64_t nbuckets)
{
    int rc;

    if (h->rehash == NULL)
        return 0;
    pthread_mutex_lock(&h->grow_lock);
    rc = htab_grow_work_locked(h, nbuckets);
    pthread_mutex_unlock(&h->grow_lock);
    return rc;
}

void
htab_grow_finish(struct htab *h)
{
    struct htab_table *t;

    if (h->rehash == NULL)
        return;
    pthread_mutex_lock(&h->grow_lock);
    t = atomic_load_explicit(&h->tab, memory_order_relaxed);
    if (atomic_load_explicit(&t->state, memory_order_relaxed) == HTAB_GROWING)
        (void)htab_grow_work_locked(h, UINT64_MAX);
    pthread_mutex_unlock(&h->grow_lock);
}

bool
htab_growing(const struct htab *h)
{
    return atomic_load_explicit(&htab_cur(h)->state, memory_order_relaxed) ==
           HTAB_GROWING;
}

uint64_t
htab_grows(const struct htab *h)
{
    return atomic_load_explicit(&((struct htab *)h)->grows,
                                memory_order_relaxed);
}

uint64_t
htab_buckets_for(uint64_t items)
{
    return htab_size(items < HTAB_MAX_ITEMS ? items : HTAB_MAX_ITEMS);
}

int
htab_resize_empty(struct htab *h, uint64_t nbuckets)
{
    struct htab_table *t = atomic_load_explicit(&h->tab, memory_order_relaxed);
    struct htab_table *nt;
    int rc;

    if (nbuckets == t->nbuckets)
        return 0;
    if (nbuckets < HTAB_MIN_BUCKETS || nbuckets > HTAB_MAX_BUCKETS ||
        (nbuckets & (nbuckets - 1)) != 0 ||
        atomic_load_explicit(&t->state, memory_order_relaxed) == HTAB_GROWING)
        return -EINVAL;
    /* empty by contract: a walk would touch every page of a big table */
    rc = htab_table_create(nbuckets, &nt);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&h->grow_lock);
    nt->all_next = h->tables;
    h->tables = nt;
    atomic_store_explicit(&h->tab, nt, memory_order_release);
    htab_limits_set(h, nt);
    /* no other thread uses h: the old buckets go at once */
    htab_pend_drop(h);
    htab_table_free_buckets(t, false);
    t->freed = true;
    pthread_mutex_unlock(&h->grow_lock);
    return 0;
}

/* What htab_retired_take hands out: the buckets in an array, so that
 * htab_retired_free reads no link in them (a reserve bucket's table may
 * be freed by then, by another caller's htab_retired_free). */
struct htab_retired {
    struct htab_table *tables;
    uint64_t nbuckets;
    struct htab_bucket *bucket[];
};

struct htab_retired *
htab_retired_take(struct htab *h)
{
    struct htab_retired *r = NULL;
    uint64_t n;

    pthread_mutex_lock(&h->grow_lock);
    pthread_mutex_lock(&h->ovf_lock);
    n = atomic_load_explicit(&h->npend, memory_order_relaxed);
    if (h->retired != NULL || n > 0)
        r = malloc(sizeof(*r) + n * sizeof(r->bucket[0]));
    if (r != NULL) {
        /* Every table a bucket on pend is in lives: it was retired after
         * the unlink, and a take that took the table took the bucket. */
        struct htab_bucket *b =
            atomic_load_explicit(&h->pend, memory_order_relaxed);

        for (uint64_t i = 0; i < n; i++, b = b->home)
            r->bucket[i] = b;
        assert(b == NULL);
        r->nbuckets = n;
        atomic_store_explicit(&h->pend, NULL, memory_order_relaxed);
        atomic_store_explicit(&h->npend, 0, memory_order_relaxed);
        r->tables = h->retired;
        h->retired = NULL;
    }
    /* out of memory: everything stays for the next take */
    pthread_mutex_unlock(&h->ovf_lock);
    pthread_mutex_unlock(&h->grow_lock);
    return r;
}

void
htab_retired_free(struct htab *h, struct htab_retired *r)
{
    if (r == NULL)
        return;
    /* the grace period has ended: every htab_lock section that could see
     * these tables and buckets is over (TSan is told so) */
    TSAN_ACQUIRE(&htab_rcu_token);
    pthread_mutex_lock(&h->grow_lock);
    for (uint64_t i = 0; i < r->nbuckets; i++) {
        struct htab_bucket *b = r->bucket[i];
        struct htab_table *t = htab_reserve_of(h, b);

        if (t == NULL) {
            free(b);
            atomic_fetch_sub_explicit(&h->pend_heap, 1, memory_order_relaxed);
        } else if (!t->freed) {
            /* back to its table, for reuse (dropped if the table went) */
            pthread_mutex_lock(&h->ovf_lock);
            b->home = atomic_load_explicit(&t->free_head, memory_order_relaxed);
            atomic_store_explicit(&t->free_head, b, memory_order_relaxed);
            pthread_mutex_unlock(&h->ovf_lock);
        }
    }
    pthread_mutex_unlock(&h->grow_lock);
    struct htab_table *list = r->tables;
    free(r);
    while (list != NULL) {
        struct htab_table *t = list;

        list = t->retired_next;
        /* Only the buckets: the descriptor stays on h->tables, so a
         * reader holding a stale h->tab still reads a mask and a
         * pointer (it prefetches, it does not load, through them). */
        htab_table_free_buckets(t, false);
        pthread_mutex_lock(&h->grow_lock);
        t->freed = true;
        pthread_mutex_unlock(&h->grow_lock);
    }
}

uint64_t
htab_lookup_rcu(struct htab *h, uint64_t hash, htab_match_fn *match, void *arg)
{
    return htab_chain_lookup_rcu(htab_home_rcu(h, hash), hash, match, arg);
}

struct htab_bucket *
htab_home_bucket_rcu(struct htab *h, uint64_t hash)
{
    return htab_home_rcu(h, hash);
}

bool
htab_holds_rcu(struct htab *h, uint64_t hash, uint64_t loc)
{
    const uint64_t word = htab_word(hash, loc);
    struct htab_bucket *b = htab_home_rcu(h, hash);

    do {
        for (int i = 0; i < HTAB_SLOTS; i++) {
            /* Acquire: as htab_lookup_rcu, the item is complete before
             * the caller reads it. */
            uint64_t w =
                atomic_load_explicit(&b->slot[i], memory_order_acquire);
            if ((w >> HTAB_LOC_BITS) == (word >> HTAB_LOC_BITS) &&
                htab_loc_same(loc, w))
                return true;
        }
        b = atomic_load_explicit(&b->next, memory_order_acquire);
    } while (b != NULL);
    return false;
}

bool
htab_set_bits_rcu(struct htab *h, uint64_t hash, uint64_t loc, uint64_t bits)
{
    const uint64_t tag = htab_tag(hash);
    struct htab_bucket *b = htab_home_rcu(h, hash);

    do {
        for (int i = 0; i < HTAB_SLOTS; i++) {
            uint64_t w =
                atomic_load_explicit(&b->slot[i], memory_order_acquire);
            /* the word changes only by a writer (a new entry: not ours
             * any more) or by another setter (retry with its bits) */
            while ((w >> HTAB_LOC_BITS) == tag && htab_loc_same(loc, w)) {
                if ((w & bits) == bits)
                    return false;
                if (atomic_compare_exchange_weak_explicit(
                        &b->slot[i], &w, w | bits, memory_order_relaxed,
                        memory_order_relaxed))
                    return true;
            }
        }
        b = atomic_load_explicit(&b->next, memory_order_acquire);
    } while (b != NULL);
    return false;
}

/* The current table's home bucket, not looked at (a doubling may have
 * moved it): for prefetching only. */
static inline const struct htab_bucket *
htab_home_hint(const struct htab *h, uint64_t hash)
{
    const struct htab_table *t = htab_cur(h);

    return &t->buckets[hash & t->mask];
}

void
htab_prefetch(struct htab *h, uint64_t hash)
{
    __builtin_prefetch(htab_home_hint(h, hash), 1, 3);
}

void
htab_prefetch_read(struct htab *h, uint64_t hash)
{
    __builtin_prefetch(htab_home_hint(h, hash), 0, 3);
}

const struct htab_bucket *
htab_prefetch_table(struct htab *h, uint64_t *mask)
{
    const struct htab_table *t = htab_cur(h);

    *mask = t->mask;
    return t->buckets;
}

void
htab_first_many_rcu(struct htab *h, struct htab_first *f, unsigned n,
                    size_t stride)
{
    /* one table for the group: a doubling that moves a bucket after this
     * load sets its moved flag, which the walk below follows */
    const struct htab_table *t0 = htab_cur(h);

    for (unsigned i = 0; i < n;
         i++, f = (struct htab_first *)(void *)((char *)f + stride)) {
        const uint64_t hash = f->hash;
        const uint64_t tag = htab_tag(hash);
        const struct htab_table *t = t0;
        struct htab_bucket *b = &t->buckets[hash & t->mask];
        uint64_t loc = 0;
        _Atomic uint64_t *slot = NULL;

        /* as htab_home_rcu */
        while (
            unlikely(atomic_load_explicit(&b->moved, memory_order_acquire))) {
            t = atomic_load_explicit(&((struct htab_table *)t)->next,
                                     memory_order_acquire);
            b = &t->buckets[hash & t->mask];
        }
        /* as htab_chain_lookup_rcu with a match that is always true:
         * acquire loads (the caller reads the item at loc), unrolled */
        do {
#pragma GCC unroll 8
            for (int j = 0; j < HTAB_SLOTS; j++) {
                uint64_t w =
                    atomic_load_explicit(&b->slot[j], memory_order_acquire);
                if ((w >> HTAB_LOC_BITS) == tag) {
                    loc = w & HTAB_LOC_MASK;
                    slot = &b->slot[j];
                    goto found;
                }
            }
            b = atomic_load_explicit(&b->next, memory_order_acquire);
        } while (b != NULL);
    found:
        f->loc = loc;
        f->slot = slot;
    }
}

unsigned
htab_peek(struct htab *h, uint64_t hash, uint64_t locs[HTAB_SLOTS])
{
    const uint64_t tag = (uint64_t)htab_tag(hash) << HTAB_LOC_BITS;
    struct htab_bucket *b = htab_home_rcu(h, hash);
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

unsigned
htab_peek_hint(struct htab *h, uint64_t hash, struct htab_hint *hint)
{
    const uint64_t tag = (uint64_t)htab_tag(hash) << HTAB_LOC_BITS;
    struct htab_bucket *b = htab_home_rcu(h, hash);
    unsigned n = 0;

    /* Relaxed: a hint only, checked again under the lock. Unrolled as
     * htab_peek. */
#pragma GCC unroll 8
    for (int i = 0; i < HTAB_SLOTS; i++) {
        uint64_t w = atomic_load_explicit(&b->slot[i], memory_order_relaxed);
        if ((w ^ tag) <= HTAB_LOC_MASK) {
            hint->idx[n] = (uint8_t)i;
            hint->word[n++] = w;
        }
    }
    hint->home = b;
    hint->n = n;
    return n;
}

/* A writer's share of a doubling that is due or under way. Locks: none
 * held; tries h->grow_lock (a writer never waits for another's move). */
static void __attribute__((noinline)) htab_help(struct htab *h)
{
    if (h->help == 0 || pthread_mutex_trylock(&h->grow_lock) != 0)
        return;
    (void)htab_grow_work_locked(h, h->help);
    pthread_mutex_unlock(&h->grow_lock);
}

/* htab_lock inside its read section. */
static inline struct htab_bucket *
htab_lock_in(struct htab *h, uint64_t hash)
{
    struct htab_table *t = htab_cur(h);
    struct htab_bucket *b;

    if (unlikely(atomic_load_explicit(&t->state, memory_order_relaxed) !=
                 HTAB_IDLE)) {
        htab_help(h);
        t = htab_cur(h);
    }
    b = &t->buckets[hash & t->mask];
    spin_acquire(&b->lock, LOCK_RANK_BUCKET);
    /* Acquire: pairs with the mover's release store of moved (the lock
     * orders it too: the mover set it under this lock). */
    while (unlikely(atomic_load_explicit(&b->moved, memory_order_acquire))) {
        struct htab_bucket *old = b;

        t = atomic_load_explicit(&t->next, memory_order_acquire);
        b = &t->buckets[hash & t->mask];
        /* one bucket lock at a time: the moved one never changes again */
        spin_release(&old->lock, LOCK_RANK_BUCKET);
        spin_acquire(&b->lock, LOCK_RANK_BUCKET);
    }
    return b;
}

/* htab_lock past its fast path: a doubling due or under way, a moved
 * bucket. Inside the read section. */
static __attribute__((noinline)) struct htab_bucket *
htab_lock_slow(struct htab *h, uint64_t hash)
{
    return htab_lock_in(h, hash);
}

struct htab_bucket *
htab_lock(struct htab *h, uint64_t hash)
{
    /* Keeps the table of the bucket we lock from being freed. */
    HTAB_RCU_LOCK();
    /* the common case without a saved register: no doubling, the home
     * bucket not moved (else it is released and htab_lock_in goes on) */
    struct htab_table *t = htab_cur(h);
    if (likely(atomic_load_explicit(&t->state, memory_order_relaxed) ==
               HTAB_IDLE)) {
        struct htab_bucket *b = &t->buckets[hash & t->mask];
        spin_acquire(&b->lock, LOCK_RANK_BUCKET);
        /* Acquire: as htab_lock_in's */
        if (likely(!atomic_load_explicit(&b->moved, memory_order_acquire)))
            return b;
        spin_release(&b->lock, LOCK_RANK_BUCKET);
    }
    return htab_lock_slow(h, hash);
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

            if (w != 0 && htab_loc_same(loc, w))
                return &b->slot[i];
        }
        b = atomic_load_explicit(&b->next, memory_order_relaxed);
    } while (b != NULL);
    return NULL;
}

int
htab_insert_locked(struct htab *h, struct htab_bucket *b, uint64_t hash,
                   uint64_t loc)
{
    const uint64_t word = htab_word(hash, loc);
    struct htab_bucket *home = b;
    struct htab_bucket *last;
    struct htab_bucket *nb;
    struct htab_table *t;

    assert(loc != 0 && loc <= HTAB_LOC_MASK);
    assert(htab_is_locked(b));
    assert(!atomic_load_explicit(&b->moved, memory_order_relaxed));
    do {
        for (int i = 0; i < HTAB_SLOTS; i++) {
            if (atomic_load_explicit(&b->slot[i], memory_order_relaxed) == 0) {
                /* Release: pairs with the acquire load in htab_lookup_rcu;
                 * publishes the item written before this call. */
                atomic_store_explicit(&b->slot[i], word, memory_order_release);
                htab_count_in(h);
                return 0;
            }
        }
        last = b;
        b = atomic_load_explicit(&b->next, memory_order_relaxed);
    } while (b != NULL);

    t = htab_table_of(h, home);
    assert(home == &t->buckets[hash & t->mask]);
    nb = htab_overflow_alloc(h, t, home);
    if (nb == NULL)
        return -ENOMEM;
    /* Relaxed: published by the release store of last->next below. */
    atomic_store_explicit(&nb->slot[0], word, memory_order_relaxed);
    /* Release: pairs with the acquire load of next in htab_lookup_rcu. */
    atomic_store_explicit(&last->next, nb, memory_order_release);
    atomic_fetch_add_explicit(&t->noverflow, 1, memory_order_relaxed);
    htab_count_in(h);
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

/* b, an overflow bucket of its home's chain with every slot empty: take
 * it out of the chain (see "unlink" at the top) onto h->pend; nothing if
 * b is a home bucket. Locks: b's home. */
static void __attribute__((noinline))
htab_unlink_empty(struct htab *h, struct htab_bucket *b)
{
    struct htab_table *t;
    struct htab_bucket *home, *p;

    /* the locked home is in the current table or the doubled one */
    for (t = htab_cur(h); t != NULL;
         t = atomic_load_explicit(&t->next, memory_order_acquire))
        if (b >= t->buckets && b < t->buckets + t->nbuckets)
            return;
    home = b->home;
    t = htab_table_of(h, home);
    if (atomic_load_explicit(&h->npend, memory_order_relaxed) >=
        MAX(t->nbuckets / HTAB_PEND_DIV, HTAB_PEND_MIN))
        return;
    assert(htab_is_locked(home));
    assert(!atomic_load_explicit(&home->moved, memory_order_relaxed));
    p = home;
    for (;;) {
        /* Relaxed: the home lock orders us after every writer. */
        struct htab_bucket *n =
            atomic_load_explicit(&p->next, memory_order_relaxed);
        assert(n != NULL);
        if (n == b)
            break;
        p = n;
    }
    /* Release: pairs with the readers' acquire load of next (what follows
     * b was published before, by the link of that bucket). b->next stays:
     * a reader on b goes on from there. */
    atomic_store_explicit(&p->next,
                          atomic_load_explicit(&b->next, memory_order_relaxed),
                          memory_order_release);
    atomic_fetch_sub_explicit(&t->noverflow, 1, memory_order_relaxed);
    if (!htab_in_reserve(t, b)) {
        atomic_fetch_sub_explicit(&t->nheap, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->pend_heap, 1, memory_order_relaxed);
    }
    pthread_mutex_lock(&h->ovf_lock);
    b->home = atomic_load_explicit(&h->pend, memory_order_relaxed);
    atomic_store_explicit(&h->pend, b, memory_order_relaxed);
    uint64_t n = atomic_load_explicit(&h->npend, memory_order_relaxed) + 1;
    atomic_store_explicit(&h->npend, n, memory_order_relaxed);
    pthread_mutex_unlock(&h->ovf_lock);
    if (n == MAX(t->nbuckets / HTAB_KICK_DIV, HTAB_PEND_MIN) &&
        h->pend_hook != NULL)
        h->pend_hook(h->pend_arg);
}

void
htab_remove_locked(struct htab *h, _Atomic uint64_t *slot)
{
    /* buckets are cache-line aligned: the one holding the slot */
    struct htab_bucket *b =
        (struct htab_bucket *)((uintptr_t)slot & ~(uintptr_t)(CACHE_LINE - 1));
    uint64_t any = 0;

    assert(atomic_load_explicit(slot, memory_order_relaxed) != 0);
    /* Release: pairs with the acquire load in htab_lookup_rcu. Nothing is
     * published by a zero, but every slot store follows the same rule. */
    atomic_store_explicit(slot, 0, memory_order_release);
    htab_count_out(h);
    /* Relaxed: the home lock orders us after every writer. */
#pragma GCC unroll 8
    for (int i = 0; i < HTAB_SLOTS; i++)
        any |= atomic_load_explicit(&b->slot[i], memory_order_relaxed);
    if (unlikely(any == 0))
        htab_unlink_empty(h, b);
}

#pragma once
/*
 * Internals of the hash index shared by src/engine/htab.c (tables, lookups,
 * writers, the doubling), src/engine/htab_count.c (the entry count that
 * decides when a table doubles) and src/engine/htab_walk.c (walks and
 * sizes). Not for use elsewhere: the engine sees the
 * index through src/engine/htab.h. The concurrency rules of each field are
 * at the top of the file that writes it: the tables and struct htab in
 * htab.c, the stripes and h->seen in htab_count.c.
 */

#include "src/engine/htab.h"

#include "src/base/compiler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Entry counters, one cache line each; a thread counts in one of them. */
#define HTAB_STRIPES 64

enum { HTAB_IDLE, HTAB_WANT, HTAB_GROWING };

struct htab_table {
    struct htab_bucket *buckets; /* nbuckets home, then nreserve spare */
    uint64_t mask;               /* nbuckets - 1 */
    _Atomic uint32_t state;      /* HTAB_IDLE, HTAB_WANT, HTAB_GROWING */
    uint64_t nbuckets;           /* a power of two */
    uint64_t nreserve;
    size_t map_bytes; /* non-zero: buckets came from mmap, this long */
    struct htab_table *_Atomic next; /* the doubled table, once started */
    struct htab_table *retired_next; /* h->retired; h->grow_lock */
    struct htab_table *all_next;     /* h->tables; h->grow_lock */
    bool freed; /* buckets freed (htab_retired_free, htab_resize_empty) */
    int64_t grow_items; /* doubles past this many entries; h->grow_lock */
    /* Apart from the read-only fields above, which every lookup reads. */
    _Atomic uint64_t reserve_next CACHE_ALIGNED;
    _Atomic uint64_t noverflow; /* overflow buckets linked in chains */
    _Atomic uint64_t nheap;     /* of them, from aligned_alloc */
    /* unlinked reserve buckets back after their grace period, linked
     * through ->home: h->ovf_lock (relaxed loads to peek without it) */
    struct htab_bucket *_Atomic free_head;
};

/* One stripe of the entry count (htab_count.c). */
struct htab_stripe {
    _Atomic int64_t n;     /* inserted minus removed, this stripe's threads */
    _Atomic int64_t limit; /* n past this asks for a look (WANT) */
} CACHE_ALIGNED;

struct htab {
    struct htab_table *_Atomic tab; /* lookups start here */
    htab_rehash_fn *rehash;         /* NULL: the table never grows */
    void *rehash_arg;
    unsigned help;           /* home buckets a writer moves in htab_lock */
    htab_pend_fn *pend_hook; /* set before other threads use h */
    void *pend_arg;
    pthread_mutex_t grow_lock CACHE_ALIGNED;
    uint64_t cursor;            /* next old bucket to move */
    struct htab_table *retired; /* buckets waiting for a grace period */
    struct htab_table *tables;  /* every descriptor, for htab_destroy */
    _Atomic uint64_t grows;
    int64_t seen[HTAB_STRIPES]; /* each n at the last limits; grow_lock */
    /* innermost: taken under a bucket lock or h->grow_lock, takes none */
    pthread_mutex_t ovf_lock;
    /* unlinked overflow buckets waiting for htab_retired_take, linked
     * through ->home: ovf_lock (relaxed loads to peek without it) */
    struct htab_bucket *_Atomic pend;
    /* on pend: written under ovf_lock, read without it (a bound) */
    _Atomic uint64_t npend;
    /* heap buckets unlinked and not yet freed: htab_dram_bytes */
    _Atomic uint64_t pend_heap;
    struct htab_stripe stripe[HTAB_STRIPES];
};

/* The calling thread's stripe, as its offset in struct htab (0: none
 * yet); htab_stripe_take gives it one. */
extern __thread size_t htab_stripe_tls;
size_t htab_stripe_take(void);

/* A stripe passed its limit: ask the current table for a look at the
 * count. Context: a writer, under a bucket lock. */
void htab_want(struct htab *h) __attribute__((cold));
/* Hand out the room left under t->grow_items as the stripes' limits, then
 * htab_count_recheck(h, t). Nothing without a rehash function (the limits
 * stay at INT64_MAX). Locks: h->grow_lock. */
void htab_limits_set(struct htab *h, struct htab_table *t);
/* Ask t for a look (IDLE -> WANT) if some stripe is past its limit: after
 * the caller's seq_cst stores of limits, state or h->tab. Locks:
 * h->grow_lock. */
void htab_count_recheck(struct htab *h, struct htab_table *t);

static inline struct htab_stripe *
htab_my_stripe(struct htab *h)
{
    size_t off = htab_stripe_tls;

    if (unlikely(off == 0))
        off = htab_stripe_take();
    return (struct htab_stripe *)((char *)h + off);
}

/* Count an entry in: one fetch_add on the thread's own stripe, one load of
 * its limit. Context: a writer, under a bucket lock. */
static inline void
htab_count_in(struct htab *h)
{
    struct htab_stripe *s = htab_my_stripe(h);
    /* seq_cst, both: the count's protocol (htab_count.c); a locked add and
     * a plain load on x86-64, as relaxed ones. */
    int64_t n = atomic_fetch_add_explicit(&s->n, 1, memory_order_seq_cst) + 1;

    if (unlikely(n > atomic_load_explicit(&s->limit, memory_order_seq_cst)))
        htab_want(h);
}

/* Count an entry out. Relaxed: a remove never asks for a doubling, and
 * the sum is exact whatever the order. Context: a writer, under a bucket
 * lock. */
static inline void
htab_count_out(struct htab *h)
{
    atomic_fetch_sub_explicit(&htab_my_stripe(h)->n, 1, memory_order_relaxed);
}

static inline struct htab_table *
htab_cur(const struct htab *h)
{
    /* Acquire: pairs with the release store at the end of a doubling, so
     * the doubled table's buckets are visible. */
    return atomic_load_explicit(&((struct htab *)h)->tab, memory_order_acquire);
}

/* Reserve buckets handed out (reserve_next may run past the end). */
static inline uint64_t
htab_reserve_used(const struct htab_table *t)
{
    uint64_t n = atomic_load_explicit(&t->reserve_next, memory_order_relaxed);

    return MIN(n, t->nreserve);
}

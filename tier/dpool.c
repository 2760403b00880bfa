/*
 * The DRAM hot pool over memkind: see tier/dpool.h.
 *
 * Concurrency:
 *   d->stripe[i].lock
 *                guards that stripe's list head and the prev/next of every
 *                block on it (alloc, free, walk); plain mutexes, leaves:
 *                nothing else is taken under one, and walk takes them one
 *                at a time. A block's stripe is fixed at allocation (from
 *                its address), so that writers of different hot keys
 *                rarely meet on one lock.
 *   d->used      atomic: reserved by a CAS loop before memkind is
 *                called and returned after memkind_free (relaxed: a
 *                budget, it orders nothing)
 *   block->flags the caller's; atomic
 */
#include "tier/dpool.h"

#include "src/base/compiler.h"
#include "src/base/err.h"

#include <errno.h>
#include <memkind.h>
#include <pthread.h>
#include <stdlib.h>

#define DPOOL_STRIPES 16

struct block {
    struct block *prev, *next; /* its stripe's list, under its lock */
    uint32_t size;             /* bytes the caller asked for */
    _Atomic uint8_t flags;
    uint8_t stripe;
    uint8_t pad[2];
    /* the caller's bytes follow, 8-aligned */
};

_Static_assert(sizeof(struct block) % 8 == 0, "user bytes are 8-aligned");

struct stripe {
    pthread_mutex_t lock;
    struct block *head;
} CACHE_ALIGNED;

struct dpool {
    struct stripe stripe[DPOOL_STRIPES];
    uint64_t capacity;
    _Atomic uint64_t used;
};

static struct block *
block_of(const void *p)
{
    return (struct block *)((char *)p - sizeof(struct block));
}

int
dpool_create(uint64_t capacity, struct dpool **out)
{
    struct dpool *d = calloc(1, sizeof(*d));
    if (!d) {
        err_set("no DRAM for the hot pool's descriptor");
        return -ENOMEM;
    }
    for (unsigned i = 0; i < DPOOL_STRIPES; i++)
        pthread_mutex_init(&d->stripe[i].lock, NULL);
    d->capacity = capacity;
    *out = d;
    return 0;
}

void
dpool_destroy(struct dpool *d)
{
    if (!d)
        return;
    for (unsigned i = 0; i < DPOOL_STRIPES; i++) {
        struct block *b = d->stripe[i].head;
        while (b) {
            struct block *next = b->next;
            memkind_free(MEMKIND_DEFAULT, b);
            b = next;
        }
        pthread_mutex_destroy(&d->stripe[i].lock);
    }
    free(d);
}

int
dpool_alloc(struct dpool *d, size_t size, void **out)
{
    uint64_t need = sizeof(struct block) + size;
    uint64_t used = atomic_load_explicit(&d->used, memory_order_relaxed);

    if (size > UINT32_MAX)
        return -ENOSPC;
    do {
        if (used + need > d->capacity)
            return -ENOSPC;
    } while (!atomic_compare_exchange_weak_explicit(
        &d->used, &used, used + need, memory_order_relaxed,
        memory_order_relaxed));
    struct block *b = memkind_malloc(MEMKIND_DEFAULT, need);
    if (!b) {
        atomic_fetch_sub_explicit(&d->used, need, memory_order_relaxed);
        return -ENOMEM;
    }
    b->size = (uint32_t)size;
    atomic_init(&b->flags, 0);
    b->prev = NULL;
    b->stripe = (uint8_t)(((uintptr_t)b >> 6) % DPOOL_STRIPES);
    struct stripe *st = &d->stripe[b->stripe];
    pthread_mutex_lock(&st->lock);
    b->next = st->head;
    if (st->head)
        st->head->prev = b;
    st->head = b;
    pthread_mutex_unlock(&st->lock);
    *out = b + 1;
    return 0;
}

void
dpool_free(struct dpool *d, void *p)
{
    struct block *b = block_of(p);
    uint64_t need = sizeof(struct block) + b->size;

    struct stripe *st = &d->stripe[b->stripe];

    pthread_mutex_lock(&st->lock);
    if (b->prev)
        b->prev->next = b->next;
    else
        st->head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    pthread_mutex_unlock(&st->lock);
    memkind_free(MEMKIND_DEFAULT, b);
    atomic_fetch_sub_explicit(&d->used, need, memory_order_relaxed);
}

_Atomic uint8_t *
dpool_flags(void *p)
{
    return &block_of(p)->flags;
}

uint64_t
dpool_used(const struct dpool *d)
{
    return atomic_load_explicit(&d->used, memory_order_relaxed);
}

int
dpool_walk(struct dpool *d, dpool_visit_fn *fn, void *arg)
{
    int rc = 0;
    for (unsigned i = 0; i < DPOOL_STRIPES && !rc; i++) {
        struct stripe *st = &d->stripe[i];
        pthread_mutex_lock(&st->lock);
        for (struct block *b = st->head; b && !rc; b = b->next)
            rc = fn(arg, b + 1);
        pthread_mutex_unlock(&st->lock);
    }
    return rc;
}

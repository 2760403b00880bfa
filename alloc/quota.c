/*
 * Thread-local quotas: a stash of free chunks per slab class, so that the
 * common allocation and free take no shared lock. A stash holds up to two
 * batches; it is refilled with one slab_take() when empty and gives one batch
 * back with one slab_give() when full. A class with few chunks a page has a
 * smaller batch, an eighth of a page: with 32 chunks of 40 KiB, each thread
 * held a page or two of such a class, which a small pool needs elsewhere
 * (and a page move cannot take while a stash holds some of its chunks).
 *
 * Concurrency:
 *   struct quota   owner thread only, no lock (debug builds assert the
 *                  owner); quota_destroy() may run elsewhere once the owner
 *                  no longer uses it.
 *   q->refills     written by the owner only, read by any thread (stats):
 *                  relaxed atomics, a counter with nothing published
 *                  alongside it.
 *   The slab calls made here take the class lock (and the pool lock when a
 *   page is added); this file holds no lock of its own.
 */
#include "alloc/quota.h"

#include "alloc/slab_int.h"

#include "src/base/compiler.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define QUOTA_DEFAULT_BATCH 32
#define QUOTA_MAX_BATCH 256

struct quota_stash {
    uint32_t n;
    uint32_t batch; /* this class's: at most an eighth of a page */
    uint64_t *offs; /* capacity 2 * batch */
};

struct quota {
    struct slab *slab;
    unsigned batch;
    unsigned nclasses;
    bool pmeta; /* ablation only: slab_pmeta_on() */
    pthread_t owner;
    _Atomic uint64_t refills;
    struct quota_stash stash[SLAB_MAX_CLASSES];
    uint64_t storage[];
};

/* slab_chunk_usable inline (alloc/slab_int.h): both fast paths ask it */
static inline bool
chunk_usable(const struct slab *s, uint64_t off)
{
    return atomic_load_explicit(&s->page[off >> POOL_PAGE_SHIFT].state,
                                memory_order_relaxed) == PAGE_ACTIVE;
}

static inline void
assert_owner(const struct quota *q)
{
    assert(pthread_equal(q->owner, pthread_self()));
    (void)q;
}

int
quota_create(struct slab *s, unsigned batch, struct quota **out)
{
    if (batch == 0)
        batch = QUOTA_DEFAULT_BATCH;
    if (batch > QUOTA_MAX_BATCH)
        return -EINVAL;
    unsigned n = slab_nclasses(s);
    size_t cap = 2 * (size_t)batch;
    struct quota *q =
        calloc(1, sizeof(*q) + (size_t)n * cap * sizeof(uint64_t));
    if (!q)
        return -ENOMEM;
    q->slab = s;
    q->batch = batch;
    q->nclasses = n;
    q->owner = pthread_self();
    q->pmeta = slab_pmeta_on(s);
    for (unsigned i = 0; i < n; i++) {
        uint32_t eighth = POOL_PAGE_SIZE / slab_chunk_size(s, i) / 8;
        q->stash[i].batch = MAX(1u, MIN(batch, eighth));
        q->stash[i].offs = q->storage + i * cap;
    }
    *out = q;
    return 0;
}

static void
give_all(struct quota *q)
{
    for (unsigned i = 0; i < q->nclasses; i++) {
        struct quota_stash *st = &q->stash[i];
        if (st->n)
            slab_give(q->slab, i, st->offs, st->n);
        st->n = 0;
    }
}

void
quota_destroy(struct quota *q)
{
    if (!q)
        return;
    give_all(q);
    free(q);
}

/* quota_alloc past its fast path: a chunk of a draining page, an empty
 * stash, the ablation. Out of line, so that the fast path saves no
 * register. */
static __attribute__((noinline)) int
alloc_slow(struct quota *q, unsigned cls, uint64_t *off)
{
    struct quota_stash *st = &q->stash[cls];
    for (;;) {
        while (likely(st->n)) {
            uint64_t o = st->offs[--st->n];
            if (likely(chunk_usable(q->slab, o))) {
                *off = o;
                if (unlikely(q->pmeta)) /* ablation: page info in PMEM */
                    slab_pmeta_use(q->slab, o, true);
                return 0;
            }
            /* The page is being drained: hand its chunk back so the page
             * can leave the class. */
            slab_give(q->slab, cls, &o, 1);
        }
        int n = slab_take(q->slab, cls, st->offs, st->batch);
        if (n < 0)
            return n;
        atomic_store_explicit(
            &q->refills,
            atomic_load_explicit(&q->refills, memory_order_relaxed) + 1,
            memory_order_relaxed);
        st->n = (uint32_t)n;
    }
}

int
quota_alloc(struct quota *q, unsigned cls, uint64_t *off)
{
    struct quota_stash *st = &q->stash[cls];
    assert_owner(q);
    if (likely(st->n && !q->pmeta)) {
        uint64_t o = st->offs[st->n - 1];
        if (likely(chunk_usable(q->slab, o))) {
            st->n--;
            *off = o;
            return 0;
        }
    }
    return alloc_slow(q, cls, off);
}

/* quota_free past its fast path: a draining page's chunk, a full stash,
 * the ablation. */
static __attribute__((noinline)) void
free_slow(struct quota *q, unsigned cls, uint64_t off)
{
    struct quota_stash *st = &q->stash[cls];
    if (unlikely(q->pmeta)) /* ablation: page info in PMEM */
        slab_pmeta_use(q->slab, off, false);
    if (unlikely(!chunk_usable(q->slab, off))) {
        /* keep no chunk of a draining page: an idle owner would stall the
         * drain */
        slab_give(q->slab, cls, &off, 1);
        return;
    }
    if (unlikely(st->n == 2 * st->batch)) {
        st->n -= st->batch;
        slab_give(q->slab, cls, st->offs + st->n, st->batch);
    }
    st->offs[st->n++] = off;
}

/* quota_free's body, inline in quota_free_chunk as well. */
static inline __attribute__((always_inline)) void
free_fast(struct quota *q, unsigned cls, uint64_t off)
{
    struct quota_stash *st = &q->stash[cls];
    assert_owner(q);
    if (likely(st->n < 2 * st->batch && !q->pmeta &&
               chunk_usable(q->slab, off))) {
        st->offs[st->n++] = off;
        return;
    }
    free_slow(q, cls, off);
}

void
quota_free(struct quota *q, unsigned cls, uint64_t off)
{
    free_fast(q, cls, off);
}

void
quota_free_chunk(struct quota *q, uint64_t off)
{
    /* the page's class: a chunk not yet free keeps its page in it */
    free_fast(q,
              atomic_load_explicit(&q->slab->page[off >> POOL_PAGE_SHIFT].cls,
                                   memory_order_relaxed),
              off);
}

void
quota_flush(struct quota *q)
{
    assert_owner(q);
    give_all(q);
}

unsigned
quota_stashed(const struct quota *q, unsigned cls)
{
    return q->stash[cls].n;
}

uint64_t
quota_refills(const struct quota *q)
{
    return atomic_load_explicit(&q->refills, memory_order_relaxed);
}

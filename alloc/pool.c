/*
 * The page pool (see alloc/pool.h): which 1 MiB pages of the data area are
 * free, handed out, or kept out of circulation by the limit.
 *
 * Every page is in exactly one of three states, kept in two bitmaps:
 *
 *   used_bits  free_bits  state
 *   1          0          handed out (by pool_page_get, not yet put back)
 *   0          1          free: below the limit, pool_page_get may return it
 *   0          0          out of circulation: at or above the limit
 *
 * so free_bits never has a bit set at or above the limit, and nfree is its
 * population count. The search hint is a word index below which free_bits is
 * all zero: pool_page_get scans from it (the lowest free page is always at or
 * after it), leaves it on the word it found a page in, and a put or a raised
 * limit pulls it back down. The hint only moves forward over words that were
 * found empty, so a run of gets costs O(words) in total, amortised O(1) each.
 *
 * Concurrency:
 *   pool->lock (LOCK_RANK_POOL)  guards free_bits, used_bits, hint, and the
 *                                writes of nfree and limit.
 *   nfree, limit                 atomic; written only under pool->lock,
 *                                read relaxed by pool_nfree()/pool_limit()
 *                                without the lock: a snapshot that may be
 *                                stale by the time the caller looks at it.
 *   base, len, npages, nwords    immutable after pool_create.
 *   page contents                never read or written here (no PMEM
 *                                access at all, so none under the lock).
 *   lock order                   the pool lock is the innermost lock
 *                                (class -> pool); nothing is called with it
 *                                held.
 */

#include "alloc/pool.h"

#include "src/base/err.h"
#include "src/base/lock.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#define WORD_BITS 64u

struct pool {
    struct lock lock;
    char *base;
    uint64_t len;
    uint32_t npages;
    uint32_t nwords;
    _Atomic uint32_t limit;
    _Atomic uint32_t nfree;
    uint32_t hint;       /* free_bits[w] == 0 for every w < hint */
    uint64_t *free_bits; /* 1: free and below the limit */
    uint64_t *used_bits; /* 1: handed out */
};

/* Bits of word w that stand for pages in [lo, hi). */
static uint64_t
word_range_mask(uint32_t w, uint32_t lo, uint32_t hi)
{
    uint64_t first = (uint64_t)w * WORD_BITS;
    uint64_t from, to, mask;

    if (hi <= first || lo >= first + WORD_BITS || lo >= hi)
        return 0;
    from = lo > first ? lo - first : 0;
    to = hi - first < WORD_BITS ? hi - first : WORD_BITS;
    mask = to == WORD_BITS ? ~0ull : (1ull << to) - 1;
    return mask & ~((1ull << from) - 1);
}

static inline uint32_t
word_of(uint32_t page)
{
    return page / WORD_BITS;
}

static inline uint64_t
bit_of(uint32_t page)
{
    return 1ull << (page % WORD_BITS);
}

int
pool_create(void *base, uint64_t len, uint32_t limit, struct pool **out)
{
    struct pool *p;
    uint64_t npages;
    uint32_t nwords;
    int rc = 0;

    if (base == NULL || out == NULL) {
        err_set("pool: no base address");
        return -EINVAL;
    }
    if ((uintptr_t)base % POOL_PAGE_SIZE != 0) {
        err_set("pool: base %p is not 1 MiB aligned", base);
        return -EINVAL;
    }
    npages = len / POOL_PAGE_SIZE;
    if (len % POOL_PAGE_SIZE != 0 || npages == 0) {
        err_set("pool: length %llu is not a positive multiple of 1 MiB",
                (unsigned long long)len);
        return -EINVAL;
    }
    if (npages >= POOL_NO_PAGE) {
        err_set("pool: length %llu holds too many pages",
                (unsigned long long)len);
        return -EINVAL;
    }
    if (limit > npages) {
        err_set("pool: limit %u is beyond the %llu pages mapped", limit,
                (unsigned long long)npages);
        return -EINVAL;
    }
    if (limit == 0)
        limit = (uint32_t)npages;

    p = calloc(1, sizeof(*p));
    if (p == NULL)
        goto err_nomem;
    nwords = (uint32_t)((npages + WORD_BITS - 1) / WORD_BITS);
    p->free_bits = calloc(nwords, sizeof(uint64_t));
    if (p->free_bits == NULL)
        goto err_free_pool;
    p->used_bits = calloc(nwords, sizeof(uint64_t));
    if (p->used_bits == NULL)
        goto err_free_bits;
    rc = lock_init(&p->lock, LOCK_RANK_POOL);
    if (rc != 0) {
        err_set("pool: cannot initialise its lock");
        goto err_free_used;
    }

    p->base = base;
    p->len = len;
    p->npages = (uint32_t)npages;
    p->nwords = nwords;
    p->hint = 0;
    for (uint32_t w = 0; w < nwords; w++)
        p->free_bits[w] = word_range_mask(w, 0, limit);
    atomic_init(&p->limit, limit);
    atomic_init(&p->nfree, limit);
    *out = p;
    return 0;

err_free_used:
    free(p->used_bits);
err_free_bits:
    free(p->free_bits);
err_free_pool:
    free(p);
    if (rc != 0)
        return rc < 0 ? rc : -rc;
err_nomem:
    err_set("pool: out of memory for %llu pages of bookkeeping",
            (unsigned long long)npages);
    return -ENOMEM;
}

void
pool_destroy(struct pool *p)
{
    if (p == NULL)
        return;
    lock_fini(&p->lock);
    free(p->used_bits);
    free(p->free_bits);
    free(p);
}

/*
 * Context: any thread. Locks: takes pool->lock (innermost; the caller may
 * hold a class lock).
 */
int
pool_page_get(struct pool *p, uint32_t *page)
{
    uint32_t limit, lwords, w;

    lock_acquire(&p->lock);
    limit = atomic_load_explicit(&p->limit, memory_order_relaxed);
    lwords = (limit + WORD_BITS - 1) / WORD_BITS;
    for (w = p->hint; w < lwords; w++) {
        uint64_t bits = p->free_bits[w];
        uint32_t pg;

        if (bits == 0)
            continue;
        pg = w * WORD_BITS + (uint32_t)__builtin_ctzll(bits);
        assert(pg < limit);
        assert(!(p->used_bits[w] & bit_of(pg)));
        p->free_bits[w] &= ~bit_of(pg);
        p->used_bits[w] |= bit_of(pg);
        atomic_store_explicit(
            &p->nfree,
            atomic_load_explicit(&p->nfree, memory_order_relaxed) - 1,
            memory_order_relaxed);
        p->hint = w;
        lock_release(&p->lock);
        *page = pg;
        return 0;
    }
    assert(atomic_load_explicit(&p->nfree, memory_order_relaxed) == 0);
    p->hint = w;
    lock_release(&p->lock);
    return -ENOSPC;
}

/* Context: any thread. Locks: takes pool->lock. */
int
pool_page_take(struct pool *p, uint32_t page)
{
    if (page >= p->npages)
        return -EBUSY;
    uint32_t w = word_of(page);
    lock_acquire(&p->lock);
    if (!(p->free_bits[w] & bit_of(page))) {
        lock_release(&p->lock);
        return -EBUSY;
    }
    p->free_bits[w] &= ~bit_of(page);
    p->used_bits[w] |= bit_of(page);
    atomic_store_explicit(
        &p->nfree, atomic_load_explicit(&p->nfree, memory_order_relaxed) - 1,
        memory_order_relaxed);
    lock_release(&p->lock);
    return 0;
}

/* Context: any thread. Locks: takes pool->lock. */
void
pool_page_put(struct pool *p, uint32_t page)
{
    uint32_t w = word_of(page);

    assert(page < p->npages);
    if (page >= p->npages)
        return;
    lock_acquire(&p->lock);
    assert(p->used_bits[w] & bit_of(page)); /* put twice, or never got */
    if (!(p->used_bits[w] & bit_of(page))) {
        lock_release(&p->lock);
        return;
    }
    p->used_bits[w] &= ~bit_of(page);
    if (page < atomic_load_explicit(&p->limit, memory_order_relaxed)) {
        p->free_bits[w] |= bit_of(page);
        atomic_store_explicit(
            &p->nfree,
            atomic_load_explicit(&p->nfree, memory_order_relaxed) + 1,
            memory_order_relaxed);
        if (w < p->hint)
            p->hint = w;
    }
    lock_release(&p->lock);
}

/*
 * Lowering the limit takes the free pages in [npages, old) out of
 * circulation; pages of that range still in use stay with their owner and
 * stay out when put back. Raising it frees the pages in [old, npages) that
 * are not in use. Context: any thread. Locks: takes pool->lock.
 */
int
pool_set_limit(struct pool *p, uint32_t npages)
{
    uint32_t old, lo, hi, nfree;

    if (npages == 0 || npages > p->npages)
        return -EINVAL;
    lock_acquire(&p->lock);
    old = atomic_load_explicit(&p->limit, memory_order_relaxed);
    nfree = atomic_load_explicit(&p->nfree, memory_order_relaxed);
    lo = npages < old ? npages : old;
    hi = npages < old ? old : npages;
    for (uint32_t w = word_of(lo); lo < hi && w <= word_of(hi - 1); w++) {
        uint64_t mask = word_range_mask(w, lo, hi);

        if (npages < old) {
            nfree -= (uint32_t)__builtin_popcountll(p->free_bits[w] & mask);
            p->free_bits[w] &= ~mask;
        } else {
            uint64_t add = mask & ~p->used_bits[w];

            assert(!(p->free_bits[w] & mask));
            nfree += (uint32_t)__builtin_popcountll(add);
            p->free_bits[w] |= add;
        }
    }
    if (npages > old && word_of(old) < p->hint)
        p->hint = word_of(old);
    atomic_store_explicit(&p->nfree, nfree, memory_order_relaxed);
    atomic_store_explicit(&p->limit, npages, memory_order_relaxed);
    lock_release(&p->lock);
    return 0;
}

uint32_t
pool_npages(const struct pool *p)
{
    return p->npages;
}

uint32_t
pool_limit(const struct pool *p)
{
    return atomic_load_explicit(&p->limit, memory_order_relaxed);
}

uint32_t
pool_nfree(const struct pool *p)
{
    return atomic_load_explicit(&p->nfree, memory_order_relaxed);
}

char *
pool_base(const struct pool *p)
{
    return p->base;
}

#pragma once
/*
 * The page pool: a mapped data area cut into 1 MiB pages. It knows nothing of
 * what the pages hold and never writes into them (all its state is in DRAM).
 *
 * Pages are numbered 0..npages-1 from the base. Only pages below the limit
 * are handed out; pool_page_get() returns the lowest-numbered free one so
 * that a later shrink finds the high pages empty as often as possible.
 * pool_set_limit() grows or shrinks the limit online; pages at or above a
 * lowered limit that are still in use stay with their owner until it returns
 * them (the slab layer drains them), and are then kept out of circulation.
 *
 * Concurrency:
 *   pool->lock (LOCK_RANK_POOL) guards the free bitmap, nfree, limit and the
 *   search hint. base/len/npages are immutable after create. The lock is
 *   never held across a PMEM write (there are none in this module).
 */

#include <stdint.h>

#define POOL_PAGE_SHIFT 20
#define POOL_PAGE_SIZE (1u << POOL_PAGE_SHIFT)
#define POOL_NO_PAGE UINT32_MAX

struct pool;

/* base must be POOL_PAGE_SIZE aligned, len a multiple of it (at least one
 * page). limit: pages usable at first (0 = all). 0, -EINVAL or -ENOMEM. */
int pool_create(void *base, uint64_t len, uint32_t limit, struct pool **out);
void pool_destroy(struct pool *p);

/* Lowest free page below the limit: 0, or -ENOSPC when none. */
int pool_page_get(struct pool *p, uint32_t *page);
/* Take one given free page below the limit (a restart giving back the
 * pages its classes had): 0, or -EBUSY when it is not free or not below
 * the limit. */
int pool_page_take(struct pool *p, uint32_t page);
/* Give a page back (it stays out of circulation if at or above the limit). */
void pool_page_put(struct pool *p, uint32_t page);

/* Change the number of usable pages: 0, or -EINVAL if npages is 0 or beyond
 * the mapping. Takes effect at once for pool_page_get(). */
int pool_set_limit(struct pool *p, uint32_t npages);

uint32_t pool_npages(const struct pool *p); /* pages in the mapping */
uint32_t pool_limit(const struct pool *p);  /* pages that may be in use */
uint32_t pool_nfree(const struct pool *p);  /* free pages below the limit */
char *pool_base(const struct pool *p);

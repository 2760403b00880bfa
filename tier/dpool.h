#pragma once
/*
 * The DRAM hot pool: a fixed byte budget of DRAM blocks from memkind, for
 * the copies of write-hot items (src/engine/hotkey.c). The only place that
 * calls memkind.
 *
 * Kind: MEMKIND_DEFAULT (ordinary DRAM through memkind's jemalloc arenas).
 * The point of the pool is to keep write-hot data off PMEM, and on a
 * machine with PMEM the DRAM is the default NUMA node memory; a
 * high-bandwidth kind (MEMKIND_HBW) would fail where no HBM exists, and
 * MEMKIND_DAX_KMEM would put the copies back on PMEM.
 *
 * Each block carries a small DRAM prefix the pool owns (its size, its place
 * in the pool's list of live blocks, and an atomic byte of flags for the
 * user), then the caller's bytes, 8-aligned.
 *
 * Concurrency:
 *   stripe locks  the live blocks are on 16 lists by address, each under
 *                 its own plain mutex (alloc and free take one, walk each
 *                 in turn); never held with another lock: walk callbacks
 *                 must take none
 *   d->used       atomic; reserved with a CAS loop before memkind is asked,
 *                 so the budget is never exceeded
 *   block bytes   the caller's; dpool never reads them
 *   block flags   atomic, the caller's meaning (dpool_flags)
 */

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct dpool;

/* capacity bytes (> 0): 0 or -ENOMEM (err_msg says why). */
int dpool_create(uint64_t capacity, struct dpool **out);
/* Frees every block still live. */
void dpool_destroy(struct dpool *d);

/* A block of size bytes, 8-aligned: 0, -ENOSPC (over the budget) or
 * -ENOMEM (memkind refused). The block's flags start at 0. */
int dpool_alloc(struct dpool *d, size_t size, void **out);
void dpool_free(struct dpool *d, void *p);

/* The user's flag byte of a live block. */
_Atomic uint8_t *dpool_flags(void *p);

/* Bytes of live blocks (their sizes as asked plus the prefixes). A relaxed
 * read: a snapshot. */
uint64_t dpool_used(const struct dpool *d);

/* Call fn for every live block, under its list's lock (so none is freed
 * during the call): stops at the first nonzero return and returns it. fn
 * must take no lock and must not allocate or free from d. */
typedef int dpool_visit_fn(void *arg, void *p);
int dpool_walk(struct dpool *d, dpool_visit_fn *fn, void *arg);

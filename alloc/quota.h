#pragma once
/*
 * Thread-local quotas: each thread keeps a small stash of free chunks per
 * slab class, refilled from and returned to the slab in batches, so the
 * common allocation and free take no shared lock.
 *
 * Concurrency: a quota belongs to the thread that created it; only that
 * thread calls quota_alloc/quota_free/quota_flush (debug builds assert it).
 * quota_destroy may run on another thread once the owner is gone.
 */

#include <stdint.h>

#include "alloc/slab.h"

struct quota;

/* batch: chunks moved per refill/return (1..256; 0 = default 32). */
int quota_create(struct slab *s, unsigned batch, struct quota **out);
/* Gives every stashed chunk back and frees the quota. NULL is a no-op. */
void quota_destroy(struct quota *q);

/* 0 and *off set, or -ENOSPC (class and pool exhausted). Chunks of draining
 * pages found in the stash are given back, not used. */
int quota_alloc(struct quota *q, unsigned cls, uint64_t *off);
/* Stash a chunk; a full stash gives half of it back in one batch. */
void quota_free(struct quota *q, unsigned cls, uint64_t off);
/* quota_free of an allocated chunk, its class read from its page here
 * (as slab_class_of, without the call). */
void quota_free_chunk(struct quota *q, uint64_t off);
/* Give back everything stashed (all classes). */
void quota_flush(struct quota *q);

/* Tests: chunks of class cls in the stash, the one place a chunk can be
 * besides the slab's free lists and its holder (what the tests' accounting
 * "free + stashed + held == capacity" needs). Owner thread. */
unsigned quota_stashed(const struct quota *q, unsigned cls);
/* slab_take calls made; any thread (a relaxed read) */
uint64_t quota_refills(const struct quota *q);

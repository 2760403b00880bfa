#pragma once
/*
 * Internals of the flash tier shared by src/engine/ext.c (open and close,
 * the header reserve, spill, compaction, figures) and src/engine/ext_read.c
 * (blocking and asynchronous flash reads, recache and its re-read filter,
 * a thread's rings). Not for use outside these two files; the engine sees
 * the tier through src/engine/ext.h. The concurrency rules of each field
 * are at the top of the file that writes it: struct ext in ext.c (the
 * re-read filter in ext_read.c), struct ext_thread in ext_read.c.
 */

#include <stdbool.h>
#include <stdint.h>

#include "src/engine/ext.h"
#include "tier/nvs.h"

struct ext_pending;

/* The tier's state per cache (c->ext). */
struct ext {
    ext_recache_fn *recache; /* stores a recached value (store.c) */
    /* the re-read filter: per slot a key-hash tag (high 30 bits) and the
     * reads seen (low 2 bits); atomic, relaxed; NULL when off */
    uint32_t *reread;
    uint64_t reread_mask;
    /* the header reserve: a free pool page for the flash-header class
     * that fills up next, refilled after use; UINT32_MAX: none */
    _Atomic uint32_t hdr_page;
};

/* Buckets of a thread's table of asynchronous reads by locator (a power
 * of two, about the ring's depth). */
#define EXT_PEND_BUCKETS 256

/* The tier's state per thread context (t->ext), owner thread only. */
struct ext_thread {
    struct nvs_ring *ring;    /* blocking flash reads, lazily */
    struct nvs_ring *aring;   /* asynchronous ones (the server) */
    uint32_t recache_ctr;     /* flash hits since the last recache */
    int want_page;            /* header class short of chunks, or -1 */
    int refill;               /* the header class that used the reserve,
                                 which is refilled from the next other
                                 class evicting; or -1 */
    void *owner;              /* tc_async_owner; NULL: reads block */
    struct ext_pending *pend; /* asynchronous reads in flight */
    /* the same reads by locator (chained on hnext), so that a second get
     * of a value already being read joins that read */
    struct ext_pending *by_loc[EXT_PEND_BUCKETS];
};

static inline bool
ext_loc_equal(const struct nvs_loc *a, const struct nvs_loc *b)
{
    return a->seg == b->seg && a->gen == b->gen && a->off == b->off &&
           a->vlen == b->vlen && a->crc == b->crc;
}

/* Allocate x's re-read filter as c->cfg asks (x->reread stays NULL when
 * ext_recache_window is 0): 0, or -ENOMEM with one sentence in err_msg().
 * The caller frees x->reread. Context: ext_open. */
int ext_reread_open(struct ext *x, const struct tc_config *cfg);

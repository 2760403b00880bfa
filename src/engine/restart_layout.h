#pragma once
/*
 * What the engine keeps in the pool file besides the items, so that a scan
 * after a crash (or a stop) can rebuild the index and the slab state
 * (DESIGN "What survives a restart"; doc/architecture.md):
 *
 * - struct restart_meta, in the region header's REGION_USER_BYTES
 *   (tier/region.h region_user): the settings a reattach must match (item
 *   format version, item_size_max, the slab classes) and the flush_all
 *   state. Written with one PMEM store per word, never under a lock:
 *   flush_cas and flush_at before flush_all answers (tc_flush_all) or when
 *   a delayed flush takes effect (cache_flush_check).
 * - the page table (region_page_table): one byte per 1 MiB data page, its
 *   slab class + 1, 0 for a page no class has had since the pool was
 *   formatted. Written when a page joins a class, before the page is
 *   formatted, with no lock held (the slab's format hook); a page given
 *   back keeps its byte: its chunks were all invalidated before it was
 *   drained, so a scan finds nothing on it.
 *
 * The CAS counter is not stored while open: a scan takes the largest CAS
 * and sequence among the items and the flush watermark.
 */

#include <stdint.h>

#include "tier/region_layout.h"

#define RESTART_MAGIC 0x54454d4547414e45ull /* "ENAGEMET" little endian */
/* 1: items with the 8-byte commit word (seq << 32 | CRC32C) in a 32-byte
 * header; 3: the 24-byte header, client flags and a client's CAS in opt,
 * the 64-bit store sequence split over the header and the 8-byte commit
 * word (src/engine/item_layout.h). (2 was an unreleased 24-byte header with
 * a 4-byte commit word.) 4: as 3, and segment pages (RESTART_PAGE_SEGMENT)
 * whose packed items the scan restores: a version 3 pool may hold packed
 * copies written committed before their publication, which must not come
 * back. 5: as 4, and packed items may carry exp16 (an expiry relative to
 * their segment header's exp_base, TTL buckets): a version 4 engine reads
 * only exp32 at run time and would serve such items past their expiry.
 * Another version: a cold start. */
#define RESTART_VERSION 5u

struct restart_meta {
    uint64_t magic;         /* RESTART_MAGIC once formatted */
    uint32_t version;       /* RESTART_VERSION */
    uint32_t item_size_max; /* tc_config.item_size_max */
    uint32_t min_chunk;     /* chunk size of class 0 */
    uint32_t chunk_max;     /* chunk size of the largest class */
    uint32_t nclasses;      /* slab classes */
    uint32_t flush_at;      /* a pending delayed flush_all (unix s), 0 none */
    uint64_t growth_bits;   /* the growth factor's bits (a double) */
    uint64_t flush_cas;     /* items with cas <= this are flushed */
    uint32_t class_hash;    /* FNV-1a of every class's chunk size, never 0:
                               the rule that made them (a chunk step) counts
                               even where the fields above agree; a pool
                               written before it was kept holds 0 */
    uint32_t pad;
};

_Static_assert(sizeof(struct restart_meta) <= REGION_USER_BYTES,
               "the engine's metadata fits the region header's user bytes");

/* Page table byte of a page that has no class. */
#define RESTART_PAGE_NONE 0
/* A segment of the packed store (src/engine/packed.c). Not a class: the
 * scan walks its items (a valid segment header) or gives the page back
 * (no valid header, no packed store configured, beyond the memory limit). */
#define RESTART_PAGE_SEGMENT 0x80

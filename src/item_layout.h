#pragma once
/*
 * On-PMEM layout of an item. One header chunk per item:
 *
 *   struct item_hdr (24 B) | key (klen B) | value (vlen B)          plain
 *   struct item_hdr (24 B) | key | pad to 8 | uint64 tail[nchain]    chained
 *
 * A chained item (larger than the largest slab chunk) keeps its value in
 * tail chunks, each starting with struct item_tail (16 B) that names its
 * head, followed by value bytes. All positions are byte offsets from the
 * pool base, never pointers. Items are immutable once published in the
 * index except for exptime, which touch/gat overwrite with one aligned
 * 4-byte store.
 *
 * PMEM is volatile capacity here (DESIGN "What survives a restart"): there
 * is no CRC on PMEM items; the kind byte and bounds are checked wherever a
 * chunk is read without the index vouching for it (eviction scans).
 */

#include <stdint.h>

#define ITEM_KIND_EMPTY 0x00 /* formatted chunk, never held an item */
#define ITEM_KIND_HEAD 0xa1
#define ITEM_KIND_TAIL 0xa2

#define ITEM_STALE 0x01 /* iflags: invalidated, served until replaced */

struct item_hdr {
    uint8_t kind;     /* ITEM_KIND_HEAD */
    uint8_t klen;     /* 1..250 */
    uint8_t nchain;   /* tail chunks, 0 for a plain item */
    uint8_t iflags;   /* ITEM_STALE */
    uint32_t vlen;    /* value bytes */
    uint32_t flags;   /* client flags */
    uint32_t exptime; /* absolute unix seconds, 0 = never */
    uint64_t cas;
};

struct item_tail {
    uint8_t kind; /* ITEM_KIND_TAIL */
    uint8_t pad[7];
    uint64_t head; /* offset of the head chunk */
};

_Static_assert(sizeof(struct item_hdr) == 24, "item header is 24 bytes");
_Static_assert(sizeof(struct item_tail) == 16, "tail header is 16 bytes");

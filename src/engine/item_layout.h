#pragma once
/*
 * On-PMEM layout of an item. One header chunk per item:
 *
 *   struct item_hdr (24 B) | key (klen B) | value (vlen B)          plain
 *   struct item_hdr (24 B) | key | pad to 8 | uint64 tail[nchain]    chained
 *
 *   struct item_hdr (24 B) | key | pad to 8 | struct nvs_loc (24 B)   flash
 *
 * A chained item (larger than the largest slab chunk) keeps its value in
 * tail chunks, each starting with struct item_tail (16 B) that names its
 * head, followed by value bytes. All positions are byte offsets from the
 * pool base, never pointers. Items are immutable once published in the
 * index except for exptime, which touch/gat overwrite with one aligned
 * 4-byte store.
 *
 * A flash item (kind ITEM_KIND_FLASH) keeps only its header and
 * key in PMEM: vlen is the value's length, nchain is 0, and the value lives
 * on the NVMe store at the locator after the key (tier/nvs.h), which also
 * carries the segment generation and the CRC32C the store checks on every
 * read. The locator never changes in place: compaction writes a new header.
 *
 * PMEM is volatile capacity here (DESIGN "What survives a restart"): there
 * is no CRC on PMEM items; the kind byte and bounds are checked wherever a
 * chunk is read without the index vouching for it (eviction scans).
 */

#include <stdint.h>

#include "src/tiercache.h"
#include "tier/nvs.h"

#define ITEM_KIND_EMPTY 0x00 /* formatted chunk, never held an item */
#define ITEM_KIND_HEAD 0xa1
#define ITEM_KIND_TAIL 0xa2
#define ITEM_KIND_FLASH 0xa3 /* header in PMEM, value on the NVMe store */

#define ITEM_STALE 0x01 /* iflags: invalidated, served until replaced */

struct item_hdr {
    uint8_t kind;     /* ITEM_KIND_HEAD or ITEM_KIND_FLASH */
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

_Static_assert(sizeof(struct item_hdr) == TC_ITEM_HEADER_SIZE,
               "item header is the size the API states");
_Static_assert(sizeof(struct item_tail) == TC_ITEM_TAIL_HEADER_SIZE,
               "tail header is the size the API states");

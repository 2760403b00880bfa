#pragma once
/*
 * The PMEM segment header: the first 64 bytes (one line) of a pool page
 * that the packed small-item store uses as a segment
 * (doc/design/small-items.md, "Segments"). Written once when the segment
 * opens, outside any lock, by alloc/seg.c through the caller's PMEM write
 * helpers; hcrc last. Freeing or evicting the segment stores 0 in hcrc
 * first, so nothing of it comes back after a crash.
 *
 * The payload starts at SEG_HEADER_SIZE. Opening a segment also zeroes the
 * payload's first SEG_FIRST_SLOT_ZERO bytes before hcrc, so that a walk of
 * a reused page stops at once instead of reading the page's previous life.
 */

#include <stddef.h>
#include <stdint.h>

#define SEG_HEADER_SIZE 64u
#define SEG_MAGIC 0x47534354u /* "TCSG" in memory (little-endian) */
#define SEG_VERSION 1u
#define SEG_FIRST_SLOT_ZERO 8u
/* sflags */
#define SEG_SFLAG_MERGE 0x01u /* opened by a merge (holds copies) */

struct seg_header {
    uint32_t magic;       /* SEG_MAGIC */
    uint16_t version;     /* SEG_VERSION */
    uint8_t ttl_bucket;   /* 0: no expiry; 1..15 TTL classes */
    uint8_t sflags;       /* SEG_SFLAG_* */
    uint64_t seq_base;    /* a block of SEG_SEQ_BLOCK from the CAS counter */
    uint32_t created;     /* unix seconds at open */
    uint32_t exp_base;    /* created + the bucket's lowest TTL */
    uint32_t page;        /* its own pool page number */
    uint32_t open_count;  /* the region's open count at open (diagnostics) */
    uint8_t reserved[28]; /* 0 */
    uint32_t hcrc; /* CRC32C of bytes 0..59, 0 stored as 1; 0: no segment */
};

_Static_assert(sizeof(struct seg_header) == SEG_HEADER_SIZE,
               "segment header is one line");
_Static_assert(offsetof(struct seg_header, seq_base) == 8, "seq_base at 8");
_Static_assert(offsetof(struct seg_header, created) == 16, "created at 16");
_Static_assert(offsetof(struct seg_header, page) == 24, "page at 24");
_Static_assert(offsetof(struct seg_header, reserved) == 32, "reserved at 32");
_Static_assert(offsetof(struct seg_header, hcrc) == 60, "hcrc at 60");

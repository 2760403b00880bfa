#pragma once
/*
 * On-PMEM layout of an item. One header chunk per item:
 *
 *   struct item_hdr (32 B) | key (klen B) | value (vlen B)          plain
 *   struct item_hdr (32 B) | key | pad to 8 | uint64 tail[nchain]    chained
 *
 *   struct item_hdr (32 B) | key | pad to 8 | struct nvs_loc (24 B)   flash
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
 * Recoverability (DESIGN "What survives a restart"; doc/architecture.md):
 *
 * - An item becomes valid by ONE aligned 8-byte store written last: the
 *   commit word, after header, key, tail list, tails and value are in place
 *   and fenced (pm_fence: pmem_memcpy may use non-temporal stores). A chunk
 *   whose commit word is 0 holds nothing a scan may keep.
 * - commit = seq << 32 | crc. crc is the CRC32C (tier/nvs's nvs_crc32c, the
 *   one the flash records use) over the 32-byte header with exptime and the
 *   commit word read as 0 (so kind, klen, nchain, iflags, vlen, flags and
 *   CAS count), then the key, then the tail list of a chained item or the
 *   locator of a flash item: a set checksums its DRAM staging copy of
 *   header and key in one pass. exptime is left out: touch/gat change it in
 *   place with one 4-byte store. seq is the low
 *   32 bits of the store sequence (c->cas_seq, taken once per write, also
 *   for a client-chosen CAS; a page move's copy and a recache keep their
 *   source's, so that they never outrank a set that raced them): of two
 * committed copies of one key the newer wins, compared in serial-number
 * arithmetic
 *   ((int32_t)(a - b) > 0). Two copies are both committed only between the
 *   publication of the newer and the invalidation of the older by the same
 *   writer before it answers, a window far below 2^31 stores.
 * - The value is NOT checksummed. A process crash cannot tear it: it is
 *   written and fenced before the commit store, and the kernel keeps the
 *   file's pages. Power loss on real PMEM is the durability level that
 *   flushes before the commit store, with the same guarantee. A value CRC
 *   would cost a pass over every value on every set (a 1 MiB value twice
 *   over) to catch only media errors, which PMEM reports as machine checks.
 * - Anything that must not come back has its commit word set to 0 (one
 *   8-byte store on the item's own line, outside every lock) before the
 *   operation that removed it answers, or before its chunk is reused:
 *   the old copy of a replaced item, a deleted one, an evicted, swept or
 *   reaped one, an unpublished one (a failed add), the source of a move.
 *   Copies in the DRAM hot pool have no commit word; the PMEM copy they
 *   replaced was invalidated like any replaced item.
 * - A copy of an item a writer may replace or remove meanwhile (a demotion
 *   from the DRAM hot pool, a page move) is written with commit word
 *   ITEM_COMMIT_PENDING (a scan keeps nothing of it), published (the index
 *   switched to it under the bucket lock), and only then committed, by a
 *   compare-and-swap from ITEM_COMMIT_PENDING, in the RCU read section of
 *   its publication. A writer that replaces or removes it invalidates it
 *   before answering like any item, so the swap fails, or its 0 comes after:
 *   after the writer's answer the copy is never valid, even when the writer
 *   left no newer copy in PMEM (a DRAM hot-pool item, a delete). A page
 *   move also invalidates its source before the publication: after it, a
 *   writer replaces the copy, never the source. A crash in between loses
 *   the key (a miss), never brings back an older value.
 *
 * The kind byte and bounds are checked wherever a chunk is read without
 * the index vouching for it (eviction scans, the recovery scan).
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
    uint64_t commit; /* seq << 32 | crc, written last; 0: not an item */
};

#define ITEM_COMMIT_OFFSET 24

/* The commit word of a copy written and not yet committed (seq 0: no
 * commit word takes it, item.c) */
#define ITEM_COMMIT_PENDING 0xffffffffull

struct item_tail {
    uint8_t kind; /* ITEM_KIND_TAIL */
    uint8_t pad[7];
    uint64_t head; /* offset of the head chunk */
};

_Static_assert(sizeof(struct item_hdr) == TC_ITEM_HEADER_SIZE,
               "item header is the size the API states");
_Static_assert(__builtin_offsetof(struct item_hdr, commit) ==
                   ITEM_COMMIT_OFFSET,
               "the commit word is the header's last 8 bytes");
_Static_assert(sizeof(struct item_tail) == TC_ITEM_TAIL_HEADER_SIZE,
               "tail header is the size the API states");

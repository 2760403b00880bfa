#pragma once
/*
 * On-PMEM layout of an item. One header chunk per item:
 *
 *   struct item_hdr (24 B) | key (klen B) | opt | value (vlen B)        plain
 *   struct item_hdr (24 B) | key | opt | pad to 8 | uint64 tail[nchain] chained
 *
 *   struct item_hdr (24 B) | key | opt | pad to 8 | struct nvs_loc (24 B) flash
 *
 * opt holds what most items do not need, each field only when its iflags
 * bit says so, in this order, unaligned (read with memcpy):
 *   uint32 client flags   ITEM_HAS_FLAGS: the client flags are not 0
 *   uint64 CAS            ITEM_HAS_CAS: a CAS the client chose (meta E,
 *                         the binary protocol's), not the store sequence
 * An item's CAS is its store sequence (seq) unless ITEM_HAS_CAS: a set
 * takes seq from the CAS counter (c->cas_seq) and that is its CAS, so a
 * plain set stores no CAS of its own. Copies (a page move, a demotion from
 * the DRAM hot pool, a recache, a flash header) keep seq, opt and with them
 * the CAS. The base header is 24 bytes (kind, klen, nchain, iflags; vlen;
 * the 8-byte commit word, seq_lo over the CRC; seq_hi; exptime): a
 * 100-byte value with a 16-byte key is 140 bytes, a 144-byte chunk.
 *
 * A chained item (larger than the largest slab chunk) keeps its value in
 * tail chunks, each starting with struct item_tail (16 B) that names its
 * head, followed by value bytes. All positions are byte offsets from the
 * pool base, never pointers. Items are immutable once published in the
 * index except for exptime, which touch/gat overwrite with one aligned
 * 4-byte store.
 *
 * A flash item (kind ITEM_KIND_FLASH) keeps only its header, key and opt in
 * PMEM: vlen is the value's length, nchain is 0, and the value lives
 * on the NVMe store at the locator after the key (tier/nvs.h), which also
 * carries the segment generation and the CRC32C the store checks on every
 * read. The locator never changes in place: compaction writes a new header.
 *
 * Recoverability (DESIGN "What survives a restart"; doc/architecture.md):
 *
 * - An item becomes valid by ONE aligned 8-byte store written last: the
 *   commit word, after header, key, opt, tail list, tails and value are in
 *   place and fenced (pm_fence: pmem_memcpy may use non-temporal stores). A
 *   chunk whose commit word's CRC half is 0 holds nothing a scan may keep.
 * - commit word = seq_lo << 32 | crc, the header's bytes 8-15 (crc the
 *   low half, at ITEM_COMMIT_OFFSET, as the field commit; seq_lo the high
 *   half, seq_hi right after it, so the sequence is one 8-byte load). crc
 *   is the CRC32C (tier/nvs's nvs_crc32c, the one the flash records use)
 *   over the 24-byte header with exptime and the crc half read as 0 (so
 *   kind, klen, nchain, iflags, vlen, seq_lo and seq_hi count), then the
 *   key and opt, then the tail list of a chained item or the locator of a
 *   flash item: a set checksums its DRAM staging copy of header, key and
 *   opt in one pass. A CRC of 0 or ITEM_COMMIT_PENDING is stored as 1 or
 *   ITEM_COMMIT_PENDING - 1. exptime is left out: touch/gat change it in
 *   place with one 4-byte store. seq (seq_hi << 32 | seq_lo) is the 64-bit
 *   store sequence (c->cas_seq, taken once per write, also for a
 *   client-chosen CAS; a page move's copy and a recache keep their
 *   source's, so that they never outrank a set that raced them): of two
 *   committed copies of one key the one with the larger seq wins. Two
 *   copies are both committed only between the publication of the newer
 *   and the invalidation of the older by the same writer before it
 *   answers.
 * - seq_lo is in place from the item's write on, whatever its state: a
 *   copy written pending holds seq_lo << 32 | ITEM_COMMIT_PENDING, and its
 *   commit changes only the crc half (a 4-byte compare-and-swap); an
 *   invalidation stores 0 in the crc half only. So seq_lo never changes
 *   once the item is published, and a reader that found an item in the
 *   index (pending, or replaced and invalidated since) always reads its
 *   CAS from the header.
 * - The value is NOT checksummed. A process crash cannot tear it: it is
 *   written and fenced before the commit store, and the kernel keeps the
 *   file's pages. Power loss on real PMEM is the durability level that
 *   flushes before the commit store, with the same guarantee. A value CRC
 *   would cost a pass over every value on every set (a 1 MiB value twice
 *   over) to catch only media errors, which PMEM reports as machine checks.
 * - Anything that must not come back has its commit word's crc half set to
 *   0 (one 4-byte store on the item's own line, outside every lock; the
 *   seq_lo half stays) before the operation that removed it answers, or
 *   before its chunk is reused:
 *   the old copy of a replaced item, a deleted one, an evicted, swept or
 *   reaped one, an unpublished one (a failed add), the source of a move.
 *   Copies in the DRAM hot pool have the same header with crc 0 (seq_hi
 *   and seq_lo give their CAS as in PMEM) and commit nowhere; the PMEM copy
 *   they replaced was invalidated like any replaced item.
 * - A copy of an item a writer may replace or remove meanwhile (a demotion
 *   from the DRAM hot pool, a page move) is written with commit word
 *   seq_lo << 32 | ITEM_COMMIT_PENDING (a scan keeps nothing of it),
 *   published (the index switched to it under the bucket lock), and only
 *   then committed, by a 4-byte compare-and-swap of the crc half from
 *   ITEM_COMMIT_PENDING to crc (the word becomes seq_lo << 32 | crc), in
 *   the RCU read section of its publication. A writer that replaces or removes
 * it invalidates it before answering like any item, so the swap fails, or its 0
 * comes after: after the writer's answer the copy is never valid, even when the
 * writer left no newer copy in PMEM (a DRAM hot-pool item, a delete). A page
 *   move also invalidates its source before the publication: after it, a
 *   writer replaces the copy, never the source. A crash in between loses
 *   the key (a miss), never brings back an older value.
 *
 * The kind byte and bounds are checked wherever a chunk is read without
 * the index vouching for it (eviction scans, the recovery scan).
 *
 * The CRC is what tells a torn item after a crash. A start after a clean
 * close does not check it (item_check_shape instead of item_check,
 * src/engine/restart.c): the close finished every write, commit and
 * invalidation before it marked the pool clean, and a page that took a
 * class had every chunk formatted (its kind byte) before the page was
 * used, so every chunk start the scan reads is empty, invalidated,
 * pending, a tail, or an item whose bytes were all in place before its
 * commit word. The mark is consumed at
 * attach: a crash after it checks every CRC again.
 */

#include <stdint.h>

#include "src/tiercache.h"
#include "tier/nvs.h"

#define ITEM_KIND_EMPTY 0x00 /* formatted chunk, never held an item */
#define ITEM_KIND_HEAD 0xa1
#define ITEM_KIND_TAIL 0xa2
#define ITEM_KIND_FLASH 0xa3 /* header in PMEM, value on the NVMe store */

/* iflags */
#define ITEM_STALE 0x01     /* invalidated, served until replaced */
#define ITEM_HAS_FLAGS 0x02 /* opt holds the client flags */
#define ITEM_HAS_CAS 0x04   /* opt holds a CAS other than seq */

struct item_hdr {
    uint8_t kind;   /* ITEM_KIND_HEAD or ITEM_KIND_FLASH */
    uint8_t klen;   /* 1..250 */
    uint8_t nchain; /* tail chunks, 0 for a plain item */
    uint8_t iflags; /* ITEM_STALE, ITEM_HAS_FLAGS, ITEM_HAS_CAS */
    uint32_t vlen;  /* value bytes */
    /* the commit word, 8 bytes written last: seq_lo << 32 | commit */
    uint32_t commit;  /* CRC32C; 0: not an item; ITEM_COMMIT_PENDING */
    uint32_t seq_lo;  /* store sequence, low half; the CAS unless HAS_CAS */
    uint32_t seq_hi;  /* store sequence, high half (seq_lo's neighbour) */
    uint32_t exptime; /* absolute unix seconds, 0 = never */
};

/* The 8-byte commit word: commit (low half) and seq_lo (high half). */
#define ITEM_COMMIT_OFFSET 8

/* The CRC half of a copy written and not yet committed (no CRC is stored
 * as this value, item.c) */
#define ITEM_COMMIT_PENDING 0xffffffffu

/* The most bytes opt takes (client flags and a CAS). */
#define ITEM_OPT_MAX 12

struct item_tail {
    uint8_t kind; /* ITEM_KIND_TAIL */
    uint8_t pad[7];
    uint64_t head; /* offset of the head chunk */
};

_Static_assert(sizeof(struct item_hdr) == TC_ITEM_HEADER_SIZE,
               "item header is the size the API states");
_Static_assert(__builtin_offsetof(struct item_hdr, commit) ==
                       ITEM_COMMIT_OFFSET &&
                   __builtin_offsetof(struct item_hdr, seq_lo) ==
                       ITEM_COMMIT_OFFSET + 4 &&
                   ITEM_COMMIT_OFFSET % 8 == 0,
               "the commit word is 8 aligned bytes, its CRC half first "
               "(little-endian: the low half)");
_Static_assert(__builtin_offsetof(struct item_hdr, seq_hi) ==
                       __builtin_offsetof(struct item_hdr, seq_lo) + 4 &&
                   __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "seq_lo and seq_hi read as one little-endian uint64");
_Static_assert(sizeof(struct item_tail) == TC_ITEM_TAIL_HEADER_SIZE,
               "tail header is the size the API states");

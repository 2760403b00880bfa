#pragma once
/*
 * On-PMEM layout of a packed item (doc/design/small-items.md, "The packed
 * item"): small items appended back to back, 4-byte aligned, in a segment
 * (one 1 MiB pool page) whose first 64 bytes are its header. Items start
 * at PITEM_SEG_START.
 *
 *   struct pitem_hdr (8 B) | exp32 | key | flags32 | cas64 | value | pad
 *
 * Only the header is always there; each optional field only when its
 * iflags bit says so: exp32 (4 B, absolute expiry; right after the header
 * so that it is 4-aligned and touch stores it in place), flags32 (4 B,
 * client flags above 15, unaligned: read with memcpy), cas64 (8 B, a CAS
 * other than the derived one, unaligned). Padding to 4 is never written
 * nor read. A 16-byte key with a 100-byte value, client flags 0..15 and
 * no exp32 is 8 + 16 + 100 = 124 bytes.
 *
 * Derived CAS and sequence: seq_base (the segment's block of the CAS
 * counter) + offset in the segment / 4, unless HAS_CAS.
 *
 * commit, written last (pitem.c):
 *   0           no item here: the end of the segment's items
 *   1           dead (deleted, replaced, a pending copy that lost); its
 *               lengths stay, so a walk steps over it
 *   2           pending (a copy not yet committed): stepped over
 *   3..65535    committed; the value is check16
 *
 * check16: the low 16 bits of CRC32C (tier/nvs.h's nvs_crc32c) over
 * seq_base (8 bytes, little-endian), the item's offset in the segment (4
 * bytes, little-endian), header bytes 0..3 (klen, cflags/iflags, vlen),
 * the key, flags32 and cas64; values 0..2 are stored as 3..5. Left out:
 * exp16 and exp32 (touch stores them in place), the commit itself, the
 * value (item_layout.h's reasons: a process crash cannot tear it, it is
 * written and fenced before the commit). The check finds corruption and a
 * misplaced item (seq_base and offset count); what finds a torn item is
 * the zero slot: before an item commits, bytes 4..7 of the slot after it
 * (its exp16 and commit) are stored 0, so the first zero commit ends the
 * segment and nothing of an unfinished write or of the segment's previous
 * life is read past it.
 */

#include <stdint.h>

/* Items start after the segment header (one 64-byte line). */
#define PITEM_SEG_START 64u

/* byte 1: cflags in the low nibble, iflags in the high one */
#define PITEM_CFLAGS_MASK 0x0fu
#define PITEM_HAS_FLAGS 0x10u /* flags32 holds the client flags (> 15) */
#define PITEM_HAS_CAS 0x20u   /* cas64 holds a CAS other than the derived */
#define PITEM_HAS_EXP 0x40u   /* exp32 holds the expiry; exp16 is 0 */
#define PITEM_STALE 0x80u     /* invalidated (meta I), served until replaced */
#define PITEM_IFLAGS_MASK 0xf0u

/* commit values */
#define PITEM_COMMIT_NONE 0u
#define PITEM_COMMIT_DEAD 1u
#define PITEM_COMMIT_PENDING 2u
#define PITEM_COMMIT_MIN 3u /* the smallest check16 */

#define PITEM_KLEN_MAX 250u
#define PITEM_VLEN_MAX 65535u
#define PITEM_ALIGN 4u

/* The smallest item (header, a 1-byte key, padding): a span shorter than
 * this past an item's end holds no item, and its zero slot is not
 * written. */
#define PITEM_SIZE_MIN 12u

struct pitem_hdr {
    uint8_t klen;    /* 1..250 */
    uint8_t fl;      /* cflags (low nibble) | iflags (high nibble) */
    uint16_t vlen;   /* value bytes */
    uint16_t exp16;  /* 0: never (or HAS_EXP); else exp_base + exp16 - 1 */
    uint16_t commit; /* 0 none, 1 dead, 2 pending, else check16 */
};

#define PITEM_EXP16_OFFSET 4u
#define PITEM_COMMIT_OFFSET 6u
/* What the zero slot stores: exp16 and commit, one aligned 4-byte word. */
#define PITEM_SLOT_WORD_OFFSET 4u
/* Header bytes check16 covers (klen, fl, vlen). */
#define PITEM_CHECKED_HDR 4u

/* The most bytes the optional fields take (exp32, flags32, cas64). */
#define PITEM_OPT_MAX 16u

/* Item bytes: header, optional fields, key, value, padding to 4. */
static inline uint32_t
pitem_size_of(uint32_t klen, uint32_t vlen, unsigned iflags)
{
    uint32_t n = (uint32_t)sizeof(struct pitem_hdr) + klen + vlen;
    n += (iflags & PITEM_HAS_EXP) ? 4u : 0u;
    n += (iflags & PITEM_HAS_FLAGS) ? 4u : 0u;
    n += (iflags & PITEM_HAS_CAS) ? 8u : 0u;
    return (n + PITEM_ALIGN - 1) & ~(PITEM_ALIGN - 1);
}

/* The largest item. */
#define PITEM_SIZE_MAX                                                         \
    ((8u + PITEM_OPT_MAX + PITEM_KLEN_MAX + PITEM_VLEN_MAX + 3u) & ~3u)

_Static_assert(sizeof(struct pitem_hdr) == 8, "the header is 8 bytes");
_Static_assert(
    __builtin_offsetof(struct pitem_hdr, exp16) == PITEM_EXP16_OFFSET &&
        __builtin_offsetof(struct pitem_hdr, commit) == PITEM_COMMIT_OFFSET &&
        PITEM_SLOT_WORD_OFFSET % 4 == 0 && PITEM_COMMIT_OFFSET % 2 == 0,
    "exp16 and commit are one aligned 4-byte word, commit an "
    "aligned 2-byte one");
_Static_assert(PITEM_SEG_START % PITEM_ALIGN == 0 &&
                   PITEM_SIZE_MIN == ((8u + 1u + 3u) & ~3u),
               "items start 4-aligned; the smallest is a header and a "
               "1-byte key");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "fields are stored little-endian");

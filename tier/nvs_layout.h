#pragma once
/*
 * On-NVMe layouts of the segment store (tier/nvs.c), version 2. Fixed-width
 * fields, little endian (the host's), offsets only, a CRC on everything read
 * back.
 *
 * A segment is seg_size bytes of one path. Its first NVS_SEG_HDR_SIZE bytes
 * (one 4 KiB block) hold struct nvs_seg_header. After it come the segment's
 * write buffers, back to back, each written once as one extent of whole
 * 4 KiB blocks (at most wbuf_size bytes; the first one includes the header
 * block):
 *
 *   values (packed from the extent's start) | zero | directory | footer
 *
 * - Values carry no header, so that a value of up to 4 KiB can be read with
 *   one 4 KiB block. Each value is placed right after the previous one,
 *   unless that position makes it span more 4 KiB blocks than
 *   ceil(vlen / 4 KiB) and moving it to the next block boundary costs at
 *   most vlen / 8 bytes of padding (nvs_val_place()); then it starts on that
 *   boundary. The engine's locator (struct nvs_loc) names the value's offset
 *   in the segment, its length and CRC32C(key, value); a read fetches only
 *   the blocks covering the value and checks the CRC with the caller's key.
 * - The directory is one descriptor per record (struct nvs_rec_desc and the
 *   key, padded to 8 bytes), newest first. While the buffer fills in DRAM
 *   it grows down from the buffer's end; the writer moves it to just before
 *   the footer when the buffer is sealed. A buffer is full when values and
 *   directory (plus the footer) meet. Records never span write buffers.
 * - The footer (struct nvs_wbuf_footer) is the last 40 bytes of the
 *   extent's last block. It names the extent's start and length and the
 *   directory's place, count and CRC32C, and carries its own CRC. A scan
 *   (compaction) finds an extent by its footer: starting at a known extent
 *   start, the first block end holding a valid footer of this generation
 *   names the extent; a damaged footer loses that extent's records only
 *   (the scan resumes at the next valid footer's extent).
 */

#include <stdint.h>

#define NVS_SEG_MAGIC 0x474553534e56434eull /* "NCVNSSEG" little endian */
#define NVS_DESC_MAGIC 0x4443564eu          /* "NVCD" little endian */
#define NVS_FOOT_MAGIC 0x4643564eu          /* "NVCF" little endian */
#define NVS_LAYOUT_VERSION 2u

#define NVS_BLOCK 4096u        /* O_DIRECT alignment and write unit */
#define NVS_SEG_HDR_SIZE 4096u /* bytes reserved for the segment header */
#define NVS_DESC_ALIGN 8u      /* directory entries are 8-byte aligned */

struct nvs_seg_header {
    uint64_t magic;    /* NVS_SEG_MAGIC */
    uint32_t version;  /* NVS_LAYOUT_VERSION */
    uint32_t seg;      /* segment number across all paths */
    uint32_t gen;      /* generation the segment was opened with */
    uint32_t seg_size; /* bytes per segment */
    uint64_t opened_unix;
    uint32_t rsv[7];
    uint32_t crc; /* CRC32C of the bytes before it */
};
_Static_assert(sizeof(struct nvs_seg_header) == 64,
               "segment header is 64 bytes");
_Static_assert(sizeof(struct nvs_seg_header) <= NVS_SEG_HDR_SIZE,
               "segment header fits its block");

/* A directory entry; the key (klen bytes) follows, then zeros to 8. */
struct nvs_rec_desc {
    uint32_t magic; /* NVS_DESC_MAGIC */
    uint32_t gen;   /* the segment's generation when written */
    uint32_t voff;  /* the value's offset in the segment */
    uint32_t vlen;  /* value bytes */
    uint32_t crc;   /* CRC32C of key then value */
    uint8_t klen;   /* key bytes (memcached keys are at most 250) */
    uint8_t rsv[3]; /* zero */
};
_Static_assert(sizeof(struct nvs_rec_desc) == 24,
               "record descriptor is 24 bytes");

struct nvs_wbuf_footer {
    uint32_t magic;   /* NVS_FOOT_MAGIC */
    uint32_t gen;     /* the segment's generation */
    uint32_t start;   /* segment offset of the extent (4 KiB aligned) */
    uint32_t len;     /* extent bytes, this footer's block included */
    uint32_t dir_off; /* segment offset of the directory */
    uint32_t dir_len; /* directory bytes */
    uint32_t nrec;    /* directory entries */
    uint32_t dir_crc; /* CRC32C of the directory bytes */
    uint32_t rsv;     /* zero */
    uint32_t crc;     /* CRC32C of the bytes before it */
};
_Static_assert(sizeof(struct nvs_wbuf_footer) == 40,
               "write buffer footer is 40 bytes");

/* Directory bytes of a record with a klen-byte key. */
static inline uint32_t
nvs_desc_size(uint32_t klen)
{
    uint32_t n = (uint32_t)sizeof(struct nvs_rec_desc) + klen;
    return (n + NVS_DESC_ALIGN - 1) & ~(NVS_DESC_ALIGN - 1);
}

/* Blocks that [off, off + len) touches (0 for an empty range). */
static inline uint64_t
nvs_blocks_spanned(uint64_t off, uint64_t len)
{
    if (len == 0)
        return 0;
    return (off + len - 1) / NVS_BLOCK - off / NVS_BLOCK + 1;
}

/* Where a value of vlen bytes goes when the next free byte is at off
 * (offsets 4 KiB-aligned the same way as the file): off itself, or the next
 * block boundary when off would make it span more than the minimal
 * ceil(vlen / 4 KiB) blocks and the padding is at most vlen / 8. */
static inline uint64_t
nvs_val_place(uint64_t off, uint64_t vlen)
{
    uint64_t min = (vlen + NVS_BLOCK - 1) / NVS_BLOCK;
    uint64_t up = (off + NVS_BLOCK - 1) & ~(uint64_t)(NVS_BLOCK - 1);

    if (nvs_blocks_spanned(off, vlen) > min && up - off <= vlen / 8)
        return up;
    return off;
}

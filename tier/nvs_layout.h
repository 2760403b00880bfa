#pragma once
/*
 * On-NVMe layouts of the segment store (tier/nvs.c). Fixed-width fields,
 * little endian (the host's), offsets only, a CRC on everything read back.
 *
 * A segment is seg_size bytes of one path. Its first NVS_SEG_HDR_SIZE bytes
 * (one 4 KiB block, so that records after it can stay block aligned) hold
 * struct nvs_seg_header; records follow, each 8-byte aligned:
 *
 *   struct nvs_rec_header | key (klen bytes) | value (vlen bytes) | pad to 8
 *
 * A write buffer goes out as one write of whole 4 KiB blocks; the bytes
 * between its last record and the end of its last block are zero, so a
 * scan that finds no record magic at an 8-aligned offset skips to the next
 * 4 KiB boundary. Records never span write buffers.
 */

#include <stdint.h>

#define NVS_SEG_MAGIC 0x474553534e56434eull /* "NCVNSSEG" little endian */
#define NVS_REC_MAGIC 0x5243564eu           /* "NVCR" little endian */
#define NVS_LAYOUT_VERSION 1u

#define NVS_BLOCK 4096u        /* O_DIRECT alignment and write unit */
#define NVS_SEG_HDR_SIZE 4096u /* bytes reserved for the segment header */
#define NVS_REC_ALIGN 8u       /* records start 8-byte aligned */

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

struct nvs_rec_header {
    uint32_t magic; /* NVS_REC_MAGIC */
    uint32_t gen;   /* the segment's generation when written */
    uint32_t vlen;  /* value bytes */
    uint8_t klen;   /* key bytes (memcached keys are at most 250) */
    uint8_t rsv8[3];
    uint32_t crc; /* CRC32C of key then value */
    uint32_t rsv; /* zero */
};
_Static_assert(sizeof(struct nvs_rec_header) == 24,
               "record header is 24 bytes");
_Static_assert(sizeof(struct nvs_rec_header) % NVS_REC_ALIGN == 0,
               "record header keeps the key 8-aligned");

/* Bytes a record takes on the medium, padding included. */
static inline uint64_t
nvs_rec_size(uint32_t klen, uint64_t vlen)
{
    uint64_t n = sizeof(struct nvs_rec_header) + klen + vlen;
    return (n + NVS_REC_ALIGN - 1) & ~(uint64_t)(NVS_REC_ALIGN - 1);
}

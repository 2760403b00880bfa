#pragma once
/*
 * On-PMEM layout of the region header: the first REGION_DATA_OFFSET bytes of
 * the pool file. Fixed-width fields only, no pointers. The data area (1 MiB
 * pages handed to alloc/pool) starts at REGION_DATA_OFFSET, which is 2 MiB so
 * that the pages are huge-page aligned on a real DAX mapping.
 */

#include <stdint.h>

#define REGION_MAGIC 0x4843414352454954ull /* "TIERCACH" little endian */
/* 2: items carry a commit word (src/engine/item_layout.h) and the header
 * area keeps the page table and the layer above's bytes */
#define REGION_VERSION 2u
#define REGION_DATA_OFFSET (2u << 20)
/* After the header block, one byte per data page for the layer above (the
 * engine keeps each page's slab class there, src/engine/restart_layout.h),
 * up to the data area: 2,093,056 pages, about 2 TiB of pool. */
#define REGION_PAGE_TABLE_OFFSET 4096u
#define REGION_PAGE_TABLE_MAX (REGION_DATA_OFFSET - REGION_PAGE_TABLE_OFFSET)
/* Bytes of the header block the layer above owns (zero in a new header). */
#define REGION_USER_BYTES 256u
/* Smallest pool file accepted: header area plus 4 pages of 1 MiB. */
#define REGION_MIN_SIZE (REGION_DATA_OFFSET + (4u << 20))

struct region_header {
    uint64_t magic;        /* REGION_MAGIC */
    uint32_t version;      /* REGION_VERSION */
    uint32_t clean;        /* 1 after a graceful close, 0 while open */
    uint64_t file_size;    /* bytes of the whole file */
    uint64_t data_offset;  /* REGION_DATA_OFFSET */
    uint64_t data_size;    /* file_size - data_offset, rounded down to 1 MiB */
    uint64_t created_unix; /* seconds, when the header was first written */
    uint64_t open_count;   /* times opened, for diagnostics */
    uint8_t user[REGION_USER_BYTES]; /* the layer above's (8-aligned) */
    uint8_t reserved[4040 - REGION_USER_BYTES];
};

_Static_assert(sizeof(struct region_header) == 4096,
               "region header is one 4 KiB block");
_Static_assert(__builtin_offsetof(struct region_header, user) % 8 == 0,
               "the layer above's bytes are 8-aligned");

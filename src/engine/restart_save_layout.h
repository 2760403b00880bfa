#pragma once
/*
 * The saved index: the file a clean close writes beside the pool
 * (tc_config.restart_file; tiercached: "<pool file>.meta") so that the next
 * open reattaches the pool without scanning it (src/engine/restart_save.h,
 * doc/operating.md "Restarts").
 *
 * Layout, all words in the machine's byte order (the file is read back by
 * the same build on the same machine, like the pool itself):
 *
 *   struct restart_saved_hdr   at offset 0
 *   body                       body_words 64-bit words: records, each a
 *                              word (home bucket << 8 | n, n 1..255)
 *                              followed by n index slot words (tag << 48 |
 *                              location) of that bucket's chain
 *
 * body_sum is restart_save's checksum over the body words, hdr_sum
 * hash_bytes() over the header up to hdr_sum. A file whose sizes, sums,
 * pool identity or settings do not match is not used: the pool is scanned.
 */

#include <stdint.h>

#include "src/engine/restart_layout.h"

#define RESTART_SAVED_MAGIC 0x3158444e49435454ull /* "TTCINDX1" */
#define RESTART_SAVED_VERSION 1u
/* Entries a record holds at most (its count is the word's low byte). */
#define RESTART_SAVED_RUN 255u

struct restart_saved_hdr {
    uint64_t magic;           /* RESTART_SAVED_MAGIC */
    uint32_t version;         /* RESTART_SAVED_VERSION */
    uint32_t hdr_bytes;       /* sizeof(struct restart_saved_hdr) */
    uint64_t body_words;      /* 64-bit words after the header */
    uint64_t entries;         /* index entries among them */
    uint64_t nbuckets;        /* home buckets of the saved index */
    uint64_t hash_seed;       /* the cache's hash seed: the index's tags */
    uint64_t cas_seq;         /* the CAS counter at the close */
    uint64_t pool_created;    /* the pool header's created_unix */
    uint64_t pool_opens;      /* its open_count at the close */
    uint64_t pool_bytes;      /* its file_size */
    struct restart_meta meta; /* the pool's restart metadata at the close */
    uint64_t body_sum;
    uint64_t hdr_sum;
};

_Static_assert(sizeof(struct restart_saved_hdr) % 8 == 0,
               "the body starts 8-aligned");

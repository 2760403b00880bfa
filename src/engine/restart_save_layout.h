#pragma once
/*
 * The saved state: the file a clean close writes beside the pool
 * (tc_config.restart_file; tiercached: "<pool file>.meta") with what the
 * next open's scan of the pool cannot find in it: the CAS counter at the
 * close (a scan only sees the CAS values of the items still there; a
 * deleted or replaced item may have had a higher one, which a client may
 * still hold). src/engine/restart_save.h, doc/operating.md "Restarts".
 *
 * Layout, all words in the machine's byte order (the file is read back by
 * the same build on the same machine, like the pool itself): one struct
 * restart_saved_hdr at offset 0, nothing after it. hdr_sum is hash_bytes()
 * over the header up to hdr_sum. A file whose size, sum, pool identity or
 * settings do not match is not used (the CAS counter then resumes above
 * every CAS the scan saw, as after a crash).
 *
 * Version 1 (an index of every entry, loaded instead of a scan) is no
 * longer read: its magic differs, and such a file is not used. Version 2
 * (no item count) fails the version check the same way.
 */

#include <stdint.h>

#include "src/engine/restart_layout.h"

#define RESTART_SAVED_MAGIC 0x3254415453435454ull /* "TTCSTAT2" */
#define RESTART_SAVED_VERSION 3u

struct restart_saved_hdr {
    uint64_t magic;           /* RESTART_SAVED_MAGIC */
    uint32_t version;         /* RESTART_SAVED_VERSION */
    uint32_t hdr_bytes;       /* sizeof(struct restart_saved_hdr) */
    uint64_t cas_seq;         /* the CAS counter at the close */
    uint64_t pool_created;    /* the pool header's created_unix */
    uint64_t pool_opens;      /* its open_count at the close */
    uint64_t pool_bytes;      /* its file_size */
    struct restart_meta meta; /* the pool's restart metadata at the close */
    uint64_t items;           /* curr_items at the close: the next start
                                 sizes its empty index for them */
    uint64_t hdr_sum;
};

_Static_assert(sizeof(struct restart_saved_hdr) % 8 == 0,
               "the header is a whole number of words");

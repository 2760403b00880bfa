#pragma once
/*
 * The PMEM region: the pool file mapped with libpmem. On machines without
 * PMEM the same file on tmpfs (/dev/shm) is the emulation.
 *
 * region_open() creates or reopens the file, posix_fallocate()s it first (so
 * a full disk fails at start, not later), maps it with pmem_map_file(),
 * validates or writes the header (tier/region_layout.h) and clears the clean
 * flag. region_close() sets the clean flag and unmaps. A bad path, a size
 * below REGION_MIN_SIZE or an existing file that is too small fail with a
 * negative errno and one sentence in err_msg().
 *
 * Concurrency: a region is opened and closed by one thread; between those,
 * region_data()/region_*() are read-only and safe from any thread.
 */

#include <stdbool.h>
#include <stdint.h>

#define REGION_DEFAULT_PATH "/dev/shm/tiercache.pool"

struct region_config {
    const char *path; /* NULL: REGION_DEFAULT_PATH */
    /* Bytes of the whole file. 0: use an existing file's size (it must
     * exist and be at least REGION_MIN_SIZE). A regular file is created or
     * resized to this size. */
    uint64_t size;
    /* memcached's -L: where the pool is on a tmpfs that gives 4 KiB pages,
     * copy it onto 2 MiB pages at open (MADV_COLLAPSE); see
     * region_collapse() in region.c. */
    bool large_pages;
};

struct region;

/* 0 or -EINVAL (size below minimum, file too small), -ENOENT / -EACCES /
 * ... (path), -ENOSPC (fallocate), -EBUSY (another holder has the file
 * locked), -EIO (mapping failure), -ENOMEM. *out set on success. */
int region_open(const struct region_config *cfg, struct region **out);

/* Log one line on the pool's pages (memcached's -L): on 2 MiB pages, DAX,
 * or a warning that it is not and how to get them. Every open already maps
 * the pool 2 MiB-aligned and advises MADV_HUGEPAGE. 0, or -EOPNOTSUPP when
 * the pool is on the base page size. */
int region_advise_huge(const struct region *r);

/* Mark clean, unmap, free. NULL is a no-op. */
void region_close(struct region *r);

/* Base and length of the data area (1 MiB aligned, length a multiple of
 * 1 MiB). */
void *region_data(const struct region *r);
uint64_t region_data_size(const struct region *r);

/* libpmem's is_pmem answer for the mapping (false on /dev/shm). */
bool region_is_pmem(const struct region *r);

/* Whether the kernel maps the pool with 2 MiB pages, as seen on the
 * header's page, mapped since the open (reads smaps: not for a hot path;
 * the open's log line with -v says it). False on 4 KiB pages, and on DAX,
 * whose 2 MiB entries smaps does not show. */
bool region_huge(const struct region *r);

/* Whether the previous holder closed the file gracefully (false for a file
 * created by this open). The open's log line says it; tests check it
 * here. */
bool region_was_clean(const struct region *r);

const char *region_path(const struct region *r);

/* Whether this open found a valid header of this version and size (the
 * contents may be reattached) rather than writing a fresh one. */
bool region_reattached(const struct region *r);

/* REGION_USER_BYTES of the header for the layer above (its restart
 * metadata), zero in a fresh header. Written through the PMEM helpers. */
void *region_user(const struct region *r);

/* One byte per data page for the layer above, *npages of them (the data
 * area's pages, at most REGION_PAGE_TABLE_MAX: a larger pool has a table
 * for its first pages only). Not cleared by a fresh header. */
uint8_t *region_page_table(const struct region *r, uint32_t *npages);

/* The whole mapping (header included) and its length: what the write-hotspot
 * tracker covers. */
void *region_map_base(const struct region *r);
uint64_t region_map_len(const struct region *r);

/* Give the memory behind [data_off, data_off + len) of the data area back
 * to the system (fallocate punch-hole; pages then read as zeros). Used after
 * a shrink. 0, or a negative errno (-EOPNOTSUPP where the file system cannot
 * punch holes). Context: the range must not be in use. */
int region_discard(struct region *r, uint64_t data_off, uint64_t len);

/*
 * The PMEM region: the pool file, sized, locked and mapped with libpmem, with
 * its header (tier/region_layout.h) validated or written at open.
 *
 * Concurrency:
 *   struct region    written by region_open()/region_close() only (one
 *                    thread); read-only in between, from any thread
 *   header (PMEM)    written at open and close only, through the pm_*
 *                    helpers, no lock held
 *   r->fd            kept open for region_discard() and to hold the pool's
 *                    flock(LOCK_EX), so two processes never share a pool
 *
 * Failure leaves the file as it was, with two exceptions that never leave a
 * header describing contents it does not have: a file this open created is
 * removed, and a resized file keeps an invalidated header.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* fallocate(), FALLOC_FL_* */
#endif

#include "tier/region.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/hugemap.h"
#include "src/base/log.h"
#include "tier/pm.h"
#include "tier/region_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libpmem.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REGION_PAGE_SIZE MIB /* the data area's alignment and unit */

struct region {
    char *base;         /* the mapping; the header sits at offset 0 */
    size_t mapped_len;  /* bytes mapped: the whole file or device */
    uint64_t data_size; /* bytes of the data area, a multiple of 1 MiB */
    int fd;             /* holds the flock; used by region_discard() */
    bool is_pmem;
    bool was_clean;
    bool reattached;
    char *path;
};

/* What region_open() did to the file so far, so that a failure can undo it. */
struct region_file {
    int fd;
    bool created; /* this open created the file */
    bool resized; /* this open changed its size from old_size */
    off_t old_size;
};

static uint64_t
region_data_bytes(uint64_t file_size)
{
    return (file_size - REGION_DATA_OFFSET) & ~(REGION_PAGE_SIZE - 1);
}

static int
region_check_config(const struct region_config *cfg, struct region **out)
{
    if (cfg == NULL || out == NULL) {
        err_set("region_open() needs a configuration and a result pointer");
        return -EINVAL;
    }
    if (cfg->path != NULL && cfg->path[0] == '\0') {
        err_set("the pool file path is empty");
        return -EINVAL;
    }
    if (cfg->size != 0 && cfg->size < REGION_MIN_SIZE) {
        err_set("pool size %" PRIu64 " is below the minimum of %u bytes",
                cfg->size, REGION_MIN_SIZE);
        return -EINVAL;
    }
    if (cfg->size > INT64_MAX) {
        err_set("pool size %" PRIu64 " is too large", cfg->size);
        return -EINVAL;
    }
    return 0;
}

/*
 * Open (or, when a size is given, create) the file and take the pool lock.
 * A size of 0 never creates: it means "use the existing file as it is".
 */
static int
region_open_file(const char *path, uint64_t size, struct region_file *f)
{
    int flags = O_RDWR | O_CLOEXEC;
    int rc;

    f->fd = open(path, flags);
    if (f->fd < 0 && errno == ENOENT && size > 0) {
        f->fd = open(path, flags | O_CREAT | O_EXCL, 0600);
        f->created = f->fd >= 0;
    }
    if (f->fd < 0) {
        rc = -errno;
        if (rc == -ENOENT && size == 0)
            err_set("pool file %s does not exist (a pool size of 0 means "
                    "an existing file)",
                    path);
        else
            err_set("cannot open pool file %s: %s", path, strerror(-rc));
        return rc;
    }
    if (flock(f->fd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        err_set("cannot lock pool file %s: %s", path,
                rc == -EBUSY ? "it is in use by another process"
                             : strerror(-rc));
        close(f->fd); /* the file may be another process's now: keep it */
        return rc;
    }
    return 0;
}

/*
 * Before a resize, zero the old header's magic: the old contents are given
 * up, and a failed open must not leave a header that a later open at the old
 * size would trust over a truncated data area. This is a pwrite() on the
 * file before it is mapped, so the pm_* helpers do not apply.
 */
static int
region_invalidate_header(const char *path, const struct region_file *f)
{
    uint64_t zero = 0;

    if (f->old_size < (off_t)sizeof(zero))
        return 0;
    if (pwrite(f->fd, &zero, sizeof(zero), 0) != (ssize_t)sizeof(zero)) {
        int rc = errno != 0 ? -errno : -EIO;

        err_set("cannot write pool file %s: %s", path, strerror(-rc));
        return rc;
    }
    return 0;
}

/* Whether the file's size bytes all have blocks: as many blocks as bytes.
 * A compressing file system may count fewer (then it is allocated again);
 * the blocks of a file system's own metadata counted in could hide a hole
 * smaller than them, but the pool's holes are whole 1 MiB pages
 * (region_discard). Not SEEK_HOLE: tmpfs reports a hole at every page
 * allocated but not yet written. */
static bool
region_file_allocated(int fd, uint64_t size)
{
    struct stat st;
    return fstat(fd, &st) == 0 && (uint64_t)st.st_blocks * 512 >= size;
}

static int
region_resize_file(const char *path, uint64_t size, struct region_file *f)
{
    int rc;

    if ((uint64_t)f->old_size != size) {
        rc = region_invalidate_header(path, f);
        if (rc != 0)
            return rc;
        if (ftruncate(f->fd, (off_t)size) != 0) {
            rc = -errno;
            err_set("cannot resize pool file %s to %" PRIu64 " bytes: %s", path,
                    size, strerror(-rc));
            return rc;
        }
        f->resized = true;
    }
    /* Allocate every block now, so that a full disk fails here and not
     * with a SIGBUS on a later store; not again when the file has every
     * block already (on tmpfs, allocating an allocated file still walks
     * every page: seconds for a many-GB pool at each start). */
    if (!f->resized && region_file_allocated(f->fd, size))
        return 0;
    rc = posix_fallocate(f->fd, 0, (off_t)size);
    if (rc == ENOSPC) {
        err_set("not enough space for pool file %s of %" PRIu64 " bytes", path,
                size);
        return -ENOSPC;
    }
    if (rc != 0) {
        err_set("cannot allocate pool file %s: %s", path, strerror(rc));
        return -rc;
    }
    return 0;
}

/* Check the file's kind and size against the configured size; resize and
 * allocate a regular file when a size is given. */
static int
region_size_file(const char *path, uint64_t size, struct region_file *f)
{
    struct stat st;
    int rc;

    if (fstat(f->fd, &st) != 0) {
        rc = -errno;
        err_set("cannot stat pool file %s: %s", path, strerror(-rc));
        return rc;
    }
    f->old_size = st.st_size;
    if (!S_ISREG(st.st_mode)) {
        /* A device DAX (or other device) has a fixed size: it is checked
         * against the minimum once mapped. */
        if (size == 0)
            return 0;
        err_set("pool %s is not a regular file, so its size is fixed: "
                "configure a pool size of 0",
                path);
        return -EINVAL;
    }
    if (size == 0) {
        if (st.st_size >= (off_t)REGION_MIN_SIZE)
            return 0;
        err_set("pool file %s is too small: %lld bytes, the minimum is %u",
                path, (long long)st.st_size, REGION_MIN_SIZE);
        return -EINVAL;
    }
    return region_resize_file(path, size, f);
}

/* Undo region_open_file() and region_size_file() after a failure; closes
 * the file (releasing the lock last). */
static void
region_undo_file(const char *path, const struct region_file *f)
{
    if (f->created) {
        if (unlink(path) != 0)
            log_warn("cannot remove pool file %s: %s", path, strerror(errno));
    } else if (f->resized) {
        /* The header is invalid already; give the space back. */
        if (ftruncate(f->fd, f->old_size) != 0)
            log_warn("cannot restore the size of pool file %s: %s", path,
                     strerror(errno));
    }
    close(f->fd);
}

/*
 * 2 MiB pages for the items where the system gives them: a get lands on a
 * random item, and on 4 KiB pages each one costs a page walk of its own.
 * The kernel maps a 2 MiB page only where the address and the file offset
 * agree modulo 2 MiB (the data area starts at 2 MiB of the file).
 * libpmem's pmem_map_file picks a 2 MiB-aligned address for a file this
 * size, for DAX's sake (test_region checks it); an address that is not is
 * one warning. A DAX file then gets 2 MiB pages with nothing else; a tmpfs
 * file needs its mount's huge= or the system's shmem_enabled to allow
 * them, and MADV_HUGEPAGE is what shmem_enabled=advise asks for
 * (doc/operating.md, "2 MiB pages for the pool"). Advice only: a refusal
 * is no error.
 */
static void
region_ask_huge(const struct region *r)
{
    if ((uintptr_t)r->base % HUGEMAP_BYTES != 0) {
        log_warn("pool %s was mapped at %p, not 2 MiB aligned: it stays on "
                 "the system's page size",
                 r->path, (void *)r->base);
        return;
    }
    (void)madvise(r->base, r->mapped_len, MADV_HUGEPAGE);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
#define REGION_COLLAPSE_STEP (64ull * MIB)

/*
 * -L on a tmpfs pool the system gives 4 KiB pages (/dev/shm is mounted
 * without huge=): MADV_COLLAPSE copies the file's pages onto 2 MiB pages
 * whatever the mount says (only shmem_enabled=deny refuses it). The file is
 * wholly allocated at open (posix_fallocate), so this takes no more memory
 * than the pool already has; the 2 MiB pages belong to the file, so a
 * later open maps them again with nothing to copy (a check: 20 ms for 256
 * MiB). Worth it where 4 KiB pages cost more than a page walk (in a VM
 * whose host shadows the page tables: perf/RESULTS.md, "The pool copied
 * onto 2 MiB pages with -L"). In steps, so that a step the kernel cannot
 * do now (EAGAIN: a page busy; ENOMEM: no free 2 MiB page) leaves the rest
 * copied; a refusal (EINVAL: a kernel without it, or a file system it does
 * not cover) stops at once. Runs before any thread uses the pool (safe
 * beside one anyway: the kernel locks each page while it copies). Logs one
 * line: what it got, how long (region_advise_huge's line then says which
 * pages the pool is on).
 */
static void
region_collapse(const struct region *r)
{
    uint64_t t0 = clock_nsec();
    int refused = 0;

    if (r->is_pmem || (uintptr_t)r->base % HUGEMAP_BYTES != 0)
        return;
    for (uint64_t off = 0; off < r->mapped_len; off += REGION_COLLAPSE_STEP) {
        uint64_t len = MIN(REGION_COLLAPSE_STEP, r->mapped_len - off);
        int rc = madvise(r->base + off, len, MADV_COLLAPSE);
        if (rc != 0 && errno == EAGAIN) /* a page was busy: once more */
            rc = madvise(r->base + off, len, MADV_COLLAPSE);
        if (rc != 0 && errno != EAGAIN && errno != ENOMEM) {
            refused = errno;
            break;
        }
    }
    long long huge = hugemap_huge_bytes(r->base, r->mapped_len);
    if (refused != 0 && huge <= 0)
        log_info("pool %s: the kernel would not copy it onto 2 MiB pages "
                 "(MADV_COLLAPSE: %s)",
                 r->path, strerror(refused));
    else
        log_info("pool %s: copied onto 2 MiB pages (MADV_COLLAPSE), %lld "
                 "of %zu MiB on them, in %.2f s",
                 r->path, huge >> 20, r->mapped_len >> 20,
                 (double)(clock_nsec() - t0) / 1e9);
}

static int
region_map(struct region *r)
{
    size_t len = 0;
    int is_pmem = 0;
    int rc;

    /* Length 0 and no flags: map the whole existing file or device (the
     * only form a device DAX accepts). */
    r->base = pmem_map_file(r->path, 0, 0, 0, &len, &is_pmem);
    if (r->base == NULL) {
        int saved = errno;
        const char *why = pmem_errormsg();

        if (why == NULL || why[0] == '\0')
            why = strerror(saved != 0 ? saved : EIO);
        err_set("cannot map pool file %s: %s", r->path, why);
        return -EIO;
    }
    r->mapped_len = len;
    r->is_pmem = is_pmem != 0;
    if (len < REGION_MIN_SIZE) {
        err_set("pool %s is too small: %zu bytes, the minimum is %u", r->path,
                len, REGION_MIN_SIZE);
        rc = -EINVAL;
        goto err_unmap;
    }
    if ((uintptr_t)r->base % REGION_PAGE_SIZE != 0) {
        err_set("pool file %s was mapped at %p, not 1 MiB aligned", r->path,
                (void *)r->base);
        rc = -EIO;
        goto err_unmap;
    }
    r->data_size = region_data_bytes(len);
    region_ask_huge(r);
    return 0;

err_unmap:
    pmem_unmap(r->base, len);
    r->base = NULL;
    return rc;
}

/* What the open saw (region_huge), as one line: the mount's huge= option
 * decides for a tmpfs file, not shmem_enabled (which covers shared
 * anonymous memory), so the page the header sits on is the answer. */
int
region_advise_huge(const struct region *r)
{
    if (region_huge(r)) {
        log_info("large pages: pool %s is on 2 MiB pages", r->path);
        return 0;
    }
    if (r->is_pmem) {
        log_info("large pages: pool %s is DAX: 2 MiB pages where its "
                 "namespace and file system are 2 MiB aligned (smaps does "
                 "not show them)",
                 r->path);
        return 0;
    }
    log_warn("large pages: pool %s is on the system's page size: put it on "
             "a tmpfs mounted with huge=always (doc/operating.md, \"2 MiB "
             "pages for the pool\")",
             r->path);
    return -EOPNOTSUPP;
}

/* pmem_persist() on real PMEM, msync() otherwise (libpmem's rule). */
static int
region_persist(const struct region *r, const void *addr, size_t len)
{
    if (r->is_pmem) {
        pmem_persist(addr, len);
        return 0;
    }
    return pmem_msync(addr, len) == 0 ? 0 : -errno;
}

static bool
region_header_valid(const struct region_header *h, uint64_t file_size)
{
    return h->magic == REGION_MAGIC && h->version == REGION_VERSION &&
           h->file_size == file_size && h->data_offset == REGION_DATA_OFFSET &&
           h->data_size == region_data_bytes(file_size) && h->clean <= 1;
}

static void
region_header_format(struct region *r, struct region_header *h)
{
    struct region_header fresh;

    memset(&fresh, 0, sizeof(fresh));
    fresh.magic = REGION_MAGIC;
    fresh.version = REGION_VERSION;
    fresh.clean = 0;
    fresh.file_size = r->mapped_len;
    fresh.data_offset = REGION_DATA_OFFSET;
    fresh.data_size = r->data_size;
    fresh.created_unix = (uint64_t)time(NULL);
    fresh.open_count = 1;
    pm_copy(h, &fresh, sizeof(fresh));
}

/*
 * Reattach a valid header or write a fresh one, and clear the clean flag.
 * PMEM: writes the header; the caller holds no lock.
 */
static int
region_attach(struct region *r)
{
    struct region_header *h = (struct region_header *)r->base;
    int rc;

    if (region_header_valid(h, r->mapped_len)) {
        r->was_clean = h->clean == 1;
        r->reattached = true;
        pm_store32(&h->clean, 0);
        pm_store64(&h->open_count, h->open_count + 1);
    } else {
        r->was_clean = false;
        region_header_format(r, h);
    }
    rc = region_persist(r, h, sizeof(*h));
    if (rc != 0)
        err_set("cannot write the header of pool file %s: %s", r->path,
                strerror(-rc));
    return rc;
}

int
region_open(const struct region_config *cfg, struct region **out)
{
    struct region_file f = {.fd = -1};
    struct region *r;
    int rc;

    rc = region_check_config(cfg, out);
    if (rc != 0)
        return rc;
    *out = NULL;
    r = calloc(1, sizeof(*r));
    if (r != NULL)
        r->path = strdup(cfg->path != NULL ? cfg->path : REGION_DEFAULT_PATH);
    if (r == NULL || r->path == NULL) {
        err_set("out of memory opening a pool file");
        free(r);
        return -ENOMEM;
    }

    rc = region_open_file(r->path, cfg->size, &f);
    if (rc != 0)
        goto err_free;
    rc = region_size_file(r->path, cfg->size, &f);
    if (rc != 0)
        goto err_undo_file;
    rc = region_map(r);
    if (rc != 0)
        goto err_undo_file;
    if (cfg->large_pages)
        region_collapse(r);
    rc = region_attach(r);
    if (rc != 0)
        goto err_unmap;

    r->fd = f.fd;
    /* smaps is read only for the line (it costs a walk of the process's
     * page tables below the pool: once per open, but fuzzers open often) */
    if (log_get_level() >= LOG_INFO)
        log_info("pool %s: %" PRIu64 " data bytes, %s, %s, %s", r->path,
                 r->data_size, r->is_pmem ? "pmem" : "not pmem",
                 !r->reattached ? "new"
                 : r->was_clean ? "reattached after a clean close"
                                : "reattached after an unclean stop",
                 region_huge(r) ? "on 2 MiB pages"
                 : r->is_pmem   ? "DAX (its 2 MiB pages are not shown in smaps)"
                              : "on 4 KiB pages (doc/operating.md: 2 MiB pages "
                                "for the pool)");
    *out = r;
    return 0;

err_unmap:
    pmem_unmap(r->base, r->mapped_len);
err_undo_file:
    region_undo_file(r->path, &f);
err_free:
    free(r->path);
    free(r);
    return rc;
}

/* PMEM: writes the header's clean flag; the caller holds no lock. */
void
region_close(struct region *r)
{
    struct region_header *h;
    int rc;

    if (r == NULL)
        return;
    h = (struct region_header *)r->base;
    pm_store32(&h->clean, 1);
    rc = region_persist(r, h, sizeof(*h));
    if (rc != 0)
        log_warn("pool file %s: cannot persist the clean flag: %s", r->path,
                 strerror(-rc));
    if (pmem_unmap(r->base, r->mapped_len) != 0)
        log_warn("pool file %s: cannot unmap: %s", r->path, strerror(errno));
    close(r->fd); /* releases the pool lock, after the mapping is gone */
    free(r->path);
    free(r);
}

void *
region_map_base(const struct region *r)
{
    return r->base;
}

uint64_t
region_map_len(const struct region *r)
{
    return r->mapped_len;
}

void *
region_data(const struct region *r)
{
    return r->base + REGION_DATA_OFFSET;
}

uint64_t
region_data_size(const struct region *r)
{
    return r->data_size;
}

bool
region_is_pmem(const struct region *r)
{
    return r->is_pmem;
}

/* The header's page is mapped from the open on (read and written there):
 * whether one entry maps its 2 MiB says which pages the pool got. */
bool
region_huge(const struct region *r)
{
    return hugemap_huge_bytes(r->base, HUGEMAP_BYTES) > 0;
}

bool
region_was_clean(const struct region *r)
{
    return r->was_clean;
}

const char *
region_path(const struct region *r)
{
    return r->path;
}

int
region_discard(struct region *r, uint64_t data_off, uint64_t len)
{
    int mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    int rc;

    if (data_off > r->data_size || len > r->data_size - data_off) {
        err_set("cannot discard %" PRIu64 " bytes at offset %" PRIu64
                " of pool %s: the data area has %" PRIu64 " bytes",
                len, data_off, r->path, r->data_size);
        return -EINVAL;
    }
    if (len == 0)
        return 0;
    if (fallocate(r->fd, mode, (off_t)(REGION_DATA_OFFSET + data_off),
                  (off_t)len) == 0)
        return 0;
    rc = -errno;
    if (rc == -ENODEV || rc == -ENOSYS)
        rc = -EOPNOTSUPP; /* a device, or no hole punching at all */
    err_set("cannot discard %" PRIu64 " bytes at offset %" PRIu64
            " of pool %s: %s",
            len, data_off, r->path, strerror(-rc));
    return rc;
}

bool
region_reattached(const struct region *r)
{
    return r->reattached;
}

void *
region_user(const struct region *r)
{
    return ((struct region_header *)r->base)->user;
}

uint8_t *
region_page_table(const struct region *r, uint32_t *npages)
{
    uint64_t n = r->data_size >> 20;
    *npages = (uint32_t)(n < REGION_PAGE_TABLE_MAX ? n : REGION_PAGE_TABLE_MAX);
    return (uint8_t *)r->base + REGION_PAGE_TABLE_OFFSET;
}

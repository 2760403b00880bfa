/*
 * Unit tests for tier/region.c on /dev/shm (each test uses its own file,
 * named with the pid, removed in teardown).
 *
 * Seams (tests/unit/test_region.wrap): pmem_map_file and posix_fallocate are
 * wrapped; by default they pass through, a flag makes them fail.
 */
#define _GNU_SOURCE 1 /* fallocate(), FALLOC_FL_* */
#include "tier/region.h"

#include "src/base/err.h"
#include "src/base/hugemap.h"
#include "tier/pm.h"
#include "tier/region_layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define MIB_ (1024ull * 1024)
#define POOL_SIZE (REGION_MIN_SIZE + 4 * MIB_) /* 8 MiB of data */

/* ---- seams ------------------------------------------------------------ */

static int fail_map;        /* pmem_map_file() fails with ENOMEM */
static int fail_fallocate;  /* posix_fallocate() returns this errno */
static int fallocate_calls; /* posix_fallocate() calls so far */

void *__real_pmem_map_file(const char *path, size_t len, int flags, mode_t mode,
                           size_t *mapped_lenp, int *is_pmemp);
void *__wrap_pmem_map_file(const char *path, size_t len, int flags, mode_t mode,
                           size_t *mapped_lenp, int *is_pmemp);
int __real_posix_fallocate(int fd, off_t off, off_t len);
int __wrap_posix_fallocate(int fd, off_t off, off_t len);
int __real_posix_fallocate64(int fd, off_t off, off_t len);
int __wrap_posix_fallocate64(int fd, off_t off, off_t len);

void *
__wrap_pmem_map_file(const char *path, size_t len, int flags, mode_t mode,
                     size_t *mapped_lenp, int *is_pmemp)
{
    if (fail_map) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_pmem_map_file(path, len, flags, mode, mapped_lenp, is_pmemp);
}

int
__wrap_posix_fallocate(int fd, off_t off, off_t len)
{
    fallocate_calls++;
    return fail_fallocate ? fail_fallocate
                          : __real_posix_fallocate(fd, off, len);
}

/* Used instead of posix_fallocate when built with _FILE_OFFSET_BITS=64. */
int
__wrap_posix_fallocate64(int fd, off_t off, off_t len)
{
    fallocate_calls++;
    return fail_fallocate ? fail_fallocate
                          : __real_posix_fallocate64(fd, off, len);
}

/* ---- helpers ---------------------------------------------------------- */

struct fx {
    char path[128];
    char other[128]; /* a second path some tests use */
};

static int
setup(void **state)
{
    static int seq;
    struct fx *fx = calloc(1, sizeof(*fx));

    if (fx == NULL)
        return -1;
    snprintf(fx->path, sizeof(fx->path), "/dev/shm/tc-test-region-%d-%d.pool",
             (int)getpid(), seq);
    snprintf(fx->other, sizeof(fx->other),
             "/dev/shm/tc-test-region-%d-%d.other", (int)getpid(), seq++);
    unlink(fx->path);
    unlink(fx->other);
    fail_map = 0;
    fail_fallocate = 0;
    err_clear();
    *state = fx;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *fx = *state;

    unlink(fx->path);
    unlink(fx->other);
    free(fx);
    return 0;
}

static struct region_header *
hdr(struct region *r)
{
    return (struct region_header *)((char *)region_data(r) -
                                    REGION_DATA_OFFSET);
}

static struct region *
open_ok(const char *path, uint64_t size)
{
    struct region_config cfg = {.path = path, .size = size};
    struct region *r = NULL;
    int rc = region_open(&cfg, &r);

    if (rc != 0)
        fail_msg("region_open(%s, %llu) = %d: %s", path,
                 (unsigned long long)size, rc, err_msg());
    assert_non_null(r);
    return r;
}

static int
open_err(const char *path, uint64_t size)
{
    struct region_config cfg = {.path = path, .size = size};
    struct region *r = NULL;
    int rc = region_open(&cfg, &r);

    assert_true(rc < 0);
    assert_null(r);
    assert_true(err_msg()[0] != '\0');
    return rc;
}

static void
read_file_header(const char *path, struct region_header *h)
{
    int fd = open(path, O_RDONLY);

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, h, sizeof(*h), 0), sizeof(*h));
    close(fd);
}

static void
write_file_bytes(const char *path, off_t off, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY);

    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, p, n, off), (ssize_t)n);
    close(fd);
}

static void
make_file(const char *path, off_t size)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, size), 0);
    close(fd);
}

static off_t
file_size(const char *path)
{
    struct stat st;

    if (stat(path, &st) != 0)
        return -1;
    return st.st_size;
}

static bool
file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static int
count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    assert_non_null(d);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static bool
all_bytes(const uint8_t *p, int c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)c)
            return false;
    return true;
}

/* ---- tests ------------------------------------------------------------ */

static void
test_create_new(void **state)
{
    struct fx *fx = *state;
    uint64_t size = POOL_SIZE - 1 * MIB_ + 12345; /* not a page multiple */
    uint64_t t0 = (uint64_t)time(NULL);
    struct region *r = open_ok(fx->path, size);
    struct region_header *h = hdr(r), disk;
    uint8_t *data = region_data(r);
    struct stat st;

    assert_false(region_was_clean(r));
    assert_string_equal(region_path(r), fx->path);
    assert_int_equal((uintptr_t)data % MIB_, 0);
    assert_int_equal(region_data_size(r), 7 * MIB_);
    assert_int_equal(region_data_size(r) % MIB_, 0);

    assert_int_equal(stat(fx->path, &st), 0);
    assert_int_equal(st.st_size, size);
    assert_true((uint64_t)st.st_blocks * 512 >= size); /* allocated */
    assert_int_equal(st.st_mode & 0777, 0600);

    assert_true(h->magic == REGION_MAGIC);
    assert_int_equal(h->version, REGION_VERSION);
    assert_int_equal(h->clean, 0);
    assert_int_equal(h->file_size, size);
    assert_int_equal(h->data_offset, REGION_DATA_OFFSET);
    assert_int_equal(h->data_size, 7 * MIB_);
    assert_int_equal(h->open_count, 1);
    assert_true(h->created_unix >= t0 &&
                h->created_unix <= (uint64_t)time(NULL));

    /* The whole data area is usable. */
    pm_set(data, 0x5A, region_data_size(r));
    assert_int_equal(data[region_data_size(r) - 1], 0x5A);

    read_file_header(fx->path, &disk);
    assert_int_equal(disk.clean, 0); /* cleared while open */
    region_close(r);
    read_file_header(fx->path, &disk);
    assert_int_equal(disk.clean, 1);
}

static void
test_reopen_keeps_header_and_data(void **state)
{
    struct fx *fx = *state;
    struct region *r = open_ok(fx->path, POOL_SIZE);
    uint64_t created = 12345; /* mark the header so a rewrite shows */
    uint8_t *data;

    pm_set((uint8_t *)region_data(r) + MIB_, 0xC3, 4096);
    region_close(r);
    write_file_bytes(fx->path, offsetof(struct region_header, created_unix),
                     &created, sizeof(created));

    r = open_ok(fx->path, POOL_SIZE);
    data = region_data(r);
    assert_true(region_was_clean(r));
    assert_int_equal(hdr(r)->created_unix, 12345);
    assert_int_equal(hdr(r)->open_count, 2);
    assert_int_equal(hdr(r)->clean, 0);
    assert_true(all_bytes(data + MIB_, 0xC3, 4096));
    region_close(r);

    /* Size 0: use the existing file as it is. */
    r = open_ok(fx->path, 0);
    assert_true(region_was_clean(r));
    assert_int_equal(region_data_size(r), 8 * MIB_);
    assert_int_equal(hdr(r)->created_unix, 12345);
    assert_int_equal(hdr(r)->open_count, 3);
    region_close(r);
}

static void
test_unclean_close_is_reported(void **state)
{
    struct fx *fx = *state;
    struct region *r = open_ok(fx->path, POOL_SIZE);
    uint64_t created = hdr(r)->created_unix;
    int status = 0;
    pid_t pid;

    region_close(r);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct region_config cfg = {.path = fx->path, .size = POOL_SIZE};
        struct region *child;

        _exit(region_open(&cfg, &child) == 0 ? 0 : 1); /* no close */
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    r = open_ok(fx->path, POOL_SIZE);
    assert_false(region_was_clean(r));
    assert_int_equal(hdr(r)->created_unix, created); /* still reattached */
    assert_int_equal(hdr(r)->open_count, 3);
    region_close(r);
}

static void
test_size_below_minimum(void **state)
{
    struct fx *fx = *state;
    const uint64_t sizes[] = {1, 4096, REGION_MIN_SIZE - 1};
    char num[32];

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        assert_int_equal(open_err(fx->path, sizes[i]), -EINVAL);
        snprintf(num, sizeof(num), "%llu", (unsigned long long)sizes[i]);
        assert_non_null(strstr(err_msg(), num));
        assert_non_null(strstr(err_msg(), "minimum"));
        assert_false(file_exists(fx->path));
    }
}

static void
test_bad_config(void **state)
{
    struct region_config cfg = {.path = "", .size = POOL_SIZE};
    struct region *r = NULL;

    (void)state;
    assert_int_equal(region_open(&cfg, &r), -EINVAL);
    assert_non_null(strstr(err_msg(), "empty"));
    assert_int_equal(region_open(NULL, &r), -EINVAL);
    cfg.path = "/dev/shm/x";
    assert_int_equal(region_open(&cfg, NULL), -EINVAL);
    region_close(NULL); /* a no-op */
}

static void
test_unusable_path(void **state)
{
    struct fx *fx = *state;
    char nodir[160];

    open_err("/proc/nonexistent/x", POOL_SIZE);
    assert_non_null(strstr(err_msg(), "/proc/nonexistent/x"));

    snprintf(nodir, sizeof(nodir), "%s.nodir/pool", fx->path);
    assert_int_equal(open_err(nodir, POOL_SIZE), -ENOENT);
    assert_non_null(strstr(err_msg(), nodir));
    assert_non_null(strstr(err_msg(), strerror(ENOENT)));

    /* A directory is not a pool. */
    assert_int_equal(open_err("/dev/shm", POOL_SIZE), -EISDIR);
    assert_non_null(strstr(err_msg(), "/dev/shm"));
}

static void
test_size0_needs_existing_file(void **state)
{
    struct fx *fx = *state;

    assert_int_equal(open_err(fx->path, 0), -ENOENT);
    assert_non_null(strstr(err_msg(), fx->path));
    assert_false(file_exists(fx->path)); /* not created */
}

static void
test_size0_file_too_small(void **state)
{
    struct fx *fx = *state;
    struct region *r;

    make_file(fx->path, REGION_MIN_SIZE - 4096);
    assert_int_equal(open_err(fx->path, 0), -EINVAL);
    assert_non_null(strstr(err_msg(), "too small"));
    assert_int_equal(file_size(fx->path), REGION_MIN_SIZE - 4096);

    /* Exactly the minimum is enough: 4 pages of data, a fresh header. */
    make_file(fx->path, REGION_MIN_SIZE);
    r = open_ok(fx->path, 0);
    assert_int_equal(region_data_size(r), 4 * MIB_);
    assert_false(region_was_clean(r));
    region_close(r);
}

static void
test_not_regular_file(void **state)
{
    struct fx *fx = *state;

    assert_int_equal(mkfifo(fx->other, 0600), 0);
    assert_int_equal(open_err(fx->other, POOL_SIZE), -EINVAL);
    assert_non_null(strstr(err_msg(), "not a regular file"));
    /* Size 0 is accepted for a device, but a FIFO cannot be mapped. */
    assert_int_equal(open_err(fx->other, 0), -EIO);
    assert_non_null(strstr(err_msg(), fx->other));
}

/* Invalid headers are replaced by a fresh one (the old data is given up). */
static void
test_corrupt_header_rewritten(void **state)
{
    struct fx *fx = *state;
    const struct {
        size_t off;
        uint64_t value;
        size_t n;
    } bad[] = {
        {offsetof(struct region_header, magic), 0x0123456789ull, 8},
        {offsetof(struct region_header, version), 99, 4},
        {offsetof(struct region_header, clean), 7, 4},
        {offsetof(struct region_header, file_size), POOL_SIZE * 2, 8},
        {offsetof(struct region_header, data_offset), 4096, 8},
        {offsetof(struct region_header, data_size), 3 * MIB_, 8},
    };
    uint64_t one = 1;

    region_close(open_ok(fx->path, POOL_SIZE));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct region *r;

        write_file_bytes(fx->path, bad[i].off, &bad[i].value, bad[i].n);
        write_file_bytes(fx->path, offsetof(struct region_header, created_unix),
                         &one, sizeof(one));
        r = open_ok(fx->path, POOL_SIZE);
        assert_false(region_was_clean(r));
        assert_true(hdr(r)->magic == REGION_MAGIC);
        assert_int_equal(hdr(r)->version, REGION_VERSION);
        assert_int_equal(hdr(r)->file_size, POOL_SIZE);
        assert_int_equal(hdr(r)->data_size, 8 * MIB_);
        assert_true(hdr(r)->created_unix != 1);
        assert_int_equal(hdr(r)->open_count, 1);
        region_close(r);
    }
}

static void
test_resize_gives_fresh_pool(void **state)
{
    struct fx *fx = *state;
    struct region *r;

    region_close(open_ok(fx->path, POOL_SIZE));
    r = open_ok(fx->path, POOL_SIZE + 3 * MIB_);
    assert_false(region_was_clean(r));
    assert_int_equal(region_data_size(r), 11 * MIB_);
    assert_int_equal(file_size(fx->path), POOL_SIZE + 3 * MIB_);
    region_close(r);

    r = open_ok(fx->path, REGION_MIN_SIZE);
    assert_false(region_was_clean(r));
    assert_int_equal(region_data_size(r), 4 * MIB_);
    assert_int_equal(file_size(fx->path), REGION_MIN_SIZE);
    region_close(r);
}

static void
test_data_alignment(void **state)
{
    struct fx *fx = *state;
    const uint64_t sizes[] = {REGION_MIN_SIZE, REGION_MIN_SIZE + 1,
                              REGION_MIN_SIZE + MIB_ - 1, 64 * MIB_ + 4096};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        struct region *r = open_ok(fx->path, sizes[i]);
        uint64_t expect = (sizes[i] - REGION_DATA_OFFSET) / MIB_ * MIB_;

        assert_int_equal((uintptr_t)region_data(r) % MIB_, 0);
        assert_int_equal(region_data_size(r), expect);
        region_close(r);
    }
}

/* The VmFlags line of the mapping holding p ("rd wr sh mr ... hg"), or
 * false when /proc is not there. */
static bool
vm_flags(const void *p, char *out, size_t n)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool inside = false, found = false;

    if (!f)
        return false;
    while (!found && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        int k = 0;
        if (sscanf(line, "%lx-%lx %n", &lo, &hi, &k) == 2 && k > 0)
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, n, "%s", line + 8);
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* The pool is placed for 2 MiB pages and asks for them, whatever the
 * system then gives: the mapping and the data area 2 MiB-aligned (so a
 * file offset and its address agree modulo 2 MiB), MADV_HUGEPAGE on the
 * mapping ("hg" in its VmFlags, where the kernel has transparent huge
 * pages at all), and region_huge() agreeing with smaps. */
static void
test_mapping_ready_for_2m_pages(void **state)
{
    struct fx *fx = *state;
    const uint64_t sizes[] = {REGION_MIN_SIZE, 64 * MIB_ + 4096};
    bool thp = access("/sys/kernel/mm/transparent_hugepage", F_OK) == 0;

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        struct region *r = open_ok(fx->path, sizes[i]);
        char *base = region_map_base(r);
        char flags[512];

        assert_int_equal((uintptr_t)base % HUGEMAP_BYTES, 0);
        assert_int_equal((uintptr_t)region_data(r) % HUGEMAP_BYTES, 0);
        if (thp && vm_flags(base, flags, sizeof(flags)))
            assert_non_null(strstr(flags, " hg"));
        long long huge = hugemap_huge_bytes(base, region_map_len(r));
        if (huge >= 0) {
            assert_int_equal(huge % (long long)HUGEMAP_BYTES, 0);
            assert_true(huge <= (long long)region_map_len(r));
            /* the header's page was touched at open */
            assert_int_equal(region_huge(r),
                             hugemap_huge_bytes(base, HUGEMAP_BYTES) > 0);
        }
        region_close(r);
        assert_int_equal(unlink(fx->path), 0);
    }
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

/* Whether this kernel copies a file of path's file system onto 2 MiB pages
 * when asked (MADV_COLLAPSE on a 2 MiB-aligned shared mapping of it). */
static bool
collapse_works(const char *path)
{
    const size_t two = HUGEMAP_BYTES;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    bool ok = false;

    if (fd < 0)
        return false;
    if (posix_fallocate(fd, 0, (off_t)two) == 0) {
        char *raw =
            mmap(NULL, 2 * two, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw != MAP_FAILED) {
            char *at = (char *)(((uintptr_t)raw + two - 1) & ~(two - 1));
            char *p = mmap(at, two, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_FIXED, fd, 0);
            if (p != MAP_FAILED) {
                p[0] = 1;
                ok = madvise(p, two, MADV_COLLAPSE) == 0 &&
                     hugemap_huge_bytes(p, two) == (long long)two;
            }
            munmap(raw, 2 * two);
        }
    }
    close(fd);
    unlink(path);
    return ok;
}

static struct region *
open_large(const char *path, uint64_t size)
{
    struct region_config cfg = {
        .path = path, .size = size, .large_pages = true};
    struct region *r = NULL;

    if (region_open(&cfg, &r) != 0)
        fail_msg("region_open(%s, large pages): %s", path, err_msg());
    return r;
}

/* -L: a pool on a tmpfs that gives 4 KiB pages is copied onto 2 MiB pages
 * at open (where the kernel does that for this file system: checked on a
 * file of its own), its contents unchanged; the pages stay with the file,
 * so the next open without -L finds them (a pool on a huge= tmpfs is on
 * them before: the copy is then not what is checked). Where the kernel
 * will not, the open still succeeds with the contents unchanged. */
static void
test_large_pages_collapse(void **state)
{
    struct fx *fx = *state;
    bool can = collapse_works(fx->other);
    struct region *r = open_ok(fx->path, POOL_SIZE);
    uint8_t *data = region_data(r);
    uint64_t size = region_data_size(r);

    for (uint64_t i = 0; i < size; i += 4096)
        pm_store64((uint64_t *)(data + i), i * 0x9E3779B97F4A7C15ull);
    region_close(r);

    r = open_large(fx->path, POOL_SIZE);
    data = region_data(r);
    for (uint64_t i = 0; i < size; i += 4096)
        assert_int_equal(*(uint64_t *)(data + i), i * 0x9E3779B97F4A7C15ull);
    assert_true(region_was_clean(r));
    /* Some of it at least: a 2 MiB page the kernel cannot find at this
     * moment (ENOMEM) leaves its step on 4 KiB pages; the probe got one. */
    if (can)
        assert_true(hugemap_huge_bytes(region_data(r), size) > 0);
    else
        printf("# MADV_COLLAPSE refused on %s: only the contents are "
               "checked\n",
               fx->path);
    region_close(r);

    r = open_ok(fx->path, POOL_SIZE); /* without -L: the pages kept */
    assert_int_equal(hugemap_huge_bytes(region_data(r), size) > 0, can);
    assert_int_equal(*(uint64_t *)((char *)region_data(r) + 4096),
                     4096 * 0x9E3779B97F4A7C15ull);
    region_close(r);
}

static void
test_discard(void **state)
{
    struct fx *fx = *state;
    struct region *r = open_ok(fx->path, POOL_SIZE);
    uint8_t *data = region_data(r);
    uint64_t size = region_data_size(r);
    struct stat before, after;

    pm_set(data, 0xAB, size);
    assert_int_equal(stat(fx->path, &before), 0);

    assert_int_equal(region_discard(r, MIB_, 2 * MIB_), 0);
    /* Memory given back; check before reading the range, since a read
     * through a shared tmpfs mapping allocates the page again. */
    assert_int_equal(stat(fx->path, &after), 0);
    assert_int_equal(after.st_size, before.st_size); /* size kept */
    assert_true(before.st_blocks - after.st_blocks >=
                (blkcnt_t)(2 * MIB_ / 512));
    assert_true(all_bytes(data, 0xAB, MIB_));
    assert_true(all_bytes(data + MIB_, 0, 2 * MIB_));
    assert_true(all_bytes(data + 3 * MIB_, 0xAB, size - 3 * MIB_));

    /* Partial pages are zeroed, their neighbours kept. */
    assert_int_equal(region_discard(r, 5 * MIB_ + 100, 5000), 0);
    assert_true(all_bytes(data + 5 * MIB_, 0xAB, 100));
    assert_true(all_bytes(data + 5 * MIB_ + 100, 0, 5000));
    assert_int_equal(data[5 * MIB_ + 5100], 0xAB);

    /* The end of the data area, and an empty range there. */
    assert_int_equal(region_discard(r, size - MIB_, MIB_), 0);
    assert_true(all_bytes(data + size - MIB_, 0, MIB_));
    assert_int_equal(region_discard(r, size, 0), 0);

    /* Out of bounds, including an overflowing length. */
    assert_int_equal(region_discard(r, size + 1, 0), -EINVAL);
    assert_non_null(strstr(err_msg(), "data area"));
    assert_int_equal(region_discard(r, 0, size + 1), -EINVAL);
    assert_int_equal(region_discard(r, size - 4096, 8192), -EINVAL);
    assert_int_equal(region_discard(r, MIB_, UINT64_MAX), -EINVAL);
    assert_int_equal(region_discard(r, UINT64_MAX, 2), -EINVAL);
    /* The header is outside the data area and untouched. */
    assert_true(hdr(r)->magic == REGION_MAGIC);
    region_close(r);
}

static void
test_map_failure_new_file(void **state)
{
    struct fx *fx = *state;
    int fds = count_fds();

    fail_map = 1;
    assert_int_equal(open_err(fx->path, POOL_SIZE), -EIO);
    assert_non_null(strstr(err_msg(), fx->path));
    assert_non_null(strstr(err_msg(), "map"));
    assert_int_equal(count_fds(), fds);
    assert_false(file_exists(fx->path)); /* the new file was removed */
}

static void
test_map_failure_keeps_existing_pool(void **state)
{
    struct fx *fx = *state;
    struct region *r = open_ok(fx->path, POOL_SIZE);
    uint64_t created = hdr(r)->created_unix;
    int fds;

    pm_set((uint8_t *)region_data(r) + 2 * MIB_, 0x3C, 8192);
    region_close(r);
    fds = count_fds();
    fail_map = 1;
    assert_int_equal(open_err(fx->path, POOL_SIZE), -EIO);
    assert_int_equal(open_err(fx->path, 0), -EIO);
    assert_int_equal(count_fds(), fds);
    fail_map = 0;

    r = open_ok(fx->path, POOL_SIZE);
    assert_true(region_was_clean(r));
    assert_int_equal(hdr(r)->created_unix, created);
    assert_true(all_bytes((uint8_t *)region_data(r) + 2 * MIB_, 0x3C, 8192));
    region_close(r);
}

static void
test_fallocate_no_space(void **state)
{
    struct fx *fx = *state;
    int fds = count_fds();
    struct region *r;

    fail_fallocate = ENOSPC;
    assert_int_equal(open_err(fx->path, POOL_SIZE), -ENOSPC);
    assert_non_null(strstr(err_msg(), fx->path));
    assert_non_null(strstr(err_msg(), "space"));
    assert_false(file_exists(fx->path));
    assert_int_equal(count_fds(), fds);

    /* A pool that would grow keeps its size; its header is given up,
     * since a resize always starts a fresh pool. */
    fail_fallocate = 0;
    region_close(open_ok(fx->path, POOL_SIZE));
    fail_fallocate = ENOSPC;
    assert_int_equal(open_err(fx->path, POOL_SIZE + 16 * MIB_), -ENOSPC);
    assert_int_equal(file_size(fx->path), POOL_SIZE);
    assert_int_equal(count_fds(), fds);
    fail_fallocate = 0;
    r = open_ok(fx->path, POOL_SIZE);
    assert_false(region_was_clean(r));
    region_close(r);
}

/* An existing file of the pool's size with every block allocated is not
 * allocated again (on tmpfs that walks every page of a many-GB file);
 * one with a hole is. */
static void
test_fallocate_only_when_needed(void **state)
{
    struct fx *fx = *state;

    fallocate_calls = 0;
    region_close(open_ok(fx->path, POOL_SIZE));
    assert_int_equal(fallocate_calls, 1);
    region_close(open_ok(fx->path, POOL_SIZE));
    assert_int_equal(fallocate_calls, 1);

    int fd = open(fx->path, O_RDWR);
    assert_true(fd >= 0);
    int rc = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                       (off_t)(POOL_SIZE - MIB_), (off_t)MIB_);
    close(fd);
    if (rc != 0)
        skip(); /* the file system cannot punch holes */
    region_close(open_ok(fx->path, POOL_SIZE));
    assert_int_equal(fallocate_calls, 2);
    struct stat st;
    assert_int_equal(stat(fx->path, &st), 0);
    assert_true((uint64_t)st.st_blocks * 512 >= POOL_SIZE);
    region_close(open_ok(fx->path, POOL_SIZE));
    assert_int_equal(fallocate_calls, 2);
}

static void
test_pool_in_use(void **state)
{
    struct fx *fx = *state;
    struct region *r = open_ok(fx->path, POOL_SIZE);
    int fds = count_fds();

    assert_int_equal(open_err(fx->path, POOL_SIZE), -EBUSY);
    assert_non_null(strstr(err_msg(), "in use"));
    assert_int_equal(open_err(fx->path, POOL_SIZE * 2), -EBUSY);
    assert_int_equal(count_fds(), fds);
    assert_int_equal(file_size(fx->path), POOL_SIZE); /* not resized */
    assert_int_equal(hdr(r)->clean, 0);
    region_close(r);
    region_close(open_ok(fx->path, POOL_SIZE));
}

int
main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_create_new),
        T(test_reopen_keeps_header_and_data),
        T(test_unclean_close_is_reported),
        T(test_size_below_minimum),
        T(test_bad_config),
        T(test_unusable_path),
        T(test_size0_needs_existing_file),
        T(test_size0_file_too_small),
        T(test_not_regular_file),
        T(test_corrupt_header_rewritten),
        T(test_resize_gives_fresh_pool),
        T(test_data_alignment),
        T(test_mapping_ready_for_2m_pages),
        T(test_large_pages_collapse),
        T(test_discard),
        T(test_map_failure_new_file),
        T(test_map_failure_keeps_existing_pool),
        T(test_fallocate_no_space),
        T(test_fallocate_only_when_needed),
        T(test_pool_in_use),
    };
#undef T

    return cmocka_run_group_tests(tests, NULL, NULL);
}

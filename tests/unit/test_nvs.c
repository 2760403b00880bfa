/*
 * Unit tests for the NVMe store (tier/nvs*.c) on files under /tmp. Every
 * store test runs twice: through io_uring, and through the pread/pwrite
 * fallback (no_uring). Files are removed in teardown.
 */
#include "tier/nvs.h"

#include "src/base/clock.h"
#include "src/base/err.h"
#include "tier/nvs_int.h"
#include "tier/nvs_layout.h"

#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "tests/unit/nvs_fx.h"

static bool no_uring; /* the group being run */

/* ---- seams (tests/unit/test_nvs.wrap) ------------------------------------ */

static int fail_fallocate;  /* fallocate() fails with this errno */
static int fail_uring_init; /* io_uring_queue_init() returns this */

int __real_fallocate(int fd, int mode, off_t off, off_t len);
int __wrap_fallocate(int fd, int mode, off_t off, off_t len);
int __real_fallocate64(int fd, int mode, off_t off, off_t len);
int __wrap_fallocate64(int fd, int mode, off_t off, off_t len);
int __real_io_uring_queue_init(unsigned entries, struct io_uring *ring,
                               unsigned flags);
int __wrap_io_uring_queue_init(unsigned entries, struct io_uring *ring,
                               unsigned flags);

int
__wrap_fallocate(int fd, int mode, off_t off, off_t len)
{
    if (fail_fallocate) {
        errno = fail_fallocate;
        return -1;
    }
    return __real_fallocate(fd, mode, off, len);
}

int
__wrap_fallocate64(int fd, int mode, off_t off, off_t len)
{
    if (fail_fallocate) {
        errno = fail_fallocate;
        return -1;
    }
    return __real_fallocate64(fd, mode, off, len);
}

int
__wrap_io_uring_queue_init(unsigned entries, struct io_uring *ring,
                           unsigned flags)
{
    if (fail_uring_init)
        return fail_uring_init;
    return __real_io_uring_queue_init(entries, ring, flags);
}

static int
fx_open(struct fx *f, uint32_t nsegs, uint32_t timeout_ms)
{
    struct nvs_config c;

    fx_config(&c, nsegs, no_uring);
    c.read_timeout_ms = timeout_ms;
    return fx_open_cfg(f, &c);
}

/* ---- CRC32C -------------------------------------------------------------- */

static void
check_crc_vectors(void)
{
    unsigned char buf[32];

    /* RFC 3720, B.4 */
    memset(buf, 0, 32);
    assert_int_equal(nvs_crc32c(0, buf, 32), 0x8a9136aa);
    memset(buf, 0xff, 32);
    assert_int_equal(nvs_crc32c(0, buf, 32), 0x62a8ab43);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    assert_int_equal(nvs_crc32c(0, buf, 32), 0x46dd794e);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)(31 - i);
    assert_int_equal(nvs_crc32c(0, buf, 32), 0x113fdb5c);
    assert_int_equal(nvs_crc32c(0, "123456789", 9), 0xe3069283);
    /* continuing equals one pass, at every split and misalignment */
    char big[301];
    for (int i = 0; i < 301; i++)
        big[i] = (char)(i * 13);
    uint32_t whole = nvs_crc32c(0, big + 1, 300);
    for (int k = 0; k <= 300; k += 7)
        assert_int_equal(
            nvs_crc32c(nvs_crc32c(0, big + 1, k), big + 1 + k, 300 - k), whole);
}

static void
test_crc32c(void **state)
{
    (void)state;
    nvs_crc32c_force_table(false);
    check_crc_vectors();
    nvs_crc32c_force_table(true);
    check_crc_vectors();
    nvs_crc32c_force_table(false);
}

/* Long runs (a value of a block or more, a write buffer at compaction) go
 * through several interleaved streams combined at the end: the result
 * equals the byte-wise table's at every length around the streams'
 * boundaries, at every misalignment and from any starting CRC. */
static void
test_crc32c_long(void **state)
{
    (void)state;
    enum { BIG = 3 * 65536 + 64 };
    unsigned char *buf = malloc(BIG);
    assert_non_null(buf);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < BIG; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    static const uint32_t lens[] = {
        0,    1,    7,    8,     63,    64,    1000,  1023,  1024,     1025,
        3071, 3072, 3073, 4079,  4080,  4081,  4095,  4096,  4097,     4112,
        8160, 8191, 8192, 12240, 12241, 16384, 65535, 65536, 3 * 65536};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (unsigned off = 0; off < 9; off++)
            for (unsigned seed = 0; seed < 2; seed++) {
                uint32_t c0 = seed ? 0xdeadbeefu : 0;
                nvs_crc32c_force_table(true);
                uint32_t want = nvs_crc32c(c0, buf + off, lens[i]);
                nvs_crc32c_force_table(false);
                assert_int_equal(nvs_crc32c(c0, buf + off, lens[i]), want);
            }
    /* and every length in a stretch across one and two blocks */
    for (uint32_t n = 3000; n < 8300; n += 13) {
        nvs_crc32c_force_table(true);
        uint32_t want = nvs_crc32c(7, buf + 3, n);
        nvs_crc32c_force_table(false);
        assert_int_equal(nvs_crc32c(7, buf + 3, n), want);
    }
    free(buf);
}

/* ---- open ---------------------------------------------------------------- */

static void
test_open_refuses_tmpfs(void **state)
{
    struct nvs_config c;
    struct nvs *s = NULL;
    char path[128];

    (void)state;
    fx_config(&c, 4, no_uring);
    snprintf(path, sizeof(path), "/dev/shm/tc_nvs_test_%d.dat", (int)getpid());
    c.path[0] = path;
    assert_int_equal(nvs_open(&c, &s), -EINVAL);
    assert_null(s);
    assert_non_null(strstr(err_msg(), path));
    assert_non_null(strstr(err_msg(), "tmpfs"));
    assert_int_equal(access(path, F_OK), -1); /* not left behind */
}

static void
test_open_refuses_too_large(void **state)
{
    struct nvs_config c;
    struct nvs *s = NULL;

    (void)state;
    fx_config(&c, 4, no_uring);
    c.size[0] = 1ull << 50; /* 1 PiB */
    assert_int_equal(nvs_open(&c, &s), -ENOSPC);
    assert_non_null(strstr(err_msg(), fx_path));
    assert_non_null(strstr(err_msg(), "does not fit"));
    assert_int_equal(access(fx_path, F_OK), -1);
}

static void
test_open_disk_full(void **state)
{
    struct nvs_config c;
    struct nvs *s = NULL;

    (void)state;
    fx_config(&c, 4, no_uring);
    fail_fallocate = ENOSPC;
    assert_int_equal(nvs_open(&c, &s), -ENOSPC);
    fail_fallocate = 0;
    assert_null(s);
    assert_non_null(strstr(err_msg(), fx_path));
    assert_non_null(strstr(err_msg(), "disk is full"));
    assert_int_equal(access(fx_path, F_OK), -1);
}

/* io_uring refused by the kernel: the store falls back by itself. */
static void
test_uring_refused_falls_back(void **state)
{
    struct fx f;
    struct nvs_loc loc;
    struct nvs_stats st;
    char v[3000], out[3000];

    (void)state;
    bool saved = no_uring;
    no_uring = false; /* the store would use io_uring */
    fail_uring_init = -ENOSYS;
    assert_int_equal(fx_open(&f, 4, 0), 0);
    nvs_get_stats(f.s, &st);
    assert_false(st.uring);
    fx_fill(v, sizeof(v), 2, 2);
    assert_int_equal(fx_append(f.s, "kf", v, sizeof(v), &loc), 0);
    assert_int_equal(nvs_flush(f.s), 0);
    assert_int_equal(fx_read(f.r, &loc, "kf", out), 0);
    assert_true(fx_check(out, sizeof(out), 2, 2));
    fx_close(&f);
    /* EPERM (io_uring disabled by sysctl or seccomp) too; other errors
     * fail the open */
    fail_uring_init = -EPERM;
    assert_int_equal(fx_open(&f, 4, 0), 0);
    nvs_get_stats(f.s, &st);
    assert_false(st.uring);
    fx_close(&f);
    fail_uring_init = -ENOMEM;
    assert_int_equal(fx_open(&f, 4, 0), -ENOMEM);
    assert_non_null(strstr(err_msg(), "io_uring"));
    unlink(f.path);
    fail_uring_init = 0;
    no_uring = saved;
}

static void
test_open_bad_config(void **state)
{
    struct nvs_config c;
    struct nvs *s = NULL;

    (void)state;
    fx_config(&c, 4, no_uring);
    c.seg_size = FX_WBUF * 3 + 4096;
    assert_int_equal(nvs_open(&c, &s), -EINVAL);
    assert_non_null(strstr(err_msg(), "multiple"));
    fx_config(&c, 1, no_uring);
    assert_int_equal(nvs_open(&c, &s), -EINVAL); /* one segment */
    assert_non_null(strstr(err_msg(), "at least 2 segments"));
    assert_int_equal(access(fx_path, F_OK), -1);
}

/* ---- appends and reads --------------------------------------------------- */

static void
test_read_your_write(void **state)
{
    struct fx f;
    struct nvs_loc loc;
    struct nvs_stats st;
    char v[3000], out[3000];

    (void)state;
    assert_int_equal(fx_open(&f, 8, 0), 0);
    fx_fill(v, sizeof(v), 1, 1);
    assert_int_equal(fx_append(f.s, "key1", v, sizeof(v), &loc), 0);
    assert_int_equal(loc.off, NVS_SEG_HDR_SIZE);
    assert_int_equal(loc.vlen, sizeof(v));
    assert_true(nvs_loc_live(f.s, &loc));

    /* In the write buffer: served from DRAM, so an I/O fault has no say. */
    nvs_set_faults(f.s, &(struct nvs_faults){.eio_every = 1});
    memset(out, 0, sizeof(out));
    assert_int_equal(fx_read(f.r, &loc, "key1", out), 0);
    assert_true(fx_check(out, sizeof(out), 1, 1));
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.bytes_written, 0);
    assert_int_equal(st.objects_written, 1);
    assert_int_equal(st.uring, !no_uring);

    /* After the flush it comes from the file: the fault now applies. */
    assert_int_equal(nvs_flush(f.s), 0);
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.bytes_written, NVS_SEG_HDR_SIZE + 4096);
    assert_int_equal(fx_read(f.r, &loc, "key1", out), -EIO);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    memset(out, 0, sizeof(out));
    assert_int_equal(fx_read(f.r, &loc, "key1", out), 0);
    assert_true(fx_check(out, sizeof(out), 1, 1));

    /* A wrong key or length is an error, never a value. */
    assert_int_equal(fx_read(f.r, &loc, "key2", out), -EBADMSG);
    struct nvs_loc bad = loc;
    bad.vlen--;
    assert_int_equal(fx_read(f.r, &bad, "key1", out), -EBADMSG);
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.read_badcrc, 2);
    assert_int_equal(st.read_ioerr, 1);
    assert_true(st.objects_read >= 2);
    assert_true(st.read_lat_p50_ns > 0);
    assert_true(st.read_lat_p999_ns >= st.read_lat_p50_ns);
    fx_close(&f);
}

/* The walker notices a broken rule (state poked through tier/nvs_int.h). */
static void
test_check_walker(void **state)
{
    struct fx f;
    struct nvs_loc loc;
    char v[100] = {0};

    (void)state;
    assert_int_equal(fx_open(&f, 4, 0), 0);
    assert_int_equal(fx_append(f.s, "k", v, sizeof(v), &loc), 0);
    assert_int_equal(nvs_check(f.s), 0);
    f.s->seg[loc.seg].pending++;
    assert_int_equal(nvs_check(f.s), -EUCLEAN);
    assert_non_null(strstr(err_msg(), "pending"));
    f.s->seg[loc.seg].pending--;
    f.s->seg[loc.seg].dead = f.s->seg[loc.seg].used + 1;
    assert_int_equal(nvs_check(f.s), -EUCLEAN);
    assert_non_null(strstr(err_msg(), "dead"));
    f.s->seg[loc.seg].dead = 0;
    assert_int_equal(nvs_check(f.s), 0);
    fx_close(&f);
}

static void
test_wbuf_spanning_and_e2big(void **state)
{
    struct fx f;
    struct nvs_loc loc[5];
    static char v[FX_WBUF], out[FX_WBUF];
    const uint32_t n = 20000;

    (void)state;
    assert_int_equal(fx_open(&f, 8, 0), 0);
    for (uint32_t i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%u", i);
        fx_fill(v, n, i, 0);
        assert_int_equal(fx_append(f.s, key, v, n, &loc[i]), 0);
    }
    /* values carry no header; each would span 6 blocks right after the
     * previous one and 5 from the next boundary, 480 bytes on */
    assert_int_equal(loc[1].off, 24576);
    assert_int_equal(loc[2].off, 45056);
    /* the fourth does not fit the first buffer: it starts the second */
    assert_int_equal(loc[3].off, FX_WBUF);
    assert_int_equal(loc[3].seg, loc[0].seg);
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < 5; i++) {
            char key[16];
            snprintf(key, sizeof(key), "k%u", i);
            assert_int_equal(fx_read(f.r, &loc[i], key, out), 0);
            assert_true(fx_check(out, n, i, 0));
        }
        assert_int_equal(nvs_flush(f.s), 0);
    }

    /* the largest record (value, descriptor, footer) fills a buffer after a
     * segment header */
    uint32_t max = FX_WBUF - NVS_SEG_HDR_SIZE - nvs_desc_size(2) -
                   (uint32_t)sizeof(struct nvs_wbuf_footer);
    fx_fill(v, max + 1, 9, 9);
    assert_int_equal(fx_append(f.s, "kx", v, max + 1, &loc[0]), -E2BIG);
    assert_int_equal(fx_append(f.s, "kx", v, max, &loc[0]), 0);
    assert_int_equal(fx_read(f.r, &loc[0], "kx", out), 0);
    assert_true(fx_check(out, max, 9, 9));
    assert_int_equal(nvs_flush(f.s), 0);
    assert_int_equal(fx_read(f.r, &loc[0], "kx", out), 0);
    assert_true(fx_check(out, max, 9, 9));
    fx_close(&f);
}

static void
test_append_busy(void **state)
{
    struct fx f;
    struct nvs_loc loc;
    struct nvs_stats st;
    static char v[30000];
    int e = 0, i;

    (void)state;
    assert_int_equal(fx_open(&f, 8, 0), 0);
    /* The writer stalls (held until the fault is cleared, however slow
     * this thread is): four buffers fill up, the next append is refused
     * instead of waiting. */
    nvs_set_faults(f.s, &(struct nvs_faults){.write_delay_ms = FX_HOLD_MS});
    for (i = 0; i < 20 && (e = fx_append(f.s, "k", v, sizeof(v), &loc)) == 0;
         i++)
        ;
    assert_int_equal(e, -EAGAIN);
    assert_int_equal(i, 8); /* 2 records a buffer, 4 buffers */
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.append_busy, 1);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    assert_int_equal(nvs_flush(f.s), 0);
    assert_int_equal(fx_append(f.s, "k", v, sizeof(v), &loc), 0);
    fx_close(&f);
}

/* Segments are numbered across paths: 2 + 2 segments in two files. */
static void
test_two_paths(void **state)
{
    struct nvs_config c;
    struct nvs *s;
    struct nvs_ring *r;
    char path2[160];
    static struct nvs_loc loc[120];
    static char v[10000], out[10000];
    char key[16];
    int n = 0;

    (void)state;
    fx_config(&c, 2, no_uring);
    snprintf(path2, sizeof(path2), "%s.2", fx_path);
    unlink(path2);
    c.npaths = 2;
    c.path[1] = path2;
    c.size[1] = 2 * FX_SEG;
    assert_int_equal(nvs_open(&c, &s), 0);
    assert_int_equal(nvs_ring_create(s, 4, &r), 0);
    /* ~25 records a segment: 80 reach the second file's segments */
    for (; n < 80; n++) {
        snprintf(key, sizeof(key), "p%d", n);
        fx_fill(v, sizeof(v), (uint32_t)n, 2);
        int e = -EAGAIN;
        for (int k = 0; k < 1000 && e == -EAGAIN; k++)
            if ((e = fx_append(s, key, v, sizeof(v), &loc[n])) == -EAGAIN)
                nvs_flush(s);
        assert_int_equal(e, 0);
    }
    assert_int_equal(nvs_flush(s), 0);
    assert_true(loc[n - 1].seg >= 2);
    struct nvs_stats st;
    nvs_get_stats(s, &st);
    assert_int_equal(st.segs_total, 4);
    assert_int_equal(st.page_reclaims, 0);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(fx_read(r, &loc[i], key, out), 0);
        assert_true(fx_check(out, sizeof(out), (uint32_t)i, 2));
    }
    /* the last value sits in the second file, at its segment's offset */
    int fd = open(path2, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(
        pread(fd, out, sizeof(out),
              (off_t)(loc[n - 1].seg - 2) * FX_SEG + loc[n - 1].off),
        sizeof(out));
    assert_true(fx_check(out, sizeof(out), (uint32_t)n - 1, 2));
    close(fd);
    nvs_ring_destroy(r);
    nvs_close(s);
    unlink(fx_path);
    unlink(path2);
}

/* ---- reclaim ------------------------------------------------------------- */

static int
append_retry(struct nvs *s, const char *key, const char *v, uint32_t n,
             struct nvs_loc *loc)
{
    int e = -EAGAIN;
    for (int k = 0; k < 1000 && e == -EAGAIN; k++) {
        e = fx_append(s, key, v, n, loc);
        if (e == -EAGAIN)
            nvs_flush(s);
    }
    return e;
}

static void
test_reclaim_makes_stale(void **state)
{
    struct fx f;
    struct nvs_loc first, loc;
    struct nvs_stats st;
    static char v[10000], out[10000];

    (void)state;
    assert_int_equal(fx_open(&f, 4, 0), 0);
    fx_fill(v, sizeof(v), 7, 7);
    assert_int_equal(append_retry(f.s, "first", v, sizeof(v), &first), 0);
    /* 4 segments of ~25 records: 200 records wrap around twice */
    for (int i = 0; i < 200; i++)
        assert_int_equal(append_retry(f.s, "fill", v, sizeof(v), &loc), 0);
    assert_int_equal(nvs_flush(f.s), 0);
    assert_false(nvs_loc_live(f.s, &first));
    assert_int_equal(fx_read(f.r, &first, "first", out), -ESTALE);
    assert_true(nvs_loc_live(f.s, &loc));
    assert_int_equal(fx_read(f.r, &loc, "fill", out), 0);
    assert_true(fx_check(out, sizeof(out), 7, 7));
    nvs_get_stats(f.s, &st);
    assert_true(st.page_reclaims >= 4);
    assert_true(st.objects_lost >= 100);
    assert_int_equal(st.read_stale, 1);
    assert_int_equal(st.segs_total, 4);
    assert_int_equal(st.segs_free, 0);
    assert_true(st.bytes_used <= st.bytes_total);
    /* releasing a stale locator changes nothing */
    nvs_release(f.s, &first);
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.bytes_dead, 0);
    fx_close(&f);
}

/* ---- compaction ---------------------------------------------------------- */

#define CN 60
struct cmap {
    struct nvs_loc loc[CN];
    bool live[CN];
    int moved, asked;
};

static int
ckey_id(const void *key, uint8_t klen)
{
    char buf[16];
    if (klen >= sizeof(buf))
        return -1;
    memcpy(buf, key, klen);
    buf[klen] = '\0';
    return atoi(buf + 1);
}

static bool
ckeep(void *arg, const void *key, uint8_t klen, const struct nvs_loc *old)
{
    struct cmap *m = arg;
    int id = ckey_id(key, klen);
    m->asked++;
    return id >= 0 && id < CN && m->live[id] &&
           memcmp(&m->loc[id], old, sizeof(*old)) == 0;
}

static void
cmoved(void *arg, const void *key, uint8_t klen, const struct nvs_loc *old,
       const struct nvs_loc *new_loc)
{
    struct cmap *m = arg;
    int id = ckey_id(key, klen);
    assert_true(memcmp(&m->loc[id], old, sizeof(*old)) == 0);
    m->loc[id] = *new_loc;
    m->moved++;
}

static void
test_compaction(void **state)
{
    struct fx f;
    struct nvs_stats st, st0;
    static struct cmap m;
    static char v[10000], out[10000];
    char key[16];

    (void)state;
    memset(&m, 0, sizeof(m));
    assert_int_equal(fx_open(&f, 8, 0), 0);
    for (int i = 0; i < CN; i++) { /* ~2.4 segments */
        snprintf(key, sizeof(key), "c%d", i);
        fx_fill(v, sizeof(v), (uint32_t)i, 1);
        assert_int_equal(append_retry(f.s, key, v, sizeof(v), &m.loc[i]), 0);
        m.live[i] = true;
    }
    assert_int_equal(nvs_flush(f.s), 0);
    uint32_t seg0 = m.loc[0].seg;
    /* the engine drops two records in three of the first segment */
    for (int i = 0; i < CN; i++)
        if (m.loc[i].seg == seg0 && i % 3 != 0) {
            m.live[i] = false;
            nvs_release(f.s, &m.loc[i]);
        }
    nvs_get_stats(f.s, &st0);
    assert_true(st0.bytes_dead > 0);

    /* nothing is 90% dead */
    assert_int_equal(nvs_compact_step(f.s, 0.9, 1 << 20, ckeep, cmoved, &m), 0);
    assert_int_equal(m.asked, 0);
    /* small budgets: several steps for one segment */
    int total = 0, steps = 0, r;
    do {
        r = nvs_compact_step(f.s, 0.5, 16 * 1024, ckeep, cmoved, &m);
        assert_true(r >= 0);
        total += r;
        steps++;
        nvs_get_stats(f.s, &st);
    } while (st.compact_runs == 0 && steps < 100);
    assert_int_equal(st.compact_runs, 1);
    assert_true(steps > 3);
    assert_int_equal(total, m.moved);
    assert_int_equal(st.compact_rescues, (uint64_t)m.moved);
    assert_int_equal(st.compact_skipped + st.compact_rescues,
                     (uint64_t)m.asked);
    for (int i = 0; i < CN; i++) /* every live record left seg0 */
        assert_true(!m.live[i] || m.loc[i].seg != seg0);
    assert_true(m.moved > 0);
    assert_true(st.segs_free == st0.segs_free + 1 ||
                st.segs_free == st0.segs_free); /* moved records may open one */
    assert_int_equal(st.bytes_dead, 0);
    /* every live record reads back with the right value */
    for (int i = 0; i < CN; i++) {
        snprintf(key, sizeof(key), "c%d", i);
        if (!m.live[i])
            continue;
        assert_int_equal(fx_read(f.r, &m.loc[i], key, out), 0);
        assert_true(fx_check(out, sizeof(out), (uint32_t)i, 1));
    }
    nvs_flush(f.s);
    for (int i = 0; i < CN; i++) {
        snprintf(key, sizeof(key), "c%d", i);
        if (m.live[i]) {
            assert_int_equal(fx_read(f.r, &m.loc[i], key, out), 0);
            assert_true(fx_check(out, sizeof(out), (uint32_t)i, 1));
        } else if (m.loc[i].seg == seg0) {
            assert_false(nvs_loc_live(f.s, &m.loc[i]));
        }
    }
    fx_close(&f);
}

/* ---- faults -------------------------------------------------------------- */

/* Invert the byte at off of the file (through the page cache; the test
 * fsyncs before the store reads with O_DIRECT). */
static void
flip_byte(int fd, uint64_t off)
{
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
    b = (unsigned char)~b;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
}

static void
test_corruption_is_badmsg(void **state)
{
    struct fx f;
    struct nvs_loc loc[3];
    struct nvs_stats st;
    char v[5000], out[5000];

    (void)state;
    assert_int_equal(fx_open(&f, 8, 0), 0);
    for (uint32_t i = 0; i < 3; i++) {
        fx_fill(v, sizeof(v), i, 3);
        assert_int_equal(fx_append(f.s, "kk", v, sizeof(v), &loc[i]), 0);
    }
    assert_int_equal(nvs_flush(f.s), 0);
    int fd = open(f.path, O_RDWR);
    assert_true(fd >= 0);
    /* one byte inverted in value 0's middle, value 1's first byte and value
     * 2's last byte */
    uint64_t base = (uint64_t)loc[0].seg * FX_SEG;
    flip_byte(fd, base + loc[0].off + 100);
    flip_byte(fd, base + loc[1].off);
    flip_byte(fd, base + loc[2].off + sizeof(v) - 1);
    assert_int_equal(fsync(fd), 0);
    close(fd);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fx_read(f.r, &loc[i], "kk", out), -EBADMSG);
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.read_badcrc, 3);
    fx_close(&f);
}

static void
test_injected_eio_and_short(void **state)
{
    struct fx f;
    struct nvs_loc loc;
    struct nvs_stats st;
    char v[5000], out[5000];

    (void)state;
    assert_int_equal(fx_open(&f, 8, 0), 0);
    fx_fill(v, sizeof(v), 4, 4);
    assert_int_equal(fx_append(f.s, "kk", v, sizeof(v), &loc), 0);
    assert_int_equal(nvs_flush(f.s), 0);
    nvs_set_faults(f.s, &(struct nvs_faults){.eio_every = 2});
    int ok = 0, eio = 0;
    for (int i = 0; i < 10; i++) {
        int e = fx_read(f.r, &loc, "kk", out);
        ok += e == 0;
        eio += e == -EIO;
    }
    assert_int_equal(ok, 5);
    assert_int_equal(eio, 5);
    nvs_set_faults(f.s, &(struct nvs_faults){.short_every = 1});
    assert_int_equal(fx_read(f.r, &loc, "kk", out), -EIO);
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.read_ioerr, 6);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    assert_int_equal(fx_read(f.r, &loc, "kk", out), 0);
    assert_true(fx_check(out, sizeof(out), 4, 4));
    fx_close(&f);
}

/* A write piece the ring completes short is finished with pwrite from
 * where it stopped: with every piece of 1 MiB buffers (four 256 KiB
 * pieces) taken as half written, every record still reads back whole.
 * The fallback writes with pwrite only (no pieces, nothing counted). */
static void
test_short_writes(void **state)
{
    struct fx f;
    struct nvs_config c;
    struct nvs_stats st;
    struct nvs_loc loc[400];
    char key[16], v[5000], out[5000];

    (void)state;
    fx_config(&c, 8, no_uring);
    c.seg_size = 2u << 20;
    c.size[0] = 8 * (uint64_t)c.seg_size;
    c.wbuf_size = 1u << 20;
    assert_int_equal(fx_open_cfg(&f, &c), 0);
    nvs_set_faults(f.s, &(struct nvs_faults){.short_write_every = 1});
    for (uint32_t i = 0; i < 400; i++) { /* about two buffers */
        snprintf(key, sizeof(key), "k%u", i);
        fx_fill(v, 4000 + i, i, 1);
        assert_int_equal(fx_append(f.s, key, v, 4000 + i, &loc[i]), 0);
    }
    assert_int_equal(nvs_flush(f.s), 0);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    for (uint32_t i = 0; i < 400; i++) {
        snprintf(key, sizeof(key), "k%u", i);
        assert_int_equal(fx_read(f.r, &loc[i], key, out), 0);
        assert_true(fx_check(out, 4000 + i, i, 1));
    }
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.write_errors, 0);
    if (no_uring)
        assert_int_equal(st.write_short, 0);
    else
        assert_true(st.write_short >= 4); /* one whole buffer's pieces */
    fx_close(&f);
}

#define DL_DELAY_MS 1000

static void
test_deadline(void **state)
{
    struct fx f;
    struct nvs_ring *r1;
    struct nvs_loc loc;
    struct nvs_stats st;
    char v[5000], out[5000];
    struct nvs_read rd = {.key = "kk", .klen = 2}, rd2 = rd, *done[2];

    (void)state;
    assert_int_equal(fx_open(&f, 8, 50), 0);
    assert_int_equal(nvs_ring_create(f.s, 1, &r1), 0);
    fx_fill(v, sizeof(v), 5, 5);
    assert_int_equal(fx_append(f.s, "kk", v, sizeof(v), &loc), 0);
    assert_int_equal(nvs_flush(f.s), 0);
    /* A read 1 s slow against a 50 ms deadline: reap returns it as timed
     * out while the I/O is still under way. Only if this thread ran so
     * late that the I/O was already over when reap looked (waited >= the
     * delay: checked) is the read a success; then try again. */
    nvs_set_faults(f.s, &(struct nvs_faults){.delay_ms = DL_DELAY_MS});
    rd.loc = loc;
    rd2.loc = loc;
    /* the reads after the timed-out one must not time out on a slow,
     * busy machine: their deadline is far */
    rd2.timeout_ms = 60000;
    uint64_t t0 = 0, waited = 0;
    for (int attempt = 0;; attempt++) {
        assert_int_equal(nvs_read_prep(r1, &rd), 0);
        t0 = clock_nsec(); /* before submit: the I/O cannot end sooner */
        assert_int_equal(nvs_ring_submit(r1), 1);
        assert_int_equal(nvs_ring_reap(r1, done, 2, 1), 1);
        waited = clock_nsec() - t0;
        assert_ptr_equal(done[0], &rd);
        if (rd.res == -ETIMEDOUT)
            break;
        assert_int_equal(rd.res, 0);
        if (waited < DL_DELAY_MS * 1000000ull)
            fail_msg("a read delayed %d ms completed after %llu ms",
                     DL_DELAY_MS, (unsigned long long)(waited / 1000000));
        nvs_read_done(r1, &rd);
        print_message("attempt %d: reap ran %llu ms after submit, the I/O "
                      "was over; again\n",
                      attempt, (unsigned long long)(waited / 1000000));
        if (attempt == 9)
            fail_msg("10 attempts, each reaped after the I/O was over");
    }
    assert_null(rd.value);
    nvs_read_done(r1, &rd);
    /* the slot's buffer still belongs to the delayed I/O: reap returned
     * at the deadline, not after the I/O */
    assert_int_equal(nvs_read_prep(r1, &rd2), -EBUSY);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    /* the slot comes back once a reap saw the I/O complete (~1 s; bounded
     * wait) */
    int e = -EBUSY;
    uint64_t limit = clock_nsec() + 60ull * 1000000000;
    while (e == -EBUSY) {
        if (clock_nsec() > limit)
            fail_msg("the delayed read's slot not back after 60 s");
        struct timespec ts = {.tv_nsec = 10 * 1000000L};
        nanosleep(&ts, NULL);
        assert_int_equal(nvs_ring_reap(r1, done, 2, 0), 0);
        e = nvs_read_prep(r1, &rd2);
    }
    assert_int_equal(e, 0);
    /* not before the delayed I/O was over */
    assert_true(clock_nsec() - t0 >= DL_DELAY_MS * 1000000ull);
    assert_int_equal(nvs_ring_submit(r1), 1);
    assert_int_equal(nvs_ring_reap(r1, done, 2, 1), 1);
    assert_int_equal(rd2.res, 0);
    nvs_read_done(r1, &rd2);
    assert_int_equal(nvs_read_prep(r1, &rd2), 0);
    assert_int_equal(nvs_ring_submit(r1), 1);
    assert_int_equal(nvs_ring_reap(r1, done, 2, 1), 1);
    assert_int_equal(rd2.res, 0);
    memcpy(out, rd2.value, sizeof(out));
    nvs_read_done(r1, &rd2);
    assert_true(fx_check(out, sizeof(out), 5, 5));
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.read_timeout, 1);
    /* destroying a ring with a delayed read in flight waits for it */
    nvs_set_faults(f.s, &(struct nvs_faults){.delay_ms = 100});
    assert_int_equal(nvs_read_prep(r1, &rd2), 0);
    assert_int_equal(nvs_ring_submit(r1), 1);
    nvs_ring_destroy(r1);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    fx_close(&f);
}

static void
test_ring_fd(void **state)
{
    struct fx f;
    struct nvs_loc loc;
    char v[100];
    struct nvs_read rd = {.key = "kk", .klen = 2}, *done[2];
    struct pollfd p;

    (void)state;
    assert_int_equal(fx_open(&f, 8, 0), 0);
    p = (struct pollfd){.fd = nvs_ring_fd(f.r), .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 0);
    fx_fill(v, sizeof(v), 6, 6);
    assert_int_equal(fx_append(f.s, "kk", v, sizeof(v), &loc), 0);
    rd.loc = loc;
    /* from the write buffer: readable at once */
    assert_int_equal(nvs_read_prep(f.r, &rd), 0);
    assert_int_equal(poll(&p, 1, 0), 1);
    assert_int_equal(nvs_ring_reap(f.r, done, 2, 0), 1);
    assert_int_equal(rd.res, 0);
    nvs_read_done(f.r, &rd);
    assert_int_equal(poll(&p, 1, 0), 0); /* reap drained it */
    /* from the file: readable once the I/O completed */
    assert_int_equal(nvs_flush(f.s), 0);
    assert_int_equal(nvs_read_prep(f.r, &rd), 0);
    assert_int_equal(nvs_ring_submit(f.r), 1);
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(nvs_ring_reap(f.r, done, 2, 0), 1);
    assert_int_equal(rd.res, 0);
    assert_true(fx_check(rd.value, sizeof(v), 6, 6));
    nvs_read_done(f.r, &rd);
    fx_close(&f);
}

static void
test_ring_full(void **state)
{
    struct fx f;
    struct nvs_loc loc;
    char v[100];
    struct nvs_read rd[9], *done[9];

    (void)state;
    assert_int_equal(fx_open(&f, 8, 0), 0);
    fx_fill(v, sizeof(v), 8, 8);
    assert_int_equal(fx_append(f.s, "kk", v, sizeof(v), &loc), 0);
    assert_int_equal(nvs_flush(f.s), 0);
    for (int i = 0; i < 9; i++) {
        rd[i] = (struct nvs_read){.loc = loc, .key = "kk", .klen = 2};
        assert_int_equal(nvs_read_prep(f.r, &rd[i]), i < 8 ? 0 : -EBUSY);
    }
    assert_int_equal(nvs_ring_submit(f.r), 8);
    int got = 0;
    for (int k = 0; k < 100 && got < 8; k++)
        got += nvs_ring_reap(f.r, done + got, 8 - got, 1);
    assert_int_equal(got, 8);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(done[i]->res, 0);
        assert_true(fx_check(done[i]->value, sizeof(v), 8, 8));
        nvs_read_done(f.r, done[i]);
    }
    fx_close(&f);
}

/* ---- reads on the caller's io_uring ---------------------------------------
 */

#define EXT_TAG (5ull << 56)

/* Hand r the completions of ring (an event loop's) until want reads have
 * completed for reaping, or until limit_ms: how many did. */
static int
ext_pump(struct io_uring *ring, struct nvs_ring *r, int want, int limit_ms)
{
    int live = 0;
    uint64_t limit = clock_nsec() + (uint64_t)limit_ms * 1000000ull;
    while (live < want && clock_nsec() < limit) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {.tv_nsec = 10 * 1000000L};
        io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
        while (io_uring_peek_cqe(ring, &cqe) == 0) {
            uint64_t d = io_uring_cqe_get_data64(cqe);
            assert_int_equal(d >> 56, EXT_TAG >> 56);
            live += nvs_ring_complete(r, d, cqe->res);
            io_uring_cqe_seen(ring, cqe);
        }
    }
    return live;
}

/* nvs_ring_create_on: reads go on the caller's ring, the caller submits
 * them and hands their completions back; values, a value still in a write
 * buffer (no I/O), an injected I/O error (a failed read, counted), a
 * deadline that ends a slow read (its late completion then frees the
 * slot), and a detach that fails what is still in flight. The fallback
 * store (no io_uring) refuses. */
static void
test_ring_on_caller(void **state)
{
    struct fx f;
    struct io_uring ring;
    struct nvs_ring *r;
    struct nvs_loc loc[3];
    struct nvs_stats st;
    char v[5000];
    struct nvs_read rd[3], *done[4];

    (void)state;
    assert_int_equal(fx_open(&f, 8, 0), 0);
    assert_int_equal(__real_io_uring_queue_init(64, &ring, 0), 0);
    if (no_uring) {
        assert_int_equal(nvs_ring_create_on(f.s, 4, &ring, EXT_TAG, &r),
                         -ENOTSUP);
        goto out;
    }
    assert_int_equal(nvs_ring_create_on(f.s, 4, &ring, EXT_TAG | 1, &r),
                     -EINVAL);
    assert_int_equal(nvs_ring_create_on(f.s, 4, &ring, EXT_TAG, &r), 0);
    assert_true(nvs_ring_fd(r) < 0); /* no eventfd: the caller's ring */
    for (uint32_t i = 0; i < 3; i++) {
        fx_fill(v, sizeof(v), i, 9);
        assert_int_equal(fx_append(f.s, "kk", v, sizeof(v), &loc[i]), 0);
        if (i == 1)
            assert_int_equal(nvs_flush(f.s), 0); /* 2 stays in DRAM */
    }
    for (int i = 0; i < 3; i++) {
        rd[i] = (struct nvs_read){.loc = loc[i], .key = "kk", .klen = 2};
        assert_int_equal(nvs_read_prep(r, &rd[i]), 0);
    }
    /* two with I/O, queued on the caller's ring; the third is ready */
    assert_int_equal(io_uring_sq_ready(&ring), 2);
    assert_int_equal(nvs_ring_submit(r), 2);
    assert_int_equal(nvs_ring_busy(r), 2);
    assert_int_equal(ext_pump(&ring, r, 2, 60000), 2);
    assert_int_equal(nvs_ring_busy(r), 0);
    assert_int_equal(nvs_ring_reap(r, done, 4, 0), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rd[i].res, 0);
        assert_true(fx_check(rd[i].value, sizeof(v), (uint32_t)i, 9));
        nvs_read_done(r, &rd[i]);
    }
    /* a failed read is an error, never a value */
    nvs_set_faults(f.s, &(struct nvs_faults){.eio_every = 1});
    rd[0] = (struct nvs_read){.loc = loc[0], .key = "kk", .klen = 2};
    assert_int_equal(nvs_read_prep(r, &rd[0]), 0);
    assert_int_equal(nvs_ring_submit(r), 1);
    assert_int_equal(ext_pump(&ring, r, 1, 60000), 1);
    assert_int_equal(nvs_ring_reap(r, done, 4, 0), 1);
    assert_int_equal(rd[0].res, -EIO);
    assert_null(rd[0].value);
    nvs_read_done(r, &rd[0]);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.read_ioerr, 1);
    /* a read 1 s slow against a 50 ms deadline ends at the deadline, with
     * nothing handed over: the I/O keeps the slot until its completion */
    nvs_set_faults(f.s, &(struct nvs_faults){.delay_ms = DL_DELAY_MS});
    rd[0] = (struct nvs_read){
        .loc = loc[0], .key = "kk", .klen = 2, .timeout_ms = 50};
    assert_int_equal(nvs_read_prep(r, &rd[0]), 0);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    assert_int_equal(nvs_ring_submit(r), 1);
    assert_int_equal(io_uring_submit(&ring), 2); /* the timer, the read */
    int n = 0;
    for (int k = 0; k < 6000 && n == 0; k++) {
        struct timespec ts = {.tv_nsec = 10 * 1000000L};
        nanosleep(&ts, NULL);
        n = nvs_ring_reap(r, done, 4, 0);
    }
    assert_int_equal(n, 1);
    /* a late completion is a success only if the I/O beat the reap */
    if (rd[0].res != 0) {
        assert_int_equal(rd[0].res, -ETIMEDOUT);
        assert_int_equal(nvs_ring_busy(r), 1);
        nvs_read_done(r, &rd[0]);
        assert_int_equal(ext_pump(&ring, r, 1, 3000), 0); /* abandoned */
        assert_int_equal(nvs_ring_busy(r), 0);
    } else {
        nvs_read_done(r, &rd[0]);
    }
    /* detach: what is in flight fails, and nothing more is taken */
    nvs_set_faults(f.s, &(struct nvs_faults){.delay_ms = 100});
    rd[1] = (struct nvs_read){.loc = loc[1], .key = "kk", .klen = 2};
    assert_int_equal(nvs_read_prep(r, &rd[1]), 0);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    assert_int_equal(nvs_ring_submit(r), 1);
    assert_int_equal(io_uring_submit(&ring), 2);
    nvs_ring_detach(r);
    assert_int_equal(nvs_ring_reap(r, done, 4, 0), 1);
    assert_int_equal(rd[1].res, -EIO);
    assert_null(rd[1].value);
    nvs_read_done(r, &rd[1]);
    rd[2] = (struct nvs_read){.loc = loc[2], .key = "kk", .klen = 2};
    assert_int_equal(nvs_read_prep(r, &rd[2]), -ENOTCONN);
    /* its I/O still ends on the ring, and frees the buffer */
    for (int k = 0; k < 300 && nvs_ring_busy(r); k++)
        ext_pump(&ring, r, 1, 10);
    assert_int_equal(nvs_ring_busy(r), 0);
    nvs_ring_destroy(r);
out:
    io_uring_queue_exit(&ring);
    fx_close(&f);
}

/* ---- media errors are logged once ---------------------------------------- */

/* stderr goes to a temporary file between stderr_capture and
 * stderr_release, which returns the number of lines written to it that
 * contain what. */
static int saved_stderr = -1;
static FILE *captured;

static void
stderr_capture(void)
{
    fflush(stderr);
    captured = tmpfile();
    assert_non_null(captured);
    saved_stderr = dup(2);
    assert_true(saved_stderr >= 0);
    assert_true(dup2(fileno(captured), 2) >= 0);
}

static int
stderr_release(const char *what)
{
    char line[2048];
    int n = 0;

    fflush(stderr);
    assert_true(dup2(saved_stderr, 2) >= 0);
    close(saved_stderr);
    rewind(captured);
    while (fgets(line, sizeof(line), captured))
        if (strstr(line, what)) {
            fputs(line, stderr); /* shown in the test's output too */
            n++;
        }
    fclose(captured);
    return n;
}

/* A failing device: every buffer write fails (-EIO, as on a full disk),
 * then every read. Each failure is counted and is a miss, never a value;
 * the log gets one line for the writes and one for the reads, however
 * many fail. */
static void
test_media_errors_logged_once(void **state)
{
    struct fx f;
    struct nvs_config c;
    struct nvs_stats st;
    struct nvs_loc loc[300];
    char key[16], v[5000], out[5000];

    (void)state;
    fx_config(&c, 8, no_uring);
    c.seg_size = 2u << 20;
    c.size[0] = 8 * (uint64_t)c.seg_size;
    c.wbuf_size = 256u << 10;
    assert_int_equal(fx_open_cfg(&f, &c), 0);
    stderr_capture();
    nvs_set_faults(f.s, &(struct nvs_faults){.write_eio_every = 1});
    for (uint32_t i = 0; i < 300; i++) { /* about five buffers */
        snprintf(key, sizeof(key), "k%u", i);
        fx_fill(v, 4000, i, 1);
        int rc = fx_append(f.s, key, v, 4000, &loc[i]);
        if (rc == -EAGAIN) { /* every buffer is being written: wait */
            assert_int_equal(nvs_flush(f.s), 0);
            rc = fx_append(f.s, key, v, 4000, &loc[i]);
        }
        assert_int_equal(rc, 0);
    }
    assert_int_equal(nvs_flush(f.s), 0);
    nvs_get_stats(f.s, &st);
    assert_true(st.write_errors >= 4);
    assert_int_equal(st.bytes_written, 0);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    /* the failed buffers' records: the file holds no value there */
    for (uint32_t i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "k%u", i);
        assert_int_equal(fx_read(f.r, &loc[i], key, out), -EBADMSG);
    }
    /* a record written well, then read through injected I/O errors */
    fx_fill(v, 4000, 7, 2);
    assert_int_equal(fx_append(f.s, "good", v, 4000, &loc[0]), 0);
    assert_int_equal(nvs_flush(f.s), 0);
    nvs_set_faults(f.s, &(struct nvs_faults){.eio_every = 1});
    for (int i = 0; i < 20; i++)
        assert_int_equal(fx_read(f.r, &loc[0], "good", out), -EIO);
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    int lines = stderr_release("nvs: ");
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.read_badcrc, 300);
    assert_int_equal(st.read_ioerr, 20);
    /* one line for the writes, one for the reads */
    assert_int_equal(lines, 2);
    assert_int_equal(fx_read(f.r, &loc[0], "good", out), 0);
    assert_true(fx_check(out, 4000, 7, 2));
    fx_close(&f);
}

#define STORE_TESTS                                                            \
    cmocka_unit_test(test_open_refuses_tmpfs),                                 \
        cmocka_unit_test(test_open_refuses_too_large),                         \
        cmocka_unit_test(test_open_bad_config),                                \
        cmocka_unit_test(test_open_disk_full),                                 \
        cmocka_unit_test(test_uring_refused_falls_back),                       \
        cmocka_unit_test(test_read_your_write),                                \
        cmocka_unit_test(test_wbuf_spanning_and_e2big),                        \
        cmocka_unit_test(test_append_busy), cmocka_unit_test(test_two_paths),  \
        cmocka_unit_test(test_check_walker),                                   \
        cmocka_unit_test(test_reclaim_makes_stale),                            \
        cmocka_unit_test(test_compaction),                                     \
        cmocka_unit_test(test_corruption_is_badmsg),                           \
        cmocka_unit_test(test_injected_eio_and_short),                         \
        cmocka_unit_test(test_short_writes), cmocka_unit_test(test_deadline),  \
        cmocka_unit_test(test_ring_fd), cmocka_unit_test(test_ring_full),      \
        cmocka_unit_test(test_ring_on_caller),                                 \
        cmocka_unit_test(test_media_errors_logged_once)

int
main(void)
{
    const struct CMUnitTest crc[] = {cmocka_unit_test(test_crc32c),
                                     cmocka_unit_test(test_crc32c_long)};
    const struct CMUnitTest store[] = {STORE_TESTS};
    int rc = cmocka_run_group_tests_name("nvs crc32c", crc, NULL, NULL);

    no_uring = false;
    rc |= cmocka_run_group_tests_name("nvs io_uring", store, NULL, NULL);
    no_uring = true;
    rc |= cmocka_run_group_tests_name("nvs fallback", store, NULL, NULL);
    return rc;
}

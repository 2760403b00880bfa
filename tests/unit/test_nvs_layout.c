/*
 * The NVMe store's on-disk layout (tier/nvs_layout.h, version 2): values
 * without headers packed from each write buffer's start, a directory and a
 * footer at the buffer's end. A value of up to 4 KiB placed within a block
 * is one 4 KiB read; a value is moved to a block boundary when that saves a
 * block for little padding; a buffer is full when values and directory
 * meet; compaction walks buffers by their footers and skips a buffer whose
 * footer or directory is damaged without handing a wrong record to keep().
 * Runs with io_uring and with the fallback.
 */
#include "tier/nvs.h"

#include "src/base/clock.h"
#include "src/base/err.h"
#include "tier/nvs_layout.h"

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "tests/unit/nvs_fx.h"

static bool no_uring;

static void
lfx_open_nwbuf(struct fx *f, uint32_t nsegs, uint32_t seg, uint32_t wbuf,
               unsigned nwbuf)
{
    struct nvs_config c;

    fx_config(&c, nsegs, no_uring);
    if (nwbuf != 0)
        c.nwbuf = nwbuf;
    if (seg != 0) {
        c.seg_size = seg;
        c.wbuf_size = wbuf;
        c.size[0] = (uint64_t)nsegs * seg;
    }
    assert_int_equal(fx_open_cfg(f, &c), 0);
}

static void
lfx_open(struct fx *f, uint32_t nsegs, uint32_t seg, uint32_t wbuf)
{
    lfx_open_nwbuf(f, nsegs, seg, wbuf, 0);
}

static uint64_t
bytes_read(struct nvs *s)
{
    struct nvs_stats st;
    nvs_get_stats(s, &st);
    return st.bytes_read;
}

/* 4096-byte values: each is block aligned and read back from the file with
 * exactly one 4 KiB read. */
static void
test_4k_values_one_block(void **state)
{
    struct fx f;
    static struct nvs_loc loc[40];
    static char v[4096], out[4096];
    struct nvs_stats st;
    char key[16];

    (void)state;
    lfx_open(&f, 8, 0, 0);
    for (uint32_t i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "four%u", i);
        fx_fill(v, sizeof(v), i, 4);
        assert_int_equal(fx_append(f.s, key, v, sizeof(v), &loc[i]), 0);
        assert_int_equal(loc[i].off % NVS_BLOCK, 0);
    }
    /* 14 after the header block: a 15th would leave no room for the
     * directory; then 15 a buffer */
    assert_int_equal(loc[13].off, 14 * NVS_BLOCK);
    assert_int_equal(loc[14].off, FX_WBUF);
    assert_int_equal(loc[29].off, 2 * FX_WBUF);
    assert_int_equal(nvs_flush(f.s), 0);
    uint64_t b0 = bytes_read(f.s);
    for (uint32_t i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "four%u", i);
        assert_int_equal(fx_read(f.r, &loc[i], key, out), 0);
        assert_true(fx_check(out, sizeof(out), i, 4));
    }
    nvs_get_stats(f.s, &st);
    assert_true(st.objects_read >= 40);
    assert_int_equal(st.bytes_read - b0, 40 * 4096);
    assert_int_equal(st.read_badcrc + st.read_ioerr, 0);
    fx_close(&f);
}

/* Sizes from 1 byte to 64 KiB read back exact, from the write buffer and
 * from the file; each read covers only the blocks its value touches, and a
 * value spans at most one block more than its minimum. */
static void
test_mixed_sizes(void **state)
{
    static const uint32_t sizes[] = {
        1,    2,    7,     100,   511,   1000,  3000,  4000,  4095,
        4096, 4097, 5000,  8191,  8192,  8193,  12000, 16384, 20000,
        1,    4096, 33333, 40000, 65535, 65536, 3,     4096,  4100};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    struct fx f;
    static struct nvs_loc loc[N];
    static char v[65536], out[65536];
    char key[16];

    (void)state;
    lfx_open(&f, 8, 1u << 20, 256u << 10);
    for (uint32_t i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "m%u", i);
        fx_fill(v, sizes[i], i, 9);
        assert_int_equal(fx_append(f.s, key, v, sizes[i], &loc[i]), 0);
        assert_int_equal(loc[i].vlen, sizes[i]);
        uint64_t min = (sizes[i] + NVS_BLOCK - 1) / NVS_BLOCK;
        assert_true(nvs_blocks_spanned(loc[i].off, sizes[i]) <= min + 1);
    }
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < N; i++) {
            snprintf(key, sizeof(key), "m%u", i);
            memset(out, 0, sizes[i]);
            uint64_t b0 = bytes_read(f.s);
            assert_int_equal(fx_read(f.r, &loc[i], key, out), 0);
            assert_true(fx_check(out, sizes[i], i, 9));
            /* from a write buffer no device bytes, else the blocks */
            uint64_t got = bytes_read(f.s) - b0;
            uint64_t io = nvs_blocks_spanned(loc[i].off, sizes[i]) * NVS_BLOCK;
            assert_true(got == io || (pass == 0 && got == 0));
        }
        assert_int_equal(nvs_flush(f.s), 0);
    }
    fx_close(&f);
}

/* A value that would straddle a block boundary moves to the boundary when
 * the padding is at most an eighth of it; otherwise it is packed. */
static void
test_value_placement(void **state)
{
    struct fx f;
    struct nvs_loc a, b, c, d, e;
    static char v[4096], out[4096];

    (void)state;
    assert_int_equal(nvs_val_place(4096, 4096), 4096);
    assert_int_equal(nvs_val_place(4097, 4096), 4097);  /* 4095 pad */
    assert_int_equal(nvs_val_place(7680, 4096), 8192);  /* 512 pad */
    assert_int_equal(nvs_val_place(7679, 4096), 7679);  /* 513 pad */
    assert_int_equal(nvs_val_place(5000, 3000), 5000);  /* fits */
    assert_int_equal(nvs_val_place(7000, 3000), 7000);  /* 1192 pad */
    assert_int_equal(nvs_val_place(8000, 10000), 8192); /* 3 blocks */
    assert_int_equal(nvs_blocks_spanned(8192, 4096), 1);
    assert_int_equal(nvs_blocks_spanned(8191, 2), 2);

    lfx_open(&f, 8, 0, 0);
    fx_fill(v, 3800, 1, 1);
    assert_int_equal(fx_append(f.s, "a", v, 3800, &a), 0);
    assert_int_equal(a.off, 4096);
    fx_fill(v, 4096, 2, 1);
    assert_int_equal(fx_append(f.s, "b", v, 4096, &b), 0);
    assert_int_equal(b.off, 8192); /* 296 bytes of padding, one block */
    fx_fill(v, 100, 3, 1);
    assert_int_equal(fx_append(f.s, "c", v, 100, &c), 0);
    assert_int_equal(c.off, 12288);
    fx_fill(v, 4000, 4, 1);
    assert_int_equal(fx_append(f.s, "d", v, 4000, &d), 0);
    assert_int_equal(d.off, 12388); /* 3996 bytes would be too many */
    fx_fill(v, 50, 5, 1);
    assert_int_equal(fx_append(f.s, "e", v, 50, &e), 0);
    assert_int_equal(e.off, 16388); /* small values pack tightly */
    assert_int_equal(nvs_flush(f.s), 0);

    uint64_t b0 = bytes_read(f.s);
    assert_int_equal(fx_read(f.r, &b, "b", out), 0);
    assert_true(fx_check(out, 4096, 2, 1));
    assert_int_equal(bytes_read(f.s) - b0, 4096);
    b0 = bytes_read(f.s);
    assert_int_equal(fx_read(f.r, &d, "d", out), 0);
    assert_true(fx_check(out, 4000, 4, 1));
    assert_int_equal(bytes_read(f.s) - b0, 8192);
    assert_int_equal(fx_read(f.r, &a, "a", out), 0);
    assert_true(fx_check(out, 3800, 1, 1));
    assert_int_equal(fx_read(f.r, &c, "c", out), 0);
    assert_true(fx_check(out, 100, 3, 1));
    assert_int_equal(fx_read(f.r, &e, "e", out), 0);
    assert_true(fx_check(out, 50, 5, 1));
    /* the same value under another key, or one byte short: never a value */
    assert_int_equal(fx_read(f.r, &b, "x", out), -EBADMSG);
    struct nvs_loc bad = b;
    bad.vlen--;
    assert_int_equal(fx_read(f.r, &bad, "b", out), -EBADMSG);
    fx_close(&f);
}

/* The footer of the extent ending at segment offset end of segment 0. */
static void
read_footer(const char *path, uint32_t end, struct nvs_wbuf_footer *out)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, out, sizeof(*out), end - sizeof(*out)),
                     sizeof(*out));
    close(fd);
}

/* Values and directory exactly fill a buffer; one byte more starts the
 * next buffer. */
static void
test_full_buffer_boundary(void **state)
{
    struct fx f;
    struct nvs_loc l1, l2, l3, l4, l5, l6;
    static char v[FX_WBUF], out[FX_WBUF];
    struct nvs_wbuf_footer ft;
    const uint32_t ds = nvs_desc_size(2), fs = sizeof(ft);
    const uint32_t a = 30000, b = FX_WBUF - a - 2 * ds - fs;

    (void)state;
    lfx_open(&f, 8, 0, 0);
    /* buffer 1: the segment header and one value fill it exactly */
    uint32_t max = FX_WBUF - NVS_SEG_HDR_SIZE - ds - fs;
    fx_fill(v, max, 1, 2);
    assert_int_equal(fx_append(f.s, "k1", v, max, &l1), 0);
    /* buffer 2: a and b and two descriptors and the footer fill it */
    fx_fill(v, a, 2, 2);
    assert_int_equal(fx_append(f.s, "k2", v, a, &l2), 0);
    assert_int_equal(l2.off, FX_WBUF);
    fx_fill(v, b, 3, 2);
    assert_int_equal(fx_append(f.s, "k3", v, b, &l3), 0);
    assert_int_equal(l3.off, FX_WBUF + a);
    assert_int_equal(nvs_check(f.s), 0);
    /* buffer 3: a, then b + 1 does not fit */
    fx_fill(v, a, 4, 2);
    assert_int_equal(fx_append(f.s, "k4", v, a, &l4), 0);
    assert_int_equal(l4.off, 2 * FX_WBUF);
    fx_fill(v, b + 1, 5, 2);
    assert_int_equal(fx_append(f.s, "k5", v, b + 1, &l5), 0);
    /* buffer 3 went out holding a alone: 8 blocks */
    assert_int_equal(l5.off, 2 * FX_WBUF + 8 * NVS_BLOCK);
    fx_fill(v, 10, 6, 2);
    assert_int_equal(fx_append(f.s, "k6", v, 10, &l6), 0);
    assert_int_equal(nvs_flush(f.s), 0);
    struct nvs_stats st;
    nvs_get_stats(f.s, &st);
    assert_int_equal(st.objects_written, 6);

    read_footer(f.path, 2 * FX_WBUF, &ft);
    assert_int_equal(ft.magic, NVS_FOOT_MAGIC);
    assert_int_equal(ft.start, FX_WBUF);
    assert_int_equal(ft.len, FX_WBUF);
    assert_int_equal(ft.nrec, 2);
    assert_int_equal(ft.dir_len, 2 * ds);
    assert_int_equal(ft.dir_off, 2 * FX_WBUF - fs - 2 * ds);
    assert_int_equal(ft.crc,
                     nvs_crc32c(0, &ft, offsetof(struct nvs_wbuf_footer, crc)));
    read_footer(f.path, FX_WBUF, &ft);
    assert_int_equal(ft.start, 0);
    assert_int_equal(ft.nrec, 1);

    const struct nvs_loc *l[] = {&l1, &l2, &l3, &l4, &l5, &l6};
    const uint32_t n[] = {max, a, b, a, b + 1, 10};
    for (uint32_t i = 0; i < 6; i++) {
        char key[4] = {'k', (char)('1' + i), 0};
        assert_int_equal(fx_read(f.r, l[i], key, out), 0);
        assert_true(fx_check(out, n[i], i + 1, 2));
    }
    fx_close(&f);
}

/* ---- compaction over damaged buffers ------------------------------------ */

#define DN 48
struct dmap {
    struct nvs_loc loc[DN];
    bool live[DN], asked[DN];
    int moved, wrong;
};

static int
dkey_id(const void *key, uint8_t klen)
{
    char buf[16];
    if (klen < 2 || klen >= sizeof(buf))
        return -1;
    memcpy(buf, key, klen);
    buf[klen] = '\0';
    return atoi(buf + 1);
}

static bool
dkeep(void *arg, const void *key, uint8_t klen, const struct nvs_loc *old)
{
    struct dmap *m = arg;
    int id = dkey_id(key, klen);
    if (id < 0 || id >= DN || memcmp(&m->loc[id], old, sizeof(*old)) != 0) {
        m->wrong++; /* a record the store made up */
        return false;
    }
    m->asked[id] = true;
    return m->live[id];
}

static void
dmoved(void *arg, const void *key, uint8_t klen, const struct nvs_loc *old,
       const struct nvs_loc *new_loc)
{
    struct dmap *m = arg;
    int id = dkey_id(key, klen);
    assert_true(id >= 0 && id < DN);
    assert_true(memcmp(&m->loc[id], old, sizeof(*old)) == 0);
    m->loc[id] = *new_loc;
    m->moved++;
}

/* Append the DN records "d<i>" (10,000-byte values of version ver) to f,
 * all live in m, and flush them to the file. */
static void
dfill(struct fx *f, struct dmap *m, uint32_t ver)
{
    static char v[10000];
    char key[16];

    for (int i = 0; i < DN; i++) {
        snprintf(key, sizeof(key), "d%d", i);
        fx_fill(v, sizeof(v), (uint32_t)i, ver);
        int e = -EAGAIN;
        for (int k = 0; k < 1000 && e == -EAGAIN; k++)
            if ((e = fx_append(f->s, key, v, sizeof(v), &m->loc[i])) == -EAGAIN)
                nvs_flush(f->s); /* the writer is behind */
        assert_int_equal(e, 0);
        m->live[i] = true;
    }
    assert_int_equal(nvs_flush(f->s), 0);
}

static void
flip_at(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    unsigned char c;
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &c, 1, (off_t)off), 1);
    c = (unsigned char)~c;
    assert_int_equal(pwrite(fd, &c, 1, (off_t)off), 1);
    assert_int_equal(fsync(fd), 0);
    close(fd);
}

/* The valid footers of segment 0, in order (at most max). */
static int
seg0_extents(const char *path, struct nvs_wbuf_footer *out, int max)
{
    static char seg[FX_SEG];
    int fd = open(path, O_RDONLY), n = 0;

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, seg, FX_SEG, 0), FX_SEG);
    close(fd);
    for (uint32_t e = NVS_BLOCK; e <= FX_SEG && n < max; e += NVS_BLOCK) {
        struct nvs_wbuf_footer ft;
        memcpy(&ft, seg + e - sizeof(ft), sizeof(ft));
        if (ft.magic == NVS_FOOT_MAGIC &&
            ft.crc == nvs_crc32c(0, &ft, offsetof(struct nvs_wbuf_footer, crc)))
            out[n++] = ft;
    }
    return n;
}

static int
extent_of(const struct nvs_wbuf_footer *x, int n, const struct nvs_loc *loc)
{
    for (int i = 0; i < n; i++)
        if (loc->seg == 0 && loc->off >= x[i].start &&
            loc->off < x[i].start + x[i].len)
            return i;
    return -1;
}

/* Fill segment 0 (and part of 1) with 10000-byte records, drop every second
 * one of segment 0, damage buffer bad1's footer (or directory) and bad2's
 * directory and one byte of a value elsewhere, compact segment 0: keep()
 * must be asked about exactly the intact records of undamaged buffers (and
 * never about a record that was not written), the damaged buffers' records
 * are counted lost, and everything kept reads back exact. */
static void
compact_damaged(int bad1, int bad2, bool footer1, uint64_t budget)
{
    struct fx f;
    static struct dmap m;
    static char out[10000];
    struct nvs_wbuf_footer x[64];
    struct nvs_stats st0, st;
    char key[16];

    memset(&m, 0, sizeof(m));
    lfx_open(&f, 8, 0, 0);
    dfill(&f, &m, 6);
    int n = seg0_extents(f.path, x, 64);
    assert_true(n >= 4);
    if (bad1 < 0)
        bad1 += n;
    int nseg0 = 0, nlost = 0, nmove = 0, badval = -1;
    for (int i = 0; i < DN; i++) {
        if (m.loc[i].seg != 0)
            continue;
        int e = extent_of(x, n, &m.loc[i]);
        assert_true(e >= 0);
        nseg0++;
        if (i % 2 == 0) {
            m.live[i] = false;
            nvs_release(f.s, &m.loc[i]);
        }
        if (e == bad1 || e == bad2)
            nlost++;
        else if (badval < 0 && m.live[i])
            badval = i; /* a live record whose value gets a flipped byte */
        else
            nmove += m.live[i];
    }
    assert_true(badval >= 0);
    flip_at(f.path, m.loc[badval].off + 1234);
    assert_true(nseg0 > 20 && nseg0 < DN);
    /* a footer's CRC byte, or a byte of a directory */
    if (footer1)
        flip_at(f.path, x[bad1].start + x[bad1].len - 2);
    else
        flip_at(f.path, x[bad1].dir_off + 5);
    if (bad2 >= 0)
        flip_at(f.path, x[bad2].dir_off + x[bad2].dir_len - 1);
    nvs_get_stats(f.s, &st0);

    int steps = 0;
    do {
        assert_true(nvs_compact_step(f.s, 0.4, budget, dkeep, dmoved, &m) >= 0);
        nvs_get_stats(f.s, &st);
    } while (st.compact_runs == 0 && ++steps < 50);
    assert_int_equal(st.compact_runs, 1);
    assert_int_equal(m.wrong, 0);
    for (int i = 0; i < DN; i++) {
        int e = extent_of(x, n, &m.loc[i]);
        if (e >= 0) /* still in segment 0: lost, damaged or dropped */
            assert_int_equal(m.asked[i], e != bad1 && e != bad2 && i != badval);
    }
    assert_int_equal(m.moved, nmove);
    assert_int_equal(st.objects_lost - st0.objects_lost, (uint64_t)nlost);
    assert_true(st.read_badcrc - st0.read_badcrc >= 2u + (bad2 >= 0));
    for (int i = 0; i < DN; i++) {
        snprintf(key, sizeof(key), "d%d", i);
        if (m.loc[i].seg == 0) {
            assert_false(nvs_loc_live(f.s, &m.loc[i]));
            assert_int_equal(fx_read(f.r, &m.loc[i], key, out), -ESTALE);
            continue;
        }
        assert_int_equal(fx_read(f.r, &m.loc[i], key, out), 0);
        assert_true(fx_check(out, sizeof(out), (uint32_t)i, 6));
    }
    fx_close(&f);
}

/* Buffer 2's footer and buffer 3's directory damaged; one buffer a step. */
static void
test_compaction_skips_damaged(void **state)
{
    (void)state;
    compact_damaged(1, 2, true, 1);
}

/* The first buffer's directory damaged, the whole segment in one step. */
static void
test_compaction_damaged_first(void **state)
{
    (void)state;
    compact_damaged(0, -1, false, 1u << 20);
}

/* The last buffer's footer damaged: nothing after it says where it ends. */
static void
test_compaction_damaged_tail(void **state)
{
    (void)state;
    compact_damaged(-1, -1, true, 1);
}

/* The flash falls behind while compaction moves records (two write buffers,
 * a stalled writer): steps stop at the record whose append was refused and
 * resume there, so every live record moves exactly once (keep() never sees
 * a record it already moved) and reads back exact. */
static void
test_compaction_resumes_when_behind(void **state)
{
    struct fx f;
    static struct dmap m;
    static char out[10000];
    struct nvs_stats st;
    char key[16];

    (void)state;
    memset(&m, 0, sizeof(m));
    lfx_open_nwbuf(&f, 8, 0, 0, 2);
    dfill(&f, &m, 8);
    int nlive = 0;
    for (int i = 0; i < DN; i++)
        if (m.loc[i].seg == 0) {
            if (i % 4 == 0) {
                m.live[i] = false;
                nvs_release(f.s, &m.loc[i]);
            }
            nlive += m.live[i];
        }
    /* the writer held: the live records (~19 of 10,000 bytes) do not fit
     * the two 64 KiB buffers, so the first step must stop at a refused
     * append, whatever the machine's speed */
    nvs_set_faults(f.s, &(struct nvs_faults){.write_delay_ms = FX_HOLD_MS});
    assert_true(nvs_compact_step(f.s, 0.2, 1 << 20, dkeep, dmoved, &m) >= 0);
    nvs_get_stats(f.s, &st);
    assert_true(st.append_busy > 0);
    assert_int_equal(st.compact_runs, 0);
    assert_true(m.moved > 0 && m.moved < nlive);
    /* released: further steps resume where it stopped (bounded wait) */
    nvs_set_faults(f.s, &(struct nvs_faults){0});
    uint64_t limit = clock_nsec() + 60ull * 1000000000;
    do {
        assert_true(nvs_compact_step(f.s, 0.2, 1 << 20, dkeep, dmoved, &m) >=
                    0);
        nvs_get_stats(f.s, &st);
        if (clock_nsec() > limit)
            fail_msg("compaction not done 60 s after the writer resumed");
        struct timespec ts = {.tv_nsec = 1000000L};
        nanosleep(&ts, NULL);
    } while (st.compact_runs == 0);
    assert_int_equal(st.compact_runs, 1);
    assert_int_equal(m.wrong, 0);
    assert_int_equal(m.moved, nlive);
    assert_int_equal(st.objects_lost, 0);
    assert_int_equal(nvs_flush(f.s), 0);
    for (int i = 0; i < DN; i++) {
        snprintf(key, sizeof(key), "d%d", i);
        if (!m.live[i])
            continue;
        assert_int_equal(fx_read(f.r, &m.loc[i], key, out), 0);
        assert_true(fx_check(out, sizeof(out), (uint32_t)i, 8));
    }
    fx_close(&f);
}

#define LAYOUT_TESTS                                                           \
    cmocka_unit_test(test_4k_values_one_block),                                \
        cmocka_unit_test(test_mixed_sizes),                                    \
        cmocka_unit_test(test_value_placement),                                \
        cmocka_unit_test(test_full_buffer_boundary),                           \
        cmocka_unit_test(test_compaction_skips_damaged),                       \
        cmocka_unit_test(test_compaction_damaged_first),                       \
        cmocka_unit_test(test_compaction_damaged_tail),                        \
        cmocka_unit_test(test_compaction_resumes_when_behind)

int
main(void)
{
    const struct CMUnitTest tests[] = {LAYOUT_TESTS};
    int rc;

    no_uring = false;
    rc = cmocka_run_group_tests_name("nvs layout io_uring", tests, NULL, NULL);
    no_uring = true;
    rc |= cmocka_run_group_tests_name("nvs layout fallback", tests, NULL, NULL);
    return rc;
}

/*
 * Unit tests for tier/pm.c: the PMEM write helpers store exactly what they
 * are given (any alignment, small and large sizes), the write hook sees each
 * write's address and length, and (debug builds) a PMEM write while a lock
 * is held aborts.
 *
 * The "PMEM" here is a heap buffer: the helpers do not care where the
 * memory comes from, and tests/unit/test_region.c covers the mapping.
 */
#include "tier/pm.h"

#include "src/base/clock.h"
#include "src/base/lock.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define BUF_SIZE (64 * 1024)
#define MAX_RECS 16

struct bufs {
    uint8_t *pm;  /* stands for PMEM */
    uint8_t *src; /* pattern source */
    uint8_t *ref; /* what pm must hold */
};

struct hook_rec {
    const void *dst;
    size_t n;
};

static struct hook_rec recs[MAX_RECS];
static int nrecs;

static void
record_hook(const void *dst, size_t n)
{
    if (nrecs < MAX_RECS)
        recs[nrecs] = (struct hook_rec){dst, n};
    nrecs++;
}

static int
setup(void **state)
{
    struct bufs *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return -1;
    b->pm = aligned_alloc(64, BUF_SIZE);
    b->src = aligned_alloc(64, BUF_SIZE);
    b->ref = aligned_alloc(64, BUF_SIZE);
    if (b->pm == NULL || b->src == NULL || b->ref == NULL)
        return -1;
    for (size_t i = 0; i < BUF_SIZE; i++)
        b->src[i] = (uint8_t)(i * 131 + 7 + (i >> 8));
    memset(b->pm, 0xEE, BUF_SIZE);
    memset(b->ref, 0xEE, BUF_SIZE);
    nrecs = 0;
    pm_set_write_hook(NULL);
    *state = b;
    return 0;
}

static int
teardown(void **state)
{
    struct bufs *b = *state;

    pm_set_write_hook(NULL);
    free(b->pm);
    free(b->src);
    free(b->ref);
    free(b);
    return 0;
}

static const size_t sizes[] = {0,   1,   3,    7,    8,    15,   16,
                               31,  63,  64,   65,   127,  255,  256,
                               257, 511, 1000, 4095, 4096, 4097, 40000};
static const size_t dst_offs[] = {0, 1, 3, 8, 13, 64, 4093};
static const size_t src_offs[] = {0, 5, 64};

static void
test_copy_lands_exactly(void **state)
{
    struct bufs *b = *state;

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (size_t d = 0; d < sizeof(dst_offs) / sizeof(dst_offs[0]); d++) {
            for (size_t s = 0; s < sizeof(src_offs) / sizeof(src_offs[0]);
                 s++) {
                size_t n = sizes[i], doff = dst_offs[d], soff = src_offs[s];

                pm_copy(b->pm + doff, b->src + soff, n);
                memcpy(b->ref + doff, b->src + soff, n);
                /* The whole buffer: nothing written outside the range. */
                assert_memory_equal(b->pm, b->ref, BUF_SIZE);
            }
        }
        /* Reset so the next size does not copy over equal bytes. */
        memset(b->pm, 0xEE ^ (int)i, BUF_SIZE);
        memset(b->ref, 0xEE ^ (int)i, BUF_SIZE);
    }
}

static void
test_set_lands_exactly(void **state)
{
    struct bufs *b = *state;
    const int values[] = {0, 0xA5, 0x1FF /* only the low byte counts */};

    for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            for (size_t d = 0; d < sizeof(dst_offs) / sizeof(dst_offs[0]);
                 d++) {
                size_t n = sizes[i], doff = dst_offs[d] + 7 * i;

                pm_set(b->pm + doff, values[v], n);
                memset(b->ref + doff, values[v], n);
                assert_memory_equal(b->pm, b->ref, BUF_SIZE);
            }
        }
    }
}

static void
test_stores_land_exactly(void **state)
{
    struct bufs *b = *state;
    const uint64_t v64[] = {0, 1, 0x0123456789ABCDEFull, UINT64_MAX};

    for (size_t off = 0; off < 256; off += 8) {
        for (size_t i = 0; i < sizeof(v64) / sizeof(v64[0]); i++) {
            uint32_t v32 = (uint32_t)(v64[i] >> 7) ^ (uint32_t)off;

            pm_store64((uint64_t *)(void *)(b->pm + off), v64[i]);
            memcpy(b->ref + off, &v64[i], sizeof(v64[i]));
            assert_memory_equal(b->pm, b->ref, BUF_SIZE);

            pm_store32((uint32_t *)(void *)(b->pm + 1024 + off + 4), v32);
            memcpy(b->ref + 1024 + off + 4, &v32, sizeof(v32));
            assert_memory_equal(b->pm, b->ref, BUF_SIZE);
        }
    }
    /* the 4-byte compare-and-swap: only its own 4 bytes, only on a match
     * (the 4 bytes after it are an item's sequence half, never touched) */
    uint32_t *w = (uint32_t *)(void *)(b->pm + 2048);
    pm_store64((uint64_t *)(void *)w, 0x12345678ffffffffull);
    memcpy(b->ref + 2048, w, 8);
    assert_false(pm_cas32(w, 0xfffffffeu, 5));
    assert_memory_equal(b->pm, b->ref, BUF_SIZE);
    assert_true(pm_cas32(w, 0xffffffffu, 5));
    uint64_t want = 0x1234567800000005ull;
    memcpy(b->ref + 2048, &want, sizeof(want));
    assert_memory_equal(b->pm, b->ref, BUF_SIZE);

    /* the 2-byte store and compare-and-swap (a packed item's commit):
     * only their own 2 bytes, the swap only on a match */
    for (size_t off = 0; off < 16; off += 2) {
        uint16_t v16 = (uint16_t)(0xa5c3u ^ off);
        pm_store16((uint16_t *)(void *)(b->pm + 3072 + off), v16);
        memcpy(b->ref + 3072 + off, &v16, sizeof(v16));
        assert_memory_equal(b->pm, b->ref, BUF_SIZE);
    }
    uint16_t *h = (uint16_t *)(void *)(b->pm + 3072 + 6);
    pm_store16(h, 2);
    memcpy(b->ref + 3072 + 6, h, 2);
    assert_false(pm_cas16(h, 1, 7));
    assert_memory_equal(b->pm, b->ref, BUF_SIZE);
    assert_true(pm_cas16(h, 2, 0xbeef));
    uint16_t want16 = 0xbeef;
    memcpy(b->ref + 3072 + 6, &want16, sizeof(want16));
    assert_memory_equal(b->pm, b->ref, BUF_SIZE);
}

static void
test_read_copies_out(void **state)
{
    struct bufs *b = *state;

    memcpy(b->pm, b->src, BUF_SIZE);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i], off = dst_offs[i % 7];

        memset(b->ref, 0x11, BUF_SIZE);
        pm_read(b->ref + 3, b->pm + off, n);
        assert_memory_equal(b->ref + 3, b->src + off, n);
        assert_int_equal(b->ref[2], 0x11);
        assert_int_equal(b->ref[3 + n], 0x11);
    }
}

static void
test_hook_sees_each_write(void **state)
{
    struct bufs *b = *state;
    uint8_t out[64];

    pm_set_write_hook(record_hook);
    pm_copy(b->pm + 3, b->src, 300);
    pm_set(b->pm + 1000, 0x5A, 17);
    pm_store32((uint32_t *)(void *)(b->pm + 2048), 7);
    pm_store64((uint64_t *)(void *)(b->pm + 4096), 9);
    pm_copy(b->pm + 5000, b->src, 1); /* tiny */
    pm_read(out, b->pm, sizeof(out)); /* a read is not a write */
    pm_fence();                       /* nor is a fence */

    assert_int_equal(nrecs, 5);
    assert_ptr_equal(recs[0].dst, b->pm + 3);
    assert_int_equal(recs[0].n, 300);
    assert_ptr_equal(recs[1].dst, b->pm + 1000);
    assert_int_equal(recs[1].n, 17);
    assert_ptr_equal(recs[2].dst, b->pm + 2048);
    assert_int_equal(recs[2].n, 4);
    assert_ptr_equal(recs[3].dst, b->pm + 4096);
    assert_int_equal(recs[3].n, 8);
    assert_ptr_equal(recs[4].dst, b->pm + 5000);
    assert_int_equal(recs[4].n, 1);

    pm_set_write_hook(NULL);
    pm_copy(b->pm, b->src, 64);
    pm_store64((uint64_t *)(void *)b->pm, 1);
    assert_int_equal(nrecs, 5);
}

#ifndef NDEBUG
enum write_kind { W_COPY, W_SET, W_STORE32, W_STORE64, W_NKINDS };

static void
write_one(enum write_kind kind, uint8_t *pm, const uint8_t *src)
{
    switch (kind) {
    case W_COPY:
        pm_copy(pm, src, 512);
        break;
    case W_SET:
        pm_set(pm, 0, 8);
        break;
    case W_STORE32:
        pm_store32((uint32_t *)(void *)pm, 1);
        break;
    default:
        pm_store64((uint64_t *)(void *)pm, 1);
        break;
    }
}

/* Child: take a lock, write PMEM; the helper must abort before _exit. */
static void
child_write_under_lock(enum write_kind kind, uint8_t *pm, const uint8_t *src)
{
    struct rlimit no_core = {0, 0};
    struct lock l;
    int devnull = open("/dev/null", O_WRONLY);

    setrlimit(RLIMIT_CORE, &no_core);
    if (devnull >= 0)
        dup2(devnull, STDERR_FILENO); /* the expected assert message */
    if (lock_init(&l, LOCK_RANK_POOL) != 0)
        _exit(2);
    lock_acquire(&l);
    write_one(kind, pm, src);
    _exit(0);
}

static void
test_write_under_lock_aborts(void **state)
{
    struct bufs *b = *state;

    for (int kind = 0; kind < W_NKINDS; kind++) {
        int status = 0;
        pid_t pid = fork();

        assert_true(pid >= 0);
        if (pid == 0)
            child_write_under_lock(kind, b->pm, b->src);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
            fail_msg("write kind %d under a lock: status 0x%x, expected "
                     "SIGABRT",
                     kind, status);
    }
}

static void
test_write_after_unlock_and_read_under_lock_pass(void **state)
{
    struct bufs *b = *state;
    struct lock l;
    uint8_t out[16];

    assert_int_equal(lock_init(&l, LOCK_RANK_POOL), 0);
    lock_acquire(&l);
    pm_read(out, b->pm, sizeof(out)); /* reads are allowed under a lock */
    lock_release(&l);
    lock_fini(&l);
    for (int kind = 0; kind < W_NKINDS; kind++)
        write_one(kind, b->pm, b->src);
    assert_int_equal(b->pm[0], 1);
}
#else
static void
test_write_under_lock_aborts(void **state)
{
    (void)state;
    print_message("skipped: the no-lock check exists in debug builds only\n");
    skip();
}

static void
test_write_after_unlock_and_read_under_lock_pass(void **state)
{
    test_write_under_lock_aborts(state);
}
#endif

/* Latency emulation: each helper waits at least lines x ns. Only a lower
 * bound is asserted (a loaded machine may wait longer). */
static void
test_latency_per_line(void **state)
{
    struct bufs *b = *state;
    uint8_t out[4096];

    assert_int_equal(pm_lines(b->pm, 0), 0);
    assert_int_equal(pm_lines(b->pm, 1), 1);
    assert_int_equal(pm_lines(b->pm, 64), 1);
    assert_int_equal(pm_lines(b->pm + 63, 2), 2);
    assert_int_equal(pm_lines(b->pm + 1, 4096), 65);

    pm_set_latency(2000, 3000); /* 2 us per line written, 3 us read */
    uint64_t t0 = clock_nsec();
    pm_copy(b->pm, b->src, 4096); /* 64 lines */
    uint64_t t1 = clock_nsec();
    pm_set(b->pm + 8192, 0, 640); /* 10 lines */
    uint64_t t2 = clock_nsec();
    pm_store64((uint64_t *)b->pm, 1); /* 1 line */
    uint64_t t3 = clock_nsec();
    pm_read(out, b->pm, sizeof(out)); /* 64 lines */
    uint64_t t4 = clock_nsec();
    pm_note_read(b->pm + 64, 640); /* 10 lines, read in place */
    uint64_t t5 = clock_nsec();
    pm_set_latency(0, 0);

    assert_true(t1 - t0 >= 64 * 2000);
    assert_true(t2 - t1 >= 10 * 2000);
    assert_true(t3 - t2 >= 2000);
    assert_true(t4 - t3 >= 64 * 3000);
    assert_true(t5 - t4 >= 10 * 3000);
    /* the waits do not change what is stored */
    assert_memory_equal(out, b->pm, sizeof(out));
    assert_int_equal(b->pm[8192], 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copy_lands_exactly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_set_lands_exactly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stores_land_exactly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_read_copies_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_latency_per_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hook_sees_each_write, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_write_under_lock_aborts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_write_after_unlock_and_read_under_lock_pass, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

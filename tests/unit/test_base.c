/*
 * Unit tests for src/base: per-thread errors, logging, clock, hash, locks.
 */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/hash.h"
#include "src/base/hugemap.h"
#include "src/base/lock.h"
#include "src/base/log.h"

/* Seeded xorshift so failures reproduce; the seed is printed on failure by
 * the tests that use it. */
#define TEST_SEED 0x2545f4914f6cdd1dull

static uint64_t
rng_next(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static int
setup(void **state)
{
    (void)state;
    err_clear();
    clock_set_fake(0);
    log_set_level(LOG_WARN);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    err_clear();
    clock_set_fake(0);
    log_set_level(LOG_WARN);
    return 0;
}

/* ---- err ---------------------------------------------------------------- */

static void
test_err_basic(void **state)
{
    (void)state;
    assert_string_equal(err_msg(), "");
    err_set("cannot open %s: %d", "/dev/shm/x", -2);
    assert_string_equal(err_msg(), "cannot open /dev/shm/x: -2");
    err_set("second");
    assert_string_equal(err_msg(), "second");
    err_clear();
    assert_string_equal(err_msg(), "");
}

static void
test_err_truncation(void **state)
{
    char big[600];
    const char *m;
    size_t i;

    (void)state;
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    big[0] = 'S';

    err_set("%s", big);
    m = err_msg();
    assert_int_equal(strlen(m), 255);
    assert_int_equal(m[0], 'S');
    for (i = 1; i < 255; i++)
        assert_int_equal(m[i], 'a');

    /* Exactly 255 bytes fit unchanged; 256 lose the last one. */
    big[255] = '\0';
    err_set("%s", big);
    assert_string_equal(err_msg(), big);
    big[255] = 'Z';
    big[256] = '\0';
    err_set("%s", big);
    assert_int_equal(strlen(err_msg()), 255);
    assert_null(strchr(err_msg(), 'Z'));
}

struct err_thread_arg {
    pthread_barrier_t *barrier;
    const char *mine;
    char initial[256];
    char seen[256];
};

static void *
err_thread(void *p)
{
    struct err_thread_arg *a = p;

    snprintf(a->initial, sizeof(a->initial), "%s", err_msg());
    err_set("%s", a->mine);
    /* Both threads have set their message before either reads it back. */
    pthread_barrier_wait(a->barrier);
    snprintf(a->seen, sizeof(a->seen), "%s", err_msg());
    pthread_barrier_wait(a->barrier);
    return NULL;
}

static void
test_err_per_thread(void **state)
{
    pthread_barrier_t barrier;
    struct err_thread_arg a = {.barrier = &barrier, .mine = "thread A"};
    struct err_thread_arg b = {.barrier = &barrier, .mine = "thread B"};
    pthread_t ta, tb;

    (void)state;
    err_set("main thread message");
    assert_int_equal(pthread_barrier_init(&barrier, NULL, 2), 0);
    assert_int_equal(pthread_create(&ta, NULL, err_thread, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, err_thread, &b), 0);
    assert_int_equal(pthread_join(ta, NULL), 0);
    assert_int_equal(pthread_join(tb, NULL), 0);
    pthread_barrier_destroy(&barrier);

    /* A new thread starts with no message, even though main has one. */
    assert_string_equal(a.initial, "");
    assert_string_equal(b.initial, "");
    assert_string_equal(a.seen, "thread A");
    assert_string_equal(b.seen, "thread B");
    assert_string_equal(err_msg(), "main thread message");
}

/* ---- log ---------------------------------------------------------------- */

/* Run fn with stderr sent to a temporary file; returns what was written
 * (at most cap - 1 bytes). */
static void
capture_stderr(void (*fn)(void), char *out, size_t cap)
{
    FILE *tmp = tmpfile();
    int saved;
    size_t n;

    assert_non_null(tmp);
    fflush(stderr);
    saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(tmp), STDERR_FILENO) >= 0);
    fn();
    fflush(stderr);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    rewind(tmp);
    n = fread(out, 1, cap - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
}

static void
log_some(void)
{
    log_set_level(LOG_WARN);
    log_error("first %d", 1);
    log_warn("second %s", "two");
    log_info("hidden info");
    log_debug("hidden debug");
    log_set_level(LOG_DEBUG);
    log_debug("third");
}

static void
log_long(void)
{
    char big[3000];

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    log_error("%s", big);
}

static void
test_log(void **state)
{
    static char out[8192];
    char *nl;

    (void)state;
    log_set_level(LOG_INFO);
    assert_int_equal(log_get_level(), LOG_INFO);
    log_set_level(7); /* -vvvvvvv */
    assert_int_equal(log_get_level(), LOG_DEBUG);
    log_set_level(-1);
    assert_int_equal(log_get_level(), LOG_ERROR);

    capture_stderr(log_some, out, sizeof(out));
    assert_non_null(strstr(out, "first 1"));
    assert_non_null(strstr(out, "second two"));
    assert_non_null(strstr(out, "third"));
    assert_null(strstr(out, "hidden"));
    /* One line per message. */
    assert_non_null(strstr(out, "first 1\n"));
    assert_non_null(strstr(out, "second two\n"));

    /* A long message is cut, marked, and still one line. */
    capture_stderr(log_long, out, sizeof(out));
    nl = strchr(out, '\n');
    assert_non_null(nl);
    assert_int_equal(nl[1], '\0');
    assert_true(nl - out > 3 && nl - out < 1100);
    assert_memory_equal(nl - 3, "...", 3);

    /* errno survives logging. */
    log_set_level(LOG_ERROR);
    errno = EAGAIN;
    log_info("filtered");
    assert_int_equal(errno, EAGAIN);
}

/* ---- clock -------------------------------------------------------------- */

static void
test_clock_fake(void **state)
{
    (void)state;
    clock_set_fake(1000000);
    assert_int_equal(clock_now(), 1000000);
    assert_int_equal(clock_now(), 1000000); /* frozen */
    clock_advance(5);
    assert_int_equal(clock_now(), 1000005);
    clock_advance(0);
    assert_int_equal(clock_now(), 1000005);
    clock_set_fake(42);
    assert_int_equal(clock_now(), 42);
    /* Saturates instead of wrapping to 0 (which would mean "real"). */
    clock_advance(UINT32_MAX);
    assert_int_equal(clock_now(), UINT32_MAX);
    clock_set_fake(0);
    assert_true(clock_now() > 1000000000u);
}

static void
test_clock_real(void **state)
{
    uint32_t now;
    time_t t;
    int64_t diff;

    (void)state;
    /* No fake: advance has no effect, the clock follows real time: it
     * reads between the wall clock before and after (the coarse clock may
     * lag a tick behind time(), hence the second of slack below). */
    clock_advance(100000);
    t = time(NULL);
    now = clock_now();
    diff = (int64_t)time(NULL) - (int64_t)t; /* however long we were away */
    assert_true((int64_t)now >= (int64_t)t - 1);
    assert_true((int64_t)now <= (int64_t)t + diff);
    /* the second the coarse clock reports (the kernel's wall second) */
    struct timespec a, b;
    clock_gettime(CLOCK_REALTIME_COARSE, &a);
    now = clock_now();
    clock_gettime(CLOCK_REALTIME_COARSE, &b);
    assert_true((int64_t)now >= (int64_t)a.tv_sec);
    assert_true((int64_t)now <= (int64_t)b.tv_sec);
}

static void
test_clock_nsec(void **state)
{
    struct timespec ms2 = {.tv_sec = 0, .tv_nsec = 2000000};
    uint64_t prev, cur, start;
    int i;

    (void)state;
    prev = clock_nsec();
    for (i = 0; i < 10000; i++) {
        cur = clock_nsec();
        assert_true(cur >= prev);
        prev = cur;
    }
    /* Not a speed check: the clock must move at least as far as we slept. */
    start = clock_nsec();
    nanosleep(&ms2, NULL);
    assert_true(clock_nsec() - start >= 2000000);
    /* The fake wall clock does not affect the monotonic one. */
    clock_set_fake(5);
    assert_true(clock_nsec() >= start);
    clock_set_fake(0);
}

/* ---- hash --------------------------------------------------------------- */

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void
test_hash_seeds_and_keys(void **state)
{
    static const char *const keys[] = {"",   "a",   "b",   "ab",   "ba",
                                       "aa", "a\0", "key", "key1", "kez"};
    static const size_t lens[] = {0, 1, 1, 2, 2, 2, 2, 3, 4, 3};
    uint64_t h[ARRAY_SIZE(keys)];
    uint64_t hs[256];
    size_t i, j;
    char buf[8] = {0};

    (void)state;
    /* Deterministic. */
    assert_true(hash_bytes("hello", 5, 7) == hash_bytes("hello", 5, 7));
    /* Length 0 reads nothing, so a NULL pointer is fine. */
    assert_true(hash_bytes(NULL, 0, 9) == hash_bytes(buf, 0, 9));

    for (i = 0; i < ARRAY_SIZE(keys); i++)
        h[i] = hash_bytes(keys[i], lens[i], 1);
    for (i = 0; i < ARRAY_SIZE(keys); i++)
        for (j = i + 1; j < ARRAY_SIZE(keys); j++)
            assert_true(h[i] != h[j]);

    /* A key with trailing zero bytes differs from the shorter key. */
    for (i = 0; i < sizeof(buf); i++)
        assert_true(hash_bytes(buf, i, 3) != hash_bytes(buf, i + 1, 3));

    /* Different seeds give different hashes (for empty and short keys). */
    for (i = 0; i < ARRAY_SIZE(hs); i++)
        hs[i] = hash_bytes("same key", 8, i * 0x10001);
    qsort(hs, ARRAY_SIZE(hs), sizeof(hs[0]), cmp_u64);
    for (i = 1; i < ARRAY_SIZE(hs); i++)
        assert_true(hs[i] != hs[i - 1]);
    assert_true(hash_bytes("", 0, 1) != hash_bytes("", 0, 2));

    /* Known answer: the values of every length 0..64 of one buffer, as
     * the hash gave them before it was made inline (the index's buckets
     * and tags of a saved index depend on them). */
    unsigned char kat[64];
    uint64_t acc = 0;
    for (i = 0; i < sizeof(kat); i++)
        kat[i] = (unsigned char)(i * 37 + 11);
    for (i = 0; i <= sizeof(kat); i++)
        acc = acc * 31 + hash_bytes(kat, i, 0x5eed);
    assert_true(acc == 0xbef91526da203adfull);
    for (i = 0; i <= sizeof(kat); i++)
        assert_true(hash_bytes_inline(kat, i, 0x5eed) ==
                    hash_bytes(kat, i, 0x5eed));
    assert_true(hash_bytes("x", 1, 0) != hash_bytes("x", 1, 1ull << 63));
}

/* Every bit of every byte, at every length up to 64, changes the hash. */
static void
test_hash_every_byte_counts(void **state)
{
    unsigned char buf[64], alt[64];
    uint64_t rs = TEST_SEED;
    size_t len, i;
    unsigned bit;

    (void)state;
    for (i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)rng_next(&rs);
    for (len = 1; len <= sizeof(buf); len++) {
        uint64_t h = hash_bytes(buf, len, 11);

        for (i = 0; i < len; i++) {
            for (bit = 0; bit < 8; bit++) {
                memcpy(alt, buf, len);
                alt[i] ^= (unsigned char)(1u << bit);
                if (hash_bytes(alt, len, 11) == h)
                    fail_msg("len %zu byte %zu bit %u does not change the "
                             "hash",
                             len, i, bit);
            }
        }
    }
}

/* Keys placed right before and right after an inaccessible page: reading a
 * single byte outside [p, p + len) faults, in every build (ASan also checks
 * the exact-size heap copy). Also checks unaligned placement. */
static void
test_hash_bounds(void **state)
{
    long pg = sysconf(_SC_PAGESIZE);
    unsigned char *map, *mid, *heap;
    unsigned char src[64];
    uint64_t rs = TEST_SEED ^ 1;
    size_t len, i, off;

    (void)state;
    assert_true(pg > 0);
    map = mmap(NULL, 3 * (size_t)pg, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    mid = map + pg;
    assert_int_equal(mprotect(map, (size_t)pg, PROT_NONE), 0);
    assert_int_equal(mprotect(mid + pg, (size_t)pg, PROT_NONE), 0);

    for (i = 0; i < sizeof(src); i++)
        src[i] = (unsigned char)rng_next(&rs);

    for (len = 0; len <= sizeof(src); len++) {
        uint64_t ref = hash_bytes(src, len, 5);
        unsigned char *end = mid + pg - len;

        memcpy(end, src, len);
        assert_true(hash_bytes(end, len, 5) == ref);
        memcpy(mid, src, len);
        assert_true(hash_bytes(mid, len, 5) == ref);
        for (off = 1; off < 8; off++) {
            memcpy(mid + off, src, len);
            assert_true(hash_bytes(mid + off, len, 5) == ref);
        }

        heap = malloc(len ? len : 1);
        assert_non_null(heap);
        memcpy(heap, src, len);
        assert_true(hash_bytes(heap, len, 5) == ref);
        free(heap);
    }
    munmap(map, 3 * (size_t)pg);
}

#define DIST_KEYS 100000
#define DIST_BUCKETS 1024

/* Chi-square of the bucket counts against a uniform spread. With 1023
 * degrees of freedom the statistic has mean 1023 and standard deviation
 * about 45; a good hash stays far below the bound, a poor one (identity,
 * sums, missing final mix) lands in the thousands or more. */
static double
chi_square(const unsigned *count, unsigned nbuckets, unsigned nkeys)
{
    double expect = (double)nkeys / nbuckets, chi = 0;
    unsigned i;

    for (i = 0; i < nbuckets; i++) {
        double d = count[i] - expect;

        chi += d * d / expect;
    }
    return chi;
}

static void
check_distribution(const char *what, uint64_t *h)
{
    static unsigned low[DIST_BUCKETS], high[DIST_BUCKETS];
    double bound = 1023 + 6 * 45.2, cl, ch;
    unsigned i;

    memset(low, 0, sizeof(low));
    memset(high, 0, sizeof(high));
    for (i = 0; i < DIST_KEYS; i++) {
        low[h[i] & (DIST_BUCKETS - 1)]++; /* bucket index */
        high[h[i] >> 54]++;               /* tag bits */
    }
    cl = chi_square(low, DIST_BUCKETS, DIST_KEYS);
    ch = chi_square(high, DIST_BUCKETS, DIST_KEYS);
    print_message("%s: chi-square low bits %.0f, high bits %.0f (bound "
                  "%.0f)\n",
                  what, cl, ch, bound);
    assert_true(cl < bound);
    assert_true(ch < bound);

    /* No full 64-bit collision among the keys. */
    qsort(h, DIST_KEYS, sizeof(h[0]), cmp_u64);
    for (i = 1; i < DIST_KEYS; i++)
        assert_true(h[i] != h[i - 1]);
}

static void
test_hash_distribution(void **state)
{
    uint64_t *h = malloc(DIST_KEYS * sizeof(*h));
    char key[32];
    unsigned i;

    (void)state;
    assert_non_null(h);

    for (i = 0; i < DIST_KEYS; i++) {
        int n = snprintf(key, sizeof(key), "key:%u", i);

        h[i] = hash_bytes(key, (size_t)n, 0);
    }
    check_distribution("\"key:N\" strings", h);

    for (i = 0; i < DIST_KEYS; i++) {
        uint64_t k = i;

        h[i] = hash_bytes(&k, sizeof(k), 0);
    }
    check_distribution("8-byte integers", h);

    for (i = 0; i < DIST_KEYS; i++) {
        /* long common prefix, counter in the last word */
        int n = snprintf(key, sizeof(key), "user:session:%012u", i);

        h[i] = hash_bytes(key, (size_t)n, 0x5eed);
    }
    check_distribution("long-prefix strings", h);
    free(h);
}

/* Flipping one input bit flips each output bit about half of the time. */
static void
test_hash_avalanche(void **state)
{
    static const size_t lens[] = {3, 8, 16, 40};
    enum { TRIALS = 2000 };
    static unsigned flips[40 * 8][64];
    unsigned char key[40], alt[40];
    uint64_t rs = TEST_SEED ^ 2;
    size_t li, i, bit;
    unsigned t, o;

    (void)state;
    for (li = 0; li < ARRAY_SIZE(lens); li++) {
        size_t len = lens[li];

        memset(flips, 0, sizeof(flips));
        for (t = 0; t < TRIALS; t++) {
            uint64_t h;

            for (i = 0; i < len; i++)
                key[i] = (unsigned char)rng_next(&rs);
            h = hash_bytes(key, len, 99);
            for (bit = 0; bit < len * 8; bit++) {
                uint64_t d;

                memcpy(alt, key, len);
                alt[bit / 8] ^= (unsigned char)(1u << (bit % 8));
                d = h ^ hash_bytes(alt, len, 99);
                for (o = 0; o < 64; o++)
                    flips[bit][o] += (unsigned)(d >> o) & 1;
            }
        }
        /* 0.5 +- 0.1 is nine standard deviations at 2000 trials. */
        for (bit = 0; bit < len * 8; bit++)
            for (o = 0; o < 64; o++)
                if (flips[bit][o] < TRIALS * 4 / 10 ||
                    flips[bit][o] > TRIALS * 6 / 10)
                    fail_msg("len %zu: input bit %zu flips output bit %u "
                             "%u/%u times (seed %#llx)",
                             len, bit, o, flips[bit][o], (unsigned)TRIALS,
                             (unsigned long long)TEST_SEED);
    }
}

/* ---- locks -------------------------------------------------------------- */

#ifndef NDEBUG
#define EXPECT_DEPTH(n) (n)
#else
#define EXPECT_DEPTH(n) 0
#endif

static void
test_lock_init(void **state)
{
    struct lock l;

    (void)state;
    assert_int_equal(lock_init(&l, 0), -EINVAL);
    assert_int_equal(lock_init(&l, -3), -EINVAL);
    assert_int_equal(lock_init(&l, LOCK_RANK_POOL), 0);
    lock_acquire(&l);
    lock_release(&l);
    lock_fini(&l);
}

static void
test_lock_depth(void **state)
{
    struct lock cls, pool, nvs;
    struct spin bucket = {0};

    (void)state;
    assert_int_equal(lock_init(&cls, LOCK_RANK_CLASS), 0);
    assert_int_equal(lock_init(&pool, LOCK_RANK_POOL), 0);
    assert_int_equal(lock_init(&nvs, LOCK_RANK_NVS), 0);

    assert_int_equal(lock_held_depth(), 0);
    spin_acquire(&bucket, LOCK_RANK_BUCKET);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(1));
    lock_acquire(&cls);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(2));
    lock_acquire(&pool);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(3));
    lock_acquire(&nvs);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(4));

    /* Release in any order. */
    spin_release(&bucket, LOCK_RANK_BUCKET);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(3));
    lock_release(&pool);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(2));
    lock_release(&nvs);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(1));
    /* Only the class lock is held now: the pool may be taken again. */
    lock_acquire(&pool);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(2));
    lock_release(&pool);
    lock_release(&cls);
    assert_int_equal(lock_held_depth(), 0);

    /* Nothing held: any rank may be taken first. */
    lock_acquire(&pool);
    lock_release(&pool);
    spin_acquire(&bucket, LOCK_RANK_BUCKET);
    spin_release(&bucket, LOCK_RANK_BUCKET);
    assert_int_equal(lock_held_depth(), 0);

    lock_fini(&cls);
    lock_fini(&pool);
    lock_fini(&nvs);
}

struct depth_arg {
    struct lock *cls;
    int depth_seen;
    int depth_after;
};

static void *
depth_thread(void *p)
{
    struct depth_arg *a = p;

    a->depth_seen = lock_held_depth();
    /* Main holds a higher rank; this thread's ranks are its own. */
    lock_acquire(a->cls);
    a->depth_after = lock_held_depth();
    lock_release(a->cls);
    return NULL;
}

static void
test_lock_depth_per_thread(void **state)
{
    struct lock cls, pool;
    struct depth_arg a;
    pthread_t t;

    (void)state;
    assert_int_equal(lock_init(&cls, LOCK_RANK_CLASS), 0);
    assert_int_equal(lock_init(&pool, LOCK_RANK_POOL), 0);
    a.cls = &cls;
    a.depth_seen = -1;
    a.depth_after = -1;

    lock_acquire(&pool);
    assert_int_equal(pthread_create(&t, NULL, depth_thread, &a), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(lock_held_depth(), EXPECT_DEPTH(1));
    lock_release(&pool);

    assert_int_equal(a.depth_seen, 0);
    assert_int_equal(a.depth_after, EXPECT_DEPTH(1));
    lock_fini(&cls);
    lock_fini(&pool);
}

#ifndef NDEBUG
static void
bad_order_mutex(void)
{
    struct lock cls, nvs;

    lock_init(&cls, LOCK_RANK_CLASS);
    lock_init(&nvs, LOCK_RANK_NVS);
    lock_acquire(&nvs);
    lock_acquire(&cls); /* 30 after 50: must abort */
}

static void
bad_same_rank_spin(void)
{
    struct spin a = {0}, b = {0};

    spin_acquire(&a, LOCK_RANK_BUCKET);
    spin_acquire(&b, LOCK_RANK_BUCKET); /* equal rank: must abort */
}

static void
bad_spin_after_pool(void)
{
    struct lock pool;
    struct spin bucket = {0};

    lock_init(&pool, LOCK_RANK_POOL);
    lock_acquire(&pool);
    spin_acquire(&bucket, LOCK_RANK_BUCKET); /* 20 after 40 */
}

static void
bad_same_lock_twice(void)
{
    struct lock cls;

    lock_init(&cls, LOCK_RANK_CLASS);
    lock_acquire(&cls);
    lock_acquire(&cls); /* would self-deadlock without the check */
}

static void
bad_release_unheld(void)
{
    struct lock cls;

    lock_init(&cls, LOCK_RANK_CLASS);
    lock_release(&cls);
}

/* Run fn in a child process; it must die of SIGABRT and its stderr must
 * mention both strings. alarm() bounds a child that hangs instead. */
static void
expect_abort(void (*fn)(void), const char *s1, const char *s2)
{
    char out[1024];
    size_t got = 0;
    ssize_t n;
    int fds[2], status;
    pid_t pid;

    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        fn();
        _exit(0);
    }
    close(fds[1]);
    while (got < sizeof(out) - 1 &&
           (n = read(fds[0], out + got, sizeof(out) - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
        fail_msg("child did not abort (status %#x), stderr: %s", status, out);
    if (!strstr(out, s1) || (s2 && !strstr(out, s2)))
        fail_msg("abort message lacks \"%s\"/\"%s\": %s", s1, s2 ? s2 : "",
                 out);
}
#endif

static void
test_lock_rank_violations_abort(void **state)
{
    (void)state;
#ifndef NDEBUG
    expect_abort(bad_order_mutex, "taking rank 30", "holding rank 50");
    expect_abort(bad_same_rank_spin, "taking rank 20", "holding rank 20");
    expect_abort(bad_spin_after_pool, "rank 20", "rank 40");
    expect_abort(bad_same_lock_twice, "taking rank 30", "holding rank 30");
    expect_abort(bad_release_unheld, "releasing rank 30", NULL);
#else
    print_message("rank checks are compiled out (NDEBUG)\n");
    skip();
#endif
}

#define MUTEX_ROUNDS 1000000

struct excl_arg {
    struct spin *spin;
    struct lock *lock;
    unsigned long *counter; /* plain memory: only the lock protects it */
    unsigned rounds;
};

static void *
excl_thread(void *p)
{
    struct excl_arg *a = p;
    unsigned i;

    for (i = 0; i < a->rounds; i++) {
        if (a->spin) {
            spin_acquire(a->spin, LOCK_RANK_BUCKET);
            (*a->counter)++;
            spin_release(a->spin, LOCK_RANK_BUCKET);
        } else {
            lock_acquire(a->lock);
            (*a->counter)++;
            lock_release(a->lock);
        }
    }
    return NULL;
}

static void
run_two(struct excl_arg *a)
{
    pthread_t t[2];
    int i;

    for (i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, excl_thread, a), 0);
    for (i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

static void
test_spin_mutual_exclusion(void **state)
{
    struct spin s = {0}; /* zeroed memory is an unlocked spin */
    unsigned long counter = 0;
    struct excl_arg a = {
        .spin = &s, .counter = &counter, .rounds = MUTEX_ROUNDS};

    (void)state;
    run_two(&a);
    assert_int_equal(counter, 2ul * MUTEX_ROUNDS);
    assert_int_equal(atomic_load_explicit(&s.word, memory_order_relaxed), 0);
}

static void
test_lock_mutual_exclusion(void **state)
{
    struct lock l;
    unsigned long counter = 0;
    struct excl_arg a = {
        .lock = &l, .counter = &counter, .rounds = MUTEX_ROUNDS / 5};

    (void)state;
    assert_int_equal(lock_init(&l, LOCK_RANK_CLASS), 0);
    run_two(&a);
    assert_int_equal(counter, 2ul * (MUTEX_ROUNDS / 5));
    lock_fini(&l);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

/* hugemap_huge_bytes: 0 for memory on the base page size and for memory
 * not mapped; a mapping the kernel collapsed into 2 MiB pages counted
 * whole. The collapse is asked for synchronously (MADV_COLLAPSE), so the
 * check needs no background thread; a kernel that refuses it (older than
 * 6.1, THP off, no free huge page) skips only that part. */
static void
test_hugemap_huge_bytes(void **state)
{
    const size_t two = HUGEMAP_BYTES;
    (void)state;

    char *small = mmap(NULL, 2 * two, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(small != MAP_FAILED);
    (void)madvise(small, 2 * two, MADV_NOHUGEPAGE);
    memset(small, 1, 2 * two);
    long long n = hugemap_huge_bytes(small, 2 * two);
    if (n == -ENOENT || n == -EACCES)
        skip(); /* no /proc */
    assert_int_equal(n, 0);
    munmap(small, 2 * two);
    assert_int_equal(hugemap_huge_bytes(small, 2 * two), 0); /* gone */

    size_t len = 2 * two;
    char *big = hugemap_map(&len);
    assert_non_null(big);
    assert_int_equal(len, 2 * two);
    memset(big, 2, len);
    n = hugemap_huge_bytes(big, len);
    assert_true(n >= 0 && n <= (long long)len && n % (long long)two == 0);
    if (madvise(big, len, MADV_COLLAPSE) == 0) {
        assert_int_equal(hugemap_huge_bytes(big, len), (long long)len);
        assert_int_equal(hugemap_huge_bytes(big + two, 1), (long long)len);
    } else {
        printf("# MADV_COLLAPSE refused (%s): the positive case is not "
               "checked here\n",
               strerror(errno));
    }
    hugemap_unmap(big, len);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_err_basic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_err_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_err_per_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clock_fake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clock_real, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clock_nsec, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_seeds_and_keys, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hash_every_byte_counts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hash_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_distribution, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hash_avalanche, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_init, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_depth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_depth_per_thread, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lock_rank_violations_abort, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_spin_mutual_exclusion, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lock_mutual_exclusion, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hugemap_huge_bytes, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

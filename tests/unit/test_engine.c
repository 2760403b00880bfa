/*
 * Unit tests of the cache engine through its public API (src/tiercache.h),
 * against memcached's documented semantics (doc/protocol.txt).
 *
 * Each test opens its own cache on its own pool file under /dev/shm (name
 * holds the pid and the test name), with the background thread off and the
 * clock frozen at T0, and removes the file in teardown.
 *
 * Seeded tests print their seed; TC_TEST_SEED=<n> replays one.
 */

#include "src/tiercache.h"

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define T0 1700000000u
#define MIB (1024u * 1024u)
#define DAYS30 2592000
/* Bytes in front of the pool's pages (tier/region_layout.h). */
#define REGION_HDR_BYTES (2u * MIB)

/* ---------------------------------------------------------------- fixture */

struct fx {
    struct tc_cache *c;
    struct tc_config cfg;
    char path[192];
};

static int
fx_open(struct fx *f)
{
    unlink(f->path);
    int rc = tc_open(&f->cfg, &f->c);
    if (rc != 0) {
        print_message("tc_open(%s, %" PRIu64 " bytes): %d (%s)\n", f->path,
                      f->cfg.pool_size, rc, tc_errmsg());
        f->c = NULL;
    }
    return rc;
}

/* Close the fixture's cache and open a fresh one with f->cfg. */
static void
fx_reopen(struct fx *f)
{
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(fx_open(f), 0);
}

static int
setup_common(void **state, bool open)
{
    const char *name = *state;
    struct fx *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    snprintf(f->path, sizeof(f->path), "/dev/shm/tc_test_engine_%d_%s.pool",
             (int)getpid(), name);
    tc_config_init(&f->cfg);
    f->cfg.pool_path = f->path;
    f->cfg.pool_size = 16 * MIB;
    f->cfg.background = false;
    tc_clock_set(T0);
    if (open && fx_open(f) != 0) {
        unlink(f->path);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int
setup(void **state)
{
    return setup_common(state, true);
}

static int
setup_noopen(void **state)
{
    return setup_common(state, false);
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    tc_close(f->c);
    unlink(f->path);
    tc_clock_set(0);
    free(f);
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static uint32_t
test_seed(void)
{
    const char *s = getenv("TC_TEST_SEED");
    if (s != NULL && *s != '\0')
        return (uint32_t)strtoul(s, NULL, 0);
    return (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
}

static uint64_t
rng_next(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void
fill_pattern(unsigned char *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0)
            rng_next(&s);
        buf[i] = (unsigned char)(s >> ((i & 7) * 8));
    }
}

/* What a tc_get / tc_gat callback saw. */
struct got {
    unsigned char *buf;
    size_t cap;
    size_t len; /* concatenated length (may exceed cap) */
    int niov;
    int calls;
    struct tc_item_info info;
};

static void
got_fn(void *arg, const struct tc_item_info *info, const struct iovec *iov,
       int niov)
{
    struct got *g = arg;
    g->calls++;
    g->niov = niov;
    g->info = *info;
    g->len = 0;
    for (int i = 0; i < niov; i++) {
        size_t n = iov[i].iov_len;
        if (g->len < g->cap) {
            size_t room = g->cap - g->len;
            memcpy(g->buf + g->len, iov[i].iov_base, n < room ? n : room);
        }
        g->len += n;
    }
}

static int
get_cb(struct tc_cache *c, const char *k, struct got *g, unsigned char *buf,
       size_t cap)
{
    memset(g, 0, sizeof(*g));
    g->buf = buf;
    g->cap = cap;
    return tc_get(c, k, strlen(k), got_fn, g);
}

static void
put(struct tc_cache *c, const char *k, const void *v, size_t vlen,
    uint32_t flags, int64_t exptime)
{
    int rc = tc_set(c, k, strlen(k), v, vlen, flags, exptime);
    if (rc != TC_OK)
        fail_msg("set %s (%zu bytes): %d", k, vlen, rc);
}

static void
puts_(struct tc_cache *c, const char *k, const char *v)
{
    put(c, k, v, strlen(v), 0, 0);
}

static int
store_s(struct tc_cache *c, enum tc_store_mode mode, const char *k,
        const char *v, uint32_t flags, int64_t exptime, uint64_t cas_in,
        uint64_t *cas_out)
{
    return tc_store(c, mode, k, strlen(k), v, strlen(v), flags, exptime, cas_in,
                    cas_out);
}

/* Both retrieval paths return exactly v; returns the item info. */
static struct tc_item_info
check_val(struct tc_cache *c, const char *k, const void *v, size_t vlen)
{
    unsigned char *buf = malloc(vlen + 16);
    assert_non_null(buf);
    struct got g;
    int rc = get_cb(c, k, &g, buf, vlen + 16);
    if (rc != TC_OK)
        fail_msg("tc_get %s: %d, expected a hit", k, rc);
    assert_int_equal(g.calls, 1);
    assert_true(g.niov >= 1);
    if (g.len != vlen)
        fail_msg("tc_get %s: %zu bytes, expected %zu", k, g.len, vlen);
    assert_int_equal(g.info.vlen, vlen);
    if (vlen > 0)
        assert_memory_equal(buf, v, vlen);

    struct tc_item_info info;
    memset(buf, 0xa5, vlen + 16);
    rc = tc_get_copy(c, k, strlen(k), buf, vlen + 16, &info);
    assert_int_equal(rc, TC_OK);
    assert_int_equal(info.vlen, vlen);
    if (vlen > 0)
        assert_memory_equal(buf, v, vlen);
    assert_int_equal(buf[vlen], 0xa5); /* nothing past vlen */
    assert_int_equal(info.flags, g.info.flags);
    assert_int_equal(info.cas, g.info.cas);
    assert_int_equal(info.exptime, g.info.exptime);
    free(buf);
    return info;
}

static struct tc_item_info
check_str(struct tc_cache *c, const char *k, const char *v)
{
    return check_val(c, k, v, strlen(v));
}

static void
check_miss(struct tc_cache *c, const char *k)
{
    struct got g;
    unsigned char buf[8];
    int rc = get_cb(c, k, &g, buf, sizeof(buf));
    if (rc != TC_NOT_FOUND)
        fail_msg("tc_get %s: %d, expected TC_NOT_FOUND", k, rc);
    assert_int_equal(g.calls, 0);
    rc = tc_get_copy(c, k, strlen(k), buf, sizeof(buf), NULL);
    assert_int_equal(rc, TC_NOT_FOUND);
}

/*
 * The stored text of a counter. protocol.txt: "decrementing a number such
 * that it loses length isn't guaranteed to decrement its returned length.
 * The number MAY be space-padded at the end". So: the decimal digits of
 * `expect`, then only spaces.
 */
static void
check_num(struct tc_cache *c, const char *k, uint64_t expect)
{
    char want[24];
    unsigned char buf[64];
    struct tc_item_info info;
    int n = snprintf(want, sizeof(want), "%" PRIu64, expect);
    int rc = tc_get_copy(c, k, strlen(k), buf, sizeof(buf), &info);
    assert_int_equal(rc, TC_OK);
    if (info.vlen < (uint32_t)n || info.vlen > sizeof(buf) ||
        memcmp(buf, want, (size_t)n) != 0)
        fail_msg("%s holds %.*s (%u bytes), expected %s", k,
                 (int)(info.vlen < sizeof(buf) ? info.vlen : sizeof(buf)),
                 (const char *)buf, info.vlen, want);
    for (uint32_t i = (uint32_t)n; i < info.vlen; i++)
        if (buf[i] != ' ')
            fail_msg("%s holds %.*s: byte %u after the number is not a "
                     "space",
                     k, (int)info.vlen, (const char *)buf, i);
}

static struct tc_stats
stats(struct tc_cache *c)
{
    struct tc_stats s;
    memset(&s, 0xff, sizeof(s));
    tc_stats(c, &s);
    return s;
}

static void
check_ok(struct tc_cache *c)
{
    int rc = tc_check(c);
    if (rc != 0)
        fail_msg("tc_check: %d (%s)", rc, tc_errmsg());
}

/* Class ids as tc_slab_stats() accepts them (0- or 1-based: the header does
 * not say, so find out). */
static int
class_first(struct tc_cache *c)
{
    struct tc_slab_stats ss;
    return tc_slab_stats(c, 0, &ss) == 0 ? 0 : 1;
}

static uint64_t
class_used(struct tc_cache *c, int cls)
{
    struct tc_slab_stats ss;
    memset(&ss, 0, sizeof(ss));
    assert_int_equal(tc_slab_stats(c, cls, &ss), 0);
    return ss.used_chunks;
}

static uint32_t
class_pages(struct tc_cache *c, int cls)
{
    struct tc_slab_stats ss;
    memset(&ss, 0, sizeof(ss));
    assert_int_equal(tc_slab_stats(c, cls, &ss), 0);
    return ss.total_pages;
}

/* Store key k with a value of vlen and return the class whose used_chunks
 * went up by one. */
static int
store_find_class(struct tc_cache *c, const char *k, size_t vlen)
{
    int n = tc_slab_nclasses(c);
    int first = class_first(c);
    assert_true(n > 0 && n <= 64);
    uint64_t before[66];
    for (int i = first; i < first + n; i++)
        before[i] = class_used(c, i);
    unsigned char *v = malloc(vlen + 1);
    assert_non_null(v);
    fill_pattern(v, vlen, 1);
    put(c, k, v, vlen, 0, 0);
    free(v);
    int found = -1;
    for (int i = first; i < first + n; i++)
        if (class_used(c, i) == before[i] + 1) {
            assert_int_equal(found, -1);
            found = i;
        }
    if (found < 0)
        fail_msg("no class gained a used chunk after storing %zu bytes", vlen);
    return found;
}

/* ------------------------------------------------------------- set / get */

static void
test_set_get_sizes(void **state)
{
    struct fx *f = *state;
    static const size_t sizes[] = {0, 1, 2, 7, 63, 100, 1000, 4096, 65536};
    char key[32];

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *v = malloc(sizes[i] + 1);
        assert_non_null(v);
        fill_pattern(v, sizes[i], i);
        snprintf(key, sizeof(key), "size:%zu", sizes[i]);
        put(f->c, key, v, sizes[i], (uint32_t)i, 0);
        struct tc_item_info info = check_val(f->c, key, v, sizes[i]);
        assert_int_equal(info.flags, i);
        assert_int_equal(info.exptime, 0);
        free(v);
    }
    /* binary with NULs, CR and LF */
    static const unsigned char bin[] = {0, 'a', 0, '\r', '\n', 0, 0xff, 0};
    put(f->c, "bin", bin, sizeof(bin), 0, 0);
    check_val(f->c, "bin", bin, sizeof(bin));

    /* overwrite with a shorter and a longer value */
    puts_(f->c, "ow", "a long first value");
    puts_(f->c, "ow", "b");
    check_str(f->c, "ow", "b");
    puts_(f->c, "ow", "a value longer than the one before it");
    check_str(f->c, "ow", "a value longer than the one before it");

    /* re-check all (no aliasing between items) */
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *v = malloc(sizes[i] + 1);
        fill_pattern(v, sizes[i], i);
        snprintf(key, sizeof(key), "size:%zu", sizes[i]);
        check_val(f->c, key, v, sizes[i]);
        free(v);
    }
    check_miss(f->c, "never-stored");
    check_ok(f->c);
}

static void
test_set_get_chained(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 32 * MIB;
    fx_reopen(f);
    const size_t cmax = f->cfg.chunk_max;
    const size_t sizes[] = {cmax - 512, cmax - 100, cmax,
                            cmax + 1,   cmax + 200, cmax + cmax / 2};
    char key[32];

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *v = malloc(sizes[i]);
        assert_non_null(v);
        fill_pattern(v, sizes[i], 100 + i);
        snprintf(key, sizeof(key), "chain:%zu", i);
        put(f->c, key, v, sizes[i], 7, 0);
        check_val(f->c, key, v, sizes[i]);
        unsigned char *buf = malloc(sizes[i]);
        struct got g;
        assert_int_equal(get_cb(f->c, key, &g, buf, sizes[i]), TC_OK);
        if (sizes[i] <= cmax - 512)
            assert_int_equal(g.niov, 1); /* fits one chunk with its header */
        if (sizes[i] > cmax && g.niov < 2)
            fail_msg("%zu-byte value (chunk_max %zu) came in %d piece(s); "
                     "a chained item should give niov > 1",
                     sizes[i], cmax, g.niov);
        free(buf);
        free(v);
    }
    /* all still intact together */
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *v = malloc(sizes[i]);
        fill_pattern(v, sizes[i], 100 + i);
        snprintf(key, sizeof(key), "chain:%zu", i);
        check_val(f->c, key, v, sizes[i]);
        free(v);
    }
    /* replace a chained item by a small one and delete another */
    puts_(f->c, "chain:4", "small");
    check_str(f->c, "chain:4", "small");
    assert_int_equal(tc_delete(f->c, "chain:5", 7, 0), TC_OK);
    check_miss(f->c, "chain:5");
    check_ok(f->c);
}

/*
 * item_size_max bounds header + key + value. The header size is not part of
 * the API, so find the largest value that fits and check the edges around
 * it: largest ok, one more -E2BIG, overhead plausible (1..512 bytes).
 */
static void
test_item_size_max(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 32 * MIB;
    fx_reopen(f);
    const char *k = "big";
    const size_t klen = strlen(k);
    const size_t imax = f->cfg.item_size_max;
    unsigned char *v = malloc(imax + 1);
    assert_non_null(v);
    fill_pattern(v, imax + 1, 42);
    unsigned n_e2big = 0;

    /* whole item_size_max as value: the header cannot fit */
    assert_int_equal(tc_set(f->c, k, klen, v, imax - klen, 0, 0), -E2BIG);
    n_e2big++;
    assert_int_equal(tc_set(f->c, k, klen, v, imax + 1, 0, 0), -E2BIG);
    n_e2big++;
    check_miss(f->c, k);

    size_t lo = imax - klen - 512; /* must fit */
    size_t hi = imax - klen;       /* must not */
    int rc = tc_set(f->c, k, klen, v, lo, 0, 0);
    if (rc != TC_OK)
        fail_msg("value of %zu bytes + key %zu (item_size_max %zu): %d", lo,
                 klen, imax, rc);
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        rc = tc_set(f->c, k, klen, v, mid, 0, 0);
        if (rc == TC_OK) {
            lo = mid;
        } else {
            assert_int_equal(rc, -E2BIG);
            n_e2big++;
            hi = mid;
        }
    }
    print_message("largest value for a %zu-byte key: %zu (overhead %zu)\n",
                  klen, lo, imax - klen - lo);
    assert_int_equal(tc_set(f->c, k, klen, v, lo, 3, 0), TC_OK);
    check_val(f->c, k, v, lo);
    assert_int_equal(tc_set(f->c, k, klen, v, lo + 1, 0, 0), -E2BIG);
    n_e2big++;
    /* memcached: a set that cannot be stored drops the old value */
    assert_int_equal(tc_get_copy(f->c, k, klen, NULL, 0, NULL), TC_NOT_FOUND);
    assert_int_equal(tc_set(f->c, k, klen, v, lo, 3, 0), TC_OK);
    /* a longer key leaves one byte less for the value */
    assert_int_equal(tc_set(f->c, "bigg", 4, v, lo, 0, 0), -E2BIG);
    n_e2big++;
    assert_int_equal(tc_set(f->c, "bigg", 4, v, lo - 1, 0, 0), TC_OK);

    struct tc_stats s = stats(f->c);
    assert_int_equal(s.store_too_large, n_e2big);
    /* append past the limit is refused too */
    rc = tc_store(f->c, TC_APPEND, k, klen, v, 1, 0, 0, 0, NULL);
    if (rc != -E2BIG)
        fail_msg("append making the item 1 byte over item_size_max: %d, "
                 "expected -E2BIG",
                 rc);
    check_val(f->c, k, v, lo);
    free(v);
    check_ok(f->c);
}

static void
test_flags_roundtrip(void **state)
{
    struct fx *f = *state;
    static const uint32_t flags[] = {
        0, 1, 0xffff, 0x10000, 0x12345678, 0x80000000u, 0xffffffffu};
    char key[32];
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        snprintf(key, sizeof(key), "flags:%zu", i);
        put(f->c, key, "v", 1, flags[i], 0);
    }
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        snprintf(key, sizeof(key), "flags:%zu", i);
        struct tc_item_info info = check_str(f->c, key, "v");
        assert_int_equal(info.flags, flags[i]);
    }
}

static void
test_key_length(void **state)
{
    struct fx *f = *state;
    char key[TC_KEY_MAX + 2];
    memset(key, 'k', sizeof(key));
    uint64_t v64;
    unsigned char buf[8];

    /* 1 and 250: ok */
    assert_int_equal(tc_set(f->c, key, 1, "one", 3, 0, 0), TC_OK);
    assert_int_equal(tc_set(f->c, key, TC_KEY_MAX, "max", 3, 0, 0), TC_OK);
    assert_int_equal(tc_get_copy(f->c, key, 1, buf, sizeof(buf), NULL), TC_OK);
    assert_memory_equal(buf, "one", 3);
    assert_int_equal(tc_get_copy(f->c, key, TC_KEY_MAX, buf, sizeof(buf), NULL),
                     TC_OK);
    assert_memory_equal(buf, "max", 3);
    /* 249 is another key */
    assert_int_equal(
        tc_get_copy(f->c, key, TC_KEY_MAX - 1, buf, sizeof(buf), NULL),
        TC_NOT_FOUND);
    assert_int_equal(tc_delete(f->c, key, TC_KEY_MAX, 0), TC_OK);
    assert_int_equal(tc_delete(f->c, key, 1, 0), TC_OK);

    /* binary key bytes are allowed through the API and distinct */
    static const char kb1[] = {'a', 0, 'b'};
    static const char kb2[] = {'a', 0, 'c'};
    assert_int_equal(tc_set(f->c, kb1, 3, "1", 1, 0, 0), TC_OK);
    assert_int_equal(tc_set(f->c, kb2, 3, "2", 1, 0, 0), TC_OK);
    assert_int_equal(tc_get_copy(f->c, kb1, 3, buf, 1, NULL), TC_OK);
    assert_int_equal(buf[0], '1');
    assert_int_equal(tc_get_copy(f->c, "a", 1, buf, 1, NULL), TC_NOT_FOUND);

    /* 0 and 251: -EINVAL everywhere */
    static const size_t bad[] = {0, TC_KEY_MAX + 1};
    for (size_t i = 0; i < 2; i++) {
        size_t kl = bad[i];
        struct got g = {0};
        assert_int_equal(tc_set(f->c, key, kl, "x", 1, 0, 0), -EINVAL);
        for (int m = TC_SET; m <= TC_CAS; m++)
            assert_int_equal(tc_store(f->c, (enum tc_store_mode)m, key, kl, "x",
                                      1, 0, 0, 1, NULL),
                             -EINVAL);
        assert_int_equal(tc_get(f->c, key, kl, got_fn, &g), -EINVAL);
        assert_int_equal(tc_gat(f->c, key, kl, 10, got_fn, &g), -EINVAL);
        assert_int_equal(g.calls, 0);
        assert_int_equal(tc_get_copy(f->c, key, kl, buf, 8, NULL), -EINVAL);
        assert_int_equal(tc_incr(f->c, key, kl, 1, &v64, NULL), -EINVAL);
        assert_int_equal(tc_decr(f->c, key, kl, 1, &v64, NULL), -EINVAL);
        assert_int_equal(tc_delete(f->c, key, kl, 0), -EINVAL);
        assert_int_equal(tc_touch(f->c, key, kl, 10), -EINVAL);
    }
    struct tc_stats s = stats(f->c);
    assert_int_equal(s.curr_items, 2);
    check_ok(f->c);
}

/* ------------------------------------------------------ storage commands */

static void
test_add(void **state)
{
    struct fx *f = *state;
    assert_int_equal(store_s(f->c, TC_ADD, "a", "1", 5, 0, 0, NULL), TC_OK);
    struct tc_item_info info = check_str(f->c, "a", "1");
    assert_int_equal(info.flags, 5);
    /* present: not stored, value untouched */
    assert_int_equal(store_s(f->c, TC_ADD, "a", "2", 6, 0, 0, NULL),
                     TC_NOT_STORED);
    info = check_str(f->c, "a", "1");
    assert_int_equal(info.flags, 5);

    /* expired: add works */
    assert_int_equal(store_s(f->c, TC_SET, "e", "old", 0, 10, 0, NULL), TC_OK);
    tc_clock_advance(10);
    assert_int_equal(store_s(f->c, TC_ADD, "e", "new", 0, 0, 0, NULL), TC_OK);
    check_str(f->c, "e", "new");

    /* deleted: add works */
    assert_int_equal(tc_delete(f->c, "a", 1, 0), TC_OK);
    assert_int_equal(store_s(f->c, TC_ADD, "a", "3", 0, 0, 0, NULL), TC_OK);
    check_str(f->c, "a", "3");

    /* flushed: add works */
    assert_int_equal(tc_flush_all(f->c, 0), 0);
    assert_int_equal(store_s(f->c, TC_ADD, "a", "4", 0, 0, 0, NULL), TC_OK);
    check_str(f->c, "a", "4");
    check_ok(f->c);
}

static void
test_replace(void **state)
{
    struct fx *f = *state;
    assert_int_equal(store_s(f->c, TC_REPLACE, "r", "1", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    check_miss(f->c, "r");
    puts_(f->c, "r", "1");
    assert_int_equal(store_s(f->c, TC_REPLACE, "r", "22", 9, 0, 0, NULL),
                     TC_OK);
    struct tc_item_info info = check_str(f->c, "r", "22");
    assert_int_equal(info.flags, 9);
    /* expired: like absent */
    assert_int_equal(store_s(f->c, TC_SET, "x", "1", 0, 5, 0, NULL), TC_OK);
    tc_clock_advance(5);
    assert_int_equal(store_s(f->c, TC_REPLACE, "x", "2", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    check_miss(f->c, "x");
}

static void
test_append_prepend(void **state)
{
    struct fx *f = *state;
    uint64_t cas0, cas1, cas2;

    assert_int_equal(store_s(f->c, TC_APPEND, "ap", "x", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    assert_int_equal(store_s(f->c, TC_PREPEND, "ap", "x", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    check_miss(f->c, "ap");

    assert_int_equal(store_s(f->c, TC_SET, "ap", "mid", 42, 100, 0, &cas0),
                     TC_OK);
    /* new flags and exptime are ignored */
    assert_int_equal(store_s(f->c, TC_APPEND, "ap", "_end", 7, 5, 0, &cas1),
                     TC_OK);
    struct tc_item_info info = check_str(f->c, "ap", "mid_end");
    assert_int_equal(info.flags, 42);
    assert_int_equal(info.exptime, T0 + 100);
    assert_true(cas1 != cas0);
    assert_int_equal(info.cas, cas1);

    assert_int_equal(store_s(f->c, TC_PREPEND, "ap", "start_", 8, -1, 0, &cas2),
                     TC_OK);
    info = check_str(f->c, "ap", "start_mid_end");
    assert_int_equal(info.flags, 42);
    assert_int_equal(info.exptime, T0 + 100);
    assert_true(cas2 != cas1);
    assert_int_equal(info.cas, cas2);

    /* empty append and append to an empty value */
    assert_int_equal(store_s(f->c, TC_APPEND, "ap", "", 0, 0, 0, NULL), TC_OK);
    check_str(f->c, "ap", "start_mid_end");
    puts_(f->c, "empty", "");
    assert_int_equal(store_s(f->c, TC_APPEND, "empty", "z", 0, 0, 0, NULL),
                     TC_OK);
    assert_int_equal(store_s(f->c, TC_PREPEND, "empty", "y", 0, 0, 0, NULL),
                     TC_OK);
    check_str(f->c, "empty", "yz");

    /* binary */
    static const unsigned char b1[] = {0, 1, 0};
    static const unsigned char b2[] = {0, 2};
    static const unsigned char b12[] = {0, 1, 0, 0, 2};
    put(f->c, "bin", b1, sizeof(b1), 0, 0);
    assert_int_equal(
        tc_store(f->c, TC_APPEND, "bin", 3, b2, sizeof(b2), 0, 0, 0, NULL),
        TC_OK);
    check_val(f->c, "bin", b12, sizeof(b12));

    /* the original expiry still applies */
    tc_clock_advance(99);
    check_str(f->c, "ap", "start_mid_end");
    tc_clock_advance(1);
    check_miss(f->c, "ap");
    assert_int_equal(store_s(f->c, TC_APPEND, "ap", "x", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    check_ok(f->c);
}

/* Append and prepend across the chunk_max boundary: one chunk -> chained. */
static void
test_append_grows_chained(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 32 * MIB;
    fx_reopen(f);
    const size_t cmax = f->cfg.chunk_max;
    size_t len = cmax - 300;
    unsigned char *ref = malloc(cmax * 2);
    assert_non_null(ref);
    fill_pattern(ref, cmax * 2, 9);

    put(f->c, "grow", ref + 1000, len, 11, 0);
    assert_int_equal(tc_store(f->c, TC_APPEND, "grow", 4, ref + 1000 + len, 600,
                              0, 0, 0, NULL),
                     TC_OK);
    len += 600;
    check_val(f->c, "grow", ref + 1000, len);
    assert_int_equal(
        tc_store(f->c, TC_PREPEND, "grow", 4, ref, 1000, 0, 0, 0, NULL), TC_OK);
    len += 1000;
    struct tc_item_info info = check_val(f->c, "grow", ref, len);
    assert_int_equal(info.flags, 11);
    free(ref);
    check_ok(f->c);
}

static void
test_cas(void **state)
{
    struct fx *f = *state;
    uint64_t cas1 = 0, cas2 = 0, cas3 = 0;

    assert_int_equal(store_s(f->c, TC_SET, "c", "v1", 1, 0, 0, &cas1), TC_OK);
    assert_true(cas1 != 0);
    /* gets returns the cas of the set */
    struct tc_item_info info = check_str(f->c, "c", "v1");
    assert_int_equal(info.cas, cas1);

    /* mismatch */
    cas3 = 12345;
    assert_int_equal(store_s(f->c, TC_CAS, "c", "v2", 2, 0, cas1 + 1, &cas3),
                     TC_EXISTS);
    info = check_str(f->c, "c", "v1");
    assert_int_equal(info.cas, cas1);
    assert_int_equal(info.flags, 1);

    /* match */
    assert_int_equal(store_s(f->c, TC_CAS, "c", "v2", 2, 0, cas1, &cas2),
                     TC_OK);
    assert_true(cas2 != cas1);
    assert_true(cas2 > cas1);
    info = check_str(f->c, "c", "v2");
    assert_int_equal(info.cas, cas2);
    assert_int_equal(info.flags, 2);

    /* stale */
    assert_int_equal(store_s(f->c, TC_CAS, "c", "v3", 0, 0, cas1, NULL),
                     TC_EXISTS);
    check_str(f->c, "c", "v2");

    /* missing */
    assert_int_equal(store_s(f->c, TC_CAS, "none", "v", 0, 0, cas2, NULL),
                     TC_NOT_FOUND);
    check_miss(f->c, "none");

    /* expired counts as missing */
    assert_int_equal(store_s(f->c, TC_SET, "e", "v", 0, 3, 0, &cas3), TC_OK);
    tc_clock_advance(3);
    assert_int_equal(store_s(f->c, TC_CAS, "e", "w", 0, 0, cas3, NULL),
                     TC_NOT_FOUND);
    check_miss(f->c, "e");

    /* cas after a delete and re-set of the same key: old cas is stale */
    assert_int_equal(tc_delete(f->c, "c", 1, 0), TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "c", "v4", 0, 0, 0, &cas3), TC_OK);
    assert_int_equal(store_s(f->c, TC_CAS, "c", "v5", 0, 0, cas2, NULL),
                     TC_EXISTS);
    assert_int_equal(store_s(f->c, TC_CAS, "c", "v5", 0, 0, cas3, NULL), TC_OK);
    check_str(f->c, "c", "v5");
}

static void
test_cas_unique_increasing(void **state)
{
    struct fx *f = *state;
    uint64_t last = 0, cas = 0, val;
    char key[16];

    puts_(f->c, "n", "0");
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "k%d", i % 97);
        int op = i % 5;
        int rc;
        if (op == 0) {
            rc = store_s(f->c, TC_SET, key, "v", 0, 0, 0, &cas);
        } else if (op == 1) {
            rc = store_s(f->c, TC_APPEND, key, "a", 0, 0, 0, &cas);
            if (rc == TC_NOT_STORED)
                continue;
        } else if (op == 2) {
            rc = store_s(f->c, TC_REPLACE, key, "r", 0, 0, 0, &cas);
            if (rc == TC_NOT_STORED)
                continue;
        } else if (op == 3) {
            rc = tc_incr(f->c, "n", 1, 1, &val, &cas);
        } else {
            struct tc_item_info info;
            unsigned char b[4];
            if (tc_get_copy(f->c, key, strlen(key), b, 0, &info) != TC_OK)
                continue;
            rc = store_s(f->c, TC_CAS, key, "c", 0, 0, info.cas, &cas);
        }
        assert_int_equal(rc, TC_OK);
        if (cas <= last)
            fail_msg("op %d (%d): cas %" PRIu64 " after %" PRIu64, i, op, cas,
                     last);
        last = cas;
    }
}

/* --------------------------------------------------------- incr / decr */

static void
test_incr_decr(void **state)
{
    struct fx *f = *state;
    uint64_t v = 777;

    assert_int_equal(tc_incr(f->c, "n", 1, 1, &v, NULL), TC_NOT_FOUND);
    assert_int_equal(tc_decr(f->c, "n", 1, 1, &v, NULL), TC_NOT_FOUND);
    check_miss(f->c, "n");

    puts_(f->c, "n", "10");
    assert_int_equal(tc_incr(f->c, "n", 1, 5, &v, NULL), TC_OK);
    assert_int_equal(v, 15);
    check_num(f->c, "n", 15);
    assert_int_equal(tc_decr(f->c, "n", 1, 3, &v, NULL), TC_OK);
    assert_int_equal(v, 12);
    check_num(f->c, "n", 12);
    assert_int_equal(tc_incr(f->c, "n", 1, 0, &v, NULL), TC_OK);
    assert_int_equal(v, 12);

    /* decr "10" by 1: "9" (space padding allowed by protocol.txt) */
    puts_(f->c, "d", "10");
    assert_int_equal(tc_decr(f->c, "d", 1, 1, &v, NULL), TC_OK);
    assert_int_equal(v, 9);
    check_num(f->c, "d", 9);
    /* and the (maybe padded) value keeps working as a number */
    assert_int_equal(tc_incr(f->c, "d", 1, 1, &v, NULL), TC_OK);
    assert_int_equal(v, 10);
    check_num(f->c, "d", 10);
    assert_int_equal(tc_incr(f->c, "d", 1, 990, &v, NULL), TC_OK);
    assert_int_equal(v, 1000);
    check_num(f->c, "d", 1000);

    /* length grows */
    puts_(f->c, "g", "99");
    assert_int_equal(tc_incr(f->c, "g", 1, 1, &v, NULL), TC_OK);
    assert_int_equal(v, 100);
    check_str(f->c, "g", "100");

    /* decr floors at 0 */
    puts_(f->c, "z", "5");
    assert_int_equal(tc_decr(f->c, "z", 1, 6, &v, NULL), TC_OK);
    assert_int_equal(v, 0);
    check_num(f->c, "z", 0);
    assert_int_equal(tc_decr(f->c, "z", 1, 1, &v, NULL), TC_OK);
    assert_int_equal(v, 0);
    puts_(f->c, "z", "5");
    assert_int_equal(tc_decr(f->c, "z", 1, UINT64_MAX, &v, NULL), TC_OK);
    assert_int_equal(v, 0);

    /* leading-zero-free 20-digit numbers */
    puts_(f->c, "big", "18446744073709551614");
    assert_int_equal(tc_incr(f->c, "big", 3, 1, &v, NULL), TC_OK);
    assert_int_equal(v, UINT64_MAX);
    check_str(f->c, "big", "18446744073709551615");
    /* wraps at 2^64 */
    assert_int_equal(tc_incr(f->c, "big", 3, 1, &v, NULL), TC_OK);
    assert_int_equal(v, 0);
    check_num(f->c, "big", 0);
    puts_(f->c, "w", "10");
    assert_int_equal(tc_incr(f->c, "w", 1, UINT64_MAX - 5, &v, NULL), TC_OK);
    assert_int_equal(v, 4);
    check_num(f->c, "w", 4);
    /* decr of a 20-digit value */
    puts_(f->c, "big", "18446744073709551615");
    assert_int_equal(tc_decr(f->c, "big", 3, 5, &v, NULL), TC_OK);
    assert_int_equal(v, UINT64_MAX - 5);
    check_str(f->c, "big", "18446744073709551610");

    /* a value of "0" */
    puts_(f->c, "zero", "0");
    assert_int_equal(tc_incr(f->c, "zero", 4, 7, &v, NULL), TC_OK);
    assert_int_equal(v, 7);
    check_str(f->c, "zero", "7");
    check_ok(f->c);
}

static void
test_incr_non_numeric(void **state)
{
    struct fx *f = *state;
    static const char *bad[] = {
        "abc",
        "12a",
        "a12",
        "",
        "-1",
        "1.5",
        "0x10",
        "123456789012345678901", /* 21 digits */
        "18446744073709551616",  /* 2^64: 20 digits, out of range */
        "99999999999999999999",  /* 20 digits, out of range */
    };
    uint64_t v = 5;
    char key[16];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(key, sizeof(key), "bad%zu", i);
        puts_(f->c, key, bad[i]);
        int rc = tc_incr(f->c, key, strlen(key), 1, &v, NULL);
        if (rc != TC_NON_NUMERIC)
            fail_msg("incr on \"%s\": %d, expected TC_NON_NUMERIC", bad[i], rc);
        rc = tc_decr(f->c, key, strlen(key), 1, &v, NULL);
        if (rc != TC_NON_NUMERIC)
            fail_msg("decr on \"%s\": %d, expected TC_NON_NUMERIC", bad[i], rc);
        check_str(f->c, key, bad[i]); /* untouched */
    }
    /* binary value with a NUL after digits */
    put(f->c, "nul", "12\0", 3, 0, 0);
    assert_int_equal(tc_incr(f->c, "nul", 3, 1, &v, NULL), TC_NON_NUMERIC);
    /* a chained (very long) value */
    size_t len = f->cfg.chunk_max + 10;
    char *digits = malloc(len);
    memset(digits, '1', len);
    put(f->c, "long", digits, len, 0, 0);
    assert_int_equal(tc_incr(f->c, "long", 4, 1, &v, NULL), TC_NON_NUMERIC);
    free(digits);

    struct tc_stats s = stats(f->c);
    /* memcached counts neither a hit nor a miss for a non-numeric value */
    assert_int_equal(s.incr_misses, 0);
    assert_int_equal(s.decr_misses, 0);
}

static void
test_incr_cas_flags_expiry(void **state)
{
    struct fx *f = *state;
    uint64_t cas0, cas1 = 0, cas2 = 0, v;
    assert_int_equal(store_s(f->c, TC_SET, "n", "1", 77, 100, 0, &cas0), TC_OK);
    assert_int_equal(tc_incr(f->c, "n", 1, 1, &v, &cas1), TC_OK);
    assert_int_equal(v, 2);
    assert_true(cas1 != cas0);
    struct tc_item_info info = check_str(f->c, "n", "2");
    assert_int_equal(info.cas, cas1);
    assert_int_equal(info.flags, 77);
    assert_int_equal(info.exptime, T0 + 100);
    assert_int_equal(tc_decr(f->c, "n", 1, 1, &v, &cas2), TC_OK);
    assert_true(cas2 != cas1);
    info = check_str(f->c, "n", "1");
    assert_int_equal(info.cas, cas2);
    /* the old cas no longer matches */
    assert_int_equal(store_s(f->c, TC_CAS, "n", "9", 0, 0, cas1, NULL),
                     TC_EXISTS);
    /* incr on an expired counter misses */
    tc_clock_advance(100);
    assert_int_equal(tc_incr(f->c, "n", 1, 1, &v, NULL), TC_NOT_FOUND);
}

/* ------------------------------------------------------ delete / touch */

static void
test_delete(void **state)
{
    struct fx *f = *state;
    uint64_t cas;
    puts_(f->c, "d", "v");
    assert_int_equal(tc_delete(f->c, "d", 1, 0), TC_OK);
    check_miss(f->c, "d");
    assert_int_equal(tc_delete(f->c, "d", 1, 0), TC_NOT_FOUND);
    assert_int_equal(tc_delete(f->c, "never", 5, 0), TC_NOT_FOUND);

    assert_int_equal(store_s(f->c, TC_SET, "d", "v", 0, 0, 0, &cas), TC_OK);
    assert_int_equal(tc_delete(f->c, "d", 1, cas + 1), TC_EXISTS);
    check_str(f->c, "d", "v");
    assert_int_equal(tc_delete(f->c, "d", 1, cas), TC_OK);
    check_miss(f->c, "d");
    assert_int_equal(tc_delete(f->c, "d", 1, cas), TC_NOT_FOUND);

    /* expired: not found */
    assert_int_equal(store_s(f->c, TC_SET, "e", "v", 0, 2, 0, NULL), TC_OK);
    tc_clock_advance(2);
    assert_int_equal(tc_delete(f->c, "e", 1, 0), TC_NOT_FOUND);
    struct tc_stats s = stats(f->c);
    assert_int_equal(s.curr_items <= 1, true);
    check_ok(f->c);
}

static void
test_touch(void **state)
{
    struct fx *f = *state;
    uint64_t cas;
    assert_int_equal(tc_touch(f->c, "t", 1, 10), TC_NOT_FOUND);
    assert_int_equal(store_s(f->c, TC_SET, "t", "v", 3, 10, 0, &cas), TC_OK);
    assert_int_equal(tc_touch(f->c, "t", 1, 100), TC_OK);
    struct tc_item_info info = check_str(f->c, "t", "v");
    assert_int_equal(info.exptime, T0 + 100);
    assert_int_equal(info.flags, 3);
    /* memcached's touch does not change the CAS */
    assert_int_equal(info.cas, cas);
    tc_clock_advance(50);
    check_str(f->c, "t", "v");
    /* relative to the time of the touch */
    assert_int_equal(tc_touch(f->c, "t", 1, 10), TC_OK);
    tc_clock_advance(9);
    check_str(f->c, "t", "v");
    tc_clock_advance(1);
    check_miss(f->c, "t");
    assert_int_equal(tc_touch(f->c, "t", 1, 10), TC_NOT_FOUND);

    /* touch to 0: never */
    assert_int_equal(store_s(f->c, TC_SET, "u", "v", 0, 5, 0, NULL), TC_OK);
    assert_int_equal(tc_touch(f->c, "u", 1, 0), TC_OK);
    info = check_str(f->c, "u", "v");
    assert_int_equal(info.exptime, 0);
    tc_clock_advance(1000);
    check_str(f->c, "u", "v");
    /* touch negative: gone */
    assert_int_equal(tc_touch(f->c, "u", 1, -1), TC_OK);
    check_miss(f->c, "u");
}

static void
test_gat(void **state)
{
    struct fx *f = *state;
    struct got g;
    unsigned char buf[16];
    uint64_t cas;

    memset(&g, 0, sizeof(g));
    assert_int_equal(tc_gat(f->c, "g", 1, 10, got_fn, &g), TC_NOT_FOUND);
    assert_int_equal(g.calls, 0);

    assert_int_equal(store_s(f->c, TC_SET, "g", "val", 4, 10, 0, &cas), TC_OK);
    memset(&g, 0, sizeof(g));
    g.buf = buf;
    g.cap = sizeof(buf);
    assert_int_equal(tc_gat(f->c, "g", 1, 100, got_fn, &g), TC_OK);
    assert_int_equal(g.calls, 1);
    assert_int_equal(g.len, 3);
    assert_memory_equal(buf, "val", 3);
    assert_int_equal(g.info.flags, 4);
    assert_int_equal(g.info.vlen, 3);
    /* "the expiry is set first, then fn sees the item" */
    assert_int_equal(g.info.exptime, T0 + 100);
    assert_int_equal(g.info.cas, cas);
    tc_clock_advance(50);
    struct tc_item_info info = check_str(f->c, "g", "val");
    assert_int_equal(info.exptime, T0 + 100);
    tc_clock_advance(49);
    check_str(f->c, "g", "val");
    tc_clock_advance(1);
    check_miss(f->c, "g");
    memset(&g, 0, sizeof(g));
    assert_int_equal(tc_gat(f->c, "g", 1, 100, got_fn, &g), TC_NOT_FOUND);
    assert_int_equal(g.calls, 0);

    /* gat with 0: never expires */
    assert_int_equal(store_s(f->c, TC_SET, "h", "v", 0, 5, 0, NULL), TC_OK);
    memset(&g, 0, sizeof(g));
    assert_int_equal(tc_gat(f->c, "h", 1, 0, got_fn, &g), TC_OK);
    assert_int_equal(g.info.exptime, 0);
    tc_clock_advance(10);
    check_str(f->c, "h", "v");
}

/* --------------------------------------------------------------- expiry */

static void
test_expiry_relative(void **state)
{
    struct fx *f = *state;
    assert_int_equal(store_s(f->c, TC_SET, "r", "v", 0, 10, 0, NULL), TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "one", "v", 0, 1, 0, NULL), TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "never", "v", 0, 0, 0, NULL), TC_OK);
    struct tc_item_info info = check_str(f->c, "r", "v");
    assert_int_equal(info.exptime, T0 + 10);
    info = check_str(f->c, "never", "v");
    assert_int_equal(info.exptime, 0);
    check_str(f->c, "one", "v"); /* same second: still there */
    tc_clock_advance(1);
    check_miss(f->c, "one"); /* exptime <= now: expired */
    tc_clock_advance(8);     /* +9 */
    check_str(f->c, "r", "v");
    tc_clock_advance(1); /* +10: exptime == now -> expired */
    check_miss(f->c, "r");
    tc_clock_advance(1);
    check_miss(f->c, "r");
    /* 0 never expires, even ten years on */
    tc_clock_advance(10u * 365 * 24 * 3600);
    check_str(f->c, "never", "v");
}

static void
test_expiry_30days(void **state)
{
    struct fx *f = *state;
    /* exactly 30 days: relative */
    assert_int_equal(store_s(f->c, TC_SET, "rel", "v", 0, DAYS30, 0, NULL),
                     TC_OK);
    struct tc_item_info info = check_str(f->c, "rel", "v");
    assert_int_equal(info.exptime, T0 + DAYS30);
    /* one more: absolute unix time (1970-01-31): in the past, gone */
    assert_int_equal(store_s(f->c, TC_SET, "abs", "v", 0, DAYS30 + 1, 0, NULL),
                     TC_OK);
    check_miss(f->c, "abs");
    /* absolute in the future */
    assert_int_equal(
        store_s(f->c, TC_SET, "fut", "v", 0, (int64_t)T0 + 100, 0, NULL),
        TC_OK);
    info = check_str(f->c, "fut", "v");
    assert_int_equal(info.exptime, T0 + 100);
    /* absolute now and just past */
    assert_int_equal(store_s(f->c, TC_SET, "now", "v", 0, (int64_t)T0, 0, NULL),
                     TC_OK);
    check_miss(f->c, "now");
    assert_int_equal(
        store_s(f->c, TC_SET, "past", "v", 0, (int64_t)T0 - 1, 0, NULL), TC_OK);
    check_miss(f->c, "past");

    tc_clock_advance(99);
    check_str(f->c, "fut", "v");
    tc_clock_advance(1);
    check_miss(f->c, "fut");
    tc_clock_advance(DAYS30 - 101); /* T0 + DAYS30 - 1 */
    check_str(f->c, "rel", "v");
    tc_clock_advance(1);
    check_miss(f->c, "rel");
}

static void
test_expiry_negative(void **state)
{
    struct fx *f = *state;
    static const int64_t neg[] = {-1, -2, -1000000, INT32_MIN, INT64_MIN};
    char key[16];
    for (size_t i = 0; i < sizeof(neg) / sizeof(neg[0]); i++) {
        snprintf(key, sizeof(key), "neg%zu", i);
        puts_(f->c, key, "old");
        int rc = store_s(f->c, TC_SET, key, "v", 0, neg[i], 0, NULL);
        assert_int_equal(rc, TC_OK);
        check_miss(f->c, key);
        /* an add afterwards finds the key free */
        assert_int_equal(store_s(f->c, TC_ADD, key, "w", 0, 0, 0, NULL), TC_OK);
        check_str(f->c, key, "w");
    }
}

/* ------------------------------------------------------------ flush_all */

static void
test_flush_all(void **state)
{
    struct fx *f = *state;
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "f%d", i);
        puts_(f->c, key, "v");
    }
    assert_int_equal(tc_flush_all(f->c, 0), 0);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "f%d", i);
        check_miss(f->c, key);
    }
    /* stored after the flush, in the same second: visible */
    puts_(f->c, "f1", "new");
    check_str(f->c, "f1", "new");
    assert_int_equal(store_s(f->c, TC_ADD, "f2", "new", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(store_s(f->c, TC_REPLACE, "f3", "x", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    tc_clock_advance(1);
    check_str(f->c, "f1", "new");
    check_str(f->c, "f2", "new");
    check_miss(f->c, "f3");
    /* negative delay: now */
    assert_int_equal(tc_flush_all(f->c, -5), 0);
    check_miss(f->c, "f1");
    check_ok(f->c);
}

static void
test_flush_all_delay(void **state)
{
    struct fx *f = *state;
    puts_(f->c, "a", "1");
    assert_int_equal(tc_flush_all(f->c, 10), 0);
    check_str(f->c, "a", "1");
    tc_clock_advance(5);
    puts_(f->c, "b", "2"); /* before the flush time: also flushed */
    tc_clock_advance(4);   /* +9 */
    check_str(f->c, "a", "1");
    check_str(f->c, "b", "2");
    tc_clock_advance(1); /* +10 */
    check_miss(f->c, "a");
    check_miss(f->c, "b");
    /* stored once the flush took effect: stays */
    puts_(f->c, "c", "3");
    check_str(f->c, "c", "3");
    tc_clock_advance(1);
    puts_(f->c, "d", "4");
    tc_clock_advance(100);
    check_str(f->c, "c", "3");
    check_str(f->c, "d", "4");
}

static void
test_flush_all_replaces_pending(void **state)
{
    struct fx *f = *state;
    puts_(f->c, "a", "1");
    assert_int_equal(tc_flush_all(f->c, 10), 0);
    assert_int_equal(tc_flush_all(f->c, 20), 0); /* replaces the first */
    tc_clock_advance(10);
    check_str(f->c, "a", "1");
    tc_clock_advance(9); /* +19 */
    check_str(f->c, "a", "1");
    tc_clock_advance(1); /* +20 */
    check_miss(f->c, "a");

    /* a delayed flush replaced by an immediate one */
    puts_(f->c, "b", "2");
    assert_int_equal(tc_flush_all(f->c, 10), 0);
    assert_int_equal(tc_flush_all(f->c, 0), 0);
    check_miss(f->c, "b");
    puts_(f->c, "c", "3");
    tc_clock_advance(15); /* past the replaced delayed flush */
    check_str(f->c, "c", "3");

    /* a shorter delay replaces a longer one */
    assert_int_equal(tc_flush_all(f->c, 30), 0);
    assert_int_equal(tc_flush_all(f->c, 5), 0);
    tc_clock_advance(4);
    check_str(f->c, "c", "3");
    tc_clock_advance(1);
    check_miss(f->c, "c");
}

/* ---------------------------------------------------------------- stats */

#define STAT_EQ(s, field, want)                                                \
    do {                                                                       \
        if ((s).field != (uint64_t)(want))                                     \
            fail_msg("stats." #field " = %" PRIu64 ", expected %" PRIu64,      \
                     (uint64_t)(s).field, (uint64_t)(want));                   \
    } while (0)

static void
test_stats_counters(void **state)
{
    struct fx *f = *state;
    unsigned char buf[16];
    uint64_t v, cas;
    struct got g;
    struct tc_stats s = stats(f->c);

    STAT_EQ(s, curr_items, 0);
    STAT_EQ(s, total_items, 0);
    STAT_EQ(s, cmd_get, 0);
    STAT_EQ(s, cmd_set, 0);
    STAT_EQ(s, evictions, 0);
    STAT_EQ(s, bytes, 0);
    assert_true(s.pmem_pages_total > 0);
    assert_int_equal(s.pmem_bytes, f->cfg.pool_size - REGION_HDR_BYTES);
    assert_false(s.pmem_is_pmem); /* /dev/shm */

    assert_int_equal(tc_get_copy(f->c, "a", 1, buf, 16, NULL), TC_NOT_FOUND);
    s = stats(f->c);
    STAT_EQ(s, cmd_get, 1);
    STAT_EQ(s, get_misses, 1);
    STAT_EQ(s, get_hits, 0);

    assert_int_equal(store_s(f->c, TC_SET, "a", "v", 0, 0, 0, NULL), TC_OK);
    s = stats(f->c);
    STAT_EQ(s, cmd_set, 1);
    STAT_EQ(s, total_items, 1);
    STAT_EQ(s, curr_items, 1);
    assert_true(s.bytes > 2);
    uint64_t bytes1 = s.bytes;

    assert_int_equal(get_cb(f->c, "a", &g, buf, 16), TC_OK);
    assert_int_equal(tc_get_copy(f->c, "a", 1, buf, 16, NULL), TC_OK);
    s = stats(f->c);
    STAT_EQ(s, cmd_get, 3);
    STAT_EQ(s, get_hits, 2);
    STAT_EQ(s, get_misses, 1);

    assert_int_equal(store_s(f->c, TC_SET, "a", "w", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(store_s(f->c, TC_ADD, "a", "x", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    assert_int_equal(store_s(f->c, TC_REPLACE, "zz", "x", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    s = stats(f->c);
    STAT_EQ(s, cmd_set, 4);
    STAT_EQ(s, total_items, 2);
    STAT_EQ(s, curr_items, 1);
    STAT_EQ(s, bytes, bytes1);

    assert_int_equal(tc_delete(f->c, "a", 1, 0), TC_OK);
    assert_int_equal(tc_delete(f->c, "a", 1, 0), TC_NOT_FOUND);
    s = stats(f->c);
    STAT_EQ(s, delete_hits, 1);
    STAT_EQ(s, delete_misses, 1);
    STAT_EQ(s, curr_items, 0);
    STAT_EQ(s, bytes, 0);

    assert_int_equal(tc_incr(f->c, "n", 1, 1, &v, NULL), TC_NOT_FOUND);
    assert_int_equal(tc_decr(f->c, "n", 1, 1, &v, NULL), TC_NOT_FOUND);
    assert_int_equal(store_s(f->c, TC_SET, "n", "5", 0, 0, 0, &cas), TC_OK);
    assert_int_equal(tc_incr(f->c, "n", 1, 1, &v, NULL), TC_OK);
    assert_int_equal(tc_incr(f->c, "n", 1, 1, &v, &cas), TC_OK);
    assert_int_equal(tc_decr(f->c, "n", 1, 1, &v, NULL), TC_OK);
    s = stats(f->c);
    STAT_EQ(s, incr_misses, 1);
    STAT_EQ(s, decr_misses, 1);
    STAT_EQ(s, incr_hits, 2);
    STAT_EQ(s, decr_hits, 1);
    STAT_EQ(s, cmd_set, 5);
    STAT_EQ(s, curr_items, 1);

    assert_int_equal(tc_get_copy(f->c, "n", 1, buf, 16, NULL), TC_OK);
    s = stats(f->c);
    uint64_t cmd_set0 = s.cmd_set;
    struct tc_item_info info;
    assert_int_equal(tc_get_copy(f->c, "n", 1, buf, 16, &info), TC_OK);
    assert_int_equal(
        store_s(f->c, TC_CAS, "n", "1", 0, 0, info.cas + 1000, NULL),
        TC_EXISTS);
    assert_int_equal(tc_get_copy(f->c, "n", 1, buf, 16, &info), TC_OK);
    assert_int_equal(store_s(f->c, TC_CAS, "n", "1", 0, 0, info.cas, NULL),
                     TC_OK);
    assert_int_equal(store_s(f->c, TC_CAS, "m", "1", 0, 0, info.cas, NULL),
                     TC_NOT_FOUND);
    s = stats(f->c);
    STAT_EQ(s, cas_badval, 1);
    STAT_EQ(s, cas_hits, 1);
    STAT_EQ(s, cas_misses, 1);
    STAT_EQ(s, cmd_set, cmd_set0 + 3);

    assert_int_equal(tc_touch(f->c, "n", 1, 100), TC_OK);
    assert_int_equal(tc_touch(f->c, "m", 1, 100), TC_NOT_FOUND);
    s = stats(f->c);
    STAT_EQ(s, cmd_touch, 2);
    STAT_EQ(s, touch_hits, 1);
    STAT_EQ(s, touch_misses, 1);

    /* expired and flushed misses */
    uint64_t misses0 = s.get_misses, cmd_get0 = s.cmd_get;
    assert_int_equal(store_s(f->c, TC_SET, "e", "v", 0, 5, 0, NULL), TC_OK);
    tc_clock_advance(5);
    assert_int_equal(tc_get_copy(f->c, "e", 1, buf, 16, NULL), TC_NOT_FOUND);
    s = stats(f->c);
    STAT_EQ(s, get_expired, 1);
    STAT_EQ(s, get_misses, misses0 + 1);
    STAT_EQ(s, cmd_get, cmd_get0 + 1);
    STAT_EQ(s, get_flushed, 0);

    assert_int_equal(store_s(f->c, TC_SET, "fl", "v", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(tc_flush_all(f->c, 0), 0);
    assert_int_equal(tc_get_copy(f->c, "fl", 2, buf, 16, NULL), TC_NOT_FOUND);
    s = stats(f->c);
    STAT_EQ(s, cmd_flush, 1);
    STAT_EQ(s, get_flushed, 1);
    STAT_EQ(s, get_expired, 1);
    STAT_EQ(s, get_misses, misses0 + 2);
    STAT_EQ(s, evictions, 0);
    STAT_EQ(s, store_too_large, 0);
    STAT_EQ(s, store_no_memory, 0);
    /* mem_limit 0 = the whole pool: every page of the data area */
    STAT_EQ(s, pmem_pages_total, (f->cfg.pool_size - REGION_HDR_BYTES) / MIB);
    STAT_EQ(s, limit_maxbytes, s.pmem_pages_total * MIB);
    check_ok(f->c);
}

static void
test_stats_reset(void **state)
{
    struct fx *f = *state;
    unsigned char buf[4];
    puts_(f->c, "a", "1");
    puts_(f->c, "b", "2");
    assert_int_equal(tc_get_copy(f->c, "a", 1, buf, 4, NULL), TC_OK);
    assert_int_equal(tc_get_copy(f->c, "x", 1, buf, 4, NULL), TC_NOT_FOUND);
    assert_int_equal(tc_delete(f->c, "b", 1, 0), TC_OK);
    struct tc_stats before = stats(f->c);
    tc_stats_reset(f->c);
    struct tc_stats s = stats(f->c);
    STAT_EQ(s, get_hits, 0);
    STAT_EQ(s, get_misses, 0);
    STAT_EQ(s, cmd_get, 0);
    STAT_EQ(s, cmd_set, 0);
    STAT_EQ(s, delete_hits, 0);
    STAT_EQ(s, total_items, 0);
    STAT_EQ(s, curr_items, before.curr_items);
    STAT_EQ(s, curr_items, 1);
    STAT_EQ(s, bytes, before.bytes);
    STAT_EQ(s, limit_maxbytes, before.limit_maxbytes);
    STAT_EQ(s, total_malloced, before.total_malloced);
    /* counting goes on from zero */
    assert_int_equal(tc_get_copy(f->c, "a", 1, buf, 4, NULL), TC_OK);
    s = stats(f->c);
    STAT_EQ(s, get_hits, 1);
    STAT_EQ(s, cmd_get, 1);
}

/* ------------------------------------------------------------- eviction */

#define EV_VLEN 1000
#define EV_HOT 50

static void
ev_value(unsigned char *v, unsigned i)
{
    fill_pattern(v, EV_VLEN, i);
    memcpy(v, &i, sizeof(i));
}

static void
test_eviction_clock(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 8 * MIB;
    f->cfg.evict = true;
    fx_reopen(f);
    const unsigned total = 3u * 8 * MIB / 1024; /* 3x the pool in 1 KiB */
    unsigned char v[EV_VLEN], buf[EV_VLEN];
    char key[32];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    for (unsigned i = 0; i < total; i++) {
        snprintf(key, sizeof(key), "ev%07u", i);
        ev_value(v, i);
        int rc = tc_set(f->c, key, strlen(key), v, EV_VLEN, 0, 0);
        if (rc != TC_OK)
            fail_msg("store %u of %u (evicting cache): %d", i, total, rc);
        if (i >= EV_HOT && i % 100 == 0) {
            for (unsigned h = 0; h < EV_HOT; h++) {
                snprintf(key, sizeof(key), "ev%07u", h);
                (void)tc_get_copy(f->c, key, strlen(key), buf, EV_VLEN, NULL);
            }
        }
        if (i % 4096 == 0) {
            check_ok(f->c);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            assert_true(t1.tv_sec - t0.tv_sec < 60);
        }
    }
    unsigned hot = 0, cold = 0, live = 0;
    for (unsigned i = 0; i < total; i++) {
        struct tc_item_info info;
        snprintf(key, sizeof(key), "ev%07u", i);
        int rc = tc_get_copy(f->c, key, strlen(key), buf, EV_VLEN, &info);
        if (rc == TC_NOT_FOUND)
            continue;
        assert_int_equal(rc, TC_OK);
        assert_int_equal(info.vlen, EV_VLEN);
        ev_value(v, i);
        if (memcmp(v, buf, EV_VLEN) != 0)
            fail_msg("key %s survived with a wrong value", key);
        live++;
        if (i < EV_HOT)
            hot++;
        else if (i < EV_HOT + 2000)
            cold++;
    }
    struct tc_stats s = stats(f->c);
    print_message("evictions %" PRIu64 ", live %u of %u, hot kept %u/%u, "
                  "early cold kept %u/2000\n",
                  s.evictions, live, total, hot, EV_HOT, cold);
    assert_true(s.evictions > 0);
    assert_true(s.evicted_unfetched > 0);
    assert_true(live < total);
    assert_int_equal(s.curr_items, live);
    assert_int_equal(s.store_no_memory, 0);
    /* CLOCK: items read between passes of the hand stay */
    if (hot < EV_HOT * 9 / 10)
        fail_msg("only %u of %u frequently read keys survived", hot, EV_HOT);
    assert_true(cold < 2000 / 10);
    check_ok(f->c);
}

static void
test_no_evict_enomem(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 8 * MIB;
    f->cfg.evict = false;
    fx_reopen(f);
    const unsigned total = 3u * 8 * MIB / 1024;
    unsigned char v[EV_VLEN], buf[EV_VLEN];
    char key[32];
    unsigned stored = 0, nomem = 0;

    for (unsigned i = 0; i < total; i++) {
        snprintf(key, sizeof(key), "ne%07u", i);
        ev_value(v, i);
        int rc = tc_set(f->c, key, strlen(key), v, EV_VLEN, 0, 0);
        if (rc == TC_OK) {
            if (nomem > 0)
                fail_msg("store %u succeeded after %u -ENOMEM with nothing "
                         "freed",
                         i, nomem);
            stored++;
        } else if (rc == -ENOMEM) {
            nomem++;
            if (nomem >= 100)
                break;
        } else {
            fail_msg("store %u: %d", i, rc);
        }
    }
    print_message("stored %u before -ENOMEM\n", stored);
    assert_true(nomem > 0);
    assert_true(stored > 1000);
    struct tc_stats s = stats(f->c);
    STAT_EQ(s, store_no_memory, nomem);
    STAT_EQ(s, evictions, 0);
    STAT_EQ(s, curr_items, stored);
    /* nothing was evicted */
    for (unsigned i = 0; i < stored; i++) {
        snprintf(key, sizeof(key), "ne%07u", i);
        assert_int_equal(
            tc_get_copy(f->c, key, strlen(key), buf, EV_VLEN, NULL), TC_OK);
        ev_value(v, i);
        assert_memory_equal(buf, v, EV_VLEN);
    }
    check_ok(f->c);

    /* freeing room makes stores work again (allowing for the RCU grace
     * period before freed chunks come back) */
    for (unsigned i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "ne%07u", i);
        assert_int_equal(tc_delete(f->c, key, strlen(key), 0), TC_OK);
    }
    int rc = -ENOMEM;
    unsigned tries;
    for (tries = 0; tries < 2000 && rc == -ENOMEM; tries++) {
        rc = tc_set(f->c, "again", 5, v, EV_VLEN, 0, 0);
        if (rc == -ENOMEM) {
            tc_maintain(f->c);
            usleep(1000);
        }
    }
    if (rc != TC_OK)
        fail_msg("store after deleting 200 items: %d (%u tries)", rc, tries);
    if (tries > 1)
        print_message("store after delete needed %u tries\n", tries);
    check_ok(f->c);
}

/* ---------------------------------------------------------- get_copy */

static void
test_get_copy_prefix(void **state)
{
    struct fx *f = *state;
    unsigned char v[100], buf[110];
    fill_pattern(v, sizeof(v), 5);
    put(f->c, "p", v, sizeof(v), 99, 0);
    struct tc_item_info info;
    memset(buf, 0xcc, sizeof(buf));
    memset(&info, 0, sizeof(info));
    assert_int_equal(tc_get_copy(f->c, "p", 1, buf, 5, &info), TC_OK);
    assert_memory_equal(buf, v, 5);
    assert_int_equal(buf[5], 0xcc);
    assert_int_equal(info.vlen, 100);
    assert_int_equal(info.flags, 99);
    /* cap 0 */
    memset(buf, 0xcc, sizeof(buf));
    assert_int_equal(tc_get_copy(f->c, "p", 1, buf, 0, &info), TC_OK);
    assert_int_equal(buf[0], 0xcc);
    assert_int_equal(info.vlen, 100);
    /* exact cap, info NULL */
    assert_int_equal(tc_get_copy(f->c, "p", 1, buf, 100, NULL), TC_OK);
    assert_memory_equal(buf, v, 100);
    assert_int_equal(buf[100], 0xcc);

    /* prefix of a chained item */
    size_t len = f->cfg.chunk_max + 4096;
    unsigned char *big = malloc(len), *out = malloc(len);
    fill_pattern(big, len, 6);
    put(f->c, "big", big, len, 0, 0);
    size_t cap = f->cfg.chunk_max + 10;
    memset(out, 0xcc, len);
    assert_int_equal(tc_get_copy(f->c, "big", 3, out, cap, &info), TC_OK);
    assert_memory_equal(out, big, cap);
    assert_int_equal(out[cap], 0xcc);
    assert_int_equal(info.vlen, len);
    free(big);
    free(out);
}

/* ------------------------------------------------------- maintenance */

static void
test_maintain_sweep(void **state)
{
    struct fx *f = *state;
    char key[32];
    unsigned char v[200];
    fill_pattern(v, sizeof(v), 3);
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "exp%d", i);
        put(f->c, key, v, 50 + (size_t)(i % 3) * 70, 0, 10);
    }
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "live%d", i);
        put(f->c, key, v, 100, 0, 0);
    }
    struct tc_stats s0 = stats(f->c);
    STAT_EQ(s0, curr_items, 1100);
    /* nothing to reclaim yet */
    assert_int_equal(tc_maintain(f->c), 0);
    tc_clock_advance(10);
    int total = 0;
    for (int step = 0; step < 10000 && total < 1000; step++) {
        int n = tc_maintain(f->c);
        assert_true(n >= 0);
        total += n;
    }
    struct tc_stats s = stats(f->c);
    print_message("sweep: reclaimed %d; stats sweep_reclaimed %" PRIu64
                  " reclaimed %" PRIu64 " expired_unfetched %" PRIu64 "\n",
                  total, s.sweep_reclaimed, s.reclaimed, s.expired_unfetched);
    assert_int_equal(total, 1000);
    STAT_EQ(s, sweep_reclaimed, 1000);
    STAT_EQ(s, curr_items, 100);
    STAT_EQ(s, get_expired, 0);
    assert_true(s.bytes < s0.bytes);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "live%d", i);
        check_val(f->c, key, v, 100);
    }
    for (int i = 0; i < 1000; i += 97) {
        snprintf(key, sizeof(key), "exp%d", i);
        check_miss(f->c, key);
    }
    /* a further step finds nothing */
    assert_int_equal(tc_maintain(f->c), 0);
    check_ok(f->c);
}

/* Fill 1 KiB items until class pages reach `pages`; returns items stored. */
static unsigned
fill_class_pages(struct tc_cache *c, const char *prefix, unsigned pages,
                 int *cls_out)
{
    char key[32];
    unsigned char v[EV_VLEN];
    snprintf(key, sizeof(key), "%s%07u", prefix, 0u);
    ev_value(v, 0);
    int cls = store_find_class(c, key, EV_VLEN);
    /* store_find_class stored a different pattern: rewrite */
    put(c, key, v, EV_VLEN, 0, 0);
    unsigned n = 1;
    while (class_pages(c, cls) < pages) {
        assert_true(n < 200000);
        snprintf(key, sizeof(key), "%s%07u", prefix, n);
        ev_value(v, n);
        put(c, key, v, EV_VLEN, 0, 0);
        n++;
    }
    *cls_out = cls;
    return n;
}

static void
check_fill_keys(struct tc_cache *c, const char *prefix, unsigned n,
                unsigned keep_mod, unsigned *live)
{
    char key[32];
    unsigned char v[EV_VLEN], buf[EV_VLEN];
    *live = 0;
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%07u", prefix, i);
        int rc = tc_get_copy(c, key, strlen(key), buf, EV_VLEN, NULL);
        if (i % keep_mod != 0) {
            if (rc != TC_NOT_FOUND)
                fail_msg("deleted key %s is back: %d", key, rc);
            continue;
        }
        if (rc != TC_OK)
            fail_msg("live key %s lost: %d", key, rc);
        ev_value(v, i);
        if (memcmp(buf, v, EV_VLEN) != 0)
            fail_msg("live key %s has a wrong value after the move", key);
        (*live)++;
    }
}

static void
test_mem_limit(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 32 * MIB;
    fx_reopen(f);
    char key[32];
    const uint32_t npages = (f->cfg.pool_size - REGION_HDR_BYTES) / MIB;
    int cls;

    /* items over 60% of the pages, then keep one in three */
    unsigned n = fill_class_pages(f->c, "ml", npages * 6 / 10, &cls);
    for (unsigned i = 0; i < n; i++)
        if (i % 3 != 0) {
            snprintf(key, sizeof(key), "ml%07u", i);
            assert_int_equal(tc_delete(f->c, key, strlen(key), 0), TC_OK);
        }
    check_ok(f->c);
    struct tc_stats s0 = stats(f->c);

    /* bad limits */
    assert_int_equal(tc_set_mem_limit(f->c, 0), -EINVAL);
    assert_int_equal(tc_set_mem_limit(f->c, 4096), -EINVAL);
    assert_int_equal(tc_set_mem_limit(f->c, MIB - 1), -EINVAL);
    assert_int_equal(tc_set_mem_limit(f->c, f->cfg.pool_size + MIB), -EINVAL);

    /* shrink to half */
    const uint64_t half = 16 * MIB;
    int rc = tc_set_mem_limit(f->c, half);
    if (rc != 0 && rc != -EBUSY)
        fail_msg("tc_set_mem_limit(16 MiB): %d (%s)", rc, tc_errmsg());
    struct tc_stats s = stats(f->c);
    unsigned steps = 0;
    while (s.total_malloced > half && steps < 10000) {
        tc_maintain(f->c);
        s = stats(f->c);
        steps++;
    }
    print_message("shrink: rc %d, %u maintenance steps, total_malloced "
                  "%" PRIu64 ", pages_total %" PRIu64 "\n",
                  rc, steps, s.total_malloced, s.pmem_pages_total);
    assert_true(s.total_malloced <= half);
    STAT_EQ(s, limit_maxbytes, half);
    STAT_EQ(s, pmem_pages_total, half / MIB);
    STAT_EQ(s, evictions, s0.evictions); /* there was room: nothing lost */
    STAT_EQ(s, curr_items, s0.curr_items);
    unsigned live;
    check_fill_keys(f->c, "ml", n, 3, &live);
    STAT_EQ(s, curr_items, live);
    check_ok(f->c);

    /* grow to 24 MiB: stores reach past the old limit without evicting */
    assert_int_equal(tc_set_mem_limit(f->c, 24 * MIB), 0);
    s = stats(f->c);
    STAT_EQ(s, limit_maxbytes, 24 * MIB);
    STAT_EQ(s, pmem_pages_total, 24);
    uint64_t ev0 = s.evictions;
    unsigned char v[EV_VLEN];
    unsigned m = 0;
    while (s.total_malloced < 20 * MIB && m < 100000) {
        snprintf(key, sizeof(key), "gr%07u", m);
        ev_value(v, m);
        put(f->c, key, v, EV_VLEN, 0, 0);
        m++;
        if (m % 256 == 0)
            s = stats(f->c);
    }
    s = stats(f->c);
    assert_true(s.total_malloced > half);
    STAT_EQ(s, evictions, ev0);
    check_fill_keys(f->c, "ml", n, 3, &live);
    check_ok(f->c);
}

static void
test_slab_reassign(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 32 * MIB;
    fx_reopen(f);
    char key[32];
    int a, b;
    unsigned n = fill_class_pages(f->c, "sa", 4, &a);
    for (unsigned i = 0; i < n; i++)
        if (i % 2 != 0) {
            snprintf(key, sizeof(key), "sa%07u", i);
            assert_int_equal(tc_delete(f->c, key, strlen(key), 0), TC_OK);
        }
    b = store_find_class(f->c, "small", 100);
    assert_true(a != b);
    check_ok(f->c);

    int first = class_first(f->c);
    int ncls = tc_slab_nclasses(f->c);
    /* bad arguments */
    assert_int_equal(tc_slab_reassign(f->c, a, a), -EINVAL);
    assert_int_equal(tc_slab_reassign(f->c, a, first + ncls + 5), -EINVAL);
    assert_int_equal(tc_slab_reassign(f->c, first + ncls + 5, b), -EINVAL);
    /* a class without pages: -ENOENT (find one) */
    int empty = -1;
    for (int i = first; i < first + ncls; i++)
        if (i != a && i != b && class_pages(f->c, i) == 0) {
            empty = i;
            break;
        }
    if (empty >= 0)
        assert_int_equal(tc_slab_reassign(f->c, empty, b), -ENOENT);

    uint32_t pa = class_pages(f->c, a), pb = class_pages(f->c, b);
    struct tc_stats s0 = stats(f->c);
    int rc = tc_slab_reassign(f->c, a, b);
    if (rc != 0 && rc != -EBUSY)
        fail_msg("tc_slab_reassign(%d, %d): %d (%s)", a, b, rc, tc_errmsg());
    /* 0 may mean "scheduled" (memcached) and -EBUSY "not done yet":
     * either way maintenance steps must finish the move */
    unsigned tries = 0;
    while (class_pages(f->c, b) != pb + 1 && tries < 10000) {
        tc_maintain(f->c);
        tries++;
    }
    struct tc_stats s1 = stats(f->c);
    print_message("reassign %d -> %d: rc %d, %u maintenance steps; pages "
                  "%u -> %u and %u -> %u; free pool pages %" PRIu64
                  " -> %" PRIu64 "\n",
                  a, b, rc, tries, pa, class_pages(f->c, a), pb,
                  class_pages(f->c, b), s0.pmem_pages_free, s1.pmem_pages_free);
    assert_int_equal(class_pages(f->c, a), pa - 1);
    struct tc_stats s = stats(f->c);
    STAT_EQ(s, slab_reassign_count, s0.slab_reassign_count + 1);
    STAT_EQ(s, evictions, s0.evictions);
    STAT_EQ(s, curr_items, s0.curr_items);
    unsigned live;
    check_fill_keys(f->c, "sa", n, 2, &live);
    STAT_EQ(s, curr_items, live + 1);
    unsigned char v[100];
    fill_pattern(v, sizeof(v), 1); /* what store_find_class stored */
    check_val(f->c, "small", v, sizeof(v));
    check_ok(f->c);
    /* "Move one page from slab class src to dst": dst owns it now (as in
     * memcached), not the free pool */
    if (class_pages(f->c, b) != pb + 1)
        fail_msg("after tc_slab_reassign(%d, %d): class %d has %u pages, "
                 "expected %u; free pool pages %" PRIu64 " -> %" PRIu64,
                 a, b, b, class_pages(f->c, b), pb + 1, s0.pmem_pages_free,
                 s1.pmem_pages_free);
    STAT_EQ(s, total_malloced, s0.total_malloced);

    /* src -1: the engine picks (the class with the most free chunks) */
    pb = class_pages(f->c, b);
    rc = tc_slab_reassign(f->c, -1, b);
    if (rc != 0 && rc != -EBUSY)
        fail_msg("tc_slab_reassign(-1, %d): %d (%s)", b, rc, tc_errmsg());
    for (tries = 0; class_pages(f->c, b) != pb + 1 && tries < 10000; tries++)
        tc_maintain(f->c);
    assert_int_equal(class_pages(f->c, b), pb + 1);
    check_fill_keys(f->c, "sa", n, 2, &live);
    check_ok(f->c);
}

/* ------------------------------------------------------------- tc_open */

static void
test_open_failures(void **state)
{
    struct fx *f = *state;
    struct tc_config cfg = f->cfg;
    struct tc_cache *c = (struct tc_cache *)0x1;
    char path[256];

    snprintf(path, sizeof(path), "/dev/shm/tc_no_such_dir_%d/x/pool",
             (int)getpid());
    cfg.pool_path = path;
    int rc = tc_open(&cfg, &c);
    print_message("missing dir: %d (%s)\n", rc, tc_errmsg());
    assert_true(rc < 0);
    assert_true(strlen(tc_errmsg()) > 0);

    cfg = f->cfg;
    cfg.pool_size = 4096;
    rc = tc_open(&cfg, &c);
    print_message("pool of 4096 bytes: %d (%s)\n", rc, tc_errmsg());
    assert_int_equal(rc, -EINVAL);
    assert_true(strlen(tc_errmsg()) > 0);
    cfg.pool_size = 5 * MIB; /* under header + 4 pages */
    assert_int_equal(tc_open(&cfg, &c), -EINVAL);
    unlink(f->path);

    /* the smallest accepted pool works */
    cfg.pool_size = 6 * MIB;
    rc = tc_open(&cfg, &f->c);
    if (rc != 0)
        fail_msg("6 MiB pool: %d (%s)", rc, tc_errmsg());
    puts_(f->c, "k", "v");
    check_str(f->c, "k", "v");
    tc_close(f->c);
    f->c = NULL;

    /* reopening the same file works */
    rc = tc_open(&cfg, &f->c);
    if (rc != 0)
        fail_msg("reopen: %d (%s)", rc, tc_errmsg());
    puts_(f->c, "k2", "v2");
    check_str(f->c, "k2", "v2");
    check_ok(f->c);
}

/* ------------------------------------------- model-based random ops */

#define MD_KEYS 48
#define MD_VMAX 600

struct md_item {
    bool present;
    bool numeric_pad; /* last write was incr/decr: padding allowed */
    uint32_t flags;
    uint32_t exptime; /* absolute, 0 never */
    uint64_t cas;
    size_t len;
    unsigned char val[MD_VMAX * 4];
};

struct md {
    struct md_item it[MD_KEYS];
    uint32_t now;
    uint64_t seed_state;
    uint32_t seed;
    int op;
};

static void
md_live(struct md *m, int k)
{
    struct md_item *it = &m->it[k];
    if (it->present && it->exptime != 0 && it->exptime <= m->now)
        it->present = false;
}

static uint32_t
md_abs(const struct md *m, int64_t e)
{
    if (e == 0)
        return 0;
    if (e < 0)
        return 1;
    if (e <= DAYS30)
        return m->now + (uint32_t)e;
    return (uint32_t)e;
}

/* Strict memcached reading: digits only (then spaces if padded). -1 when
 * not numeric, -2 when ambiguous (leading zeros). */
static int
md_parse(const struct md_item *it, uint64_t *out)
{
    size_t n = 0;
    while (n < it->len && it->val[n] >= '0' && it->val[n] <= '9')
        n++;
    if (n == 0)
        return -1;
    for (size_t i = n; i < it->len; i++) {
        if (it->val[i] != ' ')
            return -1;
        if (!it->numeric_pad)
            return -2; /* "12 5": memcached's strtoull reads 12; unstated */
    }
    if (n > 1 && it->val[0] == '0')
        return -2;
    if (n > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = it->val[i] - '0';
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static void
md_set_num(struct md_item *it, uint64_t v)
{
    it->len = (size_t)snprintf((char *)it->val, 24, "%" PRIu64, v);
    it->numeric_pad = true;
}

#define MD_FAIL(m, ...)                                                        \
    do {                                                                       \
        print_message("model test: seed %u, op %d\n", (m)->seed, (m)->op);     \
        fail_msg(__VA_ARGS__);                                                 \
    } while (0)

static void
md_check_get(struct tc_cache *c, struct md *m, int k, const char *key)
{
    static unsigned char buf[MD_VMAX * 4 + 64];
    struct tc_item_info info;
    struct md_item *it = &m->it[k];
    md_live(m, k);
    int rc = tc_get_copy(c, key, strlen(key), buf, sizeof(buf), &info);
    if (!it->present) {
        if (rc != TC_NOT_FOUND)
            MD_FAIL(m, "get %s: %d, model says absent", key, rc);
        return;
    }
    if (rc != TC_OK)
        MD_FAIL(m, "get %s: %d, model says present (%zu bytes)", key, rc,
                it->len);
    if (info.flags != it->flags || info.exptime != it->exptime ||
        info.cas != it->cas)
        MD_FAIL(m,
                "get %s: flags %u exptime %u cas %" PRIu64
                ", model %u %u %" PRIu64,
                key, info.flags, info.exptime, info.cas, it->flags, it->exptime,
                it->cas);
    if (it->numeric_pad) {
        uint64_t want, got;
        struct md_item tmp = *it;
        int mrc = md_parse(&tmp, &want);
        memcpy(tmp.val, buf, info.vlen < sizeof(tmp.val) ? info.vlen : 0);
        tmp.len = info.vlen;
        if (mrc != 0 || md_parse(&tmp, &got) != 0 || got != want)
            MD_FAIL(m, "get %s: counter reads %.*s", key, (int)info.vlen,
                    (const char *)buf);
        /* adopt the engine's exact bytes (padding) */
        memcpy(it->val, buf, info.vlen);
        it->len = info.vlen;
        return;
    }
    if (info.vlen != it->len || memcmp(buf, it->val, it->len) != 0)
        MD_FAIL(m, "get %s: %u bytes differ from the model's %zu", key,
                info.vlen, it->len);
}

static size_t
md_gen_value(struct md *m, unsigned char *v, bool *numeric)
{
    uint64_t r = rng_next(&m->seed_state);
    *numeric = false;
    if (r % 4 == 0) {
        /* a number, no leading zero */
        static const uint64_t edge[] = {
            0, 1, 9, 10, 99, UINT64_MAX, UINT64_MAX - 1, 1000000};
        uint64_t x = (r >> 8) % 3 == 0 ? edge[(r >> 16) % 8]
                                       : rng_next(&m->seed_state) >> (r % 64);
        *numeric = true;
        return (size_t)snprintf((char *)v, 24, "%" PRIu64, x);
    }
    /* no digits, no whitespace: unambiguously not a number */
    size_t len = (size_t)(rng_next(&m->seed_state) % MD_VMAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)rng_next(&m->seed_state);
        if ((b >= '0' && b <= '9') || b == ' ' || (b >= 9 && b <= 13))
            b = 'x';
        v[i] = b;
    }
    return len;
}

static int64_t
md_gen_exptime(struct md *m)
{
    uint64_t r = rng_next(&m->seed_state) % 10;
    if (r < 5)
        return 0;
    if (r < 8)
        return 1 + (int64_t)(rng_next(&m->seed_state) % 6);
    if (r < 9)
        return (int64_t)m->now + 3;
    return -1;
}

static void
test_model_random(void **state)
{
    struct fx *f = *state;
    struct md *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->seed = test_seed();
    m->seed_state = m->seed | 1;
    m->now = T0;
    print_message("model test seed %u (TC_TEST_SEED to replay)\n", m->seed);
    unsigned char v[MD_VMAX + 32];
    char key[16];
    const int nops = 30000;

    for (m->op = 0; m->op < nops; m->op++) {
        int k = (int)(rng_next(&m->seed_state) % MD_KEYS);
        snprintf(key, sizeof(key), "md%d", k);
        size_t kl = strlen(key);
        struct md_item *it = &m->it[k];
        md_live(m, k);
        int op = (int)(rng_next(&m->seed_state) % 100);
        bool numeric;
        uint64_t cas = 0, val = 0;
        int rc, want;

        if (op < 20) { /* set / add / replace */
            enum tc_store_mode mode = op < 12   ? TC_SET
                                      : op < 16 ? TC_ADD
                                                : TC_REPLACE;
            size_t len = md_gen_value(m, v, &numeric);
            uint32_t fl = (uint32_t)rng_next(&m->seed_state);
            int64_t e = md_gen_exptime(m);
            rc = tc_store(f->c, mode, key, kl, v, len, fl, e, 0, &cas);
            want = mode == TC_SET                     ? TC_OK
                   : (mode == TC_ADD) == !it->present ? TC_OK
                                                      : TC_NOT_STORED;
            if (rc != want)
                MD_FAIL(m, "store mode %d %s: %d, model %d", mode, key, rc,
                        want);
            if (rc == TC_OK) {
                it->present = true;
                it->numeric_pad = false;
                it->flags = fl;
                it->exptime = md_abs(m, e);
                it->cas = cas;
                it->len = len;
                memcpy(it->val, v, len);
                md_live(m, k);
            }
        } else if (op < 30) { /* append / prepend */
            bool app = op < 25;
            if (it->present && it->numeric_pad)
                md_check_get(f->c, m, k, key); /* learn the padding */
            size_t len = md_gen_value(m, v, &numeric) % 64;
            rc = tc_store(f->c, app ? TC_APPEND : TC_PREPEND, key, kl, v, len,
                          1, 1, 0, &cas);
            want = it->present ? TC_OK : TC_NOT_STORED;
            if (it->present && it->len + len > sizeof(it->val))
                want = -1; /* model full: accept and resync below */
            if (want == -1) {
                if (rc == TC_OK) {
                    it->present = false; /* unknown; drop from the model */
                    tc_delete(f->c, key, kl, 0);
                }
                continue;
            }
            if (rc != want)
                MD_FAIL(m, "%s %s: %d, model %d", app ? "append" : "prepend",
                        key, rc, want);
            if (rc == TC_OK) {
                if (app) {
                    memcpy(it->val + it->len, v, len);
                } else {
                    memmove(it->val + len, it->val, it->len);
                    memcpy(it->val, v, len);
                }
                it->len += len;
                it->numeric_pad = false;
                it->cas = cas;
            }
        } else if (op < 38) { /* cas */
            bool good = rng_next(&m->seed_state) % 2 == 0;
            uint64_t cin = good ? it->cas : it->cas + 1 + op;
            if (cin == 0)
                cin = 1;
            size_t len = md_gen_value(m, v, &numeric);
            rc = tc_store(f->c, TC_CAS, key, kl, v, len, 5, 0, cin, &cas);
            want = !it->present     ? TC_NOT_FOUND
                   : cin == it->cas ? TC_OK
                                    : TC_EXISTS;
            if (rc != want)
                MD_FAIL(m, "cas %s: %d, model %d", key, rc, want);
            if (rc == TC_OK) {
                it->numeric_pad = false;
                it->flags = 5;
                it->exptime = 0;
                it->cas = cas;
                it->len = len;
                memcpy(it->val, v, len);
            }
        } else if (op < 50) { /* incr / decr */
            bool inc = op < 45;
            uint64_t d = rng_next(&m->seed_state);
            d = d % 3 == 0 ? d : d % 1000;
            if (it->present && it->numeric_pad)
                md_check_get(f->c, m, k, key);
            uint64_t cur = 0;
            int pr = it->present ? md_parse(it, &cur) : 0;
            if (pr == -2)
                continue; /* leading zeros: the header does not say */
            rc = inc ? tc_incr(f->c, key, kl, d, &val, &cas)
                     : tc_decr(f->c, key, kl, d, &val, &cas);
            want = !it->present ? TC_NOT_FOUND
                   : pr != 0    ? TC_NON_NUMERIC
                                : TC_OK;
            if (rc != want)
                MD_FAIL(m, "%s %s by %" PRIu64 ": %d, model %d (%.*s)",
                        inc ? "incr" : "decr", key, d, rc, want,
                        (int)(it->len < 40 ? it->len : 40),
                        (const char *)it->val);
            if (rc == TC_OK) {
                uint64_t nv = inc ? cur + d : (d > cur ? 0 : cur - d);
                if (val != nv)
                    MD_FAIL(m, "%s %s: %" PRIu64 ", model %" PRIu64,
                            inc ? "incr" : "decr", key, val, nv);
                md_set_num(it, nv);
                it->cas = cas;
            }
        } else if (op < 56) { /* delete */
            bool with_cas = rng_next(&m->seed_state) % 3 == 0;
            uint64_t cin = with_cas ? it->cas + (op % 2) : 0;
            if (with_cas && cin == 0)
                cin = 1;
            rc = tc_delete(f->c, key, kl, cin);
            want = !it->present                   ? TC_NOT_FOUND
                   : (cin != 0 && cin != it->cas) ? TC_EXISTS
                                                  : TC_OK;
            if (rc != want)
                MD_FAIL(m, "delete %s cas %" PRIu64 ": %d, model %d", key, cin,
                        rc, want);
            if (rc == TC_OK)
                it->present = false;
        } else if (op < 62) { /* touch / gat */
            int64_t e = md_gen_exptime(m);
            if (op < 59) {
                rc = tc_touch(f->c, key, kl, e);
            } else {
                struct got g = {0};
                rc = tc_gat(f->c, key, kl, e, got_fn, &g);
                if (rc == TC_OK && g.info.exptime != md_abs(m, e) && e >= 0)
                    MD_FAIL(m, "gat %s: exptime %u, model %u", key,
                            g.info.exptime, md_abs(m, e));
            }
            want = it->present ? TC_OK : TC_NOT_FOUND;
            if (rc != want)
                MD_FAIL(m, "touch/gat %s: %d, model %d", key, rc, want);
            if (rc == TC_OK)
                it->exptime = md_abs(m, e);
            md_live(m, k);
        } else if (op < 97) {
            md_check_get(f->c, m, k, key);
        } else if (op < 99) {
            uint32_t adv = (uint32_t)(rng_next(&m->seed_state) % 4);
            tc_clock_advance(adv);
            m->now += adv;
        } else if (rng_next(&m->seed_state) % 8 == 0) {
            assert_int_equal(tc_flush_all(f->c, 0), 0);
            for (int i = 0; i < MD_KEYS; i++)
                m->it[i].present = false;
        }
        if (m->op % 5000 == 4999) {
            for (int i = 0; i < MD_KEYS; i++) {
                snprintf(key, sizeof(key), "md%d", i);
                md_check_get(f->c, m, i, key);
            }
            check_ok(f->c);
        }
    }
    check_ok(f->c);
    free(m);
}

/* ------------------------------------------------------------------ main */

#define TC_TEST(fn)                                                            \
    cmocka_unit_test_prestate_setup_teardown(fn, setup, teardown, #fn)

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST(test_set_get_sizes),
        TC_TEST(test_set_get_chained),
        TC_TEST(test_item_size_max),
        TC_TEST(test_flags_roundtrip),
        TC_TEST(test_key_length),
        TC_TEST(test_add),
        TC_TEST(test_replace),
        TC_TEST(test_append_prepend),
        TC_TEST(test_append_grows_chained),
        TC_TEST(test_cas),
        TC_TEST(test_cas_unique_increasing),
        TC_TEST(test_incr_decr),
        TC_TEST(test_incr_non_numeric),
        TC_TEST(test_incr_cas_flags_expiry),
        TC_TEST(test_delete),
        TC_TEST(test_touch),
        TC_TEST(test_gat),
        TC_TEST(test_expiry_relative),
        TC_TEST(test_expiry_30days),
        TC_TEST(test_expiry_negative),
        TC_TEST(test_flush_all),
        TC_TEST(test_flush_all_delay),
        TC_TEST(test_flush_all_replaces_pending),
        TC_TEST(test_stats_counters),
        TC_TEST(test_stats_reset),
        TC_TEST(test_eviction_clock),
        TC_TEST(test_no_evict_enomem),
        TC_TEST(test_get_copy_prefix),
        TC_TEST(test_maintain_sweep),
        TC_TEST(test_mem_limit),
        TC_TEST(test_slab_reassign),
        TC_TEST(test_model_random),
        cmocka_unit_test_prestate_setup_teardown(
            test_open_failures, setup_noopen, teardown, "test_open_failures"),
    };
    /* TC_TEST_FILTER=<glob> runs only the matching tests */
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}

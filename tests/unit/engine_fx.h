#pragma once
/*
 * Shared fixture and helpers of the engine unit tests (test_engine*.c),
 * which exercise the cache through its public API (src/tiercache.h) against
 * memcached's documented semantics (doc/protocol.txt).
 *
 * Each test opens its own cache on its own pool file under /dev/shm (name
 * holds the pid and the test name), with the background thread off and the
 * clock frozen at T0, and removes the file in teardown. Helpers are static
 * inline so that each test file uses what it needs.
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

#include "flash_fx.h"
#include "seed_fx.h"

#define T0 1700000000u
#ifndef MIB
#define MIB (1024ull * 1024)
#endif
#define DAYS30 TC_EXPTIME_RELATIVE_MAX
/* Bytes in front of the pool's pages (tier/region_layout.h). */
#define REGION_HDR_BYTES (2u * MIB)

/* ---------------------------------------------------------------- fixture */

struct fx {
    struct tc_cache *c;
    struct tc_config cfg;
    char path[192];
};

static inline int
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
static inline void
fx_reopen(struct fx *f)
{
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(fx_open(f), 0);
}

static inline int
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

static inline int
setup(void **state)
{
    return setup_common(state, true);
}

static inline int
setup_noopen(void **state)
{
    return setup_common(state, false);
}

/* The fixture with the slab store named (packed_item_max = 0, whatever
 * the default): for tests of slab internals (chunks and classes, page
 * moves, CLOCK eviction, slab reassign, the slabs' restart), which assume
 * every item is in a slab chunk. */
static inline int
setup_slab(void **state)
{
    int rc = setup_noopen(state);
    if (rc)
        return rc;
    struct fx *f = *state;
    f->cfg.packed_item_max = 0;
    if (fx_open(f) != 0) {
        unlink(f->path);
        free(f);
        return -1;
    }
    return 0;
}

static inline int
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

static inline uint32_t
test_seed(void)
{
    const char *s = getenv("TC_TEST_SEED");
    if (s != NULL && *s != '\0')
        return (uint32_t)strtoul(s, NULL, 0);
    return (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
}

static inline void
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

static inline void
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

static inline int
get_cb(struct tc_cache *c, const char *k, struct got *g, unsigned char *buf,
       size_t cap)
{
    memset(g, 0, sizeof(*g));
    g->buf = buf;
    g->cap = cap;
    return tc_get(c, k, strlen(k), got_fn, g);
}

static inline void
put(struct tc_cache *c, const char *k, const void *v, size_t vlen,
    uint32_t flags, int64_t exptime)
{
    int rc = tc_set(c, k, strlen(k), v, vlen, flags, exptime);
    if (rc != TC_OK)
        fail_msg("set %s (%zu bytes): %d", k, vlen, rc);
}

static inline void
puts_(struct tc_cache *c, const char *k, const char *v)
{
    put(c, k, v, strlen(v), 0, 0);
}

static inline int
store_s(struct tc_cache *c, enum tc_store_mode mode, const char *k,
        const char *v, uint32_t flags, int64_t exptime, uint64_t cas_in,
        uint64_t *cas_out)
{
    return tc_store(c, mode, k, strlen(k), v, strlen(v), flags, exptime, cas_in,
                    cas_out);
}

/* Both retrieval paths return exactly v; returns the item info. */
static inline struct tc_item_info
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

static inline struct tc_item_info
check_str(struct tc_cache *c, const char *k, const char *v)
{
    return check_val(c, k, v, strlen(v));
}

static inline void
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
static inline void
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

static inline struct tc_stats
stats(struct tc_cache *c)
{
    struct tc_stats s;
    memset(&s, 0xff, sizeof(s));
    tc_stats(c, &s);
    return s;
}

static inline void
check_ok(struct tc_cache *c)
{
    int rc = tc_check(c);
    if (rc != 0)
        fail_msg("tc_check: %d (%s)", rc, tc_errmsg());
}

/* Class ids as tc_slab_stats() accepts them (0- or 1-based: the header does
 * not say, so find out). */
static inline int
class_first(struct tc_cache *c)
{
    struct tc_slab_stats ss;
    return tc_slab_stats(c, 0, &ss) == 0 ? 0 : 1;
}

static inline uint64_t
class_used(struct tc_cache *c, int cls)
{
    struct tc_slab_stats ss;
    memset(&ss, 0, sizeof(ss));
    assert_int_equal(tc_slab_stats(c, cls, &ss), 0);
    return ss.used_chunks;
}

static inline uint32_t
class_pages(struct tc_cache *c, int cls)
{
    struct tc_slab_stats ss;
    memset(&ss, 0, sizeof(ss));
    assert_int_equal(tc_slab_stats(c, cls, &ss), 0);
    return ss.total_pages;
}

/* Store key k with a value of vlen and return the class whose used_chunks
 * went up by one. */
static inline int
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

#define STAT_EQ(s, field, want)                                                \
    do {                                                                       \
        if ((s).field != (uint64_t)(want))                                     \
            fail_msg("stats." #field " = %" PRIu64 ", expected %" PRIu64,      \
                     (uint64_t)(s).field, (uint64_t)(want));                   \
    } while (0)

#define TC_TEST(fn)                                                            \
    cmocka_unit_test_prestate_setup_teardown(fn, setup, teardown, #fn)
/* a test of slab internals: setup_slab's fixture */
#define TC_TEST_SLAB(fn)                                                       \
    cmocka_unit_test_prestate_setup_teardown(fn, setup_slab, teardown, #fn)

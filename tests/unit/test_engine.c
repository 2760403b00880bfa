/*
 * Engine unit tests: storage, retrieval, incr/decr, delete, touch, gat.
 * Fixture and helpers: engine_fx.h.
 */

#include "tests/unit/engine_fx.h"

#include "src/engine/item.h"

#include <pthread.h>

/* ------------------------------------------------------------- set / get */

/* The key compare of a lookup (item_key_equals) at every key length up to
 * 40, across its short compares (8-byte loads from both ends): the same
 * key matches; a key differing in any one byte, or one byte shorter, or a
 * chunk that is no head item, does not. */
static void
test_key_compare(void **state)
{
    (void)state;
    union {
        struct item_hdr h;
        char bytes[sizeof(struct item_hdr) + 64];
    } u;
    char key[64];

    for (uint32_t n = 1; n <= 40; n++) {
        memset(&u, 0, sizeof(u));
        u.h.kind = ITEM_KIND_HEAD;
        u.h.klen = (uint8_t)n;
        for (uint32_t i = 0; i < n; i++)
            key[i] = (char)('a' + (i * 7 + n) % 26);
        memcpy(u.bytes + sizeof(struct item_hdr), key, n);
        assert_true(item_key_equals(&u.h, key, n));
        for (uint32_t i = 0; i < n; i++) {
            key[i] ^= 0x20;
            assert_false(item_key_equals(&u.h, key, n));
            key[i] ^= 0x20;
        }
        if (n > 1)
            assert_false(item_key_equals(&u.h, key, n - 1));
        u.h.kind = ITEM_KIND_TAIL;
        assert_false(item_key_equals(&u.h, key, n));
    }
}

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

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A key's CAS only grows, and no two stores hand out the same CAS. CAS
 * values of different keys are not ordered in time: a packed item's CAS
 * derives from its segment's block (doc/design/small-items.md, "Risks"),
 * so a store into an older open segment gets a lower CAS than one a
 * moment before into a newer segment or a slab chunk. */
static void
test_cas_unique_increasing(void **state)
{
    enum { NOPS = 2000, NKEYS = 97 };
    struct fx *f = *state;
    /* last[NKEYS] is the counter "n" */
    uint64_t last[NKEYS + 1] = {0}, cas = 0, val;
    static uint64_t seen[NOPS];
    unsigned nseen = 0;
    char key[16];

    puts_(f->c, "n", "0");
    for (int i = 0; i < NOPS; i++) {
        unsigned k = (unsigned)(i % NKEYS);
        snprintf(key, sizeof(key), "k%u", k);
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
            k = NKEYS;
            rc = tc_incr(f->c, "n", 1, 1, &val, &cas);
        } else {
            struct tc_item_info info;
            unsigned char b[4];
            if (tc_get_copy(f->c, key, strlen(key), b, 0, &info) != TC_OK)
                continue;
            assert_int_equal(info.cas, last[k]);
            rc = store_s(f->c, TC_CAS, key, "c", 0, 0, info.cas, &cas);
        }
        assert_int_equal(rc, TC_OK);
        if (cas <= last[k])
            fail_msg("op %d (%d): key %u cas %" PRIu64 " after %" PRIu64, i, op,
                     k, cas, last[k]);
        last[k] = cas;
        seen[nseen++] = cas;
    }
    qsort(seen, nseen, sizeof(seen[0]), cmp_u64);
    for (unsigned j = 1; j < nseen; j++)
        if (seen[j] == seen[j - 1])
            fail_msg("cas %" PRIu64 " handed out twice", seen[j]);
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

/* The index starts at expected_items and doubles as sets fill it: every
 * key stays readable while it grows (writers move buckets as they go),
 * and the maintenance step ends a doubling writes left unfinished. */
#define GROW_KEYS 30000

static void
test_index_grows(void **state)
{
    struct fx *f = *state;
    char key[32], val[32];

    f->cfg.expected_items = 1000; /* 256 buckets */
    assert_int_equal(fx_open(f), 0);
    struct tc_stats st = stats(f->c);
    uint64_t first = st.index_buckets;
    assert_int_equal(first, 256);
    for (unsigned i = 0; i < GROW_KEYS; i++) {
        snprintf(key, sizeof(key), "grow:%u", i);
        snprintf(val, sizeof(val), "v%u", i * 7);
        puts_(f->c, key, val);
        /* an earlier key, while a doubling may be under way */
        if (i % 97 == 0) {
            unsigned j = i / 2;
            snprintf(key, sizeof(key), "grow:%u", j);
            snprintf(val, sizeof(val), "v%u", j * 7);
            check_str(f->c, key, val);
        }
    }
    /* bounded: each step moves up to 65,536 buckets */
    for (int i = 0; i < 100 && stats(f->c).index_growing; i++)
        tc_maintain(f->c);
    tc_maintain(f->c); /* frees the old tables after a grace period */
    st = stats(f->c);
    print_message(
        "index: %" PRIu64 " buckets, %" PRIu64 " overflow, %" PRIu64 " bytes\n",
        st.index_buckets, st.index_overflow_buckets, st.dram_index_bytes);
    assert_false(st.index_growing);
    assert_int_equal(st.curr_items, GROW_KEYS);
    /* ~68% full at most: 30,000 keys need 30,000 / 4.1 buckets */
    assert_true(st.index_buckets >= 4096);
    assert_true(st.index_buckets <= 16384);
    /* the old tables are gone after tc_maintain's grace period: about
     * one table and its quarter reserve */
    assert_true(st.dram_index_bytes <= st.index_buckets * 64 * 5 / 4 +
                                           st.index_overflow_buckets * 64 +
                                           64 * 1024);
    for (unsigned i = 0; i < GROW_KEYS; i++) {
        snprintf(key, sizeof(key), "grow:%u", i);
        snprintf(val, sizeof(val), "v%u", i * 7);
        check_str(f->c, key, val);
    }
    check_miss(f->c, "grow:never");
    check_ok(f->c);
}

/* Writers on two threads grow the index while this one reads keys they
 * stored before (TSan: the mover's key reads against the writers). */
struct grow_writer {
    struct tc_cache *c;
    unsigned id;
    int err;
};

static void *
grow_writer_run(void *arg)
{
    struct grow_writer *w = arg;
    char key[32], val[32];

    for (unsigned i = 0; i < GROW_KEYS / 2; i++) {
        snprintf(key, sizeof(key), "gw%u:%u", w->id, i);
        snprintf(val, sizeof(val), "%u.%u", w->id, i);
        if (tc_set(w->c, key, strlen(key), val, strlen(val), 0, 0) != TC_OK)
            w->err = 1;
    }
    tc_thread_unregister(w->c);
    return NULL;
}

static void
test_index_grows_threads(void **state)
{
    struct fx *f = *state;
    struct grow_writer w[2];
    pthread_t th[2];
    char key[32], val[32];

    f->cfg.expected_items = 1000;
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "base:%u", i);
        puts_(f->c, key, key);
    }
    for (unsigned i = 0; i < 2; i++) {
        w[i] = (struct grow_writer){f->c, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, grow_writer_run, &w[i]),
                         0);
    }
    /* the base keys are never rewritten: every read finds them */
    for (unsigned r = 0; r < 20; r++)
        for (unsigned i = 0; i < 2000; i += 3) {
            snprintf(key, sizeof(key), "base:%u", i);
            check_str(f->c, key, key);
        }
    for (unsigned i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].err, 0);
    }
    for (int i = 0; i < 100 && stats(f->c).index_growing; i++)
        tc_maintain(f->c);
    assert_true(stats(f->c).index_buckets >= 4096);
    for (unsigned id = 0; id < 2; id++)
        for (unsigned i = 0; i < GROW_KEYS / 2; i++) {
            snprintf(key, sizeof(key), "gw%u:%u", id, i);
            snprintf(val, sizeof(val), "%u.%u", id, i);
            check_str(f->c, key, val);
        }
    check_ok(f->c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_compare),
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
        cmocka_unit_test_prestate_setup_teardown(test_index_grows, setup_noopen,
                                                 teardown, "test_index_grows"),
        cmocka_unit_test_prestate_setup_teardown(test_index_grows_threads,
                                                 setup_noopen, teardown,
                                                 "test_index_grows_threads"),
    };
    /* TC_TEST_FILTER=<glob> runs only the matching tests */
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}

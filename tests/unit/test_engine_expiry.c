/*
 * Engine unit tests: expiry rules, flush_all, stats counters.
 * Fixture and helpers: engine_fx.h.
 */

#include "tests/unit/engine_fx.h"

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

/* The first command after a delayed flush's time is a set (which looks at
 * the index no earlier than its publication): the flush takes effect
 * before the new item gets its CAS, so the item survives it. Found by
 * tests/fuzz/fuzz_engine.c. */
static void
test_flush_all_delay_then_set(void **state)
{
    struct fx *f = *state;
    puts_(f->c, "a", "1");
    assert_int_equal(tc_flush_all(f->c, 10), 0);
    tc_clock_advance(10);
    puts_(f->c, "b", "2"); /* the first command at the flush time */
    check_miss(f->c, "a");
    check_str(f->c, "b", "2");

    /* the same with an explicit CAS (meta E), which lifts the counter */
    assert_int_equal(tc_flush_all(f->c, 5), 0);
    tc_clock_advance(5);
    struct tc_store_opts o = {.cas_new = 1u << 30};
    assert_int_equal(tc_store_ex(f->c, TC_SET, "c", 1, "3", 1, 0, 0, &o, NULL),
                     TC_OK);
    check_miss(f->c, "b");
    check_str(f->c, "c", "3");
    check_ok(f->c);
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

/* On the slabs (TC_TEST_SLAB): a same-size replace keeps `bytes`, which a
 * packed rewrite carrying its own CAS (8 bytes more) does not. */
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

/* The sweep visits packed items too: those of sealed segments that
 * expired leave the index, counted as the slab sweep's are. */
static void
test_sweep_packed(void **state)
{
    struct fx *f = *state;
    f->cfg.packed_item_max = 1024;
    fx_reopen(f);
    char k[24], v[100];
    const unsigned n = 12000; /* more than a segment (about 8,455) */
    memset(v, 'x', sizeof(v));
    for (unsigned i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "sw%06u", i);
        put(f->c, k, v, sizeof(v), 0, i < 10000 ? 10 : 0);
    }
    /* ten read before they expire: not unfetched */
    for (unsigned i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "sw%06u", i);
        check_val(f->c, k, v, sizeof(v));
    }
    struct tc_stats s = stats(f->c);
    assert_true(s.packed_items == n);
    assert_true(s.packed_segments >= 2);
    tc_clock_advance(11);
    uint64_t gone = 0;
    for (unsigned step = 0; step < 64; step++) {
        tc_maintain(f->c);
        s = stats(f->c);
        if (n - s.packed_items == gone && gone > 0)
            break;
        gone = n - s.packed_items;
    }
    /* at least the first segment's (sealed) expired items are gone: the
     * TTL-10 items have segments of their own (TTL bucket 1), so the
     * sealed one goes whole, decided in DRAM (packed_segments_expired);
     * the open segment's wait for the next reader or their segment's end */
    assert_true(gone >= 8000);
    assert_true(gone <= 10000);
    assert_true(s.packed_segments_expired >= 1);
    STAT_EQ(s, expired_unfetched, gone - 10);
    STAT_EQ(s, packed_items, n - gone);
    STAT_EQ(s, curr_items, n - gone);
    STAT_EQ(s, evictions, 0);
    check_miss(f->c, "sw000000");
    snprintf(k, sizeof(k), "sw%06u", n - 1);
    check_val(f->c, k, v, sizeof(v));
    check_ok(f->c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST(test_expiry_relative),
        TC_TEST(test_expiry_30days),
        TC_TEST(test_expiry_negative),
        TC_TEST(test_flush_all),
        TC_TEST(test_flush_all_delay),
        TC_TEST(test_flush_all_delay_then_set),
        TC_TEST(test_flush_all_replaces_pending),
        TC_TEST_SLAB(test_stats_counters),
        TC_TEST(test_stats_reset),
        TC_TEST(test_sweep_packed),
    };
    /* TC_TEST_FILTER=<glob> runs only the matching tests */
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("engine-expiry", tests, NULL, NULL);
}

/*
 * Restart and the DRAM hot pool: what a crash loses with it never comes
 * back as an older PMEM copy, and a clean close writes every item held
 * there back to the pool first, or loses it when the pool is full
 * (restart_fx.h).
 */

#include "restart_fx.h"

#include <sys/mman.h>

/* A key promoted to the DRAM hot pool: its newest value lives in DRAM,
 * lost at a crash; the older PMEM copies it replaced must not come back
 * in its place (a miss is right, an old value is not). A key demoted back
 * to PMEM comes back with its latest value. */
static void
hot_work(struct fx *f, struct truth *t)
{
    (void)t;
    tc_maintain(f->c);
    for (int i = 0; i < 200; i++)
        puts_(f->c, "hot", "old");
    tc_maintain(f->c); /* "hot" is hot: its next write goes to DRAM */
    puts_(f->c, "hot", "dram");
    assert_true(stats(f->c).hotkey_current == 1);
    tc_maintain(f->c);
    for (int i = 0; i < 200; i++)
        puts_(f->c, "warm", "old");
    tc_maintain(f->c);
    puts_(f->c, "warm", "dram");
    tc_set_hot_write_rate(f->c, 1000000000);
    puts_(f->c, "hot", "newest"); /* still in DRAM until the next step */
    tc_maintain(f->c);            /* both cool: moved back to PMEM */
    puts_(f->c, "hot", "last");   /* a PMEM write again */
    tc_set_hot_write_rate(f->c, 10);
    tc_maintain(f->c);
    for (int i = 0; i < 200; i++)
        puts_(f->c, "again", "old");
    tc_maintain(f->c);
    puts_(f->c, "again", "in-dram"); /* dies with the process */
    assert_true(stats(f->c).hotkey_current >= 1);
}

static void
test_hot_pool_no_resurrection(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;

    f->cfg.hot_pool_size = 1 * MIB;
    f->cfg.hot_write_rate = 10;
    f->cfg.hotkey_window = 1;
    f->cfg.hotkey_sample = 1;
    f->cfg.hotkey_k = 16;
    run_child(f, t, hot_work);
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    check_str(f->c, "hot", "last");
    check_str(f->c, "warm", "dram");
    check_miss(f->c, "again"); /* its DRAM copy died; "old" must not */
    assert_int_equal(tc_check(f->c), 0);
    munmap(t, sizeof(*t));
}

/* The hot-pool settings of the tests below: a key written 10 times a
 * second is hot, judged each tc_maintain. */
static void
hot_cfg(struct fx *f)
{
    f->cfg.hot_pool_size = 1 * MIB;
    f->cfg.hot_write_rate = 10;
    f->cfg.hotkey_window = 1;
    f->cfg.hotkey_sample = 1;
    f->cfg.hotkey_k = 16;
}

#define HOT_KEYS 8

/* Make keys hot, then give each a last value, flags and expiry while it
 * is held in DRAM; cas[] is what each store answered. */
static void
hot_keys_in_dram(struct fx *f, uint64_t cas[HOT_KEYS])
{
    char k[16], v[32];
    tc_maintain(f->c);
    for (int n = 0; n < 100; n++) {
        for (unsigned i = 0; i < HOT_KEYS; i++) {
            snprintf(k, sizeof(k), "hkey%06u", i);
            puts_(f->c, k, "old");
        }
    }
    tc_maintain(f->c); /* all hot: their next writes go to DRAM */
    uint64_t before = stats(f->c).hot_pool_bytes;
    for (unsigned i = 0; i < HOT_KEYS; i++) {
        snprintf(k, sizeof(k), "hkey%06u", i);
        snprintf(v, sizeof(v), "latest-%u", i);
        assert_int_equal(
            store_s(f->c, TC_SET, k, v, 100 + i, 1000 + i, 0, &cas[i]), TC_OK);
    }
    assert_true(stats(f->c).hot_pool_bytes > before);
    struct tc_hotkey hk[16];
    int n = tc_hotkeys(f->c, false, hk, 16);
    unsigned in_dram = 0;
    for (int i = 0; i < n; i++)
        if (hk[i].klen == 10 && memcmp(hk[i].key, "hkey", 4) == 0)
            in_dram += hk[i].in_dram;
    assert_int_equal(in_dram, HOT_KEYS);
}

static void
hot_keys_check(struct fx *f, const uint64_t cas[HOT_KEYS])
{
    char k[16], v[32];
    for (unsigned i = 0; i < HOT_KEYS; i++) {
        snprintf(k, sizeof(k), "hkey%06u", i);
        snprintf(v, sizeof(v), "latest-%u", i);
        struct tc_item_info ii = check_str(f->c, k, v);
        assert_int_equal(ii.flags, 100 + i);
        assert_int_equal(ii.exptime, T0 + 1000 + i);
        assert_true(ii.cas == cas[i]);
    }
}

/* The hot pool at a clean close: every item held there is written back to
 * the pool first, so the scan finds it and it comes back with its
 * latest value, flags, expiry and CAS, never an older PMEM copy. */
static void
test_saved_index_hot_pool(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);
    uint64_t cas[HOT_KEYS];

    hot_cfg(f);
    f->cfg.restart_file = meta;
    assert_int_equal(fx_open(f), 0);
    hot_work(f, t); /* "again" is in DRAM at its end */
    hot_keys_in_dram(f, cas);
    tc_close(f->c);
    f->c = NULL;
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    assert_int_equal(info.dropped, 0);
    check_str(f->c, "hot", "last");
    check_str(f->c, "warm", "dram");
    check_str(f->c, "again", "in-dram");
    hot_keys_check(f, cas);
    assert_int_equal(stats(f->c).hot_pool_bytes, 0);
    assert_int_equal(tc_check(f->c), 0);
    /* and a scan finds them the same (no saved state this time) */
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
    f->cfg.restart_file = NULL;
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_null(strstr(info.reason, "with the saved state"));
    check_str(f->c, "again", "in-dram");
    hot_keys_check(f, cas);
    assert_int_equal(tc_check(f->c), 0);
    tc_close(f->c);
    f->c = NULL;
    munmap(t, sizeof(*t));
}

/* A DRAM item that expired before the close is not written back; with no
 * room in a full pool (evictions off) a hot item stays in DRAM and is
 * lost at the close (one log line), and nothing older comes back in its
 * place; the rest of the pool comes back. */
static void
test_saved_index_hot_pool_full(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;
    const char *meta = meta_path(f);
    char k[32];
    uint64_t cas[HOT_KEYS];

    hot_cfg(f);
    f->cfg.pool_size = 8 * MIB;
    f->cfg.evict = false;
    f->cfg.packed_item_max = 0; /* no slab chunk left for a demotion */
    f->cfg.restart_file = meta;
    assert_int_equal(fx_open(f), 0);
    hot_keys_in_dram(f, cas);
    /* "short" in DRAM too, expired by the close */
    tc_maintain(f->c);
    for (int n = 0; n < 200; n++)
        puts_(f->c, "short", "old");
    tc_maintain(f->c);
    assert_int_equal(store_s(f->c, TC_SET, "short", "new", 0, 10, 0, NULL),
                     TC_OK);
    /* fill the pool with items of the hot items' size, so that no chunk
     * is left for their demotion */
    unsigned stored = 0;
    for (unsigned i = 0; i < 1000000; i++) {
        snprintf(k, sizeof(k), "fill%06u", i);
        int rc = tc_set(f->c, k, strlen(k), "latest-0", 8, 0, 0);
        if (rc == -ENOMEM)
            break;
        assert_int_equal(rc, TC_OK);
        stored++;
    }
    assert_true(stored > 0);
    tc_clock_set(T0 + 20);
    tc_close(f->c);
    f->c = NULL;
    reopen(f, &info);
    assert_string_equal(info.reason, "with the saved state");
    check_miss(f->c, "short");
    for (unsigned i = 0; i < HOT_KEYS; i++) {
        snprintf(k, sizeof(k), "hkey%06u", i);
        check_miss(f->c, k); /* lost, and its "old" does not come back */
    }
    for (unsigned i = 0; i < stored; i++) {
        snprintf(k, sizeof(k), "fill%06u", i);
        check_str(f->c, k, "latest-0");
    }
    assert_int_equal(tc_check(f->c), 0);
    close_clean(f, meta, NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_hot_pool_no_resurrection),
        TC_TEST_NOOPEN(test_saved_index_hot_pool),
        TC_TEST_NOOPEN(test_saved_index_hot_pool_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

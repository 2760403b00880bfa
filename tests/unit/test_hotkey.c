/*
 * Unit tests for src/engine/hotkey.c through the public API: a key written
 * often is promoted into the DRAM hot pool and demoted when it cools; every
 * operation (get, touch, gat, append, incr, cas, delete, flush, expiry)
 * behaves the same on a DRAM item, tc_check() agrees with the stats after
 * each; a full pool leaves keys in PMEM; and a stress run moves hot keys in
 * and out while writers and readers check every value they see.
 */
#include "engine_fx.h"

#include <pthread.h>
#include <stdatomic.h>

static void
hot_config(struct fx *f)
{
    f->cfg.hot_pool_size = 1 * MIB;
    f->cfg.hot_write_rate = 10;
    f->cfg.hotkey_window = 1;
    f->cfg.hotkey_sample = 1;
    f->cfg.hotkey_k = 16;
}

static int
setup_hot(void **state)
{
    int rc = setup_noopen(state);
    if (rc)
        return rc;
    struct fx *f = *state;
    hot_config(f);
    return fx_open(f);
}

/* Write k n times with value v, then one maintenance step: k is hot. The
 * step before the writes starts a rate interval at the test clock's now,
 * so that the writes count as done in one instant. */
static void
heat(struct tc_cache *c, const char *k, const char *v, int n)
{
    tc_maintain(c);
    for (int i = 0; i < n; i++)
        puts_(c, k, v);
    tc_maintain(c);
}

static bool
in_dram(struct tc_cache *c, const char *k)
{
    struct tc_hotkey hk[16];
    int n = tc_hotkeys(c, false, hk, 16);
    for (int i = 0; i < n; i++)
        if (hk[i].klen == strlen(k) && memcmp(hk[i].key, k, hk[i].klen) == 0)
            return hk[i].in_dram;
    return false;
}

static void
test_promote_demote(void **state)
{
    struct fx *f = *state;
    struct tc_cache *c = f->c;

    puts_(c, "cold", "once");
    heat(c, "hot", "v0", 200);
    assert_int_equal(stats(c).hotkey_current, 0); /* hot, not yet moved */
    puts_(c, "hot", "v1"); /* the next write goes to DRAM */
    struct tc_stats s = stats(c);
    assert_int_equal(s.hotkey_current, 1);
    assert_int_equal(s.hotkey_promotions, 1);
    assert_int_equal(s.hotkey_pmem_bytes_saved, 2);
    assert_true(s.hot_pool_bytes > 0);
    assert_int_equal(s.curr_items, 2);
    check_str(c, "hot", "v1");
    check_str(c, "cold", "once");
    check_ok(c);

    /* the view lists it first, in DRAM, with a rate near 200 + 1 / s */
    struct tc_hotkey hk[16];
    tc_maintain(c);
    int n = tc_hotkeys(c, false, hk, 16);
    assert_true(n >= 1);
    assert_int_equal(hk[0].klen, 3);
    assert_memory_equal(hk[0].key, "hot", 3);
    assert_true(hk[0].in_dram);
    assert_true(hk[0].write_rate > 10);
    assert_false(in_dram(c, "cold"));

    /* more writes stay in DRAM: no more promotions, bytes saved grow */
    for (int i = 0; i < 50; i++)
        puts_(c, "hot", "v2");
    s = stats(c);
    assert_int_equal(s.hotkey_promotions, 1);
    assert_int_equal(s.hotkey_pmem_bytes_saved, 2 + 50 * 2);
    check_ok(c);

    /* it cools: the next maintenance step moves it back, CAS kept */
    struct tc_item_info before = check_str(c, "hot", "v2");
    tc_set_hot_write_rate(c, 1000000000);
    tc_maintain(c);
    s = stats(c);
    assert_int_equal(s.hotkey_current, 0);
    assert_int_equal(s.hotkey_demotions, 1);
    assert_int_equal(s.curr_items, 2);
    struct tc_item_info after = check_str(c, "hot", "v2");
    assert_int_equal(before.cas, after.cas);
    check_ok(c);
    tc_maintain(c); /* the DRAM copy is freed after the grace period */
    assert_int_equal(stats(c).hot_pool_bytes, 0);
}

static void
test_ops_on_dram_item(void **state)
{
    struct fx *f = *state;
    struct tc_cache *c = f->c;
    uint64_t cas, v;

    heat(c, "k", "1", 100);
    puts_(c, "k", "10");
    assert_int_equal(stats(c).hotkey_current, 1);

    /* a copy without a description reads the DRAM item and marks it
     * fetched (the touch of a DRAM item, with no slab word) */
    struct tc_get_opts peek = {.no_bump = true, .no_win = true};
    struct got pg;
    memset(&pg, 0, sizeof(pg));
    assert_int_equal(tc_get_ex(c, "k", 1, &peek, got_fn, &pg), TC_OK);
    assert_false(pg.info.fetched);
    char cb[8] = {0};
    assert_int_equal(tc_get_copy(c, "k", 1, cb, sizeof(cb), NULL), TC_OK);
    assert_memory_equal(cb, "10", 3);
    memset(&pg, 0, sizeof(pg));
    assert_int_equal(tc_get_ex(c, "k", 1, &peek, got_fn, &pg), TC_OK);
    assert_true(pg.info.fetched);
    assert_int_equal(stats(c).hotkey_current, 1);

    /* incr / decr keep it in DRAM */
    assert_int_equal(tc_incr(c, "k", 1, 5, &v, NULL), TC_OK);
    assert_int_equal(v, 15);
    assert_int_equal(tc_decr(c, "k", 1, 3, &v, &cas), TC_OK);
    assert_int_equal(v, 12);
    check_num(c, "k", 12);
    assert_int_equal(stats(c).hotkey_current, 1);
    check_ok(c);

    /* cas: a stale one fails, the right one works */
    assert_int_equal(store_s(c, TC_CAS, "k", "x", 0, 0, cas + 100, NULL),
                     TC_EXISTS);
    assert_int_equal(store_s(c, TC_CAS, "k", "abc", 7, 0, cas, NULL), TC_OK);
    /* append / prepend keep flags */
    assert_int_equal(store_s(c, TC_APPEND, "k", "def", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(store_s(c, TC_PREPEND, "k", "<", 0, 0, 0, NULL), TC_OK);
    struct tc_item_info info = check_str(c, "k", "<abcdef");
    assert_int_equal(info.flags, 7);
    assert_int_equal(stats(c).hotkey_current, 1);
    check_ok(c);

    /* touch and gat on the DRAM item, then expiry */
    assert_int_equal(tc_touch(c, "k", 1, 100), TC_OK);
    info = check_str(c, "k", "<abcdef");
    assert_int_equal(info.exptime, T0 + 100);
    struct got g;
    unsigned char buf[16];
    memset(&g, 0, sizeof(g));
    g.buf = buf;
    g.cap = sizeof(buf);
    assert_int_equal(tc_gat(c, "k", 1, 50, got_fn, &g), TC_OK);
    assert_int_equal(g.info.exptime, T0 + 50);
    tc_clock_advance(51);
    check_miss(c, "k");
    struct tc_stats s = stats(c);
    assert_int_equal(s.hotkey_current, 0);
    assert_int_equal(s.curr_items, 0);
    check_ok(c);

    /* delete */
    tc_set_hot_write_rate(c, 10);
    heat(c, "d", "x", 100);
    puts_(c, "d", "y");
    assert_int_equal(stats(c).hotkey_current, 1);
    assert_int_equal(tc_delete(c, "d", 1, 0), TC_OK);
    check_miss(c, "d");
    assert_int_equal(stats(c).hotkey_current, 0);
    check_ok(c);

    /* flush: the maintenance step removes the flushed DRAM item */
    heat(c, "f", "x", 100);
    puts_(c, "f", "y");
    assert_int_equal(stats(c).hotkey_current, 1);
    assert_int_equal(tc_flush_all(c, 0), TC_OK);
    tc_maintain(c);
    s = stats(c);
    assert_int_equal(s.hotkey_current, 0);
    assert_int_equal(s.curr_items, 0);
    check_miss(c, "f");
    check_ok(c);

    /* expiry without a reader: the maintenance step removes it */
    heat(c, "e", "x", 100);
    assert_int_equal(tc_set(c, "e", 1, "y", 1, 0, 10), TC_OK);
    assert_int_equal(stats(c).hotkey_current, 1);
    tc_clock_advance(11);
    tc_maintain(c);
    s = stats(c);
    assert_int_equal(s.hotkey_current, 0);
    assert_int_equal(s.curr_items, 0);
    check_ok(c);
}

static void
test_pool_full(void **state)
{
    struct fx *f = *state;
    f->cfg.hot_pool_size = 2048; /* room for a handful of small items */
    fx_reopen(f);
    struct tc_cache *c = f->c;
    char k[16], v[64];

    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 40; i++) {
            snprintf(k, sizeof(k), "k%d", i);
            for (int j = 0; j < 30; j++)
                puts_(c, k, "warm");
        }
        tc_maintain(c);
    }
    for (int i = 0; i < 40; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        snprintf(v, sizeof(v), "value-%d-%040d", i, i);
        puts_(c, k, v);
    }
    struct tc_stats s = stats(c);
    assert_true(s.hotkey_current > 0);
    assert_true(s.hotkey_current < 40);
    assert_true(s.hot_pool_bytes <= 2048);
    assert_int_equal(s.curr_items, 40);
    for (int i = 0; i < 40; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        snprintf(v, sizeof(v), "value-%d-%040d", i, i);
        check_str(c, k, v);
    }
    check_ok(c);
}

static void
test_off(void **state)
{
    struct fx *f = *state;
    f->cfg.hot_pool_size = 0;
    fx_reopen(f);
    struct tc_hotkey hk[4];
    heat(f->c, "k", "v", 100);
    puts_(f->c, "k", "v");
    assert_int_equal(tc_hotkeys(f->c, false, hk, 4), 0);
    struct tc_stats s = stats(f->c);
    assert_int_equal(s.hotkey_current, 0);
    assert_int_equal(s.hotkey_promotions, 0);
    assert_int_equal(s.hot_pool_bytes, 0);
    check_ok(f->c);
}

/* With the test clock set, a write rate is counted over the time the test
 * moves on, not over how long its steps took: 200 writes in a frozen step
 * (counted as 1 ms) rate about 200/s; two seconds on, the rate has decayed
 * by e^-2 and the key, below half the threshold, is demoted. */
static void
test_rates_follow_test_clock(void **state)
{
    struct fx *f = *state;
    struct tc_cache *c = f->c;
    struct tc_hotkey hk[4];

    heat(c, "k", "v", 200);
    assert_int_equal(tc_hotkeys(c, false, hk, 4), 1);
    assert_true(hk[0].write_rate > 199 && hk[0].write_rate < 201);
    puts_(c, "k", "v"); /* promoted */
    assert_true(in_dram(c, "k"));
    tc_set_hot_write_rate(c, 100);
    tc_clock_advance(2);
    tc_maintain(c);
    assert_int_equal(tc_hotkeys(c, false, hk, 4), 1);
    /* (200 * 0.999 + 1) * (1 - e^-2) / 2 */
    assert_true(hk[0].write_rate > 86 && hk[0].write_rate < 87);
    assert_true(in_dram(c, "k")); /* above half the threshold: stays */
    tc_clock_advance(2);
    tc_maintain(c);
    assert_int_equal(stats(c).hotkey_demotions, 1);
    assert_false(in_dram(c, "k"));
    check_str(c, "k", "v");
    check_ok(c);
}

/* ---------------------------------------------------------------- stress */

#define SKEYS 8
#define SWRITES 4000
/* Writers go on past SWRITES until the mover has seen a key promoted and
 * one demoted, or this many seconds have passed: how many moves fit in
 * SWRITES writes depends on the scheduler. */
#define SMOVE_LIMIT_S 60

struct sctx {
    struct tc_cache *c;
    unsigned id;
    _Atomic bool stop;
    _Atomic bool *moved; /* shared: set by the mover */
    _Atomic int failures;
    char msg[160];
};

static double
mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A value names its key and carries a counter and a check byte, so a reader
 * can tell a whole value of the right key from anything else. */
static int
make_val(char *buf, size_t cap, int key, unsigned ctr)
{
    unsigned sum = (unsigned)key * 31u + ctr * 7u;
    return snprintf(buf, cap, "key%d:%u:%u:%0*d", key, ctr, sum % 97,
                    (int)(ctr % 40), 0);
}

static bool
val_ok(const char *buf, size_t len, int key)
{
    char copy[128];
    int k;
    unsigned ctr, sum;
    if (len == 0 || len >= sizeof(copy))
        return false;
    memcpy(copy, buf, len);
    copy[len] = '\0';
    if (sscanf(copy, "key%d:%u:%u:", &k, &ctr, &sum) != 3 || k != key)
        return false;
    char want[128];
    int n = make_val(want, sizeof(want), key, ctr);
    return (size_t)n == len && memcmp(want, copy, len) == 0;
}

static void
fail_once(struct sctx *s, const char *what, int key)
{
    if (atomic_fetch_add_explicit(&s->failures, 1, memory_order_relaxed) == 0)
        snprintf(s->msg, sizeof(s->msg), "%s key%d", what, key);
}

static void *
writer_main(void *arg)
{
    struct sctx *s = arg;
    char k[16], v[128], buf[128];
    double end = mono_s() + SMOVE_LIMIT_S;
    for (unsigned i = 0;
         i < SWRITES ||
         (!atomic_load_explicit(s->moved, memory_order_acquire) &&
          mono_s() < end);
         i++) {
        int key = (int)((i * 7 + s->id) % SKEYS);
        snprintf(k, sizeof(k), "key%d", key);
        int n = make_val(v, sizeof(v), key, i);
        if (tc_set(s->c, k, strlen(k), v, (size_t)n, 0, 0) != TC_OK)
            fail_once(s, "set failed", key);
        struct tc_item_info info;
        int rc = tc_get_copy(s->c, k, strlen(k), buf, sizeof(buf), &info);
        if (rc != TC_OK)
            fail_once(s, "lost", key);
        else if (!val_ok(buf, info.vlen, key))
            fail_once(s, "bad value", key);
    }
    return NULL;
}

static void *
mover_main(void *arg)
{
    struct sctx *s = arg;
    for (unsigned i = 0;
         !atomic_load_explicit(&s->stop, memory_order_acquire) && i < 100000;
         i++) {
        /* alternately everything hot and nothing hot */
        tc_set_hot_write_rate(s->c, i % 2 ? 1000000000 : 1);
        tc_maintain(s->c);
        struct tc_stats st;
        tc_stats(s->c, &st);
        if (st.hotkey_promotions > 0 && st.hotkey_demotions > 0)
            atomic_store_explicit(s->moved, true, memory_order_release);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void
test_stress_moves(void **state)
{
    struct fx *f = *state;
    struct tc_cache *c = f->c;
    struct sctx w[2], m;
    pthread_t tw[2], tm;
    char k[16], v[128];
    _Atomic bool moved = false;

    tc_clock_set(0); /* real clock: nothing expires here */
    for (int i = 0; i < SKEYS; i++) {
        snprintf(k, sizeof(k), "key%d", i);
        int n = make_val(v, sizeof(v), i, 0);
        assert_int_equal(tc_set(c, k, strlen(k), v, (size_t)n, 0, 0), TC_OK);
    }
    memset(&m, 0, sizeof(m));
    m.c = c;
    m.moved = &moved;
    for (unsigned i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].c = c;
        w[i].id = i;
        w[i].moved = &moved;
        assert_int_equal(pthread_create(&tw[i], NULL, writer_main, &w[i]), 0);
    }
    assert_int_equal(pthread_create(&tm, NULL, mover_main, &m), 0);
    for (unsigned i = 0; i < 2; i++)
        pthread_join(tw[i], NULL);
    atomic_store_explicit(&m.stop, true, memory_order_release);
    pthread_join(tm, NULL);
    for (unsigned i = 0; i < 2; i++)
        if (atomic_load_explicit(&w[i].failures, memory_order_relaxed))
            fail_msg("writer %u: %d failures, first: %s", i,
                     atomic_load_explicit(&w[i].failures, memory_order_relaxed),
                     w[i].msg);

    struct tc_stats s = stats(c);
    print_message("stress: %llu promotions, %llu demotions\n",
                  (unsigned long long)s.hotkey_promotions,
                  (unsigned long long)s.hotkey_demotions);
    if (!atomic_load_explicit(&moved, memory_order_acquire))
        fail_msg("no key was promoted and demoted within %d s of writes",
                 SMOVE_LIMIT_S);
    assert_true(s.hotkey_promotions > 0);
    assert_true(s.hotkey_demotions > 0);
    assert_int_equal(s.curr_items, SKEYS);
    check_ok(c);
    for (int i = 0; i < SKEYS; i++) {
        char buf[128];
        struct tc_item_info info;
        snprintf(k, sizeof(k), "key%d", i);
        assert_int_equal(tc_get_copy(c, k, strlen(k), buf, sizeof(buf), &info),
                         TC_OK);
        assert_true(val_ok(buf, info.vlen, i));
    }
    /* everything back in PMEM and the pool empty after cooling */
    tc_set_hot_write_rate(c, 1000000000);
    tc_maintain(c);
    tc_maintain(c);
    s = stats(c);
    assert_int_equal(s.hotkey_current, 0);
    assert_int_equal(s.hot_pool_bytes, 0);
    assert_int_equal(s.curr_items, SKEYS);
    check_ok(c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_promote_demote, setup_hot,
                                                 teardown, "promote_demote"),
        cmocka_unit_test_prestate_setup_teardown(test_ops_on_dram_item,
                                                 setup_hot, teardown, "ops"),
        cmocka_unit_test_prestate_setup_teardown(test_pool_full, setup_hot,
                                                 teardown, "full"),
        cmocka_unit_test_prestate_setup_teardown(test_off, setup_hot, teardown,
                                                 "off"),
        cmocka_unit_test_prestate_setup_teardown(test_rates_follow_test_clock,
                                                 setup_hot, teardown, "clock"),
        cmocka_unit_test_prestate_setup_teardown(test_stress_moves, setup_hot,
                                                 teardown, "stress"),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * TTL buckets, exp16 and eager expiry of the packed store
 * (doc/design/small-items.md, "Expiry and TTL buckets"; alloc/seg.c,
 * src/engine/packed.c), on the engine's settable clock: sets of different
 * TTLs take different open segments (at most 4 a thread, a fifth bucket
 * the nearest longer one's); an item whose expiry fits its segment's
 * exp16 is 4 bytes shorter and reads, touches (in place) and expires as
 * one with exp32; one that does not fit keeps exp32; a sealed segment
 * whose exp_max passed goes whole in a maintenance step, one where a
 * touch extended an item stays; a crash and a restart bring exp16 items
 * back with their expiry, and exp_max with them. Fixture: restart_fx.h
 * (engine_fx.h) with packed_item_max = 1024 and a 48 MiB pool, so that the
 * cap of open segments (1/8 of the pages) leaves a thread its 4.
 */

#include "tests/unit/restart_fx.h"
#include "tests/unit/packed_fx.h"

#include "alloc/seg.h"
#include "src/engine/cache.h"

#include <pthread.h>
#include <stdatomic.h>

#define POOL (48 * MIB)

static int
tsetup(void **state)
{
    int rc = setup_noopen(state);
    if (rc)
        return rc;
    struct fx *f = *state;
    f->cfg.packed_item_max = PACKED_MAX;
    f->cfg.pool_size = POOL;
    return 0;
}

#define TTEST(fn)                                                              \
    cmocka_unit_test_prestate_setup_teardown(fn, tsetup, teardown, #fn)

/* The TTL buckets of the open segments, a bit each; *n their count. */
static uint32_t
open_buckets(struct tc_cache *tc, unsigned *n)
{
    struct cache *c = (struct cache *)tc;
    uint32_t mask = 0;
    *n = 0;
    for (uint32_t p = 0; p < pool_npages(c->pool); p++) {
        struct seg_info si;
        seg_info(c->seg, p, &si);
        if (si.state == SEG_OPEN) {
            mask |= 1u << si.bucket;
            (*n)++;
        }
    }
    return mask;
}

/* The bytes a set adds to packed_bytes_live. */
static uint64_t
set_bytes(struct tc_cache *c, const char *k, const char *v, int64_t ttl)
{
    uint64_t before = pstats(c).packed_bytes_live;
    assert_int_equal(store_s(c, TC_SET, k, v, 0, ttl, 0, NULL), TC_OK);
    return pstats(c).packed_bytes_live - before;
}

/* Four TTLs, four open segments (one a bucket); exp16 where the expiry
 * fits the segment (16 bytes: 8 + 5 + 3), exp32 where it does not (20);
 * a fifth bucket goes to the nearest longer one's segment. */
static void
test_buckets_and_forms(void **state)
{
    struct fx *f = *state;
    unsigned n;
    assert_int_equal(fx_open(f), 0);

    assert_int_equal(set_bytes(f->c, "k0000", "abc", 0), 16);
    assert_int_equal(set_bytes(f->c, "k0010", "abc", 10), 16);
    assert_int_equal(set_bytes(f->c, "k0100", "abc", 100), 16);
    assert_int_equal(set_bytes(f->c, "k1000", "abc", 1000), 16);
    uint32_t want = 1u << 0 | 1u << seg_bucket_of(10) |
                    1u << seg_bucket_of(100) | 1u << seg_bucket_of(1000);
    assert_int_equal(open_buckets(f->c, &n), want);
    assert_int_equal(n, 4);
    STAT_EQ(pstats(f->c), packed_segments_open, 4);

    /* TTL 20: bucket 2, not open; the nearest longer is TTL 100's, whose
     * exp_base (T0 + 64) is past T0 + 20: exp32 there */
    assert_int_equal(set_bytes(f->c, "k0020", "abc", 20), 20);
    /* past 2^17 s: no longer TTL bucket open but 0 (no expiry, exp_base
     * T0): T0 + 100,000 is beyond its exp16 (65,534 s): exp32 */
    assert_int_equal(set_bytes(f->c, "kfar0", "abc", 100000), 20);
    /* 5,000 s fits bucket 0's exp16 */
    assert_int_equal(set_bytes(f->c, "k5000", "abc", 5000), 16);
    assert_int_equal(open_buckets(f->c, &n), want);
    assert_int_equal(n, 4);

    /* every form reads back with its expiry and expires on time */
    static const struct {
        const char *k;
        uint32_t ttl;
    } keys[] = {{"k0000", 0},    {"k0010", 10}, {"k0100", 100},
                {"k1000", 1000}, {"k0020", 20}, {"kfar0", 100000},
                {"k5000", 5000}};
    for (unsigned i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        struct tc_item_info in = check_str(f->c, keys[i].k, "abc");
        assert_int_equal(in.exptime, keys[i].ttl ? T0 + keys[i].ttl : 0);
    }
    tc_clock_set(T0 + 19);
    check_str(f->c, "k0020", "abc");
    tc_clock_set(T0 + 20);
    check_miss(f->c, "k0020");
    check_miss(f->c, "k0010");
    check_str(f->c, "k0100", "abc");
    tc_clock_set(T0 + 99999);
    check_str(f->c, "kfar0", "abc");
    check_str(f->c, "k0000", "abc");
    check_miss(f->c, "k5000");
    tc_clock_set(T0 + 100000);
    check_miss(f->c, "kfar0");
    check_ok(f->c);
}

/* exp16 items: gets, touch, gat and meta T in place (CAS and bytes
 * unchanged), never (0) in place, a touch past exp16's reach a rewrite
 * with exp32 and the CAS carried. */
static void
test_exp16_touch(void **state)
{
    struct fx *f = *state;
    uint64_t cas;
    assert_int_equal(fx_open(f), 0);

    assert_int_equal(store_s(f->c, TC_SET, "e", "val", 9, 3600, 0, &cas),
                     TC_OK);
    STAT_EQ(pstats(f->c), packed_bytes_live, 12); /* 8 + 1 + 3 */
    struct tc_item_info in = check_str(f->c, "e", "val");
    assert_int_equal(in.exptime, T0 + 3600);
    assert_int_equal(in.cas, cas);
    assert_int_equal(in.flags, 9);
    uint64_t dead = pstats(f->c).packed_bytes_dead;

    /* touch, gat and meta T, each in place */
    assert_int_equal(tc_touch(f->c, "e", 1, 4000), TC_OK);
    assert_int_equal(check_str(f->c, "e", "val").exptime, T0 + 4000);
    struct got g;
    unsigned char buf[8];
    memset(&g, 0, sizeof(g));
    g.buf = buf;
    g.cap = sizeof(buf);
    assert_int_equal(tc_gat(f->c, "e", 1, 3000, got_fn, &g), TC_OK);
    assert_int_equal(g.info.exptime, T0 + 3000);
    assert_int_equal(g.info.exptime_before, T0 + 4000);
    struct tc_get_opts o = {.touch = true, .exptime = 2500};
    assert_int_equal(tc_get_ex(f->c, "e", 1, &o, got_fn, &g), TC_OK);
    assert_int_equal(g.info.exptime, T0 + 2500);
    in = check_str(f->c, "e", "val");
    assert_int_equal(in.exptime, T0 + 2500);
    assert_int_equal(in.cas, cas);
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_bytes_dead, dead);
    STAT_EQ(s, packed_bytes_live, 12);
    tc_clock_set(T0 + 2499);
    check_str(f->c, "e", "val");
    /* never, in place; then back to an expiry */
    assert_int_equal(tc_touch(f->c, "e", 1, 0), TC_OK);
    assert_int_equal(check_str(f->c, "e", "val").exptime, 0);
    tc_clock_set(T0 + 10000);
    check_str(f->c, "e", "val");
    assert_int_equal(tc_touch(f->c, "e", 1, 100), TC_OK);
    assert_int_equal(check_str(f->c, "e", "val").exptime, T0 + 10100);
    STAT_EQ(pstats(f->c), packed_bytes_dead, dead);

    /* 80,000 s on is past exp16's reach: a copy, same CAS (cas64); it
     * lands in its own TTL bucket's new segment, whose exp16 takes it:
     * 8 + 1 + 8 + 3 = 20 bytes */
    assert_int_equal(tc_touch(f->c, "e", 1, 80000), TC_OK);
    s = pstats(f->c);
    assert_true(s.packed_bytes_dead > dead);
    STAT_EQ(s, packed_bytes_live, 20);
    in = check_str(f->c, "e", "val");
    assert_int_equal(in.exptime, T0 + 90000);
    assert_int_equal(in.cas, cas);
    assert_int_equal(store_s(f->c, TC_CAS, "e", "new", 0, 0, cas, NULL), TC_OK);
    check_str(f->c, "e", "new");
    check_ok(f->c);
}

/* Sets of n items "<prefix>NNNNN" with 100-byte values and ttl. */
static void
fill(struct tc_cache *c, const char *prefix, unsigned n, int64_t ttl)
{
    char k[24], v[100];
    memset(v, 'v', sizeof(v));
    for (unsigned i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "%s%07u", prefix, i);
        put(c, k, v, sizeof(v), 0, ttl);
    }
}

static unsigned
count_present(struct tc_cache *c, const char *prefix, unsigned n)
{
    char k[24];
    unsigned char buf[128];
    unsigned present = 0;
    for (unsigned i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "%s%07u", prefix, i);
        struct tc_item_info in;
        if (tc_get_copy(c, k, strlen(k), buf, sizeof(buf), &in) == TC_OK)
            present++;
    }
    return present;
}

/* More than a segment of TTL-200 items (its first sealed), and more than
 * a segment of TTL-100 items, one of the first touched to live longer.
 * Past both expiries a maintenance step evicts the TTL-200 sealed segment
 * whole (decided in DRAM), not the one the touch extended. */
/* fill's items take 120 bytes (keys of 9 to 12 bytes, 100-byte values):
 * 8,737 a segment */
#define PER_SEG 8737u
#define FILL 9100

static void
test_eager_expiry(void **state)
{
    struct fx *f = *state;
    assert_int_equal(fx_open(f), 0);
    fill(f->c, "long_", FILL, 200);
    fill(f->c, "tch_", FILL, 100);
    char k0[] = "tch_0000000";
    assert_int_equal(tc_touch(f->c, k0, strlen(k0), 5000), TC_OK);
    struct tc_stats s0 = pstats(f->c);
    assert_int_equal(s0.packed_segments, 4); /* 2 sealed, 2 open */
    STAT_EQ(s0, packed_segments_open, 2);
    STAT_EQ(s0, packed_segments_expired, 0);

    /* nothing has expired yet: a step evicts no segment */
    tc_maintain(f->c);
    STAT_EQ(pstats(f->c), packed_segments_expired, 0);
    STAT_EQ(pstats(f->c), packed_items, 2 * (FILL));

    tc_clock_set(T0 + 201);
    uint64_t free0 = pstats(f->c).pmem_pages_free;
    tc_maintain(f->c);
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_segments_expired, 1);
    STAT_EQ(s, packed_segments_evicted, 0);
    STAT_EQ(s, evictions, 0);
    assert_int_equal(s.packed_segments, 3);
    assert_true(s.pmem_pages_free > free0); /* its page went back */
    /* its items left the index: the open TTL-200 segment's are still
     * indexed (open segments are not swept), the sealed TTL-100 one's
     * expired items were swept one by one, its touched item stays */
    assert_true(s.curr_items <= 2 * (FILL)-8000);
    assert_int_equal(count_present(f->c, "long_", FILL), 0);
    check_str(f->c, k0,
              "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
              "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv");
    assert_int_equal(count_present(f->c, "tch_", FILL), 1);

    /* another step: the touched item's segment stays until 5,000 s */
    tc_maintain(f->c);
    STAT_EQ(pstats(f->c), packed_segments_expired, 1);
    tc_clock_set(T0 + 5001);
    tc_maintain(f->c);
    STAT_EQ(pstats(f->c), packed_segments_expired, 2);
    check_ok(f->c);
}

/* A store that needs a page takes an expired segment before the oldest
 * (FIFO): 10 segments of items without a TTL (the oldest), 5 of TTL-10
 * items, then past their expiry two segments more than the free pages
 * hold: the expired segments go, no live item is evicted (FIFO would
 * have taken the oldest, live ones). */
static void
test_store_takes_expired_first(void **state)
{
    struct fx *f = *state;
    assert_int_equal(fx_open(f), 0);
    fill(f->c, "o_", 10 * PER_SEG, 0);
    fill(f->c, "x_", 5 * PER_SEG, 10);
    tc_clock_set(T0 + 11);
    uint64_t nfree = pstats(f->c).pmem_pages_free;
    assert_true(nfree > 2);
    fill(f->c, "n_", (uint32_t)(nfree + 2) * PER_SEG, 0);
    struct tc_stats s = pstats(f->c);
    assert_true(s.packed_segments_expired >= 2);
    STAT_EQ(s, packed_segments_evicted, 0);
    STAT_EQ(s, evictions, 0);
    assert_int_equal(count_present(f->c, "o_", 10 * PER_SEG), 10 * PER_SEG);
    check_ok(f->c);
}

/* In a child: exp16 items (TTL 3600), one touched in place, one with
 * exp32 (TTL 100,000 beside no-TTL items), more than a segment of a
 * third TTL; then a crash. */
static void
crash_work(struct fx *f, struct truth *t)
{
    (void)t;
    fill(f->c, "h_", 100, 3600);
    fill(f->c, "s_", FILL, 300);
    assert_int_equal(store_s(f->c, TC_SET, "never", "n", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "far", "f", 0, 100000, 0, NULL),
                     TC_OK);
    assert_int_equal(tc_touch(f->c, "h_0000007", 9, 7200), TC_OK);
}

static void
test_exp16_across_crash(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;

    run_child(f, NULL, crash_work);
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    struct tc_item_info in = check_str(f->c, "never", "n");
    assert_int_equal(in.exptime, 0);
    assert_int_equal(check_str(f->c, "far", "f").exptime, T0 + 100000);
    unsigned char buf[128];
    assert_int_equal(tc_get_copy(f->c, "h_0000001", 9, buf, sizeof(buf), &in),
                     TC_OK);
    assert_int_equal(in.exptime, T0 + 3600);
    assert_int_equal(tc_get_copy(f->c, "h_0000007", 9, buf, sizeof(buf), &in),
                     TC_OK);
    assert_int_equal(in.exptime, T0 + 7200);
    STAT_EQ(pstats(f->c), packed_items, 100 + FILL + 2);

    /* exp_max came back from the items: nothing has expired, nothing
     * goes (a record left at 0 would read "expired" now) */
    tc_maintain(f->c);
    STAT_EQ(pstats(f->c), packed_segments_expired, 0);
    STAT_EQ(pstats(f->c), packed_items, 100 + FILL + 2);
    /* an exp16 item touched after the restart, in place */
    assert_int_equal(tc_touch(f->c, "h_0000002", 9, 7000), TC_OK);

    /* past TTL 300: the segment whose items all had it goes whole */
    tc_clock_set(T0 + 301);
    tc_maintain(f->c);
    struct tc_stats s = pstats(f->c);
    assert_true(s.packed_segments_expired >= 1);
    assert_int_equal(count_present(f->c, "s_", FILL), 0);
    assert_int_equal(count_present(f->c, "h_", 100), 100);
    tc_clock_set(T0 + 3600);
    assert_int_equal(count_present(f->c, "h_", 100), 2); /* 2 and 7 */
    tc_clock_set(T0 + 7000);
    assert_int_equal(count_present(f->c, "h_", 100), 1);
    check_ok(f->c);
    close_clean(f, meta_path(f), NULL);
}

/* Threads setting keys with six TTLs (more buckets than a thread keeps
 * open, more open segments than the cap allows them all), touching and
 * reading them, while one more advances the clock and runs maintenance
 * steps (eager expiry, the sweep): every read is a miss or the key's own
 * value, the index stays consistent, and once the clock is far past
 * every TTL the sealed segments go whole. Bounded by counts. */
#define TTL_THREADS 3
#define TTL_OPS 30000

struct ttl_race {
    struct tc_cache *c;
    unsigned id;
    unsigned bad;
};

static _Atomic unsigned ttl_writers;

static void *
ttl_race_main(void *arg)
{
    static const int64_t ttls[] = {0, 5, 40, 300, 3000, 100000};
    struct ttl_race *r = arg;
    char k[32], v[500];
    unsigned char buf[512];
    uint32_t x = 2463534242u + r->id;
    tc_thread_register(r->c);
    for (unsigned i = 0; i < TTL_OPS; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        unsigned key = x % 4000, op = (x >> 16) % 8;
        int klen = snprintf(k, sizeof(k), "r%u", key);
        if (op < 4) {
            memset(v, 'a' + (int)(key % 26), sizeof(v));
            memcpy(v, &key, sizeof(key));
            (void)tc_set(r->c, k, (size_t)klen, v, sizeof(v), 0,
                         ttls[(x >> 8) % 6]);
        } else if (op < 7) {
            struct tc_item_info in;
            if (tc_get_copy(r->c, k, (size_t)klen, buf, sizeof(buf), &in) !=
                TC_OK)
                continue;
            unsigned got;
            memcpy(&got, buf, sizeof(got));
            if (got != key || in.vlen != sizeof(v) ||
                buf[sizeof(v) - 1] != 'a' + (int)(key % 26))
                r->bad++;
        } else {
            /* never touched to "never": that keeps a segment for good */
            (void)tc_touch(r->c, k, (size_t)klen, ttls[1 + (x >> 8) % 5]);
        }
    }
    tc_thread_unregister(r->c);
    atomic_fetch_sub(&ttl_writers, 1);
    return NULL;
}

static void
test_threads_expire_race(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 66 * MIB; /* 64 pages: the cap is 8 open */
    assert_int_equal(fx_open(f), 0);
    pthread_t th[TTL_THREADS];
    struct ttl_race r[TTL_THREADS];
    atomic_store(&ttl_writers, TTL_THREADS);
    for (unsigned i = 0; i < TTL_THREADS; i++) {
        r[i] = (struct ttl_race){f->c, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, ttl_race_main, &r[i]), 0);
    }
    /* the clock moves 7 s a step: TTL 5 and 40 expire while written */
    for (unsigned step = 0; step < 2000 && atomic_load(&ttl_writers) > 0;
         step++) {
        tc_clock_advance(7);
        tc_maintain(f->c);
    }
    for (unsigned i = 0; i < TTL_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(r[i].bad, 0);
    }
    /* every sealed segment without a never-expiring item expires */
    check_ok(f->c);
    tc_clock_advance(200000);
    tc_maintain(f->c);
    struct tc_stats s = pstats(f->c);
    print_message("expired segments %" PRIu64 ", evicted %" PRIu64
                  ", segments %" PRIu64 ", packed items %" PRIu64
                  ", items %" PRIu64 "\n",
                  s.packed_segments_expired, s.packed_segments_evicted,
                  s.packed_segments, s.packed_items, s.curr_items);
    assert_true(s.packed_segments_expired > 0);
    assert_true(s.packed_segments_open <= 8);
    check_ok(f->c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TTEST(test_buckets_and_forms),  TTEST(test_exp16_touch),
        TTEST(test_eager_expiry),       TTEST(test_store_takes_expired_first),
        TTEST(test_exp16_across_crash), TTEST(test_threads_expire_race),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Engine unit tests: eviction, no-evict, get_copy, maintenance, memory limit,
 * page reassignment, open failures, a model-based random test. Fixture and
 * helpers: engine_fx.h. The tests of slab internals (CLOCK, a chunk freed
 * by a delete, class counters, the slab sweep, memory limit, page
 * reassignment) open the slab store (TC_TEST_SLAB).
 */

#include "tests/unit/engine_fx.h"

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

    /* bounded by count (no background thread: nothing to wait for) */
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
        if (i % 4096 == 0)
            check_ok(f->c);
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

/* A copy without a description (no info) still marks the item used and
 * counts the hit in its class, as a described one does; a chained value's
 * prefix comes out the same. */
static void
test_get_copy_bare(void **state)
{
    struct fx *f = *state;
    unsigned char v[100], buf[110];
    fill_pattern(v, sizeof(v), 7);
    put(f->c, "u", v, sizeof(v), 3, 0);
    put(f->c, "n", v, sizeof(v), 3, 0);

    /* the class, and the bits before any read: a peek that does not bump */
    struct tc_get_opts peek = {.no_bump = true, .no_win = true};
    struct got g;
    memset(&g, 0, sizeof(g));
    assert_int_equal(tc_get_ex(f->c, "u", 1, &peek, got_fn, &g), TC_OK);
    assert_false(g.info.fetched);
    int cls = g.info.slab_class;
    struct tc_slab_stats s0, s1;
    assert_int_equal(tc_slab_stats(f->c, cls, &s0), 0);

    memset(buf, 0xcc, sizeof(buf));
    assert_int_equal(tc_get_copy(f->c, "u", 1, buf, 100, NULL), TC_OK);
    assert_memory_equal(buf, v, 100);
    assert_int_equal(buf[100], 0xcc);
    assert_int_equal(tc_slab_stats(f->c, cls, &s1), 0);
    assert_int_equal(s1.get_hits - s0.get_hits, 1);

    memset(&g, 0, sizeof(g));
    assert_int_equal(tc_get_ex(f->c, "u", 1, &peek, got_fn, &g), TC_OK);
    assert_true(g.info.fetched); /* marked by the bare copy */
    memset(&g, 0, sizeof(g));
    assert_int_equal(tc_get_ex(f->c, "n", 1, &peek, got_fn, &g), TC_OK);
    assert_false(g.info.fetched); /* the peeks did not */

    size_t len = f->cfg.chunk_max + 4096;
    unsigned char *big = malloc(len), *out = malloc(len);
    fill_pattern(big, len, 8);
    put(f->c, "big", big, len, 0, 0);
    size_t cap = f->cfg.chunk_max + 10;
    memset(out, 0xcc, len);
    assert_int_equal(tc_get_copy(f->c, "big", 3, out, cap, NULL), TC_OK);
    assert_memory_equal(out, big, cap);
    assert_int_equal(out[cap], 0xcc);
    memset(&g, 0, sizeof(g));
    assert_int_equal(tc_get_ex(f->c, "big", 3, &peek, got_fn, &g), TC_OK);
    assert_true(g.info.fetched);
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
    /* the model has no eviction: values of up to 2.4 KB over about 40
     * slab classes need a page each, more than a 16 MiB pool has */
    f->cfg.pool_size = 64 * MIB;
    fx_reopen(f);
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

/* ------------------------------------------- the maintenance thread's stash */

/* The class holding n items of vlen bytes (-1 if none does). */
static int
class_with_items(struct tc_cache *c, uint64_t n)
{
    struct tc_slab_stats s;
    for (int i = 0; tc_slab_stats(c, i, &s) == 0; i++)
        if (s.used_chunks == n)
            return i;
    return -1;
}

/* Chunks freed through limbo come back to their class even when the
 * maintenance thread reclaims the limbo: it keeps no stash between rounds
 * (it used to keep up to two batches a class for good, which kept their
 * page from ever draining). Waits (bounded) for the thread's next round. */
static void
test_maintenance_thread_keeps_no_stash(void **state)
{
    struct fx *f = *state;
    char key[32];
    unsigned char v[3000];
    const unsigned n = 200;

    f->cfg.pool_size = 8 * MIB;
    f->cfg.background = true;
    fx_reopen(f);
    fill_pattern(v, sizeof(v), 7);
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "stash-%u", i);
        assert_int_equal(tc_set(f->c, key, strlen(key), v, sizeof(v), 0, 0),
                         TC_OK);
    }
    int cls = class_with_items(f->c, n);
    assert_true(cls >= 0);
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "stash-%u", i);
        assert_int_equal(tc_delete(f->c, key, strlen(key), 0), TC_OK);
    }
    /* this thread's stash back to the class, its frees into limbo: from
     * here only the maintenance thread reclaims them */
    tc_thread_quiesce(f->c);
    struct tc_slab_stats s;
    for (int tries = 0; tries < 300; tries++) { /* 30 s: a loaded machine */
        assert_int_equal(tc_slab_stats(f->c, cls, &s), 0);
        if (s.free_chunks == s.total_chunks)
            break;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(s.used_chunks, 0);
    assert_int_equal(s.free_chunks, s.total_chunks);
}

/* ------------------------------------------------------------------ main */

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST_SLAB(test_eviction_clock),
        TC_TEST_SLAB(test_no_evict_enomem),
        TC_TEST(test_get_copy_prefix),
        TC_TEST_SLAB(test_get_copy_bare),
        TC_TEST_SLAB(test_maintain_sweep),
        TC_TEST_SLAB(test_mem_limit),
        TC_TEST_SLAB(test_slab_reassign),
        TC_TEST(test_model_random),
        TC_TEST(test_maintenance_thread_keeps_no_stash),
        cmocka_unit_test_prestate_setup_teardown(
            test_open_failures, setup_noopen, teardown, "test_open_failures"),
    };
    /* TC_TEST_FILTER=<glob> runs only the matching tests */
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("engine-memory", tests, NULL, NULL);
}

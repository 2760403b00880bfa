/*
 * Unit tests for src/server/stats.c and the counter table it shares with
 * the engine (TC_STATS_COUNTERS, src/tiercache.h): every row gives one
 * "stats" line, in table order, with tc_stats()'s value; the server's
 * figures come only through the hooks it hands in (struct stats_hooks);
 * tc_stats_reset() zeroes the COUNTER rows and leaves the GAUGE rows.
 * A cache with and without the NVMe tier: the tier's runs print only with
 * one.
 */

#include "engine_fx.h"

#include <fcntl.h>

#include "src/server/conn.h"
#include "src/server/stats.h"

/* ------------------------------------------------------ the table itself */

struct row {
    const char *name;
    size_t off; /* in struct tc_stats */
    bool gauge;
    bool ext;    /* a run printed only with the NVMe tier */
    bool packed; /* a run printed only with the packed store in use */
};

#define ROW_COUNTER false
#define ROW_GAUGE true
#define ROW(id, field, name, kind)                                             \
    {name, offsetof(struct tc_stats, field), ROW_##kind, false, false},
#define ROW_EXT(id, field, name, kind)                                         \
    {name, offsetof(struct tc_stats, field), ROW_##kind, true, false},
/* the packed store's: printed once it held a segment */
#define ROW_PACKED(id, field, name, kind)                                      \
    {name, offsetof(struct tc_stats, field), ROW_##kind, false, true},

static const struct row rows[] = {
    TC_STATS_CMD(ROW) TC_STATS_HIT(ROW) TC_STATS_SLAB(ROW) TC_STATS_ITEM(ROW)
        TC_STATS_SWEEP(ROW) TC_STATS_HOTKEY(ROW) TC_STATS_EXTSTORE(ROW_EXT)
            TC_STATS_EXT(ROW_EXT) TC_STATS_PACKED(ROW_PACKED)};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

/* The runs together are the whole table, in its order. */
#define ROW_NAME(id, field, name, kind) name,
static const char *const all_names[] = {TC_STATS_COUNTERS(ROW_NAME)};
_Static_assert(sizeof(all_names) / sizeof(all_names[0]) == NROWS,
               "TC_STATS_COUNTERS is the union of its runs");

static uint64_t
field(const struct tc_stats *s, const struct row *r)
{
    uint64_t v;
    memcpy(&v, (const char *)s + r->off, sizeof(v));
    return v;
}

/* --------------------------------------------------- a server, as hooks */

#define FAKE_WORKERS 3
#define FAKE_CONNS 5
#define FAKE_CMD_META 1234

struct server {
    struct tc_cache *cache;
    unsigned ninfo, nsum, nwalk;
};

static void
fake_info(struct server *srv, struct stats_info *out)
{
    srv->ninfo++;
    memset(out, 0, sizeof(*out));
    out->cache = srv->cache;
    out->settings.maxconns = 77;
    out->curr_conns = FAKE_CONNS;
    out->nlisteners = 1;
    out->nworkers = FAKE_WORKERS;
    out->accepting = true;
}

static void
fake_ctr_sum(struct server *srv, uint64_t sum[STATS_CTR_COUNT])
{
    srv->nsum++;
    for (int i = 0; i < STATS_CTR_COUNT; i++)
        sum[i] = 0;
    sum[STATS_CMD_META] = FAKE_CMD_META;
}

static void
fake_conns_walk(struct server *srv,
                void (*fn)(void *arg, const struct conn_view *v), void *arg)
{
    srv->nwalk++;
    struct conn_view v = {.fd = 9, .addr = "tcp:1.2.3.4:5", .state = "x"};
    fn(arg, &v);
}

static const struct stats_hooks hooks = {
    .info = fake_info,
    .ctr_sum = fake_ctr_sum,
    .conns_walk = fake_conns_walk,
};

/* The reply to "stats <group>" as a NUL-terminated string (caller frees). */
static char *
reply(struct server *srv, const char *group, int want_rc)
{
    struct obuf o;
    obuf_init(&o);
    assert_int_equal(stats_group(&hooks, srv, NULL, group, &o), want_rc);
    assert_int_equal(o.err, 0);
    char *s = malloc(obuf_pending(&o) + 1);
    assert_non_null(s);
    if (obuf_pending(&o)) /* an empty obuf may have no buffer at all */
        memcpy(s, o.buf + o.head, obuf_pending(&o));
    s[obuf_pending(&o)] = '\0';
    obuf_fini(&o);
    return s;
}

/* Where "STAT name " starts in text, or NULL; fails if it is there twice. */
static const char *
line_of(const char *text, const char *name)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "STAT %s ", name);
    const char *p = text;
    const char *hit = NULL;
    while ((p = strstr(p, pat)) != NULL) {
        if (p == text || p[-1] == '\n') {
            if (hit)
                fail_msg("\"%s\" twice in the reply", name);
            hit = p;
        }
        p++;
    }
    return hit;
}

static uint64_t
value_at(const char *line, const char *name)
{
    return strtoull(line + strlen("STAT ") + strlen(name) + 1, NULL, 10);
}

/* Some traffic of every common kind, so that most rows are non-zero. */
static void
traffic(struct tc_cache *c)
{
    unsigned char buf[64];
    uint64_t v;
    char key[16];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        puts_(c, key, "value");
    }
    for (int i = 0; i < 30; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        tc_get_copy(c, key, strlen(key), buf, sizeof(buf), NULL);
    }
    tc_delete(c, "k1", 2, 0);
    tc_delete(c, "none", 4, 0);
    puts_(c, "n", "5");
    tc_incr(c, "n", 1, 2, &v, NULL);
    tc_decr(c, "n", 1, 1, &v, NULL);
    tc_incr(c, "none", 4, 1, &v, NULL);
    tc_touch(c, "k2", 2, 100);
    tc_touch(c, "none", 4, 100);
}

/* Every row's line is there once, in table order, with tc_stats()'s value
 * (the engine is idle: nothing moves between the two reads); the tier's
 * runs only when the tier is on. */
static void
check_general(struct tc_cache *c, bool ext)
{
    struct server srv = {.cache = c};
    struct tc_stats t;
    char *text = reply(&srv, "", 0);
    tc_stats(c, &t);
    assert_int_equal(t.ext_enabled, ext);
    const char *prev = text;
    unsigned nonzero = 0;
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        assert_string_equal(r->name, all_names[i]);
        const char *at = line_of(text, r->name);
        if (r->ext && !ext) {
            if (at)
                fail_msg("\"%s\" printed without a tier", r->name);
            continue;
        }
        if (r->packed && !t.packed_segments && !t.packed_segments_evicted &&
            !t.packed_segments_expired) {
            if (at)
                fail_msg("\"%s\" printed without packed items", r->name);
            continue;
        }
        if (!at)
            fail_msg("\"%s\" missing from the stats reply", r->name);
        if (at < prev)
            fail_msg("\"%s\" out of table order", r->name);
        prev = at;
        if (value_at(at, r->name) != field(&t, r))
            fail_msg("%s = %llu, tc_stats says %llu", r->name,
                     (unsigned long long)value_at(at, r->name),
                     (unsigned long long)field(&t, r));
        nonzero += field(&t, r) != 0;
    }
    assert_true(nonzero >= 10);
    /* the server's figures, through the hooks */
    const char *at = line_of(text, "cmd_meta");
    assert_non_null(at);
    assert_int_equal(value_at(at, "cmd_meta"), FAKE_CMD_META);
    assert_true(at > line_of(text, "cmd_touch"));
    assert_true(at < line_of(text, "get_hits"));
    at = line_of(text, "threads");
    assert_non_null(at);
    assert_int_equal(value_at(at, "threads"), FAKE_WORKERS);
    at = line_of(text, "connection_structures");
    assert_non_null(at);
    assert_int_equal(value_at(at, "connection_structures"), FAKE_CONNS + 1);
    assert_int_equal(srv.ninfo, 1);
    assert_int_equal(srv.nsum, 1);
    assert_int_equal(srv.nwalk, 0);
    free(text);
}

static void
test_general_follows_table(void **state)
{
    struct fx *f = *state;
    traffic(f->c);
    check_general(f->c, false);
}

/* With the packed store: its rows printed (packed_segments_open among
 * them) with tc_stats()'s values, one segment open, and its records in
 * tc_dram_meta_bytes. */
static void
test_general_packed(void **state)
{
    struct fx *f = *state;
    f->cfg.packed_item_max = 0; /* the store off, whatever the default */
    fx_reopen(f);
    uint64_t meta_off = stats(f->c).dram_meta_bytes;
    tc_close(f->c);
    f->c = NULL;
    f->cfg.packed_item_max = 1024;
    assert_int_equal(fx_open(f), 0);
    traffic(f->c);
    struct tc_stats t = stats(f->c);
    assert_true(t.packed_segments >= 1);
    assert_int_equal(t.packed_segments_open, 1);
    /* a 64-byte record for each page at least */
    assert_true(t.dram_meta_bytes >=
                meta_off + t.pmem_pages_total * (uint64_t)64);
    check_general(f->c, false);
}

static void
test_general_with_tier(void **state)
{
    struct fx *f = *state;
    char ext[192];
    test_flash_path(ext, sizeof(ext), "tc_test_stats_%d.ext", (int)getpid());
    int fd = open(ext, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd < 0) {
        printf("SKIP test_general_with_tier: O_DIRECT refused under %s "
               "(%s)\n",
               test_flash_dir(), strerror(errno));
        skip();
    }
    close(fd);
    unlink(ext);
    f->cfg.ext_npaths = 1;
    f->cfg.ext_path[0] = ext;
    f->cfg.ext_size[0] = 128 * MIB;
    f->cfg.ext_page_size = 4 * MIB;
    f->cfg.ext_wbuf_size = 1 * MIB;
    tc_close(f->c);
    f->c = NULL;
    int rc = fx_open(f);
    if (rc != 0) {
        unlink(ext);
        fail_msg("tc_open with a tier: %d", rc);
    }
    traffic(f->c);
    check_general(f->c, true);
    tc_close(f->c);
    f->c = NULL;
    unlink(ext);
}

static void
test_reset_zeroes_counters_only(void **state)
{
    struct fx *f = *state;
    traffic(f->c);
    struct tc_stats before = stats(f->c);
    tc_stats_reset(f->c);
    struct tc_stats after = stats(f->c);
    unsigned ngauges = 0;
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        uint64_t want = r->gauge ? field(&before, r) : 0;
        if (field(&after, r) != want)
            fail_msg("%s = %llu after reset, expected %llu", r->name,
                     (unsigned long long)field(&after, r),
                     (unsigned long long)want);
        ngauges += r->gauge;
    }
    assert_true(ngauges > 0);
    assert_true(before.curr_items > 0);
}

/* The per-class command counters ("stats slabs"): summed over classes
 * they are the totals of the same names when every event has an item (no
 * flash tier here), a thread that left still counts, and "stats reset"
 * zeroes them. */
struct cls_sum {
    uint64_t get_hits, cmd_set, delete_hits, incr_hits, decr_hits, cas_hits,
        cas_badval, touch_hits;
};

static struct cls_sum
class_sums(struct tc_cache *c)
{
    struct cls_sum t = {0};
    for (int i = 0; i < tc_slab_nclasses(c); i++) {
        struct tc_slab_stats s;
        assert_int_equal(tc_slab_stats(c, i, &s), 0);
        t.get_hits += s.get_hits;
        t.cmd_set += s.cmd_set;
        t.delete_hits += s.delete_hits;
        t.incr_hits += s.incr_hits;
        t.decr_hits += s.decr_hits;
        t.cas_hits += s.cas_hits;
        t.cas_badval += s.cas_badval;
        t.touch_hits += s.touch_hits;
    }
    return t;
}

static void
check_class_sums(struct tc_cache *c)
{
    struct cls_sum k = class_sums(c);
    struct tc_stats t = stats(c);
    assert_int_equal(k.get_hits, t.get_hits);
    assert_int_equal(k.cmd_set, t.cmd_set);
    assert_int_equal(k.delete_hits, t.delete_hits);
    assert_int_equal(k.incr_hits, t.incr_hits);
    assert_int_equal(k.decr_hits, t.decr_hits);
    assert_int_equal(k.cas_hits, t.cas_hits);
    assert_int_equal(k.cas_badval, t.cas_badval);
    assert_int_equal(k.touch_hits, t.touch_hits);
}

static void *
class_thread(void *arg)
{
    struct tc_cache *c = arg;
    unsigned char buf[64];
    puts_(c, "thr", "v");
    tc_get_copy(c, "thr", 3, buf, sizeof(buf), NULL);
    tc_thread_unregister(c);
    return NULL;
}

static void
test_class_counters(void **state)
{
    struct fx *f = *state;
    traffic(f->c);
    struct tc_item_info info;
    unsigned char buf[64];
    assert_int_equal(tc_get_copy(f->c, "n", 1, buf, sizeof(buf), &info), TC_OK);
    assert_int_equal(
        tc_store(f->c, TC_CAS, "n", 1, "7", 1, 0, 0, info.cas, NULL), TC_OK);
    assert_int_equal(
        tc_store(f->c, TC_CAS, "n", 1, "8", 1, 0, 0, info.cas, NULL),
        TC_EXISTS);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, class_thread, f->c), 0);
    assert_int_equal(pthread_join(th, NULL), 0);

    struct cls_sum k = class_sums(f->c);
    assert_true(k.get_hits > 0 && k.cmd_set > 0 && k.delete_hits == 1);
    assert_true(k.incr_hits == 1 && k.decr_hits == 1 && k.touch_hits == 1);
    assert_true(k.cas_hits == 1 && k.cas_badval == 1);
    check_class_sums(f->c);

    tc_stats_reset(f->c);
    k = class_sums(f->c);
    assert_int_equal(k.get_hits + k.cmd_set + k.delete_hits + k.incr_hits +
                         k.decr_hits + k.cas_hits + k.cas_badval + k.touch_hits,
                     0);
    traffic(f->c);
    check_class_sums(f->c);
}

/* A meta ms with I (tc_store_ex with invalidate) counts in the class of
 * its item, like any store: cmd_set, and cas_hits whether the CAS matched
 * or was older (the value then stored stale), cas_badval when newer. */
static void
test_class_counters_invalidating_store(void **state)
{
    struct fx *f = *state;
    char big[3000];
    uint64_t cas = 0;
    int cls = -1;

    memset(big, 'b', sizeof(big));
    assert_int_equal(
        tc_store_ex(f->c, TC_SET, "inv", 3, big, sizeof(big), 0, 0, NULL, &cas),
        TC_OK);
    for (int i = 0; i < tc_slab_nclasses(f->c); i++) {
        struct tc_slab_stats s;
        assert_int_equal(tc_slab_stats(f->c, i, &s), 0);
        if (s.used_chunks == 1)
            cls = i;
    }
    assert_true(cls >= 0);
    struct tc_slab_stats s0, s1;
    assert_int_equal(tc_slab_stats(f->c, cls, &s0), 0);
    struct tc_store_opts o = {.invalidate = true, .cas_in = cas};
    assert_int_equal(
        tc_store_ex(f->c, TC_CAS, "inv", 3, big, sizeof(big), 0, 0, &o, &cas),
        TC_OK);
    o.cas_in = cas - 1; /* older: stored, marked stale */
    assert_int_equal(
        tc_store_ex(f->c, TC_CAS, "inv", 3, big, sizeof(big), 0, 0, &o, &cas),
        TC_OK);
    struct tc_item_info info;
    assert_int_equal(tc_get_copy(f->c, "inv", 3, NULL, 0, &info), TC_OK);
    assert_true(info.stale);
    o.cas_in = cas + 1000; /* newer: refused */
    assert_int_equal(
        tc_store_ex(f->c, TC_CAS, "inv", 3, big, sizeof(big), 0, 0, &o, NULL),
        TC_EXISTS);
    assert_int_equal(tc_slab_stats(f->c, cls, &s1), 0);
    assert_int_equal(s1.cmd_set - s0.cmd_set, 3);
    assert_int_equal(s1.cas_hits - s0.cas_hits, 2);
    assert_int_equal(s1.cas_badval - s0.cas_badval, 1);
    assert_int_equal(s1.get_hits - s0.get_hits, 1);
    check_class_sums(f->c);
}

static void
test_other_groups(void **state)
{
    struct fx *f = *state;
    struct server srv = {.cache = f->c};
    traffic(f->c);

    char *text = reply(&srv, "conns", 0);
    assert_string_equal(text, "STAT 9:addr tcp:1.2.3.4:5\r\n"
                              "STAT 9:state x\r\n"
                              "STAT 9:secs_since_last_cmd 0\r\n");
    assert_int_equal(srv.nwalk, 1);
    free(text);

    text = reply(&srv, "items", 0);
    assert_non_null(strstr(text, "STAT items:1:number "));
    free(text);

    text = reply(&srv, "slabs", 0);
    struct tc_stats t = stats(f->c);
    const char *at = line_of(text, "total_malloced");
    assert_non_null(at);
    assert_int_equal(value_at(at, "total_malloced"), t.total_malloced);
    free(text);

    text = reply(&srv, "no-such-group", -ENOENT);
    assert_string_equal(text, "");
    free(text);
    assert_int_equal(srv.nsum, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST(test_general_follows_table),
        TC_TEST(test_general_packed),
        TC_TEST(test_general_with_tier),
        TC_TEST(test_reset_zeroes_counters_only),
        TC_TEST_SLAB(test_class_counters),
        TC_TEST(test_class_counters_invalidating_store),
        TC_TEST(test_other_groups),
    };
    /* TC_TEST_FILTER=<glob> runs only the matching tests */
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("stats", tests, NULL, NULL);
}

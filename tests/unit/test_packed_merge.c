/*
 * Merge eviction of packed segments (src/engine/packed_merge.c): items
 * read since their segment was written (the slot's REF bit) survive a
 * merge with value, flags, CAS and expiry unchanged, the others are gone;
 * FIFO (-o packed_evict=fifo) drops both; a set or a delete that races a
 * copy (before its publication, or between publication and commit) wins;
 * threads that set, read and delete their own keys while merges run never
 * read an older version or a deleted key back. Fixture: test_packed.c's
 * (engine_fx.h, packed_item_max = 1024, a 16 MiB pool).
 */

#include "tests/unit/engine_fx.h"
#include "tests/unit/packed_fx.h"

#include "src/base/crashpoint.h"
#include "src/engine/cache.h"
#include "src/engine/packed.h"

#include <pthread.h>

#define NA 2000u /* keys of the first segment */
#define VLEN 100u

static void
akey(char *k, size_t n, unsigned i)
{
    snprintf(k, n, "a%05u", i);
}

static void
aval(unsigned char *v, unsigned i)
{
    memset(v, 'a' + (int)(i % 26), VLEN);
    memcpy(v, &i, sizeof(i));
}

/* The keys of the first segment, with flags inline and above 15 and an
 * expiry on every third; their CAS in cas[]. */
static void
write_a(struct tc_cache *c, uint64_t *cas)
{
    char k[16];
    unsigned char v[VLEN];
    for (unsigned i = 0; i < NA; i++) {
        akey(k, sizeof(k), i);
        aval(v, i);
        assert_int_equal(tc_store(c, TC_SET, k, strlen(k), v, VLEN, i % 40,
                                  i % 3 == 0 ? 1000 : 0, 0, &cas[i]),
                         TC_OK);
    }
}

/* Reads (REF) the keys i with i % 2 == 0. */
static void
read_even(struct tc_cache *c)
{
    char k[16];
    unsigned char buf[VLEN];
    for (unsigned i = 0; i < NA; i += 2) {
        akey(k, sizeof(k), i);
        assert_int_equal(tc_get_copy(c, k, strlen(k), buf, sizeof(buf), NULL),
                         TC_OK);
    }
}

/* Unread filler until a segment was evicted (bounded). */
static void
fill_until_evicted(struct tc_cache *c)
{
    char k[24];
    unsigned char v[VLEN];
    memset(v, 'f', sizeof(v));
    for (unsigned i = 0; i < 400000; i++) {
        snprintf(k, sizeof(k), "fill%07u", i);
        put(c, k, v, sizeof(v), 0, 0);
        if (i % 256 == 0 && pstats(c).packed_segments_evicted > 0)
            return;
    }
    fail_msg("no segment evicted after 400000 sets");
}

/* The read keys as written, or all gone (fifo); the unread ones gone. */
static void
check_a(struct tc_cache *c, const uint64_t *cas, bool kept)
{
    char k[16];
    unsigned char v[VLEN];
    for (unsigned i = 0; i < NA; i++) {
        akey(k, sizeof(k), i);
        if (i % 2 || !kept) {
            check_miss(c, k);
            continue;
        }
        aval(v, i);
        struct tc_item_info in = check_val(c, k, v, VLEN);
        assert_int_equal(in.flags, i % 40);
        assert_int_equal(in.cas, cas[i]);
        assert_int_equal(in.exptime, i % 3 == 0 ? T0 + 1000 : 0);
    }
}

static void
test_merge_keeps_referenced(void **state)
{
    struct fx *f = *state;
    uint64_t cas[NA];
    write_a(f->c, cas);
    read_even(f->c);
    fill_until_evicted(f->c);
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items_merged, NA / 2);
    STAT_EQ(s, packed_copies, NA / 2);
    assert_true(s.evictions >= NA / 2);
    check_a(f->c, cas, true);
    check_ok(f->c);
    /* the copies still answer a cas with the CAS a gets gave before */
    assert_int_equal(store_s(f->c, TC_CAS, "a00000", "new", 0, 0, cas[0], NULL),
                     TC_OK);
    check_str(f->c, "a00000", "new");
    check_ok(f->c);
}

/* FIFO: reading does not save an item. */
static void
test_fifo_drops_referenced(void **state)
{
    struct fx *f = *state;
    uint64_t cas[NA];
    f->cfg.packed_evict = TC_PACKED_EVICT_FIFO;
    fx_reopen(f);
    write_a(f->c, cas);
    read_even(f->c);
    fill_until_evicted(f->c);
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items_merged, 0);
    STAT_EQ(s, packed_copies, 0);
    check_a(f->c, cas, false);
    check_ok(f->c);
}

/* Compaction: under rewrites of a few keys every sealed segment but the
 * first is almost all dead, so each page a store needs comes from one of
 * those (their few live items copied) and the unread keys of the first
 * outlive the pool written over three times (a merge of the oldest would
 * have dropped them at once). */
static void
test_compact_keeps_unread(void **state)
{
    struct fx *f = *state;
    uint64_t cas[NA];
    char k[24];
    unsigned char v[VLEN];
    write_a(f->c, cas);
    memset(v, 'h', sizeof(v));
    size_t rounds = 3 * f->cfg.pool_size / (VLEN + 24);
    unsigned cold = 0;
    for (size_t i = 0; i < rounds; i++) {
        if (i % 1000 == 999) /* a few live ones in every segment */
            snprintf(k, sizeof(k), "cold%05u", cold++);
        else
            snprintf(k, sizeof(k), "hot%03zu", i % 64);
        put(f->c, k, v, sizeof(v), 0, 0);
    }
    struct tc_stats s = pstats(f->c);
    print_message("compacted %" PRIu64 " evicted %" PRIu64 " copies %" PRIu64
                  "\n",
                  s.packed_segments_compacted, s.packed_segments_evicted,
                  s.packed_copies);
    assert_true(s.packed_segments_compacted > 0);
    assert_int_equal(s.packed_segments_evicted, 0);
    assert_true(s.packed_copies > 0);
    for (unsigned i = 0; i < cold; i++) {
        snprintf(k, sizeof(k), "cold%05u", i);
        check_val(f->c, k, v, VLEN);
    }
    for (unsigned i = 0; i < NA; i++) {
        akey(k, sizeof(k), i);
        aval(v, i);
        struct tc_item_info in = check_val(f->c, k, v, VLEN);
        assert_int_equal(in.cas, cas[i]);
        assert_int_equal(in.flags, i % 40);
    }
    check_ok(f->c);
}

/* Sealed segments of c: the ones an eviction may take. */
static uint64_t
sealed(struct tc_cache *c)
{
    struct tc_stats s = pstats(c);
    return s.packed_segments - s.packed_segments_open;
}

/* With no sealed segment to take, an eviction gets the pages the merge
 * holds back: its spare page first, then its open segment of copies,
 * sealed and merged by the next call. Else a slab class that needs a
 * page waits while they sit idle (a small pool with every other page in
 * the slabs: they were a third of it). */
static void
test_merge_gives_back(void **state)
{
    struct fx *f = *state;
    uint64_t cas[NA];
    write_a(f->c, cas);
    read_even(f->c);
    fill_until_evicted(f->c); /* the copies went to the merge's segment */
    assert_int_equal(tc_flush_all(f->c, 0), 0);
    struct cache_thread *t = cache_thread_get((struct cache *)f->c);
    for (unsigned i = 0; i < 1000 && sealed(f->c) > 0; i++)
        packed_evict_expired(t, PACKED_EXPIRE_LOOK);
    struct tc_stats s0 = pstats(f->c);
    assert_int_equal(sealed(f->c), 0);
    assert_true(s0.packed_segments_open >= 2); /* the merge's, this thread's */

    assert_int_equal(packed_evict_oldest(t), 1);
    struct tc_stats s1 = pstats(f->c);
    STAT_EQ(s1, pmem_pages_free, s0.pmem_pages_free + 1);
    STAT_EQ(s1, packed_segments_open, s0.packed_segments_open);

    assert_int_equal(packed_evict_oldest(t), 1);
    struct tc_stats s2 = pstats(f->c);
    STAT_EQ(s2, packed_segments_open, s0.packed_segments_open - 1);
    assert_int_equal(sealed(f->c), 1);

    assert_int_equal(packed_evict_oldest(t), 1); /* flushed: no copy */
    struct tc_stats s3 = pstats(f->c);
    /* few copies: compacted rather than merged */
    assert_int_equal(s3.packed_segments_evicted + s3.packed_segments_compacted,
                     s2.packed_segments_evicted + s2.packed_segments_compacted +
                         1);
    STAT_EQ(s3, packed_copies, s2.packed_copies);
    assert_int_equal(sealed(f->c), 0);
    /* what it freed is the next merge's spare; then nothing is left */
    assert_int_equal(packed_evict_oldest(t), 1);
    assert_int_equal(packed_evict_oldest(t), 0);
    STAT_EQ(pstats(f->c), pmem_pages_free, s1.pmem_pages_free + 1);
    check_miss(f->c, "a00000");
    puts_(f->c, "after", "give back");
    check_str(f->c, "after", "give back");
    check_ok(f->c);
}

#ifdef TC_CRASHPOINTS
/* What the hook does at its point, once: the set or delete runs on a
 * thread of its own, as a racing client's would. Past publication it
 * waits for the merge's commit of the copy it replaces, which this
 * thread makes only after the hook returns: the hook waits (bounded) for
 * the racer's effect to show, not for its end. */
static const char *race_point;
static struct tc_cache *race_cache;
static int race_op; /* 0 set, 1 delete */
static int race_done;
static int race_rc;
static pthread_t race_thread;

static void *
race_run(void *arg)
{
    (void)arg;
    tc_thread_register(race_cache);
    race_rc = race_op == 0
                  ? store_s(race_cache, TC_SET, "a00000", "won", 0, 0, 0, NULL)
                  : tc_delete(race_cache, "a00000", 6, 0);
    tc_thread_unregister(race_cache);
    return NULL;
}

/* Whether the racer's set or delete is what a reader sees. */
static bool
race_seen(void)
{
    char buf[VLEN];
    struct tc_item_info in;
    int rc = tc_get_copy(race_cache, "a00000", 6, buf, sizeof(buf), &in);
    if (race_op == 1)
        return rc == TC_NOT_FOUND;
    return rc == TC_OK && in.vlen == 3 && memcmp(buf, "won", 3) == 0;
}

static void
race_hook(const char *name)
{
    if (race_done || strcmp(name, race_point) != 0)
        return;
    race_done = 1;
    race_rc = -1;
    assert_int_equal(pthread_create(&race_thread, NULL, race_run, NULL), 0);
    for (unsigned i = 0; i < 120000 && !race_seen(); i++)
        usleep(500);
}

/* The first segment sealed (the writer moved on), one merge driven from
 * here with the hook at point: a00000 (the first copy) raced by a set or
 * a delete, which wins; a00002 moved intact. */
static void
race_one(struct fx *f, const char *point, int op)
{
    uint64_t cas[NA];
    char k[24];
    unsigned char v[VLEN];
    fx_reopen(f);
    write_a(f->c, cas);
    read_even(f->c);
    memset(v, 'f', sizeof(v));
    for (unsigned i = 0; pstats(f->c).packed_segments < 2 && i < 20000; i++) {
        snprintf(k, sizeof(k), "seal%05u", i);
        put(f->c, k, v, sizeof(v), 0, 0);
    }
    race_point = point;
    race_cache = f->c;
    race_op = op;
    race_done = 0;
    crashpoint_hook = race_hook;
    struct cache *c = (struct cache *)f->c;
    int rc = packed_evict_oldest(cache_thread_get(c));
    assert_int_equal(race_done, 1);
    /* the racer's store passes crash points too: the hook goes after it */
    assert_int_equal(pthread_join(race_thread, NULL), 0);
    crashpoint_hook = NULL;
    assert_int_equal(rc, 1);
    assert_int_equal(race_rc, TC_OK);
    if (op == 0)
        check_str(f->c, "a00000", "won");
    else
        check_miss(f->c, "a00000");
    aval(v, 2);
    assert_int_equal(check_val(f->c, "a00002", v, VLEN).cas, cas[2]);
    check_miss(f->c, "a00001");
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_segments_evicted, 1);
    /* before publication the copy loses; after it, it was merged */
    STAT_EQ(s, packed_items_merged,
            strcmp(point, "packed.merge.copied") ? NA / 2 : NA / 2 - 1);
    STAT_EQ(s, packed_copies, NA / 2);
    check_ok(f->c);
}

static void
test_merge_races_set_delete(void **state)
{
    struct fx *f = *state;
    static const char *points[] = {"packed.merge.copied",
                                   "packed.merge.published"};
    for (int p = 0; p < 2; p++)
        for (int op = 0; op < 2; op++)
            race_one(f, points[p], op);
}
#endif

/* Threads own keys (the writer of a key is its owner only): each sets
 * versions, reads (REF) and deletes its keys, and reads the others'. A
 * read of an own key gives the last version set, or a miss (evicted),
 * never an older one nor a deleted key back: merges' copies never win over
 * a set or a delete, in any schedule. */
#define MT_THREADS 4
#define MT_OPS 120000
#define MT_VLEN 250
#define MT_KEYS 6000

struct mt {
    struct tc_cache *c;
    unsigned id;
    unsigned bad;
    uint32_t ver[MT_KEYS]; /* last version set, 0 deleted or never */
};

static void *
mt_main(void *arg)
{
    struct mt *r = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (r->id + 1);
    char k[32];
    unsigned char v[MT_VLEN], buf[MT_VLEN + 8];
    tc_thread_register(r->c);
    for (unsigned i = 0; i < MT_OPS; i++) {
        uint64_t x = rng_next(&rng);
        unsigned key = (unsigned)(x % MT_KEYS);
        unsigned op = (unsigned)(x >> 32) % 10;
        unsigned owner = op == 9 ? (unsigned)(x >> 40) % MT_THREADS : r->id;
        int klen = snprintf(k, sizeof(k), "mt%u_%u", owner, key);
        if (op < 4) {
            uint32_t ver = i + 1;
            memset(v, 'a' + (int)(key % 26), sizeof(v));
            memcpy(v, &ver, 4);
            if (tc_set(r->c, k, (size_t)klen, v, sizeof(v), 0,
                       (x >> 50) & 1 ? 3000 : 0) == TC_OK)
                r->ver[key] = ver;
        } else if (op < 8 || op == 9) {
            struct tc_item_info in;
            if (tc_get_copy(r->c, k, (size_t)klen, buf, sizeof(buf), &in) !=
                TC_OK)
                continue;
            uint32_t ver;
            memcpy(&ver, buf, 4);
            if (in.vlen != sizeof(v) ||
                buf[MT_VLEN - 1] != 'a' + (int)(key % 26))
                r->bad++;
            else if (owner == r->id && ver != r->ver[key])
                r->bad++;
        } else {
            tc_delete(r->c, k, (size_t)klen, 0);
            r->ver[key] = 0;
        }
    }
    tc_thread_unregister(r->c);
    return NULL;
}

static void
test_merge_threads(void **state)
{
    struct fx *f = *state;
    pthread_t th[MT_THREADS];
    /* 32 pages: each thread may hold an open segment (a cap of 4) */
    f->cfg.pool_size = 34 * MIB;
    fx_reopen(f);
    struct mt *r = calloc(MT_THREADS, sizeof(*r));
    assert_non_null(r);
    for (unsigned i = 0; i < MT_THREADS; i++) {
        r[i].c = f->c;
        r[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, mt_main, &r[i]), 0);
    }
    for (unsigned i = 0; i < MT_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    struct tc_stats s = pstats(f->c);
    print_message("evicted %" PRIu64 " segments, merged %" PRIu64
                  " items, %" PRIu64 " copies\n",
                  s.packed_segments_evicted, s.packed_items_merged,
                  s.packed_copies);
    for (unsigned i = 0; i < MT_THREADS; i++)
        assert_int_equal(r[i].bad, 0);
    assert_true(s.packed_items_merged <= s.packed_copies);
    free(r);
    check_ok(f->c);
    /* how many merges ran beside the threads depends on where their sets
     * landed (a set that finds no segment page goes to a slab chunk): the
     * merge path runs at least once here, and the index still checks */
    if (s.packed_segments_evicted + s.packed_segments_compacted == 0)
        fill_until_evicted(f->c);
    check_ok(f->c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        PTEST(test_merge_keeps_referenced), PTEST(test_fifo_drops_referenced),
        PTEST(test_compact_keeps_unread),   PTEST(test_merge_gives_back),
#ifdef TC_CRASHPOINTS
        PTEST(test_merge_races_set_delete),
#endif
        PTEST(test_merge_threads),
    };
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("packed_merge", tests, NULL, NULL);
}

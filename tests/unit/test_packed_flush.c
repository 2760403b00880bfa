/*
 * A touch's rewrite of a packed item (a copy: packed_rewrite_exp) racing
 * flush_all (doc/design/small-items.md, "flush_all"). The copy reads its
 * source before the flush and reserves its span after it, in a segment
 * opened after the flush read the counter: the copy's derived sequence is
 * above the watermark, its source's below. The flush must cover the copy
 * as it covers the source: the key stays gone, at once, after a clean
 * close and after a crash (the restart scan judges the copy).
 *
 * The interleavings are forced on one thread through crash points (debug
 * builds; without them the file tests nothing): the flush runs inside the
 * touch, between its source read and its reservation
 * ("packed.copy.read"), and the touch inside the flush, between its
 * counter read and its watermark store ("cache.flush.read", a window a
 * check of the watermark alone at the publication would miss).
 */

#include "tests/unit/restart_fx.h"
#include "tests/unit/packed_fx.h"

#include "src/base/crashpoint.h"
#include "src/engine/cache.h"
#include "src/engine/packed.h"

/* "k"'s TTL, and the touch's: past what exp16 reaches from k's segment,
 * so the touch copies, into a segment of a longer TTL bucket that it opens
 * (after the flush read the counter: above its watermark) */
#define NEAR_TTL 100
#define FAR_TTL 100000

/* The store on, in a pool with room for more than one open segment (the
 * cap is 1/8 of the pages): the touch's copy opens its own. */
static void
configure(struct fx *f)
{
    f->cfg.packed_item_max = PACKED_MAX;
    f->cfg.pool_size = 64 * MIB;
}

#ifdef TC_CRASHPOINTS
static const char *const points[] = {"packed.copy.read", "cache.flush.read"};

static struct tc_cache *hook_cache;
static const char *hook_at;
static int hook_hits;
static int hook_rc;

/* At the point, once: the other side of the race, on this thread. */
static void
hook(const char *name)
{
    if (!hook_at || strcmp(name, hook_at) != 0)
        return;
    hook_at = NULL;
    hook_hits++;
    if (strcmp(name, "packed.copy.read") == 0)
        hook_rc = tc_flush_all(hook_cache, 0);
    else
        hook_rc = tc_touch(hook_cache, "k", 1, FAR_TTL);
}

/* "k" stored packed with a short TTL, then a touch that rewrites it racing
 * a flush_all at point, then "after" stored. 0, or what went wrong. */
static int
race(struct tc_cache *c, const char *point)
{
    if (store_s(c, TC_SET, "k", "old", 3, NEAR_TTL, 0, NULL) != TC_OK)
        return 1;
    uint64_t copies = pstats(c).packed_copies;
    hook_cache = c;
    hook_at = point;
    hook_hits = 0;
    hook_rc = -1;
    crashpoint_hook = hook;
    int rc = strcmp(point, "packed.copy.read") == 0
                 ? tc_touch(c, "k", 1, FAR_TTL) /* read before the flush */
                 : tc_flush_all(c, 0);
    crashpoint_hook = NULL;
    if (rc != TC_OK || hook_rc != TC_OK || hook_hits != 1)
        return 2;
    /* the touch did write a copy (its publication is what is judged) */
    if (pstats(c).packed_copies != copies + 1)
        return 3;
    if (store_s(c, TC_SET, "after", "new", 0, 0, 0, NULL) != TC_OK)
        return 4;
    return 0;
}

/* The flushed key stays gone: at once, then after a clean close. */
static void
test_touch_copy_racing_flush(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;

    configure(f);
    for (unsigned i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
        assert_int_equal(fx_open(f), 0);
        assert_int_equal(race(f->c, points[i]), 0);
        check_miss(f->c, "k");
        check_str(f->c, "after", "new");
        check_ok(f->c);
        tc_close(f->c);
        f->c = NULL;
        reopen(f, &info);
        check_miss(f->c, "k");
        check_str(f->c, "after", "new");
        check_ok(f->c);
        tc_close(f->c);
        f->c = NULL;
        unlink(meta_path(f));
    }
}

/* The same race in a child that dies right after it, nothing read: the
 * restart scan finds the copy committed in PMEM and must judge it
 * flushed. */
static void
test_touch_copy_racing_flush_then_crash(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;

    configure(f);
    for (unsigned i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (fx_open(f) != 0)
                _exit(20);
            _exit(race(f->c, points[i])); /* a crash: no tc_close */
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
        reopen(f, &info);
        assert_int_equal(info.kind, TC_START_RECOVERED);
        check_miss(f->c, "k");
        check_str(f->c, "after", "new");
        check_ok(f->c);
        tc_close(f->c);
        f->c = NULL;
        unlink(meta_path(f));
    }
}

/* ---- a merge's copies ----------------------------------------------- */

#define MKEYS 200u

/* At the point, once: a flush inside a merge that judged an item live
 * and has not copied it yet, or a merge inside a flush that read the
 * counter and has not stored its watermark. */
static void
merge_hook(const char *name)
{
    if (!hook_at || strcmp(name, hook_at) != 0)
        return;
    hook_at = NULL;
    hook_hits++;
    if (strcmp(name, "packed.merge.judged") == 0)
        hook_rc = tc_flush_all(hook_cache, 0);
    else
        hook_rc = packed_evict_oldest(
                      cache_thread_get((struct cache *)hook_cache)) == 1
                      ? TC_OK
                      : -1;
}

/* Keys m0.. stored and read (REF: a merge keeps them) in the first
 * segment, sealed by filler, then a merge racing a flush_all at point,
 * then "after" stored. 0, or what went wrong. */
static int
merge_race(struct tc_cache *c, const char *point)
{
    char k[24], v[32];
    for (unsigned i = 0; i < MKEYS; i++) {
        snprintf(k, sizeof(k), "m%u", i);
        snprintf(v, sizeof(v), "val%u", i);
        if (store_s(c, TC_SET, k, v, i, 0, 0, NULL) != TC_OK ||
            tc_get_copy(c, k, strlen(k), v, sizeof(v), NULL) != TC_OK)
            return 1;
    }
    memset(v, 'f', sizeof(v));
    for (unsigned i = 0; pstats(c).packed_segments < 2; i++) {
        snprintf(k, sizeof(k), "seal%05u", i);
        if (i >= 60000 || tc_set(c, k, strlen(k), v, sizeof(v), 0, 0) != TC_OK)
            return 2;
    }
    uint64_t copies = pstats(c).packed_copies;
    hook_cache = c;
    hook_at = point;
    hook_hits = 0;
    hook_rc = -1;
    crashpoint_hook = merge_hook;
    int rc =
        strcmp(point, "packed.merge.judged") == 0
            ? (packed_evict_oldest(cache_thread_get((struct cache *)c)) == 1
                   ? TC_OK
                   : -1)
            : tc_flush_all(c, 0);
    crashpoint_hook = NULL;
    if (rc != TC_OK || hook_rc != TC_OK || hook_hits != 1)
        return 3;
    /* the merge did write a copy (its publication is what is judged) */
    if (pstats(c).packed_copies == copies)
        return 4;
    if (store_s(c, TC_SET, "after", "new", 0, 0, 0, NULL) != TC_OK)
        return 5;
    return 0;
}

static void
check_merged_gone(struct fx *f)
{
    for (unsigned i = 0; i < MKEYS; i++) {
        char k[24];
        snprintf(k, sizeof(k), "m%u", i);
        check_miss(f->c, k);
    }
    check_str(f->c, "after", "new");
    check_ok(f->c);
}

/* A merge's copies racing a flush: the flushed keys stay gone, at once,
 * after a clean close, and after a crash right after the race. */
static void
test_merge_copy_racing_flush(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;
    static const char *const mpoints[] = {"packed.merge.judged",
                                          "cache.flush.read"};

    configure(f);
    for (unsigned i = 0; i < 2 * 2; i++) {
        const char *point = mpoints[i % 2];
        bool crash = i >= 2;
        if (crash) {
            pid_t pid = fork();
            assert_true(pid >= 0);
            if (pid == 0) {
                if (fx_open(f) != 0)
                    _exit(20);
                _exit(merge_race(f->c, point)); /* a crash: no tc_close */
            }
            int st = 0;
            assert_int_equal(waitpid(pid, &st, 0), pid);
            assert_true(WIFEXITED(st));
            assert_int_equal(WEXITSTATUS(st), 0);
        } else {
            assert_int_equal(fx_open(f), 0);
            assert_int_equal(merge_race(f->c, point), 0);
            check_merged_gone(f);
            tc_close(f->c);
            f->c = NULL;
        }
        reopen(f, &info);
        assert_int_equal(info.kind, crash ? TC_START_RECOVERED : TC_START_WARM);
        check_merged_gone(f);
        tc_close(f->c);
        f->c = NULL;
        unlink(meta_path(f));
    }
}
#endif

/* No flush: the same touch's copy is published and keeps its expiry
 * (what the tests above would see if the flush did not cover it). */
static void
test_touch_copy_without_flush(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;

    configure(f);
    assert_int_equal(fx_open(f), 0);
    assert_int_equal(store_s(f->c, TC_SET, "k", "old", 3, NEAR_TTL, 0, NULL),
                     TC_OK);
    uint64_t copies = pstats(f->c).packed_copies;
    assert_int_equal(tc_touch(f->c, "k", 1, FAR_TTL), TC_OK);
    assert_int_equal(pstats(f->c).packed_copies, copies + 1);
    tc_close(f->c);
    f->c = NULL;
    reopen(f, &info);
    struct tc_item_info in = check_str(f->c, "k", "old");
    assert_true(in.exptime > T0 + FAR_TTL / 2);
    assert_int_equal(in.flags, 3);
    tc_close(f->c);
    f->c = NULL;
    unlink(meta_path(f));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
#ifdef TC_CRASHPOINTS
        TC_TEST_NOOPEN(test_touch_copy_racing_flush),
        TC_TEST_NOOPEN(test_touch_copy_racing_flush_then_crash),
        TC_TEST_NOOPEN(test_merge_copy_racing_flush),
#endif
        TC_TEST_NOOPEN(test_touch_copy_without_flush),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Packed items across a restart (src/engine/restart.c, scan_segment):
 * after a crash (a forked child that _exits without closing) and after a
 * clean close, every acknowledged item comes back with its value, flags,
 * expiry and CAS, packed or in a slab, and never a deleted or replaced
 * one; a touch's rewrite (a pending copy committed after its publication)
 * comes back with its new expiry and its CAS. Fixture: restart_fx.h with
 * packed_item_max = 1024: keys of up to about 1000 value bytes are packed,
 * larger ones go to slabs, and a replacement may move a key across.
 * Crash points (debug builds): a write cut before its commit and a touch's
 * copy published but still pending do not come back; what they would
 * have replaced does. A merge eviction cut after a copy was written, or
 * published but not committed, brings back nothing of its victim; one
 * that finished brings back the kept items as they were, and not one that
 * a set or a delete replaced after it.
 */

#include "tests/unit/restart_fx.h"
#include "tests/unit/packed_fx.h"

#include "src/base/crashpoint.h"
#include "src/engine/cache.h"
#include "src/engine/packed.h"

#define TOUCHED 7u /* keys 0, 7, 14... get an expiry by a rewrite */

/* restart_fx.h's workload, then a touch of every live TOUCHED-th key: a
 * packed one without an expiry is rewritten (a pending copy). */
static void
work(struct fx *f, struct truth *t)
{
    workload(f, t);
    for (unsigned i = 0; i < NKEYS; i += TOUCHED) {
        char k[16];
        key_of(k, i);
        assert_int_equal(tc_touch(f->c, k, strlen(k), 1000),
                         t->live[i] ? TC_OK : TC_NOT_FOUND);
    }
    assert_true(pstats(f->c).packed_items > NKEYS / 4);
}

/* Every key as the truth says, the touched ones' expiry, and extra more
 * items than the truth's. */
static void
judge_packed(struct fx *f, const struct truth *t, unsigned extra)
{
    unsigned nlive = 0, want = 0;
    uint32_t ref = 0;
    judge(f->c, t, &nlive);
    for (unsigned i = 0; i < NKEYS; i++)
        want += t->live[i];
    assert_int_equal(nlive, want);
    for (unsigned i = 0; i < NKEYS; i += TOUCHED) {
        char k[16];
        struct got g;
        unsigned char buf[4096];
        if (!t->live[i] || t->vlen[i] > sizeof(buf))
            continue;
        key_of(k, i);
        assert_int_equal(get_cb(f->c, k, &g, buf, sizeof(buf)), TC_OK);
        /* all touched within a few seconds of each other (the clock may
         * be the fixture's) */
        if (!ref)
            ref = g.info.exptime;
        assert_true(g.info.exptime != 0 && g.info.exptime + 5 >= ref &&
                    g.info.exptime <= ref + 5);
        if (i + 1 < NKEYS && t->live[i + 1] && t->vlen[i + 1] <= sizeof(buf)) {
            key_of(k, i + 1); /* untouched: no expiry */
            assert_int_equal(get_cb(f->c, k, &g, buf, sizeof(buf)), TC_OK);
            assert_int_equal(g.info.exptime, 0);
        }
    }
    assert_true(ref != 0);
    struct tc_stats s = pstats(f->c);
    assert_true(s.packed_items > NKEYS / 4);
    assert_int_equal(s.curr_items, want + extra);
    check_ok(f->c);
}

static void
test_crash_brings_back_packed(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;

    f->cfg.packed_item_max = PACKED_MAX;
    run_child(f, t, work);
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    assert_int_equal(info.dropped_torn, 0);
    judge_packed(f, t, 0);
    /* the CAS counter resumed above every item's */
    uint64_t cas = 0;
    assert_int_equal(store_s(f->c, TC_SET, "after", "x", 0, 0, 0, &cas), TC_OK);
    assert_true(cas > t->max_cas);
    /* and a second crash-free round: a clean close, then warm */
    tc_close(f->c);
    f->c = NULL;
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    judge_packed(f, t, 1); /* and "after" */
    check_str(f->c, "after", "x");
    close_clean(f, meta_path(f), t);
}

/* A deleted packed key, then the pool reopened without the packed store:
 * its segments are given back, slab items still come back. */
static void
test_packed_off_gives_pages_back(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;

    f->cfg.packed_item_max = PACKED_MAX;
    assert_int_equal(fx_open(f), 0);
    assert_int_equal(store_s(f->c, TC_SET, "p", "small", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "d", "small", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(tc_delete(f->c, "d", 1, 0), TC_OK);
    assert_int_equal(pstats(f->c).packed_items, 1);
    tc_close(f->c);
    f->c = NULL;
    reopen(f, &info);
    check_str(f->c, "p", "small");
    check_miss(f->c, "d");
    assert_int_equal(pstats(f->c).packed_items, 1);
    tc_close(f->c);
    f->c = NULL;
    f->cfg.packed_item_max = 0;
    reopen(f, &info);
    check_miss(f->c, "p");
    assert_int_equal(pstats(f->c).curr_items, 0);
    check_ok(f->c);
    close_clean(f, meta_path(f), NULL);
}

/* flush_all, then a crash: what the flush took stays gone, what was
 * stored after it (in a segment opened after it) comes back. */
static void
flush_work(struct fx *f, struct truth *t)
{
    (void)t;
    assert_int_equal(store_s(f->c, TC_SET, "p1", "one", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(tc_flush_all(f->c, 0), TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "p2", "two", 0, 0, 0, NULL), TC_OK);
}

static void
test_flush_then_crash(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;
    struct truth *t = truth_new();

    f->cfg.packed_item_max = PACKED_MAX;
    run_child(f, t, flush_work);
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    check_miss(f->c, "p1");
    check_str(f->c, "p2", "two");
    assert_int_equal(pstats(f->c).packed_items, 1);
    check_ok(f->c);
    close_clean(f, meta_path(f), t);
}

#ifdef TC_CRASHPOINTS
static const char *crash_at;

static void
crash_hook(const char *name)
{
    if (crash_at && strcmp(name, crash_at) == 0)
        _exit(77);
}

/* In a child: "a" and "t" stored packed (CAS in *cas), then op dies at
 * point: the parent judges what came back. */
static void
crash_child(struct fx *f, const char *point, int op, uint64_t *cas)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (fx_open(f) != 0)
            _exit(2);
        if (store_s(f->c, TC_SET, "a", "old", 5, 0, 0, NULL) != TC_OK ||
            store_s(f->c, TC_SET, "t", "val", 6, 0, 0, cas) != TC_OK)
            _exit(3);
        crashpoint_hook = crash_hook;
        crash_at = point;
        if (op == 0)
            store_s(f->c, TC_SET, "a", "new", 5, 0, 0, NULL);
        else if (op == 1)
            store_s(f->c, TC_SET, "b", "cut", 5, 0, 0, NULL);
        else
            /* past what exp16 reaches from its segment: a copy */
            tc_touch(f->c, "t", 1, 100000);
        _exit(4); /* the point was not reached */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 77);
}

static void
test_cut_write_and_pending_copy_gone(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;
    uint64_t *cas = mmap(NULL, sizeof(*cas), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(cas != MAP_FAILED);

    f->cfg.packed_item_max = PACKED_MAX;
    for (int op = 0; op < 3; op++) {
        unlink(f->path);
        crash_child(f, op < 2 ? "pitem.written" : "packed.copy.published", op,
                    cas);
        reopen(f, &info);
        assert_int_equal(info.kind, TC_START_RECOVERED);
        /* the cut write: the old value (op 0), no key (op 1) */
        check_str(f->c, "a", "old");
        check_miss(f->c, "b");
        /* the pending copy: the source, without the touch's expiry */
        struct tc_item_info in = check_str(f->c, "t", "val");
        assert_int_equal(in.exptime, 0);
        assert_int_equal(in.flags, 6);
        assert_true(in.cas == *cas);
        assert_int_equal(pstats(f->c).packed_items, 2);
        check_ok(f->c);
        /* the store goes on past the cut in a new segment */
        assert_int_equal(store_s(f->c, TC_SET, "a", "again", 0, 0, 0, NULL),
                         TC_OK);
        check_str(f->c, "a", "again");
        tc_close(f->c);
        f->c = NULL;
        reopen(f, &info);
        check_str(f->c, "a", "again");
        check_str(f->c, "t", "val");
        check_miss(f->c, "b");
        tc_close(f->c);
        f->c = NULL;
    }
    unlink(meta_path(f));
    munmap(cas, sizeof(*cas));
}
#endif

#ifdef TC_CRASHPOINTS
#define MKEYS 200u

/* In a child: keys m0..m199 (flags i, CAS in cas[]) in the first segment,
 * the even ones read (REF), the segment sealed by filler, then one merge
 * driven from here, cut at point (NULL: it finishes, then m0 is set and
 * m2 deleted, and the child dies). */
static void
merge_child(struct fx *f, const char *point, uint64_t *cas)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char k[24], v[32];
        if (fx_open(f) != 0)
            _exit(2);
        for (unsigned i = 0; i < MKEYS; i++) {
            snprintf(k, sizeof(k), "m%u", i);
            snprintf(v, sizeof(v), "val%u", i);
            if (store_s(f->c, TC_SET, k, v, i, 0, 0, &cas[i]) != TC_OK)
                _exit(3);
        }
        for (unsigned i = 0; i < MKEYS; i += 2) {
            snprintf(k, sizeof(k), "m%u", i);
            if (tc_get_copy(f->c, k, strlen(k), v, sizeof(v), NULL) != TC_OK)
                _exit(3);
        }
        memset(v, 'f', sizeof(v));
        for (unsigned i = 0; i < 60000; i++) {
            struct tc_stats s;
            tc_stats(f->c, &s);
            if (s.packed_segments >= 2)
                break;
            snprintf(k, sizeof(k), "seal%05u", i);
            if (tc_set(f->c, k, strlen(k), v, sizeof(v), 0, 0) != TC_OK)
                _exit(3);
            cas[MKEYS] = i; /* the last: in the second segment */
        }
        crashpoint_hook = crash_hook;
        crash_at = point;
        struct cache *c = (struct cache *)f->c;
        if (packed_evict_oldest(cache_thread_get(c)) != 1)
            _exit(5);
        if (point)
            _exit(4); /* the point was not reached */
        if (store_s(f->c, TC_SET, "m0", "new", 0, 0, 0, NULL) != TC_OK ||
            tc_delete(f->c, "m2", 2, 0) != TC_OK)
            _exit(6);
        _exit(77);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 77);
}

static void
test_merge_crash(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;
    static const char *points[] = {"packed.merge.copied",
                                   "packed.merge.published", NULL};
    uint64_t *cas =
        mmap(NULL, (MKEYS + 1) * sizeof(*cas), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(cas != MAP_FAILED);

    f->cfg.packed_item_max = PACKED_MAX;
    for (int p = 0; p < 3; p++) {
        unlink(f->path);
        merge_child(f, points[p], cas);
        reopen(f, &info);
        assert_int_equal(info.kind, TC_START_RECOVERED);
        for (unsigned i = 0; i < MKEYS; i++) {
            char k[24], v[32];
            snprintf(k, sizeof(k), "m%u", i);
            snprintf(v, sizeof(v), "val%u", i);
            /* cut: nothing of the victim; finished: the kept ones, less
             * what was replaced or deleted after */
            if (points[p] || i % 2 || i == 2) {
                check_miss(f->c, k);
                continue;
            }
            if (i == 0) {
                check_str(f->c, k, "new");
                continue;
            }
            struct tc_item_info in = check_str(f->c, k, v);
            assert_int_equal(in.flags, i);
            assert_int_equal(in.cas, cas[i]);
            assert_int_equal(in.exptime, 0);
        }
        char k[24];
        snprintf(k, sizeof(k), "seal%05u", (unsigned)cas[MKEYS]);
        check_str(f->c, k, "ffffffffffffffffffffffffffffffff");
        check_ok(f->c);
        tc_close(f->c);
        f->c = NULL;
    }
    unlink(meta_path(f));
    munmap(cas, (MKEYS + 1) * sizeof(*cas));
}
#endif

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_crash_brings_back_packed),
        TC_TEST_NOOPEN(test_packed_off_gives_pages_back),
        TC_TEST_NOOPEN(test_flush_then_crash),
#ifdef TC_CRASHPOINTS
        TC_TEST_NOOPEN(test_cut_write_and_pending_copy_gone),
        TC_TEST_NOOPEN(test_merge_crash),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

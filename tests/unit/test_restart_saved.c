/*
 * Restart after a clean stop that saved its state (restart_file,
 * src/engine/restart_save.h): the open takes the saved index instead of
 * scanning, keeps the CAS counter where the close left it, and scans
 * instead when the file is damaged, stale or another close's
 * (restart_fx.h).
 */

#include "restart_fx.h"

#include "src/engine/restart_save_layout.h"

#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* A new pool whose clean close saves its state to meta. */
static void
open_saved(struct fx *f, const char *meta)
{
    f->cfg.pool_size = 64 * MIB;
    f->cfg.restart_file = meta;
    assert_int_equal(fx_open(f), 0);
}

/* The workload in this process, then a clean close that saves the
 * state. */
static void
close_saved(struct fx *f, struct truth *t, const char *meta)
{
    open_saved(f, meta);
    workload(f, t);
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(access(meta, F_OK), 0);
}

static void
test_saved_index_warm(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);
    unsigned nlive;

    close_saved(f, t, meta);
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    assert_int_equal(access(meta, F_OK), -1); /* used once */
    judge(f->c, t, &nlive);
    assert_int_equal(nlive, NKEYS - NKEYS / 5);
    assert_int_equal(info.items, nlive);
    assert_int_equal(info.dropped, 0);
    assert_int_equal(stats(f->c).curr_items, nlive);
    assert_int_equal(tc_check(f->c), 0);
    uint64_t cas = 0;
    assert_int_equal(tc_store(f->c, TC_SET, "new", 3, "x", 1, 0, 0, 0, &cas),
                     TC_OK);
    assert_true(cas > t->max_cas);
    /* the slab state is usable: replace, delete, store chained items */
    set_rec(f->c, t, 0, 9);
    set_rec(f->c, t, 7, 9);
    del_rec(f->c, t, 3);
    judge(f->c, t, &nlive);
    assert_int_equal(tc_check(f->c), 0);

    /* and a second clean cycle the same */
    tc_close(f->c);
    f->c = NULL;
    reopen(f, &info);
    assert_string_equal(info.reason, "with the saved state");
    judge(f->c, t, &nlive);
    assert_int_equal(info.items, nlive + 1);
    close_clean(f, meta, t);
}

/* What only the saved state knows: the CAS counter where the close left
 * it. The item with the highest CAS deleted before the close, the scan
 * sees only lower ones; a client may still hold that CAS, so no new item
 * may get it again. */
static void
test_saved_state_cas(void **state)
{
    struct fx *f = *state;
    const char *meta = meta_path(f);
    uint64_t top = 0, cas = 0;

    open_saved(f, meta);
    for (unsigned i = 0; i < 100; i++)
        puts_(f->c, "k", "v");
    assert_int_equal(tc_store(f->c, TC_SET, "top", 3, "x", 1, 0, 0, 0, &top),
                     TC_OK);
    for (unsigned i = 0; i < 50; i++)
        assert_int_equal(
            tc_store(f->c, TC_SET, "top", 3, "x", 1, 0, 0, 0, &top), TC_OK);
    assert_int_equal(tc_delete(f->c, "top", 3, 0), TC_OK);
    tc_close(f->c);
    f->c = NULL;
    struct tc_open_info info;
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    assert_int_equal(tc_store(f->c, TC_SET, "new", 3, "x", 1, 0, 0, 0, &cas),
                     TC_OK);
    assert_true(cas > top);
    close_clean(f, meta, NULL);
}

/* Damage to the saved file: the open scans instead, every value right. */
static void
damage_flip(const char *meta)
{
    int fd = open(meta, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char b;
    off_t at = st.st_size / 2;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void
damage_truncate(const char *meta)
{
    struct stat st;
    assert_int_equal(stat(meta, &st), 0);
    assert_int_equal(truncate(meta, st.st_size - 8), 0);
}

static void
damage_header(const char *meta)
{
    int fd = open(meta, O_RDWR);
    assert_true(fd >= 0);
    uint64_t v;
    off_t at = offsetof(struct restart_saved_hdr, cas_seq);
    assert_int_equal(pread(fd, &v, 8, at), 8);
    v += 1;
    assert_int_equal(pwrite(fd, &v, 8, at), 8);
    close(fd);
}

static void
damage_short(const char *meta)
{
    assert_int_equal(truncate(meta, 10), 0);
}

static void
test_saved_index_damaged(void **state)
{
    struct fx *f = *state;
    void (*damage[])(const char *) = {damage_flip, damage_truncate,
                                      damage_header, damage_short};
    const char *meta = meta_path(f);

    for (unsigned d = 0; d < sizeof(damage) / sizeof(damage[0]); d++) {
        struct truth *t = truth_new();
        struct tc_open_info info;
        unsigned nlive;
        close_saved(f, t, meta);
        damage[d](meta);
        reopen(f, &info);
        assert_int_equal(info.kind, TC_START_WARM);
        assert_non_null(strstr(info.reason, "without saved state"));
        assert_int_equal(access(meta, F_OK), -1);
        judge(f->c, t, &nlive);
        assert_int_equal(info.items, nlive);
        assert_int_equal(stats(f->c).curr_items, nlive);
        assert_int_equal(tc_check(f->c), 0);
        close_clean(f, meta, t);
    }
}

/* A warm start consumes the clean mark: a crash after it scans
 * (recovered), and a saved file from an older close is not taken. */
static void
test_saved_index_consumed(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);
    char old[240];
    unsigned nlive;

    snprintf(old, sizeof(old), "%s.old", meta);
    close_saved(f, t, meta);
    assert_int_equal(link(meta, old), 0); /* keep a copy */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (open_existing(f) != 0)
            _exit(2);
        tc_open_info(f->c, &info);
        if (info.kind != TC_START_WARM)
            _exit(3);
        _exit(0); /* a crash after the warm start */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the old close's file put back: the pool is not clean, it scans */
    assert_int_equal(rename(old, meta), 0);
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    assert_int_equal(access(meta, F_OK), -1); /* discarded */
    judge(f->c, t, &nlive);
    assert_int_equal(info.items, nlive);
    tc_close(f->c);
    f->c = NULL;

    /* an older close's file beside a pool closed clean since: not this
     * close's, so scanned */
    close_saved(f, t, meta);
    assert_int_equal(link(meta, old), 0);
    assert_int_equal(open_existing(f), 0);
    tc_close(f->c); /* saves a newer file */
    f->c = NULL;
    assert_int_equal(rename(old, meta), 0);
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_non_null(strstr(info.reason, "without saved state"));
    judge(f->c, t, &nlive);
    close_clean(f, meta, t);
}

/* Another index size (expected_items): the saved state is still this
 * pool's (the scan fills an index of any size); a delayed flush that came
 * due while stopped: everything dropped as flushed. */
static void
test_saved_index_settings(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);
    unsigned nlive;

    close_saved(f, t, meta);
    f->cfg.expected_items = 1u << 20;
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    judge(f->c, t, &nlive);
    assert_int_equal(info.items, nlive);
    /* a flush_all 100 s ahead, then a start 200 s later */
    assert_int_equal(tc_flush_all(f->c, 100), 0);
    tc_close(f->c);
    f->c = NULL;
    tc_clock_set(T0 + 200);
    reopen(f, &info);
    assert_string_equal(info.reason, "with the saved state");
    assert_int_equal(info.items, 0);
    assert_int_equal(info.dropped_flushed, nlive);
    memset(t->live, 0, sizeof(t->live));
    judge(f->c, t, &nlive);
    assert_int_equal(stats(f->c).curr_items, 0);
    close_clean(f, meta, t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_saved_index_warm),
        TC_TEST_NOOPEN(test_saved_state_cas),
        TC_TEST_NOOPEN(test_saved_index_damaged),
        TC_TEST_NOOPEN(test_saved_index_consumed),
        TC_TEST_NOOPEN(test_saved_index_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * A copy in the pool against a client's set, the two threads meeting at
 * their crash points, then a crash (crashpoints_fx.h): a page move against a
 * set and against a set that promotes the key, a demotion from the DRAM hot
 * pool against a set before and after its copy is published.
 */

#include "crashpoints_fx.h"

static void
race_hook(const char *name)
{
    if (role == 1 && strcmp(name, "set.written") == 0) {
        client_meets_mover();
    } else if (role == 2 && strcmp(name, "move.copied") == 0) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

static void *
race_client(void *arg)
{
    struct fx *f = arg;
    role = 1;
    assert_int_equal(set_gen(f->c, 0, 500), TC_OK);
    role = 0;
    sem_post(&client_acked);
    return NULL;
}

/* race_work with key 0 made write-hot first (its racing set then goes to
 * the DRAM hot pool: a promotion) */
static bool race_promote;

/* Key 0 alone on the first page of its class, the second page three
 * quarters live, so that the page a reassignment takes (the one with the
 * most free chunks) is the first, and key 0 is the one item it moves. */
static void
race_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    if (race_promote) {
        tc_maintain(f->c);
        for (unsigned w = 0; w < 300; w++) /* to PMEM: nothing is hot yet */
            assert_int_equal(set_gen(f->c, 0, 500), TC_OK);
    }
    assert_int_equal(set_gen(f->c, 0, 500), TC_OK);
    int cls = store_find_class(f->c, "probe-src", 500);
    tc_delete(f->c, "probe-src", 9, 0);
    int dst = store_find_class(f->c, "probe-dst", 3000);
    tc_delete(f->c, "probe-dst", 9, 0);
    unsigned j = 1;
    while (class_pages(f->c, cls) < 2) {
        assert_true(j < NK);
        assert_int_equal(set_gen(f->c, j++, 500), TC_OK);
    }
    unsigned end = j + j * 3 / 4;
    assert_true(end < NK);
    for (unsigned i = j; i < end; i++)
        assert_int_equal(set_gen(f->c, i, 500), TC_OK);
    for (unsigned i = 1; i < j + 64; i++)
        del_key(f->c, i);
    tc_maintain(f->c);  /* the deleted chunks back to their pages */
    if (race_promote) { /* and key 0 hot: its next set goes to DRAM */
        struct tc_hotkey hk[1];
        assert_int_equal(tc_hotkeys(f->c, false, hk, 1), 1);
        assert_true(hk[0].klen == 7 && memcmp(hk[0].key, "cp00000", 7) == 0);
        assert_true(hk[0].write_rate >= 10 && !hk[0].in_dram);
    }
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_hook, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_client, f), 0);
    sem_wait(&client_written);
    role = 2;
    int rc = tc_slab_reassign(f->c, cls, dst);
    /* the move did not copy key 0 (another page was taken): no race */
    print_message("reassign: %d, key 0 not moved\n", rc);
    _exit(3);
}

static void
race_hot_hook(const char *name)
{
    if (role == 1 && strcmp(name, "set.written") == 0) {
        client_meets_mover();
    } else if (role == 2 && strcmp(name, "hot.demote") == 0) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

/* The demotion's copy published (not committed) when the set, which
 * replaces it, goes on and answers; the demotion then tries to commit its
 * copy, and the process dies after the maintenance step. */
static bool hot_published_met;

static void
race_hot_published_hook(const char *name)
{
    if (role == 1 && strcmp(name, "set.written") == 0) {
        client_meets_mover();
    } else if (role == 2 && strcmp(name, "hot.demote.published") == 0) {
        mover_meets_client();
        hot_published_met = true;
    }
}

static crashpoint_fn race_hot_fn = race_hot_hook;

static void
race_hot_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    tc_maintain(f->c);
    for (unsigned w = 0; w < 300; w++)
        assert_int_equal(set_gen(f->c, 0, 0), TC_OK);
    tc_maintain(f->c);
    assert_int_equal(set_gen(f->c, 0, 0), TC_OK); /* in DRAM */
    assert_true(stats(f->c).hotkey_current == 1);
    tc_set_hot_write_rate(f->c, 1000000000);
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_hot_fn, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_client_any, f), 0);
    sem_wait(&client_written);
    role = 2;
    tc_maintain(f->c);
    if (hot_published_met)
        _exit(CRASHED);
    print_message("no demotion\n");
    _exit(3);
}

/* The same race with the DRAM hot pool: a hot key's set writes its new
 * value to DRAM while the maintenance step demotes its current DRAM item
 * to PMEM; the set answers, then the process dies before the demotion
 * finds its copy stale. The new value died with the process; the demoted
 * copy of the older one must not come back: it is committed only once
 * published (item_layout.h), and it never was. */
static void
test_demote_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    hot_cfg(f, 16);
    race_hot_fn = race_hot_hook;
    race_run(f, race_hot_work);
    reopen_judge(f, "demote-vs-set");
}

/* The set replaces the demotion's copy once published, and answers; the
 * demotion's commit must then fail (the set invalidated the copy). */
static void
test_demote_published_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    hot_cfg(f, 16);
    race_hot_fn = race_hot_published_hook;
    race_run(f, race_hot_work);
    struct verdict v = reopen_judge(f, "demote-published");
    assert_int_equal(v.live, 0); /* key 0's value was in DRAM */
}

static void
test_move_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 16 * MIB;
    f->cfg.packed_item_max = 0; /* a page move moves slab chunks */
    race_promote = false;
    race_run(f, race_work);
    assert_int_equal(T->acked[0] > 1, true);
    reopen_judge(f, "move-vs-set");
}

/* The same race when the set promotes key 0 to the DRAM hot pool: its
 * value dies with the process, and the move's copy of the older one (the
 * source's store sequence, nothing newer in PMEM) must not come back. */
static void
test_move_against_promotion(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    hot_cfg(f, 1024);           /* key 0 stays among the setup's keys */
    f->cfg.packed_item_max = 0; /* a page move moves slab chunks */
    race_promote = true;
    race_run(f, race_work);
    race_promote = false;
    struct verdict v = reopen_judge(f, "move-vs-promote");
    assert_true(v.live > 0);
}

int
main(void)
{
    if (crashpoints_fx_init() != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_move_against_set),
        TC_TEST_NOOPEN(test_demote_against_set),
        TC_TEST_NOOPEN(test_demote_published_against_set),
        TC_TEST_NOOPEN(test_move_against_promotion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

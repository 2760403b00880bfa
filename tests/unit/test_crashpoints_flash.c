/*
 * Crash points on the flash paths (crashpoints_fx.h): a compaction, and
 * the races of a copy against a client with the threads meeting at their
 * points: a recache against a set and a delete, a spill's and a
 * compaction's switch against a delete, a touch (and a storm of touches)
 * against a spill.
 */

#include "crashpoints_fx.h"

/* Flash segments mostly deleted, a few values read (compaction keeps the
 * read ones, writing each a new header in the pool before the old one
 * goes). */
static void
compact_work(struct fx *f, uint64_t *rng)
{
    static unsigned char buf[VMAX];
    assert_int_equal(fx_open(f), 0);
    fill_flash(f);
    for (unsigned i = 0; i < NK * 3 / 4; i++) {
        char k[16];
        struct got g;
        key_of(k, i);
        if (pick(rng, 12) == 0)
            (void)get_cb(f->c, k, &g, buf, VMAX); /* read: kept */
        else
            del_key(f->c, i);
    }
    for (int i = 0; i < 40; i++) {
        tc_maintain(f->c);
        assert_int_equal(set_gen(f->c, NK * 3 / 4 + pick(rng, NK / 4), 16000),
                         TC_OK);
    }
}

static void
test_compaction(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 0);
    crash_rounds(f, compact_work, "compact.swapped", 3, 3);
    unlink(ext);
}

/* The same race with a recache: a read of a flash item copies its value
 * back into the pool (a copy, committed after its publication) while
 * a set of the key, which took its sequence first, publishes and answers;
 * a crash before the recache finds its copy stale must keep the set. */
static void
race_recache_hook(const char *name)
{
    if (strcmp(name, "set.written") != 0)
        return;
    if (role == 1) {
        client_meets_mover();
    } else if (role == 2) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

/* tc_walk: whether key 0 is on flash (-1: not in the cache); a walk
 * neither reads the value nor recaches it. */
static int
walk_key0(void *arg, const struct tc_walk_item *it)
{
    int *where = arg;
    if (it->klen == 7 && memcmp(it->key, "cp00000", 7) == 0)
        *where = it->flash;
    return 0;
}

static int
key0_where(struct tc_cache *c)
{
    int where = -1;
    uint64_t cursor = 0;
    for (int i = 0; i < 1000000 && cursor != TC_WALK_DONE; i++)
        assert_true(tc_walk(c, &cursor, 1024, walk_key0, &where) >= 0);
    return where;
}

/* Key 0 first, then more than the pool holds: key 0 spills to flash
 * (unless the writer was busy and it was evicted: again). */
static void
key0_to_flash(struct fx *f)
{
    for (int round = 0; round < 8 && key0_where(f->c) != 1; round++) {
        assert_int_equal(set_gen(f->c, 0, 4000), TC_OK);
        for (unsigned i = 1; i < NK; i++)
            assert_int_equal(set_gen(f->c, i, 4000), TC_OK);
    }
    if (key0_where(f->c) != 1)
        fail_msg("key 0 never went to flash");
}

static void
race_recache_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    static unsigned char buf[VMAX];
    assert_int_equal(fx_open(f), 0);
    key0_to_flash(f);
    char k[16];
    struct got g;
    key_of(k, 0);
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_recache_hook, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_client_any, f), 0);
    sem_wait(&client_written);
    role = 2;
    int rc = get_cb(f->c, k, &g, buf, VMAX);
    print_message("get: %d, flash %d: no recache\n", rc, g.info.flash);
    _exit(3);
}

static void
test_recache_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 1);
    unlink(ext);
    race_run(f, race_recache_work);
    f->cfg.ext_recache_rate = 0; /* the judge's reads evict nothing */
    reopen_judge(f, "recache-vs-set");
    unlink(ext);
}

/* A delete of key 0 against a recache of its flash value: the recache's
 * copy written (not published), the delete unlinks the flash item and
 * answers, the process dies before the recache finds its copy stale. The
 * deleted key must not come back: the recache's copy commits after its
 * publication, on a path of its own (store.c's recache_one), and the
 * switch fails. */
static void
race_recache_delete_hook(const char *name)
{
    if (role == 2 && strcmp(name, "set.written") == 0) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

static void *
race_delete_client(void *arg)
{
    struct fx *f = arg;
    sem_wait(&mover_copied);
    del_key(f->c, 0);
    sem_post(&client_acked);
    return NULL;
}

static void
race_recache_delete_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    static unsigned char buf[VMAX];
    assert_int_equal(fx_open(f), 0);
    key0_to_flash(f);
    char k[16];
    struct got g;
    key_of(k, 0);
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_recache_delete_hook,
                     __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_delete_client, f),
                     0);
    role = 2;
    int rc = get_cb(f->c, k, &g, buf, VMAX);
    print_message("get: %d, flash %d: no recache\n", rc, g.info.flash);
    _exit(3);
}

static void
test_recache_against_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 1);
    unlink(ext);
    race_run(f, race_recache_delete_work);
    f->cfg.ext_recache_rate = 0; /* the judge's reads evict nothing */
    reopen_judge(f, "recache-vs-del");
    unlink(ext);
}

/* A delete against a flash header's swap into the index: a spill (a PMEM
 * item's value to flash, a flash header in its place) or a compaction (a
 * flash header replaced by one naming the moved record). The new header
 * published, not yet committed, the delete unlinks it and answers, the
 * process dies: neither the header nor its source may come back (the
 * source is invalidated before the switch, the header committed after). */
#define SWAP_DEL 32
static const char *swap_point;
static unsigned swap_keys[SWAP_DEL];

static void
race_swap_hook(const char *name)
{
    if (role == 2 && strcmp(name, swap_point) == 0) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

static void *
race_swap_client(void *arg)
{
    struct fx *f = arg;
    sem_wait(&mover_copied);
    for (unsigned i = 0; i < SWAP_DEL; i++) /* fewer than a defer batch */
        del_key(f->c, swap_keys[i]);
    sem_post(&client_acked);
    return NULL;
}

static void
race_swap_start(struct fx *f, const char *point)
{
    swap_point = point;
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_swap_hook, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_swap_client, f), 0);
    role = 2;
}

/* Keys 0.. set first: the first victims, the first spills. */
static void
race_spill_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < SWAP_DEL; i++)
        swap_keys[i] = i;
    race_swap_start(f, "spill.published");
    for (unsigned i = 0; i < NK; i++)
        assert_int_equal(set_gen(f->c, i, 4000), TC_OK);
    print_message("no spill\n");
    _exit(3);
}

/* Every key on flash, the first three quarters deleted but for the keys a
 * compaction keeps (read ones, which the client deletes). */
static void
race_compact_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    static unsigned char buf[VMAX];
    assert_int_equal(fx_open(f), 0);
    fill_flash(f);
    unsigned n = 0;
    for (unsigned i = 0; i < NK * 3 / 4; i++) {
        char k[16];
        struct got g;
        key_of(k, i);
        if (i % 90 == 0 && n < SWAP_DEL &&
            get_cb(f->c, k, &g, buf, VMAX) == TC_OK)
            swap_keys[n++] = i; /* read: kept */
        else
            del_key(f->c, i);
    }
    for (; n < SWAP_DEL; n++)
        swap_keys[n] = swap_keys[0];
    tc_maintain(f->c); /* the deletes' chunks freed before the race */
    race_swap_start(f, "compact.published");
    /* bounded: a step finding the flash writer behind does nothing */
    for (int i = 0; i < 2000; i++) {
        tc_maintain(f->c);
        usleep(1000);
    }
    print_message("no compaction\n");
    _exit(3);
}

static void
test_spill_against_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 0);
    unlink(ext);
    race_run(f, race_spill_work);
    reopen_judge(f, "spill-vs-del");
    unlink(ext);
}

static void
test_compaction_against_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 0);
    unlink(ext);
    race_run(f, race_compact_work);
    reopen_judge(f, "compact-vs-del");
    unlink(ext);
}

/* A touch against a spill's switch: the spill has checked key 0 and
 * invalidated it (its value already on flash), a touch then gives it an
 * expiry, then the switch. The flash header must take the touch's expiry
 * and the key must stay; the process then dies (the flash writer drained
 * first). Key 0 is the only value of at least ext_item_size bytes, so the
 * only one that spills; the others, of its class, are evicted. */
#define TOUCH_VLEN 4000
#define TOUCH_TTL 3600
static sem_t touch_go, touch_done;
static bool touch_raced;
static int touch_rc;

static void
race_touch_hook(const char *name)
{
    if (role == 2 && !touch_raced && strcmp(name, "spill.checked") == 0) {
        touch_raced = true;
        sem_post(&touch_go);
        sem_wait(&touch_done);
    }
}

static void *
race_touch_client(void *arg)
{
    struct fx *f = arg;
    char k[16];
    sem_wait(&touch_go);
    key_of(k, 0);
    touch_rc = tc_touch(f->c, k, strlen(k), TOUCH_TTL);
    sem_post(&touch_done);
    return NULL;
}

static void
race_touch_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    int cls = store_find_class(f->c, "probe-a", TOUCH_VLEN);
    assert_int_equal(store_find_class(f->c, "probe-b", TOUCH_VLEN - 100), cls);
    tc_delete(f->c, "probe-a", 7, 0);
    tc_delete(f->c, "probe-b", 7, 0);
    assert_int_equal(set_gen(f->c, 0, TOUCH_VLEN), TC_OK);
    sem_init(&touch_go, 0, 0);
    sem_init(&touch_done, 0, 0);
    touch_raced = false;
    touch_rc = -1;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, race_touch_client, f), 0);
    role = 2;
    __atomic_store_n(&crashpoint_hook, race_touch_hook, __ATOMIC_RELAXED);
    for (unsigned i = 1; i < NK && !touch_raced; i++)
        assert_int_equal(set_gen(f->c, i, TOUCH_VLEN - 100), TC_OK);
    role = 0;
    if (!touch_raced) {
        print_message("no spill\n");
        _exit(3);
    }
    pthread_join(th, NULL);
    if (touch_rc != TC_OK) {
        print_message("the touch missed: %d\n", touch_rc);
        _exit(4);
    }
    assert_int_equal(nvs_flush(((struct cache *)f->c)->nvs), 0);
    _exit(CRASHED);
}

static void
test_touch_against_spill(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    static unsigned char buf[VMAX];
    char ext[192], k[16];
    struct got g;
    flash_cfg(f, ext, 0);
    f->cfg.ext_item_size = TOUCH_VLEN - 50;
    truth_reset();
    unlink(ext);
    int st = run_child(f, race_touch_work, NULL, 0, 1);
    assert_int_equal(st, CRASHED);
    assert_int_equal(tc_open(&f->cfg, &f->c), 0);
    key_of(k, 0);
    assert_int_equal(get_cb(f->c, k, &g, buf, VMAX), TC_OK);
    assert_true(g.info.flash);
    assert_int_not_equal(g.info.exptime, 0); /* the touch's */
    judge(f->c); /* and every other key by the rules */
    assert_int_equal(tc_check(f->c), 0);
    tc_close(f->c);
    f->c = NULL;
    unlink(ext);
}

/* A key touched again inside every round of a spill's switch: the switch
 * gives up after a bounded number of rounds (the item is then evicted, as
 * when a spill fails) instead of chasing the touches for ever; the hook
 * fails the child past STORM_MAX touches. After the crash, key 0 is a miss
 * or its value, and every other key is judged by the rules. */
#define STORM_MAX 64u
static unsigned storm_touches;
static volatile bool storm_stop;

static void
storm_hook(const char *name)
{
    if (role != 3 || (strcmp(name, "spill.checked") != 0 &&
                      strcmp(name, "spill.retouched") != 0))
        return;
    if (++storm_touches > STORM_MAX) {
        print_message("the switch chased %u touches\n", storm_touches);
        _exit(5);
    }
    sem_post(&touch_go);
    sem_wait(&touch_done);
}

static void *
storm_client(void *arg)
{
    struct fx *f = arg;
    char k[16];
    key_of(k, 0);
    for (unsigned n = 1;; n++) {
        sem_wait(&touch_go);
        if (storm_stop)
            return NULL;
        (void)tc_touch(f->c, k, strlen(k), TOUCH_TTL + n); /* a new expiry */
        sem_post(&touch_done);
    }
}

static void
storm_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    assert_int_equal(set_gen(f->c, 0, TOUCH_VLEN), TC_OK);
    sem_init(&touch_go, 0, 0);
    sem_init(&touch_done, 0, 0);
    storm_touches = 0;
    storm_stop = false;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, storm_client, f), 0);
    role = 3;
    __atomic_store_n(&crashpoint_hook, storm_hook, __ATOMIC_RELAXED);
    for (unsigned i = 1; i < NK && !storm_touches; i++)
        assert_int_equal(set_gen(f->c, i, TOUCH_VLEN - 100), TC_OK);
    role = 0;
    storm_stop = true;
    sem_post(&touch_go);
    pthread_join(th, NULL);
    if (!storm_touches) {
        print_message("no spill\n");
        _exit(3);
    }
    assert_int_equal(nvs_flush(((struct cache *)f->c)->nvs), 0);
    _exit(CRASHED);
}

static void
test_touch_storm_against_spill(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 0);
    f->cfg.ext_item_size = TOUCH_VLEN - 50;
    truth_reset();
    unlink(ext);
    assert_int_equal(run_child(f, storm_work, NULL, 0, 1), CRASHED);
    assert_int_equal(tc_open(&f->cfg, &f->c), 0);
    judge(f->c);
    assert_int_equal(tc_check(f->c), 0);
    tc_close(f->c);
    f->c = NULL;
    unlink(ext);
}

int
main(void)
{
    if (crashpoints_fx_init() != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_compaction),
        TC_TEST_NOOPEN(test_recache_against_set),
        TC_TEST_NOOPEN(test_recache_against_delete),
        TC_TEST_NOOPEN(test_spill_against_delete),
        TC_TEST_NOOPEN(test_touch_against_spill),
        TC_TEST_NOOPEN(test_touch_storm_against_spill),
        TC_TEST_NOOPEN(test_compaction_against_delete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

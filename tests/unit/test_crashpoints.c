/*
 * Crash points inside a set, a delete, an eviction, a page move between
 * classes (slab reassign), a shrink, and a promotion to and a demotion from
 * the DRAM hot pool, each hit at a drawn count (crashpoints_fx.h). The races
 * of a copy against a client are test_crashpoints_race.c, the flash paths
 * test_crashpoints_flash.c, the packed store's test_crashpoints_packed.c.
 */

#include "crashpoints_fx.h"

/* Sets, overwrites (other sizes, so other classes) and deletes. */
static void
mixed_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < NK; i += 2)
        assert_int_equal(set_gen(f->c, i, 0), TC_OK);
    for (unsigned op = 0; op < 20000; op++) {
        unsigned i = pick(rng, NK);
        if (pick(rng, 4) == 0)
            del_key(f->c, i);
        else
            assert_int_equal(set_gen(f->c, i, 0), TC_OK);
    }
}

/* More data than the pool holds: evictions. */
static void
evict_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned op = 0; op < 40000; op++) {
        unsigned i = pick(rng, NK);
        if (pick(rng, 8) == 0)
            del_key(f->c, i);
        else
            assert_int_equal(set_gen(f->c, i, 2000 + pick(rng, 6000)), TC_OK);
    }
}

/* Pages of one class with few live items, then moved to another class
 * (slab reassign: its live items are copied to the class's other pages),
 * and a store in the class that took the page (its format). */
static void
move_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < NK; i++)
        assert_int_equal(set_gen(f->c, i, 500), TC_OK);
    int src = store_find_class(f->c, "probe-src", 500);
    int dst = store_find_class(f->c, "probe-dst", 3000);
    tc_delete(f->c, "probe-src", 9, 0);
    tc_delete(f->c, "probe-dst", 9, 0);
    for (unsigned i = 0; i < NK; i++)
        if (pick(rng, 3) != 0)
            del_key(f->c, i);
    for (unsigned m = 0; m < 4; m++) {
        int rc = tc_slab_reassign(f->c, src, dst);
        assert_true(rc == 0 || rc == -EBUSY || rc == -ENOENT);
        for (unsigned j = 0; j < 400; j++)
            assert_int_equal(set_gen(f->c, pick(rng, NK), 3000), TC_OK);
    }
}

/* A full pool shrunk to a third: its items move below the new limit. */
static void
shrink_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < NK; i++)
        assert_int_equal(set_gen(f->c, i, 1000 + pick(rng, 2000)), TC_OK);
    for (unsigned i = 0; i < NK; i += 2)
        del_key(f->c, i);
    int rc = tc_set_mem_limit(f->c, f->cfg.pool_size / 3);
    assert_true(rc == 0 || rc == -EBUSY);
    for (int j = 0; j < 8 && rc == -EBUSY; j++)
        tc_maintain(f->c);
}

/* Keys written often enough to live in the DRAM hot pool (promotion:
 * their next write goes there, replacing the PMEM copy), cooled and
 * moved back to PMEM (demotion), written again. */
static void
hot_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < 200; i++)
        assert_int_equal(set_gen(f->c, i, 0), TC_OK);
    for (unsigned round = 0; round < 6; round++) {
        tc_set_hot_write_rate(f->c, 10);
        tc_maintain(f->c);
        for (unsigned w = 0; w < 300; w++)
            assert_int_equal(set_gen(f->c, pick(rng, 8), 0), TC_OK);
        tc_maintain(f->c); /* the eight are hot: next writes to DRAM */
        for (unsigned w = 0; w < 100; w++) {
            unsigned i = pick(rng, 16);
            if (pick(rng, 5) == 0)
                del_key(f->c, i);
            else
                assert_int_equal(set_gen(f->c, i, 0), TC_OK);
        }
        tc_set_hot_write_rate(f->c, 1000000000);
        tc_maintain(f->c); /* they cool: moved back to PMEM */
        tc_maintain(f->c);
    }
}

static void
test_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 64 * MIB;
    crash_rounds(f, mixed_work, "set.written", 15000, 4);
    crash_rounds(f, mixed_work, "set.published", 15000, 4);
}

static void
test_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 64 * MIB;
    /* about 5,000 deletes (a quarter of 20,000 operations, sd ~60): a hit
     * drawn up to 4,000 always comes */
    crash_rounds(f, mixed_work, "delete.unlinked", 4000, 4);
}

static void
test_eviction(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 8 * MIB;
    f->cfg.packed_item_max = 0; /* CLOCK eviction of slab chunks */
    crash_rounds(f, evict_work, "evict.unlinked", 200, 4);
    crash_rounds(f, evict_work, "page.format", 6, 3);
}

static void
test_page_move(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 16 * MIB;
    f->cfg.packed_item_max = 0; /* a page move moves slab chunks */
    crash_rounds(f, move_work, "move.copied", 20, 4);
    /* the copy published, its commit word not yet stored */
    crash_rounds(f, move_work, "move.published", 20, 2);
    /* the page taken, formatted for its new class */
    crash_rounds(f, move_work, "page.format", 2, 2);
}

static void
test_shrink(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 16 * MIB;
    f->cfg.packed_item_max = 0; /* a shrink's drain moves slab chunks */
    crash_rounds(f, shrink_work, "move.copied", 400, 4);
    crash_rounds(f, shrink_work, "shrink.drained", 1, 2);
}

static void
test_hot_pool(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    hot_cfg(f, 16);
    crash_rounds(f, hot_work, "set.published", 1500, 6);
    crash_rounds(f, hot_work, "hot.demote", 8, 4);
    crash_rounds(f, hot_work, "hot.demote.published", 8, 2);
}

int
main(void)
{
    if (crashpoints_fx_init() != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_set),      TC_TEST_NOOPEN(test_delete),
        TC_TEST_NOOPEN(test_eviction), TC_TEST_NOOPEN(test_page_move),
        TC_TEST_NOOPEN(test_shrink),   TC_TEST_NOOPEN(test_hot_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

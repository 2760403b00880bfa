#pragma once
/*
 * What the packed store's unit tests share (test_packed*.c): the item
 * size they pack up to, the stats read, and a fixture that opens the cache
 * with the store on. Include after engine_fx.h (or restart_fx.h).
 */

/* packed_item_max of the tests: every test item but the large ones */
#define PACKED_MAX 1024

static inline struct tc_stats
pstats(struct tc_cache *c)
{
    struct tc_stats s;
    tc_stats(c, &s);
    return s;
}

/* engine_fx.h's fixture, opened with packed_item_max = PACKED_MAX */
static inline int
psetup(void **state)
{
    int rc = setup_noopen(state);
    if (rc)
        return rc;
    struct fx *f = *state;
    f->cfg.packed_item_max = PACKED_MAX;
    if (fx_open(f) != 0) {
        unlink(f->path);
        free(f);
        return -1;
    }
    return 0;
}

#define PTEST(fn)                                                              \
    cmocka_unit_test_prestate_setup_teardown(fn, psetup, teardown, #fn)

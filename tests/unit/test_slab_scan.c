/*
 * Unit tests for alloc/slab.c, written from alloc/slab.h: the CLOCK scan
 * (referenced chunks skipped once, free ones never offered) and the full
 * scan (every live chunk once a turn, within the budget and the max).
 */

#include "alloc/slab.h"

#include "alloc/pool.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "slab_fx.h"

static void
test_scan_clock(void **state)
{
    struct fixture *f = fixture_new(2);
    unsigned cls = class_of_size(f->slab, 131072);
    struct slab_cursor cur = {0, 0};
    uint64_t c[8], out[16];
    unsigned n;

    *state = f;
    for (int i = 0; i < 8; i++)
        c[i] = take1(f, cls);
    assert_int_equal(page_of(c[0]), page_of(c[7]));
    slab_ref(f->slab, c[0]);
    slab_ref(f->slab, c[2]);
    slab_ref(f->slab, c[4]);
    slab_ref(f->slab, c[4]); /* twice is the same */

    /* first pass: the referenced ones are skipped (and their bits cleared) */
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 16);
    assert_int_equal(n, 5);
    assert_false(has_dups(out, n));
    for (int i = 0; i < 8; i++)
        assert_int_equal(in_list(out, n, c[i]), i != 0 && i != 2 && i != 4);

    /* second pass: everything is offered */
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 16);
    assert_int_equal(n, 8);
    assert_false(has_dups(out, n));
    for (int i = 0; i < 8; i++)
        assert_true(in_list(out, n, c[i]));

    /* a referenced chunk is skipped again once; a free chunk never shows */
    slab_ref(f->slab, c[1]);
    give1(f, cls, c[6]);
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 16);
    assert_int_equal(n, 6);
    for (int i = 0; i < 8; i++)
        assert_int_equal(in_list(out, n, c[i]), i != 1 && i != 6);
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 16);
    assert_int_equal(n, 7);
    assert_false(in_list(out, n, c[6]));

    /* max bounds the output */
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_CLOCK, 8, out, 3);
    assert_true(n <= 3);
    assert_int_equal(slab_check(f->slab), 0);
}

static void
test_scan_all(void **state)
{
    struct fixture *f = fixture_new(4);
    unsigned cls = class_of_size(f->slab, 65536); /* 16 a page */
    struct slab_cursor cur = {0, 0};
    uint64_t c[40], live[40], out[64];
    unsigned nlive = 0, n;

    *state = f;
    for (int i = 0; i < 40; i++) /* 3 pages, the last one half full */
        c[i] = take1(f, cls);
    assert_int_equal(stats_of(f->slab, cls).pages, 3);
    for (int i = 0; i < 40; i++) {
        if (i % 3 == 1 || i == 17) {
            give1(f, cls, c[i]);
        } else {
            live[nlive++] = c[i];
            if (i % 5 == 0)
                slab_ref(f->slab, c[i]); /* refs do not hide chunks */
        }
    }

    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, 3 * 16, out, 64);
    assert_int_equal(n, nlive);
    assert_false(has_dups(out, n));
    for (unsigned i = 0; i < nlive; i++)
        assert_true(in_list(out, n, live[i]));

    /* and again, from wherever the cursor stopped: the same set */
    n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, 3 * 16, out, 64);
    assert_int_equal(n, nlive);
    for (unsigned i = 0; i < nlive; i++)
        assert_true(in_list(out, n, live[i]));

    /* small budgets: successive scans over one full turn cover each live
     * chunk exactly once */
    unsigned total = 0;
    uint64_t acc[64];

    for (int k = 0; k < 6; k++) {
        n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, 8, acc + total,
                      64 - total);
        total += n;
    }
    assert_int_equal(total, nlive);
    assert_false(has_dups(acc, total));
    assert_int_equal(slab_check(f->slab), 0);
}

/* Budget and max together: calls with a small max make progress and, over
 * enough calls, offer every live chunk. */
static void
test_scan_max_progress(void **state)
{
    struct fixture *f = fixture_new(2);
    unsigned cls = class_of_size(f->slab, 65536);
    struct slab_cursor cur = {0, 0};
    uint64_t c[16], out[4];
    bool offered[16] = {false};

    *state = f;
    for (int i = 0; i < 16; i++)
        c[i] = take1(f, cls);
    for (int call = 0; call < 6; call++) {
        unsigned n = slab_scan(f->slab, cls, &cur, SLAB_SCAN_ALL, 64, out, 3);

        assert_int_equal(n, 3);
        for (unsigned k = 0; k < n; k++)
            for (int i = 0; i < 16; i++)
                if (out[k] == c[i])
                    offered[i] = true;
    }
    for (int i = 0; i < 16; i++)
        if (!offered[i])
            fail_msg("chunk %d never offered in 6 scans of max 3", i);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_scan_clock, teardown),
        cmocka_unit_test_teardown(test_scan_all, teardown),
        cmocka_unit_test_teardown(test_scan_max_progress, teardown),
    };

    return cmocka_run_group_tests_name("slab_scan", tests, NULL, NULL);
}

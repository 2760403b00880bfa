/*
 * Unit tests for tier/dpool.c: the budget is kept, blocks are 8-aligned
 * and writable, frees return their bytes, walk sees exactly the live
 * blocks, flags start at zero.
 */
#include "tier/dpool.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static int
count_visit(void *arg, void *p)
{
    (void)p;
    (*(int *)arg)++;
    return 0;
}

static void
test_budget(void **state)
{
    (void)state;
    struct dpool *d;
    void *p[64];
    int n = 0;

    assert_int_equal(dpool_create(4096, &d), 0);
    while (n < 64 && dpool_alloc(d, 200, &p[n]) == 0) {
        assert_int_equal((uintptr_t)p[n] % 8, 0);
        assert_int_equal(
            atomic_load_explicit(dpool_flags(p[n]), memory_order_relaxed), 0);
        memset(p[n], n, 200);
        n++;
    }
    assert_true(n > 10 && n < 64);
    assert_true(dpool_used(d) <= 4096);
    assert_int_equal(dpool_alloc(d, 200, &p[n]), -ENOSPC);
    int seen = 0;
    assert_int_equal(dpool_walk(d, count_visit, &seen), 0);
    assert_int_equal(seen, n);

    /* free from the middle and the ends: the list stays whole */
    uint64_t before = dpool_used(d);
    dpool_free(d, p[n / 2]);
    dpool_free(d, p[0]);
    dpool_free(d, p[n - 1]);
    assert_true(dpool_used(d) < before);
    seen = 0;
    dpool_walk(d, count_visit, &seen);
    assert_int_equal(seen, n - 3);
    assert_int_equal(dpool_alloc(d, 200, &p[0]), 0);
    for (int i = 1; i < n - 1; i++)
        if (i != n / 2)
            assert_int_equal(((unsigned char *)p[i])[199], (unsigned char)i);
    dpool_destroy(d); /* frees the live ones (ASan checks) */
}

static void
test_too_big(void **state)
{
    (void)state;
    struct dpool *d;
    void *p;
    assert_int_equal(dpool_create(1024, &d), 0);
    assert_int_equal(dpool_alloc(d, 2048, &p), -ENOSPC);
    assert_int_equal(dpool_used(d), 0);
    dpool_destroy(d);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_too_big),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

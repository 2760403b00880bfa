/*
 * Unit tests for alloc/slab.c, written from alloc/slab.h: the classes a
 * configuration gives (sizes, growth, chunk step, the top class), the
 * configurations refused, and the class of a size and of an offset.
 * The other slab tests: test_slab_take (take, give, counts, format hook,
 * adopting a page), test_slab_scan (CLOCK and full scans), test_slab_drain
 * (draining a page, tables regrown under readers), test_slab_atime,
 * test_slab_ablate; their shared fixture is slab_fx.h.
 */

#include "alloc/slab.h"

#include "alloc/pool.h"
#include "src/base/compiler.h"
#include "src/base/err.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "slab_fx.h"

static void
check_geometry(const struct slab *s, uint32_t min_chunk, double factor,
               uint32_t chunk_max)
{
    unsigned n = slab_nclasses(s);

    assert_true(n >= 2);
    assert_true(n <= SLAB_MAX_CLASSES);
    assert_true(slab_chunk_size(s, 0) >= min_chunk);
    assert_true(slab_chunk_size(s, 0) < min_chunk + 8);
    for (unsigned c = 0; c < n; c++) {
        uint32_t size = slab_chunk_size(s, c);

        if (size % 8 != 0)
            fail_msg("class %u: size %u is not 8-aligned", c, size);
        if (c == 0)
            continue;
        uint32_t prev = slab_chunk_size(s, c - 1);

        if (size <= prev)
            fail_msg("class %u: size %u not above %u", c, size, prev);
        if (c < n - 1 && fabs((double)size - prev * factor) > 8.0 * factor)
            fail_msg("class %u: size %u does not grow by %.2f from %u", c, size,
                     factor, prev);
        if (c == n - 1 && (double)size > prev * factor * factor + 8.0)
            fail_msg("last class %u: size %u jumps too far from %u", c, size,
                     prev);
    }
    assert_int_equal(slab_chunk_size(s, n - 1), chunk_max);
}

static void
test_geometry_default(void **state)
{
    struct slab_config cfg = {0};
    struct fixture *f = fixture_new_cfg(2, &cfg);

    *state = f;
    check_geometry(f->slab, 64, 1.25, 512 * 1024);
    assert_int_equal(slab_chunk_size(f->slab, 0), 64);
}

static void
test_geometry_factor2(void **state)
{
    struct fixture *f = fixture_new(2);

    *state = f;
    assert_int_equal(slab_nclasses(f->slab), 15);
    for (unsigned c = 0; c < 15; c++)
        assert_int_equal(slab_chunk_size(f->slab, c), 64u << c);
    check_geometry(f->slab, 64, 2.0, POOL_PAGE_SIZE);
}

static void
test_geometry_unaligned_min(void **state)
{
    struct slab_config cfg = {
        .min_chunk = 20,
        .growth_factor = 1.1,
        .chunk_max = 4000, /* 54 classes: within SLAB_MAX_CLASSES */
    };
    struct fixture *f = fixture_new_cfg(2, &cfg);

    *state = f;
    check_geometry(f->slab, 20, 1.1, 4000);
}

/* A factor too small to reach chunk_max within SLAB_MAX_CLASSES: the slab
 * must refuse the settings or still grow by the factor, never close the gap
 * with one giant last class. */
static void
test_geometry_too_many_classes(void **state)
{
    char *mem = aligned_alloc(POOL_PAGE_SIZE, POOL_PAGE_SIZE);
    struct pool *p;
    struct slab *s = NULL;
    struct slab_config cfg = {
        .min_chunk = 20,
        .growth_factor = 1.1,
        .chunk_max = 100000, /* about 88 classes at 1.1 */
    };
    int rc;

    (void)state;
    assert_non_null(mem);
    assert_int_equal(pool_create(mem, POOL_PAGE_SIZE, 0, &p), 0);
    err_clear();
    rc = slab_create(&cfg, p, &s);
    if (rc == -EINVAL) {
        assert_true(err_msg()[0] != '\0');
    } else {
        assert_int_equal(rc, 0);
        check_geometry(s, 20, 1.1, 100000);
        slab_destroy(s);
    }
    pool_destroy(p);
    free(mem);
}

/* A chunk step: 16-byte classes from min_chunk to 32 steps (512 bytes),
 * then exactly the classes the factor gives without a step. */
static void
test_geometry_chunk_step(void **state)
{
    struct slab_config plain_cfg = {.min_chunk = 80, .growth_factor = 1.25};
    struct slab_config cfg = plain_cfg;
    cfg.chunk_step = 16;
    struct fixture *plain = fixture_new_cfg(2, &plain_cfg);
    struct fixture *f = fixture_new_cfg(2, &cfg);
    unsigned n = slab_nclasses(f->slab), pn = slab_nclasses(plain->slab);
    unsigned i = 0;

    *state = f;
    for (uint32_t size = 80; size <= 512; size += 16, i++)
        assert_int_equal(slab_chunk_size(f->slab, i), size);
    assert_int_equal(i, 28);
    /* above 512: the plain classes, one for one */
    unsigned j = 0;
    while (slab_chunk_size(plain->slab, j) <= 512)
        j++;
    assert_int_equal(slab_chunk_size(plain->slab, j), 552);
    assert_int_equal(n - i, pn - j);
    for (; i < n; i++, j++)
        assert_int_equal(slab_chunk_size(f->slab, i),
                         slab_chunk_size(plain->slab, j));
    assert_int_equal(n, 60);
    assert_true(n <= SLAB_MAX_CLASSES);
    /* 100-byte values with a 32-byte header and a 16-byte key: 148 bytes
     * go in 160-byte chunks, not the factor's 176 */
    assert_int_equal(slab_chunk_size(f->slab, slab_class_for(f->slab, 148)),
                     160);
    assert_int_equal(
        slab_chunk_size(plain->slab, slab_class_for(plain->slab, 148)), 176);
    fixture_free(plain);
}

/* A factor whose own classes leave little room under SLAB_MAX_CLASSES:
 * the fine classes end lower, and the factor's classes are kept. */
static void
test_geometry_chunk_step_crowded(void **state)
{
    struct slab_config plain_cfg = {.min_chunk = 80, .growth_factor = 1.2};
    struct slab_config cfg = plain_cfg;
    cfg.chunk_step = 16;
    struct fixture *plain = fixture_new_cfg(2, &plain_cfg);
    struct fixture *f = fixture_new_cfg(2, &cfg);
    unsigned n = slab_nclasses(f->slab), pn = slab_nclasses(plain->slab);

    *state = f;
    assert_int_equal(pn, 49);
    assert_true(n > pn && n <= SLAB_MAX_CLASSES);
    assert_int_equal(slab_chunk_size(f->slab, 1), 96);
    /* the largest classes are the factor's */
    for (unsigned i = 1; i <= 20; i++)
        assert_int_equal(slab_chunk_size(f->slab, n - i),
                         slab_chunk_size(plain->slab, pn - i));
    fixture_free(plain);
}

/* A step where the factor grows by less: the factor's step wins. */
static void
test_geometry_chunk_step_small_factor(void **state)
{
    struct slab_config cfg = {
        .min_chunk = 64,
        .growth_factor = 1.05,
        .chunk_max = 1024,
        .chunk_step = 64,
    };
    struct fixture *f = fixture_new_cfg(2, &cfg);
    unsigned n = slab_nclasses(f->slab);

    *state = f;
    for (unsigned i = 1; i < n; i++) {
        uint32_t prev = slab_chunk_size(f->slab, i - 1);
        uint32_t size = slab_chunk_size(f->slab, i);
        uint32_t by_factor = ALIGN_UP((uint32_t)(prev * 1.05), 8u);
        if (by_factor <= prev)
            by_factor = prev + 8;
        assert_true(size > prev && size % 8 == 0);
        if (size < 1024)
            assert_true(size <= by_factor);
    }
}

/* A regular class that rounds up to chunk_max must not repeat it. */
static void
test_geometry_top_edge(void **state)
{
    struct slab_config cfg = {
        .min_chunk = 100,
        .growth_factor = 1.5,
        .chunk_max = 160,
    };
    struct fixture *f = fixture_new_cfg(2, &cfg);

    *state = f;
    check_geometry(f->slab, 100, 1.5, 160);
}

static void
test_config_invalid(void **state)
{
    char *mem = aligned_alloc(POOL_PAGE_SIZE, POOL_PAGE_SIZE);
    struct pool *p;
    struct slab *s = (struct slab *)0x1;
    const struct slab_config bad[] = {
        {.min_chunk = 8, .growth_factor = 1.25},
        {.min_chunk = 64, .growth_factor = 1.0},
        {.min_chunk = 64, .growth_factor = 0.5},
        {.min_chunk = 64,
         .growth_factor = 1.25,
         .chunk_max = POOL_PAGE_SIZE + 8},
        {.min_chunk = 4096, .growth_factor = 1.25, .chunk_max = 1024},
        /* a last class that is not 8-aligned */
        {.min_chunk = 64, .growth_factor = 1.25, .chunk_max = 100001},
        /* a step that is not a multiple of 8, or spans past a page */
        {.min_chunk = 64, .growth_factor = 1.25, .chunk_step = 12},
        {.min_chunk = 64,
         .growth_factor = 1.25,
         .chunk_step = POOL_PAGE_SIZE / SLAB_STEP_SPAN + 8},
    };

    (void)state;
    assert_non_null(mem);
    assert_int_equal(pool_create(mem, POOL_PAGE_SIZE, 0, &p), 0);
    for (unsigned i = 0; i < ARRAY_SIZE(bad); i++)
        if (slab_create(&bad[i], p, &s) != -EINVAL)
            fail_msg("config %u was not refused with -EINVAL", i);
    assert_ptr_equal(s, (struct slab *)0x1);
    pool_destroy(p);
    free(mem);
}

static void
test_class_for(void **state)
{
    struct slab_config cfg = {0};
    struct fixture *f = fixture_new_cfg(2, &cfg);
    const struct slab *s;
    unsigned n;

    *state = f;
    s = f->slab;
    n = slab_nclasses(s);
    assert_int_equal(slab_class_for(s, 1), 0);
    for (unsigned c = 0; c < n; c++) {
        uint32_t size = slab_chunk_size(s, c);

        assert_int_equal(slab_class_for(s, size), c);
        assert_int_equal(slab_class_for(s, size - 1), c);
        if (c > 0)
            assert_int_equal(slab_class_for(s, slab_chunk_size(s, c - 1) + 1),
                             c);
        if (c + 1 < n)
            assert_int_equal(slab_class_for(s, size + 1), c + 1);
    }
    assert_int_equal(slab_class_for(s, slab_chunk_size(s, n - 1) + 1), -1);
    assert_int_equal(slab_class_for(s, POOL_PAGE_SIZE + 1), -1);
    assert_int_equal(slab_class_for(s, UINT32_MAX), -1);
}

/* Every size up to past the class table's end (and past chunk_max) finds
 * the class a linear walk finds: the first one at least that big, or -1.
 * Settings with fine steps, an unaligned min_chunk, and
 * classes past the table (1 MiB chunks). */
static void
test_class_for_every_size(void **state)
{
    const struct slab_config cfgs[] = {
        {0},
        {.min_chunk = 72, .chunk_step = 16, .chunk_max = 100000},
        {.min_chunk = 100, .growth_factor = 1.15, .chunk_max = 20000},
        {.min_chunk = 64, .growth_factor = 2.0, .chunk_max = POOL_PAGE_SIZE},
        {.min_chunk = 48, .chunk_step = 8, .chunk_max = 1000},
    };

    for (unsigned i = 0; i < ARRAY_SIZE(cfgs); i++) {
        struct fixture *f = fixture_new_cfg(1, &cfgs[i]);
        const struct slab *s = f->slab;
        unsigned n = slab_nclasses(s);
        uint32_t top = slab_chunk_size(s, n - 1);
        uint32_t end = top + 64 < 40000 ? top + 64 : 40000;

        *state = f;
        for (uint32_t size = 0; size <= end; size++) {
            int want = -1;
            for (unsigned c = 0; c < n; c++)
                if (slab_chunk_size(s, c) >= size) {
                    want = (int)c;
                    break;
                }
            if (slab_class_for(s, size) != want)
                fail_msg("config %u, size %u: class %d, not %d", i, size,
                         slab_class_for(s, size), want);
        }
        teardown(state);
    }
}

static void
test_class_of_bounds(void **state)
{
    struct fixture *f = fixture_new(2);
    unsigned cls = class_of_size(f->slab, 64);
    uint64_t off;

    *state = f;
    assert_int_equal(slab_class_of(f->slab, 0), SLAB_NO_CLASS);
    off = take1(f, cls);
    assert_int_equal(slab_class_of(f->slab, off), cls);
    assert_int_equal(slab_class_of(f->slab, POOL_PAGE_SIZE + 64),
                     SLAB_NO_CLASS); /* free pool page */
    assert_int_equal(slab_class_of(f->slab, 2ull * POOL_PAGE_SIZE),
                     SLAB_NO_CLASS); /* beyond the pool */
    assert_int_equal(slab_class_of(f->slab, UINT64_MAX), SLAB_NO_CLASS);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_geometry_default, teardown),
        cmocka_unit_test_teardown(test_geometry_factor2, teardown),
        cmocka_unit_test_teardown(test_geometry_chunk_step, teardown),
        cmocka_unit_test_teardown(test_geometry_chunk_step_small_factor,
                                  teardown),
        cmocka_unit_test_teardown(test_geometry_chunk_step_crowded, teardown),
        cmocka_unit_test_teardown(test_geometry_unaligned_min, teardown),
        cmocka_unit_test(test_geometry_too_many_classes),
        cmocka_unit_test_teardown(test_geometry_top_edge, teardown),
        cmocka_unit_test_teardown(test_config_invalid, teardown),
        cmocka_unit_test_teardown(test_class_for, teardown),
        cmocka_unit_test_teardown(test_class_for_every_size, teardown),
        cmocka_unit_test_teardown(test_class_of_bounds, teardown),
    };

    return cmocka_run_group_tests_name("slab", tests, NULL, NULL);
}

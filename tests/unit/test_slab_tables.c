/*
 * Unit tests for alloc/slab_tables.c, the arena of the slab's page records
 * and per-page tables: 2 MiB-aligned regions advised for huge pages, a
 * freed table handed out again for its size, regions added as tables
 * outgrow the first, and an outgrown table's way back through the retired
 * list (alloc/slab.c) to the arena.
 */

#include "alloc/slab_int.h"

#include "alloc/pool.h"
#include "src/base/hugemap.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "slab_fx.h"

#define PAGES 8

static uint64_t
table_bytes_of(uint32_t nwords)
{
    return (uint64_t)nwords * TABLE_WORDS * sizeof(uint64_t);
}

/* The page records open a 2 MiB-aligned region, and the first tables
 * follow them in it. */
static void
test_records_in_aligned_region(void **state)
{
    struct fixture *f = fixture_new(PAGES);
    *state = f;
    struct slab *s = f->slab;
    uintptr_t rec = (uintptr_t)s->page;
    uintptr_t region = rec & ~(uintptr_t)(HUGEMAP_BYTES - 1);

    assert_true(rec - region < 4096); /* just past the region's head */
    assert_int_equal(slab_tables_mapped(s) % HUGEMAP_BYTES, 0);
    assert_true(slab_tables_mapped(s) >= HUGEMAP_BYTES);
    uint64_t *t = slab_tables_alloc(s, 4);
    assert_non_null(t);
    assert_int_equal((uintptr_t)t & ~(uintptr_t)(HUGEMAP_BYTES - 1), region);
    assert_int_equal((uintptr_t)t % 64, 0);
    memset(t, 0xff, table_bytes_of(4)); /* all of it is ours */
    slab_tables_free(s, t, 4);
}

/* The region holding the records is advised for huge pages: its smaps
 * entry says THPeligible (when the kernel has THP at all). */
static void
test_region_advised(void **state)
{
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char mode[128] = "";
    if (thp) {
        if (!fgets(mode, sizeof(mode), thp))
            mode[0] = 0;
        fclose(thp);
    }
    if (!strstr(mode, "[always]") && !strstr(mode, "[madvise]"))
        skip(); /* no transparent huge pages on this kernel */
    struct fixture *f = fixture_new(PAGES);
    *state = f;
    uintptr_t rec = (uintptr_t)f->slab->page;
    FILE *smaps = fopen("/proc/self/smaps", "r");
    if (!smaps)
        skip(); /* no /proc */
    char line[512];
    bool inside = false, eligible = false, found = false;
    while (fgets(line, sizeof(line), smaps)) {
        unsigned long lo, hi;
        char perms[8];
        /* a mapping's first line: "lo-hi perms ..." */
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) {
            if (found)
                break;
            inside = rec >= lo && rec < hi;
            found = inside;
            continue;
        }
        if (inside && strncmp(line, "THPeligible:", 12) == 0)
            eligible = strtol(line + 12, NULL, 10) == 1;
    }
    fclose(smaps);
    assert_true(found);
    assert_true(eligible);
}

/* A freed table is the next one of its size; another size is not it. */
static void
test_freed_table_reused(void **state)
{
    struct fixture *f = fixture_new(PAGES);
    *state = f;
    struct slab *s = f->slab;
    uint64_t *a = slab_tables_alloc(s, 7);
    uint64_t *b = slab_tables_alloc(s, 7);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    assert_true((char *)b >= (char *)a + table_bytes_of(7) ||
                (char *)a >= (char *)b + table_bytes_of(7));
    uint64_t mapped = slab_tables_mapped(s);
    slab_tables_free(s, a, 7);
    uint64_t *c = slab_tables_alloc(s, 8);
    assert_ptr_not_equal(c, a);
    assert_ptr_equal(slab_tables_alloc(s, 7), a);
    assert_int_equal(slab_tables_mapped(s), mapped);
}

/* Tables past the first region come from new 2 MiB-aligned ones, and do
 * not overlap. */
static void
test_regions_added(void **state)
{
    struct fixture *f = fixture_new(PAGES);
    *state = f;
    struct slab *s = f->slab;
    uint64_t before = slab_tables_mapped(s);
    uint64_t dram_before = slab_dram_bytes(s);
    enum { N = 40 }; /* 40 largest tables, 5.4 MiB: three regions more */
    uint64_t *t[N];
    for (int i = 0; i < N; i++) {
        t[i] = slab_tables_alloc(s, PAGE_MAX_WORDS);
        assert_non_null(t[i]);
        memset(t[i], i, table_bytes_of(PAGE_MAX_WORDS));
    }
    for (int i = 0; i < N; i++) {
        const unsigned char *b = (const unsigned char *)t[i];
        assert_int_equal(b[0], (unsigned char)i);
        assert_int_equal(b[table_bytes_of(PAGE_MAX_WORDS) - 1],
                         (unsigned char)i);
    }
    uint64_t after = slab_tables_mapped(s);
    assert_true(after > before);
    assert_true(after >= N * table_bytes_of(PAGE_MAX_WORDS));
    assert_int_equal(after % HUGEMAP_BYTES, 0);
    assert_int_equal(slab_dram_bytes(s) - dram_before, after - before);
}

/* Pages of one-chunk tables move to the 64-byte class: the old tables are
 * retired, and once freed they wait in the arena for their size. */
static void
test_retired_back_to_arena(void **state)
{
    struct fixture *f = fixture_new(PAGES);
    *state = f;
    struct slab *s = f->slab;
    unsigned big = class_of_size(s, POOL_PAGE_SIZE);
    unsigned small = class_of_size(s, 64);
    uint32_t big_words = s->cls[big].nwords;

    for (int i = 0; i < PAGES; i++)
        assert_int_equal(slab_grow(s, big), 0);
    for (uint32_t pg = 0; pg < PAGES; pg++) {
        assert_int_equal(slab_drain_begin(s, pg), 0);
        assert_int_equal(slab_drain_finish(s, pg), 0);
    }
    for (int i = 0; i < PAGES; i++)
        assert_int_equal(slab_grow(s, small), 0);
    assert_int_equal(slab_check(s), 0);
    assert_null(s->tables.free_lists[big_words]);
    slab_retired_free(s, slab_retired_take(s));
    int n = 0;
    for (uint64_t *t = s->tables.free_lists[big_words]; t && n <= PAGES;
         t = (uint64_t *)(uintptr_t)t[0])
        n++;
    assert_int_equal(n, PAGES);
    assert_null(slab_retired_take(s));
    /* the small class's tables work: every chunk can be taken */
    for (uint32_t i = 0; i < PAGES * (POOL_PAGE_SIZE / 64); i++)
        take1(f, small);
    assert_int_equal(stats_of(s, small).free_chunks, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_records_in_aligned_region, teardown),
        cmocka_unit_test_teardown(test_region_advised, teardown),
        cmocka_unit_test_teardown(test_freed_table_reused, teardown),
        cmocka_unit_test_teardown(test_regions_added, teardown),
        cmocka_unit_test_teardown(test_retired_back_to_arena, teardown),
    };

    return cmocka_run_group_tests_name("slab_tables", tests, NULL, NULL);
}

/*
 * Engine tests of the experiment-only ablation switches
 * (tc_config.ablate_meta_in_pmem / ablate_init_in_lock): a set / overwrite /
 * delete / evict workload stays correct with each switch on (debug builds
 * also prove that their in-lock PMEM writes pass the helpers' check only on
 * the ablation paths), and the PMEM write pattern at page starts is what
 * each layout promises, seen through the PMEM helpers' write hook. The
 * switches are of the slabs' item layout: every test opens the slab store
 * (packed_item_max 0), whatever the default.
 */

#include "engine_fx.h"

#include "src/engine/item_layout.h"
#include "tier/pm.h"

#include <pthread.h>

/* 100-byte values under 6-byte keys, client flags not 0: items of 24 + 6 +
 * 4 (the flags, item_layout.h's opt) + 100 bytes. */
#define VLEN 100
#define KLEN 6
#define ITEM_BYTES (TC_ITEM_HEADER_SIZE + KLEN + 4 + VLEN)
#define NKEYS 60000 /* about 8 MB of chunks through a 6 MiB data area */

/* What the write hook saw, by offset inside the 1 MiB page. */
static struct {
    uint64_t writes;
    uint64_t line0_bytes;   /* bytes written into a page's first 64 bytes */
    uint64_t line0_words;   /* of those, aligned 8-byte stores (chunk 0's
                               commit word, the item's own, not counted) */
    uint64_t chunk0_beyond; /* writes starting in [0, 64) that end past
                               ITEM_BYTES (neither a mark nor item data) */
    uint64_t chunk0_items;  /* writes starting at 0 longer than 8 bytes */
    uint64_t min_item_off;  /* lowest page offset of a write > 8 bytes */
} seen;

static void
record(const void *dst, size_t n)
{
    uint64_t off = (uintptr_t)dst & (MIB - 1); /* pages are 1 MiB aligned */
    seen.writes++;
    if ((n == 8 || n == 4) && off == ITEM_COMMIT_OFFSET)
        return; /* chunk 0's commit word (8 bytes) or its CRC half (an
                 * invalidation): the item's own, not metadata */
    if (off < 64) {
        uint64_t end = off + n < 64 ? off + n : 64;
        seen.line0_bytes += end - off;
        if (n == 8 && off % 8 == 0)
            seen.line0_words++;
        if (off + n > ITEM_BYTES)
            seen.chunk0_beyond++;
        if (off == 0 && n > 8)
            seen.chunk0_items++;
    }
    if (n > 8 && off < seen.min_item_off)
        seen.min_item_off = off;
}

static void
hook_on(void)
{
    memset(&seen, 0, sizeof(seen));
    seen.min_item_off = UINT64_MAX;
    pm_set_write_hook(record);
}

static void
key_of(char *k, unsigned i)
{
    snprintf(k, KLEN + 1, "k%05u", i);
}

/* Store NKEYS keys (evicting), overwrite and delete some of the last ones,
 * and check what a reader sees. */
static void
workload(struct fx *f)
{
    unsigned char v[VLEN], buf[VLEN];
    char k[KLEN + 1];
    struct got g;
    const unsigned tail = 2000; /* the last keys: live after the evictions */

    for (unsigned i = 0; i < NKEYS; i++) {
        key_of(k, i);
        fill_pattern(v, VLEN, i);
        put(f->c, k, v, VLEN, i, 0);
    }
    for (unsigned i = NKEYS - tail; i < NKEYS; i += 4) {
        key_of(k, i);
        fill_pattern(v, VLEN, i + 1000000);
        put(f->c, k, v, VLEN, 7, 0);
        key_of(k, i + 1);
        assert_int_equal(tc_delete(f->c, k, KLEN, 0), TC_OK);
    }
    struct tc_stats st;
    tc_stats(f->c, &st);
    assert_true(st.evictions > 0);
    for (unsigned i = NKEYS - tail; i < NKEYS; i++) {
        key_of(k, i);
        int rc = get_cb(f->c, k, &g, buf, sizeof(buf));
        if (i % 4 == 1) {
            assert_int_equal(rc, TC_NOT_FOUND);
            continue;
        }
        assert_int_equal(rc, TC_OK);
        assert_int_equal(g.len, VLEN);
        fill_pattern(v, VLEN, i % 4 == 0 ? i + 1000000 : i);
        assert_memory_equal(buf, v, VLEN);
        assert_int_equal(g.info.flags, i % 4 == 0 ? 7 : i);
    }
    assert_int_equal(tc_check(f->c), 0);
}

static void
open_with(struct fx *f, bool meta, bool in_lock)
{
    f->cfg.pool_size = 8 * MIB; /* 6 MiB of pages */
    f->cfg.packed_item_max = 0;
    f->cfg.ablate_meta_in_pmem = meta;
    f->cfg.ablate_init_in_lock = in_lock;
    assert_int_equal(fx_open(f), 0);
    hook_on(); /* after the region header is written: pages only */
}

static void
finish(void)
{
    pm_set_write_hook(NULL);
}

/* Metadata in PMEM: the workload is correct; page-start lines take many
 * 8-byte header stores; no item is written in a page's header chunks. */
static void
test_meta_in_pmem(void **state)
{
    struct fx *f = *state;
    open_with(f, true, false);
    workload(f);
    finish();
    /* the item count and cursor words, at each allocation and free */
    assert_true(seen.line0_words > 2 * NKEYS);
    assert_int_equal(seen.line0_words * 8, seen.line0_bytes);
    assert_true(seen.min_item_off >= 2048); /* past the header's chunks */
}

/* Init in lock: the same workload is correct (and in debug builds the
 * helpers' lock check lets exactly these writes through). */
static void
test_init_in_lock(void **state)
{
    struct fx *f = *state;
    open_with(f, false, true);
    workload(f);
    finish();
    assert_int_equal(seen.line0_words, 0);
    assert_int_equal(seen.chunk0_beyond, 0);
}

static void
test_both_on(void **state)
{
    struct fx *f = *state;
    open_with(f, true, true);
    workload(f);
    finish();
    assert_true(seen.line0_words > NKEYS);
}

/* Both off (the default): the only PMEM bytes at a page's start are chunk
 * 0's own (its empty mark and its item's bytes, never past them), and no
 * 8-byte metadata store lands there. */
static void
test_both_off(void **state)
{
    struct fx *f = *state;
    open_with(f, false, false);
    workload(f);
    finish();
    assert_true(seen.chunk0_items > 0); /* items do live at chunk 0 */
    assert_int_equal(seen.min_item_off, 0);
    assert_int_equal(seen.chunk0_beyond, 0);
    assert_int_equal(seen.line0_words, 0);
}

/* The tracker over 4 DIMMs at 4 KiB: the skew and the kind of the hottest
 * block, after the workload with meta_in_pmem on or off. */
static void
tracked_run(struct fx *f, bool meta, double *skew, const char **top_what,
            uint64_t *top_block)
{
    struct tc_hotspot h;
    struct tc_hotspot_block top[4];
    f->cfg.pool_size = 8 * MIB;
    f->cfg.packed_item_max = 0;
    f->cfg.ablate_meta_in_pmem = meta;
    f->cfg.hotspot_dimms = 4;
    f->cfg.hotspot_interleave = 4096;
    assert_int_equal(fx_open(f), 0);
    assert_int_equal(tc_hotspot_reset(f->c), 0); /* from the pages on */
    workload(f);
    assert_int_equal(tc_hotspot_get(f->c, &h), 0);
    assert_int_equal(h.dimms, 4);
    assert_true(tc_hotspot_top(f->c, top, 4) > 0);
    print_message("meta_in_pmem %d: skew %.2f, DIMM bytes %llu %llu %llu "
                  "%llu, hottest block %llu (%s)\n",
                  meta, h.skew, (unsigned long long)h.dimm_bytes[0],
                  (unsigned long long)h.dimm_bytes[1],
                  (unsigned long long)h.dimm_bytes[2],
                  (unsigned long long)h.dimm_bytes[3],
                  (unsigned long long)top[0].block, top[0].what);
    *skew = h.skew;
    *top_what = top[0].what;
    *top_block = top[0].block;
    if (meta) /* DIMM 0 takes the page headers */
        for (unsigned d = 1; d < 4; d++)
            assert_true(h.dimm_bytes[0] > h.dimm_bytes[d]);
}

static void
test_tracker_sees_meta_hot_spot(void **state)
{
    double skew;
    const char *what;
    uint64_t block;
    tracked_run(*state, true, &skew, &what, &block);
    assert_true(skew > 1.4);
    assert_string_equal(what, "page_meta");
    /* a page's first block: pages are 1 MiB = 256 blocks, aligned */
    assert_int_equal(block % 256, 0);
}

static void
test_tracker_default_even(void **state)
{
    double skew;
    const char *what;
    uint64_t block;
    tracked_run(*state, false, &skew, &what, &block);
    assert_true(skew < 1.2);
    assert_string_not_equal(what, "page_meta");
}

/* Two threads with both switches on, each on its own keys in the same
 * slab class through a constantly evicting pool: the class lock around item
 * writes, the header stores under it and the lock-free in-use / CLOCK
 * mirrors race with each other (TSan runs this in make check). */
struct duo {
    struct tc_cache *c;
    unsigned id;
    unsigned bad;
};

static void *
duo_main(void *arg)
{
    struct duo *d = arg;
    unsigned char v[VLEN], buf[VLEN];
    char k[KLEN + 1];
    for (unsigned i = d->id; i < NKEYS; i += 2) {
        key_of(k, i);
        fill_pattern(v, VLEN, i);
        if (tc_set(d->c, k, KLEN, v, VLEN, 0, 0) != TC_OK)
            d->bad++;
        /* a hit returns exactly what was stored (the item may already be
         * evicted: the pool evicts all along) */
        if (i % 8 == d->id) {
            int rc = tc_get_copy(d->c, k, KLEN, buf, VLEN, NULL);
            if (rc < 0 || (rc == TC_OK && memcmp(buf, v, VLEN) != 0))
                d->bad++;
        }
        if (i % 16 == d->id + 2 && tc_delete(d->c, k, KLEN, 0) < 0)
            d->bad++;
    }
    return NULL;
}

static void
test_two_threads_both_on(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 8 * MIB;
    f->cfg.packed_item_max = 0;
    f->cfg.ablate_meta_in_pmem = true;
    f->cfg.ablate_init_in_lock = true;
    assert_int_equal(fx_open(f), 0);
    struct duo d[2] = {{f->c, 0, 0}, {f->c, 1, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, duo_main, &d[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(d[0].bad + d[1].bad, 0);
    struct tc_stats st;
    tc_stats(f->c, &st);
    assert_true(st.evictions > 0);
    assert_int_equal(tc_check(f->c), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(
            test_meta_in_pmem, setup_noopen, teardown, "ablate_meta"),
        cmocka_unit_test_prestate_setup_teardown(
            test_init_in_lock, setup_noopen, teardown, "ablate_lock"),
        cmocka_unit_test_prestate_setup_teardown(test_both_on, setup_noopen,
                                                 teardown, "ablate_both"),
        cmocka_unit_test_prestate_setup_teardown(
            test_tracker_sees_meta_hot_spot, setup_noopen, teardown,
            "ablate_track_meta"),
        cmocka_unit_test_prestate_setup_teardown(
            test_two_threads_both_on, setup_noopen, teardown, "ablate_duo"),
        cmocka_unit_test_prestate_setup_teardown(test_tracker_default_even,
                                                 setup_noopen, teardown,
                                                 "ablate_track_off"),
        cmocka_unit_test_prestate_setup_teardown(test_both_off, setup_noopen,
                                                 teardown, "ablate_off"),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests for tier/hotspot.c (the write-hotspot tracker) and its engine
 * side (src/engine/cache_hotspot.c, through the public tc_hotspot_* calls):
 * exact byte counts per block and per DIMM for known write sequences, including
 * writes that cross interleave and block boundaries and sampling; the skew;
 * the top list and the CSV dump; attaching to the PMEM write hook; and the
 * attribution of a known item's bytes.
 *
 * The "mapping" of the tracker-only tests is a heap buffer: the tracker
 * only does address arithmetic on it.
 */
#include "tier/hotspot.h"

#include "src/base/compiler.h"
#include "src/tiercache.h"
#include "tier/pm.h"

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define MAP_LEN (64u * 1024u) /* 16 blocks */

struct fx {
    char *map;
    struct hotspot *h;
};

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    f->map = aligned_alloc(4096, MAP_LEN);
    if (f->map == NULL)
        return -1;
    memset(f->map, 0, MAP_LEN);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;

    hotspot_destroy(f->h);
    free(f->map);
    free(f);
    return 0;
}

static struct hotspot *
make(struct fx *f, unsigned dimms, uint32_t interleave, uint32_t sample)
{
    struct hotspot_config cfg = {dimms, interleave, sample};

    assert_int_equal(hotspot_create(&cfg, f->map, MAP_LEN, &f->h), 0);
    hotspot_reset(f->h); /* the calling thread's sample tick too */
    return f->h;
}

/* Block i's counters, read through hotspot_top (every block of the test
 * mapping fits in one top list; none lies past its end): zeros and
 * HOTSPOT_UNKNOWN for a block nothing was recorded in. */
_Static_assert(MAP_LEN / HOTSPOT_BLOCK_SIZE <= HOTSPOT_TOP_MAX,
               "the top list holds every block");

static void
block_get(const struct hotspot *h, uint64_t i, struct hotspot_block *out)
{
    struct hotspot_block top[HOTSPOT_TOP_MAX];
    unsigned n = hotspot_top(h, top, HOTSPOT_TOP_MAX);

    memset(out, 0, sizeof(*out));
    out->index = i;
    out->what = HOTSPOT_UNKNOWN;
    for (unsigned j = 0; j < n; j++) {
        assert_true(top[j].index < MAP_LEN / HOTSPOT_BLOCK_SIZE);
        if (top[j].index == i)
            *out = top[j];
    }
}

static uint64_t
block_bytes(const struct hotspot *h, uint64_t i)
{
    struct hotspot_block b;

    block_get(h, i, &b);
    return b.bytes;
}

static uint64_t
block_writes(const struct hotspot *h, uint64_t i)
{
    struct hotspot_block b;

    block_get(h, i, &b);
    return b.writes;
}

/* Bytes of all recorded (sampled) writes: the sum over the DIMMs. */
static uint64_t
sampled_bytes(const struct hotspot *h)
{
    uint64_t d[HOTSPOT_MAX_DIMMS], sum = 0;
    unsigned n = hotspot_dimm_bytes(h, d, HOTSPOT_MAX_DIMMS);

    for (unsigned i = 0; i < n; i++)
        sum += d[i];
    return sum;
}

static void
test_config_defaults_and_checks(void **state)
{
    struct fx *f = *state;
    struct hotspot_config cfg;
    struct hotspot *h = NULL;

    hotspot_config_init(&cfg);
    assert_int_equal(cfg.dimms, 4);
    assert_int_equal(cfg.interleave, 4096);
    assert_int_equal(cfg.sample_every, 1);

    struct hotspot_config bad[] = {
        {0, 4096, 1}, {65, 4096, 1}, {4, 0, 1}, {4, 100, 1}, {4, 4096, 0}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(hotspot_create(&bad[i], f->map, MAP_LEN, &h), -EINVAL);
    assert_int_equal(hotspot_create(&cfg, NULL, MAP_LEN, &h), -EINVAL);
}

/* 4 DIMMs, 4 KiB interleave: a block is a stripe. */
static void
test_counts_blocks_and_dimms(void **state)
{
    struct fx *f = *state;
    struct hotspot *h = make(f, 4, 4096, 1);
    char *m = f->map;

    hotspot_record(h, m + 0, 100);          /* block 0 */
    hotspot_record(h, m + 4000, 200);       /* 96 in block 0, 104 in 1 */
    hotspot_record(h, m + 8192 + 10, 5);    /* block 2 */
    hotspot_record(h, m + 60000, 10000);    /* 1440 in 14, 4096 in 15, cut */
    hotspot_record(h, m + 16384, 4096 * 2); /* blocks 4 and 5 whole */
    hotspot_record(h, m - 16, 8);           /* before the mapping */
    hotspot_record(h, m + MAP_LEN, 8);      /* after it */
    hotspot_record(h, m + 100, 0);          /* empty */

    assert_int_equal(block_bytes(h, 0), 196);
    assert_int_equal(block_writes(h, 0), 2);
    assert_int_equal(block_bytes(h, 1), 104);
    assert_int_equal(block_writes(h, 1), 1);
    assert_int_equal(block_bytes(h, 2), 5);
    assert_int_equal(block_bytes(h, 3), 0);
    assert_int_equal(block_bytes(h, 4), 4096);
    assert_int_equal(block_bytes(h, 5), 4096);
    assert_int_equal(block_bytes(h, 14), 1440);
    assert_int_equal(block_bytes(h, 15), 4096);

    uint64_t d[4], w[4];
    assert_int_equal(hotspot_dimm_bytes(h, d, 4), 4);
    assert_int_equal(hotspot_dimm_writes(h, w, 4), 4);
    /* dimm = block % 4 here */
    assert_int_equal(d[0], 196 + 4096);
    assert_int_equal(d[1], 104 + 4096);
    assert_int_equal(d[2], 5 + 1440);
    assert_int_equal(d[3], 4096);
    assert_int_equal(w[0], 3); /* the writes at 0, 4000 and 16384 */
    assert_int_equal(w[1], 2);
    assert_int_equal(w[2], 2);
    assert_int_equal(w[3], 1);
    assert_int_equal(sampled_bytes(h), 196 + 104 + 5 + 4096 * 3 + 1440);
}

/* Interleave smaller than a block: one write is split across DIMMs, still
 * counting once per block and once per DIMM. */
static void
test_interleave_split(void **state)
{
    struct fx *f = *state;
    struct hotspot *h = make(f, 2, 256, 1);

    hotspot_record(h, f->map + 200, 1000); /* 200..1200 */
    /* stripes: 0:[0,256) d0, 1:[256,512) d1, 2:[512,768) d0,
     * 3:[768,1024) d1, 4:[1024,1280) d0 */
    uint64_t d[2], w[2];
    hotspot_dimm_bytes(h, d, 2);
    hotspot_dimm_writes(h, w, 2);
    assert_int_equal(d[0], 56 + 256 + 176);
    assert_int_equal(d[1], 256 + 256);
    assert_int_equal(w[0], 1);
    assert_int_equal(w[1], 1);
    assert_int_equal(block_bytes(h, 0), 1000);
    assert_int_equal(block_writes(h, 0), 1);

    /* crossing a block boundary inside one stripe set: 4000..4200 */
    hotspot_record(h, f->map + 4000, 200);
    hotspot_dimm_bytes(h, d, 2);
    /* 4000..4096 is stripe 15 (d1), 4096..4200 stripe 16 (d0) */
    assert_int_equal(d[0], 488 + 104);
    assert_int_equal(d[1], 512 + 96);
    assert_int_equal(block_bytes(h, 0), 1096);
    assert_int_equal(block_bytes(h, 1), 104);
}

/* Interleave larger than a block: blocks 0 and 1 share a stripe. */
static void
test_interleave_wide(void **state)
{
    struct fx *f = *state;
    struct hotspot *h = make(f, 3, 8192, 1);

    hotspot_record(h, f->map + 4096, 8192); /* blocks 1, 2 */
    uint64_t d[3];
    hotspot_dimm_bytes(h, d, 3);
    assert_int_equal(d[0], 4096);
    assert_int_equal(d[1], 4096);
    assert_int_equal(d[2], 0);
    hotspot_record(h, f->map + 6 * 8192, 64); /* stripe 6: d0 */
    hotspot_dimm_bytes(h, d, 3);
    assert_int_equal(d[0], 4096 + 64);
}

static void
test_sampling(void **state)
{
    struct fx *f = *state;
    struct hotspot *h = make(f, 4, 4096, 3);

    for (unsigned i = 1; i <= 9; i++)
        hotspot_record(h, f->map + i * 4096, i);
    /* the 3rd, 6th and 9th writes are recorded */
    assert_int_equal(sampled_bytes(h), 3 + 6 + 9);
    for (unsigned i = 1; i <= 9; i++)
        assert_int_equal(block_bytes(h, i), i % 3 == 0 ? i : 0);
    /* writes outside the mapping do not advance the sample */
    hotspot_record(h, f->map - 64, 8);
    hotspot_record(h, f->map, 1);
    hotspot_record(h, f->map, 2);
    assert_int_equal(sampled_bytes(h), 18);
    hotspot_record(h, f->map, 4);
    assert_int_equal(sampled_bytes(h), 22);
}

static void
test_skew(void **state)
{
    struct fx *f = *state;
    struct hotspot *h = make(f, 4, 4096, 1);

    assert_true(hotspot_skew(h) == 0.0);
    hotspot_record(h, f->map + 0 * 4096, 300);
    hotspot_record(h, f->map + 1 * 4096, 100);
    hotspot_record(h, f->map + 2 * 4096, 100);
    hotspot_record(h, f->map + 3 * 4096, 100);
    assert_true(hotspot_skew(h) > 1.999 && hotspot_skew(h) < 2.001);
    hotspot_record(h, f->map + 5 * 4096, 200); /* d1 */
    hotspot_record(h, f->map + 6 * 4096, 200); /* d2 */
    hotspot_record(h, f->map + 7 * 4096, 200); /* d3 */
    assert_true(hotspot_skew(h) > 0.999 && hotspot_skew(h) < 1.001);
    hotspot_reset(h);
    assert_int_equal(sampled_bytes(h), 0);
    assert_int_equal(block_bytes(h, 0), 0);
    assert_true(hotspot_skew(h) == 0.0);
}

static void
test_top_and_dump(void **state)
{
    struct fx *f = *state;
    struct hotspot *h = make(f, 4, 4096, 1);

    hotspot_record(h, f->map + 5 * 4096, 50);
    hotspot_record(h, f->map + 9 * 4096, 400);
    hotspot_record(h, f->map + 2 * 4096, 70);
    hotspot_record(h, f->map + 9 * 4096 + 1000, 10);

    struct hotspot_block top[4];
    assert_int_equal(hotspot_top(h, top, 2), 2);
    assert_int_equal(top[0].index, 9);
    assert_int_equal(top[0].bytes, 410);
    assert_int_equal(top[0].writes, 2);
    assert_int_equal(top[0].what, HOTSPOT_UNKNOWN); /* no classifier */
    assert_int_equal(top[1].index, 2);
    assert_int_equal(hotspot_top(h, top, 4), 3);
    assert_int_equal(top[2].index, 5);

    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    assert_non_null(mf);
    assert_int_equal(hotspot_dump(h, mf), 0);
    fclose(mf);
    const char *want =
        "# tiercache-hotspot v1 dimms=4 interleave=4096 block=4096 "
        "map_bytes=65536 source=tracker sample=1\n"
        "kind,index,bytes,writes,what\n"
        "dimm,0,0,0,\n"
        "dimm,1,460,3,\n" /* blocks 5 and 9 */
        "dimm,2,70,1,\n"
        "dimm,3,0,0,\n"
        "block,2,70,1,unknown\n"
        "block,5,50,1,unknown\n"
        "block,9,410,2,unknown\n";
    assert_string_equal(buf, want);
    free(buf);
}

/* A classifier that calls the first 100 bytes of each block metadata. */
static void
classify_first100(void *arg, uint64_t off, size_t n, uint64_t *kb)
{
    (void)arg;
    uint64_t in = off % HOTSPOT_BLOCK_SIZE;
    uint64_t meta = in < 100 ? (uint64_t)MIN((uint64_t)n, 100 - in) : 0;

    kb[HOTSPOT_ITEM_HEADER] += meta;
    kb[HOTSPOT_ITEM_VALUE] += n - meta;
}

static void
test_verdict(void **state)
{
    struct fx *f = *state;
    struct hotspot *h = make(f, 4, 4096, 1);
    struct hotspot_block b;

    hotspot_set_classifier(h, classify_first100, NULL);
    hotspot_record(h, f->map, 100); /* all header */
    block_get(h, 0, &b);
    assert_int_equal(b.what, HOTSPOT_ITEM_HEADER);
    assert_int_equal(b.pct[HOTSPOT_ITEM_HEADER], 100);
    hotspot_record(h, f->map + 4096, 300); /* 100 header, 200 value */
    block_get(h, 1, &b);
    assert_int_equal(b.what, HOTSPOT_ITEM_VALUE); /* exactly two thirds */
    hotspot_record(h, f->map + 8192, 150);        /* 100 / 50: two thirds */
    hotspot_record(h, f->map + 8192, 1);          /* 101 / 50: more */
    block_get(h, 2, &b);
    assert_int_equal(b.what, HOTSPOT_ITEM_HEADER);
    hotspot_record(h, f->map + 12288, 199); /* 100 / 99 */
    block_get(h, 3, &b);
    assert_int_equal(b.what, HOTSPOT_MIXED);
    assert_string_equal(hotspot_kind_name(b.what), "mixed");
    assert_string_equal(hotspot_kind_name(HOTSPOT_PAGE_META), "page_meta");
    assert_string_equal(hotspot_kind_name(HOTSPOT_REGION_META), "region_meta");
}

/* Attached, the PMEM helpers feed the tracker; one tracker per process. */
static void
test_attach(void **state)
{
    struct fx *f = *state;
    struct hotspot *h = make(f, 4, 4096, 1);
    struct hotspot_config cfg;
    struct hotspot *other;
    uint64_t v = 7;

    hotspot_config_init(&cfg);
    assert_int_equal(hotspot_create(&cfg, f->map, MAP_LEN, &other), 0);
    assert_int_equal(hotspot_attach(h), 0);
    assert_int_equal(hotspot_attach(h), 0); /* again: no-op */
    assert_int_equal(hotspot_attach(other), -EBUSY);
    pm_copy(f->map + 4096, &v, sizeof(v));
    pm_set(f->map + 8192, 1, 33);
    pm_store64((uint64_t *)(f->map + 64), 9);
    pm_store32((uint32_t *)(f->map + 128), 9);
    pm_copy(&v, &v, 0);
    assert_int_equal(block_bytes(h, 1), 8);
    assert_int_equal(block_bytes(h, 2), 33);
    assert_int_equal(block_bytes(h, 0), 12);
    hotspot_detach(other); /* not attached: no effect */
    pm_copy(f->map + 4096, &v, sizeof(v));
    assert_int_equal(block_bytes(h, 1), 16);
    hotspot_detach(h);
    pm_copy(f->map + 4096, &v, sizeof(v));
    assert_int_equal(block_bytes(h, 1), 16);
    assert_int_equal(hotspot_attach(other), 0);
    hotspot_destroy(other); /* detaches */
    assert_int_equal(hotspot_attach(h), 0);
    hotspot_detach(h);
}

/* --- engine: attribution of known items, one tracked cache per process */

struct efx {
    struct tc_cache *c;
    struct tc_config cfg;
    char path[160];
};

/* The engine on the slab store (packed_item_max 0, whatever the default):
 * the tests count the bytes and blocks of the slabs' item layout (a
 * header, its commit word, an exptime rewritten in place). */
static int
esetup_slab(void **state)
{
    struct efx *e = calloc(1, sizeof(*e));

    if (e == NULL)
        return -1;
    snprintf(e->path, sizeof(e->path), "/dev/shm/tc_test_hotspot_%d.pool",
             (int)getpid());
    unlink(e->path);
    tc_config_init(&e->cfg);
    e->cfg.pool_path = e->path;
    e->cfg.pool_size = 16u << 20;
    e->cfg.background = false;
    e->cfg.hotspot_dimms = 4;
    e->cfg.packed_item_max = 0;
    if (tc_open(&e->cfg, &e->c) != 0) {
        print_message("tc_open: %s\n", tc_errmsg());
        return -1;
    }
    *state = e;
    return 0;
}

static int
eteardown(void **state)
{
    struct efx *e = *state;

    tc_close(e->c);
    unlink(e->path);
    free(e);
    return 0;
}

static void
test_engine_attribution(void **state)
{
    struct efx *e = *state;
    struct tc_hotspot hs;
    struct tc_hotspot_block top[8];
    char key[250], val[16384];

    memset(key, 'k', sizeof(key));
    memset(val, 'v', sizeof(val));
    /* a first item of each size formats its class's page; then count a
     * second one alone */
    key[0] = 'a';
    assert_int_equal(tc_set(e->c, key, 250, val, 10, 0, 0), 0);
    assert_int_equal(tc_set(e->c, key, 5, val, sizeof(val), 0, 0), 0);
    assert_int_equal(tc_hotspot_reset(e->c), 0);

    /* header-heavy: 24 + 250 bytes of header and key, 10 of value, then
     * the commit word (8 bytes) stored again last */
    key[0] = 'b';
    assert_int_equal(tc_set(e->c, key, 250, val, 10, 0, 0), 0);
    assert_int_equal(tc_hotspot_get(e->c, &hs), 0);
    assert_int_equal(hs.dimms, 4);
    assert_int_equal(hs.interleave, 4096);
    assert_int_equal(hs.sample, 1);
    assert_int_equal(hs.sampled_bytes, TC_ITEM_HEADER_SIZE + 250 + 10 + 8);
    int n = tc_hotspot_top(e->c, top, 8);
    assert_true(n >= 1 && n <= 2); /* the chunk may cross a block */
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += top[i].bytes;
    assert_int_equal(sum, TC_ITEM_HEADER_SIZE + 250 + 10 + 8);
    assert_string_equal(top[0].what, "item_header");

    /* value-heavy: 16 KiB of value covers whole blocks of value only */
    assert_int_equal(tc_hotspot_reset(e->c), 0);
    key[0] = 'c';
    assert_int_equal(tc_set(e->c, key, 5, val, sizeof(val), 0, 0), 0);
    assert_int_equal(tc_hotspot_get(e->c, &hs), 0);
    assert_int_equal(hs.sampled_bytes,
                     TC_ITEM_HEADER_SIZE + 5 + sizeof(val) + 8);
    n = tc_hotspot_top(e->c, top, 8);
    assert_true(n >= 4 && n <= 6);
    assert_int_equal(top[0].bytes, 4096);
    assert_string_equal(top[0].what, "item_value");
    uint64_t dsum = 0;
    for (unsigned d = 0; d < hs.dimms; d++)
        dsum += hs.dimm_bytes[d];
    assert_int_equal(dsum, hs.sampled_bytes);

    /* the dump has the DIMM rows and one row per written block */
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    assert_non_null(mf);
    assert_int_equal(tc_hotspot_dump(e->c, mf), 0);
    fclose(mf);
    assert_non_null(strstr(buf, "source=tracker"));
    assert_non_null(strstr(buf, "\ndimm,3,"));
    int blocks = 0;
    for (const char *p = buf; (p = strstr(p, "\nblock,")) != NULL; p++)
        blocks++;
    assert_int_equal(blocks, n);
    assert_non_null(strstr(buf, ",item_value\n"));
    free(buf);

    /* a second tracked cache in this process is refused */
    struct tc_config cfg2 = e->cfg;
    char path2[200];
    snprintf(path2, sizeof(path2), "%s.2", e->path);
    cfg2.pool_path = path2;
    struct tc_cache *c2 = NULL;
    assert_int_equal(tc_open(&cfg2, &c2), -EBUSY);
    assert_non_null(strstr(tc_errmsg(), "one tracked cache per process"));
    /* an untracked one is fine, and says tracking is off */
    cfg2.hotspot_dimms = 0;
    assert_int_equal(tc_open(&cfg2, &c2), 0);
    assert_int_equal(tc_hotspot_get(c2, &hs), 0);
    assert_int_equal(hs.dimms, 0);
    assert_int_equal(tc_hotspot_reset(c2), -ENOTSUP);
    assert_int_equal(tc_hotspot_dump(c2, stdout), -ENOTSUP);
    tc_close(c2);
    unlink(path2);
}

/* An in-place PMEM write pattern the tracker must expose: touch rewrites
 * the item's 4-byte exptime where it is, so a touched-hot key makes a hot
 * block of item headers. */
static void
test_engine_touch_hot_block(void **state)
{
    struct efx *e = *state;
    struct tc_hotspot_block top[2];
    char val[200];

    memset(val, 'h', sizeof(val));
    assert_int_equal(tc_set(e->c, "hot", 3, val, sizeof(val), 0, 0), 0);
    assert_int_equal(tc_set(e->c, "cold", 4, val, sizeof(val), 0, 0), 0);
    assert_int_equal(tc_hotspot_reset(e->c), 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(tc_touch(e->c, "hot", 3, 100 + i), 0);
    assert_int_equal(tc_hotspot_top(e->c, top, 2), 1);
    assert_int_equal(top[0].bytes, 4000);
    assert_int_equal(top[0].writes, 1000);
    assert_string_equal(top[0].what, "item_header");
}

struct writer {
    struct tc_cache *c;
    int id;
};

static void *
writer_main(void *arg)
{
    struct writer *w = arg;
    char key[32], val[100];

    memset(val, 'w', sizeof(val));
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(key, sizeof(key), "t%d:%05d", w->id, i);
        if (tc_set(w->c, key, (size_t)n, val, sizeof(val), 0, 0) != 0)
            return (void *)1;
    }
    tc_thread_unregister(w->c);
    return NULL;
}

/* Two writers at once (TSan runs this too): every byte is counted once,
 * and the per-DIMM and per-block views agree. The slabs' items (their
 * sizes bound the bytes counted): esetup_slab. */
static void
test_engine_threads(void **state)
{
    struct efx *e = *state;
    pthread_t th[2];
    struct writer w[2] = {{e->c, 0}, {e->c, 1}};
    struct tc_hotspot hs;

    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
    for (int i = 0; i < 2; i++) {
        void *rc;
        assert_int_equal(pthread_join(th[i], &rc), 0);
        assert_null(rc);
    }
    assert_int_equal(tc_hotspot_get(e->c, &hs), 0);
    /* each item once (24 + 8 + 100), plus the formatting of new pages */
    assert_true(hs.sampled_bytes >= 4000u * (24 + 8 + 100));
    assert_true(hs.skew >= 1.0 && hs.skew < 1.5);

    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    assert_non_null(mf);
    assert_int_equal(tc_hotspot_dump(e->c, mf), 0);
    fclose(mf);
    uint64_t blocks = 0;
    for (char *p = strstr(buf, "\nblock,"); p; p = strstr(p + 1, "\nblock,")) {
        unsigned long long idx, bytes;
        assert_int_equal(sscanf(p, "\nblock,%llu,%llu,", &idx, &bytes), 2);
        blocks += bytes;
    }
    assert_int_equal(blocks, hs.sampled_bytes);
    free(buf);
}

static void
test_engine_bad_options(void **state)
{
    (void)state;
    struct tc_config cfg;
    struct tc_cache *c = NULL;
    char path[160];

    snprintf(path, sizeof(path), "/dev/shm/tc_test_hotspot_bad_%d.pool",
             (int)getpid());
    tc_config_init(&cfg);
    cfg.pool_path = path;
    cfg.pool_size = 16u << 20;
    cfg.background = false;
    cfg.hotspot_dimms = 65;
    assert_int_equal(tc_open(&cfg, &c), -EINVAL);
    assert_non_null(strstr(tc_errmsg(), "hotspot_dimms"));
    cfg.hotspot_dimms = 4;
    cfg.hotspot_interleave = 100;
    assert_int_equal(tc_open(&cfg, &c), -EINVAL);
    assert_non_null(strstr(tc_errmsg(), "hotspot_interleave"));
    unlink(path);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_config_defaults_and_checks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_counts_blocks_and_dimms, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_interleave_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_interleave_wide, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_skew, setup, teardown),
        cmocka_unit_test_setup_teardown(test_top_and_dump, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verdict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_attribution, esetup_slab,
                                        eteardown),
        cmocka_unit_test_setup_teardown(test_engine_touch_hot_block,
                                        esetup_slab, eteardown),
        cmocka_unit_test_setup_teardown(test_engine_threads, esetup_slab,
                                        eteardown),
        cmocka_unit_test(test_engine_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

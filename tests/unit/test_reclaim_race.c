/*
 * Page moves raced by several writers (src/engine/reclaim.c: page moves,
 * reclaim_alloc_item): with evictions on, a store never answers "out of
 * memory" while the pool holds pages that can be evicted or moved, in
 * whatever order the threads run.
 *
 * Four threads store values whose sizes move between slab classes in
 * phases, on a pool of a few pages: a class that needs memory has none of
 * its own and must take a page from another class, whose chunks sit in the
 * other threads' quota stashes or under items being written. Each thread
 * owns its keys, so it knows what each key must read back: its newest
 * value, or a miss (evicted). The assertion holds in every schedule; the
 * seed (TC_TEST_SEED) fixes each thread's sequence, not the interleaving.
 */
#include "engine_fx.h"

#include <pthread.h>

#define NTHREADS 4
#define NKEYS 256           /* per thread */
#define OPS_PER_THREAD 3000 /* bounded: a few seconds under TSan */
#define PHASE_OPS 150       /* ops per value-size band */

/* Value-size bands as in perf/soak.py: each moves stores to other
 * classes, the last one to chunks of which a page holds a few dozen. */
static const uint32_t band_lo[] = {64, 600, 3000, 12000};
static const uint32_t band_hi[] = {400, 3000, 12000, 40000};

struct racer {
    struct tc_cache *c;
    unsigned id;
    uint64_t seed;
    uint32_t ver[NKEYS]; /* newest version stored, 0 none */
    unsigned nomem, errors, wrong, hits, misses, stores;
    int first_err;
    char what[160]; /* the first wrong value */
};

/* A value's length and bytes follow from (thread, key, version). */
static uint32_t
val_len(const struct racer *r, unsigned k, uint32_t ver)
{
    uint64_t s = r->seed ^ ((uint64_t)r->id << 48) ^ ((uint64_t)k << 24) ^ ver;
    unsigned band = (ver >> 20) % 4;
    rng_next(&s);
    return band_lo[band] +
           (uint32_t)(rng_next(&s) % (band_hi[band] - band_lo[band]));
}

static void
val_fill(const struct racer *r, unsigned k, uint32_t ver, unsigned char *buf,
         uint32_t len)
{
    fill_pattern(buf, len, r->seed ^ ((uint64_t)r->id << 40) ^ (k << 20) ^ ver);
}

static void
key_of(const struct racer *r, unsigned k, char *key, size_t cap)
{
    snprintf(key, cap, "race-%u-%u", r->id, k);
}

static void
check_read(struct racer *r, unsigned k, unsigned char *want, unsigned char *got)
{
    char key[32];
    struct tc_item_info info;
    key_of(r, k, key, sizeof(key));
    int rc = tc_get_copy(r->c, key, strlen(key), got, 40000, &info);
    if (rc == TC_NOT_FOUND) {
        r->misses++;
        return;
    }
    uint32_t len = r->ver[k] ? val_len(r, k, r->ver[k]) : 0;
    if (rc == TC_OK && r->ver[k])
        val_fill(r, k, r->ver[k], want, len);
    if (rc != TC_OK || !r->ver[k] || info.vlen != len ||
        memcmp(got, want, len) != 0) {
        if (!r->wrong++)
            snprintf(r->what, sizeof(r->what),
                     "%s: rc %d, %u bytes, expected version %u (%u bytes)", key,
                     rc, rc == TC_OK ? info.vlen : 0, r->ver[k], len);
        return;
    }
    r->hits++;
}

static void *
racer_main(void *arg)
{
    struct racer *r = arg;
    unsigned char *val = malloc(40000), *got = malloc(40000);
    uint64_t s = r->seed ^ r->id;
    char key[32];

    if (!val || !got || tc_thread_register(r->c) != 0) {
        r->errors++;
        goto out;
    }
    for (unsigned op = 0; op < OPS_PER_THREAD; op++) {
        unsigned k = (unsigned)(rng_next(&s) % NKEYS);
        if (rng_next(&s) % 4 == 0) {
            check_read(r, k, val, got);
            continue;
        }
        /* the band is in the version's high bits: a phase shifts every
         * thread's sizes together (threads drift apart a little) */
        uint32_t ver = ((op / PHASE_OPS) << 20) | (op + 1);
        uint32_t len = val_len(r, k, ver);
        val_fill(r, k, ver, val, len);
        key_of(r, k, key, sizeof(key));
        int rc = tc_set(r->c, key, strlen(key), val, len, 0, 0);
        r->stores++;
        if (rc == TC_OK) {
            r->ver[k] = ver;
            continue;
        }
        if (rc == -ENOMEM)
            r->nomem++;
        else
            r->errors++;
        if (!r->first_err)
            r->first_err = rc;
        /* the old value may or may not be there: no longer checkable */
        tc_delete(r->c, key, strlen(key), 0);
        r->ver[k] = 0;
    }
    for (unsigned k = 0; k < NKEYS; k++)
        check_read(r, k, val, got);
    tc_thread_unregister(r->c);
out:
    free(val);
    free(got);
    return NULL;
}

static void
race(struct fx *f, bool background)
{
    struct racer *r = calloc(NTHREADS, sizeof(*r));
    pthread_t th[NTHREADS];
    uint64_t seed = test_seed();

    assert_non_null(r);
    /* 6 pages of 1 MiB: fewer than the classes the bands touch */
    f->cfg.pool_size = 8 * MIB;
    f->cfg.background = background;
    /* a store waits for page moves as long as it takes: how long that is
     * depends on the scheduler (4 threads on a loaded machine), and the
     * test is about never being refused, not about how soon */
    f->cfg.alloc_wait_ms = 120000;
    fx_reopen(f);
    print_message("seed %" PRIu64 " (TC_TEST_SEED replays each thread's "
                  "operations), background %s\n",
                  seed, background ? "on" : "off");
    for (unsigned i = 0; i < NTHREADS; i++) {
        r[i] = (struct racer){.c = f->c, .id = i, .seed = seed};
        assert_int_equal(pthread_create(&th[i], NULL, racer_main, &r[i]), 0);
    }
    for (unsigned i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);

    struct tc_stats st;
    tc_stats(f->c, &st);
    unsigned nomem = 0, errors = 0, wrong = 0;
    for (unsigned i = 0; i < NTHREADS; i++) {
        print_message("thread %u: %u stores, %u refused out of memory "
                      "(first error %d), %u hits, %u misses, %u wrong%s%s\n",
                      i, r[i].stores, r[i].nomem, r[i].first_err, r[i].hits,
                      r[i].misses, r[i].wrong, r[i].wrong ? ": " : "",
                      r[i].what);
        nomem += r[i].nomem;
        errors += r[i].errors;
        wrong += r[i].wrong;
    }
    print_message("slabs_moved %" PRIu64 ", evictions %" PRIu64
                  ", store_no_memory %" PRIu64 ", stores that waited for a "
                  "page move %" PRIu64 ", moves given up %" PRIu64 "\n",
                  st.slab_reassign_count, st.evictions, st.store_no_memory,
                  st.store_waits, st.slab_reassign_gave_up);
    free(r);
    assert_int_equal(errors, 0);
    assert_int_equal(wrong, 0);
    /* the point: with evictions on, no store is refused */
    assert_int_equal(nomem, 0);
    assert_int_equal(st.store_no_memory, 0);
    assert_true(st.slab_reassign_count > 0); /* the race was there */
}

static void
test_race_background_off(void **state)
{
    race(*state, false);
}

static void
test_race_background_on(void **state)
{
    race(*state, true);
}

/* One thread, chained items (memcached's t/chunked-items.t in a 48 MiB
 * cache with 16 KiB chunks): a 38 KB value, five of 400 KiB, a hundred of
 * 576 KiB, then every size from 200 KiB to 1 MiB. A value's
 * chunks are of the largest class, its last piece's and its head's of two
 * small ones that have no page of their own yet; each store must take
 * pages from other classes, never the one page the other small class
 * needs. */
static void
test_chained_sizes_one_thread(void **state)
{
    struct fx *f = *state;
    unsigned char *v = malloc(MIB);
    char key[32];
    unsigned refused = 0, first = 0;

    assert_non_null(v);
    f->cfg.chunk_max = 16384;
    f->cfg.alloc_wait_ms = 120000; /* as in race(): never a speed */
    f->cfg.mem_limit = 48 * MIB;
    f->cfg.pool_size = 64 * MIB;
    fx_reopen(f);
    for (unsigned i = 0; i < 106; i++) {
        uint32_t len = i == 0 ? 38893 : i < 6 ? 400 * 1024 : 589824;
        fill_pattern(v, len, i);
        snprintf(key, sizeof(key), "first_%u", i);
        assert_int_equal(tc_set(f->c, key, strlen(key), v, len, 0, 0), TC_OK);
    }
    for (uint32_t len = 200 * 1024; len < MIB - 64; len += 2048) {
        fill_pattern(v, len, len);
        snprintf(key, sizeof(key), "foo_%u", len);
        int rc = tc_set(f->c, key, strlen(key), v, len, 0, 0);
        if (rc != TC_OK && !refused++)
            first = len;
        if (rc == TC_OK)
            check_val(f->c, key, v, len);
    }
    free(v);
    if (refused)
        print_message("%u refused, the first of %u bytes\n", refused, first);
    assert_int_equal(refused, 0);
}

/* The true case stays: with -M (no eviction) a class that cannot get a
 * page answers -ENOMEM, and at once (no wait for page moves). */
static void
test_no_evict_still_refuses(void **state)
{
    struct fx *f = *state;
    unsigned char v[3000];
    char key[32];
    int rc = TC_OK;
    unsigned i;

    f->cfg.pool_size = 8 * MIB;
    f->cfg.evict = false;
    fx_reopen(f);
    fill_pattern(v, sizeof(v), 3);
    for (i = 0; i < 100000 && rc == TC_OK; i++) {
        snprintf(key, sizeof(key), "full-%u", i);
        rc = tc_set(f->c, key, strlen(key), v, sizeof(v), 0, 0);
    }
    assert_int_equal(rc, -ENOMEM);
    /* the items stored are all there: nothing was evicted to make room */
    struct tc_stats st;
    tc_stats(f->c, &st);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.curr_items, i - 1);
    assert_int_equal(st.store_waits, 0);
}

/* Store one value of len bytes under name: its result. */
static int
set_len(struct tc_cache *c, const char *name, unsigned char *v, uint32_t len)
{
    fill_pattern(v, len, len);
    return tc_set(c, name, strlen(name), v, len, 0, 0);
}

/*
 * One thread, no maintenance thread (as the engine fuzz target: a 4-page
 * pool, five classes of 64 .. 1024 bytes). Two classes hold a page of
 * small items each; a chained value then needs three more classes at once
 * (its 1 KiB chunks, its last piece's, its head's) on the two pages left.
 * Nobody but the storing thread can give anything back, so a page move
 * that waits for chunks waits for this store's own: the store must finish
 * the move itself or take a page it does not hold, never wait for a
 * thread that is not there. Every such store succeeds (the small items'
 * pages can be emptied); alloc_wait_ms bounds the test if one waits for
 * nothing (it then fails with -ENOMEM). Slab pages and classes: the slab
 * store (TC_TEST_SLAB).
 */
static void
test_one_thread_waits_on_nobody(void **state)
{
    struct fx *f = *state;
    unsigned char v[4096];
    char key[32];

    f->cfg.pool_size = 6 * MIB; /* 4 pages after the 2 MiB header */
    f->cfg.item_size_max = 4096;
    f->cfg.chunk_max = 1024;
    f->cfg.growth_factor = 2.0;
    f->cfg.quota_batch = 4;
    f->cfg.expected_items = 64;
    f->cfg.alloc_wait_ms = 2000;
    fx_reopen(f);
    assert_int_equal(set_len(f->c, "k0", v, 5), TC_OK);
    assert_int_equal(set_len(f->c, "k1", v, 824), TC_OK);
    for (unsigned i = 0; i < 32; i++) {
        snprintf(key, sizeof(key), "fill%u", i);
        assert_int_equal(set_len(f->c, key, v, 48), TC_OK);
    }
    for (unsigned i = 0; i < 32; i++) {
        snprintf(key, sizeof(key), "fill%u", 64 + i);
        assert_int_equal(set_len(f->c, key, v, 480), TC_OK);
    }
    assert_int_equal(set_len(f->c, "k2", v, 3806), TC_OK);
    for (unsigned i = 0; i < 64; i++) {
        snprintf(key, sizeof(key), "fill%u", 320 + i);
        int rc = set_len(f->c, key, v, 3200);
        if (rc != TC_OK)
            print_message("%s: %d\n", key, rc);
        assert_int_equal(rc, TC_OK);
        check_val(f->c, key, v, 3200);
    }
    assert_int_equal(tc_check(f->c), 0);
}

/*
 * A chained value that needs chunks of three classes at once in a pool of
 * two pages can never be stored, whatever other threads give back: the
 * store is refused at once, without waiting for page moves (with the
 * maintenance thread there, the store is not alone with its cache, so it
 * would have waited alloc_wait_ms, and tc_store_waits says whether it
 * did). A value that fits one class is stored after it.
 */
static void
test_too_few_pages_refused_at_once(void **state)
{
    struct fx *f = *state;
    unsigned char v[4096];

    f->cfg.pool_size = 6 * MIB;
    f->cfg.mem_limit = 2 * MIB; /* 2 pages of 1 MiB */
    f->cfg.item_size_max = 4096;
    f->cfg.chunk_max = 1024;
    f->cfg.growth_factor = 2.0;
    f->cfg.background = true;
    f->cfg.alloc_wait_ms = 2000; /* bounds the test if the store waits */
    fx_reopen(f);
    /* 1 KiB chunks, a last piece of the 256-byte class, a 64-byte head */
    assert_int_equal(set_len(f->c, "big", v, 3200), -ENOMEM);
    struct tc_stats st;
    tc_stats(f->c, &st);
    assert_int_equal(st.store_waits, 0);
    assert_int_equal(set_len(f->c, "small", v, 900), TC_OK);
    check_val(f->c, "small", v, 900);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST(test_race_background_off),
        TC_TEST(test_race_background_on),
        TC_TEST(test_chained_sizes_one_thread),
        TC_TEST(test_no_evict_still_refuses),
        TC_TEST_SLAB(test_one_thread_waits_on_nobody),
        TC_TEST(test_too_few_pages_refused_at_once),
    };
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("reclaim-race", tests, NULL, NULL);
}

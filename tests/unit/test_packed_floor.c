/*
 * A key's CAS never goes down across its removal and re-creation with the
 * packed store on (the CAS floor, src/engine/cache_packed.h): the key's
 * version is removed (delete, expiry met by a reader, slab eviction,
 * packed segment eviction, flush_all) and the key stored again into a
 * segment whose block is older than the removed version's CAS (this
 * thread's bucket-0 segment, opened first); the new CAS must be above the
 * old. Also a delete racing a set of one key on two threads. Fixture:
 * engine_fx.h with packed_item_max = 1024, on a 40 MiB pool.
 */

#include "tests/unit/engine_fx.h"
#include "tests/unit/packed_fx.h"

#include <pthread.h>

/* psetup's, on 40 MiB: 38 pages, so 4 segments may be open (1/8) and
 * another thread or a TTL bucket gets one of its own */
static int
fsetup(void **state)
{
    int rc = setup_noopen(state);
    if (rc)
        return rc;
    struct fx *f = *state;
    f->cfg.packed_item_max = PACKED_MAX;
    f->cfg.pool_size = 40 * MIB;
    if (fx_open(f) != 0) {
        unlink(f->path);
        free(f);
        return -1;
    }
    return 0;
}

#define FTEST(fn)                                                              \
    cmocka_unit_test_prestate_setup_teardown(fn, fsetup, teardown, #fn)

struct other_set {
    struct tc_cache *c;
    const char *key;
    uint64_t cas;
};

static void *
other_set_run(void *arg)
{
    struct other_set *o = arg;
    assert_int_equal(store_s(o->c, TC_SET, o->key, "theirs", 0, 0, 0, &o->cas),
                     TC_OK);
    return NULL;
}

/* key set packed by a thread of its own: its segment opens after this
 * thread's, a newer block; the thread's end seals it. Its CAS. */
static uint64_t
set_elsewhere(struct tc_cache *c, const char *key)
{
    pthread_t th;
    struct other_set o = {c, key, 0};
    assert_int_equal(pthread_create(&th, NULL, other_set_run, &o), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    return o.cas;
}

/* key stored again here, packed: its CAS, asserted above old and read
 * back. */
static uint64_t
recreate_above(struct tc_cache *c, const char *key, uint64_t old)
{
    uint64_t cas = 0;
    check_miss(c, key);
    assert_int_equal(store_s(c, TC_SET, key, "mine", 0, 0, 0, &cas), TC_OK);
    if (cas <= old)
        fail_msg("%s: CAS %" PRIu64 " after a removed %" PRIu64, key, cas, old);
    assert_int_equal(check_str(c, key, "mine").cas, cas);
    return cas;
}

/* Delete: of a packed version from a newer segment, and of a slab one
 * (the counter's CAS, above every open block). Meta's I mode then sees
 * the order memcached's does: a CAS older than the new item's. */
static void
test_floor_delete(void **state)
{
    struct fx *f = *state;
    char big[2000];
    memset(big, 'd', sizeof(big));

    puts_(f->c, "open", "this thread's segment: the oldest block");
    uint64_t old = set_elsewhere(f->c, "k");
    assert_int_equal(tc_delete(f->c, "k", 1, 0), TC_OK);
    recreate_above(f->c, "k", old);
    /* ms k C<old> I: older than the item's, so stored marked stale
     * (memcached's HD), not refused (EX) */
    struct tc_store_opts o = {
        .cas_in = old, .cas_check = true, .invalidate = true};
    assert_int_equal(
        tc_store_ex(f->c, TC_SET, "k", 1, "inv", 3, 0, 0, &o, NULL), TC_OK);
    assert_true(check_str(f->c, "k", "inv").cas > old);

    assert_int_equal(
        tc_store(f->c, TC_SET, "s", 1, big, sizeof(big), 0, 0, 0, &old), TC_OK);
    assert_int_equal(tc_delete(f->c, "s", 1, 0), TC_OK);
    recreate_above(f->c, "s", old);
    STAT_EQ(pstats(f->c), packed_cas_lifted, 2);
    /* a key never removed keeps its derived CAS */
    puts_(f->c, "fresh", "v");
    STAT_EQ(pstats(f->c), packed_cas_lifted, 2);
    check_ok(f->c);
}

/* Expiry: the version lives in a TTL bucket's segment (opened after this
 * thread's bucket-0 one), expires, and a reader unlinks it. */
static void
test_floor_expiry(void **state)
{
    struct fx *f = *state;
    uint64_t old = 0;

    puts_(f->c, "open", "this thread's segment: the oldest block");
    assert_int_equal(store_s(f->c, TC_SET, "k", "ttl", 0, 100, 0, &old), TC_OK);
    assert_true(pstats(f->c).packed_segments == 2); /* a bucket's own */
    assert_int_equal(pstats(f->c).curr_items, 2);
    tc_clock_advance(101);
    check_miss(f->c, "k"); /* met dead: unlinked */
    assert_int_equal(pstats(f->c).curr_items, 1);
    recreate_above(f->c, "k", old);
    STAT_EQ(pstats(f->c), packed_cas_lifted, 1);
    check_ok(f->c);
}

/* flush_all: the watermark is the counter at the flush, and no packed
 * item is stored at or below it (this thread's segment is sealed). */
static void
test_floor_flush(void **state)
{
    struct fx *f = *state;
    puts_(f->c, "open", "this thread's segment: the oldest block");
    uint64_t old = set_elsewhere(f->c, "k");
    assert_int_equal(tc_flush_all(f->c, 0), TC_OK);
    recreate_above(f->c, "k", old);
    check_ok(f->c);
}

/* Slab eviction: a slab version (the counter's CAS) evicted by large
 * stores, which leave this thread's packed segment open. */
static void
test_floor_slab_evict(void **state)
{
    struct fx *f = *state;
    char big[2000], k[24];
    uint64_t old = 0;
    memset(big, 'e', sizeof(big));

    puts_(f->c, "open", "this thread's segment: the oldest block");
    assert_int_equal(
        tc_store(f->c, TC_SET, "k", 1, big, sizeof(big), 0, 0, 0, &old), TC_OK);
    /* the pool some twice over (a read of k would keep it: CLOCK) */
    for (unsigned i = 0; i < 40000; i++) {
        snprintf(k, sizeof(k), "big%06u", i);
        put(f->c, k, big, sizeof(big), 0, 0);
    }
    assert_true(pstats(f->c).evictions > 0);
    recreate_above(f->c, "k", old);
    check_ok(f->c);
}

struct filler {
    struct tc_cache *c;
    unsigned n;
};

static void *
filler_run(void *arg)
{
    struct filler *fl = arg;
    char k[24], v[100];
    memset(v, 'f', sizeof(v));
    for (unsigned i = 0; i < fl->n; i++) {
        snprintf(k, sizeof(k), "fill%08u", i);
        put(fl->c, k, v, sizeof(v), 0, 0);
    }
    return NULL;
}

/* Packed eviction: the version's sealed segment is evicted by another
 * thread's small stores; this thread's segment, open, is not. FIFO: a
 * merge would compact the version's nearly empty segment (its one item
 * copied, not dropped). */
static void
test_floor_segment_evict(void **state)
{
    struct fx *f = *state;
    f->cfg.packed_evict = TC_PACKED_EVICT_FIFO;
    fx_reopen(f);
    puts_(f->c, "open", "this thread's segment: the oldest block");
    uint64_t old = set_elsewhere(f->c, "k");
    pthread_t th;
    struct filler fl = {f->c, 38u * 8455 * 2}; /* the pages twice over */
    assert_int_equal(pthread_create(&th, NULL, filler_run, &fl), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(pstats(f->c).packed_segments_evicted > 0);
    recreate_above(f->c, "k", old);
    check_ok(f->c);
}

/* set_elsewhere's, then others that fill most of its segment, so that
 * a merge takes it rather than compacting it */
static void *
other_fill_run(void *arg)
{
    struct other_set *o = arg;
    char k[24], v[100];
    memset(v, 'o', sizeof(v));
    other_set_run(o);
    for (unsigned i = 0; i < 6000; i++) {
        snprintf(k, sizeof(k), "other%05u", i);
        put(o->c, k, v, sizeof(v), 0, 0);
    }
    return NULL;
}

/* Packed eviction by merge: the version, unread, is dropped with its
 * mostly live segment. */
static void
test_floor_merge_drop(void **state)
{
    struct fx *f = *state;
    puts_(f->c, "open", "this thread's segment: the oldest block");
    pthread_t th;
    struct other_set o = {f->c, "k", 0};
    assert_int_equal(pthread_create(&th, NULL, other_fill_run, &o), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    struct filler fl = {f->c, 38u * 8455 * 2}; /* the pages twice over */
    assert_int_equal(pthread_create(&th, NULL, filler_run, &fl), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(pstats(f->c).packed_segments_evicted > 0);
    recreate_above(f->c, "k", o.cas);
    check_ok(f->c);
}

struct racer {
    struct tc_cache *c;
    unsigned id;
    unsigned bad; /* a store whose CAS was not above this thread's last */
};

static void *
racer_run(void *arg)
{
    struct racer *r = arg;
    uint64_t last = 0;
    /* each thread's own segment: blocks taken at different times; one
     * key set and deleted by both, each store published after the last
     * one this thread saw published */
    for (unsigned i = 0; i < 3000; i++) {
        uint64_t cas = 0;
        if (store_s(r->c, TC_SET, "race", r->id ? "b" : "a", 0, 0, 0, &cas) !=
            TC_OK)
            continue;
        if (cas <= last)
            r->bad++;
        last = cas;
        if (i % 2 == r->id)
            (void)tc_delete(r->c, "race", 4, 0);
    }
    return NULL;
}

/* A delete and a set of one key racing on two threads: the bucket lock
 * orders them, so the set sees the old version or the raised floor, and
 * the CAS each thread gets only grows (bounded: 3,000 stores each). */
static void
test_floor_race(void **state)
{
    struct fx *f = *state;
    pthread_t th[2];
    struct racer r[2] = {{f->c, 0, 0}, {f->c, 1, 0}};
    for (unsigned i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, racer_run, &r[i]), 0);
    for (unsigned i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(r[0].bad, 0);
    assert_int_equal(r[1].bad, 0);
    check_ok(f->c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        FTEST(test_floor_delete),        FTEST(test_floor_expiry),
        FTEST(test_floor_flush),         FTEST(test_floor_slab_evict),
        FTEST(test_floor_segment_evict), FTEST(test_floor_merge_drop),
        FTEST(test_floor_race),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

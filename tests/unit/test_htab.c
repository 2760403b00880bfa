/*
 * Unit tests for src/engine/htab.c, against a fake item store: an array of
 * items indexed by location, each holding its key. match() compares keys, so a
 * tag collision is resolved exactly as the engine resolves it.
 *
 * Seeded randomness: HTAB_TEST_SEED=<n> replays a run; the seed is printed
 * when a randomized test fails.
 */
#include "src/engine/htab.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

/* A fake item: key and payload are written once, before the location is
 * published in the index, and never again. */
struct fake_item {
    uint64_t key;
    uint64_t payload;
};

struct fake_store {
    struct fake_item *items; /* items[0] unused: location 0 means none */
    uint64_t nitems;
    uint64_t next; /* next unused location */
    unsigned long match_calls;
};

struct fixture {
    struct htab *h;
    struct fake_store st;
};

struct probe {
    struct fake_store *st;
    uint64_t key;
};

static uint64_t test_seed = 0x5eed1234abcdull;

static uint64_t
mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t
rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t
key_hash(uint64_t key)
{
    return mix64(key);
}

/* A hash with the given tag and bucket index bits. */
static uint64_t
craft_hash(uint16_t tag, uint64_t bucket)
{
    return (uint64_t)tag << 48 | bucket;
}

static bool
fake_match(void *arg, uint64_t loc)
{
    struct probe *p = arg;

    p->st->match_calls++;
    return loc < p->st->nitems && p->st->items[loc].key == p->key;
}

/* A fresh location holding key. */
static uint64_t
fake_put(struct fake_store *st, uint64_t key)
{
    uint64_t loc = st->next++;

    assert_true(loc < st->nitems);
    st->items[loc].key = key;
    st->items[loc].payload = ~key;
    return loc;
}

static void
store_init(struct fake_store *st, uint64_t nitems)
{
    st->items = calloc(nitems, sizeof(*st->items));
    assert_non_null(st->items);
    st->nitems = nitems;
    st->next = 1;
    st->match_calls = 0;
}

static int
setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    f->st.items = calloc(1 << 16, sizeof(*f->st.items));
    if (f->st.items == NULL) {
        free(f);
        return -1;
    }
    f->st.nitems = 1 << 16;
    f->st.next = 1;
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fixture *f = *state;

    htab_destroy(f->h);
    free(f->st.items);
    free(f);
    return 0;
}

static uint64_t
lookup(struct htab *h, struct fake_store *st, uint64_t hash, uint64_t key)
{
    struct probe p = {st, key};
    unsigned long before = st->match_calls;
    uint64_t loc = htab_lookup_rcu(h, hash, fake_match, &p);
    unsigned long calls = st->match_calls - before;

    /* the inline scan (the single get's) finds the same, with the same
     * compares (the count tests see those of one lookup) */
    st->match_calls = 0;
    assert_int_equal(htab_lookup_rcu_inline(h, hash, fake_match, &p), loc);
    assert_int_equal(st->match_calls, calls);
    st->match_calls = before + calls;
    return loc;
}

static int
insert(struct htab *h, uint64_t hash, uint64_t loc)
{
    struct htab_bucket *b = htab_lock(h, hash);
    int rc = htab_insert_locked(h, b, hash, loc);

    htab_unlock(b);
    return rc;
}

/* Remove key's entry; true if there was one. */
static bool
remove_key(struct htab *h, struct fake_store *st, uint64_t hash, uint64_t key)
{
    struct probe p = {st, key};
    struct htab_bucket *b = htab_lock(h, hash);
    _Atomic uint64_t *slot = htab_find_locked(b, hash, fake_match, &p);

    if (slot != NULL)
        htab_remove_locked(slot);
    htab_unlock(b);
    return slot != NULL;
}

static void
test_sizing(void **state)
{
    struct fixture *f = *state;
    struct htab *h;

    assert_int_equal(htab_create(0, &f->h), 0);
    assert_int_equal(htab_nbuckets(f->h), 64);
    assert_int_equal(htab_noverflow(f->h), 0);
    assert_true(htab_dram_bytes(f->h) >= 64 * sizeof(struct htab_bucket));
    assert_true(htab_dram_bytes(f->h) <=
                64 * sizeof(struct htab_bucket) + 4096);

    /* 1M items at 4.2 a bucket: 238096 -> 262144 buckets (mmap path). */
    assert_int_equal(htab_create(1000000, &h), 0);
    assert_int_equal(htab_nbuckets(h), 262144);
    assert_true(htab_dram_bytes(h) >= 262144ull * 64);
    assert_true(htab_dram_bytes(h) <= 262144ull * 64 + 4096);
    /* the mmap'd table is zeroed and works */
    for (uint64_t k = 0; k < 1000; k++)
        assert_int_equal(insert(h, key_hash(k), fake_put(&f->st, k)), 0);
    for (uint64_t k = 0; k < 1000; k++)
        assert_int_equal(lookup(h, &f->st, key_hash(k), k), k + 1);
    assert_int_equal(lookup(h, &f->st, key_hash(5000), 5000), 0);
    htab_destroy(h);

    /* exactly at a power of two boundary: 64 * 4.2 = 268.8 */
    assert_int_equal(htab_create(268, &h), 0);
    assert_int_equal(htab_nbuckets(h), 64);
    htab_destroy(h);
    assert_int_equal(htab_create(269, &h), 0);
    assert_int_equal(htab_nbuckets(h), 128);
    htab_destroy(h);

    h = NULL;
    assert_int_equal(htab_create(UINT64_MAX, &h), -EINVAL);
    assert_null(h);
    htab_destroy(NULL);
}

static void
test_insert_lookup_replace_remove(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    uint64_t locs[200];

    assert_int_equal(htab_create(1000, &f->h), 0);
    for (uint64_t k = 0; k < 200; k++) {
        locs[k] = fake_put(st, k);
        assert_int_equal(insert(f->h, key_hash(k), locs[k]), 0);
    }
    for (uint64_t k = 0; k < 200; k++)
        assert_int_equal(lookup(f->h, st, key_hash(k), k), locs[k]);
    for (uint64_t k = 200; k < 400; k++)
        assert_int_equal(lookup(f->h, st, key_hash(k), k), 0);

    /* replace key 7 with a new location holding the same key */
    {
        struct probe p = {st, 7};
        uint64_t nloc = fake_put(st, 7);
        struct htab_bucket *b = htab_lock(f->h, key_hash(7));
        _Atomic uint64_t *slot =
            htab_find_locked(b, key_hash(7), fake_match, &p);

        assert_non_null(slot);
        assert_int_equal(
            htab_slot_loc(atomic_load_explicit(slot, memory_order_relaxed)),
            locs[7]);
        assert_ptr_equal(htab_find_loc_locked(b, locs[7]), slot);
        htab_replace_locked(slot, key_hash(7), nloc);
        assert_int_equal(
            htab_slot_loc(atomic_load_explicit(slot, memory_order_relaxed)),
            nloc);
        assert_ptr_equal(htab_find_loc_locked(b, nloc), slot);
        assert_null(htab_find_loc_locked(b, locs[7]));
        htab_unlock(b);
        assert_int_equal(lookup(f->h, st, key_hash(7), 7), nloc);
        locs[7] = nloc;
    }

    /* remove every odd key */
    for (uint64_t k = 1; k < 200; k += 2)
        assert_true(remove_key(f->h, st, key_hash(k), k));
    for (uint64_t k = 1; k < 200; k += 2)
        assert_false(remove_key(f->h, st, key_hash(k), k));
    for (uint64_t k = 0; k < 200; k++)
        assert_int_equal(lookup(f->h, st, key_hash(k), k), k % 2 ? 0 : locs[k]);
}

static void
test_overflow_chains(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t n = 5000; /* ~78 a bucket: chains of ~13 */
    uint64_t noverflow, dram;

    assert_int_equal(htab_create(1, &f->h), 0);
    assert_int_equal(htab_nbuckets(f->h), 64);
    dram = htab_dram_bytes(f->h);
    for (uint64_t k = 0; k < n; k++)
        assert_int_equal(insert(f->h, key_hash(k), fake_put(st, k)), 0);
    noverflow = htab_noverflow(f->h);
    assert_true(htab_dram_bytes(f->h) >= dram + (noverflow - 64) * 64);
    /* at least ceil(5000 / 6) buckets in all */
    assert_true(64 + noverflow >= (n + HTAB_SLOTS - 1) / HTAB_SLOTS);
    assert_true(htab_dram_bytes(f->h) >=
                (64 + noverflow) * sizeof(struct htab_bucket));
    for (uint64_t k = 0; k < n; k++)
        assert_int_equal(lookup(f->h, st, key_hash(k), k), k + 1);
    for (uint64_t k = n; k < 2 * n; k++)
        assert_int_equal(lookup(f->h, st, key_hash(k), k), 0);

    /* empty it, then refill: freed slots are reused, no new buckets */
    for (uint64_t k = 0; k < n; k++)
        assert_true(remove_key(f->h, st, key_hash(k), k));
    for (uint64_t k = 0; k < n; k++)
        assert_int_equal(lookup(f->h, st, key_hash(k), k), 0);
    for (uint64_t k = 0; k < n; k++)
        assert_int_equal(insert(f->h, key_hash(k), fake_put(st, k)), 0);
    assert_int_equal(htab_noverflow(f->h), noverflow);
    for (uint64_t k = 0; k < n; k++)
        assert_int_equal(lookup(f->h, st, key_hash(k), k), n + k + 1);
}

static void
test_colliding_tags(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    /* 20 keys, all with the same bucket and the same tag: 4 buckets */
    const uint64_t hash = craft_hash(0xbeef, 5);
    uint64_t locs[20];

    assert_int_equal(htab_create(100, &f->h), 0);
    for (uint64_t k = 0; k < 20; k++) {
        locs[k] = fake_put(st, 1000 + k);
        assert_int_equal(insert(f->h, hash, locs[k]), 0);
    }
    assert_int_equal(htab_noverflow(f->h), 3);
    for (uint64_t k = 0; k < 20; k++) {
        st->match_calls = 0;
        assert_int_equal(lookup(f->h, st, hash, 1000 + k), locs[k]);
        assert_int_equal(st->match_calls, k + 1);
    }
    /* same tag and bucket, absent key: every entry is compared, none hit */
    st->match_calls = 0;
    assert_int_equal(lookup(f->h, st, hash, 999), 0);
    assert_int_equal(st->match_calls, 20);

    /* tag 0 is stored as tag 1: a hash with top bits 0 and one with top
     * bits 1 collide, and match() tells them apart */
    {
        uint64_t h0 = craft_hash(0, 9), h1 = craft_hash(1, 9);
        uint64_t l0 = fake_put(st, 2000), l1 = fake_put(st, 2001);

        assert_int_equal(htab_tag(h0), htab_tag(h1));
        assert_int_equal(insert(f->h, h0, l0), 0);
        assert_int_equal(insert(f->h, h1, l1), 0);
        assert_int_equal(lookup(f->h, st, h0, 2000), l0);
        assert_int_equal(lookup(f->h, st, h1, 2001), l1);
        assert_int_equal(lookup(f->h, st, h0, 2001), l1);
    }

    /* a different tag in the same bucket is never handed to match() */
    st->match_calls = 0;
    assert_int_equal(lookup(f->h, st, craft_hash(0xbeee, 5), 1000), 0);
    assert_int_equal(st->match_calls, 0);

    /* remove in the middle of the chain; the slot is the first free one
     * and the next insert into this bucket takes it */
    {
        struct htab_bucket *b = htab_lock(f->h, hash);
        _Atomic uint64_t *slot = htab_find_loc_locked(b, locs[8]);
        uint64_t nloc;

        assert_non_null(slot);
        htab_remove_locked(slot);
        htab_unlock(b);
        assert_int_equal(lookup(f->h, st, hash, 1008), 0);
        for (uint64_t k = 0; k < 20; k++)
            if (k != 8)
                assert_int_equal(lookup(f->h, st, hash, 1000 + k), locs[k]);

        nloc = fake_put(st, 3000);
        b = htab_lock(f->h, craft_hash(0x1234, 5)); /* same bucket */
        assert_int_equal(
            htab_insert_locked(f->h, b, craft_hash(0x1234, 5), nloc), 0);
        assert_ptr_equal(htab_find_loc_locked(b, nloc), slot);
        htab_unlock(b);
        assert_int_equal(htab_noverflow(f->h), 3);
        assert_int_equal(lookup(f->h, st, craft_hash(0x1234, 5), 3000), nloc);
    }
}

static void
test_find_loc_locked(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t hash = craft_hash(0x77, 3);
    struct htab_bucket *b;
    uint64_t locs[10];

    assert_int_equal(htab_create(0, &f->h), 0);
    for (int i = 0; i < 10; i++) {
        locs[i] = fake_put(st, (uint64_t)i);
        assert_int_equal(insert(f->h, hash, locs[i]), 0);
    }
    /* a location in another bucket's chain is not found from this one */
    assert_int_equal(insert(f->h, craft_hash(0x77, 4), 500), 0);

    b = htab_lock(f->h, hash);
    for (int i = 0; i < 10; i++) {
        _Atomic uint64_t *slot = htab_find_loc_locked(b, locs[i]);

        assert_non_null(slot);
        assert_int_equal(
            htab_slot_loc(atomic_load_explicit(slot, memory_order_relaxed)),
            locs[i]);
        assert_int_equal(atomic_load_explicit(slot, memory_order_relaxed) >>
                             HTAB_LOC_BITS,
                         0x77);
    }
    assert_null(htab_find_loc_locked(b, 500));
    assert_null(htab_find_loc_locked(b, 0));
    assert_null(htab_find_loc_locked(b, HTAB_LOC_MASK));
    htab_remove_locked(htab_find_loc_locked(b, locs[9])); /* overflow */
    assert_null(htab_find_loc_locked(b, locs[9]));
    htab_unlock(b);

    /* the largest location fits */
    assert_int_equal(insert(f->h, hash, HTAB_LOC_MASK), 0);
    b = htab_lock(f->h, hash);
    assert_non_null(htab_find_loc_locked(b, HTAB_LOC_MASK));
    htab_unlock(b);
}

/* htab_holds_rcu: the exact entry (tag and location) in the hash's chain,
 * overflow buckets included, without calling match. */
static void
test_holds_rcu(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t hash = craft_hash(0x77, 3);
    uint64_t locs[10];

    assert_int_equal(htab_create(0, &f->h), 0);
    for (int i = 0; i < 10; i++) {
        locs[i] = fake_put(st, (uint64_t)i);
        assert_int_equal(insert(f->h, hash, locs[i]), 0);
    }
    assert_int_equal(insert(f->h, craft_hash(0x77, 4), 500), 0);
    unsigned long calls = st->match_calls;
    for (int i = 0; i < 10; i++)
        assert_true(htab_holds_rcu(f->h, hash, locs[i]));
    /* another bucket's entry, another tag, an unknown location */
    assert_false(htab_holds_rcu(f->h, hash, 500));
    assert_true(htab_holds_rcu(f->h, craft_hash(0x77, 4), 500));
    assert_false(htab_holds_rcu(f->h, craft_hash(0x78, 3), locs[0]));
    assert_false(htab_holds_rcu(f->h, hash, 777));
    assert_int_equal(st->match_calls, calls);
    /* gone once removed (the last one sits in the overflow bucket) */
    struct htab_bucket *b = htab_lock(f->h, hash);
    htab_remove_locked(htab_find_loc_locked(b, locs[9]));
    htab_unlock(b);
    assert_false(htab_holds_rcu(f->h, hash, locs[9]));
    assert_true(htab_holds_rcu(f->h, hash, locs[8]));
}

/* find_hinted: with the peek's hint, the slot of the key, as
 * htab_find_locked finds it, whatever changed since the peek. */
static _Atomic uint64_t *
find_hinted(struct htab *h, struct fake_store *st, uint64_t hash, uint64_t key,
            const struct htab_hint *hint)
{
    struct probe p = {st, key};
    struct htab_bucket *b = htab_lock(h, hash);
    _Atomic uint64_t *slot =
        htab_find_hinted_locked(b, hash, fake_match, &p, hint);
    htab_unlock(b);
    return slot;
}

static void
test_find_hinted(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    /* keys 0..9 share bucket and tag: the first six fill the home bucket */
    const uint64_t hash = craft_hash(0xbeef, 5);
    struct htab_hint hint;
    uint64_t locs[10];

    assert_int_equal(htab_create(100, &f->h), 0);
    assert_int_equal(htab_peek_hint(f->h, hash, &hint), 0);
    for (uint64_t k = 0; k < 10; k++) {
        locs[k] = fake_put(st, k);
        assert_int_equal(insert(f->h, hash, locs[k]), 0);
    }
    /* a hint taken before the inserts (no tag match) still finds them */
    assert_non_null(find_hinted(f->h, st, hash, 3, &hint));
    assert_null(find_hinted(f->h, st, hash, 77, &hint));

    assert_int_equal(htab_peek_hint(f->h, hash, &hint), HTAB_SLOTS);
    assert_int_equal(htab_slot_loc(hint.word[0]), locs[0]);
    /* the first hinted slot is the key's: found with one match call */
    st->match_calls = 0;
    _Atomic uint64_t *slot = find_hinted(f->h, st, hash, 0, &hint);
    assert_non_null(slot);
    assert_int_equal(htab_slot_loc(atomic_load(slot)), locs[0]);
    assert_int_equal(st->match_calls, 1);
    /* another key behind the same tag, in the home bucket or the chain */
    for (uint64_t k = 1; k < 10; k++) {
        slot = find_hinted(f->h, st, hash, k, &hint);
        assert_non_null(slot);
        assert_int_equal(htab_slot_loc(atomic_load(slot)), locs[k]);
    }
    /* the hinted slot replaced since the peek: found by the scan */
    uint64_t nloc = fake_put(st, 0);
    struct htab_bucket *b = htab_lock(f->h, hash);
    htab_replace_locked(htab_find_loc_locked(b, locs[0]), hash, nloc);
    htab_unlock(b);
    slot = find_hinted(f->h, st, hash, 0, &hint);
    assert_non_null(slot);
    assert_int_equal(htab_slot_loc(atomic_load(slot)), nloc);
    /* removed since the peek: gone */
    assert_true(remove_key(f->h, st, hash, 0));
    assert_null(find_hinted(f->h, st, hash, 0, &hint));
    /* a hint of another bucket is not trusted */
    struct htab_hint other;
    assert_int_equal(insert(f->h, craft_hash(0xbeef, 6), fake_put(st, 50)), 0);
    assert_int_equal(htab_peek_hint(f->h, craft_hash(0xbeef, 6), &other), 1);
    assert_non_null(find_hinted(f->h, st, hash, 4, &other));
    assert_null(find_hinted(f->h, st, hash, 50, &other));
}

struct visit {
    uint8_t *seen;
    uint64_t nseen;
    uint64_t limit; /* stop with 7 after this many, 0: never */
    uint64_t bad;
};

static int
visit_fn(void *arg, uint64_t loc)
{
    struct visit *v = arg;

    if (v->seen[loc]++ != 0)
        v->bad++;
    v->nseen++;
    if (v->limit != 0 && v->nseen == v->limit)
        return 7;
    return 0;
}

static void
test_foreach(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t nkeys = 3000;
    uint64_t *live = calloc(nkeys, sizeof(*live)); /* key -> loc or 0 */
    uint8_t *seen = calloc(st->nitems, 1);
    uint64_t s = test_seed, nlive = 0;
    struct visit v;

    assert_non_null(live);
    assert_non_null(seen);
    assert_int_equal(htab_create(500, &f->h), 0); /* overfull: chains */

    v = (struct visit){seen, 0, 0, 0};
    assert_int_equal(htab_foreach(f->h, visit_fn, &v), 0);
    assert_int_equal(v.nseen, 0);

    for (int i = 0; i < 20000; i++) {
        uint64_t k = rng_next(&s) % nkeys;

        if (live[k] != 0) {
            if (!remove_key(f->h, st, key_hash(k), k))
                fail_msg("seed %llu: key %llu lost",
                         (unsigned long long)test_seed, (unsigned long long)k);
            live[k] = 0;
            nlive--;
        } else if (st->next < st->nitems) {
            live[k] = fake_put(st, k);
            assert_int_equal(insert(f->h, key_hash(k), live[k]), 0);
            nlive++;
        }
    }
    assert_true(nlive > 0);

    v = (struct visit){seen, 0, 0, 0};
    assert_int_equal(htab_foreach(f->h, visit_fn, &v), 0);
    if (v.nseen != nlive || v.bad != 0)
        fail_msg("seed %llu: visited %llu (%llu twice), live %llu",
                 (unsigned long long)test_seed, (unsigned long long)v.nseen,
                 (unsigned long long)v.bad, (unsigned long long)nlive);
    for (uint64_t k = 0; k < nkeys; k++)
        if (live[k] != 0 && seen[live[k]] != 1)
            fail_msg("seed %llu: key %llu at %llu not visited",
                     (unsigned long long)test_seed, (unsigned long long)k,
                     (unsigned long long)live[k]);

    /* early stop returns fn's value */
    memset(seen, 0, st->nitems);
    v = (struct visit){seen, 0, 3, 0};
    assert_int_equal(htab_foreach(f->h, visit_fn, &v), 7);
    assert_int_equal(v.nseen, 3);

    free(live);
    free(seen);
}

/*
 * One writer inserting, replacing and removing under the bucket lock; one
 * lock-free reader. Each location is written once (key, payload) before it
 * is published, never rewritten, so the reader's plain reads of the item are
 * race-free exactly when the index's release/acquire pairing is right (TSan
 * checks that). Keys below NSTABLE are only ever replaced, never removed: a
 * reader must always find them.
 */
#define CC_NKEYS 256
#define CC_NSTABLE 16
#define CC_NBUCKETS_USED 8
#define CC_WRITER_OPS 500000
#define CC_READER_OPS 5000000
#define CC_SECONDS 10

struct cc_state {
    struct htab *h;
    struct fake_store st;
    uint64_t seed;
    _Atomic int writer_done;
    /* reader results, read after join */
    uint64_t reads, hits, bad_loc, bad_payload, stable_miss;
    uint64_t first_bad_key, first_bad_loc;
    uint64_t writer_ops;
    int writer_err;
};

/* Keys crowd into a few buckets so that chains grow while reading. */
static uint64_t
cc_hash(uint64_t key)
{
    return (mix64(key) & ~(uint64_t)63) | (key % CC_NBUCKETS_USED);
}

static double
now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *
cc_writer(void *arg)
{
    struct cc_state *cs = arg;
    uint64_t s = cs->seed;
    double deadline = now_sec() + CC_SECONDS;
    uint64_t i;

    for (i = 0; i < CC_WRITER_OPS; i++) {
        uint64_t k = rng_next(&s) % CC_NKEYS;
        uint64_t hash = cc_hash(k);
        struct probe p = {&cs->st, k};
        struct htab_bucket *b;
        _Atomic uint64_t *slot;
        uint64_t loc;

        if (cs->st.next >= cs->st.nitems)
            break;
        if ((i & 1023) == 0 && now_sec() > deadline)
            break;
        /* the item is complete before it is published */
        loc = cs->st.next++;
        cs->st.items[loc].key = k;
        cs->st.items[loc].payload = mix64(loc) ^ k;

        b = htab_lock(cs->h, hash);
        slot = htab_find_locked(b, hash, fake_match, &p);
        if (slot == NULL) {
            if (htab_insert_locked(cs->h, b, hash, loc) != 0)
                cs->writer_err = 1;
        } else if (k < CC_NSTABLE || rng_next(&s) % 2) {
            htab_replace_locked(slot, hash, loc);
        } else {
            htab_remove_locked(slot);
        }
        htab_unlock(b);
    }
    cs->writer_ops = i;
    /* Release: pairs with the reader's acquire load; orders nothing the
     * reader needs (it joins us anyway) but keeps TSan's view simple. */
    atomic_store_explicit(&cs->writer_done, 1, memory_order_release);
    return NULL;
}

/* match() for the reader: reads the item with plain loads. */
static bool
cc_match(void *arg, uint64_t loc)
{
    struct probe *p = arg;

    return p->st->items[loc].key == p->key;
}

static void *
cc_reader(void *arg)
{
    struct cc_state *cs = arg;
    uint64_t s = cs->seed ^ 0xabcdef;
    uint64_t i;

    for (i = 0; i < CC_READER_OPS; i++) {
        uint64_t k = rng_next(&s) % CC_NKEYS;
        struct probe p = {&cs->st, k};
        uint64_t loc;

        /* Acquire: pairs with the writer's release store of writer_done. */
        if (atomic_load_explicit(&cs->writer_done, memory_order_acquire))
            break;
        loc = htab_lookup_rcu(cs->h, cc_hash(k), cc_match, &p);
        if (loc == 0) {
            if (k < CC_NSTABLE)
                cs->stable_miss++;
            continue;
        }
        cs->hits++;
        if (loc >= cs->st.nitems || cs->st.items[loc].key != k) {
            if (cs->bad_loc++ == 0) {
                cs->first_bad_key = k;
                cs->first_bad_loc = loc;
            }
        } else if (cs->st.items[loc].payload != (mix64(loc) ^ k)) {
            cs->bad_payload++;
        }
    }
    cs->reads = i;
    return NULL;
}

static void
test_concurrent_reader_writer(void **state)
{
    struct fixture *f = *state;
    struct cc_state *cs = calloc(1, sizeof(*cs));
    pthread_t w, r;

    assert_non_null(cs);
    cs->seed = test_seed;
    store_init(&cs->st, CC_WRITER_OPS + CC_NSTABLE + 2);
    assert_int_equal(htab_create(0, &cs->h), 0);
    for (uint64_t k = 0; k < CC_NSTABLE; k++) {
        uint64_t loc = cs->st.next++;

        cs->st.items[loc].key = k;
        cs->st.items[loc].payload = mix64(loc) ^ k;
        assert_int_equal(insert(cs->h, cc_hash(k), loc), 0);
    }
    atomic_init(&cs->writer_done, 0);

    assert_int_equal(pthread_create(&r, NULL, cc_reader, cs), 0);
    assert_int_equal(pthread_create(&w, NULL, cc_writer, cs), 0);
    assert_int_equal(pthread_join(w, NULL), 0);
    assert_int_equal(pthread_join(r, NULL), 0);

    print_message("concurrent: seed %llu, %llu writes, %llu reads, "
                  "%llu hits, %llu overflow buckets\n",
                  (unsigned long long)test_seed,
                  (unsigned long long)cs->writer_ops,
                  (unsigned long long)cs->reads, (unsigned long long)cs->hits,
                  (unsigned long long)htab_noverflow(cs->h));
    if (cs->writer_err || cs->bad_loc || cs->bad_payload || cs->stable_miss)
        fail_msg("seed %llu: writer_err %d, bad loc %llu (first key %llu "
                 "loc %llu), bad payload %llu, stable misses %llu",
                 (unsigned long long)test_seed, cs->writer_err,
                 (unsigned long long)cs->bad_loc,
                 (unsigned long long)cs->first_bad_key,
                 (unsigned long long)cs->first_bad_loc,
                 (unsigned long long)cs->bad_payload,
                 (unsigned long long)cs->stable_miss);
    assert_true(htab_noverflow(cs->h) > 0);

    /* quiescent now: the index holds each key at most once */
    {
        uint8_t *seen = calloc(cs->st.nitems, 1);
        struct visit v = {seen, 0, 0, 0};
        uint64_t per_key[CC_NKEYS] = {0};

        assert_non_null(seen);
        assert_int_equal(htab_foreach(cs->h, visit_fn, &v), 0);
        assert_int_equal(v.bad, 0);
        for (uint64_t loc = 1; loc < cs->st.nitems; loc++)
            if (seen[loc] && per_key[cs->st.items[loc].key]++ != 0)
                fail_msg("seed %llu: key %llu indexed twice",
                         (unsigned long long)test_seed,
                         (unsigned long long)cs->st.items[loc].key);
        for (uint64_t k = 0; k < CC_NSTABLE; k++)
            assert_int_equal(per_key[k], 1);
        free(seen);
    }

    htab_destroy(cs->h);
    free(cs->st.items);
    free(cs);
    (void)f;
}

/* --- growth --- */

/* htab_rehash_fn over the fake store: the item's key, hashed again. */
static uint64_t
fake_rehash(void *arg, uint64_t loc)
{
    struct fake_store *st = arg;

    return key_hash(st->items[loc].key);
}

/* Every live key is found at its location, every other key is missed, and
 * a walk sees each live entry once. */
static void
check_all(struct htab *h, struct fake_store *st, const uint64_t *live,
          uint64_t nkeys, const char *when)
{
    uint8_t *seen = calloc(st->nitems, 1);
    struct visit v = {seen, 0, 0, 0};
    uint64_t nlive = 0;

    assert_non_null(seen);
    for (uint64_t k = 0; k < nkeys; k++) {
        uint64_t got = lookup(h, st, key_hash(k), k);

        if (got != live[k])
            fail_msg("seed %llu, %s: key %llu at %llu, want %llu",
                     (unsigned long long)test_seed, when, (unsigned long long)k,
                     (unsigned long long)got, (unsigned long long)live[k]);
        nlive += live[k] != 0;
    }
    assert_int_equal(htab_foreach(h, visit_fn, &v), 0);
    if (v.nseen != nlive || v.bad != 0)
        fail_msg("seed %llu, %s: walk saw %llu (%llu twice), live %llu",
                 (unsigned long long)test_seed, when,
                 (unsigned long long)v.nseen, (unsigned long long)v.bad,
                 (unsigned long long)nlive);
    for (uint64_t k = 0; k < nkeys; k++)
        if (live[k] != 0 && seen[live[k]] != 1)
            fail_msg("seed %llu, %s: key %llu not walked",
                     (unsigned long long)test_seed, when,
                     (unsigned long long)k);
    free(seen);
}

/* One random write: insert, replace or remove key k. */
static void
write_one(struct htab *h, struct fake_store *st, uint64_t *live, uint64_t k,
          uint64_t r)
{
    struct probe p = {st, k};
    uint64_t hash = key_hash(k);
    struct htab_bucket *b = htab_lock(h, hash);
    _Atomic uint64_t *slot = htab_find_locked(b, hash, fake_match, &p);

    if (slot == NULL) {
        live[k] = fake_put(st, k);
        assert_int_equal(htab_insert_locked(h, b, hash, live[k]), 0);
    } else if (r % 3 == 0) {
        htab_remove_locked(slot);
        live[k] = 0;
    } else {
        live[k] = fake_put(st, k);
        htab_replace_locked(slot, hash, live[k]);
    }
    htab_unlock(b);
}

/* A doubling driven one bucket at a time: after every step each key is
 * where it was written, writes between the steps land, and the table is
 * twice as big at the end; the old table goes with retired_take/free. */
static void
test_grow_stepwise(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t nkeys = 1500;
    uint64_t *live = calloc(nkeys, sizeof(*live));
    uint64_t s = test_seed, nb, steps = 0;
    char when[64];

    assert_non_null(live);
    assert_int_equal(htab_create(0, &f->h), 0); /* 64 buckets */
    nb = htab_nbuckets(f->h);
    assert_int_equal(htab_grow_start(f->h), -EINVAL); /* no rehash yet */
    htab_set_grow(f->h, fake_rehash, st, 0);
    for (uint64_t k = 0; k < 400; k++) {
        live[k] = fake_put(st, k);
        assert_int_equal(insert(f->h, key_hash(k), live[k]), 0);
    }
    assert_false(htab_growing(f->h));
    assert_int_equal(htab_grow_start(f->h), 0);
    assert_true(htab_growing(f->h));
    assert_int_equal(htab_grow_start(f->h), -EALREADY);
    /* lookups still start from the old table */
    assert_int_equal(htab_nbuckets(f->h), nb);
    check_all(f->h, st, live, nkeys, "started");
    while (htab_grow_step(f->h, 1) == 1) {
        steps++;
        for (int i = 0; i < 8; i++)
            write_one(f->h, st, live, rng_next(&s) % nkeys, rng_next(&s));
        snprintf(when, sizeof(when), "after step %llu",
                 (unsigned long long)steps);
        check_all(f->h, st, live, nkeys, when);
        assert_true(steps < nb);
    }
    assert_int_equal(steps, nb - 1); /* the last step ended the doubling */
    assert_false(htab_growing(f->h));
    assert_int_equal(htab_nbuckets(f->h), 2 * nb);
    assert_int_equal(htab_grows(f->h), 1);
    check_all(f->h, st, live, nkeys, "doubled");

    /* the old table is retired once: freed after "a grace period" */
    uint64_t before = htab_dram_bytes(f->h);
    struct htab_table *old = htab_retired_take(f->h);
    assert_non_null(old);
    assert_null(htab_retired_take(f->h));
    htab_retired_free(f->h, old);
    assert_true(htab_dram_bytes(f->h) < before);
    check_all(f->h, st, live, nkeys, "old table freed");
    free(live);
}

/* Inserts alone make the table double (overflow past its threshold), and
 * writers' help (htab_lock) moves it with no step from outside. */
static void
test_grow_by_writers(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t nkeys = 20000;
    uint64_t *live = calloc(nkeys, sizeof(*live));

    assert_non_null(live);
    assert_int_equal(htab_create(0, &f->h), 0);
    htab_set_grow(f->h, fake_rehash, st, 4);
    for (uint64_t k = 0; k < nkeys; k++) {
        live[k] = fake_put(st, k);
        assert_int_equal(insert(f->h, key_hash(k), live[k]), 0);
    }
    /* 20000 keys at ~68% of 6 slots: at least 4096 buckets, from 64 */
    print_message("by writers: %llu buckets after %llu doublings, %s\n",
                  (unsigned long long)htab_nbuckets(f->h),
                  (unsigned long long)htab_grows(f->h),
                  htab_growing(f->h) ? "growing" : "idle");
    assert_true(htab_grows(f->h) >= 5);
    check_all(f->h, st, live, nkeys, "grown by writers");
    htab_grow_finish(f->h);
    assert_false(htab_growing(f->h));
    assert_true(htab_nbuckets(f->h) >= 4096);
    /* not much overflow left after the doublings */
    assert_true(htab_noverflow(f->h) <= htab_nbuckets(f->h) / 4);
    check_all(f->h, st, live, nkeys, "finished");
    htab_retired_free(f->h, htab_retired_take(f->h));
    check_all(f->h, st, live, nkeys, "freed");
    free(live);
}

/* Churn at a steady half-full table piles up overflow buckets (chains are
 * never unlinked) but is no reason to double; filling it past 70% is. */
static void
test_grow_not_on_churn(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t nkeys = 4096;
    uint64_t *live = calloc(nkeys, sizeof(*live));
    uint64_t s = test_seed, nlive = 0, peak_overflow = 0;

    assert_non_null(live);
    assert_int_equal(htab_create(0, &f->h), 0); /* 64 buckets, 384 slots */
    htab_set_grow(f->h, fake_rehash, st, 1);
    while (nlive < 192) { /* half full */
        uint64_t k = rng_next(&s) % nkeys;
        if (live[k] == 0) {
            live[k] = fake_put(st, k);
            assert_int_equal(insert(f->h, key_hash(k), live[k]), 0);
            nlive++;
        }
    }
    /* one out, one in, until the store's locations run out */
    while (st->next + 1 < st->nitems) {
        uint64_t k = rng_next(&s) % nkeys;
        if (live[k] == 0)
            continue;
        assert_true(remove_key(f->h, st, key_hash(k), k));
        live[k] = 0;
        do
            k = rng_next(&s) % nkeys;
        while (live[k] != 0);
        live[k] = fake_put(st, k);
        assert_int_equal(insert(f->h, key_hash(k), live[k]), 0);
        if (htab_noverflow(f->h) > peak_overflow)
            peak_overflow = htab_noverflow(f->h);
    }
    print_message("churn: %llu overflow buckets on 64, %llu doublings\n",
                  (unsigned long long)peak_overflow,
                  (unsigned long long)htab_grows(f->h));
    assert_true(peak_overflow > 64 / 8); /* the fill was looked at */
    assert_int_equal(htab_grows(f->h), 0);
    assert_int_equal(htab_nbuckets(f->h), 64);
    check_all(f->h, st, live, nkeys, "after churn");
    free(live);
}

/* A writer holds an old bucket while the mover wants it: the mover waits
 * for the lock, and what the writer put there moves with the rest. */
struct hold_mover {
    struct htab *h;
    int rc;
};

static void *
hold_mover_run(void *arg)
{
    struct hold_mover *m = arg;

    m->rc = htab_grow_step(m->h, UINT64_MAX);
    return NULL;
}

static void
test_grow_writer_holds_bucket(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t nkeys = 300;
    uint64_t live[300] = {0};
    struct hold_mover m;
    pthread_t th;
    uint64_t k0 = 0, hash;

    assert_int_equal(htab_create(0, &f->h), 0);
    htab_set_grow(f->h, fake_rehash, st, 0);
    for (uint64_t k = 1; k < nkeys; k++) {
        live[k] = fake_put(st, k);
        assert_int_equal(insert(f->h, key_hash(k), live[k]), 0);
    }
    assert_int_equal(htab_grow_start(f->h), 0);
    hash = key_hash(k0);
    struct htab_bucket *b = htab_lock(f->h, hash); /* old, not moved */
    m = (struct hold_mover){f->h, -1};
    assert_int_equal(pthread_create(&th, NULL, hold_mover_run, &m), 0);
    /* the mover may or may not have reached our bucket: either way it
     * cannot move it before we let go */
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    live[k0] = fake_put(st, k0);
    assert_int_equal(htab_insert_locked(f->h, b, hash, live[k0]), 0);
    htab_unlock(b);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(m.rc, 0);
    assert_false(htab_growing(f->h));
    check_all(f->h, st, live, nkeys, "after the held bucket moved");
}

/*
 * Doublings under concurrent readers and writers. Writer w owns the keys
 * k with k % GC_WRITERS == w and its own range of locations (each written
 * once before it is published). Keys below GC_NSTABLE are only replaced:
 * a reader must find them at every moment, at a location holding the key
 * and its payload. The test thread drives the doublings a few buckets a
 * step (or, with help, leaves the writers to move them and only finishes),
 * whatever the threads did meanwhile; after the join, each writer's last
 * view is what the index holds.
 */
#define GC_WRITERS 2
#define GC_READERS 2
#define GC_NKEYS 4096
#define GC_NSTABLE 512
#define GC_WRITER_OPS 200000
#define GC_DOUBLINGS 5

struct gc_state {
    struct htab *h;
    struct fake_store st;
    uint64_t seed;
    uint64_t live[GC_NKEYS]; /* key -> loc; the owning writer's view */
    _Atomic int stop;
    _Atomic unsigned writers_done;
    struct gc_writer {
        struct gc_state *gs;
        unsigned id;
        uint64_t next, end; /* its locations */
        uint64_t ops;
        int err;
    } w[GC_WRITERS];
    struct gc_reader {
        struct gc_state *gs;
        unsigned id;
        uint64_t reads, bad, stable_miss;
    } r[GC_READERS];
};

static void
gc_item(struct fake_store *st, uint64_t loc, uint64_t k)
{
    st->items[loc].key = k;
    st->items[loc].payload = mix64(loc) ^ k;
}

/* Reads items with plain loads: race-free only if the index publishes. */
static bool
gc_match(void *arg, uint64_t loc)
{
    struct probe *p = arg;

    return p->st->items[loc].key == p->key;
}

static void *
gc_writer_run(void *arg)
{
    struct gc_writer *w = arg;
    struct gc_state *gs = w->gs;
    uint64_t s = gs->seed + 77 * (w->id + 1);

    /* Acquire: pairs with the test thread's release store of stop. */
    while (!atomic_load_explicit(&gs->stop, memory_order_acquire) &&
           w->ops < GC_WRITER_OPS && w->next < w->end) {
        uint64_t k =
            (rng_next(&s) % (GC_NKEYS / GC_WRITERS)) * GC_WRITERS + w->id;
        uint64_t hash = key_hash(k);
        struct probe p = {&gs->st, k};
        struct htab_bucket *b;
        _Atomic uint64_t *slot;
        uint64_t loc = w->next++;

        gc_item(&gs->st, loc, k);
        b = htab_lock(gs->h, hash);
        slot = htab_find_locked(b, hash, gc_match, &p);
        if (slot == NULL) {
            if (htab_insert_locked(gs->h, b, hash, loc) != 0)
                w->err = 1;
            gs->live[k] = loc;
        } else if (k < GC_NSTABLE || rng_next(&s) % 2) {
            if (htab_slot_loc(atomic_load_explicit(
                    slot, memory_order_relaxed)) != gs->live[k])
                w->err = 2; /* the index lost our last write */
            htab_replace_locked(slot, hash, loc);
            gs->live[k] = loc;
        } else {
            htab_remove_locked(slot);
            gs->live[k] = 0;
        }
        htab_unlock(b);
        w->ops++;
    }
    atomic_fetch_add_explicit(&gs->writers_done, 1, memory_order_release);
    return NULL;
}

static void *
gc_reader_run(void *arg)
{
    struct gc_reader *r = arg;
    struct gc_state *gs = r->gs;
    uint64_t s = gs->seed ^ (0xabcdef + r->id);

    while (!atomic_load_explicit(&gs->stop, memory_order_acquire)) {
        uint64_t k = rng_next(&s) % GC_NKEYS;
        struct probe p = {&gs->st, k};
        /* every other read through the inline scan (the single get's) */
        uint64_t loc =
            r->reads & 1
                ? htab_lookup_rcu_inline(gs->h, key_hash(k), gc_match, &p)
                : htab_lookup_rcu(gs->h, key_hash(k), gc_match, &p);

        r->reads++;
        if (loc == 0) {
            r->stable_miss += k < GC_NSTABLE;
            continue;
        }
        if (loc >= gs->st.nitems || gs->st.items[loc].key != k ||
            gs->st.items[loc].payload != (mix64(loc) ^ k))
            r->bad++;
    }
    return NULL;
}

static void
grow_concurrent(unsigned help)
{
    struct gc_state *gs = calloc(1, sizeof(*gs));
    pthread_t wt[GC_WRITERS], rt[GC_READERS];
    uint64_t per = GC_WRITER_OPS + 1, s = test_seed, steps = 0;

    assert_non_null(gs);
    gs->seed = test_seed;
    store_init(&gs->st, 1 + GC_NSTABLE + GC_WRITERS * per);
    assert_int_equal(htab_create(0, &gs->h), 0);
    htab_set_grow(gs->h, fake_rehash, &gs->st, help);
    for (uint64_t k = 0; k < GC_NSTABLE; k++) {
        uint64_t loc = gs->st.next++;

        gc_item(&gs->st, loc, k);
        gs->live[k] = loc;
        assert_int_equal(insert(gs->h, key_hash(k), loc), 0);
    }
    for (unsigned i = 0; i < GC_WRITERS; i++) {
        gs->w[i] = (struct gc_writer){
            gs, i, gs->st.next + i * per, gs->st.next + (i + 1) * per, 0, 0};
    }
    atomic_init(&gs->stop, 0);
    atomic_init(&gs->writers_done, 0);
    for (unsigned i = 0; i < GC_READERS; i++) {
        gs->r[i] = (struct gc_reader){gs, i, 0, 0, 0};
        assert_int_equal(pthread_create(&rt[i], NULL, gc_reader_run, &gs->r[i]),
                         0);
    }
    for (unsigned i = 0; i < GC_WRITERS; i++)
        assert_int_equal(pthread_create(&wt[i], NULL, gc_writer_run, &gs->w[i]),
                         0);

    /* GC_DOUBLINGS doublings, a few buckets a step (bounded: each step
     * moves at least one bucket of a table of at most 64 << GC_DOUBLINGS) */
    for (unsigned d = 0; d < GC_DOUBLINGS; d++) {
        int rc = htab_grow_start(gs->h);

        assert_true(rc == 0 || rc == -EALREADY);
        if (help) {
            /* the writers move it; bounded by their ops, then we finish */
            while (htab_growing(gs->h) &&
                   atomic_load_explicit(&gs->writers_done,
                                        memory_order_acquire) < GC_WRITERS)
                sched_yield();
            htab_grow_finish(gs->h);
            continue;
        }
        while ((rc = htab_grow_step(gs->h, 1 + rng_next(&s) % 8)) == 1) {
            steps++;
            sched_yield();
        }
        assert_int_equal(rc, 0);
    }
    /* Release: pairs with the threads' acquire loads of stop. */
    atomic_store_explicit(&gs->stop, 1, memory_order_release);
    for (unsigned i = 0; i < GC_WRITERS; i++)
        assert_int_equal(pthread_join(wt[i], NULL), 0);
    for (unsigned i = 0; i < GC_READERS; i++)
        assert_int_equal(pthread_join(rt[i], NULL), 0);
    htab_grow_finish(gs->h);

    uint64_t reads = 0, ops = 0;
    for (unsigned i = 0; i < GC_READERS; i++) {
        reads += gs->r[i].reads;
        if (gs->r[i].bad || gs->r[i].stable_miss)
            fail_msg("seed %llu: reader %u: %llu wrong, %llu stable misses",
                     (unsigned long long)test_seed, i,
                     (unsigned long long)gs->r[i].bad,
                     (unsigned long long)gs->r[i].stable_miss);
    }
    for (unsigned i = 0; i < GC_WRITERS; i++) {
        ops += gs->w[i].ops;
        if (gs->w[i].err)
            fail_msg("seed %llu: writer %u: error %d",
                     (unsigned long long)test_seed, i, gs->w[i].err);
    }
    print_message("grow concurrent (help %u): seed %llu, %llu buckets, %llu "
                  "doublings, %llu steps, %llu writes, %llu reads\n",
                  help, (unsigned long long)test_seed,
                  (unsigned long long)htab_nbuckets(gs->h),
                  (unsigned long long)htab_grows(gs->h),
                  (unsigned long long)steps, (unsigned long long)ops,
                  (unsigned long long)reads);
    assert_true(htab_grows(gs->h) >= GC_DOUBLINGS);
    assert_true(htab_nbuckets(gs->h) >= 64ull << GC_DOUBLINGS);
    check_all(gs->h, &gs->st, gs->live, GC_NKEYS, "after the threads");
    htab_retired_free(gs->h, htab_retired_take(gs->h));
    check_all(gs->h, &gs->st, gs->live, GC_NKEYS, "old tables freed");
    htab_destroy(gs->h);
    free(gs->st.items);
    free(gs);
}

static void
test_grow_concurrent_driven(void **state)
{
    (void)state;
    grow_concurrent(0);
}

static void
test_grow_concurrent_helped(void **state)
{
    (void)state;
    grow_concurrent(4);
}

/* A restart's load: an empty table takes the saved size. */
static void
test_resize_empty(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(htab_create(0, &f->h), 0);
    assert_int_equal(htab_resize_empty(f->h, 1 << 12), 0);
    assert_int_equal(htab_nbuckets(f->h), 1 << 12);
    assert_int_equal(htab_resize_empty(f->h, 1000), -EINVAL);
    assert_int_equal(htab_resize_empty(f->h, 1 << 12), 0);
    uint64_t loc = fake_put(&f->st, 5);
    uint64_t hash = craft_hash(9, 4000); /* bucket 4000 of 4096 */
    assert_int_equal(insert(f->h, hash, loc), 0);
    assert_int_equal(lookup(f->h, &f->st, hash, 5), loc);
}

int
main(void)
{
    const char *seed = getenv("HTAB_TEST_SEED");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sizing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_insert_lookup_replace_remove,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_overflow_chains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_colliding_tags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_loc_locked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holds_rcu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_hinted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_reader_writer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_grow_stepwise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_by_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_not_on_churn, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_grow_writer_holds_bucket, setup,
                                        teardown),
        cmocka_unit_test(test_grow_concurrent_driven),
        cmocka_unit_test(test_grow_concurrent_helped),
        cmocka_unit_test_setup_teardown(test_resize_empty, setup, teardown),
    };

    if (seed != NULL)
        test_seed = strtoull(seed, NULL, 0);
    if (test_seed == 0)
        test_seed = 1; /* xorshift needs a non-zero state */
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests for src/engine/htab.c: sizing, lookups, inserts, replaces and
 * removes, overflow chains, colliding tags, the locked and hinted finds, the
 * walk, and the restart's resize of an empty table (htab_fx.h). Growth is
 * test_htab_grow.c, readers and writers on other threads
 * test_htab_concurrent.c.
 */
#include "htab_fx.h"

static void
test_sizing(void **state)
{
    struct fixture *f = *state;
    struct htab *h;

    assert_int_equal(htab_create(0, &f->h), 0);
    assert_int_equal(htab_nbuckets(f->h), 64);
    assert_int_equal(htab_noverflow(f->h), 0);
    assert_true(htab_dram_bytes(f->h) >= 64 * sizeof(struct htab_bucket));
    /* the rest: the descriptors and the entry count's 64 stripes */
    assert_true(htab_dram_bytes(f->h) <=
                64 * sizeof(struct htab_bucket) + 12288);
    assert_int_equal(htab_count(f->h), 0);

    /* 1M items at 4.2 a bucket: 238096 -> 262144 buckets (mmap path). */
    assert_int_equal(htab_create(1000000, &h), 0);
    assert_int_equal(htab_nbuckets(h), 262144);
    assert_true(htab_dram_bytes(h) >= 262144ull * 64);
    assert_true(htab_dram_bytes(h) <= 262144ull * 64 + 12288);
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
        htab_remove_locked(f->h, slot);
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
    htab_remove_locked(f->h, htab_find_loc_locked(b, locs[9])); /* overflow */
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
    htab_remove_locked(f->h, htab_find_loc_locked(b, locs[9]));
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

/* Churn at a steady count: overflow buckets left empty are unlinked and,
 * after "a grace period" (retired_take/free), reused, so their number
 * stays about what the entries need instead of growing towards one for
 * every home bucket that ever overflowed. */
static void
test_churn_unlinks_overflow(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t nkeys = 512, nlive = 256; /* 4 a bucket in 64 */
    uint64_t *live = calloc(nkeys, sizeof(*live));
    uint64_t s = test_seed, live_n = 0, peak = 0, dram0;

    assert_non_null(live);
    assert_int_equal(htab_create(0, &f->h), 0);
    assert_int_equal(htab_nbuckets(f->h), 64);
    for (uint64_t k = 0; k < nlive; k++, live_n++) {
        live[k] = fake_put(st, k);
        assert_int_equal(insert(f->h, key_hash(k), live[k]), 0);
    }
    dram0 = htab_dram_bytes(f->h);
    /* 40 turnovers: each step removes a live key and adds a dead one */
    for (uint64_t op = 0; op < 40 * nlive; op++) {
        uint64_t out, in;

        do
            out = rng_next(&s) % nkeys;
        while (live[out] == 0);
        do
            in = rng_next(&s) % nkeys;
        while (live[in] != 0);
        assert_true(remove_key(f->h, st, key_hash(out), out));
        live[out] = 0;
        live[in] = fake_put(st, in);
        assert_int_equal(insert(f->h, key_hash(in), live[in]), 0);
        if (op % 64 == 63)
            htab_retired_free(f->h, htab_retired_take(f->h));
        if (htab_noverflow(f->h) > peak)
            peak = htab_noverflow(f->h);
    }
    htab_retired_free(f->h, htab_retired_take(f->h));
    assert_null(htab_retired_take(f->h));
    check_all(f->h, st, live, nkeys, "after churn");
    print_message("churn: %llu overflow buckets (peak %llu) in 64 home "
                  "buckets, %llu -> %llu bytes\n",
                  (unsigned long long)htab_noverflow(f->h),
                  (unsigned long long)peak, (unsigned long long)dram0,
                  (unsigned long long)htab_dram_bytes(f->h));
    /* Poisson(4) past 6 slots: ~0.11 of the buckets overflow at a time;
     * without unlinking nearly every one of the 64 keeps one */
    assert_true(peak < 32);
    /* the reserve (16 buckets) covers it: nothing from the heap, the
     * index no bigger than its reserve */
    assert_true(htab_dram_bytes(f->h) <= dram0 + 16 * 64);

    /* emptied: no overflow bucket left linked */
    for (uint64_t k = 0; k < nkeys; k++)
        if (live[k] != 0) {
            assert_true(remove_key(f->h, st, key_hash(k), k));
            live[k] = 0;
        }
    assert_int_equal(htab_noverflow(f->h), 0);
    htab_retired_free(f->h, htab_retired_take(f->h));
    check_all(f->h, st, live, nkeys, "emptied");
    free(live);
}

/* An overflow bucket in the middle of a chain, emptied, is unlinked; the
 * entries after it stay found, and the bucket is reused once its grace
 * period passed. Heap buckets past the reserve are freed. */
static void
test_unlink_mid_chain(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t hash = craft_hash(0xbeef, 5);
    uint64_t locs[24];
    struct htab_bucket *b;

    assert_int_equal(htab_create(0, &f->h), 0);
    for (uint64_t k = 0; k < 24; k++) {
        locs[k] = fake_put(st, 1000 + k);
        assert_int_equal(insert(f->h, hash, locs[k]), 0);
    }
    assert_int_equal(htab_noverflow(f->h), 3); /* 6 a bucket */
    /* empty the second bucket (entries 6..11) */
    b = htab_lock(f->h, hash);
    for (uint64_t k = 6; k < 12; k++)
        htab_remove_locked(f->h, htab_find_loc_locked(b, locs[k]));
    htab_unlock(b);
    assert_int_equal(htab_noverflow(f->h), 2);
    for (uint64_t k = 0; k < 24; k++)
        assert_int_equal(lookup(f->h, st, hash, 1000 + k),
                         k >= 6 && k < 12 ? 0 : locs[k]);
    /* the last bucket too: the chain ends at the third */
    b = htab_lock(f->h, hash);
    for (uint64_t k = 18; k < 24; k++)
        htab_remove_locked(f->h, htab_find_loc_locked(b, locs[k]));
    htab_unlock(b);
    assert_int_equal(htab_noverflow(f->h), 1);
    for (uint64_t k = 12; k < 18; k++)
        assert_int_equal(lookup(f->h, st, hash, 1000 + k), locs[k]);
    uint64_t dram = htab_dram_bytes(f->h);
    struct htab_retired *r = htab_retired_take(f->h);
    assert_non_null(r);
    htab_retired_free(f->h, r);
    /* reserve buckets: back for reuse, the index no smaller or bigger */
    assert_int_equal(htab_dram_bytes(f->h), dram);
    for (uint64_t k = 6; k < 12; k++) {
        locs[k] = fake_put(st, 2000 + k);
        assert_int_equal(insert(f->h, hash, locs[k]), 0);
    }
    assert_int_equal(htab_noverflow(f->h), 2);
    assert_int_equal(htab_dram_bytes(f->h), dram);
    for (uint64_t k = 6; k < 18; k++)
        assert_int_equal(lookup(f->h, st, hash, k < 12 ? 2000 + k : 1000 + k),
                         locs[k]);

    /* past the reserve (16 buckets for 64 home ones): heap buckets,
     * counted while linked or waiting, freed after their grace period */
    uint64_t n = 6 * 30, base = st->next;
    for (uint64_t k = 0; k < n; k++)
        assert_int_equal(insert(f->h, hash, fake_put(st, 5000 + k)), 0);
    assert_true(htab_noverflow(f->h) > 16);
    uint64_t full = htab_dram_bytes(f->h);
    b = htab_lock(f->h, hash);
    for (uint64_t k = 0; k < n; k++)
        htab_remove_locked(f->h, htab_find_loc_locked(b, base + k));
    htab_unlock(b);
    assert_int_equal(htab_dram_bytes(f->h), full); /* waiting */
    htab_retired_free(f->h, htab_retired_take(f->h));
    assert_true(htab_dram_bytes(f->h) < full);
    assert_int_equal(htab_noverflow(f->h), 2);
    for (uint64_t k = 0; k < 24; k++)
        if (k < 18)
            assert_int_equal(
                lookup(f->h, st, hash, k >= 6 && k < 12 ? 2000 + k : 1000 + k),
                locs[k]);
}

static unsigned pend_calls;

static void
count_pend(void *arg)
{
    (void)arg;
    pend_calls++;
}

/* The pend hook is called once as the unlinked buckets waiting reach 64
 * (a 64-bucket table); past the most that may wait (64 too) an emptied
 * bucket stays linked, and its chain reuses it. */
static void
test_pend_hook_and_cap(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    const uint64_t hash = craft_hash(0x4242, 7);
    const uint64_t n = HTAB_SLOTS * 71; /* home and 70 overflow buckets */
    uint64_t base = st->next;
    struct htab_bucket *b;

    assert_int_equal(htab_create(0, &f->h), 0);
    pend_calls = 0;
    htab_set_pend_hook(f->h, count_pend, NULL);
    for (uint64_t k = 0; k < n; k++)
        assert_int_equal(insert(f->h, hash, fake_put(st, k)), 0);
    assert_int_equal(htab_noverflow(f->h), 70);
    b = htab_lock(f->h, hash);
    for (uint64_t k = 0; k < n; k++)
        htab_remove_locked(f->h, htab_find_loc_locked(b, base + k));
    htab_unlock(b);
    assert_int_equal(pend_calls, 1);
    assert_int_equal(htab_noverflow(f->h), 70 - 64);
    htab_retired_free(f->h, htab_retired_take(f->h));
    assert_null(htab_retired_take(f->h));
    /* the 6 left linked take new entries first: no bucket is added */
    for (uint64_t k = 0; k < HTAB_SLOTS * 7; k++)
        assert_int_equal(insert(f->h, hash, fake_put(st, n + k)), 0);
    assert_int_equal(htab_noverflow(f->h), 6);
    for (uint64_t k = 0; k < HTAB_SLOTS * 7; k++) {
        struct probe p = {st, n + k};
        assert_int_not_equal(htab_lookup_rcu(f->h, hash, fake_match, &p), 0);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sizing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_insert_lookup_replace_remove,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_overflow_chains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_churn_unlinks_overflow, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unlink_mid_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pend_hook_and_cap, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_colliding_tags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_loc_locked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holds_rcu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_hinted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resize_empty, setup, teardown),
    };

    seed_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The htab doubling (src/engine/htab.c) on one thread, or with one writer
 * holding a bucket: stepwise, driven by writers, not on churn, at the
 * entry count past 80% of the slots and not before (htab_fx.h).
 */
#include "htab_fx.h"

#include <pthread.h>
#include <time.h>

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
        htab_remove_locked(h, slot);
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
    struct htab_retired *old = htab_retired_take(f->h);
    assert_non_null(old);
    assert_null(htab_retired_take(f->h));
    htab_retired_free(f->h, old);
    assert_true(htab_dram_bytes(f->h) < before);
    check_all(f->h, st, live, nkeys, "old table freed");
    free(live);
}

/* Inserts alone make the table double (past 80% of its slots), and
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
    /* 20000 keys, at most 80% of 6 slots a bucket: 8192 buckets, from 64 */
    print_message("by writers: %llu buckets after %llu doublings, %s\n",
                  (unsigned long long)htab_nbuckets(f->h),
                  (unsigned long long)htab_grows(f->h),
                  htab_growing(f->h) ? "growing" : "idle");
    assert_true(htab_grows(f->h) >= 5);
    check_all(f->h, st, live, nkeys, "grown by writers");
    htab_grow_finish(f->h);
    assert_false(htab_growing(f->h));
    assert_int_equal(htab_nbuckets(f->h), 8192);
    /* not much overflow left after the doublings */
    assert_true(htab_noverflow(f->h) <= htab_nbuckets(f->h) / 4);
    check_all(f->h, st, live, nkeys, "finished");
    htab_retired_free(f->h, htab_retired_take(f->h));
    check_all(f->h, st, live, nkeys, "freed");
    free(live);
}

/* Churn at a steady half-full table piles up overflow buckets (chains are
 * never unlinked) but is no reason to double: only the count is. */
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
    assert_true(peak_overflow > 64 / 8); /* crowded chains, no doubling */
    assert_int_equal(htab_grows(f->h), 0);
    assert_int_equal(htab_nbuckets(f->h), 64);
    check_all(f->h, st, live, nkeys, "after churn");
    free(live);
}

/* Entries past which a table of nbuckets doubles: 80% of its slots. */
static uint64_t
grow_items(uint64_t nbuckets)
{
    return nbuckets * HTAB_SLOTS * 4 / 5;
}

/* Is a doubling due or under way once the writers' asks are taken? (A
 * step that moves nothing: it starts one that is due.) */
static bool
grow_due(struct htab *h)
{
    int rc = htab_grow_step(h, 0);

    assert_true(rc == 0 || rc == 1);
    return rc == 1;
}

/* The table doubles at the entry past 80% of its slots, not one before,
 * counted through removes (which never ask), at two sizes in a row; the
 * count is exact throughout. */
static void
test_grow_at_count(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    uint64_t k = 0;

    assert_int_equal(htab_create(0, &f->h), 0); /* 64 buckets */
    htab_set_grow(f->h, fake_rehash, st, 0);
    for (uint64_t nb = 64; nb <= 256; nb *= 2) {
        uint64_t limit = grow_items(nb);

        assert_int_equal(htab_nbuckets(f->h), nb);
        while (htab_count(f->h) < limit) {
            assert_int_equal(insert(f->h, key_hash(k), fake_put(st, k)), 0);
            k++;
            if (grow_due(f->h))
                fail_msg("%llu buckets doubled at %llu entries, want %llu",
                         (unsigned long long)nb,
                         (unsigned long long)htab_count(f->h),
                         (unsigned long long)limit + 1);
        }
        assert_int_equal(htab_count(f->h), limit);
        /* out and in again: still at the limit, no doubling */
        for (uint64_t j = k - 10; j < k; j++)
            assert_true(remove_key(f->h, st, key_hash(j), j));
        assert_int_equal(htab_count(f->h), limit - 10);
        assert_false(grow_due(f->h));
        for (uint64_t j = k - 10; j < k; j++)
            assert_int_equal(insert(f->h, key_hash(j), fake_put(st, j)), 0);
        assert_false(grow_due(f->h));
        assert_int_equal(htab_nbuckets(f->h), nb);
        assert_int_equal(htab_grows(f->h), nb == 64 ? 0 : nb == 128 ? 1 : 2);
        /* one more: due */
        assert_int_equal(insert(f->h, key_hash(k), fake_put(st, k)), 0);
        k++;
        assert_int_equal(htab_count(f->h), limit + 1);
        assert_true(grow_due(f->h));
        htab_grow_finish(f->h);
        assert_int_equal(htab_nbuckets(f->h), 2 * nb);
        assert_int_equal(htab_count(f->h), limit + 1); /* moves count none */
    }
    htab_retired_free(f->h, htab_retired_take(f->h));
}

/* Writers' help alone (htab_lock) starts the doubling at the same count. */
static void
test_grow_at_count_by_writers(void **state)
{
    struct fixture *f = *state;
    struct fake_store *st = &f->st;
    uint64_t limit = grow_items(1024), k;

    assert_int_equal(htab_create(4096, &f->h), 0);
    assert_int_equal(htab_nbuckets(f->h), 1024);
    htab_set_grow(f->h, fake_rehash, st, 1);
    for (k = 0; k < limit; k++)
        assert_int_equal(insert(f->h, key_hash(k), fake_put(st, k)), 0);
    /* an htab_lock with nothing to do takes any ask */
    htab_unlock(htab_lock(f->h, 0));
    assert_false(htab_growing(f->h));
    assert_int_equal(htab_grows(f->h), 0);
    assert_int_equal(insert(f->h, key_hash(k), fake_put(st, k)), 0);
    htab_unlock(htab_lock(f->h, 0));
    assert_true(htab_growing(f->h) || htab_grows(f->h) == 1);
    htab_grow_finish(f->h);
    assert_int_equal(htab_nbuckets(f->h), 2048);
    htab_retired_free(f->h, htab_retired_take(f->h));
}

/* Many random key sets filled to exactly 80% of 1,024 buckets and churned
 * there never double (a sample of the fill would, now and then); the
 * entry past it does. */
static void
test_grow_not_below_count(void **state)
{
    (void)state;
    const uint64_t limit = grow_items(1024), churn = 2000;
    uint64_t s = test_seed;

    for (unsigned set = 0; set < 100; set++) {
        struct fake_store st;
        struct htab *h;
        uint64_t *keys = calloc(limit + 1, sizeof(*keys));
        uint64_t base = rng_next(&s);

        assert_non_null(keys);
        store_init(&st, limit + churn + 2);
        assert_int_equal(htab_create(4096, &h), 0);
        htab_set_grow(h, fake_rehash, &st, 1);
        for (uint64_t i = 0; i <= limit; i++) /* distinct: mix64 is 1-1 */
            keys[i] = mix64(base + i);
        for (uint64_t i = 0; i < limit; i++)
            assert_int_equal(
                insert(h, key_hash(keys[i]), fake_put(&st, keys[i])), 0);
        for (uint64_t c = 0; c < churn; c++) {
            uint64_t i = rng_next(&s) % limit;

            assert_true(remove_key(h, &st, key_hash(keys[i]), keys[i]));
            assert_int_equal(
                insert(h, key_hash(keys[i]), fake_put(&st, keys[i])), 0);
        }
        if (grow_due(h) || htab_grows(h) != 0 || htab_nbuckets(h) != 1024)
            fail_msg("seed %llu, set %u: doubled at %llu entries",
                     (unsigned long long)test_seed, set,
                     (unsigned long long)htab_count(h));
        assert_int_equal(htab_count(h), limit);
        assert_int_equal(
            insert(h, key_hash(keys[limit]), fake_put(&st, keys[limit])), 0);
        assert_true(grow_due(h));
        htab_destroy(h);
        free(st.items);
        free(keys);
    }
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

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_grow_stepwise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_by_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_not_on_churn, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_grow_writer_holds_bucket, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_grow_at_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_at_count_by_writers, setup,
                                        teardown),
        cmocka_unit_test(test_grow_not_below_count),
    };

    seed_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The htab doubling (src/engine/htab.c) on one thread, or with one writer
 * holding a bucket: stepwise, driven by writers, not on churn (htab_fx.h).
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
    };

    seed_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

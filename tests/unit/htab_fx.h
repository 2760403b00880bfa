#pragma once
/*
 * Shared fixture of the htab tests (test_htab*.c, src/engine/htab.c): a fake
 * item store, an array of items indexed by location, each holding its key.
 * match() compares keys, so a tag collision is resolved exactly as the
 * engine resolves it. Helpers are static inline so that each test file
 * uses what it needs.
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

static inline uint64_t
mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint64_t
rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline uint64_t
key_hash(uint64_t key)
{
    return mix64(key);
}

/* A hash with the given tag and bucket index bits. */
static inline uint64_t
craft_hash(uint16_t tag, uint64_t bucket)
{
    return (uint64_t)tag << 48 | bucket;
}

static inline bool
fake_match(void *arg, uint64_t loc)
{
    struct probe *p = arg;

    p->st->match_calls++;
    return loc < p->st->nitems && p->st->items[loc].key == p->key;
}

/* A fresh location holding key. */
static inline uint64_t
fake_put(struct fake_store *st, uint64_t key)
{
    uint64_t loc = st->next++;

    assert_true(loc < st->nitems);
    st->items[loc].key = key;
    st->items[loc].payload = ~key;
    return loc;
}

static inline void
store_init(struct fake_store *st, uint64_t nitems)
{
    st->items = calloc(nitems, sizeof(*st->items));
    assert_non_null(st->items);
    st->nitems = nitems;
    st->next = 1;
    st->match_calls = 0;
}

static inline int
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

static inline int
teardown(void **state)
{
    struct fixture *f = *state;

    htab_destroy(f->h);
    free(f->st.items);
    free(f);
    return 0;
}

static inline uint64_t
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

static inline int
insert(struct htab *h, uint64_t hash, uint64_t loc)
{
    struct htab_bucket *b = htab_lock(h, hash);
    int rc = htab_insert_locked(h, b, hash, loc);

    htab_unlock(b);
    return rc;
}

/* Remove key's entry; true if there was one. */
static inline bool
remove_key(struct htab *h, struct fake_store *st, uint64_t hash, uint64_t key)
{
    struct probe p = {st, key};
    struct htab_bucket *b = htab_lock(h, hash);
    _Atomic uint64_t *slot = htab_find_locked(b, hash, fake_match, &p);

    if (slot != NULL)
        htab_remove_locked(h, slot);
    htab_unlock(b);
    return slot != NULL;
}

struct visit {
    uint8_t *seen;
    uint64_t nseen;
    uint64_t limit; /* stop with 7 after this many, 0: never */
    uint64_t bad;
};

static inline int
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

/* htab_rehash_fn over the fake store: the item's key, hashed again. */
static inline uint64_t
fake_rehash(void *arg, uint64_t loc)
{
    struct fake_store *st = arg;

    return key_hash(st->items[loc].key);
}

/* Every live key is found at its location, every other key is missed, and
 * a walk sees each live entry once. */
static inline void
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

/* HTAB_TEST_SEED=<n> replays a run. */
static inline void
seed_from_env(void)
{
    const char *seed = getenv("HTAB_TEST_SEED");

    if (seed != NULL)
        test_seed = strtoull(seed, NULL, 0);
    if (test_seed == 0)
        test_seed = 1; /* xorshift needs a non-zero state */
}

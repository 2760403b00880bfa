/*
 * Micro-benchmark of the DRAM hash index (src/engine/htab.c), one thread.
 *
 * 1M keys ("key:%08u", memcached-like) live in a DRAM fake item store
 * indexed by location; match() compares key bytes there, as the engine
 * compares the key of an item in PMEM. Hashes are computed up front with
 * hash_bytes(), so the figures are the index alone: lock + insert + unlock,
 * and lock-free lookups in random order (hits, then misses on absent keys);
 * a hit costs a bucket miss plus the item's line, a miss only the bucket.
 * It also prints the average probe chain (buckets touched, match() calls)
 * and the index's DRAM bytes per key at the measured fill.
 *
 * Three tables: sized for the key count (about 60% full), sized for half
 * of it (overfull, so overflow chains carry the excess), and started for
 * 65,536 keys and left to double as the inserts fill it (the engine's
 * default: writers move 8 buckets each while a doubling runs, rehashing
 * each moved key from the item; the old tables are freed once the inserts
 * are done, where the engine frees them after a grace period).
 *
 * With --fill, tables of 2^18 home buckets (1,572,864 slots) filled to 60,
 * 70 and 80% of their slots, first with growth off (the lookup cost and
 * the overflow buckets a home bucket at that fill), then with growth on
 * (whether the table doubles on its way there).
 *
 * Usage: bench_htab [nkeys] | bench_htab --fill
 * Prints figures; asserts no speed.
 */
#include "src/engine/htab.h"

#include "src/base/hash.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_KEY_MAX 31
#define BENCH_ROUNDS 3

struct bench_item {
    uint8_t klen;
    char key[BENCH_KEY_MAX];
};

struct bench_probe {
    const struct bench_item *items;
    const char *key;
    uint8_t klen;
    uint64_t *match_calls; /* NULL: not counted */
};

struct bench {
    uint64_t nkeys;
    struct bench_item *items;  /* items[loc], loc 1..nkeys are live keys */
    struct bench_item *absent; /* keys never inserted */
    uint64_t *hash;            /* hash[loc] */
    uint64_t *absent_hash;
    uint64_t *order; /* random permutation of 1..nkeys */
    /* Lookup streams in random key order, read sequentially, so that the
     * only random accesses are the index's and match()'s, as in a server
     * where the key sits in the request buffer. */
    struct bench_query *hitq;
    struct bench_query *missq;
};

struct bench_query {
    uint64_t hash;
    uint64_t loc; /* expected result */
    struct bench_item key;
};

static double
now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t
rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static bool
bench_match(void *arg, uint64_t loc)
{
    const struct bench_probe *p = arg;
    const struct bench_item *it = &p->items[loc];

    if (p->match_calls != NULL)
        (*p->match_calls)++;
    return it->klen == p->klen && memcmp(it->key, p->key, p->klen) == 0;
}

static void
bench_key(struct bench_item *it, uint64_t n)
{
    int len = snprintf(it->key, sizeof(it->key), "key:%08" PRIu64, n);

    it->klen = (uint8_t)len;
}

static int
bench_setup(struct bench *b, uint64_t nkeys)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;

    b->nkeys = nkeys;
    b->items = calloc(nkeys + 1, sizeof(*b->items));
    b->absent = calloc(nkeys, sizeof(*b->absent));
    b->hash = calloc(nkeys + 1, sizeof(*b->hash));
    b->absent_hash = calloc(nkeys, sizeof(*b->absent_hash));
    b->order = calloc(nkeys, sizeof(*b->order));
    b->hitq = calloc(nkeys, sizeof(*b->hitq));
    b->missq = calloc(nkeys, sizeof(*b->missq));
    if (!b->items || !b->absent || !b->hash || !b->absent_hash || !b->order ||
        !b->hitq || !b->missq)
        return -ENOMEM;
    for (uint64_t i = 0; i < nkeys; i++) {
        bench_key(&b->items[i + 1], i);
        b->hash[i + 1] =
            hash_bytes(b->items[i + 1].key, b->items[i + 1].klen, 0);
        bench_key(&b->absent[i], nkeys + i);
        b->absent_hash[i] = hash_bytes(b->absent[i].key, b->absent[i].klen, 0);
        b->order[i] = i + 1;
    }
    for (uint64_t i = nkeys - 1; i > 0; i--) {
        uint64_t j = rng_next(&s) % (i + 1);
        uint64_t t = b->order[i];

        b->order[i] = b->order[j];
        b->order[j] = t;
    }
    for (uint64_t i = 0; i < nkeys; i++) {
        /* hits in another random order than the inserts */
        uint64_t loc = b->order[(i * 7919) % nkeys];
        uint64_t k = b->order[i] - 1;

        b->hitq[i] = (struct bench_query){b->hash[loc], loc, b->items[loc]};
        b->missq[i] = (struct bench_query){b->absent_hash[k], 0, b->absent[k]};
    }
    return 0;
}

static void
bench_teardown(struct bench *b)
{
    free(b->items);
    free(b->absent);
    free(b->hash);
    free(b->absent_hash);
    free(b->order);
    free(b->hitq);
    free(b->missq);
}

/* Buckets a lookup of loc touches (1 = home bucket only). */
static uint64_t
chain_pos(struct htab *h, uint64_t hash, uint64_t loc)
{
    struct htab_bucket *home = htab_lock(h, hash);
    struct htab_bucket *b = home;
    uint64_t n = 1;

    htab_unlock(home);
    for (; b != NULL;
         b = atomic_load_explicit(&b->next, memory_order_acquire), n++)
        for (int i = 0; i < HTAB_SLOTS; i++)
            if (htab_slot_loc(atomic_load_explicit(
                    &b->slot[i], memory_order_acquire)) == loc)
                return n;
    return 0;
}

static uint64_t
chain_len(struct htab *h, uint64_t hash)
{
    struct htab_bucket *b = htab_lock(h, hash);
    uint64_t n = 0;

    htab_unlock(b);
    for (; b != NULL; b = atomic_load_explicit(&b->next, memory_order_acquire))
        n++;
    return n;
}

/* htab_rehash_fn: the key of the item at loc, hashed again. */
static uint64_t
bench_rehash(void *arg, uint64_t loc)
{
    const struct bench *b = arg;

    return hash_bytes(b->items[loc].key, b->items[loc].klen, 0);
}

static int
bench_run(struct bench *b, uint64_t expected, bool grow)
{
    const uint64_t n = b->nkeys;
    struct htab *h;
    double t, best_ins = 1e30, best_hit = 1e30, best_miss = 1e30;
    uint64_t sum = 0, hits = 0, misses = 0;
    uint64_t pos = 0, len = 0, mcalls_hit = 0, mcalls_miss = 0;
    int rc;

    for (int r = 0; r < BENCH_ROUNDS; r++) {
        rc = htab_create(expected, &h);
        if (rc != 0)
            return rc;
        if (grow)
            htab_set_grow(h, bench_rehash, b, 8);
        t = now_sec();
        for (uint64_t i = 0; i < n; i++) {
            uint64_t loc = b->order[i];
            struct htab_bucket *bk = htab_lock(h, b->hash[loc]);

            rc = htab_insert_locked(h, bk, b->hash[loc], loc);
            htab_unlock(bk);
            if (rc != 0) {
                htab_destroy(h);
                return rc;
            }
        }
        if (grow)
            htab_grow_finish(h);
        t = now_sec() - t;
        if (grow)
            htab_retired_free(h, htab_retired_take(h));
        best_ins = t < best_ins ? t : best_ins;
        if (r != BENCH_ROUNDS - 1)
            htab_destroy(h);
    }

    for (int r = 0; r < BENCH_ROUNDS; r++) {
        hits = 0;
        t = now_sec();
        for (uint64_t i = 0; i < n; i++) {
            const struct bench_query *q = &b->hitq[i];
            struct bench_probe p = {b->items, q->key.key, q->key.klen, NULL};
            uint64_t loc = htab_lookup_rcu(h, q->hash, bench_match, &p);

            hits += loc == q->loc;
            sum += loc;
        }
        t = now_sec() - t;
        best_hit = t < best_hit ? t : best_hit;
    }

    for (int r = 0; r < BENCH_ROUNDS; r++) {
        misses = 0;
        t = now_sec();
        for (uint64_t i = 0; i < n; i++) {
            const struct bench_query *q = &b->missq[i];
            struct bench_probe p = {b->items, q->key.key, q->key.klen, NULL};
            uint64_t loc = htab_lookup_rcu(h, q->hash, bench_match, &p);

            misses += loc == 0;
            sum += loc;
        }
        t = now_sec() - t;
        best_miss = t < best_miss ? t : best_miss;
    }

    /* probe statistics, untimed */
    for (uint64_t loc = 1; loc <= n; loc++) {
        struct bench_probe p = {b->items, b->items[loc].key, b->items[loc].klen,
                                &mcalls_hit};

        pos += chain_pos(h, b->hash[loc], loc);
        (void)htab_lookup_rcu(h, b->hash[loc], bench_match, &p);
    }
    for (uint64_t k = 0; k < n; k++) {
        struct bench_probe p = {b->items, b->absent[k].key, b->absent[k].klen,
                                &mcalls_miss};

        len += chain_len(h, b->absent_hash[k]);
        (void)htab_lookup_rcu(h, b->absent_hash[k], bench_match, &p);
    }

    printf("expected_items %" PRIu64 "%s: %" PRIu64 " buckets + %" PRIu64
           " overflow (%.3f a home bucket), fill %.1f%% of home slots, "
           "%" PRIu64 " doublings\n",
           expected, grow ? ", growing" : "", htab_nbuckets(h),
           htab_noverflow(h),
           (double)htab_noverflow(h) / (double)htab_nbuckets(h),
           100.0 * (double)n / (double)(htab_nbuckets(h) * HTAB_SLOTS),
           htab_grows(h));
    printf("  insert       %7.2f M/s  %6.1f ns/op\n",
           (double)n / best_ins / 1e6, best_ins / (double)n * 1e9);
    printf("  lookup hit   %7.2f M/s  %6.1f ns/op  (%" PRIu64 "/%" PRIu64
           " found)\n",
           (double)n / best_hit / 1e6, best_hit / (double)n * 1e9, hits, n);
    printf("  lookup miss  %7.2f M/s  %6.1f ns/op  (%" PRIu64 "/%" PRIu64
           " missed)\n",
           (double)n / best_miss / 1e6, best_miss / (double)n * 1e9, misses, n);
    printf("  probe: hit touches %.3f buckets, %.4f match calls; "
           "miss touches %.3f buckets, %.5f match calls\n",
           (double)pos / (double)n, (double)mcalls_hit / (double)n,
           (double)len / (double)n, (double)mcalls_miss / (double)n);
    printf("  index DRAM   %.1f MiB, %.2f bytes/key\n",
           (double)htab_dram_bytes(h) / (double)MIB,
           (double)htab_dram_bytes(h) / (double)n);
    if (sum == 42) /* keep the lookups */
        printf(" \n");
    htab_destroy(h);
    return hits == n && misses == n ? 0 : -EIO;
}

/* Tables of 2^18 home buckets at 60, 70 and 80% of their slots: growth
 * off, then on. */
static int
bench_fills(void)
{
    const uint64_t nbuckets = 1ull << 18;
    /* htab_create's sizing gives 2^18 buckets for 2^20 items (4 a bucket) */
    const uint64_t expected = nbuckets * 4;
    static const unsigned fills[] = {60, 70, 80};
    int rc = 0;

    for (unsigned i = 0; i < sizeof(fills) / sizeof(fills[0]) && !rc; i++) {
        struct bench b = {0};
        uint64_t nkeys = nbuckets * HTAB_SLOTS * fills[i] / 100;

        rc = bench_setup(&b, nkeys);
        if (rc == 0) {
            printf("bench_htab --fill: %u%% of %" PRIu64 " buckets: %" PRIu64
                   " keys, 1 thread, best of %d\n",
                   fills[i], nbuckets, nkeys, BENCH_ROUNDS);
            rc = bench_run(&b, expected, false);
        }
        if (rc == 0)
            rc = bench_run(&b, expected, true);
        bench_teardown(&b);
    }
    return rc;
}

int
main(int argc, char **argv)
{
    uint64_t nkeys = 1000000;
    struct bench b = {0};
    int rc;

    if (argc > 1 && strcmp(argv[1], "--fill") == 0) {
        rc = bench_fills();
        if (rc != 0)
            fprintf(stderr, "bench_htab: failed: %s\n", strerror(-rc));
        return rc != 0;
    }
    if (argc > 1)
        nkeys = strtoull(argv[1], NULL, 0);

    if (nkeys == 0 || nkeys > 100000000) {
        fprintf(stderr, "bench_htab: nkeys must be 1..100000000\n");
        return 2;
    }
    rc = bench_setup(&b, nkeys);
    if (rc == 0) {
        printf("bench_htab: %" PRIu64 " keys, 1 thread, best of %d, "
               "random order, hashing excluded\n",
               nkeys, BENCH_ROUNDS);
        rc = bench_run(&b, nkeys, false);
    }
    if (rc == 0)
        rc = bench_run(&b, nkeys / 2, false);
    if (rc == 0)
        rc = bench_run(&b, 65536, true);
    bench_teardown(&b);
    if (rc != 0) {
        fprintf(stderr, "bench_htab: failed: %s\n", strerror(-rc));
        return 1;
    }
    return 0;
}

/*
 * The htab (src/engine/htab.c) under lock-free readers on other threads:
 * one writer and one reader, then doublings under readers and writers, and
 * the entry count under two writers (htab_fx.h). TSan checks the
 * release/acquire pairing.
 */
#include "htab_fx.h"

#include "src/base/compiler.h"

#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <urcu/urcu-memb.h>

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
            htab_remove_locked(cs->h, slot);
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
            htab_remove_locked(gs->h, slot);
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

/*
 * The entry count under two writers: each flips random keys of one shared
 * set (insert if absent, else remove), so each removes entries the other
 * inserted and one thread's stripe goes below zero; writers' help doubles
 * the table as it fills. Afterwards the count is the number of live keys
 * and of walked entries, and the table is the smallest that holds them
 * under 80%: CT_NKEYS never fills 512 buckets (2,457 entries) past it.
 */
#define CT_NKEYS 2400
#define CT_WRITERS 2
#define CT_OPS 40000

struct ct_state {
    struct htab *h;
    struct fake_store st;
    uint64_t live[CT_NKEYS]; /* under the key's bucket lock */
    uint64_t seed;
};

struct ct_writer {
    struct ct_state *cs;
    unsigned id;
    uint64_t next, end; /* this writer's locations */
    uint64_t inserts, removes;
    int err;
};

static void *
ct_writer_run(void *arg)
{
    struct ct_writer *w = arg;
    struct ct_state *cs = w->cs;
    uint64_t s = cs->seed + 1000 * (w->id + 1);

    while (w->next < w->end) {
        /* the first writer favours inserts, the second removes */
        uint64_t k = rng_next(&s) % CT_NKEYS;
        uint64_t hash = key_hash(k);
        struct probe p = {&cs->st, k};
        struct htab_bucket *b;
        _Atomic uint64_t *slot;
        uint64_t loc = w->next++;

        cs->st.items[loc].key = k; /* complete before it is published */
        cs->st.items[loc].payload = ~k;
        b = htab_lock(cs->h, hash);
        slot = htab_find_locked(b, hash, gc_match, &p);
        if (slot == NULL && (w->id == 0 || rng_next(&s) % 4 == 0)) {
            if (htab_insert_locked(cs->h, b, hash, loc) != 0)
                w->err = 1;
            cs->live[k] = loc;
            w->inserts++;
        } else if (slot != NULL && (w->id == 1 || rng_next(&s) % 4 == 0)) {
            htab_remove_locked(cs->h, slot);
            cs->live[k] = 0;
            w->removes++;
        }
        htab_unlock(b);
    }
    return NULL;
}

static void
test_count_two_writers(void **state)
{
    (void)state;
    struct ct_state *cs = calloc(1, sizeof(*cs));
    struct ct_writer w[CT_WRITERS];
    pthread_t th[CT_WRITERS];
    uint64_t nlive = 0;

    assert_non_null(cs);
    cs->seed = test_seed;
    store_init(&cs->st, 1 + CT_WRITERS * CT_OPS);
    assert_int_equal(htab_create(0, &cs->h), 0); /* 64 buckets */
    htab_set_grow(cs->h, fake_rehash, &cs->st, 4);
    for (unsigned i = 0; i < CT_WRITERS; i++) {
        w[i] = (struct ct_writer){
            cs, i, 1 + i * CT_OPS, 1 + (i + 1) * CT_OPS, 0, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, ct_writer_run, &w[i]), 0);
    }
    for (unsigned i = 0; i < CT_WRITERS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    /* a doubling the last writes asked for, or left under way */
    while (htab_grow_step(cs->h, UINT64_MAX) == 1)
        ;
    htab_retired_free(cs->h, htab_retired_take(cs->h));
    for (unsigned i = 0; i < CT_WRITERS; i++)
        assert_int_equal(w[i].err, 0);
    for (uint64_t k = 0; k < CT_NKEYS; k++)
        nlive += cs->live[k] != 0;
    print_message(
        "count, two writers: seed %llu, %llu + %llu inserts, "
        "%llu + %llu removes, %llu live, %llu buckets\n",
        (unsigned long long)test_seed, (unsigned long long)w[0].inserts,
        (unsigned long long)w[1].inserts, (unsigned long long)w[0].removes,
        (unsigned long long)w[1].removes, (unsigned long long)nlive,
        (unsigned long long)htab_nbuckets(cs->h));
    assert_true(w[1].removes > 0 && w[0].inserts > 0);
    assert_int_equal(htab_count(cs->h), nlive);
    check_all(cs->h, &cs->st, cs->live, CT_NKEYS, "two writers");
    /* the smallest table holding nlive under 80%: never past 512 */
    uint64_t nb = htab_nbuckets(cs->h);
    assert_true(nb <= 512);
    assert_true(nlive <= nb * HTAB_SLOTS * 4 / 5);
    assert_true(nb == 64 || htab_grows(cs->h) > 0);
    htab_destroy(cs->h);
    free(cs->st.items);
    free(cs);
}

/*
 * Unlinks under readers: every key in one home bucket's chain; a few
 * stable keys, inserted after a full overflow bucket of churn keys, sit
 * deeper in the chain and are never removed; the writer removes and
 * inserts churn keys, so overflow buckets before, between and after them
 * empty and are unlinked, and every few writes it takes what was unlinked,
 * waits for a grace period and frees it (reserve buckets come back for
 * reuse). Readers, registered with RCU, look keys up inside read-side
 * sections: a stable key is always found, a found key is at a location
 * holding it. TSan sees the frees after the readers' sections (the
 * htab_rcu_token, as htab_lock's sections).
 */
#define UL_NCHURN 40
#define UL_NSTABLE 4
#define UL_WRITER_OPS 100000
#define UL_READERS 2
#define UL_HASH(k) craft_hash((uint16_t)(0x100 + (k) % 7), 9)

struct ul_state {
    struct htab *h;
    struct fake_store st;
    uint64_t seed;
    _Atomic int done;
    uint64_t takes, max_overflow;
    struct ul_reader {
        struct ul_state *us;
        uint64_t reads, stable_miss, bad;
    } r[UL_READERS];
};

static uint64_t
ul_put(struct fake_store *st, uint64_t k)
{
    uint64_t loc = st->next++;

    assert(loc < st->nitems);
    st->items[loc].key = k;
    st->items[loc].payload = mix64(loc) ^ k;
    return loc;
}

static void *
ul_reader(void *arg)
{
    struct ul_reader *r = arg;
    struct ul_state *us = r->us;
    uint64_t s = us->seed ^ (uint64_t)(uintptr_t)r;

    urcu_memb_register_thread();
    /* Acquire: pairs with the writer's release store of done. */
    while (!atomic_load_explicit(&us->done, memory_order_acquire)) {
        uint64_t k = rng_next(&s) % (UL_NCHURN + UL_NSTABLE);
        struct probe p = {&us->st, k};

        urcu_memb_read_lock();
        uint64_t loc = htab_lookup_rcu(us->h, UL_HASH(k), cc_match, &p);
        if (loc == 0 ? k >= UL_NCHURN
                     : us->st.items[loc].key != k ||
                           us->st.items[loc].payload != (mix64(loc) ^ k)) {
            if (loc == 0)
                r->stable_miss++;
            else
                r->bad++;
        }
        TSAN_RELEASE(&htab_rcu_token);
        urcu_memb_read_unlock();
        r->reads++;
    }
    urcu_memb_unregister_thread();
    return NULL;
}

static void
test_unlink_under_readers(void **state)
{
    struct ul_state *us = calloc(1, sizeof(*us));
    uint64_t live[UL_NCHURN + UL_NSTABLE] = {0};
    uint64_t s;
    pthread_t rt[UL_READERS];

    (void)state;
    assert_non_null(us);
    us->seed = s = test_seed;
    store_init(&us->st, UL_WRITER_OPS + UL_NCHURN + UL_NSTABLE + 2);
    assert_int_equal(htab_create(0, &us->h), 0);
    /* home and one overflow bucket of churn keys, then the stable ones */
    for (uint64_t k = 0; k < 2 * HTAB_SLOTS; k++) {
        live[k] = ul_put(&us->st, k);
        assert_int_equal(insert(us->h, UL_HASH(k), live[k]), 0);
    }
    for (uint64_t k = UL_NCHURN; k < UL_NCHURN + UL_NSTABLE; k++) {
        live[k] = ul_put(&us->st, k);
        assert_int_equal(insert(us->h, UL_HASH(k), live[k]), 0);
    }
    atomic_init(&us->done, 0);
    for (int i = 0; i < UL_READERS; i++) {
        us->r[i].us = us;
        assert_int_equal(pthread_create(&rt[i], NULL, ul_reader, &us->r[i]), 0);
    }
    urcu_memb_register_thread();
    for (uint64_t op = 0; op < UL_WRITER_OPS; op++) {
        uint64_t k = rng_next(&s) % UL_NCHURN;
        struct probe p = {&us->st, k};
        struct htab_bucket *b = htab_lock(us->h, UL_HASH(k));

        if (live[k] != 0) {
            _Atomic uint64_t *slot =
                htab_find_locked(b, UL_HASH(k), cc_match, &p);
            assert_non_null(slot);
            htab_remove_locked(us->h, slot);
            live[k] = 0;
        } else {
            live[k] = ul_put(&us->st, k);
            assert_int_equal(htab_insert_locked(us->h, b, UL_HASH(k), live[k]),
                             0);
        }
        htab_unlock(b);
        if (htab_noverflow(us->h) > us->max_overflow)
            us->max_overflow = htab_noverflow(us->h);
        if (op % 32 == 31) {
            struct htab_retired *r = htab_retired_take(us->h);
            if (r != NULL) {
                urcu_memb_synchronize_rcu();
                htab_retired_free(us->h, r);
                us->takes++;
            }
        }
    }
    /* Release: pairs with the readers' acquire load of done. */
    atomic_store_explicit(&us->done, 1, memory_order_release);
    for (int i = 0; i < UL_READERS; i++)
        assert_int_equal(pthread_join(rt[i], NULL), 0);
    urcu_memb_unregister_thread();

    uint64_t reads = 0;
    for (int i = 0; i < UL_READERS; i++) {
        reads += us->r[i].reads;
        if (us->r[i].stable_miss || us->r[i].bad)
            fail_msg("seed %llu: reader %d: %llu stable misses, %llu bad",
                     (unsigned long long)test_seed, i,
                     (unsigned long long)us->r[i].stable_miss,
                     (unsigned long long)us->r[i].bad);
    }
    print_message("unlinks under readers: seed %llu, %llu reads, %llu "
                  "takes, at most %llu overflow buckets\n",
                  (unsigned long long)test_seed, (unsigned long long)reads,
                  (unsigned long long)us->takes,
                  (unsigned long long)us->max_overflow);
    /* overflow buckets were unlinked and freed or reused meanwhile */
    assert_true(us->takes > 0);
    /* 44 keys at most, 6 a bucket: a chain of 8 at most, plus the
     * buckets that emptied between two takes */
    assert_true(us->max_overflow <= 16);
    for (uint64_t k = 0; k < UL_NCHURN + UL_NSTABLE; k++) {
        struct probe p = {&us->st, k};
        assert_int_equal(htab_lookup_rcu(us->h, UL_HASH(k), cc_match, &p),
                         live[k]);
    }
    htab_retired_free(us->h, htab_retired_take(us->h));
    htab_destroy(us->h);
    free(us->st.items);
    free(us);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_reader_writer, setup,
                                        teardown),
        cmocka_unit_test(test_grow_concurrent_driven),
        cmocka_unit_test(test_grow_concurrent_helped),
        cmocka_unit_test(test_count_two_writers),
        cmocka_unit_test(test_unlink_under_readers),
    };

    seed_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The packed small-item store in the engine (packed_item_max,
 * src/engine/packed.c): which stores it takes, reads of every kind, CAS
 * across rewrites, flags inline and above 15, touch in place and by a
 * rewrite, delete, rewrites into slabs (append, incr), flush_all, FIFO
 * eviction of whole segments, the stats rows, and a restart that brings
 * packed items back, never a deleted or replaced one (test_packed_restart.c
 * judges more keys). Fixture: engine_fx.h, with
 * packed_item_max = 1024.
 */

#include "tests/unit/engine_fx.h"
#include "tests/unit/packed_fx.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

/* A small set is packed; a large one is not; the counts follow. */
static void
test_small_packed_large_slab(void **state)
{
    struct fx *f = *state;
    char big[2000];
    memset(big, 'b', sizeof(big));

    puts_(f->c, "small", "hello");
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items, 1);
    STAT_EQ(s, curr_items, 1);
    STAT_EQ(s, packed_segments, 1);
    STAT_EQ(s, packed_bytes_live, 8 + 5 + 5 + 2); /* padded to 4 */
    STAT_EQ(s, bytes, 20);
    put(f->c, "large", big, sizeof(big), 0, 0);
    s = pstats(f->c);
    STAT_EQ(s, packed_items, 1);
    STAT_EQ(s, curr_items, 2);
    check_str(f->c, "small", "hello");
    check_val(f->c, "large", big, sizeof(big));
    check_ok(f->c);

    /* a packed key rewritten large goes to a slab, the packed copy dies */
    put(f->c, "small", big, sizeof(big), 0, 0);
    s = pstats(f->c);
    STAT_EQ(s, packed_items, 0);
    STAT_EQ(s, curr_items, 2);
    STAT_EQ(s, packed_bytes_dead, 20);
    check_val(f->c, "small", big, sizeof(big));
    /* and back */
    puts_(f->c, "large", "tiny");
    s = pstats(f->c);
    STAT_EQ(s, packed_items, 1);
    STAT_EQ(s, curr_items, 2);
    check_str(f->c, "large", "tiny");
    check_ok(f->c);
}

/* CAS: unique across packed and slab items, kept by no rewrite that
 * changes the value, checked by cas/add/replace as for slab items. */
static void
test_cas_modes(void **state)
{
    struct fx *f = *state;
    uint64_t c1 = 0, c2 = 0, c3 = 0;
    char big[2000];
    memset(big, 'x', sizeof(big));

    assert_int_equal(store_s(f->c, TC_SET, "k", "v1", 0, 0, 0, &c1), TC_OK);
    assert_int_equal(
        tc_store(f->c, TC_SET, "big", 3, big, sizeof(big), 0, 0, 0, &c2),
        TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "k2", "v", 0, 0, 0, &c3), TC_OK);
    assert_true(c1 != 0 && c1 != c2 && c2 != c3 && c1 != c3);
    assert_int_equal(check_str(f->c, "k", "v1").cas, c1);

    assert_int_equal(store_s(f->c, TC_CAS, "k", "v2", 0, 0, c1 + 1, NULL),
                     TC_EXISTS);
    assert_int_equal(store_s(f->c, TC_CAS, "k", "v2", 0, 0, c1, &c2), TC_OK);
    assert_true(c2 != c1);
    assert_int_equal(check_str(f->c, "k", "v2").cas, c2);
    assert_int_equal(store_s(f->c, TC_CAS, "k", "v3", 0, 0, c1, NULL),
                     TC_EXISTS);
    assert_int_equal(store_s(f->c, TC_CAS, "nokey", "v", 0, 0, 5, NULL),
                     TC_NOT_FOUND);
    assert_int_equal(store_s(f->c, TC_ADD, "k", "v4", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    assert_int_equal(store_s(f->c, TC_REPLACE, "nokey", "v", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    assert_int_equal(store_s(f->c, TC_REPLACE, "k", "v5", 0, 0, 0, NULL),
                     TC_OK);
    assert_int_equal(store_s(f->c, TC_ADD, "k9", "v9", 0, 0, 0, NULL), TC_OK);
    check_str(f->c, "k", "v5");
    check_str(f->c, "k9", "v9");

    /* a chosen CAS (meta E) rides in cas64 */
    struct tc_store_opts o = {.cas_new = 123456789};
    assert_int_equal(tc_store_ex(f->c, TC_SET, "e", 1, "ev", 2, 0, 0, &o, &c1),
                     TC_OK);
    assert_int_equal(c1, 123456789);
    assert_int_equal(check_str(f->c, "e", "ev").cas, 123456789);
    STAT_EQ(pstats(f->c), packed_items, 4); /* k, k2, k9, e */
    check_ok(f->c);
}

/* A key's CAS only grows, as memcached's: a packed item's derived CAS
 * (its segment's block, taken at the segment's open) below the replaced
 * version's is replaced by a CAS of its own. */
static void
test_cas_grows_per_key(void **state)
{
    struct fx *f = *state;
    uint64_t a = 0, b = 0, c = 0;
    char big[2000];
    memset(big, 'g', sizeof(big));

    puts_(f->c, "open", "a segment"); /* its block is taken now */
    assert_int_equal(
        tc_store(f->c, TC_SET, "k", 1, big, sizeof(big), 0, 0, 0, &a), TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "k", "small", 0, 0, 0, &b), TC_OK);
    assert_true(b > a);
    STAT_EQ(pstats(f->c), packed_items, 2);
    STAT_EQ(pstats(f->c), packed_cas_lifted, 1);
    /* chosen before the write (a peek at the old version): no span
     * written in vain */
    STAT_EQ(pstats(f->c), packed_bytes_dead, 0);
    assert_int_equal(check_str(f->c, "k", "small").cas, b);
    assert_int_equal(store_s(f->c, TC_SET, "k", "again", 0, 0, 0, &c), TC_OK);
    assert_true(c > b);
    assert_int_equal(check_str(f->c, "k", "again").cas, c);
    /* a fresh key keeps its derived CAS, and the one CAS test in
     * decide_locked sees the lifted one */
    assert_int_equal(store_s(f->c, TC_CAS, "k", "v3", 0, 0, b, NULL),
                     TC_EXISTS);
    assert_int_equal(store_s(f->c, TC_CAS, "k", "v3", 0, 0, c, &a), TC_OK);
    assert_true(a > c);
    STAT_EQ(pstats(f->c), packed_cas_lifted, 3);
    puts_(f->c, "fresh", "key");
    STAT_EQ(pstats(f->c), packed_cas_lifted, 3);
    check_ok(f->c);
}

struct cas_step {
    struct tc_cache *c;
    const char *key;
    uint64_t cas;
};

static void *
cas_step_run(void *arg)
{
    struct cas_step *st = arg;
    assert_int_equal(store_s(st->c, TC_SET, st->key, "v", 0, 0, 0, &st->cas),
                     TC_OK);
    return NULL;
}

/* One store on a thread of its own, joined before the next step: the
 * thread opens a segment (a block newer than any before) and, leaving,
 * seals it. */
static void
cas_step(struct tc_cache *c, pthread_t *th, struct cas_step *st,
         const char *key)
{
    *st = (struct cas_step){c, key, 0};
    assert_int_equal(pthread_create(th, NULL, cas_step_run, st), 0);
    assert_int_equal(pthread_join(*th, NULL), 0);
}

/* Across threads: a thread whose segment opened first writes a key last
 * written into a segment opened later; the key's CAS still grows. */
static void
test_cas_grows_across_segments(void **state)
{
    struct fx *f = *state;
    pthread_t th;
    struct cas_step st;
    uint64_t first = 0, later = 0;

    /* this thread's segment opens first, another thread's later */
    assert_int_equal(store_s(f->c, TC_SET, "x", "v", 0, 0, 0, &first), TC_OK);
    cas_step(f->c, &th, &st, "y");
    assert_true(st.cas > first);
    cas_step(f->c, &th, &st, "shared"); /* a thread that has left sealed
                                           its segment: a newer block */
    uint64_t theirs = st.cas;
    assert_int_equal(store_s(f->c, TC_SET, "shared", "mine", 0, 0, 0, &later),
                     TC_OK);
    assert_true(later > theirs);
    assert_int_equal(check_str(f->c, "shared", "mine").cas, later);
    assert_true(pstats(f->c).packed_cas_lifted >= 1);
    check_ok(f->c);
}

/* Client flags 0..15 inline, above in flags32; exptime in exp32. */
static void
test_flags_and_expiry(void **state)
{
    struct fx *f = *state;
    static const uint32_t flags[] = {0, 1, 7, 15, 16, 255, 65535, 0xffffffffu};
    char k[16];
    uint64_t live = 0;

    for (unsigned i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        snprintf(k, sizeof(k), "f%u", i);
        put(f->c, k, "val", 3, flags[i], 0);
        live += 8 + strlen(k) + 3 + (flags[i] > 15 ? 4 : 0);
        live = (live + 3) & ~3ull;
    }
    for (unsigned i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        snprintf(k, sizeof(k), "f%u", i);
        struct tc_item_info in = check_str(f->c, k, "val");
        assert_int_equal(in.flags, flags[i]);
        assert_int_equal(in.exptime, 0);
    }
    STAT_EQ(pstats(f->c), packed_bytes_live, live);

    put(f->c, "ttl", "t", 1, 3, 100);
    struct tc_item_info in = check_str(f->c, "ttl", "t");
    assert_int_equal(in.exptime, T0 + 100);
    assert_int_equal(in.flags, 3);
    tc_clock_set(T0 + 99);
    check_str(f->c, "ttl", "t");
    tc_clock_set(T0 + 100);
    check_miss(f->c, "ttl");
    /* read before it expired: not counted as unfetched */
    STAT_EQ(pstats(f->c), expired_unfetched, 0);
    put(f->c, "ttl2", "t", 1, 0, 5);
    tc_clock_set(T0 + 105);
    check_miss(f->c, "ttl2");
    STAT_EQ(pstats(f->c), expired_unfetched, 1);
    check_ok(f->c);
}

/* tc_get_copy with no description wanted (its own path, copy_packed_rcu
 * in fetch.c): the value of each form of item (flags32, exp16, exp32),
 * cut at the buffer's size; the copy marks the item fetched (the slot's
 * bit, seen by a described get after it); an expired or flushed item is a
 * miss counted as such, found dead by the copy itself. */
static void
test_copy_no_info(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *k;
        uint32_t flags;
        int64_t ttl;
    } it[] = {
        {"plain", 0, 0},
        {"flags32", 0xdeadbeefu, 0},
        {"exp16", 5, 100},
        {"exp32", 0, 200000}, /* bucket 15: past exp16's reach */
    };
    char v[64], buf[64];
    memset(v, 0, sizeof(v));
    for (unsigned i = 0; i < 4; i++) {
        snprintf(v, sizeof(v), "value of %s, some bytes", it[i].k);
        put(f->c, it[i].k, v, strlen(v), it[i].flags, it[i].ttl);
    }
    for (unsigned i = 0; i < 4; i++) {
        snprintf(v, sizeof(v), "value of %s, some bytes", it[i].k);
        memset(buf, 0, sizeof(buf));
        assert_int_equal(
            tc_get_copy(f->c, it[i].k, strlen(it[i].k), buf, sizeof(buf), NULL),
            TC_OK);
        assert_string_equal(buf, v);
        memset(buf, 0, sizeof(buf));
        assert_int_equal(
            tc_get_copy(f->c, it[i].k, strlen(it[i].k), buf, 5, NULL), TC_OK);
        assert_memory_equal(buf, v, 5);
        assert_int_equal(buf[5], 0);
        struct tc_item_info in;
        assert_int_equal(
            tc_get_copy(f->c, it[i].k, strlen(it[i].k), buf, sizeof(buf), &in),
            TC_OK);
        assert_true(in.fetched); /* set by the copies above */
        assert_int_equal(in.flags, it[i].flags);
        assert_int_equal(in.vlen, strlen(v));
    }
    tc_clock_set(T0 + 100); /* exp16's item expires */
    uint64_t expired = pstats(f->c).get_expired;
    assert_int_equal(tc_get_copy(f->c, "exp16", 5, buf, sizeof(buf), NULL),
                     TC_NOT_FOUND);
    assert_int_equal(pstats(f->c).get_expired, expired + 1);
    assert_int_equal(tc_get_copy(f->c, "exp32", 5, buf, sizeof(buf), NULL),
                     TC_OK);
    assert_int_equal(tc_flush_all(f->c, 0), TC_OK);
    uint64_t flushed = pstats(f->c).get_flushed;
    assert_int_equal(tc_get_copy(f->c, "plain", 5, buf, sizeof(buf), NULL),
                     TC_NOT_FOUND);
    assert_int_equal(pstats(f->c).get_flushed, flushed + 1);
    check_ok(f->c);
}

/* touch: in place when the item has exp32 (CAS and place unchanged), else
 * a rewrite that keeps the CAS; gat likewise. */
static void
test_touch(void **state)
{
    struct fx *f = *state;
    uint64_t cas_a, cas_b;

    assert_int_equal(store_s(f->c, TC_SET, "a", "aa", 5, 100, 0, &cas_a),
                     TC_OK);
    assert_int_equal(store_s(f->c, TC_SET, "b", "bb", 5, 0, 0, &cas_b), TC_OK);
    uint64_t dead0 = pstats(f->c).packed_bytes_dead;

    /* in place: no new copy */
    assert_int_equal(tc_touch(f->c, "a", 1, 500), TC_OK);
    struct tc_item_info in = check_str(f->c, "a", "aa");
    assert_int_equal(in.exptime, T0 + 500);
    assert_int_equal(in.cas, cas_a);
    assert_int_equal(in.flags, 5);
    STAT_EQ(pstats(f->c), packed_bytes_dead, dead0);
    assert_int_equal(tc_touch(f->c, "a", 1, 0), TC_OK);
    assert_int_equal(check_str(f->c, "a", "aa").exptime, 0);

    /* exp16 (no expiry yet, a young segment): in place too */
    assert_int_equal(tc_touch(f->c, "b", 1, 200), TC_OK);
    in = check_str(f->c, "b", "bb");
    assert_int_equal(in.exptime, T0 + 200);
    assert_int_equal(in.cas, cas_b);
    STAT_EQ(pstats(f->c), packed_bytes_dead, dead0);
    /* past exp16's reach (65,534 s from the segment's exp_base): a
     * rewrite with exp32, the CAS carried over */
    assert_int_equal(tc_touch(f->c, "b", 1, 100000), TC_OK);
    in = check_str(f->c, "b", "bb");
    assert_int_equal(in.exptime, T0 + 100000);
    assert_int_equal(in.cas, cas_b);
    assert_int_equal(in.flags, 5);
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items, 2);
    assert_true(s.packed_bytes_dead > dead0);
    /* a gets before and a cas after the rewrite still match */
    assert_int_equal(store_s(f->c, TC_CAS, "b", "b2", 5, 0, cas_b, NULL),
                     TC_OK);
    check_str(f->c, "b", "b2");

    /* gat past exp16's reach: served, then rewritten */
    assert_int_equal(store_s(f->c, TC_SET, "g", "gg", 0, 0, 0, &cas_a), TC_OK);
    uint64_t dead1 = pstats(f->c).packed_bytes_dead;
    struct got g;
    unsigned char buf[8];
    memset(&g, 0, sizeof(g));
    g.buf = buf;
    g.cap = sizeof(buf);
    assert_int_equal(tc_gat(f->c, "g", 1, 70000, got_fn, &g), TC_OK);
    assert_int_equal(g.len, 2);
    assert_int_equal(g.info.exptime, T0 + 70000);
    assert_true(pstats(f->c).packed_bytes_dead > dead1);
    in = check_str(f->c, "g", "gg");
    assert_int_equal(in.exptime, T0 + 70000);
    assert_int_equal(in.cas, cas_a);
    /* and back in place (exp32 takes any expiry) */
    dead1 = pstats(f->c).packed_bytes_dead;
    assert_int_equal(tc_gat(f->c, "g", 1, 50, got_fn, &g), TC_OK);
    assert_int_equal(check_str(f->c, "g", "gg").exptime, T0 + 50);
    STAT_EQ(pstats(f->c), packed_bytes_dead, dead1);
    tc_clock_set(T0 + 50);
    check_miss(f->c, "g");
    check_ok(f->c);
}

/* delete before the answer; a delete with the wrong CAS keeps it. */
static void
test_delete(void **state)
{
    struct fx *f = *state;
    uint64_t cas;
    assert_int_equal(store_s(f->c, TC_SET, "d", "dd", 0, 0, 0, &cas), TC_OK);
    assert_int_equal(tc_delete(f->c, "d", 1, cas + 1), TC_EXISTS);
    check_str(f->c, "d", "dd");
    assert_int_equal(tc_delete(f->c, "d", 1, cas), TC_OK);
    check_miss(f->c, "d");
    assert_int_equal(tc_delete(f->c, "d", 1, 0), TC_NOT_FOUND);
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items, 0);
    STAT_EQ(s, curr_items, 0);
    STAT_EQ(s, bytes, 0);
    STAT_EQ(s, packed_bytes_dead, 12);
    STAT_EQ(s, delete_hits, 1);
    check_ok(f->c);
}

/* append, prepend, incr and meta I rewrite a packed item into a slab. */
static void
test_rewrites_to_slab(void **state)
{
    struct fx *f = *state;
    uint64_t v = 0;
    puts_(f->c, "s", "mid");
    puts_(f->c, "n", "41");
    assert_int_equal(store_s(f->c, TC_APPEND, "s", "-end", 0, 0, 0, NULL),
                     TC_OK);
    assert_int_equal(store_s(f->c, TC_PREPEND, "s", "start-", 0, 0, 0, NULL),
                     TC_OK);
    check_str(f->c, "s", "start-mid-end");
    assert_int_equal(tc_incr(f->c, "n", 1, 1, &v, NULL), TC_OK);
    assert_int_equal(v, 42);
    check_str(f->c, "n", "42");
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items, 0);
    STAT_EQ(s, curr_items, 2);

    puts_(f->c, "i", "inv");
    assert_int_equal(tc_invalidate(f->c, "i", 1, 0, -1), TC_OK);
    assert_true(check_str(f->c, "i", "inv").stale);
    STAT_EQ(pstats(f->c), packed_items, 0);
    check_ok(f->c);
}

static bool
many_fn(void *arg, size_t i, const struct tc_item_info *info,
        const struct iovec *iov, int niov)
{
    char(*got)[16] = arg;
    (void)info;
    assert_int_equal(niov, 1);
    assert_true(iov[0].iov_len < 16);
    memcpy(got[i], iov[0].iov_base, iov[0].iov_len);
    got[i][iov[0].iov_len] = '\0';
    return true;
}

/* Batched gets, walk, and flush_all over packed and slab items. */
static void
test_many_walk_flush(void **state)
{
    struct fx *f = *state;
    char big[1500];
    memset(big, 'z', sizeof(big));
    puts_(f->c, "p1", "one");
    put(f->c, "s1", big, sizeof(big), 0, 0);
    puts_(f->c, "p2", "two");
    struct tc_key keys[] = {{"p1", 2}, {"s1", 2}, {"p2", 2}, {"no", 2}};
    int rcs[4];
    char got[4][16] = {{0}};
    /* s1 is longer than the buffer: its callback is not ours */
    tc_delete(f->c, "s1", 2, 0);
    assert_int_equal(tc_get_many(f->c, keys, 4, NULL, many_fn, got, rcs), 4);
    assert_int_equal(rcs[0], TC_OK);
    assert_int_equal(rcs[1], TC_NOT_FOUND);
    assert_int_equal(rcs[2], TC_OK);
    assert_int_equal(rcs[3], TC_NOT_FOUND);
    assert_string_equal(got[0], "one");
    assert_string_equal(got[2], "two");
    tc_prefetch(f->c, keys, 4);

    assert_int_equal(tc_flush_all(f->c, 0), TC_OK);
    check_miss(f->c, "p1");
    check_miss(f->c, "p2");
    /* stored after the flush, in the same open segment's successor */
    puts_(f->c, "p3", "three");
    check_str(f->c, "p3", "three");
    check_ok(f->c);
}

/* FIFO: a pool of a few pages filled many times over with small items
 * evicts whole segments, oldest first: what stays is a suffix of the
 * keys written, each with its own value. */
static void
test_fifo_eviction(void **state)
{
    struct fx *f = *state;
    f->cfg.mem_limit = 6 * MIB;
    fx_reopen(f);
    const unsigned total = 6u * 8455 * 3; /* about 3x the pages in items */
    char k[24], v[100];
    for (unsigned i = 0; i < total; i++) {
        snprintf(k, sizeof(k), "fifo%08u", i);
        memset(v, 'a' + (int)(i % 26), sizeof(v));
        memcpy(v, &i, sizeof(i));
        put(f->c, k, v, sizeof(v), 0, 0);
    }
    struct tc_stats s = pstats(f->c);
    assert_true(s.packed_segments_evicted >= 6);
    assert_true(s.evictions > 0);
    assert_int_equal(s.evictions, s.curr_items ? total - s.curr_items : 0);
    /* nothing was read before it was evicted */
    assert_int_equal(s.evicted_unfetched, s.evictions);
    assert_int_equal(s.curr_items, s.packed_items);
    assert_true(s.packed_segments <= 6);

    unsigned first = total, present = 0;
    for (unsigned i = 0; i < total; i++) {
        snprintf(k, sizeof(k), "fifo%08u", i);
        unsigned char buf[128];
        struct tc_item_info in;
        int rc = tc_get_copy(f->c, k, strlen(k), buf, sizeof(buf), &in);
        if (rc == TC_NOT_FOUND) {
            if (first != total)
                fail_msg("key %u missing after key %u was kept: not FIFO", i,
                         first);
            continue;
        }
        assert_int_equal(rc, TC_OK);
        if (first == total)
            first = i;
        unsigned got;
        memcpy(&got, buf, sizeof(got));
        assert_int_equal(got, i);
        assert_int_equal(buf[50], 'a' + (int)(i % 26));
        present++;
    }
    assert_int_equal(present, s.curr_items);
    assert_true(first > 0);
    check_ok(f->c);

    /* a large item still finds a page: a segment gives its page back */
    char big[4000];
    memset(big, 'L', sizeof(big));
    put(f->c, "large", big, sizeof(big), 0, 0);
    check_val(f->c, "large", big, sizeof(big));
    check_ok(f->c);
}

/* A pool shrink evicts the segments above its new limit (an open one
 * once its owner sealed it) and never discards a page that holds one. */
static void
test_shrink(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 34 * MIB;
    fx_reopen(f);
    char k[24], v[100];
    unsigned n = 24u * 8455; /* about 24 segments */
    for (unsigned i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "shr%08u", i);
        memset(v, 'a' + (int)(i % 26), sizeof(v));
        memcpy(v, &i, sizeof(i));
        put(f->c, k, v, sizeof(v), 0, 0);
    }
    struct tc_stats s = pstats(f->c);
    assert_true(s.packed_segments >= 20);
    assert_true(s.total_malloced >= 20 * MIB);
    int rc = tc_set_mem_limit(f->c, 8 * MIB);
    if (rc != 0 && rc != -EBUSY)
        fail_msg("tc_set_mem_limit(8 MiB): %d (%s)", rc, tc_errmsg());
    unsigned steps = 0;
    s = pstats(f->c);
    while (s.total_malloced > 8 * MIB && steps < 1000) {
        tc_thread_quiesce(f->c);
        tc_maintain(f->c);
        s = pstats(f->c);
        steps++;
    }
    assert_true(s.total_malloced <= 8 * MIB);
    assert_true(s.packed_segments <= 8);
    assert_true(s.curr_items > 0 && s.curr_items < n);
    /* what is left reads back whole */
    unsigned present = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned char buf[128];
        snprintf(k, sizeof(k), "shr%08u", i);
        if (tc_get_copy(f->c, k, strlen(k), buf, sizeof(buf), NULL) != TC_OK)
            continue;
        unsigned got;
        memcpy(&got, buf, sizeof(got));
        assert_int_equal(got, i);
        assert_int_equal(buf[99], 'a' + (int)(i % 26));
        present++;
    }
    assert_int_equal(present, s.curr_items);
    check_ok(f->c);
    puts_(f->c, "after", "shrink");
    check_str(f->c, "after", "shrink");
    check_ok(f->c);
}

/* Writes of a child that then dies (no close). */
static void
child_work(struct fx *f)
{
    char big[2000];
    memset(big, 'S', sizeof(big));
    puts_(f->c, "gone", "packed");
    puts_(f->c, "del", "packed");
    assert_int_equal(tc_delete(f->c, "del", 3, 0), TC_OK);
    /* slab first, then packed over it: neither may come back */
    put(f->c, "over", big, sizeof(big), 0, 0);
    puts_(f->c, "over", "new");
    /* packed first, then a slab value: the slab one comes back */
    puts_(f->c, "slab", "old");
    put(f->c, "slab", big, sizeof(big), 0, 0);
}

static void
check_after_restart(struct fx *f)
{
    char big[2000];
    memset(big, 'S', sizeof(big));
    check_str(f->c, "gone", "packed");
    check_miss(f->c, "del");
    check_str(f->c, "over", "new");
    check_val(f->c, "slab", big, sizeof(big));
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items, 2);
    STAT_EQ(s, curr_items, 3);
    STAT_EQ(s, packed_segments, 1);
    /* "over" carries a CAS of its own (cas64): its slab version's CAS
     * was above the segment's block */
    STAT_EQ(s, packed_bytes_live, (8 + 4 + 6 + 2) + (8 + 4 + 3 + 8 + 1));
    assert_true(s.packed_bytes_dead > 0); /* del, and "slab"'s old copy */
    check_ok(f->c);
    /* the store appends again, in a new segment */
    puts_(f->c, "gone", "again");
    check_str(f->c, "gone", "again");
    check_ok(f->c);
}

/* A crash (kill -9) and a clean stop: packed and slab items come back,
 * never a deleted or replaced one. */
static void
test_restart_keeps_packed(void **state)
{
    struct fx *f = *state;
    tc_close(f->c);
    f->c = NULL;
    unlink(f->path);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (tc_open(&f->cfg, &f->c) != 0)
            _exit(2);
        child_work(f);
        kill(getpid(), SIGKILL);
        _exit(3);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(tc_open(&f->cfg, &f->c), 0);
    check_after_restart(f);

    /* a clean stop of a pool that holds packed segments */
    tc_close(f->c);
    f->c = NULL;
    unlink(f->path);
    assert_int_equal(tc_open(&f->cfg, &f->c), 0);
    child_work(f);
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(tc_open(&f->cfg, &f->c), 0);
    check_after_restart(f);
}

/* Threads that set, get, delete and touch small keys in a pool a few
 * pages large: eviction, replacement and reads race; every value read is
 * the one some set of that key wrote (its key and length inside it). */
#define RACE_THREADS 4
#define RACE_OPS 60000
#define RACE_KEYS 30000

struct race {
    struct tc_cache *c;
    unsigned id;
    unsigned bad;
};

static void *
race_main(void *arg)
{
    struct race *r = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (r->id + 1);
    char k[24], v[200];
    unsigned char buf[256];
    tc_thread_register(r->c);
    for (unsigned i = 0; i < RACE_OPS; i++) {
        uint64_t x = rng_next(&rng);
        unsigned key = (unsigned)(x % RACE_KEYS);
        int klen = snprintf(k, sizeof(k), "race%u", key);
        unsigned op = (unsigned)(x >> 32) % 10;
        if (op < 5) {
            /* value: key number, its length, then a filler */
            uint32_t vlen = 9 + (uint32_t)((x >> 40) % 180);
            memset(v, 'a' + (int)(key % 26), vlen);
            memcpy(v, &key, 4);
            memcpy(v + 4, &vlen, 4);
            tc_set(r->c, k, (size_t)klen, v, vlen, key & 31,
                   (x >> 50) & 1 ? 1000 : 0);
        } else if (op < 8) {
            struct tc_item_info in;
            if (tc_get_copy(r->c, k, (size_t)klen, buf, sizeof(buf), &in) !=
                TC_OK)
                continue;
            uint32_t got, vlen;
            memcpy(&got, buf, 4);
            memcpy(&vlen, buf + 4, 4);
            if (got != key || vlen != in.vlen || in.flags != (key & 31) ||
                buf[vlen - 1] != 'a' + (int)(key % 26))
                r->bad++;
        } else if (op == 8) {
            tc_delete(r->c, k, (size_t)klen, 0);
        } else {
            tc_touch(r->c, k, (size_t)klen, 2000);
        }
    }
    tc_thread_unregister(r->c);
    return NULL;
}

static void
test_threads_race(void **state)
{
    struct fx *f = *state;
    f->cfg.mem_limit = 6 * MIB;
    fx_reopen(f);
    pthread_t th[RACE_THREADS];
    struct race r[RACE_THREADS];
    for (unsigned i = 0; i < RACE_THREADS; i++) {
        r[i] = (struct race){f->c, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, race_main, &r[i]), 0);
    }
    for (unsigned i = 0; i < RACE_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(r[i].bad, 0);
    }
    struct tc_stats s = pstats(f->c);
    assert_true(s.packed_segments_evicted > 0);
    /* a set that found every segment open elsewhere went to a slab */
    assert_true(s.curr_items >= s.packed_items);
    check_ok(f->c);
}

/* Many threads over a pool of 8 pages: open segments stay under the cap
 * (1/8 of the pages), the rest are sealed and evictable, so every set
 * answers OK (a set past the cap goes to a slab), never out of memory. */
#define SMALL_THREADS 6
#define SMALL_OPS 40000

static _Atomic unsigned small_done;

struct small {
    struct tc_cache *c;
    unsigned id;
    unsigned failed;
    int last_rc;
};

static void *
small_main(void *arg)
{
    struct small *r = arg;
    char k[32], v[120];
    tc_thread_register(r->c);
    for (unsigned i = 0; i < SMALL_OPS; i++) {
        int klen = snprintf(k, sizeof(k), "sm%u_%u", r->id, i);
        memset(v, 'a' + (int)(i % 26), sizeof(v));
        /* half expire in a second: the sweep races the writers */
        int rc = tc_set(r->c, k, (size_t)klen, v, 60 + i % 60, 0, i & 1);
        if (rc != TC_OK) {
            r->failed++;
            r->last_rc = rc;
        }
    }
    tc_thread_unregister(r->c);
    atomic_fetch_add(&small_done, 1);
    return NULL;
}

static void
test_small_pool_threads(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 8 * MIB;
    fx_reopen(f);
    pthread_t th[SMALL_THREADS];
    struct small r[SMALL_THREADS];
    for (unsigned i = 0; i < SMALL_THREADS; i++) {
        r[i] = (struct small){f->c, i, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, small_main, &r[i]), 0);
    }
    /* meanwhile: time moves and the sweep runs (it unlinks what the
     * writers' evictions also walk); bounded, the threads' end or not */
    for (unsigned step = 0;
         step < 100000 && atomic_load(&small_done) < SMALL_THREADS; step++) {
        tc_clock_advance(1);
        tc_maintain(f->c);
    }
    /* about to block: what the sweep freed goes back (a page move waits
     * for a sleeping thread's deferred frees, as for a server worker's) */
    tc_thread_quiesce(f->c);
    for (unsigned i = 0; i < SMALL_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    atomic_store(&small_done, 0);
    for (unsigned i = 0; i < SMALL_THREADS; i++)
        if (r[i].failed)
            fail_msg("thread %u: %u sets failed, the last with %d", i,
                     r[i].failed, r[i].last_rc);
    struct tc_stats s = pstats(f->c);
    print_message("swept %" PRIu64 ", evicted %" PRIu64 " segments\n",
                  s.sweep_reclaimed, s.packed_segments_evicted);
    assert_true(s.packed_segments_evicted > 0);
    assert_true(s.packed_segments_open <= 1); /* 8 pages: a cap of 1 */
    /* slab stores may have evicted every segment since: no count of
     * packed items is certain */
    assert_true(s.curr_items >= s.packed_items);
    check_ok(f->c);
    puts_(f->c, "after", "threads");
    check_str(f->c, "after", "threads");
}

/* A delayed flush that the set itself finds due (the first command at its
 * time) takes effect before the set's span is reserved: the segment open
 * from before is sealed and the new item, in a new one, is not flushed. */
static void
test_flush_delay_then_set(void **state)
{
    struct fx *f = *state;
    puts_(f->c, "a", "1");
    assert_int_equal(tc_flush_all(f->c, 10), 0);
    tc_clock_advance(10);
    puts_(f->c, "b", "2");
    check_miss(f->c, "a");
    check_str(f->c, "b", "2");
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items, 1);
    STAT_EQ(s, packed_segments_open, 1);
    assert_true(s.packed_segments >= 2);
    check_ok(f->c);
}

/* Eviction off (-M): a full store answers -ENOMEM and keeps every item
 * (no segment of live items goes, merged or whole), as the slabs do
 * (test_engine_memory's test_no_evict_enomem); only expired segments may
 * go. */
static void
test_no_evict_enomem(void **state)
{
    struct fx *f = *state;
    f->cfg.pool_size = 8 * MIB;
    f->cfg.evict = false;
    fx_reopen(f);
    const unsigned total = 3u * 8 * 1024; /* 3x the pool in 1 KiB items */
    char k[24], v[900];
    unsigned stored = 0, nomem = 0;
    for (unsigned i = 0; i < total && nomem < 100; i++) {
        snprintf(k, sizeof(k), "ne%07u", i);
        memset(v, 'a' + (int)(i % 26), sizeof(v));
        memcpy(v, &i, sizeof(i));
        int rc = tc_set(f->c, k, strlen(k), v, sizeof(v), 0, 0);
        if (rc == -ENOMEM) {
            nomem++;
            continue;
        }
        assert_int_equal(rc, TC_OK);
        if (nomem > 0)
            fail_msg("store %u succeeded after %u -ENOMEM", i, nomem);
        stored++;
    }
    struct tc_stats s = pstats(f->c);
    assert_true(nomem > 0);
    assert_true(s.packed_items > 1000);
    STAT_EQ(s, evictions, 0);
    STAT_EQ(s, packed_segments_evicted, 0);
    STAT_EQ(s, curr_items, stored);
    for (unsigned i = 0; i < stored; i++) {
        snprintf(k, sizeof(k), "ne%07u", i);
        unsigned char buf[sizeof(v)];
        assert_int_equal(
            tc_get_copy(f->c, k, strlen(k), buf, sizeof(buf), NULL), TC_OK);
        unsigned got;
        memcpy(&got, buf, sizeof(got));
        assert_int_equal(got, i);
    }
    check_ok(f->c);
}

/* On by default (1024, slice 8); 0 turns it off: nothing is packed. */
static void
test_default_and_off(void **state)
{
    struct fx *f = *state;
    f->cfg.packed_item_max = 0;
    fx_reopen(f);
    puts_(f->c, "a", "b");
    struct tc_stats s = pstats(f->c);
    STAT_EQ(s, packed_items, 0);
    STAT_EQ(s, packed_segments, 0);
    STAT_EQ(s, curr_items, 1);
    struct tc_config d;
    tc_config_init(&d);
    assert_int_equal(d.packed_item_max, 1024);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        PTEST(test_small_packed_large_slab),
        PTEST(test_cas_modes),
        PTEST(test_cas_grows_per_key),
        PTEST(test_cas_grows_across_segments),
        PTEST(test_flags_and_expiry),
        PTEST(test_copy_no_info),
        PTEST(test_touch),
        PTEST(test_delete),
        PTEST(test_rewrites_to_slab),
        PTEST(test_many_walk_flush),
        PTEST(test_fifo_eviction),
        PTEST(test_no_evict_enomem),
        PTEST(test_restart_keeps_packed),
        PTEST(test_threads_race),
        PTEST(test_shrink),
        PTEST(test_small_pool_threads),
        PTEST(test_flush_delay_then_set),
        PTEST(test_default_and_off),
    };
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("packed", tests, NULL, NULL);
}

/*
 * The engine's meta-protocol extensions through the public API: tc_get_ex
 * (fetched, stale, win, vivify, recache, no_bump), tc_store_ex (CAS check in
 * any mode, explicit CAS, invalidate, vivify for append), tc_invalidate and
 * tc_arith_ex; and the calls a server makes beside them (tc_drop,
 * tc_store_refused, tc_thread_quiesce).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "src/tiercache.h"

#define NOW 1700000000u

struct fx {
    char path[128];
    struct tc_cache *c;
};

/* The cache with packed_item_max as given (UINT32_MAX: the default). */
static int
setup_store(void **state, uint32_t packed_max)
{
    static struct fx f;
    struct tc_config cfg;

    snprintf(f.path, sizeof(f.path), "/dev/shm/tc-test-meta-%d.pool",
             (int)getpid());
    tc_config_init(&cfg);
    cfg.pool_path = f.path;
    cfg.pool_size = 16u << 20;
    cfg.background = false;
    if (packed_max != UINT32_MAX)
        cfg.packed_item_max = packed_max;
    tc_clock_set(NOW);
    if (tc_open(&cfg, &f.c) != 0) {
        fprintf(stderr, "tc_open: %s\n", tc_errmsg());
        return -1;
    }
    *state = &f;
    return 0;
}

static int
setup(void **state)
{
    return setup_store(state, UINT32_MAX);
}

/* The slab store named (packed_item_max 0): tests of slab internals
 * (a thread's stash of chunks) and of the slabs' exact last access (a
 * packed item's is approximate, doc/design/small-items.md). */
static int
setup_slab(void **state)
{
    return setup_store(state, 0);
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    assert_int_equal(tc_check(f->c), 0);
    tc_close(f->c);
    unlink(f->path);
    tc_clock_set(0);
    return 0;
}

struct seen {
    int calls;
    struct tc_item_info info;
    char val[64];
};

static void
record(void *arg, const struct tc_item_info *info, const struct iovec *iov,
       int niov)
{
    struct seen *s = arg;
    size_t at = 0;
    s->calls++;
    s->info = *info;
    for (int i = 0; i < niov && at < sizeof(s->val) - 1; i++) {
        size_t n = iov[i].iov_len;
        if (n > sizeof(s->val) - 1 - at)
            n = sizeof(s->val) - 1 - at;
        memcpy(s->val + at, iov[i].iov_base, n);
        at += n;
    }
    s->val[at] = 0;
}

static int
get(struct tc_cache *c, const char *k, const struct tc_get_opts *o,
    struct seen *s)
{
    memset(s, 0, sizeof(*s));
    return tc_get_ex(c, k, strlen(k), o, record, s);
}

static void
test_fetched_and_no_bump(void **state)
{
    struct fx *f = *state;
    struct tc_get_opts plain = {0}, nobump = {.no_bump = true};
    struct seen s;

    assert_int_equal(tc_set(f->c, "k", 1, "v", 1, 7, 0), TC_OK);
    assert_int_equal(get(f->c, "k", &nobump, &s), TC_OK);
    assert_false(s.info.fetched);
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_false(s.info.fetched); /* the no_bump read did not count */
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_true(s.info.fetched);
    assert_int_equal(s.info.flags, 7);
    assert_int_equal(s.info.win, TC_WIN_NONE);
    assert_false(s.info.stale);
    /* a new value starts unfetched */
    assert_int_equal(tc_set(f->c, "k", 1, "w", 1, 7, 0), TC_OK);
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_false(s.info.fetched);
}

static void
test_invalidate_then_win(void **state)
{
    struct fx *f = *state;
    struct tc_get_opts plain = {0};
    struct seen s;
    uint64_t cas;

    assert_int_equal(tc_invalidate(f->c, "nokey", 5, 0, -1), TC_NOT_FOUND);
    assert_int_equal(tc_store(f->c, TC_SET, "k", 1, "old", 3, 1, 100, 0, &cas),
                     TC_OK);
    assert_int_equal(tc_invalidate(f->c, "k", 1, cas + 1, -1), TC_EXISTS);
    assert_int_equal(tc_invalidate(f->c, "k", 1, cas, 30), TC_OK);

    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_true(s.info.stale);
    assert_int_equal(s.info.win, TC_WIN_YOU);
    assert_string_equal(s.val, "old");
    assert_true(s.info.cas > cas); /* invalidation bumps the CAS */
    assert_int_equal(s.info.exptime, NOW + 30);
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_int_equal(s.info.win, TC_WIN_TAKEN);

    /* the winner's set replaces it with a fresh item */
    assert_int_equal(tc_set(f->c, "k", 1, "new", 3, 1, 0), TC_OK);
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_false(s.info.stale);
    assert_int_equal(s.info.win, TC_WIN_NONE);
}

static void
test_vivify(void **state)
{
    struct fx *f = *state;
    bool made = false;
    struct tc_get_opts o = {
        .vivify = true, .vivify_exptime = 30, .vivified = &made};
    struct seen s;

    assert_int_equal(get(f->c, "v", &o, &s), TC_NOT_FOUND);
    assert_true(made);
    assert_int_equal(s.calls, 0);
    /* the placeholder is an empty hit whose win is taken */
    assert_int_equal(get(f->c, "v", &o, &s), TC_OK);
    assert_false(made);
    assert_int_equal(s.info.vlen, 0);
    assert_int_equal(s.info.win, TC_WIN_TAKEN);
    assert_int_equal(s.info.exptime, NOW + 30);
    struct tc_stats st;
    tc_stats(f->c, &st);
    assert_int_equal(st.curr_items, 1);
}

static void
test_recache(void **state)
{
    struct fx *f = *state;
    struct tc_get_opts o = {.recache_below = 30};
    struct seen s;

    assert_int_equal(tc_set(f->c, "r", 1, "x", 1, 0, 100), TC_OK);
    assert_int_equal(tc_set(f->c, "forever", 7, "x", 1, 0, 0), TC_OK);
    assert_int_equal(get(f->c, "r", &o, &s), TC_OK);
    assert_int_equal(s.info.win, TC_WIN_NONE); /* 100 s left */
    assert_int_equal(get(f->c, "forever", &o, &s), TC_OK);
    assert_int_equal(s.info.win, TC_WIN_NONE); /* no TTL, never due */
    tc_clock_advance(75);
    assert_int_equal(get(f->c, "r", &o, &s), TC_OK);
    assert_int_equal(s.info.win, TC_WIN_YOU); /* 25 s left */
    assert_int_equal(get(f->c, "r", &o, &s), TC_OK);
    assert_int_equal(s.info.win, TC_WIN_TAKEN);
}

static void
test_store_cas_check_any_mode(void **state)
{
    struct fx *f = *state;
    struct tc_store_opts o = {.cas_check = true};
    uint64_t cas, cas2;

    o.cas_in = 5;
    assert_int_equal(tc_store_ex(f->c, TC_SET, "c", 1, "a", 1, 0, 0, &o, NULL),
                     TC_NOT_FOUND);
    assert_int_equal(tc_store(f->c, TC_SET, "c", 1, "a", 1, 0, 0, 0, &cas),
                     TC_OK);
    o.cas_in = cas + 100;
    assert_int_equal(
        tc_store_ex(f->c, TC_APPEND, "c", 1, "b", 1, 0, 0, &o, NULL),
        TC_EXISTS);
    o.cas_in = cas;
    assert_int_equal(
        tc_store_ex(f->c, TC_APPEND, "c", 1, "b", 1, 0, 0, &o, &cas2), TC_OK);
    assert_true(cas2 != cas);
    o.cas_in = cas2;
    assert_int_equal(
        tc_store_ex(f->c, TC_REPLACE, "c", 1, "z", 1, 0, 0, &o, NULL), TC_OK);
    struct seen s;
    struct tc_get_opts plain = {0};
    assert_int_equal(get(f->c, "c", &plain, &s), TC_OK);
    assert_string_equal(s.val, "z");
}

static void
test_explicit_cas(void **state)
{
    struct fx *f = *state;
    struct tc_store_opts o = {.cas_new = 1000000};
    uint64_t cas, cas2;

    assert_int_equal(tc_store_ex(f->c, TC_SET, "e", 1, "a", 1, 0, 0, &o, &cas),
                     TC_OK);
    assert_int_equal(cas, 1000000);
    /* another key's CAS is unique; it is not above (a packed item's
     * derives from its segment's block, doc/design/small-items.md) */
    assert_int_equal(tc_store(f->c, TC_SET, "f", 1, "a", 1, 0, 0, 0, &cas),
                     TC_OK);
    assert_true(cas != 1000000);
    /* the key's own CAS only grows: the next is above the client's */
    assert_int_equal(
        tc_store(f->c, TC_CAS, "e", 1, "b", 1, 0, 0, 1000000, &cas), TC_OK);
    assert_true(cas > 1000000);
    assert_int_equal(tc_store(f->c, TC_SET, "e", 1, "c", 1, 0, 0, 0, &cas2),
                     TC_OK);
    assert_true(cas2 > cas);
}

/* A client's CAS below the flush watermark is not flushed: flush_all
 * covers what was stored before it (the items' store sequence), whatever
 * CAS a later store was given. */
static void
test_explicit_cas_after_flush(void **state)
{
    struct fx *f = *state;
    struct tc_store_opts o = {.cas_new = 2};
    struct tc_get_opts plain = {0};
    struct seen s;
    uint64_t cas;

    for (int i = 0; i < 5; i++)
        assert_int_equal(tc_store(f->c, TC_SET, "g", 1, "a", 1, 0, 0, 0, &cas),
                         TC_OK);
    assert_true(cas > 2);
    assert_int_equal(tc_flush_all(f->c, 0), 0);
    assert_int_equal(get(f->c, "g", &plain, &s), TC_NOT_FOUND);
    assert_int_equal(tc_store_ex(f->c, TC_SET, "g", 1, "b", 1, 3, 0, &o, &cas),
                     TC_OK);
    assert_int_equal(cas, 2);
    assert_int_equal(get(f->c, "g", &plain, &s), TC_OK);
    assert_string_equal(s.val, "b");
    assert_int_equal(s.info.cas, 2);
    assert_int_equal(s.info.flags, 3);
}

static void
test_store_invalidate_mode(void **state)
{
    struct fx *f = *state;
    uint64_t cas;
    struct seen s;
    struct tc_get_opts plain = {0};

    assert_int_equal(tc_store(f->c, TC_SET, "i", 1, "a", 1, 0, 0, 0, &cas),
                     TC_OK);
    /* an older CAS with invalidate stores the value marked stale */
    struct tc_store_opts o = {
        .cas_check = true, .cas_in = cas - 1, .invalidate = true};
    assert_int_equal(tc_store_ex(f->c, TC_SET, "i", 1, "b", 1, 0, 0, &o, NULL),
                     TC_OK);
    assert_int_equal(get(f->c, "i", &plain, &s), TC_OK);
    assert_string_equal(s.val, "b");
    assert_true(s.info.stale);
    /* a newer CAS than the item's is refused */
    o.cas_in = s.info.cas + 10;
    assert_int_equal(tc_store_ex(f->c, TC_SET, "i", 1, "c", 1, 0, 0, &o, NULL),
                     TC_EXISTS);
    /* the matching CAS stores a fresh item */
    o.cas_in = s.info.cas;
    assert_int_equal(tc_store_ex(f->c, TC_SET, "i", 1, "d", 1, 0, 0, &o, NULL),
                     TC_OK);
    assert_int_equal(get(f->c, "i", &plain, &s), TC_OK);
    assert_false(s.info.stale);
}

/* memcached's serve-stale sequence (its t/metaget.t): md I T30 marks the item
 * stale with a 30 s TTL; the first mg wins (W X), the next is told the token
 * went out (Z X); ms I with an older CAS stores the value still stale, the
 * win token still handed out and the TTL left at 30 s (not the store's 90);
 * the winner's ms with the current CAS stores a fresh item with its TTL. */
static void
test_stale_store_keeps_win_and_ttl(void **state)
{
    struct fx *f = *state;
    struct tc_get_opts plain = {0};
    struct seen s;
    uint64_t cas;

    assert_int_equal(tc_store(f->c, TC_SET, "t", 1, "moo", 3, 0, 0, 0, &cas),
                     TC_OK);
    assert_int_equal(tc_invalidate(f->c, "t", 1, 0, 30), TC_OK);
    assert_int_equal(get(f->c, "t", &plain, &s), TC_OK);
    assert_true(s.info.stale);
    assert_int_equal(s.info.win, TC_WIN_YOU);
    assert_int_equal(s.info.exptime, NOW + 30);

    /* without I an older CAS is refused */
    struct tc_store_opts o = {.cas_check = true, .cas_in = 1};
    assert_int_equal(tc_store_ex(f->c, TC_SET, "t", 1, "f", 1, 0, 90, &o, NULL),
                     TC_EXISTS);
    o.invalidate = true;
    assert_int_equal(tc_store_ex(f->c, TC_SET, "t", 1, "f", 1, 0, 90, &o, NULL),
                     TC_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(get(f->c, "t", &plain, &s), TC_OK);
        assert_string_equal(s.val, "f");
        assert_true(s.info.stale);
        assert_int_equal(s.info.win, TC_WIN_TAKEN);
        assert_int_equal(s.info.exptime, NOW + 30);
    }

    /* the current CAS stores a fresh item: no stale mark, no win, new TTL */
    o.invalidate = false;
    o.cas_in = s.info.cas;
    assert_int_equal(tc_store_ex(f->c, TC_SET, "t", 1, "g", 1, 0, 90, &o, &cas),
                     TC_OK);
    assert_true(cas != o.cas_in);
    assert_int_equal(get(f->c, "t", &plain, &s), TC_OK);
    assert_string_equal(s.val, "g");
    assert_false(s.info.stale);
    assert_int_equal(s.info.win, TC_WIN_NONE);
    assert_int_equal(s.info.exptime, NOW + 90);
}

static void
test_append_vivify(void **state)
{
    struct fx *f = *state;
    struct tc_store_opts o = {.vivify = true, .vivify_exptime = 50};
    struct seen s;
    struct tc_get_opts plain = {0};

    assert_int_equal(tc_store(f->c, TC_APPEND, "a", 1, "x", 1, 0, 0, 0, NULL),
                     TC_NOT_STORED);
    assert_int_equal(
        tc_store_ex(f->c, TC_APPEND, "a", 1, "x", 1, 0, 0, &o, NULL), TC_OK);
    assert_int_equal(
        tc_store_ex(f->c, TC_APPEND, "a", 1, "y", 1, 0, 0, &o, NULL), TC_OK);
    assert_int_equal(get(f->c, "a", &plain, &s), TC_OK);
    assert_string_equal(s.val, "xy");
    assert_int_equal(s.info.exptime, NOW + 50);
}

static void
test_arith_ex(void **state)
{
    struct fx *f = *state;
    struct tc_arith_opts o = {
        .vivify = true, .initial = 42, .vivify_exptime = 60};
    struct tc_item_info info;
    uint64_t v;

    assert_int_equal(tc_arith_ex(f->c, "n", 1, true, 5, NULL, &v, NULL),
                     TC_NOT_FOUND);
    assert_int_equal(tc_arith_ex(f->c, "n", 1, true, 5, &o, &v, &info), TC_OK);
    assert_int_equal(v, 42); /* created with the initial value */
    assert_int_equal(info.exptime, NOW + 60);
    assert_int_equal(tc_arith_ex(f->c, "n", 1, true, 5, &o, &v, &info), TC_OK);
    assert_int_equal(v, 47);
    struct tc_arith_opts c = {.cas_in = info.cas + 1};
    assert_int_equal(tc_arith_ex(f->c, "n", 1, false, 1, &c, &v, NULL),
                     TC_EXISTS);
    c.cas_in = info.cas;
    c.touch = true;
    c.exptime = 10;
    assert_int_equal(tc_arith_ex(f->c, "n", 1, false, 50, &c, &v, &info),
                     TC_OK);
    assert_int_equal(v, 0);
    assert_int_equal(info.exptime, NOW + 10);
}

/* total_items counts items linked as memcached counts them: an incr whose
 * result fits the old value is rewritten in place there (no new item); one
 * that grows the value is a new item */
static void
test_total_items_incr(void **state)
{
    struct fx *f = *state;
    struct tc_stats st;
    uint64_t v;

    assert_int_equal(tc_set(f->c, "n", 1, "10", 2, 0, 0), TC_OK);
    tc_stats(f->c, &st);
    assert_int_equal(st.total_items, 1);
    assert_int_equal(tc_incr(f->c, "n", 1, 5, &v, NULL), TC_OK);
    assert_int_equal(tc_decr(f->c, "n", 1, 9, &v, NULL), TC_OK);
    tc_stats(f->c, &st);
    assert_int_equal(st.total_items, 1);
    assert_int_equal(tc_incr(f->c, "n", 1, 1000, &v, NULL), TC_OK);
    assert_int_equal(v, 1006);
    tc_stats(f->c, &st);
    assert_int_equal(st.total_items, 2);
}

static void
test_drop_and_refused(void **state)
{
    struct fx *f = *state;
    struct tc_stats st;

    assert_int_equal(tc_set(f->c, "d", 1, "v", 1, 0, 0), TC_OK);
    assert_int_equal(tc_drop(f->c, "d", 1), TC_OK);
    assert_int_equal(tc_drop(f->c, "d", 1), TC_NOT_FOUND);
    assert_int_equal(tc_set(f->c, "d", 1, "v", 1, 0, 0), TC_OK);
    tc_store_refused(f->c, "d", 1, true);
    assert_int_equal(tc_get_copy(f->c, "d", 1, NULL, 0, NULL), TC_NOT_FOUND);
    assert_int_equal(tc_set(f->c, "e", 1, "v", 1, 0, 0), TC_OK);
    tc_store_refused(f->c, "e", 1, false); /* not a set: the value stays */
    assert_int_equal(tc_get_copy(f->c, "e", 1, NULL, 0, NULL), TC_OK);
    tc_stats(f->c, &st);
    assert_int_equal(st.delete_hits + st.delete_misses, 0);
    assert_int_equal(st.store_too_large, 2);
    assert_int_equal(st.curr_items, 1);
}

/* Free chunks the class holds (not counting thread stashes). */
static uint64_t
class_free(struct tc_cache *c, int cls)
{
    struct tc_slab_stats ss;
    assert_int_equal(tc_slab_stats(c, cls, &ss), 0);
    return ss.free_chunks;
}

static void
test_thread_quiesce(void **state)
{
    struct fx *f = *state;
    int cls = -1;

    /* the first store takes a batch of chunks into this thread's stash */
    assert_int_equal(tc_set(f->c, "q", 1, "v", 1, 0, 0), TC_OK);
    for (int i = 0; i < tc_slab_nclasses(f->c) && cls < 0; i++) {
        struct tc_slab_stats ss;
        tc_slab_stats(f->c, i, &ss);
        if (ss.used_chunks)
            cls = i;
    }
    assert_true(cls >= 0);
    uint64_t before = class_free(f->c, cls);
    tc_thread_quiesce(f->c);
    uint64_t after = class_free(f->c, cls);
    /* the stash went back: everything but the one live item is free */
    assert_true(after > before);
    struct tc_slab_stats ss;
    tc_slab_stats(f->c, cls, &ss);
    assert_int_equal(after, ss.total_chunks - 1);
}

/* last_access (meta l, me la=): seconds since the last store or read hit
 * before this read, on the fake clock; no_bump reads and misses leave it;
 * touch and stores reset it; past the cap it stays at the cap, also across
 * the 16-bit wrap once tc_maintain has rebased. */
static void
test_last_access(void **state)
{
    struct fx *f = *state;
    struct tc_get_opts plain = {0}, nobump = {.no_bump = true};
    struct seen s;

    assert_int_equal(tc_set(f->c, "k", 1, "v", 1, 0, 0), TC_OK);
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_int_equal(s.info.last_access, 0);
    tc_clock_advance(5);
    assert_int_equal(get(f->c, "k", &nobump, &s), TC_OK);
    assert_int_equal(s.info.last_access, 5);
    tc_clock_advance(2);
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_int_equal(s.info.last_access, 7); /* no_bump did not reset it */
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_int_equal(s.info.last_access, 0); /* the read before did */
    tc_clock_advance(3);
    assert_int_equal(tc_touch(f->c, "k", 1, 0), TC_OK);
    assert_int_equal(get(f->c, "k", &nobump, &s), TC_OK);
    assert_int_equal(s.info.last_access, 0);
    tc_clock_advance(4);
    assert_int_equal(get(f->c, "nope", &plain, &s), TC_NOT_FOUND);
    assert_int_equal(tc_set(f->c, "k2", 2, "w", 1, 0, 0), TC_OK);
    assert_int_equal(get(f->c, "k", &nobump, &s), TC_OK);
    assert_int_equal(s.info.last_access, 4); /* others' traffic: no change */
    assert_int_equal(tc_set(f->c, "k", 1, "x", 1, 0, 0), TC_OK);
    assert_int_equal(get(f->c, "k", &nobump, &s), TC_OK);
    assert_int_equal(s.info.last_access, 0);
    /* an incr stores a new value: an access */
    assert_int_equal(tc_set(f->c, "n", 1, "1", 1, 0, 0), TC_OK);
    tc_clock_advance(9);
    uint64_t v;
    assert_int_equal(tc_incr(f->c, "n", 1, 1, &v, NULL), TC_OK);
    assert_int_equal(get(f->c, "n", &nobump, &s), TC_OK);
    assert_int_equal(s.info.last_access, 0);

    /* hours later (k was last stored at NOW + 14): exact below the cap,
     * then the cap; with tc_maintain rebasing every 5 minutes, 2^13 + 10 s
     * (the time's wrap) after the store it still reads as the cap, not as
     * a wrapped 10 s */
    const uint32_t k_at = NOW + 14;
    assert_true(tc_maintain(f->c) >= 0); /* the first call rebases */
    tc_clock_set(k_at + TC_LAST_ACCESS_CAP - 1);
    assert_int_equal(get(f->c, "k", &nobump, &s), TC_OK);
    assert_int_equal(s.info.last_access, TC_LAST_ACCESS_CAP - 1);
    tc_clock_set(k_at + TC_LAST_ACCESS_CAP + 100);
    assert_true(tc_maintain(f->c) >= 0);
    assert_int_equal(get(f->c, "k", &nobump, &s), TC_OK);
    assert_int_equal(s.info.last_access, TC_LAST_ACCESS_CAP);
    tc_clock_set(k_at + TC_LAST_ACCESS_CAP + 500);
    assert_true(tc_maintain(f->c) >= 0);
    tc_clock_set(k_at + 8192 + 10);
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_int_equal(s.info.last_access, TC_LAST_ACCESS_CAP);
    assert_int_equal(get(f->c, "k", &plain, &s), TC_OK);
    assert_int_equal(s.info.last_access, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fetched_and_no_bump, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_invalidate_then_win, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_vivify, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_cas_check_any_mode, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_explicit_cas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_explicit_cas_after_flush, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_invalidate_mode, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stale_store_keeps_win_and_ttl,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_vivify, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arith_ex, setup, teardown),
        cmocka_unit_test_setup_teardown(test_total_items_incr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_and_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_quiesce, setup_slab,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_last_access, setup_slab, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests for alloc/slab.c's per-chunk last-access times (meta l, me
 * la=): ages, the 2 h cap, the 13-bit wrap, the rebase and its tick, a
 * rebase racing with a thread that sets times, the time sharing one 16-bit
 * word with the reference, fetched and win bits (neither disturbs the
 * other, also under concurrency), and slab_touch / slab_fresh (the engine's
 * one-call read hit and store). The threaded tests run under TSan with the
 * rest of the unit suite. Split from test_slab.c, which tests the allocator
 * itself, and shares their fixture (slab_fx.h).
 */
#include "alloc/slab.h"

#include "alloc/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "slab_fx.h"

static void
test_atime(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    const uint32_t t0 = 1700000000u;
    uint64_t a = take1(f, 0), b = take1(f, 0), big = take1(f, 5);

    slab_atime_set(f->slab, a, t0);
    slab_atime_set(f->slab, b, t0 + 7);
    slab_atime_set(f->slab, big, t0 + 1);
    assert_int_equal(slab_atime_age(f->slab, a, t0), 0);
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 5), 5);
    assert_int_equal(slab_atime_age(f->slab, b, t0 + 10), 3);
    assert_int_equal(slab_atime_age(f->slab, big, t0 + 10), 9);
    assert_int_equal(slab_atime_age(f->slab, a, t0 + SLAB_ATIME_CAP - 1),
                     SLAB_ATIME_CAP - 1);
    assert_int_equal(slab_atime_age(f->slab, a, t0 + SLAB_ATIME_CAP + 9),
                     SLAB_ATIME_CAP);
    /* a free page has no times: "as old as it gets" */
    assert_int_equal(slab_atime_age(f->slab, 3ull * POOL_PAGE_SIZE, t0),
                     SLAB_ATIME_CAP);

    slab_atime_copy(f->slab, b, a);
    assert_int_equal(slab_atime_age(f->slab, b, t0 + 5), 5);

    /* without a rebase, 2^13 + 4 s later the time reads as 4 s old */
    uint32_t late = t0 + SLAB_ATIME_WRAP + 4;
    assert_int_equal(slab_atime_age(f->slab, a, late), 4);
    /* a rebase within the cap and the margin clamps a and b (both at t0)
     * and nothing fresher */
    slab_atime_set(f->slab, big, t0 + SLAB_ATIME_CAP);
    assert_true(slab_atime_rebase(f->slab, t0 + SLAB_ATIME_CAP + 100) >= 2);
    assert_int_equal(slab_atime_age(f->slab, a, t0 + SLAB_ATIME_CAP + 100),
                     SLAB_ATIME_CAP);
    assert_int_equal(slab_atime_age(f->slab, big, t0 + SLAB_ATIME_CAP + 100),
                     100);
    /* one more rebase before the wrap keeps them at the cap */
    assert_true(slab_atime_rebase(f->slab, t0 + SLAB_ATIME_CAP + 400) >= 2);
    assert_int_equal(slab_atime_age(f->slab, a, late), SLAB_ATIME_CAP);
    assert_int_equal(slab_atime_age(f->slab, b, late), SLAB_ATIME_CAP);
    assert_int_equal(slab_atime_age(f->slab, big, late),
                     SLAB_ATIME_WRAP + 4 - SLAB_ATIME_CAP);

    /* the tick: runs at once, then once per period */
    assert_true(slab_atime_tick(f->slab, t0));
    assert_false(slab_atime_tick(f->slab, t0 + 1));
    assert_false(slab_atime_tick(f->slab, t0 + SLAB_ATIME_PERIOD - 1));
    assert_true(slab_atime_tick(f->slab, t0 + SLAB_ATIME_PERIOD));
    /* a clock that went back by more than a period runs it too */
    assert_true(slab_atime_tick(f->slab, t0 - 2 * SLAB_ATIME_PERIOD));
    assert_int_equal(slab_check(f->slab), 0);
}

struct atime_writer {
    struct slab *slab;
    uint64_t off[4];
    uint32_t now;
};

/* Sets the chunks' times while the main thread rebases (TSan checks the
 * accesses). */
static void *
atime_writer_main(void *arg)
{
    struct atime_writer *w = arg;
    for (uint32_t i = 0; i < 20000; i++)
        slab_atime_set(w->slab, w->off[i % 4], w->now - (i % 3));
    for (int i = 0; i < 4; i++)
        slab_atime_set(w->slab, w->off[i], w->now);
    return NULL;
}

/* A rebase racing with readers' sets clamps what is old and never undoes a
 * fresh time. */
static void
test_atime_concurrent(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    const uint32_t t0 = 1700000000u, now = t0 + SLAB_ATIME_CAP + 100;
    struct atime_writer w = {.slab = f->slab, .now = now};
    uint64_t old[4];
    for (int i = 0; i < 4; i++) {
        old[i] = take1(f, (unsigned)(i % 2));
        slab_atime_set(f->slab, old[i], t0);
        w.off[i] = take1(f, (unsigned)(i % 2));
        slab_atime_set(f->slab, w.off[i], t0);
    }
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, atime_writer_main, &w), 0);
    for (uint32_t r = 0; r < 200; r++)
        slab_atime_rebase(f->slab, now);
    assert_int_equal(pthread_join(tid, NULL), 0);
    slab_atime_rebase(f->slab, now);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(slab_atime_age(f->slab, w.off[i], now), 0);
        assert_int_equal(slab_atime_age(f->slab, old[i], now), SLAB_ATIME_CAP);
        /* clamped, so 2^13 s after t0 it still reads as the cap */
        assert_int_equal(
            slab_atime_age(f->slab, old[i], t0 + SLAB_ATIME_WRAP + 5),
            SLAB_ATIME_CAP);
    }
    assert_int_equal(slab_check(f->slab), 0);
}

/* The time and the three bits share one word: setting, copying or
 * rebasing the time keeps the bits, and the bits' operations keep the
 * time. */
static void
test_word_shared(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    const uint32_t t0 = 1700000000u;
    uint64_t a = take1(f, 0), b = take1(f, 0);

    slab_atime_set(f->slab, a, t0);
    slab_ref(f->slab, a);
    assert_true(slab_claim(f->slab, a));
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 3), 3);
    slab_atime_set(f->slab, a, t0 + 1000);
    assert_true(slab_fetched(f->slab, a));
    assert_true(slab_claimed(f->slab, a));
    assert_false(slab_claim(f->slab, a));
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 1003), 3);

    /* copy gives b a's time and keeps b's own (clear) bits */
    slab_atime_copy(f->slab, b, a);
    assert_int_equal(slab_atime_age(f->slab, b, t0 + 1010), 10);
    assert_false(slab_fetched(f->slab, b));
    assert_false(slab_claimed(f->slab, b));

    /* clearing the bits keeps the time */
    slab_reset_bits(f->slab, a);
    assert_false(slab_fetched(f->slab, a));
    assert_false(slab_claimed(f->slab, a));
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 1010), 10);

    /* a rebase clamps the time and keeps the bits */
    slab_ref(f->slab, a);
    assert_true(slab_claim(f->slab, a));
    uint32_t r = t0 + 1000 + SLAB_ATIME_CAP + 50;
    assert_true(slab_atime_rebase(f->slab, r) >= 2);
    assert_int_equal(slab_atime_age(f->slab, a, r), SLAB_ATIME_CAP);
    assert_true(slab_fetched(f->slab, a));
    assert_true(slab_claimed(f->slab, a));
    assert_false(slab_fetched(f->slab, b));

    /* giving the chunk back clears its bits */
    slab_give(f->slab, 0, &a, 1);
    assert_false(slab_fetched(f->slab, a));
    assert_false(slab_claimed(f->slab, a));
    assert_int_equal(slab_check(f->slab), 0);
}

/* slab_touch reports what the single calls would, before its own update,
 * and with bump does what slab_ref and slab_atime_set do (the CLOCK sweep
 * then skips the chunk once). */
static void
test_touch(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    const uint32_t t0 = 1700000000u;
    uint64_t a = take1(f, 1), b = take1(f, 1);
    struct slab_seen seen;
    struct slab_cursor cur = {0, 0};
    uint64_t out[8];

    slab_fresh(f->slab, a, t0, false);
    slab_fresh(f->slab, b, t0, false);
    slab_touch(f->slab, a, t0 + 5, false, &seen);
    assert_int_equal(seen.age, 5);
    assert_int_equal(seen.cls, 1);
    assert_false(seen.fetched);
    assert_false(seen.claimed);
    /* without bump nothing changed */
    assert_false(slab_fetched(f->slab, a));
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 5), 5);

    slab_touch(f->slab, a, t0 + 7, true, &seen);
    assert_int_equal(seen.age, 7);
    assert_false(seen.fetched);
    assert_true(slab_fetched(f->slab, a));
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 7), 0);
    assert_true(slab_claim(f->slab, a));
    slab_touch(f->slab, a, t0 + 9, true, &seen);
    assert_int_equal(seen.age, 2);
    assert_true(seen.fetched);
    assert_true(seen.claimed);
    assert_true(slab_claimed(f->slab, a)); /* the update kept the win bit */
    /* the same second again: nothing to write, same answers */
    slab_touch(f->slab, a, t0 + 9, true, &seen);
    assert_int_equal(seen.age, 0);
    assert_true(seen.claimed);

    /* the touched chunk has its reference bit: one sweep skips it */
    unsigned n = slab_scan(f->slab, 1, &cur, SLAB_SCAN_CLOCK, 2, out, 8);
    assert_int_equal(n, 1);
    assert_int_equal(out[0], b);
    /* and the sweep keeps the time and the other bits */
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 10), 1);
    assert_true(slab_fetched(f->slab, a));
    assert_true(slab_claimed(f->slab, a));

    /* a free page: no class, "as old as it gets" */
    slab_touch(f->slab, 3ull * POOL_PAGE_SIZE, t0, true, &seen);
    assert_int_equal(seen.cls, SLAB_NO_CLASS);
    assert_int_equal(seen.age, SLAB_ATIME_CAP);
    assert_false(seen.fetched);
    assert_int_equal(slab_check(f->slab), 0);
}

/* slab_fresh: the bits cleared (the win claimed if asked) and the time set,
 * as slab_reset_bits + slab_atime_set (+ slab_claim). */
static void
test_fresh(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    const uint32_t t0 = 1700000000u;
    uint64_t a = take1(f, 0);

    slab_ref(f->slab, a);
    assert_true(slab_claim(f->slab, a));
    slab_atime_set(f->slab, a, t0);
    slab_fresh(f->slab, a, t0 + 20, false);
    assert_false(slab_fetched(f->slab, a));
    assert_false(slab_claimed(f->slab, a));
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 21), 1);
    slab_fresh(f->slab, a, t0 + 30, true);
    assert_false(slab_fetched(f->slab, a));
    assert_true(slab_claimed(f->slab, a));
    assert_false(slab_claim(f->slab, a));
    assert_int_equal(slab_atime_age(f->slab, a, t0 + 30), 0);
    /* the win is the only bit: the sweep offers the chunk */
    struct slab_cursor cur = {0, 0};
    uint64_t out[4];
    assert_int_equal(slab_scan(f->slab, 0, &cur, SLAB_SCAN_CLOCK, 1, out, 4),
                     1);
    assert_int_equal(slab_check(f->slab), 0);
}

struct word_setter {
    struct slab *slab;
    uint64_t off;
    uint32_t now;
    _Atomic bool stop;
    _Atomic uint32_t rounds; /* done by the setter */
};

/* Changes the chunk's time on every call (each a compare-exchange that
 * must keep the bits) until told to stop. */
static void *
word_setter_main(void *arg)
{
    struct word_setter *w = arg;
    struct slab_seen seen;
    for (uint32_t i = 0;
         !atomic_load_explicit(&w->stop, memory_order_acquire) && i < 4000000;
         i++) {
        if (i % 4 < 2)
            slab_atime_set(w->slab, w->off, w->now + i % 2);
        else
            slab_touch(w->slab, w->off, w->now + i % 2, true, &seen);
        atomic_store_explicit(&w->rounds, i + 1, memory_order_relaxed);
    }
    return NULL;
}

/* Time updates racing with the bits' updates never lose a bit: the win
 * bit a claim set stays set while another thread keeps changing the
 * chunk's time (a time store that overwrote the word with a stale copy
 * would drop it). */
static void
test_word_concurrent(void **state)
{
    struct fixture *f = fixture_new(4);
    *state = f;
    struct word_setter w = {.slab = f->slab, .now = 1700000000u};
    unsigned lost = 0;
    w.off = take1(f, 0);
    slab_atime_set(f->slab, w.off, w.now);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, word_setter_main, &w), 0);
    /* at least 20000 rounds each side overlapping (bounded: a setter that
     * has finished stops counting) */
    for (uint32_t r = 0;
         r < 20000 ||
         (atomic_load_explicit(&w.rounds, memory_order_relaxed) < 20000 &&
          r < 4000000);
         r++) {
        slab_reset_bits(f->slab, w.off);
        assert_true(slab_claim(f->slab, w.off));
        for (int k = 0; k < 16; k++)
            lost += !slab_claimed(f->slab, w.off);
    }
    atomic_store_explicit(&w.stop, true, memory_order_release);
    assert_int_equal(pthread_join(tid, NULL), 0);
    assert_int_equal(lost, 0);
    assert_true(slab_claimed(f->slab, w.off));
    struct slab_seen seen;
    slab_touch(f->slab, w.off, w.now + 6, true, &seen);
    assert_true(seen.claimed);
    assert_true(slab_fetched(f->slab, w.off));
    assert_int_equal(slab_atime_age(f->slab, w.off, w.now + 6), 0);
    assert_int_equal(slab_check(f->slab), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_atime, teardown),
        cmocka_unit_test_teardown(test_atime_concurrent, teardown),
        cmocka_unit_test_teardown(test_word_shared, teardown),
        cmocka_unit_test_teardown(test_touch, teardown),
        cmocka_unit_test_teardown(test_fresh, teardown),
        cmocka_unit_test_teardown(test_word_concurrent, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

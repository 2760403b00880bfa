/*
 * Unit tests for src/server/obuf.c: appends of every kind, geometric growth,
 * consume and its compaction, the sticky error, freeing a large block once
 * drained, and a seeded random op stream checked against a flat model.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "src/server/obuf.h"

#define TEST_SEED 0x9e3779b97f4a7c15ull

static uint64_t
rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int
setup(void **state)
{
    struct obuf *o = malloc(sizeof(*o));
    if (!o)
        return -1;
    obuf_init(o);
    *state = o;
    return 0;
}

static int
teardown(void **state)
{
    struct obuf *o = *state;
    obuf_fini(o);
    free(o);
    return 0;
}

static void
assert_pending(const struct obuf *o, const char *want)
{
    size_t n = strlen(want);
    assert_int_equal(obuf_pending(o), n);
    assert_memory_equal(o->buf + o->head, want, n);
}

static void
test_init_empty(void **state)
{
    struct obuf *o = *state;
    assert_null(o->buf);
    assert_int_equal(obuf_pending(o), 0);
    assert_int_equal(o->err, 0);
    obuf_consume(o, 0);
    obuf_consume(o, 10); /* more than pending: clamped */
    assert_int_equal(obuf_pending(o), 0);
}

static void
test_add_str_printf(void **state)
{
    struct obuf *o = *state;
    assert_int_equal(obuf_add(o, "VALUE", 5), 0);
    assert_int_equal(obuf_add_str(o, " k"), 0);
    assert_int_equal(obuf_printf(o, " %u %d\r\n", 7u, 3), 0);
    assert_int_equal(obuf_add(o, "", 0), 0);
    assert_pending(o, "VALUE k 7 3\r\n");
}

static void
test_printf_long(void **state)
{
    struct obuf *o = *state;
    char big[5000];
    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    /* longer than any first guess: the second vsnprintf must be used */
    assert_int_equal(obuf_printf(o, "<%s>", big), 0);
    assert_int_equal(obuf_pending(o), sizeof(big) + 1);
    assert_int_equal(o->buf[0], '<');
    assert_int_equal(o->buf[sizeof(big)], '>');
    assert_int_equal(o->buf[1234], 'z');
}

static void
test_reserve_commit(void **state)
{
    struct obuf *o = *state;
    assert_int_equal(obuf_reserve(o, 100), 0);
    assert_true(o->cap - o->len >= 100);
    memcpy(obuf_tail(o), "abc", 3);
    obuf_commit(o, 3);
    assert_pending(o, "abc");
    /* a reserve that needs no growth keeps the block */
    char *before = o->buf;
    assert_int_equal(obuf_reserve(o, 10), 0);
    assert_ptr_equal(o->buf, before);
}

static void
test_growth_geometric(void **state)
{
    struct obuf *o = *state;
    size_t last = 0;
    int grows = 0;
    for (int i = 0; i < 100000; i++) {
        assert_int_equal(obuf_add(o, "0123456789", 10), 0);
        if (o->cap != last) {
            if (last)
                assert_true(o->cap >= 2 * last);
            last = o->cap;
            grows++;
        }
    }
    assert_int_equal(obuf_pending(o), 1000000);
    /* 1 MB in doublings from at most 1 KiB: about 10 reallocations */
    assert_true(grows <= 12);
    for (int i = 0; i < 100000; i += 9973)
        assert_memory_equal(o->buf + (size_t)i * 10, "0123456789", 10);
}

static void
test_consume_rewinds(void **state)
{
    struct obuf *o = *state;
    obuf_add_str(o, "hello world");
    obuf_consume(o, 6);
    assert_pending(o, "world");
    obuf_consume(o, 5);
    assert_int_equal(o->head, 0);
    assert_int_equal(o->len, 0);
    obuf_add_str(o, "again");
    assert_pending(o, "again");
}

static void
test_consume_compacts_past_half(void **state)
{
    struct obuf *o = *state;
    char chunk[100];
    memset(chunk, 'a', sizeof(chunk));
    while (o->len < 900)
        obuf_add(o, chunk, sizeof(chunk));
    size_t cap = o->cap;
    o->buf[o->len - 1] = 'Z';
    size_t total = o->len;
    /* head stays below half: nothing moves */
    obuf_consume(o, cap / 2 - 1);
    assert_int_equal(o->head, cap / 2 - 1);
    /* past half: the rest slides to the front */
    obuf_consume(o, 2);
    assert_int_equal(o->head, 0);
    assert_int_equal(obuf_pending(o), total - cap / 2 - 1);
    assert_int_equal(o->buf[obuf_pending(o) - 1], 'Z');
    assert_int_equal(o->cap, cap);
}

static void
test_reserve_reuses_consumed_prefix(void **state)
{
    struct obuf *o = *state;
    char chunk[256];
    memset(chunk, 'b', sizeof(chunk));
    while (o->len + sizeof(chunk) <= 1024)
        obuf_add(o, chunk, sizeof(chunk));
    size_t cap = o->cap;
    obuf_consume(o, 256); /* below half: stays */
    assert_int_equal(o->head, 256);
    /* fits once the consumed prefix is reclaimed: no growth */
    assert_int_equal(obuf_reserve(o, cap - o->len + 100), 0);
    assert_int_equal(o->cap, cap);
    assert_int_equal(o->head, 0);
}

static void
test_large_block_freed_when_drained(void **state)
{
    struct obuf *o = *state;
    char *big = calloc(1, 1u << 20);
    assert_non_null(big);
    assert_int_equal(obuf_add(o, big, 1u << 20), 0);
    free(big);
    assert_true(o->cap >= 1u << 20);
    obuf_consume(o, 1u << 20);
    assert_null(o->buf);
    assert_int_equal(o->cap, 0);
    /* small blocks are kept */
    obuf_add_str(o, "x");
    char *small = o->buf;
    obuf_consume(o, 1);
    assert_ptr_equal(o->buf, small);
}

static void
test_too_large_is_sticky_enomem(void **state)
{
    struct obuf *o = *state;
    obuf_add_str(o, "ok");
    assert_int_equal(obuf_reserve(o, SIZE_MAX - 8), -ENOMEM);
    assert_int_equal(o->err, -ENOMEM);
    /* later appends fail too: a cut reply never continues */
    assert_int_equal(obuf_add_str(o, "more"), -ENOMEM);
    assert_int_equal(obuf_printf(o, "%d", 1), -ENOMEM);
    assert_int_equal(obuf_reserve(o, 1), -ENOMEM);
    assert_pending(o, "ok");
    obuf_fini(o);
    obuf_init(o);
    assert_int_equal(obuf_add_str(o, "fresh"), 0);
}

static void
test_random_against_model(void **state)
{
    struct obuf *o = *state;
    uint64_t seed = TEST_SEED;
    size_t mcap = 1u << 22;
    char *model = malloc(mcap);
    size_t mhead = 0, mlen = 0;
    assert_non_null(model);
    print_message("seed %#llx\n", (unsigned long long)seed);
    for (int i = 0; i < 20000; i++) {
        uint64_t r = rng_next(&seed);
        if (r % 3 != 0 && mlen + 3000 < mcap) {
            size_t n = (r >> 8) % 3000;
            char tmp[3000];
            for (size_t j = 0; j < n; j++)
                tmp[j] = (char)('a' + (i + j) % 26);
            if ((r >> 20) & 1) {
                assert_int_equal(obuf_add(o, tmp, n), 0);
            } else {
                assert_int_equal(obuf_reserve(o, n), 0);
                memcpy(obuf_tail(o), tmp, n);
                obuf_commit(o, n);
            }
            memcpy(model + mlen, tmp, n);
            mlen += n;
        } else {
            size_t pend = mlen - mhead;
            size_t n = pend ? (r >> 8) % (pend + 1) : 0;
            obuf_consume(o, n);
            mhead += n;
            if (mhead == mlen)
                mhead = mlen = 0;
        }
        assert_int_equal(obuf_pending(o), mlen - mhead);
        assert_true(o->head <= o->len && o->len <= o->cap);
        if (i % 97 == 0 && mlen > mhead)
            assert_memory_equal(o->buf + o->head, model + mhead, mlen - mhead);
    }
    free(model);
}

/* A reply with a hole for the value of read `id`, miss text `miss`. */
static void
add_holed(struct obuf *o, uint64_t id, const char *head, uint32_t vlen,
          const char *miss)
{
    uint64_t start = obuf_pos(o);
    obuf_add_str(o, head);
    assert_int_equal(obuf_hole_open(o, id, start, vlen), 0);
    obuf_add_str(o, "\r\n");
    obuf_hole_close(o, miss, strlen(miss));
}

/* Holes: nothing from the first hole's reply on is sendable; fills copy
 * the value in, failures put the miss in place (shorter or longer), later
 * holes move with them, and positions survive compaction. */
static void
test_holes(void **state)
{
    struct obuf *o = *state;
    struct iovec v;

    obuf_add_str(o, "A\r\n");
    add_holed(o, 1, "V1 ", 5, "EN\r\n");
    obuf_add_str(o, "B\r\n");
    add_holed(o, 2, "V2 ", 3, "a much longer miss line\r\n");
    add_holed(o, 3, "V3 ", 4, "");
    obuf_add_str(o, "C\r\n");
    assert_int_equal(o->nholes, 3);
    assert_int_equal(obuf_sendable(o), 3);
    obuf_consume(o, 3); /* "A\r\n" went out */
    assert_int_equal(obuf_sendable(o), 0);

    /* the second completes first: still blocked by the first */
    v = (struct iovec){"xyz", 3};
    assert_true(obuf_hole_fill(o, 2, &v, 1));
    assert_int_equal(obuf_sendable(o), 0);
    assert_false(obuf_hole_fill(o, 2, &v, 1)); /* only once */
    /* the first fails: its miss replaces it */
    assert_true(obuf_hole_fill(o, 1, NULL, 0));
    assert_int_equal(o->nholes, 1);
    assert_int_equal(obuf_sendable(o), strlen("EN\r\nB\r\nV2 xyz\r\n"));
    assert_memory_equal(o->buf + o->head, "EN\r\nB\r\nV2 xyz\r\n",
                        obuf_sendable(o));
    /* the third comes back the wrong length: a miss (nothing) */
    v = (struct iovec){"toolong", 7};
    assert_true(obuf_hole_fill(o, 3, &v, 1));
    assert_int_equal(o->nholes, 0);
    assert_pending(o, "EN\r\nB\r\nV2 xyz\r\nC\r\n");

    /* a miss longer than its reply, after compaction moved the block */
    obuf_consume(o, obuf_pending(o));
    for (int i = 0; i < 100; i++)
        obuf_add_str(o, "0123456789");
    obuf_consume(o, 990);
    add_holed(o, 9, "V ", 1, "a miss longer than the reply\r\n");
    obuf_add_str(o, "Z");
    for (int i = 0; i < 200; i++) /* grows and slides the block */
        obuf_add_str(o, "..........");
    assert_true(obuf_hole_fill(o, 9, NULL, 0));
    assert_int_equal(obuf_pending(o), 10 + 30 + 1 + 2000);
    assert_memory_equal(o->buf + o->head,
                        "0123456789a miss longer than the reply\r\nZ", 41);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_init_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_str_printf, setup, teardown),
        cmocka_unit_test_setup_teardown(test_printf_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth_geometric, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consume_rewinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consume_compacts_past_half, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reserve_reuses_consumed_prefix,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_block_freed_when_drained,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_large_is_sticky_enomem, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_random_against_model, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_holes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

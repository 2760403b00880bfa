/*
 * The classic text protocol as a stream (src/server/proto/proto_text.c
 * through proto_process): pipelined commands split at every byte boundary
 * and in random chunks give the same replies, a partial request tells how
 * much more it needs, large replies yield and multigets go out in slices.
 * Random chunkings print their seed on failure; set TC_TEST_SEED to replay
 * one.
 */

#include "tests/unit/proto_text_fx.h"

/* ---- pipelining --------------------------------------------------------- */

/* Many commands back to back, errors, swallowed and large values included. */
static char *
pipeline_script(size_t *len)
{
    size_t big = 300000, huge = ITEM_MAX; /* huge is refused */
    size_t cap = big + huge + 8192;
    char *p = malloc(cap);
    assert_non_null(p);
    size_t n = 0;
#define ADD(s) (memcpy(p + n, (s), strlen(s)), n += strlen(s))
    ADD("set a 1 0 3\r\nabc\r\nget a\r\ngets a\r\nset b 0 0 0\r\n\r\n");
    ADD("add a 0 0 1\r\nx\r\nappend a 0 0 2\r\nde\r\nget a b nope\r\n");
    ADD("incr n 1\r\nset n 0 0 2\r\n41\r\nincr n 1\r\ndecr n 100\r\n");
    ADD("set a 0 0 1\r\nabc\r\n\n\r\nbogus\r\nset a 0 x 1\r\nb\r\n");
    ADD("delete b\r\ndelete b\r\ndelete b 1\r\ntouch a 10\r\n");
    ADD("gat 100 a\r\ngats 0 a nope\r\nset q 0 0 1 noreply\r\nq\r\n");
    ADD("incr n x noreply\r\nversion\r\nstats\r\nstats nope\r\n");
    n += (size_t)snprintf(p + n, cap - n, "set big 2 0 %zu\r\n", big);
    for (size_t i = 0; i < big; i++)
        p[n++] = (char)(i % 251);
    ADD("\r\nget big a\r\n");
    n += (size_t)snprintf(p + n, cap - n, "set huge 0 0 %zu\r\n", huge);
    memset(p + n, 'h', huge);
    n += huge;
    ADD("\r\nget huge q\r\ncas a 0 0 1 1\r\nz\r\nflush_all\r\nget a\r\n");
    ADD("\x80\x81 garbage\r\nverbosity 1\r\ncache_memlimit 64\r\n");
    ADD("version\r\nquit\r\nget a\r\n");
#undef ADD
    *len = n;
    return p;
}

static char *
run_chunked(struct fx *f, const char *in, size_t len, uint64_t seed,
            size_t *olen)
{
    fresh(f);
    uint64_t x = seed ? seed : 1;
    size_t pos = 0;
    while (pos < len && !f->closed) {
        size_t k = 1;
        if (seed) { /* xorshift64: chunks of 1..4096, mostly small */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            k = 1 + (size_t)(x % ((x >> 32) % 8 == 0 ? 4096 : 64));
        }
        if (k > len - pos)
            k = len - pos;
        receive(f, in + pos, k);
        pos += k;
    }
    return take_output(f, olen);
}

static void
test_pipeline_split_everywhere(void **state)
{
    struct fx *f = *state;
    size_t len, olen, clen;
    char *in = pipeline_script(&len);

    fresh(f);
    receive(f, in, len);
    assert_true(f->closed);
    char *once = take_output(f, &olen);
    assert_non_null(memmem(once, olen, "SERVER_ERROR object too large", 29));
    assert_non_null(memmem(once, olen, "VERSION " TC_VERSION "\r\n",
                           sizeof("VERSION " TC_VERSION "\r\n") - 1));

    char *bytewise = run_chunked(f, in, len, 0, &clen);
    assert_bytes(bytewise, clen, once, olen);
    free(bytewise);

    const char *env = getenv("TC_TEST_SEED");
    uint64_t seed0 = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    for (uint64_t i = 0; i < 8; i++) {
        uint64_t seed = seed0 * 8 + i + 1;
        char *got = run_chunked(f, in, len, seed, &clen);
        if (clen != olen || memcmp(got, once, olen) != 0)
            fprintf(stderr,
                    "chunking seed %" PRIu64 " (TC_TEST_SEED=%" PRIu64 ")\n",
                    seed, seed0);
        assert_bytes(got, clen, once, olen);
        free(got);
    }
    assert_int_equal(tc_check(f->c), 0);
    free(once);
    free(in);
}

/* Every split point of a short pipeline, as two reads. */
static void
test_pipeline_two_reads(void **state)
{
    struct fx *f = *state;
    const char *in = "set k 0 0 5 noreply\r\nhello\r\nget k\r\nincr k 1\r\n"
                     "set n 0 0 1\r\n7\r\nincr n 3\r\ndelete k\r\nget k n\r\n";
    size_t len = strlen(in), olen, glen;

    fresh(f);
    receive(f, in, len);
    char *once = take_output(f, &olen);
    for (size_t cut = 1; cut < len; cut++) {
        fresh(f);
        receive(f, in, cut);
        receive(f, in + cut, len - cut);
        char *got = take_output(f, &glen);
        if (glen != olen || memcmp(got, once, olen) != 0)
            fprintf(stderr, "split at %zu\n", cut);
        assert_bytes(got, glen, once, olen);
        free(got);
    }
    free(once);
}

static void
test_need_hint(void **state)
{
    struct fx *f = *state;
    const char *line = "set k 0 0 100\r\n";
    ssize_t rc = proto_process(&f->s, line, strlen(line), &f->out);
    assert_int_equal(rc, 0);
    assert_int_equal(f->s.need, strlen(line) + 102);
    /* after a complete request the hint is for the one behind it */
    const char *two = "version\r\nset k 0 0 100\r\n";
    rc = proto_process(&f->s, two, strlen(two), &f->out);
    assert_int_equal(rc, 9);
    assert_int_equal(f->s.need, strlen(line) + 102);
}

/* A call stops between requests once a lot of replies wait, so that the
 * connection's back-pressure applies; the rest runs on the next call. */
static void
test_yield_on_big_replies(void **state)
{
    struct fx *f = *state;
    size_t vlen = 300000;
    char *in = malloc(vlen + 64);
    assert_non_null(in);
    int n = snprintf(in, 64, "set big 0 0 %zu\r\n", vlen);
    memset(in + n, 'b', vlen);
    memcpy(in + n + vlen, "\r\n", 2);
    expect_n(f, in, (size_t)n + vlen + 2, "STORED\r\n", 8);
    free(in);

    const char *gets = "get big\r\nget big\r\nversion\r\n";
    ssize_t rc = proto_process(&f->s, gets, strlen(gets), &f->out);
    assert_int_equal(rc, 9);
    rc = proto_process(&f->s, gets + 9, strlen(gets) - 9, &f->out);
    assert_int_equal(rc, 9);
    obuf_consume(&f->out, obuf_pending(&f->out));
    rc = proto_process(&f->s, gets + 18, strlen(gets) - 18, &f->out);
    assert_int_equal(rc, 9);
}

/* ---- a get of many large values, in slices ------------------------------ */

#define SLICE_VLEN 100000u /* three values pass PROTO_GET_SLICE */

/* Store keys k0..k<n-1>, each SLICE_VLEN bytes of its own letter, with an
 * exptime of 0. */
static void
store_slice_values(struct fx *f, int n)
{
    size_t cap = SLICE_VLEN + 64;
    char *in = malloc(cap);
    assert_non_null(in);
    for (int i = 0; i < n; i++) {
        size_t h =
            (size_t)snprintf(in, cap, "set k%d 0 0 %u\r\n", i, SLICE_VLEN);
        memset(in + h, 'a' + i, SLICE_VLEN);
        memcpy(in + h + SLICE_VLEN, "\r\n", 2);
        expect_n(f, in, h + SLICE_VLEN + 2, "STORED\r\n", 8);
    }
    free(in);
}

/* The whole reply to a get of keys (k<i>, or a miss for -1), then END. */
static char *
slice_reply(const int *keys, int n, size_t *len)
{
    size_t cap = (size_t)n * (SLICE_VLEN + 64) + 8;
    char *out = malloc(cap);
    assert_non_null(out);
    size_t w = 0;
    for (int i = 0; i < n; i++) {
        if (keys[i] < 0)
            continue;
        w += (size_t)snprintf(out + w, cap - w, "VALUE k%d 0 %u\r\n", keys[i],
                              SLICE_VLEN);
        memset(out + w, 'a' + keys[i], SLICE_VLEN);
        w += SLICE_VLEN;
        memcpy(out + w, "\r\n", 2);
        w += 2;
    }
    memcpy(out + w, "END\r\n", 5);
    *len = w + 5;
    return out;
}

/* A get whose replies pass PROTO_GET_SLICE stops between two keys with
 * s->resume set, consuming nothing; each call appends at most a slice
 * plus one value, and the calls together give exactly the whole reply,
 * counted as one request. */
static void
test_multiget_in_slices(void **state)
{
    struct fx *f = *state;
    static const int keys[] = {0, -1, 1, 2, 3, 0, 4, -1, 5, 1};
    const int n = (int)(sizeof(keys) / sizeof(keys[0]));
    const size_t one = SLICE_VLEN + 32; /* a reply with its header */
    store_slice_values(f, 6);
    uint64_t cmds = f->s.ctr.cmd_total;
    const char *line = "get k0 nope k1 k2 k3 k0 k4 nope k5 k1\r\nversion\r\n";
    size_t get_len = strlen(line) - 9;
    int calls = 0;
    ssize_t rc;
    do {
        size_t before = obuf_pending(&f->out);
        rc = proto_process(&f->s, line, strlen(line), &f->out);
        size_t made = obuf_pending(&f->out) - before;
        assert_true(made <= PROTO_GET_SLICE + one);
        if (rc == 0) {
            assert_true(f->s.resume > 0 && f->s.resume < get_len);
            assert_true(made >= PROTO_GET_SLICE);
        }
        assert_true(++calls <= n);
    } while (rc == 0);
    assert_int_equal(rc, (ssize_t)get_len); /* the get, not the version */
    assert_int_equal(f->s.resume, 0);
    assert_true(calls >= 3); /* ~1 MB of replies in slices of 256 KiB */
    assert_int_equal(f->s.ctr.cmd_total - cmds, 1);
    assert_int_equal(f->s.ctr.get_multi, 1);

    size_t wlen, glen;
    char *want = slice_reply(keys, n, &wlen);
    char *got = take_output(f, &glen);
    assert_bytes(got, glen, want, wlen);
    free(got);
    free(want);
    expect(f, line + get_len, "VERSION " TC_VERSION "\r\n");
}

/* A caller that hands over another line than the one a get stopped in
 * gets a fresh request of that line, never a key read from past its end;
 * requests before a get are consumed in the call where it stops; a gat's
 * touch reaches the keys after a stop too. */
static void
test_multiget_slices_pipelined(void **state)
{
    struct fx *f = *state;
    static const int keys[] = {0, 1, 2, 3, 4, 5}, k5[] = {5};
    size_t wlen, glen;
    store_slice_values(f, 6);

    const char *get = "get k0 k1 k2 k3 k4\r\n";
    assert_int_equal(proto_process(&f->s, get, strlen(get), &f->out), 0);
    assert_true(f->s.resume > strlen("get k5"));
    free(take_output(f, &glen));
    char *want = slice_reply(k5, 1, &wlen);
    expect_n(f, "get k5\r\n", 8, want, wlen);
    free(want);
    assert_int_equal(f->s.resume, 0);

    const char *in = "touch k5 0\r\ngat 100 k0 k1 k2 k3 k4 k5\r\n";
    size_t first = strlen("touch k5 0\r\n");
    ssize_t rc = proto_process(&f->s, in, strlen(in), &f->out);
    assert_int_equal(rc, (ssize_t)first);
    assert_true(f->s.resume > 0);
    rc = 0;
    for (int i = 0; i < 6 && rc == 0; i++) /* bounded: 3 slices at most */
        rc = proto_process(&f->s, in + first, strlen(in) - first, &f->out);
    assert_int_equal(rc, (ssize_t)(strlen(in) - first));
    want = slice_reply(keys, 6, &wlen);
    char *got = take_output(f, &glen);
    assert_true(glen == 9 + wlen && memcmp(got, "TOUCHED\r\n", 9) == 0);
    assert_bytes(got + 9, glen - 9, want, wlen);
    free(got);
    free(want);
    tc_clock_advance(101); /* every key was touched, k5 the last */
    for (int i = 0; i < 6; i++) {
        char line[24];
        snprintf(line, sizeof(line), "get k%d\r\n", i);
        expect(f, line, "END\r\n");
    }
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_need_hint),          T(test_yield_on_big_replies),
        T(test_multiget_in_slices), T(test_multiget_slices_pipelined),
        T(test_pipeline_two_reads), T(test_pipeline_split_everywhere),
    };
    return cmocka_run_group_tests_name("proto_text_stream", tests, NULL, NULL);
}

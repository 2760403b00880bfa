/*
 * The binary protocol's framing (src/server/proto/proto_bin.c): values too
 * large for an item refused and swallowed without being buffered, lengths that
 * do not suit the opcode ("Invalid arguments", then close), unknown opcodes,
 * broken streams, partial requests and their s->need, and the same replies
 * whichever way the input is cut.
 */

#include "tests/unit/proto_bin_fx.h"

/* A value that cannot fit is refused once its key is in, and skipped. */
static void
test_too_large_swallow(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[8];
    size_t vlen =
        ITEM_MAX - TC_ITEM_HEADER_SIZE - 3 + 1; /* one over, key "big" */
    char *v = calloc(1, vlen + 100);
    assert_non_null(v);

    set_kv(f, "big", "old", 0);
    set_kv(f, "app", "old", 0);
    ext_store(e, 0, 0);
    uint32_t o = f->opaque;
    req(f, &in, OP_SET, e, 8, "big", v, vlen, 0);
    /* the header, extras and key alone get the reply */
    ssize_t n = proto_process(&f->s, (const char *)in.p, 24 + 8 + 2, &f->out);
    assert_int_equal(n, 0);
    assert_int_equal(f->s.need, 24 + 8 + 3);
    assert_int_equal(obuf_pending(&f->out), 0);
    n = proto_process(&f->s, (const char *)in.p, 24 + 8 + 3, &f->out);
    assert_int_equal(n, 24 + 8 + 3);
    assert_int_equal(f->s.swallow, vlen);
    rsp_err(&want, OP_SET, ST_E2BIG, o);
    expect_bytes((unsigned char *)f->out.buf + f->out.head,
                 obuf_pending(&f->out), &want);
    b_free(&want);
    /* a refused SET drops the old value, as memcached does */
    check_value(f, "big", NULL);
    /* the value goes by in pieces, then the stream goes on */
    size_t at = 24 + 8 + 3;
    obuf_consume(&f->out, obuf_pending(&f->out));
    while (at < in.n) {
        size_t k = in.n - at < 1000 ? in.n - at : 1000;
        n = proto_process(&f->s, (const char *)in.p + at, k, &f->out);
        assert_int_equal(n, (ssize_t)k);
        at += k;
    }
    assert_int_equal(f->s.swallow, 0);
    assert_int_equal(obuf_pending(&f->out), 0);
    b_free(&in);

    o = f->opaque;
    req(f, &in, OP_SETQ, e, 8, "big2", v, vlen + 100, 0);
    req(f, &in, OP_APPENDQ, NULL, 0, "app", v, vlen + 100, 0);
    req(f, &in, OP_ADD, e, 8, "big3", v, vlen, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    rsp_err(&want, OP_SETQ, ST_E2BIG, o);
    rsp_err(&want, OP_APPENDQ, ST_E2BIG, o + 1);
    rsp_err(&want, OP_ADD, ST_E2BIG, o + 2);
    rsp_ok(&want, OP_NOOP, 0, o + 3);
    n = (ssize_t)in.n;
    exchange(f, &in, &want, n);
    check_value(f, "app", "old");

    /* the largest value that fits is stored */
    o = f->opaque;
    req(f, &in, OP_SET, e, 8, "big", v, vlen - 1, 0);
    n = (ssize_t)in.n;
    assert_int_equal(run(f, &in), n);
    rsp_ok(&want, OP_SET, item_cas(f, "big"), o);
    expect_out(f, &want);

    /* an append whose result would be too large is "Not stored." */
    o = f->opaque;
    req(f, &in, OP_APPEND, NULL, 0, "big", "x", 1, 0);
    rsp_err(&want, OP_APPEND, ST_NOT_STORED, o);
    n = (ssize_t)in.n;
    exchange(f, &in, &want, n);
    free(v);
}

/* Lengths that do not suit the opcode: "Invalid arguments", then close. */
static void
test_invalid_lengths(void **state)
{
    struct fx *f = *state;
    unsigned char e[20] = {0};
    char key251[252];
    memset(key251, 'k', 251);
    key251[251] = '\0';
    struct {
        uint8_t op;
        uint8_t elen;
        const char *key;
        size_t vlen;
    } bad[] = {
        {OP_GET, 4, "k", 0},       {OP_GET, 0, NULL, 0},
        {OP_GETK, 0, "k", 2},      {OP_GETQ, 0, key251, 0},
        {OP_SET, 0, "k", 1},       {OP_SET, 8, NULL, 1},
        {OP_ADDQ, 4, "k", 1},      {OP_DELETE, 0, "k", 1},
        {OP_DELETE, 0, NULL, 0},   {OP_INCR, 8, "k", 0},
        {OP_DECRQ, 20, "k", 1},    {OP_INCR, 20, NULL, 0},
        {OP_APPEND, 8, "k", 1},    {OP_PREPEND, 0, NULL, 1},
        {OP_NOOP, 0, NULL, 1},     {OP_VERSION, 0, "k", 0},
        {OP_QUIT, 4, NULL, 0},     {OP_FLUSH, 2, NULL, 0},
        {OP_FLUSH, 4, NULL, 1},    {OP_FLUSHQ, 0, "k", 0},
        {OP_STAT, 4, NULL, 0},     {OP_STAT, 0, "k", 2},
        {OP_TOUCH, 0, "k", 0},     {OP_GAT, 4, NULL, 0},
        {OP_GATK, 4, "k", 3},      {OP_VERBOSITY, 0, NULL, 0},
        {OP_VERBOSITY, 4, "k", 0}, {0x55, 0, key251, 0},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct bytes in = {0}, want = {0};
        char *val = calloc(1, bad[i].vlen + 1);
        uint32_t o = f->opaque;
        sess_init(f);
        req(f, &in, bad[i].op, e, bad[i].elen, bad[i].key, val, bad[i].vlen, 0);
        req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
        rsp_err(&want, bad[i].op, ST_EINVAL, o);
        exchange(f, &in, &want, PROTO_CLOSE);
        assert_int_equal(f->s.ctr.protocol_errors, 1);
        free(val);
    }
}

/* key + extras longer than the body: "Unknown command", then close. */
static void
test_lengths_past_body(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    uint32_t o = f->opaque;

    req(f, &in, OP_GET, NULL, 0, "abc", NULL, 0, 0);
    in.p[11] = 2; /* body length 2 < key length 3 */
    rsp_err(&want, OP_GET, ST_UNKNOWN, o);
    exchange(f, &in, &want, PROTO_CLOSE);

    sess_init(f);
    o = f->opaque;
    unsigned char e[8] = {0};
    req(f, &in, OP_SET, e, 8, "k", "v", 1, 0);
    in.p[11] = 5;
    rsp_err(&want, OP_SET, ST_UNKNOWN, o);
    exchange(f, &in, &want, PROTO_CLOSE);
}

static void
test_unknown_opcode(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[6] = {1, 2, 3, 4, 5, 6};
    uint32_t o = f->opaque;

    req(f, &in, 0x55, e, 6, "key", "value", 5, 0);
    req(f, &in, 0x20, NULL, 0, NULL, NULL, 0, 0); /* SASL: not served */
    req(f, &in, 0xff, NULL, 0, NULL, "x", 1, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    rsp_err(&want, 0x55, ST_UNKNOWN, o);
    rsp_err(&want, 0x20, ST_UNKNOWN, o + 1);
    rsp_err(&want, 0xff, ST_UNKNOWN, o + 2);
    rsp_ok(&want, OP_NOOP, 0, o + 3);
    ssize_t n = (ssize_t)in.n;
    exchange(f, &in, &want, n);
    assert_int_equal(f->s.swallow, 0);
    assert_int_equal(f->s.ctr.protocol_errors, 3);
}

/* A header without magic 0x80 closes at once, after the earlier replies. */
static void
test_bad_magic(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    uint32_t o = f->opaque;

    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    in.p[24] = 0x81;
    rsp_ok(&want, OP_NOOP, 0, o);
    exchange(f, &in, &want, PROTO_CLOSE);

    /* text after binary is a broken stream too, once a header's worth is
     * in */
    sess_init(f);
    o = f->opaque;
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    b_add(&in, "get k\r\n", 7);
    rsp_ok(&want, OP_NOOP, 0, o);
    exchange(f, &in, &want, 24);
    b_add(&in, "get a_key_long_enough\r\n", 23);
    b_add(&in, "\r\n", 2);
    exchange(f, &in, &want, PROTO_CLOSE);
}

static void
test_partial_header_and_body(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0};
    unsigned char e[8] = {0};

    req(f, &in, OP_SET, e, 8, "key", "value", 5, 0);
    assert_int_equal(proto_process(&f->s, (char *)in.p, 0, &f->out), 0);
    assert_int_equal(proto_process(&f->s, (char *)in.p, 23, &f->out), 0);
    assert_int_equal(f->s.need, 24);
    assert_int_equal(proto_process(&f->s, (char *)in.p, 24, &f->out), 0);
    assert_int_equal(f->s.need, in.n);
    assert_int_equal(proto_process(&f->s, (char *)in.p, in.n - 1, &f->out), 0);
    assert_int_equal(f->s.need, in.n);
    assert_int_equal(obuf_pending(&f->out), 0);
    assert_int_equal(f->s.ctr.bin_cmds, 0);
    assert_int_equal(proto_process(&f->s, (char *)in.p, in.n, &f->out),
                     (ssize_t)in.n);
    assert_int_equal(f->s.need, 0);
    assert_int_equal(f->s.ctr.bin_cmds, 1);
    b_free(&in);
}

/* ---- split input ------------------------------------------------------ */

/* A script touching every path: its replies with CAS fields zeroed (they
 * differ from run to run) must not depend on how the input is cut. */
static void
script(struct fx *f, struct bytes *in)
{
    unsigned char e8[8], e20[20], e4[4];
    char big[300];
    memset(big, 'B', sizeof(big));

    ext_store(e8, 5, 0);
    req(f, in, OP_SET, e8, 8, "a", "alpha", 5, 0);
    req(f, in, OP_SETQ, e8, 8, "b", "beta", 4, 0);
    req(f, in, OP_ADD, e8, 8, "a", "x", 1, 0);
    req(f, in, OP_GETKQ, NULL, 0, "a", NULL, 0, 0);
    req(f, in, OP_GETQ, NULL, 0, "zz", NULL, 0, 0);
    req(f, in, OP_GETK, NULL, 0, "zz", NULL, 0, 0);
    req(f, in, OP_APPEND, NULL, 0, "b", big, sizeof(big), 0);
    req(f, in, OP_PREPENDQ, NULL, 0, "b", "<", 1, 0);
    req(f, in, OP_GET, NULL, 0, "b", NULL, 0, 0);
    ext_arith(e20, 3, 10, 0);
    req(f, in, OP_INCR, e20, 20, "n", NULL, 0, 0);
    req(f, in, OP_DECRQ, e20, 20, "n", NULL, 0, 0);
    req(f, in, OP_INCR, e20, 20, "a", NULL, 0, 0);
    req(f, in, 0x42, e4, 4, "unk", "body", 4, 0);
    ext32(e4, 1000);
    req(f, in, OP_GATK, e4, 4, "n", NULL, 0, 0);
    req(f, in, OP_TOUCH, e4, 4, "zz", NULL, 0, 0);
    req(f, in, OP_DELETE, NULL, 0, "a", NULL, 0, 0);
    req(f, in, OP_DELETEQ, NULL, 0, "a", NULL, 0, 0);
    {
        size_t vlen = ITEM_MAX;
        char *v = calloc(1, vlen);
        req(f, in, OP_SETQ, e8, 8, "huge", v, vlen, 0);
        free(v);
    }
    req(f, in, OP_STAT, NULL, 0, "settings", NULL, 0, 0);
    req(f, in, OP_VERSION, NULL, 0, NULL, NULL, 0, 0);
    req(f, in, OP_FLUSHQ, NULL, 0, NULL, NULL, 0, 0);
    req(f, in, OP_GET, NULL, 0, "b", NULL, 0, 0);
    req(f, in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    req(f, in, OP_QUIT, NULL, 0, NULL, NULL, 0, 0);
    req(f, in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
}

/* Zero the CAS of every reply packet. */
static void
zero_cas(unsigned char *p, size_t n)
{
    size_t at = 0;
    while (at + 24 <= n) {
        uint32_t body = (uint32_t)p[at + 8] << 24 | (uint32_t)p[at + 9] << 16 |
                        (uint32_t)p[at + 10] << 8 | p[at + 11];
        memset(p + at + 16, 0, 8);
        at += 24 + (size_t)body;
    }
    assert_int_equal(at, n);
}

/* Feed `in` cut at the given points the way a connection would: unconsumed
 * bytes are kept and offered again with the next piece. Returns the reply
 * bytes (CAS zeroed) and whether the parser asked to close. */
static bool
drive(struct fx *f, const struct bytes *in, const size_t *cuts, int ncuts,
      struct bytes *reply)
{
    struct bytes pend = {0};
    size_t from = 0;
    bool closed = false;

    tc_flush_all(f->c, 0);
    sess_init(f);
    obuf_consume(&f->out, obuf_pending(&f->out));
    for (int i = 0; i <= ncuts && !closed; i++) {
        size_t to = i < ncuts ? cuts[i] : in->n;
        b_add(&pend, in->p + from, to - from);
        from = to;
        while (pend.n > 0) {
            ssize_t n =
                proto_process(&f->s, (const char *)pend.p, pend.n, &f->out);
            if (n == PROTO_CLOSE) {
                closed = true;
                break;
            }
            if (n == 0)
                break;
            memmove(pend.p, pend.p + n, pend.n - (size_t)n);
            pend.n -= (size_t)n;
        }
    }
    reply->n = 0;
    b_add(reply, f->out.buf + f->out.head, obuf_pending(&f->out));
    zero_cas(reply->p, reply->n);
    b_free(&pend);
    return closed;
}

static void
test_split_every_boundary(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, one = {0}, got = {0};

    script(f, &in);
    assert_true(drive(f, &in, NULL, 0, &one));
    assert_true(one.n > 24 * 10);

    /* two pieces, cut at every byte (the huge value's middle in big steps) */
    for (size_t cut = 1; cut < in.n;
         cut += cut < 2000 || cut > in.n - 2000 ? 1 : 997) {
        assert_true(drive(f, &in, &cut, 1, &got));
        if (got.n != one.n || memcmp(got.p, one.p, one.n) != 0) {
            hexdump("one shot", one.p, one.n);
            hexdump("split", got.p, got.n);
            fail_msg("cut at %zu differs", cut);
        }
    }

    /* byte by byte, outside the huge value */
    size_t *cuts = malloc(in.n * sizeof(*cuts));
    int ncuts = 0;
    for (size_t i = 1; i < in.n; i += (i > 2000 && i < in.n - 2000) ? 4096 : 1)
        cuts[ncuts++] = i;
    assert_true(drive(f, &in, cuts, ncuts, &got));
    assert_int_equal(got.n, one.n);
    assert_memory_equal(got.p, one.p, one.n);
    free(cuts);
    b_free(&in);
    b_free(&one);
    b_free(&got);
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_too_large_swallow),
        TEST(test_invalid_lengths),
        TEST(test_lengths_past_body),
        TEST(test_unknown_opcode),
        TEST(test_bad_magic),
        TEST(test_partial_header_and_body),
        TEST(test_split_every_boundary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

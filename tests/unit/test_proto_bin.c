/*
 * The binary protocol's commands (src/server/proto/proto_bin.c): every opcode
 * and its quiet form, hits and misses, CAS, incr/decr creation, expiry, stats,
 * quit, with replies compared byte for byte with what memcached 1.6 sends
 * (status codes, error texts, lengths, CAS). Framing and broken streams are
 * in test_proto_bin_stream.c.
 */

#include "tests/unit/proto_bin_fx.h"

static void
test_noop_version(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    uint32_t o = f->opaque;

    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    req(f, &in, OP_VERSION, NULL, 0, NULL, NULL, 0, 0);
    rsp_ok(&want, OP_NOOP, 0, o);
    rsp(&want, OP_VERSION, ST_OK, NULL, 0, NULL, 0, TC_VERSION,
        strlen(TC_VERSION), 0, o + 1);
    exchange(f, &in, &want, 48);
    assert_int_equal(f->s.ctr.bin_cmds, 2);
    assert_int_equal(f->s.ctr.cmd_total, 2);
    assert_int_equal(f->s.need, 0);
}

static void
test_set_get_family(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[8], fl[4];
    uint32_t o = f->opaque;

    ext_store(e, 0xdeadbeef, 0);
    req(f, &in, OP_SET, e, 8, "k", "hello", 5, 0);
    ssize_t n = (ssize_t)in.n;
    assert_int_equal(run(f, &in), n);
    uint64_t cas = item_cas(f, "k");
    rsp_ok(&want, OP_SET, cas, o);
    expect_out(f, &want);
    check_value(f, "k", "hello");

    o = f->opaque;
    ext32(fl, 0xdeadbeef);
    req(f, &in, OP_GET, NULL, 0, "k", NULL, 0, 0);
    req(f, &in, OP_GETK, NULL, 0, "k", NULL, 0, 0);
    req(f, &in, OP_GETQ, NULL, 0, "k", NULL, 0, 0);
    req(f, &in, OP_GETKQ, NULL, 0, "k", NULL, 0, 0);
    req(f, &in, OP_GET, NULL, 0, "nope", NULL, 0, 0);
    req(f, &in, OP_GETK, NULL, 0, "nope", NULL, 0, 0);
    req(f, &in, OP_GETQ, NULL, 0, "nope", NULL, 0, 0);
    req(f, &in, OP_GETKQ, NULL, 0, "nope", NULL, 0, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    rsp(&want, OP_GET, ST_OK, fl, 4, NULL, 0, "hello", 5, cas, o);
    rsp(&want, OP_GETK, ST_OK, fl, 4, "k", 1, "hello", 5, cas, o + 1);
    rsp(&want, OP_GETQ, ST_OK, fl, 4, NULL, 0, "hello", 5, cas, o + 2);
    rsp(&want, OP_GETKQ, ST_OK, fl, 4, "k", 1, "hello", 5, cas, o + 3);
    rsp_err(&want, OP_GET, ST_ENOENT, o + 4);
    /* a GETK miss carries the key and no text */
    rsp(&want, OP_GETK, ST_ENOENT, NULL, 0, "nope", 4, NULL, 0, 0, o + 5);
    rsp_ok(&want, OP_NOOP, 0, o + 8);
    n = (ssize_t)in.n;
    exchange(f, &in, &want, n);
}

/* The multiget idiom: many GETKQ then NOOP; only hits come back. */
static void
test_quiet_get_pipeline(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char fl[4];
    char key[16], val[16];
    uint32_t o = f->opaque;

    for (int i = 0; i < 20; i += 2) {
        snprintf(key, sizeof(key), "key%d", i);
        snprintf(val, sizeof(val), "v%d", i * 7);
        set_kv(f, key, val, (uint32_t)i);
    }
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        req(f, &in, i % 3 ? OP_GETKQ : OP_GETQ, NULL, 0, key, NULL, 0, 0);
    }
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    for (int i = 0; i < 20; i += 2) {
        bool k = i % 3 != 0;
        snprintf(key, sizeof(key), "key%d", i);
        snprintf(val, sizeof(val), "v%d", i * 7);
        ext32(fl, (uint32_t)i);
        rsp(&want, k ? OP_GETKQ : OP_GETQ, ST_OK, fl, 4, k ? key : NULL,
            k ? strlen(key) : 0, val, strlen(val), item_cas(f, key),
            o + (uint32_t)i);
    }
    rsp_ok(&want, OP_NOOP, 0, o + 20);
    ssize_t n = (ssize_t)in.n;
    exchange(f, &in, &want, n);
    assert_int_equal(f->s.ctr.bin_cmds, 21);
}

/* A value chained over several chunks comes back whole. */
static void
test_get_chained_value(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[8], fl[4];
    size_t vlen = ITEM_MAX - TC_ITEM_HEADER_SIZE - 3;
    char *v = malloc(vlen);
    assert_non_null(v);
    for (size_t i = 0; i < vlen; i++)
        v[i] = (char)('a' + i % 23);

    ext_store(e, 7, 0);
    req(f, &in, OP_SETQ, e, 8, "big", v, vlen, 0);
    uint32_t o = f->opaque;
    req(f, &in, OP_GET, NULL, 0, "big", NULL, 0, 0);
    ssize_t n = (ssize_t)in.n;
    assert_int_equal(run(f, &in), n);
    ext32(fl, 7);
    rsp(&want, OP_GET, ST_OK, fl, 4, NULL, 0, v, vlen, item_cas(f, "big"), o);
    expect_out(f, &want);
    free(v);
}

/* A call returns once a lot of replies wait, so that the connection's
 * back-pressure applies; called again it goes on where it stopped. */
static void
test_yield_on_large_replies(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0};
    unsigned char e[8];
    size_t vlen = ITEM_MAX - TC_ITEM_HEADER_SIZE - 1;
    char *v = calloc(1, vlen);
    assert_non_null(v);

    ext_store(e, 0, 0);
    req(f, &in, OP_SETQ, e, 8, "v", v, vlen, 0);
    assert_int_equal(run(f, &in), 24 + 8 + 1 + vlen);
    for (int i = 0; i < 10; i++)
        req(f, &in, OP_GET, NULL, 0, "v", NULL, 0, 0);
    obuf_consume(&f->out, obuf_pending(&f->out));
    size_t at = 0;
    int calls = 0;
    while (at < in.n) {
        ssize_t n =
            proto_process(&f->s, (const char *)in.p + at, in.n - at, &f->out);
        assert_true(n > 0);
        at += (size_t)n;
        calls++;
    }
    assert_true(calls > 1);
    assert_int_equal(obuf_pending(&f->out), 10 * (24 + 4 + vlen));
    assert_int_equal(f->s.ctr.bin_cmds, 11);
    b_free(&in);
    free(v);
}

static void
test_add_replace(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[8];
    uint32_t o = f->opaque;

    ext_store(e, 0, 0);
    req(f, &in, OP_ADD, e, 8, "a", "1", 1, 0);
    req(f, &in, OP_ADD, e, 8, "a", "2", 1, 0);
    req(f, &in, OP_ADDQ, e, 8, "a", "3", 1, 0);
    req(f, &in, OP_ADDQ, e, 8, "b", "4", 1, 0);
    req(f, &in, OP_REPLACE, e, 8, "c", "5", 1, 0);
    req(f, &in, OP_REPLACEQ, e, 8, "c", "6", 1, 0);
    req(f, &in, OP_REPLACEQ, e, 8, "b", "7", 1, 0);
    ssize_t n = (ssize_t)in.n;
    assert_int_equal(run(f, &in), n);
    /* the first add stored "1"; the cas the reply carried was the item's */
    uint64_t cas_a = item_cas(f, "a");
    rsp_ok(&want, OP_ADD, cas_a, o);
    rsp_err(&want, OP_ADD, ST_EEXISTS, o + 1);
    rsp_err(&want, OP_ADDQ, ST_EEXISTS, o + 2);
    rsp_err(&want, OP_REPLACE, ST_ENOENT, o + 4);
    rsp_err(&want, OP_REPLACEQ, ST_ENOENT, o + 5);
    expect_out(f, &want);
    check_value(f, "a", "1");
    check_value(f, "b", "7");
    check_value(f, "c", NULL);

    o = f->opaque;
    req(f, &in, OP_REPLACE, e, 8, "a", "8", 1, 0);
    n = (ssize_t)in.n;
    assert_int_equal(run(f, &in), n);
    rsp_ok(&want, OP_REPLACE, item_cas(f, "a"), o);
    expect_out(f, &want);
    check_value(f, "a", "8");
}

/* A nonzero CAS turns set, add and replace into CAS stores. */
static void
test_cas_stores(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[8];
    static const uint8_t ops[] = {OP_SET,  OP_ADD,  OP_REPLACE,
                                  OP_SETQ, OP_ADDQ, OP_REPLACEQ};

    ext_store(e, 0, 0);
    for (size_t i = 0; i < sizeof(ops); i++) {
        uint8_t op = ops[i];
        bool quiet = op >= OP_SETQ;
        set_kv(f, "c", "old", 0);
        uint64_t cas = item_cas(f, "c");
        uint32_t o = f->opaque;
        req(f, &in, op, e, 8, "c", "bad", 3, cas + 1000);
        req(f, &in, op, e, 8, "missing", "x", 1, cas);
        req(f, &in, op, e, 8, "c", "new", 3, cas);
        ssize_t n = (ssize_t)in.n;
        assert_int_equal(run(f, &in), n);
        rsp_err(&want, op, ST_EEXISTS, o);
        rsp_err(&want, op, ST_ENOENT, o + 1);
        if (!quiet)
            rsp_ok(&want, op, item_cas(f, "c"), o + 2);
        expect_out(f, &want);
        check_value(f, "c", "new");
        check_value(f, "missing", NULL);
    }
}

static void
test_append_prepend(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    uint32_t o;
    ssize_t n;

    set_kv(f, "s", "mid", 0xabcd);
    o = f->opaque;
    req(f, &in, OP_APPEND, NULL, 0, "s", "-end", 4, 0);
    n = (ssize_t)in.n;
    assert_int_equal(run(f, &in), n);
    rsp_ok(&want, OP_APPEND, item_cas(f, "s"), o);
    expect_out(f, &want);

    o = f->opaque;
    req(f, &in, OP_PREPENDQ, NULL, 0, "s", "start-", 6, 0);
    req(f, &in, OP_APPENDQ, NULL, 0, "s", "!", 1, 0);
    req(f, &in, OP_APPEND, NULL, 0, "none", "x", 1, 0);
    req(f, &in, OP_PREPENDQ, NULL, 0, "none", "x", 1, 0);
    req(f, &in, OP_APPEND, NULL, 0, "s", "?", 1, 12345);
    n = (ssize_t)in.n;
    rsp_err(&want, OP_APPEND, ST_NOT_STORED, o + 2);
    rsp_err(&want, OP_PREPENDQ, ST_NOT_STORED, o + 3);
    rsp_err(&want, OP_APPEND, ST_EEXISTS, o + 4);
    exchange(f, &in, &want, n);
    check_value(f, "s", "start-mid-end!");

    /* with the right cas; flags kept */
    uint64_t cas = item_cas(f, "s");
    o = f->opaque;
    req(f, &in, OP_PREPEND, NULL, 0, "s", ">", 1, cas);
    req(f, &in, OP_GET, NULL, 0, "s", NULL, 0, 0);
    n = (ssize_t)in.n;
    assert_int_equal(run(f, &in), n);
    unsigned char fl[4];
    ext32(fl, 0xabcd);
    cas = item_cas(f, "s");
    rsp_ok(&want, OP_PREPEND, cas, o);
    rsp(&want, OP_GET, ST_OK, fl, 4, NULL, 0, ">start-mid-end!", 15, cas,
        o + 1);
    expect_out(f, &want);
}

static void
test_delete(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};

    set_kv(f, "d", "v", 0);
    set_kv(f, "dq", "v", 0);
    uint64_t cas = item_cas(f, "d");
    uint32_t o = f->opaque;
    req(f, &in, OP_DELETE, NULL, 0, "d", NULL, 0, cas + 1);
    req(f, &in, OP_DELETE, NULL, 0, "d", NULL, 0, cas);
    req(f, &in, OP_DELETE, NULL, 0, "d", NULL, 0, 0);
    req(f, &in, OP_DELETEQ, NULL, 0, "dq", NULL, 0, 0);
    req(f, &in, OP_DELETEQ, NULL, 0, "dq", NULL, 0, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    rsp_err(&want, OP_DELETE, ST_EEXISTS, o);
    rsp_ok(&want, OP_DELETE, 0, o + 1);
    rsp_err(&want, OP_DELETE, ST_ENOENT, o + 2);
    rsp_err(&want, OP_DELETEQ, ST_ENOENT, o + 4);
    rsp_ok(&want, OP_NOOP, 0, o + 5);
    ssize_t n = (ssize_t)in.n;
    exchange(f, &in, &want, n);
    check_value(f, "d", NULL);
    check_value(f, "dq", NULL);
}

/* Send one arithmetic request and expect a value or an error. */
static void
arith(struct fx *f, uint8_t op, const char *key, uint64_t delta,
      uint64_t initial, uint32_t exp, uint64_t cas_in, uint16_t status,
      uint64_t value)
{
    struct bytes in = {0}, want = {0};
    unsigned char e[20];
    bool quiet = op == OP_INCRQ || op == OP_DECRQ;
    uint32_t o = f->opaque;

    ext_arith(e, delta, initial, exp);
    req(f, &in, op, e, 20, key, NULL, 0, cas_in);
    ssize_t n = (ssize_t)in.n;
    assert_int_equal(run(f, &in), n);
    if (status != ST_OK) {
        rsp_err(&want, op, status, o);
    } else if (!quiet) {
        struct bytes v = {0};
        b_be(&v, value, 8);
        rsp(&want, op, ST_OK, NULL, 0, NULL, 0, v.p, 8, item_cas(f, key), o);
        b_free(&v);
    }
    expect_out(f, &want);
}

static void
test_incr_decr(void **state)
{
    struct fx *f = *state;
    char buf[32];

    /* expiration 0xffffffff: a miss is not created */
    arith(f, OP_INCR, "n", 1, 5, 0xffffffffu, 0, ST_ENOENT, 0);
    arith(f, OP_DECR, "n", 1, 5, 0xffffffffu, 0, ST_ENOENT, 0);
    check_value(f, "n", NULL);
    /* otherwise created with the initial value, delta not applied */
    arith(f, OP_INCR, "n", 1, 42, 0, 0, ST_OK, 42);
    check_value(f, "n", "42");
    arith(f, OP_INCR, "n", 8, 42, 0, 0, ST_OK, 50);
    arith(f, OP_DECR, "n", 100, 42, 0, 0, ST_OK, 0); /* stops at 0 */
    arith(f, OP_INCRQ, "n", 7, 0, 0, 0, ST_OK, 0);
    arith(f, OP_DECRQ, "n", 2, 0, 0, 0, ST_OK, 0);
    check_value(f, "n", "5 "); /* padded in place, as memcached does */
    arith(f, OP_DECRQ, "q", 1, 9, 0, 0, ST_OK, 0); /* created quietly */
    check_value(f, "q", "9");
    arith(f, OP_INCRQ, "q2", 1, 9, 0xffffffffu, 0, ST_ENOENT, 0);

    /* wraps at 2^64 */
    snprintf(buf, sizeof(buf), "%" PRIu64, UINT64_MAX);
    set_kv(f, "w", buf, 0);
    arith(f, OP_INCR, "w", 2, 0, 0, 0, ST_OK, 1);

    /* non-numeric */
    set_kv(f, "t", "12abc", 0);
    arith(f, OP_INCR, "t", 1, 0, 0, 0, ST_BADVAL, 0);
    arith(f, OP_DECRQ, "t", 1, 0, 0, 0, ST_BADVAL, 0);

    /* cas */
    uint64_t cas = item_cas(f, "n");
    arith(f, OP_INCR, "n", 1, 0, 0, cas + 1, ST_EEXISTS, 0);
    arith(f, OP_INCR, "n", 1, 0, 0, cas, ST_OK, 6);

    /* a created item takes the expiration */
    arith(f, OP_INCR, "e", 1, 3, 100, 0, ST_OK, 3);
    tc_clock_advance(101);
    check_value(f, "e", NULL);
}

static void
test_touch_gat(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[4], fl[4];
    uint32_t o;

    set_kv(f, "g", "val", 99);
    uint64_t cas = item_cas(f, "g");
    ext32(e, 100);
    ext32(fl, 99);
    o = f->opaque;
    req(f, &in, OP_TOUCH, e, 4, "g", NULL, 0, 0);
    req(f, &in, OP_GAT, e, 4, "g", NULL, 0, 0);
    req(f, &in, OP_GATQ, e, 4, "g", NULL, 0, 0);
    req(f, &in, OP_GATK, e, 4, "g", NULL, 0, 0);
    req(f, &in, OP_GATKQ, e, 4, "g", NULL, 0, 0);
    req(f, &in, OP_TOUCH, e, 4, "x", NULL, 0, 0);
    req(f, &in, OP_GAT, e, 4, "x", NULL, 0, 0);
    req(f, &in, OP_GATQ, e, 4, "x", NULL, 0, 0);
    req(f, &in, OP_GATK, e, 4, "x", NULL, 0, 0);
    req(f, &in, OP_GATKQ, e, 4, "x", NULL, 0, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    /* touch answers the flags only */
    rsp(&want, OP_TOUCH, ST_OK, fl, 4, NULL, 0, NULL, 0, cas, o);
    rsp(&want, OP_GAT, ST_OK, fl, 4, NULL, 0, "val", 3, cas, o + 1);
    rsp(&want, OP_GATQ, ST_OK, fl, 4, NULL, 0, "val", 3, cas, o + 2);
    rsp(&want, OP_GATK, ST_OK, fl, 4, "g", 1, "val", 3, cas, o + 3);
    rsp(&want, OP_GATKQ, ST_OK, fl, 4, "g", 1, "val", 3, cas, o + 4);
    rsp_err(&want, OP_TOUCH, ST_ENOENT, o + 5);
    rsp_err(&want, OP_GAT, ST_ENOENT, o + 6);
    rsp(&want, OP_GATK, ST_ENOENT, NULL, 0, "x", 1, NULL, 0, 0, o + 8);
    rsp_ok(&want, OP_NOOP, 0, o + 10);
    ssize_t n = (ssize_t)in.n;
    exchange(f, &in, &want, n);

    tc_clock_advance(99);
    check_value(f, "g", "val");
    tc_clock_advance(2);
    check_value(f, "g", NULL);
}

static void
test_store_exptime(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[8];

    ext_store(e, 0, 10);
    req(f, &in, OP_SETQ, e, 8, "rel", "v", 1, 0);
    ext_store(e, 0, T0 + 20); /* absolute */
    req(f, &in, OP_SETQ, e, 8, "abs", "v", 1, 0);
    exchange(f, &in, &want, 2 * (24 + 8 + 3 + 1));
    tc_clock_advance(11);
    check_value(f, "rel", NULL);
    check_value(f, "abs", "v");
    tc_clock_advance(10);
    check_value(f, "abs", NULL);
}

static void
test_flush(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[4];
    uint32_t o;

    set_kv(f, "f1", "v", 0);
    o = f->opaque;
    req(f, &in, OP_FLUSH, NULL, 0, NULL, NULL, 0, 0);
    rsp_ok(&want, OP_FLUSH, 0, o);
    exchange(f, &in, &want, 24);
    check_value(f, "f1", NULL);

    set_kv(f, "f2", "v", 0);
    o = f->opaque;
    req(f, &in, OP_FLUSHQ, NULL, 0, NULL, NULL, 0, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    rsp_ok(&want, OP_NOOP, 0, o + 1);
    exchange(f, &in, &want, 48);
    check_value(f, "f2", NULL);

    /* with a delay */
    set_kv(f, "f3", "v", 0);
    ext32(e, 10);
    o = f->opaque;
    req(f, &in, OP_FLUSH, e, 4, NULL, NULL, 0, 0);
    rsp_ok(&want, OP_FLUSH, 0, o);
    exchange(f, &in, &want, 28);
    check_value(f, "f3", "v");
    tc_clock_advance(11);
    check_value(f, "f3", NULL);
}

static void
test_stat(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    uint32_t o = f->opaque;

    req(f, &in, OP_STAT, NULL, 0, NULL, NULL, 0, 0);
    rsp(&want, OP_STAT, ST_OK, NULL, 0, "pid", 3, "42", 2, 0, o);
    rsp(&want, OP_STAT, ST_OK, NULL, 0, "version", 7, "0.1.0", 5, 0, o);
    rsp(&want, OP_STAT, ST_OK, NULL, 0, "libevent", 8, "two words", 9, 0, o);
    rsp(&want, OP_STAT, ST_OK, NULL, 0, "empty", 5, NULL, 0, 0, o);
    rsp_ok(&want, OP_STAT, 0, o);
    exchange(f, &in, &want, 24);
    assert_string_equal(f->srv.last_group, "");

    o = f->opaque;
    req(f, &in, OP_STAT, NULL, 0, "settings", NULL, 0, 0);
    req(f, &in, OP_STAT, NULL, 0, "bogus", NULL, 0, 0);
    req(f, &in, OP_STAT, NULL, 0, "reset", NULL, 0, 0);
    rsp(&want, OP_STAT, ST_OK, NULL, 0, "maxbytes", 8, "67108864", 8, 0, o);
    rsp_ok(&want, OP_STAT, 0, o);
    rsp_err(&want, OP_STAT, ST_ENOENT, o + 1);
    rsp_ok(&want, OP_STAT, 0, o + 2);
    exchange(f, &in, &want, 24 * 3 + 8 + 5 + 5);
    assert_int_equal(f->srv.resets, 1);
    assert_int_equal(f->srv.stats_calls, 3);
}

static void
test_verbosity(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    unsigned char e[4];
    uint32_t o = f->opaque;

    ext32(e, 2);
    req(f, &in, OP_VERBOSITY, e, 4, NULL, NULL, 0, 0);
    rsp_ok(&want, OP_VERBOSITY, 0, o);
    exchange(f, &in, &want, 28);
    assert_int_equal(f->srv.verbosity, 2);
}

static void
test_quit(void **state)
{
    struct fx *f = *state;
    struct bytes in = {0}, want = {0};
    uint32_t o = f->opaque;

    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    req(f, &in, OP_QUIT, NULL, 0, NULL, NULL, 0, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    rsp_ok(&want, OP_NOOP, 0, o);
    rsp_ok(&want, OP_QUIT, 0, o + 1);
    exchange(f, &in, &want, PROTO_CLOSE);

    sess_init(f);
    o = f->opaque;
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    req(f, &in, OP_QUITQ, NULL, 0, NULL, NULL, 0, 0);
    req(f, &in, OP_NOOP, NULL, 0, NULL, NULL, 0, 0);
    rsp_ok(&want, OP_NOOP, 0, o);
    exchange(f, &in, &want, PROTO_CLOSE);
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_noop_version),
        TEST(test_set_get_family),
        TEST(test_quiet_get_pipeline),
        TEST(test_get_chained_value),
        TEST(test_yield_on_large_replies),
        TEST(test_add_replace),
        TEST(test_cas_stores),
        TEST(test_append_prepend),
        TEST(test_delete),
        TEST(test_incr_decr),
        TEST(test_touch_gat),
        TEST(test_store_exptime),
        TEST(test_flush),
        TEST(test_stat),
        TEST(test_verbosity),
        TEST(test_quit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

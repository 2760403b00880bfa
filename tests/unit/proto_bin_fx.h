#pragma once
/*
 * Shared fixture and helpers of the binary protocol unit tests
 * (test_proto_bin*.c): request packets built here are fed through
 * proto_process (which picks binary on the first byte) over a real cache,
 * and the replies compared byte for byte with what memcached 1.6 sends.
 *
 * Each test opens its own cache on a pool file under /dev/shm (the name
 * holds the pid), with the background thread off and the clock frozen at
 * T0, and removes the file in teardown. A mock server answers STAT and
 * VERBOSITY. Helpers are static inline so that each test file uses what it
 * needs.
 */

#include "src/server/proto/proto.h"

#include "src/server/obuf.h"
#include "src/tiercache.h"

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define T0 1700000000u
#define ITEM_MAX (64u * 1024u)

/* The wire values, as in memcached's protocol_binary.h. */
/* clang-format off */
enum {
    OP_GET = 0x00, OP_SET = 0x01, OP_ADD = 0x02, OP_REPLACE = 0x03,
    OP_DELETE = 0x04, OP_INCR = 0x05, OP_DECR = 0x06, OP_QUIT = 0x07,
    OP_FLUSH = 0x08, OP_GETQ = 0x09, OP_NOOP = 0x0a, OP_VERSION = 0x0b,
    OP_GETK = 0x0c, OP_GETKQ = 0x0d, OP_APPEND = 0x0e, OP_PREPEND = 0x0f,
    OP_STAT = 0x10, OP_SETQ = 0x11, OP_ADDQ = 0x12, OP_REPLACEQ = 0x13,
    OP_DELETEQ = 0x14, OP_INCRQ = 0x15, OP_DECRQ = 0x16, OP_QUITQ = 0x17,
    OP_FLUSHQ = 0x18, OP_APPENDQ = 0x19, OP_PREPENDQ = 0x1a,
    OP_VERBOSITY = 0x1b, OP_TOUCH = 0x1c, OP_GAT = 0x1d, OP_GATQ = 0x1e,
    OP_GATK = 0x23, OP_GATKQ = 0x24,
};

enum {
    ST_OK = 0x0000, ST_ENOENT = 0x0001, ST_EEXISTS = 0x0002,
    ST_E2BIG = 0x0003, ST_EINVAL = 0x0004, ST_NOT_STORED = 0x0005,
    ST_BADVAL = 0x0006, ST_UNKNOWN = 0x0081, ST_ENOMEM = 0x0082,
};
/* clang-format on */

/* A growable byte string for requests and expected replies. */
struct bytes {
    unsigned char *p;
    size_t n, cap;
};

static inline void
b_add(struct bytes *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static inline void
b_be(struct bytes *b, uint64_t v, int n)
{
    unsigned char x[8];
    for (int i = 0; i < n; i++)
        x[i] = (unsigned char)(v >> (8 * (n - 1 - i)));
    b_add(b, x, (size_t)n);
}

static inline void
b_free(struct bytes *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* A mock server for STAT and VERBOSITY. */
struct mock_srv {
    int resets;
    int verbosity;
    int stats_calls;
    char last_group[64];
};

static inline int
mock_stats(void *srv, struct proto_sess *s, const char *group, struct obuf *out)
{
    struct mock_srv *m = srv;
    (void)s;
    m->stats_calls++;
    snprintf(m->last_group, sizeof(m->last_group), "%s", group);
    if (strcmp(group, "") == 0) {
        obuf_add_str(out, "STAT pid 42\r\nSTAT version 0.1.0\r\n");
        obuf_add_str(out, "STAT libevent two words\r\nSTAT empty \r\n");
        return 0;
    }
    if (strcmp(group, "settings") == 0) {
        obuf_add_str(out, "STAT maxbytes 67108864\r\n");
        return 0;
    }
    return -ENOENT;
}

static inline void
mock_stats_reset(void *srv)
{
    ((struct mock_srv *)srv)->resets++;
}

static inline void
mock_verbosity(void *srv, int level)
{
    ((struct mock_srv *)srv)->verbosity = level;
}

static const struct proto_server_ops mock_ops = {
    .stats = mock_stats,
    .stats_reset = mock_stats_reset,
    .verbosity = mock_verbosity,
};

struct fx {
    struct tc_cache *c;
    char path[128];
    struct mock_srv srv;
    struct proto_sess s;
    struct obuf out;
    uint32_t opaque; /* of the next request */
};

/* A fresh connection's session (the protocol is chosen on its first
 * byte). */
static inline void
sess_init(struct fx *f)
{
    proto_sess_fini(&f->s);
    proto_sess_init(&f->s, f->c, &mock_ops, &f->srv, ITEM_MAX);
}

static inline void
fx_open(struct fx *f)
{
    struct tc_config cfg;
    tc_config_init(&cfg);
    cfg.pool_path = f->path;
    cfg.pool_size = 32u << 20;
    cfg.item_size_max = ITEM_MAX;
    cfg.chunk_max = 16 * 1024; /* so that big values are chained */
    cfg.background = false;
    int rc = tc_open(&cfg, &f->c);
    if (rc != 0)
        fail_msg("tc_open(%s): %d (%s)", f->path, rc, tc_errmsg());
    sess_init(f);
}

static inline int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->path, sizeof(f->path), "/dev/shm/tc_test_proto_bin_%d.pool",
             (int)getpid());
    unlink(f->path);
    tc_clock_set(T0);
    fx_open(f);
    obuf_init(&f->out);
    f->opaque = 0x10203040;
    *state = f;
    return 0;
}

static inline int
teardown(void **state)
{
    struct fx *f = *state;
    proto_sess_fini(&f->s);
    tc_close(f->c);
    unlink(f->path);
    obuf_fini(&f->out);
    tc_clock_set(0);
    free(f);
    return 0;
}

/* ---- packets -------------------------------------------------------- */

/* Append a request; its opaque is f->opaque, which then moves on. */
static inline void
req(struct fx *f, struct bytes *b, uint8_t op, const void *ext, uint8_t elen,
    const char *key, const void *val, size_t vlen, uint64_t cas)
{
    size_t klen = key ? strlen(key) : 0;
    unsigned char h[4] = {0x80, op, 0, 0};
    b_add(b, h, 2);
    b_be(b, klen, 2);
    b_be(b, elen, 1);
    b_be(b, 0, 1); /* data type */
    b_be(b, 0, 2); /* vbucket */
    b_be(b, elen + klen + vlen, 4);
    b_be(b, f->opaque++, 4);
    b_be(b, cas, 8);
    b_add(b, ext, elen);
    b_add(b, key, klen);
    b_add(b, val, vlen);
}

/* Append the expected reply to the request whose opaque was `opaque`. */
static inline void
rsp(struct bytes *b, uint8_t op, uint16_t status, const void *ext, uint8_t elen,
    const void *key, size_t klen, const void *val, size_t vlen, uint64_t cas,
    uint32_t opaque)
{
    unsigned char h[2] = {0x81, op};
    b_add(b, h, 2);
    b_be(b, klen, 2);
    b_be(b, elen, 1);
    b_be(b, 0, 1);
    b_be(b, status, 2);
    b_be(b, elen + klen + vlen, 4);
    b_be(b, opaque, 4);
    b_be(b, cas, 8);
    b_add(b, ext, elen);
    b_add(b, key, klen);
    b_add(b, val, vlen);
}

static inline const char *
err_text(uint16_t status)
{
    switch (status) {
    case ST_ENOENT:
        return "Not found";
    case ST_EEXISTS:
        return "Data exists for key.";
    case ST_E2BIG:
        return "Too large.";
    case ST_EINVAL:
        return "Invalid arguments";
    case ST_NOT_STORED:
        return "Not stored.";
    case ST_BADVAL:
        return "Non-numeric server-side value for incr or decr";
    case ST_UNKNOWN:
        return "Unknown command";
    case ST_ENOMEM:
        return "Out of memory";
    }
    return "?";
}

static inline void
rsp_err(struct bytes *b, uint8_t op, uint16_t status, uint32_t opaque)
{
    const char *t = err_text(status);
    rsp(b, op, status, NULL, 0, NULL, 0, t, strlen(t), 0, opaque);
}

static inline void
rsp_ok(struct bytes *b, uint8_t op, uint64_t cas, uint32_t opaque)
{
    rsp(b, op, ST_OK, NULL, 0, NULL, 0, NULL, 0, cas, opaque);
}

static inline void
ext_store(unsigned char e[8], uint32_t flags, uint32_t exptime)
{
    struct bytes b = {0};
    b_be(&b, flags, 4);
    b_be(&b, exptime, 4);
    memcpy(e, b.p, 8);
    b_free(&b);
}

static inline void
ext_arith(unsigned char e[20], uint64_t delta, uint64_t initial, uint32_t exp)
{
    struct bytes b = {0};
    b_be(&b, delta, 8);
    b_be(&b, initial, 8);
    b_be(&b, exp, 4);
    memcpy(e, b.p, 20);
    b_free(&b);
}

static inline void
ext32(unsigned char e[4], uint32_t v)
{
    e[0] = (unsigned char)(v >> 24);
    e[1] = (unsigned char)(v >> 16);
    e[2] = (unsigned char)(v >> 8);
    e[3] = (unsigned char)v;
}

/* ---- running -------------------------------------------------------- */

static inline void
hexdump(const char *what, const unsigned char *p, size_t n)
{
    fprintf(stderr, "%s (%zu bytes):", what, n);
    for (size_t i = 0; i < n && i < 512; i++)
        fprintf(stderr, "%s%02x", i % 24 == 0 ? "\n  " : " ", p[i]);
    fprintf(stderr, "\n");
}

static inline void
expect_bytes(const unsigned char *got, size_t gn, const struct bytes *want)
{
    if (gn != want->n || (gn && memcmp(got, want->p, gn) != 0)) {
        hexdump("got", got, gn);
        hexdump("want", want->p, want->n);
        fail_msg("reply differs");
    }
}

/* Feed `in` in one call; the reply replaces f->out's contents. */
static inline ssize_t
feed(struct fx *f, const struct bytes *in)
{
    obuf_consume(&f->out, obuf_pending(&f->out));
    return proto_process(&f->s, (const char *)in->p, in->n, &f->out);
}

/* Feed in one call and forget the request. */
static inline ssize_t
run(struct fx *f, struct bytes *in)
{
    ssize_t rc = feed(f, in);
    b_free(in);
    return rc;
}

/* The reply is exactly `want`. */
static inline void
expect_out(struct fx *f, struct bytes *want)
{
    expect_bytes((unsigned char *)f->out.buf + f->out.head,
                 obuf_pending(&f->out), want);
    b_free(want);
}

/* Feed in one call, expect rc (all consumed, or closed) and exactly `want`.
 */
static inline void
exchange(struct fx *f, struct bytes *in, struct bytes *want, ssize_t rc)
{
    assert_int_equal(run(f, in), rc);
    expect_out(f, want);
}

static inline uint64_t
item_cas(struct fx *f, const char *key)
{
    struct tc_item_info info;
    char buf[16];
    int rc = tc_get_copy(f->c, key, strlen(key), buf, sizeof(buf), &info);
    assert_int_equal(rc, TC_OK);
    assert_true(info.cas != 0);
    return info.cas;
}

static inline void
set_kv(struct fx *f, const char *key, const char *val, uint32_t flags)
{
    assert_int_equal(tc_store(f->c, TC_SET, key, strlen(key), val, strlen(val),
                              flags, 0, 0, NULL),
                     TC_OK);
}

static inline void
check_value(struct fx *f, const char *key, const char *val)
{
    char buf[256];
    struct tc_item_info info;
    int rc = tc_get_copy(f->c, key, strlen(key), buf, sizeof(buf), &info);
    if (!val) {
        assert_int_equal(rc, TC_NOT_FOUND);
        return;
    }
    assert_int_equal(rc, TC_OK);
    assert_int_equal(info.vlen, strlen(val));
    assert_memory_equal(buf, val, info.vlen);
}

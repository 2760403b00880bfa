#pragma once
/*
 * Shared fixture and helpers of the text protocol unit tests
 * (test_proto_text*.c): requests fed through proto_process over a real
 * engine, the replies compared byte for byte.
 *
 * Each test opens its own cache on a /dev/shm pool (background off, clock
 * frozen at T0) and a session with a stub proto_server_ops; teardown closes
 * and removes both. Helpers are static inline so that each test file uses
 * what it needs.
 */

#include "src/server/proto/proto.h"

#include "src/server/obuf.h"
#include "src/server/proto/proto_util.h"
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define T0 1700000000u
#define MIB (1024u * 1024u)
#define POOL_SIZE (48ull * MIB)
#define ITEM_MAX (2u * MIB)

/* ---- stub server -------------------------------------------------------- */

struct stub_srv {
    int stats_resets;
    int verbosity;
    uint64_t memlimit_mib;
    bool shutdown_enabled;
    int shutdowns;
};

static inline int
stub_stats(void *srv, struct proto_sess *s, const char *group, struct obuf *out)
{
    (void)srv;
    (void)s;
    if (strcmp(group, "") == 0)
        return obuf_add_str(out, "STAT fake 1\r\n");
    if (strcmp(group, "settings") == 0)
        return obuf_add_str(out, "STAT maxbytes 67108864\r\n"
                                 "STAT item_size_max 2097152\r\n");
    if (strcmp(group, "partial") == 0)
        obuf_add_str(out, "STAT half 1\r\n"); /* then fails */
    return -ENOENT;
}

static inline void
stub_stats_reset(void *srv)
{
    ((struct stub_srv *)srv)->stats_resets++;
}

static inline int
stub_shutdown(void *srv)
{
    struct stub_srv *st = srv;
    if (!st->shutdown_enabled)
        return -EPERM;
    st->shutdowns++;
    return 0;
}

static inline void
stub_verbosity(void *srv, int level)
{
    ((struct stub_srv *)srv)->verbosity = level;
}

static inline int
stub_memlimit(void *srv, uint64_t mib)
{
    struct stub_srv *st = srv;
    if (mib > 1024)
        return -EINVAL;
    st->memlimit_mib = mib;
    /* 12: a shrink accepted but not finished (tiercached under load) */
    return mib == 12 ? -EBUSY : 0;
}

static const struct proto_server_ops stub_ops = {
    .stats = stub_stats,
    .stats_reset = stub_stats_reset,
    .shutdown = stub_shutdown,
    .verbosity = stub_verbosity,
    .memlimit = stub_memlimit,
};

/* ---- fixture ------------------------------------------------------------ */

struct fx {
    struct tc_cache *c;
    char path[192];
    struct stub_srv srv;
    struct proto_sess s;
    struct obuf out;
    bool closed;
    char *acc; /* chunked feeding: bytes received, not consumed */
    size_t acc_len, acc_cap;
};

static inline void
open_cache(struct fx *f)
{
    struct tc_config cfg;
    tc_config_init(&cfg);
    cfg.pool_path = f->path;
    cfg.pool_size = POOL_SIZE;
    cfg.item_size_max = ITEM_MAX;
    cfg.background = false;
    int rc = tc_open(&cfg, &f->c);
    if (rc != 0)
        fail_msg("tc_open(%s): %d (%s)", f->path, rc, tc_errmsg());
}

/* A fresh cache and session: the same input gives the same bytes. */
static inline void
fresh(struct fx *f)
{
    if (f->c) {
        proto_sess_fini(&f->s);
        tc_close(f->c);
        f->c = NULL;
    }
    unlink(f->path);
    tc_clock_set(T0);
    open_cache(f);
    memset(&f->srv, 0, sizeof(f->srv));
    proto_sess_init(&f->s, f->c, &stub_ops, &f->srv, ITEM_MAX);
    obuf_fini(&f->out);
    obuf_init(&f->out);
    f->closed = false;
    f->acc_len = 0;
}

static inline int
setup(void **state)
{
    static int seq;
    struct fx *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    snprintf(f->path, sizeof(f->path), "/dev/shm/tc_test_proto_text_%d_%d.pool",
             (int)getpid(), seq++);
    obuf_init(&f->out);
    fresh(f);
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
    free(f->acc);
    tc_clock_set(0);
    free(f);
    return 0;
}

/* ---- feeding ------------------------------------------------------------ */

/* Run proto_process over the received bytes as a connection would: again
 * and again while it consumes, until it wants more or closes. */
static inline void
pump(struct fx *f)
{
    size_t pos = 0;
    while (!f->closed && pos < f->acc_len) {
        ssize_t rc =
            proto_process(&f->s, f->acc + pos, f->acc_len - pos, &f->out);
        if (rc == PROTO_CLOSE) {
            f->closed = true;
            break;
        }
        assert_true(rc >= 0);
        assert_true((size_t)rc <= f->acc_len - pos);
        if (rc == 0 && !f->s.resume)
            break;
        pos += (size_t)rc; /* with s.resume: carry on with the get */
    }
    memmove(f->acc, f->acc + pos, f->acc_len - pos);
    f->acc_len -= pos;
}

static inline void
receive(struct fx *f, const char *p, size_t n)
{
    if (f->closed)
        return;
    if (f->acc_len + n > f->acc_cap) {
        size_t cap = f->acc_cap ? f->acc_cap : 4096;
        while (cap < f->acc_len + n)
            cap *= 2;
        f->acc = realloc(f->acc, cap);
        assert_non_null(f->acc);
        f->acc_cap = cap;
    }
    memcpy(f->acc + f->acc_len, p, n);
    f->acc_len += n;
    pump(f);
}

/* The output so far, taken out of the obuf. */
static inline char *
take_output(struct fx *f, size_t *len)
{
    *len = obuf_pending(&f->out);
    char *p = malloc(*len + 1);
    assert_non_null(p);
    if (*len)
        memcpy(p, f->out.buf + f->out.head, *len);
    p[*len] = '\0';
    obuf_consume(&f->out, *len);
    return p;
}

static inline void
print_escaped(const char *label, const char *p, size_t n)
{
    fprintf(stderr, "%s (%zu bytes): \"", label, n);
    for (size_t i = 0; i < n && i < 600; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\r')
            fputs("\\r", stderr);
        else if (ch == '\n')
            fputs("\\n", stderr);
        else if (ch < 0x20 || ch >= 0x7f)
            fprintf(stderr, "\\x%02x", ch);
        else
            fputc(ch, stderr);
    }
    fputs(n > 600 ? "\"...\n" : "\"\n", stderr);
}

static inline void
assert_bytes(const char *got, size_t glen, const char *want, size_t wlen)
{
    if (glen == wlen && memcmp(got, want, glen) == 0)
        return;
    print_escaped("expected", want, wlen);
    print_escaped("got     ", got, glen);
    fail_msg("reply differs");
}

/* Send input in one piece; the replies must be exactly want. */
static inline void
expect_n(struct fx *f, const char *in, size_t n, const char *want, size_t wlen)
{
    size_t glen;
    receive(f, in, n);
    char *got = take_output(f, &glen);
    assert_bytes(got, glen, want, wlen);
    free(got);
}

static inline void
expect(struct fx *f, const char *in, const char *want)
{
    expect_n(f, in, strlen(in), want, strlen(want));
}

/*
 * Meta commands (src/server/proto/proto_meta.c) against a real engine: exact
 * reply bytes for every flag of mg, ms, md, ma, mn and me, base64 keys, opaque
 * echo, quiet mode, stale-while-revalidate, vivify, early recache, explicit
 * CAS, and memcached's error strings.
 *
 * Requests go through proto_process(), the connection's entry point (the
 * text parser hands meta lines to proto_meta_process()), fed the way a
 * connection feeds it: several requests per buffer, partial requests kept
 * for the next read.
 */

#include "src/server/proto/proto.h"
#include "src/tiercache.h"

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
#define IN_MAX (4u << 20)

struct fx {
    char path[160];
    struct tc_cache *c;
    struct proto_sess s;
    struct obuf out;
    char *in; /* bytes received and not consumed yet */
    size_t inlen;
};

/* The cache with packed_item_max as given (UINT32_MAX: the default). */
static int
setup_store(void **state, uint32_t packed_max)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct tc_config cfg;

    if (!f)
        return -1;
    snprintf(f->path, sizeof(f->path), "/dev/shm/tc_test_proto_meta_%d.pool",
             (int)getpid());
    unlink(f->path);
    tc_config_init(&cfg);
    cfg.pool_path = f->path;
    cfg.pool_size = 16u << 20;
    cfg.item_size_max = 64u << 10;
    cfg.background = false;
    if (packed_max != UINT32_MAX)
        cfg.packed_item_max = packed_max;
    tc_clock_set(T0);
    if (tc_open(&cfg, &f->c) != 0) {
        fprintf(stderr, "tc_open: %s\n", tc_errmsg());
        free(f);
        return -1;
    }
    unlink(f->path); /* mapped still; nothing left behind if a test dies */
    f->in = malloc(IN_MAX);
    if (!f->in)
        return -1;
    proto_sess_init(&f->s, f->c, NULL, NULL, cfg.item_size_max);
    obuf_init(&f->out);
    *state = f;
    return 0;
}

static int
setup(void **state)
{
    return setup_store(state, UINT32_MAX);
}

/* The slab store named (packed_item_max 0): a script whose expected
 * replies hold the counter's CAS values and slab classes. */
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
    proto_sess_fini(&f->s);
    obuf_fini(&f->out);
    tc_close(f->c);
    tc_clock_set(0);
    free(f->in);
    free(f);
    return 0;
}

/* Parse what can be parsed of the pending input, as a connection does. */
static void
drive(struct fx *f)
{
    size_t off = 0;
    while (off < f->inlen) {
        ssize_t n = proto_process(&f->s, f->in + off, f->inlen - off, &f->out);
        assert_true(n != PROTO_CLOSE);
        assert_true(n >= 0 && (size_t)n <= f->inlen - off);
        if (n == 0)
            break;
        off += (size_t)n;
    }
    memmove(f->in, f->in + off, f->inlen - off);
    f->inlen -= off;
}

static void
feed(struct fx *f, const void *p, size_t n)
{
    assert_true(f->inlen + n <= IN_MAX);
    memcpy(f->in + f->inlen, p, n);
    f->inlen += n;
    drive(f);
}

/* Everything replied since the last call, consumed. */
static char *
take(struct fx *f, size_t *n)
{
    static char buf[1 << 20];
    *n = obuf_pending(&f->out);
    assert_true(*n < sizeof(buf));
    if (*n) {
        memcpy(buf, f->out.buf + f->out.head, *n);
        obuf_consume(&f->out, *n);
    }
    buf[*n] = '\0';
    return buf;
}

static void
show(const char *what, const char *p, size_t n)
{
    fprintf(stderr, "%s: \"", what);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\r')
            fputs("\\r", stderr);
        else if (ch == '\n')
            fputs("\\n", stderr);
        else if (ch < 32 || ch > 126)
            fprintf(stderr, "\\x%02x", ch);
        else
            fputc(ch, stderr);
    }
    fputs("\"\n", stderr);
}

/* Send req (a C string); the reply must be exactly want. */
#define EXPECT(f, req, want) expect_at(f, req, want, __LINE__)
static void
expect_at(struct fx *f, const char *req, const char *want, int line)
{
    size_t n;
    feed(f, req, strlen(req));
    char *got = take(f, &n);
    if (n != strlen(want) || memcmp(got, want, n) != 0) {
        show("request", req, strlen(req));
        show("want   ", want, strlen(want));
        show("got    ", got, n);
        fail_msg("reply mismatch at line %d", line);
    }
}

/* Send req and return its reply (a C string valid until the next call). */
static const char *
ask(struct fx *f, const char *req)
{
    size_t n;
    feed(f, req, strlen(req));
    return take(f, &n);
}

/* The CAS of key through "mg key c". */
static uint64_t
cas_of(struct fx *f, const char *key)
{
    char req[300];
    uint64_t cas = 0;
    snprintf(req, sizeof(req), "mg %s c u\r\n", key);
    const char *r = ask(f, req);
    if (sscanf(r, "HD c%" SCNu64, &cas) != 1)
        fail_msg("no CAS in \"%s\"", r);
    return cas;
}

/* ---- mn, mg -------------------------------------------------------------- */

static void
test_mn(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "mn\r\n", "MN\r\n");
    EXPECT(f, "mn\n", "MN\r\n");
    EXPECT(f, "mn\r\nmn\r\nmn\r\n", "MN\r\nMN\r\nMN\r\n");
    assert_int_equal(f->s.ctr.meta_cmds, 5);
}

static void
test_mg_miss_and_hit(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "mg foo v\r\n", "EN\r\n");
    EXPECT(f, "mg foo\r\n", "EN\r\n");
    EXPECT(f, "mg foo v k Oab\r\n", "EN kfoo Oab\r\n");
    EXPECT(f, "mg foo Oab v k\r\n", "EN Oab kfoo\r\n");
    EXPECT(f, "ms foo 2\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg foo\r\n", "HD\r\n");
    EXPECT(f, "mg foo v\r\n", "VA 2\r\nhi\r\n");
    EXPECT(f, "mg foo s v\r\n", "VA 2 s2\r\nhi\r\n");
    EXPECT(f, "mg foo k\r\n", "HD kfoo\r\n");
    /* value with bytes that look like protocol */
    size_t n;
    feed(f, "ms bin 6\r\na\r\nb\0c\r\n", 18);
    assert_string_equal(take(f, &n), "HD\r\n");
    feed(f, "mg bin v\r\n", 10);
    const char *got = take(f, &n);
    assert_int_equal(n, 14);
    assert_memory_equal(got, "VA 6\r\na\r\nb\0c\r\n", 14);
    /* empty value */
    EXPECT(f, "ms e 0\r\n\r\n", "HD\r\n");
    EXPECT(f, "mg e v s\r\n", "VA 0 s0\r\n\r\n");
}

static void
test_mg_flags_in_request_order(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 5 F42 T100 E777\r\nhello\r\n", "HD\r\n");
    EXPECT(f, "mg foo s v t f c k Oxy\r\n",
           "VA 5 s5 t100 f42 c777 kfoo Oxy\r\nhello\r\n");
    EXPECT(f, "mg foo Oxy k c f t v s\r\n",
           "VA 5 Oxy kfoo c777 f42 t100 s5\r\nhello\r\n");
    EXPECT(f, "mg foo c f\r\n", "HD c777 f42\r\n");
    tc_clock_advance(40);
    EXPECT(f, "mg foo t\r\n", "HD t60\r\n");
    EXPECT(f, "ms forever 1\r\nx\r\n", "HD\r\n");
    EXPECT(f, "mg forever t f\r\n", "HD t-1 f0\r\n");
    /* largest client flags */
    EXPECT(f, "ms big 1 F4294967295\r\nx\r\n", "HD\r\n");
    EXPECT(f, "mg big f\r\n", "HD f4294967295\r\n");
}

static void
test_mg_touch(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 2 T100\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg foo T30 t\r\n", "HD t30\r\n");
    tc_clock_advance(10);
    EXPECT(f, "mg foo t v\r\n", "VA 2 t20\r\nhi\r\n");
    EXPECT(f, "mg foo T0 t\r\n", "HD t-1\r\n");
    EXPECT(f, "mg foo T5\r\n", "HD\r\n");
    tc_clock_advance(6);
    EXPECT(f, "mg foo v\r\n", "EN\r\n");
    EXPECT(f, "mg nope T30\r\n", "EN\r\n");
}

static void
test_mg_hit_before_and_no_bump(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 2\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg foo u h\r\n", "HD h0\r\n");
    EXPECT(f, "mg foo h\r\n", "HD h0\r\n");
    EXPECT(f, "mg foo h v\r\n", "VA 2 h1\r\nhi\r\n");
    EXPECT(f, "ms foo 2\r\nho\r\n", "HD\r\n"); /* a new item: not fetched */
    EXPECT(f, "mg foo h\r\n", "HD h0\r\n");
}

static void
test_mg_cas_compare(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 2 E50\r\nhi\r\n", "HD\r\n");
    /* C equal to the item's CAS: the client has this version, no value */
    EXPECT(f, "mg foo v c C50\r\n", "HD c50\r\n");
    EXPECT(f, "mg foo v c C49\r\n", "VA 2 c50\r\nhi\r\n");
}

/* ---- quiet mode ---------------------------------------------------------- */

static void
test_quiet(void **state)
{
    struct fx *f = *state;
    /* mg: EN hidden, hits shown; mn ends the pipeline */
    EXPECT(f, "mg a v q\r\nmg b v q k\r\nmn\r\n", "MN\r\n");
    EXPECT(f, "ms a 1 q\r\n1\r\n", "");
    EXPECT(f, "mg a v q k\r\nmg b v q k\r\nmn\r\n", "VA 1 ka\r\n1\r\nMN\r\n");
    EXPECT(f, "mg a q\r\n", "HD\r\n");
    /* ms: HD hidden, NS/EX/NF shown */
    EXPECT(f, "ms a 1 q ME Oo\r\n2\r\n", "NS Oo\r\n");
    EXPECT(f, "ms a 1 q C999\r\n2\r\n", "EX\r\n");
    EXPECT(f, "ms zz 1 q C999\r\n2\r\n", "NF\r\n");
    /* md: HD hidden, NF/EX shown */
    EXPECT(f, "md a q C999\r\n", "EX\r\n");
    EXPECT(f, "md a q\r\n", "");
    EXPECT(f, "md a q\r\n", "NF\r\n");
    /* ma: success hidden even with v */
    EXPECT(f, "ms n 1\r\n5\r\n", "HD\r\n");
    EXPECT(f, "ma n q v\r\n", "");
    EXPECT(f, "ma n v\r\n", "VA 1\r\n7\r\n");
    EXPECT(f, "ma nope q\r\n", "NF\r\n");
    /* errors are never quiet */
    EXPECT(f, "mg a q y\r\n", "CLIENT_ERROR invalid flag\r\n");
    EXPECT(f, "mn\r\n", "MN\r\n");
}

/* ---- base64 keys, opaque --------------------------------------------------
 */

static void
test_base64_keys(void **state)
{
    struct fx *f = *state;
    /* "テスト" in UTF-8 */
    static const unsigned char raw[] = {0xe3, 0x83, 0x86, 0xe3, 0x82,
                                        0xb9, 0xe3, 0x83, 0x88};
    char buf[8];
    struct tc_item_info info;

    EXPECT(f, "ms 44OG44K544OI 2 b\r\nhi\r\n", "HD\r\n");
    assert_int_equal(
        tc_get_copy(f->c, raw, sizeof(raw), buf, sizeof(buf), &info), TC_OK);
    assert_memory_equal(buf, "hi", 2);
    EXPECT(f, "mg 44OG44K544OI b v k\r\n", "VA 2 k44OG44K544OI b\r\nhi\r\n");
    EXPECT(f, "mg 44OG44K544OI v k b\r\n", "VA 2 k44OG44K544OI b\r\nhi\r\n");
    /* the base64 text is a different (ASCII) key */
    EXPECT(f, "mg 44OG44K544OI v\r\n", "EN\r\n");
    EXPECT(f, "ms 44OG44K544OI 2 b k c E9\r\nho\r\n",
           "HD k44OG44K544OI b c9\r\n");
    EXPECT(f, "mg AAEC b k\r\n", "EN kAAEC b\r\n");
    /* padding: 1 and 2 bytes */
    EXPECT(f, "ms YQ== 1 b\r\n1\r\n", "HD\r\n");
    EXPECT(f, "mg a v\r\n", "VA 1\r\n1\r\n");
    EXPECT(f, "mg YWI= b k\r\n", "EN kYWI= b\r\n");
    EXPECT(f, "me YQ== b\r\n",
           "ME YQ== exp=-1 la=0 cas=10 fetch=yes cls=1 size=26\r\n");
    EXPECT(f, "ma YQ== b v k\r\n", "VA 1 kYQ== b\r\n2\r\n");
    EXPECT(f, "md YQ== b k q\r\n", "");
    EXPECT(f, "md YQ== b k\r\n", "NF kYQ== b\r\n");
    /* not base64 */
    EXPECT(f, "mg abc b v\r\n", "CLIENT_ERROR error decoding key\r\n");
    EXPECT(f, "mg ab$= b v\r\n", "CLIENT_ERROR error decoding key\r\n");
    EXPECT(f, "mg a=bc b v\r\n", "CLIENT_ERROR error decoding key\r\n");
    EXPECT(f, "ms ab$= 2 b\r\nhi\r\nmn\r\n",
           "CLIENT_ERROR error decoding key\r\nMN\r\n");
    EXPECT(f, "ma ab$= b\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "me ab$= b\r\n", "CLIENT_ERROR bad command line format\r\n");
}

static void
test_opaque(void **state)
{
    struct fx *f = *state;
    char req[128];
    char o32[33];

    memset(o32, 'x', 32);
    o32[0] = 'O';
    o32[32] = '\0';
    EXPECT(f, "ms foo 2 O123\r\nhi\r\n", "HD O123\r\n");
    EXPECT(f, "mg foo v O123\r\n", "VA 2 O123\r\nhi\r\n");
    EXPECT(f, "mg bar v Oopaque\r\n", "EN Oopaque\r\n");
    EXPECT(f, "md bar O1\r\n", "NF O1\r\n");
    EXPECT(f, "ma bar O1\r\n", "NF O1\r\n");
    EXPECT(f, "mg foo O\r\n", "HD O\r\n");
    snprintf(req, sizeof(req), "mg foo %s\r\n", o32);
    char want[128];
    snprintf(want, sizeof(want), "HD %s\r\n", o32);
    EXPECT(f, req, want);
    snprintf(req, sizeof(req), "mg foo %sx\r\n", o32);
    EXPECT(f, req, "CLIENT_ERROR opaque token too long\r\n");
    snprintf(req, sizeof(req), "ms foo 2 %sx\r\nhi\r\nmn\r\n", o32);
    EXPECT(f, req, "CLIENT_ERROR opaque token too long\r\nMN\r\n");
}

/* ---- stale-while-revalidate, vivify, recache ------------------------------
 */

static void
test_stale_while_revalidate(void **state)
{
    struct fx *f = *state;
    char req[128], want[128];

    EXPECT(f, "ms foo 4 T100\r\ndata\r\n", "HD\r\n");
    uint64_t cas0 = cas_of(f, "foo");
    EXPECT(f, "md foo I T30\r\n", "HD\r\n");
    uint64_t cas1 = cas_of(f, "foo"); /* that read won: mark X W */
    assert_true(cas1 > cas0);
    EXPECT(f, "md foo I T30\r\n", "HD\r\n"); /* again: fresh win */
    cas1 = cas_of(f, "foo");

    EXPECT(f, "md foo I\r\n", "HD\r\n");
    uint64_t cas2 = 0;
    const char *r = ask(f, "mg foo t c v\r\n");
    assert_int_equal(sscanf(r, "VA 4 t30 c%" SCNu64, &cas2), 1);
    assert_true(cas2 > cas1);
    snprintf(want, sizeof(want), "VA 4 t30 c%" PRIu64 " X W\r\ndata\r\n", cas2);
    assert_string_equal(r, want);
    /* the next reader sees that the win is taken */
    snprintf(want, sizeof(want), "VA 4 t30 c%" PRIu64 " Z X\r\ndata\r\n", cas2);
    EXPECT(f, "mg foo t c v\r\n", want);
    EXPECT(f, "mg foo\r\n", "HD Z X\r\n");

    /* a writer with an older CAS and I: stored, but still stale */
    snprintf(req, sizeof(req), "ms foo 3 C%" PRIu64 " I T90\r\nold\r\n", cas0);
    EXPECT(f, req, "HD\r\n");
    r = ask(f, "mg foo v\r\n");
    assert_non_null(strstr(r, " X"));
    assert_non_null(strstr(r, "\r\nold\r\n"));
    uint64_t cas3 = cas_of(f, "foo");

    /* the winner's set with the current CAS clears it */
    snprintf(req, sizeof(req), "ms foo 3 C%" PRIu64 " T60\r\nnew\r\n", cas3);
    EXPECT(f, req, "HD\r\n");
    EXPECT(f, "mg foo t v\r\n", "VA 3 t60\r\nnew\r\n");
    /* an invalidation with a wrong CAS is refused */
    EXPECT(f, "md foo I C1\r\n", "EX\r\n");
    EXPECT(f, "mg foo v\r\n", "VA 3\r\nnew\r\n");
    EXPECT(f, "md nope I\r\n", "NF\r\n");
}

static void
test_vivify(void **state)
{
    struct fx *f = *state;
    char req[128], want[128];
    uint64_t cas = 0;

    const char *r = ask(f, "mg foo N30 s c t v\r\n");
    assert_int_equal(sscanf(r, "VA 0 s0 c%" SCNu64, &cas), 1);
    snprintf(want, sizeof(want), "VA 0 s0 c%" PRIu64 " t30 W\r\n\r\n", cas);
    assert_string_equal(r, want);
    snprintf(want, sizeof(want), "VA 0 s0 c%" PRIu64 " t30 Z\r\n\r\n", cas);
    EXPECT(f, "mg foo s c t v N30\r\n", want);
    EXPECT(f, "mg foo\r\n", "HD Z\r\n");
    EXPECT(f, "mg bar N30\r\n", "HD W\r\n");
    EXPECT(f, "mg bar N30 q k\r\n", "HD kbar Z\r\n");
    /* flags act in request order, as in memcached: a t ahead of N sees
     * the new item before N gave it its TTL; of T and N the last wins */
    EXPECT(f, "mg baz t N30\r\n", "HD t-1 W\r\n");
    EXPECT(f, "mg baz t\r\n", "HD t30 Z\r\n");
    EXPECT(f, "mg qux N30 T60 t\r\n", "HD t60 W\r\n");
    EXPECT(f, "mg qux2 T60 N30 t\r\n", "HD t30 W\r\n");
    /* T on an existing item: t before it reports the old TTL */
    EXPECT(f, "mg qux t T90\r\n", "HD t60 Z\r\n");
    EXPECT(f, "mg qux t\r\n", "HD t90 Z\r\n");

    /* the winner recaches with the CAS it got */
    snprintf(req, sizeof(req), "ms foo 5 C%" PRIu64 " T60\r\nvalue\r\n", cas);
    EXPECT(f, req, "HD\r\n");
    EXPECT(f, "mg foo t v N30\r\n", "VA 5 t60\r\nvalue\r\n");

    /* the placeholder expires with its TTL */
    tc_clock_advance(31);
    EXPECT(f, "mg bar v\r\n", "EN\r\n");
    EXPECT(f, "mg bar v N30 t\r\n", "VA 0 t30 W\r\n\r\n");
}

static void
test_recache(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 2 T100\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg foo v t R30\r\n", "VA 2 t100\r\nhi\r\n");
    tc_clock_advance(80);
    EXPECT(f, "mg foo v t R30\r\n", "VA 2 t20 W\r\nhi\r\n");
    EXPECT(f, "mg foo v t R30\r\n", "VA 2 t20 Z\r\nhi\r\n");
    EXPECT(f, "mg foo t\r\n", "HD t20 Z\r\n");
    /* recached: no more Z */
    EXPECT(f, "ms foo 2 T100\r\nho\r\n", "HD\r\n");
    EXPECT(f, "mg foo v t R30\r\n", "VA 2 t100\r\nho\r\n");
    /* no TTL: never due */
    EXPECT(f, "ms inf 2\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg inf R30 t\r\n", "HD t-1\r\n");
    /* R0 and negative R are off */
    EXPECT(f, "ms s 2 T10\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg s R0\r\n", "HD\r\n");
    EXPECT(f, "mg s R-5\r\n", "HD\r\n");
    /* R above 30 days is an absolute time */
    char req[64];
    snprintf(req, sizeof(req), "mg s R%u\r\n", T0 + 80 + 11);
    EXPECT(f, req, "HD W\r\n");
}

/* ---- ms ------------------------------------------------------------------ */

static void
test_ms_modes(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 2 MS\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "ms foo 2 ME\r\nho\r\n", "NS\r\n");
    EXPECT(f, "ms new 2 ME\r\nho\r\n", "HD\r\n");
    EXPECT(f, "ms none 2 MR\r\nho\r\n", "NS\r\n");
    EXPECT(f, "ms foo 2 MR\r\nha\r\n", "HD\r\n");
    EXPECT(f, "ms foo 3 MA\r\n-ap\r\n", "HD\r\n");
    EXPECT(f, "ms foo 3 MP s\r\npr-\r\n", "HD s8\r\n");
    EXPECT(f, "mg foo v\r\n", "VA 8\r\npr-ha-ap\r\n");
    EXPECT(f, "ms none 2 MA\r\nxx\r\n", "NS\r\n");
    EXPECT(f, "ms none 2 MP\r\nxx\r\n", "NS\r\n");
    /* N: append on a miss creates the item */
    EXPECT(f, "ms viv 2 MA N50 s\r\nxx\r\n", "HD s2\r\n");
    EXPECT(f, "mg viv v t\r\n", "VA 2 t50\r\nxx\r\n");
    EXPECT(f, "ms viv 2 MA N50 s\r\nyy\r\n", "HD s4\r\n");
    EXPECT(f, "mg viv v t\r\n", "VA 4 t50\r\nxxyy\r\n");
    /* append keeps flags and TTL */
    EXPECT(f, "ms fl 1 F9 T70\r\na\r\n", "HD\r\n");
    EXPECT(f, "ms fl 1 MA F1 T5\r\nb\r\n", "HD\r\n");
    EXPECT(f, "mg fl v f t\r\n", "VA 2 f9 t70\r\nab\r\n");
    EXPECT(f, "ms foo 2 MX\r\nhi\r\nmn\r\n",
           "CLIENT_ERROR invalid mode for ms M token\r\nMN\r\n");
    EXPECT(f, "ms foo 2 MSS\r\nhi\r\nmn\r\n",
           "CLIENT_ERROR incorrect length for M token\r\nMN\r\n");
    EXPECT(f, "ms foo 2 M\r\nhi\r\nmn\r\n",
           "CLIENT_ERROR incorrect length for M token\r\nMN\r\n");
}

static void
test_ms_cas(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 2 E1000\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg foo c\r\n", "HD c1000\r\n");
    EXPECT(f, "ms foo 2 C999 E1001\r\nhi\r\n", "EX\r\n");
    EXPECT(f, "ms foo 2 C1000 E1001 c\r\nho\r\n", "HD c1001\r\n");
    EXPECT(f, "mg foo c v\r\n", "VA 2 c1001\r\nho\r\n");
    EXPECT(f, "ms missing 2 C5\r\nhi\r\n", "NF\r\n");
    EXPECT(f, "ms foo 2 C5 MR\r\nhi\r\n", "EX\r\n");
    EXPECT(f, "ms foo 2 C1001 MR c E2000\r\nha\r\n", "HD c2000\r\n");
    /* add ignores C */
    EXPECT(f, "ms fresh 2 C5 ME\r\nhi\r\n", "HD\r\n");
    /* append and prepend check C when it is not 0 */
    EXPECT(f, "ms foo 1 C5 MA\r\nx\r\n", "EX\r\n");
    EXPECT(f, "ms foo 1 C2000 MA c E3000\r\nx\r\n", "HD c3000\r\n");
    EXPECT(f, "ms foo 1 C0 MA\r\ny\r\n", "HD\r\n");
    EXPECT(f, "mg foo v\r\n", "VA 4\r\nhaxy\r\n");
    /* c on a failure is 0 */
    EXPECT(f, "ms foo 1 C1 c\r\nz\r\n", "EX c0\r\n");
    /* a key's CAS stays above an explicit one; another key's is unique,
     * not above (a packed item's derives from its segment's block) */
    uint64_t before = cas_of(f, "foo");
    EXPECT(f, "ms foo 1\r\nz\r\n", "HD\r\n");
    assert_true(cas_of(f, "foo") > before && before >= 3000);
    EXPECT(f, "ms later 1\r\nz\r\n", "HD\r\n");
    assert_true(cas_of(f, "later") != cas_of(f, "foo"));
    assert_true(cas_of(f, "later") != 3000);
}

static void
test_ms_reply_flags_and_fields(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 5 k Oq7 c s F3 T9 E42\r\nhello\r\n",
           "HD kfoo Oq7 c42 s5\r\n");
    EXPECT(f, "mg foo f t v\r\n", "VA 5 f3 t9\r\nhello\r\n");
    EXPECT(f, "ms foo 5 s c k ME E43\r\nhello\r\n", "NS s5 c0 kfoo\r\n");
    /* flags ms ignores are accepted */
    EXPECT(f, "ms foo 2 v t h f u\r\nhi\r\n", "HD\r\n");
    /* negative TTL: stored already expired */
    EXPECT(f, "ms foo 2 T-1\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg foo v\r\n", "EN\r\n");
}

static void
test_ms_data_block(void **state)
{
    struct fx *f = *state;
    size_t n;

    /* arriving in pieces */
    feed(f, "ms foo 10 T", 11);
    take(f, &n);
    assert_int_equal(n, 0);
    feed(f, "50\r\n01234", 9);
    take(f, &n);
    assert_int_equal(n, 0);
    assert_int_equal(f->s.need, strlen("ms foo 10 T50\r\n") + 12);
    feed(f, "56789\r", 6);
    take(f, &n);
    assert_int_equal(n, 0);
    EXPECT(f, "\n", "HD\r\n");
    EXPECT(f, "mg foo v t\r\n", "VA 10 t50\r\n0123456789\r\n");
    /* the block must end in \r\n */
    EXPECT(f, "ms foo 2\r\nhixxmn\r\n",
           "CLIENT_ERROR bad data chunk\r\nMN\r\n");
    EXPECT(f, "mg foo v\r\n", "VA 10\r\n0123456789\r\n");
    /* a length that does not parse: the line alone is refused */
    EXPECT(f, "ms foo abc\r\n", "CLIENT_ERROR bad command line format\r\n");
    EXPECT(f, "ms foo -1\r\n", "CLIENT_ERROR bad command line format\r\n");
    EXPECT(f, "ms foo\r\n", "CLIENT_ERROR bad command line format\r\n");
    EXPECT(f, "ms foo 2147483646\r\n",
           "CLIENT_ERROR bad command line format\r\n");
    /* a refused line swallows its block, even one still to come */
    feed(f, "ms foo 5 y\r\nhel", 15);
    assert_string_equal(take(f, &n), "CLIENT_ERROR invalid flag\r\n");
    EXPECT(f, "lo\r\nmn\r\n", "MN\r\n");
    EXPECT(f, "mg foo v\r\n", "VA 10\r\n0123456789\r\n");
}

static void
test_ms_too_large(void **state)
{
    struct fx *f = *state;
    size_t big = 64u << 10; /* value alone is item_size_max */
    char line[64];
    char *req = malloc(big + 64);

    assert_non_null(req);
    EXPECT(f, "ms foo 2\r\nhi\r\n", "HD\r\n");
    /* refused before the data arrives, then swallowed */
    snprintf(line, sizeof(line), "ms foo %zu T0\r\n", big);
    EXPECT(f, line, "SERVER_ERROR object too large for cache\r\n");
    memset(req, 'v', big);
    memcpy(req + big, "\r\nmn\r\n", 6);
    feed(f, req, big + 6);
    size_t n;
    assert_string_equal(take(f, &n), "MN\r\n");
    /* memcached drops the old value */
    EXPECT(f, "mg foo v\r\n", "EN\r\n");
    /* borderline: the engine counts header and key too */
    EXPECT(f, "ms foo 2\r\nhi\r\n", "HD\r\n");
    size_t vlen = big - TC_ITEM_HEADER_SIZE - 3 + 1;
    int l = snprintf(req, big + 64, "ms foo %zu\r\n", vlen);
    memset(req + l, 'w', vlen);
    memcpy(req + l + vlen, "\r\n", 3);
    EXPECT(f, req, "SERVER_ERROR object too large for cache\r\n");
    EXPECT(f, "mg foo v\r\n", "EN\r\n");
    /* in any mode, as memcached's ms does */
    EXPECT(f, "ms foo 2\r\nhi\r\n", "HD\r\n");
    l = snprintf(req, big + 64, "ms foo %zu MR\r\n", vlen);
    memset(req + l, 'w', vlen);
    memcpy(req + l + vlen, "\r\n", 3);
    EXPECT(f, req, "SERVER_ERROR object too large for cache\r\n");
    EXPECT(f, "mg foo v\r\n", "EN\r\n");
    vlen--;
    l = snprintf(req, big + 64, "ms foo %zu\r\n", vlen);
    memset(req + l, 'w', vlen);
    memcpy(req + l + vlen, "\r\n", 3);
    EXPECT(f, req, "HD\r\n");
    struct tc_stats st;
    tc_stats(f->c, &st);
    /* the early refusal counts too (tc_store_refused) */
    assert_int_equal(st.store_too_large, 3);
    free(req);
}

/* ---- md ------------------------------------------------------------------ */

static void
test_md(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 2 E10\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "md foo C9\r\n", "EX\r\n");
    EXPECT(f, "md foo C0\r\n", "EX\r\n");
    EXPECT(f, "md foo k O1 C10\r\n", "HD kfoo O1\r\n");
    EXPECT(f, "md foo k\r\n", "NF kfoo\r\n");
    EXPECT(f, "md foo C0\r\n", "NF\r\n");
    EXPECT(f, "mg foo v\r\n", "EN\r\n");
    /* T without I means nothing */
    EXPECT(f, "ms foo 2\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "md foo T30\r\n", "HD\r\n");
    EXPECT(f, "mg foo\r\n", "EN\r\n");
    /* I with a TTL in the past: gone */
    EXPECT(f, "ms foo 2\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "md foo I T-1\r\n", "HD\r\n");
    EXPECT(f, "mg foo\r\n", "EN\r\n");
    EXPECT(f, "md\r\n", "ERROR\r\n");
    /* md words every flag error as ma does (memcached) */
    EXPECT(f, "md foo y\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "md foo Cx\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "md foo q q\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "md foo q q q q q q q q q q q q q q q q q q q q q q q q q q\r\n",
           "CLIENT_ERROR options flags too long\r\n");
}

static void
test_md_remove_value(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms foo 5 F7 T100 E60\r\nhello\r\n", "HD\r\n");
    EXPECT(f, "md foo x\r\n", "HD\r\n");
    EXPECT(f, "mg foo v f t c\r\n", "VA 0 f0 t-1 c60\r\n\r\n");
    EXPECT(f, "ms foo 5 F7 T100 E61\r\nhello\r\n", "HD\r\n");
    EXPECT(f, "md foo x F3 T50 E70\r\n", "HD\r\n");
    EXPECT(f, "mg foo v f t c\r\n", "VA 0 f3 t50 c70\r\n\r\n");
    EXPECT(f, "md foo x C1\r\n", "EX\r\n");
    EXPECT(f, "md foo x C70 q\r\n", "");
    EXPECT(f, "md none x\r\n", "NF\r\n");
    /* x with I: empty and stale */
    EXPECT(f, "md foo x I\r\n", "HD\r\n");
    EXPECT(f, "mg foo v\r\n", "VA 0 X W\r\n\r\n");
}

/* ---- ma ------------------------------------------------------------------ */

static void
test_ma(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "ms n 2 T100\r\n10\r\n", "HD\r\n");
    EXPECT(f, "ma n\r\n", "HD\r\n");
    EXPECT(f, "ma n v\r\n", "VA 2\r\n12\r\n");
    EXPECT(f, "ma n v D10\r\n", "VA 2\r\n22\r\n");
    EXPECT(f, "ma n v MD D5\r\n", "VA 2\r\n17\r\n");
    EXPECT(f, "ma n v M- D20\r\n", "VA 1\r\n0\r\n");
    EXPECT(f, "ma n v M+ D7\r\n", "VA 1\r\n7\r\n");
    EXPECT(f, "ma n v MI\r\n", "VA 1\r\n8\r\n");
    EXPECT(f, "ma n t v k Ox\r\n", "VA 1 t100 kn Ox\r\n9\r\n");
    EXPECT(f, "ma n T30 t\r\n", "HD t30\r\n");
    EXPECT(f, "mg n v\r\n", "VA 2\r\n10\r\n");
    /* wrap at 2^64 */
    EXPECT(f, "ms w 20\r\n18446744073709551615\r\n", "HD\r\n");
    EXPECT(f, "ma w v\r\n", "VA 1\r\n0\r\n");
    /* CAS */
    EXPECT(f, "ms c 1 E500\r\n1\r\n", "HD\r\n");
    EXPECT(f, "ma c C499\r\n", "EX\r\n");
    EXPECT(f, "ma c C500 c E9999\r\n", "HD c9999\r\n"); /* E: the new CAS */
    EXPECT(f, "ma c C0 v\r\n", "VA 1\r\n3\r\n");
    /* misses, vivify */
    EXPECT(f, "ma nope\r\n", "NF\r\n");
    EXPECT(f, "ma nope v k\r\n", "NF knope\r\n");
    EXPECT(f, "ma viv N60 J13 v t\r\n", "VA 2 t60\r\n13\r\n");
    EXPECT(f, "ma viv N60 J13 v t\r\n", "VA 2 t60\r\n14\r\n");
    EXPECT(f, "ma viv0 N0 v t\r\n", "VA 1 t-1\r\n0\r\n");
    EXPECT(f, "ma vivd N0 J5 MD v\r\n", "VA 1\r\n5\r\n");
    /* errors */
    EXPECT(f, "ms s 3\r\nabc\r\n", "HD\r\n");
    EXPECT(f, "ma s\r\n",
           "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    EXPECT(f, "ma n MX\r\n", "CLIENT_ERROR invalid mode for ma M token\r\n");
    EXPECT(f, "ma n Dx\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "ma n J-1\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "ma n v v\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "ma n y\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "ma\r\n", "ERROR\r\n");
    EXPECT(f, "ma n Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
           "CLIENT_ERROR opaque token too long\r\n");
    EXPECT(f, "mg n v\r\n", "VA 2\r\n10\r\n");
}

/* ---- me ------------------------------------------------------------------ */

static void
test_me(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "me foo\r\n", "EN\r\n");
    EXPECT(f, "ms foo 2 T100 E77\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "me foo\r\n",
           "ME foo exp=100 la=0 cas=77 fetch=no cls=1 size=29\r\n");
    tc_clock_advance(3);
    EXPECT(f, "me foo\r\n",
           "ME foo exp=97 la=3 cas=77 fetch=no cls=1 size=29\r\n");
    EXPECT(f, "mg foo v\r\n", "VA 2\r\nhi\r\n");
    tc_clock_advance(1);
    /* me is not an access: la= stays with the mg */
    EXPECT(f, "me foo\r\n",
           "ME foo exp=96 la=1 cas=77 fetch=yes cls=1 size=29\r\n");
    EXPECT(f, "me foo\r\n",
           "ME foo exp=96 la=1 cas=77 fetch=yes cls=1 size=29\r\n");
    EXPECT(f, "ms inf 0 E5\r\n\r\n", "HD\r\n");
    EXPECT(f, "me inf\r\n",
           "ME inf exp=-1 la=0 cas=5 fetch=no cls=1 size=27\r\n");
    EXPECT(f, "me\r\n", "CLIENT_ERROR bad command line format\r\n");
    assert_int_equal(f->s.ctr.meta_cmds, 10);
}

/* l: seconds since the last access before this one, in request order with
 * h and t; u reads without moving it; ms resets it. */
static void
test_last_access(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "mg foo l\r\n", "EN\r\n");
    EXPECT(f, "ms foo 2\r\nhi\r\n", "HD\r\n");
    EXPECT(f, "mg foo l h t\r\n", "HD l0 h0 t-1\r\n");
    tc_clock_advance(4);
    EXPECT(f, "mg foo t l u v\r\n", "VA 2 t-1 l4\r\nhi\r\n");
    tc_clock_advance(2);
    EXPECT(f, "mg foo h l k\r\n", "HD h1 l6 kfoo\r\n");
    EXPECT(f, "mg foo l\r\n", "HD l0\r\n");
    tc_clock_advance(TC_LAST_ACCESS_CAP + 5);
    EXPECT(f, "mg foo l T0\r\n", "HD l7200\r\n");
    EXPECT(f, "mg foo l\r\n", "HD l0\r\n");
    tc_clock_advance(9);
    EXPECT(f, "ms foo 1 l\r\nx\r\n", "HD\r\n"); /* accepted, no reply */
    EXPECT(f, "mg foo l l\r\n", "CLIENT_ERROR duplicate flag\r\n");
    EXPECT(f, "mg foo l\r\n", "HD l0\r\n");
}

/* ---- errors ----------------------------------------------------------------
 */

static void
test_errors(void **state)
{
    struct fx *f = *state;
    char req[600];

    EXPECT(f, "mg foo y\r\n", "CLIENT_ERROR invalid flag\r\n");
    EXPECT(f, "mg foo v v\r\n", "CLIENT_ERROR duplicate flag\r\n");
    EXPECT(f, "mg foo \x80\r\n", "CLIENT_ERROR duplicate flag\r\n");
    EXPECT(f, "mg foo Tabc\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "mg foo T\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "mg foo T1x\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "mg foo N99999999999\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "mg foo R-\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "md foo C-1\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "ms foo 1 E1a\r\nx\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "ms foo 1 F4294967296\r\nx\r\n",
           "CLIENT_ERROR bad command line format\r\n");
    EXPECT(f, "mg\r\n", "ERROR\r\n");
    /* key length */
    memset(req, 'k', sizeof(req));
    memcpy(req, "mg ", 3);
    memcpy(req + 3 + 250, " v\r\n", 5);
    EXPECT(f, req, "EN\r\n");
    memcpy(req + 3 + 251, " v\r\n", 5);
    req[3 + 250] = 'k';
    EXPECT(f, req, "CLIENT_ERROR bad command line format\r\n");
    /* 20 tokens are fine, 21 are too many */
    EXPECT(f, "mg foo s v t f c k h u J0 O1 P L T1 D1 R1 E1 C1 x\r\n",
           "EN kfoo O1\r\n");
    EXPECT(f, "mg foo s v t f c k h u J0 O1 P L T1 D1 R1 E1 C1 x I\r\n",
           "CLIENT_ERROR options flags are too long\r\n");
    /* the last bad token decides, as in memcached */
    EXPECT(f, "ma foo Dx Jx\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n");
    EXPECT(f, "mg foo Tx Cx Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "mg foo Cx Tx\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    /* not a meta command at all */
    EXPECT(f, "mx foo\r\n", "ERROR\r\n");
    assert_int_equal(f->s.ctr.protocol_errors, 18);
}

/* The number rules' edges: a signed 32-bit TTL, '+' allowed in a flag's
 * number but not in the data length. */
static void
test_number_edges(void **state)
{
    struct fx *f = *state;
    EXPECT(f, "mg foo T2147483648\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "mg foo T-2147483649\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "mg foo N+\r\n",
           "CLIENT_ERROR bad token in command line format\r\n");
    EXPECT(f, "ms foo +1\r\nx\r\n",
           "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    EXPECT(f, "ms foo 18446744073709551617\r\n",
           "CLIENT_ERROR bad command line format\r\n");
    EXPECT(f, "ms num 1 F+4294967295 T+0\r\nx\r\n", "HD\r\n");
    EXPECT(f, "mg num f v\r\n", "VA 1 f4294967295\r\nx\r\n");
}

/* A new item starts with no history: not fetched (h0), no win handed out
 * (no Z), even when it lands in the memory of one that had both. */
static void
test_fresh_item_state(void **state)
{
    struct fx *f = *state;
    char req[128];

    for (int i = 0; i < 64; i++) {
        snprintf(req, sizeof(req), "mg old%d N30 h\r\nmg old%d h\r\n", i, i);
        ask(f, req);
        snprintf(req, sizeof(req), "ms old%d 1\r\nx\r\n", i);
        EXPECT(f, req, "HD\r\n");
        tc_maintain(f->c); /* let the replaced placeholders be reused */
        snprintf(req, sizeof(req), "ms new%d 1\r\ny\r\n", i);
        EXPECT(f, req, "HD\r\n");
        snprintf(req, sizeof(req), "mg new%d h\r\n", i);
        EXPECT(f, req, "HD h0\r\n");
    }
}

static void
test_pipeline(void **state)
{
    struct fx *f = *state;
    EXPECT(f,
           "ms a 1 q\r\n1\r\nms b 1 q\r\n2\r\nmg a v q k\r\nmg x v q k\r\n"
           "mg b v q k\r\nma a q\r\nmg a v q\r\nmn\r\n",
           "VA 1 ka\r\n1\r\nVA 1 kb\r\n2\r\nVA 1\r\n2\r\nMN\r\n");
    assert_int_equal(f->s.ctr.meta_cmds, 8);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mg_miss_and_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mg_flags_in_request_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_mg_touch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mg_hit_before_and_no_bump, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_mg_cas_compare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quiet, setup, teardown),
        cmocka_unit_test_setup_teardown(test_base64_keys, setup_slab, teardown),
        cmocka_unit_test_setup_teardown(test_opaque, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_while_revalidate, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_vivify, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ms_modes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ms_cas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ms_reply_flags_and_fields, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ms_data_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ms_too_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_md, setup, teardown),
        cmocka_unit_test_setup_teardown(test_md_remove_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ma, setup, teardown),
        cmocka_unit_test_setup_teardown(test_me, setup, teardown),
        cmocka_unit_test_setup_teardown(test_last_access, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_number_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fresh_item_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipeline, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The classic text protocol's commands (src/server/proto/proto_text.c
 * through proto_process) against a real engine: exact reply bytes for every
 * command and error, noreply, swallowed values, expiry and flush on a
 * frozen clock. The stream (pipelining, partial input, large replies in
 * slices) is test_proto_text_stream.c's.
 */

#include "tests/unit/proto_text_fx.h"

/* ---- retrieval ---------------------------------------------------------- */

static void
test_get_miss_and_hit(void **state)
{
    struct fx *f = *state;
    expect(f, "get a\r\n", "END\r\n");
    expect(f, "set a 5 0 3\r\nabc\r\n", "STORED\r\n");
    expect(f, "get a\r\n", "VALUE a 5 3\r\nabc\r\nEND\r\n");
    expect(f, "set b 4294967295 0 0\r\n\r\n", "STORED\r\n");
    expect(f, "get a b c a\r\n",
           "VALUE a 5 3\r\nabc\r\nVALUE b 4294967295 0\r\n\r\n"
           "VALUE a 5 3\r\nabc\r\nEND\r\n");
    expect(f, "bget a\r\n", "VALUE a 5 3\r\nabc\r\nEND\r\n");
    /* "\n" alone ends a line; spaces around tokens are ignored */
    expect(f, "  get   a  \n", "VALUE a 5 3\r\nabc\r\nEND\r\n");
    expect(f, "get\r\n", "ERROR\r\n");
    expect(f, "GET a\r\n", "ERROR\r\n");
    assert_int_equal(f->s.ctr.get_multi, 1);
}

static void
test_gets_has_cas(void **state)
{
    struct fx *f = *state;
    struct tc_item_info info;
    char buf[8], want[128];
    expect(f, "set k 1 0 2\r\nhi\r\n", "STORED\r\n");
    assert_int_equal(tc_get_copy(f->c, "k", 1, buf, sizeof(buf), &info), 0);
    snprintf(want, sizeof(want), "VALUE k 1 2 %" PRIu64 "\r\nhi\r\nEND\r\n",
             info.cas);
    expect(f, "gets k\r\n", want);
}

static void
test_get_bad_keys(void **state)
{
    struct fx *f = *state;
    char line[600];
    char key[252];
    memset(key, 'k', 251);
    key[251] = '\0';
    expect(f, "set a 0 0 1\r\n1\r\n", "STORED\r\n");
    /* a bad key anywhere refuses the whole get */
    snprintf(line, sizeof(line), "get a %s\r\n", key);
    expect(f, line, "CLIENT_ERROR bad command line format\r\n");
    key[250] = '\0'; /* 250 bytes is fine */
    snprintf(line, sizeof(line), "get a %s\r\n", key);
    expect(f, line, "VALUE a 0 1\r\n1\r\nEND\r\n");
    expect(f,
           "get a\x01"
           "b\r\n",
           "CLIENT_ERROR bad command line format\r\n");
    expect(f, "get a\tb\r\n", "CLIENT_ERROR bad command line format\r\n");
    expect(f, "get a\x7f\r\n", "CLIENT_ERROR bad command line format\r\n");
    /* bytes >= 0x80 are fine in a key */
    expect(f, "get \xc3\xa9t\xc3\xa9\r\n", "END\r\n");
}

static void
test_get_many_keys(void **state)
{
    struct fx *f = *state;
    /* more keys than PROTO_MAX_TOKENS, on a line longer than
     * PROTO_LINE_MAX: a multi-get line may be longer */
    size_t cap = 40 * 1000 + 64;
    char *line = malloc(cap);
    assert_non_null(line);
    size_t n = (size_t)snprintf(line, cap, "get");
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(line + n, cap - n, " key%05d_pad_pad_pad_pad_pad",
                              i);
    assert_true(n > PROTO_LINE_MAX);
    n += (size_t)snprintf(line + n, cap - n, "\r\n");
    expect(f, "set key00999_pad_pad_pad_pad_pad 0 0 1\r\nz\r\n", "STORED\r\n");
    expect_n(f, line, n,
             "VALUE key00999_pad_pad_pad_pad_pad 0 1\r\nz\r\nEND\r\n",
             strlen("VALUE key00999_pad_pad_pad_pad_pad 0 1\r\nz\r\nEND\r\n"));
    free(line);
}

/* A multiget of 40 keys (three engine batches) with hits, misses and a
 * repeated key: the replies in key order, each hit once per mention, and
 * one get_hits or get_misses per key. */
static void
test_multiget_batches(void **state)
{
    struct fx *f = *state;
    char line[1024], want[4096], cmd[64];
    size_t n = (size_t)snprintf(line, sizeof(line), "get"), w = 0;
    unsigned hits = 0;

    for (int i = 0; i < 40; i++) {
        int k = i == 33 ? 3 : i; /* key 3 twice */
        n += (size_t)snprintf(line + n, sizeof(line) - n, " m%02d", k);
        if (k % 3 == 0) {
            if (i != 33) {
                snprintf(cmd, sizeof(cmd), "set m%02d %d 0 2\r\nv%d\r\n", k, k,
                         k % 10);
                expect(f, cmd, "STORED\r\n");
            }
            w += (size_t)snprintf(want + w, sizeof(want) - w,
                                  "VALUE m%02d %d 2\r\nv%d\r\n", k, k, k % 10);
            hits++;
        }
    }
    n += (size_t)snprintf(line + n, sizeof(line) - n, "\r\n");
    w += (size_t)snprintf(want + w, sizeof(want) - w, "END\r\n");
    struct tc_stats s0, s1;
    tc_stats(f->c, &s0);
    expect_n(f, line, n, want, w);
    tc_stats(f->c, &s1);
    assert_int_equal(s1.get_hits - s0.get_hits, hits);
    assert_int_equal(s1.get_misses - s0.get_misses, 40 - hits);
}

/* Pipelined reads in one buffer (the parser hints their keys to the
 * engine first): every reply as if each request came alone, including a
 * bad line in the middle of the run and lines of other commands. */
static void
test_pipelined_reads(void **state)
{
    struct fx *f = *state;
    char big[300], in[1024], want[1024];
    memset(big, 'k', 251);
    big[251] = '\0';
    expect(f, "set pa 1 0 1\r\na\r\nset pb 2 0 2\r\nbb\r\n",
           "STORED\r\nSTORED\r\n");
    snprintf(in, sizeof(in),
             "get pa\r\nget nope\r\nget pb\r\nmg pa v\r\nget %s\r\n"
             "get pb pa\r\nget\r\nset pc 0 0 1\r\nc\r\nget pc\r\n"
             "get pa\r\n",
             big);
    snprintf(want, sizeof(want),
             "VALUE pa 1 1\r\na\r\nEND\r\n"
             "END\r\n"
             "VALUE pb 2 2\r\nbb\r\nEND\r\n"
             "VA 1\r\na\r\n"
             "CLIENT_ERROR bad command line format\r\n"
             "VALUE pb 2 2\r\nbb\r\nVALUE pa 1 1\r\na\r\nEND\r\n"
             "ERROR\r\n"
             "STORED\r\n"
             "VALUE pc 0 1\r\nc\r\nEND\r\n"
             "VALUE pa 1 1\r\na\r\nEND\r\n");
    expect(f, in, want);
}

/* Pipelined gat and gats lines (hinted by the key after their exptime),
 * mixed with gets and with gat lines the hint cannot read: every reply as
 * if each came alone. */
static void
test_pipelined_gat(void **state)
{
    struct fx *f = *state;
    expect(f, "set ga 1 100 1\r\na\r\nset gb 2 0 2\r\nbb\r\n",
           "STORED\r\nSTORED\r\n");
    expect(f,
           "gat 0 ga\r\ngat 0\r\nget gb\r\ngat 0 nope gb\r\ngat\r\n"
           "gats 0 nope\r\ngat 5\r\n",
           "VALUE ga 1 1\r\na\r\nEND\r\n"
           "END\r\n"
           "VALUE gb 2 2\r\nbb\r\nEND\r\n"
           "VALUE gb 2 2\r\nbb\r\nEND\r\n"
           "ERROR\r\n"
           "END\r\n"
           "END\r\n");
    tc_clock_advance(200); /* the first gat made ga never expire */
    expect(f, "get ga\r\n", "VALUE ga 1 1\r\na\r\nEND\r\n");
}

static void
test_gat_gats(void **state)
{
    struct fx *f = *state;
    struct tc_item_info info;
    char buf[8], want[128];
    expect(f, "set t 3 100 2\r\nhi\r\n", "STORED\r\n");
    expect(f, "gat 0 t nope\r\n", "VALUE t 3 2\r\nhi\r\nEND\r\n");
    tc_clock_advance(200); /* touched to never expire */
    expect(f, "get t\r\n", "VALUE t 3 2\r\nhi\r\nEND\r\n");
    assert_int_equal(tc_get_copy(f->c, "t", 1, buf, sizeof(buf), &info), 0);
    snprintf(want, sizeof(want), "VALUE t 3 2 %" PRIu64 "\r\nhi\r\nEND\r\n",
             info.cas);
    expect(f, "gats 10 t\r\n", want);
    tc_clock_advance(11);
    expect(f, "get t\r\n", "END\r\n");
    expect(f, "gat 10\r\n", "END\r\n"); /* memcached: no keys, END */
    expect(f, "gat\r\n", "ERROR\r\n");
    expect(f, "gat x t\r\n", "CLIENT_ERROR invalid exptime argument\r\n");
    expect(f, "gats 1.5 t\r\n", "CLIENT_ERROR invalid exptime argument\r\n");
}

/* ---- storage ------------------------------------------------------------ */

static void
test_store_modes(void **state)
{
    struct fx *f = *state;
    expect(f, "add k 0 0 1\r\na\r\n", "STORED\r\n");
    expect(f, "add k 0 0 1\r\nb\r\n", "NOT_STORED\r\n");
    expect(f, "replace nope 0 0 1\r\nb\r\n", "NOT_STORED\r\n");
    expect(f, "replace k 7 0 1\r\nb\r\n", "STORED\r\n");
    expect(f, "append k 0 0 2\r\ncd\r\n", "STORED\r\n");
    expect(f, "prepend k 0 0 2\r\n01\r\n", "STORED\r\n");
    expect(f, "append nope 0 0 1\r\na\r\n", "NOT_STORED\r\n");
    expect(f, "prepend nope 0 0 1\r\na\r\n", "NOT_STORED\r\n");
    /* append and prepend keep the flags */
    expect(f, "get k\r\n", "VALUE k 7 5\r\n01bcd\r\nEND\r\n");
    /* a data block may hold any byte, "\r\n" included */
    expect_n(f, "set bin 0 0 6\r\n\r\n\0\x80 \n\r\n", 23, "STORED\r\n", 8);
    expect_n(f, "get bin\r\n", 9, "VALUE bin 0 6\r\n\r\n\0\x80 \n\r\nEND\r\n",
             28);
    /* a sixth token that is not noreply is ignored, as in memcached */
    expect(f, "set k 0 0 1 foo\r\nx\r\n", "STORED\r\n");
    expect(f, "set k 0 0 1\nx\r\nget k\n",
           "STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n");
}

static void
test_store_expiry(void **state)
{
    struct fx *f = *state;
    expect(f, "set e 0 10 1\r\na\r\nset n 0 -1 1\r\nb\r\n",
           "STORED\r\nSTORED\r\n");
    expect(f, "get n\r\n", "END\r\n");
    tc_clock_advance(9);
    expect(f, "get e\r\n", "VALUE e 0 1\r\na\r\nEND\r\n");
    tc_clock_advance(2);
    expect(f, "get e\r\n", "END\r\n");
    /* beyond 30 days: an absolute unix time */
    char line[64];
    snprintf(line, sizeof(line), "set abs 0 %u 1\r\na\r\n", T0 + 11 + 5);
    expect(f, line, "STORED\r\n");
    tc_clock_advance(4);
    expect(f, "get abs\r\n", "VALUE abs 0 1\r\na\r\nEND\r\n");
    tc_clock_advance(2);
    expect(f, "get abs\r\n", "END\r\n");
}

static void
test_cas(void **state)
{
    struct fx *f = *state;
    struct tc_item_info info;
    char buf[8], line[128];
    expect(f, "cas nope 0 0 1 5\r\nb\r\n", "NOT_FOUND\r\n");
    expect(f, "set c 0 0 1\r\na\r\n", "STORED\r\n");
    assert_int_equal(tc_get_copy(f->c, "c", 1, buf, sizeof(buf), &info), 0);
    snprintf(line, sizeof(line), "cas c 0 0 1 %" PRIu64 "\r\nb\r\n",
             info.cas + 1);
    expect(f, line, "EXISTS\r\n");
    snprintf(line, sizeof(line), "cas c 9 0 1 %" PRIu64 "\r\nb\r\n", info.cas);
    expect(f, line, "STORED\r\n");
    expect(f, line, "EXISTS\r\n"); /* the CAS moved on */
    expect(f, "get c\r\n", "VALUE c 9 1\r\nb\r\nEND\r\n");
    snprintf(line, sizeof(line), "cas c 0 0 1 %" PRIu64 " noreply\r\nz\r\n",
             info.cas);
    expect(f, line, "");
    expect(f, "cas c 0 0 1\r\nb\r\n", "ERROR\r\nERROR\r\n");
    expect(f, "cas c 0 0 1 x\r\nb\r\n",
           "CLIENT_ERROR bad command line format\r\nERROR\r\n");
    expect(f, "cas c 0 0 1 18446744073709551616\r\nb\r\n",
           "CLIENT_ERROR bad command line format\r\nERROR\r\n");
}

static void
test_store_bad_lines(void **state)
{
    struct fx *f = *state;
    char line[600], key[252];
    const char *bad = "CLIENT_ERROR bad command line format\r\n";
    /* the data block of a refused line is read as a command, as memcached
     * does: "b" is one byte, too short for a command: ERROR */
    char want[128];
    snprintf(want, sizeof(want), "%sERROR\r\n", bad);
    expect(f, "set a x 0 1\r\nb\r\n", want);
    expect(f, "set a 0 x 1\r\nb\r\n", want);
    expect(f, "set a 0 0 x\r\nb\r\n", want);
    expect(f, "set a -1 0 1\r\nb\r\n", want);
    expect(f, "set a +1 0 1\r\nb\r\n", want);
    expect(f, "set a 4294967296 0 1\r\nb\r\n", want);
    expect(f, "set a 0 0 -1\r\n", bad);
    expect(f, "set a 0 0 2147483646\r\n", bad);
    memset(key, 'k', 251);
    key[251] = '\0';
    snprintf(line, sizeof(line), "set %s 0 0 1\r\nb\r\n", key);
    expect(f, line, want);
    expect(f, "set a\x01 0 0 1\r\nb\r\n", want);
    /* wrong token counts: ERROR, noreply or not */
    expect(f, "set a 0 0\r\n", "ERROR\r\n");
    expect(f, "set a 0 0 1 2 3\r\n", "ERROR\r\n");
    expect(f, "set a 0 0 1 2 noreply\r\n", "ERROR\r\n");
    expect(f, "get a\r\n", "END\r\n");
    assert_int_equal(f->s.ctr.protocol_errors, 21);
}

static void
test_bad_data_chunk(void **state)
{
    struct fx *f = *state;
    /* bytes + 2 are consumed; what follows is the next command */
    expect(f, "set a 0 0 1\r\nabc\r\n",
           "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
    expect(f, "set a 0 0 1\r\n1\nget a\r\n",
           "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
    expect(f, "set a 0 0 1 noreply\r\nabc\r\nget a\r\n", "ERROR\r\nEND\r\n");
    expect(f, "set a 0 0 2\r\nab\r\nset a 0 0 1\r\nxyz\r\nget a\r\n",
           "STORED\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\n"
           "VALUE a 0 2\r\nab\r\nEND\r\n");
}

static void
test_large_values(void **state)
{
    struct fx *f = *state;
    size_t max = ITEM_MAX - TC_ITEM_HEADER_SIZE - 3; /* key "big" */
    size_t cap = max + 128;
    char *in = malloc(cap), *want = malloc(cap);
    assert_non_null(in);
    assert_non_null(want);

    for (size_t vlen = max - 1; vlen <= max; vlen++) {
        size_t n = (size_t)snprintf(in, cap, "set big 1 0 %zu\r\n", vlen);
        for (size_t i = 0; i < vlen; i++)
            in[n + i] = (char)('a' + (i * 7 + vlen) % 26);
        memcpy(in + n + vlen, "\r\n", 2);
        expect_n(f, in, n + vlen + 2, "STORED\r\n", 8);
        size_t w = (size_t)snprintf(want, cap, "VALUE big 1 %zu\r\n", vlen);
        memcpy(want + w, in + n, vlen);
        memcpy(want + w + vlen, "\r\nEND\r\n", 7);
        expect_n(f, "get big\r\n", 9, want, w + vlen + 7);
    }
    free(in);
    free(want);
}

static void
test_too_large_swallowed(void **state)
{
    struct fx *f = *state;
    size_t vlen = ITEM_MAX - TC_ITEM_HEADER_SIZE - 3 + 1;
    char line[64];
    int n = snprintf(line, sizeof(line), "set big 0 0 %zu\r\n", vlen);

    expect(f, "set big 0 0 1\r\nx\r\n", "STORED\r\n");
    /* refused from the line alone: nothing of the value is buffered */
    expect_n(f, line, (size_t)n, "SERVER_ERROR object too large for cache\r\n",
             41);
    assert_int_equal(f->s.swallow, vlen + 2);
    char *chunk = calloc(1, 65536);
    assert_non_null(chunk);
    memset(chunk, 'v', 65536);
    size_t left = vlen;
    while (left) {
        size_t k = left < 65536 ? left : 65536;
        receive(f, chunk, k);
        assert_int_equal(f->acc_len, 0); /* swallowed as it came */
        left -= k;
    }
    free(chunk);
    /* a failed set dropped the old value, without counting a delete */
    expect(f, "\r\nget big\r\n", "END\r\n");
    struct tc_stats st;
    tc_stats(f->c, &st);
    assert_int_equal(st.delete_hits + st.delete_misses, 0);
    assert_int_equal(f->s.swallow, 0);

    /* with noreply: no reply, still swallowed */
    n = snprintf(line, sizeof(line), "set big 0 0 %zu noreply\r\n", vlen);
    receive(f, line, (size_t)n);
    char *val = malloc(vlen + 2);
    assert_non_null(val);
    memset(val, 'v', vlen);
    memcpy(val + vlen, "\r\n", 2);
    receive(f, val, vlen + 2);
    free(val);
    expect(f, "version\r\n", "VERSION " TC_VERSION "\r\n");
    /* an add refused as too large keeps the old value */
    expect(f, "set k 0 0 1\r\nx\r\n", "STORED\r\n");
    n = snprintf(line, sizeof(line), "add k 0 0 %zu\r\n", vlen + 2);
    expect_n(f, line, (size_t)n, "SERVER_ERROR object too large for cache\r\n",
             41);
    f->s.swallow = 0; /* the test drops the rest of the value */
    expect(f, "get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n");
}

/* ---- arithmetic ---------------------------------------------------------- */

static void
test_incr_decr(void **state)
{
    struct fx *f = *state;
    expect(f, "incr n 1\r\n", "NOT_FOUND\r\n");
    expect(f, "decr n 1\r\n", "NOT_FOUND\r\n");
    expect(f, "set n 3 0 2\r\n10\r\n", "STORED\r\n");
    expect(f, "incr n 5\r\n", "15\r\n");
    expect(f, "decr n 6\r\n", "9\r\n");
    /* a shorter number keeps the length, space padded, as memcached's
     * in-place rewrite leaves it; a longer one grows */
    expect(f, "get n\r\n", "VALUE n 3 2\r\n9 \r\nEND\r\n");
    expect(f, "incr n 91\r\n", "100\r\n");
    expect(f, "get n\r\n", "VALUE n 3 3\r\n100\r\nEND\r\n");
    expect(f, "decr n 100\r\n", "0\r\n"); /* floor at 0 */
    expect(f, "incr n 18446744073709551615\r\n", "18446744073709551615\r\n");
    expect(f, "incr n 1\r\n", "0\r\n"); /* wraps */
    expect(f, "set n 0 0 20\r\n18446744073709551615\r\n", "STORED\r\n");
    expect(f, "incr n 2\r\n", "1\r\n");
    expect(f, "set n 0 0 20\r\n18446744073709551614\r\n", "STORED\r\n");
    expect(f, "decr n 18446744073709551615\r\n", "0\r\n");
    const char *delta = "CLIENT_ERROR invalid numeric delta argument\r\n";
    expect(f, "incr n 18446744073709551616\r\n", delta);
    expect(f, "incr n 99999999999999999999\r\n", delta);
    expect(f, "incr n -1\r\n", delta);
    expect(f, "incr n abc\r\n", delta);
    expect(f, "incr n 1x\r\n", delta);
    expect(f, "set s 0 0 2\r\nab\r\n", "STORED\r\n");
    const char *nonnum =
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
    expect(f, "incr s 1\r\n", nonnum);
    expect(f, "decr s 1\r\n", nonnum);
    expect(f, "set s 0 0 20\r\n18446744073709551616\r\n", "STORED\r\n");
    expect(f, "incr s 1\r\n", nonnum);
    /* strtoull's reading of a stored number: leading spaces and zeros,
     * and the end at a space, '\r' or '\n' */
    expect(f, "set s 0 0 3\r\n  7\r\n", "STORED\r\n");
    expect(f, "incr s 1\r\n", "8\r\n");
    expect(f, "set s 0 0 3\r\n007\r\n", "STORED\r\n");
    expect(f, "incr s 1\r\n", "8\r\n");
    expect(f, "set s 0 0 2\r\n7\r\r\n", "STORED\r\n");
    expect(f, "incr s 1\r\n", "8\r\n");
    expect(f, "set s 0 0 2\r\n7x\r\n", "STORED\r\n");
    expect(f, "incr s 1\r\n", nonnum);
    expect(f, "set s 0 0 2\r\n +\r\n", "STORED\r\n");
    expect(f, "incr s 1\r\n", nonnum);
    expect(f, "incr\r\nincr n\r\nincr n 1 2 3\r\n",
           "ERROR\r\nERROR\r\nERROR\r\n");
    expect(f, "incr n 1 junk\r\n", "1\r\n");
    expect(f,
           "incr n 1 noreply\r\ndecr n 5 noreply\r\nincr s 1 noreply\r\n"
           "incr n x noreply\r\nget n\r\n",
           "VALUE n 0 20\r\n0                   \r\nEND\r\n");
    /* the number is read from the value's start: what follows a space
     * (an append after a padded number) is ignored, as by strtoull */
    expect(f,
           "append n 0 0 70\r\n"
           "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij"
           "abcdefghij\r\n",
           "STORED\r\n");
    expect(f, "incr n 12\r\n", "12\r\n");
    expect(f, "set p 0 0 2\r\n5 \r\n", "STORED\r\n");
    expect(f,
           "append p 0 0 70\r\n"
           "1234567890123456789012345678901234567890123456789012345678901234"
           "567890\r\n",
           "STORED\r\n");
    expect(f, "incr p 1\r\n", "6\r\n");
    expect(f,
           "set s 0 0 70\r\n"
           "1234567890123456789012345678901234567890123456789012345678901234"
           "567890\r\n",
           "STORED\r\n");
    expect(f, "incr s 1\r\n", nonnum);
}

/* ---- delete, touch ------------------------------------------------------ */

static void
test_delete(void **state)
{
    struct fx *f = *state;
    const char *usage = "CLIENT_ERROR bad command line format.  "
                        "Usage: delete <key> [noreply]\r\n";
    expect(f, "delete d\r\n", "NOT_FOUND\r\n");
    expect(f, "set d 0 0 1\r\n1\r\n", "STORED\r\n");
    expect(f, "delete d\r\n", "DELETED\r\n");
    expect(f, "set d 0 0 1\r\n1\r\n", "STORED\r\n");
    expect(f, "delete d 0\r\n", "DELETED\r\n");
    expect(f, "set d 0 0 1\r\n1\r\n", "STORED\r\n");
    expect(f, "delete d noreply\r\nget d\r\n", "END\r\n");
    expect(f, "set d 0 0 1\r\n1\r\n", "STORED\r\n");
    expect(f, "delete d 0 noreply\r\nget d\r\n", "END\r\n");
    expect(f, "delete d 1\r\n", usage);
    expect(f, "delete d 0 0\r\n", usage);
    expect(f, "delete d 1 noreply\r\n", ""); /* suppressed, as memcached */
    expect(f, "delete d x y z\r\n", "ERROR\r\n");
    expect(f, "delete\r\n", "ERROR\r\n");
    char line[300], key[252];
    memset(key, 'k', 251);
    key[251] = '\0';
    snprintf(line, sizeof(line), "delete %s\r\n", key);
    expect(f, line, "CLIENT_ERROR bad command line format\r\n");
    snprintf(line, sizeof(line), "delete %s 1\r\n", key);
    expect(f, line, usage);
}

static void
test_touch(void **state)
{
    struct fx *f = *state;
    expect(f, "touch t 10\r\n", "NOT_FOUND\r\n");
    expect(f, "set t 0 5 1\r\n1\r\n", "STORED\r\n");
    expect(f, "touch t 100\r\n", "TOUCHED\r\n");
    tc_clock_advance(50);
    expect(f, "get t\r\n", "VALUE t 0 1\r\n1\r\nEND\r\n");
    expect(f, "touch t 1 noreply\r\n", "");
    tc_clock_advance(2);
    expect(f, "get t\r\n", "END\r\n");
    expect(f, "touch t\r\n", "ERROR\r\n");
    expect(f, "touch t x\r\n", "CLIENT_ERROR invalid exptime argument\r\n");
    expect(f, "touch t x noreply\r\n", "");
    expect(f, "touch t 10 x\r\n", "NOT_FOUND\r\n");
}

/* ---- server commands ---------------------------------------------------- */

static void
test_flush_all_delay(void **state)
{
    struct fx *f = *state;
    expect(f, "set a 0 0 1\r\n1\r\n", "STORED\r\n");
    expect(f, "flush_all 10\r\n", "OK\r\n");
    tc_clock_advance(9);
    expect(f, "get a\r\n", "VALUE a 0 1\r\n1\r\nEND\r\n");
    tc_clock_advance(2);
    expect(f, "get a\r\n", "END\r\n");
    expect(f, "set b 0 0 1\r\n2\r\n", "STORED\r\n");
    expect(f, "get b\r\n", "VALUE b 0 1\r\n2\r\nEND\r\n");
    expect(f, "flush_all\r\nget b\r\n", "OK\r\nEND\r\n");
    expect(f, "set b 0 0 1\r\n2\r\n", "STORED\r\n");
    expect(f, "flush_all noreply\r\nget b\r\n", "END\r\n");
    expect(f, "set b 0 0 1\r\n2\r\n", "STORED\r\n");
    expect(f, "flush_all 0\r\nget b\r\n", "OK\r\nEND\r\n");
    expect(f, "flush_all -1\r\n", "OK\r\n");
    expect(f, "flush_all 10 x\r\n", "OK\r\n");
    expect(f, "flush_all 0 noreply\r\n", "");
    expect(f, "flush_all x\r\n", "CLIENT_ERROR invalid exptime argument\r\n");
    expect(f, "flush_all noreply 5\r\n",
           "CLIENT_ERROR invalid exptime argument\r\n");
    expect(f, "flush_all 1 2 3\r\n", "ERROR\r\n");
    expect(f, "flush_all 10 noreply x\r\n", "ERROR\r\n");
}

static void
test_version_verbosity(void **state)
{
    struct fx *f = *state;
    expect(f, "version\r\n", "VERSION " TC_VERSION "\r\n");
    expect(f, "version x\r\n", "VERSION " TC_VERSION "\r\n");
    expect(f, "verbosity 1\r\n", "OK\r\n");
    assert_int_equal(f->srv.verbosity, 1);
    expect(f, "verbosity 2 noreply\r\n", "");
    assert_int_equal(f->srv.verbosity, 2);
    expect(f, "verbosity 1 2\r\n", "OK\r\n");
    expect(f, "verbosity\r\n", "ERROR\r\n");
    expect(f, "verbosity 1 2 3\r\n", "ERROR\r\n");
    expect(f, "verbosity x\r\n", "CLIENT_ERROR bad command line format\r\n");
}

static void
test_stats(void **state)
{
    struct fx *f = *state;
    expect(f, "stats\r\n", "STAT fake 1\r\nEND\r\n");
    expect(f, "stats   \r\n", "STAT fake 1\r\nEND\r\n");
    expect(f, "stats settings\r\n",
           "STAT maxbytes 67108864\r\nSTAT item_size_max 2097152\r\nEND\r\n");
    expect(f, "stats nope\r\n", "ERROR\r\n");
    expect(f, "stats partial\r\n", "ERROR\r\n"); /* partial lines taken back */
    expect(f, "stats reset\r\n", "RESET\r\n");
    expect(f, "stats reset x\r\n", "RESET\r\n");
    assert_int_equal(f->srv.stats_resets, 2);
    expect(f, "stats detail\r\n",
           "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    expect(f, "stats detail x\r\n",
           "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    expect(f, "stats detail on\r\nstats detail off\r\nstats detail dump\r\n",
           "OK\r\nOK\r\nEND\r\n");
    char line[200];
    memset(line, 'g', sizeof(line));
    memcpy(line, "stats ", 6);
    memcpy(line + sizeof(line) - 2, "\r\n", 2);
    expect_n(f, line, sizeof(line), "ERROR\r\n", 7);
}

static void
test_shutdown(void **state)
{
    struct fx *f = *state;
    expect(f, "shutdown\r\n", "ERROR: shutdown not enabled\r\n");
    expect(f, "shutdown graceful\r\n", "ERROR: shutdown not enabled\r\n");
    expect(f, "shutdown x\r\n", "CLIENT_ERROR invalid shutdown mode\r\n");
    assert_false(f->closed);
    f->srv.shutdown_enabled = true;
    expect(f, "shutdown\r\nversion\r\n", "");
    assert_true(f->closed);
    assert_int_equal(f->srv.shutdowns, 1);
}

static void
test_memlimit(void **state)
{
    struct fx *f = *state;
    expect(f, "cache_memlimit 16\r\n", "OK\r\n");
    assert_int_equal(f->srv.memlimit_mib, 16);
    expect(f, "cache_memlimit 32 noreply\r\n", "");
    assert_int_equal(f->srv.memlimit_mib, 32);
    /* a shrink still in progress is accepted, not "failed" */
    expect(f, "cache_memlimit 12\r\n", "OK\r\n");
    assert_int_equal(f->srv.memlimit_mib, 12);
    expect(f, "cache_memlimit 4\r\n",
           "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n");
    expect(f, "cache_memlimit 2000000000\r\n",
           "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n");
    expect(f, "cache_memlimit 2048\r\n",
           "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n");
    expect(f, "cache_memlimit x\r\n", "ERROR\r\n");
    expect(f, "cache_memlimit\r\n", "ERROR\r\n");
    expect(f, "cache_memlimit 1 2 3\r\n", "ERROR\r\n");
}

static void
test_quit(void **state)
{
    struct fx *f = *state;
    expect(f, "version\r\nquit\r\nversion\r\n", "VERSION " TC_VERSION "\r\n");
    assert_true(f->closed);
}

static void
test_unknown_and_garbage(void **state)
{
    struct fx *f = *state;
    expect(f, "\r\n", "ERROR\r\n");
    expect(f, "\n", "ERROR\r\n");
    expect(f, "x\r\n", "ERROR\r\n");
    expect(f, "bogus a b c\r\n", "ERROR\r\n");
    expect(f, "mx\r\n", "ERROR\r\n");
    /* meta commands go to the meta parser, but a keyless one is ERROR */
    expect(f, "mn\r\nmg\r\nms\r\nmd \r\nma\r\nmn\r\n",
           "MN\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\nMN\r\n");
    /* binary bytes once the connection is text: ERROR, then carry on */
    expect_n(f, "\x80\x01\x00\x05garbage\xff\r\n", 14, "ERROR\r\n", 7);
    expect_n(f, "\0\0\0\n", 4, "ERROR\r\n", 7);
    expect(f, "version\r\n", "VERSION " TC_VERSION "\r\n");
    assert_false(f->s.binary);
    /* memcached hangs up on an HTTP request */
    expect(f, "GET / HTTP/1.1\r\n", "");
    assert_true(f->closed);
}

static void
test_line_too_long(void **state)
{
    struct fx *f = *state;
    char *line = malloc(PROTO_LINE_MAX + 16);
    assert_non_null(line);
    /* PROTO_LINE_MAX bytes before the "\n" is still a line */
    memset(line, 'a', PROTO_LINE_MAX);
    line[PROTO_LINE_MAX - 1] = '\r';
    line[PROTO_LINE_MAX] = '\n';
    expect_n(f, line, PROTO_LINE_MAX + 1, "ERROR\r\n", 7);
    /* one more without a "\n": the reply, then the close */
    memset(line, 'a', PROTO_LINE_MAX + 1);
    expect_n(f, line, PROTO_LINE_MAX + 1, "CLIENT_ERROR line too long\r\n", 28);
    assert_true(f->closed);
    /* the same when the "\n" is there already */
    fresh(f);
    memset(line, 'a', PROTO_LINE_MAX + 1);
    memcpy(line + PROTO_LINE_MAX + 1, "\r\n", 2);
    expect_n(f, line, PROTO_LINE_MAX + 3, "CLIENT_ERROR line too long\r\n", 28);
    assert_true(f->closed);
    free(line);
}

static void
test_binary_detected(void **state)
{
    struct fx *f = *state;
    /* a binary NOOP: the first byte picks the binary parser for good */
    static const char noop[24] = {(char)0x80, 0x0a};
    receive(f, noop, sizeof(noop));
    assert_true(f->s.binary);
    size_t n;
    free(take_output(f, &n));
}

static void
test_counters(void **state)
{
    struct fx *f = *state;
    expect(f, "set a 0 0 1\r\n1\r\nget a a\r\nbogus\r\nversion\r\n",
           "STORED\r\nVALUE a 0 1\r\n1\r\nVALUE a 0 1\r\n1\r\nEND\r\nERROR\r\n"
           "VERSION " TC_VERSION "\r\n");
    assert_int_equal(f->s.ctr.cmd_total, 4);
    assert_int_equal(f->s.ctr.get_multi, 1);
    assert_int_equal(f->s.ctr.protocol_errors, 1);
}

static void
test_err_table(void **state)
{
    (void)state;
    /* every line of the text and meta protocols has one of memcached's
     * prefixes; the binary bodies are plain sentences */
    for (int e = PERR_NONE + 1; e < PERR_BIN_NOT_FOUND; e++) {
        const char *t = proto_err_text((enum proto_err)e);
        assert_non_null(t);
        assert_true(strncmp(t, "ERROR", 5) == 0 ||
                    strncmp(t, "CLIENT_ERROR ", 13) == 0 ||
                    strncmp(t, "SERVER_ERROR ", 13) == 0 ||
                    strncmp(t, "MEMLIMIT_", 9) == 0);
        assert_string_not_equal(t, "SERVER_ERROR unknown error");
    }
    for (int e = PERR_BIN_NOT_FOUND; e < PERR_COUNT; e++) {
        const char *t = proto_err_text((enum proto_err)e);
        assert_true(strchr(t, '_') == NULL && strncmp(t, "ERROR", 5) != 0);
    }
    assert_string_equal(proto_err_text(PERR_NONE),
                        "SERVER_ERROR unknown error");
    assert_string_equal(proto_err_text(PERR_KEY_TOO_LONG),
                        "CLIENT_ERROR bad command line format");
    assert_string_equal(proto_err_text(PERR_BIN_NON_NUMERIC),
                        "Non-numeric server-side value for incr or decr");
    assert_string_equal(proto_err_text(PERR_TOO_MANY_CONNS),
                        "ERROR Too many open connections");
}

static void
test_util_parsing(void **state)
{
    (void)state;
    char num[PROTO_U64_DIGITS + 1] = {0};
    assert_int_equal(proto_fmt_u64(num, 0), 1);
    assert_memory_equal(num, "0", 1);
    assert_int_equal(proto_fmt_u64(num, 1234567890), 10);
    assert_memory_equal(num, "1234567890", 10);
    assert_int_equal(proto_fmt_u64(num, UINT64_MAX), PROTO_U64_DIGITS);
    assert_string_equal(num, "18446744073709551615");
    struct proto_token t;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
#define TOK(s) (t.p = (s), t.n = strlen(s), &t)
    assert_true(proto_parse_u32(TOK("4294967295"), &u32));
    assert_int_equal(u32, 4294967295u);
    assert_false(proto_parse_u32(TOK("4294967296"), &u32));
    assert_false(proto_parse_u32(TOK(""), &u32));
    assert_false(proto_parse_u32(TOK("-0"), &u32));
    assert_true(proto_parse_u64(TOK("18446744073709551615"), &u64));
    assert_true(u64 == UINT64_MAX);
    assert_false(proto_parse_u64(TOK("18446744073709551616"), &u64));
    assert_true(proto_parse_u64(TOK("000000000000000000000001"), &u64));
    assert_true(u64 == 1);
    assert_true(proto_parse_i64(TOK("-9223372036854775808"), &i64));
    assert_true(i64 == INT64_MIN);
    assert_false(proto_parse_i64(TOK("-9223372036854775809"), &i64));
    assert_true(proto_parse_i64(TOK("9223372036854775807"), &i64));
    assert_false(proto_parse_i64(TOK("9223372036854775808"), &i64));
    assert_false(proto_parse_i64(TOK("-"), &i64));
    assert_false(proto_parse_i64(TOK("1 "), &i64));
#undef TOK
    struct proto_token tok[3];
    assert_int_equal(proto_tokenize("  a bb  c ", 10, tok, 3), 3);
    assert_int_equal(tok[1].n, 2);
    assert_int_equal(proto_tokenize("a b c d", 7, tok, 3), 4);
    assert_int_equal(proto_tokenize("   ", 3, tok, 3), 0);
    assert_int_equal(proto_find_eol("ab\ncd\n", 6), 2);
    assert_int_equal(proto_find_eol("abcd", 4), -1);
    assert_false(proto_key_ok("", 0));
    assert_false(proto_key_ok("a b", 3));
    assert_true(proto_key_ok("\xff", 1));
}

/* The word-at-a-time scans against the byte rules they replace: a key is
 * refused for any byte <= ' ' or 0x7f wherever it sits (an 8-byte word, the
 * overlapping tail, a short key), bytes >= 0x80 pass; a token ends at the
 * first ' ' wherever it sits; numbers print as %llu does. */
static bool
key_ok_ref(const char *k, size_t n)
{
    if (n == 0 || n > TC_KEY_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] <= ' ' || (unsigned char)k[i] == 0x7f)
            return false;
    return true;
}

static void
test_util_word_scans(void **state)
{
    (void)state;
    static const unsigned char bad[] = {0x00, 0x01, '\t', '\r', '\n',
                                        ' ',  0x1f, 0x20, 0x7f};
    static const unsigned char good[] = {'!', 'a', '~', 0x7e, 0x80, 0xa0, 0xff};
    char key[TC_KEY_MAX + 2];
    for (size_t n = 1; n <= TC_KEY_MAX + 1; n++) {
        memset(key, 'k', sizeof(key));
        assert_true(proto_key_ok(key, n) == (n <= TC_KEY_MAX));
        for (size_t pos = 0; pos < n && n <= 40; pos++) {
            for (size_t b = 0; b < sizeof(bad); b++) {
                key[pos] = (char)bad[b];
                if (proto_key_ok(key, n))
                    fail_msg("len %zu: byte 0x%02x at %zu accepted", n, bad[b],
                             pos);
            }
            for (size_t g = 0; g < sizeof(good); g++) {
                key[pos] = (char)good[g];
                assert_true(proto_key_ok(key, n) == key_ok_ref(key, n));
            }
            key[pos] = 'k';
        }
    }
    /* a bad byte at each end of a long key */
    memset(key, 'k', sizeof(key));
    key[TC_KEY_MAX - 1] = 0x7f;
    assert_false(proto_key_ok(key, TC_KEY_MAX));
    key[TC_KEY_MAX - 1] = 'k';
    key[0] = ' ';
    assert_false(proto_key_ok(key, TC_KEY_MAX));

    /* a token's end: one ' ' placed at every position of a 40-byte line of
     * tabs and letters, and none */
    char line[40];
    for (size_t sp = 0; sp <= sizeof(line); sp++) {
        for (size_t i = 0; i < sizeof(line); i++)
            line[i] = i % 3 ? 'x' : '\t';
        if (sp < sizeof(line))
            line[sp] = ' ';
        for (size_t from = 0; from <= sp && from < sizeof(line); from++)
            assert_int_equal(proto_token_end(line, from, sizeof(line)), sp);
        struct proto_token tok[4];
        int n = proto_tokenize(line, sizeof(line), tok, 4);
        size_t first = sp == 0 ? 1 : 0;
        assert_int_equal(n, sp == 0 || sp >= sizeof(line) - 1 ? 1 : 2);
        assert_true(tok[0].p == line + first);
        assert_int_equal(tok[0].n, sp == 0             ? sizeof(line) - 1
                                   : sp < sizeof(line) ? sp
                                                       : sizeof(line));
    }

    /* numbers: each power of ten, one below it, and some between */
    char num[PROTO_U64_DIGITS + 1], ref[32];
    uint64_t p10 = 1;
    for (int d = 0; d < 20; d++, p10 *= 10) {
        uint64_t vals[] = {p10, p10 - 1, p10 + 1, p10 * 3 + 7, p10 * 9 + 9};
        for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
            memset(num, '#', sizeof(num));
            size_t n = proto_fmt_u64(num, vals[i]);
            int m =
                snprintf(ref, sizeof(ref), "%llu", (unsigned long long)vals[i]);
            assert_int_equal(n, (size_t)m);
            assert_memory_equal(num, ref, n);
            if (n < sizeof(num))
                assert_int_equal(num[n], '#'); /* nothing past it */
        }
    }
}

/* The tokenizer against a byte-by-byte split on ' ': lines of every length
 * around the word-at-a-time path's range (8..64 bytes), spaces and other
 * bytes (tabs, '\r', >= 0x80) at pseudo-random places, runs of spaces at
 * either end, and token limits below the count; each line in a buffer of
 * its exact size, so that a read past it is a fault under ASan. */
static int
tokenize_ref(const char *line, size_t len, struct proto_token *tok, int max)
{
    int n = 0;
    size_t i = 0;
    for (;;) {
        while (i < len && line[i] == ' ')
            i++;
        if (i == len)
            return n;
        if (n == max)
            return max + 1;
        size_t start = i;
        while (i < len && line[i] != ' ')
            i++;
        tok[n].p = line + start;
        tok[n].n = i - start;
        n++;
    }
}

static void
test_util_tokenize(void **state)
{
    (void)state;
    static const char bytes[] = {' ',        ' ',        ' ', 'k',
                                 '\t',       '\r',       '!', (char)0x80,
                                 (char)0xa0, (char)0xff, 0x1f};
    uint64_t rng = 88172645463325252ull;
    for (size_t len = 0; len <= 80; len++) {
        for (int round = 0; round < 400; round++) {
            char *line = test_malloc(len ? len : 1);
            for (size_t i = 0; i < len; i++) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                /* rounds: mostly spaces, mostly letters, or a mix */
                unsigned r = (unsigned)(rng >> 32);
                line[i] = round % 3 == 0   ? (r % 4 ? ' ' : 'k')
                          : round % 3 == 1 ? (r % 5 ? 'k' : ' ')
                                           : bytes[r % sizeof(bytes)];
            }
            int max = round % 4 == 0 ? (int)(rng % 5) : PROTO_MAX_TOKENS;
            struct proto_token got[PROTO_MAX_TOKENS], want[PROTO_MAX_TOKENS];
            int n = proto_tokenize(line, len, got, max);
            int m = tokenize_ref(line, len, want, max);
            if (n != m)
                fail_msg("len %zu round %d: %d tokens, want %d", len, round, n,
                         m);
            for (int i = 0; i < (m > max ? max : m); i++)
                if (got[i].p != want[i].p || got[i].n != want[i].n)
                    fail_msg("len %zu round %d: token %d differs", len, round,
                             i);
            test_free(line);
        }
    }
}

/* The key a batch of inputs hints to the engine: the first key of a
 * complete read line, nothing for other commands or a partial line. */
static void
test_read_key(void **state)
{
    (void)state;
    static const struct {
        const char *in, *key;
    } cases[] = {
        {"get foo\r\n", "foo"},
        {"gets a b c\r\n", "a"},
        {"gat 10 k1\r\n", "k1"},
        {"gats 10 k2 k3\n", "k2"},
        {"mg key v f\r\nget x\r\n", "key"},
        {"get foo", NULL},                 /* no end of line yet */
        {"set foo 0 0 1\r\nx\r\n", "foo"}, /* the store looks it up */
        {"ms bar 1 T0\r\nx\r\n", "bar"},
        {"delete foo\r\n", NULL}, /* neither a read nor a set */
        {"set foo", NULL},
        {"gat 10\r\n", NULL}, /* no key */
        {"get \r\n", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tc_key k = {0};
        bool got = proto_text_read_key(cases[i].in, strlen(cases[i].in), &k);
        if (got != (cases[i].key != NULL))
            fail_msg("%s: %s", cases[i].in, got ? "a key" : "no key");
        if (got && (k.klen != strlen(cases[i].key) ||
                    memcmp(k.key, cases[i].key, k.klen) != 0))
            fail_msg("%s: key %.*s", cases[i].in, (int)k.klen,
                     (const char *)k.key);
    }
    /* a session that would not run a text read now gives none */
    struct proto_sess s;
    proto_sess_init(&s, NULL, NULL, NULL, 0);
    struct tc_key k;
    assert_false(proto_read_key(&s, "get a\r\n", 7, &k)); /* not chosen */
    s.chosen = true;
    assert_true(proto_read_key(&s, "get a\r\n", 7, &k));
    s.binary = true;
    assert_false(proto_read_key(&s, "get a\r\n", 7, &k));
    s.binary = false;
    s.swallow = 3;
    assert_false(proto_read_key(&s, "get a\r\n", 7, &k));
    proto_sess_fini(&s);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_table),
        cmocka_unit_test(test_util_parsing),
        cmocka_unit_test(test_util_word_scans),
        cmocka_unit_test(test_util_tokenize),
        cmocka_unit_test(test_read_key),
        T(test_get_miss_and_hit),
        T(test_gets_has_cas),
        T(test_get_bad_keys),
        T(test_get_many_keys),
        T(test_multiget_batches),
        T(test_pipelined_reads),
        T(test_pipelined_gat),
        T(test_gat_gats),
        T(test_store_modes),
        T(test_store_expiry),
        T(test_cas),
        T(test_store_bad_lines),
        T(test_bad_data_chunk),
        T(test_large_values),
        T(test_too_large_swallowed),
        T(test_incr_decr),
        T(test_delete),
        T(test_touch),
        T(test_flush_all_delay),
        T(test_version_verbosity),
        T(test_stats),
        T(test_shutdown),
        T(test_memlimit),
        T(test_quit),
        T(test_unknown_and_garbage),
        T(test_line_too_long),
        T(test_binary_detected),
        T(test_counters),
    };
    return cmocka_run_group_tests_name("proto_text", tests, NULL, NULL);
}

/*
 * Helpers shared by the protocol parsers (src/server/proto/proto_util.h): the
 * one table of error replies with memcached's exact text, the command-line
 * tokenizer, strict number parsing and the key check. Stateless; any thread.
 */

#include "src/server/proto/proto_util.h"

#include "src/base/num.h"
#include "src/server/proto/proto.h"

#include <stdint.h>
#include <string.h>

/* memcached 1.6's text for each error (proto_text.c, proto_meta.c,
 * proto_bin.c's write_bin_error, memcached.c). */
static const char *const err_text[PERR_COUNT] = {
    [PERR_ERROR] = "ERROR",
    [PERR_BAD_FORMAT] = "CLIENT_ERROR bad command line format",
    [PERR_BAD_CHUNK] = "CLIENT_ERROR bad data chunk",
    [PERR_LINE_TOO_LONG] = "CLIENT_ERROR line too long",
    [PERR_NON_NUMERIC] =
        "CLIENT_ERROR cannot increment or decrement non-numeric value",
    [PERR_INVALID_DELTA] = "CLIENT_ERROR invalid numeric delta argument",
    [PERR_INVALID_EXPTIME] = "CLIENT_ERROR invalid exptime argument",
    [PERR_BAD_FLAG] = "CLIENT_ERROR invalid flag",
    [PERR_KEY_TOO_LONG] = "CLIENT_ERROR bad command line format",
    [PERR_TOO_LARGE] = "SERVER_ERROR object too large for cache",
    [PERR_OUT_OF_MEMORY] = "SERVER_ERROR out of memory storing object",
    [PERR_NOMEM] = "SERVER_ERROR out of memory",
    [PERR_NO_SHUTDOWN] = "ERROR: shutdown not enabled",
    [PERR_DELETE_USAGE] =
        "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
    [PERR_DETAIL_USAGE] = "CLIENT_ERROR usage: stats detail on|off|dump",
    [PERR_FLUSH_DISABLED] = "CLIENT_ERROR flush_all not allowed",
    [PERR_SHUTDOWN_MODE] = "CLIENT_ERROR invalid shutdown mode",
    [PERR_MEMLIMIT_SMALL] =
        "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m",
    [PERR_MEMLIMIT_UNITS] =
        "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes",
    [PERR_MEMLIMIT_FAILED] =
        "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust",
    [PERR_HOTSPOT_USAGE] =
        "CLIENT_ERROR usage: hotspot dump [path] | hotspot reset",
    [PERR_HOTSPOT_OFF] = "SERVER_ERROR write-hotspot tracking is off (start "
                         "with -o hotspot_dimms=N)",
    [PERR_PATH_TOO_LONG] = "SERVER_ERROR path too long",
    [PERR_ILLEGAL_SLAB] = "CLIENT_ERROR Illegal slab id",
    [PERR_BAD_CMDLINE] = "CLIENT_ERROR bad command line",
    [PERR_CRAWLER_OFF] = "CLIENT_ERROR lru crawler disabled",
    [PERR_NO_CACHEDUMP] = "CLIENT_ERROR stats cachedump not allowed",
    [PERR_NO_METADUMP] = "ERROR metadump not allowed",
    [PERR_NO_WATCH] = "CLIENT_ERROR watch commands not allowed",
    [PERR_SLEEP_RANGE] = "CLIENT_ERROR sleep must be one second or less",
    [PERR_DUP_FLAG] = "CLIENT_ERROR duplicate flag",
    [PERR_BAD_TOKEN] = "CLIENT_ERROR bad token in command line format",
    [PERR_DECODE_KEY] = "CLIENT_ERROR error decoding key",
    [PERR_OPAQUE_LONG] = "CLIENT_ERROR opaque token too long",
    [PERR_TOO_MANY_FLAGS] = "CLIENT_ERROR options flags are too long",
    [PERR_FLAGS_TOO_LONG] = "CLIENT_ERROR options flags too long",
    [PERR_M_LENGTH] = "CLIENT_ERROR incorrect length for M token",
    [PERR_MS_MODE] = "CLIENT_ERROR invalid mode for ms M token",
    [PERR_MA_MODE] = "CLIENT_ERROR invalid mode for ma M token",
    [PERR_INITIAL] = "CLIENT_ERROR invalid numeric initial value",
    [PERR_DELTA] = "CLIENT_ERROR invalid numeric delta value",
    [PERR_MA_FLAG] = "CLIENT_ERROR invalid or duplicate flag",
    [PERR_UNHANDLED] = "SERVER_ERROR Unhandled storage type.",
    [PERR_BUSY] = "SERVER_ERROR busy, try again",
    [PERR_UNAUTHENTICATED] = "CLIENT_ERROR unauthenticated",
    [PERR_AUTH_FAILURE] = "CLIENT_ERROR authentication failure",
    [PERR_AUTH_TOKEN] = "CLIENT_ERROR bad authentication token format",
    [PERR_AUTH_TERM] = "CLIENT_ERROR bad command line termination",
    [PERR_TOO_MANY_CONNS] = "ERROR Too many open connections",
    [PERR_BIN_NOT_FOUND] = "Not found",
    [PERR_BIN_EXISTS] = "Data exists for key.",
    [PERR_BIN_TOO_LARGE] = "Too large.",
    [PERR_BIN_EINVAL] = "Invalid arguments",
    [PERR_BIN_NOT_STORED] = "Not stored.",
    [PERR_BIN_NON_NUMERIC] = "Non-numeric server-side value for incr or decr",
    [PERR_BIN_UNKNOWN_COMMAND] = "Unknown command",
    [PERR_BIN_NOMEM] = "Out of memory",
    [PERR_BIN_AUTH_FAILURE] = "Auth failure.",
    [PERR_BIN_UNKNOWN] = "Unknown error",
};

const char *
proto_err_text(enum proto_err e)
{
    if ((unsigned)e >= PERR_COUNT || err_text[e] == NULL)
        return "SERVER_ERROR unknown error";
    return err_text[e];
}

/* ERROR and CLIENT_ERROR are the client's fault (proto_counters); a
 * SERVER_ERROR is not. */
static bool
is_protocol_error(const char *text)
{
    return strncmp(text, "ERROR", 5) == 0 ||
           strncmp(text, "CLIENT_ERROR", 12) == 0;
}

void
proto_reply_err(struct proto_sess *s, struct obuf *out, enum proto_err e)
{
    const char *text = proto_err_text(e);
    obuf_add_str(out, text);
    obuf_add(out, "\r\n", 2);
    if (s && is_protocol_error(text))
        s->ctr.protocol_errors++;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* Bit k set for each byte k of w that is ' ' (exact: no borrow between
 * bytes), gathered into the low 8 bits. */
static inline uint64_t
space_bits8(uint64_t w)
{
    const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full;
    uint64_t x = w ^ 0x2020202020202020ull;       /* ' ' -> 0 */
    uint64_t z = ~(((x & lo7) + lo7) | x) & ~lo7; /* 0x80 per zero byte */
    /* each byte's bit to bit 56 + k (every partial product on a bit of
     * its own: no carries) */
    return ((z >> 7) * 0x0102040810204080ull) >> 56;
}

static inline uint64_t
load8(const char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* A line of 8..63 bytes: a bit per space, then the tokens are the runs of
 * zero bits (a request line is short: a get's or a set's is 16-30 bytes),
 * a token starting at each 1 -> 0 edge and ending at each 0 -> 1 edge. */
static int
tokenize_short(const char *line, size_t len, struct proto_token *tok, int max)
{
    uint64_t sp = 0;
    size_t o = 0;
    for (; o + 8 <= len; o += 8)
        sp |= space_bits8(load8(line + o)) << o;
    if (o < len) /* the last 8 bytes again: the ones past o */
        sp |= space_bits8(load8(line + len - 8)) >> (8 - (len - o)) << o;
    /* the token bytes; bit len and above are 0, so the last token's end
     * edge is at len at most (bit 63 at the most) */
    uint64_t word = ~sp & ((1ull << len) - 1);
    uint64_t starts = word & ~(word << 1);
    uint64_t ends = ~word & (word << 1);
    int n = 0;
    while (starts) {
        if (n == max)
            return max + 1;
        unsigned b = (unsigned)__builtin_ctzll(starts);
        unsigned e = (unsigned)__builtin_ctzll(ends);
        tok[n].p = line + b;
        tok[n].n = e - b;
        n++;
        starts &= starts - 1;
        ends &= ends - 1;
    }
    return n;
}
#endif

/* memcached splits on ' ' only: a tab or '\r' inside a line is part of a
 * token. */
int
proto_tokenize(const char *line, size_t len, struct proto_token *tok, int max)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (len >= 8 && len < 64)
        return tokenize_short(line, len, tok, max);
#endif
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
        i = proto_token_end(line, i, len);
        tok[n].p = line + start;
        tok[n].n = i - start;
        n++;
    }
}

long
proto_find_eol(const char *in, size_t len)
{
    const char *nl = memchr(in, '\n', len);
    return nl ? (long)(nl - in) : -1;
}

bool
proto_parse_u32(const struct proto_token *t, uint32_t *out)
{
    uint64_t v;
    if (!num_parse_u64(t->p, t->n, UINT32_MAX, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

bool
proto_parse_u64(const struct proto_token *t, uint64_t *out)
{
    return num_parse_u64(t->p, t->n, UINT64_MAX, out);
}

bool
proto_parse_i64(const struct proto_token *t, int64_t *out)
{
    uint64_t v;
    if (t->n > 0 && t->p[0] == '-') {
        if (!num_parse_u64(t->p + 1, t->n - 1, (uint64_t)INT64_MAX + 1, &v))
            return false;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
        return true;
    }
    if (!num_parse_u64(t->p, t->n, INT64_MAX, &v))
        return false;
    *out = (int64_t)v;
    return true;
}

size_t
proto_fmt_u64(char *buf, uint64_t v)
{
    /* the digits counted first, then written two at a time from the last
     * one back: no scratch copy (a reply's flags and length are short) */
    static const char pairs[] = "00010203040506070809101112131415161718192021"
                                "22232425262728293031323334353637383940414243"
                                "44454647484950515253545556575859606162636465"
                                "66676869707172737475767778798081828384858687"
                                "888990919293949596979899";
    size_t n = 1;
    for (uint64_t t = v; t >= 10; t /= 10)
        n++;
    char *p = buf + n;
    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        *--p = pairs[d + 1];
        *--p = pairs[d];
    }
    if (v >= 10) {
        *--p = pairs[v * 2 + 1];
        *--p = pairs[v * 2];
    } else {
        *--p = (char)('0' + v);
    }
    return n;
}

/* Does the 8-byte word hold a byte <= ' ' or 0x7f? Exact as a yes/no:
 * (x - 0x21..) & ~x & 0x80.. flags a byte below 0x21 (a byte >= 0x80 never
 * counts), and the same test on x ^ 0x7f.. with 0x01 a byte equal to 0x7f. */
static inline bool
key_word_bad(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101ull, high = ones * 0x80;
    uint64_t d = x ^ (ones * 0x7f);
    return (((x - ones * 0x21) & ~x) | ((d - ones) & ~d)) & high;
}

bool
proto_key_ok(const char *key, size_t len)
{
    if (len == 0 || len > TC_KEY_MAX)
        return false;
    size_t i = 0;
    uint64_t w;
    for (; i + 8 <= len; i += 8) {
        memcpy(&w, key + i, 8);
        if (key_word_bad(w))
            return false;
    }
    if (i < len && len >= 8) { /* the last 8 bytes, overlapping */
        memcpy(&w, key + len - 8, 8);
        return !key_word_bad(w);
    }
    for (; i < len; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch <= ' ' || ch == 0x7f)
            return false;
    }
    return true;
}

size_t
proto_urlencode(const void *in, size_t n, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *k = in;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = k[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-' ||
            ch == '~') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    return o;
}

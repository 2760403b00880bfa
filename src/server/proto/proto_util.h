#pragma once
/*
 * Helpers shared by the protocol parsers: memcached's reply strings (one
 * table, exact text), tokenizing a command line, strict number parsing and
 * key checks. Stateless.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "src/server/obuf.h"

struct proto_sess;

/*
 * Every error reply tiercache sends, memcached's exact text: the one table
 * (STYLE: one protocol error table). Text and meta lines, the server's
 * connection-limit line and the binary protocol's error bodies.
 */
enum proto_err {
    PERR_NONE = 0, /* no error (a parser's "all is well"); has no text */
    /* text and meta */
    PERR_ERROR,           /* "ERROR" (unknown command) */
    PERR_BAD_FORMAT,      /* "CLIENT_ERROR bad command line format" */
    PERR_BAD_CHUNK,       /* "CLIENT_ERROR bad data chunk" */
    PERR_LINE_TOO_LONG,   /* "CLIENT_ERROR line too long" (tiercache's:
                             memcached closes such a connection without a
                             reply) */
    PERR_NON_NUMERIC,     /* "CLIENT_ERROR cannot increment or decrement
                             non-numeric value" */
    PERR_INVALID_DELTA,   /* "CLIENT_ERROR invalid numeric delta argument" */
    PERR_INVALID_EXPTIME, /* "CLIENT_ERROR invalid exptime argument" */
    PERR_BAD_FLAG,        /* "CLIENT_ERROR invalid flag" (meta) */
    PERR_KEY_TOO_LONG,    /* "CLIENT_ERROR bad command line format"
                             (memcached has no separate text for a key
                             over 250 bytes, in text or meta) */
    PERR_TOO_LARGE,       /* "SERVER_ERROR object too large for cache" */
    PERR_OUT_OF_MEMORY,   /* "SERVER_ERROR out of memory storing object" */
    PERR_NOMEM,           /* "SERVER_ERROR out of memory" (incr, ma) */
    PERR_NO_SHUTDOWN,     /* "ERROR: shutdown not enabled" */
    /* text: one command each */
    PERR_DELETE_USAGE,    /* delete with a stray argument */
    PERR_DETAIL_USAGE,    /* stats detail without on|off|dump */
    PERR_FLUSH_DISABLED,  /* flush_all under -F */
    PERR_SHUTDOWN_MODE,   /* shutdown <not graceful> */
    PERR_MEMLIMIT_SMALL,  /* cache_memlimit below 8 MiB */
    PERR_MEMLIMIT_UNITS,  /* cache_memlimit that looks like bytes */
    PERR_MEMLIMIT_FAILED, /* cache_memlimit the engine refused */
    PERR_HOTSPOT_USAGE,   /* hotspot without dump|reset */
    PERR_HOTSPOT_OFF,     /* hotspot with tracking off */
    PERR_PATH_TOO_LONG,   /* hotspot dump PATH too long */
    PERR_ILLEGAL_SLAB,    /* stats cachedump beyond the class ids */
    PERR_BAD_CMDLINE,     /* stats cachedump without its limit */
    PERR_CRAWLER_OFF,     /* lru_crawler crawl/metadump while disabled */
    PERR_NO_CACHEDUMP,    /* stats cachedump under -X */
    PERR_NO_METADUMP,     /* lru_crawler metadump under -X */
    PERR_NO_WATCH,        /* watch under -W */
    PERR_SLEEP_RANGE,     /* lru_crawler sleep over a second */
    /* meta */
    PERR_DUP_FLAG,       /* a flag given twice */
    PERR_BAD_TOKEN,      /* a flag's token is not a valid number */
    PERR_DECODE_KEY,     /* b flag and a key that is not base64 */
    PERR_OPAQUE_LONG,    /* O token over 32 bytes */
    PERR_TOO_MANY_FLAGS, /* more than 20 tokens (mg) */
    PERR_FLAGS_TOO_LONG, /* more than 20 tokens (ms md ma: their text) */
    PERR_M_LENGTH,       /* M token not one character */
    PERR_MS_MODE,        /* ms M<mode> unknown */
    PERR_MA_MODE,        /* ma M<mode> unknown */
    PERR_INITIAL,        /* ma J not a number */
    PERR_DELTA,          /* ma D not a number */
    PERR_MA_FLAG,        /* any flag error of ma or md: memcached's one text */
    PERR_UNHANDLED,      /* ms whose mode the engine refused */
    PERR_BUSY,           /* not memcached's: the engine gave up after
                            racing writers */
    /* authentication (-Y) */
    PERR_UNAUTHENTICATED, /* any line before a login */
    PERR_AUTH_FAILURE,    /* a login with a wrong user or password */
    PERR_AUTH_TOKEN,      /* a login whose data is not "user password" */
    PERR_AUTH_TERM,       /* a login whose data lacks its "\r\n" */
    /* server */
    PERR_TOO_MANY_CONNS, /* -c reached: sent, then the socket is closed */
    /* binary protocol error bodies (the status says which) */
    PERR_BIN_NOT_FOUND,
    PERR_BIN_EXISTS,
    PERR_BIN_TOO_LARGE,
    PERR_BIN_EINVAL,
    PERR_BIN_NOT_STORED,
    PERR_BIN_NON_NUMERIC,
    PERR_BIN_UNKNOWN_COMMAND,
    PERR_BIN_NOMEM,
    PERR_BIN_AUTH_FAILURE, /* SASL refused, or a request before it (-S) */
    PERR_BIN_UNKNOWN,      /* a status without a text of its own */
    PERR_COUNT
};

/* The reply line (or binary body) for e, without "\r\n". */
const char *proto_err_text(enum proto_err e);
/* Append the reply line and "\r\n"; an ERROR or CLIENT_ERROR counts as a
 * protocol error (ctr.protocol_errors; s may be NULL). */
void proto_reply_err(struct proto_sess *s, struct obuf *out, enum proto_err e);

/* A command line split on spaces. */
#define PROTO_MAX_TOKENS 24
struct proto_token {
    const char *p;
    size_t n;
};
/* The index of the first ' ' in line[i..len), or len: eight bytes at a
 * time (a key is scanned so, once per pass of the parsers). */
static inline size_t
proto_token_end(const char *line, size_t i, size_t len)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull;
    while (i + 8 <= len) {
        uint64_t w;
        memcpy(&w, line + i, 8);
        w ^= ones * ' ';
        /* the lowest byte flagged is the first ' ' (a borrow only flags
         * bytes above a zero one) */
        uint64_t z = (w - ones) & ~w & (ones * 0x80);
        if (z)
            return i + (size_t)(__builtin_ctzll(z) >> 3);
        i += 8;
    }
#endif
    while (i < len && line[i] != ' ')
        i++;
    return i;
}

/* Split line[0..len) (no "\r\n") into at most max tokens; returns the
 * count, or max + 1 when there are more. */
int proto_tokenize(const char *line, size_t len, struct proto_token *tok,
                   int max);
/* Is the token exactly word? Inline, so that the length of a literal word
 * is a constant (no strlen per call on the request path). */
static inline bool
proto_tok_is(const struct proto_token *t, const char *word)
{
    size_t n = strlen(word);
    return t->n == n && memcmp(t->p, word, n) == 0;
}

/* The end of the first line: index of its '\n' (the line is in[0..i), with
 * a trailing '\r' stripped by the caller), or -1 if there is none yet. */
long proto_find_eol(const char *in, size_t len);

/* Strict decimal parsing of a whole token (memcached's safe_strto*):
 * digits only (a leading '-' for the signed one), no overflow. */
bool proto_parse_u32(const struct proto_token *t, uint32_t *out);
bool proto_parse_u64(const struct proto_token *t, uint64_t *out);
bool proto_parse_i64(const struct proto_token *t, int64_t *out);

/* Write v in decimal at buf (room for PROTO_U64_DIGITS bytes, no NUL);
 * returns the length. For reply lines on the hot path, instead of
 * snprintf. */
#define PROTO_U64_DIGITS 20
size_t proto_fmt_u64(char *buf, uint64_t v);
/* memcached's uriencode (metadump, watch): every byte but [A-Za-z0-9._~-]
 * as %XX. out holds 3 * n bytes; returns the length written. */
size_t proto_urlencode(const void *in, size_t n, char *out);

/* A text-protocol key: 1..250 bytes, no control characters or spaces. */
bool proto_key_ok(const char *key, size_t len);

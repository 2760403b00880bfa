#pragma once
/*
 * Helpers shared by the protocol parsers: memcached's reply strings (one
 * table, exact text), tokenizing a command line, strict number parsing and
 * key checks. Stateless.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/obuf.h"

struct proto_sess;

/* Every error reply the text and meta protocols send, memcached's text. */
enum proto_err {
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
    PERR_NO_SHUTDOWN,     /* "ERROR: shutdown not enabled" */
    PERR_COUNT
};

/* The reply line for e, without "\r\n". */
const char *proto_err_text(enum proto_err e);
/* Append the reply line and "\r\n"; counts a protocol error. */
void proto_reply_err(struct proto_sess *s, struct obuf *out, enum proto_err e);

/* A command line split on spaces. */
#define PROTO_MAX_TOKENS 24
struct proto_token {
    const char *p;
    size_t n;
};
/* Split line[0..len) (no "\r\n") into at most max tokens; returns the
 * count, or max + 1 when there are more. */
int proto_tokenize(const char *line, size_t len, struct proto_token *tok,
                   int max);
bool proto_tok_is(const struct proto_token *t, const char *word);

/* The end of the first line: index of its '\n' (the line is in[0..i), with
 * a trailing '\r' stripped by the caller), or -1 if there is none yet. */
long proto_find_eol(const char *in, size_t len);

/* Strict decimal parsing of a whole token (memcached's safe_strto*):
 * digits only (a leading '-' for the signed one), no overflow. */
bool proto_parse_u32(const struct proto_token *t, uint32_t *out);
bool proto_parse_u64(const struct proto_token *t, uint64_t *out);
bool proto_parse_i64(const struct proto_token *t, int64_t *out);

/* A text-protocol key: 1..250 bytes, no control characters or spaces. */
bool proto_key_ok(const char *key, size_t len);

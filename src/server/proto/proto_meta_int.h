#pragma once
/*
 * Internals of the meta protocol shared by src/server/proto/proto_meta.c
 * (the commands and their replies) and src/server/proto/proto_meta_parse.c
 * (a request line's tokens, flags, numbers and base64 keys). Not for use
 * outside these two files. The rules both follow are at the top of
 * proto_meta.c.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/server/proto/proto_util.h"
#include "src/tiercache.h"

#define META_B64_MAX 344 /* base64 of a 250-byte key, with padding */

/* A parsed request: its tokens, its key (decoded when b) and its flags. */
struct meta_req {
    int ntok;       /* tokens held in tok (the line may have more) */
    bool flag_err;  /* meta_parse failed on a flag, not the line's shape */
    int first_flag; /* index of the first flag token */
    const char *key;
    size_t klen;
    bool binary;      /* b: key was base64 */
    bool value;       /* v */
    bool quiet;       /* q */
    bool no_bump;     /* u */
    bool stale;       /* I */
    bool remove;      /* x */
    bool has_ttl;     /* T */
    bool vivify;      /* N */
    bool has_cas;     /* C */
    bool has_cas_new; /* E */
    bool no_cas;      /* -C: the c flag returns 0 */
    int32_t ttl;
    int32_t viv_ttl;
    int32_t recache;       /* R */
    uint32_t client_flags; /* F */
    char mode;             /* M */
    uint64_t cas;
    uint64_t cas_new;
    uint64_t delta;   /* D, default 1 */
    uint64_t initial; /* J */
    /* the tokens and the decoded key last: a request zeroes only the
     * fields above (META_REQ_ZERO), tok[0..ntok) and kbuf are written
     * before they are read */
    struct proto_token tok[PROTO_MAX_TOKENS];
    unsigned char kbuf[TC_KEY_MAX]; /* a decoded b key */
};

/* The bytes of struct meta_req a new request zeroes. */
#define META_REQ_ZERO offsetof(struct meta_req, tok)

/* Tokenize the line and parse key and flags (flags from token `first`).
 * The token count and key length are checked first, as memcached does.
 * PERR_NONE, or the error memcached reports for the line (r->flag_err tells
 * a flag's error from the line's shape). */
enum proto_err proto_meta_parse(struct meta_req *r, const char *line,
                                size_t llen, int first);
/* The same on a line already in r->tok: n is what proto_tokenize returned
 * for it (with PROTO_MAX_TOKENS as its max). */
enum proto_err proto_meta_parse_tokens(struct meta_req *r, int n, int first);

/* Encode n bytes into dst (room for 4 * ceil(n / 3)); returns the length. */
size_t proto_meta_b64_encode(const unsigned char *src, size_t n, char *dst);

/* Decode a padded base64 string into dst (room for 3 * n / 4 bytes).
 * Returns the decoded length, or 0 when src is not valid base64 (memcached
 * treats an empty result as a failure too). */
size_t proto_meta_b64_decode(const char *src, size_t n, unsigned char *dst);

/*
 * Parsing a meta request line: tokens, the key (strict RFC 4648 base64 with
 * b), every flag memcached knows and their numbers, with memcached's error
 * for each way a line can be wrong. The rules are at the top of
 * src/server/proto/proto_meta.c, which executes the parsed request.
 *
 * Concurrency: no state; works on the caller's struct meta_req.
 */
#include "src/server/proto/proto_meta_int.h"

#include "src/base/num.h"
#include "src/server/proto/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define META_MAX_TOKENS 20 /* memcached's MFLAG_MAX_OPT_LENGTH */
#define META_OPAQUE_MAX 32 /* memcached's MFLAG_MAX_OPAQUE_LENGTH */

/* ---- base64 (RFC 4648, with padding), for b keys ------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int
b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

/* Encode n bytes into dst (room for 4 * ceil(n / 3)); returns the length. */
size_t
proto_meta_b64_encode(const unsigned char *src, size_t n, char *dst)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)src[i + 1] << 8;
        if (i + 2 < n)
            v |= src[i + 2];
        dst[o++] = b64_alphabet[(v >> 18) & 63];
        dst[o++] = b64_alphabet[(v >> 12) & 63];
        dst[o++] = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
        dst[o++] = i + 2 < n ? b64_alphabet[v & 63] : '=';
    }
    return o;
}

/* Decode a padded base64 string into dst (room for 3 * n / 4 bytes).
 * Returns the decoded length, or 0 when src is not valid base64 (memcached
 * treats an empty result as a failure too). */
size_t
proto_meta_b64_decode(const char *src, size_t n, unsigned char *dst)
{
    size_t o = 0;
    if (n == 0 || n % 4 != 0)
        return 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            unsigned char ch = (unsigned char)src[i + j];
            if (ch == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            if (pad) /* data after padding */
                return 0;
            v[j] = b64_value(ch);
            if (v[j] < 0)
                return 0;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                     (uint32_t)v[2] << 6 | (uint32_t)v[3];
        dst[o++] = (unsigned char)(w >> 16);
        if (pad < 2)
            dst[o++] = (unsigned char)(w >> 8);
        if (pad < 1)
            dst[o++] = (unsigned char)w;
    }
    return o;
}

/* ---- numbers (memcached's safe_strto* on a whole token) ------------------ */

/* Unsigned 64-bit: optional '+', digits. */
static bool
parse_u64(const char *p, size_t n, uint64_t *out)
{
    if (n && p[0] == '+') {
        p++;
        n--;
    }
    return num_parse_u64(p, n, UINT64_MAX, out);
}

/* Signed 32-bit: optional sign, digits. */
static bool
parse_i32(const char *p, size_t n, int32_t *out)
{
    bool neg = false;
    uint64_t v;
    if (n && (p[0] == '+' || p[0] == '-')) {
        neg = p[0] == '-';
        p++;
        n--;
    }
    if (!num_parse_u64(p, n, neg ? 2147483648u : 2147483647u, &v))
        return false;
    *out = neg ? (int32_t)(-(int64_t)v) : (int32_t)v;
    return true;
}

/*
 * memcached's flag preparse: every known flag is accepted by every command.
 * Unknown and duplicate flags stop at once; bad tokens are noted and the
 * scan goes on, the last message winning, as memcached's loop does.
 */
static enum proto_err
meta_parse_flags(struct meta_req *r)
{
    uint64_t seen[2] = {0, 0}; /* a bit per flag byte below 128 */
    enum proto_err err = PERR_NONE;

    for (int i = r->first_flag; i < r->ntok; i++) {
        const char *p = r->tok[i].p;
        size_t n = r->tok[i].n;
        uint8_t f = (uint8_t)p[0];
        if (f >= 127 || (seen[f >> 6] >> (f & 63) & 1))
            return PERR_DUP_FLAG;
        seen[f >> 6] |= 1ull << (f & 63);
        switch (f) {
        case 'b': {
            size_t kn = proto_meta_b64_decode(r->key, r->klen, r->kbuf);
            if (kn == 0) {
                err = PERR_DECODE_KEY;
                break;
            }
            r->key = (const char *)r->kbuf;
            r->klen = kn;
            r->binary = true;
            break;
        }
        case 'N':
            r->vivify = true;
            if (!parse_i32(p + 1, n - 1, &r->viv_ttl))
                err = PERR_BAD_TOKEN;
            break;
        case 'T':
            r->has_ttl = true;
            if (!parse_i32(p + 1, n - 1, &r->ttl))
                err = PERR_BAD_TOKEN;
            break;
        case 'R':
            if (!parse_i32(p + 1, n - 1, &r->recache))
                err = PERR_BAD_TOKEN;
            break;
        case 'O': /* its length is checked once the flags are good */
        case 'P': /* proxy hints: accepted, no meaning here */
        case 'L':
        case 'k':
        case 's':
        case 't':
        case 'c':
        case 'f':
        case 'h':
        case 'l':
            break;
        case 'v':
            r->value = true;
            break;
        case 'u':
            r->no_bump = true;
            break;
        case 'q':
            r->quiet = true;
            break;
        case 'x':
            r->remove = true;
            break;
        case 'I':
            r->stale = true;
            break;
        case 'F': {
            uint64_t v;
            if (!parse_u64(p + 1, n - 1, &v) || v > UINT32_MAX)
                err = PERR_BAD_FORMAT;
            else
                r->client_flags = (uint32_t)v;
            break;
        }
        case 'C':
            r->has_cas = true;
            if (!parse_u64(p + 1, n - 1, &r->cas))
                err = PERR_BAD_TOKEN;
            break;
        case 'E':
            r->has_cas_new = true;
            if (!parse_u64(p + 1, n - 1, &r->cas_new))
                err = PERR_BAD_TOKEN;
            break;
        case 'M':
            if (n != 2)
                err = PERR_M_LENGTH;
            else
                r->mode = p[1];
            break;
        case 'J':
            if (!parse_u64(p + 1, n - 1, &r->initial))
                err = PERR_INITIAL;
            break;
        case 'D':
            if (!parse_u64(p + 1, n - 1, &r->delta))
                err = PERR_DELTA;
            break;
        default: /* a flag memcached does not know either */
            return PERR_BAD_FLAG;
        }
    }
    if (err != PERR_NONE)
        return err;
    for (int i = r->first_flag; i < r->ntok; i++)
        if (r->tok[i].p[0] == 'O' && r->tok[i].n > META_OPAQUE_MAX)
            return PERR_OPAQUE_LONG;
    return PERR_NONE;
}

/* Tokenize the line and parse key and flags (flags from token `first`).
 * The token count and key length are checked first, as memcached does. */
enum proto_err
proto_meta_parse(struct meta_req *r, const char *line, size_t llen, int first)
{
    return proto_meta_parse_tokens(
        r, proto_tokenize(line, llen, r->tok, PROTO_MAX_TOKENS), first);
}

enum proto_err
proto_meta_parse_tokens(struct meta_req *r, int n, int first)
{
    r->ntok = n > PROTO_MAX_TOKENS ? PROTO_MAX_TOKENS : n;
    r->first_flag = first;
    r->delta = 1;
    if (n < 2)
        return PERR_BAD_FORMAT;
    r->key = r->tok[1].p;
    r->klen = r->tok[1].n;
    if (r->klen > TC_KEY_MAX)
        return PERR_BAD_FORMAT;
    if (n > META_MAX_TOKENS)
        return PERR_TOO_MANY_FLAGS;
    enum proto_err err = meta_parse_flags(r);
    r->flag_err = err != PERR_NONE;
    if (r->no_cas && r->has_cas)
        r->cas = PROTO_CAS_NEVER;
    return err;
}

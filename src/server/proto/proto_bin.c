/*
 * memcached's binary protocol.
 *
 * A request is a 24-byte header (magic 0x80, opcode, key length, extras
 * length, data type, vbucket, total body length, opaque, CAS; big-endian),
 * then extras, key and value. A response has the same header with magic
 * 0x81 and a status where the request had the vbucket. The opcodes, status
 * codes, error texts, length checks and quiet rules follow memcached 1.6
 * (proto_bin.c there), checked byte for byte against memcached 1.6.18:
 *
 *   - A quiet opcode (SETQ, GETQ, ...) suppresses its success reply; GETQ,
 *     GETKQ, GATQ and GATKQ suppress a miss instead and answer a hit. Errors
 *     are always sent. The reply carries the request's opcode and opaque.
 *   - SET, ADD and REPLACE with a nonzero CAS are CAS stores (a missing key
 *     is "Not found", another CAS "Data exists for key."); APPEND, PREPEND,
 *     DELETE, INCREMENT and DECREMENT check a nonzero CAS too.
 *   - ADD on a present key answers 0x0002 (exists), REPLACE on a missing key
 *     0x0001 (not found), APPEND/PREPEND on a missing key 0x0005.
 *   - INCREMENT/DECREMENT: extras delta, initial, expiration; on a miss the
 *     item is created with `initial` unless expiration is 0xffffffff.
 *   - Lengths that do not add up (key + extras > body) answer 0x0081 and
 *     close; a key over 250 bytes or extras/key/body lengths wrong for the
 *     opcode answer 0x0004 and close. A header without magic 0x80 closes at
 *     once. An unknown opcode answers 0x0081 and skips its body.
 *   - A value that cannot fit in an item (header + key + value over
 *     item_size_max) answers "Too large." as soon as the key is in, and the
 *     value is skipped through s->swallow without being buffered. A SET
 *     refused that way also drops the key's old value, as memcached does (the
 *     engine does the same when it refuses a SET for size or memory).
 *   - Engine errors: -E2BIG "Too large.", -EINVAL "Invalid arguments",
 *     anything else (-ENOMEM, -EBUSY) 0x0082 "Out of memory".
 *
 * Under -S (s->sasl) the SASL opcodes run (bin_sasl, through
 * src/server/auth.h), and until one succeeds (s->authed) any other request
 * but VERSION is answered 0x0020 "Auth failure." and the connection closed,
 * as memcached does. Without -S they are unknown commands.
 *
 * Where memcached 1.6 is plainly broken we do the sane thing instead:
 * VERBOSITY (extras: the level) is answered (1.6 treats it as unknown and
 * then loses the connection), an unknown opcode skips exactly its body (1.6
 * skips extras + key too many bytes), and STAT, TOUCH and GAT* require a body
 * of exactly extras + key (1.6 reads any rest as the next request).
 *
 * A request runs only once all its bytes are in (except the too-large
 * refusal above), so the replies do not depend on how the input is split.
 * A call runs every complete request in its input, but returns early once
 * BIN_OUT_YIELD bytes of replies wait, so that the connection's
 * back-pressure applies between requests.
 *
 * Concurrency: no state of its own; the session (s->swallow, s->need, the
 * counters) belongs to one connection and its worker thread.
 */
#include "src/server/proto/proto.h"
#include "src/server/proto/proto_util.h"

#include "src/base/compiler.h"
#include "src/server/auth.h"

#include <errno.h>
#include <string.h>

#define BIN_REQ_MAGIC 0x80
#define BIN_RES_MAGIC 0x81
#define BIN_HDR_LEN 24
/* Replies pending past which a call returns before running the next
 * request (the caller calls again unless its output is backlogged). */
#define BIN_OUT_YIELD (256u * 1024)
/* INCREMENT/DECREMENT with this expiration do not create a missing item. */
#define BIN_NO_CREATE 0xffffffffu

enum bin_opcode {
    BIN_GET = 0x00,
    BIN_SET = 0x01,
    BIN_ADD = 0x02,
    BIN_REPLACE = 0x03,
    BIN_DELETE = 0x04,
    BIN_INCREMENT = 0x05,
    BIN_DECREMENT = 0x06,
    BIN_QUIT = 0x07,
    BIN_FLUSH = 0x08,
    BIN_GETQ = 0x09,
    BIN_NOOP = 0x0a,
    BIN_VERSION = 0x0b,
    BIN_GETK = 0x0c,
    BIN_GETKQ = 0x0d,
    BIN_APPEND = 0x0e,
    BIN_PREPEND = 0x0f,
    BIN_STAT = 0x10,
    BIN_SETQ = 0x11,
    BIN_ADDQ = 0x12,
    BIN_REPLACEQ = 0x13,
    BIN_DELETEQ = 0x14,
    BIN_INCREMENTQ = 0x15,
    BIN_DECREMENTQ = 0x16,
    BIN_QUITQ = 0x17,
    BIN_FLUSHQ = 0x18,
    BIN_APPENDQ = 0x19,
    BIN_PREPENDQ = 0x1a,
    BIN_VERBOSITY = 0x1b,
    BIN_TOUCH = 0x1c,
    BIN_GAT = 0x1d,
    BIN_GATQ = 0x1e,
    BIN_SASL_LIST_MECHS = 0x20, /* -S only; unknown otherwise */
    BIN_SASL_AUTH = 0x21,
    BIN_SASL_STEP = 0x22,
    BIN_GATK = 0x23,
    BIN_GATKQ = 0x24,
    BIN_UNKNOWN = 0x100, /* not a wire value: an opcode we do not serve */
};

enum bin_status {
    BIN_OK = 0x0000,
    BIN_KEY_ENOENT = 0x0001,
    BIN_KEY_EEXISTS = 0x0002,
    BIN_E2BIG = 0x0003,
    BIN_EINVAL = 0x0004,
    BIN_NOT_STORED = 0x0005,
    BIN_DELTA_BADVAL = 0x0006,
    BIN_AUTH_ERROR = 0x0020,
    BIN_AUTH_CONTINUE = 0x0021,
    BIN_UNKNOWN_COMMAND = 0x0081,
    BIN_ENOMEM = 0x0082,
};

/* One request, its fields in host order; pointers into the input. */
struct bin_req {
    uint8_t opcode; /* as sent: the reply echoes it */
    int op;         /* enum bin_opcode: the loud form of opcode */
    bool quiet;
    uint8_t extlen;
    uint16_t keylen;
    uint32_t bodylen;
    unsigned char opaque[4]; /* echoed as it came */
    uint64_t cas;
    bool no_cas; /* -C: replies carry CAS 0 */
    const unsigned char *ext;
    const char *key;
    const char *val;
    uint32_t vlen;
};

static uint32_t
get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

static uint64_t
get64(const unsigned char *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static void
put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static void
put32(unsigned char *p, uint32_t v)
{
    put16(p, (uint16_t)(v >> 16));
    put16(p + 2, (uint16_t)v);
}

static void
put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* The loud opcode a request behaves as, and whether it is quiet. */
static int
bin_loud(uint8_t opcode, bool *quiet)
{
    static const struct {
        uint8_t q, loud;
    } qmap[] = {
        {BIN_GETQ, BIN_GET},
        {BIN_GETKQ, BIN_GETK},
        {BIN_SETQ, BIN_SET},
        {BIN_ADDQ, BIN_ADD},
        {BIN_REPLACEQ, BIN_REPLACE},
        {BIN_DELETEQ, BIN_DELETE},
        {BIN_INCREMENTQ, BIN_INCREMENT},
        {BIN_DECREMENTQ, BIN_DECREMENT},
        {BIN_QUITQ, BIN_QUIT},
        {BIN_FLUSHQ, BIN_FLUSH},
        {BIN_APPENDQ, BIN_APPEND},
        {BIN_PREPENDQ, BIN_PREPEND},
        {BIN_GATQ, BIN_GAT},
        {BIN_GATKQ, BIN_GATK},
    };

    *quiet = false;
    for (size_t i = 0; i < ARRAY_SIZE(qmap); i++) {
        if (qmap[i].q == opcode) {
            *quiet = true;
            return qmap[i].loud;
        }
    }
    switch (opcode) {
    case BIN_GET:
    case BIN_SET:
    case BIN_ADD:
    case BIN_REPLACE:
    case BIN_DELETE:
    case BIN_INCREMENT:
    case BIN_DECREMENT:
    case BIN_QUIT:
    case BIN_FLUSH:
    case BIN_NOOP:
    case BIN_VERSION:
    case BIN_GETK:
    case BIN_APPEND:
    case BIN_PREPEND:
    case BIN_STAT:
    case BIN_VERBOSITY:
    case BIN_TOUCH:
    case BIN_GAT:
    case BIN_GATK:
        return opcode;
    default:
        return BIN_UNKNOWN;
    }
}

/* Whether the extras, key and body lengths suit the opcode (memcached's
 * dispatch_bin_command checks, plus exact bodies for STAT/TOUCH/GAT). The
 * caller has checked keylen + extlen <= bodylen. */
static bool
bin_lengths_ok(const struct bin_req *r)
{
    uint32_t ek = (uint32_t)r->extlen + r->keylen;

    switch (r->op) {
    case BIN_VERSION:
    case BIN_NOOP:
    case BIN_QUIT:
        return r->bodylen == 0;
    case BIN_FLUSH:
        return r->keylen == 0 && r->bodylen == r->extlen &&
               (r->extlen == 0 || r->extlen == 4);
    case BIN_SET:
    case BIN_ADD:
    case BIN_REPLACE:
        return r->extlen == 8 && r->keylen != 0;
    case BIN_GET:
    case BIN_GETK:
    case BIN_DELETE:
        return r->extlen == 0 && r->keylen != 0 && r->bodylen == r->keylen;
    case BIN_INCREMENT:
    case BIN_DECREMENT:
        return r->extlen == 20 && r->keylen != 0 && r->bodylen == ek;
    case BIN_APPEND:
    case BIN_PREPEND:
        return r->extlen == 0 && r->keylen != 0;
    case BIN_STAT:
        return r->extlen == 0 && r->bodylen == r->keylen;
    case BIN_VERBOSITY:
        return r->extlen == 4 && r->keylen == 0 && r->bodylen == 4;
    case BIN_TOUCH:
    case BIN_GAT:
    case BIN_GATK:
        return r->extlen == 4 && r->keylen != 0 && r->bodylen == ek;
    default:
        return false;
    }
}

static bool
bin_is_store(int op)
{
    return op == BIN_SET || op == BIN_ADD || op == BIN_REPLACE ||
           op == BIN_APPEND || op == BIN_PREPEND;
}

/* Append a response header and make room for its body, which the caller
 * then appends (bodylen bytes in all). 0 or -ENOMEM. */
static int
bin_head(struct obuf *out, const struct bin_req *r, uint16_t status,
         uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
    if (obuf_reserve(out, BIN_HDR_LEN + (size_t)bodylen) != 0)
        return -ENOMEM;
    unsigned char *h = (unsigned char *)obuf_tail(out);
    h[0] = BIN_RES_MAGIC;
    h[1] = r->opcode;
    put16(h + 2, keylen);
    h[4] = extlen;
    h[5] = 0; /* data type: raw bytes */
    put16(h + 6, status);
    put32(h + 8, bodylen);
    memcpy(h + 12, r->opaque, 4);
    put64(h + 16, r->no_cas ? 0 : cas);
    obuf_commit(out, BIN_HDR_LEN);
    return 0;
}

/* A success reply without extras, key or value. */
static void
bin_ok(struct obuf *out, const struct bin_req *r, uint64_t cas)
{
    (void)bin_head(out, r, BIN_OK, 0, 0, 0, cas);
}

/* memcached's error body for a status (proto_util's table). */
static const char *
bin_status_text(uint16_t status)
{
    switch (status) {
    case BIN_KEY_ENOENT:
        return proto_err_text(PERR_BIN_NOT_FOUND);
    case BIN_KEY_EEXISTS:
        return proto_err_text(PERR_BIN_EXISTS);
    case BIN_E2BIG:
        return proto_err_text(PERR_BIN_TOO_LARGE);
    case BIN_EINVAL:
        return proto_err_text(PERR_BIN_EINVAL);
    case BIN_NOT_STORED:
        return proto_err_text(PERR_BIN_NOT_STORED);
    case BIN_DELTA_BADVAL:
        return proto_err_text(PERR_BIN_NON_NUMERIC);
    case BIN_UNKNOWN_COMMAND:
        return proto_err_text(PERR_BIN_UNKNOWN_COMMAND);
    case BIN_ENOMEM:
        return proto_err_text(PERR_BIN_NOMEM);
    default:
        return proto_err_text(PERR_BIN_UNKNOWN);
    }
}

/* An error reply: the status and memcached's text as the value. */
static void
bin_error(struct obuf *out, const struct bin_req *r, uint16_t status)
{
    const char *text = bin_status_text(status);
    size_t n = strlen(text);

    if (bin_head(out, r, status, 0, 0, (uint32_t)n, 0) == 0)
        obuf_add(out, text, n);
}

/* A negative errno from the engine as a status. */
static uint16_t
bin_errno_status(int rc)
{
    switch (rc) {
    case -E2BIG:
        return BIN_E2BIG;
    case -EINVAL:
        return BIN_EINVAL;
    default: /* -ENOMEM, -EBUSY (could not get a stable item to rewrite) */
        return BIN_ENOMEM;
    }
}

/* ---- retrieval: GET, GETK, GAT, GATK, TOUCH (and quiet forms) ---------- */

struct bin_hit {
    struct obuf *out;
    const struct bin_req *r;
    bool with_key;
    bool with_value;
    int err;
};

/* The reply to a miss of GET/GETK/GAT/GATK. */
static void
bin_miss(struct obuf *out, const struct bin_req *r, bool with_key)
{
    if (!with_key) {
        bin_error(out, r, BIN_KEY_ENOENT);
    } else if (bin_head(out, r, BIN_KEY_ENOENT, 0, r->keylen, r->keylen, 0) ==
               0) {
        /* memcached answers a GETK/GATK miss with the key, no text */
        obuf_add(out, r->key, r->keylen);
    }
}

/* tc_value_fn: the reply to a hit, the value copied once from the cache into
 * the obuf. Context: inside the engine's RCU read section. */
static void
bin_hit_reply(void *arg, const struct tc_item_info *info,
              const struct iovec *iov, int niov)
{
    struct bin_hit *h = arg;
    const struct bin_req *r = h->r;
    uint16_t klen = h->with_key ? r->keylen : 0;
    size_t vlen = 0;
    unsigned char flags[4];

    uint64_t start = obuf_pos(h->out);
    bool pending = h->with_value && info->pending;

    if (pending)
        vlen = info->vlen;
    else if (h->with_value)
        for (int i = 0; i < niov; i++)
            vlen += iov[i].iov_len;
    if (bin_head(h->out, r, BIN_OK, 4, klen, (uint32_t)(4 + klen + vlen),
                 info->cas) != 0) {
        h->err = -ENOMEM;
        return;
    }
    put32(flags, info->flags);
    obuf_add(h->out, flags, 4);
    obuf_add(h->out, r->key, klen);
    if (pending) {
        /* a flash value still being read: a hole, and the miss
         * reply that replaces this one if the read fails */
        struct obuf miss;
        obuf_init(&miss);
        if (!r->quiet)
            bin_miss(&miss, r, h->with_key);
        if (obuf_hole_open(h->out, info->pending, start, info->vlen) == 0)
            obuf_hole_close(h->out, miss.buf, miss.len);
        obuf_fini(&miss);
    } else if (h->with_value) {
        for (int i = 0; i < niov; i++)
            obuf_add(h->out, iov[i].iov_base, iov[i].iov_len);
    }
}

static void
bin_get(struct proto_sess *s, const struct bin_req *r, struct obuf *out)
{
    bool touch = r->op == BIN_TOUCH || r->op == BIN_GAT || r->op == BIN_GATK;
    struct bin_hit h = {
        .out = out,
        .r = r,
        .with_key = r->op == BIN_GETK || r->op == BIN_GATK,
        .with_value = r->op != BIN_TOUCH,
    };
    int rc;

    /* a flash value comes without blocking (a hole); TOUCH wants none */
    struct tc_get_opts o = {
        .touch = touch,
        .exptime = touch ? (int64_t)get32(r->ext) : 0,
        .async = h.with_value,
        .head_only = !h.with_value,
        .no_win = true,
    };
    rc = tc_get_ex(s->cache, r->key, r->keylen, &o, bin_hit_reply, &h);

    if (rc == TC_OK) {
        if (h.err)
            bin_error(out, r, BIN_ENOMEM);
    } else if (rc == TC_NOT_FOUND) {
        if (!r->quiet)
            bin_miss(out, r, h.with_key);
    } else {
        bin_error(out, r, bin_errno_status(rc));
    }
}

/* ---- storage: SET, ADD, REPLACE, APPEND, PREPEND (and quiet forms) ----- */

/* Refuse a value that cannot fit before reading it. As memcached does when
 * it cannot allocate the item, a SET also drops the key's old value so that
 * readers do not go on seeing data the client meant to replace (the engine
 * does the same when it refuses a SET itself). */
static void
bin_refuse_large(struct proto_sess *s, const struct bin_req *r,
                 struct obuf *out)
{
    tc_store_refused(s->cache, r->key, r->keylen, r->op == BIN_SET);
    bin_error(out, r, BIN_E2BIG);
}

static void
bin_store(struct proto_sess *s, const struct bin_req *r, struct obuf *out)
{
    struct tc_store_opts o = {.cas_in = r->cas};
    enum tc_store_mode mode;
    uint32_t flags = 0;
    int64_t exptime = 0;
    uint64_t cas = 0;
    bool concat = r->op == BIN_APPEND || r->op == BIN_PREPEND;

    switch (r->op) {
    case BIN_ADD:
        mode = TC_ADD;
        break;
    case BIN_REPLACE:
        mode = TC_REPLACE;
        break;
    case BIN_APPEND:
        mode = TC_APPEND;
        break;
    case BIN_PREPEND:
        mode = TC_PREPEND;
        break;
    default:
        mode = TC_SET;
        break;
    }
    if (!concat) {
        flags = get32(r->ext);
        exptime = (int64_t)get32(r->ext + 4);
        /* memcached: any of set/add/replace with a CAS is a CAS store */
        if (r->cas != 0)
            mode = TC_CAS;
    } else {
        o.cas_check = r->cas != 0;
    }

    int rc = tc_store_ex(s->cache, mode, r->key, r->keylen, r->val, r->vlen,
                         flags, exptime, &o, &cas);
    switch (rc) {
    case TC_OK:
        if (!r->quiet)
            bin_ok(out, r, cas);
        break;
    case TC_NOT_FOUND: /* CAS on a missing key */
        bin_error(out, r, BIN_KEY_ENOENT);
        break;
    case TC_EXISTS:
        bin_error(out, r, BIN_KEY_EEXISTS);
        break;
    case TC_NOT_STORED:
        bin_error(out, r,
                  mode == TC_ADD       ? BIN_KEY_EEXISTS
                  : mode == TC_REPLACE ? BIN_KEY_ENOENT
                                       : BIN_NOT_STORED);
        break;
    case -E2BIG:
        /* memcached: an append whose result would be too large is "Not
         * stored." (only the new piece alone being too large is E2BIG) */
        bin_error(out, r, concat ? BIN_NOT_STORED : BIN_E2BIG);
        break;
    default:
        bin_error(out, r, bin_errno_status(rc));
        break;
    }
}

/* ---- the rest ---------------------------------------------------------- */

static void
bin_delete(struct proto_sess *s, const struct bin_req *r, struct obuf *out)
{
    int rc = tc_delete(s->cache, r->key, r->keylen, r->cas);

    if (rc == TC_OK) {
        if (!r->quiet)
            bin_ok(out, r, 0);
    } else if (rc == TC_NOT_FOUND) {
        bin_error(out, r, BIN_KEY_ENOENT);
    } else if (rc == TC_EXISTS) {
        bin_error(out, r, BIN_KEY_EEXISTS);
    } else {
        bin_error(out, r, bin_errno_status(rc));
    }
}

static void
bin_arith(struct proto_sess *s, const struct bin_req *r, struct obuf *out)
{
    uint64_t delta = get64(r->ext);
    uint32_t exp = get32(r->ext + 16);
    struct tc_arith_opts o = {
        .vivify = exp != BIN_NO_CREATE,
        .initial = get64(r->ext + 8),
        .vivify_exptime = (int64_t)exp,
        .cas_in = r->cas,
    };
    struct tc_item_info info;
    uint64_t value = 0;
    unsigned char body[8];

    int rc = tc_arith_ex(s->cache, r->key, r->keylen, r->op == BIN_INCREMENT,
                         delta, &o, &value, &info);
    switch (rc) {
    case TC_OK:
        if (r->quiet)
            break;
        if (bin_head(out, r, BIN_OK, 0, 0, 8, info.cas) == 0) {
            put64(body, value);
            obuf_add(out, body, 8);
        }
        break;
    case TC_NOT_FOUND:
        bin_error(out, r, BIN_KEY_ENOENT);
        break;
    case TC_EXISTS:
        bin_error(out, r, BIN_KEY_EEXISTS);
        break;
    case TC_NON_NUMERIC:
        bin_error(out, r, BIN_DELTA_BADVAL);
        break;
    case TC_NOT_STORED:
        bin_error(out, r, BIN_NOT_STORED);
        break;
    default:
        bin_error(out, r, bin_errno_status(rc));
        break;
    }
}

static void
bin_flush(struct proto_sess *s, const struct bin_req *r, struct obuf *out)
{
    /* the delay follows the exptime rules (the engine applies them) */
    int64_t delay = r->extlen == 4 ? (int64_t)get32(r->ext) : 0;
    if (s->no_flush) { /* -F: memcached's status, quiet form too */
        bin_error(out, r, BIN_AUTH_ERROR);
        return;
    }
    int rc = tc_flush_all(s->cache, delay);

    if (rc != TC_OK)
        bin_error(out, r, bin_errno_status(rc));
    else if (!r->quiet)
        bin_ok(out, r, 0);
}

static void
bin_version(const struct bin_req *r, struct obuf *out)
{
    size_t n = strlen(TC_VERSION);

    if (bin_head(out, r, BIN_OK, 0, 0, (uint32_t)n, 0) == 0)
        obuf_add(out, TC_VERSION, n);
}

static void
bin_verbosity(struct proto_sess *s, const struct bin_req *r, struct obuf *out)
{
    uint32_t level = get32(r->ext);

    if (s->ops && s->ops->verbosity)
        s->ops->verbosity(s->srv, level > 255 ? 255 : (int)level);
    bin_ok(out, r, 0);
}

/* One stat packet: the name as key, the value as value. */
static void
bin_stat_packet(struct obuf *out, const struct bin_req *r, const char *name,
                size_t nlen, const char *val, size_t vlen)
{
    if (bin_head(out, r, BIN_OK, 0, (uint16_t)nlen, (uint32_t)(nlen + vlen),
                 0) != 0)
        return;
    obuf_add(out, name, nlen);
    obuf_add(out, val, vlen);
}

/* The "STAT name value\r\n" lines the server wrote, as stat packets. Lines
 * of another shape are skipped. */
static void
bin_stat_lines(struct obuf *out, const struct bin_req *r, const char *p,
               size_t len)
{
    while (len > 0) {
        const char *nl = memchr(p, '\n', len);
        size_t line = nl ? (size_t)(nl - p) : len;
        size_t used = nl ? line + 1 : len;
        if (line > 0 && p[line - 1] == '\r')
            line--;
        if (line > 5 && memcmp(p, "STAT ", 5) == 0) {
            const char *name = p + 5;
            size_t rest = line - 5;
            const char *sp = memchr(name, ' ', rest);
            size_t nlen = sp ? (size_t)(sp - name) : rest;
            const char *val = sp ? sp + 1 : name + rest;
            size_t vlen = sp ? rest - nlen - 1 : 0;
            if (nlen > 0 && nlen <= UINT16_MAX)
                bin_stat_packet(out, r, name, nlen, val, vlen);
        }
        p += used;
        len -= used;
    }
}

static void
bin_stat(struct proto_sess *s, const struct bin_req *r, struct obuf *out)
{
    char group[TC_KEY_MAX + 1];
    struct obuf tmp;
    int rc = 0;

    memcpy(group, r->key, r->keylen);
    group[r->keylen] = '\0';
    if (strlen(group) != r->keylen) { /* a NUL inside names no group */
        bin_error(out, r, BIN_KEY_ENOENT);
        return;
    }
    if (strcmp(group, "reset") == 0) {
        if (s->ops && s->ops->stats_reset)
            s->ops->stats_reset(s->srv);
        else
            tc_stats_reset(s->cache);
        bin_ok(out, r, 0);
        return;
    }

    obuf_init(&tmp);
    if (s->ops && s->ops->stats)
        rc = s->ops->stats(s->srv, s, group, &tmp);
    if (rc == -ENOENT) {
        bin_error(out, r, BIN_KEY_ENOENT);
    } else if (rc < 0 || tmp.err) {
        bin_error(out, r, BIN_ENOMEM);
    } else {
        bin_stat_lines(out, r, tmp.buf + tmp.head, obuf_pending(&tmp));
        bin_ok(out, r, 0); /* the empty packet that ends the list */
    }
    obuf_fini(&tmp);
}

/* Run a complete, validated request. 0, or PROTO_CLOSE after QUIT. */
static ssize_t
bin_exec(struct proto_sess *s, const struct bin_req *r, struct obuf *out)
{
    switch (r->op) {
    case BIN_GET:
    case BIN_GETK:
    case BIN_TOUCH:
    case BIN_GAT:
    case BIN_GATK:
        bin_get(s, r, out);
        break;
    case BIN_SET:
    case BIN_ADD:
    case BIN_REPLACE:
    case BIN_APPEND:
    case BIN_PREPEND:
        bin_store(s, r, out);
        break;
    case BIN_DELETE:
        bin_delete(s, r, out);
        break;
    case BIN_INCREMENT:
    case BIN_DECREMENT:
        bin_arith(s, r, out);
        break;
    case BIN_FLUSH:
        bin_flush(s, r, out);
        break;
    case BIN_NOOP:
        bin_ok(out, r, 0);
        break;
    case BIN_VERSION:
        bin_version(r, out);
        break;
    case BIN_STAT:
        bin_stat(s, r, out);
        break;
    case BIN_VERBOSITY:
        bin_verbosity(s, r, out);
        break;
    case BIN_QUIT:
        if (!r->quiet)
            bin_ok(out, r, 0);
        return PROTO_CLOSE;
    }
    return 0;
}

static void
bin_count(struct proto_sess *s, bool protocol_error)
{
    s->ctr.cmd_total++;
    s->ctr.bin_cmds++;
    if (protocol_error)
        s->ctr.protocol_errors++;
}

/* ---- SASL (-S) ----------------------------------------------------------- */

/* A reply whose status and body are given (SASL's). */
static void
bin_reply(struct obuf *out, const struct bin_req *r, uint16_t status,
          const char *body, size_t n)
{
    if (bin_head(out, r, status, 0, 0, (uint32_t)n, 0) == 0 && n)
        obuf_add(out, body, n);
}

static void
bin_auth_failure(struct obuf *out, const struct bin_req *r)
{
    const char *t = proto_err_text(PERR_BIN_AUTH_FAILURE);
    bin_reply(out, r, BIN_AUTH_ERROR, t, strlen(t));
}

/* Before SASL succeeds only VERSION and the SASL opcodes run (memcached's
 * rule); anything else is refused and the connection closed. */
static bool
bin_open_before_auth(uint8_t opcode)
{
    return opcode == BIN_VERSION || opcode == BIN_SASL_LIST_MECHS ||
           opcode == BIN_SASL_AUTH || opcode == BIN_SASL_STEP;
}

static bool
bin_is_sasl(uint8_t opcode)
{
    return opcode >= BIN_SASL_LIST_MECHS && opcode <= BIN_SASL_STEP;
}

/* SASL_LIST_MECHS (no extras, key or body): the mechanisms, space-separated.
 * SASL_AUTH (key: the mechanism, value: the client's first data) and
 * SASL_STEP (value: the next data): status 0 "Authenticated", 0x21 with
 * the challenge, or 0x20 "Auth failure.". A new SASL_AUTH logs the
 * connection out until it succeeds. Same return as bin_one. */
static ssize_t
bin_sasl(struct proto_sess *s, struct bin_req *r, const char *in, size_t len,
         struct obuf *out)
{
    bool list = r->opcode == BIN_SASL_LIST_MECHS;
    bool ok =
        r->extlen == 0 &&
        (list ? r->bodylen == 0 : r->keylen != 0 && r->keylen <= AUTH_MECH_MAX);
    if (!ok) {
        bin_count(s, true);
        bin_error(out, r, BIN_EINVAL);
        return PROTO_CLOSE;
    }
    size_t total = BIN_HDR_LEN + (size_t)r->bodylen;
    if (len < total) {
        s->need = total;
        return 0;
    }
    bin_count(s, false);
    const char *key = in + BIN_HDR_LEN;
    const char *val = key + r->keylen;
    size_t vlen = r->bodylen - r->keylen;
    const char *reply = NULL;
    size_t n = 0;
    if (list) {
        if (auth_sasl_mechs(s->auth, &s->sasl_x, &reply, &n) == 0)
            bin_reply(out, r, BIN_OK, reply, n);
        else
            bin_auth_failure(out, r);
        return (ssize_t)total;
    }
    enum auth_result res;
    s->ctr.auth_cmds++;
    if (r->opcode == BIN_SASL_AUTH) {
        s->authed = false;
        res = auth_sasl_start(s->auth, &s->sasl_x, key, r->keylen, val, vlen,
                              &reply, &n);
    } else {
        res = auth_sasl_step(s->auth, &s->sasl_x, val, vlen, &reply, &n);
    }
    switch (res) {
    case AUTH_OK:
        s->authed = true;
        bin_reply(out, r, BIN_OK, "Authenticated", 13);
        break;
    case AUTH_CONTINUE:
        bin_reply(out, r, BIN_AUTH_CONTINUE, reply, n);
        break;
    case AUTH_FAIL:
        s->ctr.auth_errors++;
        bin_auth_failure(out, r);
        break;
    }
    return (ssize_t)total;
}

/* Handle the request at the front of in: bytes consumed (the request, or
 * its header, extras and key when the rest is to be swallowed), 0 when more
 * bytes are needed (s->need set), or PROTO_CLOSE. */
static ssize_t
bin_one(struct proto_sess *s, const char *in, size_t len, struct obuf *out)
{
    const unsigned char *h = (const unsigned char *)in;
    struct bin_req r;

    if (len < BIN_HDR_LEN) {
        s->need = BIN_HDR_LEN;
        return 0;
    }
    if (h[0] != BIN_REQ_MAGIC)
        return PROTO_CLOSE; /* as memcached: no reply, the stream is lost */

    memset(&r, 0, sizeof(r));
    r.opcode = h[1];
    r.keylen = (uint16_t)(h[2] << 8 | h[3]);
    r.extlen = h[4];
    r.bodylen = get32(h + 8);
    memcpy(r.opaque, h + 12, 4);
    r.cas = get64(h + 16);
    r.no_cas = s->no_cas;
    if (r.no_cas && r.cas)
        r.cas = PROTO_CAS_NEVER;
    r.op = bin_loud(r.opcode, &r.quiet);

    if ((uint32_t)r.keylen + r.extlen > r.bodylen) {
        bin_count(s, true);
        bin_error(out, &r, BIN_UNKNOWN_COMMAND);
        return PROTO_CLOSE;
    }
    if (r.keylen > TC_KEY_MAX) {
        bin_count(s, true);
        bin_error(out, &r, BIN_EINVAL);
        return PROTO_CLOSE;
    }
    if (unlikely(!s->authed) && !bin_open_before_auth(r.opcode)) {
        bin_count(s, true);
        bin_auth_failure(out, &r);
        return PROTO_CLOSE;
    }
    if (r.op == BIN_UNKNOWN) {
        if (s->sasl && bin_is_sasl(r.opcode))
            return bin_sasl(s, &r, in, len, out);
        bin_count(s, true);
        bin_error(out, &r, BIN_UNKNOWN_COMMAND);
        s->swallow = r.bodylen;
        return BIN_HDR_LEN;
    }
    if (!bin_lengths_ok(&r)) {
        bin_count(s, true);
        bin_error(out, &r, BIN_EINVAL);
        return PROTO_CLOSE;
    }

    size_t head = BIN_HDR_LEN + (size_t)r.extlen + r.keylen;
    r.vlen = r.bodylen - r.extlen - r.keylen;
    if (bin_is_store(r.op)) {
        if (proto_too_large(s, r.keylen, r.vlen)) {
            if (len < head) {
                s->need = head;
                return 0;
            }
            r.key = in + BIN_HDR_LEN + r.extlen;
            bin_count(s, false);
            bin_refuse_large(s, &r, out);
            s->swallow = r.vlen;
            return (ssize_t)head;
        }
    }

    size_t total = BIN_HDR_LEN + (size_t)r.bodylen;
    if (len < total) {
        s->need = total;
        return 0;
    }
    r.ext = h + BIN_HDR_LEN;
    r.key = in + BIN_HDR_LEN + r.extlen;
    r.val = r.key + r.keylen;
    bin_count(s, false);
    if (bin_exec(s, &r, out) == PROTO_CLOSE)
        return PROTO_CLOSE;
    return (ssize_t)total;
}

/* Keys of a run of pipelined gets hinted to the engine at once. */
#define BIN_PREFETCH_MAX 16

static bool
bin_is_read(uint8_t opcode)
{
    switch (opcode) {
    case BIN_GET:
    case BIN_GETQ:
    case BIN_GETK:
    case BIN_GETKQ:
    case BIN_GAT:
    case BIN_GATQ:
    case BIN_GATK:
    case BIN_GATKQ:
        return true;
    default:
        return false;
    }
}

/* Pipelined reads: when the buffer holds two or more complete GET, GETQ,
 * GETK, GETKQ or GAT (GATQ, GATK, GATKQ) requests in a row, hand their keys to
 * tc_prefetch before running them, so their index and item misses overlap (as
 * the text parser does for its get lines). A hint only: each request still runs
 * on its own, checked as ever. Returns how far the run reaches. */
static size_t
bin_prefetch_reads(struct proto_sess *s, const char *in, size_t len)
{
    struct tc_key keys[BIN_PREFETCH_MAX];
    size_t n = 0, pos = 0;
    while (n < BIN_PREFETCH_MAX && len - pos >= BIN_HDR_LEN) {
        const unsigned char *h = (const unsigned char *)in + pos;
        uint16_t klen = (uint16_t)(h[2] << 8 | h[3]);
        uint8_t extlen = h[4];
        uint32_t body = get32(h + 8);
        if (h[0] != BIN_REQ_MAGIC || !bin_is_read(h[1]) || klen == 0 ||
            klen > TC_KEY_MAX || (uint32_t)klen + extlen > body ||
            body > len - pos - BIN_HDR_LEN)
            break;
        keys[n++] = (struct tc_key){in + pos + BIN_HDR_LEN + extlen, klen};
        pos += BIN_HDR_LEN + body;
    }
    if (n >= 2 && s->cache)
        tc_prefetch(s->cache, keys, n);
    return pos;
}

ssize_t
proto_bin_process(struct proto_sess *s, const char *in, size_t len,
                  struct obuf *out)
{
    size_t done = 0, hinted = 0;

    s->need = 0;
    while (done < len) {
        if (s->swallow > 0) {
            size_t n = len - done;
            if (s->swallow < n)
                n = (size_t)s->swallow;
            s->swallow -= n;
            done += n;
            continue;
        }
        if (s->budget == 0)
            break; /* -R: the connection yields to the others */
        if (done >= hinted && s->authed)
            hinted = done + bin_prefetch_reads(s, in + done, len - done);
        ssize_t n = bin_one(s, in + done, len - done, out);
        if (n == PROTO_CLOSE)
            return PROTO_CLOSE;
        if (n == 0)
            break;
        done += (size_t)n;
        if (s->budget != UINT32_MAX)
            s->budget--;
        /* let the connection apply its back-pressure: a buffer full of
         * small GETs of large values would otherwise turn into replies
         * thousands of times its size in one call */
        if (obuf_pending(out) >= BIN_OUT_YIELD)
            break;
    }
    return (ssize_t)done;
}

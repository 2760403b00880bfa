/*
 * Meta commands: mg, ms, md, ma, mn, me (memcached 1.6's "Meta Commands",
 * doc/protocol.txt). The text parser hands us one request whose line starts
 * with a meta command; we execute it against the engine's meta extensions
 * (tc_get_ex, tc_store_ex, tc_invalidate, tc_arith_ex) and append the reply.
 *
 * What memcached does is the reference, down to the error strings and the
 * order of the returned flags:
 *
 *   - Flags are single letters, some carrying a token ("T30", "Oab").
 *     Return flags come back in the order of the request, then Z, X, W.
 *     k returns the key ("k<key>"; a base64 key as "k<base64> b").
 *     O returns its whole token ("Oab"), at most 32 bytes.
 *   - Every command accepts every flag memcached knows (an ms ignores v, an
 *     mg ignores F); a letter it does not know is "CLIENT_ERROR invalid
 *     flag", the same letter twice "CLIENT_ERROR duplicate flag", more than
 *     20 tokens "CLIENT_ERROR options flags are too long", a key over 250
 *     bytes "CLIENT_ERROR bad command line format", a bad number "CLIENT_ERROR
 *     bad token in command line format" (N T R C E), "... invalid numeric
 *     initial value" (J), "... invalid numeric delta value" (D). ma and md
 *     report any of these as "CLIENT_ERROR invalid or duplicate flag", and
 *     ms, md and ma too many tokens as "options flags too long" (mg: "are
 *     too long"), as memcached does. Numbers take an optional sign (+ only
 *     for unsigned ones) and must be whole tokens; an empty token ("T") is
 *     an error.
 *   - T, N and R act where they stand in the request, as memcached applies
 *     them while it writes the return flags: a t ahead of T reports the
 *     old TTL, one ahead of N on a new item "-1"; a new item's TTL is the
 *     later of T and N; R looks at the TTL as T left it, or not yet.
 *   - q hides the nominal reply only: EN of mg, HD of ms and md, the whole
 *     success reply (HD or VA) of ma, except when ma's N created the item
 *     (memcached sends that one). NS, EX, NF and every error are always
 *     sent. mn answers "MN" and is how a pipeline of quiet requests ends.
 *   - An ms whose line is refused after its length was read has its data
 *     block discarded (swallowed), so the stream stays in step; a length
 *     that does not parse is refused with the line alone, as memcached does.
 *   - mg C<cas> (memcached 1.6.4x): when the item's CAS equals it the client
 *     has this version, and the reply is HD without the value.
 *   - Keys are checked for length only (memcached does no more for meta);
 *     b keys are strict RFC 4648 base64 with padding.
 *
 * Decisions where tiercache cannot be memcached:
 *
 *   - l (seconds since last access) and me's la=: the time before this
 *     access, kept in DRAM (13 bits of the chunk's 2-byte word,
 *     alloc/slab.h), set by every store and read hit (not by mg u or me),
 *     exact to the second up to 2 hours; an older access reads as 7200
 *     (TC_LAST_ACCESS_CAP).
 *     memcached's own is coarser: with its segmented LRU a read moves the
 *     time only on the item's second fetch and while it is not active, so
 *     after "set; mg; mg" both agree, but a first mg after a set moves
 *     tiercache's time and not memcached's.
 *   - E (the new CAS, memcached 1.6.2x): ms's new item, mg N's placeholder,
 *     md I's stale item and ma's result (or the item its N created).
 *   - mg N on a miss: memcached answers as for a hit on the new empty item
 *     ("HD W", "VA 0 ... W"), not EN. The engine returns TC_NOT_FOUND with
 *     *vivified set and does not call back, so the reply is built from one
 *     more lookup of the placeholder (for its CAS and TTL), with W forced.
 *   - ms s after an append or prepend needs the new length, which
 *     tc_store_ex does not return: it is read back with one more lookup.
 *   - md x (drop the value, keep the item) is an empty CAS-checked replace
 *     that keeps the old CAS, retried while other writers race it.
 *   - md I with a negative T (stale and already expired) deletes the item:
 *     tc_invalidate cannot set an expiry in the past.
 *   - R above 30 days is an absolute time, as in memcached: converted to
 *     seconds from now for the engine.
 *
 * Concurrency: no state of its own. A call works on one session, owned by
 * one connection and used by its worker thread only; the engine calls are
 * thread-safe. The value callback runs inside the engine's RCU read
 * section and only appends to the session's obuf.
 */

#include "src/server/proto/proto.h"

#include "src/base/clock.h"
#include "src/base/num.h"
#include "src/server/proto/proto_meta_int.h"
#include "src/server/proto/proto_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#define META_LINE_MAX 1024 /* longest reply line: < 520 bytes */
#define META_RETRIES 16    /* md x against concurrent writers */

/* ---- reply lines -----------------------------------------------------------
 */

struct rline {
    char b[META_LINE_MAX];
    size_t n;
};

static void
rl_add(struct rline *l, const void *p, size_t n)
{
    if (n > sizeof(l->b) - l->n) /* cannot happen: lines are bounded */
        n = sizeof(l->b) - l->n;
    memcpy(l->b + l->n, p, n);
    l->n += n;
}

static void
rl_str(struct rline *l, const char *s)
{
    rl_add(l, s, strlen(s));
}

/* " <f><v>", formatted in place (snprintf was a third of an mg's
 * instructions: perf/RESULTS.md) */
static void
rl_flag_u64(struct rline *l, char f, uint64_t v)
{
    char num[3 + PROTO_U64_DIGITS];
    num[0] = ' ';
    num[1] = f;
    rl_add(l, num, 2 + proto_fmt_u64(num + 2, v));
}

static void
rl_flag_i64(struct rline *l, char f, int64_t v)
{
    char num[3 + PROTO_U64_DIGITS];
    size_t n = 0;
    num[n++] = ' ';
    num[n++] = f;
    if (v < 0)
        num[n++] = '-';
    /* the magnitude as unsigned: INT64_MIN has no positive int64_t */
    uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    rl_add(l, num, n + proto_fmt_u64(num + n, m));
}

/* " k<key>", or " k<base64> b" for a binary key. */
static void
rl_key(struct rline *l, const struct meta_req *r)
{
    rl_add(l, " k", 2);
    if (r->binary) {
        char b64[META_B64_MAX];
        rl_add(
            l, b64,
            proto_meta_b64_encode((const unsigned char *)r->key, r->klen, b64));
        rl_add(l, " b", 2);
    } else {
        rl_add(l, r->key, r->klen);
    }
}

/* The O and k return flags, in request order (every reply but mg's hit). */
static void
rl_opaque_key(struct rline *l, const struct meta_req *r)
{
    for (int i = r->first_flag; i < r->ntok; i++) {
        if (r->tok[i].p[0] == 'O') {
            rl_add(l, " ", 1);
            rl_add(l, r->tok[i].p, r->tok[i].n);
        } else if (r->tok[i].p[0] == 'k') {
            rl_key(l, r);
        }
    }
}

static void
rl_flush(struct rline *l, struct obuf *out)
{
    rl_add(l, "\r\n", 2);
    obuf_add(out, l->b, l->n);
}

/* A status line with the O and k flags: "NF Oxx kfoo\r\n". */
static void
reply_status(struct obuf *out, const struct meta_req *r, const char *code)
{
    struct rline l;
    l.n = 0;
    rl_str(&l, code);
    rl_opaque_key(&l, r);
    rl_flush(&l, out);
}

/* How a command words the engine's memory errors and any other: ms as
 * memcached's storage path, md and ma as its delete and delta paths. */
struct meta_errs {
    enum proto_err nomem, too_large, other;
};

static const struct meta_errs ms_errs = {PERR_OUT_OF_MEMORY, PERR_TOO_LARGE,
                                         PERR_UNHANDLED};
static const struct meta_errs md_ma_errs = {PERR_NOMEM, PERR_NOMEM, PERR_BUSY};

/* The status code of an engine result (HD NS EX NF), or NULL once the error
 * line for it is written: a non-number (ma), a bad key, the engine busy, or
 * what e says. */
static const char *
meta_status(struct proto_sess *s, struct obuf *out, int rc,
            const struct meta_errs *e)
{
    enum proto_err err;
    switch (rc) {
    case TC_OK:
        return "HD";
    case TC_NOT_STORED:
        return "NS";
    case TC_EXISTS:
        return "EX";
    case TC_NOT_FOUND:
        return "NF";
    case TC_NON_NUMERIC:
        err = PERR_NON_NUMERIC;
        break;
    case -ENOMEM:
        err = e->nomem;
        break;
    case -E2BIG:
        err = e->too_large;
        break;
    case -EINVAL:
        err = PERR_BAD_FORMAT;
        break;
    case -EBUSY:
        err = PERR_BUSY;
        break;
    default:
        err = e->other;
    }
    proto_reply_err(s, out, err);
    return NULL;
}

/* Seconds left before an absolute expiry, -1 for none (memcached's t). */
static int64_t
ttl_left(uint32_t exptime, uint32_t now)
{
    return exptime == 0 ? -1 : (int64_t)exptime - (int64_t)now;
}

/* An exptime as the engine reads it, made absolute (for a synthesized
 * reply when a vivified placeholder is gone already). */
static uint32_t
abs_exptime(int64_t e, uint32_t now)
{
    if (e == 0)
        return 0;
    if (e < 0)
        return 1;
    return e <= TC_EXPTIME_RELATIVE_MAX ? now + (uint32_t)e : (uint32_t)e;
}

/* Index of the first token of flag f, or r->ntok when there is none. */
static int
flag_pos(const struct meta_req *r, char f)
{
    for (int i = r->first_flag; i < r->ntok; i++)
        if (r->tok[i].p[0] == f)
            return i;
    return r->ntok;
}

/*
 * memcached applies T and N while it writes the return flags, in request
 * order, so a t ahead of them reports the expiry as it was: the old one
 * of an existing item (exptime_before), 0 ("-1") for one this request
 * created, whose expiry is then the last of T and N.
 */
static int32_t
created_ttl(const struct meta_req *r)
{
    return r->has_ttl && flag_pos(r, 'T') > flag_pos(r, 'N') ? r->ttl
                                                             : r->viv_ttl;
}

static int64_t
ttl_at(const struct meta_req *r, int pos, const struct tc_item_info *info,
       bool created, uint32_t now)
{
    if (!created)
        return ttl_left(r->has_ttl && flag_pos(r, 'T') > pos
                            ? info->exptime_before
                            : info->exptime,
                        now);
    int tp = r->has_ttl ? flag_pos(r, 'T') : r->ntok;
    int np = r->vivify ? flag_pos(r, 'N') : r->ntok;
    int32_t e;
    if (tp < pos && (np > pos || tp > np))
        e = r->ttl;
    else if (np < pos)
        e = r->viv_ttl;
    else
        return -1;
    return ttl_left(abs_exptime(e, now), now);
}

/* ---- mg ------------------------------------------------------------------ */

struct mg_ctx {
    const struct meta_req *r;
    struct obuf *out;
    bool vivified; /* reply for our own placeholder: W, never Z */
    bool served;
};

/* Build the hit reply: header line, then the value when asked. Runs inside
 * the engine's read section (or after it, for a synthesized placeholder). */
static void
mg_reply(void *arg, const struct tc_item_info *info, const struct iovec *iov,
         int niov)
{
    struct mg_ctx *x = arg;
    const struct meta_req *r = x->r;
    uint32_t now = clock_now();
    bool value = r->value && !(r->has_cas && info->cas == r->cas);
    struct rline l;
    uint64_t start = obuf_pos(x->out);

    l.n = 0;
    if (value) {
        char head[3 + PROTO_U64_DIGITS] = "VA ";
        rl_add(&l, head, 3 + proto_fmt_u64(head + 3, info->vlen));
    } else {
        rl_str(&l, "HD");
    }
    for (int i = r->first_flag; i < r->ntok; i++) {
        switch (r->tok[i].p[0]) {
        case 's':
            rl_flag_u64(&l, 's', info->vlen);
            break;
        case 't':
            rl_flag_i64(&l, 't', ttl_at(r, i, info, x->vivified, now));
            break;
        case 'c':
            rl_flag_u64(&l, 'c', r->no_cas ? 0 : info->cas);
            break;
        case 'f':
            rl_flag_u64(&l, 'f', info->flags);
            break;
        case 'h':
            rl_flag_u64(&l, 'h', info->fetched ? 1 : 0);
            break;
        case 'l':
            rl_flag_u64(&l, 'l', info->last_access);
            break;
        case 'O':
            rl_add(&l, " ", 1);
            rl_add(&l, r->tok[i].p, r->tok[i].n);
            break;
        case 'k':
            rl_key(&l, r);
            break;
        }
    }
    uint8_t win = x->vivified ? TC_WIN_YOU : info->win;
    if (win == TC_WIN_TAKEN)
        rl_add(&l, " Z", 2);
    if (info->stale && !x->vivified)
        rl_add(&l, " X", 2);
    if (win == TC_WIN_YOU)
        rl_add(&l, " W", 2);
    rl_flush(&l, x->out);
    if (value && info->pending) {
        /* a flash value still being read: a hole, and the miss
         * line that replaces this reply if the read fails */
        struct rline miss;
        miss.n = 0;
        if (!r->quiet) {
            rl_str(&miss, "EN");
            rl_opaque_key(&miss, r);
            rl_add(&miss, "\r\n", 2);
        }
        if (obuf_hole_open(x->out, info->pending, start, info->vlen) == 0) {
            obuf_add(x->out, "\r\n", 2);
            obuf_hole_close(x->out, miss.b, miss.n);
        }
    } else if (value) {
        for (int i = 0; i < niov; i++)
            obuf_add(x->out, iov[i].iov_base, iov[i].iov_len);
        obuf_add(x->out, "\r\n", 2);
    }
    x->served = true;
}

static void
meta_get(struct proto_sess *s, struct meta_req *r, struct obuf *out)
{
    bool vivified = false;
    uint64_t viv_cas = 0;
    struct tc_get_opts o = {
        .touch = r->has_ttl,
        .exptime = r->ttl,
        .vivify = r->vivify,
        .vivify_exptime = created_ttl(r),
        .no_bump = r->no_bump,
        .vivified = &vivified,
        .vivified_cas = &viv_cas,
        .vivify_cas = r->has_cas_new ? r->cas_new : 0,
        .recache_before_touch = flag_pos(r, 'R') < flag_pos(r, 'T'),
        .async = r->value,      /* a flash value comes without blocking */
        .head_only = !r->value, /* no value wanted: no flash read */
    };
    struct mg_ctx x = {.r = r, .out = out};

    if (r->recache > TC_EXPTIME_RELATIVE_MAX) {
        uint32_t now = clock_now();
        o.recache_below =
            (uint32_t)r->recache > now ? (uint32_t)r->recache - now : 0;
    } else if (r->recache > 0) {
        o.recache_below = (uint32_t)r->recache;
    }

    int rc = tc_get_ex(s->cache, r->key, r->klen, &o, mg_reply, &x);
    if (rc == TC_NOT_FOUND && vivified) {
        /* our placeholder: read it back for its CAS and TTL */
        struct tc_get_opts again = {.no_bump = r->no_bump, .no_win = true};
        x.vivified = true;
        rc = tc_get_ex(s->cache, r->key, r->klen, &again, mg_reply, &x);
        if (rc == TC_NOT_FOUND) { /* already gone (born expired) */
            struct tc_item_info info = {
                .exptime = abs_exptime(created_ttl(r), clock_now()),
                .cas = viv_cas,
            };
            mg_reply(&x, &info, NULL, 0);
            rc = TC_OK;
        }
    }
    if (rc == TC_OK)
        return;
    if (rc == TC_NOT_FOUND || rc == -ENOMEM || rc == -E2BIG) {
        /* a failed vivify is a miss, as in memcached */
        if (!r->quiet)
            reply_status(out, r, "EN");
        return;
    }
    proto_reply_err(s, out, rc == -EINVAL ? PERR_BAD_FORMAT : PERR_BUSY);
}

/* ---- ms ------------------------------------------------------------------ */

/* Bytes of an ms request to consume when refusing it: the line and its data
 * block, or what has arrived of it with the rest left to swallow. */
static size_t
ms_discard(struct proto_sess *s, size_t linelen, size_t len, uint64_t block)
{
    uint64_t avail = len - linelen;
    if (avail >= block)
        return linelen + (size_t)block;
    s->swallow = block - avail;
    return len;
}

/* The value length after a successful append/prepend (see the top). */
static void
note_vlen(void *arg, const struct tc_item_info *info, const struct iovec *iov,
          int niov)
{
    (void)iov;
    (void)niov;
    *(uint32_t *)arg = info->vlen;
}

static ssize_t
meta_set(struct proto_sess *s, struct meta_req *r, const char *in, size_t len,
         size_t linelen, struct obuf *out)
{
    const char *line = in;
    size_t llen = linelen - 1;
    uint64_t vlen;

    if (llen && line[llen - 1] == '\r')
        llen--;
    int n = proto_tokenize(line, llen, r->tok, PROTO_MAX_TOKENS);
    if (n < 3 ||
        !num_parse_u64(r->tok[2].p, r->tok[2].n, INT32_MAX - 2, &vlen)) {
        proto_reply_err(s, out, PERR_BAD_FORMAT);
        return (ssize_t)linelen;
    }
    uint64_t block = vlen + 2;

    /* the tokens as they are: the line is split once */
    enum proto_err err = proto_meta_parse_tokens(r, n, 3);
    if (err != PERR_NONE && !r->flag_err) {
        /* memcached refuses a long key or too many tokens before it reads
         * the length: the data block is then read as commands */
        proto_reply_err(s, out,
                        err == PERR_TOO_MANY_FLAGS ? PERR_FLAGS_TOO_LONG : err);
        return (ssize_t)linelen;
    }
    enum tc_store_mode mode = TC_SET;
    if (err == PERR_NONE) {
        switch (r->mode) {
        case 0:
        case 'S':
            break;
        case 'E':
            mode = TC_ADD;
            break;
        case 'A':
            mode = TC_APPEND;
            break;
        case 'P':
            mode = TC_PREPEND;
            break;
        case 'R':
            mode = TC_REPLACE;
            break;
        default:
            err = PERR_MS_MODE;
        }
    }
    if (err != PERR_NONE) {
        proto_reply_err(s, out, err);
        return (ssize_t)ms_discard(s, linelen, len, block);
    }
    /* Too large to ever store: refused (and the block swallowed unread, as
     * memcached does) whether or not the block has arrived yet, so the
     * reply does not depend on how the bytes were cut into reads. */
    if (proto_too_large(s, r->klen, vlen)) {
        tc_store_refused(s->cache, r->key, r->klen, true);
        proto_reply_err(s, out, PERR_TOO_LARGE);
        return (ssize_t)ms_discard(s, linelen, len, block);
    }
    if (len - linelen < block) {
        s->need = linelen + (size_t)block;
        return 0;
    }
    const char *val = in + linelen;
    if (val[vlen] != '\r' || val[vlen + 1] != '\n') {
        proto_reply_err(s, out, PERR_BAD_CHUNK);
        return (ssize_t)(linelen + block);
    }

    struct tc_store_opts o = {0};
    if (r->has_cas) {
        if (mode == TC_SET || mode == TC_REPLACE) {
            mode = TC_CAS; /* memcached upgrades set/replace with C */
            o.cas_in = r->cas;
            o.invalidate = r->stale && r->cas; /* C0 is never older */
        } else if ((mode == TC_APPEND || mode == TC_PREPEND) && r->cas) {
            o.cas_check = true; /* add ignores C; C0 checks nothing */
            o.cas_in = r->cas;
        }
    }
    if (r->has_cas_new)
        o.cas_new = r->cas_new;
    if (r->vivify && (mode == TC_APPEND || mode == TC_PREPEND)) {
        o.vivify = true;
        o.vivify_exptime = r->viv_ttl;
    }
    uint64_t cas = 0;
    int rc = tc_store_ex(s->cache, mode, r->key, r->klen, val, (size_t)vlen,
                         r->client_flags, r->has_ttl ? r->ttl : 0, &o, &cas);
    /* memcached drops the old item so that no stale value outlives a
     * failed ms, whatever the mode (the engine does it for TC_SET) */
    if ((rc == -E2BIG || rc == -ENOMEM) && mode != TC_SET)
        tc_drop(s->cache, r->key, r->klen);
    const char *code = meta_status(s, out, rc, &ms_errs);
    if (!code || (rc == TC_OK && r->quiet))
        return (ssize_t)(linelen + block);

    struct rline l;
    l.n = 0;
    rl_str(&l, code);
    for (int i = r->first_flag; i < r->ntok; i++) {
        switch (r->tok[i].p[0]) {
        case 'O':
            rl_add(&l, " ", 1);
            rl_add(&l, r->tok[i].p, r->tok[i].n);
            break;
        case 'k':
            rl_key(&l, r);
            break;
        case 'c':
            rl_flag_u64(&l, 'c', rc == TC_OK && !r->no_cas ? cas : 0);
            break;
        case 's': {
            uint32_t size = (uint32_t)vlen;
            if (rc == TC_OK && (mode == TC_APPEND || mode == TC_PREPEND)) {
                struct tc_get_opts peek = {
                    .no_bump = true, .head_only = true, .no_win = true};
                tc_get_ex(s->cache, r->key, r->klen, &peek, note_vlen, &size);
            }
            rl_flag_u64(&l, 's', size);
            break;
        }
        }
    }
    rl_flush(&l, out);
    return (ssize_t)(linelen + block);
}

/* ---- md ------------------------------------------------------------------ */

struct peek {
    bool hit;
    uint64_t cas;
};

static void
note_cas(void *arg, const struct tc_item_info *info, const struct iovec *iov,
         int niov)
{
    (void)iov;
    (void)niov;
    struct peek *p = arg;
    p->hit = true;
    p->cas = info->cas;
}

/* The item's CAS without marking it used: TC_OK or TC_NOT_FOUND. */
static int
peek_cas(struct tc_cache *c, const struct meta_req *r, uint64_t *cas)
{
    struct tc_get_opts o = {.no_bump = true, .head_only = true, .no_win = true};
    struct peek p = {0};
    int rc = tc_get_ex(c, r->key, r->klen, &o, note_cas, &p);
    if (rc == TC_OK)
        *cas = p.cas;
    return rc;
}

/* md x: an empty value in place of the old one, with md's F and T, keeping
 * the old CAS (or E). CAS-checked against what was read, so a concurrent
 * writer makes it retry instead of being overwritten. */
static int
md_remove_value(struct tc_cache *c, const struct meta_req *r)
{
    for (int i = 0; i < META_RETRIES; i++) {
        uint64_t cas;
        int rc = peek_cas(c, r, &cas);
        if (rc != TC_OK)
            return rc;
        if (r->has_cas && cas != r->cas)
            return TC_EXISTS;
        struct tc_store_opts o = {
            .cas_in = cas,
            .cas_new = r->has_cas_new && r->cas_new ? r->cas_new : cas,
        };
        rc = tc_store_ex(c, TC_CAS, r->key, r->klen, "", 0, r->client_flags,
                         r->has_ttl ? r->ttl : 0, &o, NULL);
        if (rc == TC_EXISTS && r->has_cas)
            return TC_EXISTS;
        if (rc != TC_EXISTS && rc != TC_NOT_FOUND)
            return rc;
    }
    return -EBUSY;
}

static void
meta_delete(struct proto_sess *s, struct meta_req *r, struct obuf *out)
{
    uint64_t cas_in = r->has_cas ? r->cas : 0;
    int rc;

    /* C0: memcached compares it like any CAS; the engine reads 0 as "no
     * check". An item with CAS 0 does not exist, so C0 fails on any hit. */
    if (r->has_cas && r->cas == 0) {
        uint64_t cas;
        rc = peek_cas(s->cache, r, &cas);
        if (rc == TC_OK)
            rc = TC_EXISTS;
    } else if (r->remove) {
        rc = md_remove_value(s->cache, r);
        if (rc == TC_OK && r->stale)
            rc = tc_invalidate_ex(s->cache, r->key, r->klen, 0, -1,
                                  r->has_cas_new ? r->cas_new : 0);
    } else if (r->stale && !(r->has_ttl && r->ttl < 0)) {
        rc = tc_invalidate_ex(s->cache, r->key, r->klen, cas_in,
                              r->has_ttl ? r->ttl : -1,
                              r->has_cas_new ? r->cas_new : 0);
    } else {
        rc = tc_delete(s->cache, r->key, r->klen, cas_in);
    }

    const char *code = meta_status(s, out, rc, &md_ma_errs);
    if (code && !(rc == TC_OK && r->quiet))
        reply_status(out, r, code);
}

/* ---- ma ------------------------------------------------------------------ */

static void
meta_arith(struct proto_sess *s, struct meta_req *r, struct obuf *out)
{
    bool incr;
    switch (r->mode) {
    case 0:
    case 'I':
    case '+':
        incr = true;
        break;
    case 'D':
    case '-':
        incr = false;
        break;
    default:
        proto_reply_err(s, out, PERR_MA_MODE);
        return;
    }

    bool created = false;
    struct tc_arith_opts o = {
        .vivify = r->vivify,
        .initial = r->initial,
        .vivify_exptime = created_ttl(r),
        .cas_in = r->has_cas ? r->cas : 0, /* C0: no check, as memcached */
        .touch = r->has_ttl,
        .exptime = r->ttl,
        .vivified = &created,
        .cas_new = r->has_cas_new ? r->cas_new : 0,
    };
    struct tc_item_info info;
    uint64_t v = 0;
    int rc =
        tc_arith_ex(s->cache, r->key, r->klen, incr, r->delta, &o, &v, &info);
    if (rc != TC_OK) {
        const char *code = meta_status(s, out, rc, &md_ma_errs);
        if (code)
            reply_status(out, r, code);
        return;
    }
    /* q hides the reply of an update, not of a creation (memcached) */
    if (r->quiet && !created)
        return;

    char num[24];
    int nlen = snprintf(num, sizeof(num), "%" PRIu64, v);
    uint32_t now = clock_now();
    struct rline l;
    l.n = 0;
    if (r->value) {
        char head[16];
        rl_add(&l, head, (size_t)snprintf(head, sizeof(head), "VA %d", nlen));
    } else {
        rl_str(&l, "HD");
    }
    for (int i = r->first_flag; i < r->ntok; i++) {
        switch (r->tok[i].p[0]) {
        case 'c':
            rl_flag_u64(&l, 'c', r->no_cas ? 0 : info.cas);
            break;
        case 't':
            rl_flag_i64(&l, 't', ttl_at(r, i, &info, created, now));
            break;
        case 'O':
            rl_add(&l, " ", 1);
            rl_add(&l, r->tok[i].p, r->tok[i].n);
            break;
        case 'k':
            rl_key(&l, r);
            break;
        }
    }
    rl_flush(&l, out);
    if (r->value) {
        obuf_add(out, num, (size_t)nlen);
        obuf_add(out, "\r\n", 2);
    }
}

/* ---- me ------------------------------------------------------------------ */

struct me_ctx {
    const struct meta_req *r;
    struct obuf *out;
};

static void
me_reply(void *arg, const struct tc_item_info *info, const struct iovec *iov,
         int niov)
{
    (void)iov;
    (void)niov;
    struct me_ctx *x = arg;
    const struct meta_req *r = x->r;
    struct rline l;
    char rest[128];

    l.n = 0;
    rl_str(&l, "ME ");
    if (r->binary) {
        char b64[META_B64_MAX];
        rl_add(
            &l, b64,
            proto_meta_b64_encode((const unsigned char *)r->key, r->klen, b64));
    } else {
        rl_add(&l, r->key, r->klen);
    }
    int n =
        snprintf(rest, sizeof(rest),
                 " exp=%" PRId64 " la=%" PRIu32 " cas=%" PRIu64
                 " fetch=%s cls=%u size=%zu",
                 ttl_left(info->exptime, clock_now()), info->last_access,
                 info->cas, info->fetched ? "yes" : "no", info->slab_class + 1u,
                 TC_ITEM_HEADER_SIZE + r->klen + info->vlen);
    rl_add(&l, rest, (size_t)n);
    rl_flush(&l, x->out);
}

/* me <key> [b]: only a "b" right after the key means anything. */
static void
meta_debug(struct proto_sess *s, struct meta_req *r, const char *line,
           size_t llen, struct obuf *out)
{
    int n = proto_tokenize(line, llen, r->tok, PROTO_MAX_TOKENS);
    if (n < 2 || r->tok[1].n > TC_KEY_MAX) {
        proto_reply_err(s, out, PERR_BAD_FORMAT);
        return;
    }
    r->key = r->tok[1].p;
    r->klen = r->tok[1].n;
    if (n >= 3 && r->tok[2].n == 1 && r->tok[2].p[0] == 'b') {
        size_t kn = proto_meta_b64_decode(r->key, r->klen, r->kbuf);
        if (kn == 0) {
            proto_reply_err(s, out, PERR_BAD_FORMAT);
            return;
        }
        r->key = (const char *)r->kbuf;
        r->klen = kn;
        r->binary = true;
    }
    struct tc_get_opts o = {.no_bump = true, .head_only = true, .no_win = true};
    struct me_ctx x = {r, out};
    int rc = tc_get_ex(s->cache, r->key, r->klen, &o, me_reply, &x);
    if (rc == TC_NOT_FOUND)
        obuf_add(out, "EN\r\n", 4);
    else if (rc != TC_OK)
        proto_reply_err(s, out, PERR_BAD_FORMAT);
}

/* ---- entry --------------------------------------------------------------- */

ssize_t
proto_meta_process(struct proto_sess *s, const char *in, size_t len,
                   struct obuf *out)
{
    /* The text parser found the line already; the same limit here keeps a
     * direct call's outcome independent of how the bytes were read. */
    long eol =
        proto_find_eol(in, len < PROTO_LINE_MAX + 1 ? len : PROTO_LINE_MAX + 1);
    if (eol < 0) {
        if (len > PROTO_LINE_MAX) {
            proto_reply_err(s, out, PERR_LINE_TOO_LONG);
            return PROTO_CLOSE;
        }
        return 0;
    }
    size_t linelen = (size_t)eol + 1;
    size_t llen = (size_t)eol;
    if (llen && in[llen - 1] == '\r')
        llen--;

    struct meta_req r;
    memset(&r, 0, META_REQ_ZERO);
    r.no_cas = s->no_cas;
    s->need = 0;

    /* the text parser only calls us for "m? ..." lines; check anyway */
    char cmd = 0;
    if (llen >= 2 && in[0] == 'm' && (llen == 2 || in[2] == ' '))
        cmd = in[1];

    if (cmd == 's') {
        ssize_t rc = meta_set(s, &r, in, len, linelen, out);
        if (rc != 0)
            s->ctr.meta_cmds++;
        return rc;
    }

    s->ctr.meta_cmds++;
    enum proto_err err;
    switch (cmd) {
    case 'n':
        obuf_add(out, "MN\r\n", 4);
        break;
    case 'e':
        meta_debug(s, &r, in, llen, out);
        break;
    case 'g':
    case 'd':
    case 'a':
        err = proto_meta_parse(&r, in, llen, 2);
        if (err != PERR_NONE) {
            /* ma and md word every flag error alike, as memcached does (a
             * long opaque is not one of them); they also say "options
             * flags too long" where mg says "are too long" */
            if (cmd != 'g' && r.flag_err && err != PERR_OPAQUE_LONG)
                err = PERR_MA_FLAG;
            if (cmd != 'g' && err == PERR_TOO_MANY_FLAGS)
                err = PERR_FLAGS_TOO_LONG;
            proto_reply_err(s, out, err);
            break;
        }
        if (cmd == 'g')
            meta_get(s, &r, out);
        else if (cmd == 'd')
            meta_delete(s, &r, out);
        else
            meta_arith(s, &r, out);
        break;
    default:
        s->ctr.meta_cmds--;
        proto_reply_err(s, out, PERR_ERROR);
        break;
    }
    return (ssize_t)linelen;
}

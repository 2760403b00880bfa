/*
 * memcached's classic text protocol (src/server/proto/proto.h), executed
 * against the engine: get gets gat gats bget, set add replace append prepend
 * cas, incr decr, delete, touch, flush_all, version, verbosity, stats,
 * shutdown, cache_memlimit, refresh_certs, hotspot (tiercache's write-hotspot
 * dump and reset), quit; slabs, lru_crawler and stats cachedump are in
 * proto_admin.c. Lines whose command is mg ms md ma mn me go to the meta parser
 * (proto_meta_process). This file holds the lines, the dispatch, the key
 * commands and the -Y login; the server commands (flush_all, version, quit,
 * verbosity, cache_memlimit, shutdown, refresh_certs, stats, watch, slabs,
 * lru_crawler, hotspot) are in proto_text_server.c, and what both share in
 * proto_text_int.h.
 *
 * The replies follow memcached 1.6 byte for byte, including its quirks:
 *   - a command line ends at "\n"; one "\r" before it is dropped; tokens are
 *     split on ' ' only; an empty line or a command shorter than two bytes
 *     is "ERROR";
 *   - a wrong number of tokens is "ERROR", even with noreply; any other
 *     reply of a command, success or error, is suppressed by noreply;
 *   - a storage line that fails to parse consumes only its line (the data
 *     block that follows is then read as commands, as memcached does); a
 *     data block not followed by "\r\n" is "CLIENT_ERROR bad data chunk"
 *     and its bytes (bytes + 2) are consumed all the same;
 *   - a value over item_size_max is refused from its line alone and its
 *     bytes are swallowed as they come, never buffered; a set refused so,
 *     or for lack of memory, also deletes the key's old value (memcached:
 *     no stale data after a set; tc_store does it for its own refusals).
 * Where tiercache differs, on purpose:
 *   - a key with a control character is refused ("CLIENT_ERROR bad command
 *     line format", memcached's text for a key over 250 bytes) and all keys
 *     of a get are checked before any lookup;
 *   - numbers are strict (digits only, no '+', no wrap of 32-bit flags);
 *   - a line over PROTO_LINE_MAX without "\n" gets "CLIENT_ERROR line too
 *     long" before the close, where memcached closes without a word. A
 *     get/gets/gat/gats line, which memcached lets grow without bound, may
 *     be as long as item_size_max (at most TEXT_MULTIGET_LINE_MAX), which
 *     the connection's input buffer always holds. The limit applies
 *     wherever the "\n" is, so the outcome never depends on how the bytes
 *     were split into reads.
 *
 * Under -Y a session starts with s->authed false, and until a login every
 * line goes to text_login() instead of the commands (memcached's replies:
 * "CLIENT_ERROR unauthenticated", the login's STORED or its errors); each
 * line gets its reply, where memcached answers only the first line of a
 * read before a login.
 *
 * s->need is the size of the request at in + (returned value) when that
 * request is incomplete and its size is known (a storage command waiting for
 * its data block), else 0. s->resume is set when a get of many keys stopped
 * after PROTO_GET_SLICE bytes of replies (src/server/proto/proto.h): the
 * replies are copies of the values, so one get of many large values would
 * otherwise hold them all; a connection holds at most its back-pressure mark
 * plus a slice and one value.
 *
 * Counters: every request consumed counts in ctr.cmd_total (errors
 * included, meta ones too; proto.c relies on it to spot the connection's
 * first byte), get/gets/gat/gats with more than one key in ctr.get_multi,
 * ERROR and CLIENT_ERROR replies in ctr.protocol_errors. The meta parser
 * counts ctr.meta_cmds.
 *
 * Concurrency: a session belongs to one connection, used by its worker
 * thread only; the engine calls are thread-safe (src/tiercache.h).
 */

#include "src/server/proto/proto.h"
#include "src/server/proto/proto_text_int.h"

#include "src/base/compiler.h"
#include "src/server/auth.h"
#include "src/server/proto/proto_util.h"
#include "src/server/proto/proto_watch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A multi-key get line may grow past PROTO_LINE_MAX (memcached: unbounded). */
#define TEXT_MULTIGET_LINE_MAX (1u << 20)
/* Replies pending past which a call returns before the next request, so
 * that the connection's back-pressure applies between requests (the caller
 * calls again unless its output is backlogged). */
#define TEXT_OUT_YIELD (256u * 1024)

enum { LINE_INCOMPLETE = -1, LINE_TOO_LONG = -2 };

/* ---- retrieval ---------------------------------------------------------- */

struct get_ctx {
    struct obuf *out;
    const struct proto_token *key;
    bool with_cas;
    uint8_t cls; /* the last hit's class and length (watch fetchers) */
    uint32_t vlen;
    bool no_cas; /* -C: the CAS shown is 0 */
};

/* A flash value still being read: the reply with a hole for the
 * data; a failed read removes the whole reply (a miss sends nothing). */
static void
emit_pending(struct get_ctx *g, const struct tc_item_info *info)
{
    uint64_t start = obuf_pos(g->out);
    obuf_add(g->out, "VALUE ", 6);
    obuf_add(g->out, g->key->p, g->key->n);
    if (g->with_cas)
        obuf_printf(g->out, " %" PRIu32 " %" PRIu32 " %" PRIu64 "\r\n",
                    info->flags, info->vlen, g->no_cas ? 0 : info->cas);
    else
        obuf_printf(g->out, " %" PRIu32 " %" PRIu32 "\r\n", info->flags,
                    info->vlen);
    if (obuf_hole_open(g->out, info->pending, start, info->vlen) != 0)
        return;
    obuf_add(g->out, "\r\n", 2);
    obuf_hole_close(g->out, NULL, 0);
}

/* "VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n", in one reservation:
 * the value is copied once, from the cache into the obuf. */
static void
emit_value(void *arg, const struct tc_item_info *info, const struct iovec *iov,
           int niov)
{
    struct get_ctx *g = arg;
    size_t vlen = 0;
    g->cls = info->slab_class;
    g->vlen = info->vlen;
    for (int i = 0; i < niov; i++)
        vlen += iov[i].iov_len;
    if (info->pending) {
        emit_pending(g, info);
        return;
    }

    /* " <flags> <bytes>[ <cas>]\r\n", by hand: snprintf was about 1% of
     * the server's CPU at pipeline depth 1 (perf/RESULTS.md) */
    char hdr[3 * (1 + PROTO_U64_DIGITS) + 2];
    size_t n = 0;
    hdr[n++] = ' ';
    n += proto_fmt_u64(hdr + n, info->flags);
    hdr[n++] = ' ';
    n += proto_fmt_u64(hdr + n, vlen);
    if (g->with_cas) {
        hdr[n++] = ' ';
        n += proto_fmt_u64(hdr + n, g->no_cas ? 0 : info->cas);
    }
    hdr[n++] = '\r';
    hdr[n++] = '\n';
    size_t total = 6 + g->key->n + (size_t)n + vlen + 2;
    if (obuf_reserve(g->out, total) != 0)
        return;
    char *p = obuf_tail(g->out);
    memcpy(p, "VALUE ", 6);
    p += 6;
    memcpy(p, g->key->p, g->key->n);
    p += g->key->n;
    memcpy(p, hdr, n);
    p += n;
    for (int i = 0; i < niov; i++) {
        if (iov[i].iov_len)
            memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    memcpy(p, "\r\n", 2);
    obuf_commit(g->out, total);
}

/* The next space-separated token of line[*pos..len); false at the end. The
 * key list of a get is not bounded by PROTO_MAX_TOKENS. */
static bool
next_token(const char *line, size_t len, size_t *pos, struct proto_token *t)
{
    size_t i = *pos;
    while (i < len && line[i] == ' ')
        i++;
    if (i == len)
        return false;
    t->p = line + i;
    i = proto_token_end(line, i, len);
    t->n = (size_t)(line + i - t->p);
    *pos = i;
    return true;
}

/* Offset of the first key in the line: after the command (and exptime). */
static size_t
keys_start(const struct text_cmd *c, bool touch)
{
    const struct proto_token *t = &c->tok[touch ? 1 : 0];
    return (size_t)(t->p + t->n - c->line);
}

/* Every key valid? Counts them in *nkeys. */
static bool
keys_ok(const struct text_cmd *c, size_t from, unsigned *nkeys)
{
    struct proto_token t;
    size_t pos = from;
    *nkeys = 0;
    while (next_token(c->line, c->len, &pos, &t)) {
        if (!proto_key_ok(t.p, t.n))
            return false;
        (*nkeys)++;
    }
    return true;
}

/* Is there a key at or after line[pos]? */
static bool
more_keys(const struct text_cmd *c, size_t pos)
{
    while (pos < c->len && c->line[pos] == ' ')
        pos++;
    return pos < c->len;
}

/* Keys looked up together (tc_get_many): enough for their index and item
 * misses to overlap. */
#define TEXT_GET_BATCH 16

struct many_ctx {
    struct get_ctx g;
    uint64_t stop; /* obuf position past which the get yields */
    struct proto_token tok[TEXT_GET_BATCH];
    uint8_t cls[TEXT_GET_BATCH]; /* each hit's class and length (watch) */
    uint32_t vlen[TEXT_GET_BATCH];
};

/* A hit of a batch: its VALUE reply; stop the batch once the output failed
 * or passed the slice. */
static bool
emit_many(void *arg, size_t i, const struct tc_item_info *info,
          const struct iovec *iov, int niov)
{
    struct many_ctx *m = arg;
    m->g.key = &m->tok[i];
    emit_value(&m->g, info, iov, niov);
    m->cls[i] = m->g.cls;
    m->vlen[i] = m->g.vlen;
    return !m->g.out->err && obuf_pos(m->g.out) < m->stop;
}

/* The keys a batch did, to the watchers of fetches. */
static void
watch_batch(const struct proto_sess *s, const struct many_ctx *m,
            const int *rcs, int done)
{
    for (int i = 0; i < done; i++)
        proto_watch_get(s, m->tok[i].p, m->tok[i].n, rcs[i] == TC_OK,
                        m->cls[i] + 1u, m->vlen[i]);
}

/* Look up the keys from line offset `from` on. 0 when all are done (or the
 * output failed); else this call appended PROTO_GET_SLICE bytes and keys
 * remain: the offset to carry on from. At least one key is done per call,
 * so a get resumed over and over still ends. The keys go to the engine in
 * batches, which stop after the key whose reply passes the slice, so a get
 * yields after the same key as it would one key at a time. */
static size_t
fetch_keys(struct text_cmd *c, size_t from, bool touch, int64_t exptime,
           bool with_cas)
{
    /* only g and stop set: the per-key arrays are written before they are
     * read (zeroing them was a tenth of a one-key get's instructions) */
    struct many_ctx m;
    m.g = (struct get_ctx){
        .out = c->out, .with_cas = with_cas, .no_cas = c->s->no_cas};
    m.stop = obuf_pos(c->out) + PROTO_GET_SLICE;
    /* async: a flash value is read without blocking (a hole) */
    struct tc_get_opts o = {
        .touch = touch, .exptime = exptime, .async = true, .no_win = true};
    struct tc_key keys[TEXT_GET_BATCH];
    size_t end[TEXT_GET_BATCH];
    int rcs[TEXT_GET_BATCH];
    size_t pos = from;
    for (;;) {
        size_t n = 0;
        while (n < TEXT_GET_BATCH &&
               next_token(c->line, c->len, &pos, &m.tok[n])) {
            keys[n] = (struct tc_key){m.tok[n].p, m.tok[n].n};
            end[n++] = pos;
        }
        if (n == 0)
            return 0;
        int done = tc_get_many(c->s->cache, keys, n, &o, emit_many, &m, rcs);
        if (proto_watch_active())
            watch_batch(c->s, &m, rcs, done);
        if (c->out->err)
            return 0;
        if (done > 0 && (size_t)done < n)
            return end[done - 1]; /* stopped with keys left */
        if (obuf_pos(c->out) >= m.stop && more_keys(c, pos))
            return pos;
    }
}

/* get, gets, bget (arg: 1 = with CAS); gat, gats (arg | 2 = touch). A get
 * whose replies pass PROTO_GET_SLICE stops between two keys and returns 0
 * with s->resume set; called again on the same line, it carries on (its
 * keys were checked and it was counted the first time). */
static ssize_t
cmd_get(struct text_cmd *c, int arg)
{
    bool with_cas = arg & 1, touch = arg & 2;
    int64_t exptime = 0;
    unsigned nkeys;

    if (touch && !proto_parse_i64(&c->tok[1], &exptime)) {
        reply_err(c, PERR_INVALID_EXPTIME);
        return (ssize_t)c->line_bytes;
    }
    size_t from = c->resume;
    if (from == 0 || from >= c->len) {
        from = keys_start(c, touch);
        if (!keys_ok(c, from, &nkeys)) {
            reply_err(c, PERR_KEY_TOO_LONG);
            return (ssize_t)c->line_bytes;
        }
        if (nkeys > 1)
            c->s->ctr.get_multi++;
    }
    c->s->resume = fetch_keys(c, from, touch, exptime, with_cas);
    if (c->s->resume)
        return 0;
    obuf_add(c->out, "END\r\n", 5);
    return (ssize_t)c->line_bytes;
}

/* ---- storage ------------------------------------------------------------ */

struct store_args {
    const struct proto_token *key;
    uint32_t flags;
    int64_t exptime;
    uint64_t vlen;
    uint64_t cas;
};

/* "<cmd> <key> <flags> <exptime> <bytes> [cas] [noreply]". */
static bool
parse_store(struct text_cmd *c, bool with_cas, struct store_args *a)
{
    int64_t bytes;
    a->key = &c->tok[1];
    a->cas = 0;
    if (!proto_key_ok(a->key->p, a->key->n) ||
        !proto_parse_u32(&c->tok[2], &a->flags) ||
        !proto_parse_i64(&c->tok[3], &a->exptime) ||
        !proto_parse_i64(&c->tok[4], &bytes))
        return false;
    if (with_cas && !proto_parse_u64(&c->tok[5], &a->cas))
        return false;
    /* memcached reads bytes as an int and adds 2 for the "\r\n" */
    if (bytes < 0 || bytes > INT32_MAX - 2)
        return false;
    a->vlen = (uint64_t)bytes;
    return true;
}

static bool
too_large(const struct proto_sess *s, const struct store_args *a)
{
    return proto_too_large(s, a->key->n, a->vlen);
}

/* memcached drops the old value when a set cannot be stored, so that a
 * client never reads what it meant to overwrite. tc_store does so when it
 * refuses a set; this is for a value refused before the engine saw it
 * (tc_drop: not counted as a delete). */
static void
drop_old_on_set(struct text_cmd *c, int mode, const struct store_args *a)
{
    tc_store_refused(c->s->cache, a->key->p, a->key->n, mode == TC_SET);
}

static void
reply_store(struct text_cmd *c, int rc)
{
    switch (rc) {
    case TC_OK:
        reply(c, "STORED");
        return;
    case TC_NOT_STORED:
        reply(c, "NOT_STORED");
        return;
    case TC_EXISTS:
        reply(c, "EXISTS");
        return;
    case TC_NOT_FOUND:
        reply(c, "NOT_FOUND");
        return;
    case -EINVAL:
        reply_err(c, PERR_BAD_FORMAT);
        return;
    case -E2BIG:
        reply_err(c, PERR_TOO_LARGE);
        return;
    default:
        reply_err(c, PERR_OUT_OF_MEMORY);
        return;
    }
}

/* A store for "watch mutations", with memcached's names. */
static void
watch_store(struct text_cmd *c, int mode, const struct store_args *a, int rc)
{
    static const char *const status[] = {[TC_OK] = "stored",
                                         [TC_NOT_STORED] = "not_stored",
                                         [TC_EXISTS] = "exists",
                                         [TC_NOT_FOUND] = "not_found"};
    const char *st =
        rc >= 0 && rc < (int)(sizeof(status) / sizeof(*status)) && status[rc]
            ? status[rc]
            : "not_stored";
    proto_watch_store(c->s, a->key->p, a->key->n, c->tok[0].p, c->tok[0].n, st,
                      a->exptime, a->vlen);
    (void)mode;
}

/* set, add, replace, append, prepend, cas (arg: enum tc_store_mode). */
static ssize_t
cmd_store(struct text_cmd *c, int mode)
{
    struct store_args a;

    take_noreply(c);
    if (!parse_store(c, mode == TC_CAS, &a)) {
        reply_err(c, PERR_BAD_FORMAT);
        return (ssize_t)c->line_bytes;
    }
    if (too_large(c->s, &a)) {
        drop_old_on_set(c, mode, &a);
        reply_err(c, PERR_TOO_LARGE);
        c->s->swallow = a.vlen + 2;
        return (ssize_t)c->line_bytes;
    }
    if (c->rest_len < a.vlen + 2) {
        c->s->need = c->line_bytes + a.vlen + 2;
        return 0;
    }
    const char *data = c->rest;
    if (data[a.vlen] != '\r' || data[a.vlen + 1] != '\n') {
        reply_err(c, PERR_BAD_CHUNK);
    } else {
        if (mode == TC_CAS && c->s->no_cas)
            a.cas = PROTO_CAS_NEVER;
        int rc =
            tc_store(c->s->cache, (enum tc_store_mode)mode, a.key->p, a.key->n,
                     data, a.vlen, a.flags, a.exptime, a.cas, NULL);
        if (proto_watch_active())
            watch_store(c, mode, &a, rc);
        reply_store(c, rc);
    }
    return (ssize_t)(c->line_bytes + a.vlen + 2);
}

/* ---- other key commands ------------------------------------------------- */

/* incr, decr (arg: 1 = incr). */
static ssize_t
cmd_arith(struct text_cmd *c, int incr)
{
    const struct proto_token *key = &c->tok[1];
    uint64_t delta, value;
    char num[24];

    take_noreply(c);
    if (!proto_key_ok(key->p, key->n)) {
        reply_err(c, PERR_BAD_FORMAT);
        return (ssize_t)c->line_bytes;
    }
    if (!proto_parse_u64(&c->tok[2], &delta)) {
        reply_err(c, PERR_INVALID_DELTA);
        return (ssize_t)c->line_bytes;
    }
    int rc = incr ? tc_incr(c->s->cache, key->p, key->n, delta, &value, NULL)
                  : tc_decr(c->s->cache, key->p, key->n, delta, &value, NULL);
    if (rc == TC_OK) {
        snprintf(num, sizeof(num), "%" PRIu64, value);
        reply(c, num);
    } else if (rc == TC_NOT_FOUND) {
        reply(c, "NOT_FOUND");
    } else if (rc == TC_NON_NUMERIC) {
        reply_err(c, PERR_NON_NUMERIC);
    } else if (rc == -EINVAL) {
        reply_err(c, PERR_BAD_FORMAT);
    } else {
        reply_err(c, PERR_NOMEM);
    }
    return (ssize_t)c->line_bytes;
}

/* memcached accepts "delete <key> [0] [noreply]" and nothing else. */
static bool
delete_args_ok(struct text_cmd *c)
{
    if (c->ntok == 2)
        return true;
    bool hold_zero = proto_tok_is(&c->tok[2], "0");
    take_noreply(c);
    return (c->ntok == 3 && (hold_zero || c->noreply)) ||
           (c->ntok == 4 && hold_zero && c->noreply);
}

static ssize_t
cmd_delete(struct text_cmd *c, int arg)
{
    const struct proto_token *key = &c->tok[1];
    (void)arg;
    if (!delete_args_ok(c)) {
        reply_err(c, PERR_DELETE_USAGE);
        return (ssize_t)c->line_bytes;
    }
    if (!proto_key_ok(key->p, key->n)) {
        reply_err(c, PERR_BAD_FORMAT);
        return (ssize_t)c->line_bytes;
    }
    int rc = tc_delete(c->s->cache, key->p, key->n, 0);
    reply(c, rc == TC_OK ? "DELETED" : "NOT_FOUND");
    return (ssize_t)c->line_bytes;
}

static ssize_t
cmd_touch(struct text_cmd *c, int arg)
{
    const struct proto_token *key = &c->tok[1];
    int64_t exptime;
    (void)arg;

    take_noreply(c);
    if (!proto_key_ok(key->p, key->n)) {
        reply_err(c, PERR_BAD_FORMAT);
        return (ssize_t)c->line_bytes;
    }
    if (!proto_parse_i64(&c->tok[2], &exptime)) {
        reply_err(c, PERR_INVALID_EXPTIME);
        return (ssize_t)c->line_bytes;
    }
    int rc = tc_touch(c->s->cache, key->p, key->n, exptime);
    reply(c, rc == TC_OK ? "TOUCHED" : "NOT_FOUND");
    return (ssize_t)c->line_bytes;
}

/* ---- dispatch ----------------------------------------------------------- */

#define ANY_TOKENS (PROTO_MAX_TOKENS + 1)

/* Commands with their token counts (the command included): memcached
 * replies "ERROR" outside them. A key command (KEYED) reads no token past
 * c->ntok; the others find the tokens past it zeroed, as they were before
 * text_one stopped zeroing them all for every request. */
#define KEYED true
#define CMD(name, min, max, fn, arg, keyed)                                    \
    {                                                                          \
        name, sizeof(name) - 1, keyed, min, max, fn, arg                       \
    }
static const struct text_cmd_def {
    const char *name;
    uint8_t len;
    bool keyed;
    int min_tok, max_tok;
    text_cmd_fn *fn;
    int arg;
} text_cmds[] = {
    CMD("get", 2, ANY_TOKENS, cmd_get, 0, KEYED),
    CMD("gets", 2, ANY_TOKENS, cmd_get, 1, KEYED),
    CMD("gat", 2, ANY_TOKENS, cmd_get, 2, KEYED),
    CMD("gats", 2, ANY_TOKENS, cmd_get, 3, KEYED),
    CMD("bget", 2, ANY_TOKENS, cmd_get, 0, KEYED),
    CMD("set", 5, 6, cmd_store, TC_SET, KEYED),
    CMD("add", 5, 6, cmd_store, TC_ADD, KEYED),
    CMD("replace", 5, 6, cmd_store, TC_REPLACE, KEYED),
    CMD("append", 5, 6, cmd_store, TC_APPEND, KEYED),
    CMD("prepend", 5, 6, cmd_store, TC_PREPEND, KEYED),
    CMD("cas", 6, 7, cmd_store, TC_CAS, KEYED),
    CMD("incr", 3, 4, cmd_arith, 1, KEYED),
    CMD("decr", 3, 4, cmd_arith, 0, KEYED),
    CMD("delete", 2, 4, cmd_delete, 0, KEYED),
    CMD("touch", 3, 4, cmd_touch, 0, KEYED),
    CMD("flush_all", 1, 3, proto_text_flush_all, 0, false),
    CMD("version", 1, ANY_TOKENS, proto_text_version, 0, false),
    CMD("verbosity", 2, 3, proto_text_verbosity, 0, false),
    CMD("stats", 1, ANY_TOKENS, proto_text_stats, 0, false),
    CMD("shutdown", 1, ANY_TOKENS, proto_text_shutdown, 0, false),
    CMD("cache_memlimit", 2, 3, proto_text_memlimit, 0, false),
    CMD("refresh_certs", 1, ANY_TOKENS, proto_text_refresh_certs, 0, false),
    CMD("hotspot", 2, 3, proto_text_hotspot, 0, false),
    CMD("slabs", 3, 4, proto_text_slabs, 0, false),
    CMD("watch", 1, ANY_TOKENS, proto_text_watch, 0, false),
    CMD("lru_crawler", 2, 3, proto_text_lru_crawler, 0, false),
    CMD("quit", 1, ANY_TOKENS, proto_text_quit, 0, false),
};

static const struct text_cmd_def *
find_cmd(const struct proto_token *t)
{
    for (size_t i = 0; i < sizeof(text_cmds) / sizeof(text_cmds[0]); i++) {
        const struct text_cmd_def *d = &text_cmds[i];
        if (t->n != d->len || t->p[0] != d->name[0])
            continue;
        size_t k = 1; /* names are short: no memcmp call */
        while (k < t->n && t->p[k] == d->name[k])
            k++;
        if (k == t->n)
            return d;
    }
    return NULL;
}

/* mg ms md ma mn me. */
static bool
is_meta(const struct proto_token *t)
{
    return t->n == 2 && t->p[0] == 'm' && memchr("gsdane", t->p[1], 6);
}

/* A meta request goes to proto_meta_process, which counts ctr.meta_cmds.
 * mg ms md ma without a key are "ERROR", as memcached's token count check
 * has it (me and mn are the meta parser's to judge). */
static ssize_t
meta_request(struct text_cmd *c, const char *in, size_t len)
{
    char op = c->tok[0].p[1];
    if (c->ntok < 2 && op != 'n' && op != 'e') {
        proto_reply_err(c->s, c->out, PERR_ERROR);
        return (ssize_t)c->line_bytes;
    }
    return proto_meta_process(c->s, in, len, c->out);
}

/* A line that begins with a meta command ("mg k ...", "ms k ..."): the
 * meta parser splits it itself, so the text tokens are not made. True with
 * the reply written and *rc set. A line with spaces ahead of the command
 * goes the tokenized way (dispatch), whose outcome is the same. */
static bool
meta_line(struct text_cmd *c, const char *in, size_t len, ssize_t *rc)
{
    const char *l = c->line;
    if (c->len < 2 || l[0] != 'm' || (c->len > 2 && l[2] != ' ') ||
        !memchr("gsdane", l[1], 6))
        return false;
    /* meta_request's check of a key: a token after the command */
    size_t i = 2;
    while (i < c->len && l[i] == ' ')
        i++;
    if (i == c->len && l[1] != 'n' && l[1] != 'e') {
        proto_reply_err(c->s, c->out, PERR_ERROR);
        *rc = (ssize_t)c->line_bytes;
        return true;
    }
    *rc = proto_meta_process(c->s, in, len, c->out);
    return true;
}

/* An unknown command: "ERROR", except that memcached hangs up on what looks
 * like an HTTP request. */
static ssize_t
unknown_cmd(struct text_cmd *c)
{
    int last = c->ntok > PROTO_MAX_TOKENS ? PROTO_MAX_TOKENS - 1 : c->ntok - 1;
    if (last >= 1 && c->tok[last].n >= 5 &&
        memcmp(c->tok[last].p, "HTTP/", 5) == 0)
        return PROTO_CLOSE;
    proto_reply_err(c->s, c->out, PERR_ERROR);
    return (ssize_t)c->line_bytes;
}

static ssize_t
dispatch(struct text_cmd *c, const char *in, size_t len)
{
    if (c->ntok == 0 || c->tok[0].n < 2) {
        proto_reply_err(c->s, c->out, PERR_ERROR);
        return (ssize_t)c->line_bytes;
    }
    if (is_meta(&c->tok[0]))
        return meta_request(c, in, len);
    const struct text_cmd_def *d = find_cmd(&c->tok[0]);
    if (d == NULL)
        return unknown_cmd(c);
    if (c->ntok < d->min_tok || c->ntok > d->max_tok) {
        proto_reply_err(c->s, c->out, PERR_ERROR);
        return (ssize_t)c->line_bytes;
    }
    if (!d->keyed && c->ntok < PROTO_MAX_TOKENS)
        memset(&c->tok[c->ntok], 0,
               (size_t)(PROTO_MAX_TOKENS - c->ntok) * sizeof(c->tok[0]));
    return d->fn(c, d->arg);
}

/* ---- login (-Y) --------------------------------------------------------- */

/* Before a login every line is "CLIENT_ERROR unauthenticated" except
 * memcached's login: "set" with at least four arguments, whose data block
 * is "user password" (key, flags, exptime and noreply are ignored, and the
 * reply is always sent). A data block over AUTH_TOKEN_MAX is swallowed, not
 * buffered. */
static ssize_t
text_login(struct text_cmd *c)
{
    struct proto_sess *s = c->s;
    uint32_t bytes;
    if (c->ntok < 5 || !proto_tok_is(&c->tok[0], "set") ||
        !proto_parse_u32(&c->tok[4], &bytes)) {
        proto_reply_err(s, c->out, PERR_UNAUTHENTICATED);
        return (ssize_t)c->line_bytes;
    }
    if (bytes > AUTH_TOKEN_MAX) {
        s->ctr.auth_cmds++;
        s->ctr.auth_errors++;
        proto_reply_err(s, c->out, PERR_AUTH_TOKEN);
        s->swallow = (uint64_t)bytes + 2;
        return (ssize_t)c->line_bytes;
    }
    size_t need = (size_t)bytes + 2;
    if (c->rest_len < need) {
        s->need = c->line_bytes + need;
        return 0;
    }
    s->ctr.auth_cmds++;
    const char *data = c->rest;
    struct proto_token tok[3];
    enum proto_err e = PERR_NONE;
    if (data[bytes] != '\r' || data[bytes + 1] != '\n')
        e = PERR_AUTH_TERM;
    else if (proto_tokenize(data, bytes, tok, 2) < 2)
        e = PERR_AUTH_TOKEN;
    else if (!auth_file_check(s->auth, tok[0].p, tok[0].n, tok[1].p, tok[1].n))
        e = PERR_AUTH_FAILURE;
    if (e != PERR_NONE) {
        s->ctr.auth_errors++;
        proto_reply_err(s, c->out, e);
    } else {
        s->authed = true;
        obuf_add_str(c->out, "STORED\r\n");
    }
    return (ssize_t)(c->line_bytes + need);
}

/* ---- lines -------------------------------------------------------------- */

/* Does the line at in start (after spaces) with a retrieval command? */
static bool
is_multiget(const char *in, size_t len)
{
    static const char *const prefixes[] = {"get ", "gets ", "gat ", "gats "};
    size_t i = 0;
    while (i < len && in[i] == ' ')
        i++;
    for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
        size_t n = strlen(prefixes[k]);
        if (len - i >= n && memcmp(in + i, prefixes[k], n) == 0)
            return true;
    }
    return false;
}

/* The longest get line: item_size_max, within
 * [PROTO_LINE_MAX, TEXT_MULTIGET_LINE_MAX]. */
static size_t
multiget_line_max(const struct proto_sess *s)
{
    size_t max = s->item_size_max;
    if (max > TEXT_MULTIGET_LINE_MAX)
        max = TEXT_MULTIGET_LINE_MAX;
    return max > PROTO_LINE_MAX ? max : PROTO_LINE_MAX;
}

/* Index of the '\n' ending the first line, LINE_INCOMPLETE, or
 * LINE_TOO_LONG. The limit counts the line without its "\n". Before a
 * login (-Y) no line may be longer than PROTO_LINE_MAX. */
static long
find_line(const struct proto_sess *s, const char *in, size_t len)
{
    size_t limit = PROTO_LINE_MAX;
    if (len > PROTO_LINE_MAX && s->authed && is_multiget(in, len))
        limit = multiget_line_max(s);
    long eol = proto_find_eol(in, len < limit + 1 ? len : limit + 1);
    if (eol >= 0)
        return eol;
    return len > limit ? LINE_TOO_LONG : LINE_INCOMPLETE;
}

/* Execute the request at the front of in: bytes consumed, 0 if incomplete,
 * PROTO_CLOSE. */
static ssize_t
text_one(struct proto_sess *s, const char *in, size_t len, struct obuf *out)
{
    /* the tokens are not zeroed here: dispatch does it for the commands
     * that may read past c.ntok */
    struct text_cmd c;
    c.s = s;
    c.out = out;
    c.line = in;
    c.resume = s->resume;
    c.noreply = false;
    long eol = find_line(s, in, len);

    s->resume = 0; /* only cmd_get sets it again */

    if (eol == LINE_INCOMPLETE)
        return 0;
    if (eol == LINE_TOO_LONG) {
        proto_reply_err(s, out, PERR_LINE_TOO_LONG);
        return PROTO_CLOSE;
    }
    c.len = (size_t)eol;
    if (c.len > 0 && in[c.len - 1] == '\r')
        c.len--;
    c.line_bytes = (size_t)eol + 1;
    c.rest = in + c.line_bytes;
    c.rest_len = len - c.line_bytes;
    ssize_t rc;
    if (likely(s->authed) && meta_line(&c, in, len, &rc))
        return rc;
    c.ntok = proto_tokenize(c.line, c.len, c.tok, PROTO_MAX_TOKENS);
    if (unlikely(!s->authed))
        return text_login(&c);
    return dispatch(&c, in, len);
}

/* Keys of a run of pipelined reads hinted to the engine at once. */
#define TEXT_PREFETCH_MAX 16

/* The (first) key of a read line ("get k", "gets k", "mg k ...", "gat
 * exptime k", "gats exptime k"), or false. A hint only: a line the parser later
 * refuses costs nothing but its prefetch. */
static bool
read_line_key(const char *line, size_t n, struct tc_key *k)
{
    size_t skip;
    bool touch = false; /* gat, gats: the key follows the exptime */
    if (n > 4 && memcmp(line, "get ", 4) == 0) {
        skip = 4;
    } else if (n > 5 && memcmp(line, "gets ", 5) == 0) {
        skip = 5;
    } else if (n > 3 && memcmp(line, "mg ", 3) == 0) {
        skip = 3;
    } else if (n > 4 && memcmp(line, "gat ", 4) == 0) {
        skip = 4;
        touch = true;
    } else if (n > 5 && memcmp(line, "gats ", 5) == 0) {
        skip = 5;
        touch = true;
    } else {
        return false;
    }
    const char *p = line + skip, *e = line + n;
    if (e > p && e[-1] == '\r')
        e--;
    if (touch) {
        const char *ex = memchr(p, ' ', (size_t)(e - p));
        if (!ex)
            return false;
        p = ex + 1;
    }
    const char *sp = memchr(p, ' ', (size_t)(e - p));
    size_t kl = (size_t)((sp ? sp : e) - p);
    if (kl == 0 || kl > TC_KEY_MAX)
        return false;
    *k = (struct tc_key){p, kl};
    return true;
}

/* The key of a "set k ..." or "ms k ..." line: the store looks up its
 * bucket and the item it replaces as a get does. */
static bool
set_line_key(const char *line, size_t n, struct tc_key *k)
{
    size_t skip;
    if (n > 4 && memcmp(line, "set ", 4) == 0)
        skip = 4;
    else if (n > 3 && memcmp(line, "ms ", 3) == 0)
        skip = 3;
    else
        return false;
    const char *p = line + skip, *e = line + n;
    const char *sp = memchr(p, ' ', (size_t)(e - p));
    size_t kl = (size_t)((sp ? sp : e) - p);
    if (kl == 0 || kl > TC_KEY_MAX)
        return false;
    *k = (struct tc_key){p, kl};
    return true;
}

bool
proto_text_read_key(const char *in, size_t len, struct tc_key *k)
{
    const char *nl =
        memchr(in, '\n', len < PROTO_LINE_MAX ? len : PROTO_LINE_MAX);
    return nl && (read_line_key(in, (size_t)(nl - in), k) ||
                  set_line_key(in, (size_t)(nl - in), k));
}

/* Pipelined reads: when the buffer holds two or more complete get, gets,
 * gat, gats or mg lines in a row, hand their (first) keys to tc_prefetch before
 * running them, so their index and item misses overlap instead of coming
 * one request at a time. The replies are untouched: each request still
 * runs on its own. Returns how far the run reaches (0: no read line). */
static size_t
prefetch_reads(struct proto_sess *s, const char *in, size_t len)
{
    struct tc_key keys[TEXT_PREFETCH_MAX];
    size_t n = 0, pos = 0;
    while (n < TEXT_PREFETCH_MAX && pos < len) {
        const char *nl = memchr(in + pos, '\n', len - pos);
        if (n == 0 && nl == in + len - 1)
            return 0; /* one line in the buffer (depth 1): no run to hint */
        if (!nl || !read_line_key(in + pos, (size_t)(nl - in - pos), &keys[n]))
            break;
        n++;
        pos = (size_t)(nl - in) + 1;
    }
    if (n >= 2 && s->cache)
        tc_prefetch(s->cache, keys, n);
    return pos;
}

ssize_t
proto_text_process(struct proto_sess *s, const char *in, size_t len,
                   struct obuf *out)
{
    size_t pos = 0, hinted = 0;

    s->need = 0;
    if (s->watch)
        return (ssize_t)len; /* a watcher's input is ignored */
    while (pos < len) {
        if (s->swallow) {
            size_t n = s->swallow < len - pos ? (size_t)s->swallow : len - pos;
            s->swallow -= n;
            pos += n;
            continue;
        }
        if (pos > 0 && obuf_pending(out) >= TEXT_OUT_YIELD)
            break;
        if (s->budget == 0)
            break; /* -R: the connection yields to the others */
        if (pos >= hinted && !s->resume && s->authed)
            hinted = pos + prefetch_reads(s, in + pos, len - pos);
        ssize_t n = text_one(s, in + pos, len - pos, out);
        if (n == 0)
            break;
        s->ctr.cmd_total++;
        if (s->budget != UINT32_MAX && !s->resume)
            s->budget--;
        if (n == PROTO_CLOSE || out->err)
            return PROTO_CLOSE;
        pos += (size_t)n;
    }
    return (ssize_t)pos;
}

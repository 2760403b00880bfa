/*
 * The classic text protocol's server commands (the rest of the protocol
 * is proto_text.c, which dispatches to these through its table): flush_all,
 * version, quit, verbosity, cache_memlimit, shutdown, refresh_certs, stats
 * (its groups come from the server's op; sizes and cachedump from
 * proto_admin.c), watch (proto_watch.c), slabs and lru_crawler
 * (proto_admin.c), and hotspot, tiercache's write-hotspot dump and reset
 * (doc/hotspots.md). Replies follow memcached 1.6 byte for byte, noreply
 * included, as the rules at the top of proto_text.c say.
 *
 * Concurrency: as proto_text.c: a session belongs to one connection, used
 * by its worker thread only; the engine calls are thread-safe
 * (src/tiercache.h).
 */

#include "src/server/proto/proto_text_int.h"

#include "src/server/proto/proto_admin.h"
#include "src/server/proto/proto_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* memcached's cache_memlimit bounds, in MiB. */
#define TEXT_MEMLIMIT_MIN 8
#define TEXT_MEMLIMIT_MAX 1000000000u
#define TEXT_GROUP_MAX 64

/* The prefix of hotspot dump's file error (the path and the reason follow;
 * the fixed replies are in proto_util.c's table). */
#define TEXT_HOTSPOT_CANNOT_FMT "SERVER_ERROR cannot write %s: %s"

/* "flush_all [delay] [noreply]"; a delay follows the exptime rules. */
ssize_t
proto_text_flush_all(struct text_cmd *c, int arg)
{
    int64_t delay = 0;
    (void)arg;

    take_noreply(c);
    if (c->s->no_flush) { /* -F; noreply still silences it, as memcached */
        reply_err(c, PERR_FLUSH_DISABLED);
        return (ssize_t)c->line_bytes;
    }
    if (c->ntok != (c->noreply ? 2 : 1) &&
        !proto_parse_i64(&c->tok[1], &delay)) {
        reply_err(c, PERR_INVALID_EXPTIME);
        return (ssize_t)c->line_bytes;
    }
    tc_flush_all(c->s->cache, delay);
    reply(c, "OK");
    return (ssize_t)c->line_bytes;
}

ssize_t
proto_text_version(struct text_cmd *c, int arg)
{
    (void)arg;
    reply(c, "VERSION " TC_VERSION);
    return (ssize_t)c->line_bytes;
}

ssize_t
proto_text_quit(struct text_cmd *c, int arg)
{
    (void)c;
    (void)arg;
    return PROTO_CLOSE;
}

ssize_t
proto_text_verbosity(struct text_cmd *c, int arg)
{
    uint32_t level;
    (void)arg;

    take_noreply(c);
    if (!proto_parse_u32(&c->tok[1], &level)) {
        reply_err(c, PERR_BAD_FORMAT);
        return (ssize_t)c->line_bytes;
    }
    if (c->s->ops && c->s->ops->verbosity)
        c->s->ops->verbosity(c->s->srv, (int)(level > 2 ? 2 : level));
    reply(c, "OK");
    return (ssize_t)c->line_bytes;
}

/* The server's op, or with no server the engine directly. -EBUSY is a
 * shrink that could not empty every page above the new limit at once: the
 * limit already holds for allocations and the maintenance step finishes
 * the shrink, so it is accepted (memcached too replies OK at once). */
static int
set_memlimit(struct proto_sess *s, uint64_t mib)
{
    int rc;
    if (s->ops && s->ops->memlimit)
        rc = s->ops->memlimit(s->srv, mib);
    else
        rc = tc_set_mem_limit(s->cache, mib << 20);
    return rc == -EBUSY ? 0 : rc;
}

ssize_t
proto_text_memlimit(struct text_cmd *c, int arg)
{
    uint32_t mib;
    (void)arg;

    take_noreply(c);
    if (!proto_parse_u32(&c->tok[1], &mib))
        reply_err(c, PERR_ERROR);
    else if (mib < TEXT_MEMLIMIT_MIN)
        reply_err(c, PERR_MEMLIMIT_SMALL);
    else if (mib > TEXT_MEMLIMIT_MAX)
        reply_err(c, PERR_MEMLIMIT_UNITS);
    else if (set_memlimit(c->s, mib) != 0)
        reply_err(c, PERR_MEMLIMIT_FAILED);
    else
        reply(c, "OK");
    return (ssize_t)c->line_bytes;
}

/* "shutdown [graceful]". The server op cannot be asked whether shutdown is
 * enabled without shutting down, so a bad mode is refused first (memcached
 * says "not enabled" first). Success closes without a reply, as
 * memcached's does. */
ssize_t
proto_text_shutdown(struct text_cmd *c, int arg)
{
    (void)arg;
    if (c->ntok > 2 ||
        (c->ntok == 2 && !proto_tok_is(&c->tok[1], "graceful"))) {
        reply_err(c, PERR_SHUTDOWN_MODE);
        return (ssize_t)c->line_bytes;
    }
    if (c->s->ops && c->s->ops->shutdown && c->s->ops->shutdown(c->s->srv) == 0)
        return PROTO_CLOSE;
    reply_err(c, PERR_NO_SHUTDOWN);
    return (ssize_t)c->line_bytes;
}

/* "refresh_certs [noreply]": the TLS certificates loaded again (any
 * further tokens are ignored, as memcached does). */
ssize_t
proto_text_refresh_certs(struct text_cmd *c, int arg)
{
    char msg[1024];
    (void)arg;

    take_noreply(c);
    snprintf(msg, sizeof(msg), "Error TLS not enabled"); /* no server */
    if (!c->s->ops || !c->s->ops->refresh_certs ||
        c->s->ops->refresh_certs(c->s->srv, msg, sizeof(msg)) != 0)
        reply(c, msg);
    else
        reply(c, "OK");
    return (ssize_t)c->line_bytes;
}

/* "stats detail on|off|dump": tiercache keeps no per-prefix stats, so it
 * answers as memcached does with detail off (an empty dump). */
static void
stats_detail(struct text_cmd *c)
{
    if (c->ntok >= 3 &&
        (proto_tok_is(&c->tok[2], "on") || proto_tok_is(&c->tok[2], "off")))
        reply(c, "OK");
    else if (c->ntok >= 3 && proto_tok_is(&c->tok[2], "dump"))
        reply(c, "END");
    else
        reply_err(c, PERR_DETAIL_USAGE);
}

/* A stats group from the server's op, then "END"; an unknown group is
 * "ERROR" with whatever the op appended taken back. */
static void
stats_group(struct text_cmd *c, const struct proto_token *t)
{
    char group[TEXT_GROUP_MAX];
    size_t mark = obuf_pending(c->out);
    int rc = -ENOENT;

    if (t->n < sizeof(group)) {
        memcpy(group, t->p, t->n);
        group[t->n] = '\0';
        if (c->s->ops && c->s->ops->stats)
            rc = c->s->ops->stats(c->s->srv, c->s, group, c->out);
    }
    if (c->out->err)
        return;
    if (rc == 0) {
        obuf_add(c->out, "END\r\n", 5);
        return;
    }
    c->out->len = c->out->head + mark; /* obuf may have compacted */
    proto_reply_err(c->s, c->out, PERR_ERROR);
}

/* A dump (stats cachedump, lru_crawler metadump) that stopped after a
 * slice of output is called again on the same line, as a get of many keys
 * is: resume marks it, the cursor is in the session. */
static ssize_t
admin_walk_done(struct text_cmd *c, bool done)
{
    if (done)
        return (ssize_t)c->line_bytes;
    c->s->resume = 1;
    return 0;
}

/* "watch [kinds]": the connection becomes a log stream; what it sends
 * afterwards is read and ignored, as memcached does. */
ssize_t
proto_text_watch(struct text_cmd *c, int arg)
{
    (void)arg;
    if (c->s->no_watch) {
        proto_reply_err(c->s, c->out, PERR_NO_WATCH);
        return (ssize_t)c->line_bytes;
    }
    proto_watch_start(c->s, c->out, c->tok, c->ntok);
    return (ssize_t)c->line_bytes;
}

ssize_t
proto_text_slabs(struct text_cmd *c, int arg)
{
    (void)arg;
    proto_admin_slabs(c->s, c->out, c->tok, c->ntok);
    return (ssize_t)c->line_bytes;
}

ssize_t
proto_text_lru_crawler(struct text_cmd *c, int arg)
{
    (void)arg;
    return admin_walk_done(
        c, proto_admin_lru_crawler(c->s, c->out, c->tok, c->ntok, c->resume));
}

ssize_t
proto_text_stats(struct text_cmd *c, int arg)
{
    static const struct proto_token general = {"", 0};
    (void)arg;

    if (c->ntok == 1) {
        stats_group(c, &general);
    } else if (proto_tok_is(&c->tok[1], "reset")) {
        if (c->s->ops && c->s->ops->stats_reset)
            c->s->ops->stats_reset(c->s->srv);
        else
            tc_stats_reset(c->s->cache);
        reply(c, "RESET");
    } else if (proto_tok_is(&c->tok[1], "detail")) {
        stats_detail(c);
    } else if (proto_tok_is(&c->tok[1], "sizes") ||
               proto_tok_is(&c->tok[1], "sizes_enable") ||
               proto_tok_is(&c->tok[1], "sizes_disable")) {
        proto_admin_sizes(c->s, c->out, &c->tok[1]);
    } else if (proto_tok_is(&c->tok[1], "cachedump")) {
        return admin_walk_done(
            c, proto_admin_cachedump(c->s, c->out, c->tok, c->ntok, c->resume));
    } else {
        stats_group(c, &c->tok[1]);
    }
    return (ssize_t)c->line_bytes;
}

/* ---- hotspot (write-hotspot tracker; doc/hotspots.md) ------------------ */

/* The CSV over the connection, each line ended by "\r\n", then "END". */
static void
hotspot_dump_inline(struct text_cmd *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc = f ? tc_hotspot_dump(c->s->cache, f) : -ENOMEM;

    if (f && fclose(f) != 0 && rc == 0)
        rc = -ENOMEM;
    if (rc == -ENOTSUP) {
        reply_err(c, PERR_HOTSPOT_OFF);
    } else if (rc != 0) {
        reply_err(c, PERR_NOMEM);
    } else {
        for (size_t at = 0; at < len;) {
            const char *nl = memchr(buf + at, '\n', len - at);
            size_t n = nl ? (size_t)(nl - (buf + at)) : len - at;
            obuf_add(c->out, buf + at, n);
            obuf_add(c->out, "\r\n", 2);
            at += n + 1;
        }
        reply(c, "END");
    }
    free(buf);
}

/* The CSV into a new file (never an existing one: any client may send this,
 * so it must not be able to overwrite what the server's user can write):
 * "OK" or "SERVER_ERROR <reason>". */
static void
hotspot_dump_file(struct text_cmd *c, const struct proto_token *t)
{
    char path[PATH_MAX];
    char msg[PATH_MAX + 128];
    struct tc_hotspot h;

    tc_hotspot_get(c->s->cache, &h);
    if (h.dimms == 0) {
        reply_err(c, PERR_HOTSPOT_OFF);
        return;
    }
    if (t->n >= sizeof(path)) {
        reply_err(c, PERR_PATH_TOO_LONG);
        return;
    }
    memcpy(path, t->p, t->n);
    path[t->n] = '\0';
    int fd =
        open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        int open_err = errno;
        if (fd >= 0)
            close(fd);
        snprintf(msg, sizeof(msg), TEXT_HOTSPOT_CANNOT_FMT, path,
                 strerror(open_err));
        reply(c, msg);
        return;
    }
    int rc = tc_hotspot_dump(c->s->cache, f);
    int err = errno;
    if (fclose(f) != 0 && rc == 0) {
        rc = -EIO;
        err = errno;
    }
    if (rc != 0) {
        snprintf(msg, sizeof(msg), TEXT_HOTSPOT_CANNOT_FMT, path,
                 strerror(err));
        reply(c, msg);
        return;
    }
    reply(c, "OK");
}

/* "hotspot dump [path]", "hotspot reset". */
ssize_t
proto_text_hotspot(struct text_cmd *c, int arg)
{
    (void)arg;
    if (proto_tok_is(&c->tok[1], "dump") && c->ntok == 2) {
        hotspot_dump_inline(c);
    } else if (proto_tok_is(&c->tok[1], "dump") && c->ntok == 3) {
        hotspot_dump_file(c, &c->tok[2]);
    } else if (proto_tok_is(&c->tok[1], "reset") && c->ntok == 2) {
        if (tc_hotspot_reset(c->s->cache) == 0)
            reply(c, "RESET");
        else
            reply_err(c, PERR_HOTSPOT_OFF);
    } else {
        reply_err(c, PERR_HOTSPOT_USAGE);
    }
    return (ssize_t)c->line_bytes;
}

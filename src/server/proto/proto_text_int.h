#pragma once
/*
 * Internals of the classic text protocol shared by
 * src/server/proto/proto_text.c (lines, dispatch, the key commands, the -Y
 * login) and src/server/proto/proto_text_server.c (the server commands:
 * flush_all, version, quit, verbosity, cache_memlimit, shutdown,
 * refresh_certs, stats, watch, slabs, lru_crawler, hotspot). Not for use
 * outside these two files. The rules both follow (replies, noreply,
 * counters, concurrency) are at the top of proto_text.c.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "src/server/obuf.h"
#include "src/server/proto/proto.h"
#include "src/server/proto/proto_util.h"

/* One command line being executed. */
struct text_cmd {
    struct proto_sess *s;
    struct obuf *out;
    const char *line; /* without "\r\n" */
    size_t len;
    size_t line_bytes; /* with its line end */
    const char *rest;  /* what follows the line (a data block) */
    size_t rest_len;
    struct proto_token tok[PROTO_MAX_TOKENS];
    int ntok; /* PROTO_MAX_TOKENS + 1 when there are more */
    bool noreply;
    size_t resume; /* s->resume as the call found it: a get's next key */
};

typedef ssize_t text_cmd_fn(struct text_cmd *c, int arg);

/* Replies, all silenced by noreply (take_noreply sets it). */
static inline void
reply(struct text_cmd *c, const char *text)
{
    if (c->noreply)
        return;
    obuf_add(c->out, text, strlen(text)); /* a literal: strlen folds */
    obuf_add(c->out, "\r\n", 2);
}

static inline void
reply_err(struct text_cmd *c, enum proto_err e)
{
    if (!c->noreply)
        proto_reply_err(c->s, c->out, e);
}

/* memcached's set_noreply_maybe: the last token. */
static inline void
take_noreply(struct text_cmd *c)
{
    c->noreply = c->ntok > 0 && c->ntok <= PROTO_MAX_TOKENS &&
                 proto_tok_is(&c->tok[c->ntok - 1], "noreply");
}

/* The server commands (proto_text_server.c), each a text_cmd_fn that
 * proto_text.c's table of commands dispatches to once the token count is
 * within the command's bounds: the bytes consumed (c->line_bytes), 0 to be
 * called again on the same line (a dump that stopped after a slice), or
 * PROTO_CLOSE. */
ssize_t proto_text_flush_all(struct text_cmd *c, int arg);
ssize_t proto_text_version(struct text_cmd *c, int arg);
ssize_t proto_text_quit(struct text_cmd *c, int arg);
ssize_t proto_text_verbosity(struct text_cmd *c, int arg);
ssize_t proto_text_memlimit(struct text_cmd *c, int arg);
ssize_t proto_text_shutdown(struct text_cmd *c, int arg);
ssize_t proto_text_refresh_certs(struct text_cmd *c, int arg);
ssize_t proto_text_watch(struct text_cmd *c, int arg);
ssize_t proto_text_slabs(struct text_cmd *c, int arg);
ssize_t proto_text_lru_crawler(struct text_cmd *c, int arg);
ssize_t proto_text_stats(struct text_cmd *c, int arg);
ssize_t proto_text_hotspot(struct text_cmd *c, int arg);

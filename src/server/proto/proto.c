/*
 * The protocol entry point (src/server/proto/proto.h): a session's life,
 * discarding a refused value (s->swallow) and choosing text or binary on the
 * first byte of the connection, as memcached does (0x80 is the binary request
 * magic).
 *
 * Concurrency: a proto_sess belongs to one connection and is used by its
 * worker thread only; nothing here is shared.
 */

#include "src/server/proto/proto.h"

#include "src/server/auth.h"
#include "src/server/proto/proto_watch.h"

#include <stdlib.h>
#include <string.h>

#define PROTO_BIN_MAGIC 0x80

void
proto_sess_init(struct proto_sess *s, struct tc_cache *cache,
                const struct proto_server_ops *ops, void *srv,
                uint32_t item_size_max)
{
    memset(s, 0, sizeof(*s));
    s->cache = cache;
    s->ops = ops;
    s->srv = srv;
    s->item_size_max = item_size_max ? item_size_max : TC_ITEM_SIZE_MAX_DEFAULT;
    s->fd = -1;
    s->budget = UINT32_MAX;
    s->authed = true; /* the server turns it off under -Y and -S */
}

void
proto_sess_fini(struct proto_sess *s)
{
    free(s->priv);
    s->priv = NULL;
    proto_watch_stop(s);
    if (s->sasl_x) {
        auth_sasl_free(s->auth, s->sasl_x);
        s->sasl_x = NULL;
    }
}

/* Drop up to len bytes still owed to a refused value; returns how many. */
static size_t
swallow(struct proto_sess *s, size_t len)
{
    size_t n = s->swallow < len ? (size_t)s->swallow : len;
    s->swallow -= n;
    return n;
}

/* The first byte of the connection decides, once: later bytes never
 * switch a text connection to binary (memcached answers ERROR there).
 * Under -B ascii or -B binary the flag decides, as in memcached. */
static void
choose_protocol(struct proto_sess *s, const char *in)
{
    if (s->chosen)
        return;
    if (s->binding == PROTO_BIND_AUTO)
        s->binary = (unsigned char)in[0] == PROTO_BIN_MAGIC;
    else
        s->binary = s->binding == PROTO_BIND_BINARY;
    s->chosen = true;
}

bool
proto_read_key(const struct proto_sess *s, const char *in, size_t len,
               struct tc_key *k)
{
    /* the session's first bytes (protocol not chosen), binary, a value
     * being swallowed, a get half-way, a watcher, before a login: none */
    if (!s->chosen || s->binary || s->swallow || s->resume || s->watch ||
        !s->authed || len == 0)
        return false;
    return proto_text_read_key(in, len, k);
}

ssize_t
proto_process(struct proto_sess *s, const char *in, size_t len,
              struct obuf *out)
{
    s->need = 0;
    size_t skipped = swallow(s, len);
    if (skipped == len)
        return (ssize_t)skipped;
    in += skipped;
    len -= skipped;
    choose_protocol(s, in);
    ssize_t rc = s->binary ? proto_bin_process(s, in, len, out)
                           : proto_text_process(s, in, len, out);
    if (rc == PROTO_CLOSE)
        return rc;
    return rc + (ssize_t)skipped;
}

#pragma once
/*
 * memcached's "watch" log stream (src/server/proto/proto_watch.c): a
 * connection that sent "watch [kinds]" receives one line per event of
 * those kinds that any connection causes, in memcached's format:
 *
 *   ts=<unix.usec> gid=<n> type=item_get key=<URL-encoded>
 * status=found|not_found clsid=<class> cfd=<fd> size=<value bytes>
 *   ts=<unix.usec> gid=<n> type=item_store key=<k> status=stored|not_stored
 *       |exists|not_found cmd=<set|add|...> ttl=<exptime> clsid=<class>
 *       cfd=<fd> size=<value bytes>
 *
 * Events are queued per watcher and the watcher's worker moves them into
 * its output once a second (conn.c's sweep), so lines arrive within about
 * a second. A watcher whose queue holds PROTO_WATCH_QUEUE_MAX bytes drops
 * further lines until it drains (counted, not reported).
 *
 * Concurrency: the watcher list and every queue are under one mutex;
 * proto_watch_active() is a relaxed load that spares the emitters the lock
 * when nobody watches.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/server/obuf.h"

struct proto_sess;

#define PROTO_WATCH_QUEUE_MAX (1u << 20)

enum proto_watch_kind {
    PROTO_WATCH_FETCHERS = 1u << 0,
    PROTO_WATCH_MUTATIONS = 1u << 1,
    PROTO_WATCH_OTHER = 1u << 2, /* accepted kinds tiercache logs nothing of */
};

/* "watch [kinds]": OK and the session becomes a watcher, or ERROR for an
 * unknown kind. tok[0] is "watch". */
struct proto_token;
void proto_watch_start(struct proto_sess *s, struct obuf *out,
                       const struct proto_token *tok, int ntok);
/* Leave the watcher list (proto_sess_fini). */
void proto_watch_stop(struct proto_sess *s);
/* Move the session's queued lines into out. Context: its worker. */
void proto_watch_flush(struct proto_sess *s, struct obuf *out);

/* Anyone watching? */
bool proto_watch_active(void);
/* Log an event (proto_watch_active() first, to skip building it). */
void proto_watch_get(const struct proto_sess *s, const char *key, size_t klen,
                     bool found, unsigned cls, uint32_t vlen);
/* cmd: the command's name (cmdlen bytes); the class is the one an item of
 * this size goes to. */
void proto_watch_store(const struct proto_sess *s, const char *key, size_t klen,
                       const char *cmd, size_t cmdlen, const char *status,
                       int64_t ttl, uint64_t vlen);

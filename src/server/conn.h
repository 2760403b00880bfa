#pragma once
/*
 * One client connection: a non-blocking socket, an input buffer that grows
 * on demand, a proto_sess and an obuf. A worker thread's event loop calls
 * conn_event() when epoll reports the socket; the connection reads what is
 * there, runs the protocol over it, and writes the replies out in as few
 * send() calls as it can (one for a whole pipelined batch).
 *
 * Life: the acceptor creates it (conn_create), hands it to a worker, which
 * adopts it (conn_attach) and from then on is its only user; it ends in
 * conn_destroy() on the worker (or on the acceptor/worker that still holds
 * it unattached at shutdown).
 *
 * Concurrency: a connection belongs to one thread at a time (hand-off
 * through the worker's locked queue). struct conn_list is read by other
 * workers for "stats conns", under its lock; see conn.c.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/server/proto/proto.h"
#include "src/server/stats.h"

#define CONN_ADDR_MAX 128

struct conn;
struct tls_conn;

/* What every connection of a server shares; set up before any connection
 * exists and read-only afterwards (curr_conns points at a counter). */
struct conn_shared {
    struct tc_cache *cache;
    const struct proto_server_ops *ops;
    void *srv;
    uint32_t item_size_max; /* -I */
    size_t in_max;          /* input buffer limit: item_size_max +
                               PROTO_LINE_MAX + 2 */
    size_t out_high;        /* stop reading while more output is pending */
    uint32_t max_reqs;      /* -R: requests per wake-up, then yield */
    uint32_t idle_timeout;  /* seconds, 0 = off */
    bool no_flush;          /* -F */
    bool no_cas;            /* -C */
    bool no_dump;           /* -X */
    bool no_watch;          /* -W */
    uint8_t binding;        /* -B: enum proto_binding */
    struct auth *auth;      /* -Y, -S (src/server/auth.h); NULL = none */
    bool sasl;              /* -S */
    uint64_t epoch_ns;      /* clock_nsec() at server start */
    _Atomic uint64_t *curr_conns; /* decremented when a connection ends */
};

/* A worker's connections. */
struct conn_list {
    pthread_mutex_t lock; /* guards head, prev/next links, n */
    struct conn *head;
    unsigned n;
};

/*
 * The socket I/O under a worker's connections when it is not epoll's
 * (src/server/netring.c, io_uring): the connection layer keeps parsing,
 * replies, back-pressure and state, and hands the engine only the moving
 * of bytes. Set on the worker before any connection attaches. Every hook
 * runs on the worker's thread; arg is the engine's.
 *
 *   attach  start receiving c's input: a slot number (>= 0) the other hooks
 *           get back, or a negative errno (the connection is destroyed).
 *           Input arrives through conn_input().
 *   send    queue a send of len bytes at buf: the bytes stay put (nothing
 *           is appended to the obuf) until conn_sent() reports it done.
 *           0 or a negative errno.
 *   watch   in: the connection wants input now (false: stop receiving,
 *           as epoll's EPOLLIN off); turn: give it another turn soon
 *           (conn_event(c, EPOLLOUT)), as a yield under -R asks.
 *   detach  the connection is ending (its fd closes after this returns);
 *           sendbuf, when not NULL, is the block a send in flight reads:
 *           the engine frees it once that send is over.
 */
struct conn_io {
    int (*attach)(void *arg, struct conn *c, int fd);
    int (*send)(void *arg, int slot, const void *buf, size_t len);
    void (*watch)(void *arg, int slot, bool in, bool turn);
    void (*detach)(void *arg, int slot, void *sendbuf);
    void *arg;
};

/* Per-worker context, owned by the worker thread. */
struct conn_worker {
    int epfd;
    const struct conn_io *io; /* NULL: epoll (conn_event) */
    struct conn_list list;
    struct stats_ctr *ctr; /* this worker's counters */
    const struct conn_shared *sh;
    uint32_t now;      /* conn_now() at the loop's last wake */
    bool async;        /* flash completions are watched: gets may pend */
    unsigned inflight; /* flash reads submitted and not yet reaped */
    bool submit_due;   /* flash reads queued since the last submit */
};

/* What "stats conns" shows of a connection (or a listener). */
struct conn_view {
    int fd;
    const char *addr;
    const char *listen_addr; /* NULL for a listener */
    const char *state;       /* memcached's names: conn_waiting, ... */
    uint32_t idle_secs;
};
typedef void conn_walk_fn(void *arg, const struct conn_view *v);

/* Seconds since the server started (monotonic). Context: any thread. */
uint32_t conn_now(const struct conn_shared *sh);

/* Build a connection for an accepted socket (non-blocking already).
 * listen_addr must outlive it. 0 or -ENOMEM; on failure fd is not closed.
 * Context: the acceptor. */
int conn_create(const struct conn_shared *sh, int fd, const char *listen_addr,
                struct conn **out);
/* Make c a TLS connection over tls (src/server/tls.h), which it owns from
 * then on. Before conn_attach(). Context: the acceptor. */
void conn_set_tls(struct conn *c, struct tls_conn *tls);
/* Register with the worker's epoll and list. 0 or a negative errno (then
 * the caller destroys it). Context: the adopting worker. */
int conn_attach(struct conn *c, struct conn_worker *w);
/* Close the socket and free everything. Context: the owner thread. */
void conn_destroy(struct conn *c);

/* Add a session's protocol counters into a worker's and zero them.
 * Context: ctr's worker. */
void conn_fold_counters(struct proto_counters *p, struct stats_ctr *ctr);

/* Handle epoll events; may destroy c. Context: c's worker. */
void conn_event(struct conn *c, uint32_t events);
/* Before the conn_event() calls of one epoll wake-up: the first read of a
 * connection whose event is input only, so that the wake-up's requests
 * can be hinted to the engine together (conn_prefetch_inputs); its
 * conn_event(), which must follow in the same wake-up, goes on from that
 * read. True when input came. Context: c's worker. */
bool conn_preread(struct conn *c, uint32_t events);

/* With a conn_io engine: n bytes of c's input arrived (n == 0: the peer
 * closed; err: the socket failed); they are kept until conn_input_done(),
 * which runs what is complete and writes the replies out (once for all
 * the input one wake-up brought), and may destroy c. Context: c's
 * worker. */
void conn_input(struct conn *c, const void *p, size_t n, bool err);
void conn_input_done(struct conn *c);
/* Before the conn_input_done() calls of one batch of completions (or the
 * conn_event() calls of one epoll wake-up): the engine is told the key
 * each connection's first request looks up (a get, gets, gat, gats, mg,
 * set or ms at the front of its input), so that the index and item misses
 * of the batch overlap instead of coming one connection at a time. A hint
 * only: nothing runs, nothing is counted. */
void conn_prefetch_inputs(struct conn *const *cs, size_t n);
/* With a conn_io engine: the send queued through io->send ended with res
 * (bytes sent, or a negative errno). Sends what follows, runs held
 * requests; may destroy c. Context: c's worker. */
void conn_sent(struct conn *c, int res);

/* Submit the flash reads the connections queued since the last call: one
 * io_uring_submit for everything one epoll wake-up ran. Context: w's
 * worker, after handling the wake-up's events. */
void conn_async_submit(struct conn_worker *w);

/* The worker's flash reads finished (its ring's eventfd is readable): fill
 * the connections' holes and resume them. Context: w's worker. */
void conn_async_reap(struct conn_worker *w);

/* Close connections idle longer than sh->idle_timeout, and send each
 * "watch" connection the log lines queued since the last sweep. Called
 * once a second. Context: w's worker. */
void conn_sweep_idle(struct conn_worker *w);
/* Destroy every connection of w (shutdown). Context: w's worker. */
void conn_close_all(struct conn_worker *w);

int conn_list_init(struct conn_list *l);
void conn_list_fini(struct conn_list *l);
/* Call fn for each connection of l. Locks: takes l->lock. Context: any. */
void conn_list_walk(struct conn_list *l, uint32_t now, conn_walk_fn *fn,
                    void *arg);

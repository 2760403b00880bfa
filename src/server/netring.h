#pragma once
/*
 * A worker's event loop on io_uring (-o net_engine=uring), beside the epoll
 * loop of src/server/worker.c: one ring per worker, a multishot recv per
 * connection into a ring of provided buffers, the sends of one loop turn
 * submitted together with the wait for the next completions (one
 * io_uring_enter), the worker's flash reads (netring_flash: their SQEs
 * and completions on the same ring), and one-shot polls for the worker's
 * other descriptors (its wake-up eventfd, the UDP sockets; the flash
 * tier's eventfd where its reads cannot use the ring). The connections'
 * parsing, replies and state stay in src/server/conn.c, which sees this file
 * only as a struct conn_io.
 *
 * The acceptor may use a ring too (struct netring_acc): multishot accepts
 * on the listening sockets.
 *
 * Concurrency: a struct netring belongs to the worker thread that created
 * it (the ring is set up for a single issuer), a struct netring_acc to the
 * acceptor; nothing in either is shared.
 */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct conn_worker;
struct netring;

/* Called with a watched descriptor readable. Context: the ring's worker. */
typedef void netring_fn(void *arg, int fd);

/* Whether this kernel (and its seccomp filter) gives the network ring what
 * it needs: a ring, a provided-buffer ring, a multishot recv that keeps
 * going. 0, or a negative errno with a sentence in err_msg(). Context:
 * any thread, once at start. */
int netring_probe(void);

/* Set up w's ring and buffers and make it w's conn_io. 0, or a negative
 * errno with a sentence in err_msg() (w is left on epoll). Context: the
 * worker thread that will run it, before any connection attaches. */
int netring_create(struct conn_worker *w, struct netring **out);

/* Call fn(arg, fd) whenever fd is readable (level-triggered: again while
 * it stays so). 0, -ENOSPC past the table, -EBUSY when the ring is full.
 * Context: the ring's worker. */
int netring_watch(struct netring *nr, int fd, netring_fn *fn, void *arg);
/* The worker's flash reads on this ring (tc_async_ring): submitted by the
 * loop's enter, their completions among the others, the store's files
 * registered with it; netring_destroy waits for their I/O. 0, or
 * tc_async_ring's negative errno (the worker then watches the store's
 * eventfd instead). Context: the ring's worker, before connections. */
int netring_flash(struct netring *nr);

/* Run the loop until *stop is true (checked after every wake-up; whoever
 * sets it also makes a watched descriptor readable). Context: the ring's
 * worker. */
void netring_run(struct netring *nr, _Atomic bool *stop);

/* Free the ring; its connections must be gone (conn_close_all). NULL is a
 * no-op. Context: the ring's worker. */
void netring_destroy(struct netring *nr);

/*
 * The acceptor's ring (net_engine=uring): a multishot accept on each
 * listening socket and one-shot polls on other descriptors, reported as
 * events the caller handles (server.c, the acceptor). One thread only.
 */
struct netring_acc;

struct netring_ev {
    uint32_t tag; /* as given to netring_acc_listen / _watch */
    int res;      /* accept: the new socket (non-blocking, close-on-exec)
                     or a negative errno; watch: 0, readable */
};

/* 0, or a negative errno with a sentence in err_msg(). */
int netring_acc_create(struct netring_acc **out);
/* Accept on listening socket fd until an error that netring_acc_wait()
 * reports and does not re-arm: EMFILE, ENFILE, ENOBUFS, ENOMEM (the caller
 * pauses, then calls this again). 0 or a negative errno. */
int netring_acc_listen(struct netring_acc *a, int fd, uint32_t tag);
/* Report fd each time netring_acc_wait() finds it readable. */
int netring_acc_watch(struct netring_acc *a, int fd, uint32_t tag);
/* Submit, wait up to timeout_ms (-1: no limit) for events, store up to
 * max: their number (0 on timeout), or a negative errno. */
int netring_acc_wait(struct netring_acc *a, struct netring_ev *ev, int max,
                     int timeout_ms);
/* Stop accepting and free; sockets accepted and not yet reported are
 * closed. NULL is a no-op. */
void netring_acc_destroy(struct netring_acc *a);

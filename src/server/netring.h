#pragma once
/*
 * A worker's event loop on io_uring (-o net_engine=uring), beside the epoll
 * loop of src/server/server.c: one ring per worker, a multishot recv per
 * connection into a ring of provided buffers, the sends of one loop turn
 * submitted together with the wait for the next completions (one
 * io_uring_enter), and one-shot polls for the worker's other descriptors
 * (its wake-up eventfd, the flash tier's completion eventfd, the UDP
 * sockets). The connections' parsing, replies and state stay in
 * src/server/conn.c, which sees this file only as a struct conn_io.
 *
 * Concurrency: a struct netring belongs to the worker thread that created
 * it (the ring is set up for a single issuer); nothing in it is shared.
 */

#include <stdatomic.h>
#include <stdbool.h>

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

/* Run the loop until *stop is true (checked after every wake-up; whoever
 * sets it also makes a watched descriptor readable). Context: the ring's
 * worker. */
void netring_run(struct netring *nr, _Atomic bool *stop);

/* Free the ring; its connections must be gone (conn_close_all). NULL is a
 * no-op. Context: the ring's worker. */
void netring_destroy(struct netring *nr);

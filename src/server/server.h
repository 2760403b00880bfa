#pragma once
/*
 * tiercached's network side: the listening sockets, an acceptor (the thread
 * that calls server_run) and N worker threads, each with its own epoll loop
 * over its connections. See server.c for the design and its reasons.
 *
 * Concurrency: server_create/run/destroy belong to one thread (main).
 * server_stop() may be called from any thread while server_run() is
 * running.
 */

#include <stdbool.h>
#include <stdint.h>

#include "src/server/settings.h"
#include "src/tiercache.h"

struct server;

/* Bind the listeners (TCP on each -l address, the -s unix socket) and set up
 * the workers' event loops. 0, or a negative errno with one sentence in
 * err_msg(). SIGINT and SIGTERM must be blocked in every thread (main blocks
 * them before starting any): the acceptor receives them through a signalfd.
 * st must outlive the server. */
int server_create(const struct settings *st, struct tc_cache *cache,
                  struct server **out);

/* Start the workers, accept on the calling thread until SIGINT, SIGTERM or
 * the shutdown command, then stop accepting, close every connection and
 * join the workers. 0, or a negative errno with a sentence in err_msg(). */
int server_run(struct server *srv);

/* Ask server_run() to return. Context: any thread. */
void server_stop(struct server *srv);

/* Close the listeners (removing the unix socket file) and free. NULL is a
 * no-op. */
void server_destroy(struct server *srv);

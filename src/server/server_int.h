#pragma once
/*
 * Internals of tiercached's network side shared by src/server/server.c
 * (the acceptor, creating and destroying the server, its ops and stats
 * hooks) and src/server/worker.c (the worker threads). Not for use outside
 * these two files. Who may touch which field, and under which lock, is at
 * the top of server.c (the workers' part also at the top of worker.c).
 */

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "src/server/conn.h"
#include "src/server/listen.h"
#include "src/server/server.h"
#include "src/server/stats.h"
#include "src/server/udp.h"

struct worker {
    struct server *srv;
    pthread_t tid;
    bool running;
    int wake_fd;
    _Atomic bool stop;
    pthread_mutex_t qlock;
    struct conn **q;
    size_t qn, qcap;
    struct conn_worker cw;
    struct udp_worker *uw; /* with -U: its UDP buffers and session */
    struct stats_ctr ctr;
    int cpu; /* -o pin_workers: the one CPU it runs on; -1 = any */
};

struct server {
    const struct settings *st;
    struct tc_cache *cache;
    struct conn_shared sh;
    struct tls *tls; /* -Z; NULL without */
    struct listener ls[LISTEN_MAX];
    unsigned nls;
    int epfd;
    int stop_fd;
    int sig_fd;
    bool paused; /* listeners out of the epoll set (EMFILE) */
    uint64_t resume_ns;
    struct worker *workers;
    unsigned nworkers;
    unsigned rr;
    pthread_mutex_t quiet_lock; /* guards nstarted, nquiet */
    pthread_cond_t quiet_cond;
    unsigned nstarted; /* workers running (set once starting is over) */
    unsigned nquiet;   /* workers done with their connections */
    uint32_t started_unix;
    struct stats_ctr actr;
    struct stats_base base;
    _Atomic uint64_t curr_conns;
    _Atomic int verbosity;
    _Atomic uint64_t maxbytes_mib;
    _Atomic bool accepting;
};

/* Add one to the eventfd fd: wakes the thread that waits on it. */
static inline void
server_wake(int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

/* Set up w's event loop (its epoll set, its wake-up eventfd, with -U the
 * UDP sockets of srv->ls) before any worker starts: 0, or a negative errno
 * with one sentence in err_msg(); worker_fini undoes what was done. */
int worker_init(struct server *srv, struct worker *w);
/* Undo worker_init, after the worker's thread is joined (or never ran). */
void worker_fini(struct worker *w);
/* Hand c to worker w: 0, or -ENOMEM (c is still the caller's). Context:
 * the acceptor. */
int worker_push(struct worker *w, struct conn *c);
/* Start every worker thread (pinned to a CPU with pin_workers): 0, or a
 * negative errno with one sentence in err_msg() (the workers started so
 * far run until worker_stop_all). Context: server_run. */
int worker_start_all(struct server *srv);
/* Tell every worker to stop, wake it and join it. Context: server_run. */
void worker_stop_all(struct server *srv);

/*
 * tiercached's network side (src/server/server.h).
 *
 * Threads
 *   acceptor   the thread in server_run(): one epoll over the listening
 *              sockets, a signalfd (SIGINT, SIGTERM, SIGUSR1) and stop_fd (the
 *              shutdown command). It accepts, refuses connections over -c
 *              with memcached's "ERROR Too many open connections", builds
 *              the struct conn and hands it round-robin to a worker: a push
 *              on the worker's locked queue and a write to its eventfd.
 *              With net_engine=uring it waits on an io_uring instead, a
 *              multishot accept per listener (src/server/netring.c).
 *   workers    N threads (src/server/worker.c), each an epoll loop over its
 *              own non-blocking connections (src/server/conn.c), with a 1 s
 *              timeout for the idle sweep. With -U, every worker's loop
 *              also watches the UDP sockets (one per -l address) and
 *              answers the datagrams it reads itself (src/server/udp.c);
 *              the acceptor never sees them. Each registers with the cache
 *              on start (tc_thread_register) and unregisters at exit.
 *
 * Why epoll, one loop per worker, level-triggered: it is memcached's model
 * (libevent over epoll, a dispatcher thread handing sockets to worker
 * threads through a pipe), so a benchmark against memcached compares the
 * cache, not the I/O layer. With -o net_engine=uring each worker runs its
 * loop on an io_uring instead (src/server/netring.c) under the same
 * connection code; a worker whose ring cannot be set up says so once and
 * runs the epoll loop (the epoll set is built for every worker anyway).
 *
 * Shutdown: SIGINT/SIGTERM/SIGUSR1 (through the signalfd) or the shutdown
 * command (server_stop() writes stop_fd) end the acceptor's loop; it closes the
 * listeners, sets each worker's stop flag and wakes it; each worker
 * destroys its queued and live connections, waits until all the others
 * have too (no worker is then inside the engine), unregisters and exits;
 * the acceptor joins them. main() then closes the cache, which marks the pool
 * clean.
 *
 * Concurrency:
 *   srv->ls[], nls, st, sh, cache, epoch, w->cpu, tls
 *                                set before the workers start,
 *                                read-only afterwards (the UDP sockets
 *                                among ls[] are read by every worker and
 *                                closed only once they are joined; what
 *                                srv->tls points to has its own lock,
 *                                tls.h).
 *   w->qlock                     guards w->q, w->qn, w->qcap (acceptor
 *                                pushes, worker pops); also the hand-off
 *                                of each struct conn between the threads.
 *   w->stop                      _Atomic bool: the acceptor stores true with
 *                                release, the worker loads with acquire
 *                                (pairs: nothing else is published with
 *                                it; release/acquire keeps it simple to
 *                                reason about).
 *   w->cw                        owner worker only, except cw.list (its own
 *                                lock, see conn.c).
 *   w->ctr, srv->actr            one writer each (worker, acceptor); see
 *                                stats.h.
 *   srv->base                    its own lock (stats reset baseline).
 *   srv->nstarted, nquiet        srv->quiet_lock (the shutdown barrier
 *                                before workers unregister).
 *   srv->curr_conns              _Atomic, relaxed: incremented by the
 *                                acceptor, decremented by workers; a lone
 *                                count for -c (a stale read admits or
 *                                refuses one connection early or late).
 *   srv->verbosity, maxbytes_mib,
 *   srv->accepting               _Atomic, relaxed: lone settings read by
 *                                "stats" and written by commands.
 *   lock order                   w->cw.list.lock, srv->base.lock and
 *                                srv->quiet_lock are leaves: nothing else
 *                                is taken under them.
 */

#include "src/server/server.h"
#include "src/server/server_int.h"

#include "src/base/clock.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "src/server/auth.h"
#include "src/server/conn.h"
#include "src/server/listen.h"
#include "src/server/netring.h"
#include "src/server/proto/proto_admin.h"
#include "src/server/proto/proto_util.h"
#include "src/server/stats.h"
#include "src/server/tls.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Stop reading a connection while this much output is pending. */
#define SERVER_OUT_HIGH (4u << 20)
/* Accepts per listener wake-up, and the pause when out of descriptors. */
#define SERVER_ACCEPTS_PER_EVENT 64
#define SERVER_ACCEPT_PAUSE_MS 100

/* epoll tags of the acceptor (listeners use their index) */
#define TAG_STOP 1000u
#define TAG_SIGNAL 1001u

/* --- proto_server_ops --- */

/* "stats" groups and "stats reset", at the end of this file */
static int op_stats(void *arg, struct proto_sess *s, const char *group,
                    struct obuf *out);
static void op_stats_reset(void *arg);

static int
op_shutdown(void *arg)
{
    struct server *srv = arg;
    if (!srv->st->shutdown_enabled)
        return -EPERM;
    log_info("shutdown command received");
    server_stop(srv);
    return 0;
}

static void
op_verbosity(void *arg, int level)
{
    struct server *srv = arg;
    if (level < 0)
        level = 0;
    atomic_store_explicit(&srv->verbosity, level, memory_order_relaxed);
    log_set_level(LOG_WARN + level);
}

static int
op_memlimit(void *arg, uint64_t mib)
{
    struct server *srv = arg;
    if (mib == 0 || mib > (UINT64_MAX >> 20))
        return -EINVAL;
    int rc = tc_set_mem_limit(srv->cache, mib << 20);
    if (rc == 0 || rc == -EBUSY) /* -EBUSY: shrinking, finished later */
        atomic_store_explicit(&srv->maxbytes_mib, mib, memory_order_relaxed);
    return rc;
}

static int
op_refresh_certs(void *arg, char *msg, size_t n)
{
    struct server *srv = arg;
    if (!srv->tls) {
        snprintf(msg, n, "Error TLS not enabled"); /* memcached's words */
        return -ENOTSUP;
    }
    return tls_refresh(srv->tls, msg, n);
}

static const struct proto_server_ops server_ops = {
    .stats = op_stats,
    .stats_reset = op_stats_reset,
    .shutdown = op_shutdown,
    .verbosity = op_verbosity,
    .memlimit = op_memlimit,
    .refresh_certs = op_refresh_certs,
};

/* --- acceptor --- */

static void
set_listening(struct server *srv, bool on)
{
    for (unsigned i = 0; i < srv->nls; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        if (srv->ls[i].is_udp)
            continue; /* the workers read it */
        epoll_ctl(srv->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, srv->ls[i].fd,
                  &ev);
    }
    srv->paused = !on;
    atomic_store_explicit(&srv->accepting, on, memory_order_relaxed);
}

static void
refuse(struct server *srv, int fd)
{
    char line[64];
    int len = snprintf(line, sizeof(line), "%s\r\n",
                       proto_err_text(PERR_TOO_MANY_CONNS));
    ssize_t n = send(fd, line, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n; /* best effort, as memcached */
    close(fd);
    stats_ctr_add(&srv->actr, STATS_REJECTED_CONNS, 1);
}

static void
hand_off(struct server *srv, struct listener *l, int fd)
{
    uint64_t curr =
        atomic_load_explicit(&srv->curr_conns, memory_order_relaxed);
    if (curr >= srv->st->maxconns) {
        refuse(srv, fd);
        return;
    }
    if (!l->is_unix) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    }
    struct conn *c;
    struct tls_conn *t = NULL;
    if ((l->tls && tls_conn_create(srv->tls, fd, &t) != 0) ||
        conn_create(&srv->sh, fd, l->name, &c) != 0) {
        log_warn("no memory for a new connection; closing it");
        tls_conn_destroy(t);
        close(fd);
        return;
    }
    if (t)
        conn_set_tls(c, t);
    atomic_fetch_add_explicit(&srv->curr_conns, 1, memory_order_relaxed);
    stats_ctr_add(&srv->actr, STATS_TOTAL_CONNS, 1);
    struct worker *w = &srv->workers[srv->rr++ % srv->nworkers];
    if (worker_push(w, c) != 0)
        conn_destroy(c);
}

static void
accept_some(struct server *srv, struct listener *l)
{
    for (int i = 0; i < SERVER_ACCEPTS_PER_EVENT; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            hand_off(srv, l, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
            /* out of descriptors: stop accepting for a moment instead of
             * spinning on a listener that stays readable */
            log_warn("accept: %s; pausing for %d ms", strerror(errno),
                     SERVER_ACCEPT_PAUSE_MS);
            stats_ctr_add(&srv->actr, STATS_LISTEN_DISABLED, 1);
            set_listening(srv, false);
            srv->resume_ns = clock_nsec() + SERVER_ACCEPT_PAUSE_MS * 1000000ull;
            return;
        }
        log_warn("accept on %s: %s", l->name, strerror(errno));
        return;
    }
}

/* SIGHUP: read -Y's file again, as memcached does (nothing else to do
 * without -Y). */
static void
reload_auth(struct server *srv)
{
    if (!srv->st->auth_file) {
        log_info("SIGHUP: no -Y auth file to reload");
        return;
    }
    if (auth_reload(srv->sh.auth) == 0)
        log_info("SIGHUP: reloaded auth file %s", srv->st->auth_file);
    else
        log_warn("SIGHUP: %s; the users loaded before stay", err_msg());
}

/* Handle one event of the acceptor: false when it is time to stop. */
static bool
acceptor_event(struct server *srv, const struct epoll_event *ev)
{
    if (ev->data.u32 == TAG_STOP)
        return false;
    if (ev->data.u32 == TAG_SIGNAL) {
        struct signalfd_siginfo si;
        if (read(srv->sig_fd, &si, sizeof(si)) != sizeof(si))
            return true; /* read by another wake-up */
        if (si.ssi_signo == SIGHUP) {
            reload_auth(srv);
            return true;
        }
        log_info("signal %u: shutting down", si.ssi_signo);
        return false;
    }
    if (!srv->paused && ev->data.u32 < srv->nls)
        accept_some(srv, &srv->ls[ev->data.u32]);
    return true;
}

static void
acceptor_loop(struct server *srv)
{
    struct epoll_event ev[16];
    for (;;) {
        int timeout = srv->paused ? SERVER_ACCEPT_PAUSE_MS : -1;
        int n = epoll_wait(srv->epfd, ev, 16, timeout);
        if (n < 0 && errno != EINTR) {
            log_error("acceptor epoll_wait: %s", strerror(errno));
            return;
        }
        if (srv->paused && clock_nsec() >= srv->resume_ns)
            set_listening(srv, true);
        for (int i = 0; i < n; i++)
            if (!acceptor_event(srv, &ev[i]))
                return;
    }
}

/* An accept through the ring failed (the socket it reports is res). */
static void
ring_accept_failed(struct server *srv, struct listener *l, int err)
{
    if (err == EINTR || err == ECONNABORTED || err == EAGAIN)
        return;
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        /* the ring did not arm it again: acceptor_ring_loop() does after
         * the pause */
        log_warn("accept: %s; pausing for %d ms", strerror(err),
                 SERVER_ACCEPT_PAUSE_MS);
        stats_ctr_add(&srv->actr, STATS_LISTEN_DISABLED, 1);
        srv->paused = true;
        atomic_store_explicit(&srv->accepting, false, memory_order_relaxed);
        srv->resume_ns = clock_nsec() + SERVER_ACCEPT_PAUSE_MS * 1000000ull;
        return;
    }
    log_warn("accept on %s: %s", l->name, strerror(err));
}

/* The acceptor on a ring (net_engine=uring): multishot accepts instead of
 * epoll and accept4, the same hand-off, signals and stop. */
static void
acceptor_ring_loop(struct server *srv, struct netring_acc *a)
{
    struct netring_ev ev[16];
    for (;;) {
        int timeout = srv->paused ? SERVER_ACCEPT_PAUSE_MS : -1;
        int n = netring_acc_wait(a, ev, 16, timeout);
        if (n < 0) {
            log_error("acceptor io_uring wait: %s", strerror(-n));
            return;
        }
        if (srv->paused && clock_nsec() >= srv->resume_ns) {
            for (unsigned i = 0; i < srv->nls; i++)
                if (!srv->ls[i].is_udp)
                    netring_acc_listen(a, srv->ls[i].fd, i);
            srv->paused = false;
            atomic_store_explicit(&srv->accepting, true, memory_order_relaxed);
        }
        for (int i = 0; i < n; i++) {
            if (ev[i].tag == TAG_STOP || ev[i].tag == TAG_SIGNAL) {
                struct epoll_event e = {.events = EPOLLIN,
                                        .data.u32 = ev[i].tag};
                if (!acceptor_event(srv, &e))
                    return;
            } else if (ev[i].res >= 0) {
                hand_off(srv, &srv->ls[ev[i].tag], ev[i].res);
            } else {
                ring_accept_failed(srv, &srv->ls[ev[i].tag], -ev[i].res);
            }
        }
    }
}

/* The acceptor's ring with everything it watches: NULL when it cannot be
 * set up (logged; the epoll acceptor runs). */
static struct netring_acc *
acceptor_ring(struct server *srv)
{
    struct netring_acc *a;
    if (netring_acc_create(&a) != 0) {
        log_warn("%s; the acceptor uses epoll", err_msg());
        return NULL;
    }
    int rc = netring_acc_watch(a, srv->stop_fd, TAG_STOP);
    if (!rc)
        rc = netring_acc_watch(a, srv->sig_fd, TAG_SIGNAL);
    for (unsigned i = 0; !rc && i < srv->nls; i++)
        if (!srv->ls[i].is_udp)
            rc = netring_acc_listen(a, srv->ls[i].fd, i);
    if (rc) {
        log_warn("acceptor io_uring: %s; it uses epoll", strerror(-rc));
        netring_acc_destroy(a);
        return NULL;
    }
    atomic_store_explicit(&srv->accepting, true, memory_order_relaxed);
    return a;
}

int
server_run(struct server *srv)
{
    int rc = worker_start_all(srv);
    struct netring_acc *a = NULL;
    if (rc == 0 && strcmp(srv->st->net_engine, "uring") == 0)
        a = acceptor_ring(srv);
    if (rc == 0 && a) {
        acceptor_ring_loop(srv, a);
        netring_acc_destroy(a); /* stops accepting */
    } else if (rc == 0) {
        set_listening(srv, true);
        acceptor_loop(srv);
    }
    /* stop accepting first, so nothing is queued after the workers stop;
     * the listening sockets close once no worker can be walking them for
     * "stats conns" (connections arriving meanwhile are reset) */
    set_listening(srv, false);
    worker_stop_all(srv);
    listen_close(srv->ls, srv->nls, srv->st->unix_path);
    return rc;
}

void
server_stop(struct server *srv)
{
    server_wake(srv->stop_fd);
}

/* --- create / destroy --- */

static int
setup_acceptor(struct server *srv)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1); /* memcached's graceful stop: the same stop */
    sigaddset(&set, SIGHUP);
    srv->epfd = epoll_create1(EPOLL_CLOEXEC);
    srv->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    srv->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    struct epoll_event stop = {.events = EPOLLIN, .data.u32 = TAG_STOP};
    struct epoll_event sig = {.events = EPOLLIN, .data.u32 = TAG_SIGNAL};
    if (srv->epfd < 0 || srv->stop_fd < 0 || srv->sig_fd < 0 ||
        epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->stop_fd, &stop) != 0 ||
        epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->sig_fd, &sig) != 0) {
        int rc = -errno;
        err_set("cannot set up the acceptor's event loop: %s", strerror(errno));
        return rc;
    }
    return 0;
}

static void
init_shared(struct server *srv)
{
    const struct settings *st = srv->st;
    srv->sh = (struct conn_shared){
        .cache = srv->cache,
        .ops = &server_ops,
        .srv = srv,
        .item_size_max = (uint32_t)st->item_size_max,
        .in_max = st->item_size_max + PROTO_LINE_MAX + 2,
        .out_high = SERVER_OUT_HIGH,
        .max_reqs = (uint32_t)st->reqs_per_event,
        .idle_timeout = (uint32_t)st->idle_timeout,
        .no_flush = st->no_flush,
        .no_cas = st->no_cas,
        .no_dump = st->no_dump,
        .no_watch = st->no_watch,
        .binding = !strcmp(st->binding_protocol, "ascii")    ? PROTO_BIND_ASCII
                   : !strcmp(st->binding_protocol, "binary") ? PROTO_BIND_BINARY
                                                             : PROTO_BIND_AUTO,
        .epoch_ns = clock_nsec(),
        .curr_conns = &srv->curr_conns,
    };
}

/* -Y, -S: the users and SASL every connection shares. Under -Y every
 * connection speaks text, as in memcached, where the login reads any bytes
 * as text lines (settings.c refused -B binary with -Y). */
static int
setup_auth(struct server *srv)
{
    const struct settings *st = srv->st;
    if (!st->auth_file && !st->sasl)
        return 0;
    int rc = auth_create(st->auth_file, st->sasl, &srv->sh.auth);
    if (rc)
        return rc;
    srv->sh.sasl = st->sasl;
    if (st->auth_file)
        srv->sh.binding = PROTO_BIND_ASCII;
    return 0;
}

static int
setup_workers(struct server *srv)
{
    srv->nworkers = (unsigned)srv->st->threads;
    srv->workers = aligned_alloc(
        CACHE_LINE,
        ALIGN_UP(srv->nworkers * sizeof(struct worker), (size_t)CACHE_LINE));
    if (!srv->workers) {
        err_set("no memory for %u workers", srv->nworkers);
        return -ENOMEM;
    }
    memset(srv->workers, 0, srv->nworkers * sizeof(struct worker));
    for (unsigned i = 0; i < srv->nworkers; i++) {
        int rc = worker_init(srv, &srv->workers[i]);
        if (rc)
            return rc;
    }
    return 0;
}

int
server_create(const struct settings *st, struct tc_cache *cache,
              struct server **out)
{
    struct server *srv =
        aligned_alloc(CACHE_LINE, ALIGN_UP(sizeof(*srv), (size_t)CACHE_LINE));
    if (!srv) {
        err_set("no memory for the server");
        return -ENOMEM;
    }
    memset(srv, 0, sizeof(*srv));
    srv->st = st;
    proto_admin_init(st);
    srv->cache = cache;
    srv->epfd = srv->stop_fd = srv->sig_fd = -1;
    srv->started_unix = (uint32_t)time(NULL);
    atomic_init(&srv->curr_conns, 0);
    atomic_init(&srv->verbosity, (int)st->verbose);
    atomic_init(&srv->maxbytes_mib, st->maxbytes_mib);
    atomic_init(&srv->accepting, false);
    stats_base_init(&srv->base);
    pthread_mutex_init(&srv->quiet_lock, NULL);
    pthread_cond_init(&srv->quiet_cond, NULL);
    init_shared(srv);
    int rc = setup_auth(srv);
    if (!rc && st->tls)
        rc = tls_create(st, &srv->tls);
    if (!rc)
        rc = setup_acceptor(srv);
    if (!rc && st->port)
        rc = listen_net(srv->ls, &srv->nls, srv->st, srv->tls != NULL, false);
    if (!rc && st->udp_port)
        rc = listen_net(srv->ls, &srv->nls, srv->st, srv->tls != NULL, true);
    if (!rc && st->unix_path)
        rc = listen_unix(srv->ls, &srv->nls, srv->st);
    if (!rc)
        rc = setup_workers(srv);
    if (rc) {
        server_destroy(srv);
        return rc;
    }
    *out = srv;
    return 0;
}

void
server_destroy(struct server *srv)
{
    if (!srv)
        return;
    listen_close(srv->ls, srv->nls, srv->st->unix_path);
    for (unsigned i = 0; srv->workers && i < srv->nworkers; i++)
        worker_fini(&srv->workers[i]);
    free(srv->workers);
    auth_destroy(srv->sh.auth); /* after the workers' connections */
    if (srv->epfd >= 0)
        close(srv->epfd);
    if (srv->stop_fd >= 0)
        close(srv->stop_fd);
    if (srv->sig_fd >= 0)
        close(srv->sig_fd);
    stats_base_fini(&srv->base);
    tls_destroy(srv->tls);
    pthread_mutex_destroy(&srv->quiet_lock);
    pthread_cond_destroy(&srv->quiet_cond);
    free(srv);
}

/* --- struct stats_hooks (src/server/stats.c), "stats reset" --- */

static void
hook_info(struct server *srv, struct stats_info *out)
{
    out->cache = srv->cache;
    out->settings = *srv->st;
    out->settings.verbose =
        (uint64_t)atomic_load_explicit(&srv->verbosity, memory_order_relaxed);
    out->settings.maxbytes_mib =
        atomic_load_explicit(&srv->maxbytes_mib, memory_order_relaxed);
    proto_admin_live(&out->settings);
    out->uptime = conn_now(&srv->sh);
    out->started_unix = srv->started_unix;
    out->curr_conns =
        atomic_load_explicit(&srv->curr_conns, memory_order_relaxed);
    out->nlisteners = srv->nls;
    out->nworkers = srv->nworkers;
    out->accepting =
        atomic_load_explicit(&srv->accepting, memory_order_relaxed);
    out->tls = srv->tls != NULL;
    out->tls_cert_age = srv->tls ? tls_cert_age(srv->tls) : 0;
    out->tls_new_sessions = srv->tls ? tls_new_sessions(srv->tls) : 0;
}

static void
ctr_sum_raw(struct server *srv, uint64_t sum[STATS_CTR_COUNT])
{
    memset(sum, 0, STATS_CTR_COUNT * sizeof(sum[0]));
    stats_ctr_sum(&srv->actr, sum);
    for (unsigned i = 0; i < srv->nworkers; i++)
        stats_ctr_sum(&srv->workers[i].ctr, sum);
}

/* Every thread's counters summed, minus the baseline of the last reset. */
static void
hook_ctr_sum(struct server *srv, uint64_t sum[STATS_CTR_COUNT])
{
    ctr_sum_raw(srv, sum);
    pthread_mutex_lock(&srv->base.lock);
    for (int i = 0; i < STATS_CTR_COUNT; i++)
        sum[i] = sum[i] >= srv->base.v[i] ? sum[i] - srv->base.v[i] : 0;
    pthread_mutex_unlock(&srv->base.lock);
}

/* Record the current sums as the new baseline. */
static void
ctr_reset(struct server *srv)
{
    uint64_t sum[STATS_CTR_COUNT];
    ctr_sum_raw(srv, sum);
    pthread_mutex_lock(&srv->base.lock);
    memcpy(srv->base.v, sum, sizeof(sum));
    pthread_mutex_unlock(&srv->base.lock);
}

/* Every listener, then every worker's connections. */
static void
hook_conns_walk(struct server *srv, conn_walk_fn *fn, void *arg)
{
    for (unsigned i = 0; i < srv->nls; i++) {
        struct conn_view v = {
            .fd = srv->ls[i].fd,
            .addr = srv->ls[i].name,
            .state = srv->ls[i].is_udp ? "conn_read" : "conn_listening",
        };
        fn(arg, &v);
    }
    uint32_t now = conn_now(&srv->sh);
    for (unsigned i = 0; i < srv->nworkers; i++)
        conn_list_walk(&srv->workers[i].cw.list, now, fn, arg);
}

static const struct stats_hooks stats_hooks = {
    .info = hook_info,
    .ctr_sum = hook_ctr_sum,
    .conns_walk = hook_conns_walk,
};

static int
op_stats(void *arg, struct proto_sess *s, const char *group, struct obuf *out)
{
    return stats_group(&stats_hooks, arg, s, group, out);
}

static void
op_stats_reset(void *arg)
{
    struct server *srv = arg;
    tc_stats_reset(srv->cache);
    ctr_reset(srv);
}

/*
 * tiercached's worker threads (src/server/server_int.h; the acceptor that
 * feeds them, and the design and its reasons, are in server.c): each an
 * epoll loop (or with -o net_engine=uring an io_uring loop, netring.c) over
 * its own non-blocking connections (conn.c), with a 1 s timeout for the
 * idle sweep, the UDP sockets under -U (udp.c) and the completions of its
 * flash reads (the store's eventfd; on io_uring the reads themselves go on
 * the worker's ring); the queue the acceptor pushes new connections on;
 * starting (name, CPU, scheduler slice) and stopping them, and the shutdown
 * barrier before they unregister from the cache.
 *
 * Concurrency (the server's full table is at the top of server.c):
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
 *   w->ctr                       written by its worker only; see stats.h.
 *   srv->ls[], nls, st, sh, cache, w->cpu
 *                                set before the workers start, read-only
 *                                afterwards.
 *   srv->nstarted, nquiet        srv->quiet_lock (the shutdown barrier
 *                                before workers unregister).
 *   lock order                   w->qlock and srv->quiet_lock are leaves:
 *                                nothing else is taken under them.
 */
#include "src/server/server_int.h"

#include "src/base/err.h"
#include "src/base/log.h"
#include "src/server/netring.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A worker with no event for this long gives back its chunk stash. */
#define WORKER_IDLE_MS 20

/* Take the queued connections into the loop. Context: w's thread. */
static void
worker_adopt(struct worker *w)
{
    uint64_t v;
    while (read(w->wake_fd, &v, sizeof(v)) < 0 && errno == EINTR)
        ;
    for (;;) {
        struct conn *c = NULL;
        pthread_mutex_lock(&w->qlock);
        if (w->qn)
            c = w->q[--w->qn];
        pthread_mutex_unlock(&w->qlock);
        if (!c)
            return;
        if (conn_attach(c, &w->cw) != 0)
            conn_destroy(c);
    }
}

/* How often a worker with flash reads in flight reaps when nothing else
 * happens (their deadline is ext_read_timeout_ms, default 1 s). */
#define WORKER_REAP_MS 50

/* Wait for events. A worker idle for WORKER_IDLE_MS gives the engine back
 * what it holds for later (its chunk stash, its frees awaiting a grace
 * period), once per idle spell, then sleeps. Measured at pipeline depth 1
 * (perf/RESULTS.md):
 *   - the first, non-blocking epoll_wait pays for itself: it often finds
 *     the next request already there, and a blocking wait in its place
 *     (0.25 epoll_wait per request instead of 0.4) cost more CPU per
 *     request in context switches than it saved;
 *   - giving back as soon as that poll found nothing made every wake-up
 *     an idle spell: 0.17 quiesce per request, and the stash refilled
 *     from the slab (class lock) on 70% of sets; after WORKER_IDLE_MS,
 *     neither happens under load. */
static int
worker_wait(struct worker *w, struct epoll_event *ev, int max, bool *idle)
{
    int n = epoll_wait(w->cw.epfd, ev, max, 0);
    if (n == 0 && !*idle) {
        /* a page move waiting for this worker's chunks must not wait
         * WORKER_IDLE_MS for them (stores wait for that move) */
        tc_thread_poll(w->srv->cache);
        n = epoll_wait(w->cw.epfd, ev, max, WORKER_IDLE_MS);
    }
    if (n == 0) {
        if (!*idle)
            tc_thread_quiesce(w->srv->cache);
        *idle = true;
        /* flash reads in flight: the store completes a late one with
         * -ETIMEDOUT only when reaped, so wake often enough to reap */
        n = epoll_wait(w->cw.epfd, ev, max,
                       w->cw.inflight ? WORKER_REAP_MS : 1000);
    }
    if (n > 0)
        *idle = false;
    return n;
}

/* p is one of the UDP sockets (the only listeners in a worker's epoll
 * set). Asked only with -U (w->uw set): without it a connection's event
 * costs one more test of a pointer that is NULL. */
static bool
is_listener(const struct server *srv, const void *p)
{
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)srv->ls;
    return a >= lo && a < (uintptr_t)(srv->ls + srv->nls);
}

/* Connections hinted together per wake-up. */
#define WORKER_PREFETCH_MAX 16

/* A wake-up with several connections: their first reads, then the keys
 * their first requests read, hinted to the engine at once, so that the
 * index and item misses of the wake-up overlap (as the io_uring loop does
 * for a batch of completions). conn_event() then carries on from each
 * read. */
static void
preread_all(struct worker *w, const struct epoll_event *ev, int n)
{
    struct conn *cs[WORKER_PREFETCH_MAX];
    size_t m = 0;
    for (int i = 0; i < n && m < WORKER_PREFETCH_MAX; i++) {
        void *p = ev[i].data.ptr;
        if (p == NULL || p == &w->cw || (w->uw && is_listener(w->srv, p)))
            continue;
        if (conn_preread(p, ev[i].events))
            cs[m++] = p;
    }
    conn_prefetch_inputs(cs, m);
}

static void
worker_loop(struct worker *w)
{
    struct epoll_event ev[256];
    uint32_t last_sweep = 0;
    bool idle = false;
    while (!atomic_load_explicit(&w->stop, memory_order_acquire)) {
        int n = worker_wait(w, ev, 256, &idle);
        w->cw.now = conn_now(&w->srv->sh);
        if (n < 0 && errno != EINTR) {
            log_error("worker epoll_wait: %s", strerror(errno));
            return;
        }
        if (n >= 2)
            preread_all(w, ev, n);
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == NULL)
                worker_adopt(w);
            else if (p == &w->cw)
                conn_async_reap(&w->cw); /* flash reads finished */
            else if (w->uw && is_listener(w->srv, p))
                udp_event(w->uw, ((struct listener *)p)->fd); /* -U */
            else
                conn_event(p, ev[i].events);
        }
        if (w->cw.inflight && n == 0)
            conn_async_reap(&w->cw); /* deadlines of flash reads */
        conn_async_submit(&w->cw);   /* this wake-up's flash reads at once */
        if (w->cw.now != last_sweep) {
            last_sweep = w->cw.now;
            conn_sweep_idle(&w->cw);
        }
    }
}

/* Wait until every started worker is done with its connections, so that no
 * worker can be inside the engine (e.g. tc_stats() walking the threads'
 * quotas for "stats") while another unregisters from it. */
static void
worker_quiesce(struct server *srv)
{
    pthread_mutex_lock(&srv->quiet_lock);
    srv->nquiet++;
    pthread_cond_broadcast(&srv->quiet_cond);
    while (srv->nquiet < srv->nstarted)
        pthread_cond_wait(&srv->quiet_cond, &srv->quiet_lock);
    pthread_mutex_unlock(&srv->quiet_lock);
}

/* The kernel's struct sched_attr (linux/sched/types.h, which clashes with
 * glibc's <sched.h>): glibc 2.36 has no wrapper for sched_setattr. */
struct kernel_sched_attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period; /* ns; runtime: a normal thread's
                                           slice since Linux 6.12 */
    uint32_t util_min, util_max;
};

/* Set the calling thread's scheduler slice (EEVDF's custom slice, Linux
 * 6.12+): 0, or an errno; ENOTSUP where the kernel took the call but kept
 * its own slice (older kernels ignore the field for normal threads). */
static int
set_slice(uint64_t us)
{
    struct kernel_sched_attr a = {
        .size = sizeof(a), .policy = SCHED_OTHER, .runtime = us * 1000};
    if (syscall(SYS_sched_setattr, 0, &a, 0) != 0)
        return errno;
    struct kernel_sched_attr got = {0};
    if (syscall(SYS_sched_getattr, 0, &got, sizeof(got), 0) != 0)
        return errno;
    return got.runtime == us * 1000 ? 0 : ENOTSUP;
}

/* A worker's name (tc-worker-N, for top -H, perf and /proc), its CPU
 * (pin_workers) and its scheduler slice (worker_slice_us). Why both: on a
 * busy machine a worker woken by a request or a flash completion otherwise
 * waits behind the other worker or the client for the rest of their slice,
 * which the kernel checks at the next tick (4 ms at HZ=250); pinned, the
 * workers never queue behind each other, and with a short slice a waking
 * worker preempts a longer-sliced thread at once (perf/RESULTS.md, "Where
 * the 9:1 tail comes from"). A refusal is logged; the worker runs anyway. */
static void
worker_sched(struct worker *w)
{
    unsigned idx = (unsigned)(w - w->srv->workers);
    char name[16];
    snprintf(name, sizeof(name), "tc-worker-%u", idx);
    pthread_setname_np(pthread_self(), name);
    if (w->cpu >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(w->cpu, &one);
        int rc = pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
        if (rc)
            log_warn("pin_workers: worker %u cannot be kept on CPU %d: %s", idx,
                     w->cpu, strerror(rc));
    }
    uint64_t us = w->srv->st->worker_slice_us;
    int rc = us ? set_slice(us) : 0;
    if (rc && idx == 0)
        log_warn("worker_slice_us: the kernel did not take a %llu us slice "
                 "(%s; custom slices need Linux 6.12)",
                 (unsigned long long)us, strerror(rc));
}

/* netring_fn hooks: the worker's descriptors other than connections. */
static void
ring_adopt(void *arg, int fd)
{
    (void)fd;
    worker_adopt(arg);
}

static void
ring_reap(void *arg, int fd)
{
    (void)fd;
    conn_async_reap(arg);
}

static void
ring_udp(void *arg, int fd)
{
    udp_event(arg, fd);
}

/* The NVMe tier's completions for the epoll loop (or an io_uring loop
 * whose ring cannot carry them): the store's eventfd, >= 0 when there is
 * one to watch (w->cw.async set when epoll watches it). */
static int
worker_flash_fd(struct worker *w, bool epoll)
{
    int afd = tc_async_fd(w->srv->cache);
    struct epoll_event aev = {.events = EPOLLIN, .data.ptr = &w->cw};
    if (afd < 0 && afd != -ENOENT)
        log_warn("worker: no flash ring (%s); flash reads block",
                 strerror(-afd));
    else if (afd >= 0 && epoll &&
             epoll_ctl(w->cw.epfd, EPOLL_CTL_ADD, afd, &aev) != 0) {
        log_warn("worker: cannot watch flash completions: %s", strerror(errno));
        return -1;
    } else if (afd >= 0 && epoll)
        w->cw.async = true;
    return afd;
}

/* w's loop on an io_uring (net_engine=uring), watching what the epoll
 * loop watches, with the flash reads on the same ring (netring_flash):
 * NULL when it cannot be set up (logged; the worker runs the epoll loop
 * instead). */
static struct netring *
worker_ring(struct worker *w)
{
    struct netring *nr;
    unsigned idx = (unsigned)(w - w->srv->workers);
    if (netring_create(&w->cw, &nr) != 0) {
        log_warn("worker %u: %s; it uses epoll", idx, err_msg());
        return NULL;
    }
    int rc = netring_watch(nr, w->wake_fd, ring_adopt, w);
    for (unsigned i = 0; !rc && w->uw && i < w->srv->nls; i++)
        if (w->srv->ls[i].is_udp)
            rc = netring_watch(nr, w->srv->ls[i].fd, ring_udp, w->uw);
    /* last: a worker that falls back to epoll must find the store's own
     * ring, not one lent to this ring */
    int frc = rc ? 0 : netring_flash(nr);
    if (!rc && frc == 0) {
        w->cw.async = true; /* completions on the ring itself */
    } else if (!rc && frc != -ENOENT) {
        /* the store reads without io_uring: its eventfd, polled here */
        if (frc != -ENOTSUP && idx == 0)
            log_warn("worker: flash reads cannot use the network ring (%s); "
                     "they keep their own",
                     err_msg());
        int afd = worker_flash_fd(w, false);
        if (afd >= 0) {
            rc = netring_watch(nr, afd, ring_reap, &w->cw);
            w->cw.async = rc == 0;
        }
    }
    if (rc) {
        log_warn("worker %u: io_uring: cannot watch its descriptors (%s); "
                 "it uses epoll",
                 idx, strerror(-rc));
        netring_destroy(nr);
        return NULL;
    }
    return nr;
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    worker_sched(w);
    if (tc_thread_register(w->srv->cache) != 0)
        log_warn("worker: cannot register with the cache: %s", tc_errmsg());
    /* the NVMe tier's completions: the worker serves other connections
     * while a flash read is in flight */
    w->cw.now = conn_now(&w->srv->sh);
    struct netring *nr = NULL;
    if (strcmp(w->srv->st->net_engine, "uring") == 0)
        nr = worker_ring(w);
    if (!nr)
        worker_flash_fd(w, true);
    if (nr)
        netring_run(nr, &w->stop);
    else
        worker_loop(w);
    /* shutdown: connections still queued, then the live ones */
    pthread_mutex_lock(&w->qlock);
    while (w->qn)
        conn_destroy(w->q[--w->qn]);
    pthread_mutex_unlock(&w->qlock);
    conn_close_all(&w->cw);
    netring_destroy(nr); /* after its connections: they detach from it */
    worker_quiesce(w->srv);
    tc_thread_unregister(w->srv->cache);
    return NULL;
}

/* Every worker watches every UDP socket, as memcached gives each of its
 * threads the UDP socket; EPOLLEXCLUSIVE wakes one (rarely more) of them
 * per datagram burst instead of all. */
static int
worker_init_udp(struct server *srv, struct worker *w)
{
    for (unsigned i = 0; i < srv->nls; i++) {
        if (!srv->ls[i].is_udp)
            continue;
        if (!w->uw && udp_worker_create(&srv->sh, &w->ctr, &w->uw) != 0) {
            err_set("no memory for a worker's UDP buffers");
            return -ENOMEM;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE,
                                 .data.ptr = &srv->ls[i]};
        if (epoll_ctl(w->cw.epfd, EPOLL_CTL_ADD, srv->ls[i].fd, &ev) != 0) {
            int rc = -errno;
            err_set("cannot watch %s: %s", srv->ls[i].name, strerror(errno));
            return rc;
        }
    }
    return 0;
}

int
worker_init(struct server *srv, struct worker *w)
{
    memset(w, 0, sizeof(*w));
    w->srv = srv; /* marks it initialised for worker_fini() */
    w->cw.sh = &srv->sh;
    w->cw.ctr = &w->ctr;
    pthread_mutex_init(&w->qlock, NULL);
    conn_list_init(&w->cw.list);
    w->cw.epfd = epoll_create1(EPOLL_CLOEXEC);
    w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    atomic_init(&w->stop, false);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (w->cw.epfd < 0 || w->wake_fd < 0 ||
        epoll_ctl(w->cw.epfd, EPOLL_CTL_ADD, w->wake_fd, &ev) != 0) {
        int rc = -errno;
        err_set("cannot set up a worker's event loop: %s", strerror(errno));
        return rc;
    }
    return worker_init_udp(srv, w);
}

void
worker_fini(struct worker *w)
{
    if (!w->srv)
        return; /* never initialised */
    if (w->cw.epfd >= 0)
        close(w->cw.epfd);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    free(w->q);
    udp_worker_destroy(w->uw);
    pthread_mutex_destroy(&w->qlock);
    conn_list_fini(&w->cw.list);
}

/* Hand c to worker w. Context: the acceptor. */
int
worker_push(struct worker *w, struct conn *c)
{
    pthread_mutex_lock(&w->qlock);
    if (w->qn == w->qcap) {
        size_t cap = w->qcap ? w->qcap * 2 : 64;
        struct conn **q = realloc(w->q, cap * sizeof(*q));
        if (!q) {
            pthread_mutex_unlock(&w->qlock);
            return -ENOMEM;
        }
        w->q = q;
        w->qcap = cap;
    }
    w->q[w->qn++] = c;
    pthread_mutex_unlock(&w->qlock);
    server_wake(w->wake_fd);
    return 0;
}

/* pin_workers: worker i gets the i-th CPU (round robin) of those the
 * process may run on, read before any worker narrows its own. */
static void
assign_cpus(struct server *srv)
{
    cpu_set_t allowed;
    int cpus[CPU_SETSIZE], n = 0;
    for (unsigned i = 0; i < srv->nworkers; i++)
        srv->workers[i].cpu = -1;
    if (!srv->st->pin_workers)
        return;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
        log_warn("pin_workers: cannot read this process's CPUs: %s",
                 strerror(errno));
        return;
    }
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    for (unsigned i = 0; n > 0 && i < srv->nworkers; i++)
        srv->workers[i].cpu = cpus[i % (unsigned)n];
}

int
worker_start_all(struct server *srv)
{
    int rc = 0;
    unsigned i;
    assign_cpus(srv);
    /* nstarted is final before any worker can reach worker_quiesce(): that
     * happens only after worker_stop_all() */
    pthread_mutex_lock(&srv->quiet_lock);
    for (i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];
        rc = pthread_create(&w->tid, NULL, worker_main, w);
        if (rc) {
            err_set("cannot start worker thread %u: %s", i, strerror(rc));
            break;
        }
        w->running = true;
    }
    srv->nstarted = i;
    pthread_mutex_unlock(&srv->quiet_lock);
    return -rc;
}

void
worker_stop_all(struct server *srv)
{
    for (unsigned i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];
        atomic_store_explicit(&w->stop, true, memory_order_release);
        server_wake(w->wake_fd);
    }
    for (unsigned i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];
        if (w->running)
            pthread_join(w->tid, NULL);
        w->running = false;
    }
}

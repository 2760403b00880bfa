/*
 * A worker's event loop on io_uring (src/server/netring.h).
 *
 * Per connection a slot: the multishot recv armed on its socket (with
 * IOSQE_BUFFER_SELECT: the kernel picks one of NETRING_BUFS buffers of a
 * provided-buffer ring and reports which in the completion), and at most
 * one send in flight. A recv completion's bytes are copied into the
 * connection's input (conn_input) and the buffer goes straight back to the
 * ring; a send completion goes to conn_sent(). Everything queued while the
 * loop handles one batch of completions (sends, re-armed recvs, cancels)
 * is submitted by the io_uring_enter that also waits for the next batch.
 *
 * Flash reads (netring_flash): the store puts a get's read on this ring
 * (tc_async_ring, user_data OP_FLASH << 56 | its slot), so the same enter
 * submits it; its completion goes back to the store (tc_async_complete,
 * which checks it), and the loop reaps after the batch (conn_async_reap:
 * the parked connections get their values or misses). Deadlines: as
 * under epoll, the wait is short while reads are in flight and a reap
 * with no completion ends the late ones. Before the ring goes, the I/O of
 * reads still in flight is waited for (flash_drain, bounded) and the store
 * lets go of the ring.
 *
 * Slots outlive their connections: a connection that ends (conn_destroy ->
 * detach) cancels its recv, leaves its send running (the block it reads is
 * handed over and freed here), and its slot is reused only once neither
 * is in flight, so a late completion never reaches freed memory. A
 * completion names its slot and the slot's generation in user_data. What
 * a connection has queued is submitted before its descriptor closes, since
 * the kernel looks the number up at submission (hook_detach).
 *
 * Back-pressure and parking: when the connection layer stops wanting input
 * (watch, in = false), the recv is cancelled; what arrives before the
 * cancel lands is still handed over (conn_input appends it), and the recv
 * is armed again when input is wanted.
 *
 * Idle: as the epoll loop (worker.c, worker_wait): a non-blocking look
 * first, then tc_thread_poll() and a wait of NETRING_IDLE_MS, then
 * tc_thread_quiesce() once and a long wait.
 *
 * Concurrency:
 *   struct netring, slots,
 *   buffers, watch table   the worker thread that created the ring only
 *                          (IORING_SETUP_SINGLE_ISSUER where the kernel
 *                          has it); nothing here is shared with other
 *                          threads. The provided-buffer ring is shared with
 *                          the kernel: io_uring_buf_ring_advance() publishes
 *                          returned buffers with a release store (liburing).
 *   lock order             no locks of its own; the hooks run conn.c code,
 *                          which takes only its list lock (a leaf).
 */

#include "src/server/netring.h"

#include "src/base/err.h"
#include "src/base/log.h"
#include "src/server/conn.h"
#include "src/tiercache.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

/* valgrind does not follow what the kernel writes through a ring (it
 * hangs the server's first wait): its header, where installed (.ci/deps),
 * lets the probe say no under it */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define NETRING_UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef NETRING_UNDER_VALGRIND
#define NETRING_UNDER_VALGRIND() false
#endif

#define NETRING_SQ 1024
#define NETRING_CQ 8192
#define NETRING_BUFS 256 /* a power of two */
#define NETRING_BUF_SIZE 8192
#define NETRING_BGID 7
#define NETRING_WATCH_MAX 48
#define NETRING_PREFETCH_MAX 16 /* inputs of a batch hinted together */
/* Same idle policy as the epoll loop (worker.c). */
#define NETRING_IDLE_MS 20
#define NETRING_REAP_MS 50

enum netring_op { OP_RECV = 1, OP_SEND, OP_CANCEL, OP_POLL, OP_FLASH };

/* How long a stopping worker waits for its flash reads' I/O, at most. */
#define NETRING_DRAIN_MS 2000

struct slot {
    struct conn *c; /* NULL: free, or detached with ops in flight */
    void *orphan;   /* a detached connection's send block */
    int fd;
    uint32_t gen;
    bool recv_on;     /* a multishot recv is armed */
    bool cancelling;  /* and its cancel is on the way */
    bool want_in;     /* the connection wants input */
    bool sending;     /* a send is in flight */
    bool turn_queued; /* on nr->turns */
    bool got_input;   /* on nr->inputs */
    bool used;        /* taken by attach, until freed */
    int next_free;
};

struct watch {
    int fd;
    netring_fn *fn;
    void *arg;
};

struct netring {
    struct io_uring ring;
    struct io_uring_buf_ring *br;
    char *bufs;
    unsigned nreturned; /* buffers added back, not yet advanced */
    struct conn_worker *cw;
    struct conn_io io;
    struct slot *slots;
    int nslots, free_head;
    int *turns; /* slots asking for a turn (-R yield) */
    int nturns, turns_cap;
    int *inputs; /* slots that received input in this batch */
    int ninputs, inputs_cap;
    struct watch watch[NETRING_WATCH_MAX];
    int nwatch;
    bool ring_up;
    bool flash;      /* the worker's flash reads are on this ring */
    bool flash_done; /* flash completions in this batch: reap */
};

static uint64_t
ud(enum netring_op op, uint32_t gen, uint32_t idx)
{
    return (uint64_t)op << 56 | (uint64_t)(gen & 0xffffff) << 32 | idx;
}

/* An SQE, submitting what is queued when the ring is full. */
static struct io_uring_sqe *
get_sqe(struct netring *nr)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&nr->ring);
    if (!sqe) {
        io_uring_submit(&nr->ring);
        sqe = io_uring_get_sqe(&nr->ring);
    }
    return sqe;
}

/* --- the provided buffers --- */

static int
bufs_setup(struct netring *nr)
{
    struct io_uring_buf_reg reg = {0};
    size_t rsz = NETRING_BUFS * sizeof(struct io_uring_buf);
    void *r = mmap(NULL, rsz, PROT_READ | PROT_WRITE,
                   MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (r == MAP_FAILED)
        return -errno;
    nr->br = r;
    nr->bufs = malloc((size_t)NETRING_BUFS * NETRING_BUF_SIZE);
    if (!nr->bufs)
        return -ENOMEM;
    reg.ring_addr = (uint64_t)(uintptr_t)r;
    reg.ring_entries = NETRING_BUFS;
    reg.bgid = NETRING_BGID;
    int rc = io_uring_register_buf_ring(&nr->ring, &reg, 0);
    if (rc)
        return rc;
    io_uring_buf_ring_init(nr->br);
    int mask = io_uring_buf_ring_mask(NETRING_BUFS);
    for (int i = 0; i < NETRING_BUFS; i++)
        io_uring_buf_ring_add(nr->br, nr->bufs + (size_t)i * NETRING_BUF_SIZE,
                              NETRING_BUF_SIZE, (unsigned short)i, mask, i);
    io_uring_buf_ring_advance(nr->br, NETRING_BUFS);
    return 0;
}

static void
buf_return(struct netring *nr, unsigned bid)
{
    io_uring_buf_ring_add(nr->br, nr->bufs + (size_t)bid * NETRING_BUF_SIZE,
                          NETRING_BUF_SIZE, (unsigned short)bid,
                          io_uring_buf_ring_mask(NETRING_BUFS),
                          (int)nr->nreturned++);
}

/* Publish the returned buffers to the kernel: before the next submit. */
static void
bufs_publish(struct netring *nr)
{
    if (nr->nreturned) {
        io_uring_buf_ring_advance(nr->br, (int)nr->nreturned);
        nr->nreturned = 0;
    }
}

/* --- slots --- */

static int
slot_new(struct netring *nr)
{
    if (nr->free_head < 0) {
        int n = nr->nslots ? nr->nslots * 2 : 64;
        struct slot *s = realloc(nr->slots, (size_t)n * sizeof(*s));
        if (!s)
            return -ENOMEM;
        memset(s + nr->nslots, 0, (size_t)(n - nr->nslots) * sizeof(*s));
        for (int i = n - 1; i >= nr->nslots; i--) {
            s[i].next_free = nr->free_head;
            nr->free_head = i;
        }
        nr->slots = s;
        nr->nslots = n;
    }
    int i = nr->free_head;
    nr->free_head = nr->slots[i].next_free;
    return i;
}

/* Give the slot back once its connection is gone and nothing of it is in
 * flight. */
static void
slot_maybe_free(struct netring *nr, int i)
{
    struct slot *s = &nr->slots[i];
    if (!s->used || s->c || s->recv_on || s->sending)
        return;
    s->used = false;
    free(s->orphan);
    s->orphan = NULL;
    s->gen++;
    s->turn_queued = s->got_input = false;
    s->next_free = nr->free_head;
    nr->free_head = i;
}

static void
recv_arm(struct netring *nr, int i)
{
    struct slot *s = &nr->slots[i];
    struct io_uring_sqe *sqe = get_sqe(nr);
    if (!sqe) {
        /* cannot happen after a submit: the ring was just emptied */
        log_warn("netring: no submission entry for a recv");
        return;
    }
    io_uring_prep_recv_multishot(sqe, s->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = NETRING_BGID;
    io_uring_sqe_set_data64(sqe, ud(OP_RECV, s->gen, (uint32_t)i));
    s->recv_on = true;
}

static void
recv_cancel(struct netring *nr, int i)
{
    struct slot *s = &nr->slots[i];
    if (!s->recv_on || s->cancelling)
        return;
    struct io_uring_sqe *sqe = get_sqe(nr);
    if (!sqe)
        return;
    io_uring_prep_cancel64(sqe, ud(OP_RECV, s->gen, (uint32_t)i), 0);
    io_uring_sqe_set_data64(sqe, ud(OP_CANCEL, 0, 0));
    s->cancelling = true;
}

/* Add slot i to list *l (of *n, room *cap) unless *flag says it is on it:
 * false when there is no memory for it. */
static bool
list_push(int **l, int *n, int *cap, int i, bool *flag)
{
    if (*flag)
        return true;
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 64;
        int *t = realloc(*l, (size_t)c * sizeof(*t));
        if (!t)
            return false;
        *l = t;
        *cap = c;
    }
    (*l)[(*n)++] = i;
    *flag = true;
    return true;
}

/* --- struct conn_io hooks --- */

static int
hook_attach(void *arg, struct conn *c, int fd)
{
    struct netring *nr = arg;
    int i = slot_new(nr);
    if (i < 0)
        return i;
    struct slot *s = &nr->slots[i];
    s->used = true;
    s->c = c;
    s->fd = fd;
    s->want_in = true;
    s->recv_on = s->cancelling = s->sending = s->turn_queued = false;
    s->got_input = false;
    recv_arm(nr, i);
    return i;
}

static int
hook_send(void *arg, int i, const void *buf, size_t len)
{
    struct netring *nr = arg;
    struct slot *s = &nr->slots[i];
    struct io_uring_sqe *sqe = get_sqe(nr);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_send(sqe, s->fd, buf, len, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, ud(OP_SEND, s->gen, (uint32_t)i));
    s->sending = true;
    return 0;
}

static void
hook_watch(void *arg, int i, bool in, bool turn)
{
    struct netring *nr = arg;
    struct slot *s = &nr->slots[i];
    s->want_in = in;
    if (in && !s->recv_on)
        recv_arm(nr, i);
    else if (!in)
        recv_cancel(nr, i);
    if (turn) /* without memory for it, its next input or send is */
        list_push(&nr->turns, &nr->nturns, &nr->turns_cap, i, &s->turn_queued);
}

static void
hook_detach(void *arg, int i, void *sendbuf)
{
    struct netring *nr = arg;
    struct slot *s = &nr->slots[i];
    s->c = NULL;
    s->want_in = false;
    s->turn_queued = s->got_input = false;
    s->orphan = sendbuf;
    recv_cancel(nr, i);
    /* The caller closes the descriptor next, and another thread (the
     * acceptor) may get its number at once for a new connection. An SQE
     * names the socket by number, looked up when submitted: a recv or send
     * of this connection still queued would run on the new socket (a recv
     * there eats the new client's request, and its end). Submitting now
     * binds them to this socket while the number is still its own. */
    if (io_uring_sq_ready(&nr->ring))
        io_uring_submit(&nr->ring);
    slot_maybe_free(nr, i);
}

/* --- completions --- */

static void
on_recv(struct netring *nr, uint32_t i, const struct io_uring_cqe *cqe)
{
    struct slot *s = &nr->slots[i];
    bool more = cqe->flags & IORING_CQE_F_MORE;
    if (!more)
        s->recv_on = s->cancelling = false;
    bool got = false;
    if (cqe->flags & IORING_CQE_F_BUFFER) {
        unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        if (s->c && cqe->res > 0) {
            conn_input(s->c, nr->bufs + (size_t)bid * NETRING_BUF_SIZE,
                       (size_t)cqe->res, false);
            got = true;
        }
        buf_return(nr, bid);
    } else if (s->c && cqe->res == 0) {
        conn_input(s->c, NULL, 0, false); /* the peer closed */
        got = true;
    } else if (s->c && cqe->res < 0 && cqe->res != -ENOBUFS &&
               cqe->res != -ECANCELED) {
        conn_input(s->c, NULL, 0, true);
        got = true;
    }
    /* the input runs after the batch (run_inputs): requests split over
     * several buffers get one pass of the parser and one send */
    if (got && !list_push(&nr->inputs, &nr->ninputs, &nr->inputs_cap, (int)i,
                          &s->got_input))
        conn_input_done(s->c); /* no memory for the list: now */
    s = &nr->slots[i];         /* the connection may be gone */
    /* armed again only where the socket may have more to give: the
     * multishot ended with data, out of buffers, or cancelled and wanted
     * again; never after an error or the end (the connection is ending,
     * and a recv queued now could outlive its descriptor: hook_detach) */
    bool rearm = cqe->res > 0 || cqe->res == -ENOBUFS || cqe->res == -ECANCELED;
    if (!s->recv_on && s->c && s->want_in && rearm)
        recv_arm(nr, (int)i);
    slot_maybe_free(nr, (int)i);
}

static void
on_send(struct netring *nr, uint32_t i, int res)
{
    struct slot *s = &nr->slots[i];
    s->sending = false;
    if (s->c)
        conn_sent(s->c, res);
    slot_maybe_free(nr, (int)i);
}

static int
poll_arm(struct netring *nr, int k)
{
    struct io_uring_sqe *sqe = get_sqe(nr);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_poll_add(sqe, nr->watch[k].fd, POLLIN);
    io_uring_sqe_set_data64(sqe, ud(OP_POLL, 0, (uint32_t)k));
    return 0;
}

static void
on_cqe(struct netring *nr, const struct io_uring_cqe *cqe)
{
    uint64_t d = io_uring_cqe_get_data64(cqe);
    uint32_t idx = (uint32_t)d;
    enum netring_op op = (enum netring_op)(d >> 56);
    if ((op == OP_RECV || op == OP_SEND) &&
        (idx >= (uint32_t)nr->nslots ||
         ((d >> 32) & 0xffffff) != (nr->slots[idx].gen & 0xffffff))) {
        /* a slot is reused only once nothing of it is in flight */
        log_error("netring: completion for a stale slot %u", idx);
        return;
    }
    switch (op) {
    case OP_RECV:
        on_recv(nr, idx, cqe);
        break;
    case OP_SEND:
        on_send(nr, idx, cqe->res);
        break;
    case OP_POLL:
        /* one-shot, armed again after the handler: level-triggered */
        if (cqe->res >= 0)
            nr->watch[idx].fn(nr->watch[idx].arg, nr->watch[idx].fd);
        else
            log_warn("netring: poll on fd %d: %s", nr->watch[idx].fd,
                     strerror(-cqe->res));
        poll_arm(nr, (int)idx);
        break;
    case OP_CANCEL:
        break;     /* found, or already ended: the recv's own cqe says which */
    case OP_FLASH: /* checked by the store, answered at the reap */
        if (tc_async_complete(nr->cw->sh->cache, d, cqe->res) > 0)
            nr->flash_done = true;
        break;
    }
}

/* The connections that received input in this batch run it. */
static void
run_inputs(struct netring *nr)
{
    if (nr->ninputs >= 2) {
        /* the inputs' first reads, hinted to the engine together */
        struct conn *cs[NETRING_PREFETCH_MAX];
        size_t n = 0;
        for (int k = 0; k < nr->ninputs && n < NETRING_PREFETCH_MAX; k++) {
            struct slot *s = &nr->slots[nr->inputs[k]];
            if (s->c && s->got_input)
                cs[n++] = s->c;
        }
        conn_prefetch_inputs(cs, n);
    }
    for (int k = 0; k < nr->ninputs; k++) {
        struct slot *s = &nr->slots[nr->inputs[k]];
        if (!s->c || !s->got_input)
            continue;
        s->got_input = false;
        conn_input_done(s->c);
    }
    nr->ninputs = 0;
}

/* The connections that yielded under -R get their turn, after the others
 * had theirs. Turns asked for meanwhile wait for the next round. */
static void
run_turns(struct netring *nr)
{
    int take = nr->nturns;
    if (take == 0)
        return; /* nr->turns may still be NULL: no memmove from it */
    for (int k = 0; k < take; k++) {
        struct slot *s = &nr->slots[nr->turns[k]];
        if (!s->c || !s->turn_queued)
            continue;
        s->turn_queued = false;
        conn_event(s->c, EPOLLOUT); /* a turn, as epoll gives it */
    }
    memmove(nr->turns, nr->turns + take,
            (size_t)(nr->nturns - take) * sizeof(*nr->turns));
    nr->nturns -= take;
}

/* --- the loop --- */

static int
wait_ms(struct netring *nr, unsigned ms)
{
    struct __kernel_timespec ts = {.tv_sec = ms / 1000,
                                   .tv_nsec = (long long)(ms % 1000) * 1000000};
    struct io_uring_cqe *cqe;
    int rc = io_uring_submit_and_wait_timeout(&nr->ring, &cqe, 1, &ts, NULL);
    if (rc == -ETIME || rc == -EINTR)
        return 0;
    return rc < 0 ? rc : (int)io_uring_cq_ready(&nr->ring);
}

/* Submit what is queued and wait for completions (see the top of the
 * file): their number, or a negative errno. */
static int
ring_wait(struct netring *nr, bool *idle)
{
    struct tc_cache *cache = nr->cw->sh->cache;
    bufs_publish(nr);
    int rc = io_uring_submit_and_get_events(&nr->ring);
    if (rc < 0 && rc != -EINTR && rc != -EBUSY)
        return rc;
    int n = (int)io_uring_cq_ready(&nr->ring);
    if (n == 0 && nr->nturns)
        return 0; /* turns to run: do not sleep */
    if (n == 0 && !*idle) {
        tc_thread_poll(cache);
        n = wait_ms(nr, NETRING_IDLE_MS);
    }
    if (n == 0) {
        if (!*idle)
            tc_thread_quiesce(cache);
        *idle = true;
        n = wait_ms(nr, nr->cw->inflight ? NETRING_REAP_MS : 1000);
    }
    if (n > 0)
        *idle = false;
    return n;
}

void
netring_run(struct netring *nr, _Atomic bool *stop)
{
    struct conn_worker *w = nr->cw;
    uint32_t last_sweep = 0;
    bool idle = false;
    while (!atomic_load_explicit(stop, memory_order_acquire)) {
        int n = ring_wait(nr, &idle);
        w->now = conn_now(w->sh);
        if (n < 0) {
            log_error("worker io_uring wait: %s", strerror(-n));
            return;
        }
        unsigned head, seen = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&nr->ring, head, cqe)
        {
            on_cqe(nr, cqe);
            seen++;
        }
        io_uring_cq_advance(&nr->ring, seen);
        run_inputs(nr);
        run_turns(nr);
        /* this turn's flash reads: on this ring they are already queued
         * for the next enter (submit counts them); one needing no I/O
         * (a write buffer's value, a stale locator) is ready at once */
        bool queued = nr->flash && w->submit_due;
        conn_async_submit(w);
        if (nr->flash_done || queued || (w->inflight && n == 0)) {
            nr->flash_done = false;
            conn_async_reap(w); /* finished, or past their deadline */
        }
        if (w->now != last_sweep) {
            last_sweep = w->now;
            conn_sweep_idle(w);
        }
    }
}

int
netring_flash(struct netring *nr)
{
    int rc =
        tc_async_ring(nr->cw->sh->cache, &nr->ring, (uint64_t)OP_FLASH << 56);
    nr->flash = rc == 0;
    return rc;
}

/* The worker stops: the I/O of its flash reads still on the ring is
 * waited for (bounded), so that no buffer of the store is written after
 * the ring is gone; then the store lets go of the ring. */
static void
flash_drain(struct netring *nr)
{
    struct tc_cache *cache = nr->cw->sh->cache;
    for (int k = 0; k < NETRING_DRAIN_MS / 10 && tc_async_busy(cache); k++) {
        bufs_publish(nr);
        if (wait_ms(nr, 10) < 0)
            break;
        unsigned head, seen = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&nr->ring, head, cqe)
        {
            /* only the flash reads': the connections are gone, and a
             * watched descriptor's handler would bring new ones */
            uint64_t d = io_uring_cqe_get_data64(cqe);
            if (d >> 56 == OP_FLASH)
                tc_async_complete(cache, d, cqe->res);
            seen++;
        }
        io_uring_cq_advance(&nr->ring, seen);
    }
    tc_async_detach(cache);
    nr->flash = false;
}

int
netring_watch(struct netring *nr, int fd, netring_fn *fn, void *arg)
{
    if (nr->nwatch == NETRING_WATCH_MAX)
        return -ENOSPC;
    int k = nr->nwatch++;
    nr->watch[k] = (struct watch){.fd = fd, .fn = fn, .arg = arg};
    return poll_arm(nr, k);
}

/* --- set-up --- */

/* A ring for one thread: single issuer with deferred task work where the
 * kernel has them (6.1), else plain. */
static int
ring_init(struct io_uring *ring, unsigned sq, unsigned cq)
{
    struct io_uring_params p = {0};
    p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL |
              IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    p.cq_entries = cq;
    int rc = io_uring_queue_init_params(sq, ring, &p);
    if (rc == -EINVAL) {
        memset(&p, 0, sizeof(p));
        p.flags = IORING_SETUP_CQSIZE;
        p.cq_entries = cq;
        rc = io_uring_queue_init_params(sq, ring, &p);
    }
    return rc;
}

int
netring_create(struct conn_worker *w, struct netring **out)
{
    struct netring *nr = calloc(1, sizeof(*nr));
    if (!nr) {
        err_set("no memory for a worker's io_uring");
        return -ENOMEM;
    }
    nr->free_head = -1;
    int rc = ring_init(&nr->ring, NETRING_SQ, NETRING_CQ);
    if (rc) {
        err_set("cannot set up an io_uring: %s", strerror(-rc));
        free(nr);
        return rc;
    }
    nr->ring_up = true;
    /* each io_uring_enter then skips the ring's file lookup; a kernel
     * without it (before 5.18) works the same, a little slower */
    (void)io_uring_register_ring_fd(&nr->ring);
    rc = bufs_setup(nr);
    if (rc) {
        err_set("cannot register %d receive buffers with io_uring: %s",
                NETRING_BUFS, strerror(-rc));
        netring_destroy(nr);
        return rc;
    }
    nr->cw = w;
    nr->io = (struct conn_io){.attach = hook_attach,
                              .send = hook_send,
                              .watch = hook_watch,
                              .detach = hook_detach,
                              .arg = nr};
    w->io = &nr->io;
    *out = nr;
    return 0;
}

void
netring_destroy(struct netring *nr)
{
    if (!nr)
        return;
    if (nr->flash)
        flash_drain(nr);
    if (nr->cw)
        nr->cw->io = NULL;
    if (nr->ring_up)
        io_uring_queue_exit(&nr->ring); /* ends whatever is in flight */
    for (int i = 0; i < nr->nslots; i++)
        free(nr->slots[i].orphan);
    free(nr->slots);
    free(nr->turns);
    free(nr->inputs);
    free(nr->bufs);
    if (nr->br)
        munmap(nr->br, NETRING_BUFS * sizeof(struct io_uring_buf));
    free(nr);
}

/* --- the acceptor's ring --- */

#define ACC_MAX 64 /* listeners and watched descriptors */

struct netring_acc {
    struct io_uring ring;
    struct {
        int fd;
        uint32_t tag;
        bool accept; /* a listener (else a watched descriptor) */
    } d[ACC_MAX];
    int n;
};

static int
acc_arm(struct netring_acc *a, int k)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&a->ring);
    if (!sqe) {
        io_uring_submit(&a->ring);
        sqe = io_uring_get_sqe(&a->ring);
        if (!sqe)
            return -EBUSY;
    }
    if (a->d[k].accept)
        io_uring_prep_multishot_accept(sqe, a->d[k].fd, NULL, NULL,
                                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    else
        io_uring_prep_poll_add(sqe, a->d[k].fd, POLLIN);
    io_uring_sqe_set_data64(sqe, (uint64_t)k);
    return 0;
}

static int
acc_add(struct netring_acc *a, int fd, uint32_t tag, bool accept)
{
    for (int k = 0; k < a->n; k++)
        if (a->d[k].fd == fd && a->d[k].accept == accept)
            return acc_arm(a, k); /* armed again after a pause */
    if (a->n == ACC_MAX)
        return -ENOSPC;
    int k = a->n++;
    a->d[k].fd = fd;
    a->d[k].tag = tag;
    a->d[k].accept = accept;
    return acc_arm(a, k);
}

int
netring_acc_create(struct netring_acc **out)
{
    struct netring_acc *a = calloc(1, sizeof(*a));
    if (!a) {
        err_set("no memory for the acceptor's io_uring");
        return -ENOMEM;
    }
    int rc = ring_init(&a->ring, 64, 1024);
    if (rc) {
        err_set("cannot set up the acceptor's io_uring: %s", strerror(-rc));
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

int
netring_acc_listen(struct netring_acc *a, int fd, uint32_t tag)
{
    return acc_add(a, fd, tag, true);
}

int
netring_acc_watch(struct netring_acc *a, int fd, uint32_t tag)
{
    return acc_add(a, fd, tag, false);
}

static bool
acc_pause_errno(int res)
{
    return res == -EMFILE || res == -ENFILE || res == -ENOBUFS ||
           res == -ENOMEM;
}

int
netring_acc_wait(struct netring_acc *a, struct netring_ev *ev, int max,
                 int timeout_ms)
{
    struct io_uring_cqe *cqe;
    int rc;
    if (timeout_ms < 0) {
        rc = io_uring_submit_and_wait(&a->ring, 1);
    } else {
        struct __kernel_timespec ts = {
            .tv_sec = timeout_ms / 1000,
            .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
        rc = io_uring_submit_and_wait_timeout(&a->ring, &cqe, 1, &ts, NULL);
    }
    if (rc == -ETIME || rc == -EINTR)
        rc = 0;
    if (rc < 0)
        return rc;
    int n = 0;
    while (n < max && io_uring_peek_cqe(&a->ring, &cqe) == 0) {
        int k = (int)io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        bool more = cqe->flags & IORING_CQE_F_MORE;
        io_uring_cqe_seen(&a->ring, cqe);
        if (k < 0 || k >= a->n)
            continue;
        if (a->d[k].accept && res == -ECANCELED)
            continue;
        ev[n++] = (struct netring_ev){.tag = a->d[k].tag, .res = res};
        /* a poll is one-shot, submitted again with the next wait (after
         * the caller read what it reported); an accept that ended is too,
         * unless the caller pauses on its error */
        if (!more && !(a->d[k].accept && acc_pause_errno(res)))
            acc_arm(a, k);
    }
    return n;
}

void
netring_acc_destroy(struct netring_acc *a)
{
    if (!a)
        return;
    /* the ring's exit cancels the accepts; a socket accepted meanwhile
     * sits in a completion: close it */
    struct io_uring_cqe *cqe;
    for (int k = 0; k < a->n; k++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&a->ring);
        if (sqe && a->d[k].accept) {
            io_uring_prep_cancel_fd(sqe, a->d[k].fd, IORING_ASYNC_CANCEL_ALL);
            io_uring_sqe_set_data64(sqe, (uint64_t)ACC_MAX);
        }
    }
    io_uring_submit(&a->ring);
    struct __kernel_timespec ts = {.tv_nsec = 100000000};
    while (io_uring_wait_cqe_timeout(&a->ring, &cqe, &ts) == 0) {
        int k = (int)io_uring_cqe_get_data64(cqe);
        if (k < a->n && a->d[k].accept && cqe->res >= 0)
            close(cqe->res);
        io_uring_cqe_seen(&a->ring, cqe);
    }
    io_uring_queue_exit(&a->ring);
    free(a);
}

/* --- the probe --- */

/* Arm a multishot recv over a socket pair, send it a byte: the completion
 * must carry a provided buffer and say the recv goes on. */
static int
probe_recv(struct io_uring *ring, int fd, int peer)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = NETRING_BGID;
    int rc = io_uring_submit(ring);
    if (rc < 0)
        return rc;
    if (write(peer, "x", 1) != 1)
        return -errno;
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {.tv_sec = 1};
    rc = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
    if (rc)
        return rc;
    rc = cqe->res;
    unsigned flags = cqe->flags;
    io_uring_cqe_seen(ring, cqe);
    if (rc < 0)
        return rc;
    if (rc != 1 || !(flags & IORING_CQE_F_BUFFER) ||
        !(flags & IORING_CQE_F_MORE))
        return -EOPNOTSUPP;
    return 0;
}

int
netring_probe(void)
{
    struct io_uring ring;
    int sv[2] = {-1, -1};
    char buf[2][64];
    if (NETRING_UNDER_VALGRIND()) {
        err_set("running under valgrind, which does not follow io_uring");
        return -ENOTSUP;
    }
    int rc = io_uring_queue_init(8, &ring, 0);
    if (rc) {
        err_set("io_uring refused: %s", strerror(-rc));
        return rc;
    }
    size_t rsz = 4096;
    struct io_uring_buf_ring *br = mmap(NULL, rsz, PROT_READ | PROT_WRITE,
                                        MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (br == MAP_FAILED) {
        rc = -errno;
        err_set("no memory for the io_uring probe");
        goto err_ring;
    }
    struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)br,
                                   .ring_entries = 2,
                                   .bgid = NETRING_BGID};
    rc = io_uring_register_buf_ring(&ring, &reg, 0);
    if (rc) {
        err_set("io_uring has no provided-buffer rings here (Linux 5.19+): "
                "%s",
                strerror(-rc));
        goto err_map;
    }
    io_uring_buf_ring_init(br);
    for (int i = 0; i < 2; i++)
        io_uring_buf_ring_add(br, buf[i], sizeof(buf[i]), (unsigned short)i,
                              io_uring_buf_ring_mask(2), i);
    io_uring_buf_ring_advance(br, 2);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        rc = -errno;
        err_set("io_uring probe: socketpair: %s", strerror(errno));
        goto err_map;
    }
    rc = probe_recv(&ring, sv[0], sv[1]);
    if (rc)
        err_set("io_uring has no multishot recv here (Linux 6.0+): %s",
                strerror(-rc));
    close(sv[0]);
    close(sv[1]);
err_map:
    /* the ring's exit ends the recv before the buffers go */
    io_uring_queue_exit(&ring);
    munmap(br, rsz);
    return rc;
err_ring:
    io_uring_queue_exit(&ring);
    return rc;
}

/*
 * Client connections (src/server/conn.h).
 *
 * One wake-up of a connection: read what the socket has (a bounded number
 * of reads), run proto_process() over the input after every read until it
 * wants more, and only when the socket is drained (a short read) or the
 * budget is used up, write the replies out: a pipelined batch of requests
 * gets one send() for all its replies. The obuf is one contiguous block, so
 * one send() is one syscall for everything pending; a partial send waits
 * for EPOLLOUT instead of trying again into a full socket buffer.
 *
 * Back-pressure: while more than sh->out_high bytes wait to be written, the
 * connection stops running requests and stops reading (EPOLLIN off), so a
 * client that never reads its replies holds at most out_high plus one
 * parser call's replies: one request, or PROTO_GET_SLICE plus one value of
 * a multi-key get, which stops between keys (sess.resume) and carries on
 * here once the output drains. When the output drains below out_high, the
 * requests already buffered run and reading resumes.
 *
 * Input buffer: starts at CONN_IN_START, doubles while reads fill it (up to
 * CONN_IN_FAST), grows to what proto_sess.need says a request needs (up to
 * sh->in_max), and shrinks back once empty after a large request.
 *
 * Epoll is level-triggered: a connection left with unread input (budget
 * used up) is reported again at the next epoll_wait, after the others.
 *
 * Requests per wake-up (-R, memcached's reqs_per_event): a wake-up runs at
 * most sh->max_reqs requests (sess.budget); a connection with
 * complete requests still buffered then yields (conn_yields): it reads
 * nothing more and asks for EPOLLOUT, which a writable socket reports at
 * the next epoll_wait, after the other ready connections have had their
 * turn, and the next wake-up runs what is buffered first.
 *
 * TLS (src/server/tls.h): a connection with c->tls reads and writes through
 * tls_recv() and tls_send(), which behave like recv() and send(); every
 * read gets room for a whole record (c->in_room), and the epoll mask and
 * the events reported pass through tls_want_mask() / tls_want_events()
 * for the reads that wait to write and the writes that wait to read. A
 * plain connection pays one predictable branch per call.
 *
 * Flash reads: requests run with the connection as the owner of
 * the thread's asynchronous reads (tc_async_owner), so a get of a value on
 * the NVMe tier leaves a hole in the obuf instead of blocking the worker;
 * every read queued while the worker handles one epoll wake-up (multigets,
 * pipelined gets, many connections) goes out in one submit after it. While
 * holes are open the connection is parked: it sends what precedes the first
 * hole, reads and parses nothing more, and the worker serves its other
 * connections. Parking leaves EPOLLIN on: a client with one request in
 * flight sends nothing until its reply, so switching it off and on would
 * cost two epoll_ctl calls per flash read; only when input does arrive
 * while parked (pipelining) does it go off until the connection resumes. The
 * worker's ring eventfd (under io_uring: the flash completions on the
 * worker's own ring, netring.c) wakes conn_async_reap(), which fills each hole
 * with its checked value (or puts the protocol's miss in place of the reply)
 * and resumes the connection: replies leave in request order.
 *
 * Under io_uring (sh's worker has a conn_io, src/server/netring.c) the same
 * code runs with the bytes moved by the ring: input arrives through
 * conn_input() instead of recv(), a send is queued instead of made, and
 * while it is in flight (c->sending) nothing is appended to the obuf (the
 * kernel reads it): requests wait, as behind a full socket, and past
 * CONN_IO_IN_HIGH bytes of waiting input it stops receiving. A connection
 * with holes sends with send() itself, since filling a hole may move the
 * block. settle() tells the engine whether to receive (the EPOLLIN bit)
 * and asks for a turn instead of EPOLLOUT after a -R yield.
 *
 * Concurrency:
 *   struct conn        owner worker only (the acceptor before the hand-off,
 *                      through the worker's locked queue), except:
 *   c->state,
 *   c->last_active     _Atomic, relaxed: written by the owner, read by
 *                      "stats conns" on other workers, under list->lock;
 *                      lone values, nothing published with them.
 *   c->fd, c->addr,
 *   c->listen_addr     immutable while c is on a list.
 *   list->head, n,
 *   c->prev, c->next   list->lock: the owner links and unlinks under it,
 *                      readers walk under it; a connection is unlinked
 *                      before it is freed, so a walker never sees freed
 *                      memory. The owner reads its own links without the
 *                      lock (it is the only writer).
 */

#include "src/server/conn.h"

#include "src/base/clock.h"
#include "src/base/log.h"
#include "src/server/proto/proto_watch.h"
#include "src/server/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#define CONN_IN_START 2048
#define CONN_IN_FAST (16 * 1024)
/* conn_io: while requests wait (a send in flight, a -R yield), receive no
 * more once this much input is buffered. */
#define CONN_IO_IN_HIGH (256 * 1024)
/* Reads per wake-up before the worker turns to its other connections. */
#define CONN_READS_PER_EVENT 16

enum conn_state {
    CS_WAITING, /* nothing buffered, waiting for a request */
    CS_READ,    /* part of a request buffered */
    CS_PARSE,   /* running requests */
    CS_WRITE,   /* replies pending, waiting for the socket */
    CS_IO,      /* parked: flash reads in flight */
    CS_CLOSING,
};

static const char *const state_names[] = {
    [CS_WAITING] = "conn_waiting", [CS_READ] = "conn_read",
    [CS_PARSE] = "conn_parse_cmd", [CS_WRITE] = "conn_write",
    [CS_IO] = "conn_io_queue",     [CS_CLOSING] = "conn_closing",
};

/* The fields every request reads come first, in one or two cache lines
 * (at depth 1 a connection's lines are cold when its request comes: each
 * line is a miss); the list links and the address, cold, last. */
struct conn {
    struct conn_worker *w; /* NULL until attached */
    const struct conn_shared *sh;
    uint32_t events; /* epoll mask registered */
    bool eof;        /* the peer closed its side */
    bool closing;    /* PROTO_CLOSE: flush, then close */
    bool dead;       /* socket error or no memory: close now */
    bool held;       /* complete requests held back by the output mark
                        or by open holes */
    bool reaped;     /* on the worker's list of connections a reap filled */
    bool in_parked;  /* input arrived while parked: EPOLLIN off until resumed */
    bool yielded;    /* -R: budget used up with requests still buffered */
    bool sending;    /* conn_io: a send of the obuf is in flight */
    bool preread;    /* epoll: conn_preread read for this wake-up's event */
    bool pre_drained; /* ... and the socket had no more */
    int8_t pre_rc;    /* ... read_once's result, sign only: 1, 0, -1 */
    int io_slot;      /* conn_io: the engine's number for it */
    int fd;
    struct tls_conn *tls; /* NULL: plain TCP or UNIX socket */
    size_t in_room;       /* room every read gets: 0, or with TLS a whole
                             record (TLS_RECORD_MAX) */
    _Atomic int state;
    _Atomic uint32_t last_active; /* conn_now() of the last progress */

    char *in;
    size_t in_off; /* first byte not yet consumed by the parser */
    size_t in_len; /* bytes in in */
    size_t in_cap;
    size_t in_want; /* capacity the next read should have */

    struct obuf out;
    struct proto_sess sess;

    struct conn *prev, *next;
    struct conn *reap_next;
    const char *listen_addr;
    char addr[CONN_ADDR_MAX];
};

uint32_t
conn_now(const struct conn_shared *sh)
{
    /* once per loop turn: the coarse clock (whole seconds are asked for),
     * which may be a tick behind the epoch taken at the start */
    uint64_t ns = clock_coarse_nsec();
    return ns > sh->epoch_ns ? (uint32_t)((ns - sh->epoch_ns) / 1000000000ull)
                             : 0;
}

static void
set_state(struct conn *c, enum conn_state s)
{
    atomic_store_explicit(&c->state, s, memory_order_relaxed);
}

static void
touch(struct conn *c)
{
    atomic_store_explicit(&c->last_active, c->w->now, memory_order_relaxed);
}

/* recv() and send() without glibc's cancellation point around the system
 * call (two atomic updates of the thread's cancel state per call, a
 * tenth of an epoll request's instructions outside the parser): no thread
 * of the server is ever cancelled. Same results and errno. */
static ssize_t
sock_recv(int fd, void *buf, size_t len)
{
    return syscall(SYS_recvfrom, fd, buf, len, 0, NULL, NULL);
}

static ssize_t
sock_send(int fd, const void *buf, size_t len)
{
    return syscall(SYS_sendto, fd, buf, len, MSG_NOSIGNAL, NULL, 0);
}

/* --- create / destroy --- */

/* "tcp:1.2.3.4:5678", "tcp6:[::1]:5678", "unix:/path" (memcached's form). */
static void
peer_name(int fd, char *buf, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[INET6_ADDRSTRLEN];
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) {
        snprintf(buf, n, "unknown");
        return;
    }
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        snprintf(buf, n, "tcp:%s:%u", host, ntohs(a->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        snprintf(buf, n, "tcp6:[%s]:%u", host, ntohs(a->sin6_port));
    } else {
        snprintf(buf, n, "unix:");
    }
}

int
conn_create(const struct conn_shared *sh, int fd, const char *listen_addr,
            struct conn **out)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->in = malloc(CONN_IN_START);
    if (!c->in) {
        free(c);
        return -ENOMEM;
    }
    c->fd = fd;
    c->sh = sh;
    c->in_cap = c->in_want = CONN_IN_START;
    c->listen_addr = listen_addr;
    c->tls = NULL;
    c->in_room = 0;
    peer_name(fd, c->addr, sizeof(c->addr));
    if (!strcmp(c->addr, "unix:"))
        snprintf(c->addr, sizeof(c->addr), "%s", listen_addr);
    obuf_init(&c->out);
    proto_sess_init(&c->sess, sh->cache, sh->ops, sh->srv, sh->item_size_max);
    c->sess.fd = fd;
    c->sess.no_flush = sh->no_flush;
    c->sess.no_cas = sh->no_cas;
    c->sess.no_dump = sh->no_dump;
    c->sess.no_watch = sh->no_watch;
    c->sess.binding = sh->binding;
    c->sess.auth = sh->auth;
    c->sess.authed = sh->auth == NULL;
    c->sess.sasl = sh->sasl;
    atomic_init(&c->state, CS_WAITING);
    atomic_init(&c->last_active, 0);
    *out = c;
    return 0;
}

void
conn_set_tls(struct conn *c, struct tls_conn *tls)
{
    c->tls = tls;
    c->in_room = TLS_RECORD_MAX;
}

static void
list_add(struct conn_list *l, struct conn *c)
{
    pthread_mutex_lock(&l->lock);
    c->prev = NULL;
    c->next = l->head;
    if (l->head)
        l->head->prev = c;
    l->head = c;
    l->n++;
    pthread_mutex_unlock(&l->lock);
}

static void
list_del(struct conn_list *l, struct conn *c)
{
    pthread_mutex_lock(&l->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    l->n--;
    pthread_mutex_unlock(&l->lock);
}

int
conn_attach(struct conn *c, struct conn_worker *w)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    c->w = w;
    touch(c);
    if (w->io)
        c->io_slot = w->io->attach(w->io->arg, c, c->fd);
    if (w->io ? c->io_slot < 0
              : epoll_ctl(w->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        int rc = w->io ? c->io_slot : -errno;
        log_warn("cannot watch connection %s: %s", c->addr, strerror(-rc));
        c->w = NULL;
        return rc;
    }
    c->events = EPOLLIN;
    list_add(&w->list, c);
    log_debug("connection %d from %s", c->fd, c->addr);
    return 0;
}

void
conn_destroy(struct conn *c)
{
    if (c->w) {
        /* unlink first: a "stats conns" walker may be looking at c */
        list_del(&c->w->list, c);
        log_debug("connection %d from %s closed", c->fd, c->addr);
    }
    if (c->out.nholes) /* its flash reads finish without it */
        tc_async_cancel(c->sh->cache, c);
    if (c->tls)
        tls_conn_destroy(c->tls);
    if (c->w && c->w->io) {
        /* a send in flight keeps reading its block: the engine frees it */
        c->w->io->detach(c->w->io->arg, c->io_slot,
                         c->sending ? c->out.buf : NULL);
        if (c->sending)
            c->out.buf = NULL;
    }
    close(c->fd); /* also removes it from the epoll set */
    proto_sess_fini(&c->sess);
    obuf_fini(&c->out);
    free(c->in);
    atomic_fetch_sub_explicit(c->sh->curr_conns, 1, memory_order_relaxed);
    free(c);
}

/* --- input --- */

/* Make room for the next read: rewind or slide the unconsumed bytes to the
 * front, grow to what the pending request needs, and to c->in_room free
 * bytes at least. 0, or -E2BIG when a request does not fit in sh->in_max,
 * -ENOMEM. */
static int
in_prepare(struct conn *c)
{
    size_t keep = c->in_len - c->in_off;
    if (keep == 0 && c->in_cap > CONN_IN_FAST + c->in_room) {
        /* after a large request */
        char *p = realloc(c->in, CONN_IN_START + c->in_room);
        if (p) {
            c->in = p;
            c->in_cap = c->in_want = CONN_IN_START + c->in_room;
        }
    }
    if (c->in_off) {
        memmove(c->in, c->in + c->in_off, keep);
        c->in_off = 0;
        c->in_len = keep;
    }
    size_t want = MAX(c->in_want, c->sess.need);
    if (keep == c->in_cap)
        want = MAX(want, c->in_cap * 2);
    if (keep >= c->sh->in_max)
        return -E2BIG; /* a request larger than -I allows */
    /* with TLS the buffer may pass in_max by the room for one record */
    want = MAX(MIN(want, c->sh->in_max), keep + c->in_room);
    if (want > c->in_cap) {
        char *p = realloc(c->in, want);
        if (!p)
            return -ENOMEM;
        c->in = p;
        c->in_cap = want;
    }
    return c->in_len < c->in_cap ? 0 : -E2BIG;
}

void
conn_fold_counters(struct proto_counters *p, struct stats_ctr *ctr)
{
    if (p->cmd_total)
        stats_ctr_add(ctr, STATS_CMD_TOTAL, p->cmd_total);
    if (p->meta_cmds)
        stats_ctr_add(ctr, STATS_CMD_META, p->meta_cmds);
    if (p->get_multi)
        stats_ctr_add(ctr, STATS_GET_MULTI, p->get_multi);
    if (p->bin_cmds)
        stats_ctr_add(ctr, STATS_CMD_BIN, p->bin_cmds);
    if (p->protocol_errors)
        stats_ctr_add(ctr, STATS_PROTO_ERRORS, p->protocol_errors);
    if (p->auth_cmds) {
        stats_ctr_add(ctr, STATS_AUTH_CMDS, p->auth_cmds);
        stats_ctr_add(ctr, STATS_AUTH_ERRORS, p->auth_errors);
    }
    memset(p, 0, sizeof(*p));
}

static void
fold_counters(struct conn *c)
{
    conn_fold_counters(&c->sess.ctr, c->w->ctr);
}

static bool
backlogged(const struct conn *c)
{
    return obuf_pending(&c->out) >= c->sh->out_high;
}

/* Waiting for flash reads: parse and read nothing more. */
static bool
parked(const struct conn *c)
{
    return c->out.nholes > 0;
}

/* Run every complete request in the input, unless the output is
 * backlogged or the connection is parked; the flash reads they queued go
 * out with the wake-up's others (conn_async_submit). */
static void
process(struct conn *c)
{
    bool ran = false;
    unsigned holes = c->out.nholes;
    if (parked(c)) {
        c->held = c->in_off < c->in_len;
        return;
    }
    if (c->w->async)
        tc_async_owner(c->sh->cache, c);
    while (c->in_off < c->in_len && !c->closing && !backlogged(c) &&
           !parked(c) && !c->sending && c->sess.budget > 0) {
        set_state(c, CS_PARSE);
        ssize_t r = proto_process(&c->sess, c->in + c->in_off,
                                  c->in_len - c->in_off, &c->out);
        if (r < 0) { /* PROTO_CLOSE; anything else negative likewise */
            c->closing = true;
            break;
        }
        if (r == 0 && !c->sess.resume)
            break; /* incomplete: read more */
        /* with sess.resume a get stopped half-way: go on unless the
         * output is now backlogged (the loop's condition) */
        c->in_off += MIN((size_t)r, c->in_len - c->in_off);
        ran = true;
    }
    if (c->w->async)
        tc_async_owner(c->sh->cache, NULL);
    if (c->out.nholes > holes)
        c->w->submit_due = true; /* conn_async_submit, after the wake-up */
    c->held = c->in_off < c->in_len && !c->closing &&
              (backlogged(c) || parked(c) || c->sending);
    if (c->sess.budget == 0 && !c->held && c->in_off < c->in_len &&
        !c->closing && !c->yielded) {
        c->yielded = true;
        stats_ctr_add(c->w->ctr, STATS_CONN_YIELDS, 1);
    }
    if (c->in_off == c->in_len)
        c->in_off = c->in_len = 0;
    if (ran)
        touch(c);
    fold_counters(c);
    if (c->out.err) {
        log_warn("connection %s: out of memory for replies; closing", c->addr);
        c->dead = true;
    }
}

/* One read into the input. >0 bytes (*drained: fewer than there was room
 * for, so the socket has nothing more now), 0 nothing to read, -1 stop
 * (eof, error). */
static ssize_t
read_once(struct conn *c, bool *drained)
{
    int rc = in_prepare(c);
    if (rc) {
        log_warn("connection %s: %s; closing", c->addr,
                 rc == -E2BIG ? "request larger than -I allows"
                              : "out of memory for input");
        c->dead = true;
        return -1;
    }
    size_t room = c->in_cap - c->in_len;
    for (;;) {
        ssize_t n = c->tls
                        ? tls_recv(c->tls, c->in + c->in_len, room, c->w->ctr)
                        : sock_recv(c->fd, c->in + c->in_len, room);
        if (n > 0) {
            c->in_len += (size_t)n;
            stats_ctr_add(c->w->ctr, STATS_BYTES_READ, (uint64_t)n);
            *drained = (size_t)n < room;
            if (!*drained && c->in_cap < CONN_IN_FAST)
                c->in_want = c->in_cap * 2;
            return n;
        }
        if (n == 0) {
            c->eof = true;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        c->dead = true;
        return -1;
    }
}

/* Read and run requests until the socket is drained, the budget is used
 * up or the output backs up. */
static void
read_and_process(struct conn *c)
{
    for (int i = 0;; i++) {
        if (c->eof || c->closing || c->dead || backlogged(c) || parked(c) ||
            c->yielded)
            return;
        if (i == CONN_READS_PER_EVENT) {
            stats_ctr_add(c->w->ctr, STATS_CONN_YIELDS, 1);
            return;
        }
        bool drained = false;
        ssize_t n;
        if (c->preread) { /* the wake-up's first read is done */
            c->preread = false;
            n = c->pre_rc;
            drained = c->pre_drained;
        } else {
            n = read_once(c, &drained);
        }
        if (n <= 0)
            return;
        process(c);
        if (drained)
            return; /* write the batch out */
    }
}

/* --- output --- */

/* Write what may go (up to the first hole). True when all of it went out;
 * false when the socket took less (wait for EPOLLOUT) or failed
 * (c->dead). */
static bool
flush(struct conn *c)
{
    const struct conn_io *io = c->w->io;
    if (io && c->sending)
        return false;
    if (io && !c->out.nholes && obuf_sendable(&c->out)) {
        /* queued: conn_sent() carries on */
        if (io->send(io->arg, c->io_slot, c->out.buf + c->out.head,
                     obuf_sendable(&c->out)) != 0)
            c->dead = true;
        c->sending = !c->dead;
        return false;
    }
    while (obuf_sendable(&c->out)) {
        size_t len = obuf_sendable(&c->out);
        ssize_t n =
            c->tls ? tls_send(c->tls, c->out.buf + c->out.head, len, c->w->ctr)
                   : sock_send(c->fd, c->out.buf + c->out.head, len);
        if (n > 0) {
            obuf_consume(&c->out, (size_t)n);
            stats_ctr_add(c->w->ctr, STATS_BYTES_WRITTEN, (uint64_t)n);
            touch(c);
            if ((size_t)n < len)
                return false; /* socket buffer full */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        c->dead = true; /* EPIPE, ECONNRESET, ... */
        return false;
    }
    return true;
}

/* Flush, and while the output falls below the mark run the requests that
 * were held back, flushing again after each round. Every round consumes
 * input, so this ends; it stops early when the socket is full (the
 * remaining rounds come with EPOLLOUT). */
static void
write_out(struct conn *c)
{
    while (!c->dead) {
        bool drained = flush(c);
        if (c->dead || !c->held || backlogged(c) || parked(c) || c->sending)
            return;
        process(c);
        if (!drained)
            return;
    }
}

/* --- after a wake-up: close, or set the epoll mask and state --- */

static bool
finished(const struct conn *c)
{
    if (c->dead)
        return true;
    if (obuf_pending(&c->out) || parked(c) || c->yielded)
        return false;
    /* closing: flushed. eof: whatever was complete has run (not
     * backlogged, since nothing is pending). */
    return c->closing || c->eof;
}

static void
settle(struct conn *c)
{
    if (finished(c)) {
        conn_destroy(c);
        return;
    }
    uint32_t ev = 0;
    if (!parked(c))
        c->in_parked = false;
    /* conn_io: input waits behind a send or a -R yield: receive no more
     * past the mark (epoll reads nothing then) */
    bool in_full = c->w->io && (c->sending || c->yielded) &&
                   c->in_len - c->in_off >= CONN_IO_IN_HIGH;
    if (!c->eof && !c->closing && !backlogged(c) && !c->in_parked && !in_full &&
        (!parked(c) || (c->events & EPOLLIN)))
        ev |= EPOLLIN;
    if (obuf_sendable(&c->out) || c->yielded)
        ev |= EPOLLOUT; /* yielded: the next turn comes with EPOLLOUT */
    if (c->tls)
        ev = tls_want_mask(c->tls, ev);
    if (c->w->io) {
        /* the engine's sends complete by themselves: EPOLLOUT only asks
         * for a turn */
        if ((ev & EPOLLIN) != (c->events & EPOLLIN) || c->yielded)
            c->w->io->watch(c->w->io->arg, c->io_slot, ev & EPOLLIN,
                            c->yielded);
        c->events = ev;
    } else if (ev != c->events) {
        struct epoll_event e = {.events = ev, .data.ptr = c};
        if (epoll_ctl(c->w->epfd, EPOLL_CTL_MOD, c->fd, &e) != 0) {
            log_warn("connection %s: epoll_ctl: %s", c->addr, strerror(errno));
            conn_destroy(c);
            return;
        }
        c->events = ev;
    }
    enum conn_state s = c->closing || c->eof    ? CS_CLOSING
                        : parked(c)             ? CS_IO
                        : obuf_pending(&c->out) ? CS_WRITE
                        : c->in_len > c->in_off ? CS_READ
                                                : CS_WAITING;
    set_state(c, s);
}

/* A new turn: the -R budget is full again. */
static void
conn_turn(struct conn *c)
{
    c->sess.budget = c->sh->max_reqs ? c->sh->max_reqs : UINT32_MAX;
}

bool
conn_preread(struct conn *c, uint32_t events)
{
    /* only an event that is nothing but input, on a connection whose
     * conn_event would start with a read (read_and_process's checks) */
    if ((events & ~(uint32_t)EPOLLIN) || !(events & EPOLLIN) || c->tls ||
        c->eof || c->closing || c->dead || backlogged(c) || parked(c) ||
        c->yielded)
        return false;
    bool drained = false;
    ssize_t n = read_once(c, &drained);
    c->preread = true;
    c->pre_rc = (int8_t)(n > 0 ? 1 : n < 0 ? -1 : 0);
    c->pre_drained = drained;
    return n > 0;
}

void
conn_event(struct conn *c, uint32_t events)
{
    if (c->tls)
        events = tls_want_events(c->tls, events);
    if (events & EPOLLERR) {
        c->dead = true;
        settle(c);
        return;
    }
    conn_turn(c);
    if (events & EPOLLOUT)
        write_out(c);
    if (c->yielded) {
        c->yielded = false;
        process(c); /* what the last turn left buffered comes first */
    }
    if (events & (EPOLLIN | EPOLLHUP)) {
        if (parked(c))
            c->in_parked = true; /* read once resumed: EPOLLIN off till then */
        read_and_process(c);
    }
    c->preread = false; /* used, or the read ended the input (eof, error) */
    write_out(c);
    settle(c);
}

/* --- input and output through a conn_io engine --- */

/* Append n bytes of input. The epoll path reads at most the room it made
 * (in_prepare), here the engine hands over what came; a request still
 * incomplete in sh->in_max bytes closes the connection, as there. */
static void
in_append(struct conn *c, const void *p, size_t n)
{
    size_t keep = c->in_len - c->in_off;
    if (c->in_off) {
        memmove(c->in, c->in + c->in_off, keep);
        c->in_off = 0;
        c->in_len = keep;
    }
    if (c->in_len + n > c->in_cap) {
        size_t want = MAX(c->in_cap * 2, c->in_len + n);
        char *q = realloc(c->in, want);
        if (!q) {
            log_warn("connection %s: out of memory for input; closing",
                     c->addr);
            c->dead = true;
            return;
        }
        c->in = q;
        c->in_cap = want;
    }
    memcpy(c->in + c->in_len, p, n);
    c->in_len += n;
    stats_ctr_add(c->w->ctr, STATS_BYTES_READ, (uint64_t)n);
}

void
conn_input(struct conn *c, const void *p, size_t n, bool err)
{
    if (c->dead)
        return;
    if (err)
        c->dead = true;
    else if (n == 0)
        c->eof = true;
    else
        in_append(c, p, n);
    if (parked(c) && n)
        c->in_parked = true; /* stop receiving till resumed, as epoll */
}

void
conn_input_done(struct conn *c)
{
    conn_turn(c);
    if (!c->dead && !c->yielded) /* a yielded one runs at its turn */
        process(c);
    /* what is left is one request still incomplete, unless requests
     * wait (held, or a -R yield): too large when it fills in_max */
    if (!c->held && !c->yielded && c->in_len - c->in_off >= c->sh->in_max) {
        log_warn("connection %s: request larger than -I allows; closing",
                 c->addr);
        c->dead = true;
    }
    write_out(c);
    settle(c);
}

/* Keys hinted per call: a batch of completions rarely holds more inputs. */
#define CONN_PREFETCH_MAX 16

void
conn_prefetch_inputs(struct conn *const *cs, size_t n)
{
    struct tc_key keys[CONN_PREFETCH_MAX];
    size_t m = 0;
    for (size_t i = 0; i < n && m < CONN_PREFETCH_MAX; i++) {
        const struct conn *c = cs[i];
        if (!c->dead && !parked(c) &&
            proto_read_key(&c->sess, c->in + c->in_off, c->in_len - c->in_off,
                           &keys[m]))
            m++;
    }
    if (m >= 2) /* one key alone overlaps nothing */
        tc_prefetch(cs[0]->sh->cache, keys, m);
}

void
conn_sent(struct conn *c, int res)
{
    c->sending = false;
    if (res > 0) {
        obuf_consume(&c->out, (size_t)res);
        stats_ctr_add(c->w->ctr, STATS_BYTES_WRITTEN, (uint64_t)res);
        touch(c);
    } else if (res != -EAGAIN && res != -EINTR) {
        c->dead = true; /* EPIPE, ECONNRESET, ... (0: nothing taken) */
    }
    conn_event(c, EPOLLOUT);
}

/* --- flash reads --- */

struct reap_list {
    struct conn *head;
};

/* tc_async_fn: one finished read of connection owner. */
static void
reap_one(void *arg, void *owner, uint64_t id, const struct iovec *iov, int niov)
{
    struct reap_list *l = arg;
    struct conn *c = owner;
    obuf_hole_fill(&c->out, id, iov, niov);
    if (!c->reaped) {
        c->reaped = true;
        c->reap_next = l->head;
        l->head = c;
    }
}

void
conn_async_submit(struct conn_worker *w)
{
    if (!w->submit_due)
        return;
    w->submit_due = false;
    int n = tc_async_submit(w->sh->cache);
    if (n > 0)
        w->inflight += (unsigned)n;
}

void
conn_async_reap(struct conn_worker *w)
{
    struct reap_list l = {NULL};
    int n = tc_async_reap(w->sh->cache, reap_one, &l);
    if (n > 0)
        w->inflight -= MIN((unsigned)n, w->inflight);
    while (l.head) {
        struct conn *c = l.head;
        l.head = c->reap_next;
        c->reaped = false;
        if (c->out.err)
            c->dead = true;
        conn_turn(c);
        /* sends up to the next hole; with none left, runs the requests
         * that waited (more input: epoll reports it once EPOLLIN is back) */
        write_out(c);
        settle(c);
    }
}

/* --- sweeps --- */

void
conn_sweep_idle(struct conn_worker *w)
{
    uint32_t limit = w->sh->idle_timeout;
    /* the owner is the only writer of the list: no lock to read it */
    struct conn *c = w->list.head;
    while (c) {
        struct conn *next = c->next;
        if (c->sess.watch) {
            /* a "watch" stream: its lines since the last sweep */
            if (!c->sending) /* else at the next sweep */
                proto_watch_flush(&c->sess, &c->out);
            write_out(c);
            settle(c);
            c = next;
            continue;
        }
        if (!limit) {
            c = next;
            continue;
        }
        uint32_t last =
            atomic_load_explicit(&c->last_active, memory_order_relaxed);
        if (w->now - last > limit) {
            log_debug("connection %s idle for %u s; closing", c->addr,
                      w->now - last);
            stats_ctr_add(w->ctr, STATS_IDLE_KICKS, 1);
            conn_destroy(c);
        }
        c = next;
    }
}

void
conn_close_all(struct conn_worker *w)
{
    while (w->list.head)
        conn_destroy(w->list.head);
}

int
conn_list_init(struct conn_list *l)
{
    l->head = NULL;
    l->n = 0;
    return -pthread_mutex_init(&l->lock, NULL);
}

void
conn_list_fini(struct conn_list *l)
{
    pthread_mutex_destroy(&l->lock);
}

void
conn_list_walk(struct conn_list *l, uint32_t now, conn_walk_fn *fn, void *arg)
{
    pthread_mutex_lock(&l->lock);
    for (struct conn *c = l->head; c; c = c->next) {
        uint32_t last =
            atomic_load_explicit(&c->last_active, memory_order_relaxed);
        int s = atomic_load_explicit(&c->state, memory_order_relaxed);
        struct conn_view v = {
            .fd = c->fd,
            .addr = c->addr,
            .listen_addr = c->listen_addr,
            .state = state_names[s],
            .idle_secs = now > last ? now - last : 0,
        };
        fn(arg, &v);
    }
    pthread_mutex_unlock(&l->lock);
}

/*
 * memcached's UDP transport (src/server/udp.h).
 *
 * One datagram is one unit of work: its frame header is checked, the
 * requests after it run through the same parsers as a TCP connection's
 * (a fresh protocol session each time, since datagrams of one client may
 * reach any worker and UDP has no connection to keep state for), and the
 * replies they append leave as one message before the next datagram is
 * read. Like memcached:
 *   - a datagram shorter than the 8-byte header, or whose header says the
 *     request spans more than one datagram (count != 1), is dropped
 *     without a reply; the sequence number and the reserved field of a
 *     request are not looked at;
 *   - a request cut short at the end of the datagram (a line without its
 *     end, a value shorter than announced) is dropped without a reply; the
 *     replies to complete requests before it in the same datagram go out;
 *   - a request with nothing to say (noreply, quiet binary commands)
 *     sends nothing.
 * Unlike memcached 1.6, which sends each key of a multi-key get, and each
 * request of a datagram with several, as a message of its own (several
 * messages with sequence 0 under one request id), the whole reply to a
 * datagram is one message, as doc/protocol.txt describes it. And "quit"
 * sends nothing (memcached 1.6 sends a bare header that says 0 datagrams).
 *
 * Each drop is counted (tc_udp_dropped_requests, tc_udp_dropped_replies in
 * "stats"). A reply longer than the 16-bit datagram count allows is
 * dropped whole, and the requests stop as soon as their replies pass that
 * size, so a datagram full of gets of large values holds at most that much
 * plus one value in memory.
 *
 * Flash values: the worker sets no async owner while it runs UDP
 * requests, so a get of an item on the NVMe tier reads it synchronously
 * (tc_async_owner(NULL)): a datagram's reply is complete when its requests
 * return.
 *
 * Concurrency: struct udp_worker is its worker's only; the socket is
 * shared (see udp.h).
 */

#include "src/server/udp.h"

#include "src/base/compiler.h"
#include "src/base/log.h"
#include "src/server/proto/proto.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Datagrams handled per wake-up before the worker turns to its other
 * sockets. */
#define UDP_DGRAMS_PER_EVENT 64
/* The largest UDP payload over IPv4 or IPv6 (without jumbograms). */
#define UDP_IN_MAX 65536
/* Datagrams per sendmmsg call. */
#define UDP_SEND_BATCH 32
/* The largest reply: what the 16-bit datagram count can number. */
#define UDP_REPLY_MAX ((size_t)UINT16_MAX * UDP_PAYLOAD_MAX)
/* How long a sender waits, once per reply, for a full socket buffer. */
#define UDP_SEND_WAIT_MS 10

struct udp_worker {
    const struct conn_shared *sh;
    struct stats_ctr *ctr;
    char *in; /* UDP_IN_MAX bytes */
    struct obuf out;
    struct proto_sess sess;
    uint8_t hdr[UDP_SEND_BATCH][UDP_HEADER_SIZE];
    struct iovec iov[UDP_SEND_BATCH][2];
    struct mmsghdr msg[UDP_SEND_BATCH];
};

int
udp_worker_create(const struct conn_shared *sh, struct stats_ctr *ctr,
                  struct udp_worker **out)
{
    struct udp_worker *uw = calloc(1, sizeof(*uw));
    if (!uw)
        return -ENOMEM;
    uw->in = malloc(UDP_IN_MAX);
    if (!uw->in) {
        free(uw);
        return -ENOMEM;
    }
    uw->sh = sh;
    uw->ctr = ctr;
    obuf_init(&uw->out);
    proto_sess_init(&uw->sess, sh->cache, sh->ops, sh->srv, sh->item_size_max);
    *out = uw;
    return 0;
}

void
udp_worker_destroy(struct udp_worker *uw)
{
    if (!uw)
        return;
    proto_sess_fini(&uw->sess);
    obuf_fini(&uw->out);
    free(uw->in);
    free(uw);
}

/* A fresh session with the server's switches; "watch" is refused (a
 * datagram has no connection to stream the log to). */
static void
sess_reset(struct udp_worker *uw)
{
    const struct conn_shared *sh = uw->sh;
    struct proto_sess *s = &uw->sess;
    proto_sess_fini(s);
    proto_sess_init(s, sh->cache, sh->ops, sh->srv, sh->item_size_max);
    s->no_flush = sh->no_flush;
    s->no_cas = sh->no_cas;
    s->no_dump = sh->no_dump;
    s->no_watch = true;
    s->binding = sh->binding;
}

static void
put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static uint16_t
get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

/* Run the requests of one datagram's payload; the replies are in uw->out.
 * False when the reply is to be dropped (too large, out of memory). */
static bool
run(struct udp_worker *uw, const char *in, size_t len)
{
    size_t off = 0;
    sess_reset(uw);
    while (off < len) {
        ssize_t r = proto_process(&uw->sess, in + off, len - off, &uw->out);
        if (r < 0) /* PROTO_CLOSE: nothing to close; what was said goes */
            break;
        if (r == 0 && !uw->sess.resume) {
            /* cut short by the end of the datagram */
            stats_ctr_add(uw->ctr, STATS_UDP_DROPPED_REQS, 1);
            break;
        }
        off += MIN((size_t)r, len - off);
        if (obuf_pending(&uw->out) > UDP_REPLY_MAX || uw->out.err)
            break;
    }
    conn_fold_counters(&uw->sess.ctr, uw->ctr);
    if (uw->out.err) {
        log_warn("udp: out of memory for a reply; dropping it");
        return false;
    }
    return obuf_pending(&uw->out) <= UDP_REPLY_MAX;
}

/* Send uw->out as datagrams [first, n) of a message of n. The number
 * sent; fewer than asked when the socket stays full or fails. */
static unsigned
send_batch(struct udp_worker *uw, int fd, const uint8_t *req,
           const struct sockaddr_storage *peer, socklen_t plen, unsigned first,
           unsigned n, bool *waited)
{
    const char *data = uw->out.buf + uw->out.head;
    size_t total = obuf_pending(&uw->out);
    unsigned k = 0;
    for (; k < UDP_SEND_BATCH && first + k < n; k++) {
        unsigned seq = first + k;
        size_t off = (size_t)seq * UDP_PAYLOAD_MAX;
        uint8_t *h = uw->hdr[k];
        memcpy(h, req, 2); /* the request id, as it came */
        put16(h + 2, (uint16_t)seq);
        put16(h + 4, (uint16_t)n);
        put16(h + 6, 0);
        uw->iov[k][0] = (struct iovec){h, UDP_HEADER_SIZE};
        uw->iov[k][1] = (struct iovec){(void *)(data + off),
                                       MIN(total - off, UDP_PAYLOAD_MAX)};
        uw->msg[k].msg_hdr = (struct msghdr){
            .msg_name = (void *)peer,
            .msg_namelen = plen,
            .msg_iov = uw->iov[k],
            .msg_iovlen = 2,
        };
    }
    for (;;) {
        int sent = sendmmsg(fd, uw->msg, k, 0);
        if (sent > 0) {
            uint64_t bytes = 0;
            for (int i = 0; i < sent; i++)
                bytes += UDP_HEADER_SIZE + uw->iov[i][1].iov_len;
            stats_ctr_add(uw->ctr, STATS_BYTES_WRITTEN, bytes);
            return (unsigned)sent;
        }
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !*waited) {
            /* the socket buffer is full: wait for it once per reply */
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            *waited = true;
            if (poll(&p, 1, UDP_SEND_WAIT_MS) > 0)
                continue;
        }
        return 0;
    }
}

/* Send the reply in uw->out to peer as one message, then empty it. */
static void
reply(struct udp_worker *uw, int fd, const uint8_t *req,
      const struct sockaddr_storage *peer, socklen_t plen)
{
    size_t total = obuf_pending(&uw->out);
    unsigned n = (unsigned)((total + UDP_PAYLOAD_MAX - 1) / UDP_PAYLOAD_MAX);
    bool waited = false;
    for (unsigned seq = 0; seq < n;) {
        unsigned sent = send_batch(uw, fd, req, peer, plen, seq, n, &waited);
        if (!sent) {
            stats_ctr_add(uw->ctr, STATS_UDP_DROPPED_REPLIES, 1);
            break;
        }
        seq += sent;
    }
    obuf_consume(&uw->out, total);
}

/* One received datagram of len bytes in uw->in. */
static void
handle(struct udp_worker *uw, int fd, size_t len,
       const struct sockaddr_storage *peer, socklen_t plen)
{
    const uint8_t *h = (const uint8_t *)uw->in;
    if (len < UDP_HEADER_SIZE || get16(h + 4) != 1) {
        /* no frame, or a request over several datagrams */
        stats_ctr_add(uw->ctr, STATS_UDP_DROPPED_REQS, 1);
        return;
    }
    if (len == UDP_HEADER_SIZE)
        return; /* a frame with no request in it */
    bool ok = run(uw, uw->in + UDP_HEADER_SIZE, len - UDP_HEADER_SIZE);
    if (ok && obuf_pending(&uw->out)) {
        reply(uw, fd, h, peer, plen);
        return;
    }
    if (!ok)
        stats_ctr_add(uw->ctr, STATS_UDP_DROPPED_REPLIES, 1);
    /* start the next reply from nothing (also clears an out-of-memory) */
    obuf_fini(&uw->out);
    obuf_init(&uw->out);
}

void
udp_event(struct udp_worker *uw, int fd)
{
    for (int i = 0; i < UDP_DGRAMS_PER_EVENT; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        ssize_t n = recvfrom(fd, uw->in, UDP_IN_MAX, 0,
                             (struct sockaddr *)&peer, &plen);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_debug("udp: recvfrom: %s", strerror(errno));
            return; /* drained (or another worker took it) */
        }
        stats_ctr_add(uw->ctr, STATS_BYTES_READ, (uint64_t)n);
        handle(uw, fd, (size_t)n, &peer, plen);
    }
}

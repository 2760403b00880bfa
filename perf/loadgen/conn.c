/*
 * bench_loadgen's connections: dialing and reconnecting, the write buffer,
 * issuing requests (text or binary), and parsing replies, matching each to
 * the oldest request in flight and checking the values. See loadgen.h.
 */

#include "perf/loadgen/loadgen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- connections ------------------------------------------------------ */

static int
lg_dial(const struct lg_opts *o)
{
    struct addrinfo hints = {0}, *res, *ai;
    int fd = -1, one = 1;
    char port[16];

    snprintf(port, sizeof(port), "%u", o->port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(o->host, port, &hints, &res) != 0)
        return -1;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

int
lg_conn_open(struct lg_conn *c)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};

    c->fd = lg_dial(c->th->o);
    if (c->fd < 0)
        return -1;
    c->want_out = false;
    if (epoll_ctl(c->th->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->th->connects++;
    return 0;
}

static void
lg_set_out(struct lg_conn *c, bool on)
{
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0),
                             .data.ptr = c};

    if (c->want_out == on)
        return;
    epoll_ctl(c->th->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

/* Requests in flight on c are lost: in WARMUP they are issued again later
 * (warm_pending only tracks the count), in RUN they are counted as conn
 * errors. Then the connection is opened again, or marked dead. */
void
lg_conn_reset(struct lg_conn *c)
{
    struct lg_thread *th = c->th;

    if (th->mode == LG_WARM) {
        th->warm_pending -= c->count;
        th->warm_incomplete = true;
        th->warm_resets++;
    } else {
        th->err_conn += c->count + 1u;
    }
    if (c->fd >= 0) {
        epoll_ctl(th->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    c->count = 0;
    c->head = 0;
    c->wlen = c->wpos = 0;
    c->rlen = c->rpos = 0;
    if (++c->reconnects > LG_MAX_RECONNECTS || lg_conn_open(c) != 0)
        c->dead = true;
    else
        th->need_refill = true;
}

static int
lg_wreserve(struct lg_conn *c, size_t n)
{
    if (c->wpos > 0 && c->wpos == c->wlen)
        c->wpos = c->wlen = 0;
    if (c->wlen + n > c->wcap) {
        size_t cap = c->wcap * 2;
        char *p;

        if (c->wpos > 0) { /* compact first */
            memmove(c->wbuf, c->wbuf + c->wpos, c->wlen - c->wpos);
            c->wlen -= c->wpos;
            c->wpos = 0;
        }
        while (c->wlen + n > cap)
            cap *= 2;
        if (cap != c->wcap) {
            p = realloc(c->wbuf, cap);
            if (p == NULL)
                return -ENOMEM;
            c->wbuf = p;
            c->wcap = cap;
        }
    }
    return 0;
}

/* ---- requests ----------------------------------------------------------- */

static void
lg_put_bin_hdr(char *p, uint8_t op, uint16_t klen, uint8_t extlen,
               uint32_t bodylen, uint32_t opaque)
{
    uint16_t k = htons(klen);
    uint32_t b = htonl(bodylen);

    memset(p, 0, LG_BIN_HDR);
    p[0] = (char)LG_BIN_REQ;
    p[1] = (char)op;
    memcpy(p + 2, &k, 2);
    p[4] = (char)extlen;
    memcpy(p + 8, &b, 4);
    memcpy(p + 12, &opaque, 4); /* echoed as is: byte order irrelevant */
}

/* Append one request to c's output buffer and its slot to the ring. A key
 * of -1 in WARMUP means "the next key to load". */
static int
lg_issue(struct lg_conn *c, bool set, bool del, uint64_t warm_key)
{
    struct lg_thread *th = c->th;
    const struct lg_opts *o = th->o;
    unsigned slot = (c->head + c->count) % c->cap;
    struct lg_req *r = &c->ring[slot];
    uint64_t *keys = &c->ring_keys[(uint64_t)slot * o->multiget];
    unsigned n = set || del ? 1 : o->multiget;
    size_t need;
    char *p;

    r->opaque = c->next_opaque++;
    r->nkeys = set || del ? 0 : (uint16_t)n;
    r->del = del;
    r->matched = 0;
    r->hits = 0;
    r->first = (uint64_t)slot * o->multiget;
    for (unsigned i = 0; i < n; i++)
        keys[i] = th->mode == LG_WARM ? warm_key : lg_pick_key(th);

    if (del)
        need = 16 + LG_KEY_LEN;
    else if (set)
        need = 64 + LG_KEY_LEN + o->vsize + LG_BIN_HDR + 8;
    else
        need = 8 + (size_t)n * (LG_KEY_LEN + 1 + LG_BIN_HDR) + LG_BIN_HDR;
    if (lg_wreserve(c, need) != 0)
        return -ENOMEM;
    p = c->wbuf + c->wlen;

    if (del) {
        memcpy(p, "delete ", 7);
        lg_key(p + 7, keys[0]);
        p += 7 + LG_KEY_LEN;
        memcpy(p, "\r\n", 2);
        p += 2;
    } else if (set) {
        /* the value starts with its key (th->value has room for one) */
        lg_key(th->value, keys[0]);
        if (o->binary) {
            lg_put_bin_hdr(p, LG_OP_SET, LG_KEY_LEN, 8,
                           8 + LG_KEY_LEN + o->vsize, r->opaque);
            p += LG_BIN_HDR;
            memset(p, 0, 8); /* flags, exptime */
            p += 8;
            lg_key(p, keys[0]);
            p += LG_KEY_LEN;
        } else {
            memcpy(p, "set ", 4);
            lg_key(p + 4, keys[0]);
            p += 4 + LG_KEY_LEN;
            p += sprintf(p, " 0 0 %u\r\n", o->vsize);
        }
        memcpy(p, th->value, o->vsize);
        p += o->vsize;
        if (!o->binary) {
            memcpy(p, "\r\n", 2);
            p += 2;
        }
    } else if (o->binary && n == 1) {
        lg_put_bin_hdr(p, LG_OP_GET, LG_KEY_LEN, 0, LG_KEY_LEN, r->opaque);
        lg_key(p + LG_BIN_HDR, keys[0]);
        p += LG_BIN_HDR + LG_KEY_LEN;
    } else if (o->binary) {
        for (unsigned i = 0; i < n; i++) {
            lg_put_bin_hdr(p, LG_OP_GETKQ, LG_KEY_LEN, 0, LG_KEY_LEN,
                           r->opaque);
            lg_key(p + LG_BIN_HDR, keys[i]);
            p += LG_BIN_HDR + LG_KEY_LEN;
        }
        lg_put_bin_hdr(p, LG_OP_NOOP, 0, 0, 0, r->opaque);
        p += LG_BIN_HDR;
    } else {
        memcpy(p, "get", 3);
        p += 3;
        for (unsigned i = 0; i < n; i++) {
            *p++ = ' ';
            lg_key(p, keys[i]);
            p += LG_KEY_LEN;
        }
        memcpy(p, "\r\n", 2);
        p += 2;
    }
    c->wlen = (size_t)(p - c->wbuf);
    r->t_send = th->now;
    c->count++;
    if (th->mode == LG_RUN)
        th->issued++;
    return 0;
}

/* Whether --warmup-rate lets this thread send one more load now (the main
 * loop wakes at least every 10 ms to refill connections that waited). */
static bool
lg_warm_allowed(const struct lg_thread *th)
{
    const struct lg_opts *o = th->o;

    if (o->warm_rate <= 0)
        return true;
    double secs = (double)(th->now - th->warm_t0) / 1e9;
    return (double)th->warm_sent < secs * o->warm_rate / o->threads + 1;
}

/* Issue requests until c has its depth in flight or the phase says stop. */
void
lg_fill(struct lg_conn *c)
{
    struct lg_thread *th = c->th;
    const struct lg_opts *o = th->o;

    if (c->dead)
        return;
    if (th->mode == LG_WARM) {
        unsigned depth =
            o->pipeline > LG_WARM_DEPTH ? o->pipeline : LG_WARM_DEPTH;
        while (c->count < depth && c->count < c->cap &&
               th->warm_next < o->keys && th->now < lg_warm_deadline_ns &&
               lg_warm_allowed(th)) {
            if (lg_issue(c, true, false, th->warm_next) != 0)
                break;
            th->warm_next += o->threads;
            th->warm_pending++;
            th->warm_sent++;
        }
        return;
    }
    if (th->mode != LG_RUN)
        return;
    while (c->count < o->pipeline && th->now < lg_deadline_ns &&
           th->issued < o->max_requests) {
        uint64_t pick = lg_below(&th->rng, o->ratio_get + o->ratio_set +
                                               (uint64_t)o->ratio_del);
        bool set = pick < o->ratio_set;
        bool del = !set && pick < o->ratio_set + (uint64_t)o->ratio_del;
        if (lg_issue(c, set, del, 0) != 0)
            break;
    }
}

void
lg_flush(struct lg_conn *c)
{
    while (c->wpos < c->wlen) {
        ssize_t n = write(c->fd, c->wbuf + c->wpos, c->wlen - c->wpos);
        if (n > 0) {
            c->wpos += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            lg_set_out(c, true);
            return;
        } else {
            lg_conn_reset(c);
            return;
        }
    }
    c->wpos = c->wlen = 0;
    if (c->want_out)
        lg_set_out(c, false);
}

/* ---- replies ------------------------------------------------------------ */

/* The head request is answered. */
static void
lg_complete(struct lg_conn *c, unsigned hits)
{
    struct lg_thread *th = c->th;
    struct lg_req *r = &c->ring[c->head];

    if (th->mode == LG_RUN) {
        uint64_t lat = th->now > r->t_send ? th->now - r->t_send : 0;
        th->hist[lg_hist_index(lat)]++;
        th->reqs++;
        if (r->del) {
            th->dels++;
        } else if (r->nkeys == 0) {
            th->sets++;
        } else {
            th->gets++;
            th->get_keys += r->nkeys;
            th->hits += hits;
        }
        th->last_done = th->now;
    } else if (th->mode == LG_WARM) {
        th->warm_pending--;
    }
    c->head = (c->head + 1) % c->cap;
    c->count--;
}

/* Check a value against the key it was asked for: its length and its
 * first bytes (every value starts with its key). */
static void
lg_check_value(struct lg_thread *th, uint64_t key, const char *v, uint64_t len)
{
    char k[LG_KEY_LEN];
    size_t n = len < LG_KEY_LEN ? (size_t)len : LG_KEY_LEN;

    if (len != th->o->vsize) {
        th->err_data++;
        return;
    }
    lg_key(k, key);
    if (memcmp(v, k, n) != 0)
        th->err_data++;
}

/* Which of the head get's keys is `key` (klen bytes)? Keys come back in
 * the order they were asked for, so search from r->matched on. Returns
 * the position, or -1. */
static int
lg_match_key(struct lg_conn *c, struct lg_req *r, const char *key, size_t klen)
{
    char k[LG_KEY_LEN];

    if (klen != LG_KEY_LEN)
        return -1;
    for (unsigned i = r->matched; i < r->nkeys; i++) {
        lg_key(k, c->ring_keys[r->first + i]);
        if (memcmp(k, key, LG_KEY_LEN) == 0)
            return (int)i;
    }
    return -1;
}

static bool
lg_line_is(const char *line, size_t len, const char *word)
{
    size_t wl = strlen(word);

    return len >= wl && memcmp(line, word, wl) == 0 &&
           (len == wl || line[wl] == ' ');
}

/* Parse what the head text request can consume. 1: one request completed;
 * 0: more bytes needed; -1: protocol error. A multiget's VALUE blocks are
 * consumed one by one as they arrive; r->hits counts them. */
static int
lg_parse_text(struct lg_conn *c)
{
    struct lg_thread *th = c->th;
    struct lg_req *r = &c->ring[c->head];

    for (;;) {
        const char *s = c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos, len;
        const char *nl = memchr(s, '\n', avail);

        if (nl == NULL)
            return avail > LG_MAX_LINE ? -1 : 0;
        if (nl == s || nl[-1] != '\r')
            return -1;
        len = (size_t)(nl - s) - 1;

        if (r->del) {
            if ((len == 7 && memcmp(s, "DELETED", 7) == 0) ||
                (len == 9 && memcmp(s, "NOT_FOUND", 9) == 0)) {
                /* both are answers */
            } else if (lg_line_is(s, len, "SERVER_ERROR")) {
                th->err_server++;
            } else {
                return -1;
            }
            c->rpos += len + 2;
            lg_complete(c, 0);
            return 1;
        }
        if (r->nkeys == 0) { /* set */
            if (len == 6 && memcmp(s, "STORED", 6) == 0) {
                if (th->mode == LG_RUN)
                    th->stored++;
            } else if (lg_line_is(s, len, "SERVER_ERROR")) {
                th->err_server++;
            } else {
                return -1;
            }
            c->rpos += len + 2;
            lg_complete(c, 0);
            return 1;
        }
        if (len == 3 && memcmp(s, "END", 3) == 0) {
            c->rpos += len + 2;
            lg_complete(c, r->hits);
            return 1;
        }
        if (lg_line_is(s, len, "SERVER_ERROR")) {
            th->err_server++;
            c->rpos += len + 2;
            lg_complete(c, r->hits);
            return 1;
        }
        if (lg_line_is(s, len, "VALUE")) {
            /* VALUE <key> <flags> <bytes> [<cas>] */
            char tmp[LG_MAX_LINE + 1];
            char *save = NULL, *key, *flags, *bytes, *end;
            unsigned long long vlen;
            int pos;

            memcpy(tmp, s, len);
            tmp[len] = '\0';
            strtok_r(tmp, " ", &save);
            key = strtok_r(NULL, " ", &save);
            flags = strtok_r(NULL, " ", &save);
            bytes = strtok_r(NULL, " ", &save);
            if (key == NULL || flags == NULL || bytes == NULL)
                return -1;
            errno = 0;
            vlen = strtoull(bytes, &end, 10);
            if (errno != 0 || *end != '\0' || vlen > LG_MAX_VALUE * 2ull)
                return -1;
            if (avail < len + 2 + vlen + 2)
                return 0; /* the whole block is not here yet */
            if (memcmp(s + len + 2 + vlen, "\r\n", 2) != 0)
                return -1;
            pos = lg_match_key(c, r, key, strlen(key));
            if (pos < 0) {
                th->err_data++;
            } else {
                lg_check_value(th, c->ring_keys[r->first + (unsigned)pos],
                               s + len + 2, vlen);
                r->matched = (uint16_t)(pos + 1);
                r->hits++;
            }
            c->rpos += len + 2 + vlen + 2;
            continue;
        }
        return -1; /* ERROR, CLIENT_ERROR, anything else */
    }
}

static int
lg_parse_bin(struct lg_conn *c)
{
    struct lg_thread *th = c->th;
    struct lg_req *r = &c->ring[c->head];

    for (;;) {
        const unsigned char *h = (const unsigned char *)c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos;
        uint16_t klen, status;
        uint32_t blen, opaque;
        uint8_t op, extlen;
        const char *body;

        if (avail < LG_BIN_HDR)
            return 0;
        if (h[0] != LG_BIN_RES)
            return -1;
        op = h[1];
        klen = (uint16_t)(h[2] << 8 | h[3]);
        extlen = h[4];
        status = (uint16_t)(h[6] << 8 | h[7]);
        blen = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 |
               (uint32_t)h[10] << 8 | h[11];
        memcpy(&opaque, h + 12, 4);
        if (blen > LG_MAX_VALUE * 2u || (uint32_t)klen + extlen > blen)
            return -1;
        if (avail < LG_BIN_HDR + (size_t)blen)
            return 0;
        if (opaque != r->opaque)
            return -1;
        body = (const char *)h + LG_BIN_HDR;
        c->rpos += LG_BIN_HDR + blen;

        if (r->nkeys == 0) {
            if (op != LG_OP_SET)
                return -1;
            if (status == 0) {
                if (th->mode == LG_RUN)
                    th->stored++;
            } else {
                th->err_server++;
            }
            lg_complete(c, 0);
            return 1;
        }
        if (th->o->multiget == 1) { /* a plain GET */
            if (op != LG_OP_GET)
                return -1;
            if (status == 0) {
                lg_check_value(th, c->ring_keys[r->first], body + extlen,
                               blen - extlen - klen);
                lg_complete(c, 1);
            } else {
                if (status != 1) /* 1 = key not found */
                    th->err_server++;
                lg_complete(c, 0);
            }
            return 1;
        }
        if (op == LG_OP_NOOP) {
            lg_complete(c, r->hits);
            return 1;
        }
        if (op != LG_OP_GETKQ)
            return -1;
        if (status != 0) {
            th->err_server++;
            continue;
        }
        {
            int pos = lg_match_key(c, r, body + extlen, klen);
            if (pos < 0) {
                th->err_data++;
                continue;
            }
            lg_check_value(th, c->ring_keys[r->first + (unsigned)pos],
                           body + extlen + klen, blen - extlen - klen);
            r->matched = (uint16_t)(pos + 1);
            r->hits++;
        }
    }
}

void
lg_on_readable(struct lg_conn *c)
{
    struct lg_thread *th = c->th;

    for (;;) {
        size_t room;
        ssize_t n;

        if (c->rpos > 0 &&
            (c->rpos == c->rlen || c->rcap - c->rlen < LG_READ_CHUNK / 2)) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
        }
        if (c->rcap - c->rlen < LG_READ_CHUNK / 2) {
            char *p = realloc(c->rbuf, c->rcap * 2);
            if (p == NULL) {
                lg_conn_reset(c);
                return;
            }
            c->rbuf = p;
            c->rcap *= 2;
        }
        room = c->rcap - c->rlen;
        n = read(c->fd, c->rbuf + c->rlen, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) { /* closed by the server, or an error */
            lg_conn_reset(c);
            return;
        }
        c->rlen += (size_t)n;
        if ((size_t)n < room)
            break; /* short read: the socket is empty */
    }
    th->now = lg_nsec();
    while (c->count > 0) {
        int rc = th->o->binary ? lg_parse_bin(c) : lg_parse_text(c);
        if (rc == 0)
            break;
        if (rc < 0) {
            th->err_proto++;
            lg_conn_reset(c);
            return;
        }
    }
    if (c->count == 0 && c->rpos < c->rlen) {
        th->err_proto++; /* bytes nobody asked for */
        lg_conn_reset(c);
        return;
    }
    lg_fill(c);
    lg_flush(c);
}

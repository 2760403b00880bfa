/*
 * bench_loadgen: a load generator for a memcached-compatible server (text
 * protocol, or the binary protocol with --binary).
 *
 *   bench_loadgen --port 11211 [--conns 16] [--threads 1] [--keys 100000]
 *       [--value-size 100] [--ratio 9:1] [--pipeline 1] [--multiget 1]
 *       [--duration 10] [--warmup on|off|SECONDS] [--key-dist uniform|zipf]
 *       [--zipf-s 0.99] [--seed N] [--label NAME] [--server-pid PID]
 *
 * Each thread runs one epoll loop over its share of the connections. A
 * connection keeps --pipeline requests in flight: a reply completes the
 * oldest request and a new one is written at once. A request is a get of
 * --multiget keys ("get k1 k2 ..."; binary: GET, or GETKQ x M + NOOP) or a
 * set of one key; --ratio G:S picks between them at random.
 *
 * Phases: connect; WARMUP (every key set once, keys split between threads,
 * up to 32 sets in flight per connection; bounded by the warmup seconds);
 * RUN (--duration seconds, then the requests in flight are drained for at
 * most 2 s). Only RUN is measured.
 *
 * Figures (RUN only):
 *   ops/s   gets counted per key (a multiget of M keys is M ops) plus sets
 *   req/s   requests (a multiget is one request)
 *   latency per request, from the moment it is written into the connection's
 *           output buffer to the moment its whole reply is parsed; log
 *           buckets with 32 sub-buckets per power of two (< 3.2% error),
 *           p50 / p99 / p99.9 / max
 *   hit     get hits / keys asked for
 *   errors  proto: a reply that breaks the framing or is not an answer to
 *           the request (the connection is closed and opened again, its
 *           requests in flight are lost and counted in conn);
 *           data: a VALUE for a key not asked for, a value of the wrong
 *           length, or a value whose first bytes are not the key (each value
 *           starts with its key); server: SERVER_ERROR or a binary error
 *           status, framed correctly; conn: connection failures and lost
 *           requests.
 *   with --server-pid: the server's CPU time over RUN, from
 *           /proc/PID/stat utime+stime, per request and per op, and in cores
 *           (CPU seconds / wall seconds). Client CPU comes from getrusage.
 *
 * Output: a human line and `RESULT bench=net server=<label> ...`.
 * Exit status: 0; 3 when any proto, data or conn error was seen; 1 on a
 * usage error or when no connection could be made.
 *
 * Bounds: RUN by --duration and --max-requests, WARMUP by its seconds, the
 * drain by 2 s, reconnects by 10 per connection.
 *
 * Concurrency: threads share only the options (read-only) and the barrier.
 * main writes lg_start_ns / lg_deadline_ns between the second and third
 * barrier waits; workers read them after the third (the barrier orders
 * both). Each thread's counters are read by main after pthread_join.
 *
 * Self-contained (no project headers), so it also builds alone:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE perf/bench_loadgen.c -o loadgen \
 *       -lpthread -lm
 * That is also why it is one file, longer than STYLE.md's ~1,200 lines: the
 * Makefile builds each perf/bench_*.c as a single source. It splits along
 * its sections (requests and replies / event loop / options and report)
 * once perf/ tools may have several sources.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LG_KEY_LEN 16 /* "key:" + 12 hex digits, as bench_engine */
#define LG_MAX_THREADS 64
#define LG_MAX_CONNS 4096
#define LG_MAX_PIPELINE 1024
#define LG_MAX_MULTIGET 100
#define LG_MAX_VALUE (1u << 20)
#define LG_WARM_DEPTH 32 /* sets in flight per connection in WARMUP */
#define LG_DRAIN_NS 2000000000ull
#define LG_MAX_RECONNECTS 10
#define LG_MAX_LINE 2048 /* longest reply line accepted */
#define LG_READ_CHUNK 65536
#define LG_HIST_SUB_BITS 5
#define LG_HIST_SUB (1u << LG_HIST_SUB_BITS)
#define LG_HIST_N ((64 - LG_HIST_SUB_BITS + 1) * LG_HIST_SUB)

/* binary protocol */
#define LG_BIN_REQ 0x80
#define LG_BIN_RES 0x81
#define LG_OP_GET 0x00
#define LG_OP_SET 0x01
#define LG_OP_NOOP 0x0a
#define LG_OP_GETKQ 0x0d
#define LG_BIN_HDR 24

enum lg_dist { LG_UNIFORM, LG_ZIPF };
enum lg_mode { LG_CONNECT, LG_WARM, LG_RUN, LG_DONE };

struct lg_opts {
    char host[256];
    char label[64];
    unsigned port;
    unsigned conns;
    unsigned threads;
    uint64_t keys;
    unsigned vsize;
    unsigned ratio_get;
    unsigned ratio_set;
    unsigned pipeline;
    unsigned multiget;
    double duration;
    double warm_seconds; /* 0 = no warmup */
    enum lg_dist dist;
    double zipf_s;
    uint64_t seed;
    uint64_t max_requests; /* per thread */
    bool binary;
    uint64_t server_pid; /* 0: none */
};

/* One request in flight. */
struct lg_req {
    uint64_t t_send;
    uint32_t opaque;
    uint16_t nkeys;   /* 0 = set */
    uint16_t matched; /* get: index of the next key a VALUE may match */
    uint16_t hits;    /* get: VALUE blocks consumed so far */
    uint64_t first;   /* index into the connection's key slots */
};

struct lg_thread;

struct lg_conn {
    int fd;
    bool want_out; /* EPOLLOUT registered */
    bool dead;
    unsigned reconnects;
    struct lg_thread *th;
    char *wbuf;
    size_t wlen, wpos, wcap;
    char *rbuf;
    size_t rlen, rpos, rcap;
    struct lg_req *ring; /* cap slots, count in flight from head */
    uint64_t *ring_keys; /* cap * multiget key numbers */
    unsigned head, count, cap;
    uint32_t next_opaque;
};

struct lg_thread {
    unsigned id;
    pthread_t tid;
    const struct lg_opts *o;
    int ep;
    struct lg_conn *conns;
    unsigned nconns;
    uint64_t rng;
    enum lg_mode mode;
    uint64_t now;
    uint64_t warm_next;    /* next key to load (this thread: id mod T) */
    uint64_t warm_pending; /* loads in flight */
    bool warm_incomplete;
    bool need_refill; /* a connection was opened again: fill it */
    uint64_t warm_resets;
    uint64_t connects; /* successful connects, any phase */
    char *value;       /* vsize bytes, the key is copied in front */
    /* RUN counters */
    uint64_t issued;
    uint64_t reqs, gets, get_keys, hits, sets, stored;
    uint64_t err_proto, err_data, err_server, err_conn;
    uint64_t last_done;
    uint64_t hist[LG_HIST_N];
} __attribute__((aligned(64)));

static struct lg_opts lg_o;
static pthread_barrier_t lg_barrier;
static uint64_t lg_start_ns, lg_deadline_ns, lg_warm_deadline_ns;
static double *lg_zipf_cdf; /* keys entries, read-only once built */
static char lg_hex2[256][2];

/* ---- small helpers --------------------------------------------------- */

static uint64_t
lg_nsec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t
lg_rand(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static uint64_t
lg_below(uint64_t *s, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)lg_rand(s) * n) >> 64);
}

static void
lg_key(char *k, uint64_t i)
{
    memcpy(k, "key:", 4);
    for (int d = 14; d >= 4; d -= 2) {
        memcpy(k + d, lg_hex2[i & 0xff], 2);
        i >>= 8;
    }
}

/* Zipf over ranks 1..n with exponent s: CDF table, binary search, then
 * rank -> key through a bijection (rank * P + 7) mod n so that the hot
 * keys are spread over the key space (and the server's hash buckets) rather
 * than being key 0, 1, 2... */
static int
lg_zipf_setup(uint64_t n, double s)
{
    double sum = 0;

    lg_zipf_cdf = malloc(n * sizeof(double));
    if (lg_zipf_cdf == NULL)
        return -ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        sum += 1.0 / pow((double)(i + 1), s);
        lg_zipf_cdf[i] = sum;
    }
    for (uint64_t i = 0; i < n; i++)
        lg_zipf_cdf[i] /= sum;
    return 0;
}

static uint64_t
lg_gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static uint64_t lg_zipf_mult = 2654435761ull;

static uint64_t
lg_pick_key(struct lg_thread *th)
{
    uint64_t n = th->o->keys, lo = 0, hi;
    double u;

    if (th->o->dist == LG_UNIFORM)
        return lg_below(&th->rng, n);
    u = (double)(lg_rand(&th->rng) >> 11) * (1.0 / 9007199254740992.0);
    hi = n - 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (lg_zipf_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint64_t)(((unsigned __int128)lo * lg_zipf_mult + 7) % n);
}

/* ---- latency histogram ------------------------------------------------ */

static unsigned
lg_hist_index(uint64_t v)
{
    unsigned e;

    if (v < LG_HIST_SUB)
        return (unsigned)v;
    e = 63u - (unsigned)__builtin_clzll(v); /* >= LG_HIST_SUB_BITS */
    return (e - LG_HIST_SUB_BITS + 1) * LG_HIST_SUB +
           (unsigned)((v >> (e - LG_HIST_SUB_BITS)) & (LG_HIST_SUB - 1));
}

/* Middle of bucket idx, in the histogram's unit (ns). */
static double
lg_hist_value(unsigned idx)
{
    unsigned e, m;
    double lo, width;

    if (idx < LG_HIST_SUB)
        return idx;
    e = idx / LG_HIST_SUB + LG_HIST_SUB_BITS - 1;
    m = idx % LG_HIST_SUB + LG_HIST_SUB;
    width = ldexp(1.0, (int)(e - LG_HIST_SUB_BITS));
    lo = m * width;
    return lo + width / 2;
}

static double
lg_hist_pct(const uint64_t *h, uint64_t total, double p)
{
    uint64_t want, acc = 0;

    if (total == 0)
        return 0;
    want = (uint64_t)ceil(p * (double)total);
    if (want == 0)
        want = 1;
    for (unsigned i = 0; i < LG_HIST_N; i++) {
        acc += h[i];
        if (acc >= want)
            return lg_hist_value(i);
    }
    return lg_hist_value(LG_HIST_N - 1);
}

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

static int
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
static void
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
lg_issue(struct lg_conn *c, bool set, uint64_t warm_key)
{
    struct lg_thread *th = c->th;
    const struct lg_opts *o = th->o;
    unsigned slot = (c->head + c->count) % c->cap;
    struct lg_req *r = &c->ring[slot];
    uint64_t *keys = &c->ring_keys[(uint64_t)slot * o->multiget];
    unsigned n = set ? 1 : o->multiget;
    size_t need;
    char *p;

    r->opaque = c->next_opaque++;
    r->nkeys = set ? 0 : (uint16_t)n;
    r->matched = 0;
    r->hits = 0;
    r->first = (uint64_t)slot * o->multiget;
    for (unsigned i = 0; i < n; i++)
        keys[i] = th->mode == LG_WARM ? warm_key : lg_pick_key(th);

    if (set)
        need = 64 + LG_KEY_LEN + o->vsize + LG_BIN_HDR + 8;
    else
        need = 8 + (size_t)n * (LG_KEY_LEN + 1 + LG_BIN_HDR) + LG_BIN_HDR;
    if (lg_wreserve(c, need) != 0)
        return -ENOMEM;
    p = c->wbuf + c->wlen;

    if (set) {
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

/* Issue requests until c has its depth in flight or the phase says stop. */
static void
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
               th->warm_next < o->keys && th->now < lg_warm_deadline_ns) {
            if (lg_issue(c, true, th->warm_next) != 0)
                break;
            th->warm_next += o->threads;
            th->warm_pending++;
        }
        return;
    }
    if (th->mode != LG_RUN)
        return;
    while (c->count < o->pipeline && th->now < lg_deadline_ns &&
           th->issued < o->max_requests) {
        bool set =
            lg_below(&th->rng, o->ratio_get + o->ratio_set) < o->ratio_set;
        if (lg_issue(c, set, 0) != 0)
            break;
    }
}

static void
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
        if (r->nkeys == 0) {
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

static void
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

/* ---- thread ------------------------------------------------------------- */

static bool
lg_all_idle(struct lg_thread *th)
{
    for (unsigned i = 0; i < th->nconns; i++)
        if (!th->conns[i].dead && th->conns[i].count > 0)
            return false;
    return true;
}

static void
lg_loop(struct lg_thread *th, uint64_t until)
{
    struct epoll_event evs[64];
    uint64_t spins = 0;

    for (unsigned i = 0; i < th->nconns; i++) {
        lg_fill(&th->conns[i]);
        lg_flush(&th->conns[i]);
    }
    while (spins++ < (1ull << 40)) {
        int n = epoll_wait(th->ep, evs, 64, 10);

        th->now = lg_nsec();
        for (int i = 0; i < n; i++) {
            struct lg_conn *c = evs[i].data.ptr;
            if (c->dead || c->fd < 0)
                continue;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                lg_on_readable(c);
            else if (evs[i].events & EPOLLOUT)
                lg_flush(c);
        }
        if (th->need_refill) {
            th->need_refill = false;
            for (unsigned i = 0; i < th->nconns; i++)
                if (!th->conns[i].dead && th->conns[i].count == 0) {
                    lg_fill(&th->conns[i]);
                    lg_flush(&th->conns[i]);
                }
        }
        if (th->now >= until)
            break;
        if (th->mode == LG_WARM) {
            if (th->warm_next >= th->o->keys && th->warm_pending == 0)
                break;
            if (th->now >= lg_warm_deadline_ns && lg_all_idle(th))
                break;
            /* connections that ran dry while others still load */
            for (unsigned i = 0; i < th->nconns; i++)
                if (th->conns[i].count == 0 && th->warm_next < th->o->keys) {
                    lg_fill(&th->conns[i]);
                    lg_flush(&th->conns[i]);
                }
        } else if (th->now >= lg_deadline_ns ||
                   th->issued >= th->o->max_requests) {
            if (lg_all_idle(th))
                break;
        }
    }
}

static void *
lg_thread_main(void *arg)
{
    struct lg_thread *th = arg;

    th->ep = epoll_create1(EPOLL_CLOEXEC);
    for (unsigned i = 0; i < th->nconns; i++) {
        if (th->ep < 0 || lg_conn_open(&th->conns[i]) != 0) {
            th->conns[i].dead = true;
            th->err_conn++;
        }
    }
    pthread_barrier_wait(&lg_barrier); /* connected */
    if (th->o->warm_seconds > 0) {
        th->mode = LG_WARM;
        th->warm_next = th->id;
        th->now = lg_nsec();
        lg_loop(th, lg_warm_deadline_ns + LG_DRAIN_NS);
        if (th->warm_next < th->o->keys || th->warm_pending != 0)
            th->warm_incomplete = true;
        /* requests still in flight (deadline hit): reset those conns */
        for (unsigned i = 0; i < th->nconns; i++)
            if (!th->conns[i].dead && th->conns[i].count > 0)
                lg_conn_reset(&th->conns[i]);
    }
    pthread_barrier_wait(&lg_barrier); /* loaded */
    pthread_barrier_wait(&lg_barrier); /* main set the RUN clock */
    th->mode = LG_RUN;
    th->now = lg_nsec();
    lg_loop(th, lg_deadline_ns + LG_DRAIN_NS);
    th->mode = LG_DONE;
    for (unsigned i = 0; i < th->nconns; i++) {
        struct lg_conn *c = &th->conns[i];
        th->err_conn += c->dead ? 0 : c->count; /* still in flight */
        if (c->fd >= 0)
            close(c->fd);
    }
    if (th->ep >= 0)
        close(th->ep);
    return NULL;
}

/* ---- options, report, main ---------------------------------------------- */

enum lg_kind { LG_K_UINT, LG_K_U64, LG_K_DBL, LG_K_STR, LG_K_FLAG, LG_K_FN };

struct lg_optdef {
    const char *name, *arg, *help;
    enum lg_kind kind;
    size_t off; /* field of struct lg_opts */
    double min, max;
};

#define LG_OFF(f) offsetof(struct lg_opts, f)
static const struct lg_optdef lg_optdefs[] = {
    {"host", "H", "server address [127.0.0.1]", LG_K_STR, LG_OFF(host), 0, 0},
    {"port", "P", "server port [11211]", LG_K_UINT, LG_OFF(port), 1, 65535},
    {"conns", "N", "connections [16]", LG_K_UINT, LG_OFF(conns), 1,
     LG_MAX_CONNS},
    {"threads", "T", "client threads, one epoll loop each [1]", LG_K_UINT,
     LG_OFF(threads), 1, LG_MAX_THREADS},
    {"keys", "K", "key space [100000]", LG_K_U64, LG_OFF(keys), 1, 1e12},
    {"value-size", "V", "bytes per value [100]", LG_K_UINT, LG_OFF(vsize), 1,
     LG_MAX_VALUE},
    {"ratio", "G:S", "gets : sets [9:1]", LG_K_FN, 0, 0, 0},
    {"pipeline", "D", "requests in flight per connection [1]", LG_K_UINT,
     LG_OFF(pipeline), 1, LG_MAX_PIPELINE},
    {"multiget", "M", "keys per get [1]", LG_K_UINT, LG_OFF(multiget), 1,
     LG_MAX_MULTIGET},
    {"duration", "S", "measured seconds [10]", LG_K_DBL, LG_OFF(duration),
     0.001, 86400},
    {"warmup", "on|off|S",
     "set every key once first, at most S seconds (on = 120) [on]", LG_K_FN, 0,
     0, 0},
    {"key-dist", "D", "uniform | zipf [uniform]", LG_K_FN, 0, 0, 0},
    {"zipf-s", "S", "zipf exponent [0.99]", LG_K_DBL, LG_OFF(zipf_s), 0.001,
     10},
    {"seed", "N", "random seed [1]", LG_K_U64, LG_OFF(seed), 0, 1e15},
    {"max-requests", "N", "bound on the run, per thread [1e12]", LG_K_U64,
     LG_OFF(max_requests), 1, 1e15},
    {"binary", NULL, "memcached binary protocol", LG_K_FLAG, LG_OFF(binary), 0,
     0},
    {"label", "NAME", "server name in the RESULT line [host:port]", LG_K_STR,
     LG_OFF(label), 0, 0},
    {"server-pid", "PID", "report that process's CPU time per request",
     LG_K_U64, LG_OFF(server_pid), 1, 4194304},
    {"help", NULL, "this text", LG_K_FN, 0, 0, 0},
};
#define LG_NOPTS (sizeof(lg_optdefs) / sizeof(lg_optdefs[0]))

static void
lg_usage(FILE *f)
{
    fprintf(f, "usage: bench_loadgen [options]\n");
    for (unsigned i = 0; i < LG_NOPTS; i++) {
        const struct lg_optdef *d = &lg_optdefs[i];
        char left[40];

        snprintf(left, sizeof(left), "--%s %s", d->name, d->arg ? d->arg : "");
        fprintf(f, "  %-24s %s\n", left, d->help);
    }
}

/* The options that are not a plain number, string or flag. */
static int
lg_parse_special(const char *name, const char *arg, struct lg_opts *o)
{
    char *end;

    if (strcmp(name, "ratio") == 0) {
        unsigned long g = strtoul(arg, &end, 10), s;

        if (end == arg || *end != ':')
            return -1;
        s = strtoul(end + 1, &end, 10);
        if (*end != '\0' || g + s == 0 || g > 1000000 || s > 1000000)
            return -1;
        o->ratio_get = (unsigned)g;
        o->ratio_set = (unsigned)s;
    } else if (strcmp(name, "warmup") == 0) {
        if (strcmp(arg, "on") == 0) {
            o->warm_seconds = 120;
        } else if (strcmp(arg, "off") == 0) {
            o->warm_seconds = 0;
        } else {
            o->warm_seconds = strtod(arg, &end);
            if (end == arg || *end != '\0' || !(o->warm_seconds >= 0) ||
                o->warm_seconds > 86400)
                return -1;
        }
    } else if (strcmp(name, "key-dist") == 0) {
        if (strcmp(arg, "uniform") == 0)
            o->dist = LG_UNIFORM;
        else if (strcmp(arg, "zipf") == 0)
            o->dist = LG_ZIPF;
        else
            return -1;
    } else if (strcmp(name, "help") == 0) {
        lg_usage(stdout);
        exit(0);
    }
    return 0;
}

static int
lg_parse_one(const struct lg_optdef *d, const char *arg, struct lg_opts *o)
{
    char *field = (char *)o + d->off, *end;
    double v = 0;

    if (d->kind == LG_K_FN)
        return lg_parse_special(d->name, arg, o);
    if (d->kind == LG_K_FLAG) {
        *(bool *)field = true;
        return 0;
    }
    if (d->kind == LG_K_STR) {
        /* both string fields are arrays of at least 64 bytes */
        snprintf(field, 64, "%s", arg);
        return 0;
    }
    errno = 0;
    v = strtod(arg, &end); /* accepts 1e6 */
    if (errno != 0 || end == arg || *end != '\0' || !(v >= d->min) ||
        v > d->max || (d->kind != LG_K_DBL && v != floor(v)))
        return -1;
    if (d->kind == LG_K_UINT)
        *(unsigned *)field = (unsigned)v;
    else if (d->kind == LG_K_U64)
        *(uint64_t *)field = (uint64_t)v;
    else
        *(double *)field = v;
    return 0;
}

static int
lg_parse_args(int argc, char **argv, struct lg_opts *o)
{
    struct option lo[LG_NOPTS + 1];
    int ch, idx;

    memset(lo, 0, sizeof(lo));
    for (unsigned i = 0; i < LG_NOPTS; i++) {
        lo[i].name = lg_optdefs[i].name;
        lo[i].has_arg = lg_optdefs[i].arg ? required_argument : no_argument;
        lo[i].val = 256 + (int)i;
    }
    memset(o, 0, sizeof(*o));
    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    o->port = 11211;
    o->conns = 16;
    o->threads = 1;
    o->keys = 100000;
    o->vsize = 100;
    o->ratio_get = 9;
    o->ratio_set = 1;
    o->pipeline = 1;
    o->multiget = 1;
    o->duration = 10;
    o->warm_seconds = 120;
    o->dist = LG_UNIFORM;
    o->zipf_s = 0.99;
    o->seed = 1;
    o->max_requests = 1000000000000ull;

    while ((ch = getopt_long(argc, argv, "h", lo, &idx)) != -1) {
        if (ch == 'h')
            lg_parse_special("help", "", o);
        if (ch < 256) {
            lg_usage(stderr);
            return -1;
        }
        if (lg_parse_one(&lg_optdefs[ch - 256], optarg, o) != 0) {
            fprintf(stderr, "bench_loadgen: bad value '%s' for --%s\n", optarg,
                    lg_optdefs[ch - 256].name);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "bench_loadgen: unexpected argument '%s'\n",
                argv[optind]);
        return -1;
    }
    if (o->threads > o->conns) {
        fprintf(stderr, "bench_loadgen: %u threads for %u conns: using %u\n",
                o->threads, o->conns, o->conns);
        o->threads = o->conns;
    }
    if (o->multiget > o->keys) {
        fprintf(stderr, "bench_loadgen: --multiget is larger than --keys\n");
        return -1;
    }
    if (o->label[0] == '\0')
        snprintf(o->label, sizeof(o->label), "%.40s:%u", o->host, o->port);
    return 0;
}

/* utime + stime of a process, in clock ticks; -1 if unreadable. */
static long long
lg_proc_ticks(uint64_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%" PRIu64 "/stat", pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* comm may hold spaces */
    if (p == NULL)
        return -1;
    /* after ") ": state(3) ppid pgrp session tty tpgid flags minflt
     * cminflt majflt cmajflt utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
               &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

static double
lg_self_cpu(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int
lg_threads_setup(struct lg_thread *ths)
{
    const struct lg_opts *o = &lg_o;
    unsigned cap = o->pipeline > LG_WARM_DEPTH ? o->pipeline : LG_WARM_DEPTH;

    for (unsigned t = 0; t < o->threads; t++) {
        struct lg_thread *th = &ths[t];

        th->id = t;
        th->o = o;
        th->ep = -1;
        th->mode = LG_CONNECT;
        th->rng = o->seed * 0x100000001B3ull + t + 1;
        th->nconns = o->conns / o->threads + (t < o->conns % o->threads);
        th->conns = calloc(th->nconns, sizeof(*th->conns));
        th->value = malloc(o->vsize + LG_KEY_LEN);
        if (th->conns == NULL || th->value == NULL)
            return -ENOMEM;
        memset(th->value, 'v', o->vsize + LG_KEY_LEN);
        for (unsigned i = 0; i < th->nconns; i++) {
            struct lg_conn *c = &th->conns[i];

            c->fd = -1;
            c->th = th;
            c->cap = cap;
            c->wcap = 65536;
            c->rcap = 4 * LG_READ_CHUNK;
            c->wbuf = malloc(c->wcap);
            c->rbuf = malloc(c->rcap);
            c->ring = calloc(cap, sizeof(*c->ring));
            c->ring_keys =
                calloc((size_t)cap * o->multiget, sizeof(*c->ring_keys));
            if (c->wbuf == NULL || c->rbuf == NULL || c->ring == NULL ||
                c->ring_keys == NULL)
                return -ENOMEM;
        }
    }
    return 0;
}

static void
lg_threads_free(struct lg_thread *ths)
{
    for (unsigned t = 0; t < lg_o.threads; t++) {
        for (unsigned i = 0; ths[t].conns != NULL && i < ths[t].nconns; i++) {
            free(ths[t].conns[i].wbuf);
            free(ths[t].conns[i].rbuf);
            free(ths[t].conns[i].ring);
            free(ths[t].conns[i].ring_keys);
        }
        free(ths[t].conns);
        free(ths[t].value);
    }
}

/* Everything the threads counted, summed by main after pthread_join. */
struct lg_total {
    uint64_t reqs, get_keys, hits, sets;
    uint64_t err_proto, err_data, err_server, err_conn;
    uint64_t warm_resets, connects, dead, t_end;
    bool warm_incomplete;
    double secs, warm_secs, cli_cpu, srv_cpu; /* srv_cpu < 0: unknown */
    uint64_t hist[LG_HIST_N];
};

static void
lg_sum(const struct lg_thread *ths, struct lg_total *s)
{
    for (unsigned t = 0; t < lg_o.threads; t++) {
        const struct lg_thread *th = &ths[t];

        s->reqs += th->reqs;
        s->get_keys += th->get_keys;
        s->hits += th->hits;
        s->sets += th->sets;
        s->err_proto += th->err_proto;
        s->err_data += th->err_data;
        s->err_server += th->err_server;
        s->err_conn += th->err_conn;
        s->warm_resets += th->warm_resets;
        s->connects += th->connects;
        s->warm_incomplete |= th->warm_incomplete;
        if (th->last_done > s->t_end)
            s->t_end = th->last_done;
        for (unsigned i = 0; i < LG_HIST_N; i++)
            s->hist[i] += th->hist[i];
        for (unsigned i = 0; i < th->nconns; i++)
            s->dead += th->conns[i].dead;
    }
}

static void
lg_report(const struct lg_opts *o, const struct lg_total *s)
{
    uint64_t ops = s->get_keys + s->sets;
    uint64_t errors = s->err_proto + s->err_data + s->err_conn;
    double p50 = lg_hist_pct(s->hist, s->reqs, 0.50) / 1e3;
    double p99 = lg_hist_pct(s->hist, s->reqs, 0.99) / 1e3;
    double p999 = lg_hist_pct(s->hist, s->reqs, 0.999) / 1e3;
    double pmax = lg_hist_pct(s->hist, s->reqs, 1.0) / 1e3;
    double hit = s->get_keys ? (double)s->hits / (double)s->get_keys : 0;
    const char *proto = o->binary ? "binary" : "text";
    const char *dist = o->dist == LG_ZIPF ? "zipf" : "uniform";
    char srv[160] = "", srvr[160] = "";

    if (s->srv_cpu >= 0 && s->reqs > 0) {
        double per_req = s->srv_cpu * 1e6 / (double)s->reqs;
        double per_op = s->srv_cpu * 1e6 / (double)ops;

        snprintf(srv, sizeof(srv),
                 "; server CPU %.2f us/req %.2f us/op (%.2f cores)", per_req,
                 per_op, s->srv_cpu / s->secs);
        snprintf(srvr, sizeof(srvr),
                 " srv_cpu_us_per_req=%.3f srv_cpu_us_per_op=%.3f "
                 "srv_cores=%.3f",
                 per_req, per_op, s->srv_cpu / s->secs);
    }
    printf("net %s %s: %u conns %u thr, %" PRIu64 " keys %s, %u B values, "
           "get:set %u:%u, pipeline %u, multiget %u%s\n",
           o->label, proto, o->conns, o->threads, o->keys, dist, o->vsize,
           o->ratio_get, o->ratio_set, o->pipeline, o->multiget,
           o->warm_seconds > 0 ? "" : ", no warmup");
    if (o->warm_seconds > 0)
        printf("  warmup: %" PRIu64 " keys in %.2f s, %" PRIu64
               " connection resets%s\n",
               o->keys, s->warm_secs, s->warm_resets,
               s->warm_incomplete ? " (INCOMPLETE: bound hit or connection "
                                    "lost)"
                                  : "");
    printf("  %.0f ops/s, %.0f req/s over %.2f s; latency/req p50 %.1f us "
           "p99 %.1f us p99.9 %.1f us max %.1f us; hit %.2f%%\n",
           (double)ops / s->secs, (double)s->reqs / s->secs, s->secs, p50, p99,
           p999, pmax, hit * 100);
    printf("  errors %" PRIu64 " (proto %" PRIu64 ", data %" PRIu64
           ", conn %" PRIu64 "), server errors %" PRIu64
           "; client CPU %.2f cores%s\n",
           errors, s->err_proto, s->err_data, s->err_conn, s->err_server,
           s->cli_cpu / s->secs, srv);
    printf("RESULT bench=net server=%s proto=%s conns=%u threads=%u "
           "keys=%" PRIu64 " dist=%s value=%u ratio=%u:%u pipeline=%u "
           "multiget=%u secs=%.2f ops=%.0f reqs=%.0f p50_us=%.1f "
           "p99_us=%.1f p999_us=%.1f max_us=%.1f hit=%.4f errors=%" PRIu64
           " proto_errors=%" PRIu64 " data_errors=%" PRIu64
           " conn_errors=%" PRIu64 " server_errors=%" PRIu64
           " dead_conns=%" PRIu64 " warm_s=%.3f cli_cores=%.3f%s\n",
           o->label, proto, o->conns, o->threads, o->keys, dist, o->vsize,
           o->ratio_get, o->ratio_set, o->pipeline, o->multiget, s->secs,
           (double)ops / s->secs, (double)s->reqs / s->secs, p50, p99, p999,
           pmax, hit, errors, s->err_proto, s->err_data, s->err_conn,
           s->err_server, s->dead, s->warm_secs, s->cli_cpu / s->secs, srvr);
}

int
main(int argc, char **argv)
{
    static const char hex[16] = "0123456789abcdef";
    static struct lg_total tot;
    struct lg_opts *o = &lg_o;
    struct lg_thread *ths;
    long long tick0 = -1, tick1 = -1;
    uint64_t t_warm0;
    double cpu0;

    if (lg_parse_args(argc, argv, o) != 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < 256; i++) {
        lg_hex2[i][0] = hex[i >> 4];
        lg_hex2[i][1] = hex[i & 15];
    }
    if (o->dist == LG_ZIPF) {
        if (lg_zipf_setup(o->keys, o->zipf_s) != 0) {
            fprintf(stderr, "bench_loadgen: no memory for the zipf table\n");
            return 1;
        }
        while (lg_gcd(lg_zipf_mult % o->keys, o->keys) != 1)
            lg_zipf_mult += 2;
    }
    ths = aligned_alloc(64, sizeof(*ths) * o->threads);
    if (ths == NULL || (memset(ths, 0, sizeof(*ths) * o->threads),
                        lg_threads_setup(ths) != 0)) {
        fprintf(stderr, "bench_loadgen: out of memory\n");
        return 1;
    }
    pthread_barrier_init(&lg_barrier, NULL, o->threads + 1);
    /* the warmup bound counts from here, connecting included */
    lg_warm_deadline_ns = lg_nsec() + (uint64_t)(o->warm_seconds * 1e9);
    for (unsigned t = 0; t < o->threads; t++) {
        if (pthread_create(&ths[t].tid, NULL, lg_thread_main, &ths[t]) != 0) {
            fprintf(stderr, "bench_loadgen: pthread_create failed\n");
            return 1;
        }
    }
    pthread_barrier_wait(&lg_barrier); /* connected */
    t_warm0 = lg_nsec();
    pthread_barrier_wait(&lg_barrier); /* loaded */
    tot.warm_secs = (double)(lg_nsec() - t_warm0) / 1e9;
    if (o->server_pid > 0)
        tick0 = lg_proc_ticks(o->server_pid);
    cpu0 = lg_self_cpu();
    lg_start_ns = lg_nsec();
    lg_deadline_ns = lg_start_ns + (uint64_t)(o->duration * 1e9);
    pthread_barrier_wait(&lg_barrier); /* go */
    for (unsigned t = 0; t < o->threads; t++)
        pthread_join(ths[t].tid, NULL);
    if (o->server_pid > 0)
        tick1 = lg_proc_ticks(o->server_pid);
    tot.cli_cpu = lg_self_cpu() - cpu0;

    lg_sum(ths, &tot);
    lg_threads_free(ths);
    free(ths);
    free(lg_zipf_cdf);
    if (tot.connects == 0) {
        fprintf(stderr,
                "bench_loadgen: no connection to %s:%u could be "
                "made\n",
                o->host, o->port);
        return 1;
    }
    /* measured time: to the last reply (the drain included) */
    tot.secs = tot.t_end > lg_start_ns ? (double)(tot.t_end - lg_start_ns) / 1e9
                                       : o->duration;
    tot.srv_cpu = tick0 >= 0 && tick1 >= tick0
                      ? (double)(tick1 - tick0) / (double)sysconf(_SC_CLK_TCK)
                      : -1;
    lg_report(o, &tot);
    return tot.err_proto + tot.err_data + tot.err_conn > 0 ? 3 : 0;
}

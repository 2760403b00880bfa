#pragma once
/*
 * bench_loadgen: a load generator for a memcached-compatible server (text
 * protocol, or the binary protocol with --binary).
 *
 *   bench_loadgen --port 11211 [--conns 16] [--threads 1] [--keys 100000]
 *       [--value-size 100] [--ratio 9:1] [--pipeline 1] [--multiget 1]
 *       [--duration 10] [--warmup on|off|SECONDS] [--warmup-rate N]
 *       [--key-dist uniform|zipf] [--zipf-s 0.99] [--seed N] [--label NAME]
 *       [--server-pid PID]
 *
 * Each thread runs one epoll loop over its share of the connections. A
 * connection keeps --pipeline requests in flight: a reply completes the
 * oldest request and a new one is written at once. A request is a get of
 * --multiget keys ("get k1 k2 ..."; binary: GET, or GETKQ x M + NOOP) or a
 * set of one key, or a delete of one key (text only); --ratio G:S[:D]
 * picks between them at random.
 *
 * Phases: connect; WARMUP (every key set once, keys split between threads,
 * up to 32 sets in flight per connection, at most --warmup-rate sets/s;
 * bounded by the warmup seconds);
 * RUN (--duration seconds, then the requests in flight are drained for at
 * most 2 s). Only RUN is measured.
 *
 * Figures (RUN only):
 *   ops/s   gets counted per key (a multiget of M keys is M ops) plus sets
 *           and deletes
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
 *           (CPU seconds / wall seconds); user (utime) and kernel (stime)
 *           time per request apart. Client CPU comes from getrusage.
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
 * Self-contained (no project headers, no library), so it also builds alone:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -I. \
 *       perf/loadgen/{main,options,conn,keys,stats}.c -o loadgen -lpthread -lm
 * The Makefile builds it as build/release/perf/bench_loadgen.
 *
 * Files (this header is what they share: limits, the options, a
 * connection, a thread, the totals):
 *   main.c     the threads' event loop, the phases, main()
 *   options.c  the command line (one table drives parsing and --help)
 *   conn.c     connections, writing requests, parsing replies (text and
 *              binary protocols)
 *   keys.c     clock, random numbers, keys and their distribution
 *   stats.c    latency histogram, CPU times, totals and the report
 */

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    unsigned ratio_del; /* text protocol only */
    unsigned pipeline;
    unsigned multiget;
    double duration;
    double warm_seconds; /* 0 = no warmup */
    double warm_rate;    /* sets per second while loading, all threads;
                            0 = as fast as the server takes them */
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
    uint16_t nkeys;   /* 0 = set or delete */
    bool del;         /* a delete (nkeys 0) */
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
    uint64_t warm_t0;      /* when this thread started loading */
    uint64_t warm_sent;    /* loads issued by this thread */
    bool warm_incomplete;
    bool need_refill; /* a connection was opened again: fill it */
    uint64_t warm_resets;
    uint64_t connects; /* successful connects, any phase */
    char *value;       /* vsize bytes, the key is copied in front */
    /* RUN counters */
    uint64_t issued;
    uint64_t reqs, gets, get_keys, hits, sets, stored, dels;
    uint64_t err_proto, err_data, err_server, err_conn;
    uint64_t last_done;
    uint64_t hist[LG_HIST_N];
} __attribute__((aligned(64)));

/* Everything the threads counted, summed by main after pthread_join. */
struct lg_total {
    uint64_t reqs, get_keys, hits, sets, dels;
    uint64_t err_proto, err_data, err_server, err_conn;
    uint64_t warm_resets, connects, dead, t_end;
    bool warm_incomplete;
    double secs, warm_secs, cli_cpu;
    double srv_cpu, srv_user, srv_sys; /* seconds; srv_cpu < 0: unknown */
    uint64_t hist[LG_HIST_N];
};

/* Shared state, defined in main.c: the options (read-only once parsed),
 * the phase barrier and the phase deadlines (see "Concurrency" above). */
extern struct lg_opts lg_o;
extern pthread_barrier_t lg_barrier;
extern uint64_t lg_start_ns, lg_deadline_ns, lg_warm_deadline_ns;
/* keys.c: the zipf CDF (keys entries, read-only once built), the
 * multiplier that scatters zipf ranks over the key space, hex digits. */
extern double *lg_zipf_cdf;
extern uint64_t lg_zipf_mult;
extern char lg_hex2[256][2];

/* keys.c: clock, random numbers, keys */
uint64_t lg_nsec(void);
uint64_t lg_below(uint64_t *s, uint64_t n);
void lg_key(char *k, uint64_t i);
int lg_zipf_setup(uint64_t n, double s);
uint64_t lg_gcd(uint64_t a, uint64_t b);
uint64_t lg_pick_key(struct lg_thread *th);

/* conn.c: connections, requests, replies */
int lg_conn_open(struct lg_conn *c);
void lg_conn_reset(struct lg_conn *c);
void lg_fill(struct lg_conn *c);
void lg_flush(struct lg_conn *c);
void lg_on_readable(struct lg_conn *c);

/* stats.c: histogram, CPU times, report */
unsigned lg_hist_index(uint64_t v);
struct lg_ticks {
    long long user, sys; /* /proc/PID/stat utime, stime */
};
int lg_proc_ticks(uint64_t pid, struct lg_ticks *t);
double lg_self_cpu(void);
void lg_sum(const struct lg_thread *ths, struct lg_total *s);
void lg_report(const struct lg_opts *o, const struct lg_total *s);

/* options.c: the command line */
int lg_parse_args(int argc, char **argv, struct lg_opts *o);

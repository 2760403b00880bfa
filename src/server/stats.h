#pragma once
/*
 * The server's statistics: per-thread counters (bytes, connections,
 * commands) and the stats groups of the text protocol ("stats",
 * "stats settings", "slabs", "items", "conns", "sizes"...). Engine counters
 * come from tc_stats(), one line per row of TC_STATS_COUNTERS
 * (src/tiercache.h); names are memcached's where the meaning matches,
 * tiercache's own carry the prefix tc_. "stats reset" is the server's
 * (src/server/server.c): a new baseline for these counters and
 * tc_stats_reset().
 *
 * Concurrency:
 *   struct stats_ctr   one per thread (each worker, the acceptor), cache-line
 *                      aligned, written by its owner thread only with relaxed
 *                      loads and stores (no read-modify-write needed with a
 *                      single writer); any thread sums them with relaxed
 *                      loads: a sum may miss the latest increments, never
 *                      tears a value.
 *   struct stats_base  the sums at the last "stats reset", under its lock.
 *                      Reset never writes another thread's counters: it
 *                      records a baseline that reports subtract.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "src/base/compiler.h"
#include "src/server/obuf.h"
#include "src/server/settings.h"
#include "src/tiercache.h"

struct conn_view;
struct proto_sess;
struct server;

enum stats_ctr_id {
    STATS_BYTES_READ,
    STATS_BYTES_WRITTEN,
    STATS_TOTAL_CONNS,     /* acceptor: connections accepted */
    STATS_REJECTED_CONNS,  /* acceptor: refused over -c */
    STATS_LISTEN_DISABLED, /* acceptor: accepting paused (out of fds) */
    STATS_IDLE_KICKS,      /* closed by -o idle_timeout */
    STATS_CONN_YIELDS,     /* -R or read budget of one wake-up used up */
    STATS_CMD_TOTAL,       /* struct proto_counters, folded in */
    STATS_CMD_META,
    STATS_GET_MULTI,
    STATS_CMD_BIN,
    STATS_PROTO_ERRORS,
    STATS_AUTH_CMDS,           /* logins and SASL exchanges (-Y, -S) */
    STATS_AUTH_ERRORS,         /* of those, refused */
    STATS_UDP_DROPPED_REQS,    /* datagrams dropped: no frame header, a
                                  request over several datagrams, or cut
                                  short (src/server/udp.c) */
    STATS_UDP_DROPPED_REPLIES, /* replies not sent whole: too large for
                                  one message, or the socket refused */
    STATS_CTR_COUNT
};

struct stats_ctr {
    _Atomic uint64_t v[STATS_CTR_COUNT];
} CACHE_ALIGNED;

/* Context: the counter's owner thread only. */
static inline void
stats_ctr_add(struct stats_ctr *c, enum stats_ctr_id id, uint64_t n)
{
    uint64_t v = atomic_load_explicit(&c->v[id], memory_order_relaxed);
    atomic_store_explicit(&c->v[id], v + n, memory_order_relaxed);
}

/* Add c's counters into sum[]. Context: any thread. */
void stats_ctr_sum(const struct stats_ctr *c, uint64_t sum[STATS_CTR_COUNT]);

struct stats_base {
    pthread_mutex_t lock;
    uint64_t v[STATS_CTR_COUNT];
};

void stats_base_init(struct stats_base *b);
void stats_base_fini(struct stats_base *b);

/* What the stats groups know of the server, taken when asked. */
struct stats_info {
    struct tc_cache *cache;
    struct settings settings; /* with the live verbosity and memory limit */
    uint32_t uptime;          /* seconds */
    uint32_t started_unix;
    uint64_t curr_conns;
    unsigned nlisteners;
    unsigned nworkers;
    bool accepting;
};

/*
 * How the stats groups reach the server that owns them: functions the
 * server provides (src/server/server.c), so that this file calls nothing in
 * the file that calls it. Context: any worker, concurrently with the
 * server's other threads.
 */
struct stats_hooks {
    void (*info)(struct server *srv, struct stats_info *out);
    /* Every thread's counters summed, minus the baseline of the last
     * reset. */
    void (*ctr_sum)(struct server *srv, uint64_t sum[STATS_CTR_COUNT]);
    /* Every listener, then every worker's connections. */
    void (*conns_walk)(struct server *srv,
                       void (*fn)(void *arg, const struct conn_view *v),
                       void *arg);
};

/* Append the lines of a stats group (proto_server_ops.stats). 0, or -ENOENT
 * for an unknown group. Context: any worker. */
int stats_group(const struct stats_hooks *h, struct server *srv,
                struct proto_sess *s, const char *group, struct obuf *out);

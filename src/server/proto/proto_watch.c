/*
 * memcached's "watch" command: the list of watchers and their queues (see
 * src/server/proto/proto_watch.h for the format and the delivery).
 *
 * Concurrency:
 *   watch_lock   guards watchers (the list) and every watcher's queue;
 *                emitters on any worker append under it, the owner's
 *                worker drains under it
 *   nwatchers    written under watch_lock, read relaxed by emitters: a
 *                watcher that has just joined may miss an event or two
 *   gid          relaxed counter
 */

#include "src/server/proto/proto_watch.h"

#include "src/server/proto/proto.h"
#include "src/server/proto/proto_util.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct proto_watcher {
    struct proto_watcher *next;
    unsigned kinds;
    char *buf;
    size_t len, cap;
    uint64_t dropped;
};

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct proto_watcher *watchers;
static _Atomic unsigned nwatchers;
static _Atomic uint64_t gid;

bool
proto_watch_active(void)
{
    return atomic_load_explicit(&nwatchers, memory_order_relaxed) != 0;
}

static bool
parse_kinds(const struct proto_token *tok, int ntok, unsigned *kinds)
{
    static const char *const other[] = {"rawcmds",    "evictions", "connevents",
                                        "sysevents",  "deletions", "proxyreqs",
                                        "proxyevents"};
    *kinds = 0;
    if (ntok == 1) { /* memcached's default: the raw commands */
        *kinds = PROTO_WATCH_OTHER;
        return true;
    }
    for (int i = 1; i < ntok; i++) {
        if (proto_tok_is(&tok[i], "fetchers")) {
            *kinds |= PROTO_WATCH_FETCHERS;
            continue;
        }
        if (proto_tok_is(&tok[i], "mutations")) {
            *kinds |= PROTO_WATCH_MUTATIONS;
            continue;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof(other) / sizeof(other[0]); k++)
            known |= proto_tok_is(&tok[i], other[k]);
        if (!known)
            return false;
        *kinds |= PROTO_WATCH_OTHER;
    }
    return true;
}

void
proto_watch_start(struct proto_sess *s, struct obuf *out,
                  const struct proto_token *tok, int ntok)
{
    unsigned kinds;
    if (ntok > PROTO_MAX_TOKENS || !parse_kinds(tok, ntok, &kinds)) {
        proto_reply_err(s, out, PERR_ERROR);
        return;
    }
    if (s->watch == NULL) {
        struct proto_watcher *w = calloc(1, sizeof(*w));
        if (w == NULL) {
            proto_reply_err(s, out, PERR_NOMEM);
            return;
        }
        pthread_mutex_lock(&watch_lock);
        w->next = watchers;
        watchers = w;
        atomic_fetch_add_explicit(&nwatchers, 1, memory_order_relaxed);
        pthread_mutex_unlock(&watch_lock);
        s->watch = w;
    }
    pthread_mutex_lock(&watch_lock);
    s->watch->kinds = kinds;
    pthread_mutex_unlock(&watch_lock);
    obuf_add(out, "OK\r\n", 4);
}

void
proto_watch_stop(struct proto_sess *s)
{
    struct proto_watcher *w = s->watch;
    if (w == NULL)
        return;
    pthread_mutex_lock(&watch_lock);
    for (struct proto_watcher **p = &watchers; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    atomic_fetch_sub_explicit(&nwatchers, 1, memory_order_relaxed);
    pthread_mutex_unlock(&watch_lock);
    free(w->buf);
    free(w);
    s->watch = NULL;
}

void
proto_watch_flush(struct proto_sess *s, struct obuf *out)
{
    struct proto_watcher *w = s->watch;
    if (w == NULL)
        return;
    /* a client that does not read: its lines wait in the queue (which
     * drops new ones once full) rather than pile up in the output */
    if (obuf_pending(out) >= PROTO_WATCH_QUEUE_MAX)
        return;
    pthread_mutex_lock(&watch_lock);
    if (w->len) {
        obuf_add(out, w->buf, w->len);
        w->len = 0;
    }
    pthread_mutex_unlock(&watch_lock);
}

/* Append line to every watcher of kind. Locks: watch_lock. */
static void
emit(unsigned kind, const char *line, size_t n)
{
    pthread_mutex_lock(&watch_lock);
    for (struct proto_watcher *w = watchers; w; w = w->next) {
        if (!(w->kinds & kind))
            continue;
        if (w->len + n > PROTO_WATCH_QUEUE_MAX) {
            w->dropped++;
            continue;
        }
        if (w->len + n > w->cap) {
            size_t cap = w->cap ? w->cap : 4096;
            while (cap < w->len + n)
                cap *= 2;
            char *b = realloc(w->buf, cap);
            if (b == NULL) {
                w->dropped++;
                continue;
            }
            w->buf = b;
            w->cap = cap;
        }
        memcpy(w->buf + w->len, line, n);
        w->len += n;
    }
    pthread_mutex_unlock(&watch_lock);
}

/* "ts=<unix.usec> gid=<n> type=<type> key=<URL-encoded key>" into buf
 * (memcached 1.6.18 leaves the microseconds unpadded: ".44217" for
 * .044217; here they are six digits, the time it means). */
static size_t
head(char *buf, size_t cap, const char *type, const char *key, size_t klen)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t g = atomic_fetch_add_explicit(&gid, 1, memory_order_relaxed) + 1;
    int n = snprintf(buf, cap, "ts=%lld.%06ld gid=%" PRIu64 " type=%s key=",
                     (long long)ts.tv_sec, ts.tv_nsec / 1000, g, type);
    size_t at = n > 0 ? (size_t)n : 0;
    if (klen > TC_KEY_MAX)
        klen = TC_KEY_MAX;
    if (at + 3 * klen < cap)
        at += proto_urlencode(key, klen, buf + at);
    return at;
}

#define WATCH_LINE_MAX (3 * TC_KEY_MAX + 256)

void
proto_watch_get(const struct proto_sess *s, const char *key, size_t klen,
                bool found, unsigned cls, uint32_t vlen)
{
    char line[WATCH_LINE_MAX];
    size_t n = head(line, sizeof(line), "item_get", key, klen);
    int m = snprintf(line + n, sizeof(line) - n,
                     " status=%s clsid=%u cfd=%d size=%" PRIu32 "\n",
                     found ? "found" : "not_found", found ? cls : 0, s->fd,
                     found ? vlen : 0);
    if (m > 0 && (size_t)m < sizeof(line) - n)
        emit(PROTO_WATCH_FETCHERS, line, n + (size_t)m);
}

/* The class (from 1) whose chunks fit an item of this size; the largest
 * for a chained item. */
static unsigned
class_for(struct tc_cache *c, uint64_t size)
{
    int n = tc_slab_nclasses(c);
    for (int i = 0; i < n; i++) {
        struct tc_slab_stats st;
        if (tc_slab_stats(c, i, &st) == 0 && st.chunk_size >= size)
            return (unsigned)i + 1;
    }
    return (unsigned)n;
}

void
proto_watch_store(const struct proto_sess *s, const char *key, size_t klen,
                  const char *cmd, size_t cmdlen, const char *status,
                  int64_t ttl, uint64_t vlen)
{
    char line[WATCH_LINE_MAX];
    size_t n = head(line, sizeof(line), "item_store", key, klen);
    unsigned cls = class_for(s->cache, TC_ITEM_HEADER_SIZE + klen + vlen);
    int m = snprintf(line + n, sizeof(line) - n,
                     " status=%s cmd=%.*s ttl=%" PRId64 " clsid=%u cfd=%d "
                     "size=%" PRIu64 "\n",
                     status, (int)(cmdlen > 16 ? 16 : cmdlen), cmd, ttl, cls,
                     s->fd, vlen);
    if (m > 0 && (size_t)m < sizeof(line) - n)
        emit(PROTO_WATCH_MUTATIONS, line, n + (size_t)m);
}

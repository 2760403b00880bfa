/*
 * The text protocol's administration commands, answered as memcached 1.6
 * answers them (doc/operating.md, "Administration commands"):
 *
 *   slabs reassign <src> <dst>   one page from class src to class dst
 *                                (tc_slab_reassign): OK, BUSY, BADCLASS,
 *                                NOSPARE (src has fewer than two pages),
 *                                SAME. Class 0, memcached's global page
 *                                pool, is the engine's free pages, which
 *                                classes take on demand: NOSPARE.
 *   slabs automove <0|1|2>       recorded and answered OK; the engine moves
 *                                pages between classes on its own whatever
 *                                the value (reclaim.c).
 *   lru_crawler enable|disable   the crawler is the engine's expiry sweep,
 *   lru_crawler sleep <us>       which the maintenance thread always runs:
 *   lru_crawler tocrawl <n>      these are recorded and answered as
 *   lru_crawler crawl <ids>|all  memcached answers them.
 *   lru_crawler metadump <ids>|all|hash
 *                                every live item of those classes, one
 *                                "key=<urlencoded> exp= la= cas= fetch=
 *                                cls= size=" line each ("\n" ended, as
 *                                memcached's), then "END".
 *   stats cachedump <id> <limit> "ITEM <key> [<bytes> b; <exptime> s]"
 *                                for up to limit (0: all) items of class
 *                                id, then "END".
 *   stats sizes_enable|disable   "STAT sizes_status enabled|disabled" (no
 *                                END, as memcached); enabled, "stats
 *                                sizes" walks every item when asked and
 *                                counts them by size rounded up to 32
 *                                bytes ("STAT <size> <count>"); disabled,
 *                                "STAT sizes_status disabled".
 *
 * The dumps walk the engine's index through tc_walk, which is safe beside
 * concurrent reads and writes. A dump appends at most PROTO_GET_SLICE bytes
 * per call and then stops with s->resume set, its cursor in
 * s->walk_cursor: the connection calls again once its output drains, so a
 * dump of any size holds about one slice of replies (memcached's cachedump
 * stops at 2 MB of output instead; here it runs to its limit).
 *
 * Concurrency: a session belongs to one worker thread; the crawler and
 * automove settings are process-wide atomics (relaxed: each is read and
 * written whole, nothing is published through them), as memcached's are
 * global settings; they start from the command line's values and "stats
 * settings" shows the ones in effect (proto_admin_live).
 */

#include "src/server/proto/proto_admin.h"

#include "src/base/clock.h"
#include "src/server/settings.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* memcached's largest slab class id (MAX_NUMBER_OF_SLAB_CLASSES - 1). */
#define ADMIN_CLASS_MAX 63
/* Items a tc_walk call passes before the output is checked. */
#define ADMIN_WALK_BUDGET 256
/* lru_crawler sleep's bound, in microseconds (memcached: one second). */
#define ADMIN_SLEEP_MAX 1000000

static _Atomic bool crawler_off;
static _Atomic bool sizes_on;
static _Atomic int automove = 1;
static _Atomic uint32_t crawler_sleep = 100;
static _Atomic uint32_t crawler_tocrawl;

int
proto_admin_automove(void)
{
    return atomic_load_explicit(&automove, memory_order_relaxed);
}

bool
proto_admin_crawler_enabled(void)
{
    return !atomic_load_explicit(&crawler_off, memory_order_relaxed);
}

void
proto_admin_init(const struct settings *st)
{
    atomic_store_explicit(&crawler_off, !st->lru_crawler, memory_order_relaxed);
    atomic_store_explicit(&crawler_sleep, (uint32_t)st->lru_crawler_sleep,
                          memory_order_relaxed);
    atomic_store_explicit(&crawler_tocrawl, (uint32_t)st->lru_crawler_tocrawl,
                          memory_order_relaxed);
    atomic_store_explicit(&automove, (int)st->slab_automove,
                          memory_order_relaxed);
}

void
proto_admin_live(struct settings *st)
{
    st->lru_crawler = proto_admin_crawler_enabled();
    st->lru_crawler_sleep =
        atomic_load_explicit(&crawler_sleep, memory_order_relaxed);
    st->lru_crawler_tocrawl =
        atomic_load_explicit(&crawler_tocrawl, memory_order_relaxed);
    st->slab_automove = (uint64_t)proto_admin_automove();
}

static void
line(struct obuf *out, const char *text)
{
    obuf_add_str(out, text);
    obuf_add(out, "\r\n", 2);
}

/* ---- slabs --------------------------------------------------------------- */

static void
slabs_reassign(struct proto_sess *s, struct obuf *out,
               const struct proto_token *tok)
{
    int64_t src, dst;
    int n = tc_slab_nclasses(s->cache);
    struct tc_slab_stats st;

    if (!proto_parse_i64(&tok[2], &src) || !proto_parse_i64(&tok[3], &dst)) {
        proto_reply_err(s, out, PERR_BAD_FORMAT);
        return;
    }
    if (src < 0 || dst < 0 || src > n || dst > n) {
        line(out, "BADCLASS invalid src or dst class id");
        return;
    }
    if (src == dst) {
        line(out, "SAME src and dst class are identical");
        return;
    }
    if (src == 0 || dst == 0 ||
        tc_slab_stats(s->cache, (int)src - 1, &st) != 0 || st.total_pages < 2) {
        line(out, "NOSPARE source class has no spare pages");
        return;
    }
    int rc = tc_slab_reassign(s->cache, (int)src - 1, (int)dst - 1);
    if (rc == 0)
        line(out, "OK");
    else if (rc == -EINVAL)
        line(out, "BADCLASS invalid src or dst class id");
    else if (rc == -EBUSY)
        line(out, "BUSY currently processing reassign request");
    else
        line(out, "NOSPARE source class has no spare pages");
}

void
proto_admin_slabs(struct proto_sess *s, struct obuf *out,
                  const struct proto_token *tok, int ntok)
{
    uint32_t v;

    if (ntok == 4 && proto_tok_is(&tok[1], "reassign")) {
        slabs_reassign(s, out, tok);
    } else if (ntok == 3 && proto_tok_is(&tok[1], "automove")) {
        if (!proto_parse_u32(&tok[2], &v)) {
            proto_reply_err(s, out, PERR_BAD_FORMAT);
            return;
        }
        if (v > 2) {
            proto_reply_err(s, out, PERR_ERROR);
            return;
        }
        atomic_store_explicit(&automove, (int)v, memory_order_relaxed);
        line(out, "OK");
    } else {
        proto_reply_err(s, out, PERR_ERROR);
    }
}

/* ---- class lists --------------------------------------------------------- */

struct class_set {
    uint64_t bits; /* bit i: class id i + 1 (ids 1..ADMIN_CLASS_MAX) */
};

static bool
class_in(const struct class_set *set, unsigned cls0)
{
    return cls0 < 64 && (set->bits >> cls0) & 1;
}

/* "all", "hash" (when allowed) or "1,2,3": false for anything else or an
 * id outside 1..ADMIN_CLASS_MAX. */
static bool
parse_classes(const struct proto_token *t, bool hash_ok, struct class_set *out)
{
    if (proto_tok_is(t, "all") || (hash_ok && proto_tok_is(t, "hash"))) {
        out->bits = UINT64_MAX;
        return true;
    }
    out->bits = 0;
    size_t i = 0;
    while (i < t->n) {
        size_t j = i;
        uint32_t id = 0;
        while (j < t->n && t->p[j] >= '0' && t->p[j] <= '9' && j - i < 4)
            id = id * 10 + (uint32_t)(t->p[j++] - '0');
        if (j == i || id < 1 || id > ADMIN_CLASS_MAX ||
            (j < t->n && t->p[j] != ','))
            return false;
        out->bits |= 1ull << (id - 1);
        i = j + 1;
        if (j < t->n && i == t->n)
            return false; /* a trailing comma */
    }
    return out->bits != 0;
}

/* ---- walks --------------------------------------------------------------- */

enum walk_kind { WALK_METADUMP, WALK_CACHEDUMP };

struct walk_ctx {
    struct proto_sess *s;
    struct obuf *out;
    enum walk_kind kind;
    struct class_set classes;
    uint32_t now;
    uint64_t limit; /* cachedump: items at most, 0 = all */
};

static void
add_urlencoded(struct obuf *out, const void *k, uint32_t n)
{
    char buf[3 * TC_KEY_MAX];
    if (n > TC_KEY_MAX)
        n = TC_KEY_MAX;
    obuf_add(out, buf, proto_urlencode(k, n, buf));
}

static int
walk_item(void *arg, const struct tc_walk_item *it)
{
    struct walk_ctx *w = arg;
    if (!class_in(&w->classes, it->slab_class))
        return 0;
    if (w->kind == WALK_METADUMP) {
        obuf_add(w->out, "key=", 4);
        add_urlencoded(w->out, it->key, it->klen);
        uint32_t la =
            w->now > it->last_access ? w->now - it->last_access : w->now;
        obuf_printf(w->out,
                    " exp=%" PRId64 " la=%" PRIu32 " cas=%" PRIu64
                    " fetch=%s cls=%u size=%" PRIu32 "\n",
                    it->exptime ? (int64_t)it->exptime : (int64_t)-1, la,
                    it->cas, it->fetched ? "yes" : "no", it->slab_class + 1u,
                    it->size);
        return 0;
    }
    obuf_add(w->out, "ITEM ", 5);
    obuf_add(w->out, it->key, it->klen);
    obuf_printf(w->out, " [%" PRIu32 " b; %" PRIu32 " s]\r\n", it->vlen,
                it->exptime);
    w->s->walk_count++;
    return w->limit && w->s->walk_count >= w->limit ? 1 : 0;
}

/* Walk from s->walk_cursor: true when done ("END" appended), false after a
 * slice of output (the cursor kept for the next call). */
static bool
walk_run(struct walk_ctx *w, bool resumed)
{
    struct proto_sess *s = w->s;
    if (!resumed) {
        s->walk_cursor = 0;
        s->walk_count = 0;
    }
    uint64_t stop = obuf_pos(w->out) + PROTO_GET_SLICE;
    w->now = clock_now();
    while (s->walk_cursor != TC_WALK_DONE) {
        int rc =
            tc_walk(s->cache, &s->walk_cursor, ADMIN_WALK_BUDGET, walk_item, w);
        if (rc < 0 || w->out->err)
            break;
        if (w->limit && s->walk_count >= w->limit)
            break;
        if (obuf_pos(w->out) >= stop && s->walk_cursor != TC_WALK_DONE)
            return false;
    }
    obuf_add(w->out, "END\r\n", 5);
    return true;
}

/* ---- lru_crawler --------------------------------------------------------- */

static void
crawler_set(struct proto_sess *s, struct obuf *out,
            const struct proto_token *tok, int ntok)
{
    uint32_t v;
    if (ntok == 2 && proto_tok_is(&tok[1], "enable")) {
        /* memcached refuses to start a crawler already running */
        if (atomic_exchange_explicit(&crawler_off, false, memory_order_relaxed))
            line(out, "OK");
        else
            line(out, "ERROR failed to start lru crawler thread");
    } else if (ntok == 2 && proto_tok_is(&tok[1], "disable")) {
        atomic_store_explicit(&crawler_off, true, memory_order_relaxed);
        line(out, "OK");
    } else if (ntok == 3 && proto_tok_is(&tok[1], "sleep")) {
        if (!proto_parse_u32(&tok[2], &v))
            proto_reply_err(s, out, PERR_BAD_FORMAT);
        else if (v > ADMIN_SLEEP_MAX)
            proto_reply_err(s, out, PERR_SLEEP_RANGE);
        else {
            atomic_store_explicit(&crawler_sleep, v, memory_order_relaxed);
            line(out, "OK");
        }
    } else if (ntok == 3 && proto_tok_is(&tok[1], "tocrawl")) {
        if (!proto_parse_u32(&tok[2], &v)) {
            proto_reply_err(s, out, PERR_BAD_FORMAT);
        } else {
            atomic_store_explicit(&crawler_tocrawl, v, memory_order_relaxed);
            line(out, "OK");
        }
    } else {
        proto_reply_err(s, out, PERR_ERROR);
    }
}

bool
proto_admin_lru_crawler(struct proto_sess *s, struct obuf *out,
                        const struct proto_token *tok, int ntok, bool resumed)
{
    struct class_set set;
    bool crawl = ntok == 3 && proto_tok_is(&tok[1], "crawl");
    bool dump = ntok == 3 && proto_tok_is(&tok[1], "metadump");

    if (!crawl && !dump) {
        crawler_set(s, out, tok, ntok);
        return true;
    }
    if (dump && s->no_dump) {
        proto_reply_err(s, out, PERR_NO_METADUMP);
        return true;
    }
    if (!proto_admin_crawler_enabled()) {
        proto_reply_err(s, out, PERR_CRAWLER_OFF);
        return true;
    }
    if (!parse_classes(&tok[2], dump, &set)) {
        line(out, "BADCLASS invalid class id");
        return true;
    }
    if (crawl) {
        /* the maintenance thread's expiry sweep crawls all the time */
        line(out, "OK");
        return true;
    }
    struct walk_ctx w = {
        .s = s, .out = out, .kind = WALK_METADUMP, .classes = set};
    return walk_run(&w, resumed);
}

/* ---- stats sizes -------------------------------------------------------- */

#define SIZES_STEP 32
/* Buckets at most (sizes above the last one count in it): 32 MiB items. */
#define SIZES_MAX_BUCKETS (1u << 20)

struct sizes_ctx {
    uint64_t *count;
    size_t n;
};

static int
sizes_item(void *arg, const struct tc_walk_item *it)
{
    struct sizes_ctx *z = arg;
    size_t b = (it->size + SIZES_STEP - 1) / SIZES_STEP;
    z->count[b < z->n ? b : z->n - 1]++;
    return 0;
}

static void
sizes_dump(struct proto_sess *s, struct obuf *out)
{
    uint64_t largest = TC_ITEM_HEADER_SIZE + TC_KEY_MAX + s->item_size_max;
    struct sizes_ctx z;
    z.n = (size_t)(largest / SIZES_STEP + 2);
    if (z.n > SIZES_MAX_BUCKETS)
        z.n = SIZES_MAX_BUCKETS;
    z.count = calloc(z.n, sizeof(*z.count));
    if (z.count == NULL) {
        obuf_add_str(out, "STAT sizes_status error\r\n"
                          "STAT sizes_error out of memory\r\n");
        return;
    }
    uint64_t cursor = 0;
    while (cursor != TC_WALK_DONE)
        if (tc_walk(s->cache, &cursor, 4096, sizes_item, &z) < 0)
            break;
    for (size_t b = 0; b < z.n; b++)
        if (z.count[b])
            obuf_printf(out, "STAT %zu %" PRIu64 "\r\n", b * SIZES_STEP,
                        z.count[b]);
    free(z.count);
}

void
proto_admin_sizes(struct proto_sess *s, struct obuf *out,
                  const struct proto_token *tok)
{
    if (proto_tok_is(tok, "sizes_enable") ||
        proto_tok_is(tok, "sizes_disable")) {
        bool on = proto_tok_is(tok, "sizes_enable");
        atomic_store_explicit(&sizes_on, on, memory_order_relaxed);
        line(out,
             on ? "STAT sizes_status enabled" : "STAT sizes_status disabled");
        return;
    }
    if (atomic_load_explicit(&sizes_on, memory_order_relaxed))
        sizes_dump(s, out);
    else
        line(out, "STAT sizes_status disabled");
    obuf_add(out, "END\r\n", 5);
}

/* ---- stats cachedump ----------------------------------------------------- */

bool
proto_admin_cachedump(struct proto_sess *s, struct obuf *out,
                      const struct proto_token *tok, int ntok, bool resumed)
{
    uint32_t id, limit;

    if (s->no_dump) {
        proto_reply_err(s, out, PERR_NO_CACHEDUMP);
        return true;
    }
    if (ntok < 4) {
        proto_reply_err(s, out, PERR_BAD_CMDLINE);
        return true;
    }
    if (!proto_parse_u32(&tok[2], &id) || !proto_parse_u32(&tok[3], &limit)) {
        proto_reply_err(s, out, PERR_BAD_FORMAT);
        return true;
    }
    if (id > ADMIN_CLASS_MAX) {
        proto_reply_err(s, out, PERR_ILLEGAL_SLAB);
        return true;
    }
    if (id == 0) { /* memcached: no class 0, an empty list */
        obuf_add(out, "END\r\n", 5);
        return true;
    }
    struct walk_ctx w = {.s = s,
                         .out = out,
                         .kind = WALK_CACHEDUMP,
                         .classes = {1ull << (id - 1)},
                         .limit = limit};
    return walk_run(&w, resumed);
}

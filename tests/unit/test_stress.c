/*
 * Multi-threaded stress of the engine over a small pool that evicts all the
 * time. Every value is self-describing, so every read can be checked on its
 * own, whatever the interleaving:
 *
 *   value   = one or more segments (set writes one, append/prepend add one)
 *   segment = struct seg header + payload; the header names the key, the
 *             writer thread and a per-key version, and carries a checksum of
 *             itself and the payload (payload bytes derive from key+version)
 *
 * Three key spaces:
 *   "s:<id>"  shared by all workers: set, add, replace, append, prepend, cas,
 *             delete, get, gat, touch; reads are checked self-consistently
 *   "p:<t>:<id>" private to worker t: set, delete, get; a read must return
 *             exactly the last value t stored, or miss (eviction/expiry);
 *             after t's delete it must miss
 *   "n:<id>"  counters shared by all: set "<number>", incr, decr; a read must
 *             be a decimal number (padding spaces allowed); incr/decr must
 *             never say TC_NON_NUMERIC
 *
 * Bounded by STRESS_OPS per worker and STRESS_WALL_S seconds a round: a
 * round that ends by the wall clock before the pool evicted anything (the
 * churn this test is about; a slow machine needs longer) is followed by
 * another, up to STRESS_CHURN_WAIT_S in all, after which the test fails
 * saying so. (Checked between rounds: tc_stats is not for a thread racing
 * the workers, see quota_refills.) Seeded
 * (printed; TC_TEST_SEED=<n> replays the op streams, not the interleaving).
 * Runs under TSan through the Makefile's tsan target.
 */

#include "src/tiercache.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "seed_fx.h"

#define T0 1700000000u
#define MIB (1024u * 1024u)

#define STRESS_THREADS 2
#define STRESS_OPS 300000
#define STRESS_WALL_S 30
#define STRESS_CHURN_WAIT_S 120
#define NSHARED 20000
#define NPRIV 2000
#define NCOUNT 512
#define SEG_MAGIC 0x5e9du
#define SEG_MIN 16
#define VAL_MAX 8192
#define APPEND_MAX 256
#define GROWN_MAX (64 * 1024) /* append no further than this */
#define MAX_REPORTS 10

struct seg {
    uint16_t magic;
    uint16_t writer;
    uint32_t len; /* header + payload */
    uint32_t key;
    uint32_t ver;
    uint32_t csum;
};
_Static_assert(sizeof(struct seg) == 20, "segment header layout");

struct stress_cfg {
    const char *name;
    bool background;
    bool admin; /* workers also call tc_maintain, reassign, mem limit */
    uint64_t pool_size;
    double growth_factor;
};

struct shared {
    struct tc_cache *c;
    const struct stress_cfg *cfg;
    uint32_t seed;
    _Atomic uint32_t ver[NSHARED]; /* last version handed out per key */
    atomic_bool stop;
    atomic_int reports;
    struct timespec start;
};

struct worker {
    struct shared *sh;
    int id;
    uint64_t rng;
    uint32_t *priv_ver; /* 0 = absent (deleted or never stored) */
    unsigned char *buf; /* read buffer */
    unsigned char *val; /* write buffer */
    /* results */
    uint64_t ops, reads, hits, corrupt, nomem, e2big, other_err;
    uint64_t admin_calls;
    char first_error[256];
};

static uint32_t
test_seed(void)
{
    const char *s = getenv("TC_TEST_SEED");
    if (s != NULL && *s != '\0')
        return (uint32_t)strtoul(s, NULL, 0);
    return (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
}

static uint32_t
fnv1a(uint32_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 16777619u;
    }
    return h;
}

static void
payload_fill(unsigned char *p, size_t n, uint32_t key, uint32_t ver)
{
    uint64_t s = ((uint64_t)key << 32 | ver) * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0)
            rng_next(&s);
        p[i] = (unsigned char)(s >> ((i & 7) * 8));
    }
}

static uint32_t
seg_csum(const struct seg *h, const unsigned char *payload)
{
    struct seg t = *h;
    t.csum = 0;
    uint32_t c = fnv1a(2166136261u, &t, sizeof(t));
    return fnv1a(c, payload, t.len - sizeof(t));
}

/* Write one segment of total length len (>= sizeof(struct seg)). */
static void
seg_make(unsigned char *out, size_t len, uint32_t key, uint32_t ver, int writer)
{
    struct seg h = {.magic = SEG_MAGIC,
                    .writer = (uint16_t)writer,
                    .len = (uint32_t)len,
                    .key = key,
                    .ver = ver,
                    .csum = 0};
    payload_fill(out + sizeof(h), len - sizeof(h), key, ver);
    h.csum = seg_csum(&h, out + sizeof(h));
    memcpy(out, &h, sizeof(h));
}

static void report(struct worker *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
report(struct worker *w, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (w->first_error[0] == '\0')
        snprintf(w->first_error, sizeof(w->first_error), "%s", msg);
    if (atomic_fetch_add_explicit(&w->sh->reports, 1, memory_order_relaxed) <
        MAX_REPORTS)
        fprintf(stderr, "[stress seed %u worker %d op %" PRIu64 "] %s\n",
                w->sh->seed, w->id, w->ops, msg);
}

/* Check a value of a shared or private key: segments, each for `key`,
 * checksums right, lengths adding up to vlen exactly. 0 if fine. */
static int
check_segments(struct worker *w, const unsigned char *v, size_t vlen,
               uint32_t key, bool check_ver)
{
    size_t off = 0;
    if (vlen == 0) {
        report(w, "key %u: empty value", key);
        return -1;
    }
    while (off < vlen) {
        struct seg h;
        if (vlen - off < sizeof(h)) {
            report(w, "key %u: %zu stray bytes at %zu of %zu", key, vlen - off,
                   off, vlen);
            return -1;
        }
        memcpy(&h, v + off, sizeof(h));
        if (h.magic != SEG_MAGIC || h.len < sizeof(h) || h.len > vlen - off) {
            report(w,
                   "key %u: bad segment at %zu of %zu (magic %#x len %u "
                   "key %u)",
                   key, off, vlen, h.magic, h.len, h.key);
            return -1;
        }
        if (h.key != key) {
            report(w, "key %u: segment at %zu belongs to key %u (ver %u)", key,
                   off, h.key, h.ver);
            return -1;
        }
        if (h.writer >= STRESS_THREADS) {
            report(w, "key %u: segment writer %u", key, h.writer);
            return -1;
        }
        if (seg_csum(&h, v + off + sizeof(h)) != h.csum) {
            report(w, "key %u: checksum mismatch in segment at %zu (len %u)",
                   key, off, h.len);
            return -1;
        }
        if (check_ver && h.ver > atomic_load_explicit(&w->sh->ver[key],
                                                      memory_order_relaxed)) {
            report(w, "key %u: version %u was never handed out", key, h.ver);
            return -1;
        }
        off += h.len;
    }
    return 0;
}

/* The value of a counter: digits then only spaces. */
static int
check_counter(struct worker *w, const unsigned char *v, size_t vlen,
              uint32_t id)
{
    size_t n = 0;
    while (n < vlen && v[n] >= '0' && v[n] <= '9')
        n++;
    bool ok = n > 0 && n <= 20;
    for (size_t i = n; ok && i < vlen; i++)
        ok = v[i] == ' ';
    if (!ok)
        report(w, "counter %u holds %.*s (%zu bytes)", id,
               (int)(vlen < 40 ? vlen : 40), (const char *)v, vlen);
    return ok ? 0 : -1;
}

struct readv_ctx {
    unsigned char *buf;
    size_t cap, len;
    int calls;
    uint32_t vlen;
};

static void
readv_fn(void *arg, const struct tc_item_info *info, const struct iovec *iov,
         int niov)
{
    struct readv_ctx *r = arg;
    r->calls++;
    r->vlen = info->vlen;
    r->len = 0;
    for (int i = 0; i < niov; i++) {
        size_t n = iov[i].iov_len;
        if (r->len + n <= r->cap)
            memcpy(r->buf + r->len, iov[i].iov_base, n);
        r->len += n;
    }
}

/* Read key into w->buf: 1 hit (len in *len), 0 miss, -1 error. */
static int
do_read(struct worker *w, const char *k, size_t *len, int how)
{
    struct tc_cache *c = w->sh->c;
    size_t kl = strlen(k);
    int rc;
    w->reads++;
    if (how == 0) {
        struct tc_item_info info;
        rc = tc_get_copy(c, k, kl, w->buf, GROWN_MAX + VAL_MAX, &info);
        if (rc == TC_OK) {
            if (info.vlen > GROWN_MAX + VAL_MAX) {
                report(w, "%s: vlen %u beyond anything written", k, info.vlen);
                w->corrupt++;
                return -1;
            }
            *len = info.vlen;
        }
    } else {
        struct readv_ctx r = {.buf = w->buf, .cap = GROWN_MAX + VAL_MAX};
        rc = how == 1 ? tc_get(c, k, kl, readv_fn, &r)
                      : tc_gat(c, k, kl, 0, readv_fn, &r);
        if (rc == TC_OK) {
            if (r.calls != 1 || r.len != r.vlen || r.len > r.cap) {
                report(w, "%s: callback calls %d, %zu bytes, vlen %u", k,
                       r.calls, r.len, r.vlen);
                w->corrupt++;
                return -1;
            }
            *len = r.len;
        }
    }
    if (rc == TC_OK) {
        w->hits++;
        return 1;
    }
    if (rc == TC_NOT_FOUND)
        return 0;
    report(w, "read %s: %d", k, rc);
    w->other_err++;
    return -1;
}

static size_t
pick_len(struct worker *w)
{
    /* log-uniform 16 B .. 8 KiB so that many classes churn */
    uint64_t r = rng_next(&w->rng);
    unsigned bits = 4 + (unsigned)(r % 10); /* 16 .. 8192 */
    size_t lo = (size_t)1 << bits;
    size_t len = lo + (size_t)((r >> 8) % lo);
    return len > VAL_MAX ? VAL_MAX : len < SEG_MIN + 4 ? SEG_MIN + 4 : len;
}

static int64_t
pick_exptime(struct worker *w)
{
    uint64_t r = rng_next(&w->rng) % 16;
    return r == 0 ? 1 + (int64_t)(rng_next(&w->rng) % 5) : 0;
}

/* Store result bookkeeping: true if rc is one of `ok`-ish results. */
static bool
store_rc(struct worker *w, const char *what, const char *k, int rc,
         bool allow_not_stored, bool allow_cas)
{
    if (rc == TC_OK)
        return true;
    if (rc == -ENOMEM) {
        w->nomem++;
        return false;
    }
    if (rc == -E2BIG) {
        w->e2big++;
        return false;
    }
    if (allow_not_stored && rc == TC_NOT_STORED)
        return false;
    if (allow_cas && (rc == TC_EXISTS || rc == TC_NOT_FOUND))
        return false;
    report(w, "%s %s: unexpected %d", what, k, rc);
    w->other_err++;
    return false;
}

static void
op_shared(struct worker *w)
{
    struct tc_cache *c = w->sh->c;
    uint32_t id = (uint32_t)(rng_next(&w->rng) % NSHARED);
    char k[32];
    snprintf(k, sizeof(k), "s:%u", id);
    size_t kl = strlen(k);
    unsigned r = (unsigned)(rng_next(&w->rng) % 100);

    if (r < 45) {
        size_t len;
        int hit = do_read(w, k, &len, (int)(r % 3));
        if (hit == 1 && check_segments(w, w->buf, len, id, true) != 0)
            w->corrupt++;
        return;
    }
    uint32_t ver =
        atomic_fetch_add_explicit(&w->sh->ver[id], 1, memory_order_relaxed) + 1;
    if (r < 70) {
        size_t len = pick_len(w);
        seg_make(w->val, len, id, ver, w->id);
        enum tc_store_mode mode = r < 62   ? TC_SET
                                  : r < 66 ? TC_ADD
                                           : TC_REPLACE;
        int rc =
            tc_store(c, mode, k, kl, w->val, len, id, pick_exptime(w), 0, NULL);
        store_rc(w, "store", k, rc, mode != TC_SET, false);
    } else if (r < 80) {
        size_t len = SEG_MIN + 4 + rng_next(&w->rng) % APPEND_MAX;
        seg_make(w->val, len, id, ver, w->id);
        struct tc_item_info info;
        /* keep values bounded: only grow short ones */
        int rc = tc_get_copy(c, k, kl, w->buf, 0, &info);
        if (rc == TC_OK && info.vlen + len > GROWN_MAX) {
            rc = tc_set(c, k, kl, w->val, len, id, 0);
            store_rc(w, "set", k, rc, false, false);
            return;
        }
        rc = tc_store(c, r < 76 ? TC_APPEND : TC_PREPEND, k, kl, w->val, len, 0,
                      0, 0, NULL);
        store_rc(w, "append/prepend", k, rc, true, false);
    } else if (r < 87) {
        struct tc_item_info info;
        int rc = tc_get_copy(c, k, kl, w->buf, 0, &info);
        if (rc != TC_OK)
            return;
        size_t len = pick_len(w);
        seg_make(w->val, len, id, ver, w->id);
        rc = tc_store(c, TC_CAS, k, kl, w->val, len, id, 0, info.cas, NULL);
        store_rc(w, "cas", k, rc, false, true);
    } else if (r < 95) {
        int rc = tc_delete(c, k, kl, 0);
        if (rc != TC_OK && rc != TC_NOT_FOUND) {
            report(w, "delete %s: %d", k, rc);
            w->other_err++;
        }
    } else {
        int rc = tc_touch(c, k, kl, pick_exptime(w));
        if (rc != TC_OK && rc != TC_NOT_FOUND) {
            report(w, "touch %s: %d", k, rc);
            w->other_err++;
        }
    }
}

static void
op_private(struct worker *w)
{
    struct tc_cache *c = w->sh->c;
    uint32_t id = (uint32_t)(rng_next(&w->rng) % NPRIV);
    /* private ids live above the shared ones, one range per worker */
    uint32_t key = NSHARED + (uint32_t)w->id * NPRIV + id;
    char k[32];
    snprintf(k, sizeof(k), "p:%d:%u", w->id, id);
    size_t kl = strlen(k);
    unsigned r = (unsigned)(rng_next(&w->rng) % 100);

    if (r < 50) {
        size_t len;
        int hit = do_read(w, k, &len, (int)(r % 2));
        if (hit != 1)
            return;
        uint32_t want = w->priv_ver[id];
        if (want == 0) {
            report(w, "%s: hit after this thread deleted it", k);
            w->corrupt++;
            return;
        }
        struct seg h;
        if (check_segments(w, w->buf, len, key, false) != 0) {
            w->corrupt++;
            return;
        }
        memcpy(&h, w->buf, sizeof(h));
        if (h.ver != want || h.len != len) {
            report(w, "%s: version %u (%zu bytes), last stored %u", k, h.ver,
                   len, want);
            w->corrupt++;
        }
    } else if (r < 85) {
        uint32_t ver = w->priv_ver[id] + 1;
        if (ver == 0)
            ver = 1;
        size_t len = pick_len(w);
        seg_make(w->val, len, key, ver, w->id);
        int rc = tc_set(c, k, kl, w->val, len, 0, pick_exptime(w));
        if (store_rc(w, "set", k, rc, false, false)) {
            w->priv_ver[id] = ver;
        } else {
            /* A failed set may or may not leave the old value (memcached
             * drops it for a too-large one): delete, so that the exact
             * check stays exact. */
            (void)tc_delete(c, k, kl, 0);
            w->priv_ver[id] = 0;
        }
    } else {
        int rc = tc_delete(c, k, kl, 0);
        if (rc != TC_OK && rc != TC_NOT_FOUND) {
            report(w, "delete %s: %d", k, rc);
            w->other_err++;
        }
        if (rc == TC_NOT_FOUND || rc == TC_OK)
            w->priv_ver[id] = 0;
    }
}

static void
op_counter(struct worker *w)
{
    struct tc_cache *c = w->sh->c;
    uint32_t id = (uint32_t)(rng_next(&w->rng) % NCOUNT);
    char k[32];
    snprintf(k, sizeof(k), "n:%u", id);
    size_t kl = strlen(k);
    unsigned r = (unsigned)(rng_next(&w->rng) % 100);
    uint64_t v;

    if (r < 30) {
        size_t len;
        if (do_read(w, k, &len, 0) == 1 &&
            check_counter(w, w->buf, len, id) != 0)
            w->corrupt++;
    } else if (r < 80) {
        uint64_t d = rng_next(&w->rng) % 1000;
        int rc = r < 60 ? tc_incr(c, k, kl, d, &v, NULL)
                        : tc_decr(c, k, kl, d, &v, NULL);
        if (rc == TC_NON_NUMERIC) {
            report(w, "%s %s: TC_NON_NUMERIC on a counter",
                   r < 60 ? "incr" : "decr", k);
            w->corrupt++;
        } else if (rc != TC_OK && rc != TC_NOT_FOUND && rc != -ENOMEM) {
            report(w, "incr/decr %s: %d", k, rc);
            w->other_err++;
        } else if (rc == -ENOMEM) {
            w->nomem++;
        }
    } else {
        char num[24];
        uint64_t x = rng_next(&w->rng);
        x = r < 90 ? x % 100 : x; /* some near 2^64 to wrap */
        int n = snprintf(num, sizeof(num), "%" PRIu64, x);
        int rc = tc_store(c, r < 95 ? TC_SET : TC_ADD, k, kl, num, (size_t)n, 0,
                          0, 0, NULL);
        store_rc(w, "set counter", k, rc, true, false);
    }
}

static void
op_admin(struct worker *w)
{
    struct tc_cache *c = w->sh->c;
    const struct stress_cfg *cfg = w->sh->cfg;
    w->admin_calls++;
    if (w->id == 0) {
        int n = tc_maintain(c);
        if (n < 0) {
            report(w, "tc_maintain: %d", n);
            w->other_err++;
        }
        return;
    }
    /* worker 1: page moves and limit changes */
    if (w->admin_calls % 20 == 0) {
        /* between the whole data area and 3/4 of the pool file */
        uint64_t lim = (w->admin_calls / 20) % 2 ? cfg->pool_size * 3 / 4
                                                 : cfg->pool_size - 2 * MIB;
        int rc = tc_set_mem_limit(c, lim & ~(uint64_t)(MIB - 1));
        if (rc != 0 && rc != -EBUSY) {
            report(w, "tc_set_mem_limit: %d", rc);
            w->other_err++;
        }
        return;
    }
    int ncls = tc_slab_nclasses(c);
    if (ncls < 2)
        return;
    struct tc_slab_stats ss;
    int first = tc_slab_stats(c, 0, &ss) == 0 ? 0 : 1;
    int dst = first + (int)(rng_next(&w->rng) % (uint64_t)ncls);
    int rc = tc_slab_reassign(c, -1, dst);
    if (rc != 0 && rc != -EBUSY && rc != -ENOENT && rc != -EINVAL) {
        report(w, "tc_slab_reassign(-1, %d): %d", dst, rc);
        w->other_err++;
    }
}

static double
elapsed(const struct timespec *a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) +
           (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    if (w->id % 2 == 1) /* one worker registers up front, one lazily */
        tc_thread_register(sh->c);
    /* w->ops carries over from the previous round; each round makes
     * progress (no stop check at its first op) */
    const uint64_t first = w->ops;
    for (; w->ops < STRESS_OPS; w->ops++) {
        if ((w->ops & 63) == 0 && w->ops != first) {
            if (atomic_load_explicit(&sh->stop, memory_order_relaxed))
                break;
            if (elapsed(&sh->start) > STRESS_WALL_S) {
                atomic_store_explicit(&sh->stop, true, memory_order_relaxed);
                break;
            }
            if (w->corrupt + w->other_err > 100)
                break;
        }
        unsigned r = (unsigned)(rng_next(&w->rng) % 100);
        /* worker 0 moves the shared clock: short TTLs expire */
        if (w->id == 0 && w->ops % 20000 == 19999)
            tc_clock_advance(1);
        if (sh->cfg->admin && w->ops % 2000 == 1999)
            op_admin(w);
        else if (r < 70)
            op_shared(w);
        else if (r < 88)
            op_private(w);
        else
            op_counter(w);
    }
    if (w->id % 2 == 1)
        tc_thread_unregister(sh->c);
    return NULL;
}

/* After the workers stop: read everything once more, single-threaded. */
static void
final_pass(struct shared *sh, struct worker *w0, struct worker **ws)
{
    char k[32];
    size_t len;
    for (uint32_t id = 0; id < NSHARED; id++) {
        snprintf(k, sizeof(k), "s:%u", id);
        if (do_read(w0, k, &len, 1) == 1 &&
            check_segments(w0, w0->buf, len, id, true) != 0)
            w0->corrupt++;
    }
    for (int t = 0; t < STRESS_THREADS; t++) {
        for (uint32_t id = 0; id < NPRIV; id++) {
            snprintf(k, sizeof(k), "p:%d:%u", t, id);
            if (do_read(w0, k, &len, 0) != 1)
                continue;
            struct seg h;
            uint32_t key = NSHARED + (uint32_t)t * NPRIV + id;
            if (check_segments(w0, w0->buf, len, key, false) != 0) {
                w0->corrupt++;
                continue;
            }
            memcpy(&h, w0->buf, sizeof(h));
            if (ws[t]->priv_ver[id] == 0 || h.ver != ws[t]->priv_ver[id]) {
                report(w0, "final: %s version %u, last stored %u", k, h.ver,
                       ws[t]->priv_ver[id]);
                w0->corrupt++;
            }
        }
    }
    for (uint32_t id = 0; id < NCOUNT; id++) {
        snprintf(k, sizeof(k), "n:%u", id);
        if (do_read(w0, k, &len, 0) == 1 &&
            check_counter(w0, w0->buf, len, id) != 0)
            w0->corrupt++;
    }
    (void)sh;
}

/* One round of the workers, until STRESS_OPS each or STRESS_WALL_S: true
 * when the wall clock ended it (another round may follow). */
static bool
run_round(struct shared *sh, struct worker **ws)
{
    pthread_t th[STRESS_THREADS];
    atomic_store_explicit(&sh->stop, false, memory_order_relaxed);
    clock_gettime(CLOCK_MONOTONIC, &sh->start);
    for (int i = 0; i < STRESS_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, ws[i]), 0);
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i], NULL);
    bool more = false;
    for (int i = 0; i < STRESS_THREADS; i++) {
        if (ws[i]->corrupt + ws[i]->other_err > 100)
            return false;
        more |= ws[i]->ops < STRESS_OPS;
    }
    return more && atomic_load_explicit(&sh->stop, memory_order_relaxed);
}

static struct worker *
worker_new(struct shared *sh, int id)
{
    struct worker *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    w->sh = sh;
    w->id = id;
    w->rng =
        ((uint64_t)sh->seed << 8 | (uint64_t)id) * 0x9E3779B97F4A7C15ull + 1;
    w->priv_ver = calloc(NPRIV, sizeof(uint32_t));
    w->buf = malloc(GROWN_MAX + VAL_MAX);
    w->val = malloc(VAL_MAX + APPEND_MAX + SEG_MIN + 64);
    assert_non_null(w->priv_ver);
    assert_non_null(w->buf);
    assert_non_null(w->val);
    return w;
}

static void
worker_free(struct worker *w)
{
    free(w->priv_ver);
    free(w->buf);
    free(w->val);
    free(w);
}

static void
run_stress(const struct stress_cfg *cfg)
{
    char path[192];
    snprintf(path, sizeof(path), "/dev/shm/tc_test_stress_%d_%s.pool",
             (int)getpid(), cfg->name);
    unlink(path);
    struct tc_config tcfg;
    tc_config_init(&tcfg);
    tcfg.pool_path = path;
    tcfg.pool_size = cfg->pool_size;
    tcfg.background = cfg->background;
    tcfg.evict = true;
    tcfg.growth_factor = cfg->growth_factor;

    struct shared *sh = calloc(1, sizeof(*sh));
    assert_non_null(sh);
    sh->cfg = cfg;
    sh->seed = test_seed();
    print_message("stress %s: seed %u (TC_TEST_SEED to replay)\n", cfg->name,
                  sh->seed);
    tc_clock_set(T0);
    int rc = tc_open(&tcfg, &sh->c);
    if (rc != 0)
        fail_msg("tc_open: %d (%s)", rc, tc_errmsg());

    struct worker *ws[STRESS_THREADS];
    struct tc_stats s;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < STRESS_THREADS; i++)
        ws[i] = worker_new(sh, i);
    for (int round = 1;; round++) {
        if (!run_round(sh, ws))
            break; /* every worker reached STRESS_OPS, or too many errors */
        tc_stats(sh->c, &s);
        if (s.evictions > 0 || elapsed(&t0) > STRESS_CHURN_WAIT_S)
            break;
        print_message("stress %s: no eviction yet after round %d (%.1f s); "
                      "another round\n",
                      cfg->name, round, elapsed(&t0));
    }
    double secs = elapsed(&t0);
    tc_stats(sh->c, &s);
    uint64_t ops = 0, reads = 0, hits = 0, corrupt = 0, nomem = 0, e2big = 0,
             errs = 0;
    for (int i = 0; i < STRESS_THREADS; i++) {
        ops += ws[i]->ops;
        reads += ws[i]->reads;
        hits += ws[i]->hits;
        corrupt += ws[i]->corrupt;
        nomem += ws[i]->nomem;
        e2big += ws[i]->e2big;
        errs += ws[i]->other_err;
    }
    print_message("stress %s: %" PRIu64 " ops in %.1f s, %" PRIu64
                  " reads (%" PRIu64 " hits), evictions %" PRIu64
                  ", -ENOMEM %" PRIu64 ", -E2BIG %" PRIu64
                  ", reassigned pages %" PRIu64 ", curr_items %" PRIu64
                  ", corrupt %" PRIu64 ", errors %" PRIu64 "\n",
                  cfg->name, ops, secs, reads, hits, s.evictions, nomem, e2big,
                  s.slab_reassign_count, s.curr_items, corrupt, errs);

    /* workers are done: the walker may run */
    rc = tc_check(sh->c);
    if (rc != 0)
        fail_msg("stress %s (seed %u): tc_check %d (%s)", cfg->name, sh->seed,
                 rc, tc_errmsg());
    struct worker *w0 = worker_new(sh, 0);
    final_pass(sh, w0, ws);
    corrupt += w0->corrupt;
    errs += w0->other_err;

    char first[256] = "";
    for (int i = 0; i < STRESS_THREADS && first[0] == '\0'; i++)
        snprintf(first, sizeof(first), "%s", ws[i]->first_error);
    if (first[0] == '\0')
        snprintf(first, sizeof(first), "%s", w0->first_error);

    worker_free(w0);
    for (int i = 0; i < STRESS_THREADS; i++)
        worker_free(ws[i]);
    tc_close(sh->c);
    unlink(path);
    tc_clock_set(0);
    uint32_t seed = sh->seed;
    free(sh);

    if (corrupt != 0 || errs != 0)
        fail_msg("stress %s (seed %u): %" PRIu64 " corrupt reads, %" PRIu64
                 " unexpected results; first: %s",
                 cfg->name, seed, corrupt, errs, first);
    /* the pool really churned (the workers ran rounds until it did, or
     * until their op count, or STRESS_CHURN_WAIT_S) */
    if (s.evictions == 0)
        fail_msg("stress %s (seed %u): no eviction in %" PRIu64 " ops, %.1f s",
                 cfg->name, seed, ops, secs);
}

static void
test_stress_foreground(void **state)
{
    (void)state;
    static const struct stress_cfg cfg = {
        .name = "foreground",
        .background = false,
        .admin = true,
        .pool_size = 16 * MIB,
        .growth_factor = 2.0, /* ~9 classes over 14 pages */
    };
    run_stress(&cfg);
}

/* No admin calls, few classes: only the store/read paths under eviction. */
static void
test_stress_evict_only(void **state)
{
    (void)state;
    static const struct stress_cfg cfg = {
        .name = "evict_only",
        .background = false,
        .admin = false,
        .pool_size = 16 * MIB,
        .growth_factor = 2.0,
    };
    run_stress(&cfg);
}

static void
test_stress_background(void **state)
{
    (void)state;
    static const struct stress_cfg cfg = {
        .name = "background",
        .background = true,
        .admin = false,
        .pool_size = 16 * MIB,
        .growth_factor = 1.25, /* ~22 classes over 14 pages: starving
                                  classes need the maintenance thread */
    };
    run_stress(&cfg);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_foreground),
        cmocka_unit_test(test_stress_evict_only),
        cmocka_unit_test(test_stress_background),
    };
    /* TC_TEST_FILTER=<glob> runs only the matching tests */
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("stress", tests, NULL, NULL);
}

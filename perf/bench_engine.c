/*
 * bench_engine: the embedded engine through the public API (tiercache.h).
 *
 * Phases, one after the other on the same cache:
 *   LOAD   every key set once (keys split between the threads)
 *   GET    uniformly random keys, tc_get_copy() into a per-thread buffer
 *   SET    uniformly random keys overwritten
 *   MIXED  9 GETs : 1 SET, uniformly random keys
 *   DELETE every key at most once, in a fixed pseudo-random order (key
 *          number op * stride mod keys, stride coprime with keys): each
 *          delete finds its key while a thread's ops stay below
 *          keys / threads
 *   BATCH  like GET, but --batch random keys a call (tc_get_many), each hit
 *          copied into the buffer; ops count keys, latencies are per call
 * Each phase prints total ops/s and the p50/p99 latency of sampled
 * operations: every Nth operation of a thread is timed with clock_nsec()
 * into that thread's array; the arrays are merged and sorted at the end of
 * the phase. A sampled latency includes one clock_nsec() call, whose cost
 * is measured and printed.
 *
 * After LOAD it prints the metadata cost per item, from tc_stats():
 *   DRAM  (dram_index_bytes + dram_meta_bytes) / curr_items
 *   PMEM  item header: (bytes - curr_items * (key + value)) / curr_items
 * and compares it with memcached's ~56 bytes.
 *
 * Figures only: nothing here asserts speed (the machine is shared and
 * noisy). Every loop is bounded by an operation count and by seconds.
 *
 * Concurrency: workers live for the whole run and meet main on a barrier
 * before and after each phase; main writes the phase number before the
 * first barrier and reads the workers' results after the second, so the
 * barrier orders both.
 */

#include "perf/be_limit.h"
#include "src/base/clock.h"
#include "src/tiercache.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Keys are "key:" and 12 lowercase hex digits of the key number: 16 bytes,
 * built in registers so that key generation costs no memory traffic. */
#define BE_KEY_LEN 16
#define BE_MAX_THREADS 64
#define BE_CHECK_EVERY 1024       /* ops between two looks at the clock */
#define BE_MAX_SAMPLES (1u << 22) /* per thread per phase (16 MiB) */
/* memcached 1.6 on 64-bit: 48-byte item header with CAS (LRU prev/next,
 * hash-chain next, times, sizes, refcount, flags, class, CAS) plus the
 * 8-byte hash-table bucket pointer; all in DRAM. */
#define BE_MEMCACHED_META 56

enum be_phase {
    BE_LOAD = 0,
    BE_GET = 1,
    BE_BATCH = 2,
    BE_SET = 3,
    BE_MIXED = 4,
    BE_DELETE = 5,
    BE_NPHASES = 6,
    BE_EXIT = 7,
};

static const char *const be_phase_names[BE_NPHASES] = {
    "LOAD", "GET", "BATCH", "SET", "MIXED", "DELETE"};
/* Largest --batch. */
#define BE_BATCH_MAX 256

struct be_opts {
    uint64_t keys;
    uint32_t vsize;
    unsigned threads;
    double seconds;      /* per timed phase */
    double load_seconds; /* bound on LOAD */
    uint64_t max_ops;    /* per thread per phase */
    uint64_t pool_size;
    char pool_path[512];
    bool pool_path_given;
    uint64_t expected_items;
    unsigned sample_every;
    bool background;
    bool prefault;
    bool run[BE_NPHASES];
    uint64_t seed;
    unsigned batch;           /* keys per tc_get_many in BATCH */
    bool limit;               /* measure the random-copy limits */
    bool power;               /* --durability power */
    bool split;               /* time the batch path's parts (be_split) */
    bool large_pages;         /* tc_config.large_pages */
    uint32_t packed_item_max; /* tc_config.packed_item_max */
};

struct be_shared {
    const struct be_opts *o;
    struct tc_cache *cache;
    pthread_barrier_t barrier;
    enum be_phase phase; /* written by main before the start barrier */
};

struct be_worker {
    struct be_shared *sh;
    unsigned id;
    pthread_t tid;
    uint64_t rng;
    char *getbuf; /* tc_get_copy target, vsize bytes */
    char *val;    /* value stored by SETs, vsize bytes */
    uint32_t *samples;
    uint64_t nsamples;
    /* results of the last phase */
    uint64_t ops;
    uint64_t nsec;
    uint64_t misses;
    uint64_t errors;
    int first_error;
} __attribute__((aligned(64)));

static char be_unlink_path[512]; /* pool file to remove at exit, or "" */

/* "00".."ff", two characters per byte of the key number */
static char be_hex2[256][2];

static void
be_hex2_init(void)
{
    static const char hex[16] = "0123456789abcdef";

    for (int i = 0; i < 256; i++) {
        be_hex2[i][0] = hex[i >> 4];
        be_hex2[i][1] = hex[i & 15];
    }
}

static inline void
be_key(char *k, uint64_t i)
{
    memcpy(k, "key:", 4);
    for (int d = 14; d >= 4; d -= 2) {
        memcpy(k + d, be_hex2[i & 0xff], 2);
        i >>= 8;
    }
}

static void
be_unlink_pool(void)
{
    if (be_unlink_path[0] != '\0')
        unlink(be_unlink_path);
}

static void
be_on_signal(int sig)
{
    /* unlink is async-signal-safe; the pool file must not outlive us */
    if (be_unlink_path[0] != '\0')
        unlink(be_unlink_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline void
be_note(struct be_worker *w, int rc)
{
    if (rc == TC_NOT_FOUND) {
        w->misses++;
    } else if (rc != TC_OK) {
        if (w->errors++ == 0)
            w->first_error = rc;
    }
}

/* One operation of the phase on key number k; op is the per-thread count. */
static inline __attribute__((always_inline)) void
be_op(struct be_worker *w, struct tc_cache *c, uint32_t vsize, bool set,
      uint64_t k, uint64_t op, bool del)
{
    char key[BE_KEY_LEN];
    int rc;

    be_key(key, k);
    if (del) {
        rc = tc_delete(c, key, BE_KEY_LEN, 0);
    } else if (set) {
        /* a different value each time, like a real overwrite */
        memcpy(w->val, &op, sizeof(op) < vsize ? sizeof(op) : vsize);
        rc = tc_set(c, key, BE_KEY_LEN, w->val, vsize, 0, 0);
    } else {
        rc = tc_get_copy(c, key, BE_KEY_LEN, w->getbuf, vsize, NULL);
    }
    be_note(w, rc);
}

static inline __attribute__((always_inline)) bool
be_is_set(enum be_phase ph, uint64_t *rng)
{
    switch (ph) {
    case BE_LOAD:
    case BE_SET:
        return true;
    case BE_MIXED:
        return be_pick(rng, 10) == 0;
    default:
        return false;
    }
}

static uint64_t
be_gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The key a DELETE phase's op of thread id removes: threads take turns
 * along one walk of stride BE_DELETE_STRIDE (1 when it shares a factor
 * with the key count), which visits every key once. */
#define BE_DELETE_STRIDE 1000003u
static inline uint64_t
be_delete_key(const struct be_opts *o, unsigned id, uint64_t op)
{
    uint64_t stride =
        be_gcd(o->keys, BE_DELETE_STRIDE) == 1 ? BE_DELETE_STRIDE : 1;
    uint64_t i = op * o->threads + id;
    return (uint64_t)(((unsigned __int128)i * stride) % o->keys);
}

static bool
be_copy_many(void *arg, size_t i, const struct tc_item_info *info,
             const struct iovec *iov, int niov)
{
    struct be_worker *w = arg;
    size_t cap = w->sh->o->vsize, at = 0;
    (void)i;
    (void)info;
    for (int j = 0; j < niov && at < cap; j++) {
        size_t n = iov[j].iov_len < cap - at ? iov[j].iov_len : cap - at;
        memcpy(w->getbuf + at, iov[j].iov_base, n);
        at += n;
    }
    return true;
}

/* One BATCH call: b random keys; returns the keys done. */
static inline uint64_t
be_batch_op(struct be_worker *w, struct tc_cache *c, unsigned b)
{
    char keys[BE_BATCH_MAX][BE_KEY_LEN];
    struct tc_key tk[BE_BATCH_MAX];
    int rcs[BE_BATCH_MAX];
    const struct be_opts *o = w->sh->o;

    for (unsigned j = 0; j < b; j++) {
        be_key(keys[j], be_pick(&w->rng, o->keys));
        tk[j] = (struct tc_key){keys[j], BE_KEY_LEN};
    }
    int n = tc_get_many(c, tk, b, NULL, be_copy_many, w, rcs);
    if (n < 0) {
        be_note(w, n);
        return b;
    }
    for (int j = 0; j < n; j++)
        be_note(w, rcs[j]);
    return b;
}

static void
be_run_batch(struct be_worker *w)
{
    const struct be_opts *o = w->sh->o;
    struct tc_cache *c = w->sh->cache;
    uint64_t every = o->sample_every, countdown = every;
    uint64_t t0 = clock_nsec(), done = 0;
    uint64_t deadline = t0 + (uint64_t)(o->seconds * 1e9);

    while (done < o->max_ops) {
        unsigned calls = BE_CHECK_EVERY / o->batch + 1;
        for (unsigned i = 0; i < calls && done < o->max_ops; i++) {
            if (--countdown == 0) {
                countdown = every;
                uint64_t a = clock_nsec();
                done += be_batch_op(w, c, o->batch);
                uint64_t b = clock_nsec();
                if (w->nsamples < BE_MAX_SAMPLES)
                    w->samples[w->nsamples++] =
                        b - a > UINT32_MAX ? UINT32_MAX : (uint32_t)(b - a);
            } else {
                done += be_batch_op(w, c, o->batch);
            }
        }
        if (clock_nsec() >= deadline)
            break;
    }
    w->nsec = clock_nsec() - t0;
    w->ops = done;
}

/*
 * Where a batched get's time goes, without hardware counters (--split):
 * rounds of --batch fresh random keys, each timed three ways on the main
 * thread after the phases. prefetch: tc_prefetch of fresh keys (hashing,
 * the bucket reads the item prefetches wait on, the prefetches issued);
 * cold: tc_get_many of other fresh keys, each hit copied out; hot: the same
 * call again at once, every line it needs now in cache (the path's own
 * work). cold - hot is the time spent waiting for memory. The single get
 * likewise (get_cold, get_hot: one fresh key, then that key again).
 * Medians over the rounds (a round another process preempted does not
 * move them), per key in ns, clock_nsec() included once per timed call.
 */
#define BE_SPLIT_ROUNDS 20000

enum { BE_SP_PRE, BE_SP_COLD, BE_SP_HOT, BE_SP_GCOLD, BE_SP_GHOT, BE_SP_N };

static int be_cmp_u32(const void *a, const void *b);

static double
be_split_median(uint32_t *v, unsigned n, unsigned per)
{
    qsort(v, n, sizeof(*v), be_cmp_u32);
    return (double)v[n / 2] / per;
}

static void
be_split(const struct be_opts *o, struct tc_cache *c, struct be_worker *w)
{
    char keys[BE_BATCH_MAX][BE_KEY_LEN];
    struct tc_key tk[BE_BATCH_MAX];
    int rcs[BE_BATCH_MAX];
    uint64_t rng = o->seed ^ 0x5851F42D4C957F2Dull, errs = 0;
    unsigned b = o->batch;
    uint32_t *t = malloc(sizeof(uint32_t) * BE_SPLIT_ROUNDS * BE_SP_N);
    double med[BE_SP_N];

    if (t == NULL) {
        printf("# split: out of memory\n");
        return;
    }
    if (rng == 0)
        rng = 1;
    for (unsigned r = 0; r < BE_SPLIT_ROUNDS; r++) {
        uint32_t *row = t + (size_t)r * BE_SP_N;
        for (unsigned j = 0; j < b; j++) {
            be_key(keys[j], be_pick(&rng, o->keys));
            tk[j] = (struct tc_key){keys[j], BE_KEY_LEN};
        }
        uint64_t t0 = clock_nsec();
        tc_prefetch(c, tk, b);
        row[BE_SP_PRE] = (uint32_t)(clock_nsec() - t0);

        for (unsigned j = 0; j < b; j++)
            be_key(keys[j], be_pick(&rng, o->keys));
        t0 = clock_nsec();
        int n1 = tc_get_many(c, tk, b, NULL, be_copy_many, w, rcs);
        uint64_t t1 = clock_nsec();
        int n2 = tc_get_many(c, tk, b, NULL, be_copy_many, w, rcs);
        uint64_t t2 = clock_nsec();
        row[BE_SP_COLD] = (uint32_t)(t1 - t0);
        row[BE_SP_HOT] = (uint32_t)(t2 - t1);
        errs += (n1 != (int)b) + (n2 != (int)b);

        be_key(keys[0], be_pick(&rng, o->keys));
        t0 = clock_nsec();
        int g1 = tc_get_copy(c, keys[0], BE_KEY_LEN, w->getbuf, o->vsize, NULL);
        t1 = clock_nsec();
        int g2 = tc_get_copy(c, keys[0], BE_KEY_LEN, w->getbuf, o->vsize, NULL);
        t2 = clock_nsec();
        row[BE_SP_GCOLD] = (uint32_t)(t1 - t0);
        row[BE_SP_GHOT] = (uint32_t)(t2 - t1);
        errs += (g1 < 0) + (g2 < 0);
    }
    /* columns to rows: each measure's rounds together, then medians */
    uint32_t *col = malloc(sizeof(uint32_t) * BE_SPLIT_ROUNDS);
    if (col == NULL) {
        free(t);
        printf("# split: out of memory\n");
        return;
    }
    for (unsigned k = 0; k < BE_SP_N; k++) {
        for (unsigned r = 0; r < BE_SPLIT_ROUNDS; r++)
            col[r] = t[(size_t)r * BE_SP_N + k];
        med[k] =
            be_split_median(col, BE_SPLIT_ROUNDS, k >= BE_SP_GCOLD ? 1 : b);
    }
    free(col);
    free(t);
    printf("# split: batches of %u, %u rounds, medians; ns per key: "
           "prefetch %.1f, cold %.1f, hot %.1f (memory %.1f); single get "
           "cold %.1f, hot %.1f\n",
           b, BE_SPLIT_ROUNDS, med[BE_SP_PRE], med[BE_SP_COLD], med[BE_SP_HOT],
           med[BE_SP_COLD] - med[BE_SP_HOT], med[BE_SP_GCOLD], med[BE_SP_GHOT]);
    printf("RESULT bench=split batch=%u prefetch_ns=%.1f cold_ns=%.1f "
           "hot_ns=%.1f get_cold_ns=%.1f get_hot_ns=%.1f errors=%" PRIu64 "\n",
           b, med[BE_SP_PRE], med[BE_SP_COLD], med[BE_SP_HOT], med[BE_SP_GCOLD],
           med[BE_SP_GHOT], errs);
}

static void
be_run_phase(struct be_worker *w, enum be_phase ph)
{
    const struct be_opts *o = w->sh->o;
    struct tc_cache *c = w->sh->cache;
    uint64_t lo = 0, hi = 0, max_ops = o->max_ops;
    uint64_t every = o->sample_every, countdown = every;
    uint64_t t0, deadline, done = 0;
    double secs = ph == BE_LOAD ? o->load_seconds : o->seconds;

    w->ops = w->nsec = w->misses = w->errors = 0;
    w->first_error = 0;
    w->nsamples = 0;
    if (ph == BE_BATCH) {
        be_run_batch(w);
        return;
    }
    if (ph == BE_LOAD) {
        lo = o->keys * w->id / o->threads;
        hi = o->keys * (w->id + 1) / o->threads;
        max_ops = hi - lo;
    }

    t0 = clock_nsec();
    deadline = t0 + (uint64_t)(secs * 1e9);
    while (done < max_ops) {
        uint64_t n =
            max_ops - done < BE_CHECK_EVERY ? max_ops - done : BE_CHECK_EVERY;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t op = done + i;
            uint64_t k = ph == BE_LOAD ? lo + op : be_pick(&w->rng, o->keys);
            bool set = be_is_set(ph, &w->rng), del = ph == BE_DELETE;
            if (del)
                k = be_delete_key(o, w->id, op);

            if (--countdown == 0) {
                uint64_t a, b;
                countdown = every;
                a = clock_nsec();
                be_op(w, c, o->vsize, set, k, op, del);
                b = clock_nsec();
                if (w->nsamples < BE_MAX_SAMPLES)
                    w->samples[w->nsamples++] =
                        b - a > UINT32_MAX ? UINT32_MAX : (uint32_t)(b - a);
            } else {
                be_op(w, c, o->vsize, set, k, op, del);
            }
        }
        done += n;
        if (clock_nsec() >= deadline)
            break;
    }
    w->nsec = clock_nsec() - t0;
    w->ops = done;
}

static void *
be_worker_main(void *arg)
{
    struct be_worker *w = arg;
    struct be_shared *sh = w->sh;
    int rc = tc_thread_register(sh->cache);

    if (rc < 0) {
        fprintf(stderr,
                "bench_engine: thread %u: tc_thread_register: %s "
                "(%s)\n",
                w->id, strerror(-rc), tc_errmsg());
    }
    for (;;) {
        enum be_phase ph;

        pthread_barrier_wait(&sh->barrier); /* start: phase is set */
        ph = sh->phase;
        if (ph == BE_EXIT)
            break;
        if (rc < 0) {
            w->ops = w->nsec = w->misses = w->nsamples = 0;
            w->errors = 1;
            w->first_error = rc;
        } else {
            be_run_phase(w, ph);
        }
        pthread_barrier_wait(&sh->barrier); /* stop: results are ready */
    }
    if (rc == 0)
        tc_thread_unregister(sh->cache);
    return NULL;
}

static int
be_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static uint32_t
be_pct(const uint32_t *v, uint64_t n, double p)
{
    uint64_t i;

    if (n == 0)
        return 0;
    i = (uint64_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Median cost of one clock_nsec() call, in ns (bounded loop). */
static uint64_t
be_clock_overhead(void)
{
    enum { N = 10001 };
    static uint32_t d[N];

    for (int i = 0; i < N; i++) {
        uint64_t a = clock_nsec();
        uint64_t b = clock_nsec();
        d[i] = (uint32_t)(b - a);
    }
    qsort(d, N, sizeof(d[0]), be_cmp_u32);
    return d[N / 2];
}

/* Cost of what every op does besides the engine call (random pick, key
 * build), in ns per op (bounded loop). */
static double
be_harness_overhead(uint64_t keys)
{
    enum { N = 2000000 };
    uint64_t rng = 0x1234567, t0, sink = 0;
    char key[BE_KEY_LEN];

    t0 = clock_nsec();
    for (int i = 0; i < N; i++) {
        be_key(key, be_pick(&rng, keys));
        sink += (unsigned char)key[i & (BE_KEY_LEN - 1)];
    }
    t0 = clock_nsec() - t0;
    __asm__ volatile("" : : "r"(sink));
    return (double)t0 / N;
}

static void
be_print_header(void)
{
    printf("%-6s %-7s %-6s %-9s %13s %9s %9s %9s %9s %9s\n", "phase", "threads",
           "vsize", "keys", "ops/s", "p50_ns", "p99_ns", "p999_ns", "misses",
           "evictions");
}

/* Merge and report the phase just run. Returns the number of errors. */
static uint64_t
be_report(const struct be_opts *o, struct be_worker *w, enum be_phase ph,
          uint64_t evictions)
{
    uint64_t ops = 0, nsec = 0, misses = 0, errors = 0, ns = 0;
    uint32_t *all, p50, p99, p999;
    int first_error = 0;
    double rate;

    for (unsigned t = 0; t < o->threads; t++)
        ns += w[t].nsamples;
    all = malloc((ns ? ns : 1) * sizeof(*all));
    if (all == NULL) {
        fprintf(stderr, "bench_engine: out of memory merging samples\n");
        exit(1);
    }
    ns = 0;
    for (unsigned t = 0; t < o->threads; t++) {
        ops += w[t].ops;
        nsec = w[t].nsec > nsec ? w[t].nsec : nsec;
        misses += w[t].misses;
        if (w[t].errors != 0 && first_error == 0)
            first_error = w[t].first_error;
        errors += w[t].errors;
        memcpy(all + ns, w[t].samples, w[t].nsamples * sizeof(*all));
        ns += w[t].nsamples;
    }
    qsort(all, ns, sizeof(*all), be_cmp_u32);
    p50 = be_pct(all, ns, 0.50);
    p99 = be_pct(all, ns, 0.99);
    p999 = be_pct(all, ns, 0.999);
    free(all);
    /* all threads run for the same seconds; the slowest one bounds */
    rate = nsec ? (double)ops * 1e9 / (double)nsec : 0;

    printf("%-6s %-7u %-6u %-9" PRIu64 " %13.0f %9u %9u %9u %9" PRIu64
           " %9" PRIu64 "\n",
           be_phase_names[ph], o->threads, o->vsize, o->keys, rate, p50, p99,
           p999, misses, evictions);
    printf("RESULT bench=engine phase=%s threads=%u vsize=%u ops=%.0f "
           "p50_ns=%u p99_ns=%u p999_ns=%u keys=%" PRIu64 " total_ops=%" PRIu64
           " misses=%" PRIu64 " evictions=%" PRIu64 " errors=%" PRIu64
           " samples=%" PRIu64 "\n",
           be_phase_names[ph], o->threads, o->vsize, rate, p50, p99, p999,
           o->keys, ops, misses, evictions, errors, ns);
    if (errors != 0)
        printf("# %s: %" PRIu64 " errors, first: %d (%s)\n", be_phase_names[ph],
               errors, first_error,
               first_error < 0 ? strerror(-first_error) : "result code");
    return errors;
}

static void
be_report_meta(const struct be_opts *o, struct tc_cache *c)
{
    struct tc_stats st;
    double items, dram, pmem_hdr, chunk_bytes = 0, slack;
    int ncls = tc_slab_nclasses(c);

    tc_stats(c, &st);
    if (st.curr_items == 0) {
        printf("# meta: no items after load\n");
        return;
    }
    items = (double)st.curr_items;
    dram = (double)(st.dram_index_bytes + st.dram_meta_bytes) / items;
    pmem_hdr =
        ((double)st.bytes - items * (double)(BE_KEY_LEN + o->vsize)) / items;
    for (int i = 0; i < ncls; i++) {
        struct tc_slab_stats ss;
        if (tc_slab_stats(c, i, &ss) == 0)
            chunk_bytes += (double)ss.used_chunks * ss.chunk_size;
    }
    /* chunk bytes beyond the item itself: the slab class rounding */
    slack =
        chunk_bytes > 0 ? chunk_bytes / items - (double)st.bytes / items : 0;

    printf("\n# metadata after LOAD: curr_items=%" PRIu64 " (keys %" PRIu64
           ", evictions %" PRIu64 "), key %d B, value %u B\n",
           st.curr_items, o->keys, st.evictions, BE_KEY_LEN, o->vsize);
    printf("#   DRAM  index %" PRIu64 " B (%" PRIu64 " buckets, %" PRIu64
           " overflow) + meta %" PRIu64 " B  = %.1f B/item\n",
           st.dram_index_bytes, st.index_buckets, st.index_overflow_buckets,
           st.dram_meta_bytes, dram);
    printf("#   PMEM  item header (bytes - items*(key+value)) = %.1f B/item; "
           "slab rounding beyond the item %.1f B/item (not metadata)\n",
           pmem_hdr, slack);
    printf("#   total %.1f B/item vs memcached ~%d B/item (48 B item header "
           "with CAS + 8 B hash-table pointer, all DRAM; its slab rounding "
           "not counted either)\n",
           dram + pmem_hdr, BE_MEMCACHED_META);
    printf("RESULT bench=meta dram_per_item=%.1f pmem_hdr_per_item=%.1f "
           "total=%.1f memcached=%d slab_slack_per_item=%.1f items=%" PRIu64
           " vsize=%u threads=%u\n\n",
           dram, pmem_hdr, dram + pmem_hdr, BE_MEMCACHED_META, slack,
           st.curr_items, o->vsize, o->threads);
}

/* How much of the pool mapping the kernel maps with 2 MiB pages (its
 * resident part after LOAD): the page walk a get pays on its item. */
static void
be_report_pages(const struct be_opts *o)
{
    int64_t rss, huge = be_huge_bytes(NULL, o->pool_path, &rss);

    if (huge < 0) {
        printf("# pool pages: /proc/self/smaps unreadable\n\n");
        return;
    }
    printf("# pool pages: %lld of %lld resident MiB on 2 MiB pages\n",
           (long long)(huge >> 20), (long long)(rss >> 20));
    printf("RESULT bench=pool huge_mib=%lld rss_mib=%lld\n\n",
           (long long)(huge >> 20), (long long)(rss >> 20));
}

/*
 * Create the pool file and write it full of zeros, so that its tmpfs pages
 * exist and are cleared before the engine maps it: a first touch of a
 * fallocated tmpfs page clears it inside the page fault, which otherwise
 * dominates a LOAD of large values (seen in perf as clear_page_erms). The
 * engine formats a zero file like a new one (no valid header). 0 or a
 * negative errno.
 */
static int
be_prefault(const char *path, uint64_t size)
{
    static char zeros[1 << 20];
    uint64_t t0 = clock_nsec(), done = 0;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int rc = 0;

    if (fd < 0)
        return -errno;
    while (done < size) {
        size_t n =
            size - done < sizeof(zeros) ? (size_t)(size - done) : sizeof(zeros);
        ssize_t w = pwrite(fd, zeros, n, (off_t)done);
        if (w <= 0) {
            rc = w < 0 ? -errno : -EIO;
            break;
        }
        done += (uint64_t)w;
    }
    close(fd);
    if (rc == 0)
        printf("prefault: wrote %" PRIu64 " MiB of zeros in %.2f s\n",
               size >> 20, (double)(clock_nsec() - t0) / 1e9);
    return rc;
}

static void
be_usage(FILE *f)
{
    fprintf(
        f,
        "usage: bench_engine [options]\n"
        "  --keys N            keys (default 1000000)\n"
        "  --value-size N      value bytes (default 100)\n"
        "  --threads N         worker threads (default 1)\n"
        "  --seconds S         per timed phase (default 5)\n"
        "  --load-seconds S    bound on the LOAD phase (default 300)\n"
        "  --max-ops N         per thread per phase (default 1000000000)\n"
        "  --pool-size BYTES   default max(64 MiB, "
        "keys*(value+key+64)*1.3)\n"
        "  --pool-path PATH    default /dev/shm/tc-bench-<pid>.pool "
        "(removed at exit)\n"
        "  --pool-dir DIR      the pool file in DIR instead (e.g. a tmpfs "
        "mounted\n"
        "                      huge=always, for 2 MiB pages; removed at "
        "exit)\n"
        "  --large-pages       tc_config.large_pages (-L: log which pages the "
        "pool got)\n"
        "  --packed-item-max N tc_config.packed_item_max (default 0: "
        "off)\n"
        "  --expected-items N  index sizing (default: keys; 0 = the "
        "engine's own rule)\n"
        "  --sample-every N    time every Nth op (default 64)\n"
        "  --phases LIST       of get,batch,set,mixed,delete (default all but "
        "delete; LOAD "
        "always runs)\n"
        "  --no-background     no maintenance thread\n"
        "  --prefault          write the new pool file full of zeros "
        "before\n"
        "                      tc_open, so LOAD does not pay tmpfs's "
        "first-touch\n"
        "                      page clearing\n"
        "  --seed N            random seed (default: time based)\n"
        "  --batch N           keys per tc_get_many in BATCH (default "
        "16)\n"
        "  --no-limit          skip the random-copy limit measurement\n"
        "  --durability LEVEL  process (default) or power (flushes only "
        "on real PMEM,\n"
        "                      or with PMEM_IS_PMEM_FORCE=1)\n"

        "  --split             after the phases, time batched and single "
        "gets\n"
        "                      cold and hot, and tc_prefetch alone\n");
}

static int
be_parse(int argc, char **argv, struct be_opts *o)
{
    static const struct option longopts[] = {
        {"keys", required_argument, NULL, 'k'},
        {"value-size", required_argument, NULL, 'v'},
        {"threads", required_argument, NULL, 't'},
        {"seconds", required_argument, NULL, 's'},
        {"load-seconds", required_argument, NULL, 'L'},
        {"max-ops", required_argument, NULL, 'm'},
        {"pool-size", required_argument, NULL, 'P'},
        {"pool-path", required_argument, NULL, 'p'},
        {"expected-items", required_argument, NULL, 'e'},
        {"sample-every", required_argument, NULL, 'n'},
        {"phases", required_argument, NULL, 'f'},
        {"no-background", no_argument, NULL, 'B'},
        {"prefault", no_argument, NULL, 'F'},
        {"seed", required_argument, NULL, 'r'},
        {"batch", required_argument, NULL, 'b'},
        {"no-limit", no_argument, NULL, 'N'},
        {"durability", required_argument, NULL, 'D'},
        {"split", no_argument, NULL, 'Z'},
        {"pool-dir", required_argument, NULL, 'd'},
        {"large-pages", no_argument, NULL, 'H'},
        {"packed-item-max", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool expected_given = false;
    int c;

    memset(o, 0, sizeof(*o));
    o->keys = 1000000;
    o->vsize = 100;
    o->threads = 1;
    o->seconds = 5;
    o->load_seconds = 300;
    o->max_ops = 1000000000;
    o->sample_every = 64;
    o->background = true;
    for (int i = 0; i < BE_NPHASES; i++)
        o->run[i] = true;
    o->run[BE_DELETE] = false; /* empties the cache: asked for by name */
    o->seed = clock_nsec() | 1;
    o->batch = 16;
    o->limit = true;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'k':
            o->keys = strtoull(optarg, &end, 10);
            /* 12 hex digits in a key; be_pick needs < 2^32 */
            if (*end || o->keys == 0 || o->keys >= (1ull << 32))
                goto bad;
            break;
        case 'v':
            o->vsize = (uint32_t)strtoul(optarg, &end, 10);
            if (*end || o->vsize == 0 || o->vsize > (64u << 20))
                goto bad;
            break;
        case 't':
            o->threads = (unsigned)strtoul(optarg, &end, 10);
            if (*end || o->threads == 0 || o->threads > BE_MAX_THREADS)
                goto bad;
            break;
        case 's':
            o->seconds = strtod(optarg, &end);
            if (*end || !(o->seconds > 0 && o->seconds <= 3600))
                goto bad;
            break;
        case 'L':
            o->load_seconds = strtod(optarg, &end);
            if (*end || !(o->load_seconds > 0 && o->load_seconds <= 36000))
                goto bad;
            break;
        case 'm':
            o->max_ops = strtoull(optarg, &end, 10);
            if (*end || o->max_ops == 0)
                goto bad;
            break;
        case 'P':
            o->pool_size = strtoull(optarg, &end, 10);
            if (*end || o->pool_size == 0)
                goto bad;
            break;
        case 'p':
            snprintf(o->pool_path, sizeof(o->pool_path), "%s", optarg);
            o->pool_path_given = true;
            break;
        case 'e':
            o->expected_items = strtoull(optarg, &end, 10);
            if (*end)
                goto bad;
            expected_given = true;
            break;
        case 'n':
            o->sample_every = (unsigned)strtoul(optarg, &end, 10);
            if (*end || o->sample_every == 0)
                goto bad;
            break;
        case 'f': {
            char *copy = strdup(optarg), *save = NULL, *tok;
            o->run[BE_GET] = o->run[BE_SET] = o->run[BE_MIXED] = false;
            o->run[BE_BATCH] = o->run[BE_DELETE] = false;
            for (tok = strtok_r(copy, ",", &save); tok != NULL;
                 tok = strtok_r(NULL, ",", &save)) {
                if (strcasecmp(tok, "get") == 0)
                    o->run[BE_GET] = true;
                else if (strcasecmp(tok, "set") == 0)
                    o->run[BE_SET] = true;
                else if (strcasecmp(tok, "mixed") == 0)
                    o->run[BE_MIXED] = true;
                else if (strcasecmp(tok, "batch") == 0)
                    o->run[BE_BATCH] = true;
                else if (strcasecmp(tok, "delete") == 0)
                    o->run[BE_DELETE] = true;
                else if (strcasecmp(tok, "load") != 0) {
                    free(copy);
                    goto bad;
                }
            }
            free(copy);
            break;
        }
        case 'b':
            o->batch = (unsigned)strtoul(optarg, &end, 10);
            if (*end || o->batch == 0 || o->batch > BE_BATCH_MAX)
                goto bad;
            break;
        case 'D':
            if (!strcmp(optarg, "power"))
                o->power = true;
            else if (strcmp(optarg, "process") != 0)
                goto bad;
            break;
        case 'Z':
            o->split = true;
            break;
        case 'd':
            snprintf(o->pool_path, sizeof(o->pool_path), "%s/tc-bench-%d.pool",
                     optarg, (int)getpid());
            o->pool_path_given = true;
            break;
        case 'H':
            o->large_pages = true;
            break;
        case 'K':
            o->packed_item_max = (uint32_t)strtoul(optarg, &end, 10);
            if (*end || o->packed_item_max > 65535)
                goto bad;
            break;
        case 'N':
            o->limit = false;
            break;
        case 'B':
            o->background = false;
            break;
        case 'F':
            o->prefault = true;
            break;
        case 'r':
            o->seed = strtoull(optarg, &end, 0) | 1;
            if (*end)
                goto bad;
            break;
        case 'h':
            be_usage(stdout);
            exit(0);
        default:
            goto bad;
        }
    }
    if (optind != argc)
        goto bad;
    if (o->pool_size == 0) {
        double want = (double)o->keys * (o->vsize + BE_KEY_LEN + 64) * 1.3;
        uint64_t mib = 1ull << 20;
        o->pool_size = (uint64_t)want;
        if (o->pool_size < 64 * mib)
            o->pool_size = 64 * mib;
        o->pool_size = (o->pool_size + mib - 1) / mib * mib;
    }
    if (!o->pool_path_given)
        snprintf(o->pool_path, sizeof(o->pool_path),
                 "/dev/shm/tc-bench-%d.pool", (int)getpid());
    if (!expected_given)
        o->expected_items = o->keys;
    return 0;
bad:
    be_usage(stderr);
    return -EINVAL;
}

int
main(int argc, char **argv)
{
    struct be_opts o;
    struct be_shared sh;
    struct be_worker *w;
    struct tc_config cfg;
    struct stat sb;
    uint64_t errors = 0;
    int rc;

    if (be_parse(argc, argv, &o) < 0)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    be_hex2_init();

    /* remove the pool file at exit only if we are the ones creating it */
    if (stat(o.pool_path, &sb) != 0) {
        snprintf(be_unlink_path, sizeof(be_unlink_path), "%s", o.pool_path);
        atexit(be_unlink_pool);
        signal(SIGINT, be_on_signal);
        signal(SIGTERM, be_on_signal);
        if (o.prefault) {
            rc = be_prefault(o.pool_path, o.pool_size);
            if (rc < 0) {
                fprintf(stderr, "bench_engine: prefault %s: %s\n", o.pool_path,
                        strerror(-rc));
                return 1;
            }
        }
    } else if (o.prefault) {
        printf("prefault: %s exists, left as it is\n", o.pool_path);
    }

    tc_config_init(&cfg);
    cfg.pool_path = o.pool_path;
    cfg.pool_size = o.pool_size;
    cfg.expected_items = o.expected_items;
    cfg.background = o.background;
    cfg.durability = o.power ? TC_DURABILITY_POWER : TC_DURABILITY_PROCESS;
    cfg.large_pages = o.large_pages;
    cfg.packed_item_max = o.packed_item_max;
    rc = tc_open(&cfg, &sh.cache);
    if (rc < 0) {
        fprintf(stderr,
                "bench_engine: tc_open(%s, %" PRIu64 " bytes): %s: "
                "%s\n",
                o.pool_path, o.pool_size, strerror(-rc), tc_errmsg());
        return 1;
    }
    sh.o = &o;
    sh.phase = BE_LOAD;

    printf("bench_engine: tiercache %s, keys=%" PRIu64 " (key %d B) value=%u "
           "B threads=%u, %.1f s per phase (at most %" PRIu64
           " ops/thread), pool %" PRIu64 " MiB at %s, expected_items=%" PRIu64
           ", background=%s, prefault=%s, packed_item_max=%u, large_pages=%s, "
           "sample every %u ops, seed=0x%" PRIx64 "\n",
           TC_VERSION, o.keys, BE_KEY_LEN, o.vsize, o.threads, o.seconds,
           o.max_ops, o.pool_size >> 20, o.pool_path, o.expected_items,
           o.background ? "on" : "off", o.prefault ? "yes" : "no",
           o.packed_item_max, o.large_pages ? "yes" : "no", o.sample_every,
           o.seed);
    printf("clock_nsec() costs ~%" PRIu64 " ns; each sampled latency "
           "includes it once\n",
           be_clock_overhead());
    printf("harness work per op (random pick + key build) ~%.1f ns, "
           "included in ops/s\n\n",
           be_harness_overhead(o.keys));

    w = aligned_alloc(64, sizeof(*w) * o.threads);
    if (w == NULL)
        return 1;
    memset(w, 0, sizeof(*w) * o.threads);
    pthread_barrier_init(&sh.barrier, NULL, o.threads + 1);
    for (unsigned t = 0; t < o.threads; t++) {
        w[t].sh = &sh;
        w[t].id = t;
        w[t].rng = o.seed ^ (0x9E3779B97F4A7C15ull * (t + 1));
        if (w[t].rng == 0)
            w[t].rng = 1;
        w[t].getbuf = malloc(o.vsize);
        w[t].val = malloc(o.vsize);
        w[t].samples = malloc(BE_MAX_SAMPLES * sizeof(uint32_t));
        if (!w[t].getbuf || !w[t].val || !w[t].samples) {
            fprintf(stderr, "bench_engine: out of memory\n");
            return 1;
        }
        memset(w[t].val, 'a' + (int)(t % 26), o.vsize);
        pthread_create(&w[t].tid, NULL, be_worker_main, &w[t]);
    }

    if (o.limit) {
        struct tc_stats st;
        tc_stats(sh.cache, &st); /* the index as sized for the keys */
        be_limits(o.seed, st.dram_index_bytes);
    }
    be_print_header();
    for (int ph = BE_LOAD; ph < BE_NPHASES; ph++) {
        if (!o.run[ph])
            continue;
        struct tc_stats before, after;

        tc_stats(sh.cache, &before);
        sh.phase = (enum be_phase)ph;
        pthread_barrier_wait(&sh.barrier); /* start */
        pthread_barrier_wait(&sh.barrier); /* stop */
        tc_stats(sh.cache, &after);
        errors += be_report(&o, w, (enum be_phase)ph,
                            after.evictions - before.evictions);
        if (ph == BE_LOAD) {
            uint64_t loaded = 0;
            for (unsigned t = 0; t < o.threads; t++)
                loaded += w[t].ops;
            if (loaded < o.keys)
                printf("# LOAD stopped after %.0f s with %" PRIu64
                       " of %" PRIu64 " keys: later GETs will miss\n",
                       o.load_seconds, loaded, o.keys);
            be_report_meta(&o, sh.cache);
            be_report_pages(&o);
            be_print_header();
        }
    }
    if (o.split)
        be_split(&o, sh.cache, &w[0]);
    sh.phase = BE_EXIT;
    pthread_barrier_wait(&sh.barrier);
    for (unsigned t = 0; t < o.threads; t++) {
        pthread_join(w[t].tid, NULL);
        free(w[t].getbuf);
        free(w[t].val);
        free(w[t].samples);
    }
    pthread_barrier_destroy(&sh.barrier);
    free(w);
    tc_close(sh.cache);
    return errors ? 1 : 0;
}

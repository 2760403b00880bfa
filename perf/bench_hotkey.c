/*
 * bench_hotkey: a Zipf write workload through the engine API (tc_set),
 * with and without hot-key placement in the DRAM pool, side by side in one
 * run. Prints for each: write ops/s and the bytes written to PMEM per
 * write, counted through the PMEM write helpers' hook (tier/pm.h), the
 * hot-key counters over the counted phase (hot_now is the gauge at the
 * end; saved B/set is hotkey_pmem_bytes_saved per set: value bytes that
 * went to DRAM), and the ratios between the two.
 *
 *   bench_hotkey [--keys 100000] [--zipf-s 0.99] [--vlen 100]
 *                [--threads 2] [--warmup 3] [--seconds 5]
 *                [--hot-pool 8m-in-bytes] [--hot-rate 1000] [--k 64]
 *                [--only pmem|hot]   (one configuration, for profiling)
 *                [--write-ns 0]      (PMEM latency emulation: extra ns per
 *                                     64-byte line written, tc_config's
 *                                     pm_write_ns)
 *
 * Each configuration opens a fresh cache (background maintenance on, so
 * the hot set is rebuilt every second), loads every key once, runs the
 * workload for --warmup seconds (promotion needs a maintenance step and
 * the rates need a few seconds of history), then counts for --seconds.
 *
 * Figures only; nothing asserts speed.
 *
 * Concurrency: the hook adds to one relaxed atomic counter per thread slot
 * (cache-line padded); main reads them after joining the workers. The
 * `counting` flag is set and cleared by main between phases (relaxed: the
 * phase boundary is fuzzy by a few operations, the same for both runs).
 */

#include "src/base/clock.h"
#include "src/tiercache.h"
#include "tier/pm.h"

#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BH_MAX_THREADS 16

struct bh_opts {
    uint64_t keys;
    double zipf_s;
    uint32_t vlen;
    unsigned threads;
    unsigned warmup;
    unsigned seconds;
    uint64_t hot_pool;
    uint32_t hot_rate;
    uint32_t k;
    int only;          /* 0 both, 1 pmem-only, 2 hot-pool (for profiling) */
    uint32_t write_ns; /* pm_write_ns: latency emulation, 0 off */
};

static double *bh_cdf; /* read-only once built */
static _Atomic bool bh_counting;
static _Atomic bool bh_stop;
static _Atomic uint64_t bh_pm_bytes;

static void
bh_hook(const void *dst, size_t n)
{
    (void)dst;
    if (atomic_load_explicit(&bh_counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&bh_pm_bytes, n, memory_order_relaxed);
}

static int
bh_zipf_setup(uint64_t n, double s)
{
    bh_cdf = malloc(n * sizeof(double));
    if (!bh_cdf)
        return -1;
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        sum += 1.0 / pow((double)(i + 1), s);
        bh_cdf[i] = sum;
    }
    for (uint64_t i = 0; i < n; i++)
        bh_cdf[i] /= sum;
    return 0;
}

static uint64_t
bh_rng(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t
bh_zipf_next(uint64_t n, uint64_t *s)
{
    double u = (double)(bh_rng(s) >> 11) / (double)(1ull << 53);
    uint64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (bh_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct bh_worker {
    pthread_t tid;
    struct tc_cache *c;
    const struct bh_opts *o;
    unsigned id;
    uint64_t ops_counted;
    int errors;
};

static void *
bh_worker_main(void *arg)
{
    struct bh_worker *w = arg;
    const struct bh_opts *o = w->o;
    uint64_t seed = 0x1234567ull * (w->id + 1);
    char key[32], val[4096];

    memset(val, 'v', sizeof(val));
    tc_thread_register(w->c);
    while (!atomic_load_explicit(&bh_stop, memory_order_relaxed)) {
        for (int i = 0; i < 256; i++) {
            uint64_t k = bh_zipf_next(o->keys, &seed);
            int n = snprintf(key, sizeof(key), "key:%012llx",
                             (unsigned long long)k);
            memcpy(val, key, (size_t)n); /* values differ per key */
            if (tc_set(w->c, key, (size_t)n, val, o->vlen, 0, 0) != TC_OK)
                w->errors++;
            if (atomic_load_explicit(&bh_counting, memory_order_relaxed))
                w->ops_counted++;
        }
    }
    tc_thread_unregister(w->c);
    return NULL;
}

struct bh_result {
    uint64_t ops;
    double ops_per_sec;
    double pm_bytes_per_op;
    struct tc_stats st;
    int errors;
};

static int
bh_run(const struct bh_opts *o, bool hot, struct bh_result *res)
{
    char path[128];
    struct tc_config cfg;
    struct tc_cache *c;
    struct bh_worker w[BH_MAX_THREADS];
    char key[32], val[4096];

    snprintf(path, sizeof(path), "/dev/shm/tc_bench_hotkey_%d.pool",
             (int)getpid());
    unlink(path);
    tc_config_init(&cfg);
    cfg.pool_path = path;
    cfg.pool_size = 256ull << 20;
    cfg.hot_pool_size = hot ? o->hot_pool : 0;
    cfg.hot_write_rate = o->hot_rate;
    cfg.hotkey_k = o->k;
    cfg.pm_write_ns = o->write_ns;
    if (tc_open(&cfg, &c) != 0) {
        fprintf(stderr, "bench_hotkey: tc_open: %s\n", tc_errmsg());
        return -1;
    }
    memset(val, 'v', sizeof(val));
    for (uint64_t k = 0; k < o->keys; k++) {
        int n =
            snprintf(key, sizeof(key), "key:%012llx", (unsigned long long)k);
        tc_set(c, key, (size_t)n, val, o->vlen, 0, 0);
    }
    atomic_store_explicit(&bh_stop, false, memory_order_relaxed);
    atomic_store_explicit(&bh_counting, false, memory_order_relaxed);
    atomic_store_explicit(&bh_pm_bytes, 0, memory_order_relaxed);
    for (unsigned i = 0; i < o->threads; i++) {
        w[i] = (struct bh_worker){.c = c, .o = o, .id = i};
        pthread_create(&w[i].tid, NULL, bh_worker_main, &w[i]);
    }
    sleep(o->warmup);
    struct tc_stats before;
    tc_stats(c, &before);
    uint64_t t0 = clock_nsec();
    atomic_store_explicit(&bh_counting, true, memory_order_relaxed);
    sleep(o->seconds);
    atomic_store_explicit(&bh_counting, false, memory_order_relaxed);
    uint64_t t1 = clock_nsec();
    uint64_t pm = atomic_load_explicit(&bh_pm_bytes, memory_order_relaxed);
    atomic_store_explicit(&bh_stop, true, memory_order_relaxed);
    uint64_t ops = 0;
    res->errors = 0;
    for (unsigned i = 0; i < o->threads; i++) {
        pthread_join(w[i].tid, NULL);
        ops += w[i].ops_counted;
        res->errors += w[i].errors;
    }
    tc_stats(c, &res->st);
    res->st.hotkey_promotions -= before.hotkey_promotions;
    res->st.hotkey_demotions -= before.hotkey_demotions;
    res->st.hotkey_pmem_bytes_saved -= before.hotkey_pmem_bytes_saved;
    res->ops = ops;
    res->ops_per_sec = (double)ops / ((double)(t1 - t0) / 1e9);
    res->pm_bytes_per_op = ops ? (double)pm / (double)ops : 0;
    tc_close(c);
    unlink(path);
    return 0;
}

static void
bh_result_line(const char *name, const struct bh_result *r)
{
    printf("RESULT bench=hotkey config=%s sets_per_s=%.0f "
           "pmem_bytes_per_set=%.1f hot_now=%llu\n",
           name, r->ops_per_sec, r->pm_bytes_per_op,
           (unsigned long long)r->st.hotkey_current);
}

static void
bh_print(const char *name, const struct bh_result *r)
{
    printf("%-10s %12.0f %14.1f %10llu %10llu %10llu %14.1f %6d\n", name,
           r->ops_per_sec, r->pm_bytes_per_op,
           (unsigned long long)r->st.hotkey_current,
           (unsigned long long)r->st.hotkey_promotions,
           (unsigned long long)r->st.hotkey_demotions,
           r->ops ? (double)r->st.hotkey_pmem_bytes_saved / (double)r->ops
                  : 0.0,
           r->errors);
}

int
main(int argc, char **argv)
{
    struct bh_opts o = {
        .keys = 100000,
        .zipf_s = 0.99,
        .vlen = 100,
        .threads = 2,
        .warmup = 3,
        .seconds = 5,
        .hot_pool = 8ull << 20,
        .hot_rate = 1000,
        .k = 64,
    };
    static const struct option lo[] = {
        {"keys", 1, NULL, 'n'},     {"zipf-s", 1, NULL, 's'},
        {"vlen", 1, NULL, 'v'},     {"threads", 1, NULL, 't'},
        {"warmup", 1, NULL, 'w'},   {"seconds", 1, NULL, 'd'},
        {"hot-pool", 1, NULL, 'p'}, {"hot-rate", 1, NULL, 'r'},
        {"k", 1, NULL, 'k'},        {"only", 1, NULL, 'o'},
        {"write-ns", 1, NULL, 'W'}, {NULL, 0, NULL, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'n':
            o.keys = strtoull(optarg, NULL, 0);
            break;
        case 's':
            o.zipf_s = strtod(optarg, NULL);
            break;
        case 'v':
            o.vlen = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 't':
            o.threads = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'w':
            o.warmup = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'd':
            o.seconds = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'p':
            o.hot_pool = strtoull(optarg, NULL, 0);
            break;
        case 'r':
            o.hot_rate = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'k':
            o.k = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'W':
            o.write_ns = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'o':
            o.only = !strcmp(optarg, "pmem")  ? 1
                     : !strcmp(optarg, "hot") ? 2
                                              : 0;
            break;
        default:
            fprintf(stderr, "usage: see the comment at the top of %s\n",
                    __FILE__);
            return 2;
        }
    }
    if (o.keys == 0 || o.vlen > 4000 || o.threads == 0 ||
        o.threads > BH_MAX_THREADS || o.seconds == 0) {
        fprintf(stderr, "bench_hotkey: bad arguments\n");
        return 2;
    }
    if (bh_zipf_setup(o.keys, o.zipf_s) != 0)
        return 1;
    pm_set_write_hook(bh_hook);
    printf("bench_hotkey: %llu keys, Zipf s=%.2f, %u-byte values, %u "
           "threads, %u s warmup + %u s counted; hot pool %llu bytes, "
           "hot_write_rate %u, hotkey_k %u\n",
           (unsigned long long)o.keys, o.zipf_s, o.vlen, o.threads, o.warmup,
           o.seconds, (unsigned long long)o.hot_pool, o.hot_rate, o.k);
    struct bh_result off, on;
    memset(&off, 0, sizeof(off));
    memset(&on, 0, sizeof(on));
    if ((o.only != 2 && bh_run(&o, false, &off) != 0) ||
        (o.only != 1 && bh_run(&o, true, &on) != 0))
        return 1;
    printf("%-10s %12s %14s %10s %10s %10s %14s %6s\n", "config", "sets/s",
           "PMEM B/set", "hot_now", "promoted", "demoted", "saved B/set",
           "errors");
    bh_print("pmem-only", &off);
    bh_print("hot-pool", &on);
    if (!o.only) {
        bh_result_line("pmem-only", &off);
        bh_result_line("hot-pool", &on);
    }
    printf("ratio hot/pmem-only: sets/s %.2fx, PMEM bytes per set %.2fx\n",
           off.ops_per_sec > 0 ? on.ops_per_sec / off.ops_per_sec : 0,
           off.pm_bytes_per_op > 0 ? on.pm_bytes_per_op / off.pm_bytes_per_op
                                   : 0);
    free(bh_cdf);
    return 0;
}

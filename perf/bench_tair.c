/*
 * bench_tair: the Tair MDB experiment on the embedded engine,
 * through the public API (tiercache.h), on emulated PMEM.
 *
 * Three configurations, one after the other in one run, each on a fresh
 * cache with the write-hotspot tracker on (4 emulated DIMMs, 4 KiB
 * interleave by default) and the PMEM latency emulation on:
 *   a  page info in PMEM + item init inside the slab lock
 *      (ablate_meta_in_pmem + ablate_init_in_lock: Tair MDB's first layout)
 *   b  page info in DRAM + item init inside the slab lock
 *      (ablate_init_in_lock only: Tair's first fix)
 *   c  tiercache's default (both off: Tair's second fix)
 * For each: every key is set once (LOAD, untimed), the tracker is reset,
 * then `threads` threads run a write-heavy mix (set_pct % tc_set, the rest
 * tc_get_copy, uniformly random keys) for `seconds`. Printed per
 * configuration: ops/s, set ops/s, in-engine write latency p50/p99 (the time
 * around each tc_set, clock_nsec() cost included), bytes per emulated DIMM
 * and the skew (hottest DIMM / mean) from tc_hotspot_get(), and one
 * machine-readable RESULT line (perf/tair_experiment.sh collects those).
 *
 * Figures only, nothing asserted. Every loop is bounded by an operation
 * count and by seconds.
 *
 * Concurrency: workers are started per configuration and joined before the
 * figures are read (pthread_join orders their results before the reads).
 */

#include "src/base/clock.h"
#include "src/tiercache.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define BT_KEY_LEN 16
#define BT_MAX_THREADS 16
#define BT_MAX_SAMPLES (1u << 22) /* set latencies kept per thread */
#define BT_CHECK_EVERY 256        /* ops between two looks at the clock */

struct bt_opts {
    unsigned threads;
    uint64_t keys;
    uint32_t vsize;
    unsigned set_pct;
    double seconds;
    uint64_t max_ops; /* per thread */
    uint64_t pool_size;
    uint32_t write_ns;
    uint32_t read_ns;
    uint32_t dimms;
    uint32_t interleave;
    const char *configs; /* letters of the configurations to run */
    unsigned rounds;     /* the configurations run this many times, in
                            turn, so that machine noise spreads over all */
    char pool_path[256];
};

struct bt_worker {
    pthread_t tid;
    struct tc_cache *c;
    const struct bt_opts *o;
    unsigned id;
    uint64_t seed;
    uint64_t sets, gets, errors;
    uint32_t *lat; /* ns of each set, up to BT_MAX_SAMPLES */
    uint32_t nlat;
};

struct bt_config {
    char name;
    bool meta_in_pmem;
    bool init_in_lock;
    const char *what;
};

static const struct bt_config bt_configs[] = {
    {'a', true, true, "page info in PMEM + init in lock"},
    {'b', false, true, "page info in DRAM + init in lock"},
    {'c', false, false, "default (DRAM page info, init outside locks)"},
};

static uint64_t
bt_rand(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void
bt_key(char *k, uint64_t n)
{
    static const char hex[] = "0123456789abcdef";
    memcpy(k, "key:", 4);
    for (int i = 15; i >= 4; i--, n >>= 4)
        k[i] = hex[n & 15];
}

static void *
bt_load(void *arg)
{
    struct bt_worker *w = arg;
    const struct bt_opts *o = w->o;
    char key[BT_KEY_LEN], *val = malloc(o->vsize);
    if (!val)
        return NULL;
    memset(val, 'v', o->vsize);
    for (uint64_t n = w->id; n < o->keys; n += o->threads) {
        bt_key(key, n);
        if (tc_set(w->c, key, BT_KEY_LEN, val, o->vsize, 0, 0) != TC_OK)
            w->errors++;
    }
    free(val);
    return NULL;
}

static void *
bt_run(void *arg)
{
    struct bt_worker *w = arg;
    const struct bt_opts *o = w->o;
    char key[BT_KEY_LEN], *val = malloc(o->vsize), *buf = malloc(o->vsize);
    if (!val || !buf)
        goto out;
    memset(val, 'w', o->vsize);
    uint64_t deadline = clock_nsec() + (uint64_t)(o->seconds * 1e9);
    for (uint64_t i = 0; i < o->max_ops; i++) {
        uint64_t r = bt_rand(&w->seed);
        bt_key(key, (r >> 8) % o->keys);
        if ((r & 0xff) % 100 < o->set_pct) {
            uint64_t a = clock_nsec();
            int rc = tc_set(w->c, key, BT_KEY_LEN, val, o->vsize, 0, 0);
            uint64_t b = clock_nsec();
            if (rc != TC_OK)
                w->errors++;
            if (w->nlat < BT_MAX_SAMPLES)
                w->lat[w->nlat++] =
                    (uint32_t)(b - a > UINT32_MAX ? UINT32_MAX : b - a);
            w->sets++;
        } else {
            int rc = tc_get_copy(w->c, key, BT_KEY_LEN, buf, o->vsize, NULL);
            if (rc < 0)
                w->errors++;
            w->gets++;
        }
        if (i % BT_CHECK_EVERY == 0 && clock_nsec() >= deadline)
            break;
    }
out:
    free(val);
    free(buf);
    return NULL;
}

static int
bt_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int
bt_start(struct bt_worker *w, unsigned n, void *(*fn)(void *))
{
    for (unsigned i = 0; i < n; i++) {
        int rc = pthread_create(&w[i].tid, NULL, fn, &w[i]);
        if (rc) {
            fprintf(stderr, "bench_tair: pthread_create: %s\n", strerror(rc));
            while (i-- > 0)
                pthread_join(w[i].tid, NULL);
            return -rc;
        }
    }
    for (unsigned i = 0; i < n; i++)
        pthread_join(w[i].tid, NULL);
    return 0;
}

/* CPU seconds of the whole process so far (user + system). */
static double
bt_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int
bt_one(const struct bt_opts *o, const struct bt_config *cf, unsigned round)
{
    struct tc_config cfg;
    struct tc_cache *c;
    struct bt_worker w[BT_MAX_THREADS];
    int rc;

    tc_config_init(&cfg);
    cfg.pool_path = o->pool_path;
    cfg.pool_size = o->pool_size;
    cfg.hotspot_dimms = o->dimms;
    cfg.hotspot_interleave = o->interleave;
    cfg.pm_write_ns = o->write_ns;
    cfg.pm_read_ns = o->read_ns;
    cfg.ablate_meta_in_pmem = cf->meta_in_pmem;
    cfg.ablate_init_in_lock = cf->init_in_lock;
    unlink(o->pool_path);
    rc = tc_open(&cfg, &c);
    if (rc) {
        fprintf(stderr, "bench_tair: tc_open(%s): %s\n", o->pool_path,
                tc_errmsg());
        return rc;
    }
    memset(w, 0, sizeof(w));
    for (unsigned i = 0; i < o->threads; i++) {
        w[i].c = c;
        w[i].o = o;
        w[i].id = i;
        w[i].seed = 0x9E3779B97F4A7C15ull * (i + 1);
    }
    uint64_t t0 = clock_nsec();
    rc = bt_start(w, o->threads, bt_load);
    double load_s = (double)(clock_nsec() - t0) / 1e9;
    if (rc)
        goto out;
    tc_hotspot_reset(c);
    uint64_t load_errors = 0;
    for (unsigned i = 0; i < o->threads; i++) {
        load_errors += w[i].errors;
        w[i].errors = 0;
        w[i].lat = malloc(BT_MAX_SAMPLES * sizeof(uint32_t));
        if (!w[i].lat) {
            rc = -ENOMEM;
            goto out_free;
        }
    }

    t0 = clock_nsec();
    double cpu0 = bt_cpu();
    rc = bt_start(w, o->threads, bt_run);
    double secs = (double)(clock_nsec() - t0) / 1e9;
    double cores = (bt_cpu() - cpu0) / secs;
    if (rc)
        goto out_free;

    uint64_t sets = 0, gets = 0, errors = 0, nlat = 0;
    for (unsigned i = 0; i < o->threads; i++) {
        sets += w[i].sets;
        gets += w[i].gets;
        errors += w[i].errors;
        nlat += w[i].nlat;
    }
    uint32_t *all = malloc((nlat ? nlat : 1) * sizeof(uint32_t));
    if (!all) {
        rc = -ENOMEM;
        goto out_free;
    }
    uint64_t at = 0;
    for (unsigned i = 0; i < o->threads; i++) {
        memcpy(all + at, w[i].lat, w[i].nlat * sizeof(uint32_t));
        at += w[i].nlat;
    }
    qsort(all, nlat, sizeof(uint32_t), bt_cmp_u32);
    double p50 = nlat ? all[nlat / 2] / 1e3 : 0;
    double p99 = nlat ? all[nlat * 99 / 100] / 1e3 : 0;
    free(all);

    struct tc_hotspot h;
    tc_hotspot_get(c, &h);
    printf("(%c) %s, round %u\n", cf->name, cf->what, round);
    printf("    load %.1f s (%" PRIu64 " errors); run %.2f s: %.0f ops/s, "
           "%.0f sets/s, %" PRIu64 " errors; %.2f cores busy\n",
           load_s, load_errors, secs, (sets + gets) / secs, sets / secs, errors,
           cores);
    printf("    tc_set latency p50 %.2f us, p99 %.2f us\n", p50, p99);
    printf("    PMEM bytes per DIMM:");
    for (unsigned d = 0; d < h.dimms; d++)
        printf(" %" PRIu64, h.dimm_bytes[d]);
    printf("; skew (max/mean) %.2f; bytes per set %.0f\n", h.skew,
           sets ? (double)h.sampled_bytes / sets : 0.0);
    printf("RESULT bench_tair config=%c round=%u ops_s=%.0f sets_s=%.0f "
           "p50_us=%.2f p99_us=%.2f skew=%.3f cores=%.2f",
           cf->name, round, (sets + gets) / secs, sets / secs, p50, p99, h.skew,
           cores);
    for (unsigned d = 0; d < h.dimms; d++)
        printf(" dimm%u=%" PRIu64, d, h.dimm_bytes[d]);
    printf("\n");
    fflush(stdout);

out_free:
    for (unsigned i = 0; i < o->threads; i++)
        free(w[i].lat);
out:
    tc_close(c);
    unlink(o->pool_path);
    return rc;
}

static void
bt_usage(FILE *f)
{
    fprintf(f,
            "usage: bench_tair [options]\n"
            "  --configs LETTERS   which of a, b, c to run [abc]\n"
            "  --rounds N          run the configurations N times in turn "
            "[1]\n"
            "  --threads N         worker threads [2]\n"
            "  --keys K            key space [200000]\n"
            "  --value-size V      bytes per value [100]\n"
            "  --set-pct P         percent of operations that are sets [90]\n"
            "  --seconds S         measured seconds per configuration [5]\n"
            "  --max-ops N         bound per thread [1e9]\n"
            "  --pool-size MIB     pool file size [128]\n"
            "  --pool PATH         pool file [/dev/shm/tc_bench_tair.<pid>]\n"
            "  --write-ns NS       emulated extra ns per 64-byte line "
            "written [200]\n"
            "  --read-ns NS        emulated extra ns per line read [100]\n"
            "  --dimms N           emulated DIMMs [4]\n"
            "  --interleave B      bytes per DIMM stripe [4096]\n");
}

int
main(int argc, char **argv)
{
    struct bt_opts o = {
        .threads = 2,
        .keys = 200000,
        .vsize = 100,
        .set_pct = 90,
        .seconds = 5,
        .max_ops = 1000000000ull,
        .pool_size = 128ull << 20,
        .write_ns = 200,
        .read_ns = 100,
        .dimms = 4,
        .interleave = 4096,
        .configs = "abc",
        .rounds = 1,
    };
    static const struct option longopts[] = {
        {"configs", required_argument, NULL, 'C'},
        {"rounds", required_argument, NULL, 'R'},
        {"threads", required_argument, NULL, 't'},
        {"keys", required_argument, NULL, 'k'},
        {"value-size", required_argument, NULL, 'v'},
        {"set-pct", required_argument, NULL, 's'},
        {"seconds", required_argument, NULL, 'd'},
        {"max-ops", required_argument, NULL, 'n'},
        {"pool-size", required_argument, NULL, 'P'},
        {"pool", required_argument, NULL, 'p'},
        {"write-ns", required_argument, NULL, 'w'},
        {"read-ns", required_argument, NULL, 'r'},
        {"dimms", required_argument, NULL, 'D'},
        {"interleave", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    snprintf(o.pool_path, sizeof(o.pool_path), "/dev/shm/tc_bench_tair.%d",
             (int)getpid());
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'C':
            o.configs = optarg;
            break;
        case 'R':
            o.rounds = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 't':
            o.threads = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'k':
            o.keys = strtoull(optarg, NULL, 10);
            break;
        case 'v':
            o.vsize = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 's':
            o.set_pct = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'd':
            o.seconds = strtod(optarg, NULL);
            break;
        case 'n':
            o.max_ops = (uint64_t)strtod(optarg, NULL);
            break;
        case 'P':
            o.pool_size = strtoull(optarg, NULL, 10) << 20;
            break;
        case 'p':
            snprintf(o.pool_path, sizeof(o.pool_path), "%s", optarg);
            break;
        case 'w':
            o.write_ns = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'r':
            o.read_ns = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'D':
            o.dimms = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'i':
            o.interleave = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'h':
            bt_usage(stdout);
            return 0;
        default:
            bt_usage(stderr);
            return 64;
        }
    }
    if (o.threads < 1 || o.threads > BT_MAX_THREADS || o.keys < 1 ||
        o.vsize < 1 || o.set_pct > 100 || o.seconds <= 0 || o.dimms < 1 ||
        o.rounds < 1 || o.rounds > 100) {
        fprintf(stderr,
                "bench_tair: bad option (threads 1..%d, keys, "
                "value size and dimms >= 1, set-pct 0..100, "
                "rounds 1..100)\n",
                BT_MAX_THREADS);
        return 64;
    }
    printf("bench_tair: %u threads, %" PRIu64 " keys, %u-byte values, "
           "%u%% sets, %.1f s per configuration; emulated PMEM +%u ns per "
           "line written, +%u ns per line read; %u DIMMs at %u-byte "
           "interleave\n",
           o.threads, o.keys, o.vsize, o.set_pct, o.seconds, o.write_ns,
           o.read_ns, o.dimms, o.interleave);
    for (unsigned r = 1; r <= o.rounds; r++) {
        for (const char *p = o.configs; *p; p++) {
            const struct bt_config *cf = NULL;
            for (size_t i = 0; i < sizeof(bt_configs) / sizeof(*bt_configs);
                 i++)
                if (bt_configs[i].name == *p)
                    cf = &bt_configs[i];
            if (!cf) {
                fprintf(stderr, "bench_tair: no configuration '%c'\n", *p);
                return 64;
            }
            if (bt_one(&o, cf, r) != 0)
                return 1;
        }
    }
    return 0;
}

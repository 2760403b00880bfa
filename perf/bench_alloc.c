/*
 * bench_alloc: fixed-size alloc/free throughput of three allocators.
 *
 *   tiercache  alloc/pool + alloc/slab + alloc/quota over a mapped file
 *   memkind    memkind_create_pmem() kind over a file in the same directory
 *   malloc     glibc malloc/free
 *
 * Workload, per thread: keep a window of N live objects of one size; each
 * operation frees a random one and allocates its replacement, then writes
 * the first 8 bytes of the new object (as an item header write would touch
 * it). The window is filled and warmed up (N replacements) before the timed
 * part. Every loop is bounded by an operation count and by seconds.
 *
 * Prints figures and ratios only; it asserts nothing about speed (the
 * machine is shared and noisy).
 *
 * Concurrency: the allocator under test is shared by all worker threads
 * (one pool+slab, one memkind kind, the process heap); each tiercache
 * worker owns its quota. Workers and main meet on a barrier around the
 * timed part; results are written by their own worker and read by main
 * after the final barrier.
 */

#include "alloc/pool.h"
#include "alloc/quota.h"
#include "alloc/slab.h"
#include "src/base/clock.h"
#include "src/base/compiler.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <memkind.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BA_MAX_THREADS 64
#define BA_MAX_SIZES 16
#define BA_CHECK_EVERY 4096 /* ops between two looks at the clock */

enum ba_kind {
    BA_TIERCACHE = 0,
    BA_MEMKIND = 1,
    BA_MALLOC = 2,
    BA_NKINDS = 3,
};

static const char *const ba_names[BA_NKINDS] = {"tiercache", "memkind",
                                                "malloc"};

struct ba_opts {
    uint32_t sizes[BA_MAX_SIZES];
    unsigned nsizes;
    unsigned threads[BA_MAX_THREADS];
    unsigned nthreads;
    bool use[BA_NKINDS];
    uint64_t window;  /* live objects per thread */
    double seconds;   /* timed part per run */
    uint64_t max_ops; /* timed part per thread, at most */
    const char *dir;  /* where the pool file and memkind's file live */
    uint64_t seed;
    unsigned quota_batch;
    unsigned repeat; /* runs per (allocator, size, threads); best kept */
};

/* One run: one allocator, one size, some threads. */
struct ba_run {
    enum ba_kind kind;
    uint32_t size;
    unsigned nthreads;
    const struct ba_opts *o;
    pthread_barrier_t barrier;
    /* tiercache */
    struct pool *pool;
    struct slab *slab;
    int cls;
    char *base;
    /* memkind */
    memkind_t mk;
    int error; /* first error of any worker (negative errno), 0 if none */
    pthread_mutex_t error_lock;
};

struct ba_worker {
    struct ba_run *run;
    unsigned id;
    pthread_t tid;
    uint64_t *win; /* offsets (tiercache) or pointers */
    struct quota *q;
    uint64_t ops;
    uint64_t nsec;
    uint64_t sink; /* keeps reads from being optimised away */
};

struct ba_result {
    double ops_per_sec[BA_NKINDS][BA_MAX_SIZES][BA_MAX_THREADS];
    bool have[BA_NKINDS][BA_MAX_SIZES][BA_MAX_THREADS];
};

static inline uint64_t
ba_rand(uint64_t *s)
{
    /* xorshift64*: cheap, good enough to pick window slots */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void
ba_fail(struct ba_run *r, int err)
{
    pthread_mutex_lock(&r->error_lock);
    if (r->error == 0)
        r->error = err;
    pthread_mutex_unlock(&r->error_lock);
}

/*
 * Allocate one object and write its first 8 bytes. Returns 0 or -ENOMEM /
 * -ENOSPC. kind is a constant at every call site so the switch folds away.
 */
static inline __attribute__((always_inline)) int
ba_alloc(struct ba_worker *w, enum ba_kind kind, uint64_t *h, uint64_t stamp)
{
    struct ba_run *r = w->run;
    void *p;

    switch (kind) {
    case BA_TIERCACHE: {
        uint64_t off;
        int rc = quota_alloc(w->q, (unsigned)r->cls, &off);
        if (rc < 0)
            return rc;
        /* the engine writes items into pool memory by memcpy (through the
         * PMEM helpers); do the same for the 8-byte "header" */
        memcpy(r->base + off, &stamp, sizeof(stamp));
        *h = off;
        return 0;
    }
    case BA_MEMKIND:
        p = memkind_malloc(r->mk, r->size);
        break;
    default:
        p = malloc(r->size);
        break;
    }
    if (p == NULL)
        return -ENOMEM;
    memcpy(p, &stamp, sizeof(stamp));
    *h = (uint64_t)(uintptr_t)p;
    return 0;
}

static inline __attribute__((always_inline)) void
ba_free(struct ba_worker *w, enum ba_kind kind, uint64_t h)
{
    struct ba_run *r = w->run;

    switch (kind) {
    case BA_TIERCACHE:
        quota_free(w->q, (unsigned)r->cls, h);
        break;
    case BA_MEMKIND:
        memkind_free(r->mk, (void *)(uintptr_t)h);
        break;
    default:
        free((void *)(uintptr_t)h);
        break;
    }
}

/* Replace random window slots: at most max_ops, stop after deadline (0 =
 * no deadline). Returns ops done, or a negative errno. */
static inline __attribute__((always_inline)) int64_t
ba_churn(struct ba_worker *w, enum ba_kind kind, uint64_t *rng,
         uint64_t max_ops, uint64_t deadline)
{
    uint64_t n = w->run->o->window;
    uint64_t done = 0;

    while (done < max_ops) {
        uint64_t chunk = MIN(max_ops - done, (uint64_t)BA_CHECK_EVERY);
        for (uint64_t i = 0; i < chunk; i++) {
            uint64_t slot = ba_rand(rng) % n;
            ba_free(w, kind, w->win[slot]);
            int rc = ba_alloc(w, kind, &w->win[slot], done + i);
            if (rc < 0)
                return rc;
        }
        done += chunk;
        if (deadline != 0 && clock_nsec() >= deadline)
            break;
    }
    return (int64_t)done;
}

static void
ba_worker_body(struct ba_worker *w, enum ba_kind kind)
{
    struct ba_run *r = w->run;
    const struct ba_opts *o = r->o;
    uint64_t rng = o->seed ^ (0x9E3779B97F4A7C15ull * (w->id + 1));
    uint64_t filled = 0;
    int64_t got;
    int rc = 0;

    if (rng == 0)
        rng = 1;
    /* fill the window (not timed) */
    for (; filled < o->window; filled++) {
        rc = ba_alloc(w, kind, &w->win[filled], filled);
        if (rc < 0)
            break;
    }
    /* warm-up: one window's worth of replacements (not timed) */
    if (rc == 0) {
        got = ba_churn(w, kind, &rng, o->window, 0);
        if (got < 0)
            rc = (int)got;
    }
    if (rc < 0)
        ba_fail(r, rc);

    pthread_barrier_wait(&r->barrier); /* start */
    if (r->error == 0) {
        uint64_t t0 = clock_nsec();
        uint64_t deadline = t0 + (uint64_t)(o->seconds * 1e9);
        got = ba_churn(w, kind, &rng, o->max_ops, deadline);
        w->nsec = clock_nsec() - t0;
        if (got < 0)
            ba_fail(r, (int)got);
        else
            w->ops = (uint64_t)got;
    }
    pthread_barrier_wait(&r->barrier); /* stop */

    for (uint64_t i = 0; i < filled; i++) {
        if (kind == BA_TIERCACHE)
            w->sink += *(volatile uint64_t *)(void *)(r->base + w->win[i]);
        else
            w->sink += *(volatile uint64_t *)(uintptr_t)w->win[i];
        ba_free(w, kind, w->win[i]);
    }
}

static void *
ba_worker_main(void *arg)
{
    struct ba_worker *w = arg;
    struct ba_run *r = w->run;

    if (r->kind == BA_TIERCACHE) {
        int rc = quota_create(r->slab, r->o->quota_batch, &w->q);
        if (rc < 0) {
            ba_fail(r, rc);
            w->q = NULL;
        }
    }
    if (r->kind == BA_TIERCACHE && w->q == NULL) {
        /* still meet the barriers so main is not left waiting */
        pthread_barrier_wait(&r->barrier);
        pthread_barrier_wait(&r->barrier);
        return NULL;
    }
    switch (r->kind) {
    case BA_TIERCACHE:
        ba_worker_body(w, BA_TIERCACHE);
        quota_destroy(w->q);
        break;
    case BA_MEMKIND:
        ba_worker_body(w, BA_MEMKIND);
        break;
    default:
        ba_worker_body(w, BA_MALLOC);
        break;
    }
    return NULL;
}

/*
 * The tiercache pool lives in a file we map ourselves, MAP_SHARED, at a
 * 1 MiB aligned address. tier/region.c (libpmem's pmem_map_file) is the
 * engine's way to get this mapping, but alloc/ must be measurable on its
 * own: alloc/ only ever sees a base and a length, and on a machine without
 * PMEM pmem_map_file is an mmap(MAP_SHARED) of a tmpfs file just like this
 * one. The file sits in the same directory as memkind's, so both
 * allocators hand out the same kind of memory (tmpfs pages, faulted in on
 * first touch).
 */
static int
ba_map_pool(const char *dir, uint64_t len, char **base_out, char *path,
            size_t pathlen)
{
    int fd;
    char *resv, *aligned, *m;

    snprintf(path, pathlen, "%s/tc-bench-alloc-%d.pool", dir, (int)getpid());
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)len) < 0)
        goto err_close;
    /* reserve len + one page of address space, then map the file at the
     * first 1 MiB boundary inside it */
    resv = mmap(NULL, len + POOL_PAGE_SIZE, PROT_NONE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (resv == MAP_FAILED)
        goto err_close;
    aligned = (char *)(((uintptr_t)resv + POOL_PAGE_SIZE - 1) &
                       ~(uintptr_t)(POOL_PAGE_SIZE - 1));
    m = mmap(aligned, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
             0);
    if (m == MAP_FAILED) {
        munmap(resv, len + POOL_PAGE_SIZE);
        goto err_close;
    }
    /* give back the unused head and tail of the reservation */
    if (aligned > resv)
        munmap(resv, (size_t)(aligned - resv));
    if (aligned + len < resv + len + POOL_PAGE_SIZE)
        munmap(aligned + len,
               (size_t)(resv + len + POOL_PAGE_SIZE - (aligned + len)));
    close(fd);
    /* the mapping keeps the memory; unlinking now means no file is left
     * behind whatever way we exit */
    unlink(path);
    *base_out = m;
    return 0;
err_close : {
    int e = -errno;
    close(fd);
    unlink(path);
    return e;
}
}

static int
ba_setup(struct ba_run *r, char *path, size_t pathlen)
{
    const struct ba_opts *o = r->o;
    uint64_t live = o->window * r->nthreads;

    path[0] = '\0';
    if (r->kind == BA_TIERCACHE) {
        struct slab_config sc = {
            .min_chunk = 64,
            .growth_factor = 1.25,
            .chunk_max = 0,
            /* no format hook: the engine formats new pages through the
             * PMEM helpers; the allocator alone does not write chunks */
            .format = NULL,
            .format_arg = NULL,
        };
        uint64_t chunk, len;
        int rc;

        /* The class for size has a chunk below size * 1.25 + 8 (growth
         * factor 1.25, 8-byte alignment). Room for every live chunk at that
         * bound, each thread's stash (two batches), and 16 pages for
         * partial pages; checked against the real chunk size below. */
        chunk = r->size;
        len = live * (chunk + chunk / 4 + 8) +
              (uint64_t)r->nthreads * (o->quota_batch ? o->quota_batch : 32) *
                  2 * chunk;
        len += 16 * (uint64_t)POOL_PAGE_SIZE;
        len = (len + POOL_PAGE_SIZE - 1) & ~(uint64_t)(POOL_PAGE_SIZE - 1);
        rc = ba_map_pool(o->dir, len, &r->base, path, pathlen);
        if (rc < 0) {
            fprintf(stderr, "bench_alloc: map %s (%" PRIu64 " bytes): %s\n",
                    path, len, strerror(-rc));
            return rc;
        }
        rc = pool_create(r->base, len, 0, &r->pool);
        if (rc < 0) {
            fprintf(stderr, "bench_alloc: pool_create: %s\n", strerror(-rc));
            return rc;
        }
        rc = slab_create(&sc, r->pool, &r->slab);
        if (rc < 0) {
            fprintf(stderr, "bench_alloc: slab_create: %s\n", strerror(-rc));
            return rc;
        }
        r->cls = slab_class_for(r->slab, r->size);
        if (r->cls < 0) {
            fprintf(stderr, "bench_alloc: no slab class holds %u bytes\n",
                    r->size);
            return -EINVAL;
        }
        chunk = slab_chunk_size(r->slab, (unsigned)r->cls);
        if (live * chunk > len) {
            fprintf(stderr,
                    "bench_alloc: pool of %" PRIu64
                    " MiB too small for %" PRIu64 " chunks of %" PRIu64
                    " bytes\n",
                    len >> 20, live, chunk);
            return -ENOSPC;
        }
        return 0;
    }
    if (r->kind == BA_MEMKIND) {
        /* jemalloc under memkind keeps its own slack (size classes, dirty
         * extents): allow twice the live bytes plus 128 MiB */
        size_t max = (size_t)(live * r->size * 2 + 128 * MIB);
        int rc = memkind_create_pmem(o->dir, max, &r->mk);
        if (rc != 0) {
            char msg[MEMKIND_ERROR_MESSAGE_SIZE];
            memkind_error_message(rc, msg, sizeof(msg));
            fprintf(stderr, "bench_alloc: memkind_create_pmem(%s): %s\n",
                    o->dir, msg);
            return -EIO;
        }
    }
    return 0;
}

static void
ba_teardown(struct ba_run *r)
{
    if (r->slab != NULL)
        slab_destroy(r->slab);
    if (r->pool != NULL) {
        uint64_t len = (uint64_t)pool_npages(r->pool) * POOL_PAGE_SIZE;
        pool_destroy(r->pool);
        munmap(r->base, len);
    }
    if (r->mk != NULL)
        memkind_destroy_kind(r->mk);
}

/* One (allocator, size, threads): 0 and *ops_per_sec, or a negative errno. */
static int
ba_run_one(const struct ba_opts *o, enum ba_kind kind, uint32_t size,
           unsigned nthreads, double *ops_per_sec)
{
    struct ba_run r;
    struct ba_worker *w;
    char path[512];
    uint64_t ops = 0, nsec_max = 0, sink = 0;
    int rc;

    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.size = size;
    r.nthreads = nthreads;
    r.o = o;
    pthread_mutex_init(&r.error_lock, NULL);
    w = calloc(nthreads, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;

    rc = ba_setup(&r, path, sizeof(path));
    if (rc < 0)
        goto out;

    pthread_barrier_init(&r.barrier, NULL, nthreads);
    for (unsigned t = 0; t < nthreads; t++) {
        w[t].run = &r;
        w[t].id = t;
        w[t].win = malloc(o->window * sizeof(uint64_t));
        if (w[t].win == NULL) {
            rc = -ENOMEM;
            break;
        }
    }
    if (rc == 0) {
        for (unsigned t = 0; t < nthreads; t++)
            pthread_create(&w[t].tid, NULL, ba_worker_main, &w[t]);
        for (unsigned t = 0; t < nthreads; t++)
            pthread_join(w[t].tid, NULL);
        rc = r.error;
    }
    for (unsigned t = 0; t < nthreads; t++) {
        ops += w[t].ops;
        nsec_max = w[t].nsec > nsec_max ? w[t].nsec : nsec_max;
        sink += w[t].sink;
        free(w[t].win);
    }
    pthread_barrier_destroy(&r.barrier);
    if (rc == 0 && nsec_max > 0)
        *ops_per_sec = (double)ops * 1e9 / (double)nsec_max;
    else if (rc == 0)
        rc = -EINVAL;
out:
    ba_teardown(&r);
    pthread_mutex_destroy(&r.error_lock);
    free(w);
    if (sink == 42) /* never true in practice; keeps sink alive */
        fputc(' ', stderr);
    return rc;
}

static int
ba_parse_list(const char *s, unsigned *out, unsigned max, unsigned *n)
{
    char *copy = strdup(s), *save = NULL, *tok;

    if (copy == NULL)
        return -ENOMEM;
    *n = 0;
    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned long v = strtoul(tok, &end, 10);
        if (*end != '\0' || v == 0 || *n >= max || v > UINT32_MAX) {
            free(copy);
            return -EINVAL;
        }
        out[(*n)++] = (unsigned)v;
    }
    free(copy);
    return *n > 0 ? 0 : -EINVAL;
}

static void
ba_usage(FILE *f)
{
    fprintf(f, "usage: bench_alloc [options]\n"
               "  --sizes LIST      object sizes (default 64,128,1024,4096)\n"
               "  --threads LIST    thread counts (default 1,2)\n"
               "  --alloc LIST      tiercache,memkind,malloc (default all)\n"
               "  --window N        live objects per thread (default 100000)\n"
               "  --seconds S       timed part per run (default 1)\n"
               "  --repeat N        runs per case, best kept (default 3)\n"
               "  --max-ops N       timed ops per thread, at most "
               "(default 200000000)\n"
               "  --dir DIR         pool / memkind directory (default "
               "/dev/shm)\n"
               "  --quota-batch N   tiercache quota batch (default 32)\n"
               "  --seed N          random seed (default: time based)\n");
}

static int
ba_parse(int argc, char **argv, struct ba_opts *o)
{
    static const struct option longopts[] = {
        {"sizes", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 't'},
        {"alloc", required_argument, NULL, 'a'},
        {"window", required_argument, NULL, 'w'},
        {"seconds", required_argument, NULL, 'S'},
        {"max-ops", required_argument, NULL, 'm'},
        {"dir", required_argument, NULL, 'd'},
        {"quota-batch", required_argument, NULL, 'b'},
        {"seed", required_argument, NULL, 'r'},
        {"repeat", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    memset(o, 0, sizeof(*o));
    o->sizes[0] = 64;
    o->sizes[1] = 128;
    o->sizes[2] = 1024;
    o->sizes[3] = 4096;
    o->nsizes = 4;
    o->threads[0] = 1;
    o->threads[1] = 2;
    o->nthreads = 2;
    for (int k = 0; k < BA_NKINDS; k++)
        o->use[k] = true;
    o->window = 100000;
    o->seconds = 1.0;
    o->max_ops = 200000000;
    o->dir = "/dev/shm";
    o->quota_batch = 32;
    o->repeat = 3;
    o->seed = clock_nsec() | 1;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (ba_parse_list(optarg, o->sizes, BA_MAX_SIZES, &o->nsizes) < 0)
                goto bad;
            for (unsigned i = 0; i < o->nsizes; i++)
                if (o->sizes[i] < 8)
                    goto bad; /* we write 8 bytes into each object */
            break;
        case 't':
            if (ba_parse_list(optarg, o->threads, BA_MAX_THREADS,
                              &o->nthreads) < 0)
                goto bad;
            break;
        case 'a': {
            char *copy = strdup(optarg), *save = NULL, *tok;
            for (int k = 0; k < BA_NKINDS; k++)
                o->use[k] = false;
            for (tok = strtok_r(copy, ",", &save); tok != NULL;
                 tok = strtok_r(NULL, ",", &save)) {
                int k;
                for (k = 0; k < BA_NKINDS; k++)
                    if (strcmp(tok, ba_names[k]) == 0)
                        break;
                if (k == BA_NKINDS) {
                    free(copy);
                    goto bad;
                }
                o->use[k] = true;
            }
            free(copy);
            break;
        }
        case 'w':
            o->window = strtoull(optarg, NULL, 10);
            if (o->window == 0)
                goto bad;
            break;
        case 'S':
            o->seconds = strtod(optarg, NULL);
            if (!(o->seconds > 0 && o->seconds <= 3600))
                goto bad;
            break;
        case 'm':
            o->max_ops = strtoull(optarg, NULL, 10);
            if (o->max_ops == 0)
                goto bad;
            break;
        case 'd':
            o->dir = optarg;
            break;
        case 'b':
            o->quota_batch = (unsigned)strtoul(optarg, NULL, 10);
            if (o->quota_batch == 0 || o->quota_batch > 256)
                goto bad;
            break;
        case 'r':
            o->seed = strtoull(optarg, NULL, 0) | 1;
            break;
        case 'R':
            o->repeat = (unsigned)strtoul(optarg, NULL, 10);
            if (o->repeat == 0 || o->repeat > 100)
                goto bad;
            break;
        case 'h':
            ba_usage(stdout);
            exit(0);
        default:
            goto bad;
        }
    }
    if (optind != argc)
        goto bad;
    return 0;
bad:
    ba_usage(stderr);
    return -EINVAL;
}

static void
ba_print_ratios(const struct ba_opts *o, const struct ba_result *res)
{
    printf("\n%-6s %-7s %14s %14s %14s %10s %10s\n", "size", "threads",
           "tiercache/s", "memkind/s", "malloc/s", "tc/memkind", "tc/malloc");
    for (unsigned s = 0; s < o->nsizes; s++) {
        for (unsigned t = 0; t < o->nthreads; t++) {
            const double *v[BA_NKINDS];
            char cell[BA_NKINDS][32], rmk[32], rml[32];
            for (int k = 0; k < BA_NKINDS; k++) {
                v[k] = res->have[k][s][t] ? &res->ops_per_sec[k][s][t] : NULL;
                if (v[k] != NULL)
                    snprintf(cell[k], sizeof(cell[k]), "%.0f", *v[k]);
                else
                    snprintf(cell[k], sizeof(cell[k]), "-");
            }
            snprintf(rmk, sizeof(rmk), "-");
            snprintf(rml, sizeof(rml), "-");
            if (v[BA_TIERCACHE] && v[BA_MEMKIND] && *v[BA_MEMKIND] > 0)
                snprintf(rmk, sizeof(rmk), "%.2f",
                         *v[BA_TIERCACHE] / *v[BA_MEMKIND]);
            if (v[BA_TIERCACHE] && v[BA_MALLOC] && *v[BA_MALLOC] > 0)
                snprintf(rml, sizeof(rml), "%.2f",
                         *v[BA_TIERCACHE] / *v[BA_MALLOC]);
            printf("%-6u %-7u %14s %14s %14s %10s %10s\n", o->sizes[s],
                   o->threads[t], cell[BA_TIERCACHE], cell[BA_MEMKIND],
                   cell[BA_MALLOC], rmk, rml);
            printf("RESULT bench=alloc_ratio size=%u threads=%u "
                   "tc_vs_memkind=%s tc_vs_malloc=%s\n",
                   o->sizes[s], o->threads[t], rmk, rml);
        }
    }
}

int
main(int argc, char **argv)
{
    struct ba_opts o;
    static struct ba_result res;
    int failures = 0;

    if (ba_parse(argc, argv, &o) < 0)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("bench_alloc: window=%" PRIu64 " objects/thread, %.1f s per run "
           "(at most %" PRIu64 " ops/thread), dir=%s, quota_batch=%u, "
           "seed=0x%" PRIx64 "\n",
           o.window, o.seconds, o.max_ops, o.dir, o.quota_batch, o.seed);
    printf("op = free a random live object + allocate one of the same size "
           "+ write its first 8 bytes\n");
    printf("ops/s is the best of %u runs (worst also shown); ns/op/thr "
           "from the best\n\n",
           o.repeat);
    printf("%-10s %-6s %-7s %14s %14s %10s\n", "allocator", "size", "threads",
           "ops/s", "worst ops/s", "ns/op/thr");

    for (unsigned s = 0; s < o.nsizes; s++) {
        for (unsigned t = 0; t < o.nthreads; t++) {
            double best[BA_NKINDS] = {0}, worst[BA_NKINDS] = {0};
            int err[BA_NKINDS] = {0};

            /* the allocators take turns, repeat after repeat, so that a
             * burst of load from elsewhere hits all of them alike */
            for (unsigned rep = 0; rep < o.repeat; rep++) {
                for (int k = 0; k < BA_NKINDS; k++) {
                    double v = 0;
                    int rc;
                    if (!o.use[k] || err[k] != 0)
                        continue;
                    rc = ba_run_one(&o, (enum ba_kind)k, o.sizes[s],
                                    o.threads[t], &v);
                    if (rc < 0) {
                        err[k] = rc;
                        continue;
                    }
                    if (v > best[k])
                        best[k] = v;
                    if (rep == 0 || v < worst[k])
                        worst[k] = v;
                }
            }
            for (int k = 0; k < BA_NKINDS; k++) {
                if (!o.use[k])
                    continue;
                if (err[k] != 0) {
                    printf("%-10s %-6u %-7u %14s  (%s)\n", ba_names[k],
                           o.sizes[s], o.threads[t], "failed",
                           strerror(-err[k]));
                    failures++;
                    continue;
                }
                res.have[k][s][t] = true;
                res.ops_per_sec[k][s][t] = best[k];
                printf("%-10s %-6u %-7u %14.0f %14.0f %10.1f\n", ba_names[k],
                       o.sizes[s], o.threads[t], best[k], worst[k],
                       1e9 * o.threads[t] / best[k]);
                printf("RESULT bench=alloc alloc=%s size=%u threads=%u "
                       "ops=%.0f worst=%.0f repeat=%u\n",
                       ba_names[k], o.sizes[s], o.threads[t], best[k], worst[k],
                       o.repeat);
            }
        }
    }
    ba_print_ratios(&o, &res);
    return failures ? 1 : 0;
}

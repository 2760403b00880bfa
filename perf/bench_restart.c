/*
 * Restart time: a child process opens a pool, stores N items of V bytes
 * ("key:%u") and either _exits without closing (a crash) or closes
 * cleanly; the parent opens the same pool file and prints what
 * tc_open_info() says: kind, items restored, dropped, the restore's seconds
 * and items per second. --clean closes with the saved state (FILE.meta,
 * tc_config.restart_file: the CAS counter); --clean --scan without it.
 * Every start scans the pool.
 *
 * Usage: bench_restart [--items N] [--value-size V] [--pool-mib M]
 *                      [--clean [--scan]] [--path FILE] [--threads T]
 *                      [--packed B]
 * --threads: the scan's threads (tc_config.restart_threads; 0, the
 * default: one per CPU). --packed: tc_config.packed_item_max (0, the
 * default: off): items of at most B bytes go to the packed store's
 * segments, which the restart walks instead of slab pages.
 * Prints figures; asserts no speed. The pool file is removed at the end.
 */
#include "src/tiercache.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct bench_args {
    uint64_t items;
    uint32_t vsize;
    uint64_t pool_mib;
    int clean;
    int scan;
    const char *path;
    unsigned threads;
    uint32_t packed;
};

static int
parse(int argc, char **argv, struct bench_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--clean")) {
            a->clean = 1;
        } else if (!strcmp(argv[i], "--scan")) {
            a->scan = 1;
        } else if (v && !strcmp(argv[i], "--items")) {
            a->items = strtoull(v, NULL, 10);
            i++;
        } else if (v && !strcmp(argv[i], "--value-size")) {
            a->vsize = (uint32_t)strtoul(v, NULL, 10);
            i++;
        } else if (v && !strcmp(argv[i], "--pool-mib")) {
            a->pool_mib = strtoull(v, NULL, 10);
            i++;
        } else if (v && !strcmp(argv[i], "--path")) {
            a->path = v;
            i++;
        } else if (v && !strcmp(argv[i], "--packed")) {
            a->packed = (uint32_t)strtoul(v, NULL, 10);
            i++;
        } else if (v && !strcmp(argv[i], "--threads")) {
            a->threads = (unsigned)strtoul(v, NULL, 10);
            i++;
        } else {
            fprintf(stderr, "bench_restart: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    return 0;
}

/* The child: fill, then crash or close. */
static void
fill(const struct tc_config *cfg, const struct bench_args *a)
{
    struct tc_cache *c;
    char key[32];
    char *val = malloc(a->vsize ? a->vsize : 1);

    if (!val || tc_open(cfg, &c) != 0)
        _exit(2);
    memset(val, 'v', a->vsize);
    for (uint64_t i = 0; i < a->items; i++) {
        int n = snprintf(key, sizeof(key), "key:%" PRIu64, i);
        if (tc_set(c, key, (size_t)n, val, a->vsize, 0, 0) != 0)
            _exit(3);
    }
    if (a->clean)
        tc_close(c);
    _exit(0); /* without --clean: a crash, the pool as it is */
}

int
main(int argc, char **argv)
{
    struct bench_args a = {
        .items = 1000000, .vsize = 100, .path = "/dev/shm/bench_restart.pool"};
    char meta[4096];
    if (parse(argc, argv, &a) != 0)
        return 64;
    if (!a.pool_mib) /* room for the items and their headers, doubled */
        a.pool_mib = 16 + 2 * a.items * (a.vsize + 64) / (1u << 20);

    struct tc_config cfg;
    tc_config_init(&cfg);
    cfg.pool_path = a.path;
    cfg.pool_size = a.pool_mib << 20;
    cfg.background = false;
    cfg.expected_items = a.items;
    snprintf(meta, sizeof(meta), "%s.meta", a.path);
    if (a.clean && !a.scan)
        cfg.restart_file = meta;
    cfg.restart_threads = a.threads;
    cfg.packed_item_max = a.packed;
    unlink(a.path);

    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0)
        fill(&cfg, &a);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench_restart: the filling child failed (%d)\n", st);
        unlink(a.path);
        return 1;
    }
    struct tc_cache *c;
    struct timespec cpu0, cpu1, wall0, wall1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
    clock_gettime(CLOCK_MONOTONIC, &wall0);
    int orc = tc_open(&cfg, &c);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
    clock_gettime(CLOCK_MONOTONIC, &wall1);
    if (orc != 0) {
        fprintf(stderr, "bench_restart: %s\n", tc_errmsg());
        unlink(a.path);
        return 1;
    }
    struct tc_open_info oi;
    tc_open_info(c, &oi);
    static const char *const kinds[] = {"cold", "warm", "recovered"};
    struct tc_stats ts;
    tc_stats(c, &ts);
    printf("restart %s: %" PRIu64 " items (%" PRIu64 " bytes) of %" PRIu64
           " restored, %" PRIu64 " dropped, %.3f s, %.2f M items/s, pool "
           "%" PRIu64 " MiB, %u-byte values, %u scan threads, %" PRIu64
           " packed items in %" PRIu64 " segments\n",
           kinds[oi.kind], oi.items, oi.bytes, a.items, oi.dropped, oi.seconds,
           oi.seconds > 0 ? (double)oi.items / oi.seconds / 1e6 : 0, a.pool_mib,
           a.vsize, oi.scan_threads, ts.packed_items, ts.packed_segments);
    /* the whole tc_open; CPU time as well, which a machine shared with
     * other work does not stretch as it stretches wall time */
    double cpu = (double)(cpu1.tv_sec - cpu0.tv_sec) +
                 (double)(cpu1.tv_nsec - cpu0.tv_nsec) / 1e9;
    double wall = (double)(wall1.tv_sec - wall0.tv_sec) +
                  (double)(wall1.tv_nsec - wall0.tv_nsec) / 1e9;
    printf("tc_open: %.3f s wall, %.3f s CPU, %.2f M items/s of CPU (%s)\n",
           wall, cpu, cpu > 0 ? (double)oi.items / cpu / 1e6 : 0, oi.reason);
    tc_close(c);
    unlink(a.path);
    unlink(meta);
    return 0;
}

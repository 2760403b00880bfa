/*
 * The NVMe store's read path against the disk's own limit.
 *
 * Fills about 90% of a store file with records of a 16-byte key and a
 * --vlen byte value (4096 by default: one block in layout 2), then:
 *
 *   depth    for each iodepth (1, 8, 32, 128), --rounds times (3),
 *            alternating, medians kept: random reads of those
 *            records through one nvs_ring kept at that depth (prep, submit,
 *            reap in a loop: every completion is refilled at once), with
 *            the device's bytes per read (from /sys/dev/block/M:m/stat of
 *            the file's device: other I/O on it counts too), and,
 *            with --fio, fio on the same file right before it
 *            (ioengine=io_uring, direct=1, randread, 4k) over the bytes
 *            the records were written to (--fio-whole: all segments, the
 *            never-written rest included, whose reads the file system
 *            answers with zeros without any device I/O);
 *            IOPS for both and the ratio, device reads per read and the
 *            device's average queue depth (iostat's aqu-sz) for both,
 *            and CPU per read for both, user
 *            and system (the reading thread's getrusage(RUSAGE_THREAD);
 *            fio's usr/sys percent over its IOPS), medians of the rounds
 *   batch    with --batch-depth reads kept in flight, new reads submitted
 *            in batches of 1, 4, 8, 16, 32 (a batch goes out once that many
 *            slots are free, reaping in between) and as one full-depth
 *            batch (wait until all completed, resubmit all): IOPS, average
 *            and p99 latency from the moment a slot became free (the
 *            request's wait for its batch included) to its completion,
 *            and the device part (submit to completion)
 *
 * Every value read is verified by the store (CRC32C, key, generation); the
 * bench also counts errors. Figures only, never assertions.
 *
 * Usage: bench_nvs [--path FILE] [--size BYTES] [--seconds S] [--fio]
 *                  [--depths 1,8,32,128] [--rounds 3] [--batch-depth 32]
 *                  [--no-batch] [--vlen 4096]
 *                  [--no-uring] [--store-first] [--fio-whole]
 *   defaults: $NVS_BENCH_PATH or /tmp/tc_bench_nvs.dat, 2 GiB, 3 s
 * The file is left in place (for fio) and removed with --cleanup.
 */
#include "tier/nvs.h"
#include "tier/nvs_int.h"    /* nvs_loc_foff(): the records' extent, for fio */
#include "tier/nvs_layout.h" /* NVS_BLOCK */

#include "src/base/clock.h"
#include "src/base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define KLEN 16
#define MAX_VLEN (1u << 20)
#define MAX_DEPTH 256

struct opts {
    const char *path;
    uint64_t size;
    double seconds;
    bool fio, batch, no_uring, cleanup;
    bool store_first; /* each round: the store, then fio */
    bool fio_whole;   /* fio over all segments, as before */
    unsigned depths[8], ndepths;
    unsigned batch_depth;
    unsigned rounds;
    uint32_t vlen;
};

struct bench {
    struct opts o;
    struct nvs *s;
    struct nvs_loc *loc;
    uint64_t nrec;
    uint64_t span;     /* bytes of the file's segments */
    uint64_t fio_span; /* bytes from the file's start to the last record's
                        * end: what fio reads (the rest was never written) */
    uint64_t rng;
};

struct req {
    struct nvs_read rd;
    char key[24];
    uint64_t t_ready; /* when the slot became free */
};

static uint64_t
rnd(struct bench *b)
{
    /* xorshift64* */
    b->rng ^= b->rng >> 12;
    b->rng ^= b->rng << 25;
    b->rng ^= b->rng >> 27;
    return b->rng * 2685821657736338717ull;
}

/* KLEN characters (records number far below 10^15). */
static void
key_of(char *key, uint64_t i)
{
    snprintf(key, 24, "k%015llu",
             (unsigned long long)(i % 1000000000000000ull));
}

/* The block device's counters (/sys/dev/block/M:m/stat of the device
 * holding the file; other I/O on it counts too): reads completed, bytes
 * read, and the time_in_queue field (ms summed over the requests in
 * flight: its growth over a stretch of time is iostat's aqu-sz, the queue
 * depth the kernel saw at the device). */
struct devstat {
    uint64_t ios, bytes, queue_ms;
};

static bool
dev_stat(const char *path, struct devstat *d)
{
    struct stat st;
    char f[96];
    unsigned long long v[11];

    if (stat(path, &st) < 0)
        return false;
    snprintf(f, sizeof(f), "/sys/dev/block/%u:%u/stat", major(st.st_dev),
             minor(st.st_dev));
    FILE *p = fopen(f, "r");
    if (p == NULL)
        return false;
    bool ok = true;
    for (int i = 0; i < 11 && ok; i++)
        ok = fscanf(p, "%llu", &v[i]) == 1;
    fclose(p);
    d->ios = v[0];
    d->bytes = v[2] * 512;
    d->queue_ms = v[10];
    return ok;
}

/* The device's side of a run of ops reads over secs seconds: device reads
 * per op, bytes per device read, average queue depth (-1: unknown). */
struct devside {
    double rd_per_op, bytes, aqu;
};

static struct devside
dev_side(const struct devstat *a, const struct devstat *z, double ops,
         double secs)
{
    struct devside r = {-1, -1, -1};
    if (z->ios <= a->ios || ops <= 0 || secs <= 0)
        return r;
    r.rd_per_op = (double)(z->ios - a->ios) / ops;
    r.bytes = (double)(z->bytes - a->bytes) / (double)(z->ios - a->ios);
    r.aqu = (double)(z->queue_ms - a->queue_ms) / 1e3 / secs;
    return r;
}

static int
fill(struct bench *b)
{
    static char v[MAX_VLEN];
    const uint32_t vlen = b->o.vlen;
    char key[24];
    struct nvs_config c = {
        .npaths = 1,
        .path = {b->o.path},
        .size = {b->o.size},
        .no_uring = b->o.no_uring,
    };
    int e = nvs_open(&c, &b->s);

    if (e < 0) {
        fprintf(stderr, "bench_nvs: %s\n", err_msg());
        return e;
    }
    uint32_t seg = 64u << 20;
    uint64_t nsegs = b->o.size / seg;
    /* 90% of the segments at a generous footprint per record (value,
     * placement padding, key and descriptor or header): nothing is
     * reclaimed while filling, in either layout */
    b->span = nsegs * seg;
    b->nrec = b->span * 9 / 10 / (vlen + vlen / 8 + 64);
    b->loc = calloc(b->nrec, sizeof(*b->loc));
    if (b->loc == NULL)
        return -ENOMEM;
    uint64_t t0 = clock_nsec();
    for (uint64_t i = 0; i < b->nrec; i++) {
        key_of(key, i);
        memset(v, (int)(i & 0xff), vlen);
        struct iovec iov = {.iov_base = v, .iov_len = vlen};
        while ((e = nvs_append(b->s, key, KLEN, &iov, 1, &b->loc[i])) ==
               -EAGAIN) {
            struct timespec ts = {.tv_nsec = 50000};
            nanosleep(&ts, NULL);
        }
        if (e < 0) {
            fprintf(stderr, "bench_nvs: append %" PRIu64 ": %s\n", i,
                    strerror(-e));
            return e;
        }
    }
    nvs_flush(b->s);
    /* fio reads only blocks the records were written to: the file was
     * fallocated whole, and a read of its never-written rest (unwritten
     * extents) is answered with zeros by the file system without reaching
     * the device, which made fio's reads look cheaper and faster than
     * the store's by that fraction of the file */
    uint64_t last = 0;
    for (uint64_t i = 0; i < b->nrec; i++)
        last = MAX(last, nvs_loc_foff(b->s, &b->loc[i]) + b->loc[i].vlen);
    b->fio_span = ALIGN_UP(last, NVS_BLOCK);
    double secs = (double)(clock_nsec() - t0) / 1e9;
    struct nvs_stats st;
    nvs_get_stats(b->s, &st);
    printf("fill: %" PRIu64 " records of a %u-byte value (%.2f GiB) in "
           "%.1f s, %.0f MB/s, %s\n",
           b->nrec, vlen, (double)b->span / (1 << 30), secs,
           (double)st.bytes_written / secs / 1e6,
           st.uring ? "io_uring" : "pread/pwrite fallback");
    if (st.page_reclaims > 0)
        printf("fill: %" PRIu64 " segments reclaimed: early records are "
               "stale (errors below)\n",
               st.page_reclaims);
    return 0;
}

static void
req_prep(struct bench *b, struct nvs_ring *r, struct req *q, uint64_t now)
{
    uint64_t i = rnd(b) % b->nrec;

    key_of(q->key, i);
    q->rd = (struct nvs_read){
        .loc = b->loc[i], .key = q->key, .klen = KLEN, .udata = q};
    q->t_ready = now;
    if (nvs_read_prep(r, &q->rd) < 0)
        abort(); /* never: one request per slot */
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct result {
    double iops;
    struct devside dev;            /* the device's side of the run */
    double avg_us, p99_us;         /* slot free -> completion */
    double dev_avg_us, dev_p99_us; /* submit -> completion */
    uint64_t errors;
    double usr_us, sys_us; /* the reading thread's CPU per read */
    double ctx;            /* its context switches per read */
};

/* The calling thread's user and system CPU time, ns, and its context
 * switches (voluntary: it slept; involuntary: it was preempted). */
static void
thread_cpu(uint64_t *usr, uint64_t *sys, uint64_t *ctx)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    *ctx = (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
    *usr = (uint64_t)ru.ru_utime.tv_sec * 1000000000ull +
           (uint64_t)ru.ru_utime.tv_usec * 1000ull;
    *sys = (uint64_t)ru.ru_stime.tv_sec * 1000000000ull +
           (uint64_t)ru.ru_stime.tv_usec * 1000ull;
}

#define MAX_SAMPLES (4u << 20)

/* Keep depth reads in flight; new reads go out in batches of batch (batch
 * == depth: wait for all, resubmit all). */
static struct result
run_reads(struct bench *b, unsigned depth, unsigned batch)
{
    static struct req q[MAX_DEPTH];
    static uint64_t lat[MAX_SAMPLES], dev[MAX_SAMPLES];
    struct nvs_read *done[MAX_DEPTH];
    struct nvs_ring *r;
    struct result res = {0};
    uint64_t n = 0, ns = 0;
    struct req *freeq[MAX_DEPTH];
    unsigned nfree = 0, inflight = 0;

    if (nvs_ring_create(b->s, depth, &r) < 0) {
        fprintf(stderr, "bench_nvs: %s\n", err_msg());
        return res;
    }
    struct devstat d0, d1;
    bool have_dev = dev_stat(b->o.path, &d0);
    uint64_t cu0, cs0, cx0, cu1, cs1, cx1;
    thread_cpu(&cu0, &cs0, &cx0);
    uint64_t t0 = clock_nsec(), end = t0 + (uint64_t)(b->o.seconds * 1e9);
    for (unsigned i = 0; i < depth; i++)
        freeq[nfree++] = &q[i];
    uint64_t now = t0;
    for (unsigned i = 0; i < depth; i++)
        freeq[i]->t_ready = now;
    for (;;) {
        bool stopping = now >= end;
        if (!stopping && nfree >= batch) {
            while (nfree > 0) {
                struct req *x = freeq[--nfree];
                req_prep(b, r, x, x->t_ready);
                inflight++;
            }
            nvs_ring_submit(r);
        }
        if (inflight == 0)
            break;
        int k = nvs_ring_reap(r, done, MAX_DEPTH, 1);
        now = clock_nsec();
        for (int j = 0; j < k; j++) {
            struct req *x = done[j]->udata;
            if (x->rd.res != 0)
                res.errors++;
            if (ns < MAX_SAMPLES) {
                lat[ns] = now - x->t_ready;
                dev[ns] = x->rd.lat_ns;
                ns++;
            }
            n++;
            nvs_read_done(r, &x->rd);
            x->t_ready = now;
            freeq[nfree++] = x;
            inflight--;
        }
    }
    double secs = (double)(now - t0) / 1e9;
    thread_cpu(&cu1, &cs1, &cx1);
    nvs_ring_destroy(r);
    res.iops = (double)n / secs;
    if (n > 0) {
        res.usr_us = (double)(cu1 - cu0) / 1e3 / (double)n;
        res.sys_us = (double)(cs1 - cs0) / 1e3 / (double)n;
        res.ctx = (double)(cx1 - cx0) / (double)n;
    }
    res.dev = (struct devside){-1, -1, -1};
    if (have_dev && dev_stat(b->o.path, &d1))
        res.dev = dev_side(&d0, &d1, (double)n, secs);
    if (ns > 0) {
        double sl = 0, sd = 0;
        for (uint64_t i = 0; i < ns; i++) {
            sl += (double)lat[i];
            sd += (double)dev[i];
        }
        res.avg_us = sl / (double)ns / 1e3;
        res.dev_avg_us = sd / (double)ns / 1e3;
        qsort(lat, ns, sizeof(*lat), cmp_u64);
        qsort(dev, ns, sizeof(*dev), cmp_u64);
        res.p99_us = (double)lat[ns * 99 / 100] / 1e3;
        res.dev_p99_us = (double)dev[ns * 99 / 100] / 1e3;
    }
    return res;
}

/* fio on the same file and the records' byte range: its read IOPS (-1:
 * fio failed), its job's user and system CPU per read (from its usr/sys
 * percentages) and the device's side over its runtime. */
static struct result
run_fio(struct bench *b, unsigned depth)
{
    char cmd[1024], line[8192];
    struct result res = {.iops = -1, .dev = {-1, -1, -1}};
    double runtime_ms = 0;

    snprintf(cmd, sizeof(cmd),
             "fio --name=nvs --filename=%s --ioengine=io_uring --direct=1 "
             "--rw=randread --bs=4k --iodepth=%u --size=%" PRIu64
             " --time_based --runtime=%.0f --readonly --invalidate=0 "
             "--randrepeat=0 --norandommap --minimal 2>/dev/null",
             b->o.path, depth, b->fio_span,
             b->o.seconds < 1 ? 1 : b->o.seconds);
    struct devstat d0, d1;
    bool have_dev = dev_stat(b->o.path, &d0);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return res;
    while (fgets(line, sizeof(line), p) != NULL) {
        /* terse v3: field 8 is the read IOPS, 9 the read runtime (ms) */
        char *f = line;
        for (int i = 1; i < 8 && f != NULL; i++) {
            f = strchr(f, ';');
            if (f != NULL)
                f++;
        }
        if (f != NULL) {
            res.iops = strtod(f, &f);
            if (*f == ';')
                runtime_ms = strtod(f + 1, NULL);
        }
        /* terse v3: fields 88, 89 and 90 are usr_cpu and sys_cpu (%) and
         * the job's context switches */
        for (int i = 8; i < 88 && f != NULL; i++) {
            f = strchr(f, ';');
            if (f != NULL)
                f++;
        }
        if (f != NULL && res.iops > 0) {
            res.usr_us = strtod(f, &f) / 100.0 / res.iops * 1e6;
            f = strchr(f, ';');
            if (f != NULL) {
                res.sys_us = strtod(f + 1, &f) / 100.0 / res.iops * 1e6;
                f = strchr(f, ';'); /* past the '%' */
            }
            if (f != NULL && runtime_ms > 0)
                res.ctx = strtod(f + 1, NULL) / (res.iops * runtime_ms / 1e3);
        }
    }
    if (pclose(p) != 0) {
        res.iops = -1;
        return res;
    }
    /* fio's start and exit do no I/O on the file (--readonly
     * --invalidate=0): its runtime is the stretch the device worked */
    if (have_dev && dev_stat(b->o.path, &d1) && res.iops > 0)
        res.dev =
            dev_side(&d0, &d1, res.iops * runtime_ms / 1e3, runtime_ms / 1e3);
    return res;
}

static double
median(double *v, unsigned n)
{
    double t[16];
    memcpy(t, v, n * sizeof(*v));
    for (unsigned i = 1; i < n; i++)
        for (unsigned j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[n / 2];
}

static void
parse_depths(struct opts *o, char *s)
{
    o->ndepths = 0;
    for (char *t = strtok(s, ","); t != NULL && o->ndepths < 8;
         t = strtok(NULL, ",")) {
        unsigned d = (unsigned)strtoul(t, NULL, 10);
        if (d >= 1 && d <= MAX_DEPTH)
            o->depths[o->ndepths++] = d;
    }
}

int
main(int argc, char **argv)
{
    static struct bench b;
    struct opts *o = &b.o;
    const char *env = getenv("NVS_BENCH_PATH");

    o->path = env != NULL && env[0] != '\0' ? env : "/tmp/tc_bench_nvs.dat";
    o->size = 2ull << 30;
    o->seconds = 3;
    o->batch = true;
    o->batch_depth = 32;
    o->rounds = 3;
    o->vlen = 4096;
    o->ndepths = 4;
    o->depths[0] = 1, o->depths[1] = 8, o->depths[2] = 32, o->depths[3] = 128;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--path") && v)
            o->path = v, i++;
        else if (!strcmp(a, "--size") && v)
            o->size = strtoull(v, NULL, 0), i++;
        else if (!strcmp(a, "--seconds") && v)
            o->seconds = strtod(v, NULL), i++;
        else if (!strcmp(a, "--depths") && v)
            parse_depths(o, argv[++i]);
        else if (!strcmp(a, "--batch-depth") && v)
            o->batch_depth = (unsigned)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--vlen") && v)
            o->vlen = (uint32_t)strtoul(v, NULL, 0), i++;
        else if (!strcmp(a, "--rounds") && v)
            o->rounds = (unsigned)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--fio"))
            o->fio = true;
        else if (!strcmp(a, "--no-batch"))
            o->batch = false;
        else if (!strcmp(a, "--no-uring"))
            o->no_uring = true;
        else if (!strcmp(a, "--store-first"))
            o->store_first = true;
        else if (!strcmp(a, "--fio-whole"))
            o->fio_whole = true;
        else if (!strcmp(a, "--cleanup"))
            o->cleanup = true;
        else {
            fprintf(stderr,
                    "usage: %s [--path FILE] [--size BYTES] "
                    "[--seconds S] [--fio] [--depths 1,8,32,128] "
                    "[--rounds N] [--batch-depth N] [--no-batch] [--vlen N] "
                    "[--no-uring] [--store-first] [--fio-whole] "
                    "[--cleanup]\n",
                    argv[0]);
            return 2;
        }
    }
    if (o->rounds < 1 || o->rounds > 15)
        o->rounds = 3;
    if (o->batch_depth < 1 || o->batch_depth > MAX_DEPTH)
        o->batch_depth = 32;
    if (o->vlen < 1 || o->vlen > MAX_VLEN)
        o->vlen = 4096;
    b.rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
    printf("# bench_nvs: %s, %.2f GiB, %.1f s per point\n", o->path,
           (double)o->size / (1 << 30), o->seconds);
    if (fill(&b) < 0)
        return 1;

    if (o->fio_whole)
        b.fio_span = b.span; /* the old range, never-written rest included */
    if (o->fio)
        printf("fio reads bytes 0-%" PRIu64 " of the file (%s)\n", b.fio_span,
               o->fio_whole ? "all segments, never-written ones included"
                            : "up to the last record's end");
    printf("\n%-6s %10s %10s %6s %9s %9s %7s %11s %11s %7s %15s %15s\n",
           "depth", "store IOPS", "fio IOPS", "ratio", "dev avg", "dev p99",
           "B/read", "devrd/op", "aqu-sz", "errors", "store usr+sys",
           "fio usr+sys");
    for (unsigned i = 0; i < o->ndepths; i++) {
        unsigned d = o->depths[i];
        /* rounds of fio then store (--store-first: store then fio),
         * alternating; the medians are kept */
        double fs[16], xs[16], fu[16], fsy[16], xu[16], xsy[16];
        struct result rs[16], rf[16], x, y;
        for (unsigned k = 0; k < o->rounds; k++) {
            if (o->store_first)
                rs[k] = run_reads(&b, d, 1);
            rf[k] = o->fio ? run_fio(&b, d)
                           : (struct result){.iops = -1, .dev = {-1, -1, -1}};
            if (!o->store_first)
                rs[k] = run_reads(&b, d, 1);
            fs[k] = rf[k].iops;
            fu[k] = rf[k].usr_us;
            fsy[k] = rf[k].sys_us;
            xs[k] = rs[k].iops;
            xu[k] = rs[k].usr_us;
            xsy[k] = rs[k].sys_us;
        }
        double f = median(fs, o->rounds);
        double xm = median(xs, o->rounds);
        /* CPU per read: medians of the rounds, user and system apart */
        double f_usr = median(fu, o->rounds), f_sys = median(fsy, o->rounds);
        double x_usr = median(xu, o->rounds), x_sys = median(xsy, o->rounds);
        char xcpu[32], fcpu[32], rdop[32], aqu[32];
        snprintf(xcpu, sizeof(xcpu), "%.2f+%.2fus", x_usr, x_sys);
        snprintf(fcpu, sizeof(fcpu), "%.2f+%.2fus", f_usr, f_sys);
        /* the device's side: of the median rounds (store, fio) */
        x = rs[0];
        y = rf[0];
        for (unsigned k = 0; k < o->rounds; k++) {
            if (rs[k].iops == xm)
                x = rs[k];
            if (rf[k].iops == f)
                y = rf[k];
        }
        snprintf(rdop, sizeof(rdop), "%.2f/%.2f", x.dev.rd_per_op,
                 y.dev.rd_per_op);
        snprintf(aqu, sizeof(aqu), "%.1f/%.1f", x.dev.aqu, y.dev.aqu);
        if (f > 0)
            printf("%-6u %10.0f %10.0f %6.2f %7.1fus %7.1fus %7.0f %11s %11s "
                   "%7" PRIu64 " %15s %15s\n",
                   d, x.iops, f, x.iops / f, x.dev_avg_us, x.dev_p99_us,
                   x.dev.bytes, rdop, aqu, x.errors, xcpu, fcpu);
        else
            printf("%-6u %10.0f %10s %6s %7.1fus %7.1fus %7.0f %11.2f %11.1f "
                   "%7" PRIu64 " %15s %15s\n",
                   d, x.iops, "-", "-", x.dev_avg_us, x.dev_p99_us, x.dev.bytes,
                   x.dev.rd_per_op, x.dev.aqu, x.errors, xcpu, "-");
        printf("  rounds (IOPS, store/fio):");
        for (unsigned k = 0; k < o->rounds; k++)
            printf(" %.0f/%.0f", xs[k], fs[k]);
        printf("; context switches per read %.3f/%.3f\n", x.ctx, y.ctx);
        printf("RESULT bench=nvs vlen=%u depth=%u store_iops=%.0f "
               "fio_iops=%.0f ratio=%.3f dev_bytes_per_read=%.0f "
               "store_usr_us=%.2f store_sys_us=%.2f fio_usr_us=%.2f "
               "fio_sys_us=%.2f store_dev_reads_per_op=%.3f "
               "fio_dev_reads_per_op=%.3f store_aqu=%.1f fio_aqu=%.1f "
               "store_ctx_per_read=%.3f fio_ctx_per_read=%.3f\n",
               o->vlen, d, x.iops, f, f > 0 ? x.iops / f : 0, x.dev.bytes,
               x_usr, x_sys, f_usr, f_sys, x.dev.rd_per_op, y.dev.rd_per_op,
               x.dev.aqu, y.dev.aqu, x.ctx, y.ctx);
        fflush(stdout);
    }

    if (o->batch) {
        unsigned d = o->batch_depth;
        unsigned batches[] = {1, 4, 8, 16, 32, d};
        printf("\nsubmission batching at depth %u (latency from a free slot "
               "to completion; dev = submit to completion)\n",
               d);
        printf("%-12s %10s %9s %9s %9s %9s %7s\n", "batch", "IOPS", "avg",
               "p99", "dev avg", "dev p99", "errors");
        for (unsigned i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) {
            unsigned bt = batches[i];
            if (bt > d ||
                (i + 1 < sizeof(batches) / sizeof(batches[0]) && bt == d))
                continue; /* the full-depth row comes last */
            struct result x = run_reads(&b, d, bt);
            char label[32];
            if (bt == d)
                snprintf(label, sizeof(label), "full (%u)", d);
            else
                snprintf(label, sizeof(label), "%u", bt);
            printf("%-12s %10.0f %7.1fus %7.1fus %7.1fus %7.1fus %7" PRIu64
                   "\n",
                   label, x.iops, x.avg_us, x.p99_us, x.dev_avg_us,
                   x.dev_p99_us, x.errors);
            printf("RESULT bench=nvs_batch depth=%u batch=%u iops=%.0f "
                   "avg_us=%.1f p99_us=%.1f dev_avg_us=%.1f dev_p99_us=%.1f\n",
                   d, bt, x.iops, x.avg_us, x.p99_us, x.dev_avg_us,
                   x.dev_p99_us);
            fflush(stdout);
        }
    }
    struct nvs_stats st;
    nvs_get_stats(b.s, &st);
    printf("\nstore: %" PRIu64 " reads, p50 %.1f us, p99 %.1f us, p99.9 %.1f "
           "us; crc/io errors %" PRIu64 "/%" PRIu64 "; bytes_read per read "
           "%.0f\n",
           st.objects_read, st.read_lat_p50_ns / 1e3, st.read_lat_p99_ns / 1e3,
           st.read_lat_p999_ns / 1e3, st.read_badcrc, st.read_ioerr,
           st.objects_read > 0 ? (double)st.bytes_read / (double)st.objects_read
                               : 0.0);
    nvs_close(b.s);
    free(b.loc);
    if (o->cleanup)
        unlink(o->path);
    return 0;
}

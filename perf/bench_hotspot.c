/*
 * bench_hotspot: what write-hotspot tracking and PMEM latency emulation
 * cost, side by side in one run.
 *
 *   HELPERS  pm_copy() of 100-byte values into a 64 MiB DRAM buffer (the
 *            helpers do not care where the memory is), one thread: tracking
 *            off (the default: one predictable branch), tracker attached
 *            recording every write, one write in 16, and latency emulation.
 *   ENGINE   tc_set() of 100-byte values over 50,000 keys through the
 *            public API, one thread, on a fresh /dev/shm pool per mode:
 *            the same modes through tc_config, with the tracker's skew.
 *
 * Prints ns per write (or ops/s) and the ratio to "off". Figures only:
 * nothing is asserted (the machine is shared and noisy); every loop is
 * bounded by a count. Usage: bench_hotspot [writes] [lat_ns].
 */

#include "src/base/clock.h"
#include "src/tiercache.h"
#include "tier/hotspot.h"
#include "tier/pm.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BH_BUF (64u << 20)
#define BH_VAL 100
#define BH_STRIDE 128
#define BH_KEYS 50000
#define BH_REPEAT 3 /* best of, per mode */

enum bh_mode { BH_OFF, BH_TRACK1, BH_TRACK16, BH_LATENCY, BH_NMODES };

static const char *const bh_names[BH_NMODES] = {
    "off (default)",
    "tracker, every write",
    "tracker, 1 in 16",
    "latency emulation",
};

static double
bh_helpers(char *buf, uint64_t writes, enum bh_mode m, uint32_t lat_ns)
{
    struct hotspot_config cfg;
    struct hotspot *h = NULL;
    char val[BH_VAL];

    memset(val, 'v', sizeof(val));
    hotspot_config_init(&cfg);
    if (m == BH_TRACK16)
        cfg.sample_every = 16;
    if (m == BH_TRACK1 || m == BH_TRACK16) {
        if (hotspot_create(&cfg, buf, BH_BUF, &h) != 0 ||
            hotspot_attach(h) != 0) {
            fprintf(stderr, "bench_hotspot: tracker setup failed\n");
            exit(1);
        }
    }
    if (m == BH_LATENCY)
        pm_set_latency(lat_ns, 0);
    uint64_t slots = BH_BUF / BH_STRIDE;
    uint64_t t0 = clock_nsec();
    for (uint64_t i = 0; i < writes; i++)
        pm_copy(buf + (i * 7919 % slots) * BH_STRIDE, val, sizeof(val));
    uint64_t ns = clock_nsec() - t0;
    pm_set_latency(0, 0);
    hotspot_destroy(h);
    return (double)ns / (double)writes;
}

static double
bh_engine(uint64_t sets, enum bh_mode m, uint32_t lat_ns, double *skew)
{
    struct tc_config cfg;
    struct tc_cache *c;
    char path[128], key[32], val[BH_VAL];

    memset(val, 'v', sizeof(val));
    snprintf(path, sizeof(path), "/dev/shm/bench_hotspot_%d.pool",
             (int)getpid());
    unlink(path);
    tc_config_init(&cfg);
    cfg.pool_path = path;
    cfg.pool_size = 64u << 20;
    cfg.background = false;
    if (m == BH_TRACK1 || m == BH_TRACK16)
        cfg.hotspot_dimms = 4;
    if (m == BH_TRACK16)
        cfg.hotspot_sample = 16;
    if (m == BH_LATENCY)
        cfg.pm_write_ns = lat_ns;
    if (tc_open(&cfg, &c) != 0) {
        fprintf(stderr, "bench_hotspot: tc_open: %s\n", tc_errmsg());
        exit(1);
    }
    /* load once so that page formatting is outside the timed part */
    for (unsigned k = 0; k < BH_KEYS; k++) {
        int n = snprintf(key, sizeof(key), "key:%08u", k);
        tc_set(c, key, (size_t)n, val, sizeof(val), 0, 0);
    }
    tc_hotspot_reset(c);
    uint64_t t0 = clock_nsec();
    for (uint64_t i = 0; i < sets; i++) {
        int n = snprintf(key, sizeof(key), "key:%08u",
                         (unsigned)(i * 7919 % BH_KEYS));
        tc_set(c, key, (size_t)n, val, sizeof(val), 0, 0);
    }
    uint64_t ns = clock_nsec() - t0;
    struct tc_hotspot hs;
    tc_hotspot_get(c, &hs);
    *skew = hs.skew;
    tc_close(c);
    unlink(path);
    return (double)sets * 1e9 / (double)ns;
}

int
main(int argc, char **argv)
{
    uint64_t writes = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
    uint32_t lat = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 100;
    char *buf = aligned_alloc(4096, BH_BUF);

    if (buf == NULL || writes == 0)
        return 1;
    memset(buf, 0, BH_BUF);
    printf("bench_hotspot: %" PRIu64 " writes of %d bytes per mode, best of "
           "%d; latency emulation %u ns per 64-byte line written\n",
           writes, BH_VAL, BH_REPEAT, lat);

    printf("\nHELPERS (pm_copy)\n%-24s %10s %8s\n", "mode", "ns/write",
           "x off");
    double base = 0;
    for (int m = 0; m < BH_NMODES; m++) {
        double best = 1e30;
        for (int r = 0; r < BH_REPEAT; r++) {
            double v = bh_helpers(buf, writes, (enum bh_mode)m, lat);
            best = v < best ? v : best;
        }
        if (m == BH_OFF)
            base = best;
        printf("%-24s %10.1f %8.2f\n", bh_names[m], best, best / base);
    }

    uint64_t sets = writes / 4;
    printf("\nENGINE (tc_set, %" PRIu64 " sets over %d keys)\n%-24s %10s "
           "%8s %6s\n",
           sets, BH_KEYS, "mode", "ops/s", "x off", "skew");
    double ebase = 0;
    for (int m = 0; m < BH_NMODES; m++) {
        double best = 0, skew = 0;
        for (int r = 0; r < BH_REPEAT; r++) {
            double s, v = bh_engine(sets, (enum bh_mode)m, lat, &s);
            if (v > best) {
                best = v;
                skew = s;
            }
        }
        if (m == BH_OFF)
            ebase = best;
        printf("%-24s %10.0f %8.2f %6.3f\n", bh_names[m], best, best / ebase,
               skew);
    }
    free(buf);
    return 0;
}

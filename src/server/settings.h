#pragma once
/*
 * tiercached's command line: memcached's flags where the meaning matches,
 * plus tiercache's own options under -o name=value. One table in
 * settings.c (name, type, default, min, max, description) drives parsing,
 * the one-line error for a bad value, --help and "stats settings".
 *
 * Concurrency: filled once by main() before any thread starts; read-only
 * afterwards (the live values that commands change, verbosity and the
 * memory limit, are kept by the server, which renders a patched copy).
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "src/server/obuf.h"

#define SETTINGS_PATH_MAX 512
#define SETTINGS_LISTEN_MAX 1024
#define SETTINGS_EXT_PATHS 8 /* TC_EXT_MAX_PATHS */

enum settings_action {
    SETTINGS_RUN = 0,
    SETTINGS_HELP,    /* -h: print settings_help() and exit 0 */
    SETTINGS_VERSION, /* -V: print "tiercached 0.1.0" and exit 0 */
};

struct settings {
    /* memcached's flags */
    uint64_t port;          /* -p, 0 = no TCP */
    uint64_t udp_port;      /* -U, only 0 */
    const char *unix_path;  /* -s, NULL = none */
    uint64_t unix_mask;     /* -a, octal */
    const char *listen;     /* -l, comma-separated addresses */
    uint64_t maxbytes_mib;  /* -m */
    bool no_evict;          /* -M */
    uint64_t maxconns;      /* -c */
    uint64_t threads;       /* -t */
    uint64_t item_size_max; /* -I, bytes */
    double growth_factor;   /* -f */
    uint64_t chunk_size;    /* -n: key + value + flags space of the
                               smallest chunk */
    uint64_t verbose;       /* -v count */
    bool shutdown_enabled;  /* -A */
    const char *pool_path;  /* -e */
    /* -o options */
    uint64_t pool_size;      /* bytes of items the pool file holds, the
                                ceiling for cache_memlimit; 0 = -m */
    uint64_t idle_timeout;   /* seconds, 0 = off */
    uint64_t slab_chunk_max; /* bytes */
    uint64_t hash_items;     /* 0 = derive from the pool size */
    uint64_t quota_batch;
    uint64_t sweep_budget;
    bool maxconns_fast;       /* accepted, no effect */
    bool no_background;       /* no maintenance thread (tests) */
    bool pin_workers;         /* worker i on the i-th allowed CPU */
    uint64_t worker_slice_us; /* workers' scheduler slice, 0 = kernel's */
    /* write-hotspot tracking and latency emulation (measurement aids) */
    uint64_t hotspot_dimms; /* 0 = off */
    uint64_t hotspot_interleave;
    uint64_t hotspot_sample;
    uint64_t pm_write_ns;
    uint64_t pm_read_ns;
    /* ablation switches, experiment only (README "Ablation switches") */
    bool ablate_meta_in_pmem;
    bool ablate_init_in_lock;
    /* hot keys in DRAM */
    uint64_t hot_pool_size; /* bytes, 0 = off */
    uint64_t hot_write_rate;
    uint64_t hotkey_window;
    uint64_t hotkey_k;
    uint64_t hotkey_sample;
    /* -o ext_*: the NVMe tier (memcached's extstore options) */
    unsigned ext_npaths; /* ext_path=FILE:SIZE, repeatable */
    char ext_path[SETTINGS_EXT_PATHS][SETTINGS_PATH_MAX];
    uint64_t ext_size[SETTINGS_EXT_PATHS]; /* bytes */
    uint64_t ext_item_size;                /* bytes */
    uint64_t ext_item_age;                 /* seconds idle before a spill */
    uint64_t ext_page_size;                /* MiB */
    uint64_t ext_wbuf_size;                /* MiB */
    uint64_t ext_recache_rate;
    uint64_t ext_recache_window;
    double ext_max_frag;
    uint64_t ext_read_timeout_ms;
    uint64_t ext_threads;

    enum settings_action action;
    bool port_given; /* -p appeared: with -s, keep TCP on too */
    char listen_buf[SETTINGS_LISTEN_MAX];
    char pool_buf[SETTINGS_PATH_MAX];
};

/* Fill s with the defaults. */
void settings_init(struct settings *s);

/* Parse argv[1..argc) over the defaults already in s (call settings_init
 * first), then fill what depends on other values (the pool path). 0, or
 * -EINVAL with one line naming the flag in err_msg() (no program name in
 * front). Strings in s point into argv or into s itself. */
int settings_parse(struct settings *s, int argc, char *const argv[]);

/* Smallest slab chunk in bytes: -n plus the item header, rounded up to 8. */
uint32_t settings_min_chunk(const struct settings *s);

/* Usage: every flag and -o option with its default and range. */
void settings_help(FILE *f);

/* "STAT name value\r\n" lines for "stats settings", memcached's names. */
int settings_render(const struct settings *s, struct obuf *out);

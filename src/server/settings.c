/*
 * tiercached's settings: one table (opts[] below) drives parsing of
 * memcached's flags and of -o name=value, the one-line error for a bad
 * value, the --help text and "stats settings". Each row names its flag,
 * its type, its default (as text, parsed like a command-line value), its
 * range and what it means.
 *
 * Concurrency: none; main() parses before any thread starts.
 */

#include "src/server/settings.h"

#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/tiercache.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

enum opt_type {
    OT_UINT,    /* decimal number */
    OT_SIZE,    /* bytes, with an optional k, m or g suffix */
    OT_DOUBLE,  /* decimal fraction */
    OT_OCTAL,   /* octal mask (-a) */
    OT_STR,     /* text, up to max bytes */
    OT_LIST,    /* text; a repeated flag appends with a comma (-l) */
    OT_BOOL,    /* flag without value; under -o optionally =0/1 */
    OT_COUNT,   /* flag without value, counted (-v, -vv) */
    OT_SUBOPT,  /* -o name=value[,...] */
    OT_EXTPATH, /* FILE:SIZE, repeatable (-o ext_path) */
    OT_ACTION,  /* -h, -V */
};

/* How "stats settings" shows a value. */
enum opt_show {
    SHOW_NONE,      /* not shown */
    SHOW_NUM,       /* the number */
    SHOW_MIB,       /* MiB shown as bytes (maxbytes) */
    SHOW_STR,       /* the text, "NULL" when unset */
    SHOW_OCTAL,     /* 700 */
    SHOW_YESNO,     /* yes / no */
    SHOW_NOT_YESNO, /* inverted bool: no / yes */
    SHOW_NOT_ONOFF, /* inverted bool: -M shown as evictions on / off */
};

struct opt {
    char flag;        /* short flag, 0 for none */
    const char *name; /* long flag (--name), or the -o name when sub */
    bool sub;         /* an -o option */
    enum opt_type type;
    size_t off;        /* field in struct settings */
    const char *def;   /* default, as text; NULL = none or computed */
    uint64_t min, max; /* range of OT_UINT / OT_SIZE / OT_OCTAL / OT_STR
                          (length) */
    double dmin, dmax; /* range of OT_DOUBLE */
    const char *stat;  /* name in "stats settings" */
    enum opt_show show;
    const char *arg; /* placeholder in --help */
    const char *help;
    const char *bad; /* replaces the range text in the error, if set */
};

#define F(field) offsetof(struct settings, field)
#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* One row an option, packed: reads better as a table. */
/* clang-format off */
static const struct opt opts[] = {
    {.flag = 'm', .name = "memory-limit", .type = OT_UINT,
     .off = F(maxbytes_mib), .def = "64", .min = 8, .max = 16u << 20,
     .stat = "maxbytes", .show = SHOW_MIB, .arg = "<MiB>",
     .help = "item memory in MiB: the pool file's data area",
     .bad = "expected a number of MiB from 8 (the smallest pool tiercached "
            "runs on) to 16777216"},
    {.flag = 'c', .name = "conn-limit", .type = OT_UINT, .off = F(maxconns),
     .def = "1024", .min = 1, .max = 1u << 20, .stat = "maxconns",
     .show = SHOW_NUM, .arg = "<num>",
     .help = "most simultaneous connections"},
    {.flag = 'p', .name = "port", .type = OT_UINT, .off = F(port),
     .def = "11211", .min = 0, .max = 65535, .stat = "tcpport",
     .show = SHOW_NUM, .arg = "<num>",
     .help = "TCP port to listen on, 0 = no TCP"},
    {.flag = 'U', .name = "udp-port", .type = OT_UINT, .off = F(udp_port),
     .def = "0", .min = 0, .max = 0, .stat = "udpport", .show = SHOW_NUM,
     .arg = "<num>", .help = "UDP port: only 0 (off), UDP is not supported",
     .bad = "UDP is not supported: only 0 (off) is accepted"},
    {.flag = 'l', .name = "listen", .type = OT_LIST, .off = F(listen),
     .def = "127.0.0.1", .min = 1, .max = SETTINGS_LISTEN_MAX - 1,
     .stat = "inter", .show = SHOW_STR, .arg = "<addr>",
     .help = "addresses to listen on, comma-separated (host, or host:port); "
             "repeat -l to add more"},
    {.flag = 'v', .name = "verbose", .type = OT_COUNT, .off = F(verbose),
     .max = 3, .stat = "verbosity", .show = SHOW_NUM,
     .help = "log to stderr: -v listen and pool info, -vv connections"},
    {.flag = 'M', .name = "disable-evictions", .type = OT_BOOL,
     .off = F(no_evict), .stat = "evictions", .show = SHOW_NOT_ONOFF,
     .help = "no eviction: a full cache refuses stores with an error"},
    {.flag = 's', .name = "unix-socket", .type = OT_STR, .off = F(unix_path),
     .min = 1, .max = SUN_PATH_MAX, .stat = "domain_socket",
     .show = SHOW_STR, .arg = "<path>",
     .help = "unix socket to listen on; without -p it turns TCP off, as in "
             "memcached"},
    {.flag = 'a', .name = "unix-mask", .type = OT_OCTAL, .off = F(unix_mask),
     .def = "700", .min = 0, .max = 0777, .stat = "umask",
     .show = SHOW_OCTAL, .arg = "<mask>",
     .help = "access mask of the unix socket, octal"},
    {.flag = 'A', .name = "enable-shutdown", .type = OT_BOOL,
     .off = F(shutdown_enabled), .stat = "shutdown_command",
     .show = SHOW_YESNO, .help = "enable the shutdown command"},
    {.flag = 'f', .name = "slab-growth-factor", .type = OT_DOUBLE,
     .off = F(growth_factor), .def = "1.25", .dmin = 1.01, .dmax = 100,
     .stat = "growth_factor", .show = SHOW_NUM, .arg = "<factor>",
     .help = "chunk size growth factor between slab classes"},
    {.flag = 'n', .name = "slab-min-size", .type = OT_UINT,
     .off = F(chunk_size), .def = "48", .min = 1, .max = 1u << 19,
     .stat = "chunk_size", .show = SHOW_NUM, .arg = "<bytes>",
     .help = "key + value + flags room of the smallest chunk (chunk = this "
             "+ " STRINGIFY(TC_ITEM_HEADER_SIZE) " header bytes, rounded up "
             "to 8)"},
    {.flag = 't', .name = "threads", .type = OT_UINT, .off = F(threads),
     .def = "4", .min = 1, .max = 256, .stat = "num_threads",
     .show = SHOW_NUM, .arg = "<num>", .help = "worker threads"},
    {.flag = 'I', .name = "max-item-size", .type = OT_SIZE,
     .off = F(item_size_max), .def = "1m", .min = 1u << 10, .max = 1u << 30,
     .stat = "item_size_max", .show = SHOW_NUM, .arg = "<size>",
     .help = "largest item (header + key + value), k/m/g suffix; at most "
             STRINGIFY(TC_ITEM_MAX_TAILS) " x (slab_chunk_max - "
             STRINGIFY(TC_ITEM_TAIL_HEADER_SIZE) ") bytes"},
    {.flag = 'e', .name = "memory-file", .type = OT_STR, .off = F(pool_path),
     .min = 1, .max = SETTINGS_PATH_MAX - 1, .stat = "memory_file",
     .show = SHOW_STR, .arg = "<path>",
     .help = "PMEM pool file (a DAX file, /dev/daxX.Y, or tmpfs to emulate; "
             "default /dev/shm/tiercache.<port>.pool)"},
    {.flag = 'o', .name = "extended", .type = OT_SUBOPT,
     .arg = "<name=value,...>", .help = "tiercache's own options, below"},
    {.flag = 'h', .name = "help", .type = OT_ACTION, .off = SETTINGS_HELP,
     .help = "print this help and exit"},
    {.flag = 'V', .name = "version", .type = OT_ACTION,
     .off = SETTINGS_VERSION, .help = "print the version and exit"},
    /* -o options */
    {.name = "idle_timeout", .sub = true, .type = OT_UINT,
     .off = F(idle_timeout), .def = "0", .min = 0, .max = 31536000,
     .stat = "idle_timeout", .show = SHOW_NUM, .arg = "<secs>",
     .help = "close connections idle this long, 0 = never"},
    {.name = "pool_size", .sub = true, .type = OT_SIZE, .off = F(pool_size),
     .def = "0", .min = 0, .max = 16ull << 40, .stat = "tc_pool_size",
     .show = SHOW_NUM, .arg = "<size>",
     .help = "item bytes the pool file holds (whole MiB, at least -m): the "
             "ceiling cache_memlimit can raise the limit to; 0 = -m"},
    {.name = "slab_chunk_max", .sub = true, .type = OT_SIZE,
     .off = F(slab_chunk_max), .def = "512k", .min = 1u << 10,
     .max = 1u << 20, .stat = "slab_chunk_max", .show = SHOW_NUM,
     .arg = "<bytes>",
     .help = "largest slab chunk, a multiple of 8; larger items are chained "
             "over several"},
    {.name = "hash_items", .sub = true, .type = OT_UINT, .off = F(hash_items),
     .def = "0", .min = 0, .max = 1ull << 44, .stat = "tc_hash_items",
     .show = SHOW_NUM, .arg = "<num>",
     .help = "items the hash index is sized for, 0 = pool bytes / 128"},
    {.name = "quota_batch", .sub = true, .type = OT_UINT,
     .off = F(quota_batch), .def = "32", .min = 1, .max = 256,
     .stat = "tc_quota_batch", .show = SHOW_NUM, .arg = "<num>",
     .help = "chunks a thread takes from a slab class at once"},
    {.name = "sweep_budget", .sub = true, .type = OT_UINT,
     .off = F(sweep_budget), .def = "1024", .min = 1, .max = 1u << 20,
     .stat = "tc_sweep_budget", .show = SHOW_NUM, .arg = "<num>",
     .help = "chunks the expiry sweep looks at per step"},
    {.name = "maxconns_fast", .sub = true, .type = OT_BOOL,
     .off = F(maxconns_fast), .def = "1", .stat = "maxconns_fast",
     .show = SHOW_YESNO,
     .help = "accepted for memcached compatibility, no effect: a connection "
             "over -c always gets an error and is closed"},
    {.name = "pin_workers", .sub = true, .type = OT_BOOL,
     .off = F(pin_workers), .stat = "tc_pin_workers", .show = SHOW_YESNO,
     .help = "run worker thread i only on the i-th CPU this process may use "
             "(round robin): workers never queue behind each other"},
    {.name = "worker_slice_us", .sub = true, .type = OT_UINT,
     .off = F(worker_slice_us), .def = "0", .min = 0, .max = 100000,
     .stat = "tc_worker_slice_us", .show = SHOW_NUM, .arg = "<us>",
     .help = "the workers' scheduler slice (Linux 6.12+, 100 to 100000; "
             "0 = the kernel's): a short one lets a worker woken by a "
             "request or a flash read preempt a busy thread at once"},
    {.name = "no_background", .sub = true, .type = OT_BOOL,
     .off = F(no_background), .stat = "tc_background",
     .show = SHOW_NOT_YESNO,
     .help = "no maintenance thread (expiry sweep, pending shrinks); for "
             "tests"},
    /* write-hotspot tracking and PMEM latency emulation: measurement aids */
    {.name = "hotspot_dimms", .sub = true, .type = OT_UINT,
     .off = F(hotspot_dimms), .def = "0", .min = 0, .max = TC_HOTSPOT_MAX_DIMMS,
     .stat = "tc_hotspot_dimms", .show = SHOW_NUM, .arg = "<num>",
     .help = "track PMEM writes per 4 KiB block and per emulated DIMM over "
             "this many DIMMs (stats hotspot, hotspot dump); 0 = off"},
    {.name = "hotspot_interleave", .sub = true, .type = OT_SIZE,
     .off = F(hotspot_interleave), .def = "4096", .min = 64,
     .max = 1u << 30, .stat = "tc_hotspot_interleave", .show = SHOW_NUM,
     .arg = "<bytes>",
     .help = "bytes per emulated DIMM stripe, a multiple of 64"},
    {.name = "hotspot_sample", .sub = true, .type = OT_UINT,
     .off = F(hotspot_sample), .def = "1", .min = 1, .max = 1u << 20,
     .stat = "tc_hotspot_sample", .show = SHOW_NUM, .arg = "<num>",
     .help = "record one PMEM write in this many per thread (1 = all)"},
    {.name = "pm_write_ns", .sub = true, .type = OT_UINT,
     .off = F(pm_write_ns), .def = "0", .min = 0, .max = 1000000,
     .stat = "tc_pm_write_ns", .show = SHOW_NUM, .arg = "<ns>",
     .help = "busy-wait per 64-byte line written to PMEM, emulating a "
             "slower medium; 0 = off"},
    {.name = "pm_read_ns", .sub = true, .type = OT_UINT,
     .off = F(pm_read_ns), .def = "0", .min = 0, .max = 1000000,
     .stat = "tc_pm_read_ns", .show = SHOW_NUM, .arg = "<ns>",
     .help = "busy-wait per 64-byte line of value read from PMEM; 0 = off"},
    /* ablation switches: EXPERIMENT ONLY, off by default (they reproduce
     * Tair MDB's bad layouts to measure what the design avoids) */
    {.name = "ablate_meta_in_pmem", .sub = true, .type = OT_BOOL,
     .off = F(ablate_meta_in_pmem), .stat = "tc_ablate_meta_in_pmem",
     .show = SHOW_YESNO,
     .help = "EXPERIMENT ONLY: also write page info into PMEM at the start "
             "of every 1 MiB page (Tair MDB's write hot spot)"},
    {.name = "ablate_init_in_lock", .sub = true, .type = OT_BOOL,
     .off = F(ablate_init_in_lock), .stat = "tc_ablate_init_in_lock",
     .show = SHOW_YESNO,
     .help = "EXPERIMENT ONLY: write items and format pages inside the slab "
             "class lock (Tair MDB's critical section)"},
    /* hot keys in DRAM (src/engine/hotkey.c) */
    {.name = "hot_pool_size", .sub = true, .type = OT_SIZE,
     .off = F(hot_pool_size), .def = "8m", .min = 0, .max = 1ull << 40,
     .stat = "hot_pool_size", .show = SHOW_NUM, .arg = "<size>",
     .help = "DRAM pool for the items of write-hot keys, 0 = off (also "
             "turns hot-key tracking and stats hotkeys off)"},
    {.name = "hot_write_rate", .sub = true, .type = OT_UINT,
     .off = F(hot_write_rate), .def = "1000", .min = 1, .max = 1u << 30,
     .stat = "hot_write_rate", .show = SHOW_NUM, .arg = "<writes/s>",
     .help = "writes per second that move a key's item into the DRAM pool; "
             "it moves back below half of it"},
    {.name = "hotkey_window", .sub = true, .type = OT_UINT,
     .off = F(hotkey_window), .def = "10", .min = 1, .max = 3600,
     .stat = "hotkey_window", .show = SHOW_NUM, .arg = "<secs>",
     .help = "seconds the key rates average over"},
    {.name = "hotkey_k", .sub = true, .type = OT_UINT, .off = F(hotkey_k),
     .def = "64", .min = 1, .max = 1024, .stat = "hotkey_k",
     .show = SHOW_NUM, .arg = "<num>",
     .help = "keys tracked by write rate and by read rate"},
    {.name = "hotkey_sample", .sub = true, .type = OT_UINT,
     .off = F(hotkey_sample), .def = "16", .min = 1, .max = 1u << 20,
     .stat = "hotkey_sample", .show = SHOW_NUM, .arg = "<num>",
     .help = "sample one operation in this many (1 = every one)"},
    /* the NVMe tier: memcached's extstore options (README "Spilling to
     * NVMe") */
    {.name = "ext_path", .sub = true, .type = OT_EXTPATH, .min = 1,
     .max = SETTINGS_PATH_MAX - 1, .arg = "<file>:<size>",
     .help = "spill cold values to this file or block device (O_DIRECT, "
             "not tmpfs), using <size> bytes (k/m/g/t suffix); repeat for "
             "more paths (at most 8)",
     .bad = "expected FILE:SIZE with a size such as 64m or 10g"},
    {.name = "ext_item_size", .sub = true, .type = OT_SIZE,
     .off = F(ext_item_size), .def = "512", .min = 1, .max = 1u << 30,
     .stat = "ext_item_size", .show = SHOW_NUM, .arg = "<bytes>",
     .help = "only values at least this big leave the pool (and only when "
             "their chunk is larger than the header left behind)"},
    {.name = "ext_item_age", .sub = true, .type = OT_UINT,
     .off = F(ext_item_age), .def = "4294967295", .min = 0,
     .max = UINT32_MAX, .stat = "ext_item_age", .show = SHOW_NUM,
     .arg = "<secs>",
     .help = "only victims idle at least this long spill, younger ones "
             "are evicted (default: no age limit; above 2 h counts as 2 h)"},
    {.name = "ext_page_size", .sub = true, .type = OT_UINT,
     .off = F(ext_page_size), .def = "64", .min = 1, .max = 2048,
     .stat = "ext_page_size", .show = SHOW_NUM, .arg = "<MiB>",
     .help = "segment size in MiB: the unit of reclaim and compaction"},
    {.name = "ext_wbuf_size", .sub = true, .type = OT_UINT,
     .off = F(ext_wbuf_size), .def = "4", .min = 1, .max = 256,
     .stat = "ext_wbuf_size", .show = SHOW_NUM, .arg = "<MiB>",
     .help = "write buffer in MiB, written in aligned pieces when full; divides "
             "ext_page_size; larger values are evicted, not spilled"},
    {.name = "ext_recache_rate", .sub = true, .type = OT_UINT,
     .off = F(ext_recache_rate), .def = "2000", .min = 0, .max = UINT32_MAX,
     .stat = "ext_recache_rate", .show = SHOW_NUM, .arg = "<num>",
     .help = "copy 1 in this many flash reads (per thread) back into the "
             "pool, 0 = never"},
    {.name = "ext_recache_window", .sub = true, .type = OT_UINT,
     .off = F(ext_recache_window), .def = "4294967295", .min = 0,
     .max = UINT32_MAX, .stat = "ext_recache_window", .show = SHOW_NUM,
     .arg = "<num>",
     .help = "a flash item read 3 times within about this many flash reads "
             "is copied back into the pool, 0 = never; rounded up to a "
             "power of two (default: the power of two above -m / 4 KiB, "
             "1024 to 4194304)"},
    {.name = "ext_max_frag", .sub = true, .type = OT_DOUBLE,
     .off = F(ext_max_frag), .def = "0.8", .dmin = 0, .dmax = 1,
     .stat = "ext_max_frag", .show = SHOW_NUM, .arg = "<fraction>",
     .help = "compact a segment once this fraction of it is dead"},
    {.name = "ext_read_timeout_ms", .sub = true, .type = OT_UINT,
     .off = F(ext_read_timeout_ms), .def = "1000", .min = 0,
     .max = 3600000, .stat = "ext_read_timeout_ms", .show = SHOW_NUM,
     .arg = "<ms>",
     .help = "a flash read not back by then is a miss, 0 = no deadline"},
    {.name = "ext_threads", .sub = true, .type = OT_UINT,
     .off = F(ext_threads), .def = "2", .min = 1, .max = 64,
     .stat = "ext_threads", .show = SHOW_NUM, .arg = "<num>",
     .help = "I/O threads, used only where io_uring is refused"},
};
/* clang-format on */

/* Fixed lines of "stats settings" memcached prints and tools may expect. */
static const char *const fixed_stats[][2] = {
    {"stat_key_prefix", ":"},
    {"detail_enabled", "no"},
    {"cas_enabled", "yes"},
    {"tcp_backlog", "1024"},
    {"binding_protocol", "auto-negotiate"},
    {"auth_enabled_sasl", "no"},
    {"auth_enabled_ascii", "no"},
    {"slab_reassign", "yes"},
    {"flush_enabled", "yes"},
    {"track_sizes", "no"},
    {"ssl_enabled", "no"},
};

/* --- field access --- */

static void *
field(struct settings *s, const struct opt *o)
{
    return (char *)s + o->off;
}

static const void *
cfield(const struct settings *s, const struct opt *o)
{
    return (const char *)s + o->off;
}

/* --- number parsing (strict: the whole text, no sign, no overflow) --- */

static bool
parse_u64(const char *p, uint64_t *out)
{
    uint64_t v = 0;
    if (!*p)
        return false;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static bool
parse_size(const char *p, uint64_t *out)
{
    char digits[32];
    size_t n = strlen(p);
    uint64_t mult = 1;
    if (n == 0 || n >= sizeof(digits))
        return false;
    switch (p[n - 1]) {
    case 'k':
    case 'K':
        mult = KIB;
        n--;
        break;
    case 'm':
    case 'M':
        mult = MIB;
        n--;
        break;
    case 'g':
    case 'G':
        mult = GIB;
        n--;
        break;
    case 't':
    case 'T':
        mult = GIB * 1024;
        n--;
        break;
    default:
        break;
    }
    memcpy(digits, p, n);
    digits[n] = '\0';
    uint64_t v;
    if (!parse_u64(digits, &v) || v > UINT64_MAX / mult)
        return false;
    *out = v * mult;
    return true;
}

static bool
parse_octal(const char *p, uint64_t *out)
{
    uint64_t v = 0;
    if (!*p || strlen(p) > 4)
        return false;
    for (; *p; p++) {
        if (*p < '0' || *p > '7')
            return false;
        v = v * 8 + (uint64_t)(*p - '0');
    }
    *out = v;
    return true;
}

static bool
parse_double(const char *p, double *out)
{
    char *end;
    if (!*p || !((*p >= '0' && *p <= '9') || *p == '.'))
        return false;
    errno = 0;
    double v = strtod(p, &end);
    if (*end || errno || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool
parse_bool(const char *p, bool *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    for (unsigned i = 0; i < ARRAY_SIZE(yes); i++) {
        if (!strcmp(p, yes[i]) || !strcmp(p, no[i])) {
            *out = !strcmp(p, yes[i]);
            return true;
        }
    }
    return false;
}

/* "1k", "512k", "1m", or plain bytes when not a whole multiple. */
static const char *
fmt_size(uint64_t v, char *buf, size_t n)
{
    if (v && v % GIB == 0)
        snprintf(buf, n, "%llug", (unsigned long long)(v / GIB));
    else if (v && v % MIB == 0)
        snprintf(buf, n, "%llum", (unsigned long long)(v / MIB));
    else if (v && v % KIB == 0)
        snprintf(buf, n, "%lluk", (unsigned long long)(v / KIB));
    else
        snprintf(buf, n, "%llu", (unsigned long long)v);
    return buf;
}

/* What a value of o may be, for errors and --help. */
static const char *
range_text(const struct opt *o, char *buf, size_t n)
{
    char a[24], b[24];
    switch (o->type) {
    case OT_UINT:
        if (o->min == o->max) {
            snprintf(buf, n, "only %llu", (unsigned long long)o->min);
            break;
        }
        snprintf(buf, n, "a number from %llu to %llu",
                 (unsigned long long)o->min, (unsigned long long)o->max);
        break;
    case OT_SIZE:
        snprintf(buf, n,
                 "a size from %s to %s (bytes, or with a k, m or g "
                 "suffix)",
                 fmt_size(o->min, a, sizeof(a)),
                 fmt_size(o->max, b, sizeof(b)));
        break;
    case OT_DOUBLE:
        snprintf(buf, n, "a number from %g to %g", o->dmin, o->dmax);
        break;
    case OT_OCTAL:
        snprintf(buf, n, "an octal mask from 0 to %llo",
                 (unsigned long long)o->max);
        break;
    case OT_STR:
    case OT_LIST:
        snprintf(buf, n, "a value of 1 to %llu bytes",
                 (unsigned long long)o->max);
        break;
    case OT_BOOL:
        snprintf(buf, n, "no value, or one of 1, 0, yes, no");
        break;
    case OT_EXTPATH:
        snprintf(buf, n, "FILE:SIZE");
        break;
    default:
        snprintf(buf, n, "no value");
        break;
    }
    return buf;
}

static int
bad_value(const struct opt *o, const char *shown, const char *val)
{
    char r[128];
    if (o->bad)
        err_set("%s: %s, got '%s'", shown, o->bad, val);
    else
        err_set("%s: expected %s, got '%s'", shown, range_text(o, r, sizeof(r)),
                val);
    return -EINVAL;
}

/* --- setting one value --- */

static int
set_list(struct settings *s, const struct opt *o, const char *shown,
         const char *val)
{
    const char **dst = field(s, o);
    size_t have = *dst == s->listen_buf ? strlen(s->listen_buf) : 0;
    size_t n = strlen(val);
    if (n == 0 || have + !!have + n > o->max)
        return bad_value(o, shown, val);
    if (have)
        s->listen_buf[have++] = ',';
    memcpy(s->listen_buf + have, val, n + 1);
    *dst = s->listen_buf;
    return 0;
}

static int
set_number(struct settings *s, const struct opt *o, const char *shown,
           const char *val)
{
    uint64_t v;
    bool ok = o->type == OT_SIZE    ? parse_size(val, &v)
              : o->type == OT_OCTAL ? parse_octal(val, &v)
                                    : parse_u64(val, &v);
    if (!ok || v < o->min || v > o->max)
        return bad_value(o, shown, val);
    *(uint64_t *)field(s, o) = v;
    return 0;
}

/* FILE:SIZE (the size after the last colon), copied into s. */
static int
set_ext_path(struct settings *s, const struct opt *o, const char *shown,
             const char *val)
{
    const char *colon = strrchr(val, ':');
    uint64_t size;
    if (!colon || colon == val || !parse_size(colon + 1, &size) || !size ||
        (size_t)(colon - val) > o->max)
        return bad_value(o, shown, val);
    if (s->ext_npaths == SETTINGS_EXT_PATHS) {
        err_set("%s: at most %d paths", shown, SETTINGS_EXT_PATHS);
        return -EINVAL;
    }
    char *dst = s->ext_path[s->ext_npaths];
    memcpy(dst, val, (size_t)(colon - val));
    dst[colon - val] = '\0';
    s->ext_size[s->ext_npaths++] = size;
    return 0;
}

/* Apply val (NULL for a flag without value) to option o. */
static int
set_value(struct settings *s, const struct opt *o, const char *shown,
          const char *val)
{
    switch (o->type) {
    case OT_UINT:
    case OT_SIZE:
    case OT_OCTAL:
        return set_number(s, o, shown, val);
    case OT_DOUBLE: {
        double d;
        if (!parse_double(val, &d) || d < o->dmin || d > o->dmax)
            return bad_value(o, shown, val);
        *(double *)field(s, o) = d;
        return 0;
    }
    case OT_STR:
        if (!*val || strlen(val) > o->max)
            return bad_value(o, shown, val);
        *(const char **)field(s, o) = val;
        return 0;
    case OT_LIST:
        return set_list(s, o, shown, val);
    case OT_BOOL: {
        bool b = true;
        if (val && !parse_bool(val, &b))
            return bad_value(o, shown, val);
        *(bool *)field(s, o) = b;
        return 0;
    }
    case OT_COUNT: {
        uint64_t *c = field(s, o);
        if (*c < o->max)
            (*c)++;
        return 0;
    }
    case OT_ACTION:
        s->action = (enum settings_action)o->off;
        return 0;
    case OT_EXTPATH:
        return set_ext_path(s, o, shown, val);
    case OT_SUBOPT:
        break;
    }
    return -EINVAL; /* OT_SUBOPT is handled by parse_subopts() */
}

static bool
takes_value(const struct opt *o)
{
    return o->type != OT_BOOL && o->type != OT_COUNT && o->type != OT_ACTION;
}

static const struct opt *
find_short(char c)
{
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        if (!opts[i].sub && opts[i].flag == c)
            return &opts[i];
    return NULL;
}

static const struct opt *
find_name(const char *name, size_t n, bool sub)
{
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        if (opts[i].sub == sub && strlen(opts[i].name) == n &&
            !memcmp(opts[i].name, name, n))
            return &opts[i];
    return NULL;
}

/* --- -o name=value[,name=value...] --- */

static int
parse_subopt(struct settings *s, const char *item)
{
    const char *eq = strchr(item, '=');
    size_t n = eq ? (size_t)(eq - item) : strlen(item);
    const struct opt *o = find_name(item, n, true);
    char shown[80];
    if (!o) {
        err_set("-o: unknown option '%.*s' (tiercached -h lists them)",
                (int)MIN(n, 64), item);
        return -EINVAL;
    }
    snprintf(shown, sizeof(shown), "-o %s", o->name);
    if (!eq && takes_value(o)) {
        char r[128];
        err_set("%s: needs a value: %s", shown, range_text(o, r, sizeof(r)));
        return -EINVAL;
    }
    /* the value lives in a copy of the item: only numbers and booleans are
     * -o options, so nothing keeps pointing into it */
    return set_value(s, o, shown, eq ? eq + 1 : NULL);
}

static int
parse_subopts(struct settings *s, const char *list)
{
    char item[256];
    const char *p = list;
    if (!*p) {
        err_set("-o: expected name=value[,name=value...], got ''");
        return -EINVAL;
    }
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n >= sizeof(item)) {
            err_set("-o: option '%.40s...' is too long", p);
            return -EINVAL;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        if (n) {
            int rc = parse_subopt(s, item);
            if (rc)
                return rc;
        }
        if (!end)
            return 0;
        p = end + 1;
    }
}

/* --- argv --- */

static int
apply(struct settings *s, const struct opt *o, const char *shown,
      const char *val)
{
    if (o->flag == 'p')
        s->port_given = true;
    if (o->type == OT_SUBOPT)
        return parse_subopts(s, val);
    return set_value(s, o, shown, val);
}

static int
missing_value(const struct opt *o, const char *shown)
{
    char r[128];
    if (o->type == OT_SUBOPT)
        err_set("%s: needs a value: name=value[,name=value...]", shown);
    else if (o->bad)
        err_set("%s: needs a value (%s)", shown, o->bad);
    else
        err_set("%s: needs a value: %s", shown, range_text(o, r, sizeof(r)));
    return -EINVAL;
}

/* --name, --name=value or --name value. *i advances past a value taken. */
static int
parse_long(struct settings *s, int argc, char *const argv[], int *i)
{
    const char *a = argv[*i] + 2;
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    const struct opt *o = find_name(a, n, false);
    char shown[48];
    if (!o) {
        err_set("unknown flag '--%.*s' (tiercached -h lists the flags)",
                (int)MIN(n, 32), a);
        return -EINVAL;
    }
    snprintf(shown, sizeof(shown), "--%s", o->name);
    if (!takes_value(o)) {
        if (eq) {
            err_set("%s: takes no value, got '%s'", shown, eq + 1);
            return -EINVAL;
        }
        return apply(s, o, shown, NULL);
    }
    if (eq)
        return apply(s, o, shown, eq + 1);
    if (*i + 1 >= argc)
        return missing_value(o, shown);
    return apply(s, o, shown, argv[++*i]);
}

/* -x, -xVALUE, -x VALUE, or bundled flags without values (-vv, -Mv). */
static int
parse_short(struct settings *s, int argc, char *const argv[], int *i)
{
    const char *a = argv[*i];
    for (int j = 1; a[j]; j++) {
        const struct opt *o = find_short(a[j]);
        char shown[4] = {'-', a[j], '\0', '\0'};
        if (!o) {
            err_set("unknown flag '-%c' (tiercached -h lists the flags)", a[j]);
            return -EINVAL;
        }
        if (!takes_value(o)) {
            int rc = apply(s, o, shown, NULL);
            if (rc || s->action != SETTINGS_RUN)
                return rc;
            continue;
        }
        if (a[j + 1])
            return apply(s, o, shown, a + j + 1);
        if (*i + 1 >= argc)
            return missing_value(o, shown);
        return apply(s, o, shown, argv[++*i]);
    }
    return 0;
}

/* --- checks across options, computed values --- */

uint32_t
settings_min_chunk(const struct settings *s)
{
    return (uint32_t)ALIGN_UP(s->chunk_size + TC_ITEM_HEADER_SIZE, 8ull);
}

static int
check_slabs(const struct settings *s)
{
    /* the engine chains an item over at most TC_ITEM_MAX_TAILS tails of
     * slab_chunk_max - TC_ITEM_TAIL_HEADER_SIZE bytes each */
    uint64_t per_tail = s->slab_chunk_max - TC_ITEM_TAIL_HEADER_SIZE;
    uint64_t item_max = TC_ITEM_MAX_TAILS * per_tail - 1;
    if (s->slab_chunk_max % 8) {
        err_set("-o slab_chunk_max: expected a multiple of 8, got %llu",
                (unsigned long long)s->slab_chunk_max);
        return -EINVAL;
    }
    if (s->item_size_max > item_max) {
        err_set("-I: at most %llu bytes with -o slab_chunk_max=%llu (raise "
                "slab_chunk_max, up to 1m), got %llu",
                (unsigned long long)item_max,
                (unsigned long long)s->slab_chunk_max,
                (unsigned long long)s->item_size_max);
        return -EINVAL;
    }
    if (settings_min_chunk(s) > s->slab_chunk_max) {
        err_set("-n: %llu plus the %d-byte item header is more than "
                "slab_chunk_max %llu",
                (unsigned long long)s->chunk_size, TC_ITEM_HEADER_SIZE,
                (unsigned long long)s->slab_chunk_max);
        return -EINVAL;
    }
    return 0;
}

static int
check_pool(const struct settings *s)
{
    if (s->pool_size % MIB) {
        err_set("-o pool_size: expected whole MiB, got %llu bytes",
                (unsigned long long)s->pool_size);
        return -EINVAL;
    }
    if (s->pool_size && s->pool_size < s->maxbytes_mib * MIB) {
        err_set("-o pool_size: %llu MiB is less than -m %llu",
                (unsigned long long)(s->pool_size / MIB),
                (unsigned long long)s->maxbytes_mib);
        return -EINVAL;
    }
    return 0;
}

static int
check_ext(const struct settings *s)
{
    if (s->ext_page_size % s->ext_wbuf_size) {
        err_set("-o ext_page_size: %llu MiB is not a multiple of "
                "ext_wbuf_size %llu MiB",
                (unsigned long long)s->ext_page_size,
                (unsigned long long)s->ext_wbuf_size);
        return -EINVAL;
    }
    for (unsigned i = 0; i < s->ext_npaths; i++) {
        if (s->ext_size[i] < s->ext_page_size * MIB) {
            err_set("-o ext_path: %s: %llu bytes do not hold one segment "
                    "of ext_page_size %llu MiB",
                    s->ext_path[i], (unsigned long long)s->ext_size[i],
                    (unsigned long long)s->ext_page_size);
            return -EINVAL;
        }
    }
    return 0;
}

static int
finish(struct settings *s)
{
    /* memcached: -s turns the network off; tiercached keeps TCP when -p is
     * also given */
    if (s->unix_path && !s->port_given)
        s->port = 0;
    if (s->port == 0 && !s->unix_path) {
        err_set("-p: 0 turns TCP off and no -s unix socket was given, so "
                "there is nothing to listen on");
        return -EINVAL;
    }
    if (s->worker_slice_us && s->worker_slice_us < 100) {
        err_set("-o worker_slice_us: %llu is below the kernel's floor of "
                "100 (0 = the kernel's default slice)",
                (unsigned long long)s->worker_slice_us);
        return -EINVAL;
    }
    int rc = check_slabs(s);
    if (!rc)
        rc = check_pool(s);
    if (!rc)
        rc = check_ext(s);
    if (rc)
        return rc;
    if (!s->pool_path) {
        snprintf(s->pool_buf, sizeof(s->pool_buf),
                 "/dev/shm/tiercache.%llu.pool", (unsigned long long)s->port);
        s->pool_path = s->pool_buf;
    }
    return 0;
}

/* --- public --- */

void
settings_init(struct settings *s)
{
    memset(s, 0, sizeof(*s));
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++) {
        const struct opt *o = &opts[i];
        if (!o->def)
            continue;
        if (o->type == OT_LIST) {
            /* not in listen_buf: the first -l replaces the default, later
             * ones append */
            *(const char **)field(s, o) = o->def;
            continue;
        }
        int rc = set_value(s, o, o->name, o->def);
        (void)rc; /* the table's defaults are in range */
    }
}

int
settings_parse(struct settings *s, int argc, char *const argv[])
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        if (a[0] != '-' || a[1] == '\0') {
            err_set("unexpected argument '%.64s' (tiercached -h lists the "
                    "flags)",
                    a);
            return -EINVAL;
        }
        if (a[1] == '-')
            rc = parse_long(s, argc, argv, &i);
        else
            rc = parse_short(s, argc, argv, &i);
        if (rc)
            return rc;
        if (s->action != SETTINGS_RUN)
            return 0; /* -h, -V: the rest does not matter */
    }
    return finish(s);
}

/* --- --help --- */

static void
help_line(FILE *f, const struct opt *o)
{
    char r[128];
    if (o->sub)
        fprintf(f, "  %s%s%s\n", o->name, o->arg ? "=" : "",
                o->arg ? o->arg : "");
    else
        fprintf(f, "  -%c, --%s%s%s\n", o->flag, o->name, o->arg ? " " : "",
                o->arg ? o->arg : "");
    fprintf(f, "        %s\n", o->help);
    if (o->type == OT_SUBOPT || o->type == OT_ACTION)
        return;
    if (o->type == OT_BOOL || o->type == OT_COUNT)
        fprintf(f, "        default %s\n", o->def ? "on" : "off");
    else if (o->def)
        fprintf(f, "        default %s; %s\n", o->def,
                range_text(o, r, sizeof(r)));
    else
        fprintf(f, "        %s\n", range_text(o, r, sizeof(r)));
}

void
settings_help(FILE *f)
{
    fprintf(f, "Usage: tiercached [flags]\n"
               "tiercached " TC_RELEASE ", a memcached-compatible cache "
               "server over persistent memory.\n\nFlags:\n");
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        if (!opts[i].sub)
            help_line(f, &opts[i]);
    fprintf(f, "\n-o options (-o name=value[,name=value...], or -o name "
               "for a switch):\n");
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        if (opts[i].sub)
            help_line(f, &opts[i]);
    fprintf(f, "\nA bad flag or value exits with status 64 and one line "
               "saying what is allowed.\n");
}

/* --- stats settings --- */

static int
render_one(const struct settings *s, const struct opt *o, struct obuf *out)
{
    const void *v = cfield(s, o);
    switch (o->show) {
    case SHOW_NONE:
        return 0;
    case SHOW_NUM:
        if (o->type == OT_DOUBLE)
            return obuf_printf(out, "STAT %s %.2f\r\n", o->stat,
                               *(const double *)v);
        return obuf_printf(out, "STAT %s %llu\r\n", o->stat,
                           (unsigned long long)*(const uint64_t *)v);
    case SHOW_MIB:
        return obuf_printf(out, "STAT %s %llu\r\n", o->stat,
                           (unsigned long long)(*(const uint64_t *)v << 20));
    case SHOW_STR: {
        const char *str = *(const char *const *)v;
        return obuf_printf(out, "STAT %s %s\r\n", o->stat, str ? str : "NULL");
    }
    case SHOW_OCTAL:
        return obuf_printf(out, "STAT %s %llo\r\n", o->stat,
                           (unsigned long long)*(const uint64_t *)v);
    case SHOW_YESNO:
    case SHOW_NOT_YESNO:
        return obuf_printf(out, "STAT %s %s\r\n", o->stat,
                           *(const bool *)v == (o->show == SHOW_YESNO) ? "yes"
                                                                       : "no");
    case SHOW_NOT_ONOFF:
        return obuf_printf(out, "STAT %s %s\r\n", o->stat,
                           *(const bool *)v ? "off" : "on");
    }
    return 0;
}

int
settings_render(const struct settings *s, struct obuf *out)
{
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        render_one(s, &opts[i], out);
    obuf_printf(out, "STAT num_threads_per_udp %llu\r\n",
                (unsigned long long)s->threads);
    for (unsigned i = 0; i < ARRAY_SIZE(fixed_stats); i++)
        obuf_printf(out, "STAT %s %s\r\n", fixed_stats[i][0],
                    fixed_stats[i][1]);
    obuf_printf(out, "STAT tc_min_chunk %u\r\n", settings_min_chunk(s));
    return out->err;
}

/*
 * bench_loadgen's command line: one table (name, argument, help, kind,
 * field, bounds) drives parsing, the bounds checks and --help. See
 * loadgen.h.
 */

#include "perf/loadgen/loadgen.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- options, report, main ---------------------------------------------- */

enum lg_kind { LG_K_UINT, LG_K_U64, LG_K_DBL, LG_K_STR, LG_K_FLAG, LG_K_FN };

struct lg_optdef {
    const char *name, *arg, *help;
    enum lg_kind kind;
    size_t off; /* field of struct lg_opts */
    double min, max;
};

#define LG_OFF(f) offsetof(struct lg_opts, f)
static const struct lg_optdef lg_optdefs[] = {
    {"host", "H", "server address [127.0.0.1]", LG_K_STR, LG_OFF(host), 0, 0},
    {"port", "P", "server port [11211]", LG_K_UINT, LG_OFF(port), 1, 65535},
    {"conns", "N", "connections [16]", LG_K_UINT, LG_OFF(conns), 1,
     LG_MAX_CONNS},
    {"threads", "T", "client threads, one epoll loop each [1]", LG_K_UINT,
     LG_OFF(threads), 1, LG_MAX_THREADS},
    {"keys", "K", "key space [100000]", LG_K_U64, LG_OFF(keys), 1, 1e12},
    {"value-size", "V", "bytes per value [100]", LG_K_UINT, LG_OFF(vsize), 1,
     LG_MAX_VALUE},
    {"ratio", "G:S[:D]", "gets : sets [: deletes] [9:1]", LG_K_FN, 0, 0, 0},
    {"pipeline", "D", "requests in flight per connection [1]", LG_K_UINT,
     LG_OFF(pipeline), 1, LG_MAX_PIPELINE},
    {"multiget", "M", "keys per get [1]", LG_K_UINT, LG_OFF(multiget), 1,
     LG_MAX_MULTIGET},
    {"duration", "S", "measured seconds [10]", LG_K_DBL, LG_OFF(duration),
     0.001, 86400},
    {"warmup", "on|off|S",
     "set every key once first, at most S seconds (on = 120) [on]", LG_K_FN, 0,
     0, 0},
    {"warmup-rate", "N",
     "load at most N sets/s (all threads), so that a server's background "
     "writer can keep up [0 = unlimited]",
     LG_K_DBL, LG_OFF(warm_rate), 0, 1e9},
    {"key-dist", "D", "uniform | zipf [uniform]", LG_K_FN, 0, 0, 0},
    {"zipf-s", "S", "zipf exponent [0.99]", LG_K_DBL, LG_OFF(zipf_s), 0.001,
     10},
    {"seed", "N", "random seed [1]", LG_K_U64, LG_OFF(seed), 0, 1e15},
    {"max-requests", "N", "bound on the run, per thread [1e12]", LG_K_U64,
     LG_OFF(max_requests), 1, 1e15},
    {"binary", NULL, "memcached binary protocol", LG_K_FLAG, LG_OFF(binary), 0,
     0},
    {"label", "NAME", "server name in the RESULT line [host:port]", LG_K_STR,
     LG_OFF(label), 0, 0},
    {"server-pid", "PID", "report that process's CPU time per request",
     LG_K_U64, LG_OFF(server_pid), 1, 4194304},
    {"help", NULL, "this text", LG_K_FN, 0, 0, 0},
};
#define LG_NOPTS (sizeof(lg_optdefs) / sizeof(lg_optdefs[0]))

static void
lg_usage(FILE *f)
{
    fprintf(f, "usage: bench_loadgen [options]\n");
    for (unsigned i = 0; i < LG_NOPTS; i++) {
        const struct lg_optdef *d = &lg_optdefs[i];
        char left[40];

        snprintf(left, sizeof(left), "--%s %s", d->name, d->arg ? d->arg : "");
        fprintf(f, "  %-24s %s\n", left, d->help);
    }
}

/* The options that are not a plain number, string or flag. */
static int
lg_parse_special(const char *name, const char *arg, struct lg_opts *o)
{
    char *end;

    if (strcmp(name, "ratio") == 0) {
        unsigned long g = strtoul(arg, &end, 10), s, d = 0;

        if (end == arg || *end != ':')
            return -1;
        s = strtoul(end + 1, &end, 10);
        if (*end == ':')
            d = strtoul(end + 1, &end, 10);
        if (*end != '\0' || g + s + d == 0 || g > 1000000 || s > 1000000 ||
            d > 1000000)
            return -1;
        o->ratio_get = (unsigned)g;
        o->ratio_set = (unsigned)s;
        o->ratio_del = (unsigned)d;
    } else if (strcmp(name, "warmup") == 0) {
        if (strcmp(arg, "on") == 0) {
            o->warm_seconds = 120;
        } else if (strcmp(arg, "off") == 0) {
            o->warm_seconds = 0;
        } else {
            o->warm_seconds = strtod(arg, &end);
            if (end == arg || *end != '\0' || !(o->warm_seconds >= 0) ||
                o->warm_seconds > 86400)
                return -1;
        }
    } else if (strcmp(name, "key-dist") == 0) {
        if (strcmp(arg, "uniform") == 0)
            o->dist = LG_UNIFORM;
        else if (strcmp(arg, "zipf") == 0)
            o->dist = LG_ZIPF;
        else
            return -1;
    } else if (strcmp(name, "help") == 0) {
        lg_usage(stdout);
        exit(0);
    }
    return 0;
}

static int
lg_parse_one(const struct lg_optdef *d, const char *arg, struct lg_opts *o)
{
    char *field = (char *)o + d->off, *end;
    double v = 0;

    if (d->kind == LG_K_FN)
        return lg_parse_special(d->name, arg, o);
    if (d->kind == LG_K_FLAG) {
        *(bool *)field = true;
        return 0;
    }
    if (d->kind == LG_K_STR) {
        /* both string fields are arrays of at least 64 bytes */
        snprintf(field, 64, "%s", arg);
        return 0;
    }
    errno = 0;
    v = strtod(arg, &end); /* accepts 1e6 */
    if (errno != 0 || end == arg || *end != '\0' || !(v >= d->min) ||
        v > d->max || (d->kind != LG_K_DBL && v != floor(v)))
        return -1;
    if (d->kind == LG_K_UINT)
        *(unsigned *)field = (unsigned)v;
    else if (d->kind == LG_K_U64)
        *(uint64_t *)field = (uint64_t)v;
    else
        *(double *)field = v;
    return 0;
}

int
lg_parse_args(int argc, char **argv, struct lg_opts *o)
{
    struct option lo[LG_NOPTS + 1];
    int ch, idx;

    memset(lo, 0, sizeof(lo));
    for (unsigned i = 0; i < LG_NOPTS; i++) {
        lo[i].name = lg_optdefs[i].name;
        lo[i].has_arg = lg_optdefs[i].arg ? required_argument : no_argument;
        lo[i].val = 256 + (int)i;
    }
    memset(o, 0, sizeof(*o));
    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    o->port = 11211;
    o->conns = 16;
    o->threads = 1;
    o->keys = 100000;
    o->vsize = 100;
    o->ratio_get = 9;
    o->ratio_set = 1;
    o->pipeline = 1;
    o->multiget = 1;
    o->duration = 10;
    o->warm_seconds = 120;
    o->dist = LG_UNIFORM;
    o->zipf_s = 0.99;
    o->seed = 1;
    o->max_requests = 1000000000000ull;

    while ((ch = getopt_long(argc, argv, "h", lo, &idx)) != -1) {
        if (ch == 'h')
            lg_parse_special("help", "", o);
        if (ch < 256) {
            lg_usage(stderr);
            return -1;
        }
        if (lg_parse_one(&lg_optdefs[ch - 256], optarg, o) != 0) {
            fprintf(stderr, "bench_loadgen: bad value '%s' for --%s\n", optarg,
                    lg_optdefs[ch - 256].name);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "bench_loadgen: unexpected argument '%s'\n",
                argv[optind]);
        return -1;
    }
    if (o->threads > o->conns) {
        fprintf(stderr, "bench_loadgen: %u threads for %u conns: using %u\n",
                o->threads, o->conns, o->conns);
        o->threads = o->conns;
    }
    if (o->multiget > o->keys) {
        fprintf(stderr, "bench_loadgen: --multiget is larger than --keys\n");
        return -1;
    }
    if (o->binary && o->ratio_del) {
        fprintf(stderr, "bench_loadgen: deletes are text protocol only\n");
        return -1;
    }
    if (o->label[0] == '\0')
        snprintf(o->label, sizeof(o->label), "%.40s:%u", o->host, o->port);
    return 0;
}

/*
 * bench_loadgen's figures: the latency histogram (log buckets, 32 sub-buckets
 * per power of two), the server's and the client's CPU time, the totals
 * summed over threads and the report (a human line and the RESULT line).
 * See loadgen.h.
 */

#include "perf/loadgen/loadgen.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- latency histogram ------------------------------------------------ */

unsigned
lg_hist_index(uint64_t v)
{
    unsigned e;

    if (v < LG_HIST_SUB)
        return (unsigned)v;
    e = 63u - (unsigned)__builtin_clzll(v); /* >= LG_HIST_SUB_BITS */
    return (e - LG_HIST_SUB_BITS + 1) * LG_HIST_SUB +
           (unsigned)((v >> (e - LG_HIST_SUB_BITS)) & (LG_HIST_SUB - 1));
}

/* Middle of bucket idx, in the histogram's unit (ns). */
static double
lg_hist_value(unsigned idx)
{
    unsigned e, m;
    double lo, width;

    if (idx < LG_HIST_SUB)
        return idx;
    e = idx / LG_HIST_SUB + LG_HIST_SUB_BITS - 1;
    m = idx % LG_HIST_SUB + LG_HIST_SUB;
    width = ldexp(1.0, (int)(e - LG_HIST_SUB_BITS));
    lo = m * width;
    return lo + width / 2;
}

static double
lg_hist_pct(const uint64_t *h, uint64_t total, double p)
{
    uint64_t want, acc = 0;

    if (total == 0)
        return 0;
    want = (uint64_t)ceil(p * (double)total);
    if (want == 0)
        want = 1;
    for (unsigned i = 0; i < LG_HIST_N; i++) {
        acc += h[i];
        if (acc >= want)
            return lg_hist_value(i);
    }
    return lg_hist_value(LG_HIST_N - 1);
}

/* utime and stime of a process, in clock ticks: 0, or -1 if unreadable. */
int
lg_proc_ticks(uint64_t pid, struct lg_ticks *t)
{
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%" PRIu64 "/stat", pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* comm may hold spaces */
    if (p == NULL)
        return -1;
    /* after ") ": state(3) ppid pgrp session tty tpgid flags minflt
     * cminflt majflt cmajflt utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
               &ut, &st) != 2)
        return -1;
    t->user = (long long)ut;
    t->sys = (long long)st;
    return 0;
}

double
lg_self_cpu(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

void
lg_sum(const struct lg_thread *ths, struct lg_total *s)
{
    for (unsigned t = 0; t < lg_o.threads; t++) {
        const struct lg_thread *th = &ths[t];

        s->reqs += th->reqs;
        s->get_keys += th->get_keys;
        s->hits += th->hits;
        s->sets += th->sets;
        s->dels += th->dels;
        s->err_proto += th->err_proto;
        s->err_data += th->err_data;
        s->err_server += th->err_server;
        s->err_conn += th->err_conn;
        s->warm_resets += th->warm_resets;
        s->connects += th->connects;
        s->warm_incomplete |= th->warm_incomplete;
        if (th->last_done > s->t_end)
            s->t_end = th->last_done;
        for (unsigned i = 0; i < LG_HIST_N; i++)
            s->hist[i] += th->hist[i];
        for (unsigned i = 0; i < th->nconns; i++)
            s->dead += th->conns[i].dead;
    }
}

void
lg_report(const struct lg_opts *o, const struct lg_total *s)
{
    uint64_t ops = s->get_keys + s->sets + s->dels;
    uint64_t errors = s->err_proto + s->err_data + s->err_conn;
    double p50 = lg_hist_pct(s->hist, s->reqs, 0.50) / 1e3;
    double p99 = lg_hist_pct(s->hist, s->reqs, 0.99) / 1e3;
    double p999 = lg_hist_pct(s->hist, s->reqs, 0.999) / 1e3;
    double pmax = lg_hist_pct(s->hist, s->reqs, 1.0) / 1e3;
    double hit = s->get_keys ? (double)s->hits / (double)s->get_keys : 0;
    const char *proto = o->binary ? "binary" : "text";
    const char *dist = o->dist == LG_ZIPF ? "zipf" : "uniform";
    char srv[200] = "", srvr[240] = "", del[16] = "";

    if (o->ratio_del)
        snprintf(del, sizeof(del), ":%u", o->ratio_del);

    if (s->srv_cpu >= 0 && s->reqs > 0) {
        double per_req = s->srv_cpu * 1e6 / (double)s->reqs;
        double per_op = s->srv_cpu * 1e6 / (double)ops;
        double user_req = s->srv_user * 1e6 / (double)s->reqs;
        double sys_req = s->srv_sys * 1e6 / (double)s->reqs;

        snprintf(srv, sizeof(srv),
                 "; server CPU %.2f us/req (user %.2f, kernel %.2f) "
                 "%.2f us/op (%.2f cores)",
                 per_req, user_req, sys_req, per_op, s->srv_cpu / s->secs);
        snprintf(srvr, sizeof(srvr),
                 " srv_cpu_us_per_req=%.3f srv_user_us_per_req=%.3f "
                 "srv_sys_us_per_req=%.3f srv_cpu_us_per_op=%.3f "
                 "srv_cores=%.3f",
                 per_req, user_req, sys_req, per_op, s->srv_cpu / s->secs);
    }
    printf("net %s %s: %u conns %u thr, %" PRIu64 " keys %s, %u B values, "
           "get:set%s %u:%u%s, pipeline %u, multiget %u%s\n",
           o->label, proto, o->conns, o->threads, o->keys, dist, o->vsize,
           o->ratio_del ? ":delete" : "", o->ratio_get, o->ratio_set, del,
           o->pipeline, o->multiget, o->warm_seconds > 0 ? "" : ", no warmup");
    if (o->warm_seconds > 0)
        printf("  warmup: %" PRIu64 " keys in %.2f s, %" PRIu64
               " connection resets%s\n",
               o->keys, s->warm_secs, s->warm_resets,
               s->warm_incomplete ? " (INCOMPLETE: bound hit or connection "
                                    "lost)"
                                  : "");
    printf("  %.0f ops/s, %.0f req/s over %.2f s; latency/req p50 %.1f us "
           "p99 %.1f us p99.9 %.1f us max %.1f us; hit %.2f%%\n",
           (double)ops / s->secs, (double)s->reqs / s->secs, s->secs, p50, p99,
           p999, pmax, hit * 100);
    printf("  errors %" PRIu64 " (proto %" PRIu64 ", data %" PRIu64
           ", conn %" PRIu64 "), server errors %" PRIu64
           "; client CPU %.2f cores%s\n",
           errors, s->err_proto, s->err_data, s->err_conn, s->err_server,
           s->cli_cpu / s->secs, srv);
    printf("RESULT bench=net server=%s proto=%s conns=%u threads=%u "
           "keys=%" PRIu64 " dist=%s value=%u ratio=%u:%u%s pipeline=%u "
           "multiget=%u secs=%.2f ops=%.0f reqs=%.0f p50_us=%.1f "
           "p99_us=%.1f p999_us=%.1f max_us=%.1f hit=%.4f errors=%" PRIu64
           " proto_errors=%" PRIu64 " data_errors=%" PRIu64
           " conn_errors=%" PRIu64 " server_errors=%" PRIu64
           " dead_conns=%" PRIu64 " warm_s=%.3f cli_cores=%.3f%s\n",
           o->label, proto, o->conns, o->threads, o->keys, dist, o->vsize,
           o->ratio_get, o->ratio_set, del, o->pipeline, o->multiget, s->secs,
           (double)ops / s->secs, (double)s->reqs / s->secs, p50, p99, p999,
           pmax, hit, errors, s->err_proto, s->err_data, s->err_conn,
           s->err_server, s->dead, s->warm_secs, s->cli_cpu / s->secs, srvr);
}

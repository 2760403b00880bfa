/*
 * bench_loadgen: main() and the threads. Each thread runs one epoll loop
 * over its connections through the phases (connect, WARMUP, RUN, drain),
 * meeting main at the barrier between them. See loadgen.h for the whole
 * picture.
 */

#include "perf/loadgen/loadgen.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

struct lg_opts lg_o;
pthread_barrier_t lg_barrier;
uint64_t lg_start_ns, lg_deadline_ns, lg_warm_deadline_ns;

/* ---- thread ------------------------------------------------------------- */

static bool
lg_all_idle(struct lg_thread *th)
{
    for (unsigned i = 0; i < th->nconns; i++)
        if (!th->conns[i].dead && th->conns[i].count > 0)
            return false;
    return true;
}

static void
lg_loop(struct lg_thread *th, uint64_t until)
{
    struct epoll_event evs[64];
    uint64_t spins = 0;

    for (unsigned i = 0; i < th->nconns; i++) {
        lg_fill(&th->conns[i]);
        lg_flush(&th->conns[i]);
    }
    while (spins++ < (1ull << 40)) {
        int n = epoll_wait(th->ep, evs, 64, 10);

        th->now = lg_nsec();
        for (int i = 0; i < n; i++) {
            struct lg_conn *c = evs[i].data.ptr;
            if (c->dead || c->fd < 0)
                continue;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                lg_on_readable(c);
            else if (evs[i].events & EPOLLOUT)
                lg_flush(c);
        }
        if (th->need_refill) {
            th->need_refill = false;
            for (unsigned i = 0; i < th->nconns; i++)
                if (!th->conns[i].dead && th->conns[i].count == 0) {
                    lg_fill(&th->conns[i]);
                    lg_flush(&th->conns[i]);
                }
        }
        if (th->now >= until)
            break;
        if (th->mode == LG_WARM) {
            if (th->warm_next >= th->o->keys && th->warm_pending == 0)
                break;
            if (th->now >= lg_warm_deadline_ns && lg_all_idle(th))
                break;
            /* connections that ran dry while others still load */
            for (unsigned i = 0; i < th->nconns; i++)
                if (th->conns[i].count == 0 && th->warm_next < th->o->keys) {
                    lg_fill(&th->conns[i]);
                    lg_flush(&th->conns[i]);
                }
        } else if (th->now >= lg_deadline_ns ||
                   th->issued >= th->o->max_requests) {
            if (lg_all_idle(th))
                break;
        }
    }
}

static void *
lg_thread_main(void *arg)
{
    struct lg_thread *th = arg;

    th->ep = epoll_create1(EPOLL_CLOEXEC);
    for (unsigned i = 0; i < th->nconns; i++) {
        if (th->ep < 0 || lg_conn_open(&th->conns[i]) != 0) {
            th->conns[i].dead = true;
            th->err_conn++;
        }
    }
    pthread_barrier_wait(&lg_barrier); /* connected */
    if (th->o->warm_seconds > 0) {
        th->mode = LG_WARM;
        th->warm_next = th->id;
        th->now = lg_nsec();
        th->warm_t0 = th->now;
        lg_loop(th, lg_warm_deadline_ns + LG_DRAIN_NS);
        if (th->warm_next < th->o->keys || th->warm_pending != 0)
            th->warm_incomplete = true;
        /* requests still in flight (deadline hit): reset those conns */
        for (unsigned i = 0; i < th->nconns; i++)
            if (!th->conns[i].dead && th->conns[i].count > 0)
                lg_conn_reset(&th->conns[i]);
    }
    pthread_barrier_wait(&lg_barrier); /* loaded */
    pthread_barrier_wait(&lg_barrier); /* main set the RUN clock */
    th->mode = LG_RUN;
    th->now = lg_nsec();
    lg_loop(th, lg_deadline_ns + LG_DRAIN_NS);
    th->mode = LG_DONE;
    for (unsigned i = 0; i < th->nconns; i++) {
        struct lg_conn *c = &th->conns[i];
        th->err_conn += c->dead ? 0 : c->count; /* still in flight */
        if (c->fd >= 0)
            close(c->fd);
    }
    if (th->ep >= 0)
        close(th->ep);
    return NULL;
}

static int
lg_threads_setup(struct lg_thread *ths)
{
    const struct lg_opts *o = &lg_o;
    unsigned cap = o->pipeline > LG_WARM_DEPTH ? o->pipeline : LG_WARM_DEPTH;

    for (unsigned t = 0; t < o->threads; t++) {
        struct lg_thread *th = &ths[t];

        th->id = t;
        th->o = o;
        th->ep = -1;
        th->mode = LG_CONNECT;
        th->rng = o->seed * 0x100000001B3ull + t + 1;
        th->nconns = o->conns / o->threads + (t < o->conns % o->threads);
        th->conns = calloc(th->nconns, sizeof(*th->conns));
        th->value = malloc(o->vsize + LG_KEY_LEN);
        if (th->conns == NULL || th->value == NULL)
            return -ENOMEM;
        memset(th->value, 'v', o->vsize + LG_KEY_LEN);
        for (unsigned i = 0; i < th->nconns; i++) {
            struct lg_conn *c = &th->conns[i];

            c->fd = -1;
            c->th = th;
            c->cap = cap;
            c->wcap = 65536;
            c->rcap = 4 * LG_READ_CHUNK;
            c->wbuf = malloc(c->wcap);
            c->rbuf = malloc(c->rcap);
            c->ring = calloc(cap, sizeof(*c->ring));
            c->ring_keys =
                calloc((size_t)cap * o->multiget, sizeof(*c->ring_keys));
            if (c->wbuf == NULL || c->rbuf == NULL || c->ring == NULL ||
                c->ring_keys == NULL)
                return -ENOMEM;
        }
    }
    return 0;
}

static void
lg_threads_free(struct lg_thread *ths)
{
    for (unsigned t = 0; t < lg_o.threads; t++) {
        for (unsigned i = 0; ths[t].conns != NULL && i < ths[t].nconns; i++) {
            free(ths[t].conns[i].wbuf);
            free(ths[t].conns[i].rbuf);
            free(ths[t].conns[i].ring);
            free(ths[t].conns[i].ring_keys);
        }
        free(ths[t].conns);
        free(ths[t].value);
    }
}

int
main(int argc, char **argv)
{
    static const char hex[16] = "0123456789abcdef";
    static struct lg_total tot;
    struct lg_opts *o = &lg_o;
    struct lg_thread *ths;
    struct lg_ticks tick0, tick1;
    bool ticks = false;
    uint64_t t_warm0;
    double cpu0;

    if (lg_parse_args(argc, argv, o) != 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < 256; i++) {
        lg_hex2[i][0] = hex[i >> 4];
        lg_hex2[i][1] = hex[i & 15];
    }
    if (o->dist == LG_ZIPF) {
        if (lg_zipf_setup(o->keys, o->zipf_s) != 0) {
            fprintf(stderr, "bench_loadgen: no memory for the zipf table\n");
            return 1;
        }
        while (lg_gcd(lg_zipf_mult % o->keys, o->keys) != 1)
            lg_zipf_mult += 2;
    }
    ths = aligned_alloc(64, sizeof(*ths) * o->threads);
    if (ths == NULL || (memset(ths, 0, sizeof(*ths) * o->threads),
                        lg_threads_setup(ths) != 0)) {
        fprintf(stderr, "bench_loadgen: out of memory\n");
        return 1;
    }
    pthread_barrier_init(&lg_barrier, NULL, o->threads + 1);
    /* the warmup bound counts from here, connecting included */
    lg_warm_deadline_ns = lg_nsec() + (uint64_t)(o->warm_seconds * 1e9);
    for (unsigned t = 0; t < o->threads; t++) {
        if (pthread_create(&ths[t].tid, NULL, lg_thread_main, &ths[t]) != 0) {
            fprintf(stderr, "bench_loadgen: pthread_create failed\n");
            return 1;
        }
    }
    pthread_barrier_wait(&lg_barrier); /* connected */
    t_warm0 = lg_nsec();
    pthread_barrier_wait(&lg_barrier); /* loaded */
    tot.warm_secs = (double)(lg_nsec() - t_warm0) / 1e9;
    if (o->server_pid > 0)
        ticks = lg_proc_ticks(o->server_pid, &tick0) == 0;
    cpu0 = lg_self_cpu();
    lg_start_ns = lg_nsec();
    lg_deadline_ns = lg_start_ns + (uint64_t)(o->duration * 1e9);
    pthread_barrier_wait(&lg_barrier); /* go */
    for (unsigned t = 0; t < o->threads; t++)
        pthread_join(ths[t].tid, NULL);
    if (ticks)
        ticks = lg_proc_ticks(o->server_pid, &tick1) == 0;
    tot.cli_cpu = lg_self_cpu() - cpu0;

    lg_sum(ths, &tot);
    lg_threads_free(ths);
    free(ths);
    free(lg_zipf_cdf);
    if (tot.connects == 0) {
        fprintf(stderr,
                "bench_loadgen: no connection to %s:%u could be "
                "made\n",
                o->host, o->port);
        return 1;
    }
    /* measured time: to the last reply (the drain included) */
    tot.secs = tot.t_end > lg_start_ns ? (double)(tot.t_end - lg_start_ns) / 1e9
                                       : o->duration;
    tot.srv_cpu = -1;
    if (ticks && tick1.user >= tick0.user && tick1.sys >= tick0.sys) {
        double hz = (double)sysconf(_SC_CLK_TCK);

        tot.srv_user = (double)(tick1.user - tick0.user) / hz;
        tot.srv_sys = (double)(tick1.sys - tick0.sys) / hz;
        tot.srv_cpu = tot.srv_user + tot.srv_sys;
    }
    lg_report(o, &tot);
    return tot.err_proto + tot.err_data + tot.err_conn > 0 ? 3 : 0;
}

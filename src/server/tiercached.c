/*
 * tiercached: the memcached-compatible server. Parses the settings, opens
 * the cache on the PMEM pool, runs the server until SIGINT, SIGTERM or the
 * shutdown command, closes the cache (marking the pool clean) and exits 0.
 *
 * Exit status: 0 after a clean shutdown (and after -h, -V); 64 for a bad
 * flag or value (one line on stderr naming it); 1 when the cache or the
 * server cannot start (one line saying why).
 *
 * Concurrency: main() runs before and after every other thread; it blocks
 * SIGINT and SIGTERM before the first one starts, so every thread inherits
 * the mask and the signals reach only the acceptor's signalfd.
 */

#include "src/base/err.h"
#include "src/base/log.h"
#include "src/server/server.h"
#include "src/server/settings.h"
#include "src/tiercache.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define EXIT_USAGE 64
/* Descriptors beyond the connections: listeners, epoll and event fds, the
 * pool file, stdio. */
#define FD_RESERVE 64

/* Raise the soft descriptor limit to the hard one; warn when -c does not
 * fit under it. */
static void
raise_nofile(const struct settings *st)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && st->maxconns + FD_RESERVE > rl.rlim_cur)
        log_warn("-c %llu is above what the open file limit (%llu) allows; "
                 "connections beyond it are refused",
                 (unsigned long long)st->maxconns,
                 (unsigned long long)rl.rlim_cur);
}

static int
setup_signals(void)
{
    sigset_t set;
    struct sigaction ign = {.sa_handler = SIG_IGN};
    if (sigaction(SIGPIPE, &ign, NULL) != 0)
        return -errno;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    return -pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Whether an open error already names the file it is about. */
static bool
names_a_file(const struct settings *st, const char *why)
{
    if (strstr(why, st->pool_path))
        return true;
    for (unsigned i = 0; i < st->ext_npaths; i++)
        if (strstr(why, st->ext_path[i]))
            return true;
    return false;
}

static int
open_cache(const struct settings *st, struct tc_cache **out)
{
    struct tc_config cfg;
    settings_to_config(st, &cfg);
    if (tc_open(&cfg, out) != 0) {
        const char *why = tc_errmsg();
        if (names_a_file(st, why))
            fprintf(stderr, "tiercached: %s\n", why);
        else
            fprintf(stderr, "tiercached: cannot open pool %s: %s\n",
                    st->pool_path, why);
        return -1;
    }
    /* the engine logs the pool's size and medium at -v */
    return 0;
}

/* stats settings shows what the engine made of a default it resolves
 * itself ("auto"), not the marker the option was given as. */
static void
settings_in_use(struct settings *st, struct tc_cache *cache)
{
    struct tc_stats ts;
    tc_stats(cache, &ts);
    st->ext_recache_window = ts.ext_recache_window;
}

int
main(int argc, char **argv)
{
    struct settings st;
    settings_init(&st);
    if (settings_parse(&st, argc, argv) != 0) {
        fprintf(stderr, "tiercached: %s\n", err_msg());
        return EXIT_USAGE;
    }
    if (st.action == SETTINGS_HELP) {
        settings_help(stdout);
        return 0;
    }
    if (st.action == SETTINGS_VERSION) {
        printf("tiercached %s (memcached %s compatible)\n", TC_RELEASE,
               TC_VERSION);
        return 0;
    }
    log_set_level(LOG_WARN + (int)st.verbose);
    if (setup_signals() != 0) {
        fprintf(stderr, "tiercached: cannot set up signals: %s\n",
                strerror(errno));
        return 1;
    }
    raise_nofile(&st);

    struct tc_cache *cache;
    if (open_cache(&st, &cache) != 0)
        return 1;
    settings_in_use(&st, cache);
    struct server *srv;
    if (server_create(&st, cache, &srv) != 0) {
        fprintf(stderr, "tiercached: %s\n", err_msg());
        tc_close(cache);
        return 1;
    }
    log_info("%llu worker threads, at most %llu connections",
             (unsigned long long)st.threads, (unsigned long long)st.maxconns);
    int rc = server_run(srv);
    if (rc)
        fprintf(stderr, "tiercached: %s\n", err_msg());
    server_destroy(srv);
    tc_close(cache);
    log_info("stopped; pool %s closed clean", st.pool_path);
    return rc ? 1 : 0;
}

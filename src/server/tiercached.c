/*
 * tiercached: the memcached-compatible server. Parses the settings, opens
 * the cache on the PMEM pool, runs the server until SIGINT, SIGTERM, SIGUSR1
 * or the shutdown command, closes the cache (saving the index beside the
 * pool, then marking the pool clean) and exits 0.
 *
 * Exit status: 0 after a clean shutdown (and after -h, -V); 64 for a bad
 * flag or value (one line on stderr naming it); 1 when the cache or the
 * server cannot start (one line saying why). Run as root, memcached's
 * rules and codes: without -u, 64; a -u user that does not exist, 67;
 * a failed setgid/setuid, 71.
 *
 * Start order, memcached's: core limit (-r), descriptor limit, drop root
 * (-u), daemonize (-d), lock memory (-k); then the pool is opened (so its
 * file belongs to the -u user), the server binds, and the pid file (-P)
 * is written once the server listens. A clean exit removes it.
 *
 * Concurrency: main() runs before and after every other thread; it blocks
 * SIGINT, SIGTERM and SIGUSR1 before the first one starts, so every thread
 * inherits the mask and the signals reach only the acceptor's signalfd.
 */

#include "src/base/err.h"
#include "src/base/log.h"
#include "src/server/netring.h"
#include "src/server/server.h"
#include "src/server/settings.h"
#include "src/tiercache.h"

#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sysexits.h>
#include <unistd.h>

#define EXIT_USAGE EX_USAGE
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
    sigaddset(&set, SIGUSR1); /* memcached's graceful stop */
    sigaddset(&set, SIGHUP);  /* the acceptor's signalfd: reload -Y's file */
    return -pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* -r: memcached's: the core limit as high as allowed; a limit of 0 left is
 * a failure. */
static int
raise_core(void)
{
    struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY}, old;
    if (getrlimit(RLIMIT_CORE, &old) == 0 && setrlimit(RLIMIT_CORE, &rl) != 0) {
        rl.rlim_cur = rl.rlim_max = old.rlim_max;
        (void)setrlimit(RLIMIT_CORE, &rl);
    }
    if (getrlimit(RLIMIT_CORE, &rl) != 0 || rl.rlim_cur == 0) {
        fprintf(stderr, "tiercached: failed to ensure corefile creation\n");
        return EX_OSERR;
    }
    return 0;
}

/* -u: as root, become the user (memcached's rules and messages); not as
 * root, -u is ignored, as in memcached. 0 or the exit status. */
static int
drop_root(const struct settings *st)
{
    if (getuid() != 0 && geteuid() != 0)
        return 0;
    if (!st->username) {
        fprintf(stderr,
                "tiercached: can't run as root without the -u switch\n");
        return EX_USAGE;
    }
    struct passwd *pw = getpwnam(st->username);
    if (!pw) {
        fprintf(stderr, "tiercached: can't find the user %s to switch to\n",
                st->username);
        return EX_NOUSER;
    }
    if (setgroups(0, NULL) != 0 && errno != EPERM) {
        fprintf(stderr, "tiercached: failed to drop supplementary groups: %s\n",
                strerror(errno));
        return EX_OSERR;
    }
    if (setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
        fprintf(stderr, "tiercached: failed to assume identity of user %s\n",
                st->username);
        return EX_OSERR;
    }
    return 0;
}

/* -d: daemon(3) as memcached calls it: stay in the directory with -r (so a
 * core lands there), keep stderr with -v. Before any thread starts. */
static int
daemonize(const struct settings *st)
{
    if (daemon(st->maxcore, st->verbose > 0) != 0) {
        fprintf(stderr,
                "tiercached: failed to daemon() in order to "
                "daemonize: %s\n",
                strerror(errno));
        return 1;
    }
    return 0;
}

/* -k: memcached's: a refusal is a warning, the server runs on. */
static void
lock_memory(void)
{
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
        log_warn("warning: -k invalid, mlockall() failed: %s", strerror(errno));
}

/* -P: the pid, written to FILE.tmp and renamed, so a reader never sees a
 * half-written file. A failure is logged and the server runs on, as in
 * memcached. */
static void
write_pid_file(const char *path)
{
    char tmp[SETTINGS_PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        log_warn("Could not open the pid file %s for writing: %s", tmp,
                 strerror(errno));
        return;
    }
    fprintf(f, "%ld\n", (long)getpid());
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        log_warn("Could not save the pid file %s: %s", path, strerror(errno));
        unlink(tmp);
    }
}

static void
remove_pid_file(const char *path)
{
    if (unlink(path) != 0)
        log_warn("Could not remove the pid file %s: %s", path, strerror(errno));
}

/* Everything before the pool opens that may end the process: 0 or the
 * exit status (the line is printed). */
static int
prepare_process(const struct settings *st)
{
    int rc = st->maxcore ? raise_core() : 0;
    if (rc)
        return rc;
    if (setup_signals() != 0) {
        fprintf(stderr, "tiercached: cannot set up signals: %s\n",
                strerror(errno));
        return 1;
    }
    raise_nofile(st);
    rc = drop_root(st);
    if (!rc && st->daemonize)
        rc = daemonize(st);
    if (rc)
        return rc;
    if (st->lock_memory)
        lock_memory();
    return 0;
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
    /* the saved state beside the pool: a clean stop writes it, the next
     * start reads it (doc/operating.md, "Restarts"); not for a scratch
     * pool */
    static char saved[4096 + 8];
    struct tc_config cfg;
    settings_to_config(st, &cfg);
    if (!st->pool_default && snprintf(saved, sizeof(saved), "%s.meta",
                                      st->pool_path) < (int)sizeof(saved))
        cfg.restart_file = saved;
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
    if (st.action == SETTINGS_LICENSE) {
        printf("tiercached %s; it links libpmem, memkind, liburing and "
               "liburcu, each under its own license\n",
               TC_RELEASE);
        return 0;
    }
    log_set_level(LOG_WARN + (int)st.verbose);
    int prc = prepare_process(&st);
    if (prc)
        return prc;

    struct tc_cache *cache;
    if (open_cache(&st, &cache) != 0)
        return 1;
    settings_in_use(&st, cache);
    if (st.pool_default)
        log_info("pool %s: no -e, so scratch: formatted at every start, "
                 "removed at a clean stop (-e <file> keeps the items "
                 "across restarts)",
                 st.pool_path);
    /* the network loop is chosen now, its log line comes once the server
     * is set up: a start that fails (a TLS file that does not load) prints
     * its one line only */
    char engine_note[320] = "";
    int engine_level =
        strcmp(st.net_engine, "uring") == 0 ? LOG_WARN : LOG_INFO;
    if (st.tls && strcmp(st.net_engine, "epoll") != 0) {
        /* TLS reads and writes through OpenSSL on the socket itself */
        snprintf(engine_note, sizeof(engine_note),
                 "net_engine=%s: TLS (-Z) runs on the epoll loop; using epoll",
                 st.net_engine);
        st.net_engine = "epoll";
    }
    if (strcmp(st.net_engine, "epoll") != 0) {
        /* auto or uring; stats settings then shows what runs */
        if (netring_probe() == 0) {
            st.net_engine = "uring";
        } else {
            snprintf(engine_note, sizeof(engine_note),
                     "net_engine=%s: %s; using epoll", st.net_engine,
                     err_msg());
            st.net_engine = "epoll";
        }
    }
    struct server *srv;
    if (server_create(&st, cache, &srv) != 0) {
        fprintf(stderr, "tiercached: %s\n", err_msg());
        tc_close(cache);
        return 1;
    }
    if (engine_note[0])
        log_msg(engine_level, "%s", engine_note);
    log_info("%llu worker threads, at most %llu connections",
             (unsigned long long)st.threads, (unsigned long long)st.maxconns);
    /* once started: a start that fails prints its one line only */
    settings_log_notes(&st);
    if (st.pid_file)
        write_pid_file(st.pid_file);
    int rc = server_run(srv);
    if (rc)
        fprintf(stderr, "tiercached: %s\n", err_msg());
    server_destroy(srv);
    tc_close(cache);
    if (st.pid_file)
        remove_pid_file(st.pid_file);
    if (st.pool_default && unlink(st.pool_path) == 0)
        log_info("stopped; scratch pool %s removed", st.pool_path);
    else
        log_info("stopped; pool %s closed clean", st.pool_path);
    return rc ? 1 : 0;
}

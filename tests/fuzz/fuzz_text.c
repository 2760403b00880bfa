/*
 * Fuzz target: the text protocol (and the meta commands it hands on)
 * through proto_process, on a tiny cache.
 *
 * Input: byte 0 seeds the read sizes, the rest is the byte stream of one
 * connection. A stream that starts with "#Y\n" runs (without those bytes)
 * on a session that must log in first, as under -Y, against a fixed file
 * of users (foo:bar, u:p). Seed 0 delivers the stream in one read; any
 * other seed cuts it into reads of 1..64 bytes (now and then up to 4 KiB),
 * as a socket might. Each input starts from the same logical state: a fresh
 * session, a flushed cache at its full limit, the clock frozen at T0.
 *
 * The cache itself lives on for FUZZ_REOPEN_EVERY inputs (opening one costs
 * milliseconds, and an allocator that has seen many inputs reaches states a
 * fresh one does not). So a failure may depend on the inputs before it:
 * when a check fails, the inputs since the cache was opened are written to
 * $FUZZ_HISTORY_DIR (build/fuzz/history)/text-<pid>/, and
 * "replay_text --sequence DIR" runs them again in order in one process.
 *
 * Checks: proto_process returns a byte count within what it was given (or
 * PROTO_CLOSE), a request it leaves for later is really incomplete (need
 * is 0 or beyond the bytes there), the replies of one call stay within a
 * bound of the bytes consumed, and tc_check() finds the cache consistent
 * after every input.
 */

#include "tests/fuzz/fuzz.h"

#include "src/server/auth.h"
#include "src/server/obuf.h"
#include "src/server/proto/proto.h"
#include "src/tiercache.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_T0 1700000000u
#define FUZZ_POOL (16ull << 20)
/* A small index: tc_check() walks all of it after every input. */
#define FUZZ_INDEX_ITEMS 4096
#define FUZZ_ITEM_MAX (8u << 10) /* small, and chained above chunk_max */
#define FUZZ_CHUNK_MAX (2u << 10)
/* Most reply bytes one input byte may produce: "get k k k ..." answers
 * every two bytes with a value of up to FUZZ_ITEM_MAX. */
#define FUZZ_OUT_PER_BYTE (FUZZ_ITEM_MAX + 320)
#define FUZZ_OUT_SLACK 4096
#ifndef FUZZ_REOPEN_EVERY
#define FUZZ_REOPEN_EVERY 64
#endif

/* A check that, failing, saves the inputs that led here first. */
#define TEXT_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            save_history();                                                    \
            FUZZ_CHECK(cond, __VA_ARGS__);                                     \
        }                                                                      \
    } while (0)

static struct tc_cache *cache;
static uint64_t full_limit; /* mem_limit as opened */
static struct auth *auth;   /* the "#Y\n" inputs' users, loaded once */

#define AUTH_PREFIX "#Y\n"
#define AUTH_PREFIX_LEN 3

/* The inputs run on the cache since it was opened, oldest first. */
static struct {
    uint8_t *data;
    size_t size;
} history[FUZZ_REOPEN_EVERY];
static int nhistory;

static void
forget_history(void)
{
    for (int i = 0; i < nhistory; i++)
        free(history[i].data);
    nhistory = 0;
}

static void
remember(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size);
    FUZZ_CHECK(copy != NULL, "out of memory");
    memcpy(copy, data, size);
    history[nhistory].data = copy;
    history[nhistory].size = size;
    nhistory++;
}

static void
save_history(void)
{
    const char *env = getenv("FUZZ_HISTORY_DIR");
    char dir[512], path[600];

    snprintf(dir, sizeof(dir), "%s/text-%d", env ? env : "build/fuzz/history",
             (int)getpid());
    if (mkdir(env ? env : "build/fuzz/history", 0755) != 0 && errno != EEXIST)
        return;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return;
    for (int i = 0; i < nhistory; i++) {
        snprintf(path, sizeof(path), "%s/%03d", dir, i);
        FILE *f = fopen(path, "wb");
        if (f == NULL)
            return;
        fwrite(history[i].data, 1, history[i].size, f);
        fclose(f);
    }
    fprintf(stderr,
            "fuzz_text: the %d input(s) since the cache was opened are in %s;"
            " replay them with: replay_text --sequence %s\n",
            nhistory, dir, dir);
}

static int
fuzz_stats(void *srv, struct proto_sess *s, const char *group, struct obuf *out)
{
    (void)srv;
    (void)s;
    if (group[0] != '\0')
        return -ENOENT;
    return obuf_add_str(out, "STAT fuzz 1\r\n");
}

static void
fuzz_stats_reset(void *srv)
{
    (void)srv;
    tc_stats_reset(cache);
}

static int
fuzz_shutdown(void *srv)
{
    (void)srv;
    return -EPERM;
}

static void
fuzz_verbosity(void *srv, int level)
{
    (void)srv;
    (void)level;
}

static int
fuzz_memlimit(void *srv, uint64_t mib)
{
    (void)srv;
    int rc = tc_set_mem_limit(cache, mib << 20);
    return rc == -EBUSY ? 0 : rc;
}

static const struct proto_server_ops fuzz_ops = {
    .stats = fuzz_stats,
    .stats_reset = fuzz_stats_reset,
    .shutdown = fuzz_shutdown,
    .verbosity = fuzz_verbosity,
    .memlimit = fuzz_memlimit,
};

static void
close_cache(void)
{
    tc_close(cache);
    cache = NULL;
    forget_history();
    auth_destroy(auth);
    auth = NULL;
}

/* The users of the "#Y\n" inputs: a file written, loaded and removed. */
static void
open_auth(void)
{
    char path[96];
    snprintf(path, sizeof(path), "/dev/shm/tc_fuzz_text_%d.auth",
             (int)getpid());
    FILE *f = fopen(path, "w");
    FUZZ_CHECK(f != NULL, "cannot write %s", path);
    fputs("foo:bar\nu:p\n", f);
    FUZZ_CHECK(fclose(f) == 0, "cannot write %s", path);
    int rc = auth_create(path, false, &auth);
    unlink(path);
    FUZZ_CHECK(rc == 0, "auth_create: %d", rc);
}

/* One cache per process, its pool file unlinked at once. */
static void
open_cache(void)
{
    struct tc_config cfg;
    char path[96];

    snprintf(path, sizeof(path), "/dev/shm/tc_fuzz_text_%d.pool",
             (int)getpid());
    unlink(path);
    tc_config_init(&cfg);
    cfg.pool_path = path;
    cfg.pool_size = FUZZ_POOL;
    cfg.item_size_max = FUZZ_ITEM_MAX;
    cfg.chunk_max = FUZZ_CHUNK_MAX;
    cfg.expected_items = FUZZ_INDEX_ITEMS;
    cfg.background = false;
    int rc = tc_open(&cfg, &cache);
    FUZZ_CHECK(rc == 0, "tc_open: %d %s", rc, tc_errmsg());
    unlink(path);
    struct tc_stats st;
    tc_stats(cache, &st);
    full_limit = st.limit_maxbytes;
}

static void
reset_state(void)
{
    static bool registered;
    if (cache != NULL && nhistory == FUZZ_REOPEN_EVERY)
        close_cache();
    if (cache == NULL)
        open_cache();
    if (!registered && atexit(close_cache) == 0)
        registered = true;
    tc_clock_set(FUZZ_T0);
    tc_set_mem_limit(cache, full_limit);
    tc_flush_all(cache, 0);
}

struct conn {
    struct proto_sess s;
    struct obuf out;
    char *buf; /* received, not consumed */
    size_t len, cap;
    bool closed;
};

/* Run the parser over what has arrived, as a connection does. */
static void
pump(struct conn *c)
{
    size_t pos = 0;
    size_t made = 0, took = 0; /* over the calls of a get in slices */
    while (!c->closed && pos < c->len) {
        size_t before = obuf_pending(&c->out);
        size_t avail = c->len - pos;
        ssize_t rc = proto_process(&c->s, c->buf + pos, avail, &c->out);
        if (rc == PROTO_CLOSE) {
            c->closed = true;
            break;
        }
        TEXT_CHECK(rc >= 0 && (size_t)rc <= avail, "rc %zd of %zu", rc, avail);
        made += obuf_pending(&c->out) - before;
        obuf_consume(&c->out, obuf_pending(&c->out)); /* "written" */
        if (c->s.resume) { /* a get stopped half-way: its line is left */
            TEXT_CHECK(c->s.resume < avail - (size_t)rc, "resume %zu past %zu",
                       c->s.resume, avail - (size_t)rc);
            pos += (size_t)rc;
            took += (size_t)rc;
            continue;
        }
        took += (size_t)rc;
        TEXT_CHECK(made <= FUZZ_OUT_SLACK + took * FUZZ_OUT_PER_BYTE,
                   "%zu reply bytes for %zu consumed", made, took);
        made = took = 0;
        if (rc == 0) {
            TEXT_CHECK(c->s.need == 0 || c->s.need > avail,
                       "waits with need %zu <= %zu bytes there", c->s.need,
                       avail);
            break;
        }
        pos += (size_t)rc;
    }
    memmove(c->buf, c->buf + pos, c->len - pos);
    c->len -= pos;
}

static void
receive(struct conn *c, const uint8_t *p, size_t n)
{
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + n)
            cap *= 2;
        c->buf = realloc(c->buf, cap);
        FUZZ_CHECK(c->buf != NULL, "out of memory");
        c->cap = cap;
    }
    memcpy(c->buf + c->len, p, n);
    c->len += n;
    pump(c);
}

static size_t
next_read(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return 1 + (size_t)(*x % ((*x >> 40) % 16 == 0 ? 4096 : 64));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || data[1] == 0x80)
        return 0; /* empty, or the binary protocol's (fuzz_bin) */
    reset_state();
    remember(data, size);

    struct conn c = {0};
    uint64_t x = data[0] ? 0x9e3779b97f4a7c15ull * data[0] : 0;
    proto_sess_init(&c.s, cache, &fuzz_ops, NULL, FUZZ_ITEM_MAX);
    obuf_init(&c.out);
    size_t start = 1;
    if (size - 1 >= AUTH_PREFIX_LEN &&
        memcmp(data + 1, AUTH_PREFIX, AUTH_PREFIX_LEN) == 0) {
        if (!auth)
            open_auth();
        c.s.auth = auth;
        c.s.authed = false;
        c.s.binding = PROTO_BIND_ASCII; /* as the server sets it under -Y */
        start += AUTH_PREFIX_LEN;
    }
    for (size_t pos = start; pos < size && !c.closed;) {
        size_t n = x ? next_read(&x) : size - pos;
        if (n > size - pos)
            n = size - pos;
        receive(&c, data + pos, n);
        pos += n;
    }
    proto_sess_fini(&c.s);
    obuf_fini(&c.out);
    free(c.buf);

    int rc = tc_check(cache);
    TEXT_CHECK(rc == 0, "tc_check: %d %s", rc, tc_errmsg());
    return 0;
}

/*
 * Fuzz target: the binary protocol (src/server/proto/proto_bin.c) through
 * proto_process, on a tiny cache.
 *
 * Input: byte 0 seeds the read sizes, the rest is the byte stream of one
 * connection (it must start with the binary magic 0x80; anything else is
 * fuzz_text's). The stream is run three times, each from the same logical
 * state (a fresh session, a flushed cache, the clock frozen at T0): in one
 * read, byte by byte, and in reads of pseudo-random sizes seeded by byte 0,
 * unconsumed bytes offered again with the next read as a connection does.
 *
 * Checks: proto_process returns a byte count within what it was given (or
 * PROTO_CLOSE); a request it leaves for later is really incomplete (need is
 * beyond the bytes there); the replies are whole, well-formed response
 * packets (magic 0x81, raw data type, extras + key within the body); the
 * three runs give the same replies, CAS fields aside, and agree on closing
 * (unless the cache evicted or ran out of memory, or a request carries a
 * CAS, which may differ between runs); tc_check() finds the cache
 * consistent after every input.
 *
 * The cache is tiny (2 KiB items, 1 KiB chunks) so that refused values,
 * swallowing and chained values are all within reach of short inputs.
 */

#include "tests/fuzz/fuzz.h"

#include "src/server/obuf.h"
#include "src/server/proto/proto.h"
#include "src/tiercache.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_T0 1700000000u
#define FUZZ_POOL (16ull << 20)
/* A small index: tc_check() walks all of it after every input. */
#define FUZZ_INDEX_ITEMS 4096
#define FUZZ_ITEM_MAX 2048u
#define FUZZ_CHUNK_MAX 1024u

static struct tc_cache *cache;

static int
fuzz_stats(void *srv, struct proto_sess *s, const char *group, struct obuf *out)
{
    (void)srv;
    (void)s;
    if (group[0] == '\0') {
        obuf_add_str(out, "STAT pid 1\r\nSTAT version " TC_VERSION "\r\n");
        obuf_add_str(out, "STAT odd\r\nnot a stat line\r\nSTAT x y z\r\n");
        return 0;
    }
    if (strcmp(group, "settings") == 0)
        return obuf_add_str(out, "STAT item_size_max 2048\r\n");
    return -ENOENT;
}

static void
fuzz_stats_reset(void *srv)
{
    (void)srv;
    tc_stats_reset(cache);
}

static void
fuzz_verbosity(void *srv, int level)
{
    (void)srv;
    (void)level;
}

static const struct proto_server_ops fuzz_ops = {
    .stats = fuzz_stats,
    .stats_reset = fuzz_stats_reset,
    .verbosity = fuzz_verbosity,
};

static void
close_cache(void)
{
    tc_close(cache);
    cache = NULL;
}

/* One cache per process, its pool file unlinked at once. */
static void
open_cache(void)
{
    struct tc_config cfg;
    char path[96];

    snprintf(path, sizeof(path), "/dev/shm/tc_fuzz_bin_%d.pool", (int)getpid());
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
    atexit(close_cache);
}

static void
reset_state(void)
{
    if (cache == NULL)
        open_cache();
    tc_clock_set(FUZZ_T0);
    tc_flush_all(cache, 0);
    tc_maintain(cache); /* free what earlier runs left: rarely evict */
}

/* The replies must be whole, well-formed response packets. Their CAS
 * fields, which differ from run to run, are zeroed. */
static void
check_replies(char *buf, size_t n)
{
    unsigned char *p = (unsigned char *)buf;
    size_t at = 0;

    while (at < n) {
        FUZZ_CHECK(n - at >= 24, "reply cut at %zu of %zu", at, n);
        FUZZ_CHECK(p[at] == 0x81 && p[at + 5] == 0, "bad reply header at %zu",
                   at);
        uint32_t keylen = (uint32_t)p[at + 2] << 8 | p[at + 3];
        uint32_t extlen = p[at + 4];
        uint32_t body = (uint32_t)p[at + 8] << 24 | (uint32_t)p[at + 9] << 16 |
                        (uint32_t)p[at + 10] << 8 | p[at + 11];
        FUZZ_CHECK(keylen + extlen <= body, "key+extras past body at %zu", at);
        FUZZ_CHECK(n - at - 24 >= body, "reply body cut at %zu", at);
        memset(p + at + 16, 0, 8);
        at += 24 + (size_t)body;
    }
}

struct run {
    struct obuf out;
    bool closed;
};

static size_t
next_read(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return 1 + (size_t)(*x % ((*x >> 40) % 16 == 0 ? 4096 : 64));
}

/* Feed data[0..size) in reads of `step` bytes (0: all at once), or of
 * pseudo-random sizes when seed is nonzero. */
static void
drive(const uint8_t *data, size_t size, size_t step, uint64_t seed,
      struct run *r)
{
    struct proto_sess s;
    char *buf = malloc(size + 1);
    size_t len = 0, from = 0;

    FUZZ_CHECK(buf != NULL, "out of memory");
    reset_state();
    proto_sess_init(&s, cache, &fuzz_ops, NULL, FUZZ_ITEM_MAX);
    obuf_init(&r->out);
    r->closed = false;
    while (from < size && !r->closed) {
        size_t n = seed ? next_read(&seed) : step ? step : size - from;
        if (n > size - from)
            n = size - from;
        memcpy(buf + len, data + from, n);
        len += n;
        from += n;
        size_t pos = 0;
        while (pos < len) {
            size_t avail = len - pos;
            ssize_t rc = proto_process(&s, buf + pos, avail, &r->out);
            if (rc == PROTO_CLOSE) {
                r->closed = true;
                break;
            }
            FUZZ_CHECK(rc >= 0 && (size_t)rc <= avail, "rc %zd of %zu", rc,
                       avail);
            if (rc == 0) {
                FUZZ_CHECK(s.need > avail, "waits with need %zu <= %zu", s.need,
                           avail);
                break;
            }
            pos += (size_t)rc;
        }
        memmove(buf, buf + pos, len - pos);
        len -= pos;
    }
    proto_sess_fini(&s);
    free(buf);
    FUZZ_CHECK(r->out.err == 0, "obuf: %d", r->out.err);
    if (obuf_pending(&r->out) > 0)
        check_replies(r->out.buf + r->out.head, obuf_pending(&r->out));
}

static bool
same(const struct run *a, const struct run *b)
{
    size_t n = obuf_pending(&a->out);
    if (a->closed != b->closed || n != obuf_pending(&b->out))
        return false;
    return n == 0 ||
           memcmp(a->out.buf + a->out.head, b->out.buf + b->out.head, n) == 0;
}

/* Whether a request in the stream carries a CAS: its outcome then depends
 * on the CAS values the cache hands out, which differ from run to run. */
static bool
has_cas(const uint8_t *p, size_t n)
{
    size_t at = 0;
    while (n - at >= 24 && p[at] == 0x80) {
        for (int i = 16; i < 24; i++)
            if (p[at + i] != 0)
                return true;
        uint64_t body = (uint64_t)p[at + 8] << 24 | (uint64_t)p[at + 9] << 16 |
                        (uint64_t)p[at + 10] << 8 | p[at + 11];
        if (body > n - at - 24)
            break;
        at += 24 + (size_t)body;
    }
    return false;
}

static uint64_t
pressure(void)
{
    struct tc_stats st;
    tc_stats(cache, &st);
    return st.evictions + st.store_no_memory;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct run whole, bytes, cut;

    if (size < 2 || data[1] != 0x80)
        return 0; /* empty, or the text protocol's (fuzz_text) */
    if (cache == NULL)
        open_cache();
    uint64_t before = pressure();
    drive(data + 1, size - 1, 0, 0, &whole);
    drive(data + 1, size - 1, 1, 0, &bytes);
    drive(data + 1, size - 1, 0, 0x9e3779b97f4a7c15ull * (data[0] + 1u), &cut);
    if (pressure() == before && !has_cas(data + 1, size - 1)) {
        FUZZ_CHECK(same(&whole, &bytes), "byte-by-byte replies differ");
        FUZZ_CHECK(same(&whole, &cut), "replies differ with read seed %u",
                   data[0]);
    }
    obuf_fini(&whole.out);
    obuf_fini(&bytes.out);
    obuf_fini(&cut.out);

    int rc = tc_check(cache);
    FUZZ_CHECK(rc == 0, "tc_check: %d %s", rc, tc_errmsg());
    return 0;
}

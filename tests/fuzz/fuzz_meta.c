/*
 * Fuzz target: the meta commands (src/server/proto/proto_meta.c: mg, ms, md,
 * ma, mn, me) over a small real cache. Every line goes to proto_meta_process,
 * as the text parser would send a meta one (a line that is not a meta command
 * is "ERROR"); the text parser's hand-over is fuzz_text's business.
 *
 * Input: one byte that picks how the rest is cut into reads, then the bytes
 * a client would send. The stream is run twice, after a flush_all each
 * time: in one read, and cut the way a socket might deliver it (unconsumed
 * bytes offered again with the next read). Checked:
 *
 *   - every return is PROTO_CLOSE or within [0, len], and s->need, when
 *     set, is more than what was left unconsumed;
 *   - the replies are a whole number of well-formed replies: lines starting
 *     with a meta code (HD VA EN NF NS EX MN ME) or an error (ERROR,
 *     CLIENT_ERROR, SERVER_ERROR), each "VA <n>" followed by n bytes and
 *     "\r\n";
 *   - both runs give the same replies, CAS values aside, and agree on
 *     closing (unless the cache evicted or ran out of memory meanwhile, or
 *     the stream names CAS values: see fuzz_names_cas());
 *   - tc_check() finds the cache consistent after every input;
 *   - and, under the sanitizers, no memory error or leak.
 *
 * The cache is tiny (4 KiB items, 1 KiB chunks) so that refused values,
 * swallowing and chained values are all within reach of short inputs. The
 * clock is frozen so that TTLs do not depend on when a run happens.
 */

#include "tests/fuzz/fuzz.h"

#include "src/server/obuf.h"
#include "src/server/proto/proto.h"
#include "src/tiercache.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_T0 1700000000u
#define FUZZ_ITEM_MAX 4096u

static struct tc_cache *fuzz_cache;
static char fuzz_path[96];

static void
fuzz_close(void)
{
    tc_close(fuzz_cache);
    fuzz_cache = NULL;
}

static void
fuzz_open(void)
{
    struct tc_config cfg;

    snprintf(fuzz_path, sizeof(fuzz_path), "/dev/shm/tc_fuzz_meta_%d.pool",
             (int)getpid());
    unlink(fuzz_path);
    tc_clock_set(FUZZ_T0);
    tc_config_init(&cfg);
    cfg.pool_path = fuzz_path;
    cfg.pool_size = 16u << 20;
    cfg.item_size_max = FUZZ_ITEM_MAX;
    cfg.chunk_max = 1024;
    cfg.background = false;
    int rc = tc_open(&cfg, &fuzz_cache);
    FUZZ_CHECK(rc == 0, "tc_open: %d %s", rc, tc_errmsg());
    unlink(fuzz_path);
    atexit(fuzz_close);
}

static bool
starts(const char *p, size_t n, const char *word)
{
    size_t w = strlen(word);
    return n >= w && memcmp(p, word, w) == 0;
}

/*
 * The replies must be whole meta replies. They are copied into `norm` with
 * every CAS value (the digits after " c" and me's "cas=") cut out: CAS
 * values are run-dependent, the rest must match between the two runs.
 * Returns the length of the copy.
 */
static size_t
check_replies(const char *p, size_t n, char *norm)
{
    size_t at = 0, o = 0;
    while (at < n) {
        const char *eol = memchr(p + at, '\n', n - at);
        FUZZ_CHECK(eol && eol > p + at && eol[-1] == '\r',
                   "reply not a \\r\\n line at byte %zu", at);
        const char *line = p + at;
        size_t len = (size_t)(eol - line) - 1; /* without "\r\n" */
        at += len + 2;
        for (size_t i = 0; i < len + 2; i++) {
            norm[o++] = line[i];
            size_t d = 0;
            if (i + 5 <= len && memcmp(line + i, " cas=", 5) == 0)
                d = 5;
            else if (i + 2 <= len && line[i] == ' ' && line[i + 1] == 'c')
                d = 2;
            if (d) {
                memcpy(norm + o, line + i + 1, d - 1);
                o += d - 1;
                i += d - 1;
                while (i + 1 < len && line[i + 1] >= '0' && line[i + 1] <= '9')
                    i++;
            }
        }
        if (starts(line, len, "CLIENT_ERROR ") ||
            starts(line, len, "SERVER_ERROR ") ||
            (len == 5 && starts(line, len, "ERROR")))
            continue;
        FUZZ_CHECK(len >= 2 && (len == 2 || line[2] == ' ') &&
                       (starts(line, len, "HD") || starts(line, len, "VA") ||
                        starts(line, len, "EN") || starts(line, len, "NF") ||
                        starts(line, len, "NS") || starts(line, len, "EX") ||
                        starts(line, len, "MN") || starts(line, len, "ME")),
                   "unknown reply \"%.*s\"", (int)len, line);
        if (starts(line, len, "VA")) {
            char *end;
            unsigned long vlen = strtoul(line + 3, &end, 10);
            FUZZ_CHECK(end > line + 3 && n - at >= vlen + 2 &&
                           memcmp(p + at + vlen, "\r\n", 2) == 0,
                       "VA %lu without its data block", vlen);
            memcpy(norm + o, p + at, vlen + 2);
            o += vlen + 2;
            at += vlen + 2;
        }
    }
    return o;
}

struct fuzz_run {
    struct obuf out;
    char *norm; /* the replies, CAS values cut out */
    size_t nnorm;
    bool closed;
};

/* Feed data[0..size) cut into reads (piece 0 = all at once) to
 * proto_meta_process, the way a connection does: unconsumed bytes are
 * offered again with the next read, and the data block of a refused ms is
 * swallowed (the text parser's part, done here). */
static void
fuzz_drive(const uint8_t *data, size_t size, unsigned piece,
           struct fuzz_run *run)
{
    struct proto_sess s;
    char *pend = malloc(size + 1);
    size_t npend = 0, from = 0;
    uint32_t lcg = piece * 2654435761u + 1;

    FUZZ_CHECK(pend != NULL, "out of memory");
    proto_sess_init(&s, fuzz_cache, NULL, NULL, FUZZ_ITEM_MAX);
    obuf_init(&run->out);
    run->closed = false;
    tc_flush_all(fuzz_cache, 0);

    while (from < size && !run->closed) {
        size_t take = size - from;
        if (piece) {
            lcg = lcg * 1103515245u + 12345u;
            size_t cut = 1 + (lcg >> 16) % (piece % 64 + 1);
            if (cut < take)
                take = cut;
        }
        memcpy(pend + npend, data + from, take);
        npend += take;
        from += take;
        while (npend > 0) {
            size_t drop;
            if (s.swallow) {
                drop = npend < s.swallow ? npend : (size_t)s.swallow;
                s.swallow -= drop;
            } else {
                ssize_t n = proto_meta_process(&s, pend, npend, &run->out);
                if (n == PROTO_CLOSE) {
                    run->closed = true;
                    break;
                }
                FUZZ_CHECK(n >= 0 && (size_t)n <= npend, "rc %zd of %zu", n,
                           npend);
                if (n == 0) {
                    FUZZ_CHECK(s.need == 0 || s.need > npend,
                               "waits with need %zu <= %zu bytes there", s.need,
                               npend);
                    break;
                }
                drop = (size_t)n;
            }
            memmove(pend, pend + drop, npend - drop);
            npend -= drop;
        }
    }
    proto_sess_fini(&s);
    free(pend);
    FUZZ_CHECK(run->out.err == 0, "obuf error %d", run->out.err);
    run->nnorm = 0;
    run->norm = malloc(obuf_pending(&run->out) + 1);
    FUZZ_CHECK(run->norm != NULL, "out of memory");
    if (obuf_pending(&run->out))
        run->nnorm = check_replies(run->out.buf + run->out.head,
                                   obuf_pending(&run->out), run->norm);
}

/*
 * Whether the stream names a CAS value (a C or E token with a number). The
 * CAS counter runs on across runs, so such a stream may legitimately differ
 * between them: C matching a counter value in one run only, or an explicit
 * E value below the watermark the run's opening flush_all set (the item is
 * then flushed at once). Its replies are still checked, not compared.
 */
static bool
fuzz_names_cas(const uint8_t *p, size_t n)
{
    for (size_t i = 1; i + 1 < n; i++)
        if (p[i - 1] == ' ' && (p[i] == 'C' || p[i] == 'E') &&
            ((p[i + 1] >= '0' && p[i + 1] <= '9') || p[i + 1] == '+' ||
             p[i + 1] == '-'))
            return true;
    return false;
}

static uint64_t
fuzz_pressure(void)
{
    struct tc_stats st;
    tc_stats(fuzz_cache, &st);
    return st.evictions + st.store_no_memory;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_run one, cut;

    if (size < 2)
        return 0;
    if (!fuzz_cache)
        fuzz_open();
    unsigned piece = data[0] | 1u; /* never 0: the second run is cut */

    /* free what earlier inputs left, so that a run rarely evicts */
    tc_flush_all(fuzz_cache, 0);
    tc_maintain(fuzz_cache);
    uint64_t before = fuzz_pressure();
    fuzz_drive(data + 1, size - 1, 0, &one);
    fuzz_drive(data + 1, size - 1, piece, &cut);
    if (fuzz_pressure() == before && !fuzz_names_cas(data, size))
        FUZZ_CHECK(
            one.closed == cut.closed && one.nnorm == cut.nnorm &&
                (one.nnorm == 0 || memcmp(one.norm, cut.norm, one.nnorm) == 0),
            "the runs differ (closed %d/%d)\n--- whole:\n%.*s\n"
            "--- cut:\n%.*s",
            one.closed, cut.closed, (int)one.nnorm, one.norm, (int)cut.nnorm,
            cut.norm);
    int rc = tc_check(fuzz_cache);
    FUZZ_CHECK(rc == 0, "tc_check: %d %s", rc, tc_errmsg());
    obuf_fini(&one.out);
    obuf_fini(&cut.out);
    free(one.norm);
    free(cut.norm);
    return 0;
}

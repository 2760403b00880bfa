/*
 * Fuzz target: the engine API (src/tiercache.h) driven by random operation
 * sequences and checked against a reference model.
 *
 * Each input opens a fresh tiny cache (6 MiB pool file, 4 pages of 1 MiB,
 * items up to 4 KiB chained over 1 KiB chunks, evictions on, background
 * thread off, the clock frozen and moved only by the input) and decodes
 * operations from its bytes until they run out: every store mode through
 * tc_set, tc_store and tc_store_ex (meta C, E, I, N), tc_get_copy, tc_get_ex
 * (touch, vivify, no_bump, recache_below), tc_gat, tc_delete, tc_drop,
 * tc_incr/tc_decr, tc_arith_ex (N, J, C, T), tc_touch, tc_invalidate,
 * tc_flush_all (immediate and delayed), clock moves, tc_set_mem_limit,
 * tc_slab_reassign, tc_maintain, and filler items under other keys for
 * memory and index pressure. tc_check() runs every FZ_CHECK_EVERY
 * operations and at the end, when every key is read back once more.
 *
 * The model keeps, per key of a small key set, what the engine must hold:
 * value, flags, CAS, absolute expiry and the stale mark. It follows
 * memcached's expiry rules and the engine's flush rule (a flush is a CAS
 * watermark, a delayed one takes effect at the first operation that looks
 * at the clock after its time). Checked:
 *
 *   - a hit returns exactly the model's value, flags, CAS, expiry and stale
 *     mark; a key the model says is absent (never stored, deleted, expired,
 *     flushed) is a miss;
 *   - every result is the one the model predicts (stored, not stored,
 *     exists, not found, non-numeric, too large; incr/decr give the model's
 *     value plus or minus the delta); -ENOMEM is always allowed for an
 *     operation that allocates (and a set that fails drops the old value);
 *   - a new CAS is larger than every CAS seen before (E gives exactly the
 *     client's), and never above what the operations could have used;
 *   - a miss on a key the model holds is allowed only as an eviction:
 *     the cache's loss counters (evictions, flash records lost or dropped
 *     by compaction) must have moved since the model last saw the item (a
 *     read sees it as of the start of its operation: a flash value copied
 *     back into the pool may evict it afterwards), and the number of keys
 *     so forgotten never exceeds those counters;
 *   - tc_check() finds the cache consistent;
 *   - and, under the sanitizers, no memory error or leak.
 *
 * Built with FZ_EXT (fuzz_engine_ext.c), the same target runs with a tiny
 * NVMe tier under /tmp, so that evictions spill values to flash and reads
 * come back from it.
 *
 * Input: one opcode byte per operation (enum fz_opcode, modulo FZ_NOPS)
 * followed by its operands as the fz_op_* functions read them; the input
 * running out reads as zeros. tests/fuzz/gen_engine_corpus.py writes seeds
 * in this format (change both together).
 *
 * FUZZ_ENGINE_TRACE=1 in the environment prints every operation (to find
 * which one a failing input trips on).
 */

#include "tests/fuzz/fuzz.h"

#include "src/engine/item_layout.h"
#include "src/tiercache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FZ_T0 1700000000u
#define FZ_POOL_SIZE (6u << 20) /* 4 pages after the 2 MiB header */
#define FZ_ITEM_MAX 4096u
#define FZ_CHUNK_MAX 1024u
#define FZ_VAL_MAX (FZ_ITEM_MAX + 512) /* values a little too large too */
#define FZ_NKEYS 12
#define FZ_MAX_OPS 2000
#define FZ_CHECK_EVERY 32
#define FZ_FILL_MAX 512 /* filler items per input: bounds its run time */
/* Shrinks of the memory limit per input: a shrink of a full pool costs
 * eviction scans for every item it cannot move (much of a slow input's
 * time), and two are enough to reach every path. */
#define FZ_SHRINK_MAX 2
#ifdef FZ_EXT
#define FZ_HAS_EXT 1
#else
#define FZ_HAS_EXT 0
#endif
#define FZ_DAYS30 2592000
#define FZ_MIB (1ull << 20)

/* What the model knows of one key. */
struct fz_item {
    bool present; /* stored, not deleted or flushed (it may have expired) */
    bool stale;
    uint32_t flags;
    uint32_t exptime; /* absolute, 0 = never */
    uint32_t vlen;
    uint64_t cas;
    uint64_t loss_at; /* the loss counters when the model last saw it */
    uint8_t val[FZ_ITEM_MAX];
};

struct fz {
    struct tc_cache *c;
    const uint8_t *p; /* the input not yet decoded */
    size_t n;
    unsigned op; /* operations run, for messages */
    uint32_t now;
    uint32_t flush_at; /* a pending delayed flush, 0 = none */
    uint64_t cas_max;  /* largest CAS seen: a new one is larger */
    uint64_t cas_hi;   /* bound on the engine's CAS counter */
    uint64_t flush_hi; /* cas_hi when the last flush took effect */
    uint64_t losses;   /* the loss counters after the last operation */
    uint64_t losses0;  /* ... and before this one */
    uint64_t forgotten;
    unsigned enomem;  /* -ENOMEM results (allowed; counted for the trace) */
    unsigned filled;  /* filler items stored */
    unsigned shrinks; /* memory limits set below the previous one */
    uint64_t limit;   /* the memory limit, bytes */
    bool trace;
    struct fz_item m[FZ_NKEYS];
};

/* The keys: short ones, the shortest, the longest, two long ones that
 * differ in their last byte only, and one with bytes a text protocol could
 * not carry. Index FZ_NKEYS (and above) is a key the API must refuse. */
static uint8_t fz_keys[FZ_NKEYS + 2][TC_KEY_MAX + 1];
static size_t fz_klen[FZ_NKEYS + 2];

static void
fz_keys_init(void)
{
    for (int i = 0; i < 8; i++) {
        fz_keys[i][0] = 'k';
        fz_keys[i][1] = (uint8_t)('0' + i);
        fz_klen[i] = 2;
    }
    fz_keys[8][0] = 'x';
    fz_klen[8] = 1;
    for (int i = 9; i <= 10; i++) {
        memset(fz_keys[i], 'L', TC_KEY_MAX);
        fz_keys[i][TC_KEY_MAX - 1] = (uint8_t)('0' + i);
        fz_klen[i] = TC_KEY_MAX;
    }
    memcpy(fz_keys[11], "\0\r\n \xff", 5);
    fz_klen[11] = 5;
    fz_klen[FZ_NKEYS] = 0;                              /* empty key */
    memset(fz_keys[FZ_NKEYS + 1], 'B', TC_KEY_MAX + 1); /* one too long */
    fz_klen[FZ_NKEYS + 1] = TC_KEY_MAX + 1;
}

/* ---------------------------------------------------------------- input */

static uint8_t
fz_u8(struct fz *f)
{
    if (f->n == 0)
        return 0;
    f->n--;
    return *f->p++;
}

static uint16_t
fz_u16(struct fz *f)
{
    uint16_t lo = fz_u8(f); /* two statements: the order is the input's */
    return (uint16_t)(lo | fz_u8(f) << 8);
}

static uint64_t
fz_u64(struct fz *f)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)fz_u8(f) << (8 * i);
    return v;
}

/* A key index: mostly the key set, rarely a refused key. */
static unsigned
fz_key(struct fz *f)
{
    uint8_t b = fz_u8(f);
    if (b >= 250)
        return FZ_NKEYS + (b & 1);
    return b % FZ_NKEYS;
}

/* Numbers around incr/decr's edges, and text that is almost a number. */
static const char *const fz_numbers[] = {
    "0",
    "1",
    "18446744073709551615",
    "18446744073709551614",
    "18446744073709551616",
    "  42",
    "7 ",
    "12 apples",
    "12apples",
    "-1",
    "",
    " ",
    "00000000000000000000000000000000000000000000000000000000000000001",
    "0000000000000000000000000000000000000000000000000000000000000009",
    "99999999999999999999",
    "3\r\n",
};

/* A value into buf (FZ_VAL_MAX bytes): its length. */
static uint32_t
fz_value(struct fz *f, uint8_t *buf)
{
    uint8_t kind = fz_u8(f) % 8, seed = fz_u8(f);
    uint32_t len = 0;

    switch (kind) {
    case 0:
        return 0;
    case 1:
    case 2:
        len = seed % 48;
        break;
    case 3: { /* a number from the table or from the input */
        uint8_t b = fz_u8(f);
        if (b < 128) {
            const char *s =
                fz_numbers[b % (sizeof(fz_numbers) / sizeof(fz_numbers[0]))];
            memcpy(buf, s, strlen(s));
            return (uint32_t)strlen(s);
        }
        return (uint32_t)sprintf((char *)buf, "%" PRIu64, fz_u64(f));
    }
    case 4: /* around the largest chunk: plain or chained */
        len = FZ_CHUNK_MAX - 300 + fz_u16(f) % 600;
        break;
    case 5: /* around the largest item */
        len = FZ_ITEM_MAX - 300 + fz_u16(f) % 400;
        break;
    case 6:
        len = fz_u16(f) % FZ_ITEM_MAX;
        break;
    case 7: /* bytes of the input */
        len = seed % 32;
        for (uint32_t i = 0; i < len; i++)
            buf[i] = fz_u8(f);
        return len;
    }
    for (uint32_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(seed + i * 7 + (i >> 8));
    return len;
}

/* An expiry as a client gives it. */
static int64_t
fz_exptime(struct fz *f)
{
    uint8_t kind = fz_u8(f) % 8, b = fz_u8(f);
    switch (kind) {
    case 0:
    case 1:
        return 0;
    case 2:
    case 3:
        return 1 + b % 100; /* seconds from now */
    case 4:
        return -(int64_t)b - 1; /* already expired */
    case 5:
        return (int64_t)f->now - 50 + b; /* absolute, past or future */
    case 6:
        return FZ_DAYS30 + (b % 3) - 1; /* the relative/absolute edge */
    default: {
        static const int64_t edge[] = {INT64_MAX, INT64_MIN,
                                       (int64_t)UINT32_MAX,
                                       (int64_t)UINT32_MAX + 1, 1};
        return edge[b % (sizeof(edge) / sizeof(edge[0]))];
    }
    }
}

/* ---------------------------------------------------------------- model */

/* memcached's rule, as the engine stores it. */
static uint32_t
fz_abs_exptime(int64_t e, uint32_t now)
{
    if (e == 0)
        return 0;
    if (e < 0)
        return 1;
    if (e <= FZ_DAYS30)
        return now + (uint32_t)e;
    return e > UINT32_MAX ? UINT32_MAX : (uint32_t)e;
}

static bool
fz_live(const struct fz *f, unsigned k)
{
    const struct fz_item *m = &f->m[k];
    return m->present && (m->exptime == 0 || m->exptime > f->now);
}

static uint64_t
fz_loss_counters(struct fz *f)
{
    struct tc_stats s;
    tc_stats(f->c, &s);
    /* flash records compaction did not keep (unfetched ones) are lost */
    return s.evictions + s.miss_from_extstore + s.badcrc_from_extstore +
           s.get_aborted_extstore + s.extstore_objects_lost +
           s.extstore_compact_skipped;
}

/* A delayed flush takes effect at the first operation that looks at the
 * clock once its time has come. */
static void
fz_flush_check(struct fz *f)
{
    if (f->flush_at == 0 || f->now < f->flush_at)
        return;
    f->flush_at = 0;
    for (unsigned k = 0; k < FZ_NKEYS; k++)
        f->m[k].present = false;
    f->flush_hi = f->cas_hi;
}

/* The engine misses key k where the model holds a live item: allowed only
 * when the cache lost something since the model last saw the item, and
 * never more often than it lost things. */
static void
fz_lost(struct fz *f, unsigned k, const char *what)
{
    struct fz_item *m = &f->m[k];
    FUZZ_CHECK(f->losses > m->loss_at && f->forgotten < f->losses,
               "op %u (%s): key %u missing with no eviction (losses %" PRIu64
               ", at store %" PRIu64 ", forgotten %" PRIu64 ")",
               f->op, what, k, f->losses, m->loss_at, f->forgotten);
    f->forgotten++;
    m->present = false;
}

/* A CAS the engine handed out for a new item. */
static void
fz_new_cas(struct fz *f, uint64_t cas, uint64_t explicit_cas)
{
    if (explicit_cas)
        FUZZ_CHECK(cas == explicit_cas,
                   "op %u: CAS %" PRIu64 ", the client asked %" PRIu64, f->op,
                   cas, explicit_cas);
    else
        FUZZ_CHECK(cas > f->cas_max && cas <= f->cas_hi,
                   "op %u: new CAS %" PRIu64 " not in (%" PRIu64 ", %" PRIu64
                   "]",
                   f->op, cas, f->cas_max, f->cas_hi);
    if (cas > f->cas_max)
        f->cas_max = cas;
}

static void
fz_put(struct fz *f, unsigned k, const uint8_t *val, uint32_t vlen,
       uint32_t flags, uint32_t exptime, uint64_t cas, bool stale)
{
    struct fz_item *m = &f->m[k];
    if (vlen)
        memmove(m->val, val, vlen);
    m->vlen = vlen;
    m->flags = flags;
    m->exptime = exptime;
    m->cas = cas;
    m->stale = stale;
    m->present = true;
    m->loss_at = f->losses;
}

/* Whether an item of this key and value length is over item_size_max
 * (which counts the header, the key and the value). */
static bool
fz_too_big(unsigned k, uint64_t vlen)
{
    return sizeof(struct item_hdr) + fz_klen[k] + vlen > FZ_ITEM_MAX;
}

/* ---------------------------------------------------------------- reads */

struct fz_got {
    bool called;
    struct tc_item_info info;
    uint32_t len;
    uint8_t buf[FZ_ITEM_MAX];
};

static void
fz_collect(void *arg, const struct tc_item_info *info, const struct iovec *iov,
           int niov)
{
    struct fz_got *g = arg;
    g->called = true;
    g->info = *info;
    g->len = 0;
    for (int i = 0; i < niov; i++) {
        FUZZ_CHECK(g->len + iov[i].iov_len <= FZ_ITEM_MAX,
                   "value pieces longer than an item (%u + %zu)", g->len,
                   iov[i].iov_len);
        memcpy(g->buf + g->len, iov[i].iov_base, iov[i].iov_len);
        g->len += (uint32_t)iov[i].iov_len;
    }
}

/* A hit on key k: the header must be the model's, and the value too
 * (its first `len` bytes; with_value false: no value to compare). */
static void
fz_check_hit(struct fz *f, unsigned k, const struct tc_item_info *info,
             const uint8_t *val, uint32_t len, bool with_value,
             const char *what)
{
    struct fz_item *m = &f->m[k];
    /* fz_judge saw that it was live (a touch may have expired it since) */
    FUZZ_CHECK(m->present, "op %u (%s): key %u hit, the model has it absent",
               f->op, what, k);
    FUZZ_CHECK(info->vlen == m->vlen && info->flags == m->flags &&
                   info->cas == m->cas && info->exptime == m->exptime &&
                   info->stale == m->stale,
               "op %u (%s): key %u header vlen %u flags %u cas %" PRIu64
               " exptime %u stale %d, model %u %u %" PRIu64 " %u %d",
               f->op, what, k, info->vlen, info->flags, info->cas,
               info->exptime, info->stale, m->vlen, m->flags, m->cas,
               m->exptime, m->stale);
    if (with_value)
        FUZZ_CHECK(memcmp(val, m->val, len) == 0,
                   "op %u (%s): key %u wrong value (%u bytes compared)", f->op,
                   what, k, len);
    /* the read may evict after it saw the item (a flash value copied back
     * into the pool allocates): seen as of the start of the operation */
    m->loss_at = f->losses0;
}

/* The trace line of a read. */
static void
fz_trace_read(const struct fz *f, unsigned k, int rc,
              const struct tc_item_info *info)
{
    if (f->trace)
        fprintf(stderr, "  key %u: %d%s%s\n", k, rc,
                rc == TC_OK && info->flash ? " (flash)" : "",
                rc == TC_OK && info->stale ? " (stale)" : "");
}

/* A miss on key k. */
static void
fz_check_miss(struct fz *f, unsigned k, const char *what)
{
    if (fz_live(f, k))
        fz_lost(f, k, what);
    f->m[k].present = false;
}

/* The CAS of an item the API did not report (vivify, invalidate): read
 * without marking it used. */
static void
fz_learn_cas(struct fz *f, unsigned k)
{
    struct tc_get_opts o = {.no_bump = true, .head_only = true};
    struct fz_got g = {0};
    int rc = tc_get_ex(f->c, fz_keys[k], fz_klen[k], &o, fz_collect, &g);
    f->losses = fz_loss_counters(f);
    if (rc == TC_NOT_FOUND) {
        fz_check_miss(f, k, "learn cas");
        return;
    }
    FUZZ_CHECK(rc == TC_OK && g.called, "op %u: learn cas: %d", f->op, rc);
    fz_new_cas(f, g.info.cas, 0);
    f->m[k].cas = g.info.cas;
    fz_check_hit(f, k, &g.info, NULL, 0, false, "learn cas");
}

/* ---------------------------------------------------------------- stores */

/* What store_plain answers for key k (live or not) before it allocates:
 * TC_OK when it goes on to store. A CAS compare decides alone (meta C with
 * add is refused only after allocation). */
static int
fz_store_decision(const struct fz_item *m, bool live, enum tc_store_mode mode,
                  bool cas_check, uint64_t cas_in)
{
    if (cas_check || mode == TC_CAS) {
        if (!live)
            return TC_NOT_FOUND;
        return m->cas != cas_in ? TC_EXISTS : TC_OK;
    }
    if (mode == TC_ADD)
        return live ? TC_NOT_STORED : TC_OK;
    if (mode == TC_REPLACE)
        return live ? TC_OK : TC_NOT_STORED;
    return TC_OK;
}

/* A CAS to send: mostly the model's, sometimes off by one or none. */
static uint64_t
fz_cas_in(struct fz *f, unsigned k)
{
    uint8_t b = fz_u8(f) % 8;
    uint64_t cas = k < FZ_NKEYS ? f->m[k].cas : 0;
    if (b < 5)
        return cas;
    if (b == 5)
        return cas + 1;
    if (b == 6)
        return cas - 1;
    return fz_u64(f);
}

/* An explicit CAS (meta E) that no flush has passed: above the counter, or
 * between the last flush's watermark and the counter (reusing a CAS). */
static uint64_t
fz_cas_new(struct fz *f)
{
    uint8_t b = fz_u8(f);
    uint64_t cas;
    /* a flush due now takes effect in this operation, with a watermark up
     * to cas_hi */
    bool due = f->flush_at && f->now >= f->flush_at;
    if (b < 128 || due || f->cas_hi <= f->flush_hi)
        cas = f->cas_hi + 1 + b;
    else
        cas = f->flush_hi + 1 + fz_u8(f) % (f->cas_hi - f->flush_hi);
    if (cas > f->cas_hi)
        f->cas_hi = cas;
    return cas;
}

/* The outcome of a plain store (store_plain: set, add, replace, cas, and
 * meta C without I) against the model's two possible states. */
static int
fz_expect_plain(struct fz *f, unsigned k, bool live, enum tc_store_mode mode,
                bool cas_check, uint64_t cas_in, uint32_t vlen)
{
    int rc = fz_store_decision(&f->m[k], live, mode, cas_check, cas_in);
    if (rc != TC_OK)
        return rc;
    if (fz_too_big(k, vlen))
        return -E2BIG;
    /* meta C with add: the CAS matched, the key is there: not stored */
    if (mode == TC_ADD && live)
        return TC_NOT_STORED;
    return TC_OK;
}

/* meta ms with I: the client's CAS older than the item's stores it stale,
 * newer is refused. */
static int
fz_expect_stale(struct fz *f, unsigned k, bool live, uint64_t cas_in,
                uint32_t vlen)
{
    if (!live)
        return TC_NOT_FOUND;
    if (cas_in > f->m[k].cas)
        return TC_EXISTS;
    return fz_too_big(k, vlen) ? -E2BIG : TC_OK;
}

/* append/prepend (store_concat). */
static int
fz_expect_concat(struct fz *f, unsigned k, bool live, bool cas_check,
                 uint64_t cas_in, bool vivify, uint32_t vlen)
{
    if (!live) {
        if (!vivify)
            return TC_NOT_STORED;
        return fz_too_big(k, vlen) ? -E2BIG : TC_OK;
    }
    if (cas_check && f->m[k].cas != cas_in)
        return TC_EXISTS;
    return fz_too_big(k, (uint64_t)f->m[k].vlen + vlen) ? -E2BIG : TC_OK;
}

/* The result rc of an operation on key k, against the model: `want` is what
 * a live item gives, `alt` what an absent one gives. A live item answered
 * as absent is an eviction (fz_lost). Returns whether the engine acted on
 * a live item. */
static bool
fz_judge(struct fz *f, unsigned k, int rc, int want, int alt, bool alloc,
         const char *what)
{
    bool live = fz_live(f, k);
    if (!live)
        want = alt;
    if (rc == -ENOMEM && alloc) {
        f->enomem++;
        return live;
    }
    if (live && rc != want && rc == alt) {
        fz_lost(f, k, what);
        return false;
    }
    FUZZ_CHECK(rc == want, "op %u (%s): key %u: %d, the model says %d", f->op,
               what, k, rc, want);
    return live;
}

struct fz_store {
    enum tc_store_mode mode;
    unsigned k;
    uint8_t val[FZ_VAL_MAX];
    uint32_t vlen, flags;
    int64_t exptime;
    struct tc_store_opts o;
    bool ex; /* through tc_store_ex with o (else tc_store/tc_set) */
};

/* After an operation on key k: true when the key is one the API refuses
 * (which it must have, before looking at anything). Otherwise the engine
 * has looked at the clock: a delayed flush whose time has come took
 * effect first. */
static bool
fz_bad_key(struct fz *f, unsigned k, int rc, const char *what)
{
    if (k < FZ_NKEYS) {
        fz_flush_check(f);
        return false;
    }
    FUZZ_CHECK(rc == -EINVAL, "op %u (%s): key of %zu bytes: %d", f->op, what,
               fz_klen[k], rc);
    return true;
}

/* Whether the cache may have lost key k since the model last saw it. */
static bool
fz_may_lose(const struct fz *f, unsigned k)
{
    return f->losses > f->m[k].loss_at && f->forgotten < f->losses;
}

/* append/prepend with N stored on a key the model holds: it appended, or
 * (after an eviction) found the key gone and created it. The header read
 * back tells which. */
static bool
fz_concat_appended(struct fz *f, const struct fz_store *s)
{
    static struct fz_got g;
    const struct fz_item *m = &f->m[s->k];
    struct tc_get_opts o = {.no_bump = true, .head_only = true};

    if (!s->o.vivify || !fz_may_lose(f, s->k))
        return true;
    g.called = false;
    int rc = tc_get_ex(f->c, fz_keys[s->k], fz_klen[s->k], &o, fz_collect, &g);
    /* a miss: created already expired (an appended item would be live,
     * and nothing was allocated since) */
    return rc == TC_OK &&
           (g.info.vlen == m->vlen + s->vlen && g.info.flags == m->flags &&
            g.info.exptime == m->exptime && g.info.stale == m->stale);
}

static void
fz_apply_concat(struct fz *f, struct fz_store *s, bool live, uint64_t cas)
{
    struct fz_item *m = &f->m[s->k];
    if (!live) { /* meta N: created */
        fz_put(f, s->k, s->val, s->vlen, s->flags,
               fz_abs_exptime(s->o.vivify_exptime, f->now), cas, false);
        return;
    }
    if (s->mode == TC_APPEND) {
        memcpy(m->val + m->vlen, s->val, s->vlen);
    } else {
        memmove(m->val + s->vlen, m->val, m->vlen);
        memcpy(m->val, s->val, s->vlen);
    }
    m->vlen += s->vlen;
    m->cas = cas;
    m->stale = false; /* memcached: a new item, no longer stale */
    m->loss_at = f->losses;
}

static void
fz_run_store(struct fz *f, struct fz_store *s)
{
    uint64_t cas = 0;
    unsigned k = s->k;
    bool plain_set = false; /* tc_set: the CAS is not reported */
    int rc;
    if (s->ex)
        rc = tc_store_ex(f->c, s->mode, fz_keys[k], fz_klen[k], s->val, s->vlen,
                         s->flags, s->exptime, &s->o, &cas);
    else if ((plain_set = s->mode == TC_SET && s->flags == 0))
        rc = tc_set(f->c, fz_keys[k], fz_klen[k], s->val, s->vlen, 0,
                    s->exptime);
    else
        rc = tc_store(f->c, s->mode, fz_keys[k], fz_klen[k], s->val, s->vlen,
                      s->flags, s->exptime, s->o.cas_in, &cas);
    if (f->trace)
        fprintf(stderr,
                "  mode %d key %u vlen %u flags %u exptime %" PRId64
                " cas_in %" PRIu64 " C%d I%d N%d E%" PRIu64 ": %d\n",
                s->mode, k, s->vlen, s->flags, s->exptime, s->o.cas_in,
                s->o.cas_check, s->o.invalidate, s->o.vivify, s->o.cas_new, rc);
    if (fz_bad_key(f, k, rc, "store"))
        return;
    f->losses = fz_loss_counters(f);

    bool concat = s->mode == TC_APPEND || s->mode == TC_PREPEND;
    bool stale = !concat && s->mode != TC_ADD && s->o.invalidate &&
                 (s->o.cas_check || s->mode == TC_CAS);
    int want, alt;
    if (concat) {
        want = fz_expect_concat(f, k, true, s->o.cas_check, s->o.cas_in,
                                s->o.vivify, s->vlen);
        alt = fz_expect_concat(f, k, false, s->o.cas_check, s->o.cas_in,
                               s->o.vivify, s->vlen);
    } else if (stale) {
        want = fz_expect_stale(f, k, true, s->o.cas_in, s->vlen);
        alt = fz_expect_stale(f, k, false, s->o.cas_in, s->vlen);
    } else {
        want = fz_expect_plain(f, k, true, s->mode, s->o.cas_check, s->o.cas_in,
                               s->vlen);
        alt = fz_expect_plain(f, k, false, s->mode, s->o.cas_check, s->o.cas_in,
                              s->vlen);
    }
    bool live = fz_judge(f, k, rc, want, alt, true, "store");
    /* memcached: a set that cannot be stored drops the old value */
    if ((rc == -ENOMEM || rc == -E2BIG) && s->mode == TC_SET && !stale)
        f->m[k].present = false;
    if (rc != TC_OK)
        return;
    if (plain_set) {
        fz_put(f, k, s->val, s->vlen, 0, fz_abs_exptime(s->exptime, f->now), 0,
               false);
        if (fz_live(f, k))
            fz_learn_cas(f, k);
        return;
    }
    fz_new_cas(f, cas, s->o.cas_new);
    if (concat) {
        if (live && !fz_concat_appended(f, s)) {
            fz_lost(f, k, "concat");
            live = false;
        }
        fz_apply_concat(f, s, live, cas);
        return;
    }
    bool mark = stale && s->o.cas_in < f->m[k].cas;
    /* memcached: a value stored stale keeps the old item's TTL */
    uint32_t exptime =
        mark ? f->m[k].exptime : fz_abs_exptime(s->exptime, f->now);
    fz_put(f, k, s->val, s->vlen, s->flags, exptime, cas, mark);
}

/* tc_set / tc_store with every mode. */
static void
fz_op_store(struct fz *f)
{
    static struct fz_store s;
    memset(&s.o, 0, sizeof(s.o));
    s.mode = (enum tc_store_mode)(fz_u8(f) % 6);
    s.k = fz_key(f);
    s.vlen = fz_value(f, s.val);
    s.flags = fz_u8(f) < 128 ? 0 : (uint32_t)fz_u64(f);
    s.exptime = fz_exptime(f);
    s.o.cas_in = s.mode == TC_CAS ? fz_cas_in(f, s.k) : 0;
    s.ex = false;
    fz_run_store(f, &s);
}

/* tc_store_ex with the meta options. */
static void
fz_op_store_ex(struct fz *f)
{
    static struct fz_store s;
    uint8_t bits = fz_u8(f);
    memset(&s.o, 0, sizeof(s.o));
    s.mode = (enum tc_store_mode)(fz_u8(f) % 6);
    s.k = fz_key(f);
    s.vlen = fz_value(f, s.val);
    s.flags = (uint32_t)fz_u64(f);
    s.exptime = fz_exptime(f);
    s.o.cas_check = bits & 1;
    s.o.invalidate = bits & 2;
    s.o.vivify = bits & 4;
    if (s.o.cas_check || s.mode == TC_CAS)
        s.o.cas_in = fz_cas_in(f, s.k);
    if (bits & 8)
        s.o.cas_new = fz_cas_new(f);
    if (s.o.vivify)
        s.o.vivify_exptime = fz_exptime(f);
    s.ex = true;
    fz_run_store(f, &s);
}

/* tc_get_copy, into a buffer that may be shorter than the value. */
static void
fz_op_get_copy(struct fz *f)
{
    static uint8_t buf[FZ_ITEM_MAX];
    unsigned k = fz_key(f);
    uint8_t b = fz_u8(f);
    size_t cap = b < 200 ? sizeof(buf) : b % 64;
    struct tc_item_info info;

    int rc = tc_get_copy(f->c, fz_keys[k], fz_klen[k], buf, cap, &info);
    fz_trace_read(f, k, rc, &info);
    if (fz_bad_key(f, k, rc, "get_copy"))
        return;
    f->losses = fz_loss_counters(f);
    fz_judge(f, k, rc, TC_OK, TC_NOT_FOUND, false, "get_copy");
    if (rc == TC_OK)
        fz_check_hit(f, k, &info, buf,
                     (uint32_t)(cap < info.vlen ? cap : info.vlen), true,
                     "get_copy");
    else
        f->m[k].present = false;
}

static void
fz_got_hit(struct fz *f, unsigned k, struct fz_got *g, bool head_only,
           const char *what)
{
    FUZZ_CHECK(g->called, "op %u (%s): hit without a callback", f->op, what);
    bool with_value = !(head_only && g->info.flash);
    if (with_value)
        FUZZ_CHECK(g->len == g->info.vlen,
                   "op %u (%s): %u value bytes for vlen %u", f->op, what,
                   g->len, g->info.vlen);
    fz_check_hit(f, k, &g->info, g->buf, g->len, with_value, what);
}

/* tc_get_ex with touch, vivify, no_bump, recache_below, head_only. */
static void
fz_op_get_ex(struct fz *f)
{
    static struct fz_got g;
    uint8_t bits = fz_u8(f);
    unsigned k = fz_key(f);
    bool vivified = false;
    struct tc_get_opts o = {
        .touch = bits & 1,
        .vivify = bits & 2,
        .no_bump = bits & 4,
        .head_only = bits & 8,
        .recache_below = bits & 16 ? fz_u8(f) : 0,
        .vivified = &vivified,
    };
    if (o.touch)
        o.exptime = fz_exptime(f);
    if (o.vivify)
        o.vivify_exptime = fz_exptime(f);
    g.called = false;

    int rc = tc_get_ex(f->c, fz_keys[k], fz_klen[k], &o, fz_collect, &g);
    fz_trace_read(f, k, rc, &g.info);
    if (fz_bad_key(f, k, rc, "get_ex"))
        return;
    f->losses = fz_loss_counters(f);
    fz_judge(f, k, rc, TC_OK, TC_NOT_FOUND, o.vivify, "get_ex");
    if (rc == TC_OK) {
        FUZZ_CHECK(!vivified, "op %u: get_ex hit and vivified", f->op);
        if (o.touch)
            f->m[k].exptime = fz_abs_exptime(o.exptime, f->now);
        fz_got_hit(f, k, &g, o.head_only, "get_ex");
        return;
    }
    if (rc == -ENOMEM && fz_live(f, k)) /* making the placeholder: a miss */
        fz_lost(f, k, "get_ex");
    f->m[k].present = false;
    if (rc != TC_NOT_FOUND)
        return;
    FUZZ_CHECK(vivified == o.vivify, "op %u: get_ex miss, vivified %d of %d",
               f->op, vivified, o.vivify);
    if (vivified) { /* an empty placeholder, CAS not reported */
        fz_put(f, k, NULL, 0, 0, fz_abs_exptime(o.vivify_exptime, f->now), 0,
               false);
        if (fz_live(f, k))
            fz_learn_cas(f, k);
    }
}

/* tc_gat: get and touch. */
static void
fz_op_gat(struct fz *f)
{
    static struct fz_got g;
    unsigned k = fz_key(f);
    int64_t e = fz_exptime(f);
    g.called = false;

    int rc = tc_gat(f->c, fz_keys[k], fz_klen[k], e, fz_collect, &g);
    if (fz_bad_key(f, k, rc, "gat"))
        return;
    f->losses = fz_loss_counters(f);
    fz_judge(f, k, rc, TC_OK, TC_NOT_FOUND, false, "gat");
    if (rc != TC_OK) {
        f->m[k].present = false;
        return;
    }
    f->m[k].exptime = fz_abs_exptime(e, f->now);
    fz_got_hit(f, k, &g, false, "gat");
}

static void
fz_op_delete(struct fz *f)
{
    unsigned k = fz_key(f);
    bool drop = fz_u8(f) & 1;
    uint64_t cas_in = drop || fz_u8(f) < 128 ? 0 : fz_cas_in(f, k);

    int rc = drop ? tc_drop(f->c, fz_keys[k], fz_klen[k])
                  : tc_delete(f->c, fz_keys[k], fz_klen[k], cas_in);
    if (fz_bad_key(f, k, rc, "delete"))
        return;
    f->losses = fz_loss_counters(f);
    int want = cas_in && cas_in != f->m[k].cas ? TC_EXISTS : TC_OK;
    fz_judge(f, k, rc, want, TC_NOT_FOUND, false, "delete");
    if (rc != TC_EXISTS)
        f->m[k].present = false;
}

static void
fz_op_touch(struct fz *f)
{
    unsigned k = fz_key(f);
    int64_t e = fz_exptime(f);

    int rc = tc_touch(f->c, fz_keys[k], fz_klen[k], e);
    if (fz_bad_key(f, k, rc, "touch"))
        return;
    f->losses = fz_loss_counters(f);
    if (fz_judge(f, k, rc, TC_OK, TC_NOT_FOUND, false, "touch")) {
        f->m[k].exptime = fz_abs_exptime(e, f->now);
        f->m[k].loss_at = f->losses0;
    } else {
        f->m[k].present = false;
    }
}

/* memcached's number rule for incr/decr (safe_strtoull): leading spaces,
 * digits, then the end or a space (or \r, \n). */
static bool
fz_parse_u64(const uint8_t *s, uint32_t n, uint64_t *out)
{
    uint64_t v = 0;
    uint32_t i = 0, start;
    if (n > 64)
        return false;
    while (i < n && s[i] == ' ')
        i++;
    for (start = i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (i == start || (i < n && s[i] != ' ' && s[i] != '\r' && s[i] != '\n'))
        return false;
    *out = v;
    return true;
}

/* The bytes of a value incr/decr reads its number from (memcached reads
 * it with strtoull, which stops at the first space). */
#define FZ_ARITH_HEAD 64u

/* Whether the value of key k with vlen bytes is chained over several
 * chunks (memcached's chunked items, which incr refuses as non-numeric). */
static bool
fz_chained(unsigned k, uint32_t vlen)
{
    return sizeof(struct item_hdr) + fz_klen[k] + vlen > FZ_CHUNK_MAX;
}

/* The number at the start of a value: leading spaces, digits, then the
 * end or a space; false when the digits run on past the bytes read. */
static bool
fz_value_number(const struct fz_item *m, uint64_t *out)
{
    uint32_t head = m->vlen < FZ_ARITH_HEAD ? m->vlen : FZ_ARITH_HEAD;
    if (!fz_parse_u64(m->val, head, out))
        return false;
    if (head == m->vlen)
        return true;
    uint32_t i = 0;
    while (i < head && m->val[i] == ' ')
        i++;
    while (i < head && m->val[i] >= '0' && m->val[i] <= '9')
        i++;
    return i < head;
}

/* What incr/decr gives for a live item, in memcached's order (an empty or
 * chained value, then the CAS, then the digits): TC_OK with *v the new
 * value, or TC_NON_NUMERIC / TC_EXISTS. *also: another right answer: a
 * chained value that went to flash comes back in one piece, and is then
 * judged by its CAS and digits. */
static int
fz_expect_arith(struct fz *f, unsigned k, bool incr, uint64_t delta,
                uint64_t cas_in, uint64_t *v, int *also)
{
    const struct fz_item *m = &f->m[k];
    uint64_t old;
    int flat = TC_OK;
    if (cas_in && cas_in != m->cas)
        flat = TC_EXISTS;
    else if (!fz_value_number(m, &old))
        flat = TC_NON_NUMERIC;
    else
        *v = incr ? old + delta : (delta > old ? 0 : old - delta);
    *also = flat;
    if (m->vlen == 0)
        return *also = TC_NON_NUMERIC;
    if (fz_chained(k, m->vlen)) {
        if (!FZ_HAS_EXT)
            *also = TC_NON_NUMERIC;
        return TC_NON_NUMERIC;
    }
    return flat;
}

/* The value after incr/decr: as memcached, a number that fits is written
 * over the old value, space padded to its length, the stale mark kept; a
 * longer one is a new item, no longer stale. */
static void
fz_put_number(struct fz *f, unsigned k, uint64_t v, uint32_t exptime,
              uint64_t cas)
{
    struct fz_item *m = &f->m[k];
    char digits[24];
    uint32_t len = (uint32_t)sprintf(digits, "%" PRIu64, v);
    memcpy(m->val, digits, len);
    if (len <= m->vlen) {
        memset(m->val + len, ' ', m->vlen - len);
    } else {
        m->vlen = len;
        m->stale = false;
    }
    m->exptime = exptime;
    m->cas = cas;
    m->loss_at = f->losses;
}

/* tc_incr / tc_decr, or tc_arith_ex with the meta options. */
static void
fz_op_arith(struct fz *f)
{
    uint8_t bits = fz_u8(f);
    unsigned k = fz_key(f);
    bool incr = bits & 1, ex = bits & 2;
    uint64_t delta = bits & 4 ? fz_u64(f) : fz_u8(f);
    struct tc_arith_opts o = {0};
    struct tc_item_info info = {0};
    uint64_t value = 0, cas = 0, want_v = 0;
    int rc;

    if (ex) {
        o.vivify = bits & 8;
        o.touch = bits & 16;
        o.initial = bits & 32 ? fz_u64(f) : fz_u8(f);
        if (o.vivify)
            o.vivify_exptime = fz_exptime(f);
        if (o.touch)
            o.exptime = fz_exptime(f);
        if (bits & 64)
            o.cas_in = fz_cas_in(f, k);
        rc = tc_arith_ex(f->c, fz_keys[k], fz_klen[k], incr, delta, &o, &value,
                         &info);
        cas = info.cas;
    } else if (incr) {
        rc = tc_incr(f->c, fz_keys[k], fz_klen[k], delta, &value, &cas);
    } else {
        rc = tc_decr(f->c, fz_keys[k], fz_klen[k], delta, &value, &cas);
    }
    if (fz_bad_key(f, k, rc, "arith"))
        return;
    f->losses = fz_loss_counters(f);

    int also;
    int want = fz_expect_arith(f, k, incr, delta, o.cas_in, &want_v, &also);
    if (rc == also)
        want = also;
    int alt = o.vivify ? TC_OK : TC_NOT_FOUND;
    bool live = fz_judge(f, k, rc, want, alt, true, "arith");
    if (rc != TC_OK)
        return;
    fz_new_cas(f, cas, 0);
    /* with N both a live item and a lost one give TC_OK: the header says
     * which */
    if (live && o.vivify &&
        !(value == want_v && info.flags == f->m[k].flags &&
          info.stale == f->m[k].stale &&
          info.exptime == (o.touch ? fz_abs_exptime(o.exptime, f->now)
                                   : f->m[k].exptime))) {
        fz_lost(f, k, "arith");
        live = false;
    }
    if (!live) { /* meta N: created with the initial value */
        FUZZ_CHECK(value == o.initial,
                   "op %u: arith created %" PRIu64 ", initial %" PRIu64, f->op,
                   value, o.initial);
        fz_put(f, k, NULL, 0, 0, fz_abs_exptime(o.vivify_exptime, f->now), cas,
               false);
        fz_put_number(f, k, value, f->m[k].exptime, cas);
    } else {
        FUZZ_CHECK(value == want_v,
                   "op %u: key %u %s %" PRIu64 " gave %" PRIu64
                   ", the model says %" PRIu64,
                   f->op, k, incr ? "incr" : "decr", delta, value, want_v);
        uint32_t exptime =
            o.touch ? fz_abs_exptime(o.exptime, f->now) : f->m[k].exptime;
        fz_put_number(f, k, value, exptime, cas);
    }
    if (ex) /* the new item's header as tc_arith_ex reports it */
        FUZZ_CHECK(info.vlen == f->m[k].vlen && info.flags == f->m[k].flags &&
                       info.exptime == f->m[k].exptime &&
                       info.stale == f->m[k].stale,
                   "op %u: arith info vlen %u flags %u exptime %u stale %d",
                   f->op, info.vlen, info.flags, info.exptime, info.stale);
}

/* tc_invalidate: marked stale, CAS renewed (not reported). */
static void
fz_op_invalidate(struct fz *f)
{
    unsigned k = fz_key(f);
    uint64_t cas_in = fz_u8(f) < 128 ? 0 : fz_cas_in(f, k);
    int64_t e = fz_u8(f) < 128 ? -1 : fz_exptime(f);
    if (e < -1)
        e = -1; /* negative keeps the expiry: any negative is the same */

    int rc = tc_invalidate(f->c, fz_keys[k], fz_klen[k], cas_in, e);
    if (fz_bad_key(f, k, rc, "invalidate"))
        return;
    f->losses = fz_loss_counters(f);
    int want = cas_in && cas_in != f->m[k].cas ? TC_EXISTS : TC_OK;
    bool live = fz_judge(f, k, rc, want, TC_NOT_FOUND, true, "invalidate");
    if (!live)
        f->m[k].present = false;
    if (rc != TC_OK)
        return;
    f->m[k].stale = true;
    if (e >= 0)
        f->m[k].exptime = fz_abs_exptime(e, f->now);
    if (fz_live(f, k))
        fz_learn_cas(f, k);
    else
        f->m[k].present = false;
}

static void
fz_op_flush(struct fz *f)
{
    uint8_t b = fz_u8(f);
    int64_t delay = b < 128 ? 0 : b < 250 ? b % 40 : fz_exptime(f);

    FUZZ_CHECK(tc_flush_all(f->c, delay) == TC_OK, "op %u: flush_all", f->op);
    if (f->trace)
        fprintf(stderr, "  delay %" PRId64 "\n", delay);
    if (delay > 0) {
        f->flush_at = fz_abs_exptime(delay, f->now);
        return;
    }
    f->flush_at = 0;
    for (unsigned k = 0; k < FZ_NKEYS; k++)
        f->m[k].present = false;
    f->flush_hi = f->cas_hi;
}

static void
fz_op_clock(struct fz *f)
{
    uint8_t b = fz_u8(f);
    uint32_t secs = b < 200 ? b % 8 : b < 250 ? b : 3600u * (b - 249);
    tc_clock_advance(secs);
    f->now += secs;
}

/* tc_set_mem_limit between 0 and a few pages more than the pool has. */
static void
fz_op_mem_limit(struct fz *f)
{
    uint8_t b = fz_u8(f);
    uint64_t pages = b % 8, npages = (FZ_POOL_SIZE >> 20) - 2;
    uint64_t bytes = pages * FZ_MIB + (b & 0x80 ? fz_u16(f) : 0);

    if (pages >= 1 && pages <= npages && bytes < f->limit &&
        f->shrinks++ >= FZ_SHRINK_MAX)
        return;

    int rc = tc_set_mem_limit(f->c, bytes);
    if (f->trace)
        fprintf(stderr, "  mem limit %" PRIu64 ": %d\n", bytes, rc);
    if (pages < 1 || pages > npages)
        FUZZ_CHECK(rc == -EINVAL, "op %u: mem limit %" PRIu64 ": %d", f->op,
                   bytes, rc);
    else
        FUZZ_CHECK(rc == 0 || rc == -EBUSY, "op %u: mem limit %" PRIu64 ": %d",
                   f->op, bytes, rc);
    if (rc == 0 || rc == -EBUSY)
        f->limit = pages * FZ_MIB;
    f->losses = fz_loss_counters(f);
}

static void
fz_op_reassign(struct fz *f)
{
    int n = tc_slab_nclasses(f->c);
    int src = (int)(fz_u8(f) % (n + 2)) - 1, dst = fz_u8(f) % (n + 1);

    int rc = tc_slab_reassign(f->c, src, dst);
    if (f->trace)
        fprintf(stderr, "  reassign %d -> %d: %d\n", src, dst, rc);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOENT || rc == -EBUSY,
               "op %u: slab reassign %d -> %d: %d", f->op, src, dst, rc);
    if (dst >= n || src >= n)
        FUZZ_CHECK(rc == -EINVAL, "op %u: slab reassign %d -> %d: %d", f->op,
                   src, dst, rc);
    f->losses = fz_loss_counters(f);
}

static void
fz_op_maintain(struct fz *f)
{
    int rc = tc_maintain(f->c);
    FUZZ_CHECK(rc >= 0, "op %u: tc_maintain: %d", f->op, rc);
    fz_flush_check(f);
    f->losses = fz_loss_counters(f);
}

/* Filler items under keys outside the model's (which never reads them):
 * memory and index pressure without large values. */
static void
fz_op_fill(struct fz *f)
{
    static uint8_t val[FZ_VAL_MAX];
    unsigned count = 1 + fz_u8(f) % 64, at = fz_u16(f);
    uint32_t vlen = fz_u8(f) * 16u;
    char key[16];

    if (count > FZ_FILL_MAX - f->filled)
        count = FZ_FILL_MAX - f->filled;
    f->filled += count;
    memset(val, 'f', vlen);
    f->cas_hi += count;
    for (unsigned i = 0; i < count; i++) {
        int klen = snprintf(key, sizeof(key), "fill%u", (at + i) % 1024);
        int rc = tc_set(f->c, key, (size_t)klen, val, vlen, 0, 0);
        bool big = sizeof(struct item_hdr) + (size_t)klen + vlen > FZ_ITEM_MAX;
        FUZZ_CHECK(rc == (big ? -E2BIG : TC_OK) || rc == -ENOMEM,
                   "op %u: fill %s: %d", f->op, key, rc);
    }
    fz_flush_check(f);
    f->losses = fz_loss_counters(f);
}

static void
fz_check(struct fz *f)
{
    int rc = tc_check(f->c);
    FUZZ_CHECK(rc == 0, "op %u: tc_check: %d %s", f->op, rc, tc_errmsg());
}

/* ---------------------------------------------------------------- driver */

enum fz_opcode {
    FZ_STORE,
    FZ_STORE_EX,
    FZ_GET_COPY,
    FZ_GET_EX,
    FZ_GAT,
    FZ_DELETE,
    FZ_ARITH,
    FZ_TOUCH,
    FZ_INVALIDATE,
    FZ_FLUSH,
    FZ_CLOCK,
    FZ_MEM_LIMIT,
    FZ_REASSIGN,
    FZ_MAINTAIN,
    FZ_FILL,
    FZ_NOPS
};

static const char *const fz_op_names[FZ_NOPS] = {
    "store",  "store_ex",  "get_copy", "get_ex",     "gat",
    "delete", "arith",     "touch",    "invalidate", "flush",
    "clock",  "mem_limit", "reassign", "maintain",   "fill",
};

static void
fz_step(struct fz *f, enum fz_opcode op)
{
    /* a bound on the CAS values one operation can use */
    f->cas_hi += 4;
    f->losses0 = f->losses;
    switch (op) {
    case FZ_STORE:
        fz_op_store(f);
        break;
    case FZ_STORE_EX:
        fz_op_store_ex(f);
        break;
    case FZ_GET_COPY:
        fz_op_get_copy(f);
        break;
    case FZ_GET_EX:
        fz_op_get_ex(f);
        break;
    case FZ_GAT:
        fz_op_gat(f);
        break;
    case FZ_DELETE:
        fz_op_delete(f);
        break;
    case FZ_ARITH:
        fz_op_arith(f);
        break;
    case FZ_TOUCH:
        fz_op_touch(f);
        break;
    case FZ_INVALIDATE:
        fz_op_invalidate(f);
        break;
    case FZ_FLUSH:
        fz_op_flush(f);
        break;
    case FZ_CLOCK:
        fz_op_clock(f);
        break;
    case FZ_MEM_LIMIT:
        fz_op_mem_limit(f);
        break;
    case FZ_REASSIGN:
        fz_op_reassign(f);
        break;
    case FZ_MAINTAIN:
        fz_op_maintain(f);
        break;
    case FZ_FILL:
        fz_op_fill(f);
        break;
    case FZ_NOPS:
        break;
    }
}

/* Every key read back once more: hits as the model says, misses only as
 * evictions. */
static void
fz_final(struct fz *f)
{
    static uint8_t buf[FZ_ITEM_MAX];
    fz_flush_check(f);
    for (unsigned k = 0; k < FZ_NKEYS; k++) {
        struct tc_item_info info;
        int rc =
            tc_get_copy(f->c, fz_keys[k], fz_klen[k], buf, sizeof(buf), &info);
        fz_trace_read(f, k, rc, &info);
        f->losses = fz_loss_counters(f);
        fz_judge(f, k, rc, TC_OK, TC_NOT_FOUND, false, "final");
        if (rc == TC_OK)
            fz_check_hit(f, k, &info, buf, info.vlen, true, "final");
    }
    fz_check(f);
}

/* ------------------------------------------------------------- the cache */

static char fz_pool_path[96];
#ifdef FZ_EXT
static char fz_ext_path[96];
#endif

static void
fz_config(struct tc_config *cfg)
{
    snprintf(fz_pool_path, sizeof(fz_pool_path),
             "/dev/shm/tc_fuzz_engine_%d.pool", (int)getpid());
    unlink(fz_pool_path);
    tc_config_init(cfg);
    cfg->pool_path = fz_pool_path;
    cfg->pool_size = FZ_POOL_SIZE;
    cfg->item_size_max = FZ_ITEM_MAX;
    cfg->chunk_max = FZ_CHUNK_MAX;
    cfg->growth_factor = 2.0; /* 64 .. 1024: five classes */
    cfg->quota_batch = 4;     /* thread stashes stay small */
    cfg->expected_items = 64; /* the smallest index: overflow buckets */
    cfg->background = false;
    cfg->evict = true;
#ifdef FZ_EXT
    /* flash files under /tmp: tmpfs refuses O_DIRECT */
    snprintf(fz_ext_path, sizeof(fz_ext_path), "/tmp/tc_fuzz_engine_%d.nvs",
             (int)getpid());
    unlink(fz_ext_path);
    cfg->ext_npaths = 1;
    cfg->ext_path[0] = fz_ext_path;
    cfg->ext_size[0] = 8u << 20;
    cfg->ext_page_size = 1u << 20;
    cfg->ext_wbuf_size = 256u << 10;
    cfg->ext_item_size = 256;
    cfg->ext_recache_rate = 2; /* copy every other flash read back */
    cfg->ext_recache_window = 0;
#endif
}

static struct tc_cache *
fz_open(void)
{
    struct tc_config cfg;
    struct tc_cache *c = NULL;

    fz_config(&cfg);
    tc_clock_set(FZ_T0);
    int rc = tc_open(&cfg, &c);
#ifdef FZ_EXT
    if (rc != 0) { /* e.g. O_DIRECT refused: skipped, with the reason */
        static bool told;
        if (!told)
            fprintf(stderr, "SKIP fuzz_engine_ext: %s\n", tc_errmsg());
        told = true;
        unlink(fz_pool_path);
        unlink(fz_ext_path);
        return NULL;
    }
#endif
    FUZZ_CHECK(rc == 0, "tc_open: %d %s", rc, tc_errmsg());
    unlink(fz_pool_path);
#ifdef FZ_EXT
    unlink(fz_ext_path);
#endif
    return c;
}

static void
fz_trace(const struct fz *f, enum fz_opcode op)
{
    if (!f->trace)
        return;
    fprintf(stderr, "op %u: %s (now +%u, losses %" PRIu64 ")\n", f->op,
            fz_op_names[op], f->now - FZ_T0, f->losses);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct fz f;

    if (fz_klen[0] == 0)
        fz_keys_init();
    memset(&f, 0, sizeof(f));
    f.c = fz_open();
    if (!f.c)
        return 0;
    f.p = data;
    f.n = size;
    f.now = FZ_T0;
    f.limit = FZ_POOL_SIZE - 2 * FZ_MIB;
    f.trace = getenv("FUZZ_ENGINE_TRACE") != NULL;
    while (f.n > 0 && f.op < FZ_MAX_OPS) {
        enum fz_opcode op = (enum fz_opcode)(fz_u8(&f) % FZ_NOPS);
        fz_trace(&f, op);
        fz_step(&f, op);
        if (++f.op % FZ_CHECK_EVERY == 0)
            fz_check(&f);
    }
    fz_final(&f);
    if (f.trace) {
        struct tc_stats s;
        tc_stats(f.c, &s);
        fprintf(stderr,
                "%u ops, %" PRIu64 " losses, %" PRIu64 " keys forgotten, "
                "%u -ENOMEM; %" PRIu64 " evictions, %" PRIu64
                " reassigned pages, %" PRIu64
                " values spilled to flash, %" PRIu64 " read from it\n",
                f.op, f.losses, f.forgotten, f.enomem, s.evictions,
                s.slab_reassign_count, s.ext_spilled, s.get_extstore);
    }
    tc_close(f.c);
    tc_clock_set(0);
    return 0;
}

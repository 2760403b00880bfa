/*
 * The reference model of the engine fuzz targets: see engine_model.h.
 */
#include "tests/fuzz/engine_model.h"

#include "src/engine/cache.h"
#include "tests/fuzz/fuzz.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The keys: short ones, the shortest, the longest, two long ones that
 * differ in their last byte only, and one with bytes a text protocol could
 * not carry. Index FZ_NKEYS (and above) is a key the API must refuse. */
uint8_t fz_keys[FZ_NKEYS + 2][TC_KEY_MAX + 1];
size_t fz_klen[FZ_NKEYS + 2];

void
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

uint8_t
fz_u8(struct fz *f)
{
    if (f->n == 0)
        return 0;
    f->n--;
    return *f->p++;
}

uint16_t
fz_u16(struct fz *f)
{
    uint16_t lo = fz_u8(f); /* two statements: the order is the input's */
    return (uint16_t)(lo | fz_u8(f) << 8);
}

uint64_t
fz_u64(struct fz *f)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)fz_u8(f) << (8 * i);
    return v;
}

/* A key index: mostly the key set, rarely a refused key. */
unsigned
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
uint32_t
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
int64_t
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
uint32_t
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

bool
fz_live(const struct fz *f, unsigned k)
{
    const struct fz_item *m = &f->m[k];
    return m->present && (m->exptime == 0 || m->exptime > f->now);
}

uint64_t
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
void
fz_flush_check(struct fz *f)
{
    if (f->flush_at == 0 || f->now < f->flush_at)
        return;
    f->flush_at = 0;
    for (unsigned k = 0; k < FZ_NKEYS; k++)
        f->m[k].present = false;
    fz_flush_watermark(f);
}

/* The engine's CAS counter and flush watermark, read from its struct (the
 * public handle is the engine's struct cache, src/engine/tiercache.c): the
 * counter also moves with the items the engine writes on its own (see
 * engine_model.h, cas_hi), which no operation of the model tells. */
static uint64_t
fz_engine_cas(const struct fz *f)
{
    struct cache *c = (struct cache *)f->c;
    return atomic_load_explicit(&c->cas_seq, memory_order_relaxed);
}

void
fz_flush_watermark(struct fz *f)
{
    struct cache *c = (struct cache *)f->c;
    uint64_t w = atomic_load_explicit(&c->flush_cas, memory_order_acquire);
    if (w > f->flush_hi)
        f->flush_hi = w;
}

void
fz_cas_sync(struct fz *f)
{
    uint64_t seq = fz_engine_cas(f);
    FUZZ_CHECK(seq >= f->cas_max,
               "op %u: CAS counter %" PRIu64 " below CAS %" PRIu64
               " handed out",
               f->op, seq, f->cas_max);
    if (seq <= f->cas_hi)
        return;
    if (f->trace)
        fprintf(stderr,
                "  CAS counter %" PRIu64 ", %" PRIu64
                " above the operations' bound (the engine's own writes)\n",
                seq, seq - f->cas_hi);
    f->cas_hi = seq;
}

/* The engine misses key k where the model holds a live item: allowed only
 * when the cache lost something since the model last saw the item, and
 * never more often than it lost things. */
void
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

uint64_t
fz_cas_floor(const struct fz *f, unsigned k)
{
    const struct fz_item *m = &f->m[k];
    return fz_live(f, k) && f->losses == m->loss_at ? m->cas : 0;
}

/* Record a CAS the engine chose: false when it chose it before. */
static bool
fz_cas_unseen(struct fz *f, uint64_t cas)
{
    uint32_t i = (uint32_t)((cas * 0x9e3779b97f4a7c15ull) >> 40);
    for (unsigned n = 0; n < FZ_CAS_SEEN; n++, i++) {
        uint64_t *slot = &f->cas_seen[i & (FZ_CAS_SEEN - 1)];
        if (*slot == cas)
            return false;
        if (*slot == 0) {
            if (f->ncas_seen < FZ_CAS_SEEN / 4 * 3) {
                *slot = cas;
                f->ncas_seen++;
            }
            return true;
        }
    }
    return true;
}

/* A CAS the engine handed out for a new item. */
void
fz_new_cas(struct fz *f, uint64_t cas, uint64_t explicit_cas, uint64_t floor)
{
    if (explicit_cas) {
        FUZZ_CHECK(cas == explicit_cas,
                   "op %u: CAS %" PRIu64 ", the client asked %" PRIu64, f->op,
                   cas, explicit_cas);
    } else {
        FUZZ_CHECK(cas > floor && cas <= fz_engine_cas(f),
                   "op %u: new CAS %" PRIu64 " not in (%" PRIu64 ", %" PRIu64
                   "] (above the key's previous CAS, at most the counter)",
                   f->op, cas, floor, fz_engine_cas(f));
        FUZZ_CHECK(fz_cas_unseen(f, cas),
                   "op %u: new CAS %" PRIu64 " handed out before", f->op, cas);
    }
    if (cas > f->cas_max)
        f->cas_max = cas;
    fz_cas_sync(f);
}

void
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
    return TC_ITEM_HEADER_SIZE + fz_klen[k] + vlen > FZ_ITEM_MAX;
}

/* ---------------------------------------------------------------- reads */

void
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
void
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
void
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
void
fz_learn_cas(struct fz *f, unsigned k, uint64_t floor)
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
    fz_new_cas(f, g.info.cas, 0, floor);
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
uint64_t
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
uint64_t
fz_cas_new(struct fz *f)
{
    uint8_t b = fz_u8(f);
    uint64_t cas;
    /* a flush due now takes effect in this operation, with a watermark up
     * to cas_hi, or above when the engine writes items of its own first
     * (fz_run_store sees which) */
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
int
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
int
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
int
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
bool
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

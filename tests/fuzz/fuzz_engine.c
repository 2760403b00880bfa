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
 * The model (engine_model.c) keeps, per key of a small key set, what the
 * engine must hold: value, flags, CAS, absolute expiry and the stale mark. It
 * follows memcached's expiry rules and the engine's flush rule (a flush is a
 * CAS watermark, a delayed one takes effect at the first operation that looks
 * at the clock after its time). Checked:
 *
 *   - a hit returns exactly the model's value, flags, CAS, expiry and stale
 *     mark; a key the model says is absent (never stored, deleted, expired,
 *     flushed) is a miss;
 *   - every result is the one the model predicts (stored, not stored,
 *     exists, not found, non-numeric, too large; incr/decr give the model's
 *     value plus or minus the delta); -ENOMEM is always allowed for an
 *     operation that allocates (and a set that fails drops the old value);
 *   - a new CAS is larger than the key's previous one while the engine
 *     still indexes that version (the model holds it live and nothing was
 *     lost since), differs from every CAS the engine chose before, of any
 *     key (E gives exactly the client's), and is never above the engine's
 *     CAS counter, which stays at or above every CAS handed out (an E
 *     above it lifts it). CAS values of different keys are not ordered in
 *     time: a packed item's derives from its segment's block
 *     (doc/design/small-items.md, "Risks"). The counter
 *     is read from the engine: besides the operations' stores it moves
 *     once per item the engine writes on its own (a page move's copy, a
 *     flash header, a value copied back from flash: the commit word's
 *     store sequence), which keeps the item's CAS (the reads check it);
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

#include "src/tiercache.h"
#include "tests/fuzz/engine_model.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FZ_T0 1700000000u
#define FZ_POOL_SIZE (6u << 20) /* 4 pages after the 2 MiB header */
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
#define FZ_MIB (1ull << 20)

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
     * and nothing was allocated since); appended or created, the item is
     * a new one, no longer stale */
    return rc == TC_OK &&
           (g.info.vlen == m->vlen + s->vlen && g.info.flags == m->flags &&
            g.info.exptime == m->exptime && !g.info.stale);
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
    uint64_t floor = fz_cas_floor(f, k);
    if (plain_set) {
        fz_put(f, k, s->val, s->vlen, 0, fz_abs_exptime(s->exptime, f->now), 0,
               false);
        if (fz_live(f, k))
            fz_learn_cas(f, k, floor);
        return;
    }
    fz_new_cas(f, cas, s->o.cas_new, floor);
    if (concat) {
        if (live && !fz_concat_appended(f, s)) {
            fz_lost(f, k, "concat");
            live = false;
        }
        fz_apply_concat(f, s, live, cas);
    } else {
        bool mark = stale && s->o.cas_in < f->m[k].cas;
        /* memcached: a value stored stale keeps the old item's TTL */
        uint32_t exptime =
            mark ? f->m[k].exptime : fz_abs_exptime(s->exptime, f->now);
        fz_put(f, k, s->val, s->vlen, s->flags, exptime, cas, mark);
    }
    /* an E chosen above the counter while a delayed flush was due: the
     * flush took effect in this store, after the engine's own writes for
     * its memory (a spill, a move) had moved the counter, and its
     * watermark may cover the E */
    if (s->o.cas_new && s->o.cas_new <= f->flush_hi)
        f->m[k].present = false;
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
            fz_learn_cas(f, k, 0);
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
    return TC_ITEM_HEADER_SIZE + fz_klen[k] + vlen > FZ_CHUNK_MAX;
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

/* Whether incr/decr's result v keeps the item's stale mark: as memcached,
 * a number that fits is written over the old value, space padded to its
 * length, the stale mark (and the recache win) kept; a longer one is a new
 * item, no longer stale, with the old TTL. */
static bool
fz_number_stale(const struct fz_item *m, uint64_t v)
{
    char digits[24];
    return m->stale &&
           (uint32_t)snprintf(digits, sizeof(digits), "%" PRIu64, v) <= m->vlen;
}

/* The value after incr/decr (fz_number_stale). */
static void
fz_put_number(struct fz *f, unsigned k, uint64_t v, uint32_t exptime,
              uint64_t cas)
{
    struct fz_item *m = &f->m[k];
    char digits[24];
    uint32_t len = (uint32_t)sprintf(digits, "%" PRIu64, v);
    m->stale = fz_number_stale(m, v);
    memcpy(m->val, digits, len);
    if (len <= m->vlen)
        memset(m->val + len, ' ', m->vlen - len);
    else
        m->vlen = len;
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
    fz_new_cas(f, cas, 0, fz_cas_floor(f, k));
    /* with N both a live item and a lost one give TC_OK: the header says
     * which (a longer number is a new item: no longer stale) */
    if (live && o.vivify &&
        !(value == want_v && info.flags == f->m[k].flags &&
          info.stale == fz_number_stale(&f->m[k], want_v) &&
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
    uint64_t floor = fz_cas_floor(f, k);
    f->m[k].stale = true;
    if (e >= 0)
        f->m[k].exptime = fz_abs_exptime(e, f->now);
    if (fz_live(f, k))
        fz_learn_cas(f, k, floor);
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
    fz_flush_watermark(f);
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
        bool big = TC_ITEM_HEADER_SIZE + (size_t)klen + vlen > FZ_ITEM_MAX;
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
fz_step_op(struct fz *f, enum fz_opcode op)
{
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

static void
fz_step(struct fz *f, enum fz_opcode op)
{
    /* a bound on the CAS values one operation's own writes can use (the
     * engine's own writes are added from its counter afterwards) */
    f->cas_hi += 4;
    f->losses0 = f->losses;
    fz_step_op(f, op);
    fz_cas_sync(f);
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
    cfg->chunk_step = 0;      /* (a chunk step would make 30) */
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

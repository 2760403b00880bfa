/*
 * The write path: set, add, replace, cas, append, prepend, incr, decr.
 *
 * Every write is copy-on-write: the new item is written into fresh chunks
 * with no lock held (PMEM writes happen only here, before publication), then
 * the bucket lock is taken for the DRAM-only decision and index switch, and
 * the old item is freed after a grace period. Read-modify-write commands
 * (append, prepend, incr, decr) read the old item, build the new one, and
 * publish only if the index still holds the item they read (else retry).
 *
 * Concurrency: no state of its own; see src/cache.h. Lock taken: one bucket
 * lock, briefly, per publication. RCU read sections never span an
 * allocation (allocation may wait for a grace period).
 */
#include "src/store.h"

#include "src/cache.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "tier/pm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <urcu/urcu-memb.h>

#define RMW_RETRIES 64

/* STORE_SWAP: publish only if the index still holds `expect`. */
#define STORE_SWAP 100

struct store_req {
    int mode; /* enum tc_store_mode or STORE_SWAP */
    const void *key;
    uint32_t klen;
    uint64_t hash;
    struct item_hdr hdr; /* flags, exptime, vlen, klen filled by caller */
    struct item_src val;
    uint64_t cas_in;
    uint64_t expect; /* loc, for STORE_SWAP */
};

/* Decide under the bucket lock whether the new item may replace what the
 * index holds. Reads PMEM headers only. Returns TC_OK or a tc_result. */
static int
decide_locked(struct cache *c, const struct store_req *r, uint64_t old,
              uint32_t now)
{
    bool live = old && cache_item_dead(c, item_at(c->base, cache_off(old)),
                                       now) == CACHE_LIVE;
    switch (r->mode) {
    case TC_ADD:
        return live ? TC_NOT_STORED : TC_OK;
    case TC_REPLACE:
        return live ? TC_OK : TC_NOT_STORED;
    case TC_CAS:
        if (!live)
            return TC_NOT_FOUND;
        return item_at(c->base, cache_off(old))->cas == r->cas_in ? TC_OK
                                                                  : TC_EXISTS;
    case STORE_SWAP:
        return old == r->expect ? TC_OK : -EAGAIN;
    default:
        return TC_OK;
    }
}

static void
count_outcome(struct cache_thread *t, int mode, int rc)
{
    if (mode != TC_CAS)
        return;
    if (rc == TC_OK)
        cache_stat_inc(t, ST_CAS_HITS);
    else if (rc == TC_EXISTS)
        cache_stat_inc(t, ST_CAS_BADVAL);
    else if (rc == TC_NOT_FOUND)
        cache_stat_inc(t, ST_CAS_MISSES);
}

/* Switch the index to the new item. Locks: one bucket. */
static int
publish(struct cache_thread *t, const struct store_req *r, uint64_t head,
        uint32_t now, uint64_t *old_out)
{
    struct cache *c = t->cache;
    struct cache_key k = {c, r->key, r->klen};
    uint64_t loc = cache_loc(head);

    struct htab_bucket *b = htab_lock(c->htab, r->hash);
    _Atomic uint64_t *slot =
        htab_find_locked(b, r->hash, cache_match_key, &k);
    uint64_t old = slot ? htab_slot_loc(atomic_load_explicit(
                              slot, memory_order_relaxed))
                        : 0;
    int rc = decide_locked(c, r, old, now);
    if (rc == TC_OK) {
        if (slot)
            htab_replace_locked(slot, r->hash, loc);
        else if (htab_insert_locked(c->htab, b, r->hash, loc) != 0)
            rc = -ENOMEM;
    }
    htab_unlock(b);
    *old_out = rc == TC_OK ? old : 0;
    return rc;
}

/* Memory for the item r describes. 0, -E2BIG or -ENOMEM. Context: no lock
 * and no RCU read section (allocation may wait for a grace period). */
static int
prepare(struct cache_thread *t, const struct store_req *r,
        struct item_plan *plan, uint64_t *head, uint64_t *tails)
{
    struct cache *c = t->cache;

    item_plan(r->klen, r->hdr.vlen, c->chunk_max, plan);
    /* The limit counts header, key and value, not the chaining overhead,
     * so that what fits does not depend on chunk sizes. */
    if (sizeof(struct item_hdr) + r->klen + (uint64_t)r->hdr.vlen >
        c->cfg.item_size_max) {
        cache_stat_inc(t, ST_STORE_TOO_LARGE);
        return -E2BIG;
    }
    if (cache_alloc_item(t, plan, head, tails) != 0) {
        cache_stat_inc(t, ST_STORE_NO_MEMORY);
        return -ENOMEM;
    }
    return 0;
}

/* Write the prepared item and publish it; on failure its chunks go back.
 * *old receives the replaced item's location (0 if none), which the caller
 * retires with retire_old() once outside any RCU read section. */
static int
commit(struct cache_thread *t, struct store_req *r,
       const struct item_plan *plan, uint64_t head, const uint64_t *tails,
       uint64_t *old, uint64_t *cas_out)
{
    struct cache *c = t->cache;
    uint32_t now = clock_now();

    r->hdr.cas =
        atomic_fetch_add_explicit(&c->cas_seq, 1, memory_order_relaxed) + 1;
    /* PMEM: the item is written here, before it is visible, with no lock
     * held (DESIGN rule 2). */
    item_write(c->base, head, plan, tails, &r->hdr, r->key, &r->val);
    pm_fence(); /* the bytes are in place before the index points at them */

    cache_flush_check(c, now);
    int rc = publish(t, r, head, now, old);
    if (rc != TC_OK) {
        cache_free_unpublished(t, plan, head, tails);
        return rc;
    }
    cache_stat_inc(t, ST_TOTAL_ITEMS);
    cache_account(t, head, 1);
    if (cas_out)
        *cas_out = r->hdr.cas;
    return TC_OK;
}

/* Account for and free (after a grace period) the item a store replaced. */
static void
retire_old(struct cache_thread *t, uint64_t old)
{
    struct cache *c = t->cache;
    if (!old)
        return;
    int dead = cache_item_dead(c, item_at(c->base, cache_off(old)),
                               clock_now());
    cache_account_unlink(t, cache_off(old), dead, false);
    cache_defer_free(t, cache_off(old));
}

/* Prepare, commit and retire: one whole store. */
static int
store_one(struct cache_thread *t, struct store_req *r, uint64_t *cas_out)
{
    struct item_plan plan;
    uint64_t head, tails[ITEM_MAX_TAILS], old = 0;

    int rc = prepare(t, r, &plan, &head, tails);
    if (rc)
        return rc;
    rc = commit(t, r, &plan, head, tails, &old, cas_out);
    retire_old(t, old);
    return rc;
}

int
store_plain(struct cache_thread *t, enum tc_store_mode mode, const void *key,
            uint32_t klen, const void *val, size_t vlen, uint32_t flags,
            int64_t exptime, uint64_t cas_in, uint64_t *cas_out)
{
    struct iovec iov = {(void *)val, vlen};
    struct store_req r = {
        .mode = mode,
        .key = key,
        .klen = klen,
        .hash = cache_hash(t->cache, key, klen),
        .hdr = {.klen = (uint8_t)klen,
                .vlen = (uint32_t)vlen,
                .flags = flags,
                .exptime = cache_exptime(exptime, clock_now())},
        .val = {&iov, 1},
        .cas_in = cas_in,
    };
    cache_stat_inc(t, ST_CMD_SET);
    if (vlen > UINT32_MAX)
        return -E2BIG;
    int rc = store_one(t, &r, cas_out);
    count_outcome(t, mode, rc);
    return rc;
}

/* The item the key maps to now, copied out: header and location. Miss when
 * absent or dead. Context: takes and leaves an RCU read section. */
static bool
snapshot(struct cache *c, const struct store_req *r, struct item_hdr *hdr,
         uint64_t *loc)
{
    struct cache_key k = {c, r->key, r->klen};
    uint32_t now = clock_now();

    cache_flush_check(c, now);
    cache_read_lock();
    *loc = htab_lookup_rcu(c->htab, r->hash, cache_match_key, &k);
    bool hit = *loc != 0;
    if (hit) {
        const struct item_hdr *it = item_at(c->base, cache_off(*loc));
        hit = cache_item_dead(c, it, now) == CACHE_LIVE;
        *hdr = *it;
    }
    cache_read_unlock();
    return hit;
}

int
store_concat(struct cache_thread *t, bool append, const void *key,
             uint32_t klen, const void *val, size_t vlen, uint64_t cas_in,
             uint64_t *cas_out)
{
    struct cache *c = t->cache;
    struct store_req r = {
        .mode = STORE_SWAP,
        .key = key,
        .klen = klen,
        .hash = cache_hash(c, key, klen),
    };
    struct item_hdr old;

    cache_stat_inc(t, ST_CMD_SET);
    for (int i = 0; i < RMW_RETRIES; i++) {
        if (!snapshot(c, &r, &old, &r.expect))
            return TC_NOT_STORED;
        if (cas_in && old.cas != cas_in)
            return TC_EXISTS;
        if ((uint64_t)old.vlen + vlen > UINT32_MAX)
            return -E2BIG;
        r.hdr = old;
        r.hdr.vlen = old.vlen + (uint32_t)vlen;

        struct item_plan plan;
        uint64_t head, tails[ITEM_MAX_TAILS], oldloc = 0;
        int rc = prepare(t, &r, &plan, &head, tails);
        if (rc)
            return rc;
        /* The old value is copied from PMEM inside a read section that
         * starts after allocation; if the item changed meanwhile, the
         * swap fails and the loop starts again. */
        struct iovec iov[ITEM_MAX_TAILS + 2];
        cache_read_lock();
        const struct item_hdr *it = item_at(c->base, cache_off(r.expect));
        int n = item_value_iov(c->base, it, c->chunk_max,
                               append ? iov : iov + 1);
        if (append)
            iov[n] = (struct iovec){(void *)val, vlen};
        else
            iov[0] = (struct iovec){(void *)val, vlen};
        r.val = (struct item_src){iov, n + 1};
        if (it->cas == old.cas) {
            rc = commit(t, &r, &plan, head, tails, &oldloc, cas_out);
        } else {
            cache_free_unpublished(t, &plan, head, tails);
            rc = -EAGAIN;
        }
        cache_read_unlock();
        retire_old(t, oldloc);
        if (rc != -EAGAIN)
            return rc;
    }
    return -EBUSY;
}

/* memcached's rule for a number: digits, then optional trailing spaces
 * (an earlier decr may have left them). */
static bool
parse_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (n == 0 || n > 64)
        return false;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (i == 0)
        return false;
    for (; i < n; i++)
        if (s[i] != ' ' && s[i] != '\r' && s[i] != '\n')
            return false;
    *out = v;
    return true;
}

int
store_arith(struct cache_thread *t, bool incr, const void *key, uint32_t klen,
            uint64_t delta, uint64_t *value, uint64_t *cas_out)
{
    struct cache *c = t->cache;
    struct store_req r = {
        .mode = STORE_SWAP,
        .key = key,
        .klen = klen,
        .hash = cache_hash(c, key, klen),
    };
    struct item_hdr old;
    enum cache_stat hit = incr ? ST_INCR_HITS : ST_DECR_HITS;
    enum cache_stat miss = incr ? ST_INCR_MISSES : ST_DECR_MISSES;

    for (int i = 0; i < RMW_RETRIES; i++) {
        char digits[72];
        uint64_t v;
        if (!snapshot(c, &r, &old, &r.expect)) {
            cache_stat_inc(t, miss);
            return TC_NOT_FOUND;
        }
        if (old.vlen > 64 || old.nchain)
            return TC_NON_NUMERIC;
        cache_read_lock();
        const struct item_hdr *it = item_at(c->base, cache_off(r.expect));
        bool same = it->cas == old.cas;
        if (same)
            pm_read(digits, item_key(it) + it->klen, old.vlen);
        cache_read_unlock();
        if (!same)
            continue;
        if (!parse_u64(digits, old.vlen, &v))
            return TC_NON_NUMERIC;
        v = incr ? v + delta : (delta > v ? 0 : v - delta);
        int len = snprintf(digits, sizeof(digits), "%llu",
                           (unsigned long long)v);
        struct iovec iov = {digits, (size_t)len};
        r.hdr = old;
        r.hdr.vlen = (uint32_t)len;
        r.val = (struct item_src){&iov, 1};
        int rc = store_one(t, &r, cas_out);
        if (rc == -EAGAIN)
            continue;
        if (rc == TC_OK) {
            cache_stat_inc(t, hit);
            *value = v;
        }
        return rc;
    }
    return -EBUSY;
}

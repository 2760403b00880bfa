/*
 * Restart: the scan that brings a pool's items back at open, or the format
 * of a cold start (src/engine/restart.h states the rules).
 *
 * Concurrency: none of its own; runs once at open before the cache is
 * shared. The index bucket lock is taken around each insertion only
 * because the index's functions expect it; no PMEM write happens inside.
 */
#include "src/engine/restart.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "src/engine/restart_layout.h"
#include "tier/pm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct restart_meta *
meta_of(const struct cache *c)
{
    return region_user(c->region);
}

/* The metadata this cache's settings give (flush state zero). */
static void
meta_expected(const struct cache *c, struct restart_meta *m)
{
    double g = c->cfg.growth_factor;

    memset(m, 0, sizeof(*m));
    m->magic = RESTART_MAGIC;
    m->version = RESTART_VERSION;
    m->item_size_max = c->cfg.item_size_max;
    m->min_chunk = slab_chunk_size(c->slab, 0);
    m->chunk_max = c->chunk_max;
    m->nclasses = slab_nclasses(c->slab);
    memcpy(&m->growth_bits, &g, sizeof(g));
}

/* A cold start's pool: metadata for these settings, no flush, an empty
 * page table. PMEM: the header area only. */
static void
format_cold(struct cache *c)
{
    struct restart_meta m;
    uint32_t npages;
    uint8_t *table = region_page_table(c->region, &npages);

    meta_expected(c, &m);
    pm_set(table, RESTART_PAGE_NONE, npages);
    pm_copy(meta_of(c), &m, sizeof(m));
    pm_fence();
}

/* Why the pool cannot be reattached, or NULL when it can. */
static const char *
cold_reason(const struct cache *c)
{
    struct restart_meta want;
    const struct restart_meta *m = meta_of(c);

    if (c->cfg.no_restart)
        return "restart turned off (no_restart)";
    if (!region_reattached(c->region))
        return "no pool of this size and format version in the file";
    if (c->cfg.ablate_meta_in_pmem || c->cfg.ablate_init_in_lock)
        return "an ablation switch is on";
    if (m->magic != RESTART_MAGIC || m->version != RESTART_VERSION)
        return "the pool holds another item format version";
    meta_expected(c, &want);
    if (m->item_size_max != want.item_size_max)
        return "the pool was written with another item size max (-I)";
    if (m->min_chunk != want.min_chunk || m->chunk_max != want.chunk_max ||
        m->nclasses != want.nclasses || m->growth_bits != want.growth_bits)
        return "the pool was written with other slab settings (-n, -f, "
               "slab_chunk_max)";
    if ((region_data_size(c->region) >> POOL_PAGE_SHIFT) >
        REGION_PAGE_TABLE_MAX)
        return "the pool is larger than its page table covers";
    return NULL;
}

/* --- the scan --- */

struct scan {
    struct cache *c;
    uint32_t now;
    const uint8_t *table;
    uint32_t npages;
    bool all_flushed; /* a delayed flush came due while stopped */
    uint64_t flush_cas;
    uint64_t max_cas; /* largest CAS among the committed items */
    uint32_t max_seq; /* newest sequence (serial order), if have_seq */
    bool have_seq;
    uint64_t **used; /* per page: chunk bits of restored items, or NULL */
    struct tc_open_info *info;
};

static uint32_t
page_chunk_size(const struct scan *s, uint64_t off, unsigned *cls)
{
    uint64_t pg = off >> POOL_PAGE_SHIFT;
    if (pg >= s->npages || s->table[pg] == RESTART_PAGE_NONE ||
        s->table[pg] > slab_nclasses(s->c->slab))
        return 0;
    *cls = s->table[pg] - 1u;
    return slab_chunk_size(s->c->slab, *cls);
}

/* Whether a chained item's tails are all there: each on a page with a
 * class, at a chunk boundary, a tail chunk naming this head. */
static bool
tails_ok(const struct scan *s, const struct item_hdr *it, uint64_t head)
{
    const uint64_t *tails = item_tails(it);
    uint64_t len = region_data_size(s->c->region);
    for (unsigned i = 0; i < it->nchain; i++) {
        uint64_t t = tails[i];
        unsigned cls;
        if (t >= len || (t & 7))
            return false;
        uint32_t cs = page_chunk_size(s, t, &cls);
        if (!cs || ((t & (POOL_PAGE_SIZE - 1)) % cs) != 0 ||
            (t & (POOL_PAGE_SIZE - 1)) + cs > POOL_PAGE_SIZE)
            return false;
        const struct item_tail *tl = (const void *)(s->c->base + t);
        if (tl->kind != ITEM_KIND_TAIL || tl->head != head)
            return false;
    }
    return true;
}

static void
note_seq(struct scan *s, const struct item_hdr *it)
{
    uint32_t seq = item_commit_seq(it->commit);
    if (it->cas > s->max_cas)
        s->max_cas = it->cas;
    if (!s->have_seq || item_seq_newer(seq, s->max_seq))
        s->max_seq = seq;
    s->have_seq = true;
}

/* Set (or clear) the bit of the chunk at off in its page's map of chunks
 * in use. */
static int
mark_chunk(struct scan *s, uint64_t off, bool used)
{
    unsigned cls;
    uint32_t cs = page_chunk_size(s, off, &cls);
    uint64_t pg = off >> POOL_PAGE_SHIFT;
    if (!s->used[pg]) {
        if (!used)
            return 0;
        uint32_t words =
            (POOL_PAGE_SIZE / slab_chunk_size(s->c->slab, 0) + 63) / 64;
        s->used[pg] = calloc(words, sizeof(uint64_t));
        if (!s->used[pg])
            return -ENOMEM;
    }
    uint32_t idx = (uint32_t)((off & (POOL_PAGE_SIZE - 1)) / cs);
    if (used)
        s->used[pg][idx / 64] |= 1ull << (idx % 64);
    else
        s->used[pg][idx / 64] &= ~(1ull << (idx % 64));
    return 0;
}

/* An item's head and tails: in use (restored) or not (lost to a newer
 * copy). */
static int
mark_item(struct scan *s, uint64_t off, bool used)
{
    const struct item_hdr *it = item_at(s->c->base, off);
    int rc = mark_chunk(s, off, used);
    for (unsigned i = 0; rc == 0 && i < it->nchain; i++)
        rc = mark_chunk(s, item_tails(it)[i], used);
    return rc;
}

/* Put the item at off into the index, or count why not; a loser is
 * invalidated and its chunks are not in use. PMEM: invalidations, outside
 * the bucket lock. */
static int
restore_one(struct scan *s, uint64_t off)
{
    struct cache *c = s->c;
    const struct item_hdr *it = item_at(c->base, off);
    struct cache_key k = {c, item_key(it), it->klen};
    uint64_t hash = cache_hash(c, item_key(it), it->klen);
    uint64_t loser = off; /* offset 0 is a chunk too: no "0 = none" */
    bool lost = false;    /* a copy (this one or the older) loses */

    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot =
        htab_find_locked(b, hash, cache_match_key_warm, &k);
    if (slot) {
        uint64_t old = cache_off(
            htab_slot_loc(atomic_load_explicit(slot, memory_order_relaxed)));
        const struct item_hdr *o = item_at(c->base, old);
        lost = true;
        if (item_seq_newer(item_commit_seq(it->commit),
                           item_commit_seq(o->commit))) {
            htab_replace_locked(slot, hash, cache_loc(off));
            loser = old;
        }
    } else if (htab_insert_locked(c->htab, b, hash, cache_loc(off)) != 0) {
        lost = true;
        s->info->dropped_no_room++;
    }
    htab_unlock(b);
    int rc = 0;
    if (!lost || loser != off)
        rc = mark_item(s, off, true);
    if (lost) {
        if (slot)
            s->info->dropped_older++;
        if (loser != off && rc == 0)
            rc = mark_item(s, loser, false);
        item_invalidate(c->base, loser);
    }
    return rc;
}

/* Look at every chunk of page pg (class cls). */
static int
scan_page(struct scan *s, uint32_t pg, unsigned cls)
{
    struct cache *c = s->c;
    uint32_t cs = slab_chunk_size(c->slab, cls);
    uint32_t per = POOL_PAGE_SIZE / cs;

    for (uint32_t i = 0; i < per; i++) {
        uint64_t off = ((uint64_t)pg << POOL_PAGE_SHIFT) + (uint64_t)i * cs;
        const struct item_hdr *it = item_at(c->base, off);
        if (!item_kind_is_head(it->kind) || !it->commit)
            continue; /* empty, a tail, or not (or no longer) an item */
        if (it->commit == ITEM_COMMIT_PENDING) {
            /* a copy never committed: its source or a writer's item is
             * what counts (item_layout.h) */
            item_invalidate(c->base, off);
            continue;
        }
        uint64_t *count = NULL;
        if (!item_check(it, cs) || (it->nchain && !tails_ok(s, it, off))) {
            count = &s->info->dropped_torn;
        } else {
            note_seq(s, it);
            if (it->kind == ITEM_KIND_FLASH)
                count = &s->info->dropped_flash;
            else if (it->exptime != 0 && it->exptime <= s->now)
                count = &s->info->dropped_expired;
            else if (s->all_flushed || it->cas <= s->flush_cas)
                count = &s->info->dropped_flushed;
        }
        if (count) {
            (*count)++;
            item_invalidate(c->base, off);
            continue;
        }
        int rc = restore_one(s, off);
        if (rc)
            return rc;
    }
    return 0;
}

/* The restored items of an adopted page, in address order: their DRAM
 * chunk words and their accounting, as if just stored. */
static void
account_page(struct scan *s, struct cache_thread *t, uint32_t pg)
{
    struct cache *c = s->c;
    uint32_t cs = slab_chunk_size(c->slab, s->table[pg] - 1u);
    uint32_t per = POOL_PAGE_SIZE / cs;
    for (uint32_t w = 0; w * 64 < per; w++) {
        uint64_t bits = s->used[pg][w];
        while (bits) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            uint64_t off = ((uint64_t)pg << POOL_PAGE_SHIFT) + (uint64_t)i * cs;
            const struct item_hdr *it = item_at(c->base, off);
            if (it->kind == ITEM_KIND_TAIL)
                continue; /* counted with its head */
            cache_fresh(c, off, s->now, 0);
            cache_account(t, off, 1);
            s->info->items++;
            s->info->bytes += cache_item_bytes(c, it);
        }
    }
}

/* Scan, then hand the pages to their classes and count the items. */
static int
scan_pool(struct cache *c, struct scan *s)
{
    uint32_t limit = pool_limit(c->pool);
    uint8_t *table = region_page_table(c->region, &s->npages);
    int rc = 0;

    s->table = table;
    s->used = calloc(s->npages, sizeof(*s->used));
    if (!s->used) {
        err_set("no DRAM for the restart scan");
        return -ENOMEM;
    }
    for (uint32_t pg = 0; pg < s->npages; pg++) {
        uint8_t b = table[pg];
        if (b == RESTART_PAGE_NONE)
            continue;
        if (pg < limit && b <= slab_nclasses(c->slab)) {
            if ((rc = scan_page(s, pg, b - 1u)) != 0)
                goto out;
            continue;
        }
        /* beyond the memory limit, or no such class: the page goes back
         * to the pool and its byte to "none", so no later scan reads it */
        uint8_t none = RESTART_PAGE_NONE;
        pm_copy(&table[pg], &none, 1);
    }
    for (uint32_t pg = 0; pg < s->npages; pg++) {
        if (table[pg] == RESTART_PAGE_NONE)
            continue;
        if (!s->used[pg]) {
            /* nothing restored here: back to the pool */
            uint8_t none = RESTART_PAGE_NONE;
            pm_copy(&table[pg], &none, 1);
            continue;
        }
        rc = slab_adopt_page(c->slab, pg, table[pg] - 1u, s->used[pg]);
        if (rc)
            goto out;
    }
    struct cache_thread *t = cache_thread_get(c);
    if (!t) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t pg = 0; pg < s->npages; pg++)
        if (table[pg] != RESTART_PAGE_NONE && s->used[pg])
            account_page(s, t, pg);
out:
    for (uint32_t pg = 0; pg < s->npages; pg++)
        free(s->used[pg]);
    free(s->used);
    if (rc)
        err_set("restart scan: %s", strerror(-rc));
    return rc;
}

/* The CAS counter above every CAS and sequence seen and the flush
 * watermark, and the flush state carried over. */
static void
resume_counters(struct cache *c, const struct scan *s)
{
    struct restart_meta *m = meta_of(c);
    uint64_t next = s->max_cas > s->flush_cas ? s->max_cas : s->flush_cas;
    if (s->have_seq) {
        int32_t ahead = (int32_t)(s->max_seq - (uint32_t)next);
        if (ahead > 0)
            next += (uint64_t)ahead;
    }
    atomic_store_explicit(&c->cas_seq, next, memory_order_relaxed);
    if (s->all_flushed) {
        atomic_store_explicit(&c->flush_cas, next, memory_order_relaxed);
        atomic_store_explicit(&c->flush_at, 0, memory_order_relaxed);
    } else {
        atomic_store_explicit(&c->flush_cas, m->flush_cas,
                              memory_order_relaxed);
        atomic_store_explicit(&c->flush_at, m->flush_at, memory_order_relaxed);
    }
    cache_flush_persist(c);
}

static const char *
kind_name(enum tc_start_kind k)
{
    return k == TC_START_COLD   ? "cold"
           : k == TC_START_WARM ? "warm"
                                : "recovered";
}

int
restart_attach(struct cache *c)
{
    struct tc_open_info *info = &c->start;
    const char *why = cold_reason(c);

    memset(info, 0, sizeof(*info));
    if (why) {
        info->kind = TC_START_COLD;
        snprintf(info->reason, sizeof(info->reason), "%s", why);
        format_cold(c);
        /* a pool that was there but does not fit is worth a warning; a new
         * file or no_restart is what was asked for */
        if (c->cfg.no_restart || !region_reattached(c->region))
            log_info("pool %s: cold start: %s", region_path(c->region), why);
        else
            log_warn("pool %s: cold start, items not restored: %s",
                     region_path(c->region), why);
        return 0;
    }
    uint64_t t0 = clock_nsec();
    const struct restart_meta *m = meta_of(c);
    struct scan s = {
        .c = c,
        .now = clock_now(),
        .flush_cas = m->flush_cas,
        .info = info,
    };
    s.all_flushed = m->flush_at != 0 && m->flush_at <= s.now;
    info->kind =
        region_was_clean(c->region) ? TC_START_WARM : TC_START_RECOVERED;
    int rc = scan_pool(c, &s);
    if (rc)
        return rc;
    resume_counters(c, &s);
    pm_fence();
    info->dropped = info->dropped_expired + info->dropped_flushed +
                    info->dropped_older + info->dropped_torn +
                    info->dropped_flash + info->dropped_no_room;
    info->seconds = (double)(clock_nsec() - t0) / 1e9;
    log_info("pool %s: %s start: %llu items (%llu bytes) restored in %.3f s; "
             "dropped %llu (expired %llu, flushed %llu, older copies %llu, "
             "torn %llu, on flash %llu, no index room %llu)",
             region_path(c->region), kind_name(info->kind),
             (unsigned long long)info->items, (unsigned long long)info->bytes,
             info->seconds, (unsigned long long)info->dropped,
             (unsigned long long)info->dropped_expired,
             (unsigned long long)info->dropped_flushed,
             (unsigned long long)info->dropped_older,
             (unsigned long long)info->dropped_torn,
             (unsigned long long)info->dropped_flash,
             (unsigned long long)info->dropped_no_room);
    return 0;
}

/*
 * Restart: the scan that brings a pool's items back at open, or the format
 * of a cold start (src/engine/restart.h states the rules).
 *
 * Concurrency: runs once at open before the cache is shared, on the
 * opening thread and up to restart_threads - 1 threads it starts (scan
 * threads: one per CPU by default). They take ranges of pages from one
 * atomic counter. Shared while they run: the index (each insertion,
 * replacement and comparison of two copies of a key under that key's
 * bucket lock, as src/engine/htab.h asks of writers; no PMEM write inside
 * it), the per-page maps of chunks in use (allocated before the threads
 * start, bits set and cleared with atomic operations under the bucket
 * lock of the key they belong to, so the marks of two copies of a key
 * follow the index's order) and the items' commit words (a thread clears
 * only the commit word of a copy that lost or that it dropped, after the
 * lock). Each thread keeps its own figures, summed after the join, and
 * counts there what cache_account would for each item it restores (and
 * takes off what a copy that loses had added), while the header is in its
 * cache: no second pass over the pool. After the pages are adopted the
 * same threads set the restored heads' DRAM chunk words (from the maps,
 * not the pool) and add their counts, each thread with a thread context of
 * its own that it gives back when done (the modules that register after
 * the scan expect no thread context).
 *
 * After a clean close (the pool's clean mark) the scan does not check a
 * committed item's CRC: the close finished every write and invalidation
 * before it marked the pool, so no committed item is torn (item_layout.h).
 * It keeps the structural checks (item_check_shape: kind, bounds, a commit
 * word neither 0 nor pending), which are what keep the scan inside the
 * pool. After a crash every committed item's CRC is checked (item_check).
 *
 * Segment pages of the packed store (RESTART_PAGE_SEGMENT) are a unit of
 * the same threads: scan_segment walks one (its items carry a 2-byte
 * commit, src/engine/pitem_layout.h; check16 checked after a crash only),
 * adopts it sealed (seg_adopt) and inserts its items under the same bucket
 * locks; newest wins by sequence, a packed item's being its derived one.
 * Its figures are counted by a second walk in the accounting pass
 * (account_segment), when every loser is already invalidated.
 *
 * The index is sized before the threads start (presize_index) so the scan
 * rarely doubles it. The scan threads are not RCU-registered; their
 * htab_lock read sections protect nothing, and need not: a doubling the
 * scan starts retires the old table, and only cache_reclaim_limbo frees a
 * retired table, which no thread runs before the open returns (the
 * accounting threads, which do hold contexts, neither reclaim nor touch
 * the index; the maintenance thread starts after this).
 */
#include "src/engine/restart.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "src/engine/cache_packed.h"
#include "src/engine/pitem.h"
#include "src/engine/restart_layout.h"
#include "src/engine/restart_save.h"
#include "tier/pm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    uint32_t h = 2166136261u;
    for (unsigned i = 0; i < m->nclasses; i++) {
        h ^= slab_chunk_size(c->slab, i);
        h *= 16777619u;
    }
    m->class_hash = h ? h : 1;
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
        m->nclasses != want.nclasses || m->growth_bits != want.growth_bits ||
        m->class_hash != want.class_hash)
        return "the pool was written with other slab settings (-n, -f, "
               "slab_chunk_max, slab_chunk_step)";
    if ((region_data_size(c->region) >> POOL_PAGE_SHIFT) >
        REGION_PAGE_TABLE_MAX)
        return "the pool is larger than its page table covers";
    return NULL;
}

/* --- the scan --- */

/* What every scan thread shares, read-only during the scan but for the
 * index (bucket locks) and the chunk maps (atomic bit operations). */
struct scan {
    struct cache *c;
    uint32_t now;
    const uint8_t *table;
    uint32_t npages;
    uint32_t limit;   /* pool pages that may be in use */
    bool all_flushed; /* a delayed flush came due while stopped */
    uint64_t flush_cas;
    uint64_t **used; /* per page with a class: chunk bits of restored items
                        (heads and tails), then as many words of bits of
                        their heads; allocated before the threads start */
    _Atomic uint32_t next_page; /* the next range of pages to take */
    struct tc_open_info *info;
    bool saved;           /* saved_items is the count at a clean close */
    uint64_t saved_items; /* what sizes the index then */
    bool trust_commit;    /* a clean close: every committed item is whole,
                             no CRC to check (item_layout.h) */
};

/* One scan thread's part: its own figures, summed after the join. */
struct scan_part {
    struct scan *s;
    pthread_t tid;
    int rc;
    uint64_t max_cas; /* largest CAS or sequence among the committed items */
    /* what this thread's insertions and replacements added to the index
     * (a copy that loses later is taken off by the thread that replaces
     * it: one part may go negative, the sum does not) */
    int64_t items, bytes, ext_items, ext_bytes;
    int64_t cls_chunks[SLAB_MAX_CLASSES];
    /* packed items: counted from the segments after the scan (account) */
    int64_t pitems, pbytes, pdead, psegs;
    uint64_t dropped_expired, dropped_flushed, dropped_older, dropped_torn,
        dropped_flash, dropped_no_room;
};

/* Pages a thread takes at a time: big enough that the shared counter is
 * touched rarely, small enough that the threads end together. */
#define SCAN_BATCH_PAGES 8u
/* At least this many pages with a class per scan thread. */
#define SCAN_MIN_PAGES 4u
#define SCAN_MAX_THREADS 16u
/* After a crash the index is sized from the committed heads of up to this
 * many pages of each class, spread over its pages (all of them when it has
 * no more), scaled to the class's pages. */
#define SCAN_SAMPLE_PAGES 32u

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
note_seq(struct scan_part *p, const struct item_hdr *it)
{
    uint64_t cas = item_cas(it); /* a client's may be above every seq */
    if (cas > p->max_cas)
        p->max_cas = cas;
    if (item_seq(it) > p->max_cas)
        p->max_cas = item_seq(it);
}

/* Words of chunk bits a page of chunk size cs has (its class's nwords). */
static uint32_t
map_words(uint32_t cs)
{
    return (POOL_PAGE_SIZE / cs + 63) / 64;
}

/* Set (or clear) the bit of the chunk at off in its page's map of chunks
 * in use, and for a head in the map of heads. Atomic: a tail may sit on a
 * page another thread scans.
 * Context: the key's bucket lock held, so the marks of two copies of one
 * key are ordered like their index updates. */
static void
mark_chunk(struct scan *s, uint64_t off, bool used, bool head)
{
    unsigned cls;
    uint32_t cs = page_chunk_size(s, off, &cls);
    uint64_t *map = s->used[off >> POOL_PAGE_SHIFT];
    uint32_t idx = (uint32_t)((off & (POOL_PAGE_SIZE - 1)) / cs);
    uint64_t bit = 1ull << (idx % 64);
    uint32_t w = idx / 64, heads = head ? map_words(cs) : 0;
    if (used) {
        __atomic_fetch_or(&map[w], bit, __ATOMIC_RELAXED);
        if (head)
            __atomic_fetch_or(&map[heads + w], bit, __ATOMIC_RELAXED);
    } else {
        __atomic_fetch_and(&map[w], ~bit, __ATOMIC_RELAXED);
        if (head)
            __atomic_fetch_and(&map[heads + w], ~bit, __ATOMIC_RELAXED);
    }
}

/* An item's head and tails: in use (restored) or not (lost to a newer
 * copy); and its part in the figures cache_account keeps (sign +1 or -1),
 * counted in p, given to a thread context after the scan (account_main):
 * the header is in the CPU's cache now, so the accounting costs no second
 * pass over the pool. */
static void
mark_item(struct scan_part *p, uint64_t off, bool used)
{
    struct scan *s = p->s;
    const struct item_hdr *it = item_at(s->c->base, off);
    int sign = used ? 1 : -1;
    mark_chunk(s, off, used, true);
    p->items += sign;
    p->bytes += sign * (int64_t)cache_item_bytes(s->c, it);
    if (it->kind == ITEM_KIND_FLASH) {
        p->ext_items += sign;
        p->ext_bytes += sign * (int64_t)it->vlen;
    }
    p->cls_chunks[s->table[off >> POOL_PAGE_SHIFT] - 1u] += sign;
    for (unsigned i = 0; i < it->nchain; i++) {
        uint64_t t = item_tails(it)[i];
        mark_chunk(s, t, used, false);
        p->cls_chunks[s->table[t >> POOL_PAGE_SHIFT] - 1u] += sign;
    }
}

/* The sequence newest-wins compares: a slab item's store sequence, a
 * packed item's derived one (where it was written: seq_base + offset / 4,
 * whatever CAS it carries, as cache_packed_dead's flush test). */
static uint64_t
entry_seq(const struct cache *c, uint64_t off)
{
    if (cache_off_packed(off))
        return cache_packed_seq(c, off);
    return item_seq(item_at(c->base, off));
}

/* A packed item's figures are counted from its segment after the scan
 * (account_segment): only a slab item's marks and counts here. */
static void
mark_entry(struct scan_part *p, uint64_t off, bool used)
{
    if (!cache_off_packed(off))
        mark_item(p, off, used);
}

static void
invalidate_entry(struct cache *c, uint64_t off)
{
    if (cache_off_packed(off))
        cache_packed_invalidate(c, off);
    else
        item_invalidate(c->base, off);
}

/* Put the item (slab head or packed location) at off with key and
 * sequence seq into the index, or count why not; a loser is invalidated
 * and its chunks are not in use. Any scan thread: the bucket lock orders
 * two copies of a key found by two threads; the chunk marks (DRAM) are
 * made under it, the invalidation (PMEM) after it. */
static void
restore_entry(struct scan_part *p, uint64_t off, uint64_t hash, const char *key,
              uint32_t klen, uint64_t seq)
{
    struct scan *s = p->s;
    struct cache *c = s->c;
    struct cache_key k = {c, key, klen};
    uint64_t loser = off; /* offset 0 is a chunk too: no "0 = none" */
    bool lost = false;    /* a copy (this one or the older) loses */

    struct htab_bucket *b = htab_lock(c->htab, hash);
    _Atomic uint64_t *slot =
        htab_find_locked(b, hash, cache_match_key_warm, &k);
    if (slot) {
        uint64_t old = cache_off(
            htab_slot_loc(atomic_load_explicit(slot, memory_order_relaxed)));
        lost = true;
        if (item_seq_newer(seq, entry_seq(c, old))) {
            htab_replace_locked(slot, hash, cache_loc(off));
            loser = old;
        }
    } else if (htab_insert_locked(c->htab, b, hash, cache_loc(off)) != 0) {
        lost = true;
        p->dropped_no_room++;
    }
    if (!lost || loser != off)
        mark_entry(p, off, true);
    if (lost && loser != off)
        mark_entry(p, loser, false);
    htab_unlock(b);
    if (lost) {
        if (slot)
            p->dropped_older++;
        invalidate_entry(c, loser);
    }
}

static void
restore_one(struct scan_part *p, uint64_t off, uint64_t hash)
{
    const struct item_hdr *it = item_at(p->s->c->base, off);
    restore_entry(p, off, hash, item_key(it), it->klen, item_seq(it));
}

/* Whether page pg is a segment page the scan walks. */
static bool
scan_walks_segment(const struct scan *s, uint32_t pg)
{
    return s->table[pg] == RESTART_PAGE_SEGMENT && s->c->seg && pg < s->limit;
}

/* Items whose index bucket is being loaded ahead of their insertion: the
 * insertions are the scan's DRAM misses (one per item, at random), and a
 * few in flight overlap them. */
#define SCAN_AHEAD 16u

/* Whether a packed item (v, of a segment with header h) has expired. */
static bool
packed_expired(const struct seg_header *h, const struct pitem_view *v,
               uint32_t now)
{
    if (v->iflags & PITEM_HAS_EXP)
        return v->exp32 != 0 && v->exp32 <= now;
    return v->exp16 != 0 && h->exp_base + v->exp16 - 1u <= now;
}

/* The committed item at off of the segment seg (pool offset pbase) into
 * the index: scan_segment's insertion. */
static void
restore_packed(struct scan_part *p, const char *seg, uint64_t pbase,
               uint64_t seq_base, uint32_t off, uint64_t hash)
{
    struct pitem_view v;
    if (pitem_parse(seg, POOL_PAGE_SIZE, seq_base, off, &v) != 0)
        return; /* cannot be: the walk parsed it */
    restore_entry(p, cache_packed_off(pbase + off), hash, v.key, v.klen,
                  seq_base + off / 4);
}

/*
 * A segment page (RESTART_PAGE_SEGMENT): its items back into the index.
 * A header that is not a valid one of this page (hcrc 0: evicted or never
 * committed) is a free page. The first pass settles the segment in PMEM:
 * pending copies (commit 2, never committed by a compare-and-swap after
 * their publication) become dead, expired and flushed items are
 * invalidated, and an item whose lengths or, after a crash, check16 fail
 * ends the segment (its slot's commit stored 0: no later walk reads past
 * it, since its lengths are not to be trusted). The record is then adopted
 * sealed (never reopened) up to where that pass ended, and the second pass
 * inserts the committed items, newest wins. Any scan thread.
 */
static void
scan_segment(struct scan_part *p, uint32_t pg)
{
    struct scan *s = p->s;
    struct cache *c = s->c;
    uint64_t pbase = (uint64_t)pg << POOL_PAGE_SHIFT;
    char *seg = c->base + pbase;
    const struct seg_header *h = (const struct seg_header *)seg;
    struct pitem_view v;

    if (!seg_header_valid(c->seg, pg))
        return;
    uint64_t seq_base = h->seq_base;
    if (seq_base + SEG_SEQ_BLOCK > p->max_cas)
        p->max_cas = seq_base + SEG_SEQ_BLOCK;
    uint32_t off = PITEM_SEG_START;
    while (POOL_PAGE_SIZE - off >= PITEM_SIZE_MIN) {
        /* a zero commit ends the segment before its lengths are read:
         * the slot after the last item has only its bytes 4..7 zeroed */
        if (__atomic_load_n(
                (const uint16_t *)(const void *)(seg + off +
                                                 PITEM_COMMIT_OFFSET),
                __ATOMIC_RELAXED) == PITEM_COMMIT_NONE)
            break;
        if (pitem_parse(seg, POOL_PAGE_SIZE, seq_base, off, &v) != 0) {
            p->dropped_torn++;
            pitem_zero_slot(seg, off);
            break;
        }
        if (v.commit == PITEM_COMMIT_NONE)
            break;
        if (v.commit == PITEM_COMMIT_PENDING) {
            pitem_invalidate(seg, off);
        } else if (v.commit != PITEM_COMMIT_DEAD) {
            if (!s->trust_commit && !pitem_verify(seg, seq_base, &v)) {
                p->dropped_torn++;
                pitem_zero_slot(seg, off);
                break;
            }
            if (v.cas > p->max_cas)
                p->max_cas = v.cas; /* a client's (meta E) */
            uint64_t *count = NULL;
            if (packed_expired(h, &v, s->now))
                count = &p->dropped_expired;
            else if (s->all_flushed || seq_base + off / 4 <= s->flush_cas)
                count = &p->dropped_flushed;
            if (count) {
                (*count)++;
                pitem_invalidate(seg, off);
            }
        }
        off += v.size;
    }
    if (seg_adopt(c->seg, pg, MIN(off, POOL_PAGE_SIZE)) != 0)
        return; /* not ours (cannot be: a header names one page) */
    /* the insertions, each bucket prefetched SCAN_AHEAD items before (as
     * scan_page's); an item is parsed again at its insertion, its header
     * still in the cache */
    struct pitem_walk w;
    uint32_t ahead_off[SCAN_AHEAD];
    uint64_t ahead_hash[SCAN_AHEAD];
    unsigned nahead = 0, head = 0;
    pitem_walk_init(&w, seg, POOL_PAGE_SIZE, seq_base, false);
    for (;;) {
        bool more = pitem_walk_next(&w, &v) == 1;
        if (nahead == SCAN_AHEAD || (!more && nahead > 0)) {
            restore_packed(p, seg, pbase, seq_base, ahead_off[head],
                           ahead_hash[head]);
            head = (head + 1) % SCAN_AHEAD;
            nahead--;
        }
        if (!more) {
            if (nahead == 0)
                break;
            continue;
        }
        uint64_t hash = cache_hash(c, v.key, v.klen);
        htab_prefetch(c->htab, hash);
        unsigned at = (head + nahead) % SCAN_AHEAD;
        ahead_off[at] = v.off;
        ahead_hash[at] = hash;
        nahead++;
    }
}

/* Look at every chunk of page pg (class cls). */
static void
scan_page(struct scan_part *p, uint32_t pg, unsigned cls)
{
    struct scan *s = p->s;
    struct cache *c = s->c;
    uint32_t cs = slab_chunk_size(c->slab, cls);
    uint32_t per = POOL_PAGE_SIZE / cs;
    uint64_t ahead_off[SCAN_AHEAD], ahead_hash[SCAN_AHEAD];
    unsigned nahead = 0, head = 0;

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
        bool whole =
            s->trust_commit ? item_check_shape(it, cs) : item_check(it, cs);
        if (!whole || (it->nchain && !tails_ok(s, it, off))) {
            count = &p->dropped_torn;
        } else {
            note_seq(p, it);
            if (it->kind == ITEM_KIND_FLASH && !c->cfg.ext_npaths)
                count = &p->dropped_flash; /* no flash tier now */
            else if (it->exptime != 0 && it->exptime <= s->now)
                count = &p->dropped_expired;
            else if (s->all_flushed || item_seq(it) <= s->flush_cas)
                count = &p->dropped_flushed;
        }
        if (count) {
            (*count)++;
            item_invalidate(c->base, off);
            continue;
        }
        uint64_t hash = cache_hash(c, item_key(it), it->klen);
        htab_prefetch(c->htab, hash);
        if (nahead == SCAN_AHEAD) { /* the oldest's bucket is in by now */
            restore_one(p, ahead_off[head], ahead_hash[head]);
            head = (head + 1) % SCAN_AHEAD;
            nahead--;
        }
        unsigned at = (head + nahead) % SCAN_AHEAD;
        ahead_off[at] = off;
        ahead_hash[at] = hash;
        nahead++;
    }
    for (; nahead > 0; nahead--) {
        restore_one(p, ahead_off[head], ahead_hash[head]);
        head = (head + 1) % SCAN_AHEAD;
    }
}

/* Whether page pg had an item restored. */
static bool
page_used(const struct scan *s, uint32_t pg)
{
    const uint64_t *map = s->used[pg];
    uint32_t cs = slab_chunk_size(s->c->slab, s->table[pg] - 1u);
    uint32_t words = map_words(cs);
    for (uint32_t w = 0; w < words; w++)
        if (map[w])
            return true;
    return false;
}

/* Take the next range of pages: false when none is left. */
static bool
take_pages(struct scan *s, uint32_t *lo, uint32_t *hi)
{
    uint32_t at = atomic_fetch_add_explicit(&s->next_page, SCAN_BATCH_PAGES,
                                            memory_order_relaxed);
    if (at >= s->npages)
        return false;
    *lo = at;
    *hi = MIN(s->npages, at + SCAN_BATCH_PAGES);
    return true;
}

/* A scan thread: ranges of pages until none is left. */
static void *
scan_main(void *arg)
{
    struct scan_part *p = arg;
    struct scan *s = p->s;
    uint32_t lo, hi;
    while (take_pages(s, &lo, &hi))
        for (uint32_t pg = lo; pg < hi; pg++)
            if (s->used[pg])
                scan_page(p, pg, s->table[pg] - 1u);
            else if (scan_walks_segment(s, pg))
                scan_segment(p, pg);
    return NULL;
}

/* The restored items of an adopted page: their DRAM chunk words, as if
 * just stored (the map of heads: no read of the pool). */
static void
fresh_page(struct scan *s, uint32_t pg)
{
    struct cache *c = s->c;
    uint32_t cs = slab_chunk_size(c->slab, s->table[pg] - 1u);
    uint32_t words = map_words(cs);
    const uint64_t *heads = s->used[pg] + words;
    for (uint32_t w = 0; w < words; w++) {
        uint64_t bits = heads[w];
        while (bits) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            cache_fresh(c, ((uint64_t)pg << POOL_PAGE_SHIFT) + (uint64_t)i * cs,
                        s->now, 0);
        }
    }
}

/* An adopted segment after the scan: its committed items are the restored
 * ones (every other was invalidated), counted as cache_account would and
 * giving the record its exp_max; its
 * dead and pending bytes are its dead bytes. One with no item left goes
 * back to the pool (no reader yet: no grace period). */
static void
account_segment(struct scan_part *p, struct cache_thread *t, uint32_t pg)
{
    struct cache *c = p->s->c;
    uint64_t pbase = (uint64_t)pg << POOL_PAGE_SHIFT;
    struct seg_info si;
    struct pitem_walk w;
    struct pitem_view v;
    int64_t n = 0, bytes = 0;

    seg_info(c->seg, pg, &si);
    if (si.state != SEG_SEALED)
        return;
    pitem_walk_init(&w, c->base + pbase, POOL_PAGE_SIZE, si.seq_base, false);
    while (pitem_walk_next(&w, &v) == 1) {
        n++;
        bytes += v.size;
        /* exp_max, which eager expiry trusts, from the items kept (exp16
         * counted from the header's exp_base, which the record holds) */
        uint32_t exp = pitem_view_exp(&v, si.exp_base);
        seg_exp_raise(c->seg, pbase + v.off, exp ? exp : UINT32_MAX);
    }
    if (n == 0) {
        seg_free(c->seg, pg);
        return;
    }
    int64_t dead = (int64_t)w.dead_bytes + (int64_t)w.pending_bytes;
    cache_packed_touch(c, pbase, p->s->now);
    cache_stat_add(t, ST_PACKED_ITEMS, n);
    cache_stat_add(t, ST_PACKED_BYTES_LIVE, bytes);
    cache_stat_add(t, ST_PACKED_BYTES_DEAD, dead);
    seg_dead_add(c->seg, pbase, (uint32_t)dead);
    p->items += n;
    p->bytes += bytes;
    p->pitems += n;
    p->pbytes += bytes;
    p->pdead += dead;
    p->psegs++;
}

/* An accounting thread: the chunk words of a range of pages at a time, and
 * the figures its part counted in the scan (cache_account's), into its own
 * thread context (its counts go to the cache's retired ones when it is put
 * back). */
static void *
account_main(void *arg)
{
    struct scan_part *p = arg;
    struct scan *s = p->s;
    struct cache_thread *t = cache_thread_get(s->c);
    uint32_t lo, hi;
    if (!t) {
        p->rc = -ENOMEM;
        return NULL;
    }
    int64_t items = p->items, bytes = p->bytes; /* the slab items' */
    while (take_pages(s, &lo, &hi))
        for (uint32_t pg = lo; pg < hi; pg++)
            if (s->used[pg] && s->table[pg] != RESTART_PAGE_NONE)
                fresh_page(s, pg);
            else if (scan_walks_segment(s, pg))
                account_segment(p, t, pg);
    cache_stat_add(t, ST_CURR_ITEMS, items + p->pitems);
    cache_stat_add(t, ST_BYTES, bytes + p->pbytes);
    cache_stat_add(t, ST_EXT_ITEMS, p->ext_items);
    cache_stat_add(t, ST_EXT_BYTES, p->ext_bytes);
    for (unsigned i = 0; i < SLAB_MAX_CLASSES; i++) {
        int64_t v =
            atomic_load_explicit(&t->cls_chunks[i], memory_order_relaxed);
        atomic_store_explicit(&t->cls_chunks[i], v + p->cls_chunks[i],
                              memory_order_relaxed);
    }
    /* the modules (hot keys, flash tier) register after the scan and
     * expect no thread context yet */
    cache_thread_put(s->c);
    return NULL;
}

/* Run fn on nparts parts: the caller's thread is the first, the others
 * are started (fewer when a start fails: the rest is done by those). */
static void
run_parts(struct scan_part *parts, unsigned nparts, void *(*fn)(void *))
{
    unsigned started = 1;
    for (unsigned i = 1; i < nparts; i++) {
        if (pthread_create(&parts[i].tid, NULL, fn, &parts[i]) != 0)
            break;
        started++;
    }
    fn(&parts[0]);
    for (unsigned i = 1; i < started; i++)
        pthread_join(parts[i].tid, NULL);
}

/* Scan threads for npages pages with a class: cfg.restart_threads, or one
 * per CPU; at most one per SCAN_MIN_PAGES pages. */
static unsigned
scan_threads(const struct cache *c, uint32_t npages)
{
    long n = c->cfg.restart_threads;
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n > (long)SCAN_MAX_THREADS)
        n = SCAN_MAX_THREADS;
    if (n > (long)(npages / SCAN_MIN_PAGES))
        n = (long)(npages / SCAN_MIN_PAGES);
    return n < 1 ? 1u : (unsigned)n;
}

static void
sum_parts(struct scan_part *parts, unsigned nparts, struct scan_part *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (unsigned i = 0; i < nparts; i++) {
        const struct scan_part *p = &parts[i];
        if (p->max_cas > sum->max_cas)
            sum->max_cas = p->max_cas;
        sum->items += p->items;
        sum->bytes += p->bytes;
        sum->dropped_expired += p->dropped_expired;
        sum->dropped_flushed += p->dropped_flushed;
        sum->dropped_older += p->dropped_older;
        sum->dropped_torn += p->dropped_torn;
        sum->dropped_flash += p->dropped_flash;
        sum->dropped_no_room += p->dropped_no_room;
        if (p->rc && !sum->rc)
            sum->rc = p->rc;
    }
}

/* Committed heads in page pg (chunk size cs): the scan's first test, on
 * the header only. */
static uint64_t
count_heads(const struct cache *c, uint32_t pg, uint32_t cs)
{
    uint32_t per = POOL_PAGE_SIZE / cs;
    uint64_t n = 0;
    for (uint32_t i = 0; i < per; i++) {
        const struct item_hdr *it = item_at(
            c->base, ((uint64_t)pg << POOL_PAGE_SHIFT) + (uint64_t)i * cs);
        n += item_kind_is_head(it->kind) && it->commit &&
             it->commit != ITEM_COMMIT_PENDING;
    }
    return n;
}

/* Committed packed items in a sample of the segment pages (every
 * segment's, up to SCAN_SAMPLE_PAGES of them), scaled to all of them. */
static uint64_t
segment_estimate(const struct cache *c, const struct scan *s)
{
    uint32_t nseg = 0, seen = 0, taken = 0;
    uint64_t items = 0;
    for (uint32_t pg = 0; pg < s->npages; pg++)
        nseg += scan_walks_segment(s, pg);
    if (!nseg)
        return 0;
    uint32_t stride = (nseg + SCAN_SAMPLE_PAGES - 1) / SCAN_SAMPLE_PAGES;
    for (uint32_t pg = 0; pg < s->npages; pg++) {
        if (!scan_walks_segment(s, pg) || seen++ % stride != 0)
            continue;
        taken++;
        if (!seg_header_valid(c->seg, pg))
            continue;
        const struct seg_header *h =
            (const void *)(c->base + ((uint64_t)pg << POOL_PAGE_SHIFT));
        struct pitem_walk w;
        struct pitem_view v;
        pitem_walk_init(&w, (const char *)h, POOL_PAGE_SIZE, h->seq_base,
                        false);
        while (pitem_walk_next(&w, &v) == 1)
            items++;
    }
    return (items * nseg + taken - 1) / taken;
}

/* Items the scan will likely insert: the count a clean close saved, or
 * after a crash an estimate from a sample of each class's pages (exact for
 * a class of at most SCAN_SAMPLE_PAGES pages; the pages of a class fill one
 * after another, so a spread sample is close). Expired, flushed and older
 * copies are counted too: the index comes out a little big, never much too
 * small. */
static uint64_t
scan_estimate(const struct cache *c, const struct scan *s)
{
    if (s->saved && !s->all_flushed)
        return s->saved_items;
    unsigned ncls = slab_nclasses(c->slab);
    uint32_t pages[SLAB_MAX_CLASSES] = {0}, seen[SLAB_MAX_CLASSES] = {0};
    uint32_t taken[SLAB_MAX_CLASSES] = {0};
    uint64_t heads[SLAB_MAX_CLASSES] = {0}, est = 0;
    if (s->all_flushed)
        return 0; /* the scan drops every item */
    for (uint32_t pg = 0; pg < s->npages; pg++)
        if (s->used[pg])
            pages[s->table[pg] - 1u]++;
    for (uint32_t pg = 0; pg < s->npages; pg++) {
        if (!s->used[pg])
            continue;
        unsigned cls = s->table[pg] - 1u;
        /* every stride-th page of the class's */
        uint32_t stride =
            (pages[cls] + SCAN_SAMPLE_PAGES - 1) / SCAN_SAMPLE_PAGES;
        if (seen[cls]++ % stride == 0) {
            taken[cls]++;
            heads[cls] += count_heads(c, pg, slab_chunk_size(c->slab, cls));
        }
    }
    for (unsigned i = 0; i < ncls; i++)
        if (taken[i])
            est += (heads[i] * pages[i] + taken[i] - 1) / taken[i];
    return est + segment_estimate(c, s);
}

/* Give the empty index the size of what the scan will insert (about 70%
 * of its slots: an estimate up to 14% short still stays under the 80%
 * that doubles it, and 2^19 buckets still take the 2.16M packed items of
 * a 256 MiB pool): without it the index would double from its first size
 * some ten times during a big scan, each doubling reading every key it
 * moves from the pool again. A doubling that still starts is safe
 * (nothing frees a retired table before the cache's thread contexts
 * reclaim one, after the open), only slower. */
static void
presize_index(struct cache *c, const struct scan *s)
{
    uint64_t est = scan_estimate(c, s);
    uint64_t nb = htab_buckets_for(est);
    if (nb <= htab_nbuckets(c->htab))
        return;
    int rc = htab_resize_empty(c->htab, nb);
    if (rc)
        log_warn("pool %s: the index cannot take %llu buckets for %llu "
                 "items (%s): it doubles as the scan fills it",
                 region_path(c->region), (unsigned long long)nb,
                 (unsigned long long)est, strerror(-rc));
    else
        log_info("pool %s: index sized for %llu items (%s): %llu buckets",
                 region_path(c->region), (unsigned long long)est,
                 s->saved ? "at the clean close" : "estimated from the pages",
                 (unsigned long long)nb);
}

/* Scan (in parallel over ranges of pages), then hand the pages to their
 * classes and account the items (in parallel again); *sum gets the
 * figures. */
static int
scan_pool(struct cache *c, struct scan *s, struct scan_part *sum)
{
    uint32_t limit = pool_limit(c->pool);
    uint8_t *table = region_page_table(c->region, &s->npages);
    struct scan_part *parts = NULL;
    uint32_t nclassed = 0;
    int rc = 0;

    memset(sum, 0, sizeof(*sum));
    s->table = table;
    s->limit = limit;
    s->used = calloc(s->npages, sizeof(*s->used));
    if (!s->used) {
        err_set("no DRAM for the restart scan");
        return -ENOMEM;
    }
    for (uint32_t pg = 0; pg < s->npages; pg++) {
        uint8_t b = table[pg];
        if (b == RESTART_PAGE_NONE)
            continue;
        if (b == RESTART_PAGE_SEGMENT && c->seg && pg < limit) {
            nclassed++; /* scan_segment */
            continue;
        }
        if (pg < limit && b <= slab_nclasses(c->slab)) {
            /* chunk bits, then head bits */
            s->used[pg] =
                calloc(2 * map_words(slab_chunk_size(c->slab, b - 1u)),
                       sizeof(uint64_t));
            if (!s->used[pg]) {
                rc = -ENOMEM;
                goto out;
            }
            nclassed++;
            continue;
        }
        /* beyond the memory limit, or no such class: the page goes back
         * to the pool and its byte to "none", so no later scan reads it */
        uint8_t none = RESTART_PAGE_NONE;
        pm_copy(&table[pg], &none, 1);
    }
    presize_index(c, s);
    unsigned nparts = scan_threads(c, nclassed);
    s->info->scan_threads = nparts;
    parts = calloc(nparts, sizeof(*parts));
    if (!parts) {
        rc = -ENOMEM;
        goto out;
    }
    for (unsigned i = 0; i < nparts; i++)
        parts[i].s = s;
    atomic_store_explicit(&s->next_page, 0, memory_order_relaxed);
    run_parts(parts, nparts, scan_main);
    for (uint32_t pg = 0; pg < s->npages; pg++) {
        if (!s->used[pg])
            continue;
        if (!page_used(s, pg)) {
            /* nothing restored here: back to the pool */
            uint8_t none = RESTART_PAGE_NONE;
            pm_copy(&table[pg], &none, 1);
            continue;
        }
        rc = slab_adopt_page(c->slab, pg, table[pg] - 1u, s->used[pg]);
        if (rc)
            goto out;
    }
    atomic_store_explicit(&s->next_page, 0, memory_order_relaxed);
    run_parts(parts, nparts, account_main);
    sum_parts(parts, nparts, sum);
    rc = sum->rc;
    /* segments that came back empty or not at all: their pages are free */
    for (uint32_t pg = 0; pg < s->npages && c->seg; pg++) {
        struct seg_info si;
        if (table[pg] != RESTART_PAGE_SEGMENT || pg >= limit)
            continue;
        seg_info(c->seg, pg, &si);
        if (si.state != SEG_FREE)
            continue;
        uint8_t none = RESTART_PAGE_NONE;
        pm_copy(&table[pg], &none, 1);
    }
out:
    free(parts);
    for (uint32_t pg = 0; pg < s->npages; pg++)
        free(s->used[pg]);
    free(s->used);
    if (rc)
        err_set("restart scan: %s", strerror(-rc));
    return rc;
}

/* The CAS counter above every CAS and sequence seen and the flush
 * watermark, and at least where a clean close left it (saved_cas, 0 when
 * not known); the flush state carried over. */
static void
resume_counters(struct cache *c, const struct scan *s,
                const struct scan_part *sum, uint64_t saved_cas)
{
    struct restart_meta *m = meta_of(c);
    uint64_t next = sum->max_cas > s->flush_cas ? sum->max_cas : s->flush_cas;
    if (saved_cas > next)
        next = saved_cas;
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

/* durability=power: on real PMEM (libpmem's is_pmem for the mapping: a
 * DAX mapping, or PMEM_IS_PMEM_FORCE=1) every PMEM write is flushed and
 * drained from now on (tier/pm.h, pm_set_persist); elsewhere (a tmpfs file,
 * which power loss takes whatever is flushed) it is the same as process, and
 * one log line says so. Process-wide: a cache asking for power turns it on for
 * the process. */
static void
durability_setup(const struct cache *c)
{
    if (c->cfg.durability != TC_DURABILITY_POWER)
        return;
    if (region_is_pmem(c->region)) {
        pm_set_persist(true);
        log_info("pool %s: durability=power: every PMEM write is flushed "
                 "and drained before the reply",
                 region_path(c->region));
    } else {
        log_info("pool %s: durability=power is the same as process here: "
                 "the mapping is not real PMEM (a tmpfs or page-cache file "
                 "does not outlive power loss, flushed or not)",
                 region_path(c->region));
    }
}

int
restart_attach(struct cache *c)
{
    struct tc_open_info *info = &c->start;
    const char *why = cold_reason(c);

    durability_setup(c);

    memset(info, 0, sizeof(*info));
    if (why) {
        info->kind = TC_START_COLD;
        snprintf(info->reason, sizeof(info->reason), "%s", why);
        format_cold(c);
        restart_save_discard(c);
        /* a pool that was there but does not fit is worth a warning; a new
         * file or no_restart is what was asked for */
        if (c->cfg.no_restart || !region_reattached(c->region))
            log_info("pool %s: cold start: %s", region_path(c->region), why);
        else
            log_warn("pool %s: cold start, items not restored: %s",
                     region_path(c->region), why);
        return restart_save_register(c);
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
    /* after a clean close, what the close saved (restart_save.h); the
     * items themselves are scanned as after a crash, without the CRC */
    uint64_t saved_cas = 0;
    if (info->kind == TC_START_WARM)
        s.saved = restart_save_load(c, info, &saved_cas, &s.saved_items) == 1;
    else
        restart_save_discard(c);
    s.trust_commit = info->kind == TC_START_WARM;
    struct scan_part sum;
    int rc = scan_pool(c, &s, &sum);
    if (rc)
        return rc;
    resume_counters(c, &s, &sum, saved_cas);
    info->items = sum.items;
    info->bytes = sum.bytes;
    info->dropped_expired = sum.dropped_expired;
    info->dropped_flushed = sum.dropped_flushed;
    info->dropped_older = sum.dropped_older;
    info->dropped_torn = sum.dropped_torn;
    info->dropped_flash = sum.dropped_flash;
    info->dropped_no_room = sum.dropped_no_room;
    pm_fence();
    info->dropped = info->dropped_expired + info->dropped_flushed +
                    info->dropped_older + info->dropped_torn +
                    info->dropped_flash + info->dropped_no_room;
    info->seconds = (double)(clock_nsec() - t0) / 1e9;
    log_info("pool %s: %s start%s%s%s: %llu items (%llu bytes) restored in "
             "%.3f s (%u scan threads); "
             "dropped %llu (expired %llu, flushed %llu, older copies %llu, "
             "torn %llu, on flash %llu, no index room %llu)",
             region_path(c->region), kind_name(info->kind),
             info->reason[0] ? " (" : "", info->reason,
             info->reason[0] ? ")" : "", (unsigned long long)info->items,
             (unsigned long long)info->bytes, info->seconds, info->scan_threads,
             (unsigned long long)info->dropped,
             (unsigned long long)info->dropped_expired,
             (unsigned long long)info->dropped_flushed,
             (unsigned long long)info->dropped_older,
             (unsigned long long)info->dropped_torn,
             (unsigned long long)info->dropped_flash,
             (unsigned long long)info->dropped_no_room);
    return restart_save_register(c);
}

/*
 * Segments of the packed small-item store (see alloc/seg.h and
 * doc/design/small-items.md, "Segments").
 *
 * A record per pool page, in one DRAM array indexed by page number. A
 * record's state moves free -> open -> sealed -> evicting -> free (sealed
 * -> free too, a free that evicts on the way); open records belong to one
 * thread's struct seg_open. Every record that is not free sits on the age
 * list (doubly linked by page number), in the order the segments were
 * opened, which is the order of their seq_base since the block is taken
 * under the lock that links them; eviction unlinks it.
 *
 * Opening: a page from the pool (pool lock), then under s->lock the
 * sequence block, the record and the link at the tail; then, with no lock
 * held, the PMEM header (fields, the payload's first slot zeroed, a fence,
 * hcrc last). The new segment is the calling thread's alone until it seals
 * it, so nothing reads the header before it is written. The old segment of
 * the bucket is sealed only once the new one exists: with no free page the
 * caller keeps its segment and gets -ENOSPC. With cfg->open_max, a thread
 * opens only while fewer segments are open (its own, about to be sealed,
 * not counted), checked under s->lock before the page is taken and again
 * after (a page taken past the cap goes back): -EUSERS. Two threads that
 * each replace their own may pass the cap by one for an instant.
 *
 * TTL buckets (doc/design/small-items.md, "Expiry and TTL buckets"): a
 * thread keeps at most SEG_OPEN_PER_THREAD open segments, its latest
 * buckets. A set of a fifth bucket goes to the nearest longer bucket's
 * segment (its items then expire later than they could, never sooner);
 * only when none is longer does it open one of its own, sealing the least
 * recently used. Replacing instead would seal a segment per set under a
 * load that cycles through five buckets; this way the open set settles.
 *
 * Eager expiry: exp_max, the latest expiry of a segment's items, lives in
 * the record (DRAM) and only rises (seg_exp_raise, an atomic max). A
 * sealed segment whose exp_max has passed holds only expired items, and
 * seg_evict_expired hands it out for eviction without reading PMEM.
 *
 * Concurrency:
 *   s->lock (LOCK_RANK_CLASS: the packed store is one more claimant of
 *     pool pages, never held with a slab class lock) guards every record's
 *     state, bucket, owner, prev, next, the list head and tail and the
 *     counts. DRAM only: no PMEM write, no pool call with it held (the pool
 *     is taken before it or after it is released, never inside).
 *   rec->seq_base, created, exp_base
 *     written under s->lock at open, before the page is handed to its
 *     owner; read-only until the record is freed.
 *   rec->exp_max
 *     a relaxed atomic: 0 at open, raised (compare-and-swap max) by any
 *     thread that writes or touches an item of it, UINT32_MAX once free.
 *     seg_evict_expired reads it with no lock, then checks the state and
 *     reads it again under s->lock before it takes the segment.
 *   rec->dead
 *     a relaxed atomic: 0 at open (and adopt), added to by any thread
 *     whose item of it left the index (seg_dead_add). Read with s->lock
 *     held by seg_evict_emptiest: a count a moment stale only makes the
 *     choice a little less exact.
 *   rec->write_off
 *     the owner's while open (its reserves need no lock); a relaxed atomic
 *     so that snapshots (seg_info) may read it at any time. Once sealed
 *     (under s->lock) it no longer changes.
 *   struct seg_open
 *     its owner thread only (debug builds assert the owner).
 *   PMEM: the header at open (after s->lock is released), hcrc = 0 at
 *     eviction and free (after the state change under s->lock, before the
 *     page goes back to the pool): never inside a critical section, and
 *     always through the caller's helpers (cfg->ops), which assert it.
 *   lock order: pool and s->lock are never held together.
 */

#include "alloc/seg.h"

#include "alloc/seg_layout.h"
#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/lock.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct seg_rec {
    uint64_t seq_base;
    uint32_t exp_base;
    uint32_t created;
    _Atomic uint32_t write_off; /* next free byte in the page */
    /* latest expiry of an item (UINT32_MAX: one never expires; a free
     * record's too, so that a scan for expired ones steps over it) */
    _Atomic uint32_t exp_max;
    /* bytes of items that left the index (seg_dead_add): a relaxed
     * atomic, 0 at open; live bytes are write_off's span less these */
    _Atomic uint32_t dead;
    uint32_t prev, next; /* age list, SEG_NO_PAGE at the ends */
    uint16_t owner;
    uint8_t state;  /* enum seg_state */
    uint8_t bucket; /* TTL bucket */
} CACHE_ALIGNED;

_Static_assert(sizeof(struct seg_rec) == SEG_REC_SIZE &&
                   offsetof(struct seg_rec, seq_base) == SEG_REC_SEQ_BASE &&
                   offsetof(struct seg_rec, exp_base) == SEG_REC_EXP_BASE &&
                   offsetof(struct seg_rec, write_off) == SEG_REC_WRITE_OFF &&
                   offsetof(struct seg_rec, exp_max) == SEG_REC_EXP_MAX &&
                   offsetof(struct seg_rec, dead) == SEG_REC_DEAD,
               "a record is one line; seg.h reads seq_base and exp_base, "
               "bumps write_off, raises exp_max and adds to dead");

struct seg {
    struct lock lock;
    struct pool *pool;
    char *base;
    uint32_t npages;
    _Atomic uint64_t *seq;
    struct seg_ops ops;
    uint32_t open_count;
    void (*page_open)(void *arg, uint32_t page);
    void *page_arg;
    uint32_t open_max;           /* 0: no cap */
    uint32_t head, tail;         /* age list: oldest, newest */
    _Atomic uint32_t exp_cursor; /* seg_evict_expired's next record */
    uint32_t nstate[SEG_EVICTING + 1];
    uint64_t opened, freed;
    struct seg_rec *rec;
};

static inline void
assert_owner(const struct seg_open *o)
{
    assert(pthread_equal(o->owner_thread, pthread_self()));
    (void)o;
}

static inline char *
page_addr(const struct seg *s, uint32_t page)
{
    return s->base + ((uint64_t)page << POOL_PAGE_SHIFT);
}

int
seg_create(const struct seg_config *cfg, struct pool *pool, struct seg **out)
{
    struct seg *s;
    uint32_t npages;

    if (cfg == NULL || pool == NULL || out == NULL || cfg->seq == NULL ||
        cfg->ops.copy == NULL || cfg->ops.store32 == NULL ||
        cfg->ops.fence == NULL || cfg->ops.crc32c == NULL) {
        err_set("seg: a counter and every PMEM helper are required");
        return -EINVAL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto err_nomem;
    npages = pool_npages(pool);
    s->rec = aligned_alloc(CACHE_LINE, (size_t)npages * sizeof(*s->rec));
    if (s->rec == NULL)
        goto err_free;
    memset(s->rec, 0, (size_t)npages * sizeof(*s->rec));
    if (lock_init(&s->lock, LOCK_RANK_CLASS) != 0)
        goto err_rec;
    s->pool = pool;
    s->base = pool_base(pool);
    s->npages = npages;
    s->seq = cfg->seq;
    s->ops = cfg->ops;
    s->open_count = cfg->open_count;
    s->page_open = cfg->page_open;
    s->page_arg = cfg->page_arg;
    s->open_max = cfg->open_max;
    s->head = s->tail = SEG_NO_PAGE;
    s->nstate[SEG_FREE] = npages;
    for (uint32_t p = 0; p < npages; p++) {
        s->rec[p].prev = s->rec[p].next = SEG_NO_PAGE;
        atomic_init(&s->rec[p].exp_max, UINT32_MAX);
    }
    *out = s;
    return 0;

err_rec:
    free(s->rec);
err_free:
    free(s);
err_nomem:
    err_set("seg: out of memory for the segment records");
    return -ENOMEM;
}

void
seg_destroy(struct seg *s)
{
    if (s == NULL)
        return;
    lock_fini(&s->lock);
    free(s->rec);
    free(s);
}

uint32_t
seg_bucket_ttl_lo(unsigned b)
{
    if (b == 0)
        return 0;
    if (b == 1)
        return 1;
    if (b >= SEG_NBUCKETS - 1)
        return 1u << 17;
    return 1u << (b + 2);
}

unsigned
seg_bucket_of(uint32_t ttl)
{
    unsigned k;

    if (ttl == 0)
        return 0;
    if (ttl < 16)
        return 1;
    if (ttl >= (1u << 17))
        return SEG_NBUCKETS - 1;
    k = 31u - (unsigned)__builtin_clz(ttl); /* 4..16 */
    return k - 2;
}

void
seg_open_init(struct seg_open *o, uint16_t owner)
{
    memset(o, 0, sizeof(*o));
    for (unsigned b = 0; b < SEG_NBUCKETS; b++)
        o->page[b] = SEG_NO_PAGE;
    o->owner = owner;
    o->owner_thread = pthread_self();
}

/* --- the age list and states, under s->lock --- */

static void
set_state_locked(struct seg *s, struct seg_rec *r, enum seg_state st)
{
    s->nstate[r->state]--;
    s->nstate[st]++;
    r->state = (uint8_t)st;
}

static void
link_tail_locked(struct seg *s, uint32_t page)
{
    struct seg_rec *r = &s->rec[page];

    r->prev = s->tail;
    r->next = SEG_NO_PAGE;
    if (s->tail == SEG_NO_PAGE)
        s->head = page;
    else
        s->rec[s->tail].next = page;
    s->tail = page;
}

static void
unlink_locked(struct seg *s, uint32_t page)
{
    struct seg_rec *r = &s->rec[page];

    if (r->prev == SEG_NO_PAGE)
        s->head = r->next;
    else
        s->rec[r->prev].next = r->next;
    if (r->next == SEG_NO_PAGE)
        s->tail = r->prev;
    else
        s->rec[r->next].prev = r->prev;
    r->prev = r->next = SEG_NO_PAGE;
}

/* --- open, reserve, seal --- */

/* PMEM: the header of a segment just opened. No lock held. */
static void
write_header(struct seg *s, uint32_t page, const struct seg_rec *r)
{
    struct seg_header *h = (struct seg_header *)page_addr(s, page);
    static const uint8_t zero[SEG_FIRST_SLOT_ZERO];
    struct seg_header img;
    uint32_t crc;

    memset(&img, 0, sizeof(img));
    img.magic = SEG_MAGIC;
    img.version = SEG_VERSION;
    img.ttl_bucket = r->bucket;
    img.seq_base = r->seq_base;
    img.created = r->created;
    img.exp_base = r->exp_base;
    img.page = page;
    img.open_count = s->open_count;
    crc = s->ops.crc32c(0, &img, offsetof(struct seg_header, hcrc));
    /* Bytes 0..59 with hcrc still 0 (the page's last life zeroed it, or it
     * never held a segment), then the first slot: a walk of this page
     * stops there until the first item commits. hcrc goes last. */
    s->ops.copy(h, &img, offsetof(struct seg_header, hcrc));
    s->ops.copy((char *)h + SEG_HEADER_SIZE, zero, sizeof(zero));
    s->ops.fence();
    s->ops.store32(&h->hcrc, crc ? crc : 1);
}

/* Whether one more segment may open; replacing: the caller seals one of
 * its own right after. Under s->lock. */
static bool
may_open_locked(const struct seg *s, bool replacing)
{
    return s->open_max == 0 ||
           s->nstate[SEG_OPEN] - (replacing ? 1u : 0u) < s->open_max;
}

/* A new segment for bucket b owned by o: 0 with *page, -ENOSPC or -EUSERS
 * (the cap; replacing as for may_open_locked). */
static int
open_segment(struct seg *s, const struct seg_open *o, unsigned b,
             bool replacing, uint32_t *page)
{
    uint32_t now = clock_now();
    struct seg_rec *r;
    uint32_t p;
    int rc;

    if (s->open_max && !o->uncapped) { /* no page taken and put back in the
                                          common case */
        lock_acquire(&s->lock);
        bool may = may_open_locked(s, replacing);
        lock_release(&s->lock);
        if (!may)
            return -EUSERS;
    }
    rc = pool_page_get(s->pool, &p);
    if (rc != 0)
        return rc;
    r = &s->rec[p];
    lock_acquire(&s->lock);
    assert(r->state == SEG_FREE);
    if (!o->uncapped &&
        !may_open_locked(s, replacing)) { /* others opened meanwhile */
        lock_release(&s->lock);
        pool_page_put(s->pool, p);
        return -EUSERS;
    }
    r->seq_base =
        atomic_fetch_add_explicit(s->seq, SEG_SEQ_BLOCK, memory_order_relaxed) +
        1;
    r->created = now;
    r->exp_base = now + seg_bucket_ttl_lo(b);
    atomic_store_explicit(&r->write_off, SEG_HEADER_SIZE, memory_order_relaxed);
    atomic_store_explicit(&r->exp_max, 0, memory_order_relaxed);
    atomic_store_explicit(&r->dead, 0, memory_order_relaxed);
    r->owner = o->owner;
    r->bucket = (uint8_t)b;
    set_state_locked(s, r, SEG_OPEN);
    link_tail_locked(s, p);
    s->opened++;
    lock_release(&s->lock);
    if (s->page_open)
        s->page_open(s->page_arg, p);
    write_header(s, p, r);
    *page = p;
    return 0;
}

static void
seal_page(struct seg *s, uint32_t page)
{
    lock_acquire(&s->lock);
    assert(s->rec[page].state == SEG_OPEN);
    set_state_locked(s, &s->rec[page], SEG_SEALED);
    lock_release(&s->lock);
}

/* The rank of a bucket by TTL: 0 (no expiry) is the longest. */
static inline unsigned
bucket_rank(unsigned b)
{
    return b == 0 ? SEG_NBUCKETS : b;
}

/* o's open bucket of the lowest rank above b's (longer: up) or the
 * highest below it, or SEG_NBUCKETS when there is none. */
static unsigned
nearest_open(const struct seg_open *o, unsigned b, bool up)
{
    unsigned best = SEG_NBUCKETS;

    for (unsigned x = 0; x < SEG_NBUCKETS; x++) {
        if (x == b || o->page[x] == SEG_NO_PAGE)
            continue;
        bool beyond = up ? bucket_rank(x) > bucket_rank(b)
                         : bucket_rank(x) < bucket_rank(b);
        if (!beyond)
            continue;
        if (best == SEG_NBUCKETS || (up ? bucket_rank(x) < bucket_rank(best)
                                        : bucket_rank(x) > bucket_rank(best)))
            best = x;
    }
    return best;
}

/* o's least recently used open bucket (SEG_NBUCKETS: none). */
static unsigned
lru_open(const struct seg_open *o)
{
    unsigned best = SEG_NBUCKETS;

    for (unsigned x = 0; x < SEG_NBUCKETS; x++)
        if (o->page[x] != SEG_NO_PAGE &&
            (best == SEG_NBUCKETS || (int32_t)(o->used[x] - o->used[best]) < 0))
            best = x;
    return best;
}

unsigned
seg_pick_bucket(const struct seg_open *o, unsigned b)
{
    if (o->page[b] != SEG_NO_PAGE || o->nopen < SEG_OPEN_PER_THREAD)
        return b;
    unsigned up = nearest_open(o, b, true);
    return up != SEG_NBUCKETS ? up : b;
}

uint32_t
seg_open_exp_base(const struct seg *s, const struct seg_open *o, unsigned b)
{
    uint32_t page = o->page[seg_pick_bucket(o, b)];

    return page == SEG_NO_PAGE ? 0 : s->rec[page].exp_base;
}

uint64_t
seg_open_seq_base(const struct seg *s, const struct seg_open *o, unsigned b)
{
    uint32_t page = o->page[seg_pick_bucket(o, b)];

    return page == SEG_NO_PAGE ? UINT64_MAX : s->rec[page].seq_base;
}

/* A span of n4 bytes in o's segment of bucket b, opening one (replacing
 * b's full one, or, with victim < SEG_NBUCKETS, o's segment of victim). */
static int
reserve_in(struct seg *s, struct seg_open *o, unsigned b, unsigned victim,
           uint32_t n4, uint64_t *off)
{
    uint32_t page = o->page[b], woff, fresh;
    struct seg_rec *r;
    int rc;

    if (likely(page != SEG_NO_PAGE)) {
        r = &s->rec[page];
        woff = atomic_load_explicit(&r->write_off, memory_order_relaxed);
        if (likely(n4 <= POOL_PAGE_SIZE - woff))
            goto take;
    }
    rc = open_segment(s, o, b, page != SEG_NO_PAGE || victim < SEG_NBUCKETS,
                      &fresh);
    if (rc != 0)
        return rc;
    if (page != SEG_NO_PAGE) {
        seal_page(s, page);
    } else {
        o->nopen++;
        if (victim < SEG_NBUCKETS)
            seg_seal(s, o, victim);
    }
    o->page[b] = page = fresh;
    r = &s->rec[page];
    woff = SEG_HEADER_SIZE;
take:
    atomic_store_explicit(&r->write_off, woff + n4, memory_order_relaxed);
    o->used[b] = ++o->tick;
    *off = ((uint64_t)page << POOL_PAGE_SHIFT) | woff;
    return 0;
}

int
seg_reserve(struct seg *s, struct seg_open *o, unsigned b, uint32_t n,
            uint64_t *off)
{
    unsigned tb, victim = SEG_NBUCKETS;
    uint32_t n4;
    int rc;

    assert_owner(o);
    if (b >= SEG_NBUCKETS || n == 0)
        return -EINVAL;
    if (n > SEG_PAYLOAD)
        return -E2BIG;
    n4 = (n + 3) & ~3u;
    tb = seg_pick_bucket(o, b);
    if (tb == b && o->page[b] == SEG_NO_PAGE && o->nopen >= SEG_OPEN_PER_THREAD)
        victim = lru_open(o);
    rc = reserve_in(s, o, tb, victim, n4, off);
    if (rc != -EUSERS || o->page[tb] != SEG_NO_PAGE)
        return rc;
    /* the cap refused a segment that replaces none: o's nearest */
    tb = nearest_open(o, b, true);
    if (tb == SEG_NBUCKETS)
        tb = nearest_open(o, b, false);
    if (tb == SEG_NBUCKETS)
        return -EUSERS;
    return reserve_in(s, o, tb, SEG_NBUCKETS, n4, off);
}

void
seg_unreserve(struct seg *s, struct seg_open *o, uint64_t off, uint32_t n)
{
    uint32_t page = (uint32_t)(off >> POOL_PAGE_SHIFT);
    uint32_t in = (uint32_t)(off & (POOL_PAGE_SIZE - 1));
    struct seg_rec *r = &s->rec[page];

    assert_owner(o);
    assert(r->state == SEG_OPEN && r->owner == o->owner);
    assert(atomic_load_explicit(&r->write_off, memory_order_relaxed) ==
           in + ((n + 3) & ~3u));
    (void)o;
    (void)n;
    atomic_store_explicit(&r->write_off, in, memory_order_relaxed);
}

void
seg_seal(struct seg *s, struct seg_open *o, unsigned b)
{
    assert_owner(o);
    if (b >= SEG_NBUCKETS || o->page[b] == SEG_NO_PAGE)
        return;
    seal_page(s, o->page[b]);
    o->page[b] = SEG_NO_PAGE;
    o->nopen--;
}

void
seg_seal_all(struct seg *s, struct seg_open *o)
{
    for (unsigned b = 0; b < SEG_NBUCKETS; b++)
        seg_seal(s, o, b);
}

void
seg_seal_page(struct seg *s, struct seg_open *o, uint32_t page)
{
    for (unsigned b = 0; b < SEG_NBUCKETS; b++)
        if (o->page[b] == page)
            seg_seal(s, o, b);
}

bool
seg_seal_for(struct seg *s, struct seg_open *o, unsigned b)
{
    unsigned tb = seg_pick_bucket(o, b);

    if (o->page[tb] == SEG_NO_PAGE)
        tb = lru_open(o);
    if (tb == SEG_NBUCKETS)
        return false;
    seg_seal(s, o, tb);
    return true;
}

/* --- evict, free --- */

/* PMEM: hcrc = 0, no lock held. */
static void
clear_hcrc(struct seg *s, uint32_t page)
{
    struct seg_header *h = (struct seg_header *)page_addr(s, page);

    s->ops.store32(&h->hcrc, 0);
}

/* sealed -> evicting, out of the age list. */
static void
evict_locked(struct seg *s, uint32_t page)
{
    unlink_locked(s, page);
    set_state_locked(s, &s->rec[page], SEG_EVICTING);
}

int
seg_evict(struct seg *s, uint32_t page)
{
    assert(page < s->npages);
    lock_acquire(&s->lock);
    if (s->rec[page].state != SEG_SEALED) {
        lock_release(&s->lock);
        return -EBUSY;
    }
    evict_locked(s, page);
    lock_release(&s->lock);
    clear_hcrc(s, page);
    return 0;
}

int
seg_evict_oldest(struct seg *s, uint32_t *page)
{
    uint32_t p;

    lock_acquire(&s->lock);
    /* only open segments are stepped over: a few per thread */
    for (p = s->head; p != SEG_NO_PAGE; p = s->rec[p].next)
        if (s->rec[p].state == SEG_SEALED)
            break;
    if (p == SEG_NO_PAGE) {
        lock_release(&s->lock);
        return -ENOENT;
    }
    evict_locked(s, p);
    lock_release(&s->lock);
    clear_hcrc(s, p);
    *page = p;
    return 0;
}

/* Bytes of r's live items, as far as its count of dead ones knows. */
static uint32_t
live_bytes(const struct seg_rec *r)
{
    uint32_t used = atomic_load_explicit(&r->write_off, memory_order_relaxed) -
                    SEG_HEADER_SIZE;
    uint32_t dead = atomic_load_explicit(&r->dead, memory_order_relaxed);

    return dead < used ? used - dead : 0;
}

int
seg_evict_emptiest(struct seg *s, uint32_t window, uint32_t live_max,
                   uint32_t *page)
{
    uint32_t p, best = SEG_NO_PAGE, best_live = UINT32_MAX, seen = 0;

    lock_acquire(&s->lock);
    /* the oldest window sealed ones (and the few open ones between) */
    for (p = s->head; p != SEG_NO_PAGE && seen < window; p = s->rec[p].next) {
        if (s->rec[p].state != SEG_SEALED)
            continue;
        seen++;
        uint32_t live = live_bytes(&s->rec[p]);
        if (live < best_live) { /* strictly: the older one on a tie */
            best = p;
            best_live = live;
        }
    }
    if (best == SEG_NO_PAGE || best_live > live_max) {
        lock_release(&s->lock);
        return -ENOENT;
    }
    evict_locked(s, best);
    lock_release(&s->lock);
    clear_hcrc(s, best);
    *page = best;
    return 0;
}

void
seg_dead_add(struct seg *s, uint64_t off, uint32_t n)
{
    uint32_t page = (uint32_t)(off >> POOL_PAGE_SHIFT);

    assert(page < s->npages);
    atomic_fetch_add_explicit(&s->rec[page].dead, n, memory_order_relaxed);
}

/* Whether sealed record r may go as expired or flushed. Under s->lock. */
static bool
expired_locked(const struct seg_rec *r, uint32_t now, uint64_t flush_seq)
{
    return r->state == SEG_SEALED &&
           (atomic_load_explicit(&r->exp_max, memory_order_relaxed) <= now ||
            r->seq_base + SEG_SEQ_BLOCK - 1 <= flush_seq);
}

int
seg_evict_expired(struct seg *s, uint32_t now, uint64_t flush_seq,
                  uint32_t budget, uint32_t *page)
{
    uint32_t p = SEG_NO_PAGE;

    /* flushed: the oldest sealed segment first (the list is in seq_base
     * order, so a flushed one is found there or not at all) */
    if (flush_seq) {
        lock_acquire(&s->lock);
        for (p = s->head; p != SEG_NO_PAGE; p = s->rec[p].next)
            if (s->rec[p].state == SEG_SEALED)
                break;
        if (p != SEG_NO_PAGE && expired_locked(&s->rec[p], 0, flush_seq))
            goto take_locked;
        lock_release(&s->lock);
    }
    if (budget > s->npages)
        budget = s->npages;
    uint32_t at = atomic_load_explicit(&s->exp_cursor, memory_order_relaxed);
    for (uint32_t i = 0; i < budget; i++, at++) {
        if (at >= s->npages)
            at = 0;
        if (atomic_load_explicit(&s->rec[at].exp_max, memory_order_relaxed) >
            now)
            continue; /* free records hold UINT32_MAX */
        lock_acquire(&s->lock);
        if (expired_locked(&s->rec[at], now, 0)) {
            p = at;
            atomic_store_explicit(&s->exp_cursor, at + 1, memory_order_relaxed);
            goto take_locked;
        }
        lock_release(&s->lock);
    }
    atomic_store_explicit(&s->exp_cursor, at, memory_order_relaxed);
    return -ENOENT;

take_locked:
    evict_locked(s, p);
    lock_release(&s->lock);
    clear_hcrc(s, p);
    *page = p;
    return 0;
}

int
seg_free(struct seg *s, uint32_t page)
{
    struct seg_rec *r = &s->rec[page];
    bool was_sealed;

    assert(page < s->npages);
    lock_acquire(&s->lock);
    if (r->state != SEG_SEALED && r->state != SEG_EVICTING) {
        lock_release(&s->lock);
        return -EBUSY;
    }
    was_sealed = r->state == SEG_SEALED;
    if (was_sealed)
        unlink_locked(s, page);
    set_state_locked(s, r, SEG_FREE);
    atomic_store_explicit(&r->exp_max, UINT32_MAX, memory_order_relaxed);
    s->freed++;
    lock_release(&s->lock);
    /* Free in DRAM, but the page is not back in the pool yet: nobody can
     * open it before hcrc is 0 (an evicting one's already is). */
    if (was_sealed)
        clear_hcrc(s, page);
    pool_page_put(s->pool, page);
    return 0;
}

/* --- restart --- */

/* Link page in the age list by its seq_base: walked from the tail, since
 * a restart adopts segments roughly in the order they were opened. */
static void
link_sorted_locked(struct seg *s, uint32_t page)
{
    struct seg_rec *r = &s->rec[page];
    uint32_t after = s->tail;

    while (after != SEG_NO_PAGE && s->rec[after].seq_base > r->seq_base)
        after = s->rec[after].prev;
    if (after == s->tail) {
        link_tail_locked(s, page);
        return;
    }
    r->prev = after;
    r->next = after == SEG_NO_PAGE ? s->head : s->rec[after].next;
    s->rec[r->next].prev = page;
    if (after == SEG_NO_PAGE)
        s->head = page;
    else
        s->rec[after].next = page;
}

int
seg_adopt(struct seg *s, uint32_t page, uint32_t write_off)
{
    const struct seg_header *h;
    struct seg_rec *r;

    if (!seg_header_valid(s, page) || write_off < SEG_HEADER_SIZE ||
        write_off > POOL_PAGE_SIZE || write_off % 4)
        return -EINVAL;
    h = (const struct seg_header *)page_addr(s, page);
    r = &s->rec[page];
    if (pool_page_take(s->pool, page) != 0)
        return -EBUSY;
    lock_acquire(&s->lock);
    if (r->state != SEG_FREE) {
        lock_release(&s->lock);
        pool_page_put(s->pool, page);
        return -EBUSY;
    }
    r->seq_base = h->seq_base;
    r->created = h->created;
    r->exp_base = h->exp_base;
    r->bucket = h->ttl_bucket;
    r->owner = 0;
    atomic_store_explicit(&r->exp_max, 0, memory_order_relaxed);
    atomic_store_explicit(&r->dead, 0, memory_order_relaxed);
    atomic_store_explicit(&r->write_off, write_off, memory_order_relaxed);
    set_state_locked(s, r, SEG_SEALED);
    link_sorted_locked(s, page);
    s->opened++;
    lock_release(&s->lock);
    return 0;
}

/* --- reading --- */

uint32_t
seg_exp_base(const struct seg *s, uint64_t off)
{
    uint32_t page = (uint32_t)(off >> POOL_PAGE_SHIFT);

    assert(page < s->npages);
    return s->rec[page].exp_base;
}

void
seg_exp_raise(struct seg *s, uint64_t off, uint32_t exp)
{
    uint32_t page = (uint32_t)(off >> POOL_PAGE_SHIFT);
    _Atomic uint32_t *m = &s->rec[page].exp_max;
    uint32_t cur = atomic_load_explicit(m, memory_order_relaxed);

    assert(page < s->npages);
    while (cur < exp &&
           !atomic_compare_exchange_weak_explicit(
               m, &cur, exp, memory_order_relaxed, memory_order_relaxed))
        ;
}

char *
seg_records(const struct seg *s)
{
    return (char *)s->rec;
}

uint64_t
seg_seq_of(const struct seg *s, uint64_t off)
{
    uint32_t page = (uint32_t)(off >> POOL_PAGE_SHIFT);
    uint32_t in = (uint32_t)(off & (POOL_PAGE_SIZE - 1));

    assert(page < s->npages);
    return s->rec[page].seq_base + in / 4;
}

bool
seg_header_valid(const struct seg *s, uint32_t page)
{
    const struct seg_header *h;
    uint32_t crc;

    if (page >= s->npages)
        return false;
    h = (const struct seg_header *)page_addr(s, page);
    if (h->magic != SEG_MAGIC || h->version != SEG_VERSION || h->page != page ||
        h->ttl_bucket >= SEG_NBUCKETS || h->hcrc == 0)
        return false;
    crc = s->ops.crc32c(0, h, offsetof(struct seg_header, hcrc));
    return h->hcrc == (crc ? crc : 1);
}

void
seg_info(struct seg *s, uint32_t page, struct seg_info *out)
{
    const struct seg_rec *r = &s->rec[page];

    assert(page < s->npages);
    lock_acquire(&s->lock);
    out->state = (enum seg_state)r->state;
    out->bucket = r->bucket;
    out->owner = r->owner;
    out->write_off = atomic_load_explicit(&r->write_off, memory_order_relaxed);
    out->created = r->created;
    out->exp_base = r->exp_base;
    out->exp_max = atomic_load_explicit(&r->exp_max, memory_order_relaxed);
    out->seq_base = r->seq_base;
    out->dead = atomic_load_explicit(&r->dead, memory_order_relaxed);
    lock_release(&s->lock);
}

void
seg_stats(struct seg *s, struct seg_stats *out)
{
    lock_acquire(&s->lock);
    out->open = s->nstate[SEG_OPEN];
    out->open_max = s->open_max;
    out->sealed = s->nstate[SEG_SEALED];
    out->evicting = s->nstate[SEG_EVICTING];
    out->opened = s->opened;
    out->freed = s->freed;
    lock_release(&s->lock);
}

uint64_t
seg_dram_bytes(const struct seg *s)
{
    return sizeof(*s) + (uint64_t)s->npages * sizeof(*s->rec);
}

/* A broken rule: its sentence in err_msg(), -EUCLEAN. */
#define BROKEN(...) (err_set(__VA_ARGS__), -EUCLEAN)

static int
check_locked(struct seg *s)
{
    uint32_t count[SEG_EVICTING + 1] = {0};
    uint32_t p, prev = SEG_NO_PAGE, listed = 0;
    uint64_t last_seq = 0;

    for (p = s->head; p != SEG_NO_PAGE; p = s->rec[p].next) {
        const struct seg_rec *r = &s->rec[p];

        if (p >= s->npages || ++listed > s->npages)
            return BROKEN("seg: the age list leaves the pages or loops");
        if (r->state != SEG_OPEN && r->state != SEG_SEALED)
            return BROKEN("seg: page %u on the age list in state %u", p,
                          r->state);
        if (r->prev != prev)
            return BROKEN("seg: page %u's prev link is %u, not %u", p, r->prev,
                          prev);
        if (listed > 1 && r->seq_base <= last_seq)
            return BROKEN("seg: page %u out of seq_base order", p);
        last_seq = r->seq_base;
        prev = p;
    }
    if (s->tail != prev)
        return BROKEN("seg: the tail is %u, the list ends at %u", s->tail,
                      prev);
    for (p = 0; p < s->npages; p++) {
        const struct seg_rec *r = &s->rec[p];
        uint32_t woff =
            atomic_load_explicit(&r->write_off, memory_order_relaxed);

        if (r->state > SEG_EVICTING)
            return BROKEN("seg: page %u in state %u", p, r->state);
        count[r->state]++;
        if (r->state != SEG_FREE &&
            (woff < SEG_HEADER_SIZE || woff > POOL_PAGE_SIZE || woff % 4))
            return BROKEN("seg: page %u's write offset %u", p, woff);
    }
    if (count[SEG_OPEN] + count[SEG_SEALED] != listed)
        return BROKEN("seg: %u pages listed, %u open or sealed", listed,
                      count[SEG_OPEN] + count[SEG_SEALED]);
    for (unsigned st = 0; st <= SEG_EVICTING; st++)
        if (count[st] != s->nstate[st])
            return BROKEN("seg: %u pages in state %u, counted %u", count[st],
                          st, s->nstate[st]);
    return 0;
}

int
seg_check(struct seg *s)
{
    int rc;

    lock_acquire(&s->lock);
    rc = check_locked(s);
    lock_release(&s->lock);
    return rc;
}

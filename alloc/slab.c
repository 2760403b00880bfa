/*
 * Slab classes over the page pool. See slab.h for the model. The scans and
 * page drains are in alloc/slab_scan.c, under the same rules.
 *
 * Concurrency:
 *   class->lock (LOCK_RANK_CLASS) guards: class->pages[], npages, nfree,
 *     partial list links, stats counters, and for every page the class owns:
 *     page->nfree, page->free_bits[], page->scan_word, page->class_idx.
 *   page->cls, page->state: written under the owning class's lock (a page
 *     entering a class is written before it is published in that class's
 *     lists); read without a lock by slab_class_of()/slab_chunk_usable()/
 *     slab_ref() as hints (relaxed atomics), the caller rechecks what matters.
 *   page->chunk_word[]: relaxed 16-bit atomics, one per chunk: 3 bits
 *     (reference, fetched, win) and 13 bits of access time. Bits set by
 *     readers without a lock, the reference bit cleared under the class
 *     lock by the CLOCK scan; a lost set or clear only changes which item
 *     is evicted next, never correctness. The time is set by readers and
 *     writers without a lock with a compare-exchange that keeps the bits
 *     (slab_atime_set, slab_touch); slab_atime_rebase clamps old ones with a
 *     compare-exchange (a fresh time set meanwhile wins), one page at a time
 *     under its class lock. slab_fresh stores the whole word: only for a
 *     chunk no reader can see (the CLOCK scan may clear its reference bit
 *     meanwhile, which is clear either way).
 *   s->atime_next: relaxed atomic; whoever swaps it runs the rebase
 *     (alloc/slab_atime.c, which holds the access time functions).
 *   page->free_bits/bits_words (the bitmap allocation): resized only while
 *     the page sits in the pool (add_page, no lock: the pool handed the page
 *     to this thread alone, and no reader can hold one of its chunks, all
 *     freed after a grace period); chunk_word is repointed under
 *     the class lock in install_page_locked before any of them is written.
 *   page->chunk_word (the pointer): a relaxed atomic, stored by size_bits
 *     and install_page_locked, loaded by lock-free readers (page_words): a
 *     multiget prefetches through location hints that may be stale, so an
 *     outgrown table is not freed but retired (s->retired, a lock-free
 *     list), and the engine frees it after an RCU grace period
 *     (slab_retired_take / slab_retired_free).
 *   The page records and the tables come from the slab's own arena on
 *   huge pages (alloc/slab_tables.c, its leaf mutex guards it).
 *   Immutable after slab_create: classes' size/perpage/recip and the page
 *     info array.
 *   Lock order: class -> pool (slab_take drops the class lock before it asks
 *     the pool; slab_drain_finish puts the page after unlocking the class).
 *   No PMEM write ever happens here; new pages are formatted through the
 *   format hook with no lock held.
 *   EXCEPT with the experiment-only ablation switches (off by
 *   default, each costing the default path one predictable branch): with
 *   meta_write set, the page header mirror (alloc/slab_layout.h) is written
 *   through the hook under the class lock (and, for CLOCK bits, by
 *   lock-free readers: a lost mirror update is harmless, the DRAM copy is
 *   the truth); with format_in_lock, add_page formats under the class lock.
 */
#include "alloc/slab.h"

#include "alloc/slab_int.h"
#include "alloc/slab_layout.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/lock.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ablation only: see slab.h. The DRAM count is the truth; racing threads
 * may lose an update of the mirrored bit word, never of the count. */
void
slab_pmeta_use(struct slab *s, uint64_t off, bool used)
{
    uint32_t pg = (uint32_t)(off >> POOL_PAGE_SHIFT);
    struct slab_page *p = &s->page[pg];
    unsigned cls = atomic_load_explicit(&p->cls, memory_order_relaxed);
    if (cls == SLAB_NO_CLASS)
        return;
    const struct slab_class *c = &s->cls[cls];
    uint32_t idx = chunk_index(c, off);
    uint32_t w = SLAB_PMETA_BITS + 2 * c->nwords + idx / 64;
    uint64_t old = __atomic_load_n(pmeta_word(s, pg, w), __ATOMIC_RELAXED);
    uint64_t bit = 1ull << (idx % 64);
    uint32_t n =
        used ? atomic_fetch_add_explicit(&p->used, 1, memory_order_relaxed) + 1
             : atomic_fetch_sub_explicit(&p->used, 1, memory_order_relaxed) - 1;
    pmeta_put(s, pg, w, used ? old | bit : old & ~bit);
    pmeta_put(s, pg, SLAB_PMETA_USED, n);
    pmeta_put(s, pg, SLAB_PMETA_CURSOR, idx);
}

bool
slab_pmeta_on(const struct slab *s)
{
    return PMETA_ON(s);
}

/* A page joining a class: the whole header, as a format would write it. */
static void
pmeta_install(const struct slab *s, const struct slab_class *c, uint32_t pg)
{
    const struct slab_page *p = &s->page[pg];
    pmeta_id(s, pg);
    pmeta_count(s, pg);
    pmeta_links(s, pg);
    pmeta_put(s, pg, SLAB_PMETA_CLASS_IDX, p->class_idx);
    pmeta_put(s, pg, SLAB_PMETA_USED, 0);
    pmeta_put(s, pg, SLAB_PMETA_CURSOR, 0);
    for (uint32_t w = 0; w < c->nwords; w++) {
        pmeta_free_word(s, pg, w);
        pmeta_put(s, pg, SLAB_PMETA_BITS + c->nwords + w, 0);
        pmeta_put(s, pg, SLAB_PMETA_BITS + 2 * c->nwords + w, 0);
    }
}

/* The class after size in the sequence min_chunk and the factor give. */
static uint32_t
grow(uint32_t size, double factor)
{
    uint32_t next = ALIGN_UP((uint32_t)(size * factor), 8u);
    return next > size ? next : size + 8; /* grow by 8 bytes at least */
}

/* The chunk sizes from min to max into sizes[]: below fine_max each class
 * grows by at most step bytes (step 0: none do), from there on the classes
 * are those of min and the factor alone. The count, or 0 when there would
 * be more than SLAB_MAX_CLASSES. */
static unsigned
class_sizes(uint32_t min, uint32_t max, double factor, uint32_t step,
            uint32_t fine_max, uint32_t *sizes)
{
    uint32_t size = ALIGN_UP(min, 8u);
    uint32_t plain = size; /* the classes without a step, walked alongside */
    unsigned n = 0;

    while (size < max) {
        /* memcached would jump straight to chunk_max at its limit, wasting
         * up to that much per item; the caller says so instead */
        if (n == SLAB_MAX_CLASSES - 1)
            return 0;
        sizes[n++] = size;
        uint32_t next = grow(size, factor);
        if (step && size + step <= fine_max) {
            if (size + step < next)
                next = size + step;
        } else {
            while (plain <= size)
                plain = grow(plain, factor);
            next = plain;
        }
        size = next;
    }
    sizes[n++] = max;
    return n;
}

static unsigned class_search(const struct slab *s, uint32_t size);

static int
setup_classes(struct slab *s, const struct slab_config *cfg)
{
    uint32_t max = cfg->chunk_max ? cfg->chunk_max : POOL_PAGE_SIZE / 2;
    uint32_t min = cfg->min_chunk ? cfg->min_chunk : 64;
    double factor = cfg->growth_factor > 0 ? cfg->growth_factor : 1.25;

    if (min < 16 || max > POOL_PAGE_SIZE || min > max || factor <= 1.0) {
        err_set("bad slab settings: min_chunk %u, chunk_max %u, growth "
                "factor %.2f (need 16 <= min <= max <= 1 MiB, factor > 1)",
                min, max, factor);
        return -EINVAL;
    }
    if (max % 8) {
        err_set("chunk_max %u is not a multiple of 8", max);
        return -EINVAL;
    }
    uint32_t step = cfg->chunk_step;
    if (step % 8 || step > POOL_PAGE_SIZE / SLAB_STEP_SPAN) {
        err_set("chunk step %u is not a multiple of 8 up to %u", step,
                POOL_PAGE_SIZE / SLAB_STEP_SPAN);
        return -EINVAL;
    }
    /* The fine classes end SLAB_STEP_SPAN steps up, or lower where that
     * many would pass SLAB_MAX_CLASSES (a small factor has many classes of
     * its own): a function of the settings alone, so a restart with the
     * same settings finds the same classes. */
    uint32_t sizes[SLAB_MAX_CLASSES];
    uint32_t fine_max = step * SLAB_STEP_SPAN;
    unsigned n;
    while ((n = class_sizes(min, max, factor, step, fine_max, sizes)) == 0 &&
           step && fine_max > min)
        fine_max -= step;
    if (n == 0 && step)
        n = class_sizes(min, max, factor, 0, 0, sizes);
    if (n == 0) {
        err_set("growth factor %.2f from %u to %u bytes needs more than %d "
                "slab classes; raise the factor or min_chunk",
                factor, min, max, SLAB_MAX_CLASSES);
        return -EINVAL;
    }
    for (unsigned i = 0; i < n; i++)
        s->cls[i].size = sizes[i];
    s->nclasses = n;
    for (uint32_t i = 1; i <= SLAB_CLASS_LUT_MAX / 8; i++) {
        uint32_t least = 8 * i - 7;
        s->class_by8[i] =
            (uint8_t)(least > sizes[n - 1] ? n - 1 : class_search(s, least));
    }
    for (unsigned i = 0; i < n; i++) {
        struct slab_class *c = &s->cls[i];
        c->perpage = POOL_PAGE_SIZE / c->size;
        c->nwords = (c->perpage + 63) / 64;
        assert(c->nwords <= PAGE_MAX_WORDS); /* min_chunk >= 16 */
        c->recip = ((1ull << RECIP_SHIFT) + c->size - 1) / c->size;
        c->partial = NO_PAGE;
        if (cfg->meta_write) {
            uint64_t b = SLAB_PMETA_BYTES(c->nwords);
            c->reserved = (uint32_t)((b + c->size - 1) / c->size);
            if (c->reserved >= c->perpage) {
                err_set("metadata in PMEM (ablation) leaves no room in %u "
                        "byte chunks: lower chunk_max below 1 MiB",
                        c->size);
                return -EINVAL;
            }
        }
    }
    return 0;
}

int
slab_create(const struct slab_config *cfg, struct pool *pool, struct slab **out)
{
    struct slab *s = aligned_alloc(CACHE_LINE, sizeof(*s));
    if (!s)
        return -ENOMEM;
    memset(s, 0, sizeof(*s));
    s->pool = pool;
    s->format = cfg->format;
    s->format_arg = cfg->format_arg;
    s->meta_write = cfg->meta_write;
    s->meta_arg = cfg->meta_arg;
    s->format_in_lock = cfg->format_in_lock;
    int rc = setup_classes(s, cfg);
    if (rc)
        goto err_free;
    s->npages = pool_npages(pool);
    rc = slab_tables_init(s);
    if (rc) {
        err_set("no DRAM for slab tables of %u pages", s->npages);
        goto err_free;
    }
    rc = -ENOMEM;
    s->page_lists = malloc((size_t)s->npages * s->nclasses * sizeof(uint32_t));
    s->summary =
        calloc((size_t)s->npages * PAGE_SUMMARY_WORDS, sizeof(uint64_t));
    if (!s->page_lists || !s->summary)
        goto err_free_tables;
    for (uint32_t p = 0; p < s->npages; p++)
        atomic_init(&s->page[p].cls, SLAB_NO_CLASS);
    for (unsigned i = 0; i < s->nclasses; i++) {
        s->cls[i].pages = s->page_lists + (size_t)i * s->npages;
        lock_init(&s->cls[i].lock, LOCK_RANK_CLASS);
    }
    *out = s;
    return 0;

err_free_tables:
    err_set("no DRAM for slab tables of %u pages", s->npages);
    slab_tables_fini(s);
    free(s->page_lists);
    free(s->summary);
err_free:
    free(s);
    return rc;
}

void
slab_destroy(struct slab *s)
{
    if (!s)
        return;
    for (unsigned i = 0; i < s->nclasses; i++)
        lock_fini(&s->cls[i].lock);
    slab_tables_fini(s); /* every table and the retired ones with them */
    free(s->page_lists);
    free(s->summary);
    free(s);
}

unsigned
slab_nclasses(const struct slab *s)
{
    return s->nclasses;
}

uint32_t
slab_chunk_size(const struct slab *s, unsigned cls)
{
    return s->cls[cls].size;
}

/* The first class with size >= wanted, by binary search. */
static unsigned
class_search(const struct slab *s, uint32_t size)
{
    unsigned lo = 0, hi = s->nclasses;
    while (lo < hi) { /* first class with size >= wanted */
        unsigned mid = (lo + hi) / 2;
        if (s->cls[mid].size >= size)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

int
slab_class_for(const struct slab *s, uint32_t size)
{
    if (size > s->cls[s->nclasses - 1].size)
        return -1;
    if (size > SLAB_CLASS_LUT_MAX)
        return (int)class_search(s, size);
    /* class sizes are multiples of 8 (min_chunk rounded up, chunk_max
     * refused otherwise), so the step's entry is the class; the test keeps
     * it right should a size ever fall inside a step */
    unsigned c = s->class_by8[(size + 7) / 8];
    return (int)(s->cls[c].size < size ? c + 1 : c);
}

/* Take free chunks from the class's partial pages. Locks: class. */
static unsigned
take_locked(struct slab *s, struct slab_class *c, uint64_t *offs, unsigned want)
{
    unsigned n = 0;
    /* tested once: the word loop below is the quota refill's whole cost */
    bool pmeta = PMETA_ON(s);
    while (n < want && c->partial != NO_PAGE) {
        uint32_t pg = c->partial;
        struct slab_page *p = &s->page[pg];
        unsigned first = n;
        uint64_t *summary = page_summary(s, pg);
        /* the summary's words in order: the words visited are the lowest
         * nonempty ones, so scan_word may move past each one emptied */
        for (uint32_t sw = p->scan_word / 64; sw * 64 < c->nwords && n < want;
             sw++) {
            uint64_t sum = summary[sw];
            while (sum && n < want) {
                uint32_t w = sw * 64 + (uint32_t)__builtin_ctzll(sum);
                uint64_t bits = p->free_bits[w];
                while (bits && n < want) {
                    unsigned bit = (unsigned)__builtin_ctzll(bits);
                    bits &= bits - 1;
                    offs[n++] = chunk_offset(c, pg, w * 64 + bit);
                }
                p->free_bits[w] = bits;
                if (pmeta)
                    pmeta_free_word(s, pg, w);
                if (bits)
                    break;
                sum &= sum - 1;
                p->scan_word = w + 1;
            }
            summary[sw] = sum;
        }
        p->nfree -= n - first;
        if (pmeta)
            pmeta_count(s, pg);
        if (p->nfree == 0)
            partial_remove_locked(s, c, pg);
    }
    c->nfree -= n;
    return n;
}

/* Rebuild a page's summary of its free-bit words. Locks: class. */
static void
summarize_locked(struct slab *s, uint32_t pg, uint32_t nwords)
{
    const struct slab_page *p = &s->page[pg];
    uint64_t *sum = page_summary(s, pg);
    memset(sum, 0, PAGE_SUMMARY_WORDS * sizeof(uint64_t));
    for (uint32_t w = 0; w < nwords; w++)
        if (p->free_bits[w])
            sum[w / 64] |= 1ull << (w % 64);
}

/* A fresh page joins class c with every chunk free. Locks: class. */
static void
install_page_locked(struct slab *s, struct slab_class *c, unsigned cls,
                    uint32_t pg)
{
    struct slab_page *p = &s->page[pg];
    /* the layout follows this class: chunk words right after its free
     * bits (set before either is written; relaxed, see page_words) */
    _Atomic uint16_t *words = (_Atomic uint16_t *)(p->free_bits + c->nwords);
    atomic_store_explicit(&p->chunk_word, words, memory_order_relaxed);
    memset(p->free_bits, 0, c->nwords * sizeof(uint64_t));
    for (uint32_t w = 0; w < c->perpage / 64; w++)
        p->free_bits[w] = ~0ull;
    if (c->perpage % 64)
        p->free_bits[c->perpage / 64] = (1ull << (c->perpage % 64)) - 1;
    for (uint32_t i = 0; i < c->reserved; i++) /* ablation: the header */
        p->free_bits[i / 64] &= ~(1ull << (i % 64));
    summarize_locked(s, pg, c->nwords);
    for (uint32_t i = 0; i < 64 * c->nwords; i++)
        atomic_store_explicit(&words[i], 0, memory_order_relaxed);
    p->nfree = c->perpage - c->reserved;
    p->scan_word = 0;
    atomic_store_explicit(&p->used, 0, memory_order_relaxed);
    p->class_idx = c->npages;
    c->pages[c->npages++] = pg;
    atomic_store_explicit(&p->cls, (uint8_t)cls, memory_order_relaxed);
    atomic_store_explicit(&p->state, PAGE_ACTIVE, memory_order_relaxed);
    partial_push_locked(s, c, pg);
    c->nfree += c->perpage - c->reserved;
    c->pages_added++;
    if (PMETA_ON(s))
        pmeta_install(s, c, pg);
}

/* An outgrown table of nwords joins the retired list (a lock-free push;
 * its first two words, free-bit words nobody reads any more, hold the link
 * and its size). Release: pairs with the acquire exchange in
 * slab_retired_take, which then sees them. */
static void
retire_table(struct slab *s, uint64_t *old, uint32_t nwords)
{
    uint64_t *head = atomic_load_explicit(&s->retired, memory_order_relaxed);
    old[1] = nwords; /* a table has TABLE_WORDS words at least */
    do
        old[0] = (uint64_t)(uintptr_t)head;
    while (!atomic_compare_exchange_weak_explicit(
        &s->retired, &head, old, memory_order_release, memory_order_relaxed));
}

/* Give a page that is in the pool tables for nwords words of free bits and
 * 16 * nwords of chunk words (cleared by install_page_locked). Its chunks
 * were all freed after a grace period, so nobody holds one of them, but a
 * lock-free reader following a location hint (a multiget's bucket peek,
 * which may be stale) can still load the old chunk_word pointer and
 * prefetch through it: the old table is retired, not freed, and the engine
 * frees it after a grace period (slab_retired_take). DRAM only, no lock
 * held. */
static int
size_bits(struct slab *s, struct slab_page *p, uint32_t nwords)
{
    if (p->bits_words >= nwords)
        return 0;
    uint64_t *b = slab_tables_alloc(s, nwords);
    if (!b)
        return -ENOMEM;
    uint64_t *old = p->free_bits;
    uint32_t old_words = p->bits_words;
    p->free_bits = b;
    /* relaxed: see page_words; install_page_locked sets it again */
    atomic_store_explicit(&p->chunk_word, (_Atomic uint16_t *)(b + nwords),
                          memory_order_relaxed);
    p->bits_words = nwords;
    if (old)
        retire_table(s, old, old_words);
    return 0;
}

struct slab_retired *
slab_retired_take(struct slab *s)
{
    /* acquire: pairs with the release push in retire_table */
    uint64_t *head =
        atomic_exchange_explicit(&s->retired, NULL, memory_order_acquire);
    return (struct slab_retired *)head;
}

void
slab_retired_free(struct slab *s, struct slab_retired *list)
{
    uint64_t *t = (uint64_t *)list;
    while (t) {
        uint64_t *next = (uint64_t *)(uintptr_t)t[0];
        slab_tables_free(s, t, (uint32_t)t[1]);
        t = next;
    }
}

/* A page from the pool joins class cls. Locks: pool, then class (not
 * nested); the page is formatted between them, with no lock held. */
static int
add_page(struct slab *s, unsigned cls)
{
    struct slab_class *c = &s->cls[cls];
    uint32_t pg;

    if (pool_page_get(s->pool, &pg) != 0)
        return -ENOSPC;
    if (size_bits(s, &s->page[pg], c->nwords) != 0) {
        pool_page_put(s->pool, pg);
        return -ENOSPC;
    }
    /* Ablation only (format_in_lock): format inside the class lock. */
    if (unlikely(s->format_in_lock))
        lock_acquire(&c->lock);
    /* PMEM: the page is formatted here, with no lock held (rule 2). */
    if (s->format)
        s->format(s->format_arg,
                  pool_base(s->pool) + chunk_offset(c, pg, c->reserved),
                  c->size, c->perpage - c->reserved);
    if (likely(!s->format_in_lock))
        lock_acquire(&c->lock);
    install_page_locked(s, c, cls, pg);
    lock_release(&c->lock);
    return 0;
}

int
slab_adopt_page(struct slab *s, uint32_t pg, unsigned cls, const uint64_t *used)
{
    if (cls >= s->nclasses || PMETA_ON(s))
        return -EINVAL;
    struct slab_class *c = &s->cls[cls];
    if (pool_page_take(s->pool, pg) != 0)
        return -EBUSY;
    struct slab_page *p = &s->page[pg];
    if (size_bits(s, p, c->nwords) != 0) {
        pool_page_put(s->pool, pg);
        return -ENOMEM;
    }
    lock_acquire(&c->lock);
    install_page_locked(s, c, cls, pg);
    uint32_t n = 0;
    for (uint32_t w = 0; w < c->nwords; w++) {
        uint64_t take = p->free_bits[w] & used[w];
        p->free_bits[w] &= ~take;
        n += (uint32_t)__builtin_popcountll(take);
    }
    summarize_locked(s, pg, c->nwords);
    p->nfree -= n;
    c->nfree -= n;
    if (p->nfree == 0)
        partial_remove_locked(s, c, pg);
    lock_release(&c->lock);
    return 0;
}

int
slab_take_existing(struct slab *s, unsigned cls, uint64_t *offs, unsigned want)
{
    struct slab_class *c = &s->cls[cls];

    lock_acquire(&c->lock);
    unsigned n = take_locked(s, c, offs, want);
    if (n)
        c->takes++;
    lock_release(&c->lock);
    return n ? (int)n : -ENOSPC;
}

int
slab_take(struct slab *s, unsigned cls, uint64_t *offs, unsigned want)
{
    /* a page added here may be emptied by other threads before we take
     * from it; a few rounds settle that */
    for (int round = 0; round < 4; round++) {
        int n = slab_take_existing(s, cls, offs, want);
        if (n > 0)
            return n;
        if (add_page(s, cls) != 0)
            return -ENOSPC;
    }
    return slab_take_existing(s, cls, offs, want);
}

int
slab_grow(struct slab *s, unsigned cls)
{
    return add_page(s, cls);
}

void
slab_give(struct slab *s, unsigned cls, const uint64_t *offs, unsigned n)
{
    struct slab_class *c = &s->cls[cls];

    lock_acquire(&c->lock);
    /* tested once: the loop below is every deferred free's share of a
     * batch given back */
    bool pmeta = PMETA_ON(s);
    uint64_t size = c->size;
    for (unsigned i = 0; i < n; i++) {
        uint32_t pg = (uint32_t)(offs[i] >> POOL_PAGE_SHIFT);
        struct slab_page *p = &s->page[pg];
        uint32_t idx = chunk_index(c, offs[i]);
        uint64_t bit = 1ull << (idx % 64);

        /* the chunk's own offset: idx is exact for one (RECIP_SHIFT), so
         * an offset inside a chunk gives back a different one (no divide) */
        if (unlikely(page_cls(p) != cls || (p->free_bits[idx / 64] & bit) ||
                     idx * size != (offs[i] & PAGE_MASK))) {
            /* A double or foreign free would hand one chunk to two
             * items: stop here rather than corrupt the cache. */
            fprintf(stderr, "slab: bad free of offset %llu in class %u\n",
                    (unsigned long long)offs[i], cls);
            abort();
        }
        p->free_bits[idx / 64] |= bit;
        page_summary(s, pg)[idx / 64 / 64] |= 1ull << (idx / 64 % 64);
        atomic_fetch_and_explicit(&page_words(p)[idx], (uint16_t)~BITS_ALL,
                                  memory_order_relaxed);
        if (idx / 64 < p->scan_word)
            p->scan_word = idx / 64;
        if (p->nfree++ == 0 && page_state(p) == PAGE_ACTIVE)
            partial_push_locked(s, c, pg);
        if (pmeta) {
            pmeta_free_word(s, pg, idx / 64);
            pmeta_ref(s, c, pg, idx, false);
            pmeta_count(s, pg);
        }
    }
    c->nfree += n;
    c->gives += n;
    lock_release(&c->lock);
}

unsigned
slab_class_of(const struct slab *s, uint64_t off)
{
    uint32_t pg = (uint32_t)(off >> POOL_PAGE_SHIFT);
    if (pg >= s->npages)
        return SLAB_NO_CLASS;
    return atomic_load_explicit(&s->page[pg].cls, memory_order_relaxed);
}

bool
slab_chunk_usable(const struct slab *s, uint64_t off)
{
    const struct slab_page *p = &s->page[off >> POOL_PAGE_SHIFT];
    return atomic_load_explicit(&p->state, memory_order_relaxed) == PAGE_ACTIVE;
}

bool
slab_page_draining(const struct slab *s, uint32_t page)
{
    return page < s->npages &&
           atomic_load_explicit(&s->page[page].state, memory_order_relaxed) ==
               PAGE_DRAINING;
}

/* Ablation only: the mirror of the CLOCK bit of the chunk at off. */
static void
pmeta_ref_at(const struct slab *s, uint64_t off, bool set)
{
    uint32_t pg = (uint32_t)(off >> POOL_PAGE_SHIFT);
    unsigned cls = atomic_load_explicit(&s->page[pg].cls, memory_order_relaxed);
    if (cls != SLAB_NO_CLASS)
        pmeta_ref(s, &s->cls[cls], pg, chunk_index(&s->cls[cls], off), set);
}

void
slab_prefetch(const struct slab *s, uint64_t off)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (w)
        __builtin_prefetch((const void *)w, 1, 3);
}

void
slab_ref(struct slab *s, uint64_t off)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (!w)
        return;
    uint16_t both = BIT_REF | BIT_FETCHED;
    /* Read first: a hot item's bits are already set, and skipping the
     * read-modify-write keeps its cache line shared between cores. */
    if ((atomic_load_explicit(w, memory_order_relaxed) & both) != both) {
        atomic_fetch_or_explicit(w, both, memory_order_relaxed);
        if (PMETA_ON(s))
            pmeta_ref_at(s, off, true);
    }
}

bool
slab_fetched(const struct slab *s, uint64_t off)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    return w && (atomic_load_explicit(w, memory_order_relaxed) & BIT_FETCHED);
}

void
slab_reset_bits(struct slab *s, uint64_t off)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (w && (atomic_load_explicit(w, memory_order_relaxed) & BITS_ALL)) {
        atomic_fetch_and_explicit(w, (uint16_t)~BITS_ALL, memory_order_relaxed);
        if (PMETA_ON(s))
            pmeta_ref_at(s, off, false);
    }
}

bool
slab_claim(struct slab *s, uint64_t off)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (!w)
        return false;
    /* relaxed: the bit itself is the whole message, nothing else is
     * published with it */
    uint16_t old = atomic_fetch_or_explicit(w, BIT_WIN, memory_order_relaxed);
    return !(old & BIT_WIN);
}

bool
slab_claimed(const struct slab *s, uint64_t off)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    return w && (atomic_load_explicit(w, memory_order_relaxed) & BIT_WIN);
}

/* --- a read hit and a store in one call each --- */

/* A read hit's bump of the chunk's word w (last loaded as v): what slab_ref
 * and slab_atime_set do, and as they do, no write when nothing changes (a
 * hot item's line stays shared); one compare-exchange when it does. */
static inline __attribute__((always_inline)) void
touch_bump(struct slab *s, uint64_t off, _Atomic uint16_t *w, uint16_t v,
           uint32_t now)
{
    uint16_t want = word_with_time(v | BIT_REF | BIT_FETCHED, now);
    if (want == v)
        return;
    while (!atomic_compare_exchange_weak_explicit(
        w, &v, want, memory_order_relaxed, memory_order_relaxed))
        want = word_with_time(v | BIT_REF | BIT_FETCHED, now);
    if (PMETA_ON(s) && (v & (BIT_REF | BIT_FETCHED)) != (BIT_REF | BIT_FETCHED))
        pmeta_ref_at(s, off, true);
}

void
slab_touch(struct slab *s, uint64_t off, uint32_t now, bool bump,
           struct slab_seen *out)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (!w) {
        *out = (struct slab_seen){SLAB_ATIME_CAP, SLAB_NO_CLASS, false, false};
        return;
    }
    uint16_t v = atomic_load_explicit(w, memory_order_relaxed);
    out->age = atime_age(word_time(v), now);
    out->cls = (uint8_t)cls;
    out->fetched = v & BIT_FETCHED;
    out->claimed = v & BIT_WIN;
    if (bump)
        touch_bump(s, off, w, v, now);
}

void *
slab_prefetch_word(const struct slab *s, uint64_t off, unsigned *cls)
{
    _Atomic uint16_t *w = chunk_word(s, off, cls);
    if (w)
        __builtin_prefetch((const void *)w, 1, 3);
    return (void *)w;
}

void
slab_prefetch_words(const struct slab *s, struct slab_word_ref *r, unsigned n,
                    size_t stride)
{
    for (unsigned i = 0; i < n;
         i++, r = (struct slab_word_ref *)(void *)((char *)r + stride)) {
        if (r->off == SLAB_NO_OFF) {
            r->word = NULL;
            r->cls = SLAB_NO_CLASS;
            continue;
        }
        _Atomic uint16_t *w = chunk_word(s, r->off, &r->cls);
        if (w)
            __builtin_prefetch((const void *)w, 1, 3);
        r->word = (void *)w;
    }
}

void
slab_touch_word(struct slab *s, uint64_t off, void *word, uint32_t now)
{
    _Atomic uint16_t *w = word;
    touch_bump(s, off, w, atomic_load_explicit(w, memory_order_relaxed), now);
}

void
slab_pmeta_touched(struct slab *s, uint64_t off)
{
    pmeta_ref_at(s, off, true);
}

unsigned
slab_touch_cls(struct slab *s, uint64_t off, uint32_t now)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (w)
        touch_bump(s, off, w, atomic_load_explicit(w, memory_order_relaxed),
                   now);
    return cls;
}

void
slab_fresh(struct slab *s, uint64_t off, uint32_t now, unsigned bits)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (!w)
        return;
    uint16_t v = atomic_load_explicit(w, memory_order_relaxed);
    uint16_t want =
        word_with_time((bits & SLAB_FRESH_WIN ? BIT_WIN : 0) |
                           (bits & SLAB_FRESH_FETCHED ? BIT_FETCHED : 0),
                       now);
    if (v != want)
        atomic_store_explicit(w, want, memory_order_relaxed);
    if (PMETA_ON(s) && (v & BIT_REF))
        pmeta_ref_at(s, off, false);
}

void
slab_class_stats(const struct slab *s, unsigned cls,
                 struct slab_class_stats *out)
{
    struct slab_class *c = (struct slab_class *)&s->cls[cls];
    lock_acquire(&c->lock);
    out->chunk_size = c->size;
    out->perpage = c->perpage;
    out->pages = c->npages;
    out->free_chunks = c->nfree;
    out->takes = c->takes;
    out->gives = c->gives;
    out->pages_added = c->pages_added;
    out->pages_removed = c->pages_removed;
    lock_release(&c->lock);
}

uint32_t
slab_reserved(const struct slab *s, unsigned cls)
{
    return s->cls[cls].reserved;
}

/* Ablation only: see slab.h. The item write that follows is a PMEM write
 * inside this critical section, on purpose. */
void
slab_ablate_lock(struct slab *s, unsigned cls)
{
    lock_acquire(&s->cls[cls].lock);
}

void
slab_ablate_unlock(struct slab *s, unsigned cls)
{
    lock_release(&s->cls[cls].lock);
}

uint64_t
slab_dram_bytes(const struct slab *s)
{
    return sizeof(*s) + slab_tables_mapped(s) +
           (uint64_t)s->npages * s->nclasses * sizeof(uint32_t);
}

/* --- invariants --- */

static int
check_page_locked(const struct slab *s, const struct slab_class *c,
                  unsigned cls, uint32_t i)
{
    uint32_t pg = c->pages[i];
    const struct slab_page *p = &s->page[pg];
    uint32_t count = 0;

    if (page_cls(p) != cls || p->class_idx != i || page_state(p) == PAGE_FREE) {
        err_set("slab: page %u listed in class %u but owned by %u (state %u)",
                pg, cls, page_cls(p), page_state(p));
        return -EFAULT;
    }
    for (uint32_t w = 0; w < c->nwords; w++)
        count += (uint32_t)__builtin_popcountll(p->free_bits[w]);
    if (c->perpage % 64 && p->free_bits[c->perpage / 64] >> (c->perpage % 64)) {
        err_set("slab: page %u has free bits past its last chunk", pg);
        return -EFAULT;
    }
    for (uint32_t r = 0; r < c->reserved; r++) {
        if (p->free_bits[r / 64] & (1ull << (r % 64))) {
            err_set("slab: page %u hands out header chunk %u", pg, r);
            return -EFAULT;
        }
    }
    if (count != p->nfree) {
        err_set("slab: page %u bitmap has %u free, count says %u", pg, count,
                p->nfree);
        return -EFAULT;
    }
    bool want_partial = page_state(p) == PAGE_ACTIVE && p->nfree > 0;
    if (want_partial != page_on_partial(c, p, pg)) {
        err_set("slab: page %u (free %u, state %u) %s the partial list", pg,
                p->nfree, page_state(p), want_partial ? "missing from" : "on");
        return -EFAULT;
    }
    return 0;
}

static int
check_class(struct slab *s, unsigned cls)
{
    struct slab_class *c = &s->cls[cls];
    int rc = 0;
    uint64_t nfree = 0;

    lock_acquire(&c->lock);
    for (uint32_t i = 0; i < c->npages && !rc; i++) {
        rc = check_page_locked(s, c, cls, i);
        nfree += s->page[c->pages[i]].nfree;
    }
    if (!rc && nfree != c->nfree) {
        err_set("slab: class %u pages hold %llu free chunks, class says %llu",
                cls, (unsigned long long)nfree, (unsigned long long)c->nfree);
        rc = -EFAULT;
    }
    lock_release(&c->lock);
    return rc;
}

int
slab_check(struct slab *s)
{
    uint32_t owned = 0;
    for (unsigned cls = 0; cls < s->nclasses; cls++) {
        int rc = check_class(s, cls);
        if (rc)
            return rc;
        owned += s->cls[cls].npages;
    }
    uint32_t free_pages = pool_nfree(s->pool);
    if (owned + free_pages > s->npages) {
        err_set("slab: %u pages owned plus %u free exceed the pool's %u", owned,
                free_pages, s->npages);
        return -EFAULT;
    }
    return 0;
}

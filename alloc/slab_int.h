#pragma once
/*
 * Internals of the slab shared by alloc/slab.c (classes, pages, chunks and
 * their bits), alloc/slab_scan.c (the CLOCK and expiry scans, page drains),
 * alloc/slab_atime.c (the access time in each chunk's DRAM word) and
 * alloc/slab_tables.c (the arena the page records and tables come from),
 * and by alloc/quota.c for a page's state (its fast paths). Not for
 * use outside alloc/. The concurrency rules of every field are at the top
 * of alloc/slab.c; each file repeats what it touches.
 */

#include "alloc/slab.h"

#include "alloc/pool.h"
#include "alloc/slab_layout.h"
#include "src/base/compiler.h"
#include "src/base/lock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define PAGE_MASK ((uint64_t)POOL_PAGE_SIZE - 1)
#define NO_PAGE UINT32_MAX
/* Exact division of an in-page offset (< 2^20) by a chunk size (< 2^21):
 * idx = (x * ceil(2^42 / size)) >> 42, exact since the error term is below
 * 2^22 (Granlund-Montgomery), and it avoids a divide on the read path. */
#define RECIP_SHIFT 42

/* a chunk's 16-bit DRAM word in page->chunk_word: 3 bits, then the time
 * (slab.h states it for slab_touch_seen_word) */
#define BIT_REF SLAB_WORD_REF
#define BIT_FETCHED SLAB_WORD_FETCHED
#define BIT_WIN SLAB_WORD_WIN
#define BITS_ALL 7u
#define TIME_SHIFT SLAB_WORD_TIME_SHIFT
#define TIME_MASK (SLAB_ATIME_WRAP - 1)
_Static_assert(TIME_SHIFT + SLAB_ATIME_BITS == 16, "one 16-bit word a chunk");
/* 64-bit words of one page's DRAM tables per free-bit word (64 chunks):
 * free bits 1, chunk words 16 (2 bytes a chunk) */
#define TABLE_WORDS 17
/* Free-bit words of a page at most (chunks of 16 bytes, the least
 * min_chunk), and the words of its summary of them (page_summary). */
#define PAGE_MAX_WORDS (POOL_PAGE_SIZE / 16 / 64)
#define PAGE_SUMMARY_WORDS ((PAGE_MAX_WORDS + 63) / 64)
/* Sizes up to this find their class in a table (slab_class_for). */
#define SLAB_CLASS_LUT_MAX 16384u
_Static_assert(SLAB_MAX_CLASSES <= 255, "a class number fits a byte");

enum page_state {
    PAGE_FREE = 0,     /* in the pool */
    PAGE_ACTIVE = 1,   /* owned by a class, handing out chunks */
    PAGE_DRAINING = 2, /* owned by a class, being emptied */
};

struct slab_page {
    _Atomic uint8_t cls;
    _Atomic uint8_t state;
    uint32_t nfree;
    uint32_t class_idx;    /* index in class->pages */
    uint32_t next, prev;   /* partial list links (page numbers) */
    uint32_t scan_word;    /* lowest bitmap word that may hold a free bit */
    uint32_t bits_words;   /* capacity of the bitmaps, in free-bit words */
    _Atomic uint32_t used; /* ablation only: chunks holding an item */
    uint64_t *free_bits;   /* 1 = free chunk; free_bits and chunk_word share
                              one allocation, sized for the page's class when
                              it joins one and only ever grown (the old one
                              retired, freed after a grace period) */
    /* one word per chunk: the CLOCK reference bit, "fetched since stored",
     * "recache win claimed" (BIT_*), and above them the unix second of its
     * last store or read hit modulo 2^13 (see slab_atime_set); one atomic
     * op sets reference, fetched and time together. The pointer itself is
     * atomic: lock-free readers load it (page_words) while a page leaving
     * the pool is given new tables. */
    _Atomic(_Atomic uint16_t *) chunk_word;
};

struct slab_class {
    struct lock lock;
    uint32_t size;
    uint32_t perpage;
    uint32_t nwords;
    uint32_t reserved; /* ablation: chunks kept for the PMEM header */
    uint64_t recip;
    uint32_t *pages; /* page numbers owned, capacity = pool pages */
    uint32_t npages;
    uint32_t partial; /* head of pages with free chunks, or NO_PAGE */
    uint64_t nfree;
    uint64_t takes;
    uint64_t gives;
    uint64_t pages_added;
    uint64_t pages_removed;
} CACHE_ALIGNED;

/* The arena of the page records and tables (alloc/slab_tables.c). */
struct tables_region;
struct slab_tables {
    pthread_mutex_t lock;          /* leaf: guards what follows */
    struct tables_region *regions; /* mapped regions, newest first */
    char *next, *end;              /* the bump range in the newest */
    uint64_t **free_lists;         /* by nwords: freed tables, linked
                                      through their first word */
    _Atomic uint64_t mapped;       /* bytes of all regions (written
                                      under the lock, read relaxed) */
};

struct slab {
    struct pool *pool;
    slab_format_fn *format;
    void *format_arg;
    slab_meta_write_fn *meta_write; /* ablation only, NULL by default */
    void *meta_arg;
    bool format_in_lock; /* ablation only */
    unsigned nclasses;
    uint32_t npages;             /* pages in the pool mapping */
    struct slab_page *page;      /* one per pool page, in tables */
    _Atomic uint32_t atime_next; /* unix second of the next atime rebase */
    /* tables pages outgrew, linked through their first word, until the
     * engine frees them after a grace period (slab_retired_take) */
    _Atomic(uint64_t *) retired;
    uint32_t *page_lists; /* class->pages storage */
    /* per page, PAGE_SUMMARY_WORDS words: bit w set when the page's
     * free_bits[w] may be nonzero (clear: it is 0), so that a take finds
     * a sparse page's free chunks without reading its empty words (class
     * lock, as free_bits). Apart from struct slab_page, whose lines every
     * get reads, so that those stay as few. */
    uint64_t *summary;
    /* slab_class_for without a search: entry i is the first class holding
     * the smallest size of its 8-byte step (8 * i - 7); set up with the
     * classes, read only after */
    uint8_t class_by8[SLAB_CLASS_LUT_MAX / 8 + 1];
    struct slab_tables tables;
    struct slab_class cls[SLAB_MAX_CLASSES];
};

/* --- the arena of page records and tables (alloc/slab_tables.c) --- */

/* Map the first region and carve s->page (s->npages zeroed records) from
 * it: 0 or -ENOMEM. */
int slab_tables_init(struct slab *s);
/* Unmap every region (the records and all tables with them). */
void slab_tables_fini(struct slab *s);
/* A table of nwords free-bit words and their chunk words (nwords *
 * TABLE_WORDS words, contents undefined), or NULL. Locks: tables (leaf). */
uint64_t *slab_tables_alloc(struct slab *s, uint32_t nwords);
/* Give back a table of nwords that nobody can reach any more (after its
 * grace period). Locks: tables (leaf). */
void slab_tables_free(struct slab *s, uint64_t *table, uint32_t nwords);
/* Bytes mapped for records and tables (relaxed: for stats). */
uint64_t slab_tables_mapped(const struct slab *s);

static inline uint32_t
chunk_index(const struct slab_class *c, uint64_t off)
{
    return (uint32_t)(((off & PAGE_MASK) * c->recip) >> RECIP_SHIFT);
}

static inline uint64_t
chunk_offset(const struct slab_class *c, uint32_t page, uint32_t idx)
{
    return ((uint64_t)page << POOL_PAGE_SHIFT) + (uint64_t)idx * c->size;
}

/* The summary words of page pg (struct slab.summary). */
static inline uint64_t *
page_summary(const struct slab *s, uint32_t pg)
{
    return s->summary + (size_t)pg * PAGE_SUMMARY_WORDS;
}

/* EXPERIMENT ONLY: whether the page metadata is mirrored into PMEM */
#define PMETA_ON(s) unlikely((s)->meta_write != NULL)

/* The page's chunk words. Relaxed: a reader that goes on to read or change
 * a chunk's word holds a location it loaded with acquire from the index
 * (or holds the class lock), which orders the tables' set-up before it; a
 * location hint (a multiget's bucket peek) only prefetches the word, and
 * the table it points into stays allocated until a grace period after it
 * was replaced (size_bits). */
static inline _Atomic uint16_t *
page_words(const struct slab_page *p)
{
    return atomic_load_explicit(&p->chunk_word, memory_order_relaxed);
}

/* The chunk's DRAM word and its page's class, or NULL for a free page.
 * Inlined: it is most of every lock-free bit and time operation. */
static inline __attribute__((always_inline)) _Atomic uint16_t *
chunk_word(const struct slab *s, uint64_t off, unsigned *cls_out)
{
    const struct slab_page *p = &s->page[off >> POOL_PAGE_SHIFT];
    unsigned cls = atomic_load_explicit(&p->cls, memory_order_relaxed);
    *cls_out = cls;
    if (unlikely(cls == SLAB_NO_CLASS))
        return NULL;
    return &page_words(p)[chunk_index(&s->cls[cls], off)];
}

/* --- the access time in a chunk word (meta l, me la=) --- */

static inline uint16_t
word_time(uint16_t v)
{
    return (uint16_t)(v >> TIME_SHIFT);
}

static inline uint16_t
word_with_time(uint16_t v, uint32_t now)
{
    return (uint16_t)((v & BITS_ALL) | (now & TIME_MASK) << TIME_SHIFT);
}

/* Seconds from a stored time to now, modulo 2^13, capped. */
static inline uint32_t
atime_age(uint16_t then, uint32_t now)
{
    uint32_t age = (now - then) & TIME_MASK;
    return age > SLAB_ATIME_CAP ? SLAB_ATIME_CAP : age;
}

/* Store the time into *w keeping its bits, as a compare-exchange from v (the
 * word last loaded): a bit set or cleared meanwhile makes it retry, never
 * lost. */
static inline void
word_set_time(_Atomic uint16_t *w, uint16_t v, uint32_t now)
{
    while (!atomic_compare_exchange_weak_explicit(w, &v, word_with_time(v, now),
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* A page's class and state: written under the owning class's lock, read
 * relaxed (a hint without the lock; under it, the lock orders them). */
static inline unsigned
page_cls(const struct slab_page *p)
{
    return atomic_load_explicit(&p->cls, memory_order_relaxed);
}

static inline unsigned
page_state(const struct slab_page *p)
{
    return atomic_load_explicit(&p->state, memory_order_relaxed);
}

/* --- EXPERIMENT ONLY: page metadata mirrored into PMEM (ablation) --- */

static inline uint64_t *
pmeta_word(const struct slab *s, uint32_t pg, uint32_t w)
{
    return (uint64_t *)(pool_base(s->pool) +
                        ((uint64_t)pg << POOL_PAGE_SHIFT)) +
           w;
}

static inline void
pmeta_put(const struct slab *s, uint32_t pg, uint32_t w, uint64_t v)
{
    s->meta_write(s->meta_arg, pmeta_word(s, pg, w), v);
}

static inline void
pmeta_id(const struct slab *s, uint32_t pg)
{
    const struct slab_page *p = &s->page[pg];
    pmeta_put(s, pg, SLAB_PMETA_ID,
              SLAB_PMETA_MAGIC | (uint64_t)page_cls(p) << 32 |
                  (uint64_t)page_state(p) << 40);
}

static inline void
pmeta_count(const struct slab *s, uint32_t pg)
{
    const struct slab_page *p = &s->page[pg];
    pmeta_put(s, pg, SLAB_PMETA_COUNT, p->nfree | (uint64_t)p->scan_word << 32);
}

static inline void
pmeta_links(const struct slab *s, uint32_t pg)
{
    const struct slab_page *p = &s->page[pg];
    pmeta_put(s, pg, SLAB_PMETA_LINKS, p->next | (uint64_t)p->prev << 32);
}

static inline void
pmeta_free_word(const struct slab *s, uint32_t pg, uint32_t w)
{
    pmeta_put(s, pg, SLAB_PMETA_BITS + w, s->page[pg].free_bits[w]);
}

/* The chunk's CLOCK bit in the mirror: read, change, store (a racing
 * reader may lose an update of the mirror, never of the DRAM bits). */
static inline void
pmeta_ref(const struct slab *s, const struct slab_class *c, uint32_t pg,
          uint32_t idx, bool set)
{
    uint32_t w = SLAB_PMETA_BITS + c->nwords + idx / 64;
    uint64_t bit = 1ull << (idx % 64);
    uint64_t old = __atomic_load_n(pmeta_word(s, pg, w), __ATOMIC_RELAXED);
    uint64_t v = set ? old | bit : old & ~bit;
    if (v != old)
        pmeta_put(s, pg, w, v);
}

/* --- partial list (class lock held) --- */

static inline void
partial_push_locked(struct slab *s, struct slab_class *c, uint32_t pg)
{
    struct slab_page *p = &s->page[pg];
    p->prev = NO_PAGE;
    p->next = c->partial;
    if (c->partial != NO_PAGE)
        s->page[c->partial].prev = pg;
    if (PMETA_ON(s)) {
        if (c->partial != NO_PAGE)
            pmeta_links(s, c->partial);
        pmeta_links(s, pg);
    }
    c->partial = pg;
}

static inline void
partial_remove_locked(struct slab *s, struct slab_class *c, uint32_t pg)
{
    struct slab_page *p = &s->page[pg];
    if (p->prev != NO_PAGE)
        s->page[p->prev].next = p->next;
    else
        c->partial = p->next;
    if (p->next != NO_PAGE)
        s->page[p->next].prev = p->prev;
    if (PMETA_ON(s)) {
        if (p->prev != NO_PAGE)
            pmeta_links(s, p->prev);
        if (p->next != NO_PAGE)
            pmeta_links(s, p->next);
    }
    p->next = p->prev = NO_PAGE;
    if (PMETA_ON(s))
        pmeta_links(s, pg);
}

static inline bool
page_on_partial(const struct slab_class *c, const struct slab_page *p,
                uint32_t pg)
{
    return p->prev != NO_PAGE || c->partial == pg;
}

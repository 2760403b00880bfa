#pragma once
/*
 * Slab classes over the page pool: each class cuts 1 MiB pages into chunks of
 * one size (memcached-like: min_chunk, then x growth_factor, 8-byte aligned,
 * up to chunk_max; with a chunk_step, small classes grow by at most that
 * many bytes, see struct slab_config). All bookkeeping is in DRAM: per-page
 * info (class, state, free-chunk bitmap, and one 16-bit word per chunk holding
 * its CLOCK reference, fetched and win bits and its last access time),
 * per-class page lists and partial-page lists. Chunks are named by their byte
 * offset from the pool base (uint64_t), never by pointer.
 *
 * The slab never writes the chunks: a new page is handed to the optional
 * format hook (which the engine points at the PMEM helpers) after the pool
 * lock is dropped and before the class lock is taken, so formatting happens
 * outside every critical section (DESIGN rule 2).
 *
 * Concurrency:
 *   class->lock (LOCK_RANK_CLASS) guards the class's page list, partial list,
 *     nfree, cursors and, for pages of that class, page->nfree and
 *     page->free_bits.
 *   page->chunk_word   16-bit atomics, relaxed, one per chunk: the
 *                      reference, fetched and win bits and the access time.
 *                      Bits set by readers (slab_ref, slab_claim,
 *                      slab_touch), the reference bit cleared by the CLOCK
 *                      sweep under the class lock, all by slab_give; the
 *                      time set by readers and writers (slab_atime_set,
 *                      slab_touch) with a compare-exchange that keeps the
 *                      bits, old times clamped by slab_atime_rebase under
 *                      the class lock with a compare-exchange, so a fresh
 *                      time always wins. A lost bit update only changes
 *                      which item is evicted.
 *   page->cls, ->state written under the owning class lock (and the pool
 *                      lock when the page moves); read relaxed by
 *                      slab_chunk_usable() as a hint that the caller rechecks.
 *   lock order         class -> pool. Never two classes at once.
 */

#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "alloc/pool.h"

#define SLAB_MAX_CLASSES 63
/* The fine classes of slab_config.chunk_step end at this many steps. */
#define SLAB_STEP_SPAN 32u
#define SLAB_NO_CLASS 0xff

struct slab;

typedef void slab_format_fn(void *arg, char *page, uint32_t chunk_size,
                            uint32_t nchunks);
/* Ablation only: store v at dst, a word of a page's PMEM header. */
typedef void slab_meta_write_fn(void *arg, uint64_t *pmem_dst, uint64_t v);

struct slab_config {
    uint32_t min_chunk;   /* smallest chunk, bytes (>= 16); default 64 */
    double growth_factor; /* > 1.0; default 1.25 */
    uint32_t chunk_max;   /* largest chunk (<= POOL_PAGE_SIZE); 0 = 512 KiB */
    /* Fine classes for small items (a multiple of 8; 0: off). Below
     * SLAB_STEP_SPAN x chunk_step bytes each class is the previous one plus
     * chunk_step bytes, or plus the growth factor's step where that is
     * smaller; from there on the classes are exactly those min_chunk and
     * growth_factor give without a step, so large items round as before.
     * With min_chunk 80, factor 1.25 and a step of 16: 80, 96, ..., 512,
     * then 552, 696, 872, ... (60 classes to 512 KiB). Where that would
     * make more than SLAB_MAX_CLASSES (a small factor), the fine classes
     * end lower, as far down as none. */
    uint32_t chunk_step;
    slab_format_fn *format; /* optional: called on every new page */
    void *format_arg;
    /* EXPERIMENT ONLY (ablation switches; NULL/false by default):
     * meta_write set: every page reserves its first chunks for a header
     * (alloc/slab_layout.h) and every change of its allocation state is
     * also stored there through meta_write, under the class lock or (CLOCK
     * bits) lock-free, as Tair MDB's metadata-in-PMEM layout did.
     * format_in_lock: new pages are formatted with the class lock held. */
    slab_meta_write_fn *meta_write;
    void *meta_arg;
    bool format_in_lock;
};

struct slab_class_stats {
    uint32_t chunk_size;
    uint32_t perpage;
    uint32_t pages;         /* pages owned (including draining ones) */
    uint64_t free_chunks;   /* free in bitmaps (not counting quota stashes) */
    uint64_t takes;         /* slab_take calls that returned chunks */
    uint64_t gives;         /* chunks given back */
    uint64_t pages_added;   /* pages taken from the pool */
    uint64_t pages_removed; /* pages drained back to the pool */
};

int slab_create(const struct slab_config *cfg, struct pool *pool,
                struct slab **out);
void slab_destroy(struct slab *s);

unsigned slab_nclasses(const struct slab *s);
uint32_t slab_chunk_size(const struct slab *s, unsigned cls);
/* Smallest class whose chunk holds size bytes, or -1 if none does. */
int slab_class_for(const struct slab *s, uint32_t size);

/* Batch allocation for the quota layer. Takes up to want (>= 1) free chunks
 * of class cls into offs[], adding one page from the pool if the class has no
 * free chunk. Returns the number taken (>= 1), or -ENOSPC when the class has
 * none and the pool has no free page. Locks: class, then pool. */
int slab_take(struct slab *s, unsigned cls, uint64_t *offs, unsigned want);

/* Like slab_take, but never adds a page: -ENOSPC when the class has no
 * free chunk (memcached's SLABS_ALLOC_NO_NEWPAGE, for moving items off a
 * page being reassigned). Locks: class. */
int slab_take_existing(struct slab *s, unsigned cls, uint64_t *offs,
                       unsigned want);

/* A restart: page (free in the pool) joins class cls with the chunks whose
 * bit is set in used[] (chunk i: bit i % 64 of word i / 64) holding items,
 * the others free. No format hook: the chunks are as the pool file has
 * them. 0, -EBUSY (the page is not free in the pool), -EINVAL (no such
 * class, or the ablation header is on) or -ENOMEM. Locks: pool, then
 * class. */
int slab_adopt_page(struct slab *s, uint32_t page, unsigned cls,
                    const uint64_t *used);

/* Give class cls one more page from the pool: 0 or -ENOSPC. Locks: pool,
 * then class. */
int slab_grow(struct slab *s, unsigned cls);

/* Return chunks of class cls. Locks: class. */
void slab_give(struct slab *s, unsigned cls, const uint64_t *offs, unsigned n);

/* Class of the page holding off, or SLAB_NO_CLASS. Lock-free hint. */
unsigned slab_class_of(const struct slab *s, uint64_t off);

/* False while the page holding off is being drained: a quota that finds such
 * a chunk in its stash gives it back instead of using it. Lock-free hint. */
bool slab_chunk_usable(const struct slab *s, uint64_t off);

/* Mark the chunk recently used (CLOCK). DRAM only, lock-free; does not write
 * when the bit is already set, so hot items cost no cache-line traffic. */
void slab_ref(struct slab *s, uint64_t off);

/* Start loading the chunk's DRAM word (bits and access time), so that
 * slab_touch() after reading the item does not wait for another cache
 * miss. */
void slab_prefetch(const struct slab *s, uint64_t off);

/* Whether the chunk was passed to slab_ref() since it was last taken (for
 * memcached's evicted_unfetched / expired_unfetched). Lock-free hint. */
bool slab_fetched(const struct slab *s, uint64_t off);

/* Clear the chunk's reference, fetched and win bits: a chunk reused from a
 * thread's stash (which slab_give never saw) starts fresh. */
void slab_reset_bits(struct slab *s, uint64_t off);

/* Claim the chunk's recache win (meta W): true for the first caller since
 * the chunk was taken, false after. DRAM only, lock-free. */
bool slab_claim(struct slab *s, uint64_t off);
bool slab_claimed(const struct slab *s, uint64_t off);

/*
 * Last access time per chunk (meta l, me la=): 13 bits of the chunk's
 * 16-bit DRAM word (the other 3 are its reference, fetched and win bits, so
 * a read hit touches one DRAM line for all of them), the unix second of the
 * chunk's last store or read hit modulo 2^13 (SLAB_ATIME_WRAP, 8192 s). An
 * age is exact to the second below SLAB_ATIME_CAP (2 h); an older access
 * reads as SLAB_ATIME_CAP ("at least 2 h ago"), provided slab_atime_tick()
 * is called at least every minute or so (the maintenance thread calls it
 * every second): it rebases the times every SLAB_ATIME_PERIOD seconds,
 * clamping those older than the cap before they could wrap (a margin of
 * two periods: 7200 + 2 * 300 < 8192). DRAM only, lock-free; `now` is unix
 * seconds (clock_now()).
 */
#define SLAB_ATIME_BITS 13
#define SLAB_ATIME_WRAP (1u << SLAB_ATIME_BITS)
#define SLAB_ATIME_CAP 7200u   /* 2 h */
#define SLAB_ATIME_PERIOD 300u /* 5 min */
_Static_assert(SLAB_ATIME_CAP + 2 * SLAB_ATIME_PERIOD < SLAB_ATIME_WRAP,
               "a time missed by one rebase is clamped by the next");
/* The chunk was stored or read at now. Writes only when the second
 * changed. */
void slab_atime_set(struct slab *s, uint64_t off, uint32_t now);
/* Seconds since the chunk's last slab_atime_set, at most SLAB_ATIME_CAP. */
uint32_t slab_atime_age(const struct slab *s, uint64_t off, uint32_t now);
/* Give dst the access time of src (an item moved to another chunk). */
void slab_atime_copy(struct slab *s, uint64_t dst, uint64_t src);
/* Clamp every time older than the cap: returns how many were. Locks: each
 * class in turn, one page per hold. */
unsigned long slab_atime_rebase(struct slab *s, uint32_t now);
/* Run slab_atime_rebase when one is due (every SLAB_ATIME_PERIOD seconds,
 * first on the first call); true if it ran. Any thread; one runs at a
 * time. */
bool slab_atime_tick(struct slab *s, uint32_t now);

/* What a chunk's DRAM word said before slab_touch() changed it. */
struct slab_seen {
    uint32_t age; /* as slab_atime_age() */
    uint8_t cls;  /* as slab_class_of() */
    bool fetched; /* as slab_fetched() */
    bool claimed; /* as slab_claimed() */
};

/* A read hit in one call and one DRAM line (the engine's get path): fills
 * *out with what slab_atime_age, slab_class_of, slab_fetched and
 * slab_claimed would return, then, if bump, does what slab_ref and
 * slab_atime_set do, in one atomic update (none when nothing changes). */
void slab_touch(struct slab *s, uint64_t off, uint32_t now, bool bump,
                struct slab_seen *out);
/* slab_touch with bump and nothing seen but the class (a get whose caller
 * wants the value only): the class, or SLAB_NO_CLASS for a free page. */
unsigned slab_touch_cls(struct slab *s, uint64_t off, uint32_t now);
/* The same in two steps, so that a get finds the chunk's word once:
 * slab_prefetch_word is slab_prefetch returning the word (opaque; NULL for
 * a free page) and the class; slab_touch_word is slab_touch_cls's bump
 * through that word. Context: the chunk stays allocated between the two
 * (the caller's RCU read section holds the item), so the page keeps its
 * class and the word its table. */
void *slab_prefetch_word(const struct slab *s, uint64_t off, unsigned *cls);
void slab_touch_word(struct slab *s, uint64_t off, void *word, uint32_t now);
/* slab_prefetch_word of n chunks in one call (a batched get's bucket
 * pass): the i-th at (char *)r + i * stride (the caller's per-key records
 * hold one each), its word and class for its off; an off of SLAB_NO_OFF
 * (not a slab chunk) gets NULL and SLAB_NO_CLASS. Context: as
 * slab_prefetch_word for each. */
#define SLAB_NO_OFF UINT64_MAX
struct slab_word_ref {
    uint64_t off; /* in */
    void *word;
    unsigned cls;
};
void slab_prefetch_words(const struct slab *s, struct slab_word_ref *r,
                         unsigned n, size_t stride);
/* A chunk's DRAM word (see the access time above): its reference,
 * fetched and win bits, then the time. Stated here for
 * slab_touch_seen_word, the one reader outside slab.c. */
#define SLAB_WORD_REF 1u
#define SLAB_WORD_FETCHED 2u
#define SLAB_WORD_WIN 4u
#define SLAB_WORD_TIME_SHIFT 3
/* Ablation only (slab_pmeta_on): a touch set the chunk's reference or
 * fetched bit; the page's PMEM header follows. */
void slab_pmeta_touched(struct slab *s, uint64_t off);

/* The bump of a read hit's touch of word v (as slab_touch_word). */
static inline uint16_t
slab_word_bumped(uint16_t v, uint32_t now)
{
    return (
        uint16_t)((v & (SLAB_WORD_REF | SLAB_WORD_FETCHED | SLAB_WORD_WIN)) |
                  SLAB_WORD_REF | SLAB_WORD_FETCHED |
                  (now & (SLAB_ATIME_WRAP - 1)) << SLAB_WORD_TIME_SHIFT);
}

/* slab_touch through a word slab_prefetch_word(s) returned (not NULL),
 * inline, but for out->cls (the caller has it from the prefetch): a
 * batched get's touch, which found the word in its bucket pass, and for
 * which a call a key cost some 30 instructions. pmeta: slab_pmeta_on(s)
 * (asked once for many). Context: as slab_touch_word. */
static inline __attribute__((always_inline)) void
slab_touch_seen_word(struct slab *s, uint64_t off, void *word, uint32_t now,
                     bool bump, bool pmeta, struct slab_seen *out)
{
    _Atomic uint16_t *w = word;
    uint16_t v = atomic_load_explicit(w, memory_order_relaxed);
    uint32_t age =
        (now - (uint32_t)(v >> SLAB_WORD_TIME_SHIFT)) & (SLAB_ATIME_WRAP - 1);
    out->age = age > SLAB_ATIME_CAP ? SLAB_ATIME_CAP : age;
    out->fetched = (v & SLAB_WORD_FETCHED) != 0;
    out->claimed = (v & SLAB_WORD_WIN) != 0;
    if (!bump)
        return;
    /* as slab_touch: no write when nothing changes, else one
     * compare-exchange that keeps bits set meanwhile */
    uint16_t want = slab_word_bumped(v, now);
    if (want == v)
        return;
    while (!atomic_compare_exchange_weak_explicit(
        w, &v, want, memory_order_relaxed, memory_order_relaxed))
        want = slab_word_bumped(v, now);
    if (__builtin_expect(pmeta, 0) &&
        (v & (SLAB_WORD_REF | SLAB_WORD_FETCHED)) !=
            (SLAB_WORD_REF | SLAB_WORD_FETCHED))
        slab_pmeta_touched(s, off);
}

/* A store's fresh chunk (the engine's set path): what slab_reset_bits,
 * slab_atime_set and, with SLAB_FRESH_WIN, slab_claim do, in one store;
 * SLAB_FRESH_FETCHED starts it fetched (a rewrite memcached does in
 * place). Only for a chunk no reader can see yet. */
#define SLAB_FRESH_WIN 1u
#define SLAB_FRESH_FETCHED 2u
void slab_fresh(struct slab *s, uint64_t off, uint32_t now, unsigned bits);

/* A position in a class's chunks, owned by the caller (one per purpose). */
struct slab_cursor {
    uint32_t page_idx; /* index into the class's page list */
    uint32_t chunk;
};

enum slab_scan_mode {
    SLAB_SCAN_ALL = 0,   /* every allocated chunk (expiry sweep) */
    SLAB_SCAN_CLOCK = 1, /* allocated chunks whose ref bit is clear; set bits
                            are cleared as the hand passes (eviction) */
};

/* Look at up to budget chunks of class cls from the cursor on, wrapping
 * around, and copy the offsets of matching allocated chunks into offs[] (at
 * most max). Returns how many were copied. The chunks may be freed by the
 * time the caller looks at them: the caller checks liveness itself (the
 * engine asks its index). Locks: class. */
unsigned slab_scan(struct slab *s, unsigned cls, struct slab_cursor *cur,
                   enum slab_scan_mode mode, unsigned budget, uint64_t *offs,
                   unsigned max);

/* Page draining, for page reassignment and pool shrink. The engine drives:
 *   slab_drain_begin -> loop { slab_drain_live_from; move or drop each item;
 *   wait for deferred frees } -> slab_drain_finish (or _abort). */

/* Pick a page of class cls to drain: the one with the most free chunks.
 * `above`: only pages numbered >= above (pool shrink), else 0. Returns 0 and
 * sets *page, or -ENOENT. Locks: class. */
int slab_drain_pick(struct slab *s, unsigned cls, uint32_t above,
                    uint32_t *page);
/* Stop handing out chunks of the page. 0, or -EINVAL if it is not in use or
 * already draining. Locks: class. */
int slab_drain_begin(struct slab *s, uint32_t page);
/* Offsets of the page's allocated chunks from chunk index `from` on (at
 * most max), so a caller can walk a page whose chunks stay allocated until
 * a grace period has passed. Locks: class. */
unsigned slab_drain_live_from(struct slab *s, uint32_t page, uint32_t from,
                              uint64_t *offs, unsigned max);
/* Whether the page is owned by a class and draining. Lock-free hint. */
bool slab_page_draining(const struct slab *s, uint32_t page);
/* If every chunk of the page is free, take it from its class and give it to
 * the pool: 0. Otherwise -EBUSY and the page stays draining. Locks: class,
 * pool. */
int slab_drain_finish(struct slab *s, uint32_t page);
/* Put a draining page back in service. Locks: class. */
void slab_drain_abort(struct slab *s, uint32_t page);

void slab_class_stats(const struct slab *s, unsigned cls,
                      struct slab_class_stats *out);

/* Ablation only: whether meta_write is set. */
bool slab_pmeta_on(const struct slab *s);
/* Ablation only (meta_write set): the chunk at off starts (used) or stops
 * holding an item, as the thread-local quota hands it out or takes it back:
 * its in-use bit, the page's item count and its allocation cursor are
 * stored in the page's PMEM header. Lock-free. */
void slab_pmeta_use(struct slab *s, uint64_t off, bool used);

/* Ablation only: chunks at the start of each page of class cls kept for
 * the PMEM header (0 unless meta_write is set). */
uint32_t slab_reserved(const struct slab *s, unsigned cls);

/* Ablation only (ablate_init_in_lock): take and drop the class lock around
 * an item write, as Tair MDB initialised items inside its slab lock. */
void slab_ablate_lock(struct slab *s, unsigned cls);
void slab_ablate_unlock(struct slab *s, unsigned cls);

/* Tables a page outgrew: when a page from the pool joins a class of smaller
 * chunks than its tables were made for, it gets larger ones, and the old
 * ones wait here, since a lock-free reader following a stale location hint
 * may still prefetch through them. The caller takes the list before it
 * waits for an RCU grace period and frees it after that (the engine does
 * so with its deferred frees): the tables go back to the slab's arena for
 * pages that need their size; slab_destroy frees what is left.
 * Context: any thread, no lock needed. */
struct slab_retired;
struct slab_retired *slab_retired_take(struct slab *s);
void slab_retired_free(struct slab *s, struct slab_retired *list);

/* DRAM bytes of the slab's own tables (page info, bitmaps, page lists). */
uint64_t slab_dram_bytes(const struct slab *s);

/* Debug walker: checks every invariant (bitmap counts match nfree, partial
 * list holds exactly the pages with free chunks, page/class ownership agrees
 * with the pool). 0 or -EFAULT with a description in err_msg(). Locks: each
 * class in turn. */
int slab_check(struct slab *s);

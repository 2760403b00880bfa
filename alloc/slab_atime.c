/*
 * Last access time per chunk (meta l, me la=): 13 bits of each chunk's
 * 16-bit DRAM word, beside its reference, fetched and win bits (see
 * slab.h for the encoding, the cap and the rebase period).
 *
 * Concurrency:
 *   page->chunk_word[]: relaxed 16-bit atomics. The time is set by readers
 *     and writers without a lock with a compare-exchange that keeps the
 *     bits (a bit set or cleared meanwhile makes it retry, never lost);
 *     slab_atime_rebase clamps old times with a compare-exchange (a fresh
 *     time set meanwhile wins), one page at a time under its class lock.
 *     A lost time update only skews one item's meta l / me la= by the time
 *     between two accesses.
 *   class->pages[], npages: read under the class lock (slab_atime_rebase).
 *   s->atime_next: relaxed atomic; whoever swaps it runs the rebase.
 *   No PMEM is written here.
 */
#include "alloc/slab_int.h"

void
slab_atime_set(struct slab *s, uint64_t off, uint32_t now)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (!w)
        return;
    /* Read first, as slab_ref: an item read many times a second is
     * written once a second. */
    uint16_t v = atomic_load_explicit(w, memory_order_relaxed);
    if (word_time(v) != (now & TIME_MASK))
        word_set_time(w, v, now);
}

uint32_t
slab_atime_age(const struct slab *s, uint64_t off, uint32_t now)
{
    unsigned cls;
    _Atomic uint16_t *w = chunk_word(s, off, &cls);
    if (!w)
        return SLAB_ATIME_CAP;
    return atime_age(word_time(atomic_load_explicit(w, memory_order_relaxed)),
                     now);
}

void
slab_atime_copy(struct slab *s, uint64_t dst, uint64_t src)
{
    unsigned cls;
    _Atomic uint16_t *from = chunk_word(s, src, &cls);
    _Atomic uint16_t *to = chunk_word(s, dst, &cls);
    if (from && to)
        word_set_time(
            to, atomic_load_explicit(to, memory_order_relaxed),
            word_time(atomic_load_explicit(from, memory_order_relaxed)));
}

/* Clamp the times of one page's chunks older than the cap to exactly the
 * cap. Locks: class. */
static unsigned long
rebase_page_locked(const struct slab_class *c, struct slab_page *p,
                   uint32_t now)
{
    uint32_t capped = now - SLAB_ATIME_CAP;
    unsigned long n = 0;
    _Atomic uint16_t *words = page_words(p);
    for (uint32_t i = 0; i < c->perpage; i++) {
        _Atomic uint16_t *w = &words[i];
        uint16_t v = atomic_load_explicit(w, memory_order_relaxed);
        /* relaxed: only this word is published; a reader that set a fresh
         * time since the load makes the exchange fail, and its time stays;
         * one that only changed a bit makes it retry */
        while (((now - word_time(v)) & TIME_MASK) >= SLAB_ATIME_CAP) {
            if (atomic_compare_exchange_weak_explicit(
                    w, &v, word_with_time(v, capped), memory_order_relaxed,
                    memory_order_relaxed)) {
                n++;
                break;
            }
        }
    }
    return n;
}

unsigned long
slab_atime_rebase(struct slab *s, uint32_t now)
{
    unsigned long n = 0;
    for (unsigned cls = 0; cls < s->nclasses; cls++) {
        struct slab_class *c = &s->cls[cls];
        /* one page per lock hold; a page that moves meanwhile may be
         * missed and is done by the next rebase (the margin between the
         * cap and 2^16 seconds covers two periods) */
        for (uint32_t i = 0;; i++) {
            lock_acquire(&c->lock);
            if (i >= c->npages) {
                lock_release(&c->lock);
                break;
            }
            n += rebase_page_locked(c, &s->page[c->pages[i]], now);
            lock_release(&c->lock);
        }
    }
    return n;
}

bool
slab_atime_tick(struct slab *s, uint32_t now)
{
    uint32_t next = atomic_load_explicit(&s->atime_next, memory_order_relaxed);
    /* due, or the clock went back by more than a period */
    if ((int32_t)(now - next) < 0 &&
        (int32_t)(next - now) <= (int32_t)SLAB_ATIME_PERIOD)
        return false;
    if (!atomic_compare_exchange_strong_explicit(
            &s->atime_next, &next, now + SLAB_ATIME_PERIOD,
            memory_order_relaxed, memory_order_relaxed))
        return false; /* another thread runs this one */
    slab_atime_rebase(s, now);
    return true;
}

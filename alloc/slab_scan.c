/*
 * The slab's scans and drains, apart from its classes, pages and chunk
 * bits (alloc/slab.c): the CLOCK hand and the expiry sweep walk a class's
 * chunks, and a page leaves its class (reassignment, pool shrink) by
 * draining. The concurrency rules are at the top of alloc/slab.c; here,
 * every function takes the class lock of the class it walks or of the
 * page's owner (rechecked under the lock), and slab_drain_finish gives the
 * page back to the pool after dropping it (class -> pool, never nested).
 */
#include "alloc/slab.h"

#include "alloc/slab_int.h"
#include "alloc/slab_layout.h"
#include "src/base/compiler.h"
#include "src/base/lock.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* --- scanning (eviction CLOCK, expiry sweep) --- */

/* Chunk at the cursor in the class's page list, or false if the class has
 * no page. Locks: class. */
static bool
cursor_normalise_locked(const struct slab_class *c, struct slab_cursor *cur)
{
    if (c->npages == 0)
        return false;
    if (cur->page_idx >= c->npages) {
        cur->page_idx = 0;
        cur->chunk = 0;
    }
    if (cur->chunk >= c->perpage) {
        cur->chunk = 0;
        cur->page_idx = (cur->page_idx + 1) % c->npages;
    }
    if (unlikely(cur->chunk < c->reserved)) /* ablation: the header */
        cur->chunk = c->reserved;
    return true;
}

unsigned
slab_scan(struct slab *s, unsigned cls, struct slab_cursor *cur,
          enum slab_scan_mode mode, unsigned budget, uint64_t *offs,
          unsigned max)
{
    struct slab_class *c = &s->cls[cls];
    unsigned n = 0;

    lock_acquire(&c->lock);
    while (budget-- > 0 && n < max && cursor_normalise_locked(c, cur)) {
        uint32_t pg = c->pages[cur->page_idx];
        struct slab_page *p = &s->page[pg];
        uint32_t idx = cur->chunk++;
        uint64_t bit = 1ull << (idx % 64);

        if (p->free_bits[idx / 64] & bit)
            continue;
        if (mode == SLAB_SCAN_CLOCK) {
            _Atomic uint16_t *w = &page_words(p)[idx];
            if (atomic_load_explicit(w, memory_order_relaxed) & BIT_REF) {
                atomic_fetch_and_explicit(w, (uint16_t)~BIT_REF,
                                          memory_order_relaxed);
                if (PMETA_ON(s))
                    pmeta_ref(s, c, pg, idx, false);
                continue;
            }
        }
        offs[n++] = chunk_offset(c, pg, idx);
    }
    lock_release(&c->lock);
    return n;
}

/* --- draining (page reassignment, pool shrink) --- */

int
slab_drain_pick(struct slab *s, unsigned cls, uint32_t above, uint32_t *page)
{
    struct slab_class *c = &s->cls[cls];
    uint32_t best = NO_PAGE, best_free = 0;

    lock_acquire(&c->lock);
    for (uint32_t i = 0; i < c->npages; i++) {
        uint32_t pg = c->pages[i];
        const struct slab_page *p = &s->page[pg];
        if (pg < above || page_state(p) != PAGE_ACTIVE)
            continue;
        if (best == NO_PAGE || p->nfree > best_free) {
            best = pg;
            best_free = p->nfree;
        }
    }
    lock_release(&c->lock);
    if (best == NO_PAGE)
        return -ENOENT;
    *page = best;
    return 0;
}

/* Lock the class owning page pg; returns it, or NULL if no class owns it.
 * The owner is rechecked under the lock since a page can change hands. */
static struct slab_class *
lock_page_class(struct slab *s, uint32_t pg)
{
    for (;;) {
        unsigned cls = slab_class_of(s, (uint64_t)pg << POOL_PAGE_SHIFT);
        if (cls == SLAB_NO_CLASS)
            return NULL;
        struct slab_class *c = &s->cls[cls];
        lock_acquire(&c->lock);
        if (page_cls(&s->page[pg]) == cls)
            return c;
        lock_release(&c->lock);
    }
}

int
slab_drain_begin(struct slab *s, uint32_t page)
{
    if (page >= s->npages)
        return -EINVAL;
    struct slab_class *c = lock_page_class(s, page);
    if (!c)
        return -EINVAL;
    struct slab_page *p = &s->page[page];
    int rc = -EINVAL;
    if (page_state(p) == PAGE_ACTIVE) {
        atomic_store_explicit(&p->state, PAGE_DRAINING, memory_order_relaxed);
        if (page_on_partial(c, p, page))
            partial_remove_locked(s, c, page);
        if (PMETA_ON(s))
            pmeta_id(s, page);
        rc = 0;
    }
    lock_release(&c->lock);
    return rc;
}

unsigned
slab_drain_live_from(struct slab *s, uint32_t page, uint32_t from,
                     uint64_t *offs, unsigned max)
{
    if (page >= s->npages)
        return 0;
    struct slab_class *c = lock_page_class(s, page);
    if (!c)
        return 0;
    const struct slab_page *p = &s->page[page];
    unsigned n = 0;
    if (from < c->reserved) /* ablation: the header is no item */
        from = c->reserved;
    for (uint32_t idx = from; idx < c->perpage && n < max; idx++)
        if (!(p->free_bits[idx / 64] & (1ull << (idx % 64))))
            offs[n++] = chunk_offset(c, page, idx);
    lock_release(&c->lock);
    return n;
}

int
slab_drain_finish(struct slab *s, uint32_t page)
{
    if (page >= s->npages)
        return -EINVAL;
    struct slab_class *c = lock_page_class(s, page);
    if (!c)
        return -EINVAL;
    struct slab_page *p = &s->page[page];
    if (page_state(p) != PAGE_DRAINING ||
        p->nfree != c->perpage - c->reserved) {
        lock_release(&c->lock);
        return -EBUSY;
    }
    uint32_t last = c->pages[--c->npages];
    c->pages[p->class_idx] = last;
    s->page[last].class_idx = p->class_idx;
    c->nfree -= c->perpage - c->reserved;
    c->pages_removed++;
    atomic_store_explicit(&p->state, PAGE_FREE, memory_order_relaxed);
    atomic_store_explicit(&p->cls, SLAB_NO_CLASS, memory_order_relaxed);
    p->nfree = 0;
    if (PMETA_ON(s)) {
        pmeta_put(s, last, SLAB_PMETA_CLASS_IDX, s->page[last].class_idx);
        pmeta_id(s, page);
        pmeta_count(s, page);
    }
    lock_release(&c->lock);
    pool_page_put(s->pool, page);
    return 0;
}

void
slab_drain_abort(struct slab *s, uint32_t page)
{
    if (page >= s->npages)
        return;
    struct slab_class *c = lock_page_class(s, page);
    if (!c)
        return;
    struct slab_page *p = &s->page[page];
    if (page_state(p) == PAGE_DRAINING) {
        atomic_store_explicit(&p->state, PAGE_ACTIVE, memory_order_relaxed);
        if (p->nfree > 0)
            partial_push_locked(s, c, page);
        if (PMETA_ON(s))
            pmeta_id(s, page);
    }
    lock_release(&c->lock);
}

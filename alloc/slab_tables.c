/*
 * The slab's DRAM tables on huge pages: the page records (struct
 * slab_page, one per pool page) and each page's free bits and chunk words,
 * carved from 2 MiB-aligned mappings advised MADV_HUGEPAGE
 * (src/base/hugemap.h). A get reads its page's record and its chunk's word
 * besides the bucket and the item; from malloc's 4 KiB pages those two
 * cost a TLB miss and a page walk of their own at a million items (about
 * 2 MiB of tables); here a few 2 MiB TLB entries cover them.
 *
 * Layout: the first region holds the page records, then tables; later
 * regions (HUGEMAP_BYTES each, more than the largest table) tables only.
 * A table is nwords * TABLE_WORDS words, cache-line aligned; a freed one
 * (outgrown, after its grace period) waits on the free list of its size and
 * is handed out again before the arena grows. The sizes are those of the
 * classes' nwords, a few dozen, so exact sizes are enough; a region's tail
 * too short for the next table is left unused (less than one table). The
 * regions stay mapped until slab_tables_fini.
 *
 * Concurrency: s->tables.lock (a leaf mutex, no other lock taken under it)
 * guards the regions, the bump range and the free lists. Tables are asked
 * for with no slab lock held (size_bits) and freed by the engine's
 * reclaimer (slab_retired_free).
 */
#include "alloc/slab_int.h"

#include "src/base/compiler.h"
#include "src/base/hugemap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* At the start of every region: the next one, for slab_tables_fini. */
struct tables_region {
    struct tables_region *next;
    size_t bytes;
};

#define REGION_HEAD ALIGN_UP(sizeof(struct tables_region), (size_t)CACHE_LINE)

static size_t
table_bytes(uint32_t nwords)
{
    return ALIGN_UP((size_t)nwords * TABLE_WORDS * sizeof(uint64_t),
                    (size_t)CACHE_LINE);
}

/* Map a region of at least bytes past its head and make it the bump range.
 * Locks: tables (or none, at create). */
static int
region_add_locked(struct slab_tables *t, size_t bytes)
{
    size_t len = REGION_HEAD + bytes;
    if (len < HUGEMAP_BYTES)
        len = HUGEMAP_BYTES;
    char *base = hugemap_map(&len);
    if (!base)
        return -ENOMEM;
    struct tables_region *r = (struct tables_region *)base;
    r->next = t->regions;
    r->bytes = len;
    t->regions = r;
    t->next = base + REGION_HEAD;
    t->end = base + len;
    atomic_store_explicit(&t->mapped, t->mapped + len, memory_order_relaxed);
    return 0;
}

int
slab_tables_init(struct slab *s)
{
    struct slab_tables *t = &s->tables;
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    t->free_lists = calloc(PAGE_MAX_WORDS + 1, sizeof(*t->free_lists));
    size_t rec = ALIGN_UP((size_t)s->npages * sizeof(struct slab_page),
                          (size_t)CACHE_LINE);
    /* the records and room for the first tables in one huge page when
     * they fit (a pool of up to ~20 GiB) */
    if (!t->free_lists ||
        region_add_locked(t, rec + table_bytes(PAGE_MAX_WORDS))) {
        slab_tables_fini(s);
        return -ENOMEM;
    }
    s->page = (struct slab_page *)(void *)t->next; /* zero: a fresh map */
    t->next += rec;
    return 0;
}

void
slab_tables_fini(struct slab *s)
{
    struct slab_tables *t = &s->tables;
    struct tables_region *r = t->regions;
    while (r) {
        struct tables_region *next = r->next;
        hugemap_unmap(r, r->bytes);
        r = next;
    }
    free(t->free_lists);
    pthread_mutex_destroy(&t->lock);
    memset(t, 0, sizeof(*t));
    s->page = NULL;
}

uint64_t *
slab_tables_alloc(struct slab *s, uint32_t nwords)
{
    struct slab_tables *t = &s->tables;
    size_t bytes = table_bytes(nwords);
    uint64_t *out = NULL;

    pthread_mutex_lock(&t->lock);
    if (t->free_lists[nwords]) {
        out = t->free_lists[nwords];
        t->free_lists[nwords] = (uint64_t *)(uintptr_t)out[0];
        out[0] = 0; /* as fresh (the rest is set up before it is read) */
    } else if ((size_t)(t->end - t->next) >= bytes ||
               region_add_locked(t, bytes) == 0) {
        out = (uint64_t *)(void *)t->next;
        t->next += bytes;
    }
    pthread_mutex_unlock(&t->lock);
    return out;
}

void
slab_tables_free(struct slab *s, uint64_t *table, uint32_t nwords)
{
    struct slab_tables *t = &s->tables;
    pthread_mutex_lock(&t->lock);
    table[0] = (uint64_t)(uintptr_t)t->free_lists[nwords];
    t->free_lists[nwords] = table;
    pthread_mutex_unlock(&t->lock);
}

uint64_t
slab_tables_mapped(const struct slab *s)
{
    return atomic_load_explicit(&s->tables.mapped, memory_order_relaxed);
}

/*
 * The hash index's walks (every entry, one home bucket's chain) and its
 * sizes (buckets, overflow buckets, DRAM bytes): readers of the tables
 * src/engine/htab.c writes, under the rules at its top (acquire loads of
 * slots and links inside the caller's RCU section; h->grow_lock for the
 * list of tables). No shared state of its own.
 */
#include "src/engine/htab.h"
#include "src/engine/htab_int.h"

#include "src/base/compiler.h"

#include <pthread.h>

/* Visit home bucket i of t and its chain, or, once it moved, the two
 * buckets of the doubled table it moved to. */
static int
htab_visit_home_rcu(struct htab_table *t, uint64_t i, htab_visit_fn *fn,
                    void *arg)
{
    struct htab_bucket *b = &t->buckets[i];
    int rc;

    /* Acquire: as in htab_home_rcu. */
    if (atomic_load_explicit(&b->moved, memory_order_acquire)) {
        struct htab_table *nt =
            atomic_load_explicit(&t->next, memory_order_acquire);

        rc = htab_visit_home_rcu(nt, i, fn, arg);
        return rc != 0 ? rc : htab_visit_home_rcu(nt, i + t->nbuckets, fn, arg);
    }
    do {
        for (int j = 0; j < HTAB_SLOTS; j++) {
            /* Acquire: as in htab_lookup_rcu. */
            uint64_t w =
                atomic_load_explicit(&b->slot[j], memory_order_acquire);

            if (w == 0)
                continue;
            rc = fn(arg, w & HTAB_LOC_MASK);
            if (rc != 0)
                return rc;
        }
        /* Acquire: as in htab_lookup_rcu. */
        b = atomic_load_explicit(&b->next, memory_order_acquire);
    } while (b != NULL);
    return 0;
}

/* Numbers i are of the current table; should a doubling end between two
 * calls, bucket i of the doubled table holds only half of what old bucket
 * i held (a walk over a table that grows may miss entries, as it may miss
 * entries written while it runs). */
int
htab_bucket_visit_rcu(struct htab *h, uint64_t i, htab_visit_fn *fn, void *arg)
{
    struct htab_table *t = htab_cur(h);

    if (i >= t->nbuckets)
        return 0;
    return htab_visit_home_rcu(t, i, fn, arg);
}

int
htab_foreach(struct htab *h, htab_visit_fn *fn, void *arg)
{
    struct htab_table *t = htab_cur(h);

    for (uint64_t i = 0; i < t->nbuckets; i++) {
        int rc = htab_visit_home_rcu(t, i, fn, arg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

uint64_t
htab_nbuckets(const struct htab *h)
{
    return htab_cur(h)->nbuckets;
}

/* The current table and the doubled one, if any. */
uint64_t
htab_noverflow(const struct htab *h)
{
    uint64_t n = 0;

    for (const struct htab_table *t = htab_cur(h); t != NULL;
         t = atomic_load_explicit(&((struct htab_table *)t)->next,
                                  memory_order_acquire))
        n += atomic_load_explicit(&t->noverflow, memory_order_relaxed);
    return n;
}

/* Home buckets, the reserve as far as it is backed (the used part: it is
 * mmap'd, backed as it is handed out, linked or not), and linked overflow
 * buckets past it (not counting malloc's own overhead for those). */
static uint64_t
htab_table_bytes(const struct htab_table *t)
{
    uint64_t n = t->nbuckets + htab_reserve_used(t) +
                 atomic_load_explicit(&t->nheap, memory_order_relaxed);

    return n * sizeof(struct htab_bucket);
}

/* The current table, the doubled one while a doubling runs, old tables
 * waiting for their grace period, and unlinked heap buckets waiting for
 * theirs. */
uint64_t
htab_dram_bytes(const struct htab *h)
{
    struct htab *m = (struct htab *)h;
    uint64_t n =
        sizeof(*h) + atomic_load_explicit(&m->pend_heap, memory_order_relaxed) *
                         sizeof(struct htab_bucket);

    pthread_mutex_lock(&m->grow_lock);
    for (const struct htab_table *t = m->tables; t != NULL; t = t->all_next)
        n += sizeof(*t) + (t->freed ? 0 : htab_table_bytes(t));
    pthread_mutex_unlock(&m->grow_lock);
    return n;
}

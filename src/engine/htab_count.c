/*
 * The hash index's entry count, which decides when a table doubles (past
 * t->grow_items: 80% of its slots; htab.c). Exact, and no counter shared
 * by all writers: each thread counts its inserts and removes in a stripe
 * of its own, and a stripe that passes its share of the room left asks
 * for a look (WANT), which sums the stripes.
 *
 * Concurrency:
 *   h->stripe[i].n   entries inserted minus removed by the threads of
 *                    stripe i (a thread takes one stripe for good, 64 of
 *                    them round robin): atomic adds by those threads only,
 *                    under whatever bucket lock they hold, so the line
 *                    stays in their core's cache; the sum is the exact
 *                    count (htab_count)
 *   h->stripe[i].limit  written under h->grow_lock (htab_limits_set),
 *                    read by stripe i's inserts: n past limit asks for a
 *                    look. The limits add up to the current table's
 *                    grow_items (or to the count, if that is more), so the
 *                    count cannot pass grow_items without some stripe
 *                    passing its limit
 *   protocol         the insert's fetch_add, its load of limit, its load
 *                    of h->tab and CAS of that table's state; the setter's
 *                    stores of the limits, of state (or of h->tab, at the
 *                    end of a doubling) and its loads of every n after
 *                    them (htab_count_recheck): all seq_cst. Either the
 *                    insert sees the new limit or table (and asks), or the
 *                    setter's recheck sees the insert's n (and asks)
 *   h->seen[i]       stripe i's n at the last htab_limits_set: h->grow_lock
 *   htab_stripe_next relaxed fetch_add: the next thread's stripe
 */
#include "src/engine/htab_int.h"

/* The calling thread's stripe (htab_int.h): taken round robin at its
 * first insert or remove, kept for good, the same in every index. An
 * offset, not a number: no arithmetic on the insert's path. */
__thread size_t htab_stripe_tls;
static _Atomic unsigned htab_stripe_next;

size_t
htab_stripe_take(void)
{
    unsigned i =
        atomic_fetch_add_explicit(&htab_stripe_next, 1, memory_order_relaxed) %
        HTAB_STRIPES;

    htab_stripe_tls =
        offsetof(struct htab, stripe) + i * sizeof(struct htab_stripe);
    return htab_stripe_tls;
}

/* htab_lock's help or htab_grow_step takes the ask (not here, under a
 * bucket lock). Only the current table is asked; one that is doubling
 * ignores it, and the end of the doubling rechecks. */
__attribute__((noinline)) void
htab_want(struct htab *h)
{
    if (h->rehash == NULL)
        return;
    /* seq_cst: the protocol; pairs with the store of h->tab at the end of
     * a doubling and its recheck after. */
    struct htab_table *t = atomic_load_explicit(&h->tab, memory_order_seq_cst);
    uint32_t idle = HTAB_IDLE;

    if (atomic_load_explicit(&t->state, memory_order_relaxed) != HTAB_IDLE)
        return; /* asked already, or doubling */
    atomic_compare_exchange_strong_explicit(&t->state, &idle, HTAB_WANT,
                                            memory_order_seq_cst,
                                            memory_order_seq_cst);
}

void
htab_count_recheck(struct htab *h, struct htab_table *t)
{
    for (unsigned i = 0; i < HTAB_STRIPES; i++) {
        /* seq_cst: after the caller's stores (the protocol) */
        if (atomic_load_explicit(&h->stripe[i].n, memory_order_seq_cst) >
            atomic_load_explicit(&h->stripe[i].limit, memory_order_relaxed)) {
            uint32_t idle = HTAB_IDLE;

            atomic_compare_exchange_strong_explicit(&t->state, &idle, HTAB_WANT,
                                                    memory_order_seq_cst,
                                                    memory_order_seq_cst);
            return;
        }
    }
}

/* The room goes evenly to the stripes whose count grew since the last
 * hand-out (a writer that only removes, or stays put, gets none: its next
 * insert asks again), to all of them if none grew: one writer filling the
 * table gets all of it, and asks once more only past grow_items. */
void
htab_limits_set(struct htab *h, struct htab_table *t)
{
    int64_t r[HTAB_STRIPES], sum = 0, room, per, extra;
    unsigned grew = 0, j = 0;

    if (h->rehash == NULL)
        return;
    for (unsigned i = 0; i < HTAB_STRIPES; i++) {
        r[i] = atomic_load_explicit(&h->stripe[i].n, memory_order_seq_cst);
        sum += r[i];
        grew += r[i] > h->seen[i];
    }
    room = t->grow_items > sum ? t->grow_items - sum : 0;
    per = room / (grew ? grew : HTAB_STRIPES);
    extra = room % (grew ? grew : HTAB_STRIPES);
    for (unsigned i = 0; i < HTAB_STRIPES; i++) {
        int64_t share = 0;

        if (!grew || r[i] > h->seen[i])
            share = per + (j++ < extra);
        h->seen[i] = r[i];
        /* seq_cst: before the recheck (the protocol) */
        atomic_store_explicit(&h->stripe[i].limit, r[i] + share,
                              memory_order_seq_cst);
    }
    htab_count_recheck(h, t);
}

uint64_t
htab_count(const struct htab *h)
{
    int64_t n = 0;

    for (unsigned i = 0; i < HTAB_STRIPES; i++)
        n += atomic_load_explicit(&h->stripe[i].n, memory_order_relaxed);
    /* a sum read while writers run may be a little off, never below 0 */
    return n > 0 ? (uint64_t)n : 0;
}

/*
 * Streaming top-K by decayed weight (space-saving with exponential decay):
 * see src/engine/topk.h.
 *
 * Concurrency: none; the owner serialises every call (topk.h).
 *
 * K is small (tens to a thousand) and updates arrive in batches merged by
 * one thread, so a linear scan for the key and for the lightest counter is
 * cheaper and simpler than a hash map plus heap at this size.
 */
#include "src/engine/topk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct topk {
    unsigned k;
    unsigned n; /* entries in use, e[0..n) */
    struct topk_entry e[];
};

int
topk_create(unsigned k, struct topk **out)
{
    if (k == 0 || k > TOPK_MAX_K)
        return -EINVAL;
    struct topk *t = calloc(1, sizeof(*t) + k * sizeof(t->e[0]));
    if (!t)
        return -ENOMEM;
    t->k = k;
    *out = t;
    return 0;
}

void
topk_destroy(struct topk *t)
{
    free(t);
}

static int
find(const struct topk *t, uint64_t hash, const void *key, uint32_t klen)
{
    for (unsigned i = 0; i < t->n; i++) {
        const struct topk_entry *e = &t->e[i];
        if (e->hash == hash && e->klen == klen &&
            memcmp(e->key, key, klen) == 0)
            return (int)i;
    }
    return -1;
}

void
topk_add(struct topk *t, uint64_t hash, const void *key, uint32_t klen,
         double w)
{
    if (klen == 0 || klen > TOPK_KEY_MAX || !(w > 0))
        return;
    int i = find(t, hash, key, klen);
    if (i >= 0) {
        t->e[i].count += w;
        return;
    }
    struct topk_entry *e;
    double base = 0;
    if (t->n < t->k) {
        e = &t->e[t->n++];
    } else {
        /* space-saving: the lightest counter changes hands */
        e = &t->e[0];
        for (unsigned j = 1; j < t->n; j++)
            if (t->e[j].count < e->count)
                e = &t->e[j];
        base = e->count;
    }
    e->hash = hash;
    e->count = base + w;
    e->err = base;
    e->klen = (uint8_t)klen;
    memcpy(e->key, key, klen);
}

void
topk_decay(struct topk *t, double factor)
{
    for (unsigned i = 0; i < t->n;) {
        t->e[i].count *= factor;
        t->e[i].err *= factor;
        if (t->e[i].count < 1.0)
            t->e[i] = t->e[--t->n];
        else
            i++;
    }
}

static int
by_count_desc(const void *a, const void *b)
{
    double x = ((const struct topk_entry *)a)->count;
    double y = ((const struct topk_entry *)b)->count;
    return x < y ? 1 : x > y ? -1 : 0;
}

unsigned
topk_list(const struct topk *t, struct topk_entry *out, unsigned max)
{
    unsigned n = t->n < max ? t->n : max;
    if (t->n <= max) {
        memcpy(out, t->e, n * sizeof(out[0]));
        qsort(out, n, sizeof(out[0]), by_count_desc);
        return n;
    }
    /* more entries than room: sort a copy, keep the heaviest */
    struct topk_entry *all = malloc(t->n * sizeof(all[0]));
    if (!all)
        return 0;
    memcpy(all, t->e, t->n * sizeof(all[0]));
    qsort(all, t->n, sizeof(all[0]), by_count_desc);
    memcpy(out, all, n * sizeof(out[0]));
    free(all);
    return n;
}

double
topk_count(const struct topk *t, uint64_t hash, const void *key, uint32_t klen)
{
    int i = find(t, hash, key, klen);
    return i < 0 ? 0 : t->e[i].count;
}

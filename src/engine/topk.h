#pragma once
/*
 * A streaming top-K of keys by weight with exponential decay: the
 * space-saving algorithm (Metwally, Agrawal, El Abbadi 2005) over K
 * counters, where every counter is multiplied by a factor below 1 at each
 * tick so that the window slides. With ticks every dt seconds and factor
 * exp(-dt / W), a key added at a steady r per second settles at a count of
 * about r * W: rate = count / W (topk_rate).
 *
 * Space-saving keeps the K heaviest keys: a key not present takes the
 * lightest counter's place and inherits its count (recorded as the
 * entry's error bound), so a heavy key is never missed and memory stays K
 * entries whatever the stream. Counters that decay below 1 are dropped, so
 * a key that stops leaves after a few windows.
 *
 * Concurrency: none. A struct topk belongs to one thread at a time; the
 * caller serialises (src/engine/hotkey.c: the maintenance thread, under its
 * lock).
 */

#include "src/tiercache.h"

#include <stdint.h>

#define TOPK_KEY_MAX TC_KEY_MAX
#define TOPK_MAX_K 1024

struct topk_entry {
    uint64_t hash;
    double count; /* decayed weight (overestimate by at most err) */
    double err;   /* weight inherited from the evicted entry */
    uint8_t klen;
    char key[TOPK_KEY_MAX];
};

struct topk;

/* k counters, 1..TOPK_MAX_K: 0 or -EINVAL / -ENOMEM. */
int topk_create(unsigned k, struct topk **out);
void topk_destroy(struct topk *t);

/* Add weight w (> 0) for key (hash is the caller's hash of it). */
void topk_add(struct topk *t, uint64_t hash, const void *key, uint32_t klen,
              double w);
/* Multiply every count by factor (0..1) and drop counters below 1. */
void topk_decay(struct topk *t, double factor);

/* The entries, heaviest first: how many were written (<= max). */
unsigned topk_list(const struct topk *t, struct topk_entry *out, unsigned max);
/* Count of the entry for hash/key, or 0 if it holds none. */
double topk_count(const struct topk *t, uint64_t hash, const void *key,
                  uint32_t klen);

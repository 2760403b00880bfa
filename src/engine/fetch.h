#pragma once
/*
 * The read path (see fetch.c): what a reader does to an item in place:
 * get, get-and-touch, touch (an expiry bump in place, no new item).
 * Returns follow src/tiercache.h. Keys are already validated. Deletes are
 * writes: src/engine/store.h.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/tiercache.h"

struct cache_thread;

/* get, gat and meta mg: see struct tc_get_opts. Vivify is done by the
 * caller (tiercache.c) on a TC_NOT_FOUND. */
int fetch_get(struct cache_thread *t, const void *key, uint32_t klen,
              const struct tc_get_opts *o, tc_value_fn *fn, void *arg);
/* fetch_get with the options of tc_get (only no_win set). */
int fetch_get_plain(struct cache_thread *t, const void *key, uint32_t klen,
                    tc_value_fn *fn, void *arg);
/* tc_get_copy: on a hit copies min(vlen, cap) bytes of the value into buf
 * and, when info is not NULL, describes the item there; the plain get's
 * options. fetch_copy_value is its tc_value_fn (arg: the struct fetch_copy)
 * for a value read from flash. */
struct fetch_copy {
    void *buf; /* may be NULL with cap 0 */
    size_t cap;
    struct tc_item_info *info;
};
void fetch_copy_value(void *arg, const struct tc_item_info *info,
                      const struct iovec *iov, int niov);
int fetch_get_copy(struct cache_thread *t, const void *key, uint32_t klen,
                   struct fetch_copy *cp) __attribute__((nonnull(4)));
/* tc_get_many (see src/tiercache.h), opts->vivify excluded (o NULL: a
 * plain get's options): the number of keys done. */
size_t fetch_get_many(struct cache_thread *t, const struct tc_key *keys,
                      size_t n, const struct tc_get_opts *o, tc_many_fn *fn,
                      void *arg, int *rcs);
/* tc_prefetch (see src/tiercache.h). */
void fetch_prefetch(struct cache_thread *t, const struct tc_key *keys,
                    size_t n);
int fetch_touch(struct cache_thread *t, const void *key, uint32_t klen,
                int64_t exptime);
/* tc_walk: the live items of the index buckets from *cursor on. */
int fetch_walk(struct cache_thread *t, uint64_t *cursor, unsigned budget,
               tc_walk_fn *fn, void *arg);

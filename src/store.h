#pragma once
/*
 * The write path (see store.c): every function takes the calling thread's
 * context and returns TC_OK, a positive enum tc_result, or a negative errno
 * as src/tiercache.h describes. Keys are already validated (1..250 bytes).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/tiercache.h"

struct cache_thread;

/* set, add, replace, cas. */
int store_plain(struct cache_thread *t, enum tc_store_mode mode,
                const void *key, uint32_t klen, const void *val, size_t vlen,
                uint32_t flags, int64_t exptime, uint64_t cas_in,
                uint64_t *cas_out);
/* append (or prepend): keeps flags and exptime. cas_in 0 = unconditional. */
int store_concat(struct cache_thread *t, bool append, const void *key,
                 uint32_t klen, const void *val, size_t vlen, uint64_t cas_in,
                 uint64_t *cas_out);
int store_arith(struct cache_thread *t, bool incr, const void *key,
                uint32_t klen, uint64_t delta, uint64_t *value,
                uint64_t *cas_out);

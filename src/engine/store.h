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

struct cache;
struct cache_thread;

/* set, add, replace, cas; o (may be NULL) adds cas_check and cas_new. */
int store_plain(struct cache_thread *t, enum tc_store_mode mode,
                const void *key, uint32_t klen, const void *val, size_t vlen,
                uint32_t flags, int64_t exptime, const struct tc_store_opts *o,
                uint64_t *cas_out);
/* store_plain's set without options or cas_out (tc_set): its own copy,
 * with those constants folded; it finds the calling thread's context
 * itself (-ENOMEM without one), so that tc_set is a jump. The key is
 * valid (1..TC_KEY_MAX bytes). */
int store_set(struct cache *c, const void *key, uint32_t klen, const void *val,
              uint32_t vlen, uint32_t flags, int64_t exptime);
/* append (or prepend): keeps flags and exptime; o may be NULL. flags are
 * used only when o->vivify creates the item. */
int store_concat(struct cache_thread *t, bool append, const void *key,
                 uint32_t klen, const void *val, size_t vlen, uint32_t flags,
                 const struct tc_store_opts *o, uint64_t *cas_out);
/* Any mode with the meta options (tc_store_ex). */
int store_ex(struct cache_thread *t, enum tc_store_mode mode, const void *key,
             uint32_t klen, const void *val, size_t vlen, uint32_t flags,
             int64_t exptime, const struct tc_store_opts *o, uint64_t *cas_out);
/* Mark stale, keeping the value (tc_invalidate). */
int store_invalidate(struct cache_thread *t, const void *key, uint32_t klen,
                     uint64_t cas_in, int64_t exptime, uint64_t cas_new);
/* An empty placeholder holding the recache win: TC_OK if created, its CAS
 * (cas_new if nonzero) in *cas_out (may be NULL). */
int store_vivify(struct cache_thread *t, const void *key, uint32_t klen,
                 int64_t exptime, uint64_t cas_new, uint64_t *cas_out);
/* Copy a flash item's value (read by ext.c) back into the pool in place of
 * its header at index location expect, keeping its CAS, flags and expiry:
 * TC_OK, or -EAGAIN when the item changed meanwhile. The flash tier calls
 * it through the function ext_open was given (ext_recache_fn). */
struct item_desc;
int store_recache(struct cache_thread *t, const void *key, uint32_t klen,
                  const struct item_desc *hdr, uint64_t expect,
                  const void *val);
/* incr/decr; o (may be NULL) adds the meta options. */
int store_arith(struct cache_thread *t, bool incr, const void *key,
                uint32_t klen, uint64_t delta, const struct tc_arith_opts *o,
                uint64_t *value, struct tc_item_info *info);
/* delete; cas_in nonzero: only that version (meta). */
int store_delete(struct cache_thread *t, const void *key, uint32_t klen,
                 uint64_t cas_in);
/* Remove the key without counting a delete (a set that failed). */
int store_drop(struct cache_thread *t, const void *key, uint32_t klen);

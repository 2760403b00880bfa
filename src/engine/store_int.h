#pragma once
/*
 * What the write paths of src/engine/store.c share with src/engine/
 * store_arith.c (incr and decr): the request a store is built from and
 * the read-modify-write steps. Not for use elsewhere: the engine calls
 * src/engine/store.h.
 */

#include "src/engine/cache.h"
#include "src/engine/cache_packed.h"
#include "src/engine/item.h"

#include "src/base/clock.h"
#include "tier/nvs.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define RMW_RETRIES 64

/* STORE_SWAP: publish only if the index still holds `expect`. */
#define STORE_SWAP 100
/* publish(): a packed item's derived CAS is not above the replaced
 * version's; stored again with a CAS of its own (store_cas_above) */
#define STORE_CAS_LOW (-ERANGE)

/* The state and the CAS of the item a store replaces or rewrites (or a
 * delete removes), at engine offset off, of any kind: inline for a slab
 * chunk's (the DRAM test that cache_item_at would make, widened to
 * packed items). */
static inline __attribute__((always_inline)) enum cache_dead
old_dead(const struct cache *c, uint64_t off, uint32_t now)
{
    if (unlikely(off & CACHE_SPECIAL_OFF))
        return cache_off_dead(c, off, now);
    return cache_item_dead(c, item_at(c->base, off), now);
}

static inline __attribute__((always_inline)) uint64_t
old_cas(const struct cache *c, uint64_t off)
{
    if (unlikely(off & CACHE_SPECIAL_OFF))
        return cache_off_cas(c, off);
    return item_cas(item_at(c->base, off));
}

/* Laid out without holes (8-byte fields, then 4-byte, then flags) so
 * that req_init zeroes 144 bytes, not 176 (a set's path). */
struct store_req {
    const void *key;
    uint64_t hash;
    struct item_desc hdr; /* flags, exptime, vlen, klen filled by caller */
    struct item_src val;
    uint64_t cas_in;
    uint64_t cas_new; /* nonzero: the new item's CAS (meta E; a recache:
                         its source's, when not its sequence) */
    uint64_t expect;  /* loc, for STORE_SWAP */
    int mode;         /* enum tc_store_mode or STORE_SWAP */
    uint32_t klen;
    uint32_t expect_exptime;
    unsigned cls;        /* the new item's class once it has a chunk, for
                            the per-class counters; else SLAB_NO_CLASS */
    uint32_t now;        /* the clock when the request began: one read for
                            its expiry, flush check, freshness and the
                            replaced item's books (the clock counts
                            seconds; a store takes microseconds) */
    bool cas_check;      /* compare cas_in whatever the mode (meta C) */
    bool claim_win;      /* the storer holds the recache win (vivify) */
    bool keep_fetched;   /* the new chunk starts fetched (meta h): what
                            memcached rewrites in place stays fetched */
    bool check_exptime;  /* STORE_SWAP also needs the old item's exptime
                            unchanged (a touch meanwhile must not be lost) */
    bool recache;        /* a flash value copied back: not a new item */
    bool in_place;       /* what memcached rewrites in place (an incr that
                            fits): not counted in total_items */
    struct nvs_loc xloc; /* snapshot of a flash item: its locator */
    /* a packed store's peek (store.c, peek_cas) at the packed version it
     * replaces: its location (0: none seen), its derived sequence (which
     * tells a reopened segment on the same page) and CAS; publish takes
     * that CAS again while the same version is there. Set by the peek
     * (store_plain_inline leaves them unset: publish reads them only for
     * a packed item stored with no chosen CAS, which peeked); peek_seq
     * and peek_cas are read only when peek_loc is not 0. */
    uint64_t peek_loc;
    uint64_t peek_seq;
    uint64_t peek_cas;
};
/* store_plain_inline writes each field by hand: one added must be there */
_Static_assert(sizeof(struct store_req) == 168,
               "store_plain_inline writes every field of struct store_req");

/* Inline: the hash and the clock read are then the caller's own code. */
static inline __attribute__((always_inline)) void
req_init(struct store_req *r, struct cache_thread *t, int mode, const void *key,
         uint32_t klen)
{
    memset(r, 0, sizeof(*r));
    r->mode = mode;
    r->key = key;
    r->klen = klen;
    r->hash = cache_hash(t->cache, key, klen);
    r->hdr.klen = (uint8_t)klen;
    r->cls = SLAB_NO_CLASS;
    r->now = clock_now();
}

/* One whole store as r says (prepare, commit, retire): TC_*, a negative
 * errno, or -EAGAIN when a STORE_SWAP finds the index no longer holding
 * r->expect (the caller reads the item again). */
int store_one(struct cache_thread *t, struct store_req *r, uint64_t *cas_out);
/* The item the key maps to now, copied out: header and location. Miss when
 * absent or dead. Context: takes and leaves an RCU read section. */
bool store_snapshot(struct cache *c, struct store_req *r, struct item_desc *hdr,
                    uint64_t *loc);
/* The new item keeps the old one's expiry as it is at publication (the
 * swap checks it did not change). Context: in a read section, on the old
 * item. */
void store_carry_exptime(struct store_req *r, uint32_t exptime);

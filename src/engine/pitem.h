#pragma once
/*
 * Packed items (src/engine/pitem_layout.h): size, write, commit,
 * invalidate, touch in place, parse and walk a segment. A segment is
 * addressed by its base pointer and size (POOL_PAGE_SIZE in the pool, any
 * 4-aligned size in tests); items by their byte offset in it. Not used by
 * the engine yet (doc/design/small-items.md, slice 3).
 *
 * Concurrency: stateless. A segment's appends are its owner thread's; the
 * span a write fills was reserved for it alone. commit, exp16 and exp32
 * are the only fields stored after the write, each by one aligned atomic
 * store or compare-and-swap, and read here with atomic loads; a walk of a
 * segment that is being appended to sees a prefix of its committed items.
 *
 * PMEM: every store through tier/pm.h's helpers, none under a lock (the
 * callers' rule; the helpers check it in debug builds).
 */

#include "src/engine/pitem_layout.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

/* What a write needs. */
struct pitem_desc {
    const void *key;
    uint32_t klen;             /* 1..PITEM_KLEN_MAX */
    const struct iovec *value; /* the value in pieces (nvalue of them) */
    unsigned nvalue;
    uint32_t vlen;  /* their total, 0..PITEM_VLEN_MAX */
    uint32_t flags; /* client flags; above 15 they take flags32 */
    uint16_t exp16; /* when !has_exp32: 0 never, else exp_base + exp16 - 1 */
    bool has_exp32; /* the expiry is exp32 (absolute; 0 never) */
    uint32_t exp32; /* with has_exp32 */
    bool has_cas;   /* a CAS other than the derived one (copies, meta E) */
    uint64_t cas;   /* with has_cas */
    bool stale;     /* PITEM_STALE */
};

/* An item found in a segment. key and value point into the segment. */
struct pitem_view {
    uint32_t off;  /* in the segment */
    uint32_t size; /* pitem_size_of */
    uint16_t commit;
    uint8_t iflags; /* PITEM_HAS_*, PITEM_STALE */
    uint8_t klen;
    uint32_t vlen;
    uint32_t flags; /* client flags (inline or flags32) */
    uint16_t exp16; /* as stored (0 with HAS_EXP) */
    uint32_t exp32; /* with HAS_EXP, else 0 */
    uint64_t cas;   /* cas64 with HAS_CAS, else seq_base + off / 4 */
    const char *key;
    const char *value;
};

/* exp16 (pitem_layout.h): an expiry relative to the segment's exp_base,
 * 1..65535 for exp_base .. exp_base + 65534, 0 for never. */
#define PITEM_EXP16_SPAN 65534u

/* Whether absolute expiry exp (0 never) fits exp16 in a segment whose
 * exp_base is exp_base. */
static inline bool
pitem_exp16_fits(uint32_t exp_base, uint32_t exp)
{
    return exp == 0 || (exp >= exp_base && exp - exp_base <= PITEM_EXP16_SPAN);
}

/* exp16 of an expiry that fits. */
static inline uint16_t
pitem_exp16_of(uint32_t exp_base, uint32_t exp)
{
    return exp == 0 ? 0 : (uint16_t)(exp - exp_base + 1);
}

/* The absolute expiry (0 never) of a parsed item of a segment whose
 * exp_base is exp_base: exp32, or exp16 counted from exp_base. */
static inline uint32_t
pitem_view_exp(const struct pitem_view *v, uint32_t exp_base)
{
    if (v->iflags & PITEM_HAS_EXP)
        return v->exp32;
    return v->exp16 ? exp_base + v->exp16 - 1u : 0;
}

/* iflags a description gives. */
unsigned pitem_iflags(const struct pitem_desc *d);

/* Bytes the item takes (a multiple of 4). */
uint32_t pitem_size(const struct pitem_desc *d);

/* check16 of an item described by d, written at off of a segment whose
 * sequence block starts at seq_base: 3..65535. */
uint16_t pitem_check(const struct pitem_desc *d, uint64_t seq_base,
                     uint32_t off);

/*
 * Writes d at off, a span of pitem_size(d) bytes the caller reserved in the
 * segment seg of seg_size bytes (4-aligned, off >= PITEM_SEG_START, the
 * span inside the segment, and its bytes 4..7 already 0: the previous
 * item's write or the segment's open stored them). In order: header with
 * commit 0, optional fields and key (one copy from a DRAM staging
 * buffer), the value, the next slot's zero word (unless fewer than
 * PITEM_SIZE_MIN bytes follow), a fence, then the 2-byte commit: check16,
 * or PITEM_COMMIT_PENDING when pending (pitem_commit_pending later).
 * Returns check16.
 * Context: the segment's owner thread. PMEM: yes, no lock held.
 */
uint16_t pitem_write(char *seg, uint32_t seg_size, uint32_t off,
                     uint64_t seq_base, const struct pitem_desc *d,
                     bool pending);

/* A plain set's item (no flags32, no cas64, the value in one piece):
 * pitem_write_plain's description. fl: the client flags (0..15). exp32:
 * the expiry when it does not fit exp16 (then exp16 is 0), else 0. */
struct pitem_plain {
    const void *key;
    const void *value;
    uint32_t klen; /* 1..PITEM_KLEN_MAX */
    uint32_t vlen; /* 0..PITEM_VLEN_MAX */
    uint32_t fl;   /* 0..PITEM_CFLAGS_MASK */
    uint32_t exp32;
    uint16_t exp16;
};

/* pitem_write of a plain item, committed (not pending): the same bytes in
 * the same order, without a description to parse (a set's every write:
 * pitem_write's general path cost it some 100 instructions more). Returns
 * check16. Context and PMEM: as pitem_write. */
uint16_t pitem_write_plain(char *seg, uint32_t seg_size, uint32_t off,
                           uint64_t seq_base, const struct pitem_plain *p);

/* Stores 0 in bytes 4..7 of the slot at off (exp16 and commit): what a
 * segment's open does at PITEM_SEG_START before its header commits, so
 * that nothing of its previous life is read. PMEM: yes, no lock held. */
void pitem_zero_slot(char *seg, uint32_t off);

/* A pending item at off becomes committed: a 2-byte compare-and-swap from
 * PITEM_COMMIT_PENDING to check. False when it no longer was pending (a
 * writer invalidated it meanwhile). PMEM: yes, no lock held. */
bool pitem_commit_pending(char *seg, uint32_t off, uint16_t check);

/* The item at off is dead: commit = 1 (its lengths stay). PMEM: yes. */
void pitem_invalidate(char *seg, uint32_t off);

/* Touch in place: exp16 (an item without HAS_EXP) or exp32 (with it), one
 * aligned store each. PMEM: yes, no lock held. */
void pitem_set_exp16(char *seg, uint32_t off, uint16_t exp16);
void pitem_set_exp32(char *seg, uint32_t off, uint32_t exp32);

/*
 * Reads the item at off into *v without trusting it: its commit (any
 * value, 0 included), lengths and bounds. -EBADMSG when klen is 0 or above
 * PITEM_KLEN_MAX or the item does not fit in the segment; 0 otherwise.
 */
int pitem_parse(const char *seg, uint32_t seg_size, uint64_t seq_base,
                uint32_t off, struct pitem_view *v);

/* The size of the item at it (pitem_size_of its header's lengths and
 * flags), read without the checks of pitem_parse: for an item the index
 * holds or its writer just wrote (the engine's accounting). */
static inline uint32_t
pitem_size_at(const char *it)
{
    uint16_t vlen;
    __builtin_memcpy(&vlen, it + 2, 2);
    return pitem_size_of((uint8_t)it[0], vlen,
                         (uint8_t)it[1] & PITEM_IFLAGS_MASK);
}

/* What a get that copies the value out needs of the item at it, room
 * bytes of its segment from it (exp_base: its segment's): the value's
 * offset from it (*vat) and length (*vlen), its absolute expiry (*exp, 0
 * never). False where pitem_parse fails (the lengths do not fit). The
 * header's first word once, exp16 or exp32 with a relaxed atomic load (a
 * touch may store it); nothing else (a tc_get_copy wanting no
 * description: pitem_parse and the view cost it some 60 instructions). */
static inline __attribute__((always_inline)) bool
pitem_peek(const char *it, uint32_t room, uint32_t exp_base, uint32_t *vat,
           uint32_t *vlen, uint32_t *exp)
{
    uint32_t h;
    __builtin_memcpy(&h, it, 4); /* klen, cflags/iflags, vlen */
    uint32_t klen = h & 0xffu, fl = h >> 8, vl = h >> 16;
    uint32_t at = (uint32_t)sizeof(struct pitem_hdr) + klen +
                  (fl & PITEM_HAS_EXP ? 4u : 0u) +
                  (fl & PITEM_HAS_FLAGS ? 4u : 0u) +
                  (fl & PITEM_HAS_CAS ? 8u : 0u);
    if (klen == 0 || klen > PITEM_KLEN_MAX ||
        ((at + vl + PITEM_ALIGN - 1) & ~(PITEM_ALIGN - 1)) > room)
        return false;
    if (fl & PITEM_HAS_EXP) {
        *exp = __atomic_load_n(
            (const uint32_t *)(const void *)(it + sizeof(struct pitem_hdr)),
            __ATOMIC_RELAXED);
    } else {
        uint32_t e = __atomic_load_n(
            (const uint16_t *)(const void *)(it + PITEM_EXP16_OFFSET),
            __ATOMIC_RELAXED);
        *exp = e ? exp_base + e - 1u : 0;
    }
    *vat = at;
    *vlen = vl;
    return true;
}

/* pitem_parse inline, for the engine's get and set (src/engine/
 * cache_packed.h): exp16, exp32 and commit, which a touch or an unlink
 * may store meanwhile, with relaxed atomic loads; the rest is fixed once
 * the item is published. */
static inline __attribute__((always_inline)) int
pitem_parse_inline(const char *seg, uint32_t seg_size, uint64_t seq_base,
                   uint32_t off, struct pitem_view *v)
{
    const char *it = seg + off;
    if (off > seg_size || seg_size - off < PITEM_SIZE_MIN)
        return -EBADMSG;
    uint8_t klen = (uint8_t)it[0], fl = (uint8_t)it[1];
    uint16_t vlen;
    __builtin_memcpy(&vlen, it + 2, 2);
    if (klen == 0 || klen > PITEM_KLEN_MAX)
        return -EBADMSG;
    unsigned iflags = fl & PITEM_IFLAGS_MASK;
    uint32_t size = pitem_size_of(klen, vlen, iflags);
    if (size > seg_size - off)
        return -EBADMSG;

    v->off = off;
    v->size = size;
    v->commit = __atomic_load_n(
        (const uint16_t *)(const void *)(it + PITEM_COMMIT_OFFSET),
        __ATOMIC_RELAXED);
    v->iflags = (uint8_t)iflags;
    v->klen = klen;
    v->vlen = vlen;
    v->exp16 = __atomic_load_n(
        (const uint16_t *)(const void *)(it + PITEM_EXP16_OFFSET),
        __ATOMIC_RELAXED);
    uint32_t at = sizeof(struct pitem_hdr);
    v->exp32 = 0;
    if (iflags & PITEM_HAS_EXP) {
        v->exp32 = __atomic_load_n((const uint32_t *)(const void *)(it + at),
                                   __ATOMIC_RELAXED);
        at += 4;
    }
    v->key = it + at;
    at += klen;
    v->flags = fl & PITEM_CFLAGS_MASK;
    if (iflags & PITEM_HAS_FLAGS) {
        __builtin_memcpy(&v->flags, it + at, 4);
        at += 4;
    }
    v->cas = seq_base + off / 4;
    if (iflags & PITEM_HAS_CAS) {
        __builtin_memcpy(&v->cas, it + at, 8);
        at += 8;
    }
    v->value = it + at;
    return 0;
}

/* Whether a parsed item's commit is its check16. */
bool pitem_verify(const char *seg, uint64_t seq_base,
                  const struct pitem_view *v);

/* A walk over a segment's items, from PITEM_SEG_START. */
struct pitem_walk {
    const char *seg;
    uint32_t seg_size;
    uint64_t seq_base;
    bool verify;  /* check every committed item's check16 */
    uint32_t off; /* the next item; at the end, where the items end */
    int status;   /* 1 walking, 0 ended, -EBADMSG stopped on a bad item */
    uint32_t ndead, npending;
    uint32_t dead_bytes, pending_bytes;
};

void pitem_walk_init(struct pitem_walk *w, const char *seg, uint32_t seg_size,
                     uint64_t seq_base, bool verify);

/*
 * The next committed item, stepping over dead and pending ones (counted in
 * *w): 1 with *v filled; 0 at the end (a zero commit, or fewer than
 * PITEM_SIZE_MIN bytes left); -EBADMSG on an item whose lengths do not fit
 * the segment or, with verify, whose check fails: the walk stops there
 * (w->off is that item's offset), since its lengths are not to be trusted.
 * Once ended or stopped, it returns the same again.
 */
int pitem_walk_next(struct pitem_walk *w, struct pitem_view *v);

#pragma once
/*
 * Items in chunks: sizes, writing (through the PMEM helpers, never under a
 * lock), reading the key and the value pieces. No state of its own.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "src/engine/item_layout.h"

/* Most value pieces a chained item can have (limits item_size_max). */
#define ITEM_MAX_TAILS TC_ITEM_MAX_TAILS

struct item_plan {
    uint32_t head_size; /* bytes needed in the head chunk */
    uint8_t nchain;     /* tail chunks */
    uint32_t tail_room; /* value bytes per full tail chunk */
    uint32_t last_size; /* bytes needed in the last tail chunk */
    uint64_t total;     /* bytes counted in the "bytes" stat */
};

/* Lay out an item of klen/vlen given the largest chunk size. */
void item_plan(uint32_t klen, uint64_t vlen, uint32_t chunk_max,
               struct item_plan *out);

static inline const struct item_hdr *
item_at(const char *base, uint64_t off)
{
    return (const struct item_hdr *)(base + off);
}

/* Copy a published header: exptime may change under a reader (touch, one
 * atomic store), so it is loaded atomically. */
static inline void
item_hdr_load(struct item_hdr *dst, const struct item_hdr *src)
{
    dst->kind = src->kind;
    dst->klen = src->klen;
    dst->nchain = src->nchain;
    dst->iflags = src->iflags;
    dst->vlen = src->vlen;
    dst->flags = src->flags;
    dst->exptime = __atomic_load_n(&src->exptime, __ATOMIC_RELAXED);
    dst->cas = src->cas;
    dst->commit = 0; /* a copy is not committed anywhere */
}

static inline const char *
item_key(const struct item_hdr *it)
{
    return (const char *)(it + 1);
}

/* Offsets of a chained item's tails (8-aligned after the key). */
static inline const uint64_t *
item_tails(const struct item_hdr *it)
{
    uintptr_t p = (uintptr_t)(item_key(it) + it->klen);
    return (const uint64_t *)((p + 7) & ~(uintptr_t)7);
}

/* Whether a chunk's kind byte starts an item (in PMEM or on flash). */
static inline bool
item_kind_is_head(uint8_t kind)
{
    return kind == ITEM_KIND_HEAD || kind == ITEM_KIND_FLASH;
}

/* Bytes of a flash item's header chunk: header, key, pad, locator. */
static inline uint32_t
item_flash_size(uint32_t klen)
{
    return (uint32_t)((sizeof(struct item_hdr) + klen + 7) & ~(size_t)7) +
           (uint32_t)sizeof(struct nvs_loc);
}

/* A flash item's locator (8-aligned after the key). */
static inline const struct nvs_loc *
item_flash_loc(const struct item_hdr *it)
{
    uintptr_t p = (uintptr_t)(item_key(it) + it->klen);
    return (const struct nvs_loc *)((p + 7) & ~(uintptr_t)7);
}

/* Write a flash item's header chunk at off: hdr (kind set here), key and
 * locator, then its commit word (returned; seq as for item_write). PMEM:
 * one pm_copy; no lock may be held. */
uint64_t item_write_flash(char *base, uint64_t off, const struct item_hdr *hdr,
                          const void *key, const struct nvs_loc *loc,
                          uint64_t seq);

/* Write header, key and value into the head chunk at off (and the tails
 * listed in tails[] for a chained item), then, after a fence, the commit
 * word for store sequence seq, which is returned. With ITEM_SEQ_PENDING
 * or'ed into seq (a copy: a demotion, a page move), ITEM_COMMIT_PENDING is
 * stored instead and item_commit_copy() commits the copy once it is
 * published. PMEM: writes through pm_copy; no lock may be held. The value
 * is given as up to three pieces (append and prepend join old and new
 * without a DRAM copy). */
struct item_src {
    const struct iovec *iov;
    int niov;
};
#define ITEM_SEQ_PENDING (1ull << 63)
uint64_t item_write(char *base, uint64_t off, const struct item_plan *plan,
                    const uint64_t *tails, const struct item_hdr *hdr,
                    const void *key, const struct item_src *val, uint64_t seq);

/* Commit a copy written with ITEM_SEQ_PENDING and published since: its
 * commit word goes from ITEM_COMMIT_PENDING to word (what item_write
 * returned) in one 8-byte compare-and-swap, which fails, leaving it 0, when
 * a writer that replaced or removed the copy in the index meanwhile has
 * invalidated it (item_layout.h). Whether it committed. Call inside the
 * RCU read section the publication was done in (the chunk is not reused
 * under it). PMEM: one pm_cas64; no lock may be held. */
bool item_commit_copy(char *base, uint64_t off, uint64_t word);

/* The commit word an item with this header, key and extra bytes (tail list
 * or flash locator, NULL/0 for a plain item) gets for store sequence seq:
 * seq's low 32 bits over the CRC32C (item_layout.h). Never 0. */
uint64_t item_commit_word(const struct item_hdr *hdr, const void *key,
                          const void *extra, size_t extra_len, uint64_t seq);

/* Whether the committed item at it checks: commit word nonzero and its CRC
 * matches header, key and tail list or locator. For a chunk read without the
 * index vouching for it (the recovery scan): bounds are the caller's
 * (chunk_size: bytes the chunk has). */
bool item_check(const struct item_hdr *it, uint32_t chunk_size);

/* Whether sequence a is newer than b (serial-number arithmetic on the low
 * 32 bits kept in commit words). */
static inline bool
item_seq_newer(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) > 0;
}

static inline uint32_t
item_commit_seq(uint64_t commit)
{
    return (uint32_t)(commit >> 32);
}

/* Invalidate the item at off in PMEM: its commit word becomes 0, one 8-byte
 * store on its own line. Call after it left the index (or was never in it)
 * and before the removal is acknowledged or the chunk reused. PMEM: one
 * pm_store64; no lock may be held. */
void item_invalidate(char *base, uint64_t off);

/* Value as iovecs into PMEM: returns the count (<= ITEM_MAX_TAILS + 1). */
int item_value_iov_chained(const char *base, const struct item_hdr *it,
                           uint32_t chunk_max, struct iovec *iov);
static inline __attribute__((always_inline)) int
item_value_iov(const char *base, const struct item_hdr *it, uint32_t chunk_max,
               struct iovec *iov)
{
    if (__builtin_expect(it->nchain != 0, 0))
        return item_value_iov_chained(base, it, chunk_max, iov);
    iov[0].iov_base = (void *)(item_key(it) + it->klen);
    iov[0].iov_len = it->vlen;
    return 1;
}

static inline uint64_t
item_load8(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* n bytes equal: a key of 8 to 32 bytes (most keys) in overlapping 8-byte
 * loads within [0, n), no call; others through memcmp. */
static inline __attribute__((always_inline)) bool
item_key_bytes_equal(const unsigned char *a, const unsigned char *b, uint32_t n)
{
    if (n >= 8 && n <= 16)
        return ((item_load8(a) ^ item_load8(b)) |
                (item_load8(a + n - 8) ^ item_load8(b + n - 8))) == 0;
    if (n > 16 && n <= 32)
        return ((item_load8(a) ^ item_load8(b)) |
                (item_load8(a + 8) ^ item_load8(b + 8)) |
                (item_load8(a + n - 16) ^ item_load8(b + n - 16)) |
                (item_load8(a + n - 8) ^ item_load8(b + n - 8))) == 0;
    return memcmp(a, b, n) == 0;
}

/* Does the chunk hold a head whose key equals key? Bounds-checked against
 * chunk_size so that a stale or half-written chunk is safe to look at.
 * Inline: every lookup's tag match compares a key. */
static inline __attribute__((always_inline)) bool
item_key_equals(const struct item_hdr *it, const void *key, uint32_t klen)
{
    return it->klen == klen && item_kind_is_head(it->kind) &&
           item_key_bytes_equal((const unsigned char *)item_key(it), key, klen);
}

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

#include "tier/pm.h"

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

/*
 * An item's header as DRAM code handles it (a snapshot of a published one,
 * or the one a store is about to write): the PMEM header's fields plus the
 * client flags and the CAS, which the PMEM header keeps in opt only when
 * iflags says so (item_layout.h). A writer stores flags and cas in opt as
 * iflags' ITEM_HAS_FLAGS and ITEM_HAS_CAS say (item_desc_opt() sets them):
 * without ITEM_HAS_CAS, cas must equal seq.
 */
struct item_desc { /* its first 24 bytes as item_hdr's (item.c) */
    uint8_t kind;
    uint8_t klen;
    uint8_t nchain;
    uint8_t iflags;
    uint32_t vlen;
    uint32_t exptime;
    uint32_t flags; /* client flags (where item_hdr has the commit word) */
    uint64_t seq;   /* store sequence */
    uint64_t cas;
};

/* Bytes of opt an item with these iflags has: 4 for the flags, 8 for the
 * CAS, which their bits times two give without a branch. */
_Static_assert(ITEM_HAS_FLAGS * 2 == 4 && ITEM_HAS_CAS * 2 == 8,
               "opt field sizes are their iflags bits times two");
static inline uint32_t
item_opt_len(uint8_t iflags)
{
    return (uint32_t)(iflags & (ITEM_HAS_FLAGS | ITEM_HAS_CAS)) * 2u;
}

/* Set d's ITEM_HAS_FLAGS and ITEM_HAS_CAS from its flags, cas and seq. */
static inline void
item_desc_opt(struct item_desc *d)
{
    d->iflags = (uint8_t)((d->iflags & ~(ITEM_HAS_FLAGS | ITEM_HAS_CAS)) |
                          (d->flags ? ITEM_HAS_FLAGS : 0) |
                          (d->cas != d->seq ? ITEM_HAS_CAS : 0));
}

/* Header, key and opt: the bytes before the value (or the tail list). */
static inline uint32_t
item_hko_size(uint32_t klen, uint8_t iflags)
{
    return (uint32_t)sizeof(struct item_hdr) + klen + item_opt_len(iflags);
}

/* item_plan of an item larger than one chunk (chained). */
void item_plan_chained(uint32_t klen, uint8_t iflags, uint64_t vlen,
                       uint32_t chunk_max, struct item_plan *out);
/* Lay out an item of klen/vlen (and opt as iflags say) given the largest
 * chunk size. Inline for a one-chunk item (most, and every store's path). */
static inline void
item_plan(uint32_t klen, uint8_t iflags, uint64_t vlen, uint32_t chunk_max,
          struct item_plan *out)
{
    uint64_t plain = item_hko_size(klen, iflags) + vlen;
    if (__builtin_expect(plain > chunk_max, 0)) {
        item_plan_chained(klen, iflags, vlen, chunk_max, out);
        return;
    }
    *out = (struct item_plan){.head_size = (uint32_t)plain, .total = plain};
}

static inline const struct item_hdr *
item_at(const char *base, uint64_t off)
{
    return (const struct item_hdr *)(base + off);
}

static inline const char *
item_key(const struct item_hdr *it)
{
    return (const char *)(it + 1);
}

/* The client flags (0 unless opt holds them). */
static inline uint32_t
item_flags(const struct item_hdr *it)
{
    uint32_t v = 0;
    if (it->iflags & ITEM_HAS_FLAGS)
        __builtin_memcpy(&v, item_key(it) + it->klen, sizeof(v));
    return v;
}

/* The store sequence: the low half the commit word holds from the item's
 * write on (also while it is pending, and after an invalidation, which
 * clears only the CRC half: a reader that found the item before it was
 * replaced still reads its CAS) and the high half after it, in one load. */
static inline uint64_t
item_seq(const struct item_hdr *it)
{
    uint64_t v;
    __builtin_memcpy(
        &v, (const char *)it + __builtin_offsetof(struct item_hdr, seq_lo),
        sizeof(v));
    return v;
}

/* The CAS: the store sequence unless opt holds one. */
static inline uint64_t
item_cas(const struct item_hdr *it)
{
    uint64_t v = item_seq(it);
    if (it->iflags & ITEM_HAS_CAS)
        __builtin_memcpy(
            &v, item_key(it) + it->klen + (it->iflags & ITEM_HAS_FLAGS) * 2u,
            sizeof(v));
    return v;
}

/* A plain item's value (after key and opt). */
static inline const char *
item_value(const struct item_hdr *it)
{
    return item_key(it) + it->klen + item_opt_len(it->iflags);
}

/* Copy a published header: exptime may change under a reader (touch, one
 * atomic store), so it is loaded atomically. */
static inline void
item_hdr_load(struct item_desc *dst, const struct item_hdr *src)
{
    dst->kind = src->kind;
    dst->klen = src->klen;
    dst->nchain = src->nchain;
    dst->iflags = src->iflags;
    dst->vlen = src->vlen;
    dst->exptime = __atomic_load_n(&src->exptime, __ATOMIC_RELAXED);
    dst->seq = item_seq(src);
    dst->flags = item_flags(src);
    dst->cas = item_cas(src);
}

/* Offsets of a chained item's tails (8-aligned after key and opt). */
static inline const uint64_t *
item_tails(const struct item_hdr *it)
{
    uintptr_t p = (uintptr_t)item_value(it);
    return (const uint64_t *)((p + 7) & ~(uintptr_t)7);
}

/* Whether a chunk's kind byte starts an item (in PMEM or on flash). */
static inline bool
item_kind_is_head(uint8_t kind)
{
    return kind == ITEM_KIND_HEAD || kind == ITEM_KIND_FLASH;
}

/* Whether a commit word is that of a committed item (not 0, not pending). */
static inline bool
item_committed(uint32_t commit)
{
    return commit != 0 && commit != ITEM_COMMIT_PENDING;
}

/* Bytes of a flash item's header chunk: header, key, opt, pad, locator. */
static inline uint32_t
item_flash_size(uint32_t klen, uint8_t iflags)
{
    return ((item_hko_size(klen, iflags) + 7u) & ~7u) +
           (uint32_t)sizeof(struct nvs_loc);
}

/* A flash item's locator (8-aligned after key and opt). */
static inline const struct nvs_loc *
item_flash_loc(const struct item_hdr *it)
{
    uintptr_t p = (uintptr_t)item_value(it);
    return (const struct nvs_loc *)((p + 7) & ~(uintptr_t)7);
}

/* Write a flash item's header chunk at off: hdr (kind set here), key, opt
 * and locator, then its commit word (returned; pending as for item_write).
 * PMEM: one pm_copy; no lock may be held. */
uint32_t item_write_flash(char *base, uint64_t off, const struct item_desc *hdr,
                          const void *key, const struct nvs_loc *loc,
                          bool pending);

/* Write header (with hdr->seq and, as hdr->iflags say, flags and cas in
 * opt), key and value into the head chunk at off (and the tails listed in
 * tails[] for a chained item), then, after a fence, the 8-byte commit word
 * (seq's low half over the CRC; the CRC half is returned). pending (a
 * copy: a demotion, a page move, a recache): ITEM_COMMIT_PENDING is stored
 * as the CRC half instead and item_commit_copy() commits the copy once it
 * is published. PMEM: writes through pm_copy; no lock may be
 * held. The value is given as up to three pieces (append and prepend join
 * old and new without a DRAM copy). */
struct item_src {
    const struct iovec *iov;
    int niov;
};
uint32_t item_write(char *base, uint64_t off, const struct item_plan *plan,
                    const uint64_t *tails, const struct item_desc *hdr,
                    const void *key, const struct item_src *val, bool pending);

/* Commit a copy written pending and published since: its commit word goes
 * from seq_lo << 32 | ITEM_COMMIT_PENDING to seq_lo << 32 | word (word:
 * what item_write returned) by one 4-byte compare-and-swap of the CRC half,
 * which fails, leaving it 0, when a writer that replaced or removed the
 * copy in the index meanwhile has invalidated it (item_layout.h). Whether
 * it committed. Call inside the RCU read section the publication was done
 * in (the chunk is not reused under it). PMEM: one pm_cas32; no lock may
 * be held. */
bool item_commit_copy(char *base, uint64_t off, uint32_t word);

/* The CRC half of the commit word an item with this header, key (and opt
 * from hdr) and extra bytes (tail list or flash locator, NULL/0 for a plain
 * item) gets: the CRC32C (item_layout.h). Never 0 nor ITEM_COMMIT_PENDING. */
uint32_t item_commit_word(const struct item_desc *hdr, const void *key,
                          const void *extra, size_t extra_len);

/* Whether the committed item at it checks: commit word nonzero and its CRC
 * matches header, key, opt and tail list or locator. For a chunk read
 * without the index vouching for it (the recovery scan): bounds are the
 * caller's (chunk_size: bytes the chunk has). */
bool item_check(const struct item_hdr *it, uint32_t chunk_size);

/* item_check without the CRC: commit word committed (neither 0 nor
 * ITEM_COMMIT_PENDING), a head's kind, a key, and header, key, opt, value
 * (or tail list, or locator) within chunk_size. Enough to read the item
 * without leaving its chunk; not that its bytes are whole: for a pool a
 * clean close left, where every committed item is (item_layout.h). */
bool item_check_shape(const struct item_hdr *it, uint32_t chunk_size);

/* Whether store sequence a is newer than b. */
static inline bool
item_seq_newer(uint64_t a, uint64_t b)
{
    return a > b;
}

/* Invalidate the item at off in PMEM: its commit word's crc half becomes 0,
 * one 4-byte store on its own line (seq_lo stays: item_seq). Call after it left
 * the index (or was never in it) and before the removal is acknowledged or the
 * chunk reused. PMEM: one pm_store32; no lock may be held. */
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
    iov[0].iov_base = (void *)item_value(it);
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

/* --- item_write's one-copy path, inline for the store (every set): the
 * header, key and opt staged in DRAM with the value after them, the
 * commit word's CRC over the staged header, key and opt, one copy into
 * PMEM, then the fence and the commit word, last. Helpers of item.c too. */

/* Items up to this size are staged in DRAM and written in one copy. */
#define ITEM_STAGE_MAX 512

#if defined(__x86_64__)
/* CRC32C of a staged header (its exptime read as 0) and the key and opt
 * after it, len bytes in all, with the SSE4.2 instruction (item.c). */
uint32_t item_staged_crc_hw(const char *staged, uint32_t len);
#endif

/* The 8-byte commit word an item's header holds: its sequence's low half
 * over the CRC half (item_layout.h). */
static inline uint64_t
commit_word_of(uint64_t seq, uint32_t crc)
{
    return (uint64_t)(uint32_t)seq << 32 | crc;
}

/* A key into the stage: 8 to 32 bytes (most keys) in overlapping 8-byte
 * loads and stores within [0, n), as item_key_bytes_equal compares them, no
 * call; others through memcpy. */
static inline __attribute__((always_inline)) void
copy_key(char *dst, const void *key, uint32_t n)
{
    const unsigned char *k = key;
    uint64_t a, b, c, d;
    if (n >= 8 && n <= 16) {
        a = item_load8(k);
        b = item_load8(k + n - 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    } else if (n > 16 && n <= 32) {
        a = item_load8(k);
        b = item_load8(k + 8);
        c = item_load8(k + n - 16);
        d = item_load8(k + n - 8);
        memcpy(dst, &a, 8);
        memcpy(dst + 8, &b, 8);
        memcpy(dst + n - 16, &c, 8);
        memcpy(dst + n - 8, &d, 8);
    } else {
        memcpy(dst, key, n);
    }
}

/* Header, key and opt as they go to PMEM (the commit word's CRC half 0, its
 * sequence half set), staged at buf (room for header, key and ITEM_OPT_MAX
 * bytes): kind and nchain given, the rest from d, whose first 8 bytes are
 * laid out as the header's. Returns the bytes staged. Both opt fields are
 * stored whether present or not, the next write overwriting an absent one:
 * no branch. */

_Static_assert(offsetof(struct item_desc, vlen) ==
                   offsetof(struct item_hdr, vlen),
               "item_desc starts laid out as item_hdr");
static inline __attribute__((always_inline)) uint32_t
stage_hko(char *buf, const struct item_desc *d, uint8_t kind, uint8_t nchain,
          const void *key)
{
    uint32_t zero = 0, at = (uint32_t)sizeof(struct item_hdr) + d->klen;
    memcpy(buf, d, ITEM_COMMIT_OFFSET);
    buf[offsetof(struct item_hdr, kind)] = (char)kind;
    buf[offsetof(struct item_hdr, nchain)] = (char)nchain;
    memcpy(buf + ITEM_COMMIT_OFFSET, &zero, sizeof(zero));
    memcpy(buf + offsetof(struct item_hdr, seq_lo), &d->seq, sizeof(d->seq));
    memcpy(buf + offsetof(struct item_hdr, exptime), &d->exptime,
           sizeof(d->exptime));
    copy_key(buf + sizeof(struct item_hdr), key, d->klen);
    memcpy(buf + at, &d->flags, sizeof(d->flags));
    at += (uint32_t)(d->iflags & ITEM_HAS_FLAGS) * 2u;
    memcpy(buf + at, &d->cas, sizeof(d->cas));
    at += (uint32_t)(d->iflags & ITEM_HAS_CAS) * 2u;
    return at;
}

/*
 * The CRC runs over the whole header as staged for writing (exptime and the
 * commit word's CRC half read as 0, its sequence half counted), then the
 * key and opt right after it, then the extra bytes: staged is a header
 * followed by its key and opt (len bytes), as item_write builds it in DRAM
 * anyway, so a set checksums its own staging buffer in one pass.
 */
static inline __attribute__((always_inline)) uint32_t
staged_word(char *staged, uint32_t len, const void *extra, size_t extra_len)
{
#ifdef TC_BENCH_NO_RECOVERY
    /* perf/RESULTS.md "Cost of recoverability": the "before" build, with
     * no checksum, no commit store and no invalidation. Never shipped. */
    (void)staged, (void)len, (void)extra, (void)extra_len;
    return 1;
#endif
    uint32_t crc;
#if defined(__x86_64__)
    if (__builtin_expect(__builtin_cpu_supports("sse4.2"), 1)) {
        crc = item_staged_crc_hw(staged, len);
    } else
#endif
    {
        uint32_t exp, zero = 0;
        size_t at = offsetof(struct item_hdr, exptime);
        memcpy(&exp, staged + at, sizeof(exp));
        memcpy(staged + at, &zero, sizeof(zero)); /* touch changes it */
        crc = nvs_crc32c(0, staged, len);
        memcpy(staged + at, &exp, sizeof(exp));
    }
    if (extra_len)
        crc = nvs_crc32c(crc, extra, extra_len);
    /* 0 means "not an item", ITEM_COMMIT_PENDING "not yet" */
    return crc == 0 ? 1 : crc == ITEM_COMMIT_PENDING ? crc - 1 : crc;
}

/* PMEM: the bytes before it are fenced, then one 8-byte store: the commit
 * word, seq's low half over the CRC word, or over ITEM_COMMIT_PENDING for
 * a copy, which item_commit_copy() turns into the word. Returns word. */
static inline __attribute__((always_inline)) uint32_t
commit_store(char *head, uint32_t word, uint64_t seq, bool pending)
{
    pm_fence();
#ifdef TC_BENCH_NO_RECOVERY
    (void)head, (void)seq, (void)pending;
    return word;
#endif
    pm_store64((uint64_t *)(head + ITEM_COMMIT_OFFSET),
               commit_word_of(seq, pending ? ITEM_COMMIT_PENDING : word));
    return word;
}

/* item_write of a one-chunk item of at most ITEM_STAGE_MAX bytes
 * (plan->nchain 0, plan->head_size <= ITEM_STAGE_MAX): built in DRAM and
 * written with one copy. */
static inline __attribute__((always_inline)) uint32_t
item_write_one(char *base, uint64_t off, const struct item_desc *hdr,
               const void *key, const struct item_src *val, bool pending)
{
    char *head = base + off;
    char stage[ITEM_STAGE_MAX];
    uint32_t at = stage_hko(stage, hdr, ITEM_KIND_HEAD, 0, key);
    uint32_t word = staged_word(stage, at, NULL, 0);
    /* the value's pieces (an empty one may come as {NULL, 0}); one
     * piece, a set's, without the loop */
    if (__builtin_expect(val->niov == 1, 1)) {
        size_t n = val->iov[0].iov_len;
        if (n)
            memcpy(stage + at, val->iov[0].iov_base, n);
        at += (uint32_t)n;
    } else {
        for (int i = 0; i < val->niov; i++) {
            if (!val->iov[i].iov_len)
                continue;
            memcpy(stage + at, val->iov[i].iov_base, val->iov[i].iov_len);
            at += (uint32_t)val->iov[i].iov_len;
        }
    }
    pm_copy(head, stage, at);
    return commit_store(head, word, hdr->seq, pending);
}

/*
 * Items in chunks. Stateless: every write goes through the PMEM helpers and
 * happens before the item is published in the index, outside any lock; the
 * commit word goes last (src/engine/item_layout.h).
 */
#include "src/engine/item.h"

#include "src/base/compiler.h"
#include "tier/pm.h"

#include <stddef.h>
#include <string.h>

/* Items up to this size are staged in DRAM and written in one copy. */
#define ITEM_STAGE_MAX 512

void
item_plan(uint32_t klen, uint64_t vlen, uint32_t chunk_max,
          struct item_plan *out)
{
    uint64_t plain = sizeof(struct item_hdr) + klen + vlen;

    memset(out, 0, sizeof(*out));
    if (plain <= chunk_max) {
        out->head_size = (uint32_t)plain;
        out->total = plain;
        return;
    }
    out->tail_room = chunk_max - (uint32_t)sizeof(struct item_tail);
    uint64_t n = (vlen + out->tail_room - 1) / out->tail_room;
    out->nchain = (uint8_t)MIN(n, (uint64_t)ITEM_MAX_TAILS);
    out->head_size = (uint32_t)(ALIGN_UP(sizeof(struct item_hdr) + klen, 8u) +
                                8 * out->nchain);
    out->last_size =
        (uint32_t)(sizeof(struct item_tail) + vlen - (n - 1) * out->tail_room);
    out->total = out->head_size + n * sizeof(struct item_tail) + vlen;
}

/* A read position over the value's pieces. */
struct stream {
    const struct iovec *iov;
    int niov;
    int i;
    size_t at;
};

/* PMEM: copy the next n bytes of the stream to dst. */
static void
stream_copy(char *dst, struct stream *s, size_t n)
{
    while (n > 0 && s->i < s->niov) {
        size_t left = s->iov[s->i].iov_len - s->at;
        size_t k = MIN(left, n);
        if (k)
            pm_copy(dst, (const char *)s->iov[s->i].iov_base + s->at, k);
        dst += k;
        n -= k;
        s->at += k;
        if (s->at == s->iov[s->i].iov_len) {
            s->i++;
            s->at = 0;
        }
    }
}

#if defined(__x86_64__)
/* The header's 8-byte words, and the one exptime sits in. */
#define HDR_WORDS (sizeof(struct item_hdr) / 8)
#define HDR_EXP_WORD (offsetof(struct item_hdr, exptime) / 8)
#define HDR_EXP_SHIFT (offsetof(struct item_hdr, exptime) % 8 * 8)
_Static_assert(sizeof(struct item_hdr) % 8 == 0, "header in whole words");
_Static_assert(offsetof(struct item_hdr, exptime) % 8 <= 4,
               "exptime inside one word");

/* CRC32C (the value nvs_crc32c gives) of a staged header, its exptime
 * read as 0, and its key, with the SSE4.2 instruction inline: the header
 * in whole words, no call, no alignment loop and no exptime store and
 * restore (some 40 instructions a set against nvs_crc32c, cachegrind). */
__attribute__((target("sse4.2"))) static uint32_t
staged_crc_hw(const char *staged, uint8_t klen)
{
    uint64_t c = 0xffffffffu, w;
    for (unsigned i = 0; i < HDR_WORDS; i++) {
        memcpy(&w, staged + 8 * i, sizeof(w));
        if (i == HDR_EXP_WORD)
            w &= ~(0xffffffffull << HDR_EXP_SHIFT);
        c = __builtin_ia32_crc32di(c, w);
    }
    const char *p = staged + sizeof(struct item_hdr);
    unsigned n = klen;
    for (; n >= 8; n -= 8, p += 8) {
        memcpy(&w, p, sizeof(w));
        c = __builtin_ia32_crc32di(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    if (n >= 4) {
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        c32 = __builtin_ia32_crc32si(c32, v);
        p += 4;
        n -= 4;
    }
    while (n-- > 0)
        c32 = __builtin_ia32_crc32qi(c32, (unsigned char)*p++);
    return ~c32;
}
#endif

/*
 * The CRC runs over the whole header as staged for writing (exptime and the
 * commit word read as 0), then the key right after it, then the extra
 * bytes: staged is a header followed by its key, as item_write builds it
 * in DRAM anyway, so a set checksums its own staging buffer in one pass.
 * exptime is zeroed for the pass and put back.
 */
static inline __attribute__((always_inline)) uint64_t
staged_word(char *staged, const void *extra, size_t extra_len, uint64_t seq)
{
#ifdef TC_BENCH_NO_RECOVERY
    /* perf/RESULTS.md "Cost of recoverability": the "before" build, with
     * no checksum, no commit store and no invalidation. Never shipped. */
    (void)staged, (void)extra, (void)extra_len, (void)seq;
    return 1;
#endif
    uint8_t klen = (uint8_t)staged[offsetof(struct item_hdr, klen)];
    uint32_t crc;
#if defined(__x86_64__)
    if (likely(__builtin_cpu_supports("sse4.2"))) {
        crc = staged_crc_hw(staged, klen);
    } else
#endif
    {
        uint32_t exp, zero = 0;
        size_t at = offsetof(struct item_hdr, exptime);
        memcpy(&exp, staged + at, sizeof(exp));
        memcpy(staged + at, &zero, sizeof(zero)); /* touch changes it */
        crc = nvs_crc32c(0, staged, sizeof(struct item_hdr) + klen);
        memcpy(staged + at, &exp, sizeof(exp));
    }
    if (extra_len)
        crc = nvs_crc32c(crc, extra, extra_len);
    uint64_t w = (uint64_t)(uint32_t)seq << 32 | crc;
    /* 0 means "not an item", ITEM_COMMIT_PENDING "not yet" */
    return w && w != ITEM_COMMIT_PENDING ? w : 1ull << 32;
}

uint64_t
item_commit_word(const struct item_hdr *hdr, const void *key, const void *extra,
                 size_t extra_len, uint64_t seq)
{
    union {
        struct item_hdr h;
        char b[sizeof(struct item_hdr) + UINT8_MAX];
    } u;
    u.h = *hdr;
    u.h.commit = 0;
    memcpy(u.b + sizeof(struct item_hdr), key, hdr->klen);
    return staged_word(u.b, extra, extra_len, seq);
}

/* PMEM: the bytes before it are fenced, then one 8-byte store: the word,
 * or ITEM_COMMIT_PENDING for a copy (seq with ITEM_SEQ_PENDING), which
 * item_commit_copy() turns into the word. */
static uint64_t
commit_store(char *head, uint64_t word, uint64_t seq)
{
    pm_fence();
#ifdef TC_BENCH_NO_RECOVERY
    (void)head, (void)seq;
    return word;
#endif
    pm_store64((uint64_t *)(head + ITEM_COMMIT_OFFSET),
               seq & ITEM_SEQ_PENDING ? ITEM_COMMIT_PENDING : word);
    return word;
}

bool
item_commit_copy(char *base, uint64_t off, uint64_t word)
{
    return pm_cas64((uint64_t *)(base + off + ITEM_COMMIT_OFFSET),
                    ITEM_COMMIT_PENDING, word);
}

void
item_invalidate(char *base, uint64_t off)
{
#ifdef TC_BENCH_NO_RECOVERY
    (void)base, (void)off;
    return;
#endif
    pm_store64((uint64_t *)(base + off + ITEM_COMMIT_OFFSET), 0);
}

bool
item_check(const struct item_hdr *it, uint32_t chunk_size)
{
    uint64_t commit = __atomic_load_n(&it->commit, __ATOMIC_RELAXED);
    if (!commit || !item_kind_is_head(it->kind) || it->klen == 0 ||
        sizeof(*it) + it->klen > chunk_size)
        return false;
    const void *extra = NULL;
    size_t extra_len = 0;
    if (it->kind == ITEM_KIND_FLASH) {
        if (it->nchain || item_flash_size(it->klen) > chunk_size)
            return false;
        extra = item_flash_loc(it);
        extra_len = sizeof(struct nvs_loc);
    } else if (it->nchain) {
        uint64_t end =
            (uint64_t)((const char *)item_tails(it) - (const char *)it) +
            8ull * it->nchain;
        if (end > chunk_size)
            return false;
        extra = item_tails(it);
        extra_len = 8u * it->nchain;
    } else if (sizeof(*it) + it->klen + (uint64_t)it->vlen > chunk_size) {
        return false;
    }
    struct item_hdr h = *it;
    uint64_t want = item_commit_word(&h, item_key(it), extra, extra_len,
                                     item_commit_seq(commit));
    return want == commit;
}

uint64_t
item_write(char *base, uint64_t off, const struct item_plan *plan,
           const uint64_t *tails, const struct item_hdr *hdr, const void *key,
           const struct item_src *val, uint64_t seq)
{
    struct item_hdr h = *hdr;
    struct stream s = {val->iov, val->niov, 0, 0};
    char *head = base + off;

    h.kind = ITEM_KIND_HEAD;
    h.nchain = plan->nchain;
    h.commit = 0;
    if (!plan->nchain && plan->head_size <= ITEM_STAGE_MAX) {
        /* small item: build it in DRAM and write it with one copy (one
         * call into libpmem instead of three or more) */
        char stage[ITEM_STAGE_MAX];
        memcpy(stage, &h, sizeof(h));
        memcpy(stage + sizeof(h), key, h.klen);
        uint64_t word = staged_word(stage, NULL, 0, seq);
        size_t at = sizeof(h) + h.klen;
        for (int i = 0; i < val->niov; i++) {
            if (!val->iov[i].iov_len)
                continue; /* an empty value may come as {NULL, 0} */
            memcpy(stage + at, val->iov[i].iov_base, val->iov[i].iov_len);
            at += val->iov[i].iov_len;
        }
        pm_copy(head, stage, at);
        return commit_store(head, word, seq);
    }
    char hk[sizeof(h) + UINT8_MAX]; /* klen is a uint8_t */
    memcpy(hk, &h, sizeof(h));
    memcpy(hk + sizeof(h), key, h.klen);
    uint64_t word = staged_word(hk, tails, 8u * plan->nchain, seq);
    pm_copy(head, hk, sizeof(h) + h.klen);
    if (!plan->nchain) {
        stream_copy(head + sizeof(h) + h.klen, &s, h.vlen);
        return commit_store(head, word, seq);
    }
    pm_copy((char *)item_tails((const struct item_hdr *)head), tails,
            8u * plan->nchain);
    uint64_t left = h.vlen;
    for (unsigned i = 0; i < plan->nchain; i++) {
        struct item_tail t = {.kind = ITEM_KIND_TAIL, .head = off};
        size_t n = MIN(left, (uint64_t)plan->tail_room);
        pm_copy(base + tails[i], &t, sizeof(t));
        stream_copy(base + tails[i] + sizeof(t), &s, n);
        left -= n;
    }
    return commit_store(head, word, seq);
}

uint64_t
item_write_flash(char *base, uint64_t off, const struct item_hdr *hdr,
                 const void *key, const struct nvs_loc *loc, uint64_t seq)
{
    char stage[sizeof(struct item_hdr) + 256 + sizeof(struct nvs_loc)];
    struct item_hdr h = *hdr;
    uint32_t at = item_flash_size(h.klen) - (uint32_t)sizeof(*loc);

    h.kind = ITEM_KIND_FLASH;
    h.nchain = 0;
    h.commit = 0;
    uint64_t word = item_commit_word(&h, key, loc, sizeof(*loc), seq);
    memset(stage, 0, sizeof(stage));
    memcpy(stage, &h, sizeof(h));
    memcpy(stage + sizeof(h), key, h.klen);
    memcpy(stage + at, loc, sizeof(*loc));
    pm_copy(base + off, stage, at + sizeof(*loc));
    return commit_store(base + off, word, seq);
}

int
item_value_iov_chained(const char *base, const struct item_hdr *it,
                       uint32_t chunk_max, struct iovec *iov)
{
    const uint64_t *tails = item_tails(it);
    uint32_t room = chunk_max - (uint32_t)sizeof(struct item_tail);
    uint64_t left = it->vlen;
    int n = 0;
    for (unsigned i = 0; i < it->nchain && n <= ITEM_MAX_TAILS; i++) {
        iov[n].iov_base = (void *)(base + tails[i] + sizeof(struct item_tail));
        iov[n].iov_len = MIN(left, (uint64_t)room);
        left -= iov[n].iov_len;
        n++;
    }
    return n;
}

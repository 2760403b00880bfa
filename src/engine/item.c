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

void
item_plan_chained(uint32_t klen, uint8_t iflags, uint64_t vlen,
                  uint32_t chunk_max, struct item_plan *out)
{
    uint32_t hko = item_hko_size(klen, iflags);

    memset(out, 0, sizeof(*out));
    out->tail_room = chunk_max - (uint32_t)sizeof(struct item_tail);
    uint64_t n = (vlen + out->tail_room - 1) / out->tail_room;
    out->nchain = (uint8_t)MIN(n, (uint64_t)ITEM_MAX_TAILS);
    out->head_size = (uint32_t)(ALIGN_UP(hko, 8u) + 8 * out->nchain);
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
 * read as 0, then the len - header bytes after it (key and opt), with the
 * SSE4.2 instruction inline: the header in whole words, no call, no
 * alignment loop and no exptime store and restore. */
__attribute__((target("sse4.2"))) uint32_t
item_staged_crc_hw(const char *staged, uint32_t len)
{
    uint64_t c = 0xffffffffu, w;
    for (unsigned i = 0; i < HDR_WORDS; i++) {
        memcpy(&w, staged + 8 * i, sizeof(w));
        if (i == HDR_EXP_WORD)
            w &= ~(0xffffffffull << HDR_EXP_SHIFT);
        c = __builtin_ia32_crc32di(c, w);
    }
    const char *p = staged + sizeof(struct item_hdr);
    unsigned n = len - (uint32_t)sizeof(struct item_hdr);
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

uint32_t
item_commit_word(const struct item_desc *hdr, const void *key,
                 const void *extra, size_t extra_len)
{
    char b[sizeof(struct item_hdr) + UINT8_MAX + ITEM_OPT_MAX];
    uint32_t len = stage_hko(b, hdr, hdr->kind, hdr->nchain, key);
    return staged_word(b, len, extra, extra_len);
}

/* The sequence half is in place since the write: only the CRC half moves,
 * so the half readers load (item_seq) is never written after publication. */
bool
item_commit_copy(char *base, uint64_t off, uint32_t word)
{
    return pm_cas32((uint32_t *)(base + off + ITEM_COMMIT_OFFSET),
                    ITEM_COMMIT_PENDING, word);
}

void
item_invalidate(char *base, uint64_t off)
{
#ifdef TC_BENCH_NO_RECOVERY
    (void)base, (void)off;
    return;
#endif
    pm_store32((uint32_t *)(base + off + ITEM_COMMIT_OFFSET), 0);
}

/* The structural part of item_check: *extra and *extra_len get what the
 * CRC covers past header, key and opt (the tail list or the locator). */
static bool
check_shape(const struct item_hdr *it, uint32_t chunk_size, uint32_t commit,
            const void **extra, size_t *extra_len)
{
    uint32_t hko = item_hko_size(it->klen, it->iflags);
    if (!item_committed(commit) || !item_kind_is_head(it->kind) ||
        it->klen == 0 || hko > chunk_size)
        return false;
    *extra = NULL;
    *extra_len = 0;
    if (it->kind == ITEM_KIND_FLASH) {
        if (it->nchain || item_flash_size(it->klen, it->iflags) > chunk_size)
            return false;
        *extra = item_flash_loc(it);
        *extra_len = sizeof(struct nvs_loc);
    } else if (it->nchain) {
        uint64_t end =
            (uint64_t)((const char *)item_tails(it) - (const char *)it) +
            8ull * it->nchain;
        if (end > chunk_size)
            return false;
        *extra = item_tails(it);
        *extra_len = 8u * it->nchain;
    } else if (hko + (uint64_t)it->vlen > chunk_size) {
        return false;
    }
    return true;
}

bool
item_check_shape(const struct item_hdr *it, uint32_t chunk_size)
{
    uint32_t commit = __atomic_load_n(&it->commit, __ATOMIC_RELAXED);
    const void *extra;
    size_t extra_len;
    return check_shape(it, chunk_size, commit, &extra, &extra_len);
}

bool
item_check(const struct item_hdr *it, uint32_t chunk_size)
{
    uint32_t commit = __atomic_load_n(&it->commit, __ATOMIC_RELAXED);
    const void *extra;
    size_t extra_len;
    if (!check_shape(it, chunk_size, commit, &extra, &extra_len))
        return false;
    uint32_t hko = item_hko_size(it->klen, it->iflags);
    char b[sizeof(struct item_hdr) + UINT8_MAX + ITEM_OPT_MAX];
    uint32_t zero = 0;
    memcpy(b, it, hko);
    memcpy(b + ITEM_COMMIT_OFFSET, &zero, sizeof(zero));
    return staged_word(b, hko, extra, extra_len) == commit;
}

uint32_t
item_write(char *base, uint64_t off, const struct item_plan *plan,
           const uint64_t *tails, const struct item_desc *hdr, const void *key,
           const struct item_src *val, bool pending)
{
    struct stream s = {val->iov, val->niov, 0, 0};
    char *head = base + off;

    if (!plan->nchain && plan->head_size <= ITEM_STAGE_MAX)
        return item_write_one(base, off, hdr, key, val, pending);
    char hk[sizeof(struct item_hdr) + UINT8_MAX + ITEM_OPT_MAX];
    uint32_t hko = stage_hko(hk, hdr, ITEM_KIND_HEAD, plan->nchain, key);
    uint32_t word = staged_word(hk, hko, tails, 8u * plan->nchain);
    pm_copy(head, hk, hko);
    if (!plan->nchain) {
        stream_copy(head + hko, &s, hdr->vlen);
        return commit_store(head, word, hdr->seq, pending);
    }
    pm_copy((char *)item_tails((const struct item_hdr *)head), tails,
            8u * plan->nchain);
    uint64_t left = hdr->vlen;
    for (unsigned i = 0; i < plan->nchain; i++) {
        struct item_tail t = {.kind = ITEM_KIND_TAIL, .head = off};
        size_t n = MIN(left, (uint64_t)plan->tail_room);
        pm_copy(base + tails[i], &t, sizeof(t));
        stream_copy(base + tails[i] + sizeof(t), &s, n);
        left -= n;
    }
    return commit_store(head, word, hdr->seq, pending);
}

uint32_t
item_write_flash(char *base, uint64_t off, const struct item_desc *hdr,
                 const void *key, const struct nvs_loc *loc, bool pending)
{
    char stage[sizeof(struct item_hdr) + 256 + ITEM_OPT_MAX +
               sizeof(struct nvs_loc)];
    uint32_t at =
        item_flash_size(hdr->klen, hdr->iflags) - (uint32_t)sizeof(*loc);

    memset(stage, 0, sizeof(stage));
    uint32_t hko = stage_hko(stage, hdr, ITEM_KIND_FLASH, 0, key);
    memcpy(stage + at, loc, sizeof(*loc));
    uint32_t word = staged_word(stage, hko, loc, sizeof(*loc));
    pm_copy(base + off, stage, at + sizeof(*loc));
    return commit_store(base + off, word, hdr->seq, pending);
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

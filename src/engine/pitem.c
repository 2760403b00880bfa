/*
 * Packed items: see pitem.h and pitem_layout.h (the format, check16 and
 * why a walk can trust a non-zero commit), doc/design/small-items.md ("The
 * write path and crash consistency").
 */
#include "src/engine/pitem.h"

#include "src/engine/item.h"

#include "src/base/compiler.h"
#include "src/base/crashpoint.h"
#include "tier/nvs.h"
#include "tier/pm.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

unsigned
pitem_iflags(const struct pitem_desc *d)
{
    unsigned f = 0;
    if (d->flags > PITEM_CFLAGS_MASK)
        f |= PITEM_HAS_FLAGS;
    if (d->has_cas)
        f |= PITEM_HAS_CAS;
    if (d->has_exp32)
        f |= PITEM_HAS_EXP;
    if (d->stale)
        f |= PITEM_STALE;
    return f;
}

uint32_t
pitem_size(const struct pitem_desc *d)
{
    return pitem_size_of(d->klen, d->vlen, pitem_iflags(d));
}

#if defined(__x86_64__)
/* check_of's CRC32C with the SSE4.2 instruction inline (a set's three
 * nvs_crc32c calls cost it some 130 instructions): the same bytes in the
 * same order, 8 at a time (the CRC of a stream does not depend on how it
 * is cut), so the same value. */
__attribute__((target("sse4.2"))) static uint32_t
check_crc_hw(uint64_t seq_base, uint32_t off, const void *p, const void *q,
             size_t m)
{
    uint32_t h;
    memcpy(&h, p, 4);
    uint64_t c = __builtin_ia32_crc32di(0xffffffffu, seq_base);
    c = __builtin_ia32_crc32di(c, (uint64_t)off | (uint64_t)h << 32);
    const unsigned char *b = q;
    for (; m >= 8; m -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    if (m >= 4) {
        uint32_t w;
        memcpy(&w, b, 4);
        c32 = __builtin_ia32_crc32si(c32, w);
        b += 4;
        m -= 4;
    }
    while (m-- > 0)
        c32 = __builtin_ia32_crc32qi(c32, *b++);
    return ~c32;
}
#endif

/* check16 from the CRC32C of seq_base, off, then n bytes at p (header
 * bytes 0..3), then m bytes at q (key and flags32/cas64). */
static uint16_t
check_of(uint64_t seq_base, uint32_t off, const void *p, size_t n,
         const void *q, size_t m)
{
    uint32_t crc;
#if defined(__x86_64__)
    if (likely(n == PITEM_CHECKED_HDR && __builtin_cpu_supports("sse4.2"))) {
        crc = check_crc_hw(seq_base, off, p, q, m);
    } else
#endif
    {
        char pre[12];
        memcpy(pre, &seq_base, 8);
        memcpy(pre + 8, &off, 4);
        crc = nvs_crc32c(0, pre, sizeof(pre));
        crc = nvs_crc32c(crc, p, n);
        crc = nvs_crc32c(crc, q, m);
    }
    uint16_t c = (uint16_t)crc;
    /* 0 none, 1 dead, 2 pending */
    return c < PITEM_COMMIT_MIN ? (uint16_t)(c + PITEM_COMMIT_MIN) : c;
}

/* Stages header (commit 0), exp32, key, flags32, cas64 into b; returns
 * their length. *ko gets where the key starts. */
static uint32_t
stage(char *b, const struct pitem_desc *d, uint32_t *ko)
{
    unsigned iflags = pitem_iflags(d);
    struct pitem_hdr h = {
        .klen = (uint8_t)d->klen,
        .fl = (uint8_t)(iflags | (iflags & PITEM_HAS_FLAGS ? 0 : d->flags)),
        .vlen = (uint16_t)d->vlen,
        .exp16 = d->has_exp32 ? 0 : d->exp16,
        .commit = PITEM_COMMIT_NONE,
    };
    uint32_t at = sizeof(h);
    memcpy(b, &h, sizeof(h));
    if (iflags & PITEM_HAS_EXP) {
        memcpy(b + at, &d->exp32, 4);
        at += 4;
    }
    *ko = at;
    copy_key(b + at, d->key, d->klen); /* inline for 8..32 bytes */
    at += d->klen;
    if (iflags & PITEM_HAS_FLAGS) {
        memcpy(b + at, &d->flags, 4);
        at += 4;
    }
    if (iflags & PITEM_HAS_CAS) {
        memcpy(b + at, &d->cas, 8);
        at += 8;
    }
    return at;
}

uint16_t
pitem_check(const struct pitem_desc *d, uint64_t seq_base, uint32_t off)
{
    char b[sizeof(struct pitem_hdr) + PITEM_KLEN_MAX + PITEM_OPT_MAX];
    uint32_t ko, n = stage(b, d, &ko);
    return check_of(seq_base, off, b, PITEM_CHECKED_HDR, b + ko, n - ko);
}

/* pitem_write's bytes but the commit, staged: header, exp32, key and
 * the opt fields after it (flags32, cas64) copied from a buffer, then
 * the value's pieces. Returns check16. */
static uint16_t
write_staged(char *it, uint32_t off, uint64_t seq_base,
             const struct pitem_desc *d)
{
    char b[sizeof(struct pitem_hdr) + PITEM_KLEN_MAX + PITEM_OPT_MAX];
    uint32_t ko, n = stage(b, d, &ko);
    uint16_t check =
        check_of(seq_base, off, b, PITEM_CHECKED_HDR, b + ko, n - ko);

    pm_copy(it, b, n);
    uint32_t at = n;
    for (unsigned i = 0; i < d->nvalue; i++) {
        if (d->value[i].iov_len) {
            pm_copy(it + at, d->value[i].iov_base, d->value[i].iov_len);
            at += (uint32_t)d->value[i].iov_len;
        }
    }
    assert(at == n + d->vlen);
    return check;
}

/* write_staged for an item with nothing after its key but the value (no
 * flags32, no cas64: a plain set's) and a value in one piece: each part
 * written once into the span, from where it is (no staging, no second
 * copy), and check16 taken over the caller's key. The same bytes. */
static inline uint16_t
write_direct(char *it, uint32_t off, uint64_t seq_base,
             const struct pitem_desc *d, unsigned iflags)
{
    struct pitem_hdr h = {
        .klen = (uint8_t)d->klen,
        .fl = (uint8_t)(iflags | d->flags),
        .vlen = (uint16_t)d->vlen,
        .exp16 = d->has_exp32 ? 0 : d->exp16,
        .commit = PITEM_COMMIT_NONE,
    };
    uint32_t at = sizeof(h);

    assert(d->nvalue == 1 && d->value[0].iov_len == d->vlen);
    pm_copy(it, &h, sizeof(h));
    if (iflags & PITEM_HAS_EXP) {
        pm_copy(it + at, &d->exp32, 4);
        at += 4;
    }
    pm_copy(it + at, d->key, d->klen);
    at += d->klen;
    if (d->vlen)
        pm_copy(it + at, d->value[0].iov_base, d->vlen);
    return check_of(seq_base, off, &h, PITEM_CHECKED_HDR, d->key, d->klen);
}

uint16_t
pitem_write(char *seg, uint32_t seg_size, uint32_t off, uint64_t seq_base,
            const struct pitem_desc *d, bool pending)
{
    unsigned iflags = pitem_iflags(d);
    uint32_t size = pitem_size_of(d->klen, d->vlen, iflags);
    assert(d->klen >= 1 && d->klen <= PITEM_KLEN_MAX);
    assert(d->vlen <= PITEM_VLEN_MAX);
    assert(off >= PITEM_SEG_START && off % PITEM_ALIGN == 0);
    assert(size <= seg_size && off <= seg_size - size);

    char *it = seg + off;
    uint16_t check =
        likely(!(iflags & (PITEM_HAS_FLAGS | PITEM_HAS_CAS)) && d->nvalue == 1)
            ? write_direct(it, off, seq_base, d, iflags)
            : write_staged(it, off, seq_base, d);
    /* The next slot's exp16 and commit: 0 before this item commits, so a
     * walk ends there until the next item commits (pitem_layout.h). */
    if (seg_size - off - size >= PITEM_SIZE_MIN)
        pitem_zero_slot(seg, off + size);
    /* Everything above lands before the commit (pm_copy may be
     * non-temporal; x86 orders the rest). */
    pm_fence();
    TC_CRASH_POINT("pitem.written"); /* all but the commit */
    pm_store16((uint16_t *)(void *)(it + PITEM_COMMIT_OFFSET),
               pending ? (uint16_t)PITEM_COMMIT_PENDING : check);
    return check;
}

/* pitem_write_plain's body: header (commit 0), exp32, key, value, the
 * next slot's zero word, a fence, the commit. check16 by crc (the CPU's
 * CRC32C instruction where there is one: check_crc_hw inline). */
static inline __attribute__((always_inline)) uint16_t
write_plain(char *seg, uint32_t seg_size, uint32_t off, uint64_t seq_base,
            const struct pitem_plain *p,
            uint32_t (*crc)(uint64_t, uint32_t, const void *, const void *,
                            size_t))
{
    uint32_t iflags = p->exp32 ? PITEM_HAS_EXP : 0u;
    uint32_t h32 = p->klen | (iflags | p->fl) << 8 | p->vlen << 16;
    uint64_t h = h32 | (uint64_t)p->exp16 << 32; /* commit 0 */
    uint32_t size = pitem_size_of(p->klen, p->vlen, iflags);
    char *it = seg + off;
    uint32_t at = sizeof(struct pitem_hdr);

    assert(p->klen >= 1 && p->klen <= PITEM_KLEN_MAX);
    assert(p->fl <= PITEM_CFLAGS_MASK && (!p->exp32 || !p->exp16));
    assert(off >= PITEM_SEG_START && off % PITEM_ALIGN == 0);
    assert(size <= seg_size && off <= seg_size - size);
    pm_copy(it, &h, sizeof(h));
    if (iflags) {
        pm_copy(it + at, &p->exp32, 4);
        at += 4;
    }
    pm_copy_short(it + at, p->key, p->klen);
    at += p->klen;
    if (p->vlen)
        pm_copy(it + at, p->value, p->vlen);
    uint32_t c32 = crc(seq_base, off, &h32, p->key, p->klen);
    uint16_t check = (uint16_t)c32 < PITEM_COMMIT_MIN
                         ? (uint16_t)((uint16_t)c32 + PITEM_COMMIT_MIN)
                         : (uint16_t)c32;
    if (seg_size - off - size >= PITEM_SIZE_MIN) /* pitem_zero_slot */
        pm_store32((uint32_t *)(void *)(it + size + PITEM_SLOT_WORD_OFFSET), 0);
    pm_fence();
    TC_CRASH_POINT("pitem.written"); /* all but the commit */
    pm_store16((uint16_t *)(void *)(it + PITEM_COMMIT_OFFSET), check);
    return check;
}

/* check_of's CRC with a portable CRC32C (check_crc_hw's signature). */
static uint32_t
check_crc_sw(uint64_t seq_base, uint32_t off, const void *p, const void *q,
             size_t m)
{
    char pre[12];
    memcpy(pre, &seq_base, 8);
    memcpy(pre + 8, &off, 4);
    uint32_t crc = nvs_crc32c(0, pre, sizeof(pre));
    crc = nvs_crc32c(crc, p, PITEM_CHECKED_HDR);
    return nvs_crc32c(crc, q, m);
}

static __attribute__((noinline)) uint16_t
write_plain_sw(char *seg, uint32_t seg_size, uint32_t off, uint64_t seq_base,
               const struct pitem_plain *p)
{
    return write_plain(seg, seg_size, off, seq_base, p, check_crc_sw);
}

#if defined(__x86_64__)
/* flatten: check_crc_hw inline (the same target) */
__attribute__((target("sse4.2"), flatten)) static uint16_t
write_plain_hw(char *seg, uint32_t seg_size, uint32_t off, uint64_t seq_base,
               const struct pitem_plain *p)
{
    return write_plain(seg, seg_size, off, seq_base, p, check_crc_hw);
}
#endif

uint16_t
pitem_write_plain(char *seg, uint32_t seg_size, uint32_t off, uint64_t seq_base,
                  const struct pitem_plain *p)
{
#if defined(__x86_64__)
    if (likely(__builtin_cpu_supports("sse4.2")))
        return write_plain_hw(seg, seg_size, off, seq_base, p);
#endif
    return write_plain_sw(seg, seg_size, off, seq_base, p);
}

void
pitem_zero_slot(char *seg, uint32_t off)
{
    pm_store32((uint32_t *)(void *)(seg + off + PITEM_SLOT_WORD_OFFSET), 0);
}

bool
pitem_commit_pending(char *seg, uint32_t off, uint16_t check)
{
    assert(check >= PITEM_COMMIT_MIN);
    return pm_cas16((uint16_t *)(void *)(seg + off + PITEM_COMMIT_OFFSET),
                    PITEM_COMMIT_PENDING, check);
}

void
pitem_invalidate(char *seg, uint32_t off)
{
    pm_store16((uint16_t *)(void *)(seg + off + PITEM_COMMIT_OFFSET),
               PITEM_COMMIT_DEAD);
}

void
pitem_set_exp16(char *seg, uint32_t off, uint16_t exp16)
{
    pm_store16((uint16_t *)(void *)(seg + off + PITEM_EXP16_OFFSET), exp16);
}

void
pitem_set_exp32(char *seg, uint32_t off, uint32_t exp32)
{
    pm_store32((uint32_t *)(void *)(seg + off + sizeof(struct pitem_hdr)),
               exp32);
}

static inline uint16_t
load16(const char *p)
{
    return __atomic_load_n((const uint16_t *)(const void *)p, __ATOMIC_RELAXED);
}

int
pitem_parse(const char *seg, uint32_t seg_size, uint64_t seq_base, uint32_t off,
            struct pitem_view *v)
{
    return pitem_parse_inline(seg, seg_size, seq_base, off, v);
}

bool
pitem_verify(const char *seg, uint64_t seq_base, const struct pitem_view *v)
{
    const char *it = seg + v->off;
    uint32_t ko = (uint32_t)(v->key - it);
    uint32_t end = (uint32_t)(v->value - it);
    return v->commit ==
           check_of(seq_base, v->off, it, PITEM_CHECKED_HDR, v->key, end - ko);
}

void
pitem_walk_init(struct pitem_walk *w, const char *seg, uint32_t seg_size,
                uint64_t seq_base, bool verify)
{
    *w = (struct pitem_walk){
        .seg = seg,
        .seg_size = seg_size,
        .seq_base = seq_base,
        .verify = verify,
        .off = PITEM_SEG_START,
        .status = 1,
    };
}

int
pitem_walk_next(struct pitem_walk *w, struct pitem_view *v)
{
    while (w->status == 1) {
        if (w->off > w->seg_size || w->seg_size - w->off < PITEM_SIZE_MIN ||
            load16(w->seg + w->off + PITEM_COMMIT_OFFSET) ==
                PITEM_COMMIT_NONE) {
            w->status = 0;
            break;
        }
        if (pitem_parse(w->seg, w->seg_size, w->seq_base, w->off, v) != 0) {
            w->status = -EBADMSG;
            break;
        }
        switch (v->commit) {
        case PITEM_COMMIT_NONE: /* never stored over an item: as above */
            w->status = 0;
            return 0;
        case PITEM_COMMIT_DEAD:
            w->ndead++;
            w->dead_bytes += v->size;
            break;
        case PITEM_COMMIT_PENDING:
            w->npending++;
            w->pending_bytes += v->size;
            break;
        default:
            if (w->verify && !pitem_verify(w->seg, w->seq_base, v)) {
                w->status = -EBADMSG;
                return w->status;
            }
            w->off += v->size;
            return 1;
        }
        w->off += v->size;
    }
    return w->status;
}

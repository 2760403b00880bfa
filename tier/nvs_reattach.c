/*
 * Reattaching the NVMe store's segments after a restart (the contract is
 * in tier/nvs.h, "reattach after a restart"; the layout in
 * tier/nvs_layout.h).
 *
 * At open, with cfg.reattach, each segment's header block is read. A
 * header that checks (magic, version, its own number, the segment size,
 * CRC32C) makes the segment SEALED at the header's generation; then its
 * extents are found from the segment's start, each by its footer: the
 * footer of the extent at pos is the last 40 bytes of one of the blocks
 * ending in (pos, pos + wbuf_size], a footer of this generation naming pos
 * as its start and ending at that block. The blocks are read backwards
 * from pos + wbuf_size in pieces of NVS_REATTACH_READ bytes: a full write
 * buffer's footer is in its last blocks, so one read finds it; a buffer cut
 * short by nvs_flush takes a few more. The first extent without such a
 * footer ends the segment's known contents (wend): a crash cut that buffer,
 * or it was never written. A footer says nothing of its values (pieces of
 * one buffer may land in any order): each read still checks the record's
 * CRC32C against the locator, so a value the crash cut reads as a miss.
 *
 * The bytes a segment holds (used) are, per extent, its values' span
 * (padding included) and its directory; the records are the footers'
 * counts. While the engine offers its locators (nvs_reattach_ref), a
 * segment's dead and ndead fields hold the bytes and records offered and
 * kept; nvs_reattach_done() turns them into dead = used - kept.
 *
 * Concurrency: at open, before the writer thread starts and before any
 * other call; nvs_reattach_ref/done take s->lock all the same (the engine
 * calls them once the store is up).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "tier/nvs_int.h"
#include "tier/nvs_layout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NVS_REATTACH_READ (64u << 10)

/* Read len bytes at segment offset off of segment i into buf. */
static int
seg_read(struct nvs *s, uint32_t i, void *buf, uint32_t len, uint32_t off)
{
    const struct nvs_seg *g = &s->seg[i];
    int r = nvs_io_pread_all(s->fd[g->path], buf, len, g->foff + off);
    if (r < 0)
        return r;
    s->rinfo.bytes_read += len;
    return 0;
}

static bool
header_ok(const struct nvs *s, uint32_t i, const struct nvs_seg_header *h)
{
    return h->magic == NVS_SEG_MAGIC && h->version == NVS_LAYOUT_VERSION &&
           h->seg == i && h->seg_size == s->cfg.seg_size && h->gen != 0 &&
           nvs_crc32c(0, h, offsetof(struct nvs_seg_header, crc)) == h->crc;
}

/* Whether p (the last bytes of the block ending at end) is the footer of
 * the extent of generation gen starting at pos. */
static bool
footer_ok(const struct nvs *s, const char *p, uint32_t gen, uint32_t pos,
          uint32_t end, struct nvs_wbuf_footer *f)
{
    memcpy(f, p, sizeof(*f));
    if (f->magic != NVS_FOOT_MAGIC || f->gen != gen || f->start != pos)
        return false;
    if (nvs_crc32c(0, f, offsetof(struct nvs_wbuf_footer, crc)) != f->crc)
        return false;
    return f->len > 0 && f->len <= s->cfg.wbuf_size &&
           (uint64_t)f->start + f->len == end &&
           f->dir_off >= MAX(f->start, NVS_SEG_HDR_SIZE) &&
           (uint64_t)f->dir_off + f->dir_len <= end - sizeof(*f);
}

/* The footer of the extent at pos, read into *f: 1 found, 0 none, or a
 * negative errno. */
static int
find_footer(struct nvs *s, uint32_t i, uint32_t gen, uint32_t pos, char *buf,
            struct nvs_wbuf_footer *f)
{
    uint32_t hi = (uint32_t)MIN((uint64_t)pos + s->cfg.wbuf_size,
                                (uint64_t)s->cfg.seg_size);
    while (hi > pos) {
        uint32_t lo =
            hi - pos > NVS_REATTACH_READ ? hi - NVS_REATTACH_READ : pos;
        int r = seg_read(s, i, buf, hi - lo, lo);
        if (r < 0)
            return r;
        for (uint32_t e = hi; e >= lo + NVS_BLOCK; e -= NVS_BLOCK)
            if (footer_ok(s, buf + (e - lo) - sizeof(*f), gen, pos, e, f))
                return 1;
        hi = lo;
    }
    return 0;
}

/* Walk segment i's extents (generation gen) from its start. */
static int
walk_segment(struct nvs *s, uint32_t i, uint32_t gen, char *buf)
{
    struct nvs_seg *g = &s->seg[i];
    uint32_t pos = 0;

    while (pos < s->cfg.seg_size) {
        struct nvs_wbuf_footer f;
        int r = find_footer(s, i, gen, pos, buf, &f);
        if (r < 0)
            return r;
        if (r == 0)
            break;
        g->used += (f.dir_off - MAX(f.start, NVS_SEG_HDR_SIZE)) + f.dir_len;
        g->nrec += f.nrec;
        s->rinfo.extents++;
        s->rinfo.records += f.nrec;
        pos = f.start + f.len;
    }
    g->wend = pos;
    return 0;
}

int
nvs_reattach_scan(struct nvs *s)
{
    char *buf;
    int r = 0;

    if (posix_memalign((void **)&buf, NVS_BLOCK, NVS_REATTACH_READ) != 0) {
        err_set("out of memory for the NVMe store's reattach");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < s->nsegs; i++) {
        struct nvs_seg *g = &s->seg[i];
        struct nvs_seg_header h;
        if ((r = seg_read(s, i, buf, NVS_BLOCK, 0)) < 0)
            break;
        memcpy(&h, buf, sizeof(h));
        if (!header_ok(s, i, &h))
            continue; /* free, at this run's generation */
        atomic_store_explicit(&g->gen, h.gen, memory_order_relaxed);
        g->state = NVS_SEG_SEALED;
        g->seal_seq = h.opened_unix;
        s->seal_seq = MAX(s->seal_seq, h.opened_unix);
        s->rinfo.segs_reattached++;
        if ((r = walk_segment(s, i, h.gen, buf)) < 0)
            break;
    }
    free(buf);
    if (r < 0)
        err_set("reading the NVMe store's segments back failed: %s",
                strerror(-r));
    return r;
}

bool
nvs_reattach_ref(struct nvs *s, const struct nvs_loc *loc, uint8_t klen)
{
    bool ok = false;

    lock_acquire(&s->lock);
    if (loc->seg < s->nsegs) {
        struct nvs_seg *g = &s->seg[loc->seg];
        ok = g->state == NVS_SEG_SEALED &&
             atomic_load_explicit(&g->gen, memory_order_relaxed) == loc->gen &&
             loc->off >= NVS_SEG_HDR_SIZE &&
             (uint64_t)loc->off + loc->vlen <= g->wend;
        if (ok) {
            /* kept bytes and records, until nvs_reattach_done */
            g->dead += loc->vlen + nvs_desc_size(klen);
            g->ndead++;
        }
    }
    if (ok)
        s->rinfo.kept++;
    else
        s->rinfo.refused++;
    lock_release(&s->lock);
    return ok;
}

void
nvs_reattach_done(struct nvs *s, struct nvs_reattach_info *out)
{
    lock_acquire(&s->lock);
    for (uint32_t i = 0; i < s->nsegs; i++) {
        struct nvs_seg *g = &s->seg[i];
        if (g->state != NVS_SEG_SEALED)
            continue;
        uint64_t live = g->dead, nlive = g->ndead;
        if (nlive == 0) {
            /* nothing kept: free now, at a generation no locator holds */
            uint32_t gen = nvs_gen_next(
                s, atomic_load_explicit(&g->gen, memory_order_relaxed));
            atomic_store_explicit(&g->gen, gen, memory_order_release);
            g->used = g->dead = g->nrec = g->ndead = 0;
            g->wend = 0;
            g->state = NVS_SEG_FREE;
            s->rinfo.segs_freed++;
            continue;
        }
        g->used = MAX(g->used, live);
        g->nrec = MAX(g->nrec, nlive);
        g->dead = g->used - live;
        g->ndead = g->nrec - nlive;
    }
    if (out)
        *out = s->rinfo;
    lock_release(&s->lock);
}

/*
 * Compaction of the NVMe store: the sealed segment with the largest share
 * of dead bytes is read back in steps of whole write buffers (extents,
 * tier/nvs_layout.h); each extent is found by its footer and walked by its
 * directory, the records the engine still wants are appended again, and
 * the segment is freed. An extent whose footer or directory is damaged is
 * skipped: its records are lost (counted in objects_lost and read_badcrc),
 * never handed to keep().
 *
 * Concurrency:
 *   s->comp_*        the cursor: read and written under s->lock, and only
 *                    by the maintenance thread (the one caller of
 *                    nvs_compact_step), so it may use the values it read
 *                    after releasing the lock
 *   s->comp_buf      the maintenance thread's alone
 *   the segment      COMPACTING while the cursor is on it, so it is neither
 *                    reclaimed nor reopened until compaction frees it
 *   callbacks        run with no store lock held (they may take engine
 *                    locks and call nvs_append, nvs_loc_live, ...)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "src/base/compiler.h"
#include "src/base/log.h"
#include "tier/nvs_int.h"
#include "tier/nvs_layout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NVS_NONE UINT32_MAX

/* Choose a segment and put the cursor on it. Locks: s->lock held. */
static bool
compact_pick_locked(struct nvs *s, double max_frag)
{
    uint32_t best = NVS_NONE;
    double best_frag = 0;

    /* With two segments the open one could not take the moved records
     * without reclaiming the one being compacted: nothing to gain. */
    if (s->nsegs < 3)
        return false;

    for (uint32_t i = 0; i < s->nsegs; i++) {
        const struct nvs_seg *g = &s->seg[i];
        if (g->state != NVS_SEG_SEALED || g->pending != 0 || g->used == 0)
            continue;
        double frag = (double)g->dead / (double)g->used;
        if (frag >= max_frag && (best == NVS_NONE || frag > best_frag)) {
            best = i;
            best_frag = frag;
        }
    }
    if (best == NVS_NONE)
        return false;
    s->seg[best].state = NVS_SEG_COMPACTING;
    s->comp_seg = best;
    s->comp_gen = atomic_load_explicit(&s->seg[best].gen, memory_order_relaxed);
    s->comp_off = s->comp_scan = 0; /* the first extent holds the header */
    s->comp_idx = 0;
    s->comp_seen = 0;
    s->comp_end = s->seg[best].wend;
    return true;
}

/* Before a compacted segment is freed, zero its header block on the
 * medium: a restart then does not take it back (tier/nvs_reattach.c), so
 * the records compaction let go, whose headers the engine drops only when
 * it reads them, stay gone. A failed write is harmless: their values are
 * still there, CRC-checked, and the latest of their keys. Context: the
 * maintenance thread, the segment COMPACTING (no writer touches it). */
static void
compact_forget(struct nvs *s, uint32_t seg)
{
    const struct nvs_seg *g = &s->seg[seg];
    memset(s->comp_buf, 0, NVS_SEG_HDR_SIZE);
    (void)nvs_io_pwrite_all(s->fd[g->path], s->comp_buf, NVS_SEG_HDR_SIZE,
                            g->foff);
}

/* The cursor reached the end: free the segment. */
static void
compact_finish(struct nvs *s)
{
    lock_acquire(&s->lock);
    struct nvs_seg *g = &s->seg[s->comp_seg];
    uint32_t gen =
        nvs_gen_next(s, atomic_load_explicit(&g->gen, memory_order_relaxed));
    /* Pairs with the acquire load in nvs_loc_live(). */
    atomic_store_explicit(&g->gen, gen, memory_order_release);
    /* records of extents whose footer or directory was damaged */
    s->objects_lost += g->nrec - MIN(s->comp_seen, g->nrec);
    g->used = g->dead = g->nrec = g->ndead = 0;
    g->wend = 0;
    g->state = NVS_SEG_FREE;
    s->comp_seg = NVS_NONE;
    s->compact_runs++;
    lock_release(&s->lock);
}

/* Read [start, start + len) of the cursor's segment into comp_buf. */
static int
compact_read(struct nvs *s, uint32_t start, uint32_t len)
{
    struct nvs_loc at = {.seg = s->comp_seg, .off = start};
    int r = nvs_io_pread_all(nvs_loc_fd(s, &at), s->comp_buf, len,
                             nvs_loc_foff(s, &at));

    if (r < 0)
        return r;
    return (uint32_t)r < len ? -EIO : 0;
}

/* Whether the footer at p, the last bytes of the block ending at segment
 * offset end, belongs to an extent of generation gen starting at or after
 * lo and ending at end, with its directory inside it. */
static bool
compact_footer_ok(const struct nvs *s, const char *p, uint32_t gen, uint32_t lo,
                  uint32_t end, struct nvs_wbuf_footer *f)
{
    memcpy(f, p, sizeof(*f));
    if (f->magic != NVS_FOOT_MAGIC || f->gen != gen)
        return false;
    if (nvs_crc32c(0, f, offsetof(struct nvs_wbuf_footer, crc)) != f->crc)
        return false;
    return f->start % NVS_BLOCK == 0 && f->start >= lo && f->len > 0 &&
           f->len <= s->cfg.wbuf_size && (uint64_t)f->start + f->len == end &&
           f->dir_off >= f->start &&
           (uint64_t)f->dir_off + f->dir_len <= end - sizeof(*f);
}

static void
compact_count_bad(struct nvs *s)
{
    atomic_fetch_add_explicit(&s->read_badcrc, 1, memory_order_relaxed);
}

static void
compact_count(struct nvs *s, uint64_t *ctr)
{
    lock_acquire(&s->lock);
    (*ctr)++;
    lock_release(&s->lock);
}

/* Walk the directory of the extent f (its bytes at ext, which starts at
 * segment offset f->start) from entry *idx on. Returns records moved; *idx
 * is UINT32_MAX when the extent is done, else the record to resume at (the
 * flash is behind: an append returned -EAGAIN). A damaged directory counts
 * as one bad read and ends the walk; a valid one adds its entries to
 * *seen. */
static int
compact_extent(struct nvs *s, uint32_t seg, uint32_t gen, const char *ext,
               const struct nvs_wbuf_footer *f, uint32_t *idx, uint64_t *seen,
               nvs_keep_fn *keep, nvs_moved_fn *moved, void *arg)
{
    const char *dir = ext + (f->dir_off - f->start);
    uint32_t vlo = MAX(f->start, NVS_SEG_HDR_SIZE);
    int nmoved = 0;

    if (nvs_crc32c(0, dir, f->dir_len) != f->dir_crc) {
        compact_count_bad(s);
        *idx = UINT32_MAX;
        return 0;
    }
    uint32_t pos = 0;
    for (uint32_t i = 0; i < f->nrec; i++) {
        struct nvs_rec_desc d;
        if (pos + sizeof(d) > f->dir_len) {
            compact_count_bad(s);
            break;
        }
        memcpy(&d, dir + pos, sizeof(d));
        uint32_t ds = nvs_desc_size(d.klen);
        if (d.magic != NVS_DESC_MAGIC || d.gen != gen ||
            pos + ds > f->dir_len || d.voff < vlo ||
            (uint64_t)d.voff + d.vlen > f->dir_off) {
            compact_count_bad(s); /* a CRC-clean but impossible entry */
            break;
        }
        const char *key = dir + pos + sizeof(d);
        const char *val = ext + (d.voff - f->start);
        pos += ds;
        if (i < *idx)
            continue; /* done in an earlier step */
        if (nvs_crc32c(nvs_crc32c(0, key, d.klen), val, d.vlen) != d.crc) {
            compact_count_bad(s);
            continue;
        }
        struct nvs_loc old = {.seg = seg,
                              .gen = gen,
                              .off = d.voff,
                              .vlen = d.vlen,
                              .crc = d.crc};
        if (!keep(arg, key, d.klen, &old)) {
            compact_count(s, &s->compact_skipped);
            continue;
        }
        struct iovec iov = {.iov_base = (void *)val, .iov_len = d.vlen};
        struct nvs_loc nl;
        int r = nvs_append(s, key, d.klen, &iov, 1, &nl);
        if (r == -EAGAIN) {
            *idx = i; /* the flash is behind: resume at this record */
            return nmoved;
        }
        if (r < 0) {
            compact_count(s, &s->compact_skipped);
            continue;
        }
        moved(arg, key, d.klen, &old, &nl);
        nmoved++;
        compact_count(s, &s->compact_rescues);
    }
    *seen += f->nrec;
    *idx = UINT32_MAX;
    return nmoved;
}

int
nvs_compact_step(struct nvs *s, double max_frag, uint64_t budget,
                 nvs_keep_fn *keep, nvs_moved_fn *moved, void *arg)
{
    int nmoved = 0;

    if (s->comp_buf == NULL &&
        posix_memalign((void **)&s->comp_buf, NVS_BLOCK, s->cfg.wbuf_size))
        return -ENOMEM;
    lock_acquire(&s->lock);
    if (s->comp_seg == NVS_NONE && !compact_pick_locked(s, max_frag)) {
        lock_release(&s->lock);
        return 0;
    }
    uint32_t seg = s->comp_seg, gen = s->comp_gen;
    uint32_t off = s->comp_off, end = s->comp_end, idx = s->comp_idx;
    uint32_t w = s->comp_scan;
    uint64_t seen = s->comp_seen;
    lock_release(&s->lock);

    /* off: the first byte not accounted for (an extent start, or the start
     * of a damaged stretch); w: where the next read starts. An extent is at
     * most one write buffer, so one read from its start holds it whole. */
    uint64_t got = 0;
    bool behind = false;
    int err = 0;
    while (off < end && !behind && (got == 0 || got < budget)) {
        uint32_t len = MIN(s->cfg.wbuf_size, end - w);
        int r = compact_read(s, w, len);
        if (r < 0) {
            /* keep the cursor: the extents done stay done */
            if (nvs_log_first(s, NVS_LOGGED_COMPACT))
                log_error("nvs: compaction read of segment %u failed: %s "
                          "(later compaction read errors are not logged)",
                          seg, strerror(-r));
            err = r;
            break;
        }
        got += len;
        bool reread = false;
        for (uint32_t e = MAX(w, off) + NVS_BLOCK; e <= w + len;
             e += NVS_BLOCK) {
            struct nvs_wbuf_footer f;
            const char *p = s->comp_buf + (e - w) - sizeof(f);
            if (!compact_footer_ok(s, p, gen, off, e, &f))
                continue;
            if (f.start > off) {
                compact_count_bad(s); /* [off, f.start) is lost */
                off = f.start;
                idx = 0;
            }
            if (f.start < w) {
                reread = true; /* begins before this read */
                break;
            }
            nmoved += compact_extent(s, seg, gen, s->comp_buf + (f.start - w),
                                     &f, &idx, &seen, keep, moved, arg);
            if (idx != UINT32_MAX) {
                behind = true;
                break;
            }
            off = e;
            idx = 0;
        }
        if (behind || reread || off >= w + len)
            w = off;
        else if (w + len >= end) {
            compact_count_bad(s); /* no valid footer after off: lost */
            off = end;
        } else if (off > w)
            w = off; /* the extent at off is cut by this read */
        else
            w += len; /* the extent at off is damaged: look further on */
    }
    lock_acquire(&s->lock);
    s->comp_off = off;
    s->comp_scan = w;
    s->comp_idx = idx;
    s->comp_seen = seen;
    lock_release(&s->lock);
    if (err < 0)
        return nmoved > 0 ? nmoved : err;
    if (off >= end) {
        compact_forget(s, seg);
        compact_finish(s);
    }
    return nmoved;
}

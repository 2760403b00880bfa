/*
 * Compaction of the NVMe store: the sealed segment with the largest share
 * of dead bytes is read back in budget-sized steps; the records the engine
 * still wants are appended again and the segment is freed.
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
    s->comp_off = NVS_SEG_HDR_SIZE;
    s->comp_end = s->seg[best].wend;
    return true;
}

/* The cursor reached the end: free the segment. */
static void
compact_finish(struct nvs *s)
{
    lock_acquire(&s->lock);
    struct nvs_seg *g = &s->seg[s->comp_seg];
    uint32_t gen = atomic_load_explicit(&g->gen, memory_order_relaxed) + 1;
    /* Pairs with the acquire load in nvs_loc_live(). */
    atomic_store_explicit(&g->gen, gen == 0 ? 1 : gen, memory_order_release);
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
    uint32_t off = s->comp_off, end = s->comp_end;
    lock_release(&s->lock);

    /* One read of at most a write buffer always holds a whole record. */
    uint32_t start = off & ~(NVS_BLOCK - 1);
    uint64_t want = ALIGN_UP(MAX(budget, (uint64_t)NVS_BLOCK), NVS_BLOCK);
    uint32_t len = (uint32_t)MIN(want, (uint64_t)s->cfg.wbuf_size);
    bool again = true;
    uint32_t p = off;

    while (again) {
        again = false;
        len = MIN(len, end - start);
        int r = len == 0 ? 0 : compact_read(s, start, len);
        if (r < 0) {
            log_error("nvs: compaction read of segment %u failed: %s", seg,
                      strerror(-r));
            return r;
        }
        uint32_t stop = start + len;
        while (p + sizeof(struct nvs_rec_header) <= stop) {
            struct nvs_rec_header h;
            memcpy(&h, s->comp_buf + (p - start), sizeof(h));
            if (h.magic != NVS_REC_MAGIC || h.gen != gen) {
                p = (uint32_t)ALIGN_UP(p + 1, NVS_BLOCK); /* a buffer's tail */
                continue;
            }
            uint64_t rec = nvs_rec_size(h.klen, h.vlen);
            if (p + rec > stop) {
                if (stop < end && p == off && len < s->cfg.wbuf_size) {
                    len = s->cfg.wbuf_size; /* budget below one record */
                    again = true;
                    break;
                }
                if (stop < end && p != off)
                    break; /* the rest at the next step */
                /* cannot be a whole record: skip the block */
                p = (uint32_t)ALIGN_UP(p + 1, NVS_BLOCK);
                continue;
            }
            const char *key = s->comp_buf + (p - start) + sizeof(h);
            if (nvs_crc32c(0, key, (uint64_t)h.klen + h.vlen) != h.crc) {
                atomic_fetch_add_explicit(&s->read_badcrc, 1,
                                          memory_order_relaxed);
                p += (uint32_t)rec;
                continue;
            }
            struct nvs_loc old = {
                .seg = seg, .gen = gen, .off = p, .vlen = h.vlen, .crc = h.crc};
            if (!keep(arg, key, h.klen, &old)) {
                lock_acquire(&s->lock);
                s->compact_skipped++;
                lock_release(&s->lock);
                p += (uint32_t)rec;
                continue;
            }
            struct iovec iov = {.iov_base = (void *)(key + h.klen),
                                .iov_len = h.vlen};
            struct nvs_loc nl;
            r = nvs_append(s, key, h.klen, &iov, 1, &nl);
            if (r == -EAGAIN) {
                /* the flash is behind: resume at this record next time */
                lock_acquire(&s->lock);
                s->comp_off = p;
                lock_release(&s->lock);
                return nmoved;
            }
            if (r < 0) {
                lock_acquire(&s->lock);
                s->compact_skipped++;
                lock_release(&s->lock);
            } else {
                moved(arg, key, h.klen, &old, &nl);
                nmoved++;
                lock_acquire(&s->lock);
                s->compact_rescues++;
                lock_release(&s->lock);
            }
            p += (uint32_t)rec;
        }
    }
    if (p >= end) {
        compact_finish(s);
    } else {
        lock_acquire(&s->lock);
        s->comp_off = p;
        lock_release(&s->lock);
    }
    return nmoved;
}

/*
 * The NVMe segment store: opening the paths, segments, write buffers and
 * their writer thread, reclaim, dead-byte accounting. Reads are in
 * tier/nvs_ring.c, compaction in tier/nvs_compact.c, the pread/pwrite
 * fallback in tier/nvs_io.c, figures and nvs_check() in tier/nvs_stats.c,
 * CRC32C in tier/nvs_crc.c; the on-medium layout in tier/nvs_layout.h.
 *
 * Concurrency (see tier/nvs_int.h for the whole picture):
 *   s->lock          segment table, write buffer states, s->cur, open_seg,
 *                    wpos, writer queue, (L) counters. Held for DRAM
 *                    bookkeeping only: the record copy in nvs_append() and
 *                    every write happen outside it.
 *   seg->gen         stored (release) under s->lock when a segment is
 *                    reclaimed or freed; loaded (acquire) without a lock by
 *                    nvs_loc_live(), which pairs with that store
 *   wbuf->refs       acq_rel: the appender's copy happens before the
 *                    writer's write; whoever drops it to 0 on a sealed
 *                    buffer queues it (under s->lock)
 *   writer thread    owns a QUEUED buffer once it set it WRITING; gives it
 *                    back (FREE) under s->lock and signals s->dcond
 *   lock order       s->lock is a leaf; no callback runs under it
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* fallocate(), O_DIRECT */
#endif

#include "tier/nvs.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "tier/nvs_int.h"
#include "tier/nvs_layout.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define NVS_DEF_SEG (64u << 20)
#define NVS_DEF_WBUF (4u << 20)
#define NVS_DEF_NWBUF 4u
#define NVS_DEF_IO_THREADS 2u
#define NVS_NONE UINT32_MAX
#define NVS_WRITER_DEPTH 64 /* at most nwbuf writes in flight */

/* ---- locators ------------------------------------------------------------ */

bool
nvs_loc_live(const struct nvs *s, const struct nvs_loc *loc)
{
    if (loc->seg >= s->nsegs)
        return false;
    /* Pairs with the release store in seg_bump_gen_locked(). */
    return atomic_load_explicit(&s->seg[loc->seg].gen, memory_order_acquire) ==
           loc->gen;
}

uint64_t
nvs_loc_foff(const struct nvs *s, const struct nvs_loc *loc)
{
    return s->seg[loc->seg].foff + loc->off;
}

int
nvs_loc_fd(const struct nvs *s, const struct nvs_loc *loc)
{
    return s->fd[s->seg[loc->seg].path];
}

unsigned
nvs_loc_path(const struct nvs *s, const struct nvs_loc *loc)
{
    return s->seg[loc->seg].path;
}

/* ---- segments (s->lock held) --------------------------------------------- */

static void
seg_bump_gen_locked(struct nvs *s, struct nvs_seg *g)
{
    uint32_t gen =
        nvs_gen_next(s, atomic_load_explicit(&g->gen, memory_order_relaxed));

    /* Pairs with the acquire load in nvs_loc_live(). */
    atomic_store_explicit(&g->gen, gen, memory_order_release);
}

static void
seg_reset_locked(struct nvs_seg *g)
{
    g->used = g->dead = g->nrec = g->ndead = 0;
    g->wend = 0;
}

/* A segment to open: the lowest free one, else the oldest sealed one with
 * no write pending (reclaimed: its generation moves on, its records are
 * lost). NVS_NONE when there is none. */
static uint32_t
seg_take_locked(struct nvs *s)
{
    uint32_t best = NVS_NONE;

    for (uint32_t i = 0; i < s->nsegs; i++)
        if (s->seg[i].state == NVS_SEG_FREE)
            return i;
    for (uint32_t i = 0; i < s->nsegs; i++) {
        struct nvs_seg *g = &s->seg[i];
        if (g->state == NVS_SEG_SEALED && g->pending == 0 &&
            (best == NVS_NONE || g->seal_seq < s->seg[best].seal_seq))
            best = i;
    }
    if (best != NVS_NONE) {
        struct nvs_seg *g = &s->seg[best];
        s->page_reclaims++;
        s->objects_lost += g->nrec - MIN(g->ndead, g->nrec);
        seg_bump_gen_locked(s, g);
        seg_reset_locked(g);
        g->state = NVS_SEG_FREE;
    }
    return best;
}

/* ---- write buffers ------------------------------------------------------- */

static void
wbuf_queue_locked(struct nvs *s, struct nvs_wbuf *w)
{
    w->state = NVS_WB_QUEUED;
    w->next = NULL;
    if (s->wq_tail != NULL)
        s->wq_tail->next = w;
    else
        s->wq_head = w;
    s->wq_tail = w;
    pthread_cond_signal(&s->wcond);
}

/* Drop one reference to w; the last one on a sealed buffer queues it.
 * Locks: s->lock held when locked is true, taken otherwise if needed. */
static void
wbuf_unref(struct nvs *s, struct nvs_wbuf *w, bool locked)
{
    /* acq_rel: this thread's copy into w happens before the writer reads
     * it; pairs with the same operation of the other copiers. */
    if (atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (!locked)
        lock_acquire(&s->lock);
    wbuf_queue_locked(s, w);
    if (!locked)
        lock_release(&s->lock);
}

/* Seal s->cur: no more reservations; its extent (values, directory,
 * footer) ends at a block boundary, where the next buffer starts. */
static void
wbuf_seal_cur_locked(struct nvs *s)
{
    struct nvs_wbuf *w = s->cur;

    if (w == NULL)
        return;
    s->cur = NULL;
    w->len = (uint32_t)ALIGN_UP((uint64_t)w->vend + w->dlen +
                                    sizeof(struct nvs_wbuf_footer),
                                NVS_BLOCK);
    s->wpos = w->seg_off + w->len;
    w->state = NVS_WB_SEALED;
    wbuf_unref(s, w, true);
}

static struct nvs_wbuf *
wbuf_find_free_locked(struct nvs *s)
{
    for (unsigned i = 0; i < s->cfg.nwbuf; i++)
        if (s->wb[i].state == NVS_WB_FREE)
            return &s->wb[i];
    return NULL;
}

/* Make s->cur a buffer with room for a record that needs rec bytes in an
 * empty buffer (value, descriptor, footer): seal the current one, open a
 * new segment when this one cannot take the record. -EAGAIN when no buffer
 * or no segment is available right now. */
static int
wbuf_next_locked(struct nvs *s, uint64_t rec)
{
    struct nvs_wbuf *w = wbuf_find_free_locked(s);

    if (w == NULL)
        return -EAGAIN;
    wbuf_seal_cur_locked(s);
    if (s->open_seg == NVS_NONE || s->wpos + rec > s->cfg.seg_size) {
        uint32_t n = seg_take_locked(s);
        if (n == NVS_NONE)
            return -EAGAIN;
        if (s->open_seg != NVS_NONE) {
            s->seg[s->open_seg].state = NVS_SEG_SEALED;
            s->seg[s->open_seg].seal_seq = ++s->seal_seq;
        }
        s->open_seg = n;
        s->seg[n].state = NVS_SEG_OPEN;
        s->wpos = 0;
    }
    struct nvs_seg *g = &s->seg[s->open_seg];
    w->seg = s->open_seg;
    w->gen = atomic_load_explicit(&g->gen, memory_order_relaxed);
    w->seg_off = s->wpos;
    w->cap = MIN(s->cfg.wbuf_size, s->cfg.seg_size - s->wpos);
    w->vend = w->dlen = w->nrec = w->len = 0;
    if (s->wpos == 0) {
        struct nvs_seg_header h = {
            .magic = NVS_SEG_MAGIC,
            .version = NVS_LAYOUT_VERSION,
            .seg = w->seg,
            .gen = w->gen,
            .seg_size = s->cfg.seg_size,
            .opened_unix = clock_now(),
        };
        h.crc = nvs_crc32c(0, &h, offsetof(struct nvs_seg_header, crc));
        memset(w->buf, 0, NVS_SEG_HDR_SIZE);
        memcpy(w->buf, &h, sizeof(h));
        w->vend = NVS_SEG_HDR_SIZE;
    }
    atomic_store_explicit(&w->refs, 1, memory_order_relaxed);
    w->state = NVS_WB_FILLING;
    g->pending++;
    s->cur = w;
    return 0;
}

/* Reserve room for a value of vlen bytes and a descriptor of ds bytes in
 * w: the value's offset in the buffer, or UINT32_MAX when they do not fit.
 * The value goes where nvs_val_place() says, or packed tightly when the
 * padding would not fit. Locks: s->lock held. */
static uint32_t
wbuf_reserve_locked(struct nvs_wbuf *w, uint64_t vlen, uint32_t ds)
{
    uint64_t tail = (uint64_t)w->dlen + ds + sizeof(struct nvs_wbuf_footer);
    uint64_t p =
        nvs_val_place((uint64_t)w->seg_off + w->vend, vlen) - w->seg_off;

    if (p + vlen + tail > w->cap)
        p = w->vend;
    if (p + vlen + tail > w->cap)
        return UINT32_MAX;
    w->vend = (uint32_t)(p + vlen);
    w->dlen += ds;
    w->nrec++;
    return (uint32_t)p;
}

int
nvs_append(struct nvs *s, const void *key, uint8_t klen,
           const struct iovec *val, int niov, struct nvs_loc *out)
{
    uint64_t vlen = 0;
    uint32_t crc = nvs_crc32c(0, key, klen);

    for (int i = 0; i < niov; i++) {
        vlen += val[i].iov_len;
        crc = nvs_crc32c(crc, val[i].iov_base, val[i].iov_len);
    }
    uint32_t ds = nvs_desc_size(klen);
    uint64_t rec = vlen + ds + sizeof(struct nvs_wbuf_footer);
    if (vlen > s->cfg.wbuf_size || rec > s->cfg.wbuf_size - NVS_SEG_HDR_SIZE)
        return -E2BIG;

    lock_acquire(&s->lock);
    struct nvs_wbuf *w = s->cur;
    uint32_t gap = w != NULL ? w->vend : 0;
    uint32_t off = w != NULL ? wbuf_reserve_locked(w, vlen, ds) : UINT32_MAX;
    if (off == UINT32_MAX) {
        int r = wbuf_next_locked(s, rec);
        if (r < 0) {
            lock_release(&s->lock);
            atomic_fetch_add_explicit(&s->append_busy, 1, memory_order_relaxed);
            return r;
        }
        w = s->cur;
        gap = w->vend;
        off = wbuf_reserve_locked(w, vlen, ds);
        /* an empty buffer takes any record below the E2BIG limit */
        assert(off != UINT32_MAX);
        if (off == UINT32_MAX) {
            lock_release(&s->lock);
            return -E2BIG;
        }
    }
    uint32_t doff = w->cap - w->dlen; /* this record's descriptor */
    atomic_fetch_add_explicit(&w->refs, 1, memory_order_relaxed);
    struct nvs_seg *g = &s->seg[w->seg];
    g->used += vlen + ds;
    g->nrec++;
    *out = (struct nvs_loc){
        .seg = w->seg,
        .gen = w->gen,
        .off = w->seg_off + off,
        .vlen = (uint32_t)vlen,
        .crc = crc,
    };
    lock_release(&s->lock);

    /* The reserved ranges are this thread's alone until the unref. */
    char *p = w->buf + gap;
    memset(p, 0, off - gap); /* padding before a block-placed value */
    p = w->buf + off;
    for (int i = 0; i < niov; i++) {
        memcpy(p, val[i].iov_base, val[i].iov_len);
        p += val[i].iov_len;
    }
    struct nvs_rec_desc d = {
        .magic = NVS_DESC_MAGIC,
        .gen = out->gen,
        .voff = out->off,
        .vlen = (uint32_t)vlen,
        .crc = crc,
        .klen = klen,
    };
    p = w->buf + doff;
    memcpy(p, &d, sizeof(d));
    memcpy(p + sizeof(d), key, klen);
    memset(p + sizeof(d) + klen, 0, ds - sizeof(d) - klen);
    atomic_fetch_add_explicit(&s->objects_written, 1, memory_order_relaxed);
    wbuf_unref(s, w, false);
    return 0;
}

bool
nvs_wbuf_copy(struct nvs *s, const struct nvs_loc *loc, void *dst)
{
    bool found = false;

    lock_acquire(&s->lock);
    for (unsigned i = 0; i < s->cfg.nwbuf && !found; i++) {
        struct nvs_wbuf *w = &s->wb[i];
        if (w->state == NVS_WB_FREE || w->seg != loc->seg ||
            w->gen != loc->gen || loc->off < w->seg_off ||
            (uint64_t)loc->off + loc->vlen > (uint64_t)w->seg_off + w->vend)
            continue;
        memcpy(dst, w->buf + (loc->off - w->seg_off), loc->vlen);
        found = true;
    }
    lock_release(&s->lock);
    return found;
}

/* Every buffer sealed so far is on the medium. Locks: s->lock held. */
static bool
wbuf_all_written_locked(struct nvs *s)
{
    for (unsigned i = 0; i < s->cfg.nwbuf; i++) {
        int st = s->wb[i].state;
        if (st == NVS_WB_SEALED || st == NVS_WB_QUEUED || st == NVS_WB_WRITING)
            return false;
    }
    return true;
}

int
nvs_flush(struct nvs *s)
{
    lock_acquire(&s->lock);
    if (s->cur != NULL && s->cur->nrec > 0)
        wbuf_seal_cur_locked(s);
    while (!wbuf_all_written_locked(s))
        pthread_cond_wait(&s->dcond, &s->lock.mutex);
    lock_release(&s->lock);
    return 0;
}

void
nvs_release(struct nvs *s, const struct nvs_loc *loc)
{
    if (loc->seg >= s->nsegs)
        return;
    lock_acquire(&s->lock);
    struct nvs_seg *g = &s->seg[loc->seg];
    /* a sealed, written segment holds nothing past wend: such a locator
     * (one a restart refused) was never counted */
    bool past = g->state == NVS_SEG_SEALED && g->pending == 0 &&
                (uint64_t)loc->off + loc->vlen > g->wend;
    if (atomic_load_explicit(&g->gen, memory_order_relaxed) == loc->gen &&
        g->state != NVS_SEG_FREE && !past) {
        /* The key length is not in the locator: count the value and a
         * descriptor without its key. */
        g->dead = MIN(g->used, g->dead + loc->vlen + nvs_desc_size(0));
        g->ndead++;
    }
    lock_release(&s->lock);
}

/* ---- the writer thread --------------------------------------------------- */

/* Lay out a sealed buffer's extent (tier/nvs_layout.h): move the directory
 * from the buffer's end to just before the footer, zero the gap after the
 * values, write the footer. Context: the writer, which owns the buffer
 * (WRITING); readers copy only value bytes, below w->vend. */
static void
wbuf_finish(struct nvs_wbuf *w)
{
    uint32_t foot = w->len - (uint32_t)sizeof(struct nvs_wbuf_footer);
    uint32_t dir = foot - w->dlen;

    memmove(w->buf + dir, w->buf + w->cap - w->dlen, w->dlen);
    memset(w->buf + w->vend, 0, dir - w->vend);
    struct nvs_wbuf_footer f = {
        .magic = NVS_FOOT_MAGIC,
        .gen = w->gen,
        .start = w->seg_off,
        .len = w->len,
        .dir_off = w->seg_off + dir,
        .dir_len = w->dlen,
        .nrec = w->nrec,
        .dir_crc = nvs_crc32c(0, w->buf + dir, w->dlen),
    };
    f.crc = nvs_crc32c(0, &f, offsetof(struct nvs_wbuf_footer, crc));
    memcpy(w->buf + foot, &f, sizeof(f));
}

/* A buffer goes out in pieces of NVS_WRITE_PIECE bytes, at most
 * NVS_WRITE_INFLIGHT of them in flight: one 4 MiB write holds the device
 * for milliseconds and the reads queued behind it wait (fio on this
 * machine's virtio disk, 4 KiB random reads at depth 4 beside 8 MB/s of
 * sequential writes: read p99 0.42 ms, p99.5 1.4 ms with 4 MiB writes;
 * 0.14 ms and 0.18 ms with 256 KiB ones). Smaller pieces let the reads in
 * between; a few in flight keep the write rate. (In the server on that disk,
 * neither 256 KiB pieces nor smaller ones moved the flash read p99 at 16
 * connections, where waiting for a CPU dominates: perf/RESULTS.md.) */
#define NVS_WRITE_PIECE (256u << 10)
#define NVS_WRITE_INFLIGHT 4

/* Queue the next piece of batch[*bi] at *boff; advance the cursor. */
static void
writer_prep_piece(struct nvs *s, struct nvs_wbuf **batch, unsigned *bi,
                  uint32_t *boff)
{
    struct nvs_wbuf *w = batch[*bi];
    uint32_t len = MIN(NVS_WRITE_PIECE, w->len - *boff);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->wring);
    struct nvs_loc at = {.seg = w->seg, .off = w->seg_off};
    io_uring_prep_write(sqe, nvs_loc_fd(s, &at), w->buf + *boff, len,
                        nvs_loc_foff(s, &at) + *boff);
    io_uring_sqe_set_data64(sqe, (uint64_t)*bi << 32 | *boff);
    *boff += len;
    if (*boff == w->len) {
        (*bi)++;
        *boff = 0;
    }
}

/* A piece completed with res: 0 or a negative errno (a short write is
 * finished with pwrite). */
static int
writer_piece_done(struct nvs *s, struct nvs_wbuf *w, uint32_t off, int res)
{
    uint32_t len = MIN(NVS_WRITE_PIECE, w->len - off);
    uint32_t every = atomic_load_explicit(&s->f_wshort, memory_order_relaxed);
    /* fault injection: taken as short at a block boundary (O_DIRECT's
     * short writes end on one, and the pwrite after must be aligned) */
    if (every && res == (int)len && len >= 8192 && ++s->f_wseq % every == 0)
        res = (int)(len / 2 & ~4095u);
    if (res == (int)len)
        return 0;
    if (res < 0)
        return res;
    atomic_fetch_add_explicit(&s->write_short, 1, memory_order_relaxed);
    return nvs_io_pwrite_all(
        s->fd[s->seg[w->seg].path], w->buf + off + res, len - (uint32_t)res,
        s->seg[w->seg].foff + w->seg_off + off + (uint32_t)res);
}

/* Write the batch through the writer's ring: res[i] becomes 0 or a
 * negative errno per buffer; it stays -EINPROGRESS for buffers the ring
 * did not finish (it failed: the caller writes those with pwrite). */
static int
writer_write_uring(struct nvs *s, struct nvs_wbuf **batch, unsigned n, int *res)
{
    unsigned left[NVS_WRITER_DEPTH], bi = 0, inflight = 0;
    int err[NVS_WRITER_DEPTH];
    uint32_t boff = 0;

    for (unsigned i = 0; i < n; i++) {
        left[i] = (batch[i]->len + NVS_WRITE_PIECE - 1) / NVS_WRITE_PIECE;
        err[i] = 0;
    }
    while ((bi < n && !s->wring_dead) || inflight > 0) {
        unsigned queued = 0;
        while (bi < n && !s->wring_dead &&
               inflight + queued < NVS_WRITE_INFLIGHT) {
            writer_prep_piece(s, batch, &bi, &boff);
            queued++;
        }
        while (queued > 0) {
            int r = io_uring_submit(&s->wring);
            if (r == -EINTR || r == -EAGAIN)
                continue;
            if (r <= 0) {
                /* The ring is unusable: the writer goes on with pwrite.
                 * The unsent entries stay queued, so the ring is never
                 * used again. */
                log_error("nvs: io_uring submit for the writer failed: %s",
                          strerror(-r));
                s->wring_dead = true;
                break;
            }
            inflight += (unsigned)r;
            queued -= MIN((unsigned)r, queued);
        }
        if (inflight == 0)
            break;
        struct io_uring_cqe *cqe;
        int e = io_uring_wait_cqe(&s->wring, &cqe);
        if (e == -EINTR)
            continue;
        if (e < 0)
            return e;
        uint64_t d = io_uring_cqe_get_data64(cqe);
        unsigned i = (unsigned)(d >> 32);
        int pr = writer_piece_done(s, batch[i], (uint32_t)d, cqe->res);
        io_uring_cqe_seen(&s->wring, cqe);
        inflight--;
        if (pr < 0 && !err[i])
            err[i] = pr;
        if (--left[i] == 0)
            res[i] = err[i];
    }
    return 0;
}

/* The write_delay_ms fault: wait that long before a batch, re-reading the
 * fault every millisecond, so that clearing it ends the wait. A test can
 * thus hold the writer (a long delay) exactly until it has seen what a
 * stalled flash does, whatever the machine's speed. */
static void
writer_fault_delay(struct nvs *s)
{
    uint64_t t0 = clock_nsec();
    for (;;) {
        uint32_t ms = atomic_load_explicit(&s->f_wdelay, memory_order_relaxed);
        if (ms == 0 || clock_nsec() - t0 >= (uint64_t)ms * 1000000)
            return;
        struct timespec ts = {.tv_nsec = 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Fault injection (write_eio_every): every Nth buffer is not written and
 * fails with -EIO, as on a full or failing device. Such buffers move to the
 * end of the batch; returns how many come before them (to be written). */
static unsigned
writer_inject_eio(struct nvs *s, struct nvs_wbuf **batch, unsigned n, int *res)
{
    uint32_t every = atomic_load_explicit(&s->f_weio, memory_order_relaxed);
    unsigned nw = n;

    if (!every)
        return n;
    for (unsigned i = 0; i < nw;) {
        if (++s->f_wbseq % every != 0) {
            i++;
            continue;
        }
        struct nvs_wbuf *w = batch[i];
        batch[i] = batch[--nw];
        batch[nw] = w;
        res[nw] = -EIO;
    }
    return nw;
}

static void *
writer_main(void *arg)
{
    struct nvs *s = arg;
    struct nvs_wbuf *batch[NVS_WRITER_DEPTH];
    int res[NVS_WRITER_DEPTH];

    pthread_setname_np(pthread_self(), "tc-nvs-write");
    lock_acquire(&s->lock);
    for (;;) {
        while (s->wq_head == NULL && !s->stop)
            pthread_cond_wait(&s->wcond, &s->lock.mutex);
        if (s->wq_head == NULL)
            break;
        unsigned n = 0;
        while (s->wq_head != NULL && n < ARRAY_SIZE(batch)) {
            struct nvs_wbuf *w = s->wq_head;
            s->wq_head = w->next;
            w->state = NVS_WB_WRITING;
            batch[n++] = w;
        }
        if (s->wq_head == NULL)
            s->wq_tail = NULL;
        lock_release(&s->lock);

        writer_fault_delay(s);
        for (unsigned i = 0; i < n; i++) {
            wbuf_finish(batch[i]);
            res[i] = -EINPROGRESS;
        }
        unsigned nw = writer_inject_eio(s, batch, n, res);
        int r = 0;
        if (s->uring && !s->wring_dead)
            r = writer_write_uring(s, batch, nw, res);
        for (unsigned i = 0; i < n; i++) {
            struct nvs_wbuf *w = batch[i];
            uint32_t len = w->len;
            if (res[i] == -EINPROGRESS) /* fallback, or the ring failed */
                res[i] =
                    nvs_io_pwrite_all(s->fd[s->seg[w->seg].path], w->buf, len,
                                      s->seg[w->seg].foff + w->seg_off);
            if (res[i] < 0) {
                /* its records read back as misses (their CRC fails) */
                atomic_fetch_add_explicit(&s->write_errors, 1,
                                          memory_order_relaxed);
                if (nvs_log_first(s, NVS_LOGGED_WRITE))
                    log_error("nvs: writing %u bytes to segment %u failed: "
                              "%s; its values are lost (misses), and later "
                              "write errors are only counted "
                              "(tc_ext_write_errors)",
                              len, w->seg, strerror(-res[i]));
            } else {
                atomic_fetch_add_explicit(&s->bytes_written, len,
                                          memory_order_relaxed);
            }
        }
        (void)r;

        lock_acquire(&s->lock);
        for (unsigned i = 0; i < n; i++) {
            struct nvs_wbuf *w = batch[i];
            struct nvs_seg *g = &s->seg[w->seg];
            g->pending--;
            g->wend = MAX(g->wend, w->seg_off + w->len);
            w->state = NVS_WB_FREE;
        }
        pthread_cond_broadcast(&s->dcond);
    }
    lock_release(&s->lock);
    return NULL;
}

/* ---- open and close ------------------------------------------------------ */

static void
nvs_config_defaults(struct nvs_config *c)
{
    if (c->seg_size == 0)
        c->seg_size = NVS_DEF_SEG;
    if (c->wbuf_size == 0)
        c->wbuf_size = MIN(NVS_DEF_WBUF, c->seg_size);
    if (c->nwbuf == 0)
        c->nwbuf = NVS_DEF_NWBUF;
    if (c->io_threads == 0)
        c->io_threads = NVS_DEF_IO_THREADS;
}

static int
nvs_check_config(const struct nvs_config *c)
{
    if (c->npaths == 0 || c->npaths > NVS_MAX_PATHS) {
        err_set("the NVMe store needs 1 to %d paths (got %u)", NVS_MAX_PATHS,
                c->npaths);
        return -EINVAL;
    }
    if (c->wbuf_size < 2 * NVS_BLOCK || c->wbuf_size % NVS_BLOCK != 0) {
        err_set("ext_wbuf_size %u is not a multiple of 4 KiB of at least "
                "8 KiB",
                c->wbuf_size);
        return -EINVAL;
    }
    if (c->seg_size % c->wbuf_size != 0) {
        err_set("ext_page_size %u is not a multiple of ext_wbuf_size %u",
                c->seg_size, c->wbuf_size);
        return -EINVAL;
    }
    if (c->nwbuf < 2 || c->nwbuf > 64) {
        err_set("the NVMe store needs 2 to 64 write buffers (got %u)",
                c->nwbuf);
        return -EINVAL;
    }
    for (unsigned i = 0; i < c->npaths; i++) {
        if (c->path[i] == NULL || c->path[i][0] == '\0') {
            err_set("NVMe store path %u is empty", i);
            return -EINVAL;
        }
        if (c->size[i] < c->seg_size) {
            err_set("%s: size %" PRIu64 " is below one segment of %u bytes",
                    c->path[i], c->size[i], c->seg_size);
            return -EINVAL;
        }
    }
    return 0;
}

/* Open one path: refuse tmpfs and paths without O_DIRECT, check the size
 * fits, fallocate a regular file. */
static int
nvs_open_path(struct nvs *s, unsigned i)
{
    const char *path = s->cfg.path[i];
    uint64_t size = s->cfg.size[i];
    struct stat st;
    bool existed = stat(path, &st) == 0;

    if (existed && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        err_set("%s: not a regular file or block device", path);
        return -EINVAL;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        if (e == EINVAL)
            err_set("%s: the file system refuses O_DIRECT; the NVMe store "
                    "needs a file on a disk or a block device",
                    path);
        else
            err_set("%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    s->fd[i] = fd;
    s->created[i] = !existed;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        err_set("%s: cannot stat: %s", path, strerror(e));
        return -e;
    }
    /* a device node's own file system (devtmpfs) says nothing of the
     * device: only a regular file can be on tmpfs */
    struct statfs fs;
    if (!S_ISBLK(st.st_mode) && fstatfs(fd, &fs) == 0 &&
        fs.f_type == TMPFS_MAGIC) {
        err_set("%s: is on tmpfs (memory, not flash); the NVMe store needs "
                "a file on a disk or a block device",
                path);
        return -EINVAL;
    }
    if (S_ISBLK(st.st_mode)) {
        uint64_t dev = 0;
        if (ioctl(fd, BLKGETSIZE64, &dev) < 0) {
            int e = errno;
            err_set("%s: cannot read the device size: %s", path, strerror(e));
            return -e;
        }
        if (dev < size) {
            err_set("%s: size %" PRIu64 " does not fit the device's %" PRIu64
                    " bytes",
                    path, size, dev);
            return -ENOSPC;
        }
        return 0;
    }
    struct statvfs vfs;
    if (fstatvfs(fd, &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        uint64_t have = (uint64_t)st.st_blocks * 512;
        if (size > have && size - have > avail) {
            err_set("%s: size %" PRIu64 " does not fit the %" PRIu64
                    " bytes free on its file system",
                    path, size, avail + have);
            return -ENOSPC;
        }
    }
    if (fallocate(fd, 0, 0, (off_t)size) < 0) {
        int e = errno;
        if (e == ENOSPC)
            err_set("%s: the disk is full (fallocate of %" PRIu64
                    " bytes failed)",
                    path, size);
        else
            err_set("%s: fallocate of %" PRIu64 " bytes failed: %s", path, size,
                    strerror(e));
        return -e;
    }
    return 0;
}

static void
nvs_free(struct nvs *s, bool unlink_created)
{
    for (unsigned i = 0; i < s->cfg.npaths; i++) {
        if (s->fd[i] >= 0)
            close(s->fd[i]);
        if (unlink_created && s->created[i])
            unlink(s->cfg.path[i]);
    }
    if (s->wb != NULL)
        for (unsigned i = 0; i < s->cfg.nwbuf; i++)
            free(s->wb[i].buf);
    free(s->wb);
    free(s->seg);
    free(s->comp_buf);
    free(s);
}

static int
nvs_setup_segments(struct nvs *s)
{
    uint64_t n = 0;

    for (unsigned i = 0; i < s->cfg.npaths; i++)
        n += s->cfg.size[i] / s->cfg.seg_size;
    if (n < 2 || n > UINT32_MAX / 2) {
        err_set("the NVMe store needs at least 2 segments of %u bytes "
                "(has %" PRIu64 ")",
                s->cfg.seg_size, n);
        return -EINVAL;
    }
    s->nsegs = (uint32_t)n;
    s->seg = calloc(n, sizeof(*s->seg));
    if (s->seg == NULL) {
        err_set("out of memory for %" PRIu64 " segment descriptors", n);
        return -ENOMEM;
    }
    /* Generations start from the clock so that records of an earlier run
     * never match a locator of this one (a reattached segment takes its
     * header's generation instead: tier/nvs_reattach.c). */
    uint64_t ns = clock_nsec() ^ ((uint64_t)time(NULL) << 32);
    uint32_t gen0 = (uint32_t)(ns ^ (ns >> 29)) * 2654435761u;
    s->gen_step = ((uint32_t)(ns >> 7) * 2246822519u) | 1u;
    uint32_t k = 0;
    for (unsigned i = 0; i < s->cfg.npaths; i++)
        for (uint64_t j = 0; j < s->cfg.size[i] / s->cfg.seg_size; j++) {
            struct nvs_seg *g = &s->seg[k];
            atomic_init(&g->gen, (gen0 + k) | 1u);
            g->path = (uint8_t)i;
            g->foff = j * s->cfg.seg_size;
            k++;
        }
    s->wb = calloc(s->cfg.nwbuf, sizeof(*s->wb));
    if (s->wb == NULL) {
        err_set("out of memory for the NVMe write buffers");
        return -ENOMEM;
    }
    for (unsigned i = 0; i < s->cfg.nwbuf; i++) {
        if (posix_memalign((void **)&s->wb[i].buf, NVS_BLOCK,
                           s->cfg.wbuf_size) != 0) {
            err_set("out of memory for %u write buffers of %u bytes",
                    s->cfg.nwbuf, s->cfg.wbuf_size);
            return -ENOMEM;
        }
        atomic_init(&s->wb[i].refs, 0);
    }
    return 0;
}

int
nvs_open(const struct nvs_config *cfg, struct nvs **out)
{
    struct nvs *s = calloc(1, sizeof(*s));
    int r;

    if (s == NULL) {
        err_set("out of memory for the NVMe store");
        return -ENOMEM;
    }
    s->cfg = *cfg;
    for (unsigned i = 0; i < NVS_MAX_PATHS; i++)
        s->fd[i] = -1;
    nvs_config_defaults(&s->cfg);
    if ((r = nvs_check_config(&s->cfg)) < 0)
        goto err_free;
    for (unsigned i = 0; i < s->cfg.npaths; i++)
        if ((r = nvs_open_path(s, i)) < 0)
            goto err_free;
    if ((r = nvs_setup_segments(s)) < 0)
        goto err_free;
    if (s->cfg.reattach && (r = nvs_reattach_scan(s)) < 0)
        goto err_free;
    s->open_seg = NVS_NONE;
    s->comp_seg = NVS_NONE;

    s->uring = !s->cfg.no_uring;
    if (s->uring) {
        r = io_uring_queue_init(NVS_WRITER_DEPTH, &s->wring, 0);
        if (r == -ENOSYS || r == -EPERM) {
            s->uring = false;
            nvs_io_log_fallback(strerror(-r));
        } else if (r < 0) {
            err_set("io_uring setup for the NVMe writer failed: %s",
                    strerror(-r));
            goto err_free;
        }
    }
    if ((r = nvs_io_setup(s)) < 0)
        goto err_ring;
    lock_init(&s->lock, LOCK_RANK_NVS);
    pthread_cond_init(&s->wcond, NULL);
    pthread_cond_init(&s->dcond, NULL);
    r = -pthread_create(&s->writer, NULL, writer_main, s);
    if (r < 0) {
        err_set("cannot start the NVMe writer thread: %s", strerror(-r));
        goto err_io;
    }
    *out = s;
    return 0;

err_io:
    pthread_cond_destroy(&s->wcond);
    pthread_cond_destroy(&s->dcond);
    lock_fini(&s->lock);
    nvs_io_teardown(s);
err_ring:
    if (s->uring)
        io_uring_queue_exit(&s->wring);
err_free:
    nvs_free(s, true);
    return r;
}

void
nvs_close(struct nvs *s)
{
    if (s == NULL)
        return;
    nvs_flush(s);
    lock_acquire(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wcond);
    lock_release(&s->lock);
    pthread_join(s->writer, NULL);
    nvs_io_teardown(s);
    if (s->uring)
        io_uring_queue_exit(&s->wring);
    pthread_cond_destroy(&s->wcond);
    pthread_cond_destroy(&s->dcond);
    lock_fini(&s->lock);
    nvs_free(s, false);
}

/*
 * Reads from the NVMe store: a per-thread struct nvs_ring over the
 * thread's own io_uring (or the fallback's pread pool, tier/nvs_io.c).
 * Each queued read owns a slot with a 4 KiB-aligned buffer; the read
 * covers only the 4 KiB blocks that hold the value (one block for a value
 * of up to 4 KiB placed within a block, tier/nvs_layout.h), and is checked
 * on completion against the locator (generation, then CRC32C of the
 * caller's key and the bytes read) before the value is handed out.
 *
 * CPU per read (io_uring): the store's files are registered with each ring
 * (IOSQE_FIXED_FILE: no file lookup and reference per read), and so is a
 * 4 KiB buffer per slot (read_fixed: no page pinning per read) that reads
 * of one block use; the eventfd is registered only once nvs_ring_fd() asks
 * for it (the kernel signals it at every completion batch otherwise for
 * nothing). Either registration may be refused (RLIMIT_MEMLOCK, an old
 * kernel): the ring then reads as before. The ring is set up with
 * COOP_TASKRUN (no interrupt of the thread per completion) where the
 * kernel has it. Bookkeeping is O(1) per read:
 * prepped slots are listed, in-flight reads with a deadline counted.
 *
 * On the caller's ring (nvs_ring_create_on: an event loop's io_uring, the
 * server's worker): no ring of its own; prep puts the SQE on the caller's
 * ring and the read is in flight from then (the caller may submit at any
 * time, e.g. to make room), the caller hands the completions to
 * nvs_ring_complete (ring_io_done, as for our own), and waits are the
 * caller's (ring_wait only sleeps briefly). Files and blocks are
 * registered there; nvs_ring_detach ends the loan.
 *
 * Concurrency:
 *   the caller's ring (ext) its owner's; used here only from the owner
 *                    thread, through the calls below
 *   struct nvs_ring  its owner only (asserted in debug builds): the
 *                    creating thread, or the one that adopted it once the
 *                    creator was gone (nvs_ring_adopt); except r->cdone,
 *                    which fallback pool threads push to under r->cmu
 *   a slot's buffer  the kernel's (or a pool thread's) from submit until
 *                    its completion arrives, even when the read timed out
 *                    (the slot is then ABANDONED, not reused, until then)
 *   store state      only through nvs_loc_live() (lock-free) and
 *                    nvs_wbuf_copy() (takes s->lock); counters are atomics
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "tier/nvs_int.h"
#include "tier/nvs_layout.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum nvs_slot_state {
    SLOT_FREE = 0,
    SLOT_PREPPED,   /* I/O queued, not submitted */
    SLOT_INFLIGHT,  /* I/O submitted */
    SLOT_READY,     /* result known, in the ready queue */
    SLOT_REAPED,    /* handed to the caller, until nvs_read_done */
    SLOT_ABANDONED, /* timed out; the I/O still owns the buffer */
};

struct nvs_slot {
    struct nvs_io_job job; /* fallback; first, see slot_of_job() */
    struct nvs_ring *ring;
    struct nvs_read *rd; /* NULL once abandoned */
    char *buf;
    uint32_t cap;  /* bytes of buf */
    char *io;      /* where this read goes: buf, or the slot's registered
                      block */
    uint32_t len;  /* bytes read: the value's aligned range */
    uint32_t skip; /* value offset in buf */
    uint32_t size; /* value bytes */
    int state;
    int res; /* the I/O's byte count or -errno */
    uint64_t t0, deadline;
    struct __kernel_timespec delay; /* injected delay (linked timeout) */
    struct nvs_slot *cnext;
    struct nvs_slot *pnext; /* the prepped list */
};

struct nvs_ring {
    struct nvs *s;
    unsigned depth;
    bool uring;
    int efd;
    struct io_uring ring;
    struct io_uring *io; /* where reads go: &ring, or the caller's (ext) */
    bool ext;            /* io is the caller's (nvs_ring_create_on) */
    bool detached;       /* the caller's ring is going away */
    uint64_t tag;        /* ext: user_data's high bits */
    struct nvs_slot *slot;
    unsigned *ready; /* FIFO of slot indexes, depth entries */
    unsigned rhead, rcount;
    unsigned nio;             /* slots INFLIGHT or ABANDONED */
    unsigned ninflight;       /* slots INFLIGHT */
    unsigned ndeadline;       /* slots INFLIGHT with a deadline */
    unsigned nprepped;        /* slots PREPPED */
    struct nvs_slot *prepped; /* slots PREPPED, newest first */
    bool fixed_files;         /* the store's fds are registered: index them */
    char *fixed_buf;          /* depth registered blocks (slot i: block i), or
                                 NULL */
    bool efd_registered;
    unsigned hint; /* where to look for a free slot */
    bool fd_used;  /* nvs_ring_fd() was called: reap drains efd */
    struct nvs_read *tout_head, *tout_tail; /* timed out, not yet reaped */
    pthread_t owner;
    pthread_mutex_t cmu;    /* fallback completions */
    struct nvs_slot *cdone; /* guarded by cmu */
};

#define ASSERT_OWNER(r) assert(pthread_equal((r)->owner, pthread_self()))

static void
ring_kick(struct nvs_ring *r)
{
    uint64_t one = 1;
    ssize_t n = write(r->efd, &one, sizeof(one));
    (void)n; /* EAGAIN: the counter is already non-zero */
}

static void
ring_ready_push(struct nvs_ring *r, struct nvs_slot *sl)
{
    sl->state = SLOT_READY;
    r->ready[(r->rhead + r->rcount) % r->depth] = (unsigned)(sl - r->slot);
    r->rcount++;
}

/* A fallback job finished on a pool thread. */
static void
ring_job_done(struct nvs_io_job *job)
{
    struct nvs_slot *sl = (struct nvs_slot *)job; /* job is the first member */
    struct nvs_ring *r = sl->ring;

    /* Kick under cmu: once the owner saw this completion (under cmu) it
     * may destroy the ring, so nothing of r is touched after the unlock. */
    pthread_mutex_lock(&r->cmu);
    sl->cnext = r->cdone;
    r->cdone = sl;
    ring_kick(r);
    pthread_mutex_unlock(&r->cmu);
}

static void
ring_free(struct nvs_ring *r)
{
    if (r->efd >= 0)
        close(r->efd);
    pthread_mutex_destroy(&r->cmu);
    free(r->slot);
    free(r->ready);
    free(r);
}

/* A ring's memory and eventfd: 0, or a negative errno (r freed). */
static int
ring_alloc(struct nvs *s, unsigned depth, struct nvs_ring **out)
{
    struct nvs_ring *r = calloc(1, sizeof(*r));

    if (r == NULL || depth == 0 || depth > 4096) {
        free(r);
        err_set("cannot create an NVMe read ring of depth %u", depth);
        return depth == 0 || depth > 4096 ? -EINVAL : -ENOMEM;
    }
    r->s = s;
    r->depth = depth;
    r->owner = pthread_self();
    r->io = &r->ring;
    pthread_mutex_init(&r->cmu, NULL);
    r->slot = calloc(depth, sizeof(*r->slot));
    r->ready = calloc(depth, sizeof(*r->ready));
    r->efd = -1;
    if (r->slot == NULL || r->ready == NULL) {
        err_set("out of memory for an NVMe read ring of depth %u", depth);
        ring_free(r);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < depth; i++)
        r->slot[i].ring = r;
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->efd < 0) {
        int e = -errno;
        err_set("cannot create an eventfd for an NVMe read ring: %s",
                strerror(-e));
        ring_free(r);
        return e;
    }
    *out = r;
    return 0;
}

/* Register the store's files and a block per slot with r->io: optional,
 * refused (RLIMIT_MEMLOCK, an old kernel, a table already there), the
 * ring reads with plain fds and buffers. */
static void
ring_register(struct nvs_ring *r)
{
    struct nvs *s = r->s;

    r->fixed_files = io_uring_register_files(r->io, s->fd, s->cfg.npaths) == 0;
    void *fb;
    if (posix_memalign(&fb, NVS_BLOCK, (size_t)r->depth * NVS_BLOCK) == 0) {
        struct iovec iov = {fb, (size_t)r->depth * NVS_BLOCK};
        if (io_uring_register_buffers(r->io, &iov, 1) == 0)
            r->fixed_buf = fb;
        else
            free(fb);
    }
}

int
nvs_ring_create(struct nvs *s, unsigned depth, struct nvs_ring **out)
{
    struct nvs_ring *r;
    int e = ring_alloc(s, depth, &r);

    if (e < 0)
        return e;
    r->uring = s->uring;
    if (r->uring) {
        /* Two entries per read: an injected delay is a linked timeout. */
        /* Completions are run when the thread enters the kernel anyway
         * (its next io_uring_enter, epoll_wait or read), not by
         * interrupting it; the flag tells liburing's peek when to enter
         * for them. Kernels before 5.19 refuse the flags: none then.
         * (SINGLE_ISSUER and DEFER_TASKRUN would tie reaping to the
         * creating thread, which nvs_ring_adopt must not.) */
        e = io_uring_queue_init(2 * depth, &r->ring,
                                IORING_SETUP_COOP_TASKRUN |
                                    IORING_SETUP_TASKRUN_FLAG);
        if (e == -EINVAL)
            e = io_uring_queue_init(2 * depth, &r->ring, 0);
        if (e == -ENOSYS || e == -EPERM) {
            err_set("io_uring refused for a read ring (%s) while the store "
                    "uses it",
                    strerror(-e));
            ring_free(r);
            return e;
        }
        if (e < 0) {
            err_set("io_uring setup for an NVMe read ring failed: %s",
                    strerror(-e));
            ring_free(r);
            return e;
        }
        ring_register(r);
    }
    *out = r;
    return 0;
}

int
nvs_ring_create_on(struct nvs *s, unsigned depth, struct io_uring *ext,
                   uint64_t tag, struct nvs_ring **out)
{
    struct nvs_ring *r;

    if (!s->uring) {
        err_set("the NVMe store reads without io_uring here");
        return -ENOTSUP;
    }
    if ((uint32_t)tag != 0) {
        err_set("an NVMe read ring's tag must leave the low 32 bits free");
        return -EINVAL;
    }
    int e = ring_alloc(s, depth, &r);
    if (e < 0)
        return e;
    r->uring = true;
    r->ext = true;
    r->io = ext;
    r->tag = tag;
    ring_register(r);
    *out = r;
    return 0;
}

int
nvs_ring_fd(const struct nvs_ring *cr)
{
    /* (The ring itself is never const: nvs_ring_create() allocated it.) */
    struct nvs_ring *r = (struct nvs_ring *)cr;
    if (r->ext) {
        err_set("an NVMe read ring on the caller's io_uring has no eventfd");
        return -EINVAL;
    }
    if (r->uring && !r->efd_registered) {
        int e = io_uring_register_eventfd(&r->ring, r->efd);
        if (e < 0) {
            err_set("io_uring eventfd registration failed: %s", strerror(-e));
            return e;
        }
        r->efd_registered = true;
        /* completions that came before it signalled nothing */
        if (r->nio > 0 || r->rcount > 0 || io_uring_cq_ready(&r->ring) > 0)
            ring_kick(r);
    }
    /* From now on reap drains the eventfd, so that a level-triggered epoll
     * does not wake for completions already collected. */
    r->fd_used = true;
    return r->efd;
}

/* ---- completion ---------------------------------------------------------- */

/* The first failed read of the store's life gets a log line (a damaged or
 * failing device would otherwise go unnoticed, or, logged every time,
 * flood the log); the others are counted only. got: as in ring_check. */
static void
ring_log_failure(struct nvs *s, const struct nvs_read *rd, int got,
                 uint32_t want)
{
    if (!nvs_log_first(s, NVS_LOGGED_READ))
        return;
    char why[64];
    if (got < 0)
        snprintf(why, sizeof(why), "%s", strerror(-got));
    else if ((uint32_t)got < want)
        snprintf(why, sizeof(why), "short read (%d of %u bytes)", got, want);
    else
        snprintf(why, sizeof(why), "checksum mismatch");
    log_error("nvs: a read of %u bytes at offset %u of segment %u failed: "
              "%s; such reads are misses, and later ones are only counted "
              "(get_aborted_extstore, badcrc_from_extstore)",
              rd->loc.vlen, rd->loc.off, rd->loc.seg, why);
}

/* Check the value in sl's buffer against rd's locator and key: 0 or the
 * read's error. got: bytes that arrived (or -errno); io: bytes read from
 * the device (0 when served from a write buffer). */
static int
ring_check(struct nvs *s, struct nvs_slot *sl, struct nvs_read *rd, int got,
           uint32_t io)
{
    if (got < 0 || (uint32_t)got < sl->skip + sl->size) {
        atomic_fetch_add_explicit(&s->read_ioerr, 1, memory_order_relaxed);
        ring_log_failure(s, rd, got, sl->skip + sl->size);
        return -EIO;
    }
    if (!nvs_loc_live(s, &rd->loc)) {
        atomic_fetch_add_explicit(&s->read_stale, 1, memory_order_relaxed);
        return -ESTALE;
    }
    const char *v = sl->io + sl->skip;
    uint32_t crc = nvs_crc32c(nvs_crc32c(0, rd->key, rd->klen), v, sl->size);
    if (crc != rd->loc.crc) {
        atomic_fetch_add_explicit(&s->read_badcrc, 1, memory_order_relaxed);
        ring_log_failure(s, rd, got, 0);
        return -EBADMSG;
    }
    rd->value = v;
    atomic_fetch_add_explicit(&s->bytes_read, io, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->objects_read, 1, memory_order_relaxed);
    return 0;
}

/* An I/O completed with res (bytes or -errno). */
static void
ring_io_done(struct nvs_ring *r, struct nvs_slot *sl, int res)
{
    struct nvs *s = r->s;

    r->nio--;
    if (sl->state == SLOT_ABANDONED) {
        sl->state = SLOT_FREE; /* the buffer is ours again */
        return;
    }
    r->ninflight--;
    if (sl->deadline != 0)
        r->ndeadline--;
    uint32_t eio = atomic_load_explicit(&s->f_eio, memory_order_relaxed);
    uint32_t shrt = atomic_load_explicit(&s->f_short, memory_order_relaxed);
    if (eio != 0 || shrt != 0) {
        uint64_t n =
            atomic_fetch_add_explicit(&s->f_seq, 1, memory_order_relaxed) + 1;
        if (eio != 0 && n % eio == 0)
            res = -EIO;
        else if (shrt != 0 && n % shrt == 0 && res > 0)
            res = (int)sl->skip + (int)sl->size / 2;
    }
    struct nvs_read *rd = sl->rd;
    rd->res = ring_check(s, sl, rd, res, sl->len);
    rd->lat_ns = clock_nsec() - sl->t0;
    nvs_hist_add(s, rd->lat_ns);
    ring_ready_push(r, sl);
}

static void
ring_harvest(struct nvs_ring *r)
{
    if (r->ext)
        return; /* completions come through nvs_ring_complete */
    if (r->uring) {
        struct io_uring_cqe *cqe;
        while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
            uint64_t ud = io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&r->ring, cqe);
            /* 0: an injected delay's timeout; above depth: liburing's own
             * wait timeout on kernels without IORING_FEAT_EXT_ARG */
            if (ud != 0 && ud <= r->depth)
                ring_io_done(r, &r->slot[ud - 1], res);
        }
        return;
    }
    pthread_mutex_lock(&r->cmu);
    struct nvs_slot *list = r->cdone;
    r->cdone = NULL;
    pthread_mutex_unlock(&r->cmu);
    while (list != NULL) {
        struct nvs_slot *sl = list;
        list = sl->cnext;
        ring_io_done(r, sl, sl->job.res);
    }
}

/* Complete reads past their deadline: the earliest remaining deadline,
 * or 0 when none is pending. */
static uint64_t
ring_expire(struct nvs_ring *r, uint64_t now)
{
    uint64_t next = 0;

    if (r->ndeadline == 0)
        return 0;
    for (unsigned i = 0; i < r->depth; i++) {
        struct nvs_slot *sl = &r->slot[i];
        if (sl->state != SLOT_INFLIGHT || sl->deadline == 0)
            continue; /* 0: no deadline */
        if (now >= sl->deadline) {
            struct nvs_read *rd = sl->rd;
            atomic_fetch_add_explicit(&r->s->read_timeout, 1,
                                      memory_order_relaxed);
            rd->res = -ETIMEDOUT;
            rd->lat_ns = now - sl->t0;
            rd->priv = NULL;
            sl->rd = NULL;
            sl->state = SLOT_ABANDONED;
            r->ninflight--;
            r->ndeadline--;
            /* The caller gets the read now; the slot waits for the I/O. */
            rd->next = NULL;
            if (r->tout_tail != NULL)
                r->tout_tail->next = rd;
            else
                r->tout_head = rd;
            r->tout_tail = rd;
            continue;
        }
        if (next == 0 || sl->deadline < next)
            next = sl->deadline;
    }
    return next;
}

/* ---- the public calls ---------------------------------------------------- */

/* sl's I/O is in flight from now: its deadline starts. */
static void
ring_start(struct nvs_ring *r, struct nvs_slot *sl, uint64_t now)
{
    uint32_t ms =
        sl->rd->timeout_ms ? sl->rd->timeout_ms : r->s->cfg.read_timeout_ms;
    sl->state = SLOT_INFLIGHT;
    sl->t0 = now;
    sl->deadline = ms ? now + (uint64_t)ms * 1000000ull : 0;
    r->nio++;
    r->ninflight++;
    r->ndeadline += sl->deadline != 0;
}

static int
slot_buf_reserve(struct nvs_slot *sl, uint32_t need)
{
    if (sl->cap >= need)
        return 0;
    void *p;
    uint32_t cap = (uint32_t)ALIGN_UP(need, 4 * NVS_BLOCK);
    if (posix_memalign(&p, NVS_BLOCK, cap) != 0)
        return -ENOMEM;
    free(sl->buf);
    sl->buf = p;
    sl->cap = cap;
    return 0;
}

int
nvs_read_prep(struct nvs_ring *r, struct nvs_read *rd)
{
    struct nvs *s = r->s;
    struct nvs_slot *sl = NULL;

    ASSERT_OWNER(r);
    if (r->detached)
        return -ENOTCONN;
    /* the caller's ring: room for the read's entries (and a delay's) */
    if (r->ext && io_uring_sq_space_left(r->io) < 2) {
        io_uring_submit(r->io);
        if (io_uring_sq_space_left(r->io) < 2)
            return -EBUSY;
    }
    for (unsigned k = 0; k < r->depth; k++) {
        unsigned i = (r->hint + k) % r->depth;
        if (r->slot[i].state == SLOT_FREE) {
            sl = &r->slot[i];
            r->hint = (i + 1) % r->depth;
            break;
        }
    }
    if (sl == NULL)
        return -EBUSY;

    rd->res = 0;
    rd->value = NULL;
    rd->lat_ns = 0;
    rd->priv = sl;
    rd->next = NULL;
    sl->rd = rd;
    sl->size = rd->loc.vlen;
    uint64_t end = (uint64_t)rd->loc.off + sl->size;

    if (!nvs_loc_live(s, &rd->loc)) {
        atomic_fetch_add_explicit(&s->read_stale, 1, memory_order_relaxed);
        rd->res = -ESTALE;
        goto ready;
    }
    if (sl->size > s->cfg.wbuf_size || end > s->cfg.seg_size ||
        rd->loc.off < NVS_SEG_HDR_SIZE) {
        atomic_fetch_add_explicit(&s->read_badcrc, 1, memory_order_relaxed);
        rd->res = -EBADMSG;
        goto ready;
    }
    uint64_t start = rd->loc.off & ~(uint64_t)(NVS_BLOCK - 1);
    sl->skip = (uint32_t)(rd->loc.off - start);
    sl->len = (uint32_t)(ALIGN_UP(end, NVS_BLOCK) - start);
    /* one block: the slot's registered block, where there is one */
    bool fixed = r->fixed_buf != NULL && sl->len <= NVS_BLOCK;
    if (fixed)
        sl->io = r->fixed_buf + (size_t)(sl - r->slot) * NVS_BLOCK;
    else if (slot_buf_reserve(sl, MAX(sl->len, NVS_BLOCK)) < 0) {
        rd->res = -ENOMEM;
        goto ready;
    } else
        sl->io = sl->buf;
    /* Still in a write buffer: served from DRAM, no I/O. An empty value
     * needs no I/O either: the CRC of the key says it all. */
    if (sl->size == 0 || nvs_wbuf_copy(s, &rd->loc, sl->io + sl->skip)) {
        rd->res = ring_check(s, sl, rd, (int)(sl->skip + sl->size), 0);
        goto ready;
    }

    int fd = nvs_loc_fd(s, &rd->loc);
    uint64_t foff = nvs_loc_foff(s, &rd->loc) - sl->skip;
    uint32_t delay = atomic_load_explicit(&s->f_delay, memory_order_relaxed);
    if (r->uring) {
        struct io_uring_sqe *sqe;
        if (delay > 0) {
            sl->delay.tv_sec = delay / 1000;
            sl->delay.tv_nsec = (long long)(delay % 1000) * 1000000;
            sqe = io_uring_get_sqe(r->io);
            io_uring_prep_timeout(sqe, &sl->delay, 0,
                                  IORING_TIMEOUT_ETIME_SUCCESS);
            io_uring_sqe_set_data64(sqe, r->tag); /* index 0: ignored */
            sqe->flags |= IOSQE_IO_LINK;
        }
        sqe = io_uring_get_sqe(r->io);
        /* never NULL: 2 entries per slot, consumed at submit (the
         * caller's ring: room checked above) */
        assert(sqe != NULL);
        if (fixed)
            io_uring_prep_read_fixed(sqe, 0, sl->io, sl->len, foff, 0);
        else
            io_uring_prep_read(sqe, 0, sl->io, sl->len, foff);
        if (r->fixed_files) {
            sqe->fd = (int)nvs_loc_path(s, &rd->loc);
            sqe->flags |= IOSQE_FIXED_FILE;
        } else
            sqe->fd = fd;
        io_uring_sqe_set_data64(sqe, r->tag | ((uint64_t)(sl - r->slot) + 1));
    } else {
        sl->job = (struct nvs_io_job){
            .fd = fd,
            .buf = sl->io,
            .len = sl->len,
            .delay_ms = delay,
            .foff = foff,
            .done = ring_job_done,
        };
    }
    if (r->ext) {
        /* On the caller's ring it is in flight now: its completion may
         * come before nvs_ring_submit (the caller may submit its ring to
         * make room). nvs_ring_submit only counts it. */
        ring_start(r, sl, clock_nsec());
        r->nprepped++;
        return 0;
    }
    sl->state = SLOT_PREPPED;
    sl->pnext = r->prepped;
    r->prepped = sl;
    r->nprepped++;
    return 0;

ready:
    ring_ready_push(r, sl);
    if (r->fd_used) /* else nobody waits on the fd: reap finds it */
        ring_kick(r);
    return 0;
}

int
nvs_ring_submit(struct nvs_ring *r)
{
    unsigned n = 0;
    uint64_t now = clock_nsec();

    ASSERT_OWNER(r);
    if (r->nprepped == 0)
        return 0;
    if (r->ext) { /* in flight since prep; the caller's enter sends them */
        n = r->nprepped;
        r->nprepped = 0;
        return (int)n;
    }
    if (r->uring) {
        int e;
        do
            e = io_uring_submit(&r->ring);
        while (e == -EINTR);
        if (e < 0)
            return e;
    }
    for (struct nvs_slot *sl = r->prepped; sl != NULL; sl = sl->pnext) {
        ring_start(r, sl, now);
        n++;
        if (!r->uring)
            nvs_io_submit(r->s, &sl->job);
    }
    r->prepped = NULL;
    r->nprepped = 0;
    return (int)n;
}

/* Wait until an I/O completes, the eventfd is kicked, or until 'until'
 * (monotonic ns, 0 = no limit). */
static void
ring_wait(struct nvs_ring *r, uint64_t until)
{
    uint64_t now = clock_nsec();
    uint64_t left = until == 0 ? 0 : (until > now ? until - now : 1);

    if (r->ext) {
        /* The caller's ring is the caller's to wait on: a short sleep,
         * after which the caller may have handed completions over (a
         * reap that waits is for teardown, after nvs_ring_detach). */
        if (until == 0 || left > 10000000ull)
            left = 10000000ull;
        struct pollfd pfd = {.fd = r->efd, .events = POLLIN};
        poll(&pfd, 1, (int)((left + 999999) / 1000000));
        return;
    }
    if (r->uring) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000),
                                       .tv_nsec =
                                           (long long)(left % 1000000000)};
        io_uring_wait_cqe_timeout(&r->ring, &cqe, until == 0 ? NULL : &ts);
        return;
    }
    struct pollfd pfd = {.fd = r->efd, .events = POLLIN};
    int ms = until == 0 ? -1 : (int)((left + 999999) / 1000000);
    poll(&pfd, 1, ms);
}

int
nvs_ring_reap(struct nvs_ring *r, struct nvs_read **done, int max, int wait_nr)
{
    int n = 0;

    ASSERT_OWNER(r);
    if (wait_nr > max)
        wait_nr = max;
    for (;;) {
        /* A syscall: only when someone polls the fd (or the fallback
         * waits on it). EAGAIN: nothing signalled since the last drain. */
        uint64_t v;
        if ((r->fd_used || !r->uring) && read(r->efd, &v, sizeof(v)) < 0) {
        }
        ring_harvest(r);
        uint64_t next = ring_expire(r, clock_nsec());
        while (r->tout_head != NULL && n < max) {
            struct nvs_read *rd = r->tout_head;
            r->tout_head = rd->next;
            if (r->tout_head == NULL)
                r->tout_tail = NULL;
            rd->next = NULL;
            done[n++] = rd;
        }
        while (r->rcount > 0 && n < max) {
            unsigned i = r->ready[r->rhead];
            r->rhead = (r->rhead + 1) % r->depth;
            r->rcount--;
            struct nvs_slot *sl = &r->slot[i];
            sl->state = SLOT_REAPED;
            done[n++] = sl->rd;
        }
        if (n >= wait_nr)
            return n;
        /* Only reads the caller still waits for count. */
        if (r->ninflight == 0 && r->rcount == 0 && r->tout_head == NULL)
            return n;
        ring_wait(r, next);
    }
}

void
nvs_read_done(struct nvs_ring *r, struct nvs_read *rd)
{
    struct nvs_slot *sl = rd->priv;

    ASSERT_OWNER(r);
    (void)r;
    rd->priv = NULL;
    rd->value = NULL;
    if (sl != NULL && sl->state == SLOT_REAPED) {
        sl->rd = NULL;
        sl->state = SLOT_FREE;
    }
}

int
nvs_ring_complete(struct nvs_ring *r, uint64_t user_data, int res)
{
    uint32_t i = (uint32_t)user_data;

    ASSERT_OWNER(r);
    if (i == 0 || i > r->depth)
        return 0; /* an injected delay's timer */
    struct nvs_slot *sl = &r->slot[i - 1];
    if (sl->state != SLOT_INFLIGHT && sl->state != SLOT_ABANDONED) {
        log_error("nvs: a completion for NVMe read slot %u, which has no "
                  "read in flight",
                  i - 1);
        return 0;
    }
    bool live = sl->state == SLOT_INFLIGHT;
    ring_io_done(r, sl, res);
    return live;
}

unsigned
nvs_ring_busy(const struct nvs_ring *r)
{
    return r->nio;
}

void
nvs_ring_detach(struct nvs_ring *r)
{
    ASSERT_OWNER(r);
    if (!r->ext || r->detached)
        return;
    r->detached = true;
    for (unsigned i = 0; i < r->depth; i++) {
        struct nvs_slot *sl = &r->slot[i];
        if (sl->state != SLOT_INFLIGHT)
            continue;
        /* completed now for the caller; the I/O keeps the buffer */
        struct nvs_read *rd = sl->rd;
        atomic_fetch_add_explicit(&r->s->read_ioerr, 1, memory_order_relaxed);
        rd->res = -EIO;
        rd->lat_ns = clock_nsec() - sl->t0;
        rd->priv = NULL;
        rd->next = NULL;
        sl->rd = NULL;
        sl->state = SLOT_ABANDONED;
        r->ninflight--;
        r->ndeadline -= sl->deadline != 0;
        if (r->tout_tail != NULL)
            r->tout_tail->next = rd;
        else
            r->tout_head = rd;
        r->tout_tail = rd;
    }
}

/* A ring on the caller's io_uring: what it registered there goes (unless
 * that ring is gone), and buffers an I/O may still write are leaked. */
static void
ring_destroy_ext(struct nvs_ring *r)
{
    if (!r->detached) {
        nvs_ring_detach(r);
        if (r->fixed_files)
            io_uring_unregister_files(r->io);
        if (r->fixed_buf != NULL)
            io_uring_unregister_buffers(r->io);
    }
    if (r->nio > 0) {
        log_warn("nvs: %u NVMe reads still in flight when their ring went; "
                 "their buffers are left to them",
                 r->nio);
        for (unsigned i = 0; i < r->depth; i++)
            if (r->slot[i].state == SLOT_ABANDONED)
                r->slot[i].buf = NULL;
        r->fixed_buf = NULL;
    }
    for (unsigned i = 0; i < r->depth; i++)
        free(r->slot[i].buf);
    free(r->fixed_buf);
    ring_free(r);
}

void
nvs_ring_destroy(struct nvs_ring *r)
{
    if (r == NULL)
        return;
    ASSERT_OWNER(r);
    if (r->ext) {
        ring_destroy_ext(r);
        return;
    }
    if (r->nprepped > 0)
        nvs_ring_submit(r);
    /* Every buffer stays until its I/O is over, abandoned ones included. */
    while (r->nio > 0) {
        for (unsigned i = 0; i < r->depth; i++)
            if (r->slot[i].state == SLOT_INFLIGHT) {
                r->slot[i].state = SLOT_ABANDONED;
                r->ninflight--;
                r->ndeadline -= r->slot[i].deadline != 0;
            }
        ring_harvest(r);
        if (r->nio > 0)
            ring_wait(r, clock_nsec() + 10000000ull);
    }
    if (r->uring)
        io_uring_queue_exit(&r->ring);
    for (unsigned i = 0; i < r->depth; i++)
        free(r->slot[i].buf);
    free(r->fixed_buf); /* unregistered by io_uring_queue_exit */
    ring_free(r);
}

void
nvs_ring_adopt(struct nvs_ring *r)
{
    if (r != NULL)
        r->owner = pthread_self();
}

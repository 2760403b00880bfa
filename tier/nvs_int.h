#pragma once
/*
 * Internals of the NVMe store shared by tier/nvs.c (space, write buffers,
 * writer), tier/nvs_ring.c (reads), tier/nvs_compact.c, tier/nvs_io.c
 * (the pread/pwrite fallback), tier/nvs_stats.c and tier/nvs_crc.c. Not
 * for use outside tier/nvs*.c and the store's tests.
 *
 * Concurrency (the whole store; each file repeats what it touches):
 *   s->lock           (mutex, LOCK_RANK_NVS) guards the segment table except
 *                     seg->gen's atomic reads, the write buffers' state,
 *                     fill and queue links, s->cur, s->open_seg, s->wpos,
 *                     the compaction cursor and the counters marked (L).
 *                     Held for DRAM bookkeeping only: never across I/O,
 *                     never around a record copy into a write buffer.
 *   seg->gen          written under s->lock (release), read anywhere
 *                     (acquire) by nvs_loc_live()
 *   wbuf bytes        an appender copies its reserved range with no lock;
 *                     wbuf->refs (acq_rel) hands the finished buffer to the
 *                     writer; readers copy records out under s->lock
 *   counters (A)      atomics, relaxed: figures only
 *   faults            atomics, relaxed: set by tests, read on completions
 *   a struct nvs_ring belongs to the thread that created it; the fallback
 *                     pool reaches it only through ring->cmu
 *   lock order        s->lock -> ring->cmu is never nested; s->pool_mu is a
 *                     leaf; no PMEM is ever written here
 */

#include "tier/nvs.h"

#include "src/base/compiler.h"
#include "src/base/lock.h"

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum nvs_seg_state {
    NVS_SEG_FREE = 0,
    NVS_SEG_OPEN,       /* the one segment appends go to */
    NVS_SEG_SEALED,     /* full; a reclaim or compaction candidate */
    NVS_SEG_COMPACTING, /* being compacted: neither reclaimed nor reused */
};

struct nvs_seg {
    _Atomic uint32_t gen; /* bumped when the segment is reclaimed or freed */
    uint8_t state;        /* enum nvs_seg_state */
    uint8_t path;         /* index into s->fd */
    uint32_t pending;     /* write buffers of this segment not yet written */
    uint32_t wend;        /* end of the data written this generation */
    uint64_t foff;        /* file offset of the segment in its path */
    uint64_t seal_seq;    /* order of sealing: the oldest is reclaimed */
    uint64_t used, dead;  /* record bytes appended / released */
    uint64_t nrec, ndead; /* records appended / released */
};

enum nvs_wbuf_state {
    NVS_WB_FREE = 0,
    NVS_WB_FILLING, /* s->cur: appends reserve space in it */
    NVS_WB_SEALED,  /* full, copies still in progress (refs > 0) */
    NVS_WB_QUEUED,  /* waiting for the writer */
    NVS_WB_WRITING, /* taken by the writer */
};

struct nvs_wbuf {
    char *buf;             /* wbuf_size bytes, 4 KiB aligned */
    uint32_t seg, gen;     /* where the buffer goes */
    uint32_t seg_off;      /* segment offset of buf[0], 4 KiB aligned */
    uint32_t cap;          /* bytes usable (to the segment's end) */
    uint32_t vend;         /* values (and the header block) end here */
    uint32_t dlen;         /* directory bytes, down from buf + cap */
    uint32_t nrec;         /* records reserved */
    uint32_t len;          /* extent bytes to write, set when sealed */
    _Atomic uint32_t refs; /* copies in progress, +1 while FILLING */
    int state;             /* enum nvs_wbuf_state */
    struct nvs_wbuf *next; /* writer queue */
};

#define NVS_HIST_BUCKETS 496

struct nvs_io_job; /* tier/nvs_io.c */

struct nvs {
    struct nvs_config cfg;
    int fd[NVS_MAX_PATHS];
    bool created[NVS_MAX_PATHS];
    bool uring; /* false: the pread/pwrite fallback */
    uint32_t nsegs;
    struct nvs_seg *seg;

    struct lock lock;
    pthread_cond_t wcond; /* writer: work queued or stop */
    pthread_cond_t dcond; /* flushers: a buffer was written */
    struct nvs_wbuf *wb;  /* cfg.nwbuf buffers */
    struct nvs_wbuf *cur; /* FILLING, or NULL */
    struct nvs_wbuf *wq_head, *wq_tail;
    uint32_t gen_step; /* odd; a segment's next generation is this far on
                          (nvs_gen_next), so two runs' sequences differ */
    struct nvs_reattach_info rinfo; /* nvs_reattach_*: open time only */
    uint32_t open_seg;              /* UINT32_MAX: none */
    uint32_t wpos;                  /* next write buffer's offset in open_seg */
    uint64_t seal_seq;
    bool stop;
    pthread_t writer;
    struct io_uring wring; /* the writer's ring, when s->uring */
    bool wring_dead;       /* writer only: its ring failed, pwrite */

    /* compaction cursor (L) */
    uint32_t comp_seg; /* UINT32_MAX: none */
    uint32_t comp_gen, comp_off, comp_end;
    uint32_t comp_idx;  /* directory entries of comp_off's extent done */
    uint32_t comp_scan; /* where the next read starts (>= comp_off) */
    uint64_t comp_seen; /* records found in valid directories */
    char *comp_buf;     /* wbuf_size bytes, maintenance thread only */

    /* counters: (L) under s->lock, (A) atomics */
    uint64_t page_reclaims, objects_lost;            /* (L) */
    uint64_t compact_runs, compact_rescues;          /* (L) */
    uint64_t compact_skipped;                        /* (L) */
    _Atomic uint64_t bytes_written, objects_written; /* (A) */
    _Atomic uint64_t bytes_read, objects_read;       /* (A) */
    _Atomic uint64_t append_busy, write_errors;      /* (A) */
    _Atomic uint64_t write_short;                    /* (A) */
    _Atomic uint64_t read_badcrc, read_ioerr;        /* (A) */
    _Atomic uint64_t read_timeout, read_stale;       /* (A) */
    _Atomic uint64_t hist[NVS_HIST_BUCKETS];         /* (A) read lat */
    /* NVS_LOGGED_* bits: the first media error of each kind is logged,
     * later ones only counted, so a failing device cannot flood the log
     * (A, fetch_or) */
    _Atomic uint32_t logged;

    /* fault injection (A) */
    _Atomic uint32_t f_eio, f_short, f_delay, f_wdelay, f_wshort, f_weio;
    _Atomic uint64_t f_seq;
    uint64_t f_wseq;  /* write pieces completed: the writer thread's */
    uint64_t f_wbseq; /* buffers written: the writer thread's */

    /* the fallback's thread pool (tier/nvs_io.c) */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cond;
    struct nvs_io_job *pool_head, *pool_tail;
    pthread_t *pool_thr;
    unsigned pool_n;
    bool pool_stop;
};

enum {
    NVS_LOGGED_READ = 1u << 0,    /* a read failed its I/O or its check */
    NVS_LOGGED_WRITE = 1u << 1,   /* a buffer write failed */
    NVS_LOGGED_COMPACT = 1u << 2, /* a compaction read failed */
};

/* Whether this is the first error of kind (an NVS_LOGGED_* bit): the
 * caller logs it then, and only then. Context: any thread. */
static inline bool
nvs_log_first(struct nvs *s, uint32_t kind)
{
    return !(atomic_fetch_or_explicit(&s->logged, kind, memory_order_relaxed) &
             kind);
}

/* The generation after gen: never 0 (no locator holds 0). The step is
 * odd and drawn at open, so a segment reused after a restart does not go
 * through the generations the earlier run gave it (whose locators may
 * still sit in PMEM headers of items lost at the crash). */
static inline uint32_t
nvs_gen_next(const struct nvs *s, uint32_t gen)
{
    gen += s->gen_step;
    return gen ? gen : s->gen_step;
}

/* tier/nvs_reattach.c: with cfg.reattach, read the segment headers and
 * walk the extents' footers (at open, the fds open, before the writer
 * starts): 0 or a negative errno with err_msg set. */
int nvs_reattach_scan(struct nvs *s);

/* tier/nvs.c */
/* Tests: use the table CRC even where SSE4.2 is available. */
void nvs_crc32c_force_table(bool on);
/* Copy the value at loc (loc->vlen bytes) into dst when it is still in a
 * write buffer: true when copied. Locks: takes s->lock. */
bool nvs_wbuf_copy(struct nvs *s, const struct nvs_loc *loc, void *dst);
uint64_t nvs_loc_foff(const struct nvs *s, const struct nvs_loc *loc);
int nvs_loc_fd(const struct nvs *s, const struct nvs_loc *loc);
/* The index of loc's path (its fd is s->fd[that]). */
unsigned nvs_loc_path(const struct nvs *s, const struct nvs_loc *loc);
void nvs_hist_add(struct nvs *s, uint64_t ns);

/* tier/nvs_io.c: the pread fallback's pool. A job is a read of len bytes at
 * foff into buf; done(job, res) runs on a pool thread after the optional
 * delay. */
struct nvs_io_job {
    int fd;
    void *buf;
    uint32_t len;
    uint32_t delay_ms;
    uint64_t foff;
    int res; /* bytes read or a negative errno */
    void (*done)(struct nvs_io_job *job);
    struct nvs_io_job *next;
};
int nvs_io_setup(struct nvs *s);
void nvs_io_teardown(struct nvs *s);
void nvs_io_submit(struct nvs *s, struct nvs_io_job *job);
/* pwrite/pread the whole range (retrying short transfers): 0 or -errno. */
int nvs_io_pwrite_all(int fd, const void *buf, uint64_t len, uint64_t off);
int nvs_io_pread_all(int fd, void *buf, uint64_t len, uint64_t off);
/* Log once per process that the fallback is in use. */
void nvs_io_log_fallback(const char *why);

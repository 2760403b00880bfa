#pragma once
/*
 * The NVMe store: cold values in large log-structured segments on
 * one or more files or block devices opened with O_DIRECT, written and read
 * through io_uring (liburing). This header is the contract between the
 * store (tier/nvs*.c) and the engine (src/), which decides what to spill
 * and keeps each spilled item's header, with its struct nvs_loc, in PMEM.
 *
 * Space: every path is cut into segments of seg_size bytes (ext_page_size);
 * segments are numbered across all paths. One segment at a time is open for
 * appends; appends fill a DRAM write buffer (wbuf_size, 4 KiB aligned) that
 * goes out when full (or on nvs_flush), in aligned 256 KiB pieces, a few in
 * flight (tier/nvs.c, NVS_WRITE_PIECE). A segment that
 * is full is sealed; when no segment is free the oldest sealed one is
 * reclaimed: its generation is bumped, so every locator into it turns stale
 * (nvs_loc_live() false, a read of it fails with -ESTALE).
 *
 * Records on the medium: tier/nvs_layout.h (layout 2). Values are packed
 * without headers from each write buffer's start, so a value of up to
 * 4 KiB is one 4 KiB block read; each buffer ends with a directory (one
 * descriptor with magic, generation, value offset and length, CRC32C and
 * key per record) and a CRC-checked footer, which compaction walks. Every
 * read is checked against the locator: segment generation (before submit
 * and at completion), then CRC32C of the caller's key and the bytes read
 * against loc.crc; anything wrong is an error result, never a value.
 *
 * Reads go through a per-thread struct nvs_ring (the worker thread's own
 * io_uring, or, where io_uring is refused, a small shared pool of threads
 * doing pread). A read of data still in a write buffer is served from DRAM
 * (it completes at the next nvs_ring_reap without I/O).
 *
 * Concurrency: nvs_append/nvs_flush/nvs_release/nvs_loc_live/nvs_stats are
 * safe from any thread. A ring belongs to the thread that created it, until
 * another thread adopts it (nvs_ring_adopt: owner gone). The
 * store's own locks guard only DRAM bookkeeping; it never writes PMEM.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define NVS_MAX_PATHS 8

struct nvs_config {
    unsigned npaths;
    const char *path[NVS_MAX_PATHS]; /* file or block device */
    uint64_t size[NVS_MAX_PATHS];    /* bytes used of each; a regular file is
                                        created and fallocate()d to it */
    uint32_t seg_size;        /* bytes per segment (ext_page_size); default
                                 64 MiB; a multiple of wbuf_size */
    uint32_t wbuf_size;       /* bytes per write buffer (ext_wbuf_size);
                                 default 4 MiB; a multiple of 4 KiB */
    unsigned nwbuf;           /* write buffers (one filling, the rest being
                                 written); default 4 */
    uint32_t read_timeout_ms; /* a read not completed by then fails with
                                 -ETIMEDOUT; 0 = no deadline */
    unsigned io_threads;      /* threads of the pread/pwrite fallback;
                                 default 2 */
    bool no_uring;            /* use the fallback even where io_uring works
                                 (tests, measurements) */
    bool reattach;            /* take back the segments an earlier run left
                                 on the paths (nvs_reattach_ref) instead of
                                 treating every segment as free */
};

/* Where a value lives on the store; kept in the item's PMEM header. */
struct nvs_loc {
    uint32_t seg; /* segment number across all paths */
    uint32_t gen; /* the segment's generation when written */
    uint32_t off; /* the value's offset within the segment */
    uint32_t vlen;
    uint32_t crc; /* CRC32C of key and value */
    uint32_t rsv; /* zero */
};
_Static_assert(sizeof(struct nvs_loc) == 24, "locator is 24 bytes");

struct nvs;

/* Open every path with O_DIRECT (a tmpfs path fails: O_DIRECT refused),
 * check the size fits (a block device's size, free space for a file),
 * fallocate regular files, set up the write buffers and the writer.
 * 0 or a negative errno with one sentence in err_msg(). */
int nvs_open(const struct nvs_config *cfg, struct nvs **out);
/* Write out the open buffer, wait for writes, free everything. Every ring
 * of the store must have been destroyed before. */
void nvs_close(struct nvs *s);

/* Copy a record (key and value pieces) into the open write buffer: *out
 * says where it will live. -EAGAIN when every buffer is busy being written
 * (the flash is behind: the caller evicts instead of waiting), -E2BIG when
 * the record cannot fit one write buffer. Never blocks on I/O.
 * Context: any thread, no lock held. */
int nvs_append(struct nvs *s, const void *key, uint8_t klen,
               const struct iovec *val, int niov, struct nvs_loc *out);
/* Send the open buffer now even if not full (maintenance ticks, tests)
 * and wait until it and every buffer sealed before it are written. The
 * buffer goes out as values, directory and footer rounded up to 4 KiB; the
 * next buffer starts after it, so a flush wastes less than 4 KiB. Returns
 * 0. */
int nvs_flush(struct nvs *s);

/* Whether loc's segment has not been reclaimed since loc was written
 * (DRAM check, no I/O). */
bool nvs_loc_live(const struct nvs *s, const struct nvs_loc *loc);
/* The engine dropped its reference to loc (delete, overwrite, expiry,
 * recache that let the flash copy go): counts dead bytes for compaction
 * (value and descriptor; the key length is not in the locator). A stale loc
 * is ignored. Call it at most once per locator. */
void nvs_release(struct nvs *s, const struct nvs_loc *loc);

/* Compaction: pick the sealed segment with the most dead bytes (at least
 * max_frag of it dead), read it write buffer by write buffer (each found
 * by its footer, walked by its directory) and hand each record to keep,
 * which returns true to keep it (the store appends it again and calls
 * moved with the new locator) or false to let it go; then the segment is
 * freed. A buffer whose footer or directory is damaged is skipped: its
 * records are counted in objects_lost (and the damage in read_badcrc),
 * never handed to keep. Reads are of wbuf_size bytes (less at the end);
 * a call reads until budget bytes (at least one read), so one segment may
 * take several calls; the store keeps the cursor. Returns records moved, 0
 * when nothing qualified (or nothing was moved in this step), or a
 * negative errno. When the flash is behind (append -EAGAIN) the step stops
 * and the next one resumes at that record.
 * moved() is called after the new copy is appended; the old copy goes with
 * its segment, so the engine does not nvs_release() old. An item may have
 * been overwritten between keep() and moved(): moved() then releases
 * new_loc instead of installing it. Callbacks run
 * with no store lock held. compact_skipped counts records keep() let go.
 * Context: the maintenance thread (one caller at a time). */
typedef bool nvs_keep_fn(void *arg, const void *key, uint8_t klen,
                         const struct nvs_loc *old);
typedef void nvs_moved_fn(void *arg, const void *key, uint8_t klen,
                          const struct nvs_loc *old,
                          const struct nvs_loc *new_loc);
int nvs_compact_step(struct nvs *s, double max_frag, uint64_t budget,
                     nvs_keep_fn *keep, nvs_moved_fn *moved, void *arg);

/* ---- reattach after a restart (tier/nvs_reattach.c) ----
 *
 * With cfg.reattach, nvs_open reads each segment's header block: a header
 * whose magic, version, number, size and CRC check makes the segment
 * SEALED at the header's generation (reclaim order: the time it was
 * opened); its extents are walked by their footers from the segment's
 * start (the last blocks of each extent, not the values), and the first
 * extent without a valid footer of that generation ends what the segment
 * is known to hold (wend: a buffer cut by a crash). Any other segment is
 * free, at a generation of this run. No segment is left open: appends
 * start in a free (or reclaimed) segment; the tail of a reattached one is
 * dead space for compaction.
 *
 * Then the engine offers every locator it kept in PMEM (nvs_reattach_ref):
 * true when the locator's segment was reattached at that generation and
 * the value lies inside the extents found, which counts its bytes live;
 * false: the engine drops the item (a read would fail its checks anyway).
 * nvs_reattach_done() ends it: each segment's dead bytes and records are
 * what its footers name less what the engine kept; a segment with nothing
 * kept is freed at once. Context: at open, before any other call (the
 * store's lock is taken all the same). */
struct nvs_reattach_info {
    uint64_t segs_reattached; /* headers that checked */
    uint64_t segs_freed;      /* of those, freed for holding nothing kept */
    uint64_t extents;         /* extents with a valid footer */
    uint64_t records;         /* records those footers name */
    uint64_t kept, refused;   /* locators offered: live, not */
    uint64_t bytes_read;      /* header and footer blocks read */
};
bool nvs_reattach_ref(struct nvs *s, const struct nvs_loc *loc, uint8_t klen);
void nvs_reattach_done(struct nvs *s, struct nvs_reattach_info *out);

/* ---- reads ---- */

struct nvs_ring;

/* A ring of depth entries for the calling thread. */
int nvs_ring_create(struct nvs *s, unsigned depth, struct nvs_ring **out);
/* Context: the owner thread (see nvs_ring_adopt). Waits for every read
 * still in flight (their buffers belong to the I/O until it completes). */
void nvs_ring_destroy(struct nvs_ring *r);
/* The owner is gone: it exited, or it will never call on r again (the
 * engine's tc_close, whose contract is that other threads have stopped
 * calling). The calling thread becomes r's owner and may reap and destroy
 * it. The old owner's last use must happen before this call (a join, a
 * lock or the caller's contract), as for any hand-over of a plain object;
 * the fallback pool's completions still go through r->cmu. */
void nvs_ring_adopt(struct nvs_ring *r);
/* A ring of depth entries whose reads go on the caller's io_uring ext (an
 * event loop's, liburing's struct io_uring) instead of one of its own, so
 * that the loop's one io_uring_enter submits them and waits for their
 * completions with its other I/O. Each read's SQE carries user_data
 * tag | n, 1 <= n <= depth (the low 32 bits of tag must be 0); the caller
 * hands every completion with that tag to nvs_ring_complete and reaps as
 * usual. Prep puts the SQE on ext at once (the read is in flight from
 * there, its deadline counting: the caller's next submit sends it), and a
 * read that needs no I/O is ready at the next reap. The store's files
 * (and a block per slot) are registered with ext when the kernel lets it.
 * -ENOTSUP when the store reads without io_uring (the fallback pool).
 * Context: the thread that submits on ext, which becomes the owner. */
struct io_uring;
int nvs_ring_create_on(struct nvs *s, unsigned depth, struct io_uring *ext,
                       uint64_t tag, struct nvs_ring **out);
/* A completion of ext with r's tag: res is the CQE's. 1 when it completed
 * a read the caller will reap, else 0 (an abandoned read's late
 * completion, an injected delay's timer). */
int nvs_ring_complete(struct nvs_ring *r, uint64_t user_data, int res);
/* Reads of r whose I/O is still with the kernel (timed-out ones included):
 * the caller must go on handing their completions over until it is 0
 * before ext goes away. */
unsigned nvs_ring_busy(const struct nvs_ring *r);
/* ext goes away: reads still in flight on it complete with -EIO at the
 * next reap (their buffers are leaked: the kernel may still write them),
 * and later reads are refused (-ENOTCONN in prep). */
void nvs_ring_detach(struct nvs_ring *r);
/* An eventfd that becomes readable when completions are waiting, for the
 * thread's epoll loop; nvs_ring_reap drains it once this was called. The
 * first call registers it with the ring (until then completions signal
 * nothing: a ring nobody polls saves that work), kicking it when reads
 * are already in flight or done: the fd, or a negative errno when the
 * registration failed. Context: the owner thread. */
int nvs_ring_fd(const struct nvs_ring *r);

struct nvs_read {
    /* in */
    struct nvs_loc loc;
    const void *key; /* checked with loc.crc; kept by the caller */
    uint8_t klen;
    void *udata;
    uint32_t timeout_ms; /* this read's deadline; 0: the store's
                            read_timeout_ms (which may be 0: none) */
    /* out, valid after reap until nvs_read_done */
    int res;           /* 0, -EIO, -EBADMSG (CRC of key and value, or a
                          locator out of bounds), -ESTALE (segment
                          reclaimed), -ETIMEDOUT */
    const char *value; /* loc.vlen bytes when res == 0 */
    uint64_t lat_ns;   /* submit to completion */
    /* private to the store */
    void *priv;
    struct nvs_read *next;
};

/* Queue a read (not yet submitted). -EBUSY when the ring is full. */
int nvs_read_prep(struct nvs_ring *r, struct nvs_read *rd);
/* Submit everything queued: the number submitted or a negative errno.
 * Each read's deadline starts here. */
int nvs_ring_submit(struct nvs_ring *r);
/* Collect up to max completed reads (checked, res set); waits for at least
 * wait_nr (fewer when fewer are in flight). Reads past their deadline are
 * completed with -ETIMEDOUT here, so a caller that waits on the eventfd
 * must also call reap by the deadline (epoll timeout). A timed-out read's
 * buffer stays with the I/O until it completes: its slot is busy (-EBUSY
 * in prep) until a later reap sees the completion. */
int nvs_ring_reap(struct nvs_ring *r, struct nvs_read **done, int max,
                  int wait_nr);
/* Release a reaped read's buffer. */
void nvs_read_done(struct nvs_ring *r, struct nvs_read *rd);

/* ---- figures ---- */

struct nvs_stats {
    uint64_t bytes_total, bytes_used, bytes_dead;
    uint64_t segs_total, segs_free;
    uint64_t bytes_written, objects_written;
    uint64_t bytes_read, objects_read;    /* bytes read from the device (whole
                                             blocks; 0 for a value served from
                                             a write buffer), values read */
    uint64_t page_reclaims, objects_lost; /* live records in reclaimed
                                             segments, and records of
                                             damaged buffers compaction
                                             skipped */
    uint64_t compact_runs, compact_rescues, compact_skipped;
    uint64_t append_busy; /* -EAGAIN: flash behind */
    uint64_t read_badcrc, read_ioerr, read_timeout, read_stale;
    /* reads that did I/O, submit to completion (log-linear buckets, ~6%) */
    uint64_t read_lat_p50_ns, read_lat_p99_ns, read_lat_p999_ns;
    bool uring;            /* false: the pread/pwrite fallback is in use */
    uint64_t write_errors; /* buffer writes that failed (records lost) */
    uint64_t write_short;  /* write pieces the ring wrote short, finished
                              with pwrite */
};
void nvs_get_stats(struct nvs *s, struct nvs_stats *out);
/* "stats reset": zero the counters (bytes/objects written and read,
 * reclaims, lost, compaction, busy, read errors, write errors) and the read
 * latency histogram. Gauges (bytes_total/used/dead, segments) stay. An
 * increment racing with the reset may survive it. Context: any thread.
 * Locks: takes the store's lock (for the (L) counters). */
void nvs_stats_reset(struct nvs *s);

/* ---- fault injection (tests) ---- */

struct nvs_faults {
    uint32_t eio_every;         /* every Nth read completes with -EIO, 0 off */
    uint32_t short_every;       /* every Nth read comes back short */
    uint32_t delay_ms;          /* added before each read completes */
    uint32_t write_delay_ms;    /* the writer waits this long before each
                                   batch of buffer writes (flash behind);
                                   setting 0 ends a wait under way */
    uint32_t short_write_every; /* every Nth write piece the ring completes
                                   counts as written to its middle only, as
                                   a short write would (the rest is written
                                   again with pwrite) */
    uint32_t write_eio_every;   /* every Nth buffer write fails with -EIO
                                   (its records are lost, as on a full or
                                   failing device) */
};
void nvs_set_faults(struct nvs *s, const struct nvs_faults *f);

/* Debug walker (tests): the segment table and write buffers agree with
 * each other (one open segment, buffer states, pending writes, byte and
 * record counts). 0, or -EUCLEAN with the first broken rule in err_msg().
 * Locks: takes the store's lock. */
int nvs_check(struct nvs *s);

/* CRC32C (Castagnoli), continuing from crc (0 to start). */
uint32_t nvs_crc32c(uint32_t crc, const void *p, uint64_t n);

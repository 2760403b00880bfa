#pragma once
/*
 * A growable output buffer: the protocol layer appends replies, the
 * connection layer writes them out and consumes what the socket took.
 * Values are copied in from the cache (one copy, PMEM -> DRAM), so nothing
 * in here points into the cache.
 *
 * Concurrency: owned by one connection, used by its worker thread only.
 */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/*
 * Holes: a reply whose value is still being read from flash is
 * written with the value's bytes reserved; nothing from the first hole's
 * reply on is sent until that hole is filled. A read that fails replaces
 * the whole reply with the protocol's miss (possibly nothing). Positions
 * are logical (bytes appended since the obuf was created), so they survive
 * the block sliding down.
 */
#define OBUF_MISS_MAX 512 /* an mg miss line with O and a base64 k */

struct obuf_hole {
    uint64_t id;    /* the engine's pending read (tc_item_info.pending) */
    uint64_t start; /* the reply holding the hole begins here */
    uint64_t pos;   /* the value's bytes */
    uint64_t end;   /* the reply ends here (set by obuf_hole_close) */
    uint32_t len;
    uint16_t miss_len;
    char miss[OBUF_MISS_MAX]; /* replaces [start, end) on a failed read */
};

struct obuf {
    char *buf;
    size_t head; /* first byte not yet written to the socket */
    size_t len;  /* bytes in buf (head <= len <= cap) */
    size_t cap;
    int err;       /* -ENOMEM once an append failed (reply is then cut) */
    uint64_t off0; /* logical position of buf[0] */
    struct obuf_hole *holes; /* unfilled, in position order */
    unsigned nholes, holes_cap;
};

void obuf_init(struct obuf *o);
void obuf_fini(struct obuf *o);

/* Append bytes: 0 or -ENOMEM (also recorded in o->err). */
int obuf_add(struct obuf *o, const void *p, size_t n);
int obuf_add_str(struct obuf *o, const char *s);
int obuf_printf(struct obuf *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Room for n more bytes at obuf_tail(); commit them with obuf_commit(). */
int obuf_reserve(struct obuf *o, size_t n);
static inline char *
obuf_tail(struct obuf *o)
{
    return o->buf + o->len;
}
static inline void
obuf_commit(struct obuf *o, size_t n)
{
    o->len += n;
}

/* Bytes waiting to be written, and dropping n of them once written. */
static inline size_t
obuf_pending(const struct obuf *o)
{
    return o->len - o->head;
}
void obuf_consume(struct obuf *o, size_t n);

/* Logical position of the tail (where the next append goes). */
static inline uint64_t
obuf_pos(const struct obuf *o)
{
    return o->off0 + o->len;
}
/* Bytes that may be written now: up to the first hole's reply. */
static inline size_t
obuf_sendable(const struct obuf *o)
{
    if (!o->nholes)
        return o->len - o->head;
    return (size_t)(o->holes[0].start - o->off0) - o->head;
}
/* Reserve len bytes at the tail for the value of pending read id, in a
 * reply that began at logical position start: 0 or -ENOMEM. */
int obuf_hole_open(struct obuf *o, uint64_t id, uint64_t start, uint32_t len);
/* The reply of the last hole ends at the tail; miss (n <= OBUF_MISS_MAX
 * bytes) replaces it if the read fails. */
void obuf_hole_close(struct obuf *o, const void *miss, size_t n);
/* Read id finished: copy its value in (niov 1, exactly the reserved
 * length), or put the miss in place of its reply. False when no hole has
 * that id. */
bool obuf_hole_fill(struct obuf *o, uint64_t id, const struct iovec *iov,
                    int niov);

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
#include <stddef.h>

struct obuf {
    char *buf;
    size_t head; /* first byte not yet written to the socket */
    size_t len;  /* bytes in buf (head <= len <= cap) */
    size_t cap;
    int err; /* -ENOMEM once an append failed (reply is then cut) */
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

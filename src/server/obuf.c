/*
 * Output buffer (src/server/obuf.h): one contiguous heap block, appended at the
 * tail, written out from the head.
 *
 * Growth is geometric (doubling from OBUF_MIN_CAP), so n appends cost O(n)
 * copies in all. obuf_consume() slides the unwritten bytes down to the start
 * once the head has passed half of the capacity, so a connection that is
 * always a little behind does not grow the block forever; when everything
 * was written it just rewinds, and a block grown past OBUF_KEEP_CAP (a big
 * reply) is freed then, so an idle connection holds no large buffer. A cap
 * on the total size is the connection's business (src/server/conn.c).
 *
 * o->err is sticky: once an append failed every later append fails too, so
 * a reply is cut at the first failure and never continues with bytes of a
 * later one. The connection closes on it.
 *
 * Concurrency: owned by one connection, used by its worker thread only.
 */

#include "src/server/obuf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBUF_MIN_CAP 1024
#define OBUF_KEEP_CAP (256 * 1024)

void
obuf_init(struct obuf *o)
{
    memset(o, 0, sizeof(*o));
}

void
obuf_fini(struct obuf *o)
{
    free(o->buf);
    free(o->holes);
    memset(o, 0, sizeof(*o));
}

/* Slide the unwritten bytes [head, len) to the start of the block. */
static void
compact(struct obuf *o)
{
    size_t n = o->len - o->head;
    if (o->head == 0)
        return;
    if (n)
        memmove(o->buf, o->buf + o->head, n);
    o->off0 += o->head;
    o->head = 0;
    o->len = n;
}

int
obuf_reserve(struct obuf *o, size_t n)
{
    if (o->err)
        return o->err;
    if (n <= o->cap - o->len)
        return 0;
    /* Reclaim the written prefix before growing when that is enough. */
    if (o->head && n <= o->cap - (o->len - o->head)) {
        compact(o);
        return 0;
    }
    size_t live = o->len - o->head;
    if (n > SIZE_MAX / 2 - live)
        goto err_nomem;
    size_t want = live + n;
    size_t cap = o->cap ? o->cap : OBUF_MIN_CAP;
    while (cap < want)
        cap *= 2;
    compact(o);
    char *p = realloc(o->buf, cap);
    if (!p)
        goto err_nomem;
    o->buf = p;
    o->cap = cap;
    return 0;

err_nomem:
    o->err = -ENOMEM;
    return -ENOMEM;
}

int
obuf_add(struct obuf *o, const void *p, size_t n)
{
    int rc = obuf_reserve(o, n);
    if (rc)
        return rc;
    if (n)
        memcpy(o->buf + o->len, p, n);
    o->len += n;
    return 0;
}

int
obuf_add_str(struct obuf *o, const char *s)
{
    return obuf_add(o, s, strlen(s));
}

int
obuf_printf(struct obuf *o, const char *fmt, ...)
{
    va_list ap;
    if (o->err)
        return o->err;
    /* First try into the room there is (most replies are short lines). */
    size_t room = o->cap - o->len;
    va_start(ap, fmt);
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
        o->err = -ENOMEM; /* only an encoding error; never expected */
        return o->err;
    }
    if ((size_t)n < room) {
        o->len += (size_t)n;
        return 0;
    }
    int rc = obuf_reserve(o, (size_t)n + 1);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(o->buf + o->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    o->len += (size_t)n;
    return 0;
}

void
obuf_consume(struct obuf *o, size_t n)
{
    size_t pending = o->len - o->head;
    if (n > pending)
        n = pending;
    o->head += n;
    if (o->head == o->len) {
        o->off0 += o->len;
        o->head = o->len = 0;
        if (o->cap > OBUF_KEEP_CAP) {
            free(o->buf);
            o->buf = NULL;
            o->cap = 0;
        }
        return;
    }
    if (o->head > o->cap / 2)
        compact(o);
}

/* --- holes --- */

int
obuf_hole_open(struct obuf *o, uint64_t id, uint64_t start, uint32_t len)
{
    if (o->nholes == o->holes_cap) {
        unsigned cap = o->holes_cap ? o->holes_cap * 2 : 8;
        struct obuf_hole *h = realloc(o->holes, cap * sizeof(*h));
        if (!h) {
            o->err = -ENOMEM;
            return -ENOMEM;
        }
        o->holes = h;
        o->holes_cap = cap;
    }
    int rc = obuf_reserve(o, len);
    if (rc)
        return rc;
    struct obuf_hole *h = &o->holes[o->nholes++];
    memset(h, 0, sizeof(*h));
    h->id = id;
    h->start = start;
    h->pos = obuf_pos(o);
    h->len = len;
    o->len += len;
    return 0;
}

void
obuf_hole_close(struct obuf *o, const void *miss, size_t n)
{
    if (!o->nholes)
        return;
    struct obuf_hole *h = &o->holes[o->nholes - 1];
    h->end = obuf_pos(o);
    h->miss_len = (uint16_t)(n < OBUF_MISS_MAX ? n : OBUF_MISS_MAX);
    if (h->miss_len)
        memcpy(h->miss, miss, h->miss_len);
}

/* Put h's miss in place of its reply: later bytes and holes move. */
static void
hole_miss(struct obuf *o, unsigned i)
{
    struct obuf_hole h = o->holes[i];
    size_t block = (size_t)(h.end - h.start);
    if (h.miss_len > block && obuf_reserve(o, h.miss_len - block) != 0)
        return; /* o->err set: the connection closes */
    char *from = o->buf + (h.end - o->off0);
    char *to = o->buf + (h.start - o->off0) + h.miss_len;
    memmove(to, from, (size_t)(o->buf + o->len - from));
    memcpy(o->buf + (h.start - o->off0), h.miss, h.miss_len);
    int64_t delta = (int64_t)h.miss_len - (int64_t)block;
    o->len = (size_t)((int64_t)o->len + delta);
    for (unsigned j = i + 1; j < o->nholes; j++) {
        o->holes[j].start = (uint64_t)((int64_t)o->holes[j].start + delta);
        o->holes[j].pos = (uint64_t)((int64_t)o->holes[j].pos + delta);
        o->holes[j].end = (uint64_t)((int64_t)o->holes[j].end + delta);
    }
}

bool
obuf_hole_fill(struct obuf *o, uint64_t id, const struct iovec *iov, int niov)
{
    unsigned i;
    for (i = 0; i < o->nholes && o->holes[i].id != id; i++)
        ;
    if (i == o->nholes)
        return false;
    struct obuf_hole *h = &o->holes[i];
    if (niov == 1 && iov[0].iov_len == h->len) {
        if (h->len)
            memcpy(o->buf + (h->pos - o->off0), iov[0].iov_base, h->len);
    } else {
        hole_miss(o, i);
    }
    memmove(&o->holes[i], &o->holes[i + 1],
            (o->nholes - i - 1) * sizeof(o->holes[0]));
    o->nholes--;
    return true;
}

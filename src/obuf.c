/*
 * Output buffer (src/obuf.h): one contiguous heap block, appended at the
 * tail, written out from the head.
 *
 * Growth is geometric (doubling from OBUF_MIN_CAP), so n appends cost O(n)
 * copies in all. obuf_consume() slides the unwritten bytes down to the start
 * once the head has passed half of the capacity, so a connection that is
 * always a little behind does not grow the block forever; when everything
 * was written it just rewinds, and a block grown past OBUF_KEEP_CAP (a big
 * reply) is freed then, so an idle connection holds no large buffer. A cap
 * on the total size is the connection's business (src/conn.c).
 *
 * o->err is sticky: once an append failed every later append fails too, so
 * a reply is cut at the first failure and never continues with bytes of a
 * later one. The connection closes on it.
 *
 * Concurrency: owned by one connection, used by its worker thread only.
 */

#include "src/obuf.h"

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

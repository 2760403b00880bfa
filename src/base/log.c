/*
 * Logging to stderr.
 *
 * Concurrency:
 *   log_level   _Atomic int, relaxed loads and stores: it is a lone setting
 *               with no data published alongside it, so any thread may read
 *               or change it at any time; a racing reader sees the old or the
 *               new level.
 *   stderr      each message goes out in one fprintf(), which stdio makes
 *               atomic with respect to other stdio calls on the stream, so
 *               lines from different threads do not interleave.
 */

#include "src/base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

/* Longest message body; longer ones are cut and end in "...". */
#define LOG_LINE_MAX 1024

static _Atomic int log_level = LOG_WARN;

static const char *const log_names[] = {
    [LOG_ERROR] = "error",
    [LOG_WARN] = "warn",
    [LOG_INFO] = "info",
    [LOG_DEBUG] = "debug",
};

/* Levels outside the enum are clamped, so that -vvv (3 or more) means
 * LOG_DEBUG and a negative value means errors only. */
void
log_set_level(int level)
{
    if (level < LOG_ERROR)
        level = LOG_ERROR;
    if (level > LOG_DEBUG)
        level = LOG_DEBUG;
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int
log_get_level(void)
{
    return atomic_load_explicit(&log_level, memory_order_relaxed);
}

void
log_msg(int level, const char *fmt, ...)
{
    char line[LOG_LINE_MAX];
    int saved_errno = errno; /* so callers may log before reading errno */
    va_list ap;
    int n;

    if (level > log_get_level())
        return;
    if (level < LOG_ERROR)
        level = LOG_ERROR;
    if (level > LOG_DEBUG)
        level = LOG_DEBUG;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0) {
        line[0] = '\0';
    } else if ((size_t)n >= sizeof(line)) {
        line[sizeof(line) - 4] = '.';
        line[sizeof(line) - 3] = '.';
        line[sizeof(line) - 2] = '.';
    }

    fprintf(stderr, "tiercache: %s: %s\n", log_names[level], line);
    errno = saved_errno;
}

/*
 * Per-thread error messages.
 *
 * Concurrency:
 *   err_buf    thread-local: each thread reads and writes only its own copy,
 *              so no lock and no atomics. A message never crosses threads.
 */

#include "src/base/err.h"

#include <stdarg.h>
#include <stdio.h>

#define ERR_BUF_SIZE 256

static __thread char err_buf[ERR_BUF_SIZE];

void
err_set(const char *fmt, ...)
{
    va_list ap;

    /* vsnprintf truncates to ERR_BUF_SIZE - 1 bytes and always terminates. */
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof(err_buf), fmt, ap);
    va_end(ap);
}

const char *
err_msg(void)
{
    return err_buf;
}

void
err_clear(void)
{
    err_buf[0] = '\0';
}

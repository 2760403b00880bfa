#pragma once
/*
 * Where the unit tests put their flash (NVMe tier) files: the directory
 * TC_TEST_FLASH_DIR names, else /tmp. It must allow O_DIRECT (ext4 and xfs
 * do, tmpfs does not). tests/stress_check.sh --slow-device points it at a
 * throttled loop device, to show that no test depends on the disk's speed.
 * Included by engine_fx.h and nvs_fx.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* The flash directory: $TC_TEST_FLASH_DIR, or /tmp when unset or empty. */
static inline const char *
test_flash_dir(void)
{
    const char *dir = getenv("TC_TEST_FLASH_DIR");

    return dir != NULL && *dir != '\0' ? dir : "/tmp";
}

/* buf = "<flash dir>/<name>", name formatted from fmt. A path that does not
 * fit in buf aborts the test binary: a truncated path would name another
 * file (and another test's). */
__attribute__((format(printf, 3, 4))) static inline void
test_flash_path(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(buf, size, "%s/", test_flash_dir());

    if (n >= 0 && (size_t)n < size) {
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, size - (size_t)n, fmt, ap);
        va_end(ap);
        if (m >= 0 && (size_t)m < size - (size_t)n)
            return;
    }
    fprintf(stderr,
            "test_flash_path: the path under %s does not fit in %zu "
            "bytes (TC_TEST_FLASH_DIR too long?)\n",
            test_flash_dir(), size);
    abort();
}

/* Anonymous mappings on huge pages (see hugemap.h). */
#include "src/base/hugemap.h"

#include "src/base/compiler.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

void *
hugemap_map(size_t *bytes)
{
    const size_t huge = HUGEMAP_BYTES;
    size_t len = *bytes < huge ? *bytes : ALIGN_UP(*bytes, huge);
    size_t extra = *bytes < huge ? 0 : huge;
    char *raw = mmap(NULL, len + extra, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = raw;
    if (extra) {
        /* over-map by 2 MiB, keep the aligned part */
        p = (char *)ALIGN_UP((uintptr_t)raw, (uintptr_t)huge);
        size_t head = (size_t)(p - raw);
        if (head)
            munmap(raw, head);
        if (extra - head)
            munmap(p + len, extra - head);
#ifdef MADV_HUGEPAGE
        (void)madvise(p, len, MADV_HUGEPAGE);
#endif
    }
    *bytes = len;
    return p;
}

void
hugemap_unmap(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* Whether an smaps line is a mapping's first ("lo-hi perms ..."): its
 * range into *lo, *hi. A counter line ("AnonHugePages:   0 kB") is not:
 * no '-' after its leading hex-looking letters. */
static bool
smaps_range(const char *line, uintptr_t *lo, uintptr_t *hi)
{
    unsigned long a, b;
    int n = 0;
    if (sscanf(line, "%lx-%lx %n", &a, &b, &n) != 2 || n == 0)
        return false;
    *lo = a;
    *hi = b;
    return true;
}

static bool
smaps_huge_counter(const char *line, long long *kb)
{
    static const char *const names[] = {
        "AnonHugePages:", "ShmemPmdMapped:", "FilePmdMapped:"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t n = strlen(names[i]);
        if (strncmp(line, names[i], n) == 0)
            return sscanf(line + n, "%lld", kb) == 1;
    }
    return false;
}

long long
hugemap_huge_bytes(const void *p, size_t len)
{
    uintptr_t start = (uintptr_t)p, end = start + len, lo, hi;
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool inside = false;
    long long total = 0, kb;

    if (f == NULL)
        return errno ? -errno : -EIO;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (smaps_range(line, &lo, &hi)) {
            if (lo >= end)
                break; /* in address order: the rest is past the range */
            inside = hi > start;
        } else if (inside && smaps_huge_counter(line, &kb))
            total += kb << 10;
        /* a line longer than the buffer: its rest is read as a line of
         * its own, which matches neither form (only a path is that long) */
    }
    fclose(f);
    return total;
}

/* Anonymous mappings on huge pages (see hugemap.h). */
#include "src/base/hugemap.h"

#include "src/base/compiler.h"

#include <stdint.h>
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

/*
 * be_limit: the machine's own memory limits for bench_engine, measured in
 * the same run as the engine's figures so that each is also a ratio to
 * them, and the 2 MiB-page accounting of a mapping (smaps).
 */
#include "perf/be_limit.h"
#include "src/base/clock.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/*
 * Bytes of the mapping(s) at addr, or named by path, that the kernel maps
 * with 2 MiB page-table entries (smaps' AnonHugePages, ShmemPmdMapped and
 * FilePmdMapped), and their resident bytes; -1 when smaps cannot be read.
 */
int64_t
be_huge_bytes(const void *addr, const char *path, int64_t *rss)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[640];
    bool in = false;
    int64_t huge = 0;

    *rss = 0;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi, kb;
        char name[32];
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') &&
            line[strspn(line, "0123456789abcdef-")] == ' ') {
            in = path ? strstr(line, path) != NULL
                      : (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
        } else if (in && sscanf(line, "%31[A-Za-z]: %lu kB", name, &kb) == 2) {
            if (!strcmp(name, "Rss"))
                *rss += (int64_t)kb << 10;
            else if (!strcmp(name, "AnonHugePages") ||
                     !strcmp(name, "ShmemPmdMapped") ||
                     !strcmp(name, "FilePmdMapped"))
                huge += (int64_t)kb << 10;
        }
    }
    fclose(f);
    return huge;
}

/*
 * The machine's own limits, measured in the same run: random 100-byte
 * copies out of a region much larger than the caches (256 MiB), each
 * source address independent of the last copy (rnd) or computed from it
 * (dep: one DRAM miss after another, as a lookup's bucket then item). The
 * region's 128-byte slots each hold the number of another slot (a random
 * permutation's cycle), which dep follows. Measured on 4 KiB pages
 * (MADV_NOHUGEPAGE: each copy also pays a page walk, as a get's item does
 * in a pool on 4 KiB pages) and on 2 MiB pages (MADV_HUGEPAGE, 2 MiB
 * aligned: no walk to speak of, as in a pool on a huge= tmpfs or DAX), so
 * that a get can be held against the limit of its own page size
 * (be_limits: each kind twice, the better kept).
 */
#define BE_LIMIT_BYTES (256ull << 20)
#define BE_LIMIT_SLOT 128
#define BE_LIMIT_OPS 4000000
#define BE_2M ((size_t)2 << 20)

struct be_limit {
    double dep, rnd;
    int64_t huge; /* bytes of the region on 2 MiB pages */
};

/* 256 MiB, 2 MiB aligned, advised for huge pages or against them. */
static char *
be_limit_map(bool huge)
{
    char *raw = mmap(NULL, BE_LIMIT_BYTES + BE_2M, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + BE_2M - 1) & ~(uintptr_t)(BE_2M - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (p + BE_LIMIT_BYTES < raw + BE_LIMIT_BYTES + BE_2M)
        munmap(p + BE_LIMIT_BYTES,
               (size_t)(raw + BE_LIMIT_BYTES + BE_2M - (p + BE_LIMIT_BYTES)));
    (void)madvise(p, BE_LIMIT_BYTES, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    return p;
}

static int
be_limit_run(uint64_t seed, bool huge, struct be_limit *out)
{
    uint64_t nslots = BE_LIMIT_BYTES / BE_LIMIT_SLOT, rng = seed | 1;
    char *r = be_limit_map(huge);
    uint32_t *perm = malloc(nslots * sizeof(*perm));
    char dst[128];
    uint64_t sink = 0;
    int64_t rss;

    if (!r || !perm) {
        if (r)
            munmap(r, BE_LIMIT_BYTES);
        free(perm);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < nslots; i++)
        perm[i] = (uint32_t)i;
    for (uint64_t i = nslots - 1; i > 0; i--) { /* Fisher-Yates */
        uint64_t j = be_pick(&rng, i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    memset(r, 0x5a, BE_LIMIT_BYTES);
    for (uint64_t i = 0; i < nslots; i++) /* one cycle through all slots */
        memcpy(r + (uint64_t)perm[i] * BE_LIMIT_SLOT, &perm[(i + 1) % nslots],
               sizeof(uint32_t));
    free(perm);
    out->huge = be_huge_bytes(r, NULL, &rss);

    uint64_t t0 = clock_nsec();
    for (uint64_t i = 0; i < BE_LIMIT_OPS; i++) {
        memcpy(dst, r + be_pick(&rng, nslots) * BE_LIMIT_SLOT, 100);
        sink += (unsigned char)dst[i & 63];
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    out->rnd = BE_LIMIT_OPS * 1e9 / (double)(clock_nsec() - t0);
    uint32_t at = 0;
    t0 = clock_nsec();
    for (uint64_t i = 0; i < BE_LIMIT_OPS; i++) {
        memcpy(dst, r + (uint64_t)at * BE_LIMIT_SLOT, 100);
        __asm__ volatile("" : : "r"(dst) : "memory");
        memcpy(&at, dst, sizeof(at));
    }
    out->dep = BE_LIMIT_OPS * 1e9 / (double)(clock_nsec() - t0);
    __asm__ volatile("" : : "r"(sink), "r"(at));
    munmap(r, BE_LIMIT_BYTES);
    return 0;
}

/* Each page size measured twice, alternating, and the better of the two
 * kept: on this VM whichever region is filled first after the process
 * starts measures slower (up to 3x on independent copies: fresh memory
 * behind the guest), which a single pass would charge to one page size. */
void
be_limits(uint64_t seed)
{
    struct be_limit small = {0}, big = {0}, l;

    for (int i = 0; i < 4; i++) {
        bool huge = i & 1;
        struct be_limit *best = huge ? &big : &small;
        if (be_limit_run(seed + (uint64_t)i * 2, huge, &l)) {
            printf("# limit: out of memory\n");
            return;
        }
        best->dep = l.dep > best->dep ? l.dep : best->dep;
        best->rnd = l.rnd > best->rnd ? l.rnd : best->rnd;
        best->huge = l.huge;
    }
    printf("# limit: random 100-byte copies from %llu MiB: on 4 KiB pages "
           "independent %.0f/s, dependent %.0f/s; on 2 MiB pages (%lld MiB "
           "of it got them) independent %.0f/s, dependent %.0f/s\n",
           (unsigned long long)(BE_LIMIT_BYTES >> 20), small.rnd, small.dep,
           (long long)(big.huge >> 20), big.rnd, big.dep);
    printf("RESULT bench=limit dep_ops=%.0f rnd_ops=%.0f dep2m_ops=%.0f "
           "rnd2m_ops=%.0f huge2m_mib=%lld huge4k_mib=%lld\n",
           small.dep, small.rnd, big.dep, big.rnd, (long long)(big.huge >> 20),
           (long long)(small.huge >> 20));
}

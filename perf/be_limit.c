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

/* bytes (a multiple of 2 MiB), 2 MiB aligned, advised for huge pages or
 * against them. */
static char *
be_limit_map(size_t bytes, bool huge)
{
    char *raw = mmap(NULL, bytes + BE_2M, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + BE_2M - 1) & ~(uintptr_t)(BE_2M - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (p + bytes < raw + bytes + BE_2M)
        munmap(p + bytes, (size_t)(raw + bytes + BE_2M - (p + bytes)));
    (void)madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    return p;
}

/* perm[0..n) a random permutation (Fisher-Yates). */
static void
be_shuffle(uint32_t *perm, uint64_t n, uint64_t *rng)
{
    for (uint64_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = be_pick(rng, i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int
be_limit_run(uint64_t seed, bool huge, struct be_limit *out)
{
    uint64_t nslots = BE_LIMIT_BYTES / BE_LIMIT_SLOT, rng = seed | 1;
    char *r = be_limit_map(BE_LIMIT_BYTES, huge);
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
    be_shuffle(perm, nslots, &rng);
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

/*
 * What is left of a get when its own work is free: the lookup's two reads
 * and nothing else. An index region as large as the engine's index (2 MiB
 * rounded, at most 128 MiB: one line per item slot) whose 64-byte lines
 * each name a 128-byte item slot of a 256 MiB region, both on 2 MiB pages
 * (as the index, and a pool with -L or on a huge= tmpfs; on this VM a
 * chain through a 4 KiB-page region beside a 2 MiB-page one measured a
 * third of the rate of the two on 2 MiB pages: perf/RESULTS.md). two: a
 * step reads an index line, then copies 100 bytes from the slot it names;
 * the next step's line is a random one plus the copy's first word (always
 * 0), so each step waits for the last (a closed loop of single gets).
 * batch: groups of 16 random lines in tc_get_many's three stages (prefetch
 * the 16 lines; read each and prefetch its slot's two lines; copy each).
 * They bound a get and a batch that did no hashing, compare or
 * bookkeeping; rates in lookups (keys) a second, held against the 2 MiB
 * copy rates.
 */
struct be_lookup {
    double two, batch;
};

#define BE_LOOKUP_GROUP 16

static uint64_t
be_lookup_batch(const char *ix, const char *items, uint64_t nlines,
                uint64_t *rng)
{
    char dst[128];
    uint64_t sink = 0;

    for (uint64_t i = 0; i < BE_LIMIT_OPS; i += BE_LOOKUP_GROUP) {
        uint64_t line[BE_LOOKUP_GROUP];
        const char *slot[BE_LOOKUP_GROUP];
        for (int k = 0; k < BE_LOOKUP_GROUP; k++) {
            line[k] = be_pick(rng, nlines);
            __builtin_prefetch(ix + line[k] * 64);
        }
        for (int k = 0; k < BE_LOOKUP_GROUP; k++) {
            uint32_t s;
            memcpy(&s, ix + line[k] * 64, sizeof(s));
            slot[k] = items + (uint64_t)s * BE_LIMIT_SLOT;
            __builtin_prefetch(slot[k]);
            __builtin_prefetch(slot[k] + 64);
        }
        for (int k = 0; k < BE_LOOKUP_GROUP; k++) {
            memcpy(dst, slot[k], 100);
            sink += (unsigned char)dst[k];
            __asm__ volatile("" : : "r"(dst) : "memory");
        }
    }
    return sink;
}

static int
be_lookup_run(uint64_t seed, uint64_t index_bytes, struct be_lookup *out)
{
    uint64_t nslots = BE_LIMIT_BYTES / BE_LIMIT_SLOT, rng = seed | 1;
    uint64_t nlines = index_bytes / 64;
    char *items = be_limit_map(BE_LIMIT_BYTES, true);
    char *ix = be_limit_map(index_bytes, true);
    uint32_t *perm = malloc(nslots * sizeof(*perm));
    uint64_t sink;
    char dst[128];

    if (!items || !ix || !perm) {
        if (items)
            munmap(items, BE_LIMIT_BYTES);
        if (ix)
            munmap(ix, index_bytes);
        free(perm);
        return -ENOMEM;
    }
    memset(items, 0x5a, BE_LIMIT_BYTES);
    memset(ix, 0, index_bytes);
    /* Index line i names slot perm[i]: distinct slots spread over the
     * region; each named slot's first word is 0. */
    be_shuffle(perm, nslots, &rng);
    for (uint64_t i = 0; i < nlines; i++) {
        uint32_t slot = perm[i], zero = 0;
        memcpy(ix + i * 64, &slot, sizeof(slot));
        memcpy(items + (uint64_t)slot * BE_LIMIT_SLOT, &zero, sizeof(zero));
    }
    free(perm);
    uint64_t at = 0;
    uint64_t t0 = clock_nsec();
    for (uint64_t i = 0; i < BE_LIMIT_OPS; i++) {
        uint32_t slot, word;
        memcpy(&slot, ix + at * 64, sizeof(slot));
        memcpy(dst, items + (uint64_t)slot * BE_LIMIT_SLOT, 100);
        __asm__ volatile("" : : "r"(dst) : "memory");
        memcpy(&word, dst, sizeof(word));
        at = be_pick(&rng, nlines) + word;
    }
    out->two = BE_LIMIT_OPS * 1e9 / (double)(clock_nsec() - t0);
    t0 = clock_nsec();
    sink = be_lookup_batch(ix, items, nlines, &rng);
    out->batch = BE_LIMIT_OPS * 1e9 / (double)(clock_nsec() - t0);
    __asm__ volatile("" : : "r"(sink), "r"(at));
    munmap(items, BE_LIMIT_BYTES);
    munmap(ix, index_bytes);
    return 0;
}

/* Each page size measured twice, alternating, and the better of the two
 * kept: on this VM whichever region is filled first after the process
 * starts measures slower (up to 3x on independent copies: fresh memory
 * behind the guest), which a single pass would charge to one page size.
 * With index_bytes, the two-read bounds of a lookup likewise (twice, the
 * better kept). */
void
be_limits(uint64_t seed, uint64_t index_bytes)
{
    struct be_limit small = {0}, big = {0}, l;
    struct be_lookup look = {0}, lk;

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
    if (index_bytes == 0)
        return;
    index_bytes = (index_bytes + BE_2M - 1) & ~(uint64_t)(BE_2M - 1);
    if (index_bytes > BE_LIMIT_BYTES / BE_LIMIT_SLOT * 64)
        index_bytes = BE_LIMIT_BYTES / BE_LIMIT_SLOT * 64;
    for (int i = 0; i < 2; i++) {
        if (be_lookup_run(seed + 8 + (uint64_t)i, index_bytes, &lk)) {
            printf("# limit: out of memory for the lookup bound\n");
            return;
        }
        look.two = lk.two > look.two ? lk.two : look.two;
        look.batch = lk.batch > look.batch ? lk.batch : look.batch;
    }
    printf("# limit: a lookup's two reads alone (a %llu MiB index, then a "
           "100-byte copy, all on 2 MiB pages): single %.0f/s (%.2f of "
           "dependent copies on 2 MiB pages), batches of %d %.0f keys/s "
           "(%.2f of independent copies)\n",
           (unsigned long long)(index_bytes >> 20), look.two,
           look.two / big.dep, BE_LOOKUP_GROUP, look.batch,
           look.batch / big.rnd);
    printf("RESULT bench=limit_lookup index_mib=%llu two_ops=%.0f "
           "batch_ops=%.0f two_per_dep=%.2f batch_per_rnd=%.2f\n",
           (unsigned long long)(index_bytes >> 20), look.two, look.batch,
           look.two / big.dep, look.batch / big.rnd);
}

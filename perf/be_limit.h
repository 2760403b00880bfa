/*
 * be_limit: bench_engine's probe of the machine's limits (random 100-byte
 * copies, dependent and independent, on 4 KiB and 2 MiB pages) and its
 * smaps reading; and the random numbers both use.
 */
#ifndef TC_PERF_BE_LIMIT_H
#define TC_PERF_BE_LIMIT_H

#include <stdint.h>

static inline uint64_t
be_rand(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n) for n < 2^32 (multiply-shift, no division). */
static inline uint64_t
be_pick(uint64_t *s, uint64_t n)
{
    return ((be_rand(s) >> 32) * n) >> 32;
}

/* Bytes of the mapping at addr, or of every mapping whose line names path,
 * on 2 MiB page-table entries; *rss its resident bytes; -1 without smaps. */
int64_t be_huge_bytes(const void *addr, const char *path, int64_t *rss);

/* Print "# limit:" and "RESULT bench=limit ..." for this machine; with
 * index_bytes (the engine's index size), also "RESULT bench=limit_lookup":
 * the two reads of a lookup alone, single and in batches. */
void be_limits(uint64_t seed, uint64_t index_bytes);

#endif

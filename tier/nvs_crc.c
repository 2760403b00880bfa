/*
 * CRC32C (Castagnoli) for the NVMe store's records and segment headers:
 * the SSE4.2 crc32 instruction where the CPU has it (checked once with
 * __builtin_cpu_supports), a byte-wise table otherwise.
 *
 * Concurrency:
 *   crc_table, crc_hw  written once under pthread_once, read-only after;
 *                      crc_ready (release after them, acquire before use)
 *                      lets a call skip pthread_once once they are set
 *   crc_force_table    tests only, set before the threads that use it
 */
#include "tier/nvs.h"

#include "tier/nvs_int.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_hw;
static bool crc_ready;

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
    __atomic_store_n(&crc_ready, true, __ATOMIC_RELEASE);
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
crc_sse42(uint32_t crc, const unsigned char *p, uint64_t n)
{
    uint64_t c64 = ~crc;

    while (n > 0 && ((uintptr_t)p & 7) != 0) {
        c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
        p += 8;
        n -= 8;
    }
    while (n > 0) {
        c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
        n--;
    }
    return ~(uint32_t)c64;
}
#endif

static uint32_t
crc_table_run(uint32_t crc, const unsigned char *p, uint64_t n)
{
    uint32_t c = ~crc;

    while (n-- > 0)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

static bool crc_force_table;

void
nvs_crc32c_force_table(bool on)
{
    pthread_once(&crc_once, crc_init);
    crc_force_table = on;
}

static inline uint32_t
crc_run(uint32_t crc, const void *p, uint64_t n)
{
#if defined(__x86_64__)
    if (crc_hw && !crc_force_table)
        return crc_sse42(crc, p, n);
#endif
    return crc_table_run(crc, p, n);
}

/* The first call sets up; out of line, so that the common call saves no
 * registers and ends in a jump. */
__attribute__((noinline, cold)) static uint32_t
crc_first(uint32_t crc, const void *p, uint64_t n)
{
    pthread_once(&crc_once, crc_init);
    return crc_run(crc, p, n);
}

uint32_t
nvs_crc32c(uint32_t crc, const void *p, uint64_t n)
{
    /* a call per item written: the library call only until set up */
    if (__builtin_expect(!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE), 0))
        return crc_first(crc, p, n);
    return crc_run(crc, p, n);
}

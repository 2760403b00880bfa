/*
 * CRC32C (Castagnoli) for the NVMe store's records and segment headers:
 * the SSE4.2 crc32 instruction where the CPU has it (checked once with
 * __builtin_cpu_supports), a byte-wise table otherwise.
 *
 * Every read from the device is checked, so the CRC of a 4 KiB value is
 * part of each read's CPU (perf/RESULTS.md, "NVMe store vs fio"). One
 * chain of crc32 instructions waits for each result before the next
 * (3 cycles each, 1 per cycle possible): runs of 3 * CRC_STREAM bytes go
 * through three independent chains, each over its own third, combined at
 * the end by moving the earlier ones' registers past the later thirds'
 * length (crc_zeros: the register after CRC_STREAM zero bytes, which
 * being linear is a table lookup per byte of the register).
 *
 * Concurrency:
 *   crc_table, crc_hw, crc_shift
 *                      written once under pthread_once, read-only after;
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

/* bytes per chain: 3 chains cover 4080 bytes of a 4 KiB value (a multiple
 * of 8, so the three stay 8-byte aligned together) */
#define CRC_STREAM 1360u

static uint32_t crc_table[256];
static uint32_t crc_shift[4][256]; /* byte k of the register -> its part
                                    * after CRC_STREAM zero bytes */
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
    /* the register's bit i after CRC_STREAM zero bytes, then every byte
     * value of each register byte as the xor of its bits' */
    uint32_t bit[32];
    for (int i = 0; i < 32; i++) {
        uint32_t c = 1u << i;
        for (unsigned k = 0; k < CRC_STREAM; k++)
            c = crc_table[c & 0xff] ^ (c >> 8);
        bit[i] = c;
    }
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int j = 0; j < 8; j++)
                if ((b >> j) & 1)
                    v ^= bit[8 * k + j];
            crc_shift[k][b] = v;
        }
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
    __atomic_store_n(&crc_ready, true, __ATOMIC_RELEASE);
}

#if defined(__x86_64__)
/* The raw register c moved past CRC_STREAM zero bytes. */
static inline uint32_t
crc_zeros(uint32_t c)
{
    return crc_shift[0][c & 0xff] ^ crc_shift[1][(c >> 8) & 0xff] ^
           crc_shift[2][(c >> 16) & 0xff] ^ crc_shift[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t
crc_sse42(uint32_t crc, const unsigned char *p, uint64_t n)
{
    uint64_t c64 = ~crc;

    while (n > 0 && ((uintptr_t)p & 7) != 0) {
        c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
        n--;
    }
    /* three chains: a from the register so far, b and c from 0; the
     * register over all three thirds is zeros(zeros(a) ^ b) ^ c (the CRC
     * register is linear in its start and the data) */
    while (n >= 3 * CRC_STREAM) {
        uint64_t a = c64, b = 0, c = 0;
        for (unsigned i = 0; i < CRC_STREAM; i += 8) {
            uint64_t wa, wb, wc;
            memcpy(&wa, p + i, 8);
            memcpy(&wb, p + CRC_STREAM + i, 8);
            memcpy(&wc, p + 2 * CRC_STREAM + i, 8);
            a = __builtin_ia32_crc32di(a, wa);
            b = __builtin_ia32_crc32di(b, wb);
            c = __builtin_ia32_crc32di(c, wc);
        }
        c64 = crc_zeros(crc_zeros((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
        p += 3 * CRC_STREAM;
        n -= 3 * CRC_STREAM;
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

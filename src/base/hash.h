#pragma once
/* 64-bit hash of a byte string, fast for short keys (< 250 bytes). */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

uint64_t hash_bytes(const void *data, size_t len, uint64_t seed);

/* The same hash inline, for the engine's get and set paths (a call,
 * its frame and loop set-up cost a 16-byte key some 10 instructions);
 * the shape and constants are described in src/base/hash.c. */
/* Odd 64-bit constants with about half their bits set, drawn at random. */
#define HASH_K_WORD 0xeb6a0f26b5f08743ull /* word premix */
#define HASH_K_MUL 0x89a05df7a6c31a07ull  /* state multiplier */
#define HASH_K_ADD 0x9cb08dbca08571d9ull  /* state offset */
#define HASH_K_LEN 0xdcc4b09a972430e7ull  /* length into the start state */
#define HASH_K_FIN1 0x8553d0d64ad6c917ull /* final avalanche */
#define HASH_K_FIN2 0xfe335d44038d669dull

static inline uint64_t
hash_rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* Unaligned loads through memcpy: one mov on x86-64, and no alignment or
 * aliasing undefined behaviour. Byte order is the machine's: the hash is
 * never stored on a medium, only used in DRAM by this process. */
static inline uint64_t
hash_load64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t
hash_load32(const unsigned char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t
hash_round(uint64_t h, uint64_t w)
{
    w *= HASH_K_WORD;
    w = hash_rotl64(w,
                    29); /* bring the well-mixed high bits of the product low */
    h ^= w;
    return hash_rotl64(h, 27) * HASH_K_MUL + HASH_K_ADD;
}

static inline uint64_t
hash_final(uint64_t h)
{
    h ^= h >> 31;
    h *= HASH_K_FIN1;
    h ^= h >> 29;
    h *= HASH_K_FIN2;
    h ^= h >> 32;
    return h;
}

static inline __attribute__((always_inline)) uint64_t
hash_bytes_inline(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    size_t rest = len;
    uint64_t h = seed ^ ((uint64_t)len * HASH_K_LEN);
    uint64_t w;

    /* two words a turn: half the loop's tests for the same rounds; the
     * first turn apart, so that a key of 16 to 31 bytes (most) takes no
     * loop set-up (the same rounds in the same order) */
    if (rest >= 16) {
        h = hash_round(hash_round(h, hash_load64(p)), hash_load64(p + 8));
        rest -= 16;
        p += 16;
        for (; rest >= 16; rest -= 16, p += 16)
            h = hash_round(hash_round(h, hash_load64(p)), hash_load64(p + 8));
    }
    if (rest >= 8) {
        h = hash_round(h, hash_load64(p));
        rest -= 8;
        p += 8;
    }

    if (rest == 0)
        return hash_final(h);
    if (rest >= 4) {
        /* 4..7 bytes: the first four and the last four (they overlap when
         * rest < 8); with the length already in h this is injective. */
        w = hash_load32(p) | hash_load32(p + rest - 4) << 32;
    } else {
        /* 1..3 bytes: first, middle and last byte (repeats for short
         * tails); again injective given the length. */
        w = (uint64_t)p[0] | (uint64_t)p[rest >> 1] << 8 |
            (uint64_t)p[rest - 1] << 16;
    }
    return hash_final(hash_round(h, w));
}

/*
 * hash_bytes(): a 64-bit hash for short keys, written for this project.
 *
 * Shape: the state starts from the seed and the length; every 8-byte word is
 * premixed (multiply by an odd constant, rotate) and folded into the state,
 * which is then rotated, multiplied and offset. The last 1..7 bytes are read
 * with at most two overlapping loads inside the key (never past its end) and
 * folded in the same way. A final xorshift-multiply avalanche spreads every
 * input bit over all 64 output bits, so both the low bits (bucket index) and
 * the high bits (htab_tag) are usable.
 *
 * Every step is a bijection of the state for a fixed word and of the word for
 * a fixed state, so: keys of equal length up to 8 bytes never collide, and
 * for a given key different seeds always give different hashes.
 *
 * Not a cryptographic hash. Seeded per process, it keeps casual collision
 * floods away from the index, not a determined attacker.
 *
 * Concurrency: stateless.
 */

#include "src/base/hash.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Odd 64-bit constants with about half their bits set, drawn at random. */
#define HASH_K_WORD 0xeb6a0f26b5f08743ull /* word premix */
#define HASH_K_MUL 0x89a05df7a6c31a07ull  /* state multiplier */
#define HASH_K_ADD 0x9cb08dbca08571d9ull  /* state offset */
#define HASH_K_LEN 0xdcc4b09a972430e7ull  /* length into the start state */
#define HASH_K_FIN1 0x8553d0d64ad6c917ull /* final avalanche */
#define HASH_K_FIN2 0xfe335d44038d669dull

static inline uint64_t
rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* Unaligned loads through memcpy: one mov on x86-64, and no alignment or
 * aliasing undefined behaviour. Byte order is the machine's: the hash is
 * never stored on a medium, only used in DRAM by this process. */
static inline uint64_t
load64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t
load32(const unsigned char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t
hash_round(uint64_t h, uint64_t w)
{
    w *= HASH_K_WORD;
    w = rotl64(w, 29); /* bring the well-mixed high bits of the product low */
    h ^= w;
    return rotl64(h, 27) * HASH_K_MUL + HASH_K_ADD;
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

uint64_t
hash_bytes(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    size_t rest = len;
    uint64_t h = seed ^ ((uint64_t)len * HASH_K_LEN);
    uint64_t w;

    for (; rest >= 8; rest -= 8, p += 8)
        h = hash_round(h, load64(p));

    if (rest == 0)
        return hash_final(h);
    if (rest >= 4) {
        /* 4..7 bytes: the first four and the last four (they overlap when
         * rest < 8); with the length already in h this is injective. */
        w = load32(p) | load32(p + rest - 4) << 32;
    } else {
        /* 1..3 bytes: first, middle and last byte (repeats for short
         * tails); again injective given the length. */
        w = (uint64_t)p[0] | (uint64_t)p[rest >> 1] << 8 |
            (uint64_t)p[rest - 1] << 16;
    }
    return hash_final(hash_round(h, w));
}

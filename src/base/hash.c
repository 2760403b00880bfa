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

uint64_t
hash_bytes(const void *data, size_t len, uint64_t seed)
{
    return hash_bytes_inline(data, len, seed);
}

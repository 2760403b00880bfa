#pragma once
/* 64-bit hash of a byte string, fast for short keys (< 250 bytes). */

#include <stddef.h>
#include <stdint.h>

uint64_t hash_bytes(const void *data, size_t len, uint64_t seed);

#pragma once
/*
 * Decimal numbers: the one digit loop every parser of unsigned decimal text
 * builds on (command-line values, protocol tokens, a stored value an incr
 * reads). Each caller's rule (a sign, spaces around the digits, a size
 * suffix) stays with the caller, written once there; the digits, their
 * overflow check and the strict whole-token form live here.
 *
 * Inline: the protocol parsers call these for every number of every
 * request.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The decimal digits at the front of p[0..n): how many there are, with
 * their value in *out; 0 when there are none or their value passes
 * UINT64_MAX (*out is then left alone). Leading zeros count as digits. */
static inline size_t
num_scan_u64(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (n <= 19) { /* 19 digits cannot pass UINT64_MAX: no check per digit */
        for (; i < n; i++) {
            unsigned d = (unsigned)((unsigned char)p[i] - '0');
            if (d > 9)
                break;
            v = v * 10 + d;
        }
        if (i)
            *out = v;
        return i;
    }
    for (; i < n; i++) {
        unsigned d = (unsigned)((unsigned char)p[i] - '0');
        if (d > 9)
            break;
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    if (i)
        *out = v;
    return i;
}

/* Strict unsigned decimal, memcached's safe_strtoull on a whole token:
 * p[0..n) is one or more digits and nothing else (no sign, no space), of
 * value at most max. *out is written only on success. */
static inline bool
num_parse_u64(const char *p, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || num_scan_u64(p, n, &v) != n || v > max)
        return false;
    *out = v;
    return true;
}

/*
 * bench_loadgen's workload: the monotonic clock, the random number
 * generator, key names ("key:" + 12 hex digits) and the key distribution
 * (uniform, or zipf through a CDF table and a multiplier that scatters the
 * popular ranks over the key space). See loadgen.h.
 */

#include "perf/loadgen/loadgen.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double *lg_zipf_cdf;
char lg_hex2[256][2];

/* ---- small helpers --------------------------------------------------- */

uint64_t
lg_nsec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t
lg_rand(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
uint64_t
lg_below(uint64_t *s, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)lg_rand(s) * n) >> 64);
}

void
lg_key(char *k, uint64_t i)
{
    memcpy(k, "key:", 4);
    for (int d = 14; d >= 4; d -= 2) {
        memcpy(k + d, lg_hex2[i & 0xff], 2);
        i >>= 8;
    }
}

/* Zipf over ranks 1..n with exponent s: CDF table, binary search, then
 * rank -> key through a bijection (rank * P + 7) mod n so that the hot
 * keys are spread over the key space (and the server's hash buckets) rather
 * than being key 0, 1, 2... */
int
lg_zipf_setup(uint64_t n, double s)
{
    double sum = 0;

    lg_zipf_cdf = malloc(n * sizeof(double));
    if (lg_zipf_cdf == NULL)
        return -ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        sum += 1.0 / pow((double)(i + 1), s);
        lg_zipf_cdf[i] = sum;
    }
    for (uint64_t i = 0; i < n; i++)
        lg_zipf_cdf[i] /= sum;
    return 0;
}

uint64_t
lg_gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

uint64_t lg_zipf_mult = 2654435761ull;

uint64_t
lg_pick_key(struct lg_thread *th)
{
    uint64_t n = th->o->keys, lo = 0, hi;
    double u;

    if (th->o->dist == LG_UNIFORM)
        return lg_below(&th->rng, n);
    u = (double)(lg_rand(&th->rng) >> 11) * (1.0 / 9007199254740992.0);
    hi = n - 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (lg_zipf_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint64_t)(((unsigned __int128)lo * lg_zipf_mult + 7) % n);
}

/*
 * Clock: coarse wall seconds (or a fake time for tests) and monotonic
 * nanoseconds.
 *
 * Concurrency:
 *   clock_fake   _Atomic uint32_t, relaxed: a single value with nothing
 *                published alongside it. A test that sets it and then starts
 *                or signals another thread gets the ordering from that start
 *                or signal; readers otherwise see the old or the new value.
 *                0 means "no fake, use the real clock".
 */

#include "src/base/clock.h"

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

static _Atomic uint32_t clock_fake;

uint32_t
clock_now(void)
{
    uint32_t fake = atomic_load_explicit(&clock_fake, memory_order_relaxed);

    if (fake != 0)
        return fake;
    /* time() is the vDSO's read of the kernel's wall second (the second
     * CLOCK_REALTIME_COARSE reports), called without glibc's clock_gettime
     * wrapper or a timespec; one-second resolution is all needed here. */
    return (uint32_t)time(NULL);
}

void
clock_set_fake(uint32_t t)
{
    atomic_store_explicit(&clock_fake, t, memory_order_relaxed);
}

void
clock_advance(uint32_t secs)
{
    uint32_t old = atomic_load_explicit(&clock_fake, memory_order_relaxed);
    uint32_t next;

    do {
        if (old == 0)
            return; /* real clock: nothing to move */
        /* Saturate rather than wrap: wrapping could land on 0, which would
         * silently switch back to the real clock. */
        next = old > UINT32_MAX - secs ? UINT32_MAX : old + secs;
    } while (!atomic_compare_exchange_weak_explicit(
        &clock_fake, &old, next, memory_order_relaxed, memory_order_relaxed));
}

uint64_t
clock_nsec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t
clock_coarse_nsec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t
clock_rate_nsec(void)
{
    uint32_t fake = atomic_load_explicit(&clock_fake, memory_order_relaxed);

    if (fake != 0)
        return (uint64_t)fake * 1000000000ull;
    return clock_nsec();
}

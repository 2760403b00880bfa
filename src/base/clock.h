#pragma once
/*
 * Clock: wall seconds for expiry (injectable for tests) and a monotonic
 * nanosecond counter for latency figures.
 */

#include <stdint.h>

/* Unix seconds now, or the fake time when one is set. Cheap (coarse clock). */
uint32_t clock_now(void);

/* Tests: freeze the clock at t (unix seconds); 0 returns to the real clock. */
void clock_set_fake(uint32_t t);

/* Tests: move the fake clock forward (no effect when no fake is set). */
void clock_advance(uint32_t secs);

/* Monotonic nanoseconds. */
uint64_t clock_nsec(void);

/* The same clock to the kernel's tick (a few ms), cheaper to read: for
 * whole seconds taken once per loop turn. At most a tick behind
 * clock_nsec(). */
uint64_t clock_coarse_nsec(void);

/* Nanoseconds for rate windows (hot-key rates): the fake time while one is
 * set, so that a test's rates depend on the time it moves on and not on how
 * long its steps took; clock_nsec() otherwise. The two scales differ: a
 * caller that sees the value go back (fake set or cleared) must treat the
 * interval as unknown. */
uint64_t clock_rate_nsec(void);

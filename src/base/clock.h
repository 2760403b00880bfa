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

#pragma once
/*
 * PMEM write (and read) helpers. Every store into the PMEM region goes
 * through these: they are the single place where write-hotspot accounting and
 * latency emulation hook in, and in debug builds they assert that
 * the calling thread holds no lock (DESIGN rule 2: no PMEM writes inside a
 * critical section).
 *
 * By default nothing is flushed for durability here: writes are ordered
 * (pm_fence), which is what a process crash needs (pm_set_persist: the
 * flushes power loss needs). pm_copy() and pm_set() are memcpy and memset:
 * ordinary cached stores, the same stores libpmem's pmem_memcpy() with
 * PMEM_F_MEM_NOFLUSH made (per PMDK's x86 code) without its dispatch;
 * non-temporal copies would need flushing allowed, which costs extra on
 * the tmpfs emulation (a choice to measure on real PMEM).
 *
 * Concurrency: stateless apart from the hooks (set once at setup, before any
 * worker runs).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

void pm_set(void *pmem_dst, int c, size_t n);
/* What a write helper does past its store when pm_slow is set (any hook,
 * latency emulation or persistence on; pm.c sets it, at setup): calls the
 * hook, waits, flushes. */
extern bool pm_slow;
void pm_note_write_slow(const void *pmem_dst, size_t n);
#ifdef NDEBUG
/* Release builds (no lock check to make): pm_copy, pm_store32 and
 * pm_store64 inline, the store and the one flag test. */
static inline void
pm_note_write(const void *pmem_dst, size_t n)
{
    if (__builtin_expect(__atomic_load_n(&pm_slow, __ATOMIC_RELAXED), 0))
        pm_note_write_slow(pmem_dst, n);
}
static inline void
pm_copy(void *pmem_dst, const void *src, size_t n)
{
    memcpy(pmem_dst, src, n);
    pm_note_write(pmem_dst, n);
}
/* pm_copy of a few bytes (a key): 8 to 32 in overlapping 8-byte moves,
 * no call (a packed set's key: memcpy's call and dispatch cost it some
 * 15 instructions); others by memcpy. The same bytes. */
static inline void
pm_copy_short(void *pmem_dst, const void *src, size_t n)
{
    char *d = pmem_dst;
    const char *s = src;
    uint64_t a, b, c, e;
    if (n >= 8 && n <= 16) {
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n > 16 && n <= 32) {
        memcpy(&a, s, 8);
        memcpy(&b, s + 8, 8);
        memcpy(&c, s + n - 16, 8);
        memcpy(&e, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + 8, &b, 8);
        memcpy(d + n - 16, &c, 8);
        memcpy(d + n - 8, &e, 8);
    } else {
        memcpy(d, s, n);
    }
    pm_note_write(pmem_dst, n);
}
/* one atomic 4-byte store (relaxed: single-copy atomicity only;
 * publication is the caller's, the index switch with release semantics) */
static inline void
pm_store32(uint32_t *pmem_dst, uint32_t v)
{
    __atomic_store_n(pmem_dst, v, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
}
/* one atomic 8-byte store (relaxed, as pm_store32) */
static inline void
pm_store64(uint64_t *pmem_dst, uint64_t v)
{
    __atomic_store_n(pmem_dst, v, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
}
/* one atomic 2-byte store (relaxed, as pm_store32): a packed item's
 * commit, on every packed set and unlink */
static inline void
pm_store16(uint16_t *pmem_dst, uint16_t v)
{
    __atomic_store_n(pmem_dst, v, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
}
#else
void pm_store16(uint16_t *pmem_dst, uint16_t v); /* one atomic 2-byte store */
void pm_copy(void *pmem_dst, const void *src, size_t n);
static inline void
pm_copy_short(void *pmem_dst, const void *src, size_t n)
{
    pm_copy(pmem_dst, src, n);
}
void pm_store32(uint32_t *pmem_dst, uint32_t v); /* one atomic 4-byte store */
void pm_store64(uint64_t *pmem_dst, uint64_t v); /* one atomic 8-byte store */
#endif
/* One atomic 8-byte compare-and-swap: *pmem_dst becomes v if it held
 * expect; whether it did. Counted as a write either way (the line is taken
 * for writing). */
bool pm_cas64(uint64_t *pmem_dst, uint64_t expect, uint64_t v);
bool pm_cas32(uint32_t *pmem_dst, uint32_t expect, uint32_t v); /* 4 bytes */
bool pm_cas16(uint16_t *pmem_dst, uint16_t expect, uint16_t v); /* 2 bytes */

/* Order every earlier helper write (including non-temporal stores) before
 * later stores: called once per item, before the index publishes it.
 * Inline on x86-64, where it is what pmem_drain() does there (its fence is
 * an sfence whatever the mapping), without a call (twice on every set);
 * the asm's memory clobber makes it a compiler barrier as well. No
 * __atomic_thread_fence: TSan does not support it. Debug builds keep the
 * call, as they keep the other helpers' (tests wrap it to see the order of
 * an item's stores and its fence). */
#if defined(__x86_64__) && defined(NDEBUG)
static inline void
pm_fence(void)
{
    __asm__ __volatile__("sfence" ::: "memory");
}
#else
void pm_fence(void);
#endif

/* Copy out of PMEM (reads go through here only where latency emulation of
 * reads matters: value copies to clients). */
void pm_read(void *dst, const void *pmem_src, size_t n);

/* A read of n bytes done in place (a value handed to a client by pointer
 * instead of copied through pm_read()): charges the read latency emulation,
 * nothing else. */
void pm_note_read(const void *pmem_src, size_t n);
/* Whether pm_note_read has anything to do (read latency emulation on):
 * for a hot path that tests it inline and calls pm_note_read only then.
 * pm_read_ns is the emulation's per-line read latency (0 = off), set only
 * by pm_set_latency. */
extern uint32_t pm_read_ns;
static inline bool
pm_reads_noted(void)
{
    return __atomic_load_n(&pm_read_ns, __ATOMIC_RELAXED) != 0;
}

/* Hook for write-hotspot accounting: called with the destination and length of
 * every write when set; NULL (the default) costs one predictable branch. */
typedef void pm_write_hook_fn(const void *pmem_dst, size_t n);
void pm_set_write_hook(pm_write_hook_fn *fn);

/* Latency emulation, for PMEM emulated on DRAM: a busy-wait of
 * write_ns_per_line for every 64-byte line a write helper (pm_copy, pm_set,
 * pm_store*) touches and of read_ns_per_line for every line pm_read() or
 * pm_note_read() covers, to model a medium slower than DRAM. 0 = off (the
 * default); off, the helpers pay the same single predictable branch as for the
 * write hook. Process-wide. Context: setup, like pm_set_write_hook(). */
void pm_set_latency(uint32_t write_ns_per_line, uint32_t read_ns_per_line);

/* Durability against power loss (durability=power): on, every write
 * helper flushes and drains what it wrote (pmem_persist) before it
 * returns. Off (the default), writes are ordered by pm_fence only, which
 * is all a process crash needs. Process-wide. Context: as
 * pm_set_write_hook(). */
void pm_set_persist(bool on);

/* 64-byte lines that [addr, addr + n) touches (0 for n == 0). */
static inline uint64_t
pm_lines(const void *addr, size_t n)
{
    uintptr_t a = (uintptr_t)addr;
    return n ? (uint64_t)(((a + n - 1) >> 6) - (a >> 6) + 1) : 0;
}

/* --- Ablation (experiment only) ---
 * The ablation switches (tc_config ablate_meta_in_pmem / ablate_init_in_lock)
 * reproduce Tair MDB's bad layouts, whose PMEM writes happen inside a
 * critical section on purpose. Between pm_unchecked_begin() and
 * pm_unchecked_end() the calling thread's helper writes skip the debug
 * "no lock held" check (and only that: they are counted and delayed like any
 * other). Nests; never used on a default path. */
void pm_unchecked_begin(void);
void pm_unchecked_end(void);

/*
 * PMEM write (and read) helpers: the one seam every store into the PMEM
 * region goes through (see tier/pm.h).
 *
 * Concurrency:
 *   pm_write_hook, pm_write_ns, pm_read_ns, pm_persist_on, pm_slow
 *                    set at setup, before any worker thread starts
 *                    (thread creation orders the stores before every load);
 *                    read with relaxed loads on every write
 *   PMEM contents    written outside any lock: debug builds assert that the
 *                    calling thread holds none (DESIGN rule 2)
 *   pm_unchecked_depth  thread-local (ablation switches only)
 *   otherwise        stateless; callable from any thread
 *
 * By default nothing here flushes: a process crash needs only the order
 * of the stores (pm_fence), the kernel keeps the file's pages. Copies
 * and fills are plain memcpy and memset (temporal stores), which is what
 * libpmem's PMEM_F_MEM_NOFLUSH made of them before.
 * With pm_set_persist(true) (durability=power on real PMEM) every write
 * helper ends with pmem_persist() of what it wrote: its lines flushed
 * (clwb or clflushopt) and drained (sfence) before it returns, so each
 * write is on the medium before the next one starts and before any
 * operation is answered; it rides on the slow path's one flag.
 */
#include "tier/pm.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/lock.h"

#include <assert.h>
#include <libpmem.h>
#include <stdbool.h>
#include <string.h>

static pm_write_hook_fn *pm_write_hook;
static uint32_t pm_write_ns; /* busy-wait per line written, 0 = off */
uint32_t pm_read_ns;         /* busy-wait per line read, 0 = off (pm.h) */
static bool pm_persist_on;   /* durability=power on real PMEM */
/* Any of the above set: the one flag the fast path tests (pm.h in
 * release builds). */
bool pm_slow;

/* Ablation only: > 0 while this thread makes the experiment's deliberate
 * in-lock writes (pm_unchecked_begin). Owner thread only. */
static _Thread_local unsigned pm_unchecked_depth;

/*
 * Debug builds: a PMEM write while the thread holds a lock aborts. Reads are
 * not checked: rule 2 is about writes, and a writer holding a bucket lock
 * may legitimately compare a key stored in PMEM.
 */
static inline void
pm_check_unlocked(void)
{
    assert((lock_held_depth() == 0 || pm_unchecked_depth > 0) &&
           "PMEM write inside a critical section");
}

static inline void
pm_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/*
 * Spin until ns nanoseconds have passed on the monotonic clock (the clock
 * is the calibration: the wait is wall time whatever the CPU's speed). The
 * clock read itself costs some tens of nanoseconds, so very small settings
 * round up.
 */
static void
pm_spin(uint64_t ns)
{
    uint64_t end = clock_nsec() + ns;

    while (clock_nsec() < end)
        pm_pause();
}

void __attribute__((noinline))
pm_note_write_slow(const void *pmem_dst, size_t n)
{
    pm_write_hook_fn *fn = __atomic_load_n(&pm_write_hook, __ATOMIC_RELAXED);
    uint32_t ns = __atomic_load_n(&pm_write_ns, __ATOMIC_RELAXED);

    if (fn != NULL)
        fn(pmem_dst, n);
    if (ns != 0)
        pm_spin(pm_lines(pmem_dst, n) * ns);
    if (__atomic_load_n(&pm_persist_on, __ATOMIC_RELAXED))
        pmem_persist(pmem_dst, n);
}

#ifndef NDEBUG
static inline void
pm_note_write(const void *pmem_dst, size_t n)
{
    if (unlikely(__atomic_load_n(&pm_slow, __ATOMIC_RELAXED)))
        pm_note_write_slow(pmem_dst, n);
}
#endif

/* Plain memcpy and memset: the stores libpmem makes with
 * PMEM_F_MEM_NOFLUSH (temporal, no flush, no fence), without its dispatch
 * (about 120 instructions of a 150-byte copy, cachegrind). glibc turns to
 * non-temporal stores only for copies of megabytes, which pm_fence's
 * sfence orders as well, and pmem_persist flushes either kind. A chunk
 * may be rewritten here while another thread looks at it (a victim found
 * by a chunk scan): such readers read an item only once the index is seen
 * holding it (htab_holds_rcu, whose acquire load orders them after these
 * stores) or through uninstrumented byte loads (reclaim's read_victim). */
#ifndef NDEBUG /* release builds: inline in pm.h */
void
pm_copy(void *pmem_dst, const void *src, size_t n)
{
    pm_check_unlocked();
    memcpy(pmem_dst, src, n);
    pm_note_write(pmem_dst, n);
}
#endif

void
pm_set(void *pmem_dst, int c, size_t n)
{
    pm_check_unlocked();
    memset(pmem_dst, c, n);
    pm_note_write(pmem_dst, n);
}

#ifndef NDEBUG /* release builds: inline in pm.h */
void
pm_store16(uint16_t *pmem_dst, uint16_t v)
{
    pm_check_unlocked();
    assert(((uintptr_t)pmem_dst & (sizeof(v) - 1)) == 0);
    /* Relaxed: as in pm_store32(). */
    __atomic_store_n(pmem_dst, v, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
}
#endif

#ifndef NDEBUG /* release builds: inline in pm.h */
void
pm_store32(uint32_t *pmem_dst, uint32_t v)
{
    pm_check_unlocked();
    assert(((uintptr_t)pmem_dst & (sizeof(v) - 1)) == 0);
    /* Relaxed: single-copy atomicity only; publication is the caller's
     * (index switch with release semantics). */
    __atomic_store_n(pmem_dst, v, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
}
#endif

#ifndef NDEBUG /* release builds: inline in pm.h */
void
pm_store64(uint64_t *pmem_dst, uint64_t v)
{
    pm_check_unlocked();
    assert(((uintptr_t)pmem_dst & (sizeof(v) - 1)) == 0);
    /* Relaxed: as in pm_store32(). */
    __atomic_store_n(pmem_dst, v, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
}
#endif

bool
pm_cas32(uint32_t *pmem_dst, uint32_t expect, uint32_t v)
{
    pm_check_unlocked();
    assert(((uintptr_t)pmem_dst & (sizeof(v) - 1)) == 0);
    /* Relaxed: as in pm_store32(); the caller orders what it guards. */
    bool ok = __atomic_compare_exchange_n(pmem_dst, &expect, v, false,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
    return ok;
}

bool
pm_cas16(uint16_t *pmem_dst, uint16_t expect, uint16_t v)
{
    pm_check_unlocked();
    assert(((uintptr_t)pmem_dst & (sizeof(v) - 1)) == 0);
    /* Relaxed: as in pm_store32(); the caller orders what it guards. */
    bool ok = __atomic_compare_exchange_n(pmem_dst, &expect, v, false,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
    return ok;
}

bool
pm_cas64(uint64_t *pmem_dst, uint64_t expect, uint64_t v)
{
    pm_check_unlocked();
    assert(((uintptr_t)pmem_dst & (sizeof(v) - 1)) == 0);
    /* Relaxed: as in pm_store32(); the caller orders what it guards. */
    bool ok = __atomic_compare_exchange_n(pmem_dst, &expect, v, false,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    pm_note_write(pmem_dst, sizeof(v));
    return ok;
}

#if !defined(__x86_64__) || !defined(NDEBUG)
/*
 * pmem_drain() is libpmem's store fence: it orders non-temporal stores,
 * which a release store alone does not (today's helpers use temporal
 * stores only, see the top). For the C memory model the publishing store
 * that follows still needs release order; this call is opaque, so it is
 * also a compiler barrier. (x86-64 release builds: inline in tier/pm.h.)
 */
void
pm_fence(void)
{
    pmem_drain();
}
#endif

void
pm_note_read(const void *pmem_src, size_t n)
{
    if (unlikely(__atomic_load_n(&pm_slow, __ATOMIC_RELAXED))) {
        uint32_t ns = __atomic_load_n(&pm_read_ns, __ATOMIC_RELAXED);
        if (ns != 0)
            pm_spin(pm_lines(pmem_src, n) * ns);
    }
}

void
pm_read(void *dst, const void *pmem_src, size_t n)
{
    memcpy(dst, pmem_src, n);
    pm_note_read(pmem_src, n);
}

static void
pm_update_slow(void)
{
    bool slow = __atomic_load_n(&pm_write_hook, __ATOMIC_RELAXED) != NULL ||
                __atomic_load_n(&pm_write_ns, __ATOMIC_RELAXED) != 0 ||
                __atomic_load_n(&pm_read_ns, __ATOMIC_RELAXED) != 0 ||
                __atomic_load_n(&pm_persist_on, __ATOMIC_RELAXED);
    __atomic_store_n(&pm_slow, slow, __ATOMIC_RELAXED);
}

/*
 * Context: setup, before worker threads start (or in a single-threaded
 * test). Relaxed: thread creation publishes the hook and whatever state it
 * uses.
 */
void
pm_set_write_hook(pm_write_hook_fn *fn)
{
    __atomic_store_n(&pm_write_hook, fn, __ATOMIC_RELAXED);
    pm_update_slow();
}

/* Context: as pm_set_write_hook(). */
void
pm_set_latency(uint32_t write_ns_per_line, uint32_t read_ns_per_line)
{
    __atomic_store_n(&pm_write_ns, write_ns_per_line, __ATOMIC_RELAXED);
    __atomic_store_n(&pm_read_ns, read_ns_per_line, __ATOMIC_RELAXED);
    pm_update_slow();
}

/* Context: as pm_set_write_hook(). */
void
pm_set_persist(bool on)
{
    __atomic_store_n(&pm_persist_on, on, __ATOMIC_RELAXED);
    pm_update_slow();
}

/* --- Ablation (experiment only): see pm.h --- */

void
pm_unchecked_begin(void)
{
    pm_unchecked_depth++;
}

void
pm_unchecked_end(void)
{
    assert(pm_unchecked_depth > 0);
    pm_unchecked_depth--;
}

/*
 * Lock wrappers with rank checking in debug builds.
 *
 * Concurrency:
 *   lock->mutex    the pthread mutex does its own synchronisation.
 *   lock->rank     written once by lock_init() before the lock is shared,
 *                  read-only afterwards.
 *   spin->word     _Atomic: 0 free, 1 held. The acquiring exchange
 *                  (memory_order_acquire) pairs with the releasing store
 *                  (memory_order_release) of the previous holder, so all
 *                  writes made inside one critical section are visible in
 *                  the next. The spinning loads are relaxed: they only wait
 *                  for the word to look free, the exchange then decides.
 *   held ranks     (debug builds) thread-local stack, touched only by the
 *                  owning thread: no lock, no atomics.
 */

#include "src/base/lock.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "src/base/compiler.h"

/* Pause instructions spent waiting before yielding the CPU once: on an
 * oversubscribed machine the holder may be descheduled, and spinning for a
 * whole time slice would only delay it further. */
#define SPIN_YIELD_AFTER 1024

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

static void lock_fatal(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn, cold));

static void
lock_fatal(const char *fmt, ...)
{
    va_list ap;

    fputs("tiercache: fatal: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

#ifndef NDEBUG

/* Deeper nesting than the four ranks allow means a bug (a lock taken twice
 * or never released); the limit keeps the stack in a fixed array. */
#define RANK_STACK_MAX 16

static __thread int rank_stack[RANK_STACK_MAX];
static __thread int rank_depth;

/* Called before blocking on the lock, so a rank violation aborts with a
 * message instead of deadlocking. */
static void
rank_check(int rank)
{
    if (rank_depth > 0 && rank <= rank_stack[rank_depth - 1])
        lock_fatal("lock rank violation: taking rank %d while holding rank "
                   "%d (ranks must strictly increase)",
                   rank, rank_stack[rank_depth - 1]);
    if (rank_depth >= RANK_STACK_MAX)
        lock_fatal("lock rank stack overflow: taking rank %d with %d locks "
                   "held",
                   rank, rank_depth);
}

static void
rank_push(int rank)
{
    rank_stack[rank_depth++] = rank;
}

/* Locks may be released in any order: remove the matching entry wherever it
 * sits. The stack stays sorted (pushes only ever add a larger rank), so the
 * top is still the highest rank held. */
static void
rank_pop(int rank)
{
    int i;

    for (i = rank_depth - 1; i >= 0; i--) {
        if (rank_stack[i] == rank) {
            for (; i < rank_depth - 1; i++)
                rank_stack[i] = rank_stack[i + 1];
            rank_depth--;
            return;
        }
    }
    lock_fatal("lock rank violation: releasing rank %d, which this thread "
               "does not hold",
               rank);
}

int
lock_held_depth(void)
{
    return rank_depth;
}

#else /* NDEBUG */

static inline void
rank_check(int rank)
{
    (void)rank;
}

static inline void
rank_push(int rank)
{
    (void)rank;
}

static inline void
rank_pop(int rank)
{
    (void)rank;
}

int
lock_held_depth(void)
{
    return 0;
}

#endif /* NDEBUG */

int
lock_init(struct lock *l, int rank)
{
    pthread_mutexattr_t attr;
    int rc;

    if (rank <= 0)
        return -EINVAL;
    rc = pthread_mutexattr_init(&attr);
    if (rc != 0)
        return -rc;
#ifndef NDEBUG
    /* Debug builds: unlocking a mutex the thread does not hold, or locking
     * one it already holds, is reported instead of being undefined. */
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
#endif
    rc = pthread_mutex_init(&l->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0)
        return -rc;
    l->rank = rank;
    return 0;
}

void
lock_fini(struct lock *l)
{
    int rc = pthread_mutex_destroy(&l->mutex);

    if (unlikely(rc != 0))
        lock_fatal("lock_fini: rank %d lock still in use (error %d)", l->rank,
                   rc);
}

void
lock_acquire(struct lock *l)
{
    int rc;

    rank_check(l->rank);
    rc = pthread_mutex_lock(&l->mutex);
    if (unlikely(rc != 0))
        lock_fatal("lock_acquire: rank %d: pthread_mutex_lock failed (error "
                   "%d)",
                   l->rank, rc);
    rank_push(l->rank);
}

void
lock_release(struct lock *l)
{
    int rc;

    rank_pop(l->rank);
    rc = pthread_mutex_unlock(&l->mutex);
    if (unlikely(rc != 0))
        lock_fatal("lock_release: rank %d: pthread_mutex_unlock failed "
                   "(error %d)",
                   l->rank, rc);
}

/* Take s, spinning while another thread holds it. */
static void
spin_take(struct spin *s)
{
    unsigned spins = 0;

    for (;;) {
        /* Acquire: pairs with the release store in spin_release() of the
         * previous holder. */
        if (atomic_exchange_explicit(&s->word, 1, memory_order_acquire) == 0)
            break;
        /* Test before the next test-and-set: wait on a shared (read-only)
         * copy of the line instead of bouncing it with exchanges. Relaxed:
         * the exchange above is what orders the critical section. */
        while (atomic_load_explicit(&s->word, memory_order_relaxed) != 0) {
            cpu_relax();
            if (++spins >= SPIN_YIELD_AFTER) {
                spins = 0;
                sched_yield();
            }
        }
    }
}

#ifdef NDEBUG
/* spin_acquire (inline in lock.h) found s held. */
void
spin_acquire_slow(struct spin *s)
{
    spin_take(s);
}
#else
void
spin_acquire(struct spin *s, int rank)
{
    rank_check(rank);
    spin_take(s);
    rank_push(rank);
}

void
spin_release(struct spin *s, int rank)
{
    rank_pop(rank);
    if (unlikely(atomic_load_explicit(&s->word, memory_order_relaxed) == 0))
        lock_fatal("spin_release: rank %d spin lock is not held", rank);
    /* Release: pairs with the acquiring exchange in spin_acquire() of the
     * next holder, publishing every write of this critical section. */
    atomic_store_explicit(&s->word, 0, memory_order_release);
}
#endif

/*
 * Maintenance: the step that keeps a cache in shape without a request
 * asking for it, written once, and the thread that runs it. tc_maintain
 * runs the same step on the caller's thread (a cache opened without the
 * thread, or a test driving it).
 *
 * The step: the expiry sweep (src/engine/reclaim.c), the hot-key tick
 * (src/engine/hotkey.c), flash compaction (src/engine/ext.c), limbo, a
 * pending pool shrink, and the rebase of the slabs' access times. The
 * thread runs it every second and, in between, empties limbo whenever a
 * writer kicks it (cache_defer_free).
 *
 * Concurrency:
 *   c->bg, bg_running   written by maint_start/maint_stop only (open and
 *                       close, no other thread using the cache).
 *   c->bg_stop, bg_kick atomics; the thread reads them relaxed: bg_lock
 *                       and bg_cond order them with its waits.
 *   c->bg_lock          guards the thread's sleep (with bg_cond); no other
 *                       lock is taken under it.
 *   The step itself takes admin (sweep, shrink) and the locks of the
 *   modules it calls, one at a time.
 */
#include "src/engine/maint.h"

#include "src/base/clock.h"
#include "src/base/err.h"
#include "src/engine/cache.h"
#include "src/engine/ext.h"
#include "src/engine/hotkey.h"
#include "src/engine/reclaim.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* Home buckets of an index doubling moved a step: a few ms. */
#define MAINT_INDEX_MOVE 65536

int
maint_step(struct cache_thread *t)
{
    struct cache *c = t->cache;
    int n = reclaim_sweep(t, c->cfg.sweep_budget);
    hotkey_tick(t);
    ext_maintain(t);
    /* a doubling of the index that writers left unfinished (they move a
     * few buckets each; with no writes, this finishes it) */
    (void)htab_grow_step(c->htab, MAINT_INDEX_MOVE);
    cache_reclaim_limbo(t);
    if (atomic_load_explicit(&c->shrink_target, memory_order_relaxed))
        reclaim_shrink(t);
    if (reclaim_move_waiting(c))
        reclaim_settle(t);
    slab_atime_tick(c->slab, clock_now());
    return n;
}

/* Chunks this thread frees (the limbo of every thread, the sweep) land in
 * its quota stash, up to two batches a class: 32 MiB of the largest
 * chunks. Workers give theirs back at their next operation after a page
 * drain asks (cache_thread_get) and when they go idle; this thread never
 * calls that again, so it gives them back after each piece of work. Else
 * they stay there for good: a drain of their page fails (a class left
 * with no page answers every set "out of memory"), and a class short of
 * chunks evicts its own items (an append near -I evicted the item it
 * grew) while a third of the pool sits in this stash. */
static void
maint_quiesce(struct cache_thread *t)
{
    cache_thread_quiesce(t);
}

/* The maintenance thread: every second the step, in between limbo
 * whenever a writer kicks it. */
static void *
maint_main(void *arg)
{
    struct cache *c = arg;
    struct cache_thread *t = cache_thread_get(c);
    struct timespec tick;

    pthread_setname_np(pthread_self(), "tc-maint");
    if (!t)
        return NULL;
    clock_gettime(CLOCK_REALTIME, &tick);
    pthread_mutex_lock(&c->bg_lock);
    while (!atomic_load_explicit(&c->bg_stop, memory_order_relaxed)) {
        tick.tv_sec += 1;
        int rc = 0;
        while (rc != ETIMEDOUT &&
               !atomic_load_explicit(&c->bg_stop, memory_order_relaxed)) {
            rc = pthread_cond_timedwait(&c->bg_cond, &c->bg_lock, &tick);
            if (atomic_exchange_explicit(&c->bg_kick, false,
                                         memory_order_relaxed)) {
                pthread_mutex_unlock(&c->bg_lock);
                cache_reclaim_limbo(t);
                maint_quiesce(t);
                pthread_mutex_lock(&c->bg_lock);
            }
        }
        if (atomic_load_explicit(&c->bg_stop, memory_order_relaxed))
            break;
        pthread_mutex_unlock(&c->bg_lock);
        maint_step(t);
        maint_quiesce(t);
        pthread_mutex_lock(&c->bg_lock);
    }
    pthread_mutex_unlock(&c->bg_lock);
    cache_thread_put(c);
    return NULL;
}

int
maint_start(struct cache *c)
{
    /* relaxed: pthread_create orders it before the thread's first load */
    atomic_store_explicit(&c->bg_stop, false, memory_order_relaxed);
    int rc = pthread_create(&c->bg, NULL, maint_main, c);
    if (rc) {
        err_set("cannot start the maintenance thread: %s", strerror(rc));
        return -rc;
    }
    c->bg_running = true;
    return 0;
}

void
maint_stop(struct cache *c)
{
    if (!c->bg_running)
        return;
    pthread_mutex_lock(&c->bg_lock);
    /* relaxed: bg_lock orders it with the thread's check */
    atomic_store_explicit(&c->bg_stop, true, memory_order_relaxed);
    pthread_cond_signal(&c->bg_cond);
    pthread_mutex_unlock(&c->bg_lock);
    pthread_join(c->bg, NULL);
    c->bg_running = false;
}

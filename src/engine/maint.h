#pragma once
/*
 * Maintenance (see maint.c): the periodic step (expiry sweep, hot-key
 * tick, flash compaction, limbo, a pending shrink, the access-time base),
 * run by the maintenance thread every second or by tc_maintain.
 */

struct cache;
struct cache_thread;

/* One maintenance step on the calling thread: the items the expiry sweep
 * reclaimed. Context: no lock, no RCU section. Locks: admin (sweep,
 * shrink). */
int maint_step(struct cache_thread *t);

/* Start the maintenance thread (c->cfg.background): 0, or a negative
 * errno with err_msg set. */
int maint_start(struct cache *c);
/* Stop it and wait for it (a no-op when it is not running). */
void maint_stop(struct cache *c);

#pragma once
/* The cache's invariant check (src/engine/cache_check.c). */

#include "src/engine/cache.h"

/* tc_check(): index <-> items <-> stats <-> slabs. No writer may run. */
int cache_check(struct cache *c);

#pragma once
/*
 * Crash points: named spots inside the engine's multi-step operations (a
 * set between its commit word and its publication, a delete between its
 * unlink and its invalidation, a page move, a shrink, a compaction, a
 * promotion to the DRAM hot pool) where a test may stop the process, to
 * prove that a restart after a crash there keeps the rules of
 * doc/architecture.md ("Commit word and invalidation").
 *
 * Debug builds only (no NDEBUG): TC_CRASH_POINT(name) calls the function a
 * test stored in crashpoint_hook, if any, with the point's name; the test
 * decides there whether to _exit (tests/unit/test_crashpoints.c). In a
 * release build the macro is nothing: no load, no branch on the hot path.
 *
 * Concurrency: crashpoint_hook is set by a test before the threads that
 * reach the points start, and read with a relaxed atomic load.
 */

#ifndef NDEBUG
#define TC_CRASHPOINTS 1

typedef void (*crashpoint_fn)(const char *name);

/* The test's hook; NULL (the default): the points do nothing. */
extern crashpoint_fn crashpoint_hook;

#define TC_CRASH_POINT(name)                                                   \
    do {                                                                       \
        crashpoint_fn crashpoint_fn_ =                                         \
            __atomic_load_n(&crashpoint_hook, __ATOMIC_RELAXED);               \
        if (crashpoint_fn_)                                                    \
            crashpoint_fn_(name);                                              \
    } while (0)
#else
#define TC_CRASH_POINT(name) ((void)0)
#endif

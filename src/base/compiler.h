#pragma once
/* Small compiler helpers shared by every layer. */

#include <stddef.h>
#include <stdint.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define CACHE_LINE 64
#define CACHE_ALIGNED __attribute__((aligned(CACHE_LINE)))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
/* A macro's value as a string literal: STRINGIFY(TC_KEY_MAX) is "250". */
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

#define container_of(ptr, type, member)                                        \
    ((type *)((char *)(ptr)-offsetof(type, member)))

#define KIB (1024ull)
#define MIB (1024ull * 1024)
#define GIB (1024ull * 1024 * 1024)

/* ThreadSanitizer annotations, for hand-offs through code TSan cannot see
 * (liburcu is not instrumented): the releasing side's earlier accesses
 * happen before the acquiring side's later ones. No-ops in other builds. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define TSAN_ACQUIRE(addr) __tsan_acquire((void *)(addr))
#define TSAN_RELEASE(addr) __tsan_release((void *)(addr))
#else
#define TSAN_ACQUIRE(addr) ((void)0)
#define TSAN_RELEASE(addr) ((void)0)
#endif

#pragma once
/*
 * Shared fixture of the crash-point tests (test_crashpoints*.c).
 *
 * Crash points: a forked child opens a pool, works, and _exits at a named
 * point inside a set, a delete, an eviction, a page move between classes
 * (slab reassign), a shrink, a promotion to and a demotion from the DRAM
 * hot pool (src/base/crashpoint.h: TC_CRASH_POINT, debug builds only).
 * The parent opens the same pool again (tc_open, tc_open_info) and judges
 * every key by the rules of doc/architecture.md ("Commit word and
 * invalidation"): a key reads as its last acknowledged value, or as the
 * value of the operation in flight at the crash, or misses; a key whose
 * last acknowledged operation was a delete never comes back; no torn
 * item (tc_check, and every value byte compared).
 *
 * Which hit of a point the child dies at is drawn from TC_TEST_SEED
 * (printed), so a failure is replayed with the same seed.
 */

#include "engine_fx.h"

#include "src/base/crashpoint.h"
#include "src/engine/cache.h"
#include "tier/nvs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#define NK 4000
#define CRASHED 77       /* the child's exit status at the crash point */
#define NONE UINT32_MAX  /* no operation in flight */
#define VMAX (64 * 1024) /* largest value here */

/* What the child saw acknowledged, in a shared mapping. gen 0: absent. */
struct truth {
    uint32_t acked[NK];
    uint32_t inflight_key; /* NONE, or the key of the operation in flight */
    uint32_t inflight_gen; /* its new generation; 0: a delete */
    uint32_t next_gen;
    uint32_t ops;  /* acknowledged operations */
    uint32_t hits; /* hits of the point, when the child was not stopped */
};

static struct truth *T;
static uint32_t seed0; /* TC_TEST_SEED, or drawn once */

/* The crash: _exit at hit `countdown` of point `target`. */
static const char *target;
static unsigned countdown;
static unsigned hits;

static inline void
crash_hook(const char *name)
{
    if (target && strcmp(name, target) == 0) {
        hits++;
        if (--countdown == 0)
            _exit(CRASHED);
    }
}

static inline void
key_of(char *k, unsigned i)
{
    snprintf(k, 16, "cp%05u", i);
}

static inline uint32_t
vlen_of(unsigned i, uint32_t gen)
{
    return 20 + (uint32_t)((i * 131u + gen * 977u) % 1500);
}

/* Store key i with a new generation of length vlen (0: vlen_of). */
static inline int
set_gen(struct tc_cache *c, unsigned i, uint32_t vlen)
{
    static unsigned char v[VMAX];
    char k[16];
    uint32_t gen = ++T->next_gen;
    if (!vlen)
        vlen = vlen_of(i, gen);
    key_of(k, i);
    fill_pattern(v, vlen, i * 1000003ull + gen);
    T->inflight_gen = gen;
    T->inflight_key = i;
    int rc = tc_set(c, k, strlen(k), v, vlen, gen, 0);
    if (rc == TC_OK) {
        T->acked[i] = gen;
        T->ops++;
    }
    T->inflight_key = NONE;
    return rc;
}

static inline void
del_key(struct tc_cache *c, unsigned i)
{
    char k[16];
    key_of(k, i);
    T->inflight_gen = 0;
    T->inflight_key = i;
    int rc = tc_delete(c, k, strlen(k), 0);
    assert_true(rc == TC_OK || rc == TC_NOT_FOUND);
    T->acked[i] = 0;
    T->ops++;
    T->inflight_key = NONE;
}

/* Whether key i reads as generation gen (0: a miss). The value's length
 * comes from the flags (the generation) and the value map. */
static inline bool
reads_as(const struct got *g, const unsigned char *buf, unsigned i,
         uint32_t gen, unsigned char *want)
{
    if (gen == 0 || g->info.flags != gen)
        return false;
    fill_pattern(want, g->len, i * 1000003ull + gen);
    return g->len <= VMAX && memcmp(buf, want, g->len) == 0;
}

struct verdict {
    unsigned judged, live, lost, took;
};

/* Every key by the rules; the truth becomes what was read. */
static inline struct verdict
judge(struct tc_cache *c)
{
    static unsigned char buf[VMAX], want[VMAX];
    struct verdict v = {0};
    for (unsigned i = 0; i < NK; i++) {
        char k[16];
        struct got g;
        key_of(k, i);
        int rc = get_cb(c, k, &g, buf, VMAX);
        bool fl = T->inflight_key == i;
        v.judged++;
        if (rc == TC_NOT_FOUND) {
            if (T->acked[i] && !fl)
                v.lost++;
            T->acked[i] = 0;
            continue;
        }
        assert_int_equal(rc, TC_OK);
        if (reads_as(&g, buf, i, T->acked[i], want)) {
            v.live++;
            continue;
        }
        if (fl && reads_as(&g, buf, i, T->inflight_gen, want)) {
            v.live++;
            v.took++;
            T->acked[i] = T->inflight_gen;
            continue;
        }
        fail_msg("key %s read as flags %u (%zu bytes): last acknowledged "
                 "generation %u, in flight %s %u",
                 k, g.info.flags, g.len, T->acked[i], fl ? "yes" : "no",
                 fl ? T->inflight_gen : 0);
    }
    T->inflight_key = NONE;
    return v;
}

/* The child's work up to the crash point: fx_open, the work, and _exit at
 * hit n of point (CRASHED), or 0 when it was not reached. */
typedef void work_fn(struct fx *f, uint64_t *rng);

static inline int
run_child(struct fx *f, work_fn *work, const char *point, unsigned n,
          uint64_t seed)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint64_t rng = seed;
        target = point;
        countdown = n;
        __atomic_store_n(&crashpoint_hook, crash_hook, __ATOMIC_RELAXED);
        work(f, &rng);
        T->hits = hits;
        _exit(0); /* not reached: no tc_close either */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* Open the pool the child left and judge it. */
static inline struct verdict
reopen_judge(struct fx *f, const char *what)
{
    struct tc_open_info info;
    int rc = tc_open(&f->cfg, &f->c);
    if (rc)
        print_message("tc_open: %d (%s)\n", rc, tc_errmsg());
    assert_int_equal(rc, 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    struct verdict v = judge(f->c);
    assert_int_equal(info.items, v.live);
    assert_int_equal(stats(f->c).curr_items, v.live);
    assert_int_equal(tc_check(f->c), 0);
    print_message("%-16s %5u acknowledged, %u judged, %u live, %u took the "
                  "in-flight value, %u acknowledged lost, %" PRIu64
                  " dropped\n",
                  what, T->ops, v.judged, v.live, v.took, v.lost, info.dropped);
    tc_close(f->c);
    f->c = NULL;
    return v;
}

static inline void
truth_reset(void)
{
    memset(T, 0, sizeof(*T));
    T->inflight_key = NONE;
}

/* Run work in a child that dies at a hit of point drawn in 1..max, judge,
 * for rounds rounds with fresh pools. */
static inline void
crash_rounds(struct fx *f, work_fn *work, const char *point, unsigned max,
             unsigned rounds)
{
    uint64_t rng = seed0 ^ (uint64_t)strlen(point) << 40;
    for (unsigned r = 0; r < rounds; r++) {
        truth_reset();
        unsigned n = 1 + (unsigned)(rng_next(&rng) % max);
        int st = run_child(f, work, point, n, rng_next(&rng));
        if (st != CRASHED)
            fail_msg("%s: hit %u never came (child exit %d after %u hits)",
                     point, n, st, T->hits);
        char what[48];
        snprintf(what, sizeof(what), "%s#%u", point, n);
        reopen_judge(f, what);
        unlink(f->path);
    }
}

/* A race's child, which ends at its own crash point (the work's hooks);
 * the caller judges the pool it left. */
static inline void
race_run(struct fx *f, work_fn *work)
{
    truth_reset();
    int st = run_child(f, work, NULL, 0, 1);
    assert_int_equal(st, CRASHED);
}

/* ------------------------------------------------------------- the work */

static inline unsigned
pick(uint64_t *rng, unsigned n)
{
    return (unsigned)(rng_next(rng) % n);
}

/* ------------------------------------------------------------ the tests */

#define SKIP_WITHOUT_POINTS()                                                  \
    do {                                                                       \
        if (!points_compiled) {                                                \
            print_message("crash points are compiled in debug builds only\n"); \
            skip();                                                            \
        }                                                                      \
    } while (0)

#ifdef TC_CRASHPOINTS
static const bool points_compiled = true;
#else
static const bool points_compiled = false;
crashpoint_fn crashpoint_hook; /* unused: the points are compiled out */
#endif

/* A 16 MiB pool with a 1 MiB DRAM hot pool that takes a key written ten
 * times a second, the write tracker sampling every write over one-second
 * windows and keeping hotkey_k keys. */
static inline void
hot_cfg(struct fx *f, uint32_t hotkey_k)
{
    f->cfg.pool_size = 16 * MIB;
    f->cfg.hot_pool_size = 1 * MIB;
    f->cfg.hot_write_rate = 10;
    f->cfg.hotkey_window = 1;
    f->cfg.hotkey_sample = 1;
    f->cfg.hotkey_k = hotkey_k;
}

/* A flash file for f in the flash directory (ext, 192 bytes), or a skip
 * with the reason where that directory is no disk. */
static inline void
flash_cfg(struct fx *f, char *ext, uint32_t recache_rate)
{
    test_flash_path(ext, 192, "tc_test_crashpoints_%d.nvs", (int)getpid());
    f->cfg.pool_size = 16 * MIB;
    f->cfg.ext_npaths = 1;
    f->cfg.ext_path[0] = ext;
    f->cfg.ext_size[0] = 128 * MIB;
    f->cfg.ext_page_size = 4 * MIB;
    f->cfg.ext_wbuf_size = 1 * MIB;
    f->cfg.ext_recache_rate = recache_rate;
    f->cfg.ext_recache_window = 0;
    f->cfg.ext_read_timeout_ms = 0;
    struct statfs sf;
    int fd = open(ext, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd < 0 || fstatfs(fd, &sf) != 0 || sf.f_type == TMPFS_MAGIC) {
        print_message("%s is no disk for the flash tier (%s): skipped\n",
                      test_flash_dir(),
                      fd < 0 ? strerror(errno) : "tmpfs or unknown");
        if (fd >= 0)
            close(fd);
        unlink(ext);
        skip();
    }
    close(fd);
    unlink(ext);
}

/* Every key set with a 16,000-byte value, all of it on flash. The writer
 * is drained now and then: a spill finding it busy evicts, and a loaded
 * machine would leave too little on flash to compact. Then every buffer
 * goes to flash: full segments, whatever the writer's pace. */
static inline void
fill_flash(struct fx *f)
{
    for (unsigned i = 0; i < NK; i++) {
        assert_int_equal(set_gen(f->c, i, 16000), TC_OK);
        if (i % 32 == 31)
            assert_int_equal(nvs_flush(((struct cache *)f->c)->nvs), 0);
    }
    assert_int_equal(nvs_flush(((struct cache *)f->c)->nvs), 0);
}

/* ------------------------------------------------ a move against a set */

/* A set of key K takes its store sequence, then a page move copies K's
 * current item (a newer sequence), then the set publishes and answers,
 * then the process dies before the move sees its copy is stale. The
 * acknowledged value must win over the copy of the one it replaced. The
 * threads meet at the crash points (roles per thread). */
static _Thread_local int role; /* 1: the client, 2: the mover */
static sem_t client_written, mover_copied, client_acked;
static pthread_t client_th; /* joined before the crash (TSan: no leak) */

/* The client, at its point, lets the mover go and waits until the mover
 * reached its own; the mover, there, waits until the client answered and
 * joins it. */
static inline void
client_meets_mover(void)
{
    sem_post(&client_written);
    sem_wait(&mover_copied);
}

static inline void
mover_meets_client(void)
{
    sem_post(&mover_copied);
    sem_wait(&client_acked);
    pthread_join(client_th, NULL);
}

/* The semaphores of one race, in the child. */
static inline void
race_sems_init(void)
{
    sem_init(&client_written, 0, 0);
    sem_init(&mover_copied, 0, 0);
    sem_init(&client_acked, 0, 0);
}

static inline void *
race_client_any(void *arg)
{
    struct fx *f = arg;
    role = 1;
    assert_int_equal(set_gen(f->c, 0, 0), TC_OK);
    role = 0;
    sem_post(&client_acked);
    return NULL;
}

#define TC_TEST_NOOPEN(fn)                                                     \
    cmocka_unit_test_prestate_setup_teardown(fn, setup_noopen, teardown, #fn)

/* The shared truth mapping and the seed, once in main. */
static inline int
crashpoints_fx_init(void)
{
    T = mmap(NULL, sizeof(*T), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (T == MAP_FAILED)
        return 1;
    seed0 = test_seed();
    print_message("TC_TEST_SEED=%u\n", seed0);
    return 0;
}

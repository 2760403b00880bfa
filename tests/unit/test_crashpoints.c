/*
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

static void
crash_hook(const char *name)
{
    if (target && strcmp(name, target) == 0) {
        hits++;
        if (--countdown == 0)
            _exit(CRASHED);
    }
}

static void
key_of(char *k, unsigned i)
{
    snprintf(k, 16, "cp%05u", i);
}

static uint32_t
vlen_of(unsigned i, uint32_t gen)
{
    return 20 + (uint32_t)((i * 131u + gen * 977u) % 1500);
}

/* Store key i with a new generation of length vlen (0: vlen_of). */
static int
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

static void
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
static bool
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
static struct verdict
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

static int
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
static struct verdict
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

static void
truth_reset(void)
{
    memset(T, 0, sizeof(*T));
    T->inflight_key = NONE;
}

/* Run work in a child that dies at a hit of point drawn in 1..max, judge,
 * for rounds rounds with fresh pools. */
static void
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
static void
race_run(struct fx *f, work_fn *work)
{
    truth_reset();
    int st = run_child(f, work, NULL, 0, 1);
    assert_int_equal(st, CRASHED);
}

/* ------------------------------------------------------------- the work */

static unsigned
pick(uint64_t *rng, unsigned n)
{
    return (unsigned)(rng_next(rng) % n);
}

/* Sets, overwrites (other sizes, so other classes) and deletes. */
static void
mixed_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < NK; i += 2)
        assert_int_equal(set_gen(f->c, i, 0), TC_OK);
    for (unsigned op = 0; op < 20000; op++) {
        unsigned i = pick(rng, NK);
        if (pick(rng, 4) == 0)
            del_key(f->c, i);
        else
            assert_int_equal(set_gen(f->c, i, 0), TC_OK);
    }
}

/* More data than the pool holds: evictions. */
static void
evict_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned op = 0; op < 40000; op++) {
        unsigned i = pick(rng, NK);
        if (pick(rng, 8) == 0)
            del_key(f->c, i);
        else
            assert_int_equal(set_gen(f->c, i, 2000 + pick(rng, 6000)), TC_OK);
    }
}

/* Pages of one class with few live items, then moved to another class
 * (slab reassign: its live items are copied to the class's other pages),
 * and a store in the class that took the page (its format). */
static void
move_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < NK; i++)
        assert_int_equal(set_gen(f->c, i, 500), TC_OK);
    int src = store_find_class(f->c, "probe-src", 500);
    int dst = store_find_class(f->c, "probe-dst", 3000);
    tc_delete(f->c, "probe-src", 9, 0);
    tc_delete(f->c, "probe-dst", 9, 0);
    for (unsigned i = 0; i < NK; i++)
        if (pick(rng, 3) != 0)
            del_key(f->c, i);
    for (unsigned m = 0; m < 4; m++) {
        int rc = tc_slab_reassign(f->c, src, dst);
        assert_true(rc == 0 || rc == -EBUSY || rc == -ENOENT);
        for (unsigned j = 0; j < 400; j++)
            assert_int_equal(set_gen(f->c, pick(rng, NK), 3000), TC_OK);
    }
}

/* A full pool shrunk to a third: its items move below the new limit. */
static void
shrink_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < NK; i++)
        assert_int_equal(set_gen(f->c, i, 1000 + pick(rng, 2000)), TC_OK);
    for (unsigned i = 0; i < NK; i += 2)
        del_key(f->c, i);
    int rc = tc_set_mem_limit(f->c, f->cfg.pool_size / 3);
    assert_true(rc == 0 || rc == -EBUSY);
    for (int j = 0; j < 8 && rc == -EBUSY; j++)
        tc_maintain(f->c);
}

/* Keys written often enough to live in the DRAM hot pool (promotion:
 * their next write goes there, replacing the PMEM copy), cooled and
 * moved back to PMEM (demotion), written again. */
static void
hot_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < 200; i++)
        assert_int_equal(set_gen(f->c, i, 0), TC_OK);
    for (unsigned round = 0; round < 6; round++) {
        tc_set_hot_write_rate(f->c, 10);
        tc_maintain(f->c);
        for (unsigned w = 0; w < 300; w++)
            assert_int_equal(set_gen(f->c, pick(rng, 8), 0), TC_OK);
        tc_maintain(f->c); /* the eight are hot: next writes to DRAM */
        for (unsigned w = 0; w < 100; w++) {
            unsigned i = pick(rng, 16);
            if (pick(rng, 5) == 0)
                del_key(f->c, i);
            else
                assert_int_equal(set_gen(f->c, i, 0), TC_OK);
        }
        tc_set_hot_write_rate(f->c, 1000000000);
        tc_maintain(f->c); /* they cool: moved back to PMEM */
        tc_maintain(f->c);
    }
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
static void
hot_cfg(struct fx *f, uint32_t hotkey_k)
{
    f->cfg.pool_size = 16 * MIB;
    f->cfg.hot_pool_size = 1 * MIB;
    f->cfg.hot_write_rate = 10;
    f->cfg.hotkey_window = 1;
    f->cfg.hotkey_sample = 1;
    f->cfg.hotkey_k = hotkey_k;
}

static void
test_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 64 * MIB;
    crash_rounds(f, mixed_work, "set.written", 15000, 4);
    crash_rounds(f, mixed_work, "set.published", 15000, 4);
}

static void
test_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 64 * MIB;
    /* about 5,000 deletes (a quarter of 20,000 operations, sd ~60): a hit
     * drawn up to 4,000 always comes */
    crash_rounds(f, mixed_work, "delete.unlinked", 4000, 4);
}

static void
test_eviction(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 8 * MIB;
    crash_rounds(f, evict_work, "evict.unlinked", 200, 4);
    crash_rounds(f, evict_work, "page.format", 6, 3);
}

static void
test_page_move(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 16 * MIB;
    crash_rounds(f, move_work, "move.copied", 20, 4);
    /* the copy published, its commit word not yet stored */
    crash_rounds(f, move_work, "move.published", 20, 2);
    /* the page taken, formatted for its new class */
    crash_rounds(f, move_work, "page.format", 2, 2);
}

static void
test_shrink(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 16 * MIB;
    crash_rounds(f, shrink_work, "move.copied", 400, 4);
    crash_rounds(f, shrink_work, "shrink.drained", 1, 2);
}

static void
test_hot_pool(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    hot_cfg(f, 16);
    crash_rounds(f, hot_work, "set.published", 1500, 6);
    crash_rounds(f, hot_work, "hot.demote", 8, 4);
    crash_rounds(f, hot_work, "hot.demote.published", 8, 2);
}

/* A flash file for f in the flash directory (ext, 192 bytes), or a skip
 * with the reason where that directory is no disk. */
static void
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
static void
fill_flash(struct fx *f)
{
    for (unsigned i = 0; i < NK; i++) {
        assert_int_equal(set_gen(f->c, i, 16000), TC_OK);
        if (i % 32 == 31)
            assert_int_equal(nvs_flush(((struct cache *)f->c)->nvs), 0);
    }
    assert_int_equal(nvs_flush(((struct cache *)f->c)->nvs), 0);
}

/* Flash segments mostly deleted, a few values read (compaction keeps the
 * read ones, writing each a new header in the pool before the old one
 * goes). */
static void
compact_work(struct fx *f, uint64_t *rng)
{
    static unsigned char buf[VMAX];
    assert_int_equal(fx_open(f), 0);
    fill_flash(f);
    for (unsigned i = 0; i < NK * 3 / 4; i++) {
        char k[16];
        struct got g;
        key_of(k, i);
        if (pick(rng, 12) == 0)
            (void)get_cb(f->c, k, &g, buf, VMAX); /* read: kept */
        else
            del_key(f->c, i);
    }
    for (int i = 0; i < 40; i++) {
        tc_maintain(f->c);
        assert_int_equal(set_gen(f->c, NK * 3 / 4 + pick(rng, NK / 4), 16000),
                         TC_OK);
    }
}

static void
test_compaction(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 0);
    crash_rounds(f, compact_work, "compact.swapped", 3, 3);
    unlink(ext);
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
static void
client_meets_mover(void)
{
    sem_post(&client_written);
    sem_wait(&mover_copied);
}

static void
mover_meets_client(void)
{
    sem_post(&mover_copied);
    sem_wait(&client_acked);
    pthread_join(client_th, NULL);
}

/* The semaphores of one race, in the child. */
static void
race_sems_init(void)
{
    sem_init(&client_written, 0, 0);
    sem_init(&mover_copied, 0, 0);
    sem_init(&client_acked, 0, 0);
}

static void
race_hook(const char *name)
{
    if (role == 1 && strcmp(name, "set.written") == 0) {
        client_meets_mover();
    } else if (role == 2 && strcmp(name, "move.copied") == 0) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

static void *
race_client_any(void *arg)
{
    struct fx *f = arg;
    role = 1;
    assert_int_equal(set_gen(f->c, 0, 0), TC_OK);
    role = 0;
    sem_post(&client_acked);
    return NULL;
}

static void *
race_client(void *arg)
{
    struct fx *f = arg;
    role = 1;
    assert_int_equal(set_gen(f->c, 0, 500), TC_OK);
    role = 0;
    sem_post(&client_acked);
    return NULL;
}

/* race_work with key 0 made write-hot first (its racing set then goes to
 * the DRAM hot pool: a promotion) */
static bool race_promote;

/* Key 0 alone on the first page of its class, the second page three
 * quarters live, so that the page a reassignment takes (the one with the
 * most free chunks) is the first, and key 0 is the one item it moves. */
static void
race_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    if (race_promote) {
        tc_maintain(f->c);
        for (unsigned w = 0; w < 300; w++) /* to PMEM: nothing is hot yet */
            assert_int_equal(set_gen(f->c, 0, 500), TC_OK);
    }
    assert_int_equal(set_gen(f->c, 0, 500), TC_OK);
    int cls = store_find_class(f->c, "probe-src", 500);
    tc_delete(f->c, "probe-src", 9, 0);
    int dst = store_find_class(f->c, "probe-dst", 3000);
    tc_delete(f->c, "probe-dst", 9, 0);
    unsigned j = 1;
    while (class_pages(f->c, cls) < 2) {
        assert_true(j < NK);
        assert_int_equal(set_gen(f->c, j++, 500), TC_OK);
    }
    unsigned end = j + j * 3 / 4;
    assert_true(end < NK);
    for (unsigned i = j; i < end; i++)
        assert_int_equal(set_gen(f->c, i, 500), TC_OK);
    for (unsigned i = 1; i < j + 64; i++)
        del_key(f->c, i);
    tc_maintain(f->c);  /* the deleted chunks back to their pages */
    if (race_promote) { /* and key 0 hot: its next set goes to DRAM */
        struct tc_hotkey hk[1];
        assert_int_equal(tc_hotkeys(f->c, false, hk, 1), 1);
        assert_true(hk[0].klen == 7 && memcmp(hk[0].key, "cp00000", 7) == 0);
        assert_true(hk[0].write_rate >= 10 && !hk[0].in_dram);
    }
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_hook, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_client, f), 0);
    sem_wait(&client_written);
    role = 2;
    int rc = tc_slab_reassign(f->c, cls, dst);
    /* the move did not copy key 0 (another page was taken): no race */
    print_message("reassign: %d, key 0 not moved\n", rc);
    _exit(3);
}

static void
race_hot_hook(const char *name)
{
    if (role == 1 && strcmp(name, "set.written") == 0) {
        client_meets_mover();
    } else if (role == 2 && strcmp(name, "hot.demote") == 0) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

/* The demotion's copy published (not committed) when the set, which
 * replaces it, goes on and answers; the demotion then tries to commit its
 * copy, and the process dies after the maintenance step. */
static bool hot_published_met;

static void
race_hot_published_hook(const char *name)
{
    if (role == 1 && strcmp(name, "set.written") == 0) {
        client_meets_mover();
    } else if (role == 2 && strcmp(name, "hot.demote.published") == 0) {
        mover_meets_client();
        hot_published_met = true;
    }
}

static crashpoint_fn race_hot_fn = race_hot_hook;

static void
race_hot_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    tc_maintain(f->c);
    for (unsigned w = 0; w < 300; w++)
        assert_int_equal(set_gen(f->c, 0, 0), TC_OK);
    tc_maintain(f->c);
    assert_int_equal(set_gen(f->c, 0, 0), TC_OK); /* in DRAM */
    assert_true(stats(f->c).hotkey_current == 1);
    tc_set_hot_write_rate(f->c, 1000000000);
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_hot_fn, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_client_any, f), 0);
    sem_wait(&client_written);
    role = 2;
    tc_maintain(f->c);
    if (hot_published_met)
        _exit(CRASHED);
    print_message("no demotion\n");
    _exit(3);
}

/* The same race with the DRAM hot pool: a hot key's set writes its new
 * value to DRAM while the maintenance step demotes its current DRAM item
 * to PMEM; the set answers, then the process dies before the demotion
 * finds its copy stale. The new value died with the process; the demoted
 * copy of the older one must not come back: it is committed only once
 * published (item_layout.h), and it never was. */
static void
test_demote_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    hot_cfg(f, 16);
    race_hot_fn = race_hot_hook;
    race_run(f, race_hot_work);
    reopen_judge(f, "demote-vs-set");
}

/* The set replaces the demotion's copy once published, and answers; the
 * demotion's commit must then fail (the set invalidated the copy). */
static void
test_demote_published_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    hot_cfg(f, 16);
    race_hot_fn = race_hot_published_hook;
    race_run(f, race_hot_work);
    struct verdict v = reopen_judge(f, "demote-published");
    assert_int_equal(v.live, 0); /* key 0's value was in DRAM */
}

/* The same race with a recache: a read of a flash item copies its value
 * back into the pool (a copy, committed after its publication) while
 * a set of the key, which took its sequence first, publishes and answers;
 * a crash before the recache finds its copy stale must keep the set. */
static void
race_recache_hook(const char *name)
{
    if (strcmp(name, "set.written") != 0)
        return;
    if (role == 1) {
        client_meets_mover();
    } else if (role == 2) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

/* tc_walk: whether key 0 is on flash (-1: not in the cache); a walk
 * neither reads the value nor recaches it. */
static int
walk_key0(void *arg, const struct tc_walk_item *it)
{
    int *where = arg;
    if (it->klen == 7 && memcmp(it->key, "cp00000", 7) == 0)
        *where = it->flash;
    return 0;
}

static int
key0_where(struct tc_cache *c)
{
    int where = -1;
    uint64_t cursor = 0;
    for (int i = 0; i < 1000000 && cursor != TC_WALK_DONE; i++)
        assert_true(tc_walk(c, &cursor, 1024, walk_key0, &where) >= 0);
    return where;
}

/* Key 0 first, then more than the pool holds: key 0 spills to flash
 * (unless the writer was busy and it was evicted: again). */
static void
key0_to_flash(struct fx *f)
{
    for (int round = 0; round < 8 && key0_where(f->c) != 1; round++) {
        assert_int_equal(set_gen(f->c, 0, 4000), TC_OK);
        for (unsigned i = 1; i < NK; i++)
            assert_int_equal(set_gen(f->c, i, 4000), TC_OK);
    }
    if (key0_where(f->c) != 1)
        fail_msg("key 0 never went to flash");
}

static void
race_recache_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    static unsigned char buf[VMAX];
    assert_int_equal(fx_open(f), 0);
    key0_to_flash(f);
    char k[16];
    struct got g;
    key_of(k, 0);
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_recache_hook, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_client_any, f), 0);
    sem_wait(&client_written);
    role = 2;
    int rc = get_cb(f->c, k, &g, buf, VMAX);
    print_message("get: %d, flash %d: no recache\n", rc, g.info.flash);
    _exit(3);
}

static void
test_recache_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 1);
    unlink(ext);
    race_run(f, race_recache_work);
    f->cfg.ext_recache_rate = 0; /* the judge's reads evict nothing */
    reopen_judge(f, "recache-vs-set");
    unlink(ext);
}

/* A delete of key 0 against a recache of its flash value: the recache's
 * copy written (not published), the delete unlinks the flash item and
 * answers, the process dies before the recache finds its copy stale. The
 * deleted key must not come back: the recache's copy commits after its
 * publication, on a path of its own (store.c's recache_one), and the
 * switch fails. */
static void
race_recache_delete_hook(const char *name)
{
    if (role == 2 && strcmp(name, "set.written") == 0) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

static void *
race_delete_client(void *arg)
{
    struct fx *f = arg;
    sem_wait(&mover_copied);
    del_key(f->c, 0);
    sem_post(&client_acked);
    return NULL;
}

static void
race_recache_delete_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    static unsigned char buf[VMAX];
    assert_int_equal(fx_open(f), 0);
    key0_to_flash(f);
    char k[16];
    struct got g;
    key_of(k, 0);
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_recache_delete_hook,
                     __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_delete_client, f),
                     0);
    role = 2;
    int rc = get_cb(f->c, k, &g, buf, VMAX);
    print_message("get: %d, flash %d: no recache\n", rc, g.info.flash);
    _exit(3);
}

static void
test_recache_against_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 1);
    unlink(ext);
    race_run(f, race_recache_delete_work);
    f->cfg.ext_recache_rate = 0; /* the judge's reads evict nothing */
    reopen_judge(f, "recache-vs-del");
    unlink(ext);
}

/* A delete against a flash header's swap into the index: a spill (a PMEM
 * item's value to flash, a flash header in its place) or a compaction (a
 * flash header replaced by one naming the moved record). The new header
 * published, not yet committed, the delete unlinks it and answers, the
 * process dies: neither the header nor its source may come back (the
 * source is invalidated before the switch, the header committed after). */
#define SWAP_DEL 32
static const char *swap_point;
static unsigned swap_keys[SWAP_DEL];

static void
race_swap_hook(const char *name)
{
    if (role == 2 && strcmp(name, swap_point) == 0) {
        mover_meets_client();
        _exit(CRASHED);
    }
}

static void *
race_swap_client(void *arg)
{
    struct fx *f = arg;
    sem_wait(&mover_copied);
    for (unsigned i = 0; i < SWAP_DEL; i++) /* fewer than a defer batch */
        del_key(f->c, swap_keys[i]);
    sem_post(&client_acked);
    return NULL;
}

static void
race_swap_start(struct fx *f, const char *point)
{
    swap_point = point;
    race_sems_init();
    __atomic_store_n(&crashpoint_hook, race_swap_hook, __ATOMIC_RELAXED);
    assert_int_equal(pthread_create(&client_th, NULL, race_swap_client, f), 0);
    role = 2;
}

/* Keys 0.. set first: the first victims, the first spills. */
static void
race_spill_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < SWAP_DEL; i++)
        swap_keys[i] = i;
    race_swap_start(f, "spill.published");
    for (unsigned i = 0; i < NK; i++)
        assert_int_equal(set_gen(f->c, i, 4000), TC_OK);
    print_message("no spill\n");
    _exit(3);
}

/* Every key on flash, the first three quarters deleted but for the keys a
 * compaction keeps (read ones, which the client deletes). */
static void
race_compact_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    static unsigned char buf[VMAX];
    assert_int_equal(fx_open(f), 0);
    fill_flash(f);
    unsigned n = 0;
    for (unsigned i = 0; i < NK * 3 / 4; i++) {
        char k[16];
        struct got g;
        key_of(k, i);
        if (i % 90 == 0 && n < SWAP_DEL &&
            get_cb(f->c, k, &g, buf, VMAX) == TC_OK)
            swap_keys[n++] = i; /* read: kept */
        else
            del_key(f->c, i);
    }
    for (; n < SWAP_DEL; n++)
        swap_keys[n] = swap_keys[0];
    tc_maintain(f->c); /* the deletes' chunks freed before the race */
    race_swap_start(f, "compact.published");
    /* bounded: a step finding the flash writer behind does nothing */
    for (int i = 0; i < 2000; i++) {
        tc_maintain(f->c);
        usleep(1000);
    }
    print_message("no compaction\n");
    _exit(3);
}

static void
test_spill_against_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 0);
    unlink(ext);
    race_run(f, race_spill_work);
    reopen_judge(f, "spill-vs-del");
    unlink(ext);
}

static void
test_compaction_against_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 0);
    unlink(ext);
    race_run(f, race_compact_work);
    reopen_judge(f, "compact-vs-del");
    unlink(ext);
}

static void
test_move_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    f->cfg.pool_size = 16 * MIB;
    race_promote = false;
    race_run(f, race_work);
    assert_int_equal(T->acked[0] > 1, true);
    reopen_judge(f, "move-vs-set");
}

/* The same race when the set promotes key 0 to the DRAM hot pool: its
 * value dies with the process, and the move's copy of the older one (the
 * source's store sequence, nothing newer in PMEM) must not come back. */
static void
test_move_against_promotion(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    hot_cfg(f, 1024); /* key 0 stays among the setup's keys */
    race_promote = true;
    race_run(f, race_work);
    race_promote = false;
    struct verdict v = reopen_judge(f, "move-vs-promote");
    assert_true(v.live > 0);
}

/* A touch against a spill's switch: the spill has checked key 0 and
 * invalidated it (its value already on flash), a touch then gives it an
 * expiry, then the switch. The flash header must take the touch's expiry
 * and the key must stay; the process then dies (the flash writer drained
 * first). Key 0 is the only value of at least ext_item_size bytes, so the
 * only one that spills; the others, of its class, are evicted. */
#define TOUCH_VLEN 4000
#define TOUCH_TTL 3600
static sem_t touch_go, touch_done;
static bool touch_raced;
static int touch_rc;

static void
race_touch_hook(const char *name)
{
    if (role == 2 && !touch_raced && strcmp(name, "spill.checked") == 0) {
        touch_raced = true;
        sem_post(&touch_go);
        sem_wait(&touch_done);
    }
}

static void *
race_touch_client(void *arg)
{
    struct fx *f = arg;
    char k[16];
    sem_wait(&touch_go);
    key_of(k, 0);
    touch_rc = tc_touch(f->c, k, strlen(k), TOUCH_TTL);
    sem_post(&touch_done);
    return NULL;
}

static void
race_touch_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    int cls = store_find_class(f->c, "probe-a", TOUCH_VLEN);
    assert_int_equal(store_find_class(f->c, "probe-b", TOUCH_VLEN - 100), cls);
    tc_delete(f->c, "probe-a", 7, 0);
    tc_delete(f->c, "probe-b", 7, 0);
    assert_int_equal(set_gen(f->c, 0, TOUCH_VLEN), TC_OK);
    sem_init(&touch_go, 0, 0);
    sem_init(&touch_done, 0, 0);
    touch_raced = false;
    touch_rc = -1;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, race_touch_client, f), 0);
    role = 2;
    __atomic_store_n(&crashpoint_hook, race_touch_hook, __ATOMIC_RELAXED);
    for (unsigned i = 1; i < NK && !touch_raced; i++)
        assert_int_equal(set_gen(f->c, i, TOUCH_VLEN - 100), TC_OK);
    role = 0;
    if (!touch_raced) {
        print_message("no spill\n");
        _exit(3);
    }
    pthread_join(th, NULL);
    if (touch_rc != TC_OK) {
        print_message("the touch missed: %d\n", touch_rc);
        _exit(4);
    }
    assert_int_equal(nvs_flush(((struct cache *)f->c)->nvs), 0);
    _exit(CRASHED);
}

static void
test_touch_against_spill(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    static unsigned char buf[VMAX];
    char ext[192], k[16];
    struct got g;
    flash_cfg(f, ext, 0);
    f->cfg.ext_item_size = TOUCH_VLEN - 50;
    truth_reset();
    unlink(ext);
    int st = run_child(f, race_touch_work, NULL, 0, 1);
    assert_int_equal(st, CRASHED);
    assert_int_equal(tc_open(&f->cfg, &f->c), 0);
    key_of(k, 0);
    assert_int_equal(get_cb(f->c, k, &g, buf, VMAX), TC_OK);
    assert_true(g.info.flash);
    assert_int_not_equal(g.info.exptime, 0); /* the touch's */
    judge(f->c); /* and every other key by the rules */
    assert_int_equal(tc_check(f->c), 0);
    tc_close(f->c);
    f->c = NULL;
    unlink(ext);
}

/* A key touched again inside every round of a spill's switch: the switch
 * gives up after a bounded number of rounds (the item is then evicted, as
 * when a spill fails) instead of chasing the touches for ever; the hook
 * fails the child past STORM_MAX touches. After the crash, key 0 is a miss
 * or its value, and every other key is judged by the rules. */
#define STORM_MAX 64u
static unsigned storm_touches;
static volatile bool storm_stop;

static void
storm_hook(const char *name)
{
    if (role != 3 || (strcmp(name, "spill.checked") != 0 &&
                      strcmp(name, "spill.retouched") != 0))
        return;
    if (++storm_touches > STORM_MAX) {
        print_message("the switch chased %u touches\n", storm_touches);
        _exit(5);
    }
    sem_post(&touch_go);
    sem_wait(&touch_done);
}

static void *
storm_client(void *arg)
{
    struct fx *f = arg;
    char k[16];
    key_of(k, 0);
    for (unsigned n = 1;; n++) {
        sem_wait(&touch_go);
        if (storm_stop)
            return NULL;
        (void)tc_touch(f->c, k, strlen(k), TOUCH_TTL + n); /* a new expiry */
        sem_post(&touch_done);
    }
}

static void
storm_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    assert_int_equal(fx_open(f), 0);
    assert_int_equal(set_gen(f->c, 0, TOUCH_VLEN), TC_OK);
    sem_init(&touch_go, 0, 0);
    sem_init(&touch_done, 0, 0);
    storm_touches = 0;
    storm_stop = false;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, storm_client, f), 0);
    role = 3;
    __atomic_store_n(&crashpoint_hook, storm_hook, __ATOMIC_RELAXED);
    for (unsigned i = 1; i < NK && !storm_touches; i++)
        assert_int_equal(set_gen(f->c, i, TOUCH_VLEN - 100), TC_OK);
    role = 0;
    storm_stop = true;
    sem_post(&touch_go);
    pthread_join(th, NULL);
    if (!storm_touches) {
        print_message("no spill\n");
        _exit(3);
    }
    assert_int_equal(nvs_flush(((struct cache *)f->c)->nvs), 0);
    _exit(CRASHED);
}

static void
test_touch_storm_against_spill(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    char ext[192];
    flash_cfg(f, ext, 0);
    f->cfg.ext_item_size = TOUCH_VLEN - 50;
    truth_reset();
    unlink(ext);
    assert_int_equal(run_child(f, storm_work, NULL, 0, 1), CRASHED);
    assert_int_equal(tc_open(&f->cfg, &f->c), 0);
    judge(f->c);
    assert_int_equal(tc_check(f->c), 0);
    tc_close(f->c);
    f->c = NULL;
    unlink(ext);
}

#define TC_TEST_NOOPEN(fn)                                                     \
    cmocka_unit_test_prestate_setup_teardown(fn, setup_noopen, teardown, #fn)

int
main(void)
{
    T = mmap(NULL, sizeof(*T), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (T == MAP_FAILED)
        return 1;
    seed0 = test_seed();
    print_message("TC_TEST_SEED=%u\n", seed0);
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_set),
        TC_TEST_NOOPEN(test_delete),
        TC_TEST_NOOPEN(test_eviction),
        TC_TEST_NOOPEN(test_page_move),
        TC_TEST_NOOPEN(test_shrink),
        TC_TEST_NOOPEN(test_hot_pool),
        TC_TEST_NOOPEN(test_compaction),
        TC_TEST_NOOPEN(test_move_against_set),
        TC_TEST_NOOPEN(test_demote_against_set),
        TC_TEST_NOOPEN(test_demote_published_against_set),
        TC_TEST_NOOPEN(test_move_against_promotion),
        TC_TEST_NOOPEN(test_recache_against_set),
        TC_TEST_NOOPEN(test_recache_against_delete),
        TC_TEST_NOOPEN(test_spill_against_delete),
        TC_TEST_NOOPEN(test_touch_against_spill),
        TC_TEST_NOOPEN(test_touch_storm_against_spill),
        TC_TEST_NOOPEN(test_compaction_against_delete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

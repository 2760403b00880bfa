#pragma once
/*
 * Shared helpers of the restart tests (test_restart*.c): tc_open on an
 * existing pool file brings its items back, after a clean close (warm) and
 * after a crash (recovered), and never a deleted, replaced, flushed,
 * expired or torn one (src/engine/restart.h).
 *
 * A crash is a forked child that opens the cache, works, records what it
 * was told in a shared anonymous mapping (struct truth), and _exits without
 * tc_close: its writes to the /dev/shm pool file stay, as after kill -9.
 * The parent then opens the same file and judges every key. Helpers are
 * static inline so that each test file uses what it needs.
 */

#include "engine_fx.h"

#include <sys/mman.h>
#include <sys/wait.h>

#define NKEYS 2000

/* A test whose fixture opens nothing: the child and the parent open. */
#define TC_TEST_NOOPEN(fn)                                                     \
    cmocka_unit_test_prestate_setup_teardown(fn, setup_noopen, teardown, #fn)

/* What the child saw acknowledged, per key. */
struct truth {
    uint8_t live[NKEYS];
    uint32_t flags[NKEYS];
    uint64_t cas[NKEYS];
    uint32_t vlen[NKEYS];
    uint32_t gen[NKEYS]; /* value generation: fill_pattern seed */
    uint64_t max_cas;
};

static inline struct truth *
truth_new(void)
{
    struct truth *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(t != MAP_FAILED);
    memset(t, 0, sizeof(*t));
    return t;
}

static inline void
key_of(char *k, unsigned i)
{
    snprintf(k, 16, "r%05u", i);
}

static inline uint32_t
vlen_of(unsigned i, uint32_t gen)
{
    /* sizes over several classes, some chained (above 512 KiB chunks) */
    if (i % 500 == 7)
        return 600 * 1024 + gen;
    return 10 + (i * 37 + gen * 11) % 3000;
}

/* Store key i with value generation gen and record it. */
static inline void
set_rec(struct tc_cache *c, struct truth *t, unsigned i, uint32_t gen)
{
    char k[16];
    uint32_t vlen = vlen_of(i, gen);
    unsigned char *v = malloc(vlen);
    assert_non_null(v);
    key_of(k, i);
    fill_pattern(v, vlen, i * 1000003ull + gen);
    uint64_t cas = 0;
    int rc =
        tc_store(c, TC_SET, k, strlen(k), v, vlen, i * 3 + gen, 0, 0, &cas);
    free(v);
    if (rc != TC_OK)
        print_message("set %s gen %u (%u bytes): %d\n", k, gen, vlen, rc);
    assert_int_equal(rc, TC_OK);
    t->live[i] = 1;
    t->flags[i] = i * 3 + gen;
    t->cas[i] = cas;
    t->vlen[i] = vlen;
    t->gen[i] = gen;
    if (cas > t->max_cas)
        t->max_cas = cas;
}

static inline void
del_rec(struct tc_cache *c, struct truth *t, unsigned i)
{
    char k[16];
    key_of(k, i);
    assert_int_equal(tc_delete(c, k, strlen(k), 0), TC_OK);
    t->live[i] = 0;
}

/* Every key as the truth says: value, flags and CAS, or a miss. */
static inline void
judge(struct tc_cache *c, const struct truth *t, unsigned *nlive)
{
    unsigned char *buf = malloc(700 * 1024);
    unsigned char *want = malloc(700 * 1024);
    assert_non_null(buf);
    assert_non_null(want);
    *nlive = 0;
    for (unsigned i = 0; i < NKEYS; i++) {
        char k[16];
        struct got g;
        key_of(k, i);
        int rc = get_cb(c, k, &g, buf, 700 * 1024);
        if (!t->live[i]) {
            if (rc != TC_NOT_FOUND)
                print_message("key %s came back\n", k);
            assert_int_equal(rc, TC_NOT_FOUND);
            continue;
        }
        assert_int_equal(rc, TC_OK);
        (*nlive)++;
        assert_int_equal(g.len, t->vlen[i]);
        fill_pattern(want, t->vlen[i], i * 1000003ull + t->gen[i]);
        assert_memory_equal(buf, want, t->vlen[i]);
        assert_int_equal(g.info.flags, t->flags[i]);
        assert_true(g.info.cas == t->cas[i]);
    }
    free(buf);
    free(want);
}

static inline int
open_existing(struct fx *f)
{
    int rc = tc_open(&f->cfg, &f->c); /* no unlink: the pool is reused */
    if (rc)
        print_message("tc_open: %d (%s)\n", rc, tc_errmsg());
    return rc;
}

/* The child's work: sets, overwrites, deletes, a refused add; then, with
 * crash, _exit without closing. */
static inline void
workload(struct fx *f, struct truth *t)
{
    for (unsigned i = 0; i < NKEYS; i++)
        set_rec(f->c, t, i, 1);
    for (unsigned i = 0; i < NKEYS; i += 3)
        set_rec(f->c, t, i, 2); /* replaced: the old copy must not win */
    for (unsigned i = 1; i < NKEYS; i += 5)
        del_rec(f->c, t, i);
    char k[16];
    key_of(k, 0);
    assert_int_equal(store_s(f->c, TC_ADD, k, "refused", 0, 0, 0, NULL),
                     TC_NOT_STORED);
}

static inline void
run_child(struct fx *f, struct truth *t,
          void (*work)(struct fx *, struct truth *))
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (fx_open(f) != 0)
            _exit(2);
        work(f, t);
        _exit(0); /* a crash: no tc_close, the pool stays as it is */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* The saved-state path beside the fixture's pool. In a static buffer, not
 * the test's stack: a failed assertion jumps to the teardown, whose close
 * still writes to the cache's restart_file. */
static inline const char *
meta_path(const struct fx *f)
{
    static char buf[224];
    snprintf(buf, sizeof(buf), "%s.meta", f->path);
    return buf;
}

/* Open the pool file again and say how it started. */
static inline void
reopen(struct fx *f, struct tc_open_info *info)
{
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, info);
}

/* The end of a test that used the saved state: close (which saves it
 * again), remove the saved file, and free the truth when there is one. */
static inline void
close_clean(struct fx *f, const char *meta, struct truth *t)
{
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
    if (t)
        munmap(t, sizeof(*t));
}

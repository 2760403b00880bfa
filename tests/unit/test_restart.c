/*
 * Restart: tc_open on an existing pool file brings its items back, after a
 * clean close (warm) and after a crash (recovered), and never a deleted,
 * replaced, flushed, expired or torn one (src/engine/restart.h).
 *
 * A crash is a forked child that opens the cache, works, records what it
 * was told in a shared anonymous mapping, and _exits without tc_close: its
 * writes to the /dev/shm pool file stay, as after kill -9. The parent then
 * opens the same file and judges every key.
 */

#include "engine_fx.h"

#include "src/engine/htab.h"
#include "src/engine/item_layout.h"
#include "src/engine/restart_layout.h"
#include "src/engine/restart_save_layout.h"

#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

static struct truth *
truth_new(void)
{
    struct truth *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(t != MAP_FAILED);
    memset(t, 0, sizeof(*t));
    return t;
}

static void
key_of(char *k, unsigned i)
{
    snprintf(k, 16, "r%05u", i);
}

static uint32_t
vlen_of(unsigned i, uint32_t gen)
{
    /* sizes over several classes, some chained (above 512 KiB chunks) */
    if (i % 500 == 7)
        return 600 * 1024 + gen;
    return 10 + (i * 37 + gen * 11) % 3000;
}

/* Store key i with value generation gen and record it. */
static void
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

static void
del_rec(struct tc_cache *c, struct truth *t, unsigned i)
{
    char k[16];
    key_of(k, i);
    assert_int_equal(tc_delete(c, k, strlen(k), 0), TC_OK);
    t->live[i] = 0;
}

/* Every key as the truth says: value, flags and CAS, or a miss. */
static void
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

static int
open_existing(struct fx *f)
{
    int rc = tc_open(&f->cfg, &f->c); /* no unlink: the pool is reused */
    if (rc)
        print_message("tc_open: %d (%s)\n", rc, tc_errmsg());
    return rc;
}

/* The child's work: sets, overwrites, deletes, a refused add; then, with
 * crash, _exit without closing. */
static void
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

static void
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

static void
test_recover_after_crash(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    unsigned nlive;

    f->cfg.pool_size = 64 * MIB; /* no eviction: every key is judged */
    run_child(f, t, workload);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    judge(f->c, t, &nlive);
    assert_int_equal(stats(f->c).evictions, 0);
    assert_int_equal(info.items, nlive);
    assert_int_equal(nlive, NKEYS - NKEYS / 5);
    assert_int_equal(info.dropped, 0);
    assert_int_equal(stats(f->c).curr_items, nlive);
    assert_int_equal(tc_check(f->c), 0);
    /* the CAS counter resumes above every restored CAS */
    uint64_t cas = 0;
    assert_int_equal(tc_store(f->c, TC_SET, "new", 3, "x", 1, 0, 0, 0, &cas),
                     TC_OK);
    assert_true(cas > t->max_cas);
    /* a store replaces a restored item: the slab state is usable */
    set_rec(f->c, t, 0, 9);
    del_rec(f->c, t, 3);
    judge(f->c, t, &nlive);
    assert_int_equal(tc_check(f->c), 0);

    /* and a second crash-free cycle: a clean close is a warm start */
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_int_equal(info.dropped, 0);
    judge(f->c, t, &nlive);
    assert_int_equal(info.items, nlive + 1); /* and "new" */
    assert_int_equal(tc_check(f->c), 0);
    munmap(t, sizeof(*t));
}

/* Evictions in the child: what it could still read comes back, what it
 * could not does not. */
static void
evict_work(struct fx *f, struct truth *t)
{
    for (unsigned i = 0; i < NKEYS; i++)
        set_rec(f->c, t, i, 1);
    for (unsigned i = 0; i < NKEYS; i++)
        set_rec(f->c, t, i, 2);
    assert_true(stats(f->c).evictions > 0);
    unsigned char *buf = malloc(700 * 1024);
    assert_non_null(buf);
    for (unsigned i = 0; i < NKEYS; i++) {
        char k[16];
        struct got g;
        key_of(k, i);
        t->live[i] = get_cb(f->c, k, &g, buf, 700 * 1024) == TC_OK;
    }
    free(buf);
}

static void
test_recover_after_evictions(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    unsigned nlive;

    f->cfg.pool_size = 8 * MIB; /* 6 MiB of pages for ~6+ MB of items */
    run_child(f, t, evict_work);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    judge(f->c, t, &nlive);
    assert_true(nlive > 0);
    assert_int_equal(info.items, nlive);
    assert_int_equal(tc_check(f->c), 0);
    munmap(t, sizeof(*t));
}

/* flush_all: what it covered stays gone, what came after it comes back;
 * a delayed flush that came due while the cache was down covers all. */
static void
flush_work(struct fx *f, struct truth *t)
{
    for (unsigned i = 0; i < 10; i++)
        set_rec(f->c, t, i, 1);
    assert_int_equal(tc_flush_all(f->c, 0), TC_OK);
    for (unsigned i = 0; i < 10; i++)
        t->live[i] = 0;
    for (unsigned i = 10; i < 20; i++)
        set_rec(f->c, t, i, 1);
}

static void
delayed_flush_work(struct fx *f, struct truth *t)
{
    for (unsigned i = 0; i < 10; i++)
        set_rec(f->c, t, i, 1);
    assert_int_equal(tc_flush_all(f->c, 100), TC_OK);
}

static void
test_flush_survives(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    unsigned nlive;

    /* no eviction: the 20 items span about as many slab classes, a page
     * each */
    f->cfg.pool_size = 64 * MIB;
    run_child(f, t, flush_work);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    judge(f->c, t, &nlive);
    assert_int_equal(nlive, 10);
    assert_int_equal(info.dropped_flushed, 10);
    tc_close(f->c);
    f->c = NULL;

    memset(t, 0, sizeof(*t));
    run_child(f, t, delayed_flush_work);
    /* down past the flush's time: nothing stored before it comes back */
    tc_clock_set(T0 + 200);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    for (unsigned i = 0; i < 10; i++)
        t->live[i] = 0;
    judge(f->c, t, &nlive);
    assert_int_equal(nlive, 0);
    assert_int_equal(info.dropped_flushed, 10);
    munmap(t, sizeof(*t));
}

/* Expired items are dropped; the others keep their expiry. */
static void
expiry_work(struct fx *f, struct truth *t)
{
    (void)t;
    assert_int_equal(tc_set(f->c, "short", 5, "s", 1, 0, 10), TC_OK);
    assert_int_equal(tc_set(f->c, "long", 4, "l", 1, 0, 1000), TC_OK);
}

static void
test_expired_dropped(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;

    run_child(f, t, expiry_work);
    tc_clock_set(T0 + 20);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.items, 1);
    assert_int_equal(info.dropped_expired, 1);
    check_miss(f->c, "short");
    struct tc_item_info ii = check_str(f->c, "long", "l");
    assert_int_equal(ii.exptime, T0 + 1000);
    munmap(t, sizeof(*t));
}

/* A key promoted to the DRAM hot pool: its newest value lives in DRAM,
 * lost at a crash; the older PMEM copies it replaced must not come back
 * in its place (a miss is right, an old value is not). A key demoted back
 * to PMEM comes back with its latest value. */
static void
hot_work(struct fx *f, struct truth *t)
{
    (void)t;
    tc_maintain(f->c);
    for (int i = 0; i < 200; i++)
        puts_(f->c, "hot", "old");
    tc_maintain(f->c); /* "hot" is hot: its next write goes to DRAM */
    puts_(f->c, "hot", "dram");
    assert_true(stats(f->c).hotkey_current == 1);
    tc_maintain(f->c);
    for (int i = 0; i < 200; i++)
        puts_(f->c, "warm", "old");
    tc_maintain(f->c);
    puts_(f->c, "warm", "dram");
    tc_set_hot_write_rate(f->c, 1000000000);
    puts_(f->c, "hot", "newest"); /* still in DRAM until the next step */
    tc_maintain(f->c);            /* both cool: moved back to PMEM */
    puts_(f->c, "hot", "last");   /* a PMEM write again */
    tc_set_hot_write_rate(f->c, 10);
    tc_maintain(f->c);
    for (int i = 0; i < 200; i++)
        puts_(f->c, "again", "old");
    tc_maintain(f->c);
    puts_(f->c, "again", "in-dram"); /* dies with the process */
    assert_true(stats(f->c).hotkey_current >= 1);
}

static void
test_hot_pool_no_resurrection(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;

    f->cfg.hot_pool_size = 1 * MIB;
    f->cfg.hot_write_rate = 10;
    f->cfg.hotkey_window = 1;
    f->cfg.hotkey_sample = 1;
    f->cfg.hotkey_k = 16;
    run_child(f, t, hot_work);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    check_str(f->c, "hot", "last");
    check_str(f->c, "warm", "dram");
    check_miss(f->c, "again"); /* its DRAM copy died; "old" must not */
    assert_int_equal(tc_check(f->c), 0);
    munmap(t, sizeof(*t));
}

/* One item: it sits in the pool's very first chunk (offset 0). */
static void
one_key_work(struct fx *f, struct truth *t)
{
    set_rec(f->c, t, 0, 1);
}

static void
test_first_chunk(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    unsigned nlive;

    run_child(f, t, one_key_work);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.items, 1);
    judge(f->c, t, &nlive);
    assert_int_equal(nlive, 1);
    assert_int_equal(tc_check(f->c), 0);
    munmap(t, sizeof(*t));
}

/* Torn items: a key byte changed after the commit, or no commit word. */
static void
two_keys_work(struct fx *f, struct truth *t)
{
    (void)t;
    assert_int_equal(tc_set(f->c, "tornkey", 7, "v1", 2, 0, 0), TC_OK);
    assert_int_equal(tc_set(f->c, "nocommit", 8, "v2", 2, 0, 0), TC_OK);
    assert_int_equal(tc_set(f->c, "fine", 4, "v3", 2, 0, 0), TC_OK);
}

/* Offset in the file of the committed item holding key. */
static size_t
find_item(const char *map, size_t len, const char *key)
{
    size_t klen = strlen(key);
    for (size_t off = REGION_HDR_BYTES; off + 64 <= len; off += 8) {
        const struct item_hdr *it = (const void *)(map + off);
        if (it->kind == ITEM_KIND_HEAD && it->klen == klen && it->commit &&
            memcmp(map + off + sizeof(*it), key, klen) == 0)
            return off;
    }
    fail_msg("no item for %s", key);
    return 0;
}

static void
test_torn_dropped(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;

    run_child(f, t, two_keys_work);
    int fd = open(f->path, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0);
    close(fd);
    assert_true(map != MAP_FAILED);
    size_t a = find_item(map, (size_t)st.st_size, "tornkey");
    size_t b = find_item(map, (size_t)st.st_size, "nocommit");
    map[a + sizeof(struct item_hdr) + 2] ^= 0x20; /* "toRnkey" */
    memset(map + b + ITEM_COMMIT_OFFSET, 0, 8);
    munmap(map, (size_t)st.st_size);

    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    assert_int_equal(info.items, 1);
    assert_int_equal(info.dropped_torn, 1);
    check_miss(f->c, "tornkey");
    check_miss(f->c, "toRnkey");
    check_miss(f->c, "nocommit");
    check_str(f->c, "fine", "v3");
    assert_int_equal(tc_check(f->c), 0);
    munmap(t, sizeof(*t));
}

/* no_restart, or other settings: a cold start that says why. */
static void
test_cold_starts(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;

    run_child(f, t, two_keys_work);
    f->cfg.no_restart = true;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_COLD);
    assert_non_null(strstr(info.reason, "no_restart"));
    check_miss(f->c, "fine");
    tc_close(f->c);
    f->c = NULL;

    f->cfg.no_restart = false;
    run_child(f, t, two_keys_work);
    f->cfg.item_size_max = 2 * MIB;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_COLD);
    assert_non_null(strstr(info.reason, "item size max"));
    check_miss(f->c, "fine");
    tc_close(f->c);
    f->c = NULL;

    f->cfg.item_size_max = TC_ITEM_SIZE_MAX_DEFAULT;
    run_child(f, t, two_keys_work);
    f->cfg.growth_factor = 2.0;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_COLD);
    assert_non_null(strstr(info.reason, "slab settings"));
    check_miss(f->c, "fine");
    tc_close(f->c);
    f->c = NULL;

    /* other small classes alone (the step), same -n, -f and chunk_max */
    f->cfg.growth_factor = 1.25;
    f->cfg.chunk_step = 0;
    run_child(f, t, two_keys_work);
    f->cfg.chunk_step = 8;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_COLD);
    assert_non_null(strstr(info.reason, "slab settings"));
    check_miss(f->c, "fine");
    tc_close(f->c);
    f->c = NULL;

    /* a pool written before the class hash was kept (0 there), same
     * settings otherwise */
    run_child(f, t, two_keys_work);
    int fd = open(f->path, O_RDWR);
    assert_true(fd >= 0);
    size_t at = offsetof(struct region_header, user) +
                offsetof(struct restart_meta, class_hash);
    uint32_t zero = 0, was = 0;
    assert_int_equal(pread(fd, &was, sizeof(was), (off_t)at), sizeof(was));
    assert_int_not_equal(was, 0);
    assert_int_equal(pwrite(fd, &zero, sizeof(zero), (off_t)at), sizeof(zero));
    close(fd);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_COLD);
    assert_non_null(strstr(info.reason, "slab settings"));
    check_miss(f->c, "fine");
    munmap(t, sizeof(*t));
}

/* A client's CAS (meta E) is kept in the item (item_layout.h's opt), the
 * others derive from the store sequence: after a crash every item answers
 * the CAS and flags it was stored with, and the counter resumes above the
 * largest, a client's included. */
#define CAS_HI (1ull << 40)

static void
client_cas_work(struct fx *f, struct truth *t)
{
    struct tc_store_opts lo = {.cas_new = 5}, hi = {.cas_new = CAS_HI};
    assert_int_equal(
        tc_store_ex(f->c, TC_SET, "plain", 5, "v0", 2, 0, 0, NULL, &t->cas[0]),
        TC_OK);
    assert_int_equal(tc_store_ex(f->c, TC_SET, "flagged", 7, "v1", 2, 9, 0,
                                 NULL, &t->cas[1]),
                     TC_OK);
    assert_int_equal(
        tc_store_ex(f->c, TC_SET, "lo", 2, "v2", 2, 0, 0, &lo, &t->cas[2]),
        TC_OK);
    assert_int_equal(
        tc_store_ex(f->c, TC_SET, "hi", 2, "v3", 2, 7, 0, &hi, &t->cas[3]),
        TC_OK);
    assert_int_equal(t->cas[2], 5);
    assert_int_equal(t->cas[3], CAS_HI);
    /* a plain set after it: a store sequence above 2^32, whose high half
     * the header keeps apart from the commit word's low half */
    assert_int_equal(
        tc_store_ex(f->c, TC_SET, "above", 5, "v4", 2, 0, 0, NULL, &t->cas[4]),
        TC_OK);
    assert_true(t->cas[4] > CAS_HI);
}

static void
test_client_cas_survives(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    static const char *const keys[] = {"plain", "flagged", "lo", "hi", "above"};
    static const uint32_t flags[] = {0, 9, 0, 7, 0};
    unsigned char buf[16];
    struct got g;

    run_child(f, t, client_cas_work);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    assert_int_equal(info.items, 5);
    for (unsigned i = 0; i < 5; i++) {
        assert_int_equal(get_cb(f->c, keys[i], &g, buf, sizeof(buf)), TC_OK);
        assert_int_equal(g.info.cas, t->cas[i]);
        assert_int_equal(g.info.flags, flags[i]);
        assert_int_equal(g.len, 2);
        assert_int_equal(buf[1], (unsigned char)('0' + i));
    }
    /* a cas with the restored CAS matches, then the CAS moves on */
    uint64_t cas = 0;
    struct tc_store_opts o = {.cas_in = 5};
    assert_int_equal(
        tc_store_ex(f->c, TC_CAS, "lo", 2, "v5", 2, 0, 0, &o, &cas), TC_OK);
    assert_true(cas > t->cas[4]);
    assert_int_equal(tc_check(f->c), 0);
    munmap(t, sizeof(*t));
}

/* A pool written with the 32-byte header (format version 1) starts cold,
 * saying why. */
static void
test_old_format_cold(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;

    run_child(f, t, two_keys_work);
    int fd = open(f->path, O_RDWR);
    assert_true(fd >= 0);
    size_t at = offsetof(struct region_header, user) +
                offsetof(struct restart_meta, version);
    uint32_t old = 1, was = 0;
    assert_int_equal(pread(fd, &was, sizeof(was), (off_t)at), sizeof(was));
    assert_int_equal(was, RESTART_VERSION);
    assert_int_equal(pwrite(fd, &old, sizeof(old), (off_t)at), sizeof(old));
    close(fd);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_COLD);
    assert_non_null(strstr(info.reason, "item format version"));
    check_miss(f->c, "fine");
    munmap(t, sizeof(*t));
}

/* Copy the pool file at from to to. */
static void
copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char buf[1 << 16];
    ssize_t n;
    assert_true(in >= 0 && out >= 0);
    while ((n = read(in, buf, sizeof(buf))) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    close(in);
    close(out);
}

/* The parallel scan: the same crashed pool scanned by four threads (more
 * than this machine may have CPUs, so they interleave) and by one gives
 * the same items, each key its acknowledged value, and a sound cache. */
static void
test_parallel_scan(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info4, info1;
    char copy[sizeof(f->path) + 8];
    unsigned nlive;

    f->cfg.pool_size = 64 * MIB; /* no eviction: every key is judged */
    run_child(f, t, workload);
    snprintf(copy, sizeof(copy), "%s.copy", f->path);
    copy_file(f->path, copy);

    f->cfg.restart_threads = 4;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info4);
    assert_int_equal(info4.kind, TC_START_RECOVERED);
    assert_int_equal(info4.scan_threads, 4);
    judge(f->c, t, &nlive);
    assert_int_equal(info4.items, nlive);
    assert_int_equal(stats(f->c).curr_items, nlive);
    assert_int_equal(tc_check(f->c), 0);
    set_rec(f->c, t, 0, 9); /* the slab state is usable */
    judge(f->c, t, &nlive);
    tc_close(f->c);
    f->c = NULL;

    struct fx g = *f;
    g.c = NULL;
    g.cfg.pool_path = copy;
    g.cfg.restart_threads = 1;
    assert_int_equal(tc_open(&g.cfg, &g.c), 0);
    tc_open_info(g.c, &info1);
    assert_int_equal(info1.kind, TC_START_RECOVERED);
    assert_int_equal(info1.scan_threads, 1);
    assert_int_equal(info1.items, info4.items);
    assert_int_equal(info1.bytes, info4.bytes);
    assert_int_equal(info1.dropped, info4.dropped);
    assert_int_equal(tc_check(g.c), 0);
    tc_close(g.c);
    unlink(copy);
    munmap(t, sizeof(*t));
}

/* Items for the index-size test: more than the first index holds (65,536
 * items), and a count whose index, grown by doubling, would be half the
 * size the restart gives it (66% full at 32,768 buckets, under the 70%
 * that doubles it; sized with an eighth to spare, 65,536). */
#define PRESIZE_ITEMS 130000u

static void
presize_work(struct fx *f, struct truth *t)
{
    (void)t;
    char k[16];
    for (unsigned i = 0; i < PRESIZE_ITEMS; i++) {
        snprintf(k, sizeof(k), "p%07u", i);
        assert_int_equal(tc_set(f->c, k, strlen(k), "v", 1, 0, 0), TC_OK);
    }
}

static void
assert_presized(struct tc_cache *c)
{
    struct tc_stats s = stats(c);
    assert_int_equal(s.curr_items, PRESIZE_ITEMS);
    assert_false(s.index_growing);
    assert_int_equal(s.index_buckets,
                     htab_buckets_for(PRESIZE_ITEMS + PRESIZE_ITEMS / 8));
    assert_int_equal(tc_check(c), 0);
}

/* The saved-state path beside the fixture's pool. In a static buffer, not
 * the test's stack: a failed assertion jumps to the teardown, whose close
 * still writes to the cache's restart_file. */
static const char *
meta_path(const struct fx *f)
{
    static char buf[224];
    snprintf(buf, sizeof(buf), "%s.meta", f->path);
    return buf;
}

/* The scan inserts into an index already sized for what it will find:
 * after a crash from the pool's pages, after a clean close from the count
 * the close saved (and the saved header carries it). */
static void
test_index_presized(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);

    f->cfg.pool_size = 64 * MIB;
    run_child(f, t, presize_work);
    f->cfg.restart_file = meta;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    assert_int_equal(info.items, PRESIZE_ITEMS);
    assert_presized(f->c);
    tc_close(f->c);
    f->c = NULL;
    struct restart_saved_hdr h;
    int fd = open(meta, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    close(fd);
    assert_int_equal(h.version, RESTART_SAVED_VERSION);
    assert_int_equal(h.items, PRESIZE_ITEMS);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    assert_presized(f->c);
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
    munmap(t, sizeof(*t));
}

/* --- the saved state (src/engine/restart_save.h) --- */

/* The workload in this process, then a clean close that saves the
 * state. */
static void
close_saved(struct fx *f, struct truth *t, const char *meta)
{
    f->cfg.pool_size = 64 * MIB;
    f->cfg.restart_file = meta;
    assert_int_equal(fx_open(f), 0);
    workload(f, t);
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(access(meta, F_OK), 0);
}

static void
test_saved_index_warm(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);
    unsigned nlive;

    close_saved(f, t, meta);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    assert_int_equal(access(meta, F_OK), -1); /* used once */
    judge(f->c, t, &nlive);
    assert_int_equal(nlive, NKEYS - NKEYS / 5);
    assert_int_equal(info.items, nlive);
    assert_int_equal(info.dropped, 0);
    assert_int_equal(stats(f->c).curr_items, nlive);
    assert_int_equal(tc_check(f->c), 0);
    uint64_t cas = 0;
    assert_int_equal(tc_store(f->c, TC_SET, "new", 3, "x", 1, 0, 0, 0, &cas),
                     TC_OK);
    assert_true(cas > t->max_cas);
    /* the slab state is usable: replace, delete, store chained items */
    set_rec(f->c, t, 0, 9);
    set_rec(f->c, t, 7, 9);
    del_rec(f->c, t, 3);
    judge(f->c, t, &nlive);
    assert_int_equal(tc_check(f->c), 0);

    /* and a second clean cycle the same */
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_string_equal(info.reason, "with the saved state");
    judge(f->c, t, &nlive);
    assert_int_equal(info.items, nlive + 1);
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
    munmap(t, sizeof(*t));
}

/* What only the saved state knows: the CAS counter where the close left
 * it. The item with the highest CAS deleted before the close, the scan
 * sees only lower ones; a client may still hold that CAS, so no new item
 * may get it again. */
static void
test_saved_state_cas(void **state)
{
    struct fx *f = *state;
    const char *meta = meta_path(f);
    uint64_t top = 0, cas = 0;

    f->cfg.pool_size = 64 * MIB;
    f->cfg.restart_file = meta;
    assert_int_equal(fx_open(f), 0);
    for (unsigned i = 0; i < 100; i++)
        puts_(f->c, "k", "v");
    assert_int_equal(tc_store(f->c, TC_SET, "top", 3, "x", 1, 0, 0, 0, &top),
                     TC_OK);
    for (unsigned i = 0; i < 50; i++)
        assert_int_equal(
            tc_store(f->c, TC_SET, "top", 3, "x", 1, 0, 0, 0, &top), TC_OK);
    assert_int_equal(tc_delete(f->c, "top", 3, 0), TC_OK);
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(open_existing(f), 0);
    struct tc_open_info info;
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    assert_int_equal(tc_store(f->c, TC_SET, "new", 3, "x", 1, 0, 0, 0, &cas),
                     TC_OK);
    assert_true(cas > top);
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
}

/* Damage to the saved file: the open scans instead, every value right. */
static void
damage_flip(const char *meta)
{
    int fd = open(meta, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char b;
    off_t at = st.st_size / 2;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void
damage_truncate(const char *meta)
{
    struct stat st;
    assert_int_equal(stat(meta, &st), 0);
    assert_int_equal(truncate(meta, st.st_size - 8), 0);
}

static void
damage_header(const char *meta)
{
    int fd = open(meta, O_RDWR);
    assert_true(fd >= 0);
    uint64_t v;
    off_t at = offsetof(struct restart_saved_hdr, cas_seq);
    assert_int_equal(pread(fd, &v, 8, at), 8);
    v += 1;
    assert_int_equal(pwrite(fd, &v, 8, at), 8);
    close(fd);
}

static void
damage_short(const char *meta)
{
    assert_int_equal(truncate(meta, 10), 0);
}

static void
test_saved_index_damaged(void **state)
{
    struct fx *f = *state;
    void (*damage[])(const char *) = {damage_flip, damage_truncate,
                                      damage_header, damage_short};
    const char *meta = meta_path(f);

    for (unsigned d = 0; d < sizeof(damage) / sizeof(damage[0]); d++) {
        struct truth *t = truth_new();
        struct tc_open_info info;
        unsigned nlive;
        close_saved(f, t, meta);
        damage[d](meta);
        assert_int_equal(open_existing(f), 0);
        tc_open_info(f->c, &info);
        assert_int_equal(info.kind, TC_START_WARM);
        assert_non_null(strstr(info.reason, "without saved state"));
        assert_int_equal(access(meta, F_OK), -1);
        judge(f->c, t, &nlive);
        assert_int_equal(info.items, nlive);
        assert_int_equal(stats(f->c).curr_items, nlive);
        assert_int_equal(tc_check(f->c), 0);
        tc_close(f->c);
        f->c = NULL;
        unlink(meta);
        munmap(t, sizeof(*t));
    }
}

/* A warm start consumes the clean mark: a crash after it scans
 * (recovered), and a saved file from an older close is not taken. */
static void
test_saved_index_consumed(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);
    char old[240];
    unsigned nlive;

    snprintf(old, sizeof(old), "%s.old", meta);
    close_saved(f, t, meta);
    assert_int_equal(link(meta, old), 0); /* keep a copy */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (open_existing(f) != 0)
            _exit(2);
        tc_open_info(f->c, &info);
        if (info.kind != TC_START_WARM)
            _exit(3);
        _exit(0); /* a crash after the warm start */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the old close's file put back: the pool is not clean, it scans */
    assert_int_equal(rename(old, meta), 0);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    assert_int_equal(access(meta, F_OK), -1); /* discarded */
    judge(f->c, t, &nlive);
    assert_int_equal(info.items, nlive);
    tc_close(f->c);
    f->c = NULL;

    /* an older close's file beside a pool closed clean since: not this
     * close's, so scanned */
    close_saved(f, t, meta);
    assert_int_equal(link(meta, old), 0);
    assert_int_equal(open_existing(f), 0);
    tc_close(f->c); /* saves a newer file */
    f->c = NULL;
    assert_int_equal(rename(old, meta), 0);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_non_null(strstr(info.reason, "without saved state"));
    judge(f->c, t, &nlive);
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
    munmap(t, sizeof(*t));
}

/* Another index size (expected_items): the saved state is still this
 * pool's (the scan fills an index of any size); a delayed flush that came
 * due while stopped: everything dropped as flushed. */
static void
test_saved_index_settings(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);
    unsigned nlive;

    close_saved(f, t, meta);
    f->cfg.expected_items = 1u << 20;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    judge(f->c, t, &nlive);
    assert_int_equal(info.items, nlive);
    /* a flush_all 100 s ahead, then a start 200 s later */
    assert_int_equal(tc_flush_all(f->c, 100), 0);
    tc_close(f->c);
    f->c = NULL;
    tc_clock_set(T0 + 200);
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_string_equal(info.reason, "with the saved state");
    assert_int_equal(info.items, 0);
    assert_int_equal(info.dropped_flushed, nlive);
    memset(t->live, 0, sizeof(t->live));
    judge(f->c, t, &nlive);
    assert_int_equal(stats(f->c).curr_items, 0);
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
    munmap(t, sizeof(*t));
}

/* The hot-pool settings of the tests below: a key written 10 times a
 * second is hot, judged each tc_maintain. */
static void
hot_cfg(struct fx *f)
{
    f->cfg.hot_pool_size = 1 * MIB;
    f->cfg.hot_write_rate = 10;
    f->cfg.hotkey_window = 1;
    f->cfg.hotkey_sample = 1;
    f->cfg.hotkey_k = 16;
}

#define HOT_KEYS 8

/* Make keys hot, then give each a last value, flags and expiry while it
 * is held in DRAM; cas[] is what each store answered. */
static void
hot_keys_in_dram(struct fx *f, uint64_t cas[HOT_KEYS])
{
    char k[16], v[32];
    tc_maintain(f->c);
    for (int n = 0; n < 100; n++) {
        for (unsigned i = 0; i < HOT_KEYS; i++) {
            snprintf(k, sizeof(k), "hkey%06u", i);
            puts_(f->c, k, "old");
        }
    }
    tc_maintain(f->c); /* all hot: their next writes go to DRAM */
    uint64_t before = stats(f->c).hot_pool_bytes;
    for (unsigned i = 0; i < HOT_KEYS; i++) {
        snprintf(k, sizeof(k), "hkey%06u", i);
        snprintf(v, sizeof(v), "latest-%u", i);
        assert_int_equal(
            store_s(f->c, TC_SET, k, v, 100 + i, 1000 + i, 0, &cas[i]), TC_OK);
    }
    assert_true(stats(f->c).hot_pool_bytes > before);
    struct tc_hotkey hk[16];
    int n = tc_hotkeys(f->c, false, hk, 16);
    unsigned in_dram = 0;
    for (int i = 0; i < n; i++)
        if (hk[i].klen == 10 && memcmp(hk[i].key, "hkey", 4) == 0)
            in_dram += hk[i].in_dram;
    assert_int_equal(in_dram, HOT_KEYS);
}

static void
hot_keys_check(struct fx *f, const uint64_t cas[HOT_KEYS])
{
    char k[16], v[32];
    for (unsigned i = 0; i < HOT_KEYS; i++) {
        snprintf(k, sizeof(k), "hkey%06u", i);
        snprintf(v, sizeof(v), "latest-%u", i);
        struct tc_item_info ii = check_str(f->c, k, v);
        assert_int_equal(ii.flags, 100 + i);
        assert_int_equal(ii.exptime, T0 + 1000 + i);
        assert_true(ii.cas == cas[i]);
    }
}

/* The hot pool at a clean close: every item held there is written back to
 * the pool first, so the scan finds it and it comes back with its
 * latest value, flags, expiry and CAS, never an older PMEM copy. */
static void
test_saved_index_hot_pool(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    const char *meta = meta_path(f);
    uint64_t cas[HOT_KEYS];

    hot_cfg(f);
    f->cfg.restart_file = meta;
    assert_int_equal(fx_open(f), 0);
    hot_work(f, t); /* "again" is in DRAM at its end */
    hot_keys_in_dram(f, cas);
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    assert_int_equal(info.dropped, 0);
    check_str(f->c, "hot", "last");
    check_str(f->c, "warm", "dram");
    check_str(f->c, "again", "in-dram");
    hot_keys_check(f, cas);
    assert_int_equal(stats(f->c).hot_pool_bytes, 0);
    assert_int_equal(tc_check(f->c), 0);
    /* and a scan finds them the same (no saved state this time) */
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
    f->cfg.restart_file = NULL;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_null(strstr(info.reason, "with the saved state"));
    check_str(f->c, "again", "in-dram");
    hot_keys_check(f, cas);
    assert_int_equal(tc_check(f->c), 0);
    tc_close(f->c);
    f->c = NULL;
    munmap(t, sizeof(*t));
}

/* A DRAM item that expired before the close is not written back; with no
 * room in a full pool (evictions off) a hot item stays in DRAM and is
 * lost at the close (one log line), and nothing older comes back in its
 * place; the rest of the pool comes back. */
static void
test_saved_index_hot_pool_full(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;
    const char *meta = meta_path(f);
    char k[32];
    uint64_t cas[HOT_KEYS];

    hot_cfg(f);
    f->cfg.pool_size = 8 * MIB;
    f->cfg.evict = false;
    f->cfg.restart_file = meta;
    assert_int_equal(fx_open(f), 0);
    hot_keys_in_dram(f, cas);
    /* "short" in DRAM too, expired by the close */
    tc_maintain(f->c);
    for (int n = 0; n < 200; n++)
        puts_(f->c, "short", "old");
    tc_maintain(f->c);
    assert_int_equal(store_s(f->c, TC_SET, "short", "new", 0, 10, 0, NULL),
                     TC_OK);
    /* fill the pool with items of the hot items' size, so that no chunk
     * is left for their demotion */
    unsigned stored = 0;
    for (unsigned i = 0; i < 1000000; i++) {
        snprintf(k, sizeof(k), "fill%06u", i);
        int rc = tc_set(f->c, k, strlen(k), "latest-0", 8, 0, 0);
        if (rc == -ENOMEM)
            break;
        assert_int_equal(rc, TC_OK);
        stored++;
    }
    assert_true(stored > 0);
    tc_clock_set(T0 + 20);
    tc_close(f->c);
    f->c = NULL;
    assert_int_equal(open_existing(f), 0);
    tc_open_info(f->c, &info);
    assert_string_equal(info.reason, "with the saved state");
    check_miss(f->c, "short");
    for (unsigned i = 0; i < HOT_KEYS; i++) {
        snprintf(k, sizeof(k), "hkey%06u", i);
        check_miss(f->c, k); /* lost, and its "old" does not come back */
    }
    for (unsigned i = 0; i < stored; i++) {
        snprintf(k, sizeof(k), "fill%06u", i);
        check_str(f->c, k, "latest-0");
    }
    assert_int_equal(tc_check(f->c), 0);
    tc_close(f->c);
    f->c = NULL;
    unlink(meta);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_recover_after_crash),
        TC_TEST_NOOPEN(test_first_chunk),
        TC_TEST_NOOPEN(test_hot_pool_no_resurrection),
        TC_TEST_NOOPEN(test_recover_after_evictions),
        TC_TEST_NOOPEN(test_flush_survives),
        TC_TEST_NOOPEN(test_expired_dropped),
        TC_TEST_NOOPEN(test_torn_dropped),
        TC_TEST_NOOPEN(test_cold_starts),
        TC_TEST_NOOPEN(test_client_cas_survives),
        TC_TEST_NOOPEN(test_old_format_cold),
        TC_TEST_NOOPEN(test_parallel_scan),
        TC_TEST_NOOPEN(test_index_presized),
        TC_TEST_NOOPEN(test_saved_index_warm),
        TC_TEST_NOOPEN(test_saved_state_cas),
        TC_TEST_NOOPEN(test_saved_index_damaged),
        TC_TEST_NOOPEN(test_saved_index_consumed),
        TC_TEST_NOOPEN(test_saved_index_settings),
        TC_TEST_NOOPEN(test_saved_index_hot_pool),
        TC_TEST_NOOPEN(test_saved_index_hot_pool_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

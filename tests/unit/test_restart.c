/*
 * Restart after a crash: a child that _exits without tc_close, then an
 * open of the same pool file that scans it (recovered); torn items, the
 * first chunk, a client's CAS, the cold starts and their reasons, the
 * parallel scan and the index it sizes (restart_fx.h). The clean stop's
 * saved state is test_restart_saved.c, the DRAM hot pool
 * test_restart_hot.c.
 */

#include "restart_fx.h"

#include "src/engine/htab.h"
#include "src/engine/item_layout.h"
#include "src/engine/restart_layout.h"
#include "src/engine/restart_save_layout.h"

#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void
test_recover_after_crash(void **state)
{
    struct fx *f = *state;
    struct truth *t = truth_new();
    struct tc_open_info info;
    unsigned nlive;

    f->cfg.pool_size = 64 * MIB; /* no eviction: every key is judged */
    run_child(f, t, workload);
    reopen(f, &info);
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
    reopen(f, &info);
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
    reopen(f, &info);
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
    reopen(f, &info);
    judge(f->c, t, &nlive);
    assert_int_equal(nlive, 10);
    assert_int_equal(info.dropped_flushed, 10);
    tc_close(f->c);
    f->c = NULL;

    memset(t, 0, sizeof(*t));
    run_child(f, t, delayed_flush_work);
    /* down past the flush's time: nothing stored before it comes back */
    tc_clock_set(T0 + 200);
    reopen(f, &info);
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
    reopen(f, &info);
    assert_int_equal(info.items, 1);
    assert_int_equal(info.dropped_expired, 1);
    check_miss(f->c, "short");
    struct tc_item_info ii = check_str(f->c, "long", "l");
    assert_int_equal(ii.exptime, T0 + 1000);
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
    reopen(f, &info);
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

    f->cfg.packed_item_max = 0; /* the slabs' restart (items in chunks) */
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

    reopen(f, &info);
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

/* The pool file mapped shared, for a test to change what a restart finds;
 * *len gets its length. */
static char *
map_pool(const struct fx *f, size_t *len)
{
    int fd = open(f->path, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0);
    close(fd);
    assert_true(map != MAP_FAILED);
    *len = (size_t)st.st_size;
    return map;
}

/* A clean close finishes every write before it marks the pool clean, so a
 * clean start trusts a committed item without its CRC: a key byte changed
 * behind the cache's back (which no clean close leaves) comes back as it
 * reads, where a start after a crash drops it as torn. The structural
 * checks stay: an item whose value would run past its chunk is dropped by
 * both. The figures the scan counts (items, bytes) are the close's. */
static void
test_clean_start_trusts_commit(void **state)
{
    struct fx *f = *state;
    struct tc_open_info info;
    size_t len;

    f->cfg.packed_item_max = 0; /* the slabs' restart (items in chunks) */
    assert_int_equal(fx_open(f), 0);
    assert_int_equal(tc_set(f->c, "tornkey", 7, "v1", 2, 0, 0), TC_OK);
    assert_int_equal(tc_set(f->c, "longval", 7, "v2", 2, 0, 0), TC_OK);
    assert_int_equal(tc_set(f->c, "fine", 4, "v3", 2, 0, 0), TC_OK);
    uint64_t bytes = stats(f->c).bytes;
    tc_close(f->c);
    f->c = NULL;

    char *map = map_pool(f, &len);
    size_t a = find_item(map, len, "tornkey");
    size_t b = find_item(map, len, "longval");
    map[a + sizeof(struct item_hdr) + 2] ^= 0x20; /* "toRnkey" */
    struct item_hdr *lv = (void *)(map + b);
    lv->vlen = 2u << 20; /* past any chunk */
    munmap(map, len);

    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_int_equal(info.items, 2);
    assert_int_equal(info.dropped_torn, 1);
    assert_int_equal(stats(f->c).curr_items, 2);
    assert_int_equal(stats(f->c).bytes, info.bytes);
    assert_true(info.bytes < bytes);
    check_str(f->c, "toRnkey", "v1"); /* no CRC checked */
    check_miss(f->c, "tornkey");
    check_miss(f->c, "longval");
    check_str(f->c, "fine", "v3");
    assert_int_equal(tc_check(f->c), 0);

    /* the same bytes after a crash: a child starts from the clean mark
     * the close below leaves (consuming it) and dies without closing; the
     * next start checks the CRC and drops "toRnkey" */
    tc_close(f->c);
    f->c = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(open_existing(f) == 0 ? 0 : 2);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    assert_int_equal(info.items, 1);
    assert_int_equal(info.dropped_torn, 1);
    check_miss(f->c, "toRnkey");
    check_str(f->c, "fine", "v3");
    assert_int_equal(stats(f->c).curr_items, 1);
    assert_int_equal(tc_check(f->c), 0);
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
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_COLD);
    assert_non_null(strstr(info.reason, "no_restart"));
    check_miss(f->c, "fine");
    tc_close(f->c);
    f->c = NULL;

    f->cfg.no_restart = false;
    run_child(f, t, two_keys_work);
    f->cfg.item_size_max = 2 * MIB;
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_COLD);
    assert_non_null(strstr(info.reason, "item size max"));
    check_miss(f->c, "fine");
    tc_close(f->c);
    f->c = NULL;

    f->cfg.item_size_max = TC_ITEM_SIZE_MAX_DEFAULT;
    run_child(f, t, two_keys_work);
    f->cfg.growth_factor = 2.0;
    reopen(f, &info);
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
    reopen(f, &info);
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
    reopen(f, &info);
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
    f->cfg.packed_item_max = 0; /* the slabs' restart (items in chunks) */

    run_child(f, t, client_cas_work);
    reopen(f, &info);
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
    reopen(f, &info);
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

    f->cfg.packed_item_max = 0;  /* the slabs' restart (items in chunks) */
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
    assert_int_equal(s.index_buckets, htab_buckets_for(PRESIZE_ITEMS));
    assert_int_equal(tc_check(c), 0);
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
    reopen(f, &info);
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
    reopen(f, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_string_equal(info.reason, "with the saved state");
    assert_presized(f->c);
    close_clean(f, meta, t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_recover_after_crash),
        TC_TEST_NOOPEN(test_first_chunk),
        TC_TEST_NOOPEN(test_recover_after_evictions),
        TC_TEST_NOOPEN(test_flush_survives),
        TC_TEST_NOOPEN(test_expired_dropped),
        TC_TEST_NOOPEN(test_torn_dropped),
        TC_TEST_NOOPEN(test_clean_start_trusts_commit),
        TC_TEST_NOOPEN(test_cold_starts),
        TC_TEST_NOOPEN(test_client_cas_survives),
        TC_TEST_NOOPEN(test_old_format_cold),
        TC_TEST_NOOPEN(test_parallel_scan),
        TC_TEST_NOOPEN(test_index_presized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

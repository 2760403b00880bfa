/*
 * The embedding API's own promises (src/tiercache.h): defaults, handles,
 * thread registration, per-thread error messages, chained values handed to
 * callbacks in pieces.
 */

#include "src/tiercache.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define MIB (1024u * 1024u)
#define T0 1700000000u

struct fx {
    struct tc_cache *c[2];
    char path[2][192];
};

static int
setup(void **state)
{
    const char *name = *state;
    struct fx *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    for (int i = 0; i < 2; i++) {
        snprintf(f->path[i], sizeof(f->path[i]),
                 "/dev/shm/tc_test_api_%d_%s_%d.pool", (int)getpid(), name, i);
        unlink(f->path[i]);
    }
    tc_clock_set(T0);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 2; i++) {
        tc_close(f->c[i]);
        unlink(f->path[i]);
    }
    tc_clock_set(0);
    free(f);
    return 0;
}

static void
open_cache(struct fx *f, int i, uint64_t pool_size)
{
    struct tc_config cfg;
    tc_config_init(&cfg);
    cfg.pool_path = f->path[i];
    cfg.pool_size = pool_size;
    cfg.background = false;
    int rc = tc_open(&cfg, &f->c[i]);
    if (rc != 0)
        fail_msg("tc_open(%s): %d (%s)", f->path[i], rc, tc_errmsg());
}

static void
check_str(struct tc_cache *c, const char *k, const char *v)
{
    char buf[256];
    struct tc_item_info info;
    int rc = tc_get_copy(c, k, strlen(k), buf, sizeof(buf), &info);
    if (rc != TC_OK)
        fail_msg("get %s: %d", k, rc);
    assert_int_equal(info.vlen, strlen(v));
    assert_memory_equal(buf, v, strlen(v));
}

static void
put(struct tc_cache *c, const char *k, const char *v)
{
    int rc = tc_set(c, k, strlen(k), v, strlen(v), 0, 0);
    if (rc != TC_OK)
        fail_msg("set %s: %d", k, rc);
}

/* ------------------------------------------------------------------ */

static void
test_config_defaults(void **state)
{
    (void)state;
    struct tc_config cfg;
    memset(&cfg, 0x5a, sizeof(cfg));
    tc_config_init(&cfg);
    assert_non_null(cfg.pool_path);
    assert_string_equal(cfg.pool_path, "/dev/shm/tiercache.pool");
    assert_int_equal(cfg.pool_size, 64 * MIB);
    assert_int_equal(cfg.mem_limit, 0);
    assert_int_equal(cfg.min_chunk, 64);
    assert_true(cfg.growth_factor > 1.2499 && cfg.growth_factor < 1.2501);
    assert_int_equal(cfg.chunk_max, 512 * 1024);
    assert_int_equal(cfg.item_size_max, MIB);
    assert_true(cfg.evict);
    assert_int_equal(cfg.expected_items, 0);
    assert_int_equal(cfg.quota_batch, 32);
    assert_true(cfg.background);
    assert_int_equal(cfg.sweep_budget, 1024);
    assert_string_equal(TC_RELEASE, "0.1.0");
    assert_string_equal(TC_VERSION, "1.6.0-tiercache-0.1.0");
    assert_int_equal(TC_KEY_MAX, 250);
}

static void
test_close_null(void **state)
{
    (void)state;
    tc_close(NULL);
    tc_close(NULL);
}

static void
test_two_caches(void **state)
{
    struct fx *f = *state;
    char scratch[4];
    open_cache(f, 0, 8 * MIB);
    open_cache(f, 1, 16 * MIB);

    put(f->c[0], "k", "zero");
    put(f->c[1], "k", "one");
    put(f->c[0], "only0", "a");
    check_str(f->c[0], "k", "zero");
    check_str(f->c[1], "k", "one");
    assert_int_equal(tc_get_copy(f->c[1], "only0", 5, scratch, 0, NULL),
                     TC_NOT_FOUND);

    assert_int_equal(tc_delete(f->c[0], "k", 1, 0), TC_OK);
    assert_int_equal(tc_get_copy(f->c[0], "k", 1, scratch, 0, NULL),
                     TC_NOT_FOUND);
    check_str(f->c[1], "k", "one");

    assert_int_equal(tc_flush_all(f->c[1], 0), 0);
    check_str(f->c[0], "only0", "a");

    struct tc_stats s0, s1;
    tc_stats(f->c[0], &s0);
    tc_stats(f->c[1], &s1);
    assert_int_equal(s0.curr_items, 1);
    assert_int_equal(s0.cmd_set, 2);
    assert_int_equal(s1.cmd_set, 1);
    assert_int_equal(s1.cmd_flush, 1);
    assert_int_equal(s0.cmd_flush, 0);
    assert_true(s0.pmem_bytes != s1.pmem_bytes);

    /* closing one leaves the other working */
    tc_close(f->c[0]);
    f->c[0] = NULL;
    put(f->c[1], "k2", "after");
    check_str(f->c[1], "k2", "after");
    assert_int_equal(tc_check(f->c[1]), 0);

    /* and a cache opened again on the first file works too */
    open_cache(f, 0, 8 * MIB);
    put(f->c[0], "k3", "again");
    check_str(f->c[0], "k3", "again");
    check_str(f->c[1], "k2", "after");
}

struct thr_arg {
    struct tc_cache *c;
    const char *prefix;
    int n;
    bool reg;   /* call tc_thread_register first */
    bool unreg; /* tc_thread_unregister, then more calls */
    int failures;
    char msg[128];
};

static void *
thr_ops(void *p)
{
    struct thr_arg *a = p;
    char k[64], v[64];
    if (a->reg && tc_thread_register(a->c) != 0)
        a->failures++;
    for (int round = 0; round < (a->unreg ? 2 : 1); round++) {
        for (int i = 0; i < a->n; i++) {
            snprintf(k, sizeof(k), "%s%d", a->prefix, i);
            snprintf(v, sizeof(v), "v%d.%d", i, round);
            if (tc_set(a->c, k, strlen(k), v, strlen(v), 0, 0) != TC_OK)
                a->failures++;
            char b[64];
            struct tc_item_info info;
            int rc = tc_get_copy(a->c, k, strlen(k), b, sizeof(b), &info);
            if (rc != TC_OK || info.vlen != strlen(v) ||
                memcmp(b, v, strlen(v)) != 0) {
                a->failures++;
                snprintf(a->msg, sizeof(a->msg), "get %s: %d", k, rc);
            }
        }
        if (a->unreg)
            tc_thread_unregister(a->c); /* then round 2 re-registers */
    }
    return NULL;
}

static void
test_unregistered_thread(void **state)
{
    struct fx *f = *state;
    open_cache(f, 0, 16 * MIB);
    struct thr_arg a = {.c = f->c[0], .prefix = "auto", .n = 500};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thr_ops, &a), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (a.failures != 0)
        fail_msg("auto-registered thread: %d failures (%s)", a.failures, a.msg);
    /* its items are visible from here, and its exit gave back its quota */
    check_str(f->c[0], "auto0", "v0.0");
    check_str(f->c[0], "auto499", "v499.0");
    assert_int_equal(tc_check(f->c[0]), 0);
}

static void
test_register_unregister(void **state)
{
    struct fx *f = *state;
    open_cache(f, 0, 16 * MIB);

    /* main thread: register, use, unregister, use again */
    assert_int_equal(tc_thread_register(f->c[0]), 0);
    put(f->c[0], "m", "1");
    tc_thread_unregister(f->c[0]);
    check_str(f->c[0], "m", "1");
    put(f->c[0], "m", "2");
    check_str(f->c[0], "m", "2");
    tc_thread_unregister(f->c[0]);
    assert_int_equal(tc_thread_register(f->c[0]), 0);
    check_str(f->c[0], "m", "2");

    /* other threads, both ways, several in a row (thread exit releases) */
    for (int i = 0; i < 32; i++) {
        char prefix[16];
        snprintf(prefix, sizeof(prefix), "t%d_", i);
        struct thr_arg a = {.c = f->c[0],
                            .prefix = prefix,
                            .n = 40,
                            .reg = i % 2 == 0,
                            .unreg = i % 3 == 0};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, thr_ops, &a), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        if (a.failures != 0)
            fail_msg("thread %d: %d failures (%s)", i, a.failures, a.msg);
        char k[32];
        snprintf(k, sizeof(k), "t%d_39", i);
        check_str(f->c[0], k, a.unreg ? "v39.1" : "v39.0");
    }
    assert_int_equal(tc_check(f->c[0]), 0);
}

/* A registered thread that is still alive (but no longer calling) when the
 * cache is closed, and exits afterwards: its exit must not touch the freed
 * cache. Run under ASan to see a use after free. */
struct late_exit {
    struct tc_cache *c;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase; /* 1: thread did its calls; 2: cache closed */
    int failures;
};

static void *
late_exit_main(void *p)
{
    struct late_exit *le = p;
    if (tc_set(le->c, "late", 4, "x", 1, 0, 0) != TC_OK)
        le->failures++;
    pthread_mutex_lock(&le->mu);
    le->phase = 1;
    pthread_cond_broadcast(&le->cv);
    while (le->phase != 2)
        pthread_cond_wait(&le->cv, &le->mu);
    pthread_mutex_unlock(&le->mu);
    return NULL; /* thread-exit hooks run now, after tc_close */
}

static void
test_thread_exit_after_close(void **state)
{
    struct fx *f = *state;
    open_cache(f, 0, 8 * MIB);
    struct late_exit le = {.c = f->c[0]};
    pthread_mutex_init(&le.mu, NULL);
    pthread_cond_init(&le.cv, NULL);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, late_exit_main, &le), 0);
    pthread_mutex_lock(&le.mu);
    while (le.phase != 1)
        pthread_cond_wait(&le.cv, &le.mu);
    pthread_mutex_unlock(&le.mu);

    tc_close(f->c[0]);
    f->c[0] = NULL;

    pthread_mutex_lock(&le.mu);
    le.phase = 2;
    pthread_cond_broadcast(&le.cv);
    pthread_mutex_unlock(&le.mu);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(le.failures, 0);
    pthread_mutex_destroy(&le.mu);
    pthread_cond_destroy(&le.cv);

    /* a new cache afterwards is fine, from this thread and a new one */
    open_cache(f, 0, 8 * MIB);
    put(f->c[0], "after", "y");
    check_str(f->c[0], "after", "y");
}

struct errmsg_arg {
    char seen[256];
};

static void *
errmsg_main(void *p)
{
    struct errmsg_arg *a = p;
    snprintf(a->seen, sizeof(a->seen), "%s", tc_errmsg());
    return NULL;
}

static void
test_errmsg_per_thread(void **state)
{
    struct fx *f = *state;
    struct tc_config cfg;
    tc_config_init(&cfg);
    cfg.pool_path = "/dev/shm/tc_no_such_dir_api/x.pool";
    cfg.pool_size = 8 * MIB;
    struct tc_cache *c = NULL;
    assert_true(tc_open(&cfg, &c) < 0);
    const char *msg = tc_errmsg();
    assert_non_null(msg);
    assert_true(strlen(msg) > 0);
    print_message("tc_errmsg: %s\n", msg);

    struct errmsg_arg a;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, errmsg_main, &a), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_string_equal(a.seen, ""); /* another thread's message is its own */
    assert_true(strlen(tc_errmsg()) > 0);
    (void)f;
}

struct pieces {
    unsigned char *buf;
    size_t cap, len;
    int niov, calls;
    uint32_t vlen;
    bool empty_piece;
};

static void
pieces_fn(void *arg, const struct tc_item_info *info, const struct iovec *iov,
          int niov)
{
    struct pieces *p = arg;
    p->calls++;
    p->niov = niov;
    p->vlen = info->vlen;
    for (int i = 0; i < niov; i++) {
        if (iov[i].iov_len == 0)
            p->empty_piece = true;
        if (p->len + iov[i].iov_len <= p->cap)
            memcpy(p->buf + p->len, iov[i].iov_base, iov[i].iov_len);
        p->len += iov[i].iov_len;
    }
}

static void
check_pieces(struct tc_cache *c, const char *k, const unsigned char *v,
             size_t len, int min_niov)
{
    struct pieces p = {.buf = malloc(len), .cap = len};
    assert_non_null(p.buf);
    assert_int_equal(tc_get(c, k, strlen(k), pieces_fn, &p), TC_OK);
    assert_int_equal(p.calls, 1);
    assert_int_equal(p.vlen, len);
    assert_int_equal(p.len, len);
    if (p.niov < min_niov)
        fail_msg("%s (%zu bytes): %d pieces, expected at least %d", k, len,
                 p.niov, min_niov);
    assert_memory_equal(p.buf, v, len);
    print_message("%zu bytes in %d pieces%s\n", len, p.niov,
                  p.empty_piece ? " (some empty)" : "");

    /* gat hands the same pieces */
    free(p.buf);
    memset(&p, 0, sizeof(p));
    p.buf = malloc(len);
    p.cap = len;
    assert_int_equal(tc_gat(c, k, strlen(k), 0, pieces_fn, &p), TC_OK);
    assert_int_equal(p.len, len);
    assert_memory_equal(p.buf, v, len);
    free(p.buf);
}

static void
test_chained_iov(void **state)
{
    struct fx *f = *state;
    open_cache(f, 0, 16 * MIB);
    struct tc_config def;
    tc_config_init(&def);
    /* over chunk_max, under item_size_max (1 MiB) */
    size_t len = (size_t)def.chunk_max + def.chunk_max / 2 + 123;
    unsigned char *v = malloc(len);
    assert_non_null(v);
    for (size_t i = 0; i < len; i++)
        v[i] = (unsigned char)(i * 131 + (i >> 9));
    assert_int_equal(tc_set(f->c[0], "chain", 5, v, len, 1, 0), TC_OK);
    check_pieces(f->c[0], "chain", v, len, 2);
    free(v);

    /* a small chunk_max: many pieces */
    struct tc_config cfg;
    tc_config_init(&cfg);
    cfg.pool_path = f->path[1];
    cfg.pool_size = 16 * MIB;
    cfg.background = false;
    cfg.chunk_max = 16 * 1024;
    cfg.item_size_max = 256 * 1024;
    int rc = tc_open(&cfg, &f->c[1]);
    if (rc != 0)
        fail_msg("tc_open with chunk_max 16 KiB: %d (%s)", rc, tc_errmsg());
    len = 200 * 1024;
    v = malloc(len);
    for (size_t i = 0; i < len; i++)
        v[i] = (unsigned char)(i * 7 + (i >> 11));
    assert_int_equal(tc_set(f->c[1], "many", 4, v, len, 0, 0), TC_OK);
    check_pieces(f->c[1], "many", v, len, (int)(len / cfg.chunk_max));
    /* append to a chained item */
    assert_int_equal(
        tc_store(f->c[1], TC_APPEND, "many", 4, "tail", 4, 0, 0, 0, NULL),
        TC_OK);
    unsigned char *v2 = malloc(len + 4);
    memcpy(v2, v, len);
    memcpy(v2 + len, "tail", 4);
    check_pieces(f->c[1], "many", v2, len + 4, 2);
    assert_int_equal(tc_check(f->c[1]), 0);
    free(v2);
    free(v);
}

/* tc_walk: every live item once, across slices of any budget; deleted and
 * expired items are not listed; the fields are the item's. */
#define WALK_N 3000

struct walk_seen {
    unsigned char count[WALK_N];
    unsigned total;
};

static int
walk_count(void *arg, const struct tc_walk_item *it)
{
    struct walk_seen *w = arg;
    char key[32];
    unsigned i;
    w->total++;
    assert_true(it->klen < sizeof(key));
    memcpy(key, it->key, it->klen);
    key[it->klen] = '\0';
    if (sscanf(key, "walk:%u", &i) != 1 || i >= WALK_N)
        fail_msg("walk: unexpected key %s", key);
    w->count[i]++;
    assert_int_equal(it->vlen, 5);
    assert_int_equal(it->flags, i);
    assert_int_equal(it->exptime, i % 3 == 1 ? T0 + 100 : 0);
    assert_true(it->size >= it->klen + it->vlen);
    assert_false(it->fetched);
    return 0;
}

static void
test_walk(void **state)
{
    struct fx *f = *state;
    char key[32];
    open_cache(f, 0, 64 * MIB);
    for (unsigned i = 0; i < WALK_N; i++) {
        int n = snprintf(key, sizeof(key), "walk:%u", i);
        /* i % 3: 0 kept, 1 kept with a TTL, 2 deleted or expired */
        int64_t exp = i % 3 == 1 ? 100 : (i % 6 == 2 ? 50 : 0);
        assert_int_equal(tc_set(f->c[0], key, (size_t)n, "value", 5, i, exp),
                         TC_OK);
        if (i % 6 == 5)
            assert_int_equal(tc_delete(f->c[0], key, (size_t)n, 0), TC_OK);
    }
    tc_clock_advance(60); /* the i % 6 == 2 ones expire */
    for (unsigned budget = 1; budget <= 4096; budget *= 64) {
        struct walk_seen *w = calloc(1, sizeof(*w));
        uint64_t cursor = 0;
        unsigned calls = 0;
        while (cursor != TC_WALK_DONE) {
            int rc = tc_walk(f->c[0], &cursor, budget, walk_count, w);
            assert_true(rc >= 0);
            assert_true(++calls <= 10 * WALK_N);
        }
        assert_int_equal(tc_walk(f->c[0], &cursor, budget, walk_count, w), 0);
        for (unsigned i = 0; i < WALK_N; i++)
            assert_int_equal(w->count[i], i % 3 == 2 ? 0 : 1);
        assert_int_equal(w->total, WALK_N / 3 * 2);
        if (budget == 1)
            assert_true(calls > 1);
        free(w);
    }
}

#define API_TEST(fn)                                                           \
    cmocka_unit_test_prestate_setup_teardown(fn, setup, teardown, #fn)

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_close_null),
        API_TEST(test_two_caches),
        API_TEST(test_unregistered_thread),
        API_TEST(test_register_unregister),
        API_TEST(test_thread_exit_after_close),
        API_TEST(test_errmsg_per_thread),
        API_TEST(test_chained_iov),
        API_TEST(test_walk),
    };
    /* TC_TEST_FILTER=<glob> runs only the matching tests */
    const char *filter = getenv("TC_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}

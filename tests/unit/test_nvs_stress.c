/*
 * Concurrent stress of the NVMe store (also run under TSan): two threads
 * append and overwrite records, two threads read through their own rings,
 * the main thread runs compaction steps. A small store wraps around, so
 * reclaim and compaction race with reads. Every value read is checked:
 * a read either returns the exact bytes of the record its locator named,
 * or -ESTALE; never another error, never wrong bytes. Runs with io_uring
 * and with the fallback.
 */
#include "tier/nvs.h"

#include "src/base/clock.h"
#include "src/base/err.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "tests/unit/nvs_fx.h"

#define NKEYS 64     /* per appender */
#define NAPPEND 1500 /* appends per appender */
#define NREAD 1500   /* reads per reader */
#define MAXV 6000

struct entry {
    struct nvs_loc loc;
    uint32_t ver;
    bool set;
};

struct world {
    struct nvs *s;
    pthread_mutex_t mu; /* guards tab */
    struct entry tab[2][NKEYS];
    atomic_int appenders_left;
    atomic_int bad;
    atomic_ulong reads_ok, reads_stale, appends_busy;
    unsigned seed;
};

static uint32_t
vlen_of(uint32_t id, uint32_t ver)
{
    return 1 + (id * 977u + ver * 131u) % MAXV;
}

static void
key_of(char *key, int t, uint32_t k)
{
    snprintf(key, 16, "t%dk%u", t, k);
}

struct arg {
    struct world *w;
    int t;
};

static void *
appender(void *p)
{
    struct arg *a = p;
    struct world *w = a->w;
    static __thread char v[MAXV];
    unsigned seed = w->seed + (unsigned)a->t;
    char key[16];

    for (uint32_t i = 0; i < NAPPEND; i++) {
        uint32_t k = (uint32_t)rand_r(&seed) % NKEYS;
        uint32_t id = (uint32_t)a->t * NKEYS + k;
        uint32_t ver = i + 1;
        uint32_t n = vlen_of(id, ver);
        struct nvs_loc loc;
        int e = -EAGAIN;

        key_of(key, a->t, k);
        fx_fill(v, n, id, ver);
        /* the flash is behind: wait until the writer frees a buffer
         * (100 us at a time), at most 60 s */
        uint64_t limit = clock_nsec() + 60ull * 1000000000;
        while ((e = fx_append(w->s, key, v, n, &loc)) == -EAGAIN &&
               clock_nsec() < limit) {
            struct timespec ts = {.tv_nsec = 100000};
            atomic_fetch_add_explicit(&w->appends_busy, 1,
                                      memory_order_relaxed);
            nanosleep(&ts, NULL);
        }
        if (e != 0) {
            print_error("append %u of t%d: %s\n", i, a->t, strerror(-e));
            atomic_fetch_add_explicit(&w->bad, 1, memory_order_relaxed);
            break;
        }
        pthread_mutex_lock(&w->mu);
        struct entry *en = &w->tab[a->t][k];
        if (en->set)
            nvs_release(w->s, &en->loc);
        en->loc = loc;
        en->ver = ver;
        en->set = true;
        pthread_mutex_unlock(&w->mu);
        if (i % 200 == 0)
            nvs_flush(w->s);
    }
    atomic_fetch_sub_explicit(&w->appenders_left, 1, memory_order_release);
    return NULL;
}

struct pending {
    struct nvs_read rd;
    char key[16];
    uint32_t id, ver;
};

static void *
reader(void *p)
{
    struct arg *a = p;
    struct world *w = a->w;
    struct nvs_ring *r;
    unsigned seed = w->seed * 7u + (unsigned)a->t;
    struct pending pd[8];
    struct nvs_read *done[8];
    bool busy[8] = {0};
    int issued = 0, finished = 0, inflight = 0;
    long passes = 0;

    if (nvs_ring_create(w->s, 8, &r) < 0) {
        atomic_fetch_add_explicit(&w->bad, 1, memory_order_relaxed);
        return NULL;
    }
    /* Until the appenders are done and NREAD reads completed (bounded). */
    while (
        (finished < NREAD ||
         atomic_load_explicit(&w->appenders_left, memory_order_acquire) > 0 ||
         inflight > 0) &&
        passes++ < 2000000) {
        bool more =
            finished < NREAD ||
            atomic_load_explicit(&w->appenders_left, memory_order_acquire) > 0;
        for (int i = 0; i < 8 && more; i++) {
            if (busy[i])
                continue;
            int t = rand_r(&seed) % 2;
            uint32_t k = (uint32_t)rand_r(&seed) % NKEYS;
            pthread_mutex_lock(&w->mu);
            struct entry en = w->tab[t][k];
            pthread_mutex_unlock(&w->mu);
            if (!en.set)
                continue;
            struct pending *q = &pd[i];
            key_of(q->key, t, k);
            q->id = (uint32_t)t * NKEYS + k;
            q->ver = en.ver;
            q->rd = (struct nvs_read){.loc = en.loc,
                                      .key = q->key,
                                      .klen = (uint8_t)strlen(q->key),
                                      .udata = q};
            if (nvs_read_prep(r, &q->rd) == 0) {
                busy[i] = true;
                issued++;
                inflight++;
            }
        }
        int e = nvs_ring_submit(r);
        if (e < 0) {
            print_error("submit: %s\n", strerror(-e));
            atomic_fetch_add_explicit(&w->bad, 1, memory_order_relaxed);
        }
        int n = nvs_ring_reap(r, done, 8, 1);
        for (int j = 0; j < n; j++) {
            struct pending *q = done[j]->udata;
            if (q->rd.res == 0) {
                if (q->rd.loc.vlen != vlen_of(q->id, q->ver) ||
                    !fx_check(q->rd.value, q->rd.loc.vlen, q->id, q->ver)) {
                    print_error("wrong value for %s v%u\n", q->key, q->ver);
                    atomic_fetch_add_explicit(&w->bad, 1, memory_order_relaxed);
                }
                atomic_fetch_add_explicit(&w->reads_ok, 1,
                                          memory_order_relaxed);
            } else if (q->rd.res == -ESTALE) {
                atomic_fetch_add_explicit(&w->reads_stale, 1,
                                          memory_order_relaxed);
            } else {
                print_error("read of %s v%u: %s\n", q->key, q->ver,
                            strerror(-q->rd.res));
                atomic_fetch_add_explicit(&w->bad, 1, memory_order_relaxed);
            }
            nvs_read_done(r, &q->rd);
            busy[q - pd] = false;
            finished++;
            inflight--;
        }
        if (n == 0)
            sched_yield();
    }
    if (inflight != 0 || finished < NREAD) {
        print_error("reader %d: %d reads left in flight, %d done\n", a->t,
                    inflight, finished);
        atomic_fetch_add_explicit(&w->bad, 1, memory_order_relaxed);
    }
    nvs_ring_destroy(r);
    return NULL;
}

static bool
skeep(void *arg, const void *key, uint8_t klen, const struct nvs_loc *old)
{
    struct world *w = arg;
    int t;
    unsigned k;
    char buf[16];
    bool keep = false;

    memcpy(buf, key, klen);
    buf[klen] = '\0';
    if (sscanf(buf, "t%dk%u", &t, &k) != 2 || t < 0 || t > 1 || k >= NKEYS)
        return false;
    pthread_mutex_lock(&w->mu);
    keep =
        w->tab[t][k].set && memcmp(&w->tab[t][k].loc, old, sizeof(*old)) == 0;
    pthread_mutex_unlock(&w->mu);
    return keep;
}

static void
smoved(void *arg, const void *key, uint8_t klen, const struct nvs_loc *old,
       const struct nvs_loc *new_loc)
{
    struct world *w = arg;
    int t;
    unsigned k;
    char buf[16];

    memcpy(buf, key, klen);
    buf[klen] = '\0';
    if (sscanf(buf, "t%dk%u", &t, &k) != 2)
        return;
    pthread_mutex_lock(&w->mu);
    /* an appender may have overwritten it meanwhile: then drop the copy */
    if (memcmp(&w->tab[t][k].loc, old, sizeof(*old)) == 0)
        w->tab[t][k].loc = *new_loc;
    else
        nvs_release(w->s, new_loc);
    pthread_mutex_unlock(&w->mu);
}

static void
run_stress(bool no_uring)
{
    static struct world w;
    struct nvs_config c;
    pthread_t th[4];
    struct arg args[4];

    memset(&w, 0, sizeof(w));
    w.seed = (unsigned)time(NULL);
    print_message("seed %u\n", w.seed);
    fx_config(&c, 16, no_uring);
    assert_int_equal(nvs_open(&c, &w.s), 0);
    pthread_mutex_init(&w.mu, NULL);
    atomic_store_explicit(&w.appenders_left, 2, memory_order_relaxed);
    for (int i = 0; i < 4; i++) {
        args[i] = (struct arg){.w = &w, .t = i % 2};
        assert_int_equal(
            pthread_create(&th[i], NULL, i < 2 ? appender : reader, &args[i]),
            0);
    }
    int steps = 0;
    while (atomic_load_explicit(&w.appenders_left, memory_order_acquire) > 0 &&
           steps < 100000) {
        int r = nvs_compact_step(w.s, 0.3, 64 * 1024, skeep, smoved, &w);
        if (steps % 16 == 0 && nvs_check(w.s) != 0) {
            print_error("nvs_check: %s\n", err_msg());
            atomic_fetch_add_explicit(&w.bad, 1, memory_order_relaxed);
        }
        if (r < 0 && r != -EAGAIN) {
            print_error("compaction step: %s\n", strerror(-r));
            atomic_fetch_add_explicit(&w.bad, 1, memory_order_relaxed);
        }
        steps++;
        struct timespec ts = {.tv_nsec = 1000000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    struct nvs_stats st;
    nvs_get_stats(w.s, &st);
    print_message("reads ok %lu stale %lu, append busy %lu, reclaims %lu, "
                  "compactions %lu (rescued %lu)\n",
                  atomic_load_explicit(&w.reads_ok, memory_order_relaxed),
                  atomic_load_explicit(&w.reads_stale, memory_order_relaxed),
                  atomic_load_explicit(&w.appends_busy, memory_order_relaxed),
                  (unsigned long)st.page_reclaims,
                  (unsigned long)st.compact_runs,
                  (unsigned long)st.compact_rescues);
    assert_int_equal(atomic_load_explicit(&w.bad, memory_order_relaxed), 0);
    assert_true(atomic_load_explicit(&w.reads_ok, memory_order_relaxed) > 0);
    assert_int_equal(st.read_badcrc + st.read_ioerr + st.read_timeout, 0);
    assert_true(st.page_reclaims + st.compact_runs > 0);
    nvs_close(w.s);
    pthread_mutex_destroy(&w.mu);
    unlink(fx_path);
}

static void
test_stress_uring(void **state)
{
    (void)state;
    run_stress(false);
}

static void
test_stress_fallback(void **state)
{
    (void)state;
    run_stress(true);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_uring),
        cmocka_unit_test(test_stress_fallback),
    };
    return cmocka_run_group_tests_name("nvs stress", tests, NULL, NULL);
}

/*
 * The engine's NVMe tier, the read path (src/engine/ext_read.c) through the
 * public API: values spilled at eviction read back (one by one and
 * through tc_get_many), recache to PMEM (by rate and by the re-read
 * filter), injected I/O errors and delays, blocking reads bounded without
 * a deadline, rings of threads gone at tc_close, and bytes flipped in the
 * flash file. The fixture is ext_fx.h; spilling, writes and compaction are
 * in test_ext.c.
 *
 * Where O_DIRECT is refused in the flash directory the tests skip with the
 * reason.
 */
#include "ext_fx.h"

#include "src/engine/ext.h"

#include <pthread.h>

/* A dataset four times the pool: every key reads back right or misses,
 * most come from flash, and the books balance. */
static void
test_spill_read_back(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    const unsigned n = 16384; /* 64 MiB of 4 KiB values, pool 16 MiB */

    fill(c, 0, n);
    check_ok(c);
    nvs_flush(store_of(c)); /* every flash read below goes to the file */
    struct tc_stats s = stats(c);
    assert_true(s.ext_enabled);
    assert_true(s.ext_spilled > n / 2);
    assert_true(s.ext_items > 0);
    assert_int_equal(s.ext_item_bytes, s.ext_items * VAL);
    unsigned hits = 0, flash = 0;
    for (unsigned i = 0; i < n; i++) {
        bool fl = false;
        if (read_check(c, i, 0, &fl)) {
            hits++;
            flash += fl;
        }
    }
    print_message("spill: %u of %u hits, %u from flash, %" PRIu64
                  " spilled, %" PRIu64 " evicted\n",
                  hits, n, flash, s.ext_spilled, s.evictions);
    /* 64 MiB fit the 128 MiB store and the fill drove the writer: only
     * header-class shortfalls evict */
    assert_int_equal(s.ext_spill_busy, 0);
    assert_true(hits > n * 9 / 10);
    assert_true(flash > n / 2);
    s = stats(c);
    assert_int_equal(s.get_extstore, flash);
    assert_true(s.extstore_objects_read >= flash);
    assert_true(s.extstore_bytes_written >= (uint64_t)flash * VAL);
    /* layout 2: a 4 KiB value is one 4 KiB block read */
    assert_int_equal(s.extstore_bytes_read, s.extstore_objects_read * VAL);
    check_ok(c);
}

/* One hit of a batch as test_get_many_flash records it. */
struct mrec {
    size_t i;
    bool flash;
    uint32_t flags;
    size_t len;
    unsigned char v[VAL];
};

struct mrecs {
    struct mrec r[24];
    unsigned n;
};

static bool
mrec_many(void *arg, size_t i, const struct tc_item_info *info,
          const struct iovec *iov, int niov)
{
    struct mrecs *m = arg;
    assert_true(m->n < 24);
    struct mrec *r = &m->r[m->n++];
    r->i = i;
    r->flash = info->flash;
    r->flags = info->flags;
    r->len = 0;
    for (int j = 0; j < niov; j++) {
        if (r->len + iov[j].iov_len <= VAL)
            memcpy(r->v + r->len, iov[j].iov_base, iov[j].iov_len);
        r->len += iov[j].iov_len;
    }
    return true;
}

/* tc_get_many over keys on flash, in PMEM and absent gives what one
 * tc_get_ex per key gives: the same values in the same order, the same
 * returns and the same hit, miss and flash-read counters. */
static void
test_get_many_flash(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    const unsigned n = 16384; /* 64 MiB of 4 KiB values, pool 16 MiB */
    uint32_t seed = test_seed();
    uint64_t rng = seed | 1;
    unsigned flash_hits = 0;

    print_message("seed %u\n", seed);
    fill(c, 0, n);
    nvs_flush(store_of(c));
    for (unsigned b = 0; b < 60; b++) {
        char names[24][32];
        struct tc_key keys[24];
        int rcs[24];
        struct mrecs *ma = calloc(2, sizeof(*ma)), *mb = ma + 1;
        unsigned m = 1 + (unsigned)(rng_next(&rng) % 24);
        struct tc_get_opts o = {.no_win = true, .no_bump = true};

        assert_non_null(ma);
        for (unsigned j = 0; j < m; j++) {
            key_of((unsigned)(rng_next(&rng) % (n + n / 20)), names[j]);
            keys[j] = (struct tc_key){names[j], strlen(names[j])};
        }
        struct tc_stats s0 = stats(c);
        assert_int_equal(tc_get_many(c, keys, m, &o, mrec_many, ma, rcs),
                         (int)m);
        struct tc_stats s1 = stats(c);
        for (unsigned j = 0; j < m; j++) {
            struct mrecs *one = mb;
            unsigned before = one->n;
            int rc = tc_get_ex(c, keys[j].key, keys[j].klen, &o, NULL, NULL);
            assert_int_equal(rc, rcs[j]);
            if (rc == TC_OK) {
                /* the same key again, recorded as index j */
                struct got g;
                unsigned char buf[VAL + 8];
                memset(&g, 0, sizeof(g));
                g.buf = buf;
                g.cap = sizeof(buf);
                assert_int_equal(
                    tc_get_ex(c, keys[j].key, keys[j].klen, &o, got_fn, &g),
                    TC_OK);
                struct mrec *r = &one->r[one->n++];
                r->i = j;
                r->flash = g.info.flash;
                r->flags = g.info.flags;
                r->len = g.len;
                memcpy(r->v, buf, g.len < VAL ? g.len : VAL);
            }
            assert_int_equal(one->n - before, rc == TC_OK ? 1 : 0);
        }
        struct tc_stats s2 = stats(c);
        /* the singles read every hit twice */
        assert_int_equal(s1.get_hits - s0.get_hits,
                         (s2.get_hits - s1.get_hits) / 2);
        assert_int_equal(s1.get_misses - s0.get_misses,
                         s2.get_misses - s1.get_misses);
        assert_int_equal(s1.cmd_get - s0.cmd_get, m);
        assert_int_equal(ma->n, mb->n);
        for (unsigned j = 0; j < ma->n; j++) {
            struct mrec *p = &ma->r[j], *q = &mb->r[j];
            assert_int_equal(p->i, q->i);
            assert_int_equal(p->flash, q->flash);
            assert_int_equal(p->flags, q->flags);
            assert_int_equal(p->len, q->len);
            assert_memory_equal(p->v, q->v, p->len);
            flash_hits += p->flash;
        }
        free(ma);
    }
    print_message("get_many: %u flash hits\n", flash_hits);
    assert_true(flash_hits > 0);
    check_ok(c);
}

static void
test_recache(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;

    fill(c, 0, 8000);
    unsigned i = flash_key(c, 0); /* one flash read: recached (rate 1) */
    struct tc_stats s = stats(c);
    assert_int_equal(s.recache_from_extstore, 1);
    bool fl = true;
    assert_int_equal(read_check(c, i, 0, &fl), 1);
    assert_false(fl); /* back in PMEM */
    assert_int_equal(stats(c).get_extstore, s.get_extstore);
    check_ok(c);
}

/* The re-read filter (ext_recache_window, memcached's rate off): a flash
 * key read three times in a row comes back to PMEM on the third read; keys
 * read three times, but each time after thousands of other flash reads
 * (three passes over all keys, far more flash keys than the filter's 1,024
 * slots), stay on flash: their slots were taken by other keys meanwhile. */
static void
test_recache_reread(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;

    assert_int_equal(stats(c).ext_recache_window, 1024); /* slots in use */
    fill(c, 0, 8000);
    unsigned i = flash_key(c, 0); /* read 1 */
    bool fl = false;
    assert_int_equal(read_check(c, i, 0, &fl), 1); /* read 2 */
    assert_true(fl);
    assert_int_equal(stats(c).recache_from_extstore, 0);
    assert_int_equal(read_check(c, i, 0, &fl), 1); /* read 3: recached */
    assert_true(fl);
    assert_int_equal(stats(c).recache_from_extstore, 1);
    uint64_t flash_reads = stats(c).get_extstore;
    assert_int_equal(read_check(c, i, 0, &fl), 1);
    assert_false(fl); /* back in PMEM, the value unchanged */
    assert_int_equal(stats(c).get_extstore, flash_reads);

    uint64_t before = stats(c).recache_from_extstore;
    uint64_t reads0 = stats(c).get_extstore;
    for (unsigned pass = 0; pass < 3; pass++)
        for (unsigned k = 0; k < 8000; k++)
            read_check(c, k, 0, NULL);
    uint64_t flash = stats(c).get_extstore - reads0;
    uint64_t recached = stats(c).recache_from_extstore - before;
    print_message("reread: %" PRIu64 " flash reads in 3 passes, %" PRIu64
                  " recached\n",
                  flash, recached);
    assert_true(flash > 3 * 4000);
    assert_true(recached * 100 < flash);
    check_ok(c);
}

/* Injected I/O errors and delays past the deadline: misses, never a wrong
 * value, counters move. */
static void
test_faults_injected(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    const unsigned n = 8000;

    fill(c, 0, n);
    assert_int_equal(nvs_flush(store_of(c)), 0);
    /* keys on flash for the deadline part (a slow build may have evicted
     * some keys: the flash was behind) */
    unsigned slow[3];
    slow[0] = flash_key(c, 2000);
    slow[1] = flash_key(c, slow[0] + 1);
    slow[2] = flash_key(c, slow[1] + 1);
    struct nvs_faults fa = {.eio_every = 3};
    nvs_set_faults(store_of(c), &fa);
    unsigned hits = 0;
    for (unsigned i = 0; i < 2000; i++)
        hits += (unsigned)read_check(c, i, 0, NULL);
    struct tc_stats s = stats(c);
    print_message("eio: %u hits, %" PRIu64 " aborted\n", hits,
                  s.get_aborted_extstore);
    assert_true(s.get_aborted_extstore > 0);
    assert_true(hits > 0);

    /* a delay far past the 1 s deadline: the read ends as a timeout even
     * when this thread is scheduled late */
    fa = (struct nvs_faults){.delay_ms = 5000};
    nvs_set_faults(store_of(c), &fa);
    uint64_t before = s.ext_read_timeouts;
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(read_check(c, slow[i], 0, NULL), 0);
    s = stats(c);
    assert_true(s.ext_read_timeouts > before);
    fa = (struct nvs_faults){0};
    nvs_set_faults(store_of(c), &fa);
    check_ok(c);
}

static uint64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ext_read_timeout_ms=0 is no deadline for the server's asynchronous
 * reads, but a blocking read (tc_get_ex, a read-modify-write) still ends:
 * by ext_block_timeout_ms (shortened here), as a miss plus a timeout. */
static void
test_blocking_read_bounded(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    char k[32];

    fill(c, 0, 8000);
    assert_int_equal(nvs_flush(store_of(c)), 0);
    unsigned i = flash_key(c, 2000);
    unsigned j = flash_key(c, i + 1);
    unsigned later = flash_key(c, j + 1);
    uint64_t before = stats(c).ext_read_timeouts;

    ext_block_timeout_ms = 200;
    /* the delayed reads would be hits after 5 s; a miss and a timeout
     * each show that the wait ended at the bound (how soon after it is
     * the scheduler's business: printed, not asserted) */
    struct nvs_faults fa = {.delay_ms = 5000};
    nvs_set_faults(store_of(c), &fa);
    uint64_t t0 = mono_ms();
    int hit = read_check(c, i, 0, NULL);
    uint64_t took = mono_ms() - t0;
    key_of(j, k);
    t0 = mono_ms();
    int rc = store_s(c, TC_APPEND, k, ">", 0, 0, 0, NULL);
    uint64_t took_rmw = mono_ms() - t0;
    uint64_t tmo = stats(c).ext_read_timeouts - before;
    print_message("keys %u %u: blocking read %" PRIu64 " ms (hit %d), "
                  "append %" PRIu64 " ms (rc %d), %" PRIu64 " timeouts\n",
                  i, j, took, hit, took_rmw, rc, tmo);
    assert_int_equal(hit, 0);
    assert_int_not_equal(rc, TC_OK);
    assert_int_equal(tmo, 2);
    check_miss(c, k);

    ext_block_timeout_ms = EXT_BLOCK_TIMEOUT_MS;
    fa = (struct nvs_faults){0};
    nvs_set_faults(store_of(c), &fa);
    assert_int_equal(read_check(c, later, 0, NULL), 1);
    check_ok(c);
}

/* A thread that read from flash (a blocking ring, and an asynchronous one
 * with a read still in flight) and then stopped calling. */
struct orphan {
    struct tc_cache *c;
    unsigned key;
    bool park; /* stay alive (not calling) until released */
    int got, pending;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage; /* 1: done reading; 2: released */
};

static void *
orphan_main(void *p)
{
    struct orphan *o = p;
    char k[32];
    unsigned char buf[VAL + 8];
    struct got g = {.buf = buf, .cap = sizeof(buf)};
    struct tc_get_opts opts = {.no_bump = true};

    key_of(o->key, k);
    o->got = tc_get_ex(o->c, k, strlen(k), &opts, got_fn, &g);
    /* an asynchronous read left in flight (delayed), never reaped */
    memset(&g, 0, sizeof(g));
    opts.async = true;
    tc_async_owner(o->c, o);
    if (tc_get_ex(o->c, k, strlen(k), &opts, got_fn, &g) == TC_OK &&
        g.info.pending)
        o->pending = tc_async_submit(o->c);
    pthread_mutex_lock(&o->mu);
    o->stage = 1;
    pthread_cond_broadcast(&o->cv);
    while (o->park && o->stage != 2)
        pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    return NULL; /* no tc_thread_unregister */
}

/* tc_close while threads that made rings are gone: one exited without
 * tc_thread_unregister (its rings go at thread exit, on that thread),
 * one is still alive but stopped calling (tc_close destroys its rings, a
 * read still in flight on one of them). Run under ASan and TSan. */
static void
test_close_orphan_rings(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    struct orphan o[2];
    pthread_t th[2];

    fill(c, 0, 8000);
    assert_int_equal(nvs_flush(store_of(c)), 0);
    unsigned i = flash_key(c, 2000);
    unsigned j = flash_key(c, i + 1);
    struct nvs_faults fa = {.delay_ms = 300};
    nvs_set_faults(store_of(c), &fa);
    for (int n = 0; n < 2; n++) {
        o[n] = (struct orphan){.c = c, .key = n ? j : i, .park = n == 1};
        pthread_mutex_init(&o[n].mu, NULL);
        pthread_cond_init(&o[n].cv, NULL);
        assert_int_equal(pthread_create(&th[n], NULL, orphan_main, &o[n]), 0);
    }
    assert_int_equal(pthread_join(th[0], NULL), 0);
    pthread_mutex_lock(&o[1].mu);
    while (o[1].stage != 1)
        pthread_cond_wait(&o[1].cv, &o[1].mu);
    pthread_mutex_unlock(&o[1].mu);
    for (int n = 0; n < 2; n++) {
        assert_int_equal(o[n].got, TC_OK);
        assert_int_equal(o[n].pending, 1);
    }
    tc_close(c);
    x->f.c = NULL;
    pthread_mutex_lock(&o[1].mu);
    o[1].stage = 2;
    pthread_cond_broadcast(&o[1].cv);
    pthread_mutex_unlock(&o[1].mu);
    assert_int_equal(pthread_join(th[1], NULL), 0);
    for (int n = 0; n < 2; n++) {
        pthread_mutex_destroy(&o[n].mu);
        pthread_cond_destroy(&o[n].cv);
    }
}

/* Bytes flipped in the flash file: -EBADMSG, a miss and a counter. */
static void
test_faults_flipped(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    const unsigned n = 8000;

    fill(c, 0, n);
    assert_int_equal(nvs_flush(store_of(c)), 0);
    int fd = open(x->ext, O_WRONLY);
    assert_true(fd >= 0);
    uint64_t seed = test_seed();
    print_message("seed %" PRIu64 "\n", seed);
    for (int j = 0; j < 2000; j++) {
        unsigned char b = (unsigned char)rng_next(&seed);
        off_t at = (off_t)(rng_next(&seed) % (16ull * MIB));
        assert_int_equal(pwrite(fd, &b, 1, at), 1);
    }
    fsync(fd);
    close(fd);
    unsigned hits = 0;
    for (unsigned i = 0; i < n; i++)
        hits += (unsigned)read_check(c, i, 0, NULL);
    struct tc_stats s = stats(c);
    print_message("flipped: %u hits, %" PRIu64 " bad crc\n", hits,
                  s.badcrc_from_extstore);
    assert_true(s.badcrc_from_extstore > 0);
    check_ok(c);
}

int
main(void)
{
    if (!ext_fx_start("test_ext_read"))
        return 0;
    const struct CMUnitTest tests[] = {
        XT(test_spill_read_back),
        XT(test_get_many_flash),
        XTS(test_recache, xsetup_recache),
        XTS(test_recache_reread, xsetup_reread),
        XTS(test_faults_injected, xsetup_deadline),
        XTS(test_blocking_read_bounded, xsetup_no_deadline),
        XT(test_close_orphan_rings),
        XT(test_faults_flipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tc_get_many (src/tiercache.h) against one tc_get_ex per key. Two caches
 * are given the same operations (the clock frozen, no background thread, so
 * they stay alike): one answers random batches with tc_get_many, the other
 * the same keys one call at a time. The callbacks (order, value, flags, CAS,
 * what the item info says), each key's return and the stats counters must
 * agree, over batches mixing hits, misses, expired items, chained items,
 * keys in the DRAM hot pool and bad key lengths, with and without a touch.
 * Flash items are covered in test_ext_read.c (test_get_many_flash).
 */
#include "engine_fx.h"

#include <pthread.h>
#include <stdatomic.h>

#define NKEYS 1500
#define MAXB 40 /* batch sizes up to this: more than one group of 16 */
#define NBATCH 300

/* One callback as seen by either side. */
struct call {
    size_t i; /* key index in the batch */
    uint32_t flags;
    uint64_t cas;
    uint32_t vlen;
    uint32_t exptime;
    bool flash;
    uint64_t sum; /* of the value's bytes */
    size_t len;
};

struct calls {
    struct call c[MAXB];
    unsigned n;
    unsigned stop_after; /* return false at this call (1-based); 0 never */
};

static void
record(struct calls *cs, size_t i, const struct tc_item_info *info,
       const struct iovec *iov, int niov)
{
    assert_true(cs->n < MAXB);
    struct call *c = &cs->c[cs->n++];
    memset(c, 0, sizeof(*c));
    c->i = i;
    c->flags = info->flags;
    c->cas = info->cas;
    c->vlen = info->vlen;
    c->exptime = info->exptime;
    c->flash = info->flash;
    for (int j = 0; j < niov; j++) {
        const unsigned char *p = iov[j].iov_base;
        for (size_t b = 0; b < iov[j].iov_len; b++)
            c->sum = c->sum * 131 + p[b];
        c->len += iov[j].iov_len;
    }
}

static bool
many_fn(void *arg, size_t i, const struct tc_item_info *info,
        const struct iovec *iov, int niov)
{
    struct calls *cs = arg;
    record(cs, i, info, iov, niov);
    return cs->stop_after == 0 || cs->n < cs->stop_after;
}

struct one {
    struct calls *cs;
    size_t i;
};

static void
one_fn(void *arg, const struct tc_item_info *info, const struct iovec *iov,
       int niov)
{
    struct one *o = arg;
    record(o->cs, o->i, info, iov, niov);
}

static void
key_name(unsigned i, char *k)
{
    snprintf(k, 32, "gm:%05u", i);
}

static size_t
vlen_of(unsigned i)
{
    if (i % 250 == 3)
        return 600 * 1024; /* chained: more than the largest chunk */
    return 1 + (i * 37) % 700;
}

/* The same operations on both caches. */
static void
populate(struct tc_cache *c)
{
    static unsigned char v[600 * 1024];
    char k[32];
    for (unsigned i = 0; i < NKEYS; i++) {
        size_t n = vlen_of(i);
        key_name(i, k);
        fill_pattern(v, n, i);
        /* every 7th expires at T0 + 100; every 11th is deleted */
        put(c, k, v, n, i, i % 7 == 0 ? 100 : 0);
        if (i % 11 == 5)
            assert_int_equal(tc_delete(c, k, strlen(k), 0), TC_OK);
    }
    /* keys 1, 2 and 4 written often: the hot-key step moves them to DRAM.
     * The step before the writes starts a rate interval at the test
     * clock's now, so the writes count as done in one instant however
     * slowly the machine runs them (as test_hotkey.c's heat()). */
    tc_maintain(c);
    for (int r = 0; r < 200; r++)
        for (unsigned i = 1; i <= 4; i++) {
            if (i == 3)
                continue;
            key_name(i, k);
            fill_pattern(v, 64, i + 1000u * r);
            put(c, k, v, 64, i, 0);
        }
    tc_maintain(c); /* hot now; the next write puts them in DRAM */
    for (unsigned i = 1; i <= 4; i++) {
        if (i == 3)
            continue;
        key_name(i, k);
        fill_pattern(v, 64, i);
        put(c, k, v, 64, i, 0);
    }
}

struct gfx {
    struct fx a, b;
};

static int
gsetup_index(void **state, uint64_t expected_items)
{
    struct gfx *g = calloc(1, sizeof(*g));
    if (!g)
        return -1;
    struct fx *fs[2] = {&g->a, &g->b};
    for (int j = 0; j < 2; j++) {
        struct fx *f = fs[j];
        snprintf(f->path, sizeof(f->path),
                 "/dev/shm/tc_test_get_many_%d_%c.pool", (int)getpid(),
                 'a' + j);
        tc_config_init(&f->cfg);
        f->cfg.pool_path = f->path;
        f->cfg.pool_size = 32 * MIB;
        f->cfg.background = false;
        f->cfg.hot_pool_size = 1 * MIB;
        f->cfg.hot_write_rate = 10;
        f->cfg.hotkey_window = 1;
        f->cfg.hotkey_sample = 1;
        f->cfg.expected_items = expected_items;
    }
    tc_clock_set(T0);
    if (fx_open(&g->a) != 0)
        goto err;
    if (fx_open(&g->b) != 0) {
        tc_close(g->a.c);
        goto err;
    }
    *state = g;
    return 0;
err:
    unlink(g->a.path);
    unlink(g->b.path);
    free(g);
    return -1;
}

static int
gsetup(void **state)
{
    return gsetup_index(state, 0);
}

/* The smallest index: most keys live in overflow chains, so a batch's home
 * bucket holds none or another key's tag for most of them and the full
 * lookup does the work. */
static int
gsetup_small_index(void **state)
{
    return gsetup_index(state, 1);
}

/* The slab store only (packed_item_max 0): small values in slab chunks,
 * which a batch serves through its own path (the chunk word its bucket
 * pass found), not the packed one. */
static int
gsetup_slab(void **state)
{
    if (gsetup(state) != 0)
        return -1;
    struct gfx *g = *state;
    struct fx *fs[2] = {&g->a, &g->b};
    for (int j = 0; j < 2; j++) {
        tc_close(fs[j]->c);
        unlink(fs[j]->path);
        fs[j]->cfg.packed_item_max = 0;
        if (fx_open(fs[j]) != 0)
            return -1;
    }
    return 0;
}

static int
gteardown(void **state)
{
    struct gfx *g = *state;
    tc_close(g->a.c);
    tc_close(g->b.c);
    unlink(g->a.path);
    unlink(g->b.path);
    tc_clock_set(0);
    free(g);
    return 0;
}

static void
same_calls(const struct calls *x, const struct calls *y, unsigned batch)
{
    if (x->n != y->n)
        fail_msg("batch %u: %u callbacks against %u", batch, x->n, y->n);
    for (unsigned j = 0; j < x->n; j++) {
        const struct call *p = &x->c[j], *q = &y->c[j];
        /* CAS: compared within cache a (same_cas): a packed set's CAS
         * depends on the CAS-floor word its key shares, chosen by hash
         * bits under each cache's own seed */
        if (p->i != q->i || p->flags != q->flags || p->vlen != q->vlen ||
            p->exptime != q->exptime || p->flash != q->flash ||
            p->sum != q->sum || p->len != q->len)
            fail_msg("batch %u, call %u: key %zu/%zu differs", batch, j, p->i,
                     q->i);
    }
}

#define SAME_STAT(sa, sb, f)                                                   \
    do {                                                                       \
        if ((sa).f != (sb).f)                                                  \
            fail_msg("batch %u: " #f " %" PRIu64 " against %" PRIu64, b,       \
                     (uint64_t)(sa).f, (uint64_t)(sb).f);                      \
    } while (0)

/* Random batches: tc_get_many on cache a, tc_get_ex per key on cache b. */
static void
test_batches_match_single_gets(void **state)
{
    struct gfx *g = *state;
    uint32_t seed = test_seed();
    uint64_t rng = seed | 1;
    print_message("seed %u\n", seed);

    populate(g->a.c);
    populate(g->b.c);
    assert_int_equal(stats(g->a.c).hotkey_current, 3);
    assert_int_equal(stats(g->b.c).hotkey_current, 3);
    tc_clock_set(T0 + 200); /* the 7th keys have expired */

    for (unsigned b = 0; b < NBATCH; b++) {
        char names[MAXB][32];
        struct tc_key keys[MAXB];
        int rca[MAXB], rcb[MAXB];
        struct calls ca = {0}, cb = {0};
        unsigned n = 1 + (unsigned)(rng_next(&rng) % MAXB);
        bool touch = rng_next(&rng) % 5 == 0;
        struct tc_get_opts o = {
            .no_win = true, .touch = touch, .exptime = touch ? 3600 : 0};

        for (unsigned j = 0; j < n; j++) {
            /* a few keys past NKEYS: never stored */
            unsigned i = (unsigned)(rng_next(&rng) % (NKEYS + 100));
            key_name(i, names[j]);
            keys[j] = (struct tc_key){names[j], strlen(names[j])};
            if (rng_next(&rng) % 50 == 0)
                keys[j].klen = 0; /* a bad key: -EINVAL, nothing counted */
        }
        struct tc_stats sa0 = stats(g->a.c), sb0 = stats(g->b.c);
        int done = tc_get_many(g->a.c, keys, n, &o, many_fn, &ca, rca);
        assert_int_equal(done, (int)n);
        for (unsigned j = 0; j < n; j++) {
            struct one one = {&cb, j};
            rcb[j] =
                tc_get_ex(g->b.c, keys[j].key, keys[j].klen, &o, one_fn, &one);
            if (rca[j] != rcb[j])
                fail_msg("batch %u key %u (%s): rc %d against %d", b, j,
                         names[j], rca[j], rcb[j]);
        }
        same_calls(&ca, &cb, b);
        struct tc_stats sa = stats(g->a.c), sb = stats(g->b.c);
        sa.cmd_get -= sa0.cmd_get, sb.cmd_get -= sb0.cmd_get;
        sa.get_hits -= sa0.get_hits, sb.get_hits -= sb0.get_hits;
        sa.get_misses -= sa0.get_misses, sb.get_misses -= sb0.get_misses;
        sa.get_expired -= sa0.get_expired, sb.get_expired -= sb0.get_expired;
        sa.cmd_touch -= sa0.cmd_touch, sb.cmd_touch -= sb0.cmd_touch;
        sa.touch_hits -= sa0.touch_hits, sb.touch_hits -= sb0.touch_hits;
        sa.touch_misses -= sa0.touch_misses;
        sb.touch_misses -= sb0.touch_misses;
        SAME_STAT(sa, sb, cmd_get);
        SAME_STAT(sa, sb, get_hits);
        SAME_STAT(sa, sb, get_misses);
        SAME_STAT(sa, sb, get_expired);
        SAME_STAT(sa, sb, cmd_touch);
        SAME_STAT(sa, sb, touch_hits);
        SAME_STAT(sa, sb, touch_misses);
        SAME_STAT(sa, sb, curr_items);
        /* each hit's CAS as a single get on the same cache gives it */
        for (unsigned j = 0; j < ca.n; j++) {
            const struct call *p = &ca.c[j];
            struct tc_item_info in;
            char buf[1024];
            if (tc_get_copy(g->a.c, keys[p->i].key, keys[p->i].klen, buf,
                            sizeof(buf), &in) == TC_OK &&
                in.cas != p->cas)
                fail_msg("batch %u, call %u: CAS %" PRIu64 " against %" PRIu64,
                         b, j, p->cas, in.cas);
        }
    }
    assert_int_equal(tc_check(g->a.c), 0);
}

/* A callback that returns false stops the batch after its key: the keys
 * after it are neither looked up nor counted. */
static void
test_stop_early(void **state)
{
    struct gfx *g = *state;
    struct tc_cache *c = g->a.c;
    char names[30][32];
    struct tc_key keys[30];
    int rcs[30];

    for (unsigned i = 0; i < 30; i++) {
        key_name(i, names[i]);
        keys[i] = (struct tc_key){names[i], strlen(names[i])};
        if (i % 3 == 0) /* keys 0, 3, 6, ... are hits */
            puts_(c, names[i], "v");
    }
    struct calls cs = {.stop_after = 7}; /* the 7th hit: key 18 */
    uint64_t before = stats(c).cmd_get;
    assert_int_equal(tc_get_many(c, keys, 30, NULL, many_fn, &cs, rcs), 19);
    assert_int_equal(cs.n, 7);
    assert_int_equal(cs.c[6].i, 18);
    assert_int_equal(stats(c).cmd_get - before, 19);
    assert_int_equal(rcs[18], TC_OK);
    assert_int_equal(rcs[17], TC_NOT_FOUND);
}

/* A key changed after its group's bucket pass: the callback of the key
 * before it (served after that pass, in the same read section) deletes it
 * or sets it again. The batch answers the value the pass saw or the new
 * one, whole, or a miss after a delete; never another item's bytes or a
 * reused chunk's. In both stores, in one group (keys 0..15) and in the
 * next (the change made from the last key of the first group). */
struct change {
    struct tc_cache *c;
    unsigned at;  /* the key whose callback changes the next one */
    unsigned how; /* 0 delete, 1 set again (same size), 2 (larger) */
    char names[20][32];
    size_t vlen[20]; /* what each key holds before */
    unsigned seen;   /* callbacks */
    unsigned bad;    /* values that are neither the old nor the new */
    bool got_next;   /* the changed key was answered with a value */
};

static size_t
change_new_len(const struct change *ch, unsigned k)
{
    return ch->how == 2 ? ch->vlen[k] + 300 : ch->vlen[k];
}

static bool
change_fn(void *arg, size_t i, const struct tc_item_info *info,
          const struct iovec *iov, int niov)
{
    struct change *ch = arg;
    unsigned char want[1024];
    (void)info;
    ch->seen++;
    if (i == ch->at + 1)
        ch->got_next = true;
    /* the old value (seed i) or, for the changed key, the new (seed
     * 5000 + i, its new length) */
    bool ok = false;
    for (int pass = 0; pass < 2 && !ok; pass++) {
        if (pass == 1 && i != ch->at + 1)
            break;
        size_t n = pass ? change_new_len(ch, (unsigned)i) : ch->vlen[i];
        fill_pattern(want, n, pass ? 5000 + i : i);
        size_t at = 0;
        bool same = niov >= 1;
        for (int j = 0; j < niov && same; j++) {
            if (at + iov[j].iov_len > n ||
                memcmp(want + at, iov[j].iov_base, iov[j].iov_len) != 0)
                same = false;
            at += iov[j].iov_len;
        }
        ok = same && at == n;
    }
    if (!ok)
        ch->bad++;
    if (i == ch->at) { /* change the next key now */
        const char *k = ch->names[i + 1];
        if (ch->how == 0) {
            assert_int_equal(tc_delete(ch->c, k, strlen(k), 0), TC_OK);
        } else {
            size_t n = change_new_len(ch, (unsigned)i + 1);
            fill_pattern(want, n, 5000 + i + 1);
            put(ch->c, k, want, n, 0, 0);
        }
    }
    return true;
}

static void
test_changed_between_passes(void **state)
{
    struct gfx *g = *state;
    struct tc_cache *c = g->a.c;
    unsigned char v[1024];

    for (unsigned at = 0; at <= 15; at += 15)
        for (unsigned how = 0; how < 3; how++) {
            struct change ch = {.c = c, .at = at, .how = how};
            struct tc_key keys[20];
            int rcs[20];
            for (unsigned i = 0; i < 20; i++) {
                snprintf(ch.names[i], 32, "gc:%u:%u:%02u", at, how, i);
                keys[i] = (struct tc_key){ch.names[i], strlen(ch.names[i])};
                ch.vlen[i] = 20 + (i * 53) % 400;
                fill_pattern(v, ch.vlen[i], i);
                put(c, ch.names[i], v, ch.vlen[i], 0, 0);
            }
            assert_int_equal(
                tc_get_many(c, keys, 20, NULL, change_fn, &ch, rcs), 20);
            if (ch.bad)
                fail_msg("at %u, how %u: %u values neither old nor new", at,
                         how, ch.bad);
            for (unsigned i = 0; i < 20; i++)
                if (i != at + 1)
                    assert_int_equal(rcs[i], TC_OK);
            /* the changed key: a value (checked above) or, deleted, a miss */
            if (ch.got_next)
                assert_int_equal(rcs[at + 1], TC_OK);
            else
                assert_true(how == 0 && rcs[at + 1] == TC_NOT_FOUND);
            assert_int_equal(ch.seen, ch.got_next ? 20 : 19);
            /* and after the batch, the change is what a get sees */
            int rc =
                tc_get_many(c, &keys[at + 1], 1, NULL, change_fn, &ch, rcs);
            assert_int_equal(rc, 1);
            assert_int_equal(rcs[0], how == 0 ? TC_NOT_FOUND : TC_OK);
        }
    assert_int_equal(tc_check(c), 0);
}

/* Arguments refused as a whole; an empty batch; no callback. */
static void
test_arguments(void **state)
{
    struct gfx *g = *state;
    struct tc_cache *c = g->a.c;
    struct tc_key k = {"gm:x", 4};
    struct tc_get_opts viv = {.vivify = true};
    int rc = 7;

    puts_(c, "gm:x", "v");
    assert_int_equal(tc_get_many(c, &k, 1, &viv, many_fn, NULL, NULL), -EINVAL);
    assert_int_equal(tc_get_many(c, NULL, 0, NULL, many_fn, NULL, NULL), 0);
    assert_int_equal(tc_get_many(c, &k, 1, NULL, NULL, NULL, &rc), 1);
    assert_int_equal(rc, TC_OK);
}

/* tc_prefetch is a hint: it counts nothing and changes no answer, bad keys
 * included. */
static void
test_prefetch_hint(void **state)
{
    struct gfx *g = *state;
    struct tc_cache *c = g->a.c;
    struct tc_key keys[20];
    char names[20][32];

    for (unsigned i = 0; i < 20; i++) {
        key_name(i, names[i]);
        keys[i] = (struct tc_key){names[i], strlen(names[i])};
        if (i % 2 == 0)
            puts_(c, names[i], "v");
    }
    keys[5].klen = 0;
    keys[7].klen = TC_KEY_MAX + 1;
    struct tc_stats s0 = stats(c);
    tc_prefetch(c, keys, 20);
    tc_prefetch(c, keys, 0);
    struct tc_stats s1 = stats(c);
    assert_int_equal(s1.cmd_get, s0.cmd_get);
    assert_int_equal(s1.get_hits, s0.get_hits);
    assert_int_equal(s1.get_misses, s0.get_misses);
    for (unsigned i = 0; i < 20; i++) {
        int want = i % 2 == 0 ? TC_OK : TC_NOT_FOUND;
        assert_int_equal(tc_get(c, names[i], strlen(names[i]), NULL, NULL),
                         want);
    }
}

/* ---- concurrent: batched readers against writers, deletes and evictions */

#define CKEYS 4000
#define CITER 3000 /* batches a reader runs */
#define CWRITES                                                                \
    20000 /* stores and deletes a writer runs: several rounds of               \
             deferred frees and chunk reuse under the readers */

struct cshared {
    struct tc_cache *c;
    atomic_int bad;
    atomic_uint hits;
};

struct cworker {
    struct cshared *sh;
    uint64_t rng;
    bool writer;
};

/* A value names its key: "<key>/<version>" then the key's byte repeated. */
static size_t
cvalue(unsigned k, unsigned version, char *v)
{
    size_t n = (size_t)snprintf(v, 64, "gm:%05u/%u/", k, version);
    size_t len = n + (k * 7 + version) % 300;
    memset(v + n, 'a' + (int)(k % 26), len - n);
    return len;
}

static bool
cvalue_ok(const char *key, size_t klen, const struct iovec *iov, int niov)
{
    char v[512];
    size_t len = 0;
    for (int j = 0; j < niov; j++) {
        if (len + iov[j].iov_len > sizeof(v))
            return false;
        memcpy(v + len, iov[j].iov_base, iov[j].iov_len);
        len += iov[j].iov_len;
    }
    unsigned k, version;
    if (len < klen + 1 || memcmp(v, key, klen) != 0 || v[klen] != '/' ||
        sscanf(key, "gm:%05u", &k) != 1 ||
        sscanf(v + klen + 1, "%u", &version) != 1)
        return false;
    char want[512];
    return cvalue(k, version, want) == len && memcmp(want, v, len) == 0;
}

struct cbatch {
    struct cshared *sh;
    const struct tc_key *keys;
};

static bool
ccheck(void *arg, size_t i, const struct tc_item_info *info,
       const struct iovec *iov, int niov)
{
    struct cbatch *b = arg;
    (void)info;
    if (!cvalue_ok(b->keys[i].key, b->keys[i].klen, iov, niov))
        atomic_fetch_add(&b->sh->bad, 1);
    else
        atomic_fetch_add_explicit(&b->sh->hits, 1, memory_order_relaxed);
    return true;
}

static void *
cworker_main(void *arg)
{
    struct cworker *w = arg;
    struct tc_cache *c = w->sh->c;
    char v[512], names[20][32];
    struct tc_key keys[20];

    for (unsigned it = 0; it < (w->writer ? CWRITES : CITER); it++) {
        if (w->writer) {
            unsigned k = (unsigned)(rng_next(&w->rng) % CKEYS);
            key_name(k, names[0]);
            if (rng_next(&w->rng) % 8 == 0) {
                tc_delete(c, names[0], strlen(names[0]), 0);
            } else {
                size_t n = cvalue(k, it, v);
                tc_set(c, names[0], strlen(names[0]), v, n, 0, 0);
            }
            continue;
        }
        unsigned n = 1 + (unsigned)(rng_next(&w->rng) % 20);
        for (unsigned j = 0; j < n; j++) {
            key_name((unsigned)(rng_next(&w->rng) % CKEYS), names[j]);
            keys[j] = (struct tc_key){names[j], strlen(names[j])};
        }
        struct cbatch b = {w->sh, keys};
        if (tc_get_many(c, keys, n, NULL, ccheck, &b, NULL) != (int)n)
            atomic_fetch_add(&w->sh->bad, 1);
    }
    tc_thread_unregister(c);
    return NULL;
}

/* Two threads read batches while two overwrite and delete the same keys
 * (the old items freed after grace periods and their chunks reused): every
 * value a batch hands out belongs to its key and is whole. */
static void
test_concurrent_writers(void **state)
{
    struct gfx *g = *state;
    struct cshared sh = {.c = g->a.c};
    struct cworker w[4];
    pthread_t th[4];
    char v[512], name[32];
    uint32_t seed = test_seed();
    print_message("seed %u\n", seed);

    for (unsigned k = 0; k < CKEYS; k++) {
        key_name(k, name);
        size_t n = cvalue(k, 0, v);
        put(g->a.c, name, v, n, 0, 0);
    }
    for (int i = 0; i < 4; i++) {
        w[i] = (struct cworker){&sh, (uint64_t)seed * 7919 + (uint64_t)i + 1,
                                i >= 2};
        assert_int_equal(pthread_create(&th[i], NULL, cworker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    print_message("%u hits checked\n", atomic_load(&sh.hits));
    assert_int_equal(atomic_load(&sh.bad), 0);
    assert_true(atomic_load(&sh.hits) > 0);
    assert_int_equal(tc_check(g->a.c), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batches_match_single_gets, gsetup,
                                        gteardown),
        cmocka_unit_test_setup_teardown(test_batches_match_single_gets,
                                        gsetup_small_index, gteardown),
        cmocka_unit_test_setup_teardown(test_stop_early, gsetup, gteardown),
        cmocka_unit_test_setup_teardown(test_arguments, gsetup, gteardown),
        cmocka_unit_test_setup_teardown(test_prefetch_hint, gsetup, gteardown),
        cmocka_unit_test_setup_teardown(test_concurrent_writers, gsetup,
                                        gteardown),
        cmocka_unit_test_setup_teardown(test_batches_match_single_gets,
                                        gsetup_slab, gteardown),
        cmocka_unit_test_setup_teardown(test_concurrent_writers, gsetup_slab,
                                        gteardown),
        cmocka_unit_test_setup_teardown(test_changed_between_passes, gsetup,
                                        gteardown),
        cmocka_unit_test_setup_teardown(test_changed_between_passes,
                                        gsetup_slab, gteardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Crash points with the packed small-item store on (packed_item_max,
 * doc/design/small-items.md "The write path and crash consistency"),
 * judged by crashpoints_fx.h's rules:
 * - a packed set cut between its value and its commit (pitem.written):
 *   its value never comes back, the one it would have replaced does;
 * - sets, deletes and their crash points on a pool of packed and slab
 *   items (set.published, delete.unlinked);
 * - an eviction cut after its hcrc = 0, before or among its unlinks
 *   (packed.evict.cleared, packed.evict.unlinked): none of the segment's
 *   items comes back, every other item the index held does;
 * - a touch's rewrite (a pending copy, packed.copy.published) against a
 *   delete and against a set of the same key from another thread: once
 *   that client was answered, its result is what a restart shows, never
 *   the copy's source. The set comes from a thread whose open segment is
 *   older than the source's, so the source's derived sequence outranks it.
 * flush_all then a crash is test_packed_restart.c's test_flush_then_crash.
 */

#include "crashpoints_fx.h"

#include "src/engine/pitem.h"

#include <time.h>

#define PACKED_MAX 1024

static void
packed_cfg(struct fx *f, uint64_t pool)
{
    f->cfg.pool_size = pool;
    f->cfg.packed_item_max = PACKED_MAX;
}

/* Sets (about two in three packed: values of 20..1519 bytes), overwrites
 * and deletes, as test_crashpoints.c's mixed_work. */
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

/* crash_rounds, asserting on each verdict: nothing acknowledged lost (no
 * eviction in this pool) and, when !may_take, the operation in flight did
 * not take effect. */
static void
rounds_checked(struct fx *f, work_fn *work, const char *point, unsigned max,
               unsigned rounds, bool may_take)
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
        struct verdict v = reopen_judge(f, what);
        assert_int_equal(v.lost, 0);
        if (!may_take)
            assert_int_equal(v.took, 0);
        unlink(f->path);
    }
}

static void
test_packed_set_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    packed_cfg(f, 64 * MIB);
    /* about 10,000 packed writes: a hit drawn up to 6,000 always comes */
    rounds_checked(f, mixed_work, "pitem.written", 6000, 4, false);
    rounds_checked(f, mixed_work, "set.published", 15000, 3, true);
    rounds_checked(f, mixed_work, "delete.unlinked", 4000, 3, true);
}

/* ------------------------------------------------------------ eviction */

/* What the child saw at the eviction's crash point, in a shared mapping:
 * the keys whose committed item lies in the segment being evicted, and
 * the keys the index held (anywhere). */
struct evrec {
    uint8_t in_seg[NK];
    uint8_t present[NK];
    uint32_t nseg;
};

static struct evrec *E;
static struct fx *ev_f; /* the child's cache, for the hook */

static unsigned
key_index(const char *k, uint32_t klen)
{
    char b[16];
    if (klen < 3 || klen >= sizeof(b))
        return NK;
    memcpy(b, k, klen);
    b[klen] = 0;
    unsigned i = NK;
    if (sscanf(b, "cp%05u", &i) != 1)
        return NK;
    return i;
}

/* The pool as the eviction left it at the point: the evicting segment's
 * committed items, and which keys the index holds. */
static void
record_eviction(void)
{
    struct cache *c = (struct cache *)ev_f->c;
    uint32_t npages = pool_npages(c->pool);
    unsigned evicting = 0;

    memset(E, 0, sizeof(*E));
    for (uint32_t pg = 0; pg < npages; pg++) {
        struct seg_info si;
        seg_info(c->seg, pg, &si);
        if (si.state != SEG_EVICTING)
            continue;
        evicting++;
        struct pitem_walk w;
        struct pitem_view v;
        pitem_walk_init(&w, c->base + ((uint64_t)pg << POOL_PAGE_SHIFT),
                        POOL_PAGE_SIZE, si.seq_base, false);
        while (pitem_walk_next(&w, &v) == 1) {
            unsigned i = key_index(v.key, v.klen);
            if (i < NK && !E->in_seg[i]) {
                E->in_seg[i] = 1;
                E->nseg++;
            }
        }
    }
    if (evicting != 1)
        _exit(5); /* one thread: one eviction at a time */
    cache_read_lock();
    for (unsigned i = 0; i < NK; i++) {
        char k[16];
        key_of(k, i);
        struct cache_key ck = {c, k, (uint32_t)strlen(k)};
        E->present[i] = htab_lookup_rcu(c->htab, cache_hash(c, k, ck.klen),
                                        cache_match_key, &ck) != 0;
    }
    cache_read_unlock();
}

static void
evict_hook(const char *name)
{
    if (target && strcmp(name, target) == 0) {
        hits++;
        if (--countdown == 0) {
            record_eviction();
            _exit(CRASHED);
        }
    }
}

/* Packed values of 300..899 bytes over a pool a few times smaller than
 * what is written: segments evicted (FIFO), a delete now and then. */
static void
evict_work(struct fx *f, uint64_t *rng)
{
    assert_int_equal(fx_open(f), 0);
    ev_f = f;
    __atomic_store_n(&crashpoint_hook, evict_hook, __ATOMIC_RELAXED);
    for (unsigned op = 0; op < 40000; op++) {
        unsigned i = pick(rng, NK);
        if (pick(rng, 8) == 0)
            del_key(f->c, i);
        else
            assert_int_equal(set_gen(f->c, i, 300 + pick(rng, 600)), TC_OK);
    }
}

/* After the restart: no key of the evicted segment, every key the index
 * held elsewhere (as its acknowledged value: judge). */
static void
evict_rounds(struct fx *f, const char *point, unsigned max, unsigned rounds)
{
    uint64_t rng = seed0 ^ (uint64_t)strlen(point) << 40;
    for (unsigned r = 0; r < rounds; r++) {
        truth_reset();
        unsigned n = 1 + (unsigned)(rng_next(&rng) % max);
        int st = run_child(f, evict_work, point, n, rng_next(&rng));
        if (st != CRASHED)
            fail_msg("%s: hit %u never came (child exit %d after %u hits)",
                     point, n, st, T->hits);
        assert_true(E->nseg > 0);
        unsigned want = 0;
        for (unsigned i = 0; i < NK; i++)
            want += E->present[i] && !E->in_seg[i];
        char what[48];
        snprintf(what, sizeof(what), "%s#%u", point, n);
        struct tc_open_info info;
        assert_int_equal(tc_open(&f->cfg, &f->c), 0);
        tc_open_info(f->c, &info);
        assert_int_equal(info.kind, TC_START_RECOVERED);
        for (unsigned i = 0; i < NK; i++) {
            char k[16];
            struct got g;
            static unsigned char buf[VMAX];
            key_of(k, i);
            int rc = get_cb(f->c, k, &g, buf, VMAX);
            if (E->in_seg[i] && rc != TC_NOT_FOUND)
                fail_msg("%s: %s of the evicted segment came back (flags %u)",
                         what, k, g.info.flags);
            if (E->present[i] && !E->in_seg[i] && rc != TC_OK)
                fail_msg("%s: %s, held outside the evicted segment, lost", what,
                         k);
        }
        struct verdict v = judge(f->c); /* the values, and nothing else */
        assert_int_equal(v.live, want);
        assert_int_equal(info.items, want);
        assert_int_equal(tc_check(f->c), 0);
        tc_close(f->c);
        f->c = NULL;
        print_message("%s: %u items of the evicted segment gone\n", what,
                      E->nseg);
        unlink(f->path);
    }
}

static void
test_packed_eviction(void **state)
{
    SKIP_WITHOUT_POINTS();
    struct fx *f = *state;
    packed_cfg(f, 8 * MIB);
    /* FIFO's walk (a merge's crashes: test_packed_restart's
     * test_merge_crash) */
    f->cfg.packed_evict = TC_PACKED_EVICT_FIFO;
    evict_rounds(f, "packed.evict.cleared", 12, 4);
    /* about 100 live items a segment, some 20 segments evicted */
    evict_rounds(f, "packed.evict.unlinked", 1000, 4);
}

/* ---------------------------------------- a touch's copy against a client */

/* The rewriter (this thread) publishes a touch's pending copy of key 0;
 * at packed.copy.published it lets the client go and waits up to
 * CLIENT_WAIT_MS for its answer, then the process dies. The client (key
 * 0's set or delete) runs on a thread whose open segment was opened
 * first: its item's derived sequence is below the copy's source's. */
#define CLIENT_WAIT_MS 300

static sem_t client_ready, client_go, client_done;
static bool client_deletes;
static bool rewriter_goes_on; /* the copy committed, then the crash */

static void *
copy_client(void *arg)
{
    struct fx *f = arg;
    assert_int_equal(set_gen(f->c, 1, 100), TC_OK); /* opens its segment */
    sem_post(&client_ready);
    sem_wait(&client_go);
    if (client_deletes)
        del_key(f->c, 0);
    else
        assert_int_equal(set_gen(f->c, 0, 100), TC_OK);
    sem_post(&client_done);
    return NULL;
}

/* Whether the client answered within ms milliseconds. */
static bool
client_answered(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += ms % 1000 * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    int rc;
    do {
        rc = sem_timedwait(&client_done, &ts);
    } while (rc != 0 && errno == EINTR);
    return rc == 0;
}

static void
copy_hook(const char *name)
{
    if (role != 2 || strcmp(name, "packed.copy.published") != 0)
        return;
    role = 0;
    sem_post(&client_go);
    if (rewriter_goes_on)
        return;
    T->hits = client_answered(CLIENT_WAIT_MS);
    _exit(CRASHED);
}

static void
copy_work(struct fx *f, uint64_t *rng)
{
    (void)rng;
    pthread_t th;
    assert_int_equal(fx_open(f), 0);
    sem_init(&client_ready, 0, 0);
    sem_init(&client_go, 0, 0);
    sem_init(&client_done, 0, 0);
    assert_int_equal(pthread_create(&th, NULL, copy_client, f), 0);
    /* it may still wait inside its call at the crash: never joined */
    assert_int_equal(pthread_detach(th), 0);
    sem_wait(&client_ready);
    /* key 0 in this thread's segment, opened after the client's */
    assert_int_equal(set_gen(f->c, 0, 100), TC_OK);
    __atomic_store_n(&crashpoint_hook, copy_hook, __ATOMIC_RELAXED);
    role = 2;
    char k[16];
    key_of(k, 0);
    /* an expiry past what 16 bits hold from the segment's exp_base
     * (65,534 s) does not fit in place: a copy with exp32 is written */
    int rc = tc_touch(f->c, k, strlen(k), 2000000);
    if (rewriter_goes_on && role == 0) { /* the copy was published */
        T->hits = client_answered(20000);
        _exit(CRASHED);
    }
    print_message("the touch wrote no copy (%d, %" PRIu64 " packed)\n", rc,
                  stats(f->c).packed_items);
    _exit(3);
}

static void
copy_race(struct fx *f, bool deletes, bool goes_on)
{
    packed_cfg(f, 64 * MIB); /* room for two open segments */
    client_deletes = deletes;
    rewriter_goes_on = goes_on;
    race_run(f, copy_work);
    bool answered = T->hits != 0;
    uint32_t acked = T->acked[0];
    struct verdict v =
        reopen_judge(f, deletes ? "copy-vs-delete" : "copy-vs-set");
    print_message("the client was %sanswered before the crash\n",
                  answered ? "" : "not ");
    if (goes_on) /* then the client's result, whatever the order */
        assert_true(answered && v.live == (deletes ? 1u : 2u));
    if (answered && deletes)
        assert_int_equal(acked, 0);
    assert_true(v.live >= 1); /* key 1 */
}

static void
test_copy_against_delete(void **state)
{
    SKIP_WITHOUT_POINTS();
    copy_race(*state, true, false);
    unlink(((struct fx *)*state)->path);
    copy_race(*state, true, true);
}

static void
test_copy_against_set(void **state)
{
    SKIP_WITHOUT_POINTS();
    copy_race(*state, false, false);
    unlink(((struct fx *)*state)->path);
    copy_race(*state, false, true);
}

int
main(void)
{
    if (crashpoints_fx_init() != 0)
        return 1;
    E = mmap(NULL, sizeof(*E), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (E == MAP_FAILED)
        return 1;
    const struct CMUnitTest tests[] = {
        TC_TEST_NOOPEN(test_packed_set_delete),
        TC_TEST_NOOPEN(test_packed_eviction),
        TC_TEST_NOOPEN(test_copy_against_delete),
        TC_TEST_NOOPEN(test_copy_against_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The engine's NVMe tier (src/engine/ext.c) through the public API:
 * spilling cold values at eviction (over many header pages, while admin is
 * held, after ext_item_age), a write-hot flash key, deletes/overwrites/
 * expiry of flash items, read-modify-write commands on them, compaction, a
 * flash path that refuses O_DIRECT, and a concurrent read/write/compaction
 * stress that checks every value read (run under TSan by the tsan target).
 * The fixture is ext_fx.h; the read path (read back, recache, faults) is in
 * test_ext_read.c.
 *
 * Where O_DIRECT is refused in the flash directory the tests skip with the
 * reason.
 */
#include "ext_fx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

/* Spilled items need flash headers in a class of their own, taken without
 * evicting: a header page set aside at open goes to that class when it is
 * full, and is refilled from the evicting class after the batch. Over
 * several header pages (46,000 headers of 64 bytes, 16,384 a page), no
 * victim is evicted and every key reads back. */
static void
test_spill_many_header_pages(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    const unsigned n = 60000, vlen = 1024;
    unsigned char v[1024], got[1024 + 8];
    char k[32];

    for (unsigned i = 0; i < n; i++) {
        key_of(i, k);
        value_of(i, 0, v, vlen);
        put_driven(c, k, v, vlen, i, 0);
    }
    struct tc_stats s = stats(c);
    print_message("header pages: %" PRIu64 " spilled, %" PRIu64
                  " evicted, %" PRIu64 " reassigns\n",
                  s.ext_spilled, s.evictions, s.slab_reassign_count);
    assert_true(s.ext_spilled > 40000);
    assert_int_equal(s.ext_spill_busy, 0);
    assert_int_equal(s.evictions, 0);
    for (unsigned i = 0; i < n; i += 97) {
        struct got g = {.buf = got, .cap = sizeof(got)};
        struct tc_get_opts o = {.no_bump = true};
        key_of(i, k);
        value_of(i, 0, v, vlen);
        assert_int_equal(tc_get_ex(c, k, strlen(k), &o, got_fn, &g), TC_OK);
        assert_int_equal(g.len, vlen);
        assert_memory_equal(got, v, vlen);
    }
    check_ok(c);
}

/* Holds the engine's admin token (as a page drain or a "slabs reassign"
 * would) until the test says done, at most 120 s: far longer than the
 * fill takes on any machine, so a fill that waited for admin is told from
 * one that did not. */
struct admin_hold {
    struct cache *c;
    _Atomic bool held, done, released;
};

static void *
admin_holder(void *arg)
{
    struct admin_hold *h = arg;
    pthread_mutex_lock(&h->c->admin);
    atomic_store_explicit(&h->held, true, memory_order_release);
    for (int i = 0;
         i < 120000 && !atomic_load_explicit(&h->done, memory_order_acquire);
         i++)
        usleep(1000);
    atomic_store_explicit(&h->released, true, memory_order_release);
    pthread_mutex_unlock(&h->c->admin);
    return NULL;
}

/* Spilling never waits for admin: the header reserve's refill and the
 * header class's reassignment are chances taken after an eviction batch,
 * not needs, so while another thread holds admin (draining a page, which
 * writes PMEM) the fill goes on, evicting where no header chunk is left
 * (before, it waited for admin: 30 s here); once admin is free again they
 * resume and the next fill evicts next to nothing. The fills drive the
 * flash writer, so no victim is evicted for want of a write buffer. */
static void
test_spill_admin_busy(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    const unsigned n = 60000, vlen = 1024;
    unsigned char v[1024];
    char k[32];

    struct admin_hold h = {.c = (struct cache *)c};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, admin_holder, &h), 0);
    for (int i = 0;
         i < 5000 && !atomic_load_explicit(&h.held, memory_order_acquire); i++)
        usleep(1000);
    assert_true(atomic_load_explicit(&h.held, memory_order_acquire));
    for (unsigned i = 0; i < n; i++) {
        key_of(i, k);
        value_of(i, 0, v, vlen);
        put_driven(c, k, v, vlen, i, 0);
    }
    bool waited = atomic_load_explicit(
        &h.released, memory_order_acquire); /* the fill outlasted the hold */
    atomic_store_explicit(&h.done, true, memory_order_release);
    pthread_join(th, NULL);
    assert_false(waited);
    struct tc_stats s = stats(c);
    print_message("admin held: %" PRIu64 " spilled, %" PRIu64 " evicted\n",
                  s.ext_spilled, s.evictions);
    assert_true(s.ext_spilled > n / 8); /* the reserve's first page */

    for (unsigned i = n; i < 2 * n; i++) {
        key_of(i, k);
        value_of(i, 0, v, vlen);
        put_driven(c, k, v, vlen, i, 0);
    }
    struct tc_stats s2 = stats(c);
    print_message("admin free: %" PRIu64 " spilled, %" PRIu64 " evicted\n",
                  s2.ext_spilled - s.ext_spilled, s2.evictions - s.evictions);
    assert_true(s2.ext_spilled - s.ext_spilled > n / 2);
    /* at most the page reassigned before the reserve's first refill
     * (with admin held, about half of the fill was evicted) */
    assert_true(s2.evictions - s.evictions < n / 20);
    check_ok(c);
}

/* ext_item_age: victims idle less than the limit are evicted, not
 * spilled; once the clock has moved past it, they spill. */
static void
test_item_age(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    const unsigned n = 8192; /* 32 MiB of 4 KiB values, pool 16 MiB */

    ((struct cache *)c)->cfg.ext_item_age = 600;
    fill(c, 0, n);
    struct tc_stats s = stats(c);
    assert_int_equal(s.ext_spilled, 0);
    assert_true(s.evictions > 0);
    tc_clock_set(T0 + 601);
    fill(c, n, n);
    s = stats(c);
    assert_true(s.ext_spilled > 0);
    bool fl = false;
    unsigned on_flash = 0;
    for (unsigned i = n; i < 2 * n && !on_flash; i++)
        if (read_check(c, i, 0, &fl) && fl)
            on_flash++;
    for (unsigned i = 0; i < n && !on_flash; i++)
        if (read_check(c, i, 0, &fl) && fl)
            on_flash++;
    assert_int_equal(on_flash, 1);
    check_ok(c);
}

/* A flash item whose key turns write-hot moves to the DRAM hot pool (its
 * flash record released), survives compaction and a demotion back to
 * PMEM, and reads back its newest value throughout. */
static void
test_hot_flash_key(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    const unsigned n = 8192; /* 32 MiB of 4 KiB values, pool 16 MiB */
    bool fl = false;

    fill(c, 0, n);
    unsigned k = flash_key(c, 0);
    for (unsigned v = 1; v <= 200; v++)
        put_version(c, k, v);
    tc_maintain(c); /* k is hot now */
    put_version(c, k, 201);
    struct tc_stats s = stats(c);
    assert_int_equal(s.hotkey_current, 1);
    assert_int_equal(read_check(c, k, 201, &fl), 1);
    assert_false(fl);
    check_ok(c);

    tc_maintain(c); /* compaction and the hot-key step run here */
    assert_int_equal(read_check(c, k, 201, &fl), 1);
    check_ok(c);

    tc_set_hot_write_rate(c, 1000000000);
    tc_maintain(c); /* cooled: back to PMEM */
    assert_int_equal(stats(c).hotkey_current, 0);
    assert_true(stats(c).hotkey_demotions >= 1);
    assert_int_equal(read_check(c, k, 201, &fl), 1);
    check_ok(c);

    /* more data pushes it out again: a hit with the newest value or a
     * miss, never an older value */
    fill(c, n, n);
    int hit = read_check(c, k, 201, &fl);
    assert_true(hit == 0 || hit == 1);
    check_ok(c);
}

static void
test_delete_overwrite_expire(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    unsigned char v[VAL];
    char k[32];

    /* key 0 expires in 100 s; the rest never */
    key_of(0, k);
    value_of(0, 0, v, VAL);
    put(c, k, v, VAL, 0, 100);
    fill(c, 1, 8000);
    struct tc_stats s0 = stats(c);
    unsigned a = flash_key(c, 1), b = flash_key(c, a + 1);
    unsigned d = flash_key(c, b + 1);

    /* delete: a miss from then on, one flash item fewer */
    key_of(a, k);
    assert_int_equal(tc_delete(c, k, strlen(k), 0), TC_OK);
    check_miss(c, k);
    assert_int_equal(tc_delete(c, k, strlen(k), 0), TC_NOT_FOUND);
    struct tc_stats s1 = stats(c);
    assert_int_equal(s1.ext_items, s0.ext_items - 1);
    assert_true(s1.extstore_bytes_dead > s0.extstore_bytes_dead);

    /* overwrite: the new value, from PMEM */
    key_of(b, k);
    value_of(b, 1, v, VAL);
    put(c, k, v, VAL, b, 0);
    bool fl = true;
    assert_int_equal(read_check(c, b, 1, &fl), 1);
    assert_false(fl);

    /* touch keeps a flash item on flash and moves its expiry */
    key_of(d, k);
    assert_int_equal(tc_touch(c, k, strlen(k), 50), TC_OK);

    /* expiry: key 0 (spilled with it) and d pass their time */
    tc_clock_advance(101);
    check_miss(c, "key:000000");
    key_of(d, k);
    check_miss(c, k);
    /* a delete with a CAS on a flash item compares it */
    unsigned e = flash_key(c, d + 1);
    struct tc_item_info info;
    key_of(e, k);
    unsigned char buf[VAL];
    assert_int_equal(tc_get_copy(c, k, strlen(k), buf, VAL, &info), TC_OK);
    assert_true(info.flash);
    assert_int_equal(tc_delete(c, k, strlen(k), info.cas + 1), TC_EXISTS);
    assert_int_equal(tc_delete(c, k, strlen(k), info.cas), TC_OK);
    /* flush_all: every flash item misses */
    assert_int_equal(tc_flush_all(c, 0), TC_OK);
    unsigned f2 = e + 1;
    assert_int_equal(read_check(c, f2, 0, NULL), 0);
    check_ok(c);
}

static void
test_rmw_on_flash(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    char k[32];
    unsigned char buf[VAL + 8];
    struct got g;

    /* append and prepend to a 4 KiB flash value */
    fill(c, 0, 8000);
    unsigned i = flash_key(c, 0);
    unsigned last = i;
    key_of(i, k);
    assert_int_equal(store_s(c, TC_APPEND, k, ">", 0, 0, 0, NULL), TC_OK);
    assert_int_equal(store_s(c, TC_PREPEND, k, "<", 0, 0, 0, NULL), TC_OK);
    unsigned char want[VAL + 2];
    want[0] = '<';
    value_of(i, 0, want + 1, VAL);
    want[VAL + 1] = '>';
    check_val(c, k, want, VAL + 2);

    /* gat on a flash item: value and the new expiry */
    i = flash_key(c, last + 1);
    key_of(i, k);
    memset(&g, 0, sizeof(g));
    g.buf = buf;
    g.cap = sizeof(buf);
    assert_int_equal(tc_gat(c, k, strlen(k), 10, got_fn, &g), TC_OK);
    assert_int_equal(g.len, VAL);
    assert_true(g.info.flash);
    assert_int_equal(g.info.exptime, T0 + 10);
    tc_clock_advance(11);
    check_miss(c, k);
    check_ok(c);
}

static void
test_rmw_counter(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    char k[32];
    uint64_t val;
    unsigned char buf[VAL + 8];
    struct tc_get_opts o = {.no_bump = true};
    struct got g = {.buf = buf, .cap = sizeof(buf)};

    /* counters: 60-byte values (19 digits, then spaces, which incr
     * accepts), ext_item_size 1 (a spill must still save memory: the
     * item's chunk is larger than a header's); stored until the first is
     * on flash (eviction is per class, so its class must fill up) */
    for (unsigned i = 0; i < 300000; i++) {
        char v[64];
        snprintf(k, sizeof(k), "n:%06u", i);
        snprintf(v, sizeof(v), "%019u%41s", 41u, "");
        put_driven(c, k, v, 60, 0, 0);
    }
    /* the first victims may have been evicted before the header class had
     * a page: take the first counter on flash */
    bool on = false;
    char ctr[32];
    for (unsigned i = 0; !on && i < 100000; i++) {
        snprintf(ctr, sizeof(ctr), "n:%06u", i);
        on = tc_get_ex(c, ctr, 8, &o, got_fn, &g) == TC_OK && g.info.flash;
    }
    assert_true(on);
    /* a read that marks it used, so that the eviction the incr's store may
     * run passes over it */
    struct tc_get_opts bump = {0};
    assert_int_equal(tc_get_ex(c, ctr, 8, &bump, got_fn, &g), TC_OK);
    assert_int_equal(tc_incr(c, ctr, 8, 1, &val, NULL), TC_OK);
    assert_int_equal(val, 42);
    check_num(c, ctr, 42);
    check_ok(c);
}

/* Compaction keeps the records that were read and are still indexed. */
static void
test_compaction(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    char k[32];
    const unsigned n = 8000;

    fill(c, 0, n);
    assert_int_equal(nvs_flush(store_of(c)), 0);
    /* the first segments: keep every 8th key, read (FETCHED), delete the
     * rest */
    unsigned kept = 0;
    for (unsigned i = 0; i < 3000; i++) {
        key_of(i, k);
        if (i % 8 == 0) {
            /* a read that marks it used (FETCHED): compaction keeps it */
            unsigned char buf[VAL];
            kept += tc_get_copy(c, k, strlen(k), buf, VAL, NULL) == TC_OK;
            continue;
        }
        tc_delete(c, k, strlen(k), 0);
    }
    struct tc_stats s0 = stats(c);
    for (int i = 0; i < 8; i++)
        tc_maintain(c);
    struct tc_stats s1 = stats(c);
    print_message("compaction: %" PRIu64 " rescued, %" PRIu64 " skipped\n",
                  s1.extstore_compact_rescues, s1.extstore_compact_skipped);
    assert_true(s1.extstore_compact_rescues > s0.extstore_compact_rescues);
    unsigned again = 0;
    for (unsigned i = 0; i < 3000; i += 8)
        again += (unsigned)read_check(c, i, 0, NULL);
    assert_int_equal(again, kept);
    check_ok(c);
}

/* A path on tmpfs refuses O_DIRECT: tc_open fails with one sentence. */
static void
test_tmpfs_refused(void **state)
{
    struct xfx *x = *state;
    struct fx *f = &x->f;
    char bad[192];
    snprintf(bad, sizeof(bad), "/dev/shm/tc_test_ext_%d.nvs", (int)getpid());
    tc_close(f->c);
    f->c = NULL;
    f->cfg.ext_path[0] = bad;
    f->cfg.ext_size[0] = 64 * MIB;
    unlink(f->path);
    struct tc_cache *c = NULL;
    int rc = tc_open(&f->cfg, &c);
    unlink(bad);
    assert_true(rc < 0);
    assert_null(c);
    print_message("refused: %s\n", tc_errmsg());
    assert_non_null(strstr(tc_errmsg(), bad));
    f->cfg.ext_path[0] = x->ext;
    assert_int_equal(fx_open(f), 0);
}

/* ---------------------------------------------------------------- stress */

#define ST_KEYS 6000
#define ST_THREADS 2
#define ST_OPS 40000

struct st_arg {
    struct tc_cache *c;
    unsigned id;
    _Atomic bool *stop;
    _Atomic unsigned long bad;
    unsigned long reads, hits;
};

/* A value names its key and version in its first bytes; the rest derives
 * from them. */
static void
st_value(unsigned key, uint32_t ver, unsigned char *v, size_t n)
{
    fill_pattern(v, n, (uint64_t)key << 32 | ver);
    memcpy(v, &key, 4);
    memcpy(v + 4, &ver, 4);
}

static bool
st_check(unsigned key, const unsigned char *v, size_t n)
{
    unsigned char want[VAL];
    unsigned k2;
    uint32_t ver;
    if (n != VAL)
        return false;
    memcpy(&k2, v, 4);
    memcpy(&ver, v + 4, 4);
    if (k2 != key)
        return false;
    st_value(key, ver, want, VAL);
    return memcmp(want, v, VAL) == 0;
}

static void *
st_worker(void *p)
{
    struct st_arg *a = p;
    uint64_t seed = 0x1234567ull * (a->id + 1);
    unsigned char v[VAL], buf[VAL + 8];
    char k[32];
    for (unsigned op = 0; op < ST_OPS; op++) {
        unsigned key = (unsigned)(rng_next(&seed) % ST_KEYS);
        key_of(key, k);
        unsigned r = (unsigned)(rng_next(&seed) % 10);
        if (r < 4) {
            st_value(key, (uint32_t)op, v, VAL);
            int rc = tc_set(a->c, k, strlen(k), v, VAL, 0, 0);
            if (rc != TC_OK && rc != -ENOMEM)
                atomic_fetch_add_explicit(&a->bad, 1, memory_order_relaxed);
        } else if (r < 5) {
            tc_delete(a->c, k, strlen(k), 0);
        } else {
            struct got g = {.buf = buf, .cap = sizeof(buf)};
            int rc = tc_get(a->c, k, strlen(k), got_fn, &g);
            a->reads++;
            if (rc == TC_OK) {
                a->hits++;
                if (!st_check(key, buf, g.len))
                    atomic_fetch_add_explicit(&a->bad, 1, memory_order_relaxed);
            }
        }
    }
    return NULL;
}

static void *
st_maint(void *p)
{
    struct st_arg *a = p;
    while (!atomic_load_explicit(a->stop, memory_order_acquire)) {
        tc_maintain(a->c);
        nvs_flush(store_of(a->c));
        usleep(1000);
    }
    return NULL;
}

static void
test_stress(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    _Atomic bool stop = false;
    struct st_arg w[ST_THREADS + 1];
    pthread_t th[ST_THREADS + 1];

    for (unsigned i = 0; i <= ST_THREADS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].c = c;
        w[i].id = i;
        w[i].stop = &stop;
        assert_int_equal(pthread_create(&th[i], NULL,
                                        i < ST_THREADS ? st_worker : st_maint,
                                        &w[i]),
                         0);
    }
    for (unsigned i = 0; i < ST_THREADS; i++)
        pthread_join(th[i], NULL);
    atomic_store_explicit(&stop, true, memory_order_release);
    pthread_join(th[ST_THREADS], NULL);
    unsigned long bad = 0, reads = 0, hits = 0;
    for (unsigned i = 0; i <= ST_THREADS; i++) {
        bad += atomic_load_explicit(&w[i].bad, memory_order_relaxed);
        reads += w[i].reads;
        hits += w[i].hits;
    }
    struct tc_stats s = stats(c);
    print_message("stress: %lu reads, %lu hits, %" PRIu64
                  " from flash, %" PRIu64 " spilled\n",
                  reads, hits, s.get_extstore, s.ext_spilled);
    assert_int_equal(bad, 0);
    assert_true(s.ext_spilled > 0);
    check_ok(c);
}

/* Close and open again on the same pool and flash files. */
static struct tc_open_info
reopen(struct xfx *x)
{
    struct tc_open_info info;
    tc_close(x->f.c);
    x->f.c = NULL;
    assert_int_equal(tc_open(&x->f.cfg, &x->f.c), 0);
    tc_open_info(x->f.c, &info);
    return info;
}

/* Every key of [0, n) reads its version-0 value or misses: the hits, and
 * in *flash those served from flash. */
static unsigned
read_all(struct tc_cache *c, unsigned n, unsigned *flash)
{
    unsigned hits = 0, fl_hits = 0;
    for (unsigned i = 0; i < n; i++) {
        bool fl = false;
        if (read_check(c, i, 0, &fl)) {
            hits++;
            fl_hits += fl;
        }
    }
    if (flash)
        *flash = fl_hits;
    return hits;
}

/* A restart on the same pool and flash files after a clean close: the
 * items whose value is on flash come back through their PMEM headers and
 * read their values from the segments the store took back; nothing is
 * dropped. The store's books hold (nvs_check) and new spills go on. */
static void
test_restart_flash_back(void **state)
{
    struct xfx *x = *state;
    const unsigned n = 8192; /* 32 MiB of 4 KiB values, pool 16 MiB */

    fill(x->f.c, 0, n);
    struct tc_stats before = stats(x->f.c);
    assert_true(before.ext_items > n / 2);
    struct tc_open_info info = reopen(x);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_int_equal(info.dropped_flash, 0);
    assert_int_equal(info.items, before.curr_items);
    struct tc_stats s = stats(x->f.c);
    assert_int_equal(s.ext_items, before.ext_items);
    assert_int_equal(s.curr_items, before.curr_items);
    assert_true(s.extstore_bytes_used > 0);
    unsigned fl = 0;
    assert_int_equal(read_all(x->f.c, n, &fl), before.curr_items);
    assert_int_equal(fl, before.ext_items);
    check_ok(x->f.c);
    /* new writes go on: more spills, and the old keys still read */
    fill(x->f.c, n, 2048);
    assert_true(stats(x->f.c).ext_spilled > 0);
    assert_true(read_all(x->f.c, n, NULL) > n / 2);
    check_ok(x->f.c);
}

/* After a restart the store's books say which segments are mostly dead:
 * deleting most keys of the reattached segments lets compaction run. */
static void
test_restart_flash_compaction(void **state)
{
    struct xfx *x = *state;
    const unsigned n = 8000;
    char k[32];

    fill(x->f.c, 0, n);
    struct tc_open_info info = reopen(x);
    assert_int_equal(info.kind, TC_START_WARM);
    struct tc_cache *c = x->f.c;
    unsigned kept = 0;
    for (unsigned i = 0; i < 3000; i++) {
        key_of(i, k);
        if (i % 8 == 0) {
            unsigned char buf[VAL];
            kept += tc_get_copy(c, k, strlen(k), buf, VAL, NULL) == TC_OK;
            continue;
        }
        tc_delete(c, k, strlen(k), 0);
    }
    struct tc_stats s0 = stats(c);
    assert_true(s0.extstore_bytes_dead > 0);
    for (int i = 0; i < 8; i++)
        tc_maintain(c);
    struct tc_stats s1 = stats(c);
    assert_true(s1.extstore_compact_rescues > s0.extstore_compact_rescues);
    unsigned again = 0;
    for (unsigned i = 0; i < 3000; i += 8)
        again += (unsigned)read_check(c, i, 0, NULL);
    assert_int_equal(again, kept);
    check_ok(c);
    /* and once more: the compacted segment (its header zeroed) is not
     * taken back, the moved records are */
    info = reopen(x);
    assert_int_equal(info.kind, TC_START_WARM);
    again = 0;
    for (unsigned i = 0; i < 3000; i += 8)
        again += (unsigned)read_check(x->f.c, i, 0, NULL);
    assert_int_equal(again, kept);
    read_all(x->f.c, n, NULL);
    check_ok(x->f.c);
}

/* A crash while the flash writer is mid-segment: the child fills, lets the
 * writer catch up, then holds it (write_delay_ms) and stores more, so that
 * spilled values sit in write buffers that never reach the file, and
 * _exits without closing. Reopened: the headers whose record is not on the
 * flash are dropped and counted, every key reads its value or misses, the
 * keys written before the hold come back, and the store goes on. */
static void
test_restart_flash_crash_mid_segment(void **state)
{
    struct xfx *x = *state;
    const unsigned n = 6000, m = 600;

    tc_close(x->f.c);
    x->f.c = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct tc_cache *c;
        unsigned char v[VAL];
        char k[32];
        if (tc_open(&x->f.cfg, &c) != 0)
            _exit(2);
        fill(c, 0, n);
        nvs_flush(store_of(c));
        struct tc_stats s0 = stats(c);
        struct nvs_faults fa = {.write_delay_ms = 600000};
        nvs_set_faults(store_of(c), &fa);
        for (unsigned i = n; i < n + m; i++) {
            key_of(i, k);
            value_of(i, 0, v, VAL);
            put(c, k, v, VAL, i, 0);
        }
        /* a crash: no tc_close, the writer held with buffers queued */
        _exit(stats(c).ext_spilled > s0.ext_spilled ? 0 : 3);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(tc_open(&x->f.cfg, &x->f.c), 0);
    struct tc_open_info info;
    tc_open_info(x->f.c, &info);
    print_message("crash mid-segment: %" PRIu64 " items back, %" PRIu64
                  " dropped on flash\n",
                  info.items, info.dropped_flash);
    assert_int_equal(info.kind, TC_START_RECOVERED);
    assert_true(info.dropped_flash > 0);
    unsigned fl = 0, hits = read_all(x->f.c, n + m, &fl);
    assert_int_equal(hits, info.items);
    assert_true(read_all(x->f.c, n, NULL) > n / 2);
    assert_true(fl > 0);
    check_ok(x->f.c);
    fill(x->f.c, n + m, 2000);
    assert_true(read_all(x->f.c, n + m + 2000, NULL) > n / 2);
    check_ok(x->f.c);
}

/* After a restart the store reuses the segments it took back (the oldest
 * sealed first): a key whose record was in a reused segment misses, with
 * its counter, and never reads another value; the others read theirs. */
static void
test_restart_flash_reused(void **state)
{
    struct xfx *x = *state;
    const unsigned n = 8192, more = 30000; /* 32 MiB, then 117 MiB */

    fill(x->f.c, 0, n);
    struct tc_stats before = stats(x->f.c);
    struct tc_open_info info = reopen(x);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_int_equal(info.dropped_flash, 0);
    fill(x->f.c, n, more);
    struct tc_stats s1 = stats(x->f.c);
    assert_true(s1.extstore_page_reclaims > 0);
    unsigned fl = 0, hits = read_all(x->f.c, n, &fl);
    struct tc_stats s2 = stats(x->f.c);
    print_message("reused after restart: %u of %" PRIu64 " old keys back (%u "
                  "from flash), %" PRIu64 " flash misses, %" PRIu64
                  " reclaims\n",
                  hits, before.curr_items, fl,
                  s2.miss_from_extstore - s1.miss_from_extstore,
                  s1.extstore_page_reclaims);
    assert_true(hits < before.curr_items);
    assert_true(s2.miss_from_extstore > s1.miss_from_extstore);
    check_ok(x->f.c);
}

int
main(void)
{
    if (!ext_fx_start("test_ext"))
        return 0;
    const struct CMUnitTest tests[] = {
        XT(test_spill_many_header_pages),
        XT(test_restart_flash_back),
        XT(test_restart_flash_compaction),
        XT(test_restart_flash_crash_mid_segment),
        XT(test_restart_flash_reused),
        XT(test_spill_admin_busy),
        XT(test_item_age),
        XTS(test_hot_flash_key, xsetup_hot),
        XT(test_delete_overwrite_expire),
        XT(test_rmw_on_flash),
        XTS(test_rmw_counter, xsetup_small),
        XT(test_compaction),
        XT(test_tmpfs_refused),
        XT(test_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

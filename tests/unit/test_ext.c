/*
 * The engine's NVMe tier (src/engine/ext.c) through the public API: spilling
 * cold values at eviction, reading them back, deletes/overwrites/expiry of
 * flash items, read-modify-write commands on them, recache, compaction, fault
 * injection (through nvs_set_faults and by flipping bytes in the flash
 * file), and a concurrent read/write/compaction stress that checks every
 * value read (run under TSan by the tsan target).
 *
 * Flash files live under /tmp (ext4: O_DIRECT works; /dev/shm refuses it).
 * Where O_DIRECT is refused anyway the tests skip with the reason.
 */
#include "engine_fx.h"

#include "src/engine/cache.h"
#include "src/engine/ext.h"
#include "tier/nvs.h"
#include "tier/nvs_layout.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>

#define VAL 4096
#define KEYFMT "key:%06u"

struct xfx {
    struct fx f;
    char ext[192];
};

static struct nvs *
store_of(struct tc_cache *c)
{
    /* the public handle is the engine's struct (src/engine/tiercache.c) */
    return ((struct cache *)c)->nvs;
}

/* ext_read_timeout_ms for the next setup (then back to the default). The
 * default is no deadline: a blocking read then ends only after
 * ext_block_timeout_ms (30 s), so that a slow disk or a loaded machine
 * turns no read into a miss; the tests of deadlines set their own. */
static uint32_t next_read_timeout_ms = 0;

/* Records appended to the store when the fills last drained the writer. */
static uint64_t drive_mark;

static int
xsetup_full(void **state, uint32_t item_size, uint32_t recache, bool hot,
            uint32_t window)
{
    const char *name = *state;
    struct xfx *x = calloc(1, sizeof(*x));
    if (!x)
        return -1;
    struct fx *f = &x->f;
    snprintf(f->path, sizeof(f->path), "/dev/shm/tc_test_ext_%d_%s.pool",
             (int)getpid(), name);
    test_flash_path(x->ext, sizeof(x->ext), "tc_test_ext_%d_%s.nvs",
                    (int)getpid(), name);
    tc_config_init(&f->cfg);
    f->cfg.pool_path = f->path;
    f->cfg.pool_size = 16 * MIB;
    f->cfg.background = false;
    f->cfg.ext_npaths = 1;
    f->cfg.ext_path[0] = x->ext;
    f->cfg.ext_size[0] = 128 * MIB;
    f->cfg.ext_page_size = 4 * MIB;
    f->cfg.ext_wbuf_size = 1 * MIB;
    f->cfg.ext_item_size = item_size;
    f->cfg.ext_recache_rate = recache;
    f->cfg.ext_recache_window = window; /* 0: tests read keys many times */
    f->cfg.ext_read_timeout_ms = next_read_timeout_ms;
    next_read_timeout_ms = 0;
    drive_mark = 0;
    if (hot) { /* the DRAM hot pool, quick to promote (see test_hotkey) */
        f->cfg.hot_pool_size = 1 * MIB;
        f->cfg.hot_write_rate = 10;
        f->cfg.hotkey_window = 1;
        f->cfg.hotkey_sample = 1;
    }
    tc_clock_set(T0);
    unlink(x->ext);
    if (fx_open(f) != 0) {
        unlink(f->path);
        unlink(x->ext);
        free(x);
        return -1;
    }
    /* TC_TEST_FLASH_WRITE_DELAY_MS: a writer that falls behind (a slow
     * disk), for the loaded runs; tests that inject faults replace it */
    const char *wd = getenv("TC_TEST_FLASH_WRITE_DELAY_MS");
    if (wd != NULL && *wd != '\0') {
        struct nvs_faults fa = {.write_delay_ms = (uint32_t)atoi(wd)};
        nvs_set_faults(store_of(f->c), &fa);
    }
    *state = x;
    return 0;
}

static int
xsetup_with(void **state, uint32_t item_size, uint32_t recache)
{
    return xsetup_full(state, item_size, recache, false, 0);
}

static int
xsetup_hot(void **state)
{
    return xsetup_full(state, 512, 0, true, 0);
}

static int
xsetup(void **state)
{
    return xsetup_with(state, 512, 0);
}

static int
xsetup_small(void **state)
{
    return xsetup_with(state, 1, 0);
}

static int
xsetup_recache(void **state)
{
    return xsetup_with(state, 512, 1);
}

static int
xsetup_reread(void **state)
{
    return xsetup_full(state, 512, 0, false, 1024);
}

static int
xsetup_no_deadline(void **state)
{
    next_read_timeout_ms = 0;
    return xsetup_with(state, 512, 0);
}

static int
xsetup_deadline(void **state)
{
    next_read_timeout_ms = 1000;
    return xsetup_with(state, 512, 0);
}

static int
xteardown(void **state)
{
    struct xfx *x = *state;
    tc_close(x->f.c);
    unlink(x->f.path);
    unlink(x->ext);
    tc_clock_set(0);
    free(x);
    return 0;
}

static void
value_of(unsigned i, unsigned version, unsigned char *v, size_t n)
{
    fill_pattern(v, n, (uint64_t)i * 1000003u + version);
}

static void
key_of(unsigned i, char *k)
{
    snprintf(k, 32, KEYFMT, i);
}

/* The flash writer is a thread of its own: left alone on a slow disk or a
 * loaded machine it falls behind, and eviction then drops the victims it
 * would have spilled (ext_spill_busy), so what spills would depend on
 * speed. The fills drive it instead: once the records appended since the
 * last drain could fill half of the four write buffers (a record of vlen
 * bytes takes at most vlen, a block of padding and a descriptor), they wait
 * until the writer has written every buffer (nvs_flush). After a drain at
 * least three empty buffers are ready, and one store's eviction batch
 * (EVICT_BATCH victims) adds far less than the other half. */
static void
drive_writer(struct tc_cache *c, size_t vlen)
{
    struct nvs *s = store_of(c);
    struct nvs_stats st;
    uint64_t per = vlen + NVS_BLOCK + 512;
    uint64_t budget = 2 * (uint64_t)((struct cache *)c)->cfg.ext_wbuf_size;

    nvs_get_stats(s, &st);
    if ((st.objects_written - drive_mark) * per < budget)
        return;
    assert_int_equal(nvs_flush(s), 0);
    nvs_get_stats(s, &st);
    drive_mark = st.objects_written;
}

/* put(), then drive the writer. */
static void
put_driven(struct tc_cache *c, const char *k, const void *v, size_t vlen,
           uint32_t flags, int64_t exptime)
{
    put(c, k, v, vlen, flags, exptime);
    drive_writer(c, vlen);
}

/* Store n keys of VAL bytes (version 0). */
static void
fill(struct tc_cache *c, unsigned from, unsigned n)
{
    unsigned char v[VAL];
    char k[32];
    for (unsigned i = from; i < from + n; i++) {
        key_of(i, k);
        value_of(i, 0, v, VAL);
        put_driven(c, k, v, VAL, i, 0);
    }
}

/* Read key i without marking it used: 1 hit (checked against version),
 * 0 miss; *flash whether it came from flash. */
static int
read_check(struct tc_cache *c, unsigned i, unsigned version, bool *flash)
{
    unsigned char want[VAL], buf[VAL + 8];
    char k[32];
    struct got g;
    struct tc_get_opts o = {.no_bump = true};
    key_of(i, k);
    memset(&g, 0, sizeof(g));
    g.buf = buf;
    g.cap = sizeof(buf);
    int rc = tc_get_ex(c, k, strlen(k), &o, got_fn, &g);
    if (rc == TC_NOT_FOUND) {
        assert_int_equal(g.calls, 0);
        return 0;
    }
    assert_int_equal(rc, TC_OK);
    value_of(i, version, want, VAL);
    if (g.len != VAL || memcmp(buf, want, VAL) != 0)
        fail_msg("key %u: wrong value (%zu bytes)", i, g.len);
    assert_int_equal(g.info.flags, i);
    if (flash)
        *flash = g.info.flash;
    return 1;
}

/* ---------------------------------------------------------------- tests */

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

/* Store version `version` of key i. */
static void
put_version(struct tc_cache *c, unsigned i, unsigned version)
{
    unsigned char v[VAL];
    char k[32];
    key_of(i, k);
    value_of(i, version, v, VAL);
    put_driven(c, k, v, VAL, i, 0);
}

static unsigned flash_key(struct tc_cache *c, unsigned from);

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

/* The first key from `from` on that is on flash (the very first victims
 * may have been evicted while the header class had no page yet). */
static unsigned
flash_key(struct tc_cache *c, unsigned from)
{
    for (unsigned i = from; i < from + 2000; i++) {
        bool fl = false;
        if (read_check(c, i, 0, &fl) && fl)
            return i;
    }
    fail_msg("no key on flash from %u", from);
    return 0;
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

/* A restart on the same pool and flash files: the items whose value is on
 * flash are dropped and counted (not reattached yet), the pool's come
 * back; nothing reads from flash, every key its value or a miss. */
static void
test_restart_drops_flash(void **state)
{
    struct xfx *x = *state;
    const unsigned n = 8192; /* 32 MiB of 4 KiB values, pool 16 MiB */

    fill(x->f.c, 0, n);
    struct tc_stats before = stats(x->f.c);
    assert_true(before.ext_items > 0);
    tc_close(x->f.c);
    x->f.c = NULL;
    assert_int_equal(tc_open(&x->f.cfg, &x->f.c), 0);
    struct tc_open_info info;
    tc_open_info(x->f.c, &info);
    assert_int_equal(info.kind, TC_START_WARM);
    assert_int_equal(info.dropped_flash, before.ext_items);
    assert_int_equal(info.items, before.curr_items - before.ext_items);
    struct tc_stats s = stats(x->f.c);
    assert_int_equal(s.ext_items, 0);
    assert_int_equal(s.curr_items, info.items);
    unsigned hits = 0;
    for (unsigned i = 0; i < n; i++) {
        bool fl = false;
        if (read_check(x->f.c, i, 0, &fl)) {
            hits++;
            assert_false(fl);
        }
    }
    assert_int_equal(hits, info.items);
    check_ok(x->f.c);
}

#define XT(fn)                                                                 \
    cmocka_unit_test_prestate_setup_teardown(fn, xsetup, xteardown, #fn)
#define XTS(fn, s)                                                             \
    cmocka_unit_test_prestate_setup_teardown(fn, s, xteardown, #fn)

int
main(void)
{
    /* the store needs O_DIRECT in the flash directory */
    char probe[192];
    test_flash_path(probe, sizeof(probe), "tc_test_ext_probe_%d",
                    (int)getpid());
    int fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd < 0) {
        printf("SKIP test_ext: O_DIRECT refused under %s (%s)\n",
               test_flash_dir(), strerror(errno));
        return 0;
    }
    close(fd);
    unlink(probe);
    /* TC_TEST_FILTER=test_name (a pattern): run only the matching tests */
    if (getenv("TC_TEST_FILTER"))
        cmocka_set_test_filter(getenv("TC_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        XT(test_spill_read_back),
        XT(test_restart_drops_flash),
        XT(test_spill_many_header_pages),
        XT(test_get_many_flash),
        XT(test_spill_admin_busy),
        XT(test_item_age),
        XTS(test_hot_flash_key, xsetup_hot),
        XT(test_delete_overwrite_expire),
        XT(test_rmw_on_flash),
        XTS(test_rmw_counter, xsetup_small),
        XTS(test_recache, xsetup_recache),
        XTS(test_recache_reread, xsetup_reread),
        XTS(test_faults_injected, xsetup_deadline),
        XTS(test_blocking_read_bounded, xsetup_no_deadline),
        XT(test_close_orphan_rings),
        XT(test_faults_flipped),
        XT(test_compaction),
        XT(test_tmpfs_refused),
        XT(test_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

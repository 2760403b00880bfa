#pragma once
/*
 * The flash fixture of the engine's NVMe tier tests (test_ext.c and
 * test_ext_read.c): a 16 MiB pool with a 128 MiB flash file under the
 * flash directory (flash_fx.h), setups for the item size, recache and
 * read-deadline variants (xsetup*, with XT and XTS to name a test with
 * them), fills that drive the flash writer so that what spills does not
 * depend on the disk's speed, and key_of / value_of / read_check /
 * flash_key to check what reads back. Helpers are static inline, one copy
 * per test file (each test file is one binary).
 */
#include "engine_fx.h"

#include "src/engine/cache.h"
#include "tier/nvs.h"
#include "tier/nvs_layout.h"

#include <errno.h>
#include <fcntl.h>

#define VAL 4096
#define KEYFMT "key:%06u"

struct xfx {
    struct fx f;
    char ext[192];
};

static inline struct nvs *
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

static inline int
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

static inline int
xsetup_with(void **state, uint32_t item_size, uint32_t recache)
{
    return xsetup_full(state, item_size, recache, false, 0);
}

static inline int
xsetup_hot(void **state)
{
    return xsetup_full(state, 512, 0, true, 0);
}

static inline int
xsetup(void **state)
{
    return xsetup_with(state, 512, 0);
}

static inline int
xsetup_small(void **state)
{
    return xsetup_with(state, 1, 0);
}

static inline int
xsetup_recache(void **state)
{
    return xsetup_with(state, 512, 1);
}

static inline int
xsetup_reread(void **state)
{
    return xsetup_full(state, 512, 0, false, 1024);
}

static inline int
xsetup_no_deadline(void **state)
{
    next_read_timeout_ms = 0;
    return xsetup_with(state, 512, 0);
}

static inline int
xsetup_deadline(void **state)
{
    next_read_timeout_ms = 1000;
    return xsetup_with(state, 512, 0);
}

static inline int
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

static inline void
value_of(unsigned i, unsigned version, unsigned char *v, size_t n)
{
    fill_pattern(v, n, (uint64_t)i * 1000003u + version);
}

static inline void
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
static inline void
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
static inline void
put_driven(struct tc_cache *c, const char *k, const void *v, size_t vlen,
           uint32_t flags, int64_t exptime)
{
    put(c, k, v, vlen, flags, exptime);
    drive_writer(c, vlen);
}

/* Store n keys of VAL bytes (version 0). */
static inline void
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
static inline int
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

/* Store version `version` of key i. */
static inline void
put_version(struct tc_cache *c, unsigned i, unsigned version)
{
    unsigned char v[VAL];
    char k[32];
    key_of(i, k);
    value_of(i, version, v, VAL);
    put_driven(c, k, v, VAL, i, 0);
}

/* The first key from `from` on that is on flash (the very first victims
 * may have been evicted while the header class had no page yet). */
static inline unsigned
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

#define XT(fn)                                                                 \
    cmocka_unit_test_prestate_setup_teardown(fn, xsetup, xteardown, #fn)
#define XTS(fn, s)                                                             \
    cmocka_unit_test_prestate_setup_teardown(fn, s, xteardown, #fn)

/* The store needs O_DIRECT in the flash directory: false (after a SKIP
 * line naming `prog`) where it is refused. Also applies TC_TEST_FILTER
 * (a pattern: run only the matching tests). */
static inline bool
ext_fx_start(const char *prog)
{
    char probe[192];
    test_flash_path(probe, sizeof(probe), "%s_probe_%d", prog, (int)getpid());
    int fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd < 0) {
        printf("SKIP %s: O_DIRECT refused under %s (%s)\n", prog,
               test_flash_dir(), strerror(errno));
        return false;
    }
    close(fd);
    unlink(probe);
    if (getenv("TC_TEST_FILTER"))
        cmocka_set_test_filter(getenv("TC_TEST_FILTER"));
    return true;
}

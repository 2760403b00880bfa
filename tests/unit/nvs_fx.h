#pragma once
/*
 * Shared helpers of the NVMe store tests (tests/unit/test_nvs*.c): store
 * files in the flash directory (flash_fx.h: TC_TEST_FLASH_DIR, else /tmp;
 * O_DIRECT must work there) named with the pid, a small
 * configuration, a store with its read ring, and a synchronous read.
 * Include after <cmocka.h>.
 */
#include "tier/nvs.h"

#include "src/base/err.h"

#include "flash_fx.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define FX_SEG (256u * 1024)
#define FX_WBUF (64u * 1024)
/* A write_delay_ms that holds the writer until the test clears the fault
 * (clearing ends the wait): a stalled flash at any machine speed. */
#define FX_HOLD_MS 600000u

static char fx_path[128];

static inline void
fx_config(struct nvs_config *c, uint32_t nsegs, bool no_uring)
{
    static int seq;

    memset(c, 0, sizeof(*c));
    test_flash_path(fx_path, sizeof(fx_path), "tc_nvs_test_%d_%d.dat",
                    (int)getpid(), seq++);
    unlink(fx_path);
    c->npaths = 1;
    c->path[0] = fx_path;
    c->size[0] = (uint64_t)nsegs * FX_SEG;
    c->seg_size = FX_SEG;
    c->wbuf_size = FX_WBUF;
    c->nwbuf = 4;
    c->io_threads = 2;
    c->no_uring = no_uring;
}

/* A store and a read ring of depth 8 over it. */
struct fx {
    struct nvs *s;
    struct nvs_ring *r;
    char path[128];
};

/* Open the store c (from fx_config) and its ring into f: 0, or the
 * error (nvs_open's is printed). */
static inline int
fx_open_cfg(struct fx *f, const struct nvs_config *c)
{
    snprintf(f->path, sizeof(f->path), "%s", c->path[0]);
    int e = nvs_open(c, &f->s);
    if (e < 0) {
        print_error("nvs_open: %s\n", err_msg());
        return e;
    }
    return nvs_ring_create(f->s, 8, &f->r);
}

/* Check the store's invariants, close it and remove its file. */
static inline void
fx_close(struct fx *f)
{
    if (nvs_check(f->s) != 0)
        fail_msg("nvs_check: %s", err_msg());
    nvs_ring_destroy(f->r);
    nvs_close(f->s);
    unlink(f->path);
}

/* Value bytes of record (id, version): a pattern checkable byte by byte. */
static inline void
fx_fill(char *v, uint32_t n, uint32_t id, uint32_t ver)
{
    for (uint32_t i = 0; i < n; i++)
        v[i] = (char)(id * 31u + ver * 7u + i);
}

static inline bool
fx_check(const char *v, uint32_t n, uint32_t id, uint32_t ver)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] != (char)(id * 31u + ver * 7u + i))
            return false;
    return true;
}

static inline int
fx_append(struct nvs *s, const char *key, const void *val, uint32_t vlen,
          struct nvs_loc *loc)
{
    struct iovec iov = {.iov_base = (void *)val, .iov_len = vlen};
    return nvs_append(s, key, (uint8_t)strlen(key), &iov, 1, loc);
}

/* Read loc synchronously; the value (when res is 0) is copied to out. */
static inline int
fx_read(struct nvs_ring *r, const struct nvs_loc *loc, const char *key,
        void *out)
{
    struct nvs_read rd = {
        .loc = *loc, .key = key, .klen = (uint8_t)strlen(key)};
    struct nvs_read *done[4];
    int n;

    int e = nvs_read_prep(r, &rd);
    if (e < 0)
        return e;
    e = nvs_ring_submit(r);
    if (e < 0)
        return e;
    n = nvs_ring_reap(r, done, 4, 1);
    if (n != 1 || done[0] != &rd)
        return -1000 - n;
    e = rd.res;
    if (e == 0 && out != NULL)
        memcpy(out, rd.value, loc->vlen);
    if (e != 0 && rd.value != NULL)
        e = -2000; /* an error must never come with a value */
    nvs_read_done(r, &rd);
    return e;
}

/*
 * The NVMe store's figures (stats, the read latency histogram), its fault
 * injection switches and the debug walker nvs_check(). Function names are
 * those of the tier/nvs.h contract.
 *
 * Concurrency:
 *   s->hist, counters (A)  atomics, relaxed: figures only; a reset
 *                          (relaxed stores of 0) may lose an increment
 *                          racing with it
 *   counters (L), tables   read under s->lock
 *   faults                 atomics, relaxed: set by tests, read by the
 *                          rings and the writer
 */
#include "tier/nvs.h"

#include "src/base/compiler.h"
#include "src/base/err.h"
#include "tier/nvs_int.h"
#include "tier/nvs_layout.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#define NVS_NONE UINT32_MAX

/* Log-linear buckets: exact below 8 ns, then 8 per power of two. */
static unsigned
hist_index(uint64_t v)
{
    if (v < 8)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    return (e - 2) * 8 + (unsigned)((v >> (e - 3)) & 7);
}

static uint64_t
hist_value(unsigned idx)
{
    if (idx < 8)
        return idx;
    unsigned e = idx / 8 + 2, m = idx % 8;
    /* middle of the bucket */
    return ((8ull + m) << (e - 3)) + ((1ull << (e - 3)) >> 1);
}

void
nvs_hist_add(struct nvs *s, uint64_t ns)
{
    atomic_fetch_add_explicit(&s->hist[hist_index(ns)], 1,
                              memory_order_relaxed);
}

static uint64_t
hist_quantile(const uint64_t *h, uint64_t total, double q)
{
    uint64_t want = (uint64_t)(q * (double)total), seen = 0;

    if (total == 0)
        return 0;
    for (unsigned i = 0; i < NVS_HIST_BUCKETS; i++) {
        seen += h[i];
        if (seen > want)
            return hist_value(i);
    }
    return hist_value(NVS_HIST_BUCKETS - 1);
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

void
nvs_get_stats(struct nvs *s, struct nvs_stats *o)
{
    uint64_t h[NVS_HIST_BUCKETS], total = 0;

    memset(o, 0, sizeof(*o));
    lock_acquire(&s->lock);
    o->segs_total = s->nsegs;
    o->bytes_total = (uint64_t)s->nsegs * s->cfg.seg_size;
    for (uint32_t i = 0; i < s->nsegs; i++) {
        const struct nvs_seg *g = &s->seg[i];
        if (g->state == NVS_SEG_FREE) {
            o->segs_free++;
            continue;
        }
        o->bytes_used += g->used;
        o->bytes_dead += g->dead;
    }
    o->page_reclaims = s->page_reclaims;
    o->objects_lost = s->objects_lost;
    o->compact_runs = s->compact_runs;
    o->compact_rescues = s->compact_rescues;
    o->compact_skipped = s->compact_skipped;
    lock_release(&s->lock);
    o->bytes_written = LOAD(s->bytes_written);
    o->objects_written = LOAD(s->objects_written);
    o->bytes_read = LOAD(s->bytes_read);
    o->objects_read = LOAD(s->objects_read);
    o->append_busy = LOAD(s->append_busy);
    o->read_badcrc = LOAD(s->read_badcrc);
    o->read_ioerr = LOAD(s->read_ioerr);
    o->read_timeout = LOAD(s->read_timeout);
    o->read_stale = LOAD(s->read_stale);
    o->write_errors = LOAD(s->write_errors);
    o->write_short = LOAD(s->write_short);
    for (unsigned i = 0; i < NVS_HIST_BUCKETS; i++) {
        h[i] = LOAD(s->hist[i]);
        total += h[i];
    }
    o->read_lat_p50_ns = hist_quantile(h, total, 0.50);
    o->read_lat_p99_ns = hist_quantile(h, total, 0.99);
    o->read_lat_p999_ns = hist_quantile(h, total, 0.999);
    o->uring = s->uring;
}

#define ZERO(x) atomic_store_explicit(&(x), 0, memory_order_relaxed)

void
nvs_stats_reset(struct nvs *s)
{
    lock_acquire(&s->lock);
    s->page_reclaims = 0;
    s->objects_lost = 0;
    s->compact_runs = 0;
    s->compact_rescues = 0;
    s->compact_skipped = 0;
    lock_release(&s->lock);
    ZERO(s->bytes_written);
    ZERO(s->objects_written);
    ZERO(s->bytes_read);
    ZERO(s->objects_read);
    ZERO(s->append_busy);
    ZERO(s->write_errors);
    ZERO(s->write_short);
    ZERO(s->read_badcrc);
    ZERO(s->read_ioerr);
    ZERO(s->read_timeout);
    ZERO(s->read_stale);
    for (unsigned i = 0; i < NVS_HIST_BUCKETS; i++)
        ZERO(s->hist[i]);
}

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            err_set(__VA_ARGS__);                                              \
            return -EUCLEAN;                                                   \
        }                                                                      \
    } while (0)

static int
nvs_check_locked(struct nvs *s)
{
    unsigned nopen = 0, ncomp = 0;

    for (uint32_t i = 0; i < s->nsegs; i++) {
        const struct nvs_seg *g = &s->seg[i];
        uint32_t pending = 0;
        for (unsigned k = 0; k < s->cfg.nwbuf; k++)
            pending += s->wb[k].state != NVS_WB_FREE && s->wb[k].seg == i;
        CHECK(pending == g->pending,
              "nvs: segment %u counts %u pending writes, buffers say %u", i,
              g->pending, pending);
        CHECK(g->dead <= g->used && g->used <= s->cfg.seg_size,
              "nvs: segment %u has %" PRIu64 " dead of %" PRIu64 " used bytes",
              i, g->dead, g->used);
        CHECK(g->wend <= s->cfg.seg_size && g->wend % NVS_BLOCK == 0,
              "nvs: segment %u written up to %u", i, g->wend);
        CHECK(g->state != NVS_SEG_FREE || (g->used == 0 && g->pending == 0),
              "nvs: free segment %u holds %" PRIu64 " bytes", i, g->used);
        nopen += g->state == NVS_SEG_OPEN;
        ncomp += g->state == NVS_SEG_COMPACTING;
        CHECK(g->state != NVS_SEG_OPEN || i == s->open_seg,
              "nvs: segment %u is open but the open one is %u", i, s->open_seg);
        CHECK(g->state != NVS_SEG_COMPACTING || i == s->comp_seg,
              "nvs: segment %u is compacting but the cursor is on %u", i,
              s->comp_seg);
    }
    CHECK(nopen <= 1 && ncomp <= 1, "nvs: %u open and %u compacting segments",
          nopen, ncomp);
    CHECK(s->open_seg == NVS_NONE || s->seg[s->open_seg].state == NVS_SEG_OPEN,
          "nvs: open segment %u is not open", s->open_seg);
    for (unsigned k = 0; k < s->cfg.nwbuf; k++) {
        const struct nvs_wbuf *w = &s->wb[k];
        CHECK((w->state == NVS_WB_FILLING) == (w == s->cur),
              "nvs: write buffer %u is %s the current one", k,
              w == s->cur ? "not filling but" : "filling but not");
        if (w->state == NVS_WB_FREE)
            continue;
        CHECK((uint64_t)w->vend + w->dlen + sizeof(struct nvs_wbuf_footer) <=
                      w->cap &&
                  w->seg_off % NVS_BLOCK == 0 &&
                  (uint64_t)w->seg_off + w->cap <= s->cfg.seg_size,
              "nvs: write buffer %u: values to %u, directory %u, cap %u at %u",
              k, w->vend, w->dlen, w->cap, w->seg_off);
        CHECK(w->state == NVS_WB_FILLING ||
                  (w->len % NVS_BLOCK == 0 && w->len <= w->cap &&
                   w->len >= w->vend + w->dlen),
              "nvs: sealed write buffer %u has an extent of %u bytes", k,
              w->len);
        CHECK(w->gen == atomic_load_explicit(&s->seg[w->seg].gen,
                                             memory_order_relaxed),
              "nvs: write buffer %u has an old generation of segment %u", k,
              w->seg);
    }
    return 0;
}

int
nvs_check(struct nvs *s)
{
    lock_acquire(&s->lock);
    int r = nvs_check_locked(s);
    lock_release(&s->lock);
    return r;
}

void
nvs_set_faults(struct nvs *s, const struct nvs_faults *f)
{
    atomic_store_explicit(&s->f_eio, f->eio_every, memory_order_relaxed);
    atomic_store_explicit(&s->f_short, f->short_every, memory_order_relaxed);
    atomic_store_explicit(&s->f_delay, f->delay_ms, memory_order_relaxed);
    atomic_store_explicit(&s->f_wdelay, f->write_delay_ms,
                          memory_order_relaxed);
    atomic_store_explicit(&s->f_wshort, f->short_write_every,
                          memory_order_relaxed);
    atomic_store_explicit(&s->f_weio, f->write_eio_every, memory_order_relaxed);
    atomic_store_explicit(&s->f_seq, 0, memory_order_relaxed);
}

/*
 * The write-hotspot tracker: per-block and per-DIMM counts of the bytes
 * written into the PMEM mapping (see tier/hotspot.h).
 *
 * Concurrency:
 *   h->blk[], h->dimm[]  relaxed atomic adds by writers, relaxed loads by
 *                        readers; no ordering is needed (counters only)
 *   hotspot_attached     the process's tracker: set by hotspot_attach()
 *                        with a CAS (one tracker at a time), read relaxed
 *                        by the PMEM write hook. Attach and detach happen at
 *                        setup/teardown, when no thread writes this mapping
 *                        (thread creation and joining order them).
 *   hotspot_tick         thread-local sampling countdown
 *   h->classify          set at setup, before the tracker is attached
 */
#include "tier/hotspot.h"

#include "src/base/compiler.h"
#include "src/base/err.h"
#include "tier/pm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A kind counter past this is halved with its siblings: they only serve to
 * find a block's dominant kind, so proportions matter, not totals. */
#define HOTSPOT_KIND_HALVE (1u << 31)

struct hotspot_blk {
    _Atomic uint64_t bytes;
    _Atomic uint64_t writes;
    _Atomic uint32_t kind[HOTSPOT_NKINDS];
};

struct hotspot_dimm {
    _Atomic uint64_t bytes;
    _Atomic uint64_t writes;
} CACHE_ALIGNED;

struct hotspot {
    struct hotspot_config cfg;
    uintptr_t base;
    uint64_t len;
    uint64_t nblocks;
    hotspot_classify_fn *classify;
    void *classify_arg;
    struct hotspot_dimm *dimm; /* cfg.dimms entries */
    struct hotspot_blk *blk;   /* nblocks entries */
};

static struct hotspot *_Atomic hotspot_attached;
static __thread uint32_t hotspot_tick;

static const char *const hotspot_names[HOTSPOT_NKINDS + 1] = {
    [HOTSPOT_REGION_META] = "region_meta",
    [HOTSPOT_ITEM_HEADER] = "item_header",
    [HOTSPOT_ITEM_VALUE] = "item_value",
    [HOTSPOT_PAGE_META] = "page_meta",
    [HOTSPOT_UNKNOWN] = "unknown",
    [HOTSPOT_MIXED] = "mixed",
};

const char *
hotspot_kind_name(enum hotspot_kind k)
{
    return (unsigned)k <= HOTSPOT_MIXED ? hotspot_names[k] : "unknown";
}

void
hotspot_config_init(struct hotspot_config *cfg)
{
    cfg->dimms = 4;
    cfg->interleave = 4096;
    cfg->sample_every = 1;
}

int
hotspot_create(const struct hotspot_config *cfg, const void *map_base,
               uint64_t map_len, struct hotspot **out)
{
    if (cfg->dimms < 1 || cfg->dimms > HOTSPOT_MAX_DIMMS) {
        err_set("hotspot_dimms %u is out of range (1 to %d)", cfg->dimms,
                HOTSPOT_MAX_DIMMS);
        return -EINVAL;
    }
    if (cfg->interleave < 64 || cfg->interleave % 64 != 0) {
        err_set("hotspot_interleave %" PRIu32
                " is not a multiple of 64 bytes (at least 64)",
                cfg->interleave);
        return -EINVAL;
    }
    if (cfg->sample_every < 1) {
        err_set("hotspot_sample must be at least 1 (every write)");
        return -EINVAL;
    }
    if (map_base == NULL || map_len == 0) {
        err_set("hotspot tracker needs a mapping");
        return -EINVAL;
    }
    struct hotspot *h = calloc(1, sizeof(*h));
    if (h == NULL)
        goto err_nomem;
    h->cfg = *cfg;
    h->base = (uintptr_t)map_base;
    h->len = map_len;
    h->nblocks = (map_len + HOTSPOT_BLOCK_SIZE - 1) >> HOTSPOT_BLOCK_SHIFT;
    h->dimm = aligned_alloc(CACHE_LINE, sizeof(*h->dimm) * cfg->dimms);
    /* calloc: large tables come zeroed from mmap, and DRAM is only used for
     * the blocks that get written */
    h->blk = calloc(h->nblocks, sizeof(*h->blk));
    if (h->dimm == NULL || h->blk == NULL)
        goto err_free;
    memset(h->dimm, 0, sizeof(*h->dimm) * cfg->dimms);
    *out = h;
    return 0;

err_free:
    free(h->dimm);
    free(h->blk);
    free(h);
err_nomem:
    err_set("no DRAM for the hotspot tracker (%" PRIu64 " blocks)",
            (map_len + HOTSPOT_BLOCK_SIZE - 1) >> HOTSPOT_BLOCK_SHIFT);
    return -ENOMEM;
}

void
hotspot_destroy(struct hotspot *h)
{
    if (h == NULL)
        return;
    hotspot_detach(h);
    free(h->dimm);
    free(h->blk);
    free(h);
}

void
hotspot_set_classifier(struct hotspot *h, hotspot_classify_fn *fn, void *arg)
{
    h->classify = fn;
    h->classify_arg = arg;
}

static inline void
hotspot_add64(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static void
hotspot_add_kinds(struct hotspot_blk *b, const uint64_t *kb)
{
    bool halve = false;

    for (int k = 0; k < HOTSPOT_NKINDS; k++) {
        if (kb[k] == 0)
            continue;
        uint32_t n = (uint32_t)MIN(kb[k], (uint64_t)HOTSPOT_KIND_HALVE);
        uint32_t old =
            atomic_fetch_add_explicit(&b->kind[k], n, memory_order_relaxed);
        if (old + (uint64_t)n >= HOTSPOT_KIND_HALVE)
            halve = true;
    }
    if (!halve)
        return;
    /* Racing halvings may halve twice: proportions survive, which is all
     * the verdict uses. */
    for (int k = 0; k < HOTSPOT_NKINDS; k++) {
        uint32_t v = atomic_load_explicit(&b->kind[k], memory_order_relaxed);
        atomic_store_explicit(&b->kind[k], v / 2, memory_order_relaxed);
    }
}

/*
 * Walk the write in pieces that stay inside one block and one interleave
 * stripe. A block counts the write once however many pieces fall into it;
 * a DIMM likewise (the `seen` mask).
 */
void
hotspot_record(struct hotspot *h, const void *dst, size_t n)
{
    uintptr_t a = (uintptr_t)dst;

    if (a < h->base || a - h->base >= h->len || n == 0)
        return;
    if (h->cfg.sample_every > 1) {
        if (++hotspot_tick < h->cfg.sample_every)
            return;
        hotspot_tick = 0;
    }
    uint64_t off = a - h->base;
    uint64_t end = MIN(off + n, h->len);
    uint64_t il = h->cfg.interleave;
    uint64_t seen = 0;
    uint64_t last_blk = UINT64_MAX;

    while (off < end) {
        uint64_t stripe = off / il;
        uint64_t blk = off >> HOTSPOT_BLOCK_SHIFT;
        uint64_t stop = MIN(end, (stripe + 1) * il);
        stop = MIN(stop, (blk + 1) << HOTSPOT_BLOCK_SHIFT);
        uint64_t len = stop - off;
        unsigned d = (unsigned)(stripe % h->cfg.dimms);
        struct hotspot_blk *b = &h->blk[blk];

        hotspot_add64(&h->dimm[d].bytes, len);
        if (!(seen & (1ull << d))) {
            seen |= 1ull << d;
            hotspot_add64(&h->dimm[d].writes, 1);
        }
        hotspot_add64(&b->bytes, len);
        if (blk != last_blk) {
            last_blk = blk;
            hotspot_add64(&b->writes, 1);
        }
        uint64_t kb[HOTSPOT_NKINDS] = {0};
        if (h->classify != NULL)
            h->classify(h->classify_arg, off, (size_t)len, kb);
        else
            kb[HOTSPOT_UNKNOWN] = len;
        hotspot_add_kinds(b, kb);
        off = stop;
    }
}

/* The PMEM write hook: feeds the attached tracker. */
static void
hotspot_hook(const void *dst, size_t n)
{
    struct hotspot *h =
        atomic_load_explicit(&hotspot_attached, memory_order_relaxed);

    if (h != NULL)
        hotspot_record(h, dst, n);
}

int
hotspot_attach(struct hotspot *h)
{
    struct hotspot *none = NULL;

    if (!atomic_compare_exchange_strong_explicit(&hotspot_attached, &none, h,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed)) {
        if (none == h)
            return 0;
        err_set("write-hotspot tracking is already on for another cache in "
                "this process (one tracked cache per process)");
        return -EBUSY;
    }
    pm_set_write_hook(hotspot_hook);
    return 0;
}

void
hotspot_detach(struct hotspot *h)
{
    struct hotspot *mine = h;

    if (atomic_compare_exchange_strong_explicit(&hotspot_attached, &mine, NULL,
                                                memory_order_relaxed,
                                                memory_order_relaxed))
        pm_set_write_hook(NULL);
}

void
hotspot_reset(struct hotspot *h)
{
    hotspot_tick = 0;
    for (unsigned d = 0; d < h->cfg.dimms; d++) {
        atomic_store_explicit(&h->dimm[d].bytes, 0, memory_order_relaxed);
        atomic_store_explicit(&h->dimm[d].writes, 0, memory_order_relaxed);
    }
    for (uint64_t i = 0; i < h->nblocks; i++) {
        struct hotspot_blk *b = &h->blk[i];
        /* untouched blocks stay untouched (no DRAM faulted in) */
        if (atomic_load_explicit(&b->writes, memory_order_relaxed) == 0)
            continue;
        atomic_store_explicit(&b->bytes, 0, memory_order_relaxed);
        atomic_store_explicit(&b->writes, 0, memory_order_relaxed);
        for (int k = 0; k < HOTSPOT_NKINDS; k++)
            atomic_store_explicit(&b->kind[k], 0, memory_order_relaxed);
    }
}

unsigned
hotspot_dimm_bytes(const struct hotspot *h, uint64_t *bytes, unsigned max)
{
    for (unsigned d = 0; d < h->cfg.dimms && d < max; d++)
        bytes[d] =
            atomic_load_explicit(&h->dimm[d].bytes, memory_order_relaxed);
    return h->cfg.dimms;
}

unsigned
hotspot_dimm_writes(const struct hotspot *h, uint64_t *writes, unsigned max)
{
    for (unsigned d = 0; d < h->cfg.dimms && d < max; d++)
        writes[d] =
            atomic_load_explicit(&h->dimm[d].writes, memory_order_relaxed);
    return h->cfg.dimms;
}

double
hotspot_skew(const struct hotspot *h)
{
    uint64_t sum = 0, max = 0;

    for (unsigned d = 0; d < h->cfg.dimms; d++) {
        uint64_t v =
            atomic_load_explicit(&h->dimm[d].bytes, memory_order_relaxed);
        sum += v;
        max = MAX(max, v);
    }
    if (sum == 0)
        return 0.0;
    return (double)max * h->cfg.dimms / (double)sum;
}

const struct hotspot_config *
hotspot_config(const struct hotspot *h)
{
    return &h->cfg;
}

uint64_t
hotspot_map_bytes(const struct hotspot *h)
{
    return h->len;
}

/* The block's verdict: the kind holding at least two thirds of its
 * classified bytes, else mixed; unknown when nothing was classified. */
static void
hotspot_verdict(const struct hotspot_blk *b, struct hotspot_block *out)
{
    uint64_t kb[HOTSPOT_NKINDS], sum = 0;
    int best = HOTSPOT_UNKNOWN;

    for (int k = 0; k < HOTSPOT_NKINDS; k++) {
        kb[k] = atomic_load_explicit(&b->kind[k], memory_order_relaxed);
        sum += kb[k];
    }
    for (int k = 0; k < HOTSPOT_NKINDS; k++)
        if (kb[k] > kb[best])
            best = k;
    for (int k = 0; k < HOTSPOT_NKINDS; k++)
        out->pct[k] = sum ? (uint8_t)(kb[k] * 100 / sum) : 0;
    if (sum == 0)
        out->what = HOTSPOT_UNKNOWN;
    else if (kb[best] * 3 >= sum * 2)
        out->what = (enum hotspot_kind)best;
    else
        out->what = HOTSPOT_MIXED;
}

static void
hotspot_fill(const struct hotspot *h, uint64_t index, struct hotspot_block *out)
{
    const struct hotspot_blk *b = &h->blk[index];

    out->index = index;
    out->bytes = atomic_load_explicit(&b->bytes, memory_order_relaxed);
    out->writes = atomic_load_explicit(&b->writes, memory_order_relaxed);
    hotspot_verdict(b, out);
}

unsigned
hotspot_top(const struct hotspot *h, struct hotspot_block *out, unsigned k)
{
    uint64_t idx[HOTSPOT_TOP_MAX], by[HOTSPOT_TOP_MAX];
    unsigned n = 0;

    k = MIN(k, (unsigned)HOTSPOT_TOP_MAX);
    if (k == 0)
        return 0;
    for (uint64_t i = 0; i < h->nblocks; i++) {
        uint64_t v =
            atomic_load_explicit(&h->blk[i].bytes, memory_order_relaxed);
        if (v == 0 || (n == k && v <= by[n - 1]))
            continue;
        /* insertion into the sorted top list; ties keep the lower block */
        unsigned at = n < k ? n++ : k - 1;
        while (at > 0 && by[at - 1] < v) {
            by[at] = by[at - 1];
            idx[at] = idx[at - 1];
            at--;
        }
        by[at] = v;
        idx[at] = i;
    }
    for (unsigned i = 0; i < n; i++)
        hotspot_fill(h, idx[i], &out[i]);
    return n;
}

int
hotspot_dump(const struct hotspot *h, FILE *f)
{
    uint64_t bytes[HOTSPOT_MAX_DIMMS], writes[HOTSPOT_MAX_DIMMS];
    unsigned nd = hotspot_dimm_bytes(h, bytes, HOTSPOT_MAX_DIMMS);

    hotspot_dimm_writes(h, writes, HOTSPOT_MAX_DIMMS);
    fprintf(
        f,
        "# tiercache-hotspot v1 dimms=%u interleave=%" PRIu32
        " block=%u map_bytes=%" PRIu64 " source=tracker sample=%" PRIu32 "\n",
        nd, h->cfg.interleave, HOTSPOT_BLOCK_SIZE, h->len, h->cfg.sample_every);
    fputs("kind,index,bytes,writes,what\n", f);
    for (unsigned d = 0; d < nd; d++)
        fprintf(f, "dimm,%u,%" PRIu64 ",%" PRIu64 ",\n", d, bytes[d],
                writes[d]);
    for (uint64_t i = 0; i < h->nblocks; i++) {
        if (atomic_load_explicit(&h->blk[i].writes, memory_order_relaxed) == 0)
            continue;
        struct hotspot_block b;
        hotspot_fill(h, i, &b);
        fprintf(f, "block,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%s\n", b.index,
                b.bytes, b.writes, hotspot_kind_name(b.what));
    }
    return ferror(f) ? -EIO : 0;
}

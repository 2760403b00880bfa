/*
 * The engine's side of write-hotspot tracking and latency emulation: makes
 * the cache's tracker (tier/hotspot.h) over the pool mapping, attributes
 * each written range to what it holds, and sets the PMEM helpers' latency.
 *
 * Attribution reads the engine's DRAM page info (which slab class, hence
 * which chunk size, a page has) and the head of the written chunk, which the
 * writing thread itself has just written or which is immutable (a published
 * item's header): header, key and tail list count as item_header, the rest
 * of the chunk as item_value, the region header area as region_meta, a
 * page outside any slab class (being formatted) as item_header, and
 * (ablate_meta_in_pmem only) a page's header chunks (alloc/slab_layout.h)
 * as page_meta. It runs only when tracking is on, in the writing thread,
 * after its write.
 *
 * Concurrency: c->hotspot and c->pm_latency are set by cache_open() and
 * cleared by cache_close() (no other thread runs then); the tracker's own
 * rules are in tier/hotspot.c.
 */
#include "src/engine/cache_hotspot.h"

#include "src/base/err.h"
#include "src/engine/item.h"
#include "src/engine/item_layout.h"
#include "tier/hotspot.h"
#include "tier/pm.h"
#include "tier/region.h"

#include <errno.h>

/* Bytes at the start of a chunk that are item metadata. */
static uint64_t
meta_len(const char *chunk)
{
    const struct item_hdr *it = (const struct item_hdr *)chunk;

    /* PMEM reads: the writer's own chunk or a published (immutable) head */
    if (it->kind == ITEM_KIND_TAIL)
        return sizeof(struct item_tail);
    if (it->kind == ITEM_KIND_FLASH) /* header, key and locator: no value */
        return item_flash_size(it->klen, it->iflags);
    if (it->kind != ITEM_KIND_HEAD)
        return sizeof(struct item_hdr);
    uint64_t len = item_hko_size(it->klen, it->iflags);
    if (it->nchain)
        len = ALIGN_UP(len, 8ull) + 8ull * it->nchain;
    return len;
}

static void
classify(void *arg, uint64_t map_off, size_t n,
         uint64_t kind_bytes[HOTSPOT_NKINDS])
{
    struct cache *c = arg;
    uint64_t data0 = (uint64_t)(c->base - (char *)region_map_base(c->region));

    /* blocks never straddle data0 (1 MiB aligned) */
    if (map_off < data0) {
        kind_bytes[HOTSPOT_REGION_META] += n;
        return;
    }
    uint64_t d = map_off - data0;
    unsigned cls = slab_class_of(c->slab, d);
    if (cls == SLAB_NO_CLASS) {
        /* a page is formatted (each chunk's kind byte written) before it
         * joins its class; nothing else writes a page outside a class
         * (but the ablation's header line of a page just drained) */
        kind_bytes[HOTSPOT_ITEM_HEADER] += n;
        return;
    }
    uint64_t size = slab_chunk_size(c->slab, cls);
    uint64_t page = d & ~(uint64_t)(POOL_PAGE_SIZE - 1);
    uint64_t in = d - page;
    uint64_t perpage = POOL_PAGE_SIZE / size;
    /* ablation (ablate_meta_in_pmem): the page info header; 0 otherwise */
    uint64_t hdr = (uint64_t)slab_reserved(c->slab, cls) * size;

    if (unlikely(in < hdr)) {
        uint64_t m = MIN((uint64_t)n, hdr - in);
        kind_bytes[HOTSPOT_PAGE_META] += m;
        in += m;
        n -= m;
    }
    while (n > 0) {
        uint64_t ci = in / size;
        if (ci >= perpage) { /* the page's slack after its last chunk */
            kind_bytes[HOTSPOT_UNKNOWN] += n;
            return;
        }
        uint64_t pos = in - ci * size;
        uint64_t piece = MIN((uint64_t)n, size - pos);
        uint64_t meta = meta_len(c->base + page + ci * size);
        uint64_t m = pos < meta ? MIN(piece, meta - pos) : 0;

        kind_bytes[HOTSPOT_ITEM_HEADER] += m;
        kind_bytes[HOTSPOT_ITEM_VALUE] += piece - m;
        in += piece;
        n -= piece;
    }
}

int
cache_hotspot_open(struct cache *c)
{
    const struct tc_config *cfg = &c->cfg;

    if (cfg->hotspot_dimms) {
        struct hotspot_config hc;
        hotspot_config_init(&hc);
        hc.dimms = cfg->hotspot_dimms;
        if (cfg->hotspot_interleave)
            hc.interleave = cfg->hotspot_interleave;
        if (cfg->hotspot_sample)
            hc.sample_every = cfg->hotspot_sample;
        int rc = hotspot_create(&hc, region_map_base(c->region),
                                region_map_len(c->region), &c->hotspot);
        if (rc)
            return rc;
        hotspot_set_classifier(c->hotspot, classify, c);
        rc = hotspot_attach(c->hotspot);
        if (rc) {
            hotspot_destroy(c->hotspot);
            c->hotspot = NULL;
            return rc;
        }
    }
    if (cfg->pm_write_ns || cfg->pm_read_ns) {
        pm_set_latency(cfg->pm_write_ns, cfg->pm_read_ns);
        c->pm_latency = true;
    }
    return 0;
}

void
cache_hotspot_close(struct cache *c)
{
    if (c->pm_latency) {
        pm_set_latency(0, 0);
        c->pm_latency = false;
    }
    hotspot_destroy(c->hotspot);
    c->hotspot = NULL;
}

/*
 * tc_check(): the invariant walk of a cache that no writer is changing —
 * every index entry names a live item (slab chunk, DRAM item or packed
 * item) where its key hashes, and the items the walk counts are what the
 * stats say. No shared state of its own; it reads under the index's RCU.
 */
#include "src/engine/cache_check.h"

#include "src/base/err.h"
#include "src/engine/cache_packed.h"
#include "src/engine/pitem.h"
#include "tier/dpool.h"
#include "tier/nvs.h"

#include <errno.h>

struct check_walk {
    struct cache *c;
    uint64_t items;
    uint64_t bytes;
    uint64_t hot; /* of which in the DRAM hot pool */
    uint64_t ext_items, ext_bytes;
};

/* A packed entry: a committed item in a segment, found by its key (or a
 * copy between its publication and its commit: pending). */
static int
check_packed(struct check_walk *w, uint64_t loc, uint64_t off)
{
    struct cache *c = w->c;
    struct pitem_view v;
    uint64_t poff = cache_packed_pool(off);
    if (!c->seg || poff >= (uint64_t)pool_npages(c->pool) << POOL_PAGE_SHIFT ||
        cache_packed_view(c, off, &v) != 0 || v.commit < PITEM_COMMIT_PENDING) {
        err_set("index entry names no committed packed item at offset %llu",
                (unsigned long long)poff);
        return -EFAULT;
    }
    struct cache_key k = {c, v.key, v.klen};
    cache_read_lock();
    uint64_t found = htab_lookup_rcu(c->htab, cache_hash(c, k.key, k.klen),
                                     cache_match_key, &k);
    cache_read_unlock();
    if ((found & ~CACHE_LOC_PBITS) != (loc & ~CACHE_LOC_PBITS)) {
        err_set("packed item at offset %llu is not where its key hashes",
                (unsigned long long)poff);
        return -EFAULT;
    }
    w->items++;
    w->bytes += v.size;
    return 0;
}

static int
check_entry(void *arg, uint64_t loc)
{
    struct check_walk *w = arg;
    struct cache *c = w->c;
    uint64_t off = cache_off(loc);

    if (cache_off_packed(off))
        return check_packed(w, loc, off);
    if (cache_off_dram(off)) {
        if (!c->dram || !(atomic_load_explicit(dpool_flags(cache_dram_ptr(off)),
                                               memory_order_acquire) &
                          HOT_WRITTEN)) {
            err_set("index entry names a DRAM item that is not written");
            return -EFAULT;
        }
        w->hot++;
    } else if (off >= (uint64_t)pool_npages(c->pool) << POOL_PAGE_SHIFT ||
               slab_class_of(c->slab, off) == SLAB_NO_CLASS) {
        err_set("index entry points at offset %llu outside any slab page",
                (unsigned long long)off);
        return -EFAULT;
    }
    const struct item_hdr *it = cache_item_at(c, off);
    if (!item_kind_is_head(it->kind) || it->klen == 0 ||
        it->klen > TC_KEY_MAX) {
        err_set("index entry at offset %llu holds no item (kind %#x)",
                (unsigned long long)off, it->kind);
        return -EFAULT;
    }
    struct cache_key k = {c, item_key(it), it->klen};
    cache_read_lock();
    uint64_t found = htab_lookup_rcu(c->htab, cache_hash(c, k.key, k.klen),
                                     cache_match_key, &k);
    cache_read_unlock();
    if (found != loc) {
        err_set("item at offset %llu is not where its key hashes",
                (unsigned long long)off);
        return -EFAULT;
    }
    if (it->kind == ITEM_KIND_FLASH) {
        const struct nvs_loc *nl = item_flash_loc(it);
        uint32_t size = slab_chunk_size(c->slab, slab_class_of(c->slab, off));
        if (!c->nvs || nl->vlen != it->vlen || it->nchain ||
            item_flash_size(it->klen, it->iflags) > size) {
            err_set("flash item at offset %llu is inconsistent (value %u "
                    "bytes, locator %u, chunk %u)",
                    (unsigned long long)off, it->vlen, nl->vlen, size);
            return -EFAULT;
        }
        w->ext_items++;
        w->ext_bytes += it->vlen;
    }
    w->items++;
    w->bytes += cache_item_bytes(c, it);
    return 0;
}

int
cache_check(struct cache *c)
{
    struct check_walk w = {c, 0, 0, 0, 0, 0};
    int64_t s[ST_COUNT];

    if (!cache_thread_get(c))
        return -ENOMEM;
    int rc = htab_foreach(c->htab, check_entry, &w);
    if (rc)
        return rc;
    cache_stats_sum(c, s);
    if ((int64_t)w.items != s[ST_CURR_ITEMS] ||
        (int64_t)w.bytes != s[ST_BYTES]) {
        err_set("index holds %llu items of %llu bytes, stats say %lld of "
                "%lld",
                (unsigned long long)w.items, (unsigned long long)w.bytes,
                (long long)s[ST_CURR_ITEMS], (long long)s[ST_BYTES]);
        return -EFAULT;
    }
    if ((int64_t)w.hot != s[ST_HOT_ITEMS]) {
        err_set("index holds %llu DRAM items, stats say %lld",
                (unsigned long long)w.hot, (long long)s[ST_HOT_ITEMS]);
        return -EFAULT;
    }
    if ((int64_t)w.ext_items != s[ST_EXT_ITEMS] ||
        (int64_t)w.ext_bytes != s[ST_EXT_BYTES]) {
        err_set("index holds %llu flash items of %llu value bytes, stats say "
                "%lld of %lld",
                (unsigned long long)w.ext_items,
                (unsigned long long)w.ext_bytes, (long long)s[ST_EXT_ITEMS],
                (long long)s[ST_EXT_BYTES]);
        return -EFAULT;
    }
    return slab_check(c->slab);
}

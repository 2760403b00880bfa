/*
 * The saved index: written at a clean close, read back at the next open so
 * that a clean restart does not scan the pool (src/engine/restart_save.h).
 *
 * Concurrency: none of its own; the save runs in cache_close after every
 * thread context is gone, the load at open before the cache is shared. The
 * index bucket locks are taken only because the index's functions expect
 * them; no PMEM write happens inside one.
 */
#include "src/engine/restart_save.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/engine/restart_save_layout.h"
#include "tier/pm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- the body's checksum: four independent lanes, so it runs at memory
 * speed; each step is a bijection of a lane for a fixed word, so one
 * changed word always changes its lane --- */

#define SUM_K1 0x9fb21c651e98df25ull
#define SUM_K2 0xc2b2ae3d27d4eb4full

struct sum {
    uint64_t lane[4];
    uint64_t n; /* words so far */
};

static inline uint64_t
sum_step(uint64_t a, uint64_t w)
{
    a ^= w * SUM_K1;
    a = (a << 29) | (a >> 35);
    return a * SUM_K2;
}

static void
sum_words(struct sum *s, const uint64_t *w, size_t n)
{
    size_t i = 0;
    for (; i < n && (s->n & 3); i++, s->n++)
        s->lane[s->n & 3] = sum_step(s->lane[s->n & 3], w[i]);
    uint64_t a = s->lane[0], b = s->lane[1], c = s->lane[2], d = s->lane[3];
    for (; i + 4 <= n; i += 4) {
        a = sum_step(a, w[i]);
        b = sum_step(b, w[i + 1]);
        c = sum_step(c, w[i + 2]);
        d = sum_step(d, w[i + 3]);
        s->n += 4;
    }
    s->lane[0] = a, s->lane[1] = b, s->lane[2] = c, s->lane[3] = d;
    for (; i < n; i++, s->n++)
        s->lane[s->n & 3] = sum_step(s->lane[s->n & 3], w[i]);
}

static uint64_t
sum_final(const struct sum *s)
{
    return hash_bytes(s->lane, sizeof(s->lane), s->n);
}

static uint64_t
hdr_sum(const struct restart_saved_hdr *h)
{
    return hash_bytes(h, offsetof(struct restart_saved_hdr, hdr_sum),
                      RESTART_SAVED_MAGIC);
}

static const struct region_header *
pool_hdr(const struct cache *c)
{
    return region_map_base(c->region);
}

void
restart_save_discard(const struct cache *c)
{
    if (c->cfg.restart_file && unlink(c->cfg.restart_file) == 0)
        log_info("pool %s: saved index %s removed: this start does not use "
                 "it",
                 region_path(c->region), c->cfg.restart_file);
}

/* --- save --- */

#define WBUF_WORDS (1u << 17) /* 1 MiB */

struct wbuf {
    int fd;
    int err; /* first write error, a positive errno */
    size_t n;
    uint64_t words;
    struct sum sum;
    uint64_t buf[WBUF_WORDS];
};

static void
wbuf_flush(struct wbuf *w)
{
    sum_words(&w->sum, w->buf, w->n);
    w->words += w->n;
    const char *p = (const char *)w->buf;
    size_t left = w->n * sizeof(uint64_t);
    w->n = 0;
    while (left && !w->err) {
        ssize_t k = write(w->fd, p, left);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            w->err = k < 0 ? errno : EIO;
            break;
        }
        p += k;
        left -= (size_t)k;
    }
}

static void
wbuf_put(struct wbuf *w, const uint64_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        w->buf[w->n++] = v[i];
        if (w->n == WBUF_WORDS)
            wbuf_flush(w);
    }
}

/* Every PMEM entry of the index, bucket by bucket (a DRAM item of the hot
 * pool is gone with it: it is not saved). */
static uint64_t
save_entries(struct cache *c, struct wbuf *w)
{
    uint64_t rec[1 + RESTART_SAVED_RUN];
    /* bucket numbers are of one table: end a doubling under way */
    htab_grow_finish(c->htab);
    uint64_t nb = htab_nbuckets(c->htab), entries = 0;
    for (uint64_t i = 0; i < nb; i++) {
        /* a hash of i has home bucket i */
        struct htab_bucket *home = htab_lock(c->htab, i);
        unsigned n = 0;
        for (struct htab_bucket *b = home; b;
             b = atomic_load_explicit(&b->next, memory_order_acquire)) {
            for (unsigned s = 0; s < HTAB_SLOTS; s++) {
                uint64_t v =
                    atomic_load_explicit(&b->slot[s], memory_order_relaxed);
                if (!v || cache_off_dram(cache_off(htab_slot_loc(v))))
                    continue;
                rec[1 + n++] = v;
                if (n == RESTART_SAVED_RUN) {
                    rec[0] = i << 8 | n;
                    wbuf_put(w, rec, 1 + n);
                    entries += n;
                    n = 0;
                }
            }
        }
        htab_unlock(home);
        if (n) {
            rec[0] = i << 8 | n;
            wbuf_put(w, rec, 1 + n);
            entries += n;
        }
    }
    return entries;
}

/* The header, written last at offset 0 over the zeros left for it. */
static int
save_header(struct cache *c, struct wbuf *w, uint64_t entries)
{
    const struct region_header *rh = pool_hdr(c);
    struct restart_saved_hdr h;
    memset(&h, 0, sizeof(h));
    h.magic = RESTART_SAVED_MAGIC;
    h.version = RESTART_SAVED_VERSION;
    h.hdr_bytes = sizeof(h);
    h.body_words = w->words;
    h.entries = entries;
    h.nbuckets = htab_nbuckets(c->htab);
    h.hash_seed = c->hash_seed;
    h.cas_seq = atomic_load_explicit(&c->cas_seq, memory_order_relaxed);
    h.pool_created = rh->created_unix;
    h.pool_opens = rh->open_count;
    h.pool_bytes = rh->file_size;
    memcpy(&h.meta, region_user(c->region), sizeof(h.meta));
    h.body_sum = sum_final(&w->sum);
    h.hdr_sum = hdr_sum(&h);
    if (pwrite(w->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
        return errno ? errno : EIO;
    return 0;
}

/* Write the file under a temporary name, sync it, rename it into place:
 * a crash while saving leaves no file a start could take for whole (and
 * the pool is not marked clean then anyway). */
static void
save_close(struct cache *c)
{
    const char *path = c->cfg.restart_file;
    if (!path || c->cfg.ablate_meta_in_pmem || c->cfg.ablate_init_in_lock)
        return;
    uint64_t t0 = clock_nsec();
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
        log_warn("pool %s: cannot save the index: the path %s is too long; "
                 "the next start scans the pool",
                 region_path(c->region), path);
        return;
    }
    struct wbuf *w = malloc(sizeof(*w));
    if (!w) {
        log_warn("pool %s: no DRAM to save the index; the next start scans "
                 "the pool",
                 region_path(c->region));
        return;
    }
    memset(&w->sum, 0, sizeof(w->sum));
    w->err = 0;
    w->n = 0;
    w->words = 0;
    w->fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (w->fd < 0) {
        w->err = errno;
    } else if (lseek(w->fd, sizeof(struct restart_saved_hdr), SEEK_SET) < 0) {
        w->err = errno;
    }
    uint64_t entries = 0;
    if (!w->err) {
        entries = save_entries(c, w);
        wbuf_flush(w);
    }
    if (!w->err)
        w->err = save_header(c, w, entries);
    if (!w->err && fdatasync(w->fd) != 0)
        w->err = errno;
    if (w->fd >= 0 && close(w->fd) != 0 && !w->err)
        w->err = errno;
    if (!w->err && rename(tmp, path) != 0)
        w->err = errno;
    if (w->err) {
        log_warn("pool %s: cannot save the index to %s: %s; the next start "
                 "scans the pool",
                 region_path(c->region), path, strerror(w->err));
        unlink(tmp);
    } else {
        log_info("pool %s: index saved to %s: %llu entries, %llu bytes in "
                 "%.3f s",
                 region_path(c->region), path, (unsigned long long)entries,
                 (unsigned long long)(sizeof(struct restart_saved_hdr) +
                                      w->words * sizeof(uint64_t)),
                 (double)(clock_nsec() - t0) / 1e9);
    }
    free(w);
}

int
restart_save_register(struct cache *c)
{
    static const struct cache_module m = {.close = save_close};
    return cache_add_module(c, &m);
}

/* --- load --- */

struct load {
    struct cache *c;
    struct tc_open_info *info;
    uint32_t now;
    bool all_flushed;
    uint64_t flush_cas;
    const uint8_t *table;
    uint32_t npages;
    uint32_t limit; /* pages the memory limit allows */
    uint32_t words; /* bitmap words per page */
    unsigned nclasses;
    uint32_t cs[SLAB_MAX_CLASSES];  /* chunk size per class */
    uint64_t mul[SLAB_MAX_CLASSES]; /* ceil(2^40 / chunk size) */
    struct restart_saved_hdr h;
    const uint64_t *body; /* h.body_words, in the file's mapping or read */
    void *map;            /* the file's mapping, map_len bytes, or NULL */
    size_t map_len;
    uint64_t **head;   /* per page: the heads the entries name, or NULL */
    uint64_t **used;   /* per page: the chunks restored items hold, or NULL */
    const char *why;   /* why the file is not used */
    uint64_t ndropped; /* entries pass 2 dropped */
};

/* The body read into DRAM: 0 with l->body set, or NULL when the file
 * cannot be read; -ENOMEM. */
static int
load_body_read(struct load *l, int fd)
{
    const struct restart_saved_hdr *h = &l->h;
    uint64_t *body = malloc(h->body_words ? h->body_words * 8 : 8);
    if (!body) {
        err_set("no DRAM for the saved index (%llu bytes)",
                (unsigned long long)h->body_words * 8);
        return -ENOMEM;
    }
    char *p = (char *)body;
    uint64_t left = h->body_words * 8, at = sizeof(*h);
    while (left) {
        ssize_t k =
            pread(fd, p, left > (1u << 30) ? (1u << 30) : left, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            free(body);
            return 0;
        }
        p += k;
        at += (uint64_t)k;
        left -= (uint64_t)k;
    }
    l->body = body;
    return 0;
}

/* Read the whole file and check it against this pool and cache. */
static int
load_read(struct load *l, int fd)
{
    struct cache *c = l->c;
    const struct region_header *rh = pool_hdr(c);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(l->h) ||
        pread(fd, &l->h, sizeof(l->h), 0) != (ssize_t)sizeof(l->h)) {
        l->why = "it is shorter than its header";
        return 0;
    }
    const struct restart_saved_hdr *h = &l->h;
    if (h->magic != RESTART_SAVED_MAGIC ||
        h->version != RESTART_SAVED_VERSION || h->hdr_bytes != sizeof(*h) ||
        h->hdr_sum != hdr_sum(h)) {
        l->why = "its header fails its check";
        return 0;
    }
    if (h->body_words > ((uint64_t)st.st_size - sizeof(*h)) / 8 ||
        (uint64_t)st.st_size != sizeof(*h) + h->body_words * 8) {
        l->why = "its size is not what its header says (truncated?)";
        return 0;
    }
    if (h->pool_created != rh->created_unix ||
        h->pool_opens + 1 != rh->open_count || h->pool_bytes != rh->file_size ||
        memcmp(&h->meta, region_user(c->region), sizeof(h->meta)) != 0) {
        l->why = "it was not written by this pool's last clean close";
        return 0;
    }
    /* the index takes the saved size: entries go back into the buckets
     * they came from (it is still empty here) */
    if (htab_resize_empty(c->htab, h->nbuckets) != 0) {
        l->why = "the index cannot take its saved size";
        return 0;
    }
    /* Mapped: on tmpfs the file's own pages, neither copied nor zeroed
     * first (a read into fresh memory costs both, hundreds of MB at tens
     * of millions of items); read when it cannot be mapped. */
    l->map = mmap(NULL, (size_t)st.st_size, PROT_READ,
                  MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (l->map != MAP_FAILED) {
        l->map_len = (size_t)st.st_size;
        l->body = (const uint64_t *)((const char *)l->map + sizeof(*h));
        (void)madvise(l->map, l->map_len, MADV_SEQUENTIAL);
    } else {
        l->map = NULL;
        if (load_body_read(l, fd) != 0)
            return -ENOMEM;
        if (!l->body) {
            l->why = "it cannot be read";
            return 0;
        }
    }
    struct sum s = {{0}, 0};
    sum_words(&s, l->body, h->body_words);
    if (sum_final(&s) != h->body_sum) {
        l->why = "its contents fail their checksum";
        return 0;
    }
    return 1;
}

/* A chunk: its page, its index in the page, its size. */
struct chunk {
    uint32_t pg;
    uint32_t idx;
    uint32_t cs;
};

/* The chunk at off, when its page is in the pool and the memory limit and
 * has a class, and off is a chunk boundary of it; else false. The index
 * by a multiply (exact: offsets and sizes are below 2^20). */
static bool
chunk_at(const struct load *l, uint64_t off, struct chunk *ch)
{
    uint64_t pg = off >> POOL_PAGE_SHIFT;
    if (pg >= l->npages || pg >= l->limit ||
        l->table[pg] == RESTART_PAGE_NONE || l->table[pg] > l->nclasses)
        return false;
    unsigned cls = l->table[pg] - 1u;
    uint64_t in = off & (POOL_PAGE_SIZE - 1);
    uint32_t q = (uint32_t)((in * l->mul[cls]) >> 40);
    ch->pg = (uint32_t)pg;
    ch->idx = q;
    ch->cs = l->cs[cls];
    return in == (uint64_t)q * ch->cs && in + ch->cs <= POOL_PAGE_SIZE;
}

/* Set the chunk's bit in map: 1, 0 when it was set already (l->why), or
 * -ENOMEM. */
static int
bit_set(struct load *l, uint64_t **map, const struct chunk *ch)
{
    uint64_t *m = map[ch->pg];
    if (!m) {
        m = map[ch->pg] = calloc(l->words, sizeof(uint64_t));
        if (!m) {
            err_set("no DRAM for the saved index's chunk maps");
            return -ENOMEM;
        }
    }
    uint64_t bit = 1ull << (ch->idx % 64);
    if (m[ch->idx / 64] & bit) {
        l->why = "two entries name one chunk";
        return 0;
    }
    m[ch->idx / 64] |= bit;
    return 1;
}

static bool
bit_test(uint64_t *const *map, const struct chunk *ch)
{
    const uint64_t *m = map[ch->pg];
    return m && (m[ch->idx / 64] >> (ch->idx % 64) & 1);
}

static void
bit_clear(uint64_t **map, const struct chunk *ch)
{
    if (map[ch->pg])
        map[ch->pg][ch->idx / 64] &= ~(1ull << (ch->idx % 64));
}

/* How many words ahead pass 1 fetches the chunk map word an entry will
 * set: the entries are in bucket order, so their pages are random, and
 * the maps of a large pool (8 GiB: 8,192 maps of up to 2.7 KB) are far
 * bigger than the caches. */
#define MARK_AHEAD 16

/* Fetch the head map word the entry in word w would set, when it names a
 * page whose map exists (w may be a record's first word: then it fetches
 * some word, harmlessly). */
static inline void
mark_prefetch(const struct load *l, uint64_t w)
{
    uint64_t off = cache_off(htab_slot_loc(w));
    uint64_t pg = off >> POOL_PAGE_SHIFT;
    if (pg >= l->npages || !l->head[pg] || l->table[pg] == RESTART_PAGE_NONE ||
        l->table[pg] > l->nclasses)
        return;
    uint64_t in = off & (POOL_PAGE_SIZE - 1);
    uint32_t q = (uint32_t)((in * l->mul[l->table[pg] - 1u]) >> 40);
    if (q / 64 < l->words)
        __builtin_prefetch(&l->head[pg][q / 64], 1);
}

/* Pass 1: every record in bounds, every entry a chunk of a page with a
 * class, no chunk named twice. Marks the heads. No side effects. */
static int
load_entries(struct load *l)
{
    const uint64_t *w = l->body, *end = l->body + l->h.body_words;
    uint64_t entries = 0;
    for (const uint64_t *a = w; a < end && a < w + MARK_AHEAD; a++)
        mark_prefetch(l, *a);
    while (w < end) {
        uint64_t bucket = *w >> 8;
        unsigned n = (unsigned)(*w & 0xff);
        if (!n || bucket >= l->h.nbuckets || (uint64_t)(end - w - 1) < n) {
            l->why = "a record of it is out of bounds";
            return 0;
        }
        for (unsigned k = 1; k <= n; k++) {
            if (end - (w + k) > MARK_AHEAD)
                mark_prefetch(l, w[k + MARK_AHEAD]);
            uint64_t loc = htab_slot_loc(w[k]);
            uint64_t off = loc ? cache_off(loc) : 0;
            struct chunk ch;
            if (!loc || cache_off_dram(off) || !chunk_at(l, off, &ch)) {
                l->why = "an entry is not a chunk of this pool's pages";
                return 0;
            }
            int rc = bit_set(l, l->head, &ch);
            if (rc <= 0)
                return rc;
        }
        entries += n;
        w += 1 + n;
    }
    if (entries != l->h.entries) {
        l->why = "it holds another number of entries than its header says";
        return 0;
    }
    return 1;
}

/* Whether a chained item's tails are all there, each a chunk of a page
 * with a class naming this head, not a head itself. */
static int
load_tails(struct load *l, const struct item_hdr *it, uint64_t head)
{
    const uint64_t *tails = item_tails(it);
    for (unsigned i = 0; i < it->nchain; i++) {
        uint64_t t = tails[i];
        struct chunk ch;
        if (t >= region_data_size(l->c->region) || (t & 7) ||
            !chunk_at(l, t, &ch) ||
            ((const struct item_tail *)(l->c->base + t))->kind !=
                ITEM_KIND_TAIL ||
            ((const struct item_tail *)(l->c->base + t))->head != head ||
            bit_test(l->head, &ch)) {
            l->why = "an entry's item has a tail that is not there";
            return 0;
        }
    }
    for (unsigned i = 0; i < it->nchain; i++) {
        struct chunk ch;
        chunk_at(l, tails[i], &ch);
        int rc = bit_set(l, l->used, &ch);
        if (rc <= 0)
            return rc;
    }
    return 1;
}

/* Pass 2, page by page (the heads in address order): every entry names a
 * committed item; the expired and flushed ones, and flash ones without a
 * flash tier now, are to be dropped
 * (their head bit cleared), the others hold their chunks. Reads PMEM
 * only. */
static int
load_items(struct load *l)
{
    struct cache *c = l->c;
    for (uint32_t pg = 0; pg < l->npages; pg++) {
        if (!l->head[pg])
            continue;
        uint32_t cs = slab_chunk_size(c->slab, l->table[pg] - 1u);
        for (uint32_t wi = 0; wi < l->words; wi++) {
            uint64_t bits = l->head[pg][wi];
            while (bits) {
                uint32_t i = wi * 64 + (uint32_t)__builtin_ctzll(bits);
                bits &= bits - 1;
                uint64_t off =
                    ((uint64_t)pg << POOL_PAGE_SHIFT) + (uint64_t)i * cs;
                const struct item_hdr *it = item_at(c->base, off);
                if (!item_kind_is_head(it->kind) || !item_check(it, cs)) {
                    l->why = "an entry names no committed item";
                    return 0;
                }
                uint64_t *drop = NULL;
                if (it->kind == ITEM_KIND_FLASH && !c->cfg.ext_npaths)
                    drop = &l->info->dropped_flash; /* no flash tier now */
                else if (it->exptime != 0 && it->exptime <= l->now)
                    drop = &l->info->dropped_expired;
                else if (l->all_flushed || it->cas <= l->flush_cas)
                    drop = &l->info->dropped_flushed;
                if (drop) {
                    (*drop)++;
                    l->ndropped++;
                    l->head[pg][wi] &= ~(1ull << (i % 64));
                    continue;
                }
                struct chunk ch = {pg, i, cs};
                int rc = bit_set(l, l->used, &ch);
                if (rc > 0 && it->nchain)
                    rc = load_tails(l, it, off);
                if (rc <= 0)
                    return rc;
            }
        }
    }
    return 1;
}

/* An item that cannot go into the index after all: its chunks free, its
 * commit word cleared. */
static void
load_drop(struct load *l, uint64_t off, const struct chunk *head)
{
    const struct item_hdr *it = item_at(l->c->base, off);
    for (unsigned i = 0; i < it->nchain; i++) {
        struct chunk ch;
        chunk_at(l, item_tails(it)[i], &ch);
        bit_clear(l->used, &ch);
    }
    bit_clear(l->used, head);
    bit_clear(l->head, head);
    item_invalidate(l->c->base, off);
}

/* Pass 3: the entries into the index (the dropped ones invalidated). PMEM:
 * invalidations, outside the bucket lock. */
static void
load_index(struct load *l)
{
    struct cache *c = l->c;
    const uint64_t *w = l->body, *end = l->body + l->h.body_words;
    while (w < end) {
        uint64_t bucket = *w >> 8;
        unsigned n = (unsigned)(*w & 0xff);
        /* entries not inserted: 2k (dropped in pass 2) or 2k + 1 (no room
         * in the index), invalidated once the lock is dropped */
        unsigned out[RESTART_SAVED_RUN], nout = 0;
        /* a record's entries share their home bucket: one lock for all */
        struct htab_bucket *b = htab_lock(c->htab, bucket);
        for (unsigned k = 1; k <= n; k++) {
            uint64_t loc = htab_slot_loc(w[k]);
            struct chunk ch;
            /* the usual case drops nothing: no look at the chunk maps */
            if (l->ndropped && chunk_at(l, cache_off(loc), &ch) &&
                !bit_test(l->head, &ch)) {
                out[nout++] = 2 * k;
                continue;
            }
            /* the saved tag over the home bucket's number: the hash bits
             * the index looks at */
            uint64_t hash = (w[k] & ~HTAB_LOC_MASK) | bucket;
            if (htab_insert_locked(c->htab, b, hash, loc) != 0)
                out[nout++] = 2 * k + 1;
        }
        htab_unlock(b);
        for (unsigned i = 0; i < nout; i++) {
            uint64_t off = cache_off(htab_slot_loc(w[out[i] / 2]));
            struct chunk ch;
            chunk_at(l, off, &ch);
            if (out[i] & 1) {
                l->info->dropped_no_room++;
                load_drop(l, off, &ch);
            } else {
                item_invalidate(c->base, off);
            }
        }
        w += 1 + n;
    }
}

/* Pass 4: pages to their classes with their chunks in use, the others
 * back to the pool; then each restored item's DRAM chunk word and
 * accounting, as if just stored. */
static int
load_slabs(struct load *l)
{
    struct cache *c = l->c;
    uint8_t *table = region_page_table(c->region, &l->npages);
    for (uint32_t pg = 0; pg < l->npages; pg++) {
        if (table[pg] == RESTART_PAGE_NONE)
            continue;
        if (!l->used[pg] || pg >= l->limit ||
            table[pg] > slab_nclasses(c->slab)) {
            uint8_t none = RESTART_PAGE_NONE;
            pm_copy(&table[pg], &none, 1);
            continue;
        }
        int rc = slab_adopt_page(c->slab, pg, table[pg] - 1u, l->used[pg]);
        if (rc) {
            err_set("saved index: page %u cannot join its class: %s", pg,
                    strerror(-rc));
            return rc;
        }
    }
    struct cache_thread *t = cache_thread_get(c);
    if (!t) {
        err_set("no DRAM for a thread context");
        return -ENOMEM;
    }
    for (uint32_t pg = 0; pg < l->npages; pg++) {
        if (!l->head[pg] || table[pg] == RESTART_PAGE_NONE)
            continue; /* nothing, or only dropped items, here */
        uint32_t cs = slab_chunk_size(c->slab, table[pg] - 1u);
        for (uint32_t wi = 0; wi < l->words; wi++) {
            uint64_t bits = l->head[pg][wi];
            while (bits) {
                uint32_t i = wi * 64 + (uint32_t)__builtin_ctzll(bits);
                bits &= bits - 1;
                uint64_t off =
                    ((uint64_t)pg << POOL_PAGE_SHIFT) + (uint64_t)i * cs;
                cache_fresh(c, off, l->now, 0);
                cache_account(t, off, 1);
                l->info->items++;
                l->info->bytes += cache_item_bytes(c, item_at(c->base, off));
            }
        }
    }
    return 0;
}

/* The CAS counter where the close left it, the flush state carried over
 * (a delayed flush that came due while stopped flushed every item). */
static void
load_counters(struct load *l)
{
    struct cache *c = l->c;
    const struct restart_meta *m = region_user(c->region);
    atomic_store_explicit(&c->cas_seq, l->h.cas_seq, memory_order_relaxed);
    if (l->all_flushed) {
        atomic_store_explicit(&c->flush_cas, l->h.cas_seq,
                              memory_order_relaxed);
        atomic_store_explicit(&c->flush_at, 0, memory_order_relaxed);
    } else {
        atomic_store_explicit(&c->flush_cas, m->flush_cas,
                              memory_order_relaxed);
        atomic_store_explicit(&c->flush_at, m->flush_at, memory_order_relaxed);
    }
    cache_flush_persist(c);
    pm_fence();
}

static void
load_free(struct load *l)
{
    for (uint32_t pg = 0; pg < l->npages; pg++) {
        if (l->head)
            free(l->head[pg]);
        if (l->used)
            free(l->used[pg]);
    }
    free(l->head);
    free(l->used);
    if (l->map)
        munmap(l->map, l->map_len);
    else
        free((void *)l->body);
}

/* Passes 1 and 2: 1 when the file can be used, 0 when not (l->why), or a
 * negative errno. */
static int
load_check(struct load *l, int fd)
{
    int rc = load_read(l, fd);
    if (rc <= 0)
        return rc;
    l->head = calloc(l->npages, sizeof(*l->head));
    l->used = calloc(l->npages, sizeof(*l->used));
    if (!l->head || !l->used) {
        err_set("no DRAM for the saved index's page maps");
        return -ENOMEM;
    }
    rc = load_entries(l);
    return rc > 0 ? load_items(l) : rc;
}

int
restart_save_load(struct cache *c, struct tc_open_info *info, uint32_t now)
{
    const char *path = c->cfg.restart_file;
    if (!path) {
        snprintf(info->reason, sizeof(info->reason),
                 "scanned: no saved index configured");
        return 0;
    }
    uint64_t t0 = clock_nsec();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(info->reason, sizeof(info->reason),
                 "scanned: no saved index (%s)", strerror(errno));
        log_info("pool %s: no saved index %s (%s): scanning the pool",
                 region_path(c->region), path, strerror(errno));
        return 0;
    }
    const struct restart_meta *m = region_user(c->region);
    struct load l = {
        .c = c,
        .info = info,
        .now = now,
        .flush_cas = m->flush_cas,
        .all_flushed = m->flush_at != 0 && m->flush_at <= now,
        .limit = pool_limit(c->pool),
        .words = (POOL_PAGE_SIZE / slab_chunk_size(c->slab, 0) + 63) / 64,
    };
    l.table = region_page_table(c->region, &l.npages);
    l.nclasses = slab_nclasses(c->slab);
    for (unsigned k = 0; k < l.nclasses; k++) {
        l.cs[k] = slab_chunk_size(c->slab, k);
        l.mul[k] = ((1ull << 40) + l.cs[k] - 1) / l.cs[k];
    }
    int rc = load_check(&l, fd);
    close(fd);
    /* used once: whatever happens next, a later start must not see it */
    unlink(path);
    if (rc == 0) {
        info->dropped_flash = info->dropped_expired = 0;
        info->dropped_flushed = 0;
        snprintf(info->reason, sizeof(info->reason),
                 "scanned: the saved index failed a check");
        log_warn("pool %s: saved index %s not used: %s; scanning the pool "
                 "instead",
                 region_path(c->region), path, l.why);
    }
    if (rc <= 0) {
        load_free(&l);
        return rc;
    }
    uint64_t t1 = clock_nsec();
    c->hash_seed = l.h.hash_seed; /* before any hash: the saved tags */
    load_index(&l);
    uint64_t t2 = clock_nsec();
    rc = load_slabs(&l);
    uint64_t t3 = clock_nsec();
    load_free(&l);
    if (rc)
        return rc;
    load_counters(&l);
    info->dropped = info->dropped_expired + info->dropped_flushed +
                    info->dropped_flash + info->dropped_no_room;
    info->seconds = (double)(clock_nsec() - t0) / 1e9;
    snprintf(info->reason, sizeof(info->reason), "from the saved index");
    log_info("pool %s: warm start from the saved index %s: %llu items "
             "(%llu bytes) restored in %.3f s (checks %.3f, index %.3f, "
             "pages %.3f); dropped %llu (expired %llu, flushed %llu, on "
             "flash %llu, no index room %llu)",
             region_path(c->region), path, (unsigned long long)info->items,
             (unsigned long long)info->bytes, info->seconds,
             (double)(t1 - t0) / 1e9, (double)(t2 - t1) / 1e9,
             (double)(t3 - t2) / 1e9, (unsigned long long)info->dropped,
             (unsigned long long)info->dropped_expired,
             (unsigned long long)info->dropped_flushed,
             (unsigned long long)info->dropped_flash,
             (unsigned long long)info->dropped_no_room);
    return 1;
}

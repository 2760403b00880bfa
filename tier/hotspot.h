#pragma once
/*
 * The write-hotspot tracker: sampled counts of the bytes written
 * into the PMEM mapping per 4 KiB block and per emulated DIMM, fed by the
 * PMEM write helpers (tier/pm.h) through their write hook.
 *
 * The emulated DIMM layout: the mapping (the whole pool file, region header
 * included) is interleaved over `dimms` DIMMs in units of `interleave`
 * bytes, so the DIMM of the byte at offset o is (o / interleave) % dimms. A
 * write crossing an interleave or block boundary is split there exactly.
 *
 * Each block also keeps bytes per kind of content (what a classifier says
 * the written bytes were: item header, value, region metadata, ...), so that
 * a hot block can be attributed to what it holds. The classifier is the
 * owner's (the engine knows its layouts; this file does not).
 *
 * Cost: off (no tracker attached), the PMEM helpers pay one predictable
 * branch. On, every sampled write costs a few relaxed atomic adds per block
 * piece and the classifier call; DRAM use is 40 bytes per 4 KiB block (1%
 * of the mapping) plus one cache line per DIMM.
 *
 * Concurrency:
 *   counters         relaxed atomic adds from any writing thread; readers
 *                    (stats, dump) load them relaxed, so a report taken
 *                    during writes is a moment's approximate picture
 *   sample tick      per thread (thread-local), no sharing
 *   reset            relaxed stores; writes racing with it may survive it
 *   attached tracker one per process (the PMEM write hook is process-wide);
 *                    attach/detach at setup/teardown, when no thread writes
 *                    PMEM through this mapping
 */

#include <stdint.h>
#include <stdio.h>

#define HOTSPOT_BLOCK_SHIFT 12
#define HOTSPOT_BLOCK_SIZE (1u << HOTSPOT_BLOCK_SHIFT)
#define HOTSPOT_MAX_DIMMS 64
#define HOTSPOT_TOP_MAX 64

/* What written bytes are. HOTSPOT_MIXED is only a block's verdict (no kind
 * has two thirds of its bytes), never a classifier's answer. */
enum hotspot_kind {
    HOTSPOT_REGION_META = 0, /* the region header area */
    HOTSPOT_ITEM_HEADER = 1, /* item header, key and tail list of a chunk */
    HOTSPOT_ITEM_VALUE = 2,  /* value bytes */
    HOTSPOT_PAGE_META = 3,   /* page info kept in PMEM (ablation layouts) */
    HOTSPOT_UNKNOWN = 4,
    HOTSPOT_NKINDS = 5,
    HOTSPOT_MIXED = HOTSPOT_NKINDS,
};

/* "region_meta", "item_header", "item_value", "page_meta", "unknown",
 * "mixed": the names of the CSV dump and of `stats hotspot`. */
const char *hotspot_kind_name(enum hotspot_kind k);

struct hotspot_config {
    unsigned dimms;        /* emulated DIMMs, 1..HOTSPOT_MAX_DIMMS; 0 = off */
    uint32_t interleave;   /* bytes per DIMM stripe, >= 64, a multiple of 64 */
    uint32_t sample_every; /* record one write in this many (per thread) */
};

/* Defaults: 4 DIMMs, 4096-byte interleave, every write. */
void hotspot_config_init(struct hotspot_config *cfg);

/* Split the written range [map_off, map_off + n) (inside one block) into
 * bytes per kind, adding them to kind_bytes[]. Context: the writing thread,
 * right after the write, no lock held. */
typedef void hotspot_classify_fn(void *arg, uint64_t map_off, size_t n,
                                 uint64_t kind_bytes[HOTSPOT_NKINDS]);

struct hotspot;

/* Track writes into [map_base, map_base + map_len). 0, or -EINVAL (bad
 * config, with a sentence in err_msg()) or -ENOMEM. */
int hotspot_create(const struct hotspot_config *cfg, const void *map_base,
                   uint64_t map_len, struct hotspot **out);
/* Detaches it first if attached. NULL is a no-op. */
void hotspot_destroy(struct hotspot *h);

/* Without a classifier every byte counts as HOTSPOT_UNKNOWN. Context:
 * setup, before writes are recorded. */
void hotspot_set_classifier(struct hotspot *h, hotspot_classify_fn *fn,
                            void *arg);

/* Count one write (what the PMEM write hook calls). Bytes outside the
 * mapping are ignored. Context: any thread. */
void hotspot_record(struct hotspot *h, const void *dst, size_t n);

/* Make h the process's tracker: the PMEM write hook feeds it from now on.
 * 0, or -EBUSY (another tracker is attached; err_msg() says so). */
int hotspot_attach(struct hotspot *h);
/* Stop feeding h (no-op if it is not the attached one). */
void hotspot_detach(struct hotspot *h);

/* Zero every counter (and the calling thread's sample tick). */
void hotspot_reset(struct hotspot *h);

/* Per-DIMM bytes (or write counts: a write that touches a DIMM counts once
 * for it) into bytes[0..min(dimms, max)); returns the number of DIMMs. */
unsigned hotspot_dimm_bytes(const struct hotspot *h, uint64_t *bytes,
                            unsigned max);
unsigned hotspot_dimm_writes(const struct hotspot *h, uint64_t *writes,
                             unsigned max);
/* max / mean of the per-DIMM bytes; 0.0 when nothing was recorded. */
double hotspot_skew(const struct hotspot *h);

const struct hotspot_config *hotspot_config(const struct hotspot *h);
uint64_t hotspot_map_bytes(const struct hotspot *h);

struct hotspot_block {
    uint64_t index;  /* block number: map offset / HOTSPOT_BLOCK_SIZE */
    uint64_t bytes;  /* bytes written into it */
    uint64_t writes; /* writes that touched it */
    enum hotspot_kind what;
    uint8_t pct[HOTSPOT_NKINDS]; /* share of its bytes per kind, percent */
};

/* The k most written blocks (k <= HOTSPOT_TOP_MAX), most written first;
 * returns how many have bytes. Scans every block. */
unsigned hotspot_top(const struct hotspot *h, struct hotspot_block *out,
                     unsigned k);

/* The CSV dump (doc/hotspots.md, "The dump format"): a comment line with
 * the layout, a header line, one row per DIMM and one per written block. 0
 * or -EIO. */
int hotspot_dump(const struct hotspot *h, FILE *f);

#pragma once
/*
 * EXPERIMENT ONLY (tc_config.ablate_meta_in_pmem): the on-PMEM
 * layout of the page metadata that Tair MDB kept at the start of every 1 MiB
 * page, which made one DIMM of an interleaved set take about twice the
 * writes. tiercache keeps all of this in DRAM (DESIGN rule 1); with the
 * switch on, the slab also mirrors every change of a page's allocation state
 * into this header so that the experiment sees the same PMEM write pattern.
 * The DRAM copy stays the source of truth: nothing reads this back.
 *
 * Fixed-width words only, page numbers instead of pointers. Every field is
 * one 64-bit word, written with one 8-byte store. The header occupies the
 * first SLAB_PMETA_BYTES(nwords) bytes of the page (rounded up to whole
 * chunks of the page's class, which are never handed out).
 */

#include <stdint.h>

#define SLAB_PMETA_MAGIC 0x41544d50u /* "PMTA" little endian */

/* Word indices in the header. */
enum slab_pmeta_word {
    SLAB_PMETA_ID = 0,        /* magic | cls << 32 | state << 40 */
    SLAB_PMETA_COUNT = 1,     /* free chunks | scan word << 32 */
    SLAB_PMETA_LINKS = 2,     /* partial list: next | prev << 32 (page numbers,
                                 0xffffffff = none) */
    SLAB_PMETA_CLASS_IDX = 3, /* index of the page in its class's list */
    SLAB_PMETA_USED = 4,      /* chunks holding an item */
    SLAB_PMETA_CURSOR = 5,    /* chunk index last allocated or freed */
    SLAB_PMETA_BITS = 8,      /* nwords free-bit words (1 = free in the slab:
                                 neither an item's nor in a thread's stash),
                                 nwords reference-bit words (one CLOCK bit a
                                 chunk; "fetched" is set with it), nwords
                                 in-use words (1 = holds an item) */
};

struct slab_pmeta {
    uint64_t word[SLAB_PMETA_BITS];
    uint64_t bits[]; /* 3 * nwords */
};

_Static_assert(sizeof(struct slab_pmeta) == 64, "header is one cache line");

/* Bytes of the header of a class with nwords bitmap words, cache-line
 * rounded: within the first 4 KiB of the page for chunks of 88 bytes and
 * more (the 64-byte class's 6 KiB header spills past it). */
#define SLAB_PMETA_BYTES(nwords)                                               \
    (((uint64_t)sizeof(struct slab_pmeta) + 24ull * (nwords) + 63) & ~63ull)

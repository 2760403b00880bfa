#pragma once
/*
 * Anonymous DRAM for tables that lock-free readers hit at random (the hash
 * index's buckets, the slab's per-page tables): mapped 2 MiB-aligned in
 * whole 2 MiB and advised for transparent huge pages, so that a lookup
 * landing anywhere in them costs no page walk of its own. The kernel backs
 * only the aligned 2 MiB ranges of a mapping with huge pages: an unaligned
 * 2.5 MiB table (100k keys) had none, a TLB miss on most lookups.
 */

#include <stddef.h>

/* Huge-page size the mappings are aligned and rounded to. */
#define HUGEMAP_BYTES ((size_t)2 << 20)

/* Zeroed anonymous memory of at least *bytes, or NULL. From HUGEMAP_BYTES
 * up the mapping is 2 MiB-aligned, rounded up to whole 2 MiB (*bytes grows
 * to that) and advised MADV_HUGEPAGE (advice only: no huge pages is no
 * error); smaller ones are a plain mapping of *bytes. Backed as written. */
void *hugemap_map(size_t *bytes);

/* Unmap what hugemap_map gave (bytes as it returned them). */
void hugemap_unmap(void *p, size_t bytes);

/* Bytes of the mappings that [p, p + len) overlaps which the kernel maps
 * with 2 MiB page-table entries now (/proc/self/smaps: AnonHugePages,
 * ShmemPmdMapped, FilePmdMapped), whole mappings counted; 0 for memory on
 * the base page size or not yet touched; -errno when smaps cannot be read.
 * A DAX file's 2 MiB entries are not counted there (smaps shows none).
 * The kernel walks the page tables of every mapping below the range to
 * produce the file: setup and reporting only, never a hot path. */
long long hugemap_huge_bytes(const void *p, size_t len);

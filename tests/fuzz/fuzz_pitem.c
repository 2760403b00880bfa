/*
 * Fuzz target: the walk over a packed-item segment (src/engine/pitem.c)
 * on arbitrary bytes, what a restart reads after a crash or a damaged
 * page. Input: byte 0 picks verify (bit 0), bytes 1..8 are seq_base, the
 * rest is the segment from byte 64 on (its header is zeros here: the walk
 * does not read it). The segment is allocated at exactly its size, so
 * ASan catches any read past it. Checked: the walk ends (0 or -EBADMSG)
 * within the steps the segment's size allows; every item it reports, and
 * every byte it counts dead or pending, lies inside the segment after
 * byte 64, back to back; a reported item verifies when verify is on.
 */
#include "fuzz.h"

#include "src/engine/pitem.h"

#include <errno.h>
#include <string.h>

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 9 || size > (1u << 20))
        return 0;
    bool verify = data[0] & 1;
    uint64_t seq_base;
    memcpy(&seq_base, data + 1, 8);
    uint32_t seg_size = (uint32_t)(PITEM_SEG_START + size - 9);
    char *seg = malloc(seg_size);
    FUZZ_CHECK(seg != NULL, "out of memory");
    memset(seg, 0, PITEM_SEG_START);
    memcpy(seg + PITEM_SEG_START, data + 9, size - 9);

    struct pitem_walk w;
    struct pitem_view v;
    uint64_t seen = 0, steps = 0, sum = 0;
    uint32_t expect_off = PITEM_SEG_START;
    int rc;
    pitem_walk_init(&w, seg, seg_size, seq_base, verify);
    while ((rc = pitem_walk_next(&w, &v)) == 1) {
        FUZZ_CHECK(++steps <= seg_size / PITEM_SIZE_MIN, "walk runs on");
        FUZZ_CHECK(v.off >= expect_off && v.off % PITEM_ALIGN == 0,
                   "item at %u after %u", v.off, expect_off);
        FUZZ_CHECK(v.size >= PITEM_SIZE_MIN && v.off + v.size <= seg_size,
                   "item %u+%u past %u", v.off, v.size, seg_size);
        FUZZ_CHECK(v.klen >= 1 && v.klen <= PITEM_KLEN_MAX, "klen %u", v.klen);
        FUZZ_CHECK(v.commit >= PITEM_COMMIT_MIN, "commit %u", v.commit);
        FUZZ_CHECK(v.key >= seg + v.off + 8 &&
                       v.value + v.vlen <= seg + v.off + v.size,
                   "fields outside the item at %u", v.off);
        FUZZ_CHECK(!verify || pitem_verify(seg, seq_base, &v),
                   "unverified item at %u", v.off);
        for (uint32_t i = 0; i < v.klen; i++) /* ASan: inside the segment */
            sum += (uint8_t)v.key[i];
        for (uint32_t i = 0; i < v.vlen; i++)
            sum += (uint8_t)v.value[i];
        seen += v.size;
        expect_off = v.off + v.size;
    }
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG, "walk returned %d", rc);
    FUZZ_CHECK(rc == w.status && pitem_walk_next(&w, &v) == rc,
               "the end is not kept");
    FUZZ_CHECK(w.off >= expect_off && w.off <= seg_size, "ended at %u", w.off);
    FUZZ_CHECK(seen + w.dead_bytes + w.pending_bytes == w.off - PITEM_SEG_START,
               "bytes walked %llu + %u + %u, ended at %u",
               (unsigned long long)seen, w.dead_bytes, w.pending_bytes, w.off);
    free(seg);
    return (int)(sum & 0);
}

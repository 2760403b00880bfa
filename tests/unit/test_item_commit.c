/*
 * The recoverable item format (src/engine/item_layout.h), seen from the
 * pool file: after each kind of operation, a scan of the data area for
 * committed items with a good checksum (what a recovery scan keeps) finds
 * exactly one copy of every live key, holding its current value, and none
 * of a deleted, replaced, evicted or refused one. A torn item (header or
 * key bytes changed after commit, or no commit word) does not check.
 *
 * The scan maps the pool file read-only beside the open cache (a MAP_SHARED
 * mapping of the same /dev/shm file sees the same pages) and tries every
 * 8-aligned offset: a false match would need a valid kind byte and a
 * matching CRC32C in value bytes. The scan knows the slabs' item format:
 * the tests of a cache open the slab store (TC_TEST_SLAB).
 */

#include "engine_fx.h"

#include "src/engine/cache.h"
#include "src/engine/item.h"
#include "src/engine/restart_layout.h"
#include "tier/nvs.h"
#include "tier/nvs_int.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define PAGE (1u * MIB)

struct scan {
    char *map;
    size_t len;
};

static void
scan_map(struct fx *f, struct scan *s)
{
    int fd = open(f->path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    s->len = (size_t)st.st_size;
    s->map = mmap(NULL, s->len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(s->map != MAP_FAILED);
}

static void
scan_unmap(struct scan *s)
{
    munmap(s->map, s->len);
}

/* Committed, checking copies of key in the data area; the last one found
 * is returned in *last (NULL if none). */
static unsigned
copies_of(const struct scan *s, const char *key, const struct item_hdr **last)
{
    size_t klen = strlen(key);
    unsigned n = 0;
    *last = NULL;
    for (size_t off = REGION_HDR_BYTES; off + sizeof(struct item_hdr) <= s->len;
         off += 8) {
        const struct item_hdr *it = (const void *)(s->map + off);
        if (!item_kind_is_head(it->kind) || it->klen != klen || !it->commit)
            continue;
        uint32_t room = (uint32_t)(PAGE - (off & (PAGE - 1)));
        if (!item_check(it, room) || memcmp(item_key(it), key, klen) != 0)
            continue;
        n++;
        *last = it;
    }
    return n;
}

static void
assert_one_copy(const struct scan *s, const char *key, const char *val)
{
    const struct item_hdr *it;
    assert_int_equal(copies_of(s, key, &it), 1);
    assert_int_equal(it->vlen, strlen(val));
    assert_memory_equal(item_value(it), val, it->vlen);
}

static void
assert_no_copy(const struct scan *s, const char *key)
{
    const struct item_hdr *it;
    assert_int_equal(copies_of(s, key, &it), 0);
}

/* set, replace, delete, failed add, append, incr, touch: one copy of each
 * live key with its current value, none of the deleted one. */
static void
test_committed_copies(void **state)
{
    struct fx *f = *state;
    struct scan s;

    puts_(f->c, "keep", "v1");
    puts_(f->c, "over", "old");
    puts_(f->c, "over", "new");
    puts_(f->c, "gone", "x");
    assert_int_equal(tc_delete(f->c, "gone", 4, 0), TC_OK);
    assert_int_equal(store_s(f->c, TC_ADD, "keep", "refused", 0, 0, 0, NULL),
                     TC_NOT_STORED);
    puts_(f->c, "cat", "ab");
    assert_int_equal(store_s(f->c, TC_APPEND, "cat", "cd", 0, 0, 0, NULL),
                     TC_OK);
    puts_(f->c, "num", "41");
    uint64_t v;
    assert_int_equal(tc_incr(f->c, "num", 3, 1, &v, NULL), TC_OK);
    assert_int_equal(tc_touch(f->c, "keep", 4, 1000), TC_OK);

    scan_map(f, &s);
    assert_one_copy(&s, "keep", "v1"); /* touch keeps the checksum good */
    assert_one_copy(&s, "over", "new");
    assert_no_copy(&s, "gone");
    assert_one_copy(&s, "cat", "abcd");
    assert_one_copy(&s, "num", "42");
    scan_unmap(&s);
}

/* flush_all leaves the items in place (a recovery drops them by the
 * persisted watermark); a set after it is one copy. Chained values check
 * through their tail list. */
static void
test_chained_and_sequence(void **state)
{
    struct fx *f = *state;
    struct scan s;
    size_t big = 700 * 1024; /* above the largest chunk: chained */
    char *val = malloc(big + 1);
    assert_non_null(val);
    memset(val, 'q', big);
    val[big] = '\0';

    puts_(f->c, "big", val);
    puts_(f->c, "a", "1");
    puts_(f->c, "b", "2");
    scan_map(f, &s);
    const struct item_hdr *ia, *ib, *ibig;
    assert_int_equal(copies_of(&s, "big", &ibig), 1);
    assert_int_equal(ibig->vlen, big);
    assert_true(ibig->nchain > 0);
    assert_int_equal(copies_of(&s, "a", &ia), 1);
    assert_int_equal(copies_of(&s, "b", &ib), 1);
    /* the later store has the newer sequence */
    assert_true(item_seq_newer(item_seq(ib), item_seq(ia)));
    /* no client flags, no client CAS: nothing in opt, the CAS is seq */
    assert_int_equal(ia->iflags & (ITEM_HAS_FLAGS | ITEM_HAS_CAS), 0);
    assert_int_equal(item_cas(ia), item_seq(ia));
    scan_unmap(&s);
    free(val);
}

/* Evicted items leave no committed copy: fill a small pool many times
 * over, then only keys still in the index have one. */
static void
test_evicted_invalidated(void **state)
{
    struct fx *f = *state;
    struct scan s;
    char key[16], val[200];
    const unsigned n = 30000; /* about 7 MB of items through 6 MiB */

    f->cfg.pool_size = 8 * MIB;
    fx_reopen(f);
    memset(val, 'e', sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "e%06u", i);
        puts_(f->c, key, val);
    }
    assert_true(stats(f->c).evictions > 0);
    scan_map(f, &s);
    unsigned live = 0, ghosts = 0;
    for (unsigned i = 0; i < n; i += 97) {
        snprintf(key, sizeof(key), "e%06u", i);
        const struct item_hdr *it;
        unsigned copies = copies_of(&s, key, &it);
        struct got g;
        unsigned char buf[256];
        bool hit = get_cb(f->c, key, &g, buf, sizeof(buf)) == TC_OK;
        live += hit;
        ghosts += !hit && copies;
        assert_true(copies <= 1);
        if (hit)
            assert_int_equal(copies, 1);
    }
    assert_true(live > 0);
    assert_int_equal(ghosts, 0);
    scan_unmap(&s);
}

/* Every key length (1..255), with and without opt fields and a value,
 * is staged whole: the key, the opt fields and the value read back, and
 * the item checks (the short keys' copy is overlapping 8-byte words). */
static void
test_every_key_length(void **state)
{
    (void)state;
    _Alignas(8) char chunk[sizeof(struct item_hdr) + 255 + 12 + 16];
    unsigned char key[255];
    struct iovec iov = {"0123456789abcdef", 16};
    struct item_src src = {&iov, 1};
    struct item_plan plan;

    for (unsigned i = 0; i < sizeof(key); i++)
        key[i] = (unsigned char)(i * 31 + 7);
    for (uint32_t klen = 1; klen <= 255; klen++) {
        for (int opt = 0; opt < 2; opt++) {
            struct item_desc h = {.klen = (uint8_t)klen,
                                  .vlen = 16,
                                  .flags = opt ? 0xf1a95u : 0,
                                  .seq = klen,
                                  .cas = opt ? 77 : 0};
            item_desc_opt(&h);
            memset(chunk, 0xee, sizeof(chunk));
            item_plan(klen, h.iflags, 16, sizeof(chunk), &plan);
            item_write(chunk, 0, &plan, NULL, &h, key, &src, false);
            const struct item_hdr *it = (const void *)chunk;
            assert_true(item_check(it, sizeof(chunk)));
            assert_int_equal(it->klen, klen);
            assert_memory_equal(item_key(it), key, klen);
            assert_int_equal(item_flags(it), opt ? 0xf1a95u : 0);
            assert_memory_equal(item_value(it), "0123456789abcdef", 16);
        }
    }
}

/* A torn item does not check: header, key or opt bytes changed after the
 * commit word, or no commit word. */
static void
test_torn_item(void **state)
{
    (void)state;
    _Alignas(8) char chunk[256];
    struct item_desc h = {
        .klen = 3, .vlen = 5, .flags = 7, .seq = 12345, .cas = 99};
    struct iovec iov = {"value", 5};
    struct item_src src = {&iov, 1};
    struct item_plan plan;

    item_desc_opt(&h);
    assert_int_equal(h.iflags, ITEM_HAS_FLAGS | ITEM_HAS_CAS);
    memset(chunk, 0, sizeof(chunk));
    item_plan(3, h.iflags, 5, sizeof(chunk), &plan);
    assert_int_equal(plan.head_size, sizeof(struct item_hdr) + 3 + 4 + 8 + 5);
    item_write(chunk, 0, &plan, NULL, &h, "key", &src, false);
    const struct item_hdr *it = (const void *)chunk;
    assert_true(item_check(it, sizeof(chunk)));
    assert_int_equal(item_seq(it), 12345);
    assert_int_equal(item_flags(it), 7);
    assert_int_equal(item_cas(it), 99);
    assert_memory_equal(item_value(it), "value", 5);

    /* exptime is outside the checksum: touch changes it in place */
    ((struct item_hdr *)chunk)->exptime = 1234;
    assert_true(item_check(it, sizeof(chunk)));
    /* a key byte */
    chunk[sizeof(struct item_hdr) + 1] ^= 1;
    assert_false(item_check(it, sizeof(chunk)));
    chunk[sizeof(struct item_hdr) + 1] ^= 1;
    assert_true(item_check(it, sizeof(chunk)));
    /* opt: the client flags, then the CAS */
    chunk[sizeof(struct item_hdr) + 3] ^= 1;
    assert_false(item_check(it, sizeof(chunk)));
    chunk[sizeof(struct item_hdr) + 3] ^= 1;
    chunk[sizeof(struct item_hdr) + 3 + 4 + 7] ^= 1;
    assert_false(item_check(it, sizeof(chunk)));
    chunk[sizeof(struct item_hdr) + 3 + 4 + 7] ^= 1;
    assert_true(item_check(it, sizeof(chunk)));
    /* header fields: iflags (which opt fields there are), vlen, seq */
    ((struct item_hdr *)chunk)->iflags &= (uint8_t)~ITEM_HAS_CAS;
    assert_false(item_check(it, sizeof(chunk)));
    ((struct item_hdr *)chunk)->iflags |= ITEM_HAS_CAS;
    ((struct item_hdr *)chunk)->vlen = 4;
    assert_false(item_check(it, sizeof(chunk)));
    ((struct item_hdr *)chunk)->vlen = 5;
    /* either half of the sequence (the low half is in the commit word) */
    ((struct item_hdr *)chunk)->seq_hi = 1;
    assert_false(item_check(it, sizeof(chunk)));
    ((struct item_hdr *)chunk)->seq_hi = 0;
    ((struct item_hdr *)chunk)->seq_lo = 12346;
    assert_false(item_check(it, sizeof(chunk)));
    ((struct item_hdr *)chunk)->seq_lo = 12345;
    assert_true(item_check(it, sizeof(chunk)));
    /* bounds: the item does not fit the chunk it claims to be in */
    assert_false(item_check(it, sizeof(struct item_hdr) + 3 + 12 + 4));
    /* invalidated: the commit word is 0 */
    item_invalidate(chunk, 0);
    assert_int_equal(it->commit, 0);
    assert_false(item_check(it, sizeof(chunk)));
}

/* The base header alone: client flags 0 and the CAS the store sequence
 * leave opt empty; a client's CAS equal to its sequence needs none. */
static void
test_no_opt(void **state)
{
    (void)state;
    _Alignas(8) char chunk[256];
    struct item_desc h = {.klen = 3, .vlen = 5, .seq = 41, .cas = 41};
    struct iovec iov = {"value", 5};
    struct item_src src = {&iov, 1};
    struct item_plan plan;
    const struct item_hdr *it = (const void *)chunk;

    assert_int_equal(sizeof(struct item_hdr), 24);
    item_desc_opt(&h);
    assert_int_equal(h.iflags, 0);
    memset(chunk, 0, sizeof(chunk));
    item_plan(3, h.iflags, 5, sizeof(chunk), &plan);
    assert_int_equal(plan.head_size, 24 + 3 + 5);
    item_write(chunk, 0, &plan, NULL, &h, "key", &src, false);
    assert_true(item_check(it, sizeof(chunk)));
    assert_false(item_check(it, 24 + 3 + 4));
    assert_int_equal(item_flags(it), 0);
    assert_int_equal(item_cas(it), 41);
    assert_memory_equal(item_value(it), "value", 5);
    /* flags only */
    h.flags = 0xdeadbeef;
    item_desc_opt(&h);
    assert_int_equal(h.iflags, ITEM_HAS_FLAGS);
    item_plan(3, h.iflags, 5, sizeof(chunk), &plan);
    item_write(chunk, 0, &plan, NULL, &h, "key", &src, false);
    assert_true(item_check(it, sizeof(chunk)));
    assert_int_equal(item_flags(it), 0xdeadbeef);
    assert_int_equal(item_cas(it), 41);
    assert_memory_equal(item_value(it), "value", 5);
}

/* A copy written pending (a demotion, a page move) does not check until
 * committed; a commit after an invalidation (a writer replaced the copy
 * meanwhile) fails and leaves it invalid. */
static void
test_pending_copy(void **state)
{
    (void)state;
    _Alignas(8) char chunk[256];
    /* a sequence above 2^32: both halves matter */
    uint64_t seq = 0x500000077ull;
    struct item_desc h = {
        .klen = 3, .vlen = 5, .flags = 7, .seq = seq, .cas = seq};
    struct iovec iov = {"value", 5};
    struct item_src src = {&iov, 1};
    struct item_plan plan;
    const struct item_hdr *it = (const void *)chunk;
    uint64_t w;

    item_desc_opt(&h);
    assert_int_equal(h.iflags & ITEM_HAS_CAS, 0);
    memset(chunk, 0, sizeof(chunk));
    item_plan(3, h.iflags, 5, sizeof(chunk), &plan);
    uint32_t word = item_write(chunk, 0, &plan, NULL, &h, "key", &src, true);
    assert_int_equal(it->commit, ITEM_COMMIT_PENDING);
    assert_false(item_committed(it->commit));
    assert_false(item_check(it, sizeof(chunk)));
    /* published and not yet committed: its CAS is readable already (the
     * sequence half of the commit word is in place) */
    assert_int_equal(item_cas(it), seq);
    memcpy(&w, chunk + ITEM_COMMIT_OFFSET, sizeof(w));
    assert_int_equal(w, (seq << 32) | ITEM_COMMIT_PENDING);
    assert_true(item_commit_copy(chunk, 0, word));
    assert_true(item_check(it, sizeof(chunk)));
    assert_int_equal(item_cas(it), seq);
    /* the commit word: the sequence's low half over the CRC */
    memcpy(&w, chunk + ITEM_COMMIT_OFFSET, sizeof(w));
    assert_int_equal(w, (seq << 32) | word);
    /* once committed, a second commit is refused and changes nothing */
    assert_false(item_commit_copy(chunk, 0, word));
    assert_int_equal(it->commit, word);
    /* invalidated: no longer an item, and its CAS still reads the same for
     * a reader that found it before */
    item_invalidate(chunk, 0);
    assert_false(item_check(it, sizeof(chunk)));
    assert_int_equal(item_cas(it), seq);

    /* invalidated before its commit: stays invalid */
    memset(chunk, 0, sizeof(chunk));
    h.seq = h.cas = seq + 1;
    word = item_write(chunk, 0, &plan, NULL, &h, "key", &src, true);
    item_invalidate(chunk, 0);
    assert_false(item_commit_copy(chunk, 0, word));
    assert_int_equal(it->commit, 0);
    assert_false(item_check(it, sizeof(chunk)));
    assert_int_equal(item_cas(it), seq + 1);

    /* a plain write: one 8-byte word, sequence over CRC */
    memset(chunk, 0, sizeof(chunk));
    word = item_write(chunk, 0, &plan, NULL, &h, "key", &src, false);
    memcpy(&w, chunk + ITEM_COMMIT_OFFSET, sizeof(w));
    assert_int_equal(w, ((seq + 1) << 32) | word);
    assert_true(item_check(it, sizeof(chunk)));
}

/* What a scan needs besides the items: every committed item sits on a page
 * whose page-table byte names its class, at a multiple of that class's
 * chunk size; flush_all's watermark and a delayed flush's time are in the
 * pool's header before flush_all returns. */
static void
test_page_table_and_flush(void **state)
{
    struct fx *f = *state;
    struct cache *c = (struct cache *)f->c; /* the engine's own struct */
    struct scan s;
    char key[16], val[3000];

    memset(val, 'p', sizeof(val));
    for (unsigned i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "p%04u", i);
        /* three sizes: three classes */
        size_t vlen = i % 3 == 0 ? 10 : i % 3 == 1 ? 500 : 2900;
        assert_int_equal(tc_set(f->c, key, strlen(key), val, vlen, 0, 0), 0);
    }
    scan_map(f, &s);
    const uint8_t *table = (const uint8_t *)s.map + REGION_PAGE_TABLE_OFFSET;
    unsigned found = 0;
    for (unsigned i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "p%04u", i);
        const struct item_hdr *it;
        assert_int_equal(copies_of(&s, key, &it), 1);
        uint64_t off = (uint64_t)((const char *)it - s.map) - REGION_HDR_BYTES;
        uint8_t b = table[off >> 20];
        assert_true(b != RESTART_PAGE_NONE);
        unsigned cls = b - 1u;
        assert_int_equal(cls, slab_class_of(c->slab, off));
        assert_int_equal((off & (MIB - 1)) % slab_chunk_size(c->slab, cls), 0);
        found++;
    }
    assert_int_equal(found, 300);

    const struct restart_meta *m =
        (const void *)(s.map + offsetof(struct region_header, user));
    assert_true(m->magic == RESTART_MAGIC);
    assert_int_equal(m->version, RESTART_VERSION);
    assert_int_equal(m->item_size_max, f->cfg.item_size_max);
    assert_int_equal(m->nclasses, slab_nclasses(c->slab));
    assert_true(m->flush_cas == 0);
    struct tc_item_info info;
    char buf[16];
    assert_int_equal(tc_get_copy(f->c, "p0000", 5, buf, sizeof(buf), &info),
                     TC_OK);
    assert_int_equal(tc_flush_all(f->c, 100), TC_OK);
    assert_int_equal(m->flush_at, T0 + 100);
    assert_int_equal(tc_flush_all(f->c, 0), TC_OK);
    assert_int_equal(m->flush_at, 0);
    assert_true(m->flush_cas >= info.cas);
    scan_unmap(&s);
}

/* The commit word's CRC is CRC32C of the header (exptime and the CRC half
 * read as 0, the sequence's halves counted), the key and opt, whatever
 * computes it: every key length, against the table-driven nvs_crc32c over
 * the same bytes laid out by hand. */
static void
test_commit_crc_reference(void **state)
{
    (void)state;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (unsigned klen = 1; klen <= UINT8_MAX; klen++) {
        unsigned char key[UINT8_MAX];
        for (size_t i = 0; i < sizeof(key); i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            key[i] = (unsigned char)(rng >> 56);
        }
        uint64_t seq = 0x123456789ull * klen;
        struct item_desc d = {.kind = ITEM_KIND_HEAD,
                              .klen = (uint8_t)klen,
                              .vlen = 100 + klen,
                              .exptime = 0x12345678u + klen,
                              .flags = klen % 3 ? 0 : 0xabcd0000u + klen,
                              .seq = seq,
                              .cas = klen % 2 ? seq : 77 + klen};
        item_desc_opt(&d);
        uint32_t word = item_commit_word(&d, key, NULL, 0);

        struct item_hdr h = {.kind = ITEM_KIND_HEAD,
                             .klen = (uint8_t)klen,
                             .iflags = d.iflags,
                             .vlen = d.vlen,
                             .seq_hi = (uint32_t)(seq >> 32),
                             .seq_lo = (uint32_t)seq};
        unsigned char b[sizeof(h) + UINT8_MAX + ITEM_OPT_MAX];
        size_t n = sizeof(h);
        memcpy(b, &h, sizeof(h));
        memcpy(b + n, key, klen);
        n += klen;
        if (d.iflags & ITEM_HAS_FLAGS) {
            memcpy(b + n, &d.flags, 4);
            n += 4;
        }
        if (d.iflags & ITEM_HAS_CAS) {
            memcpy(b + n, &d.cas, 8);
            n += 8;
        }
        nvs_crc32c_force_table(true);
        uint32_t want = nvs_crc32c(0, b, n);
        nvs_crc32c_force_table(false);
        if (want == 0)
            want = 1;
        else if (want == ITEM_COMMIT_PENDING)
            want--;
        if (word != want)
            fail_msg("klen %u: word %08x, crc %08x", klen, word, want);
    }
}

/* The whole 64-bit sequence orders copies: no 32-bit wrap. */
static void
test_seq_order(void **state)
{
    (void)state;
    assert_true(item_seq_newer(2, 1));
    assert_false(item_seq_newer(1, 2));
    assert_false(item_seq_newer(5, 5));
    assert_true(item_seq_newer((uint64_t)UINT32_MAX + 4, UINT32_MAX - 3));
    assert_false(item_seq_newer(UINT32_MAX - 3, (uint64_t)UINT32_MAX + 4));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        TC_TEST_SLAB(test_committed_copies),
        TC_TEST_SLAB(test_chained_and_sequence),
        TC_TEST_SLAB(test_evicted_invalidated),
        TC_TEST_SLAB(test_page_table_and_flush),
        cmocka_unit_test(test_every_key_length),
        cmocka_unit_test(test_torn_item),
        cmocka_unit_test(test_no_opt),
        cmocka_unit_test(test_pending_copy),
        cmocka_unit_test(test_seq_order),
        cmocka_unit_test(test_commit_crc_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Shared flash reads (src/engine/ext_read.c, the asynchronous path): gets of
 * one flash item queued on a thread before its read completes share that one
 * device read. Each get is answered with its own id and owner, with the
 * checked value, or, when the shared read fails, with a miss; cancelling
 * one owner leaves the others' answers alone. tc_ext_reads_shared counts
 * the gets that joined a read.
 *
 * The fixture is ext_fx.h: flash files live under the flash test directory
 * (flash_fx.h); where O_DIRECT is refused there the tests skip with the
 * reason.
 */
#include "ext_fx.h"

#include <poll.h>

#define NKEYS 6000 /* 24 MiB of 4 KiB values, pool 16 MiB */

/* Store NKEYS values (ext_fx.h's fill drives the writer), then everything
 * buffered goes to the file, so that every flash get reads the device. */
static void
fill_all(struct tc_cache *c)
{
    fill(c, 0, NKEYS);
    assert_int_equal(nvs_flush(store_of(c)), 0);
}

/* One asynchronous get as the server queues it: its owner, its id. */
struct aget {
    int owner_tag;
    uint64_t id;
    int cls;     /* the slab class of the item's flash header */
    int answers; /* reap callbacks for this get */
    int niov;
    size_t len;
    unsigned char v[VAL];
};

static void
queue_get(struct tc_cache *c, unsigned i, struct aget *a)
{
    char k[32];
    struct got g = {0};
    struct tc_get_opts o = {.no_bump = true, .async = true};
    key_of(i, k);
    tc_async_owner(c, a);
    assert_int_equal(tc_get_ex(c, k, strlen(k), &o, got_fn, &g), TC_OK);
    assert_int_equal(g.calls, 1);
    assert_int_equal(g.niov, 0);
    assert_true(g.info.flash);
    assert_int_not_equal(g.info.pending, 0);
    assert_int_equal(g.info.vlen, VAL);
    a->id = g.info.pending;
    a->cls = g.info.slab_class;
    tc_async_owner(c, NULL);
}

struct reaped {
    struct aget *gets[4];
    int n;
    int strays; /* answers for no get of ours */
};

static void
reap_fn(void *arg, void *owner, uint64_t id, const struct iovec *iov, int niov)
{
    struct reaped *r = arg;
    for (int j = 0; j < r->n; j++) {
        struct aget *a = r->gets[j];
        if (owner != a)
            continue;
        assert_int_equal(id, a->id);
        a->answers++;
        a->niov = niov;
        a->len = niov ? iov[0].iov_len : 0;
        if (niov && iov[0].iov_len <= VAL)
            memcpy(a->v, iov[0].iov_base, iov[0].iov_len);
        return;
    }
    r->strays++;
}

/* Reap until `reads` device reads have finished (bounded: 20 s). */
static void
reap_reads(struct tc_cache *c, struct reaped *r, int reads)
{
    int fd = tc_async_fd(c), done = 0;
    assert_true(fd >= 0);
    for (int tries = 0; done < reads && tries < 400; tries++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        (void)poll(&p, 1, 50);
        int n = tc_async_reap(c, reap_fn, r);
        assert_true(n >= 0);
        done += n;
    }
    assert_int_equal(done, reads);
    assert_int_equal(r->strays, 0);
}

/* get_hits of slab class cls ("stats slabs"). */
static uint64_t
class_hits(struct tc_cache *c, int cls)
{
    struct tc_slab_stats ss;
    assert_int_equal(tc_slab_stats(c, cls, &ss), 0);
    return ss.get_hits;
}

/* Two gets of one flash key queued before the read completes: one device
 * read, two answers with the right value, one shared read counted; both
 * hits counted in the class of the item's header, as a flash hit read at
 * once is. */
static void
test_two_gets_one_read(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    unsigned char want[VAL];

    fill_all(c);
    unsigned k = flash_key(c, 0);
    struct tc_stats s0 = stats(c);
    struct aget a = {.owner_tag = 1}, b = {.owner_tag = 2};
    queue_get(c, k, &a);
    queue_get(c, k, &b);
    assert_true(a.id != b.id);
    assert_int_equal(a.cls, b.cls);
    uint64_t hits0 = class_hits(c, a.cls);
    assert_int_equal(tc_async_submit(c), 1); /* one read goes out */
    struct reaped r = {.gets = {&a, &b}, .n = 2};
    reap_reads(c, &r, 1);

    struct tc_stats s1 = stats(c);
    value_of(k, 0, want, VAL);
    struct aget *both[2] = {&a, &b};
    for (int j = 0; j < 2; j++) {
        assert_int_equal(both[j]->answers, 1);
        assert_int_equal(both[j]->niov, 1);
        assert_int_equal(both[j]->len, VAL);
        assert_memory_equal(both[j]->v, want, VAL);
    }
    assert_int_equal(s1.extstore_objects_read - s0.extstore_objects_read, 1);
    assert_int_equal(s1.extstore_bytes_read - s0.extstore_bytes_read, VAL);
    assert_int_equal(s1.ext_reads_shared - s0.ext_reads_shared, 1);
    assert_int_equal(s1.get_extstore - s0.get_extstore, 2);
    assert_int_equal(s1.get_hits - s0.get_hits, 2);
    assert_int_equal(class_hits(c, a.cls) - hits0, 2);
    assert_int_equal(s1.extstore_io_queue, 0);

    /* once that read is done, the next get reads again: nothing is kept */
    struct aget d = {.owner_tag = 3};
    queue_get(c, k, &d);
    assert_int_equal(tc_async_submit(c), 1);
    struct reaped r2 = {.gets = {&d}, .n = 1};
    reap_reads(c, &r2, 1);
    assert_int_equal(d.niov, 1);
    assert_memory_equal(d.v, want, VAL);
    struct tc_stats s2 = stats(c);
    assert_int_equal(s2.extstore_objects_read - s1.extstore_objects_read, 1);
    assert_int_equal(s2.ext_reads_shared, s1.ext_reads_shared);
    check_ok(c);
}

/* Gets of different flash keys each read; three gets of one key and one
 * of another: two reads, each get answered with its own key's value. */
static void
test_shared_among_others(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    unsigned char want[VAL];

    fill_all(c);
    unsigned k1 = flash_key(c, 0), k2 = flash_key(c, k1 + 1);
    struct tc_stats s0 = stats(c);
    struct aget g[4] = {
        {.owner_tag = 1}, {.owner_tag = 2}, {.owner_tag = 3}, {.owner_tag = 4}};
    queue_get(c, k1, &g[0]);
    queue_get(c, k2, &g[1]);
    queue_get(c, k1, &g[2]);
    queue_get(c, k1, &g[3]);
    assert_int_equal(tc_async_submit(c), 2);
    struct reaped r = {.gets = {&g[0], &g[1], &g[2], &g[3]}, .n = 4};
    reap_reads(c, &r, 2);
    for (int j = 0; j < 4; j++) {
        assert_int_equal(g[j].answers, 1);
        assert_int_equal(g[j].niov, 1);
        value_of(j == 1 ? k2 : k1, 0, want, VAL);
        assert_memory_equal(g[j].v, want, VAL);
    }
    struct tc_stats s1 = stats(c);
    assert_int_equal(s1.extstore_objects_read - s0.extstore_objects_read, 2);
    assert_int_equal(s1.ext_reads_shared - s0.ext_reads_shared, 2);
    check_ok(c);
}

/* The shared read fails (an injected I/O error): both gets are misses,
 * the failure is counted once and the item's header goes. */
static void
test_shared_read_fails(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;

    fill_all(c);
    unsigned k = flash_key(c, 0);
    struct tc_stats s0 = stats(c);
    struct nvs_faults fa = {.eio_every = 1};
    nvs_set_faults(store_of(c), &fa);
    struct aget a = {.owner_tag = 1}, b = {.owner_tag = 2};
    queue_get(c, k, &a);
    queue_get(c, k, &b);
    assert_int_equal(tc_async_submit(c), 1);
    struct reaped r = {.gets = {&a, &b}, .n = 2};
    reap_reads(c, &r, 1);
    fa = (struct nvs_faults){0};
    nvs_set_faults(store_of(c), &fa);

    for (int j = 0; j < 2; j++) {
        struct aget *g = j ? &b : &a;
        assert_int_equal(g->answers, 1);
        assert_int_equal(g->niov, 0); /* a miss, never bytes */
    }
    struct tc_stats s1 = stats(c);
    assert_int_equal(s1.get_misses - s0.get_misses, 2);
    assert_int_equal(s1.get_hits, s0.get_hits);
    assert_int_equal(s1.get_extstore, s0.get_extstore);
    assert_int_equal(s1.get_aborted_extstore - s0.get_aborted_extstore, 1);
    assert_int_equal(s1.ext_reads_shared - s0.ext_reads_shared, 1);
    char key[32];
    key_of(k, key);
    check_miss(c, key); /* the failed item's header was dropped */
    check_ok(c);
}

/* The owner of the get that issued the read goes away (its connection
 * closed): the get that joined it is still answered, the cancelled one
 * is not. */
static void
test_shared_read_cancelled(void **state)
{
    struct xfx *x = *state;
    struct tc_cache *c = x->f.c;
    unsigned char want[VAL];

    fill_all(c);
    unsigned k = flash_key(c, 0);
    struct aget a = {.owner_tag = 1}, b = {.owner_tag = 2};
    queue_get(c, k, &a);
    queue_get(c, k, &b);
    assert_int_equal(tc_async_submit(c), 1);
    tc_async_cancel(c, &a);
    struct reaped r = {.gets = {&a, &b}, .n = 2};
    reap_reads(c, &r, 1);
    assert_int_equal(a.answers, 0);
    assert_int_equal(b.answers, 1);
    assert_int_equal(b.niov, 1);
    value_of(k, 0, want, VAL);
    assert_memory_equal(b.v, want, VAL);

    /* and the other way round: the joined get's owner goes */
    struct aget d = {.owner_tag = 3}, e = {.owner_tag = 4};
    queue_get(c, k, &d);
    queue_get(c, k, &e);
    tc_async_cancel(c, &e);
    assert_int_equal(tc_async_submit(c), 1);
    struct reaped r2 = {.gets = {&d, &e}, .n = 2};
    reap_reads(c, &r2, 1);
    assert_int_equal(d.answers, 1);
    assert_int_equal(d.niov, 1);
    assert_memory_equal(d.v, want, VAL);
    assert_int_equal(e.answers, 0);
    check_ok(c);
}

int
main(void)
{
    if (!ext_fx_start("test_ext_shared"))
        return 0;
    const struct CMUnitTest tests[] = {
        XT(test_two_gets_one_read),
        XT(test_shared_among_others),
        XT(test_shared_read_fails),
        XT(test_shared_read_cancelled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#pragma once
/*
 * The reference model of the engine fuzz targets (fuzz_engine.c and, with
 * a flash tier, fuzz_engine_ext.c): what the cache must hold for each key
 * of a small key set (value, flags, CAS, absolute expiry, stale mark),
 * memcached's expiry rules and the engine's flush rule, the checks of a
 * read or a store result against it, and the decoder that turns input
 * bytes into keys, values and expiries. fuzz_engine.c runs the operations
 * and calls these; the checks abort through FUZZ_CHECK.
 *
 * Concurrency: none; one input at a time, on one thread.
 */

#include "src/tiercache.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* The tiny cache the model describes (fuzz_engine.c opens it). */
#define FZ_ITEM_MAX 4096u
#define FZ_CHUNK_MAX 1024u
#define FZ_VAL_MAX (FZ_ITEM_MAX + 512) /* values a little too large too */
/* Slots of the set of CAS values the engine chose (struct fz, cas_seen):
 * a power of two; it stops taking values at 3/4 full. */
#define FZ_CAS_SEEN 8192u
#define FZ_NKEYS 12
#define FZ_DAYS30 TC_EXPTIME_RELATIVE_MAX

/* What the model knows of one key. */
struct fz_item {
    bool present; /* stored, not deleted or flushed (it may have expired) */
    bool stale;
    uint32_t flags;
    uint32_t exptime; /* absolute, 0 = never */
    uint32_t vlen;
    uint64_t cas;
    uint64_t loss_at; /* the loss counters when the model last saw it */
    uint8_t val[FZ_ITEM_MAX];
};

/* One input's run: the cache, the input not yet decoded, the model. */
struct fz {
    struct tc_cache *c;
    const uint8_t *p; /* the input not yet decoded */
    size_t n;
    unsigned op; /* operations run, for messages */
    uint32_t now;
    uint32_t flush_at; /* a pending delayed flush, 0 = none */
    uint64_t cas_max;  /* largest CAS seen: the counter is not below it */
    /* Bound on the engine's CAS counter: what the operations' own writes
     * could have used, raised to the counter after each operation. The
     * counter gives the commit word's store sequence to every item written
     * (src/engine/item_layout.h), the engine's own writes too: a page
     * move's copy, a flash header, a value copied back from flash, a hot
     * item demoted. They keep the item's CAS but move the counter, by as
     * many as the engine wrote, which no operation of the model tells. */
    uint64_t cas_hi;
    uint64_t flush_hi; /* the engine's flush watermark: CAS <= it flushed */
    uint64_t losses;   /* the loss counters after the last operation */
    uint64_t losses0;  /* ... and before this one */
    uint64_t forgotten;
    unsigned enomem;  /* -ENOMEM results (allowed; counted for the trace) */
    unsigned filled;  /* filler items stored */
    unsigned shrinks; /* memory limits set below the previous one */
    uint64_t limit;   /* the memory limit, bytes */
    bool trace;
    struct fz_item m[FZ_NKEYS];
    /* The CAS values the engine chose (not the client's, meta E) for the
     * model's keys, open addressing, 0 = empty: no two are the same. */
    unsigned ncas_seen;
    uint64_t cas_seen[FZ_CAS_SEEN];
};

/* The keys: short ones, the shortest, the longest, two long ones that
 * differ in their last byte only, and one with bytes a text protocol could
 * not carry. Index FZ_NKEYS (and above) is a key the API must refuse. */
extern uint8_t fz_keys[FZ_NKEYS + 2][TC_KEY_MAX + 1];
extern size_t fz_klen[FZ_NKEYS + 2];

/* A read's result, collected by fz_collect. */
struct fz_got {
    bool called;
    struct tc_item_info info;
    uint32_t len;
    uint8_t buf[FZ_ITEM_MAX];
};

/* Fill fz_keys and fz_klen (once per process). */
void fz_keys_init(void);

/* ---- input: little-endian, zeros once the input runs out ---- */

uint8_t fz_u8(struct fz *f);
uint16_t fz_u16(struct fz *f);
uint64_t fz_u64(struct fz *f);

/* A key index: mostly the key set, rarely a refused key. */
unsigned fz_key(struct fz *f);

/* A value into buf (FZ_VAL_MAX bytes): its length. */
uint32_t fz_value(struct fz *f, uint8_t *buf);

/* An expiry as a client gives it. */
int64_t fz_exptime(struct fz *f);

/* ---- the model ---- */

/* memcached's rule, as the engine stores it. */
uint32_t fz_abs_exptime(int64_t e, uint32_t now);

/* Whether the model holds key k, unexpired. */
bool fz_live(const struct fz *f, unsigned k);

/* The cache's counters of things it lost (evictions, flash records gone). */
uint64_t fz_loss_counters(struct fz *f);

/* A delayed flush takes effect at the first operation that looks at the
 * clock once its time has come. */
void fz_flush_check(struct fz *f);

/* The engine misses key k where the model holds a live item: allowed only
 * when the cache lost something since the model last saw the item, and
 * never more often than it lost things. */
void fz_lost(struct fz *f, unsigned k, const char *what);

/* What key k's next CAS must be above: the CAS of its version the
 * engine still indexes, or 0 when the model cannot tell that it does (not
 * live, or the cache lost something since the model last saw it). */
uint64_t fz_cas_floor(const struct fz *f, unsigned k);

/* A CAS the engine handed out for a new item of a key whose CAS was
 * `floor` (fz_cas_floor before the model took the new item): above floor,
 * at most the engine's counter and none it chose before, of any key (E:
 * exactly the client's). CAS values of different keys are not ordered in
 * time: a packed item's derives from its segment's block
 * (doc/design/small-items.md, "Risks"). */
void fz_new_cas(struct fz *f, uint64_t cas, uint64_t explicit_cas,
                uint64_t floor);

/* After an operation: the engine's CAS counter is at least every CAS
 * handed out (an E above it lifted it); cas_hi rises to it. */
void fz_cas_sync(struct fz *f);

/* After a flush took effect in the engine: flush_hi is its watermark. */
void fz_flush_watermark(struct fz *f);

/* Key k now holds this item. */
void fz_put(struct fz *f, unsigned k, const uint8_t *val, uint32_t vlen,
            uint32_t flags, uint32_t exptime, uint64_t cas, bool stale);

/* ---- reads ---- */

/* The tc_value_fn of every read: copies into a struct fz_got. */
void fz_collect(void *arg, const struct tc_item_info *info,
                const struct iovec *iov, int niov);

/* A hit on key k: the header must be the model's, and the value too
 * (its first `len` bytes; with_value false: no value to compare). */
void fz_check_hit(struct fz *f, unsigned k, const struct tc_item_info *info,
                  const uint8_t *val, uint32_t len, bool with_value,
                  const char *what);

/* The trace line of a read. */
void fz_trace_read(const struct fz *f, unsigned k, int rc,
                   const struct tc_item_info *info);

/* The CAS of an item the API did not report (vivify, invalidate): read
 * without marking it used. floor: fz_new_cas's. */
void fz_learn_cas(struct fz *f, unsigned k, uint64_t floor);

/* ---- stores and other results ---- */

/* A CAS to send: mostly the model's, sometimes off by one or none. */
uint64_t fz_cas_in(struct fz *f, unsigned k);

/* An explicit CAS (meta E) that no flush has passed: above the counter, or
 * between the last flush's watermark and the counter (reusing a CAS). */
uint64_t fz_cas_new(struct fz *f);

/* The outcome of a plain store (store_plain: set, add, replace, cas, and
 * meta C without I) against the model's two possible states. */
int fz_expect_plain(struct fz *f, unsigned k, bool live,
                    enum tc_store_mode mode, bool cas_check, uint64_t cas_in,
                    uint32_t vlen);

/* meta ms with I: the client's CAS older than the item's stores it stale,
 * newer is refused. */
int fz_expect_stale(struct fz *f, unsigned k, bool live, uint64_t cas_in,
                    uint32_t vlen);

/* append/prepend (store_concat). */
int fz_expect_concat(struct fz *f, unsigned k, bool live, bool cas_check,
                     uint64_t cas_in, bool vivify, uint32_t vlen);

/* The result rc of an operation on key k, against the model: `want` is what
 * a live item gives, `alt` what an absent one gives. A live item answered
 * as absent is an eviction (fz_lost). Returns whether the engine acted on
 * a live item. */
bool fz_judge(struct fz *f, unsigned k, int rc, int want, int alt, bool alloc,
              const char *what);

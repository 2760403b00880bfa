/*
 * incr and decr (text, meta ma, binary, tc_arith): read the number at the
 * head of the value, write the result the way memcached does (in place when
 * it fits, space padded; a new item when longer), publish only if the item
 * read is still the one indexed, else read again. Meta ma N/J creates a
 * missing counter. Concurrency: no state of its own; the store paths of
 * src/engine/store.c publish.
 */
#include "src/engine/store.h"
#include "src/engine/store_int.h"

#include "src/engine/cache_packed.h"
#include "src/engine/ext.h"
#include "src/engine/pitem.h"

#include "src/base/clock.h"
#include "src/base/num.h"
#include "tier/pm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/urcu-memb.h>

/* memcached's rule for a number (safe_strtoull): optional leading spaces,
 * digits, then the end or a space (a decr may have left trailing spaces,
 * and memcached ignores what follows a space). */
static bool
parse_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0, digits;
    while (i < n && s[i] == ' ')
        i++;
    digits = num_scan_u64(s + i, n - i, &v);
    i += digits;
    if (!digits || (i < n && s[i] != ' ' && s[i] != '\r' && s[i] != '\n'))
        return false;
    *out = v;
    return true;
}

/* Where the number parse_u64 read ends: after its leading spaces and
 * digits. */
static size_t
number_end(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && s[i] == ' ')
        i++;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    return i;
}

static void
fill_info(struct tc_item_info *info, const struct item_desc *h)
{
    if (!info)
        return;
    memset(info, 0, sizeof(*info));
    info->flags = h->flags;
    info->exptime = h->exptime;
    info->cas = h->cas;
    info->vlen = h->vlen;
    info->stale = h->iflags & ITEM_STALE;
}

/* Bytes of a value an incr reads its number from (20 digits and room for
 * the spaces memcached's strtoull skips before them). */
#define ARITH_HEAD 64u

/* meta ma N/J: a miss creates the item with the initial value. */
static int
arith_vivify(struct cache_thread *t, const void *key, uint32_t klen,
             const struct tc_arith_opts *o, uint64_t *value,
             struct tc_item_info *info)
{
    char digits[24];
    int len = snprintf(digits, sizeof(digits), "%llu",
                       (unsigned long long)o->initial);
    struct iovec iov = {digits, (size_t)len};
    struct store_req r;

    req_init(&r, t, TC_ADD, key, klen);
    r.hdr.vlen = (uint32_t)len;
    r.hdr.exptime = cache_exptime(o->vivify_exptime, clock_now());
    r.val = (struct item_src){&iov, 1};
    r.cas_new = o->cas_new;
    int rc = store_one(t, &r, NULL);
    if (rc == TC_OK) {
        *value = o->initial;
        fill_info(info, &r.hdr);
        if (o->vivified)
            *o->vivified = true;
    }
    return rc;
}

int
store_arith(struct cache_thread *t, bool incr, const void *key, uint32_t klen,
            uint64_t delta, const struct tc_arith_opts *o, uint64_t *value,
            struct tc_item_info *info)
{
    struct cache *c = t->cache;
    struct store_req r;
    struct item_desc old;
    enum cache_stat miss = incr ? ST_INCR_MISSES : ST_DECR_MISSES;

    if (o && o->vivified)
        *o->vivified = false;
    for (int i = 0; i < RMW_RETRIES; i++) {
        char digits[72];
        uint64_t v;
        req_init(&r, t, STORE_SWAP, key, klen);
        if (!store_snapshot(c, &r, &old, &r.expect)) {
            int rc = TC_NOT_FOUND;
            if (o && o->vivify &&
                (rc = arith_vivify(t, key, klen, o, value, info)) ==
                    TC_NOT_STORED)
                continue; /* created meanwhile: count on it */
            if (rc == TC_NOT_FOUND)
                cache_stat_inc(t, miss);
            return rc;
        }
        /* memcached's order: an empty or chained value is not a number,
         * then the CAS, then the digits */
        if (old.vlen == 0 || old.nchain)
            return TC_NON_NUMERIC;
        if (o && o->cas_in && old.cas != o->cas_in)
            return TC_EXISTS;
        /* the number is read from the value's first bytes: memcached's
         * strtoull ignores what follows a space (a padded number with an
         * append behind it still counts) */
        uint32_t head = old.vlen < ARITH_HEAD ? old.vlen : ARITH_HEAD;
        char *fbuf = NULL;
        if (old.kind == ITEM_KIND_FLASH) {
            int frc =
                ext_read_copy(t, key, klen, r.hash, r.expect, &r.xloc, &fbuf);
            if (frc == -ENOMEM)
                return frc;
            if (frc)
                continue; /* dropped: the retry finds it missing */
        }
        cache_read_lock();
        uint64_t xoff = cache_off(r.expect);
        bool same, claimed = false, fetched = false;
        uint32_t cur_exp = 0;
        if (cache_off_packed(xoff)) {
            /* its result goes to a slab (STORE_SWAP is never packed) */
            struct pitem_view pv;
            same = cache_packed_view(c, xoff, &pv) == 0 && pv.cas == old.cas;
            /* the slot's bits, as the snapshot read them */
            claimed = same && (r.expect & CACHE_LOC_WIN);
            fetched = same && (r.expect & CACHE_LOC_FETCHED);
            if (same) {
                pm_read(digits, pv.value, head);
                cur_exp = cache_packed_exp(c, xoff, &pv);
            }
        } else {
            const struct item_hdr *it = cache_item_at(c, xoff);
            same = item_cas(it) == old.cas;
            /* the chunk's DRAM bits only while it is known to be the item:
             * a freed chunk's page may be joining another class */
            claimed = same && cache_bit_claimed(c, xoff);
            fetched = same && cache_bit_fetched(c, xoff);
            if (same && fbuf)
                memcpy(digits, fbuf, head);
            else if (same)
                pm_read(digits, item_value(it), head);
            cur_exp = __atomic_load_n(&it->exptime, __ATOMIC_RELAXED);
        }
        free(fbuf);
        r.hdr = old;
        if (same && !(o && o->touch))
            store_carry_exptime(&r, cur_exp);
        cache_read_unlock();
        if (!same)
            continue;
        if (!parse_u64(digits, head, &v) ||
            (head < old.vlen && number_end(digits, head) == head))
            return TC_NON_NUMERIC; /* runs on past what we read */
        v = incr ? v + delta : (delta > v ? 0 : v - delta);
        int len =
            snprintf(digits, sizeof(digits), "%llu", (unsigned long long)v);
        struct iovec iov[2] = {{digits, (size_t)len}};
        int niov = 1;
        char *pad = NULL;
        /* a number that fits is rewritten in place by memcached: the old
         * length, space padded, the stale mark and the recache win kept;
         * a longer one is a new item */
        if ((uint32_t)len <= old.vlen) {
            size_t sp = old.vlen - (uint32_t)len;
            if (sp <= sizeof(digits) - (size_t)len) {
                memset(digits + len, ' ', sp);
                iov[0].iov_len += sp;
            } else if ((pad = malloc(sp)) != NULL) {
                memset(pad, ' ', sp);
                iov[niov++] = (struct iovec){pad, sp};
            } else {
                return -ENOMEM;
            }
            r.claim_win = claimed;
            r.keep_fetched = fetched;
            r.in_place = true;
        } else {
            r.hdr.iflags &= (uint8_t)~ITEM_STALE;
        }
        r.hdr.vlen = (uint32_t)(iov[0].iov_len + (pad ? iov[1].iov_len : 0));
        if (o && o->touch)
            r.hdr.exptime = cache_exptime(o->exptime, clock_now());
        r.cas_new = o ? o->cas_new : 0;
        r.val = (struct item_src){iov, niov};
        int rc = store_one(t, &r, NULL);
        free(pad);
        if (rc == -EAGAIN)
            continue;
        if (rc == TC_OK) {
            cache_cls_inc(t, r.cls, incr ? CLS_INCR_HITS : CLS_DECR_HITS);
            *value = v;
            fill_info(info, &r.hdr);
            if (info)
                info->exptime_before = old.exptime;
        }
        return rc;
    }
    return -EBUSY;
}

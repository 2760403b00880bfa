/*
 * Stats groups (src/server/stats.h): memcached's names and formats, engine
 * counters from tc_stats()/tc_slab_stats(), server figures and counters
 * from the server's hooks (struct stats_hooks).
 *
 * Concurrency: no state of its own; what it reads is guarded where it
 * lives (stats.h for the counters, conn.c for the connection lists).
 */

#include "src/server/stats.h"

#include "src/base/clock.h"
#include "src/server/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

void
stats_ctr_sum(const struct stats_ctr *c, uint64_t sum[STATS_CTR_COUNT])
{
    for (int i = 0; i < STATS_CTR_COUNT; i++)
        sum[i] += atomic_load_explicit(&c->v[i], memory_order_relaxed);
}

void
stats_base_init(struct stats_base *b)
{
    pthread_mutex_init(&b->lock, NULL);
    memset(b->v, 0, sizeof(b->v));
}

void
stats_base_fini(struct stats_base *b)
{
    pthread_mutex_destroy(&b->lock);
}

static void
stat_u64(struct obuf *out, const char *name, uint64_t v)
{
    obuf_printf(out, "STAT %s %llu\r\n", name, (unsigned long long)v);
}

/* --- "stats" --- */

/* One line per row of a run of TC_STATS_COUNTERS (src/tiercache.h), from
 * struct tc_stats *t into struct obuf *out. */
#define ENGINE_LINE(id, field, name, kind) stat_u64(out, name, t->field);

static void
general_process(struct obuf *out, const struct stats_info *in)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    stat_u64(out, "pid", (uint64_t)getpid());
    stat_u64(out, "uptime", in->uptime);
    stat_u64(out, "time", clock_now());
    obuf_printf(out, "STAT version %s\r\n", TC_VERSION);
    stat_u64(out, "pointer_size", 8 * sizeof(void *));
    obuf_printf(out, "STAT rusage_user %ld.%06ld\r\n", (long)ru.ru_utime.tv_sec,
                (long)ru.ru_utime.tv_usec);
    obuf_printf(out, "STAT rusage_system %ld.%06ld\r\n",
                (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
}

static void
general_conns(struct obuf *out, const struct stats_info *in,
              const uint64_t *ctr)
{
    stat_u64(out, "max_connections", in->settings.maxconns);
    stat_u64(out, "curr_connections", in->curr_conns);
    stat_u64(out, "total_connections", ctr[STATS_TOTAL_CONNS]);
    stat_u64(out, "rejected_connections", ctr[STATS_REJECTED_CONNS]);
    stat_u64(out, "connection_structures", in->curr_conns + in->nlisteners);
}

static void
general_cmds(struct obuf *out, const struct tc_stats *t, const uint64_t *ctr)
{
    TC_STATS_CMD(ENGINE_LINE)
    stat_u64(out, "cmd_meta", ctr[STATS_CMD_META]);
    TC_STATS_HIT(ENGINE_LINE)
    stat_u64(out, "auth_cmds", ctr[STATS_AUTH_CMDS]);
    stat_u64(out, "auth_errors", ctr[STATS_AUTH_ERRORS]);
}

static unsigned
log2_floor(uint64_t v)
{
    unsigned n = 0;
    while (v > 1) {
        v >>= 1;
        n++;
    }
    return n;
}

static void
general_server(struct obuf *out, const struct stats_info *in,
               const struct tc_stats *t, const uint64_t *ctr)
{
    stat_u64(out, "bytes_read", ctr[STATS_BYTES_READ]);
    stat_u64(out, "bytes_written", ctr[STATS_BYTES_WRITTEN]);
    stat_u64(out, "limit_maxbytes", t->limit_maxbytes);
    stat_u64(out, "accepting_conns", in->accepting);
    stat_u64(out, "listen_disabled_num", ctr[STATS_LISTEN_DISABLED]);
    stat_u64(out, "threads", in->nworkers);
    stat_u64(out, "conn_yields", ctr[STATS_CONN_YIELDS]);
    stat_u64(out, "idle_kicks", ctr[STATS_IDLE_KICKS]);
    stat_u64(out, "hash_power_level", log2_floor(t->index_buckets));
    stat_u64(out, "hash_bytes", t->dram_index_bytes);
    stat_u64(out, "hash_is_expanding", t->index_growing);
    stat_u64(out, "slab_reassign_running", t->slab_reassign_running);
    TC_STATS_SLAB(ENGINE_LINE)
}

static void
general_items(struct obuf *out, const struct tc_stats *t)
{
    TC_STATS_ITEM(ENGINE_LINE)
    stat_u64(out, "total_malloced", t->total_malloced);
}

static void
general_tiercache(struct obuf *out, const struct tc_stats *t,
                  const uint64_t *ctr)
{
    stat_u64(out, "tc_pmem_bytes", t->pmem_bytes);
    stat_u64(out, "tc_pmem_is_pmem", t->pmem_is_pmem);
    stat_u64(out, "tc_pmem_pages_total", t->pmem_pages_total);
    stat_u64(out, "tc_pmem_pages_free", t->pmem_pages_free);
    stat_u64(out, "tc_dram_index_bytes", t->dram_index_bytes);
    stat_u64(out, "tc_dram_meta_bytes", t->dram_meta_bytes);
    stat_u64(out, "tc_quota_refills", t->quota_refills);
    stat_u64(out, "tc_index_buckets", t->index_buckets);
    stat_u64(out, "tc_index_overflow_buckets", t->index_overflow_buckets);
    TC_STATS_SWEEP(ENGINE_LINE)
    stat_u64(out, "tc_cmd_total", ctr[STATS_CMD_TOTAL]);
    stat_u64(out, "tc_cmd_bin", ctr[STATS_CMD_BIN]);
    stat_u64(out, "tc_get_multi", ctr[STATS_GET_MULTI]);
    stat_u64(out, "tc_protocol_errors", ctr[STATS_PROTO_ERRORS]);
    stat_u64(out, "tc_udp_dropped_requests", ctr[STATS_UDP_DROPPED_REQS]);
    stat_u64(out, "tc_udp_dropped_replies", ctr[STATS_UDP_DROPPED_REPLIES]);
    /* hot keys in DRAM */
    TC_STATS_HOTKEY(ENGINE_LINE)
    stat_u64(out, "hot_pool_bytes", t->hot_pool_bytes);
    stat_u64(out, "hot_pool_limit", t->hot_pool_limit);
}

/* What the start found in the pool file (tc_open_info). */
static void
general_restart(struct obuf *out, struct tc_cache *c)
{
    static const char *const kinds[] = {"cold", "warm", "recovered"};
    struct tc_open_info oi;
    tc_open_info(c, &oi);
    obuf_printf(out, "STAT restart_kind %s\r\n",
                (unsigned)oi.kind < 3 ? kinds[oi.kind] : "cold");
    stat_u64(out, "restart_items", oi.items);
    stat_u64(out, "restart_bytes", oi.bytes);
    stat_u64(out, "restart_dropped", oi.dropped);
    obuf_printf(out, "STAT restart_seconds %.6f\r\n", oi.seconds);
}

/* The NVMe tier: memcached's extstore names where the meaning
 * matches, shown only when a tier is configured, as memcached does. */
static void
general_extstore(struct obuf *out, const struct tc_stats *t)
{
    if (!t->ext_enabled)
        return;
    TC_STATS_EXTSTORE(ENGINE_LINE)
    stat_u64(out, "extstore_page_reclaims", t->extstore_page_reclaims);
    stat_u64(out, "extstore_objects_lost", t->extstore_objects_lost);
    stat_u64(out, "extstore_compact_rescues", t->extstore_compact_rescues);
    stat_u64(out, "extstore_compact_skipped", t->extstore_compact_skipped);
    stat_u64(out, "extstore_pages_free", t->extstore_pages_free);
    stat_u64(out, "extstore_bytes_used", t->extstore_bytes_used);
    stat_u64(out, "extstore_bytes_fragmented", t->extstore_bytes_dead);
    stat_u64(out, "extstore_limit_maxbytes", t->extstore_limit_maxbytes);
    stat_u64(out, "extstore_bytes_written", t->extstore_bytes_written);
    stat_u64(out, "extstore_bytes_read", t->extstore_bytes_read);
    stat_u64(out, "extstore_objects_written", t->extstore_objects_written);
    stat_u64(out, "extstore_objects_read", t->extstore_objects_read);
    TC_STATS_EXT(ENGINE_LINE)
    stat_u64(out, "tc_ext_write_errors", t->ext_write_errors);
    stat_u64(out, "tc_ext_read_p50_us", t->ext_read_p50_ns / 1000);
    stat_u64(out, "tc_ext_read_p99_us", t->ext_read_p99_ns / 1000);
    stat_u64(out, "tc_ext_read_p999_us", t->ext_read_p999_ns / 1000);
    stat_u64(out, "tc_ext_uring", t->ext_uring);
}

/* The packed small-item store, once it held a segment (it is off, or
 * has stored nothing, otherwise). */
static void
general_packed(struct obuf *out, const struct tc_stats *t)
{
    if (!t->packed_segments && !t->packed_segments_evicted &&
        !t->packed_segments_expired)
        return;
    TC_STATS_PACKED(ENGINE_LINE)
}

/* "stats tiers": every tier's items and bytes. DRAM is the hot-key pool
 * (bytes: its blocks in use); PMEM counts flash headers in its bytes and
 * their values under NVMe. */
static void
tiers(struct tc_cache *c, struct obuf *out)
{
    struct tc_stats t;
    tc_stats(c, &t);
    stat_u64(out, "dram:items", t.hotkey_current);
    stat_u64(out, "dram:bytes", t.hot_pool_bytes);
    stat_u64(out, "dram:limit_maxbytes", t.hot_pool_limit);
    stat_u64(out, "pmem:items", t.curr_items - t.ext_items - t.hotkey_current);
    stat_u64(out, "pmem:bytes",
             t.bytes > t.hot_pool_bytes ? t.bytes - t.hot_pool_bytes : 0);
    stat_u64(out, "pmem:limit_maxbytes", t.limit_maxbytes);
    stat_u64(out, "nvme:items", t.ext_items);
    stat_u64(out, "nvme:bytes", t.ext_item_bytes);
    stat_u64(out, "nvme:bytes_used", t.extstore_bytes_used);
    stat_u64(out, "nvme:limit_maxbytes", t.extstore_limit_maxbytes);
}

static void
general(const struct stats_hooks *h, struct server *srv, struct obuf *out)
{
    struct stats_info in;
    struct tc_stats t;
    uint64_t ctr[STATS_CTR_COUNT];
    h->info(srv, &in);
    h->ctr_sum(srv, ctr);
    tc_stats(in.cache, &t);
    general_process(out, &in);
    general_conns(out, &in, ctr);
    general_cmds(out, &t, ctr);
    general_server(out, &in, &t, ctr);
    if (in.tls && in.settings.ssl_session_cache)
        stat_u64(out, "ssl_new_sessions", in.tls_new_sessions);
    if (in.tls) { /* memcached shows them only with -Z too */
        stat_u64(out, "ssl_handshake_errors", ctr[STATS_SSL_HANDSHAKE_ERRORS]);
        stat_u64(out, "time_since_server_cert_refresh", in.tls_cert_age);
    }
    general_items(out, &t);
    general_tiercache(out, &t, ctr);
    general_restart(out, in.cache);
    general_extstore(out, &t);
    general_packed(out, &t);
}

/* --- "stats slabs", "stats items" --- */

static void
slabs(struct tc_cache *c, struct obuf *out)
{
    int n = tc_slab_nclasses(c);
    unsigned active = 0;
    for (int i = 0; i < n; i++) {
        struct tc_slab_stats s;
        if (tc_slab_stats(c, i, &s) != 0 || s.total_pages == 0)
            continue;
        int id = i + 1; /* memcached's class ids start at 1 */
        active++;
        obuf_printf(out, "STAT %d:chunk_size %u\r\n", id, s.chunk_size);
        obuf_printf(out, "STAT %d:chunks_per_page %u\r\n", id,
                    s.chunks_per_page);
        obuf_printf(out, "STAT %d:total_pages %u\r\n", id, s.total_pages);
        obuf_printf(out, "STAT %d:total_chunks %llu\r\n", id,
                    (unsigned long long)s.total_chunks);
        obuf_printf(out, "STAT %d:used_chunks %llu\r\n", id,
                    (unsigned long long)s.used_chunks);
        obuf_printf(out, "STAT %d:free_chunks %llu\r\n", id,
                    (unsigned long long)s.free_chunks);
        obuf_printf(out, "STAT %d:free_chunks_end 0\r\n", id);
        const struct {
            const char *name;
            uint64_t v;
        } cmd[] = {
            {"get_hits", s.get_hits},       {"cmd_set", s.cmd_set},
            {"delete_hits", s.delete_hits}, {"incr_hits", s.incr_hits},
            {"decr_hits", s.decr_hits},     {"cas_hits", s.cas_hits},
            {"cas_badval", s.cas_badval},   {"touch_hits", s.touch_hits},
        };
        for (size_t k = 0; k < sizeof(cmd) / sizeof(cmd[0]); k++)
            obuf_printf(out, "STAT %d:%s %llu\r\n", id, cmd[k].name,
                        (unsigned long long)cmd[k].v);
    }
    struct tc_stats t;
    tc_stats(c, &t);
    stat_u64(out, "active_slabs", active);
    stat_u64(out, "total_malloced", t.total_malloced);
}

static void
items(struct tc_cache *c, struct obuf *out)
{
    int n = tc_slab_nclasses(c);
    for (int i = 0; i < n; i++) {
        struct tc_slab_stats s;
        if (tc_slab_stats(c, i, &s) != 0 || s.used_chunks == 0)
            continue;
        obuf_printf(out, "STAT items:%d:number %llu\r\n", i + 1,
                    (unsigned long long)s.used_chunks);
    }
}

/* --- "stats hotspot" (write-hotspot tracker, doc/hotspots.md) --- */

#define STATS_HOTSPOT_TOP 10

static void
hotspot(struct tc_cache *c, struct obuf *out)
{
    struct tc_hotspot h;
    struct tc_hotspot_block top[STATS_HOTSPOT_TOP];

    tc_hotspot_get(c, &h);
    stat_u64(out, "hotspot_enabled", h.dimms != 0);
    if (h.dimms == 0)
        return;
    stat_u64(out, "hotspot_dimms", h.dimms);
    stat_u64(out, "hotspot_interleave", h.interleave);
    stat_u64(out, "hotspot_sample", h.sample);
    stat_u64(out, "hotspot_block_bytes", TC_HOTSPOT_BLOCK_SIZE);
    stat_u64(out, "hotspot_map_bytes", h.map_bytes);
    stat_u64(out, "hotspot_sampled_bytes", h.sampled_bytes);
    for (unsigned d = 0; d < h.dimms; d++) {
        obuf_printf(out, "STAT hotspot_dimm_%u_bytes %llu\r\n", d,
                    (unsigned long long)h.dimm_bytes[d]);
        obuf_printf(out, "STAT hotspot_dimm_%u_writes %llu\r\n", d,
                    (unsigned long long)h.dimm_writes[d]);
    }
    obuf_printf(out, "STAT hotspot_skew %.3f\r\n", h.skew);
    int n = tc_hotspot_top(c, top, STATS_HOTSPOT_TOP);
    for (int i = 0; i < n; i++)
        obuf_printf(out,
                    "STAT hotspot_top_%d block=%llu bytes=%llu writes=%llu "
                    "what=%s\r\n",
                    i, (unsigned long long)top[i].block,
                    (unsigned long long)top[i].bytes,
                    (unsigned long long)top[i].writes, top[i].what);
}

/* --- "stats hotkeys" --- */

#define HOTKEYS_SHOWN 64

/* A key as text: bytes outside printable ASCII (binary protocol keys) as
 * \xNN, so that a line stays one line. */
static void
key_text(struct obuf *out, const struct tc_hotkey *k)
{
    for (unsigned i = 0; i < k->klen; i++) {
        unsigned char ch = (unsigned char)k->key[i];
        if (ch > ' ' && ch < 0x7f && ch != '\\')
            obuf_printf(out, "%c", ch);
        else
            obuf_printf(out, "\\x%02x", ch);
    }
}

/* The top keys by write rate ("write:N:...") and by read rate
 * ("read:N:..."), heaviest first, as of the last maintenance step. */
static void
hotkeys(struct tc_cache *c, struct obuf *out)
{
    struct tc_hotkey *k = malloc(HOTKEYS_SHOWN * sizeof(*k));
    if (!k)
        return;
    for (int pass = 0; pass < 2; pass++) {
        const char *by = pass ? "read" : "write";
        int n = tc_hotkeys(c, pass == 1, k, HOTKEYS_SHOWN);
        for (int i = 0; i < n; i++) {
            obuf_printf(out, "STAT %s:%d:key ", by, i + 1);
            key_text(out, &k[i]);
            obuf_printf(out, "\r\nSTAT %s:%d:write_rate %.1f\r\n", by, i + 1,
                        k[i].write_rate);
            obuf_printf(out, "STAT %s:%d:read_rate %.1f\r\n", by, i + 1,
                        k[i].read_rate);
            obuf_printf(out, "STAT %s:%d:in_dram %s\r\n", by, i + 1,
                        k[i].in_dram ? "yes" : "no");
        }
    }
    free(k);
}

/* --- "stats conns" --- */

static void
conn_line(void *arg, const struct conn_view *v)
{
    struct obuf *out = arg;
    obuf_printf(out, "STAT %d:addr %s\r\n", v->fd, v->addr);
    if (v->listen_addr)
        obuf_printf(out, "STAT %d:listen_addr %s\r\n", v->fd, v->listen_addr);
    obuf_printf(out, "STAT %d:state %s\r\n", v->fd, v->state);
    obuf_printf(out, "STAT %d:secs_since_last_cmd %u\r\n", v->fd, v->idle_secs);
}

/* --- entry points --- */

int
stats_group(const struct stats_hooks *h, struct server *srv,
            struct proto_sess *s, const char *group, struct obuf *out)
{
    (void)s;
    if (!strcmp(group, "")) {
        general(h, srv, out);
        return 0;
    }
    if (!strcmp(group, "conns")) {
        h->conns_walk(srv, conn_line, out);
        return 0;
    }
    if (!strcmp(group, "sizes")) {
        obuf_add_str(out, "STAT sizes_status disabled\r\n");
        return 0;
    }
    struct stats_info in;
    h->info(srv, &in);
    if (!strcmp(group, "settings"))
        settings_render(&in.settings, out);
    else if (!strcmp(group, "slabs"))
        slabs(in.cache, out);
    else if (!strcmp(group, "items"))
        items(in.cache, out);
    else if (!strcmp(group, "hotspot"))
        hotspot(in.cache, out);
    else if (!strcmp(group, "hotkeys"))
        hotkeys(in.cache, out);
    else if (!strcmp(group, "tiers"))
        tiers(in.cache, out);
    else
        return -ENOENT;
    return 0;
}

/*
 * The saved state: written at a clean close, read back at the next open
 * (src/engine/restart_save.h).
 *
 * Concurrency: none of its own; the save runs in cache_close after every
 * thread context is gone, the load at open before the cache is shared.
 */
#include "src/engine/restart_save.h"

#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/engine/restart_save_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        log_info("pool %s: saved state %s removed: this start does not use "
                 "it",
                 region_path(c->region), c->cfg.restart_file);
}

/* --- save --- */

/* The header for this close. */
static void
save_fill(struct cache *c, struct restart_saved_hdr *h)
{
    const struct region_header *rh = pool_hdr(c);
    memset(h, 0, sizeof(*h));
    h->magic = RESTART_SAVED_MAGIC;
    h->version = RESTART_SAVED_VERSION;
    h->hdr_bytes = sizeof(*h);
    h->cas_seq = atomic_load_explicit(&c->cas_seq, memory_order_relaxed);
    h->pool_created = rh->created_unix;
    h->pool_opens = rh->open_count;
    h->pool_bytes = rh->file_size;
    memcpy(&h->meta, region_user(c->region), sizeof(h->meta));
    int64_t s[ST_COUNT];
    cache_stats_sum(c, s);
    h->items = s[ST_CURR_ITEMS] > 0 ? (uint64_t)s[ST_CURR_ITEMS] : 0;
    h->hdr_sum = hdr_sum(h);
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
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
        log_warn("pool %s: cannot save the state: the path %s is too long; "
                 "the next start takes the CAS counter from the items",
                 region_path(c->region), path);
        return;
    }
    struct restart_saved_hdr h;
    save_fill(c, &h);
    int err = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        err = errno;
    else if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
        err = errno ? errno : EIO;
    else if (fdatasync(fd) != 0)
        err = errno;
    if (fd >= 0 && close(fd) != 0 && !err)
        err = errno;
    if (!err && rename(tmp, path) != 0)
        err = errno;
    if (err) {
        log_warn("pool %s: cannot save the state to %s: %s; the next start "
                 "takes the CAS counter from the items",
                 region_path(c->region), path, strerror(err));
        unlink(tmp);
    } else {
        log_info("pool %s: state saved to %s (CAS counter %llu, %llu items)",
                 region_path(c->region), path, (unsigned long long)h.cas_seq,
                 (unsigned long long)h.items);
    }
}

int
restart_save_register(struct cache *c)
{
    static const struct cache_module m = {.close = save_close};
    return cache_add_module(c, &m);
}

/* --- load --- */

/* Whether the file at fd is this pool's last clean close's: NULL, with
 * *h filled, or why not. */
static const char *
load_check(struct cache *c, int fd, struct restart_saved_hdr *h)
{
    const struct region_header *rh = pool_hdr(c);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(*h) ||
        pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
        return "it is shorter than its header";
    if (h->magic != RESTART_SAVED_MAGIC ||
        h->version != RESTART_SAVED_VERSION || h->hdr_bytes != sizeof(*h) ||
        h->hdr_sum != hdr_sum(h))
        return "its header fails its check";
    if ((uint64_t)st.st_size != sizeof(*h))
        return "its size is not what its header says";
    if (h->pool_created != rh->created_unix ||
        h->pool_opens + 1 != rh->open_count || h->pool_bytes != rh->file_size ||
        memcmp(&h->meta, region_user(c->region), sizeof(h->meta)) != 0)
        return "it was not written by this pool's last clean close";
    return NULL;
}

int
restart_save_load(struct cache *c, struct tc_open_info *info, uint64_t *cas_seq,
                  uint64_t *items)
{
    const char *path = c->cfg.restart_file;
    if (!path) {
        snprintf(info->reason, sizeof(info->reason),
                 "without saved state: none configured");
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(info->reason, sizeof(info->reason), "without saved state: %s",
                 strerror(errno));
        log_info("pool %s: no saved state %s (%s): the CAS counter resumes "
                 "above the items'",
                 region_path(c->region), path, strerror(errno));
        return 0;
    }
    struct restart_saved_hdr h;
    const char *why = load_check(c, fd, &h);
    close(fd);
    /* used once: whatever happens next, a later start must not see it */
    unlink(path);
    if (why) {
        snprintf(info->reason, sizeof(info->reason),
                 "without saved state: it failed a check");
        log_warn("pool %s: saved state %s not used: %s; the CAS counter "
                 "resumes above the items'",
                 region_path(c->region), path, why);
        return 0;
    }
    *cas_seq = h.cas_seq;
    *items = h.items;
    snprintf(info->reason, sizeof(info->reason), "with the saved state");
    return 1;
}

/*
 * The NVMe store's fallback where io_uring is refused (-ENOSYS, -EPERM) or
 * not wanted (no_uring): a small pool of threads doing pread for the read
 * rings, and the pread/pwrite loops the writer and compaction use.
 *
 * Concurrency:
 *   s->pool_mu       guards the job queue and pool_stop (a leaf lock: a job
 *                    is finished with pool_mu released)
 *   a job            belongs to the pool from nvs_io_submit() until its
 *                    done() callback, which runs on the pool thread
 *   fallback_logged  atomic exchange: the message is printed once
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "src/base/err.h"
#include "src/base/log.h"
#include "tier/nvs_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_bool fallback_logged;

void
nvs_io_log_fallback(const char *why)
{
    if (!atomic_exchange_explicit(&fallback_logged, true, memory_order_relaxed))
        log_warn("nvs: io_uring is not available (%s); the NVMe store uses "
                 "a pread/pwrite thread pool instead",
                 why);
}

int
nvs_io_pwrite_all(int fd, const void *buf, uint64_t len, uint64_t off)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        p += n;
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

int
nvs_io_pread_all(int fd, void *buf, uint64_t len, uint64_t off)
{
    char *p = buf;
    uint64_t done = 0;

    while (done < len) {
        ssize_t n = pread(fd, p + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break; /* end of file: the caller sees a short count */
        done += (uint64_t)n;
    }
    return (int)done;
}

static void *
pool_main(void *arg)
{
    struct nvs *s = arg;

    pthread_setname_np(pthread_self(), "tc-nvs-io");
    pthread_mutex_lock(&s->pool_mu);
    for (;;) {
        while (s->pool_head == NULL && !s->pool_stop)
            pthread_cond_wait(&s->pool_cond, &s->pool_mu);
        struct nvs_io_job *j = s->pool_head;
        if (j == NULL)
            break;
        s->pool_head = j->next;
        if (s->pool_head == NULL)
            s->pool_tail = NULL;
        pthread_mutex_unlock(&s->pool_mu);

        if (j->delay_ms > 0) {
            struct timespec ts = {.tv_sec = j->delay_ms / 1000,
                                  .tv_nsec =
                                      (long)(j->delay_ms % 1000) * 1000000L};
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        }
        j->res = nvs_io_pread_all(j->fd, j->buf, j->len, j->foff);
        j->done(j);

        pthread_mutex_lock(&s->pool_mu);
    }
    pthread_mutex_unlock(&s->pool_mu);
    return NULL;
}

void
nvs_io_submit(struct nvs *s, struct nvs_io_job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&s->pool_mu);
    if (s->pool_tail != NULL)
        s->pool_tail->next = job;
    else
        s->pool_head = job;
    s->pool_tail = job;
    pthread_cond_signal(&s->pool_cond);
    pthread_mutex_unlock(&s->pool_mu);
}

/* Start the pool when the store runs without io_uring. */
int
nvs_io_setup(struct nvs *s)
{
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_cond_init(&s->pool_cond, NULL);
    if (s->uring)
        return 0;
    if (s->cfg.no_uring)
        nvs_io_log_fallback("no_uring is set");
    s->pool_thr = calloc(s->cfg.io_threads, sizeof(*s->pool_thr));
    if (s->pool_thr == NULL) {
        err_set("out of memory for the NVMe I/O threads");
        return -ENOMEM;
    }
    for (unsigned i = 0; i < s->cfg.io_threads; i++) {
        int e = pthread_create(&s->pool_thr[i], NULL, pool_main, s);
        if (e != 0) {
            err_set("cannot start an NVMe I/O thread: %s", strerror(e));
            nvs_io_teardown(s);
            return -e;
        }
        s->pool_n++;
    }
    return 0;
}

/* Stop the pool after the jobs queued so far. */
void
nvs_io_teardown(struct nvs *s)
{
    pthread_mutex_lock(&s->pool_mu);
    s->pool_stop = true;
    pthread_cond_broadcast(&s->pool_cond);
    pthread_mutex_unlock(&s->pool_mu);
    for (unsigned i = 0; i < s->pool_n; i++)
        pthread_join(s->pool_thr[i], NULL);
    s->pool_n = 0;
    free(s->pool_thr);
    s->pool_thr = NULL;
    pthread_mutex_destroy(&s->pool_mu);
    pthread_cond_destroy(&s->pool_cond);
}

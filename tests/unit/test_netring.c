/*
 * Unit tests for src/server/netring.c's set-up: the start-up probe and a
 * worker's ring, on this kernel and with liburing's set-up refused (link
 * seams in tests/unit/test_netring.wrap), which is what sends the server
 * back to epoll. The loop itself runs under the protocol suite
 * (TC_NET_ENGINE=uring tests/proto/run.sh, tests/proto/test_netring.py).
 */
#include "src/server/netring.h"

#include "src/base/err.h"
#include "src/server/conn.h"

#include <errno.h>
#include <liburing.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- seams --------------------------------------------------------------- */

static int fail_init;       /* io_uring_queue_init(_params) return this */
static unsigned fail_flags; /* ... only when asked for one of these flags */
static int fail_bufring;    /* io_uring_register_buf_ring() returns this */
static unsigned init_calls;

int __real_io_uring_queue_init(unsigned entries, struct io_uring *ring,
                               unsigned flags);
int __wrap_io_uring_queue_init(unsigned entries, struct io_uring *ring,
                               unsigned flags);
int __real_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                                      struct io_uring_params *p);
int __wrap_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                                      struct io_uring_params *p);
int __real_io_uring_register_buf_ring(struct io_uring *ring,
                                      struct io_uring_buf_reg *reg,
                                      unsigned flags);
int __wrap_io_uring_register_buf_ring(struct io_uring *ring,
                                      struct io_uring_buf_reg *reg,
                                      unsigned flags);

static bool
refuse(unsigned flags)
{
    init_calls++;
    return fail_init && (!fail_flags || (flags & fail_flags));
}

int
__wrap_io_uring_queue_init(unsigned entries, struct io_uring *ring,
                           unsigned flags)
{
    if (refuse(flags))
        return fail_init;
    return __real_io_uring_queue_init(entries, ring, flags);
}

int
__wrap_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                                  struct io_uring_params *p)
{
    if (refuse(p->flags))
        return fail_init;
    return __real_io_uring_queue_init_params(entries, ring, p);
}

int
__wrap_io_uring_register_buf_ring(struct io_uring *ring,
                                  struct io_uring_buf_reg *reg, unsigned flags)
{
    if (fail_bufring)
        return fail_bufring;
    return __real_io_uring_register_buf_ring(ring, reg, flags);
}

/* The connection layer, as netring.c calls it: each connection is one of
 * two fakes, whose input is recorded. */
struct fake_conn {
    int fd;
    int slot;
    char in[64];
    size_t in_len;
    bool err, eof;
};
static struct fake_conn fake[2];
static struct conn_worker *fake_w;
static _Atomic bool fake_stop;
static struct timespec fake_start;
static int fake_next_fd; /* the new connection's socket, for the hand-off */

void __wrap_conn_input(struct conn *c, const void *p, size_t n, bool err);
void __wrap_conn_input_done(struct conn *c);
void __wrap_conn_sent(struct conn *c, int res);
uint32_t __wrap_conn_now(const struct conn_shared *sh);
void __wrap_conn_sweep_idle(struct conn_worker *w);
void __wrap_tc_thread_poll(struct tc_cache *c);
void __wrap_tc_thread_quiesce(struct tc_cache *c);

void
__wrap_conn_input(struct conn *c, const void *p, size_t n, bool err)
{
    struct fake_conn *f = (struct fake_conn *)c;
    if (err)
        f->err = true;
    else if (n == 0)
        f->eof = true;
    else if (f->in_len + n <= sizeof(f->in)) {
        memcpy(f->in + f->in_len, p, n);
        f->in_len += n;
    }
}

/* Connection 0 failing ends as conn_destroy() ends it: detach, close; and
 * the acceptor's next socket gets the number at once (dup2 stands for the
 * race, whose window is the rest of this loop turn), with a request
 * already in it, and is attached as connection 1. */
void
__wrap_conn_input_done(struct conn *c)
{
    struct fake_conn *f = (struct fake_conn *)c;
    const struct conn_io *io = fake_w->io;
    if (f == &fake[0] && f->err && fake[1].fd < 0) {
        io->detach(io->arg, f->slot, NULL);
        int num = f->fd;
        close(num);
        assert_int_equal(dup2(fake_next_fd, num), num);
        close(fake_next_fd);
        fake[1].fd = num;
        fake[1].slot = io->attach(io->arg, (struct conn *)&fake[1], num);
        assert_true(fake[1].slot >= 0);
    }
    if (f == &fake[1] && f->in_len == 4)
        atomic_store(&fake_stop, true);
}

void
__wrap_conn_sent(struct conn *c, int res)
{
    (void)c;
    (void)res;
}

static double
fake_elapsed(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - fake_start.tv_sec) +
           (double)(t.tv_nsec - fake_start.tv_nsec) / 1e9;
}

uint32_t
__wrap_conn_now(const struct conn_shared *sh)
{
    (void)sh;
    return (uint32_t)(fake_elapsed() * 4); /* a sweep each 250 ms */
}

/* The bound of the test: a lost request ends the loop after 3 s. */
void
__wrap_conn_sweep_idle(struct conn_worker *w)
{
    (void)w;
    if (fake_elapsed() > 3)
        atomic_store(&fake_stop, true);
}

void
__wrap_tc_thread_poll(struct tc_cache *c)
{
    (void)c;
}

void
__wrap_tc_thread_quiesce(struct tc_cache *c)
{
    (void)c;
}

static int
reset(void **state)
{
    (void)state;
    fail_init = fail_bufring = 0;
    fail_flags = 0;
    init_calls = 0;
    return 0;
}

/* The tests that need a working io_uring skip, with the reason, where the
 * kernel refuses it. */
static void
need_uring(void)
{
    if (netring_probe() != 0) {
        print_message("io_uring refused here: %s\n", err_msg());
        skip();
    }
}

/* ---- tests --------------------------------------------------------------- */

static void
test_probe_here(void **state)
{
    (void)state;
    need_uring();
    assert_true(init_calls >= 1);
}

static void
test_probe_ring_refused(void **state)
{
    (void)state;
    fail_init = -EPERM; /* a seccomp filter, io_uring_disabled */
    assert_int_equal(netring_probe(), -EPERM);
    assert_non_null(strstr(err_msg(), "io_uring refused"));
    assert_non_null(strstr(err_msg(), strerror(EPERM)));
}

static void
test_probe_bufring_refused(void **state)
{
    (void)state;
    need_uring();
    fail_bufring = -EINVAL; /* a kernel before 5.19 */
    assert_int_equal(netring_probe(), -EINVAL);
    assert_non_null(strstr(err_msg(), "provided-buffer"));
}

static void
test_create_refused(void **state)
{
    (void)state;
    struct conn_worker w = {0};
    struct netring *nr = NULL;
    fail_init = -ENOMEM;
    assert_int_equal(netring_create(&w, &nr), -ENOMEM);
    assert_null(nr);
    assert_null(w.io); /* the worker stays on epoll */
    assert_non_null(strstr(err_msg(), "cannot set up an io_uring"));
}

static void
test_create_bufring_refused(void **state)
{
    (void)state;
    need_uring();
    struct conn_worker w = {0};
    struct netring *nr = NULL;
    fail_bufring = -EINVAL;
    assert_int_equal(netring_create(&w, &nr), -EINVAL);
    assert_null(nr);
    assert_null(w.io);
    assert_non_null(strstr(err_msg(), "receive buffers"));
}

/* A kernel without single-issuer rings (before 6.0) says EINVAL to the
 * flags: the ring comes up without them. */
static void
test_create_without_single_issuer(void **state)
{
    (void)state;
    need_uring();
    struct conn_worker w = {0};
    struct netring *nr = NULL;
    fail_init = -EINVAL;
    fail_flags = IORING_SETUP_SINGLE_ISSUER;
    init_calls = 0;
    assert_int_equal(netring_create(&w, &nr), 0);
    assert_int_equal(init_calls, 2);
    assert_non_null(nr);
    assert_non_null(w.io);
    assert_non_null(w.io->attach);
    assert_ptr_equal(w.io->arg, nr);
    netring_destroy(nr);
    assert_null(w.io); /* back to epoll */
}

static void
test_create_and_destroy(void **state)
{
    (void)state;
    need_uring();
    struct conn_worker w = {0};
    struct netring *nr = NULL;
    assert_int_equal(netring_create(&w, &nr), 0);
    assert_non_null(w.io);
    netring_destroy(nr);
    assert_null(w.io);
    netring_destroy(NULL); /* a no-op */
}

/* A connection fails (its peer closed with a reply unread: ECONNRESET)
 * and ends in the same loop turn; its number goes to a new connection
 * whose request is already there. The new connection gets the request:
 * nothing of the old one (a recv armed again after the error, queued but
 * not yet submitted) runs on the new socket. */
static void
test_reused_number_keeps_its_input(void **state)
{
    (void)state;
    need_uring();
    struct conn_shared sh = {0};
    struct conn_worker w = {.sh = &sh};
    struct netring *nr = NULL;
    int a[2], b[2];
    assert_int_equal(netring_create(&w, &nr), 0);
    fake_w = &w;
    memset(fake, 0, sizeof(fake));
    fake[1].fd = -1;
    atomic_store(&fake_stop, false);
    clock_gettime(CLOCK_MONOTONIC, &fake_start);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b), 0);
    fake[0].fd = a[0];
    fake[0].slot = w.io->attach(w.io->arg, (struct conn *)&fake[0], a[0]);
    assert_true(fake[0].slot >= 0);
    /* the reply the client never reads, then its close: a reset */
    assert_int_equal(write(a[0], "OK\r\n", 4), 4);
    close(a[1]);
    /* the next client's request, waiting in its socket */
    fake_next_fd = b[0];
    assert_int_equal(write(b[1], "get\n", 4), 4);
    netring_run(nr, &fake_stop);
    assert_true(fake[0].err);
    assert_true(fake[1].fd >= 0);
    assert_int_equal(fake[1].in_len, 4);
    assert_memory_equal(fake[1].in, "get\n", 4);
    assert_false(fake[1].err);
    w.io->detach(w.io->arg, fake[1].slot, NULL);
    close(fake[1].fd);
    close(b[1]);
    netring_destroy(nr);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_probe_here, reset),
        cmocka_unit_test_setup(test_probe_ring_refused, reset),
        cmocka_unit_test_setup(test_probe_bufring_refused, reset),
        cmocka_unit_test_setup(test_create_refused, reset),
        cmocka_unit_test_setup(test_create_bufring_refused, reset),
        cmocka_unit_test_setup(test_create_without_single_issuer, reset),
        cmocka_unit_test_setup(test_create_and_destroy, reset),
        cmocka_unit_test_setup(test_reused_number_keeps_its_input, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

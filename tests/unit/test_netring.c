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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

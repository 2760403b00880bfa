/*
 * Unit tests for src/server/auth.c's -Y file: what loads, what stops the
 * server (one line naming the file and the line), and auth_file_check()
 * accepting exactly the pairs of the file: not a prefix, not a longer
 * string, not another user's password; SIGHUP's reload. SASL needs a configured
 * libsasl2 and is tested against a started server (tests/proto/test_auth.py).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "src/base/err.h"
#include "src/server/auth.h"

struct fx {
    char path[64];
};

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->path, sizeof(f->path), "/tmp/tc-test-auth-XXXXXX");
    int fd = mkstemp(f->path);
    if (fd < 0) {
        free(f);
        return -1;
    }
    close(fd);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    struct fx *f = *state;
    unlink(f->path);
    free(f);
    return 0;
}

static void
write_file(const struct fx *f, const char *text)
{
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    assert_int_equal(fclose(fp), 0);
}

static struct auth *
load_ok(const struct fx *f, const char *text)
{
    struct auth *a = NULL;
    write_file(f, text);
    err_clear();
    int rc = auth_create(f->path, false, &a);
    if (rc != 0)
        fail_msg("'%s': rc %d, %s", text, rc, err_msg());
    return a;
}

static void
load_bad(const struct fx *f, const char *text, const char *want)
{
    struct auth *a = NULL;
    write_file(f, text);
    err_clear();
    int rc = auth_create(f->path, false, &a);
    if (rc >= 0 || !strstr(err_msg(), want) || !strstr(err_msg(), f->path) ||
        strncmp(err_msg(), "-Y: ", 4) != 0)
        fail_msg("'%s': rc %d, message '%s' (want '%s')", text, rc, err_msg(),
                 want);
    assert_null(strchr(err_msg(), '\n'));
    assert_null(a);
}

static bool
check(struct auth *a, const char *user, const char *pass)
{
    return auth_file_check(a, user, strlen(user), pass, strlen(pass));
}

static void
test_load_and_check(void **state)
{
    struct fx *f = *state;
    struct auth *a = load_ok(f, "foo:bar\nbaaaz:quux\ncarol:pa:ss\n");
    assert_true(check(a, "foo", "bar"));
    assert_true(check(a, "baaaz", "quux"));
    assert_true(check(a, "carol", "pa:ss")); /* the first ':' splits */
    assert_false(check(a, "foo", "ba"));     /* a prefix */
    assert_false(check(a, "foo", "barr"));   /* longer */
    assert_false(check(a, "fo", "bar"));
    assert_false(check(a, "fooo", "bar"));
    assert_false(check(a, "foo", "quux")); /* another user's password */
    assert_false(check(a, "baaaz", "bar"));
    assert_false(check(a, "foo", ""));
    assert_false(check(a, "", ""));
    assert_false(check(a, "nobody", "bar"));
    assert_false(auth_file_check(a, "foo", 3, "bar\0", 4));
    auth_destroy(a);
}

static void
test_line_ends(void **state)
{
    struct fx *f = *state;
    struct auth *a = load_ok(f, "foo:bar\r\nzed:last"); /* CRLF, no "\n" */
    assert_true(check(a, "foo", "bar"));
    assert_true(check(a, "zed", "last"));
    assert_false(check(a, "foo", "bar\r"));
    auth_destroy(a);
}

static void
test_bad_files(void **state)
{
    struct fx *f = *state;
    load_bad(f, "", "has no user:password line");
    load_bad(f, "foo\n", "line 1 has no ':'");
    load_bad(f, "foo:bar\n\nbaz:qux\n", "line 2 is empty");
    load_bad(f, "foo:bar\n:bar\n", "line 2 has an empty user");
    load_bad(f, "foo:\n", "line 1 has an empty password");
    load_bad(f, "foo:b ar\n", "line 1 has a space");
    load_bad(f, "fo\to:bar\n", "line 1 has a space or tab");
    load_bad(f, "foo:bar\n\n", "line 2 is empty");
}

/* SIGHUP's reload: the new users replace the old; a file that no longer
 * loads leaves the old ones. */
static void
test_reload(void **state)
{
    struct fx *f = *state;
    struct auth *a = load_ok(f, "foo:bar\n");
    write_file(f, "foo:newpass\nbob:b\n");
    assert_int_equal(auth_reload(a), 0);
    assert_false(check(a, "foo", "bar"));
    assert_true(check(a, "foo", "newpass"));
    assert_true(check(a, "bob", "b"));
    write_file(f, "broken\n");
    err_clear();
    assert_int_equal(auth_reload(a), -EINVAL);
    assert_non_null(strstr(err_msg(), "line 1 has no ':'"));
    assert_true(check(a, "foo", "newpass"));
    unlink(f->path);
    assert_int_equal(auth_reload(a), -ENOENT);
    assert_true(check(a, "bob", "b"));
    auth_destroy(a);
    assert_int_equal(auth_reload(NULL), 0);
}

static void
test_missing_file(void **state)
{
    (void)state;
    struct auth *a = NULL;
    err_clear();
    assert_int_equal(auth_create("/nonexistent/tc-auth", false, &a), -ENOENT);
    assert_non_null(strstr(err_msg(), "-Y: cannot open auth file "
                                      "/nonexistent/tc-auth"));
    assert_int_equal(auth_create("/tmp", false, &a), -EINVAL);
    assert_non_null(strstr(err_msg(), "is not a regular file"));
    assert_null(a);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_and_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_line_ends, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload, setup, teardown),
        cmocka_unit_test(test_missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

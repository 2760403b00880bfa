/*
 * Unit tests for src/base/num.h: the digit scan and the strict decimal
 * parser every number rule builds on (settings, protocol tokens, incr on a
 * stored value), at the edges where the rules once had their own loops:
 * empty text, a sign, spaces, leading zeros, the 64-bit overflow and a
 * bound below it.
 */

#include <stdint.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "src/base/num.h"

static bool
parse(const char *s, uint64_t max, uint64_t *out)
{
    return num_parse_u64(s, strlen(s), max, out);
}

static void
test_parse(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_true(parse("0", UINT64_MAX, &v));
    assert_true(v == 0);
    assert_true(parse("18446744073709551615", UINT64_MAX, &v));
    assert_true(v == UINT64_MAX);
    assert_true(parse("000000000000000000000000000000000042", UINT64_MAX, &v));
    assert_true(v == 42);
    v = 7;
    /* refused, *out untouched */
    static const char *const bad[] = {
        "",
        "18446744073709551616",
        "99999999999999999999",
        "+1",
        "-0",
        " 1",
        "1 ",
        "1\r",
        "1a",
        "0x10",
        "\xb1",
        "١",
    };
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(bad[i], UINT64_MAX, &v))
            fail_msg("'%s' accepted", bad[i]);
        assert_true(v == 7);
    }
    /* the bound is inclusive; 64-bit overflow is refused under any bound */
    assert_true(parse("4294967295", UINT32_MAX, &v));
    assert_true(v == UINT32_MAX);
    assert_false(parse("4294967296", UINT32_MAX, &v));
    assert_true(parse("9", 9, &v));
    assert_false(parse("10", 9, &v));
    assert_true(parse("0", 0, &v));
    assert_false(parse("1", 0, &v));
    assert_true(parse("9223372036854775808", (uint64_t)INT64_MAX + 1, &v));
    assert_false(parse("9223372036854775809", (uint64_t)INT64_MAX + 1, &v));
    /* the length counts, not a NUL */
    assert_true(num_parse_u64("12x", 2, UINT64_MAX, &v));
    assert_true(v == 12);
    assert_false(num_parse_u64("12", 0, UINT64_MAX, &v));
}

static void
test_scan(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_int_equal(num_scan_u64("123 rest", 8, &v), 3);
    assert_true(v == 123);
    assert_int_equal(num_scan_u64("0012\r\n", 6, &v), 4);
    assert_true(v == 12);
    assert_int_equal(num_scan_u64("12345", 2, &v), 2);
    assert_true(v == 12);
    v = 7;
    assert_int_equal(num_scan_u64(" 1", 2, &v), 0);
    assert_int_equal(num_scan_u64("x", 1, &v), 0);
    assert_int_equal(num_scan_u64("", 0, &v), 0);
    assert_int_equal(num_scan_u64("18446744073709551616 ", 21, &v), 0);
    assert_true(v == 7);
    assert_int_equal(num_scan_u64("18446744073709551615 ", 21, &v), 20);
    assert_true(v == UINT64_MAX);
    /* 19 digits and fewer skip the overflow check: the largest of them,
     * and the 20-digit texts that take the checked loop */
    assert_int_equal(num_scan_u64("9999999999999999999", 19, &v), 19);
    assert_true(v == 9999999999999999999ull);
    assert_int_equal(num_scan_u64("9999999999999999999x", 20, &v), 19);
    assert_true(v == 9999999999999999999ull);
    assert_int_equal(num_scan_u64("00000000000000000001", 20, &v), 20);
    assert_true(v == 1);
    assert_int_equal(num_scan_u64("1234567890123456789", 19, &v), 19);
    assert_true(v == 1234567890123456789ull);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_scan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

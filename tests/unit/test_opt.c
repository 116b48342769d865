/*
 * test_opt.c — the number and size grammar every tool shares
 * (tools/common/opt.h): suffixes, binary multiples, "+N", ranges given in
 * the message, and no value clamped or accepted past int64_t.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/opt.h"

static int64_t size_ok(const char *text)
{
    int64_t v = -1;
    char err[256] = "";
    assert_int_equal(tool_parse_size("-b", text, 0, INT64_MAX, &v, err, sizeof err), 0);
    return v;
}

static void size_bad(const char *text, int64_t lo, int64_t hi, const char *needle)
{
    int64_t v = 12345;
    char err[256] = "";
    assert_int_equal(tool_parse_size("-b", text, lo, hi, &v, err, sizeof err), -1);
    assert_int_equal(v, 12345);   /* untouched on failure */
    assert_non_null(strstr(err, needle));
}

static void test_sizes(void **state)
{
    assert_int_equal(size_ok("4096"), 4096);
    const char *k16[] = {"16k", "16K", "16kB", "16KB", "16KiB", "16kib"};
    for (size_t i = 0; i < sizeof k16 / sizeof k16[0]; i++)
        assert_int_equal(size_ok(k16[i]), 16384);
    assert_int_equal(size_ok("64M"), 64LL << 20);
    assert_int_equal(size_ok("64MiB"), 64LL << 20);
    assert_int_equal(size_ok("1G"), 1LL << 30);
    assert_int_equal(size_ok("1GiB"), 1LL << 30);
    assert_int_equal(size_ok("3G"), 3LL << 30);
    assert_int_equal(size_ok("2T"), 2LL << 40);
    assert_int_equal(size_ok("1M+6"), (1 << 20) + 6);
    assert_int_equal(size_ok("0"), 0);
    size_bad("99999999999999999999", 1, 1LL << 40, "expected a size from 1 B to 1 TiB");
    size_bad("8388608T", 0, INT64_MAX, "'8388608T'");   /* 2^63: overflows */
    size_bad("16X", 0, INT64_MAX, "'16X'");
    size_bad("16KBB", 0, INT64_MAX, "'16KBB'");
    size_bad("-16K", 0, INT64_MAX, "'-16K'");
    size_bad("", 0, INT64_MAX, "''");
    size_bad("K", 0, INT64_MAX, "'K'");
    size_bad("1M+", 0, INT64_MAX, "'1M+'");
    size_bad("1M+-1", 0, INT64_MAX, "'1M+-1'");
    size_bad("2K", 4096, 8192, "from 4 KiB to 8 KiB");
}

static void test_ints(void **state)
{
    int64_t v = 0;
    char err[256];
    assert_int_equal(tool_parse_int("-n", "30", 1, 1000000, &v, err, sizeof err), 0);
    assert_int_equal(v, 30);
    assert_int_equal(tool_parse_int("-n", "1000000000", 1, 1000000, &v, err, sizeof err), -1);
    assert_string_equal(err, "-n '1000000000': expected a whole number from 1 to 1000000");
    assert_int_equal(tool_parse_int("-n", "99999999999999999999", 1, 9, &v, err, sizeof err), -1);
    assert_int_equal(tool_parse_int("-n", "3x", 1, 9, &v, err, sizeof err), -1);
    assert_int_equal(tool_parse_int("-n", "", 1, 9, &v, err, sizeof err), -1);
    assert_int_equal(tool_parse_int("-n", " 3", 1, 9, &v, err, sizeof err), -1);
    assert_int_equal(tool_parse_int("-w", "-1", 0, 9, &v, err, sizeof err), -1);
    assert_int_equal(tool_parse_int("-w", "-1", -5, 9, &v, err, sizeof err), 0);
    assert_int_equal(v, -1);
    double d = 0;
    assert_int_equal(tool_parse_double("--epsilon", "0.25", 0, 100, &d, err, sizeof err), 0);
    assert_true(d == 0.25);
    assert_int_equal(tool_parse_double("--epsilon", "nan", 0, 100, &d, err, sizeof err), -1);
    assert_int_equal(tool_parse_double("--epsilon", "1e999", 0, 100, &d, err, sizeof err), -1);
    assert_int_equal(tool_parse_double("--epsilon", "101", 0, 100, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "from 0 to 100"));
}

static void test_format(void **state)
{
    char b[64];
    assert_string_equal(tool_format_size(0, b, sizeof b), "0 B");
    assert_string_equal(tool_format_size(1000, b, sizeof b), "1000 B");
    assert_string_equal(tool_format_size(16384, b, sizeof b), "16 KiB");
    assert_string_equal(tool_format_size(1LL << 40, b, sizeof b), "1 TiB");
    assert_string_equal(tool_format_size(1536, b, sizeof b), "1.5 KiB (1536 bytes)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_ints),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The one hex parser (kp/hex.h), used by perf maps, kallsyms, symbols and
 * push's percent-decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kp/hex.h"

static void test_digit(void **state)
{
    (void)state;
    const char *digits = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        assert_int_equal(kp_hex_digit(digits[i]), i);
        if (i >= 10)
            assert_int_equal(kp_hex_digit((char)(digits[i] - 'a' + 'A')), i);
    }
    for (int c = 0; c < 256; c++)
        if (!strchr("0123456789abcdefABCDEF", c) || c == 0)
            assert_int_equal(kp_hex_digit((char)c), -1);
}

/* Parses `text` whole (end at its NUL): the bytes read, or -1 for NULL. */
static long parse(const char *text, uint64_t *v)
{
    const char *end = text + strlen(text);
    const char *after = kp_hex_u64(text, end, v);
    return after ? (long)(after - text) : -1;
}

static void test_u64(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_int_equal(parse("ffffffff8a000000 T _stext", &v), 16);
    assert_true(v == 0xffffffff8a000000ull);
    assert_int_equal(parse("7fA0 ", &v), 4);
    assert_true(v == 0x7fa0);
    assert_int_equal(parse("ffffffffffffffff", &v), 16);
    assert_true(v == UINT64_MAX);
    assert_int_equal(parse("000000000000000000001", &v), 21); /* leading zeros */
    assert_true(v == 1);

    v = 7;
    assert_int_equal(parse("", &v), -1);
    assert_int_equal(parse(" 1", &v), -1);
    assert_int_equal(parse("x1", &v), -1);
    assert_int_equal(parse("0x10", &v), 1); /* the caller skips a prefix */
    v = 7;
    assert_int_equal(parse("10000000000000000", &v), -1); /* 2^64 */
    assert_true(v == 7);

    /* stops at `end`, not at the NUL */
    const char text[] = "abcd";
    assert_true(kp_hex_u64(text, text + 2, &v) == text + 2);
    assert_true(v == 0xab);
    assert_null(kp_hex_u64(text, text, &v));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digit),
        cmocka_unit_test(test_u64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

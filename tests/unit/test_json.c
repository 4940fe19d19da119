/* kp_json: string escaping (control characters, valid and invalid UTF-8),
 * numbers with 3 decimals trimmed, non-finite numbers, and allocation
 * failures that leave the buffer as it was. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/json.h"

static void assert_buf(const kp_buf *b, const char *want)
{
    if (b->len != strlen(want) || memcmp(b->data, want, b->len) != 0)
        fail_msg("got [%.*s], want [%s]", (int)b->len, b->data, want);
}

static void check_string(const char *in, size_t len, const char *want)
{
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_json_string(&b, in, len), KP_OK);
    assert_buf(&b, want);
    kp_buf_free(&b);
}

#define CHECK_STRING(in, want) check_string(in, sizeof in - 1, want)

static void test_string_escapes(void **state)
{
    (void)state;
    CHECK_STRING("", "\"\"");
    CHECK_STRING("put", "\"put\"");
    CHECK_STRING("a\"b\\c/d", "\"a\\\"b\\\\c/d\"");
    CHECK_STRING("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"");
    CHECK_STRING("x\001y\037z\177", "\"x\\u0001y\\u001fz\\u007f\"");
    CHECK_STRING("nul\0inside", "\"nul\\u0000inside\"");
    check_string(NULL, 0, "\"\"");
    check_string("abcdef", 3, "\"abc\""); /* only `len` bytes */
}

static void test_string_utf8(void **state)
{
    (void)state;
    /* 2, 3 and 4 byte sequences, the extremes of each range */
    CHECK_STRING("\xc3\xa9t\xc3\xa9", "\"\xc3\xa9t\xc3\xa9\"");
    CHECK_STRING("\xc2\x80\xdf\xbf", "\"\xc2\x80\xdf\xbf\"");
    CHECK_STRING("\xe0\xa0\x80\xe2\x82\xac\xed\x9f\xbf\xef\xbf\xbf",
                 "\"\xe0\xa0\x80\xe2\x82\xac\xed\x9f\xbf\xef\xbf\xbf\"");
    CHECK_STRING("\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", "\"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"");
    /* one \ufffd per byte that is not part of a valid sequence */
    CHECK_STRING("a\x80z", "\"a\\ufffdz\"");                              /* stray continuation */
    CHECK_STRING("\xc0\xaf", "\"\\ufffd\\ufffd\"");                       /* overlong '/' */
    CHECK_STRING("\xe0\x9f\xbf", "\"\\ufffd\\ufffd\\ufffd\"");            /* overlong 3 bytes */
    CHECK_STRING("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");            /* surrogate */
    CHECK_STRING("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* > U+10FFFF */
    CHECK_STRING("\xf5\xff", "\"\\ufffd\\ufffd\"");
    CHECK_STRING("\xe2\x82", "\"\\ufffd\\ufffd\"");   /* truncated at the end */
    CHECK_STRING("\xe2\x82x", "\"\\ufffd\\ufffdx\""); /* truncated in the middle */
    CHECK_STRING("\xe2\x82\xc3\xa9", "\"\\ufffd\\ufffd\xc3\xa9\"");
}

static void test_string_appends(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_str(&b, "{\"k\":"), KP_OK);
    assert_int_equal(kp_json_string(&b, "v\n", 2), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, '}'), KP_OK);
    assert_buf(&b, "{\"k\":\"v\\n\"}");
    kp_buf_free(&b);
}

static void check_double(double v, const char *want)
{
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_json_double(&b, v), KP_OK);
    assert_buf(&b, want);
    kp_buf_free(&b);
}

static void test_double(void **state)
{
    (void)state;
    check_double(0, "0");
    check_double(-0.0, "0");
    check_double(2, "2");
    check_double(10, "10");
    check_double(1.5, "1.5");
    check_double(0.25, "0.25");
    check_double(-2.25, "-2.25");
    check_double(1234.5678, "1234.568");
    check_double(0.0004, "0");
    check_double(-0.0004, "0");
    check_double(0.0996, "0.1");
    check_double(99.9996, "100");
    check_double(1e20, "100000000000000000000");
    check_double(NAN, "null");
    check_double(INFINITY, "null");
    check_double(-INFINITY, "null");
    /* the largest double: 309 digits, no decimals, no exponent */
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_json_double(&b, 1.7976931348623157e308), KP_OK);
    assert_int_equal(b.len, 309);
    assert_memory_equal(b.data, "17976931348623157", 17);
    for (size_t i = 0; i < b.len; i++)
        assert_true(b.data[i] >= '0' && b.data[i] <= '9');
    kp_buf_free(&b);
}

/* Every failing call returns KP_ERR_NOMEM and leaves the buffer as it was,
 * including a failure after part of the string was appended. */
static void test_out_of_memory(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    char big[600];
    memset(big, 'x', sizeof big);
    big[300] = '\n'; /* an escape after a run that fits the first 256 bytes */
    assert_int_equal(kp_buf_append_str(&b, "[1,"), KP_OK);
    long n = 0;
    for (;; n++) {
        kp_fault_alloc_after(n);
        kp_status st = kp_json_string(&b, big, sizeof big);
        kp_fault_alloc_reset();
        if (st == KP_OK)
            break;
        assert_int_equal(st, KP_ERR_NOMEM);
        assert_buf(&b, "[1,");
    }
    assert_true(n >= 1);
    assert_int_equal(b.len, 3 + 2 + sizeof big + 1);
    kp_buf_free(&b);
    kp_fault_alloc_after(0);
    assert_int_equal(kp_json_double(&b, 1.5), KP_ERR_NOMEM);
    assert_int_equal(kp_json_double(&b, NAN), KP_ERR_NOMEM);
    kp_fault_alloc_reset();
    assert_int_equal(b.len, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_string_escapes), cmocka_unit_test(test_string_utf8),
        cmocka_unit_test(test_string_appends), cmocka_unit_test(test_double),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

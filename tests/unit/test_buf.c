/* kp_buf: appends, number formatting, growth, and out-of-memory behaviour
 * (a failed call leaves the buffer exactly as it was). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/buf.h"

static void assert_buf(const kp_buf *b, const char *expected)
{
    size_t n = strlen(expected);
    assert_int_equal(b->len, n);
    assert_true(b->len <= b->cap);
    if (n)
        assert_memory_equal(b->data, expected, n);
}

static void test_append(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append(&b, "", 0), KP_OK); /* nothing to do */
    assert_int_equal(b.len, 0);
    assert_int_equal(kp_buf_append(&b, "ab\0c", 4), KP_OK);
    assert_int_equal(kp_buf_append_str(&b, "de"), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, 'f'), KP_OK);
    assert_int_equal(b.len, 7);
    assert_memory_equal(b.data, "ab\0cdef", 7);
    kp_buf_free(&b);
}

static void test_decimal_and_hex(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_u64(&b, 0), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, ','), KP_OK);
    assert_int_equal(kp_buf_append_u64(&b, 10), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, ','), KP_OK);
    assert_int_equal(kp_buf_append_u64(&b, UINT64_MAX), KP_OK);
    assert_buf(&b, "0,10,18446744073709551615");
    kp_buf_clear(&b);
    assert_int_equal(kp_buf_append_i64(&b, 0), KP_OK);
    assert_int_equal(kp_buf_append_i64(&b, -1), KP_OK);
    assert_int_equal(kp_buf_append_i64(&b, INT64_MIN), KP_OK);
    assert_int_equal(kp_buf_append_i64(&b, INT64_MAX), KP_OK);
    assert_buf(&b, "0-1-92233720368547758089223372036854775807");
    kp_buf_clear(&b);
    assert_int_equal(kp_buf_append_hex(&b, 0), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, ' '), KP_OK);
    assert_int_equal(kp_buf_append_hex(&b, 0x7f00abcdef), KP_OK);
    assert_int_equal(kp_buf_append_char(&b, ' '), KP_OK);
    assert_int_equal(kp_buf_append_hex(&b, UINT64_MAX), KP_OK);
    assert_buf(&b, "0 7f00abcdef ffffffffffffffff");
    kp_buf_free(&b);
}

static void test_growth_keeps_content(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    for (unsigned i = 0; i < 100000; i++)
        assert_int_equal(kp_buf_append_char(&b, (char)('a' + i % 26)), KP_OK);
    assert_int_equal(b.len, 100000);
    for (unsigned i = 0; i < 100000; i++)
        assert_int_equal(b.data[i], 'a' + i % 26);
    kp_buf_free(&b);
}

static void test_reserve_then_append_does_not_allocate(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_str(&b, "x"), KP_OK);
    assert_int_equal(kp_buf_reserve(&b, 5000), KP_OK);
    assert_true(b.cap >= 5001);
    kp_fault_alloc_after(0);
    for (int i = 0; i < 5000; i++)
        assert_int_equal(kp_buf_append_char(&b, 'y'), KP_OK);
    assert_int_equal(kp_fault_alloc_attempts(), 0);
    kp_fault_alloc_reset();
    assert_int_equal(b.len, 5001);
    kp_buf_free(&b);
}

static void test_reserve_overflow(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_str(&b, "keep"), KP_OK);
    assert_int_equal(kp_buf_reserve(&b, SIZE_MAX), KP_ERR_NOMEM);
    assert_int_equal(kp_buf_reserve(&b, SIZE_MAX - 2), KP_ERR_NOMEM);
    assert_int_equal(kp_buf_append(&b, "x", SIZE_MAX / 2), KP_ERR_NOMEM);
    assert_buf(&b, "keep");
    kp_buf_free(&b);
}

static void test_clear_and_free(void **state)
{
    (void)state;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_str(&b, "hello"), KP_OK);
    char *data = b.data;
    size_t cap = b.cap;
    kp_buf_clear(&b);
    assert_int_equal(b.len, 0);
    assert_ptr_equal(b.data, data);
    assert_int_equal(b.cap, cap);
    kp_buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    kp_buf_free(&b);                                         /* twice is harmless */
    assert_int_equal(kp_buf_append_str(&b, "again"), KP_OK); /* reusable */
    assert_buf(&b, "again");
    kp_buf_free(&b);
}

/* Every append, on a buffer that is full so it must grow: with allocation
 * failing after n allocations, a failure returns KP_ERR_NOMEM and changes
 * nothing; the first success gives the expected text. */
enum { APPEND, STR, CHAR, U64, I64, HEX };

static kp_status do_append(kp_buf *b, int kind)
{
    switch (kind) {
    case APPEND: return kp_buf_append(b, "xyz", 3);
    case STR: return kp_buf_append_str(b, "xyz");
    case CHAR: return kp_buf_append_char(b, 'x');
    case U64: return kp_buf_append_u64(b, 12345);
    case I64: return kp_buf_append_i64(b, -12345);
    default: return kp_buf_append_hex(b, 0xabc);
    }
}

static void test_out_of_memory_leaves_buffer_unchanged(void **state)
{
    (void)state;
    static const char *const tails[] = {"xyz", "xyz", "x", "12345", "-12345", "abc"};
    char fill[256];
    memset(fill, 'f', sizeof fill);
    for (int kind = APPEND; kind <= HEX; kind++) {
        /* 0, 1 or 2 bytes free: a partial append would show */
        for (size_t room = 0; room < 3 && room < strlen(tails[kind]); room++) {
            kp_buf b = KP_BUF_INIT;
            size_t fill_len = sizeof fill - room;
            assert_int_equal(kp_buf_append(&b, fill, fill_len), KP_OK);
            assert_int_equal(b.cap - b.len, room);
            kp_status st;
            long n = 0;
            for (;; n++) {
                kp_fault_alloc_after(n);
                st = do_append(&b, kind);
                kp_fault_alloc_reset();
                if (st == KP_OK)
                    break;
                assert_int_equal(st, KP_ERR_NOMEM);
                assert_int_equal(b.len, fill_len);
                assert_memory_equal(b.data, fill, fill_len);
            }
            assert_int_equal(n, 1); /* one allocation needed, and it was tried */
            assert_int_equal(b.len, fill_len + strlen(tails[kind]));
            assert_memory_equal(b.data + fill_len, tails[kind], strlen(tails[kind]));
            kp_buf_free(&b);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_decimal_and_hex),
        cmocka_unit_test(test_growth_keeps_content),
        cmocka_unit_test(test_reserve_then_append_does_not_allocate),
        cmocka_unit_test(test_reserve_overflow),
        cmocka_unit_test(test_clear_and_free),
        cmocka_unit_test(test_out_of_memory_leaves_buffer_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The Erlang process of a native sample (cpu/current_process.c): pid terms
 * as an OTP 25 node holds them (values read from a live node: <0.86.0> was
 * 0x2b00000563, <0.85.0> 0x2a800000553), other tags and releases refused,
 * and reading through process_vm_readv, here from this test's own memory:
 * a word that holds a pid decodes, one that does not is refused, and an
 * unmapped or misaligned address is refused without failing the batch. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu/current_process.h"

static void test_decode(void **state)
{
    (void)state;
    kp_pid_numbers p;
    assert_int_equal(kp_pid_term_decode(0x2b00000563ull, 25, &p), 0);
    assert_int_equal(p.num, 86);
    assert_int_equal(p.serial, 0);
    assert_int_equal(kp_pid_term_decode(0x2a800000553ull, 24, &p), 0);
    assert_int_equal(p.num, 85);
    /* <0.5.2>: the serial above the 15 bits of number */
    assert_int_equal(kp_pid_term_decode(((2ull << 15) | 5) << 4 | 0x3, 25, &p), 0);
    assert_int_equal(p.num, 5);
    assert_int_equal(p.serial, 2);
    /* a port (tag 0x7), a small integer (0xf), a pointer, other releases */
    assert_int_equal(kp_pid_term_decode(0x567, 25, &p), -1);
    assert_int_equal(kp_pid_term_decode(0x56f, 25, &p), -1);
    assert_int_equal(kp_pid_term_decode(0x55978016a2b8ull, 25, &p), -1);
    assert_int_equal(kp_pid_term_decode(0x563, 23, &p), -1);
    assert_int_equal(kp_pid_term_decode(0x563, 26, &p), -1);
}

static void test_read(void **state)
{
    (void)state;
    static uint64_t words[3] = {0x2b00000563ull, 0x1234, 0x2a800000553ull};
    uint64_t c_p[5] = {(uint64_t)(uintptr_t)&words[0], (uint64_t)(uintptr_t)&words[1], 1,
                       (uint64_t)(uintptr_t)&words[2], (uint64_t)(uintptr_t)&words[0] + 1};
    kp_pid_numbers pids[5];
    unsigned char ok[5];
    assert_int_equal(kp_current_process_read(getpid(), 25, c_p, 5, pids, ok), 2);
    assert_true(ok[0]);
    assert_int_equal(pids[0].num, 86);
    assert_false(ok[1]); /* not a pid */
    assert_false(ok[2]); /* unmapped: the read goes on after it */
    assert_true(ok[3]);
    assert_int_equal(pids[3].num, 85);
    assert_false(ok[4]); /* misaligned */
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_decode), cmocka_unit_test(test_read)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

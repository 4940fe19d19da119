/* The Erlang process of a native sample (cpu/current_process.c): pid terms
 * as nodes hold them, values read from live nodes:
 *   - OTP 25 (LOW_HALF): <0.86.0> was 0x2b00000563, <0.85.0> 0x2a800000553;
 *   - OTP 27.3 and 29.1 (SLOT, the default 262,144 processes: 2^18 slots,
 *     8 a cache line): <0.89.0> was 0x2c83;
 * other tags refused; the layout learned from known pids, and refused when
 * none or several fit; and reading through process_vm_readv, here from
 * this test's own memory: a word that holds a pid decodes, one that does
 * not is refused, and an unmapped or misaligned address is refused without
 * failing the batch. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu/current_process.h"

static const kp_pid_layout otp25 = {KP_PID_LAYOUT_LOW_HALF, 0, 0};
static const kp_pid_layout otp27 = {KP_PID_LAYOUT_SLOT, 18, 3};

/* The SLOT term of pid data `data` (number | serial << 28), as OTP 26's
 * erts_ptab_data2pix places it: 2^18 slots, 8 a cache line. */
static uint64_t slot_term(uint64_t data)
{
    uint64_t mask = (1u << 18) - 1, low = data & mask;
    uint64_t slot = (data & ~mask) | ((low & ((1u << 15) - 1)) << 3) | (low >> 15);
    return slot << 4 | 0x3;
}

static void test_decode(void **state)
{
    (void)state;
    kp_pid_numbers p;
    assert_int_equal(kp_pid_term_decode(0x2b00000563ull, &otp25, &p), 0);
    assert_int_equal(p.num, 86);
    assert_int_equal(p.serial, 0);
    assert_int_equal(kp_pid_term_decode(0x2a800000553ull, &otp25, &p), 0);
    assert_int_equal(p.num, 85);
    /* <0.5.2>: the serial above the 15 bits of number */
    assert_int_equal(kp_pid_term_decode(((2ull << 15) | 5) << 4 | 0x3, &otp25, &p), 0);
    assert_int_equal(p.num, 5);
    assert_int_equal(p.serial, 2);
    /* a port (tag 0x7), a small integer (0xf), a pointer */
    assert_int_equal(kp_pid_term_decode(0x567, &otp25, &p), -1);
    assert_int_equal(kp_pid_term_decode(0x56f, &otp25, &p), -1);
    assert_int_equal(kp_pid_term_decode(0x55978016a2b8ull, &otp25, &p), -1);
    assert_int_equal(kp_pid_term_decode(0x2c87, &otp27, &p), -1);
    /* OTP 26 and later */
    assert_int_equal(kp_pid_term_decode(0x2c83, &otp27, &p), 0);
    assert_int_equal(p.num, 89);
    assert_int_equal(p.serial, 0);
    /* a number past the first lap of the table, and a serial */
    uint64_t data = 300000u | (uint64_t)7 << 28;
    assert_int_equal(kp_pid_term_decode(slot_term(data), &otp27, &p), 0);
    assert_int_equal(p.num, 300000);
    assert_int_equal(p.serial, 7);
    assert_int_equal(kp_pid_term_decode(slot_term(262143), &otp27, &p), 0);
    assert_int_equal(p.num, 262143);
    kp_pid_layout none = {KP_PID_LAYOUT_NONE, 0, 0};
    assert_int_equal(kp_pid_term_decode(0x2c83, &none, &p), -1);
}

static void test_learn(void **state)
{
    (void)state;
    kp_pid_layout got;
    kp_pid_numbers known27[2] = {{89, 0}, {1234, 0}};
    uint64_t terms27[2] = {slot_term(1234), 0x2c83};
    assert_int_equal(kp_pid_layout_learn(terms27, 2, known27, 2, 18, &got), 1);
    assert_int_equal(got.kind, KP_PID_LAYOUT_SLOT);
    assert_int_equal(got.table_bits, 18);
    assert_int_equal(got.line_bits, 3);
    kp_pid_numbers known25[2] = {{86, 0}, {85, 0}};
    uint64_t terms25[2] = {0x2b00000563ull, 0x2a800000553ull};
    assert_int_equal(kp_pid_layout_learn(terms25, 2, known25, 2, 18, &got), 1);
    assert_int_equal(got.kind, KP_PID_LAYOUT_LOW_HALF);
    /* a spinner that the scheduler hardly ran left no term: the other tells */
    assert_int_equal(kp_pid_layout_learn(terms27, 1, known27, 2, 18, &got), 1);
    assert_int_equal(got.kind, KP_PID_LAYOUT_SLOT);
    /* no term at all: nothing fits */
    assert_int_equal(kp_pid_layout_learn(terms27, 0, known27, 2, 18, &got), 0);
    assert_int_equal(got.kind, KP_PID_LAYOUT_NONE);
    /* a term that is no pid of theirs */
    uint64_t stray[2] = {0x2c83, 0x5553};
    assert_int_equal(kp_pid_layout_learn(stray, 2, known27, 2, 18, &got), 0);
    /* <0.0.0> reads the same under every layout: kprof cannot be sure */
    kp_pid_numbers zero = {0, 0};
    uint64_t zero_term = 0x3;
    assert_true(kp_pid_layout_learn(&zero_term, 1, &zero, 1, 18, &got) > 1);
}

static void test_read(void **state)
{
    (void)state;
    static uint64_t words[3] = {0x2b00000563ull, 0x1234, 0x2a800000553ull};
    uint64_t c_p[5] = {(uint64_t)(uintptr_t)&words[0], (uint64_t)(uintptr_t)&words[1], 1,
                       (uint64_t)(uintptr_t)&words[2], (uint64_t)(uintptr_t)&words[0] + 1};
    kp_pid_numbers pids[5];
    unsigned char ok[5];
    assert_int_equal(kp_current_process_read(getpid(), &otp25, c_p, 5, pids, ok), 2);
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
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_decode), cmocka_unit_test(test_learn),
                                       cmocka_unit_test(test_read)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

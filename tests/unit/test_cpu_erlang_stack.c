/* cpu/erlang_stack: an Erlang call chain read from a stack without frame
 * pointers, on a stack and code laid out here: return addresses into
 * function bodies after a call kept, innermost first; a word with tag
 * bits, one into a prologue or the JIT's shared code, one outside JIT
 * code, one after no call (a stale value in a Y slot) left out; the walk
 * ends at normal_exit; where E was kept while C code ran. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/erlang_stack.h"
#include "cpu/perf_map.h"

/* code bytes 0x1000..0x1400, all nops but the calls placed below */
static uint8_t code_bytes[0x400];

static int read_code(void *ctx, uint64_t addr, void *buf, size_t len)
{
    (void)ctx;
    if (addr < 0x1000 || addr + len > 0x1400)
        return -1;
    memcpy(buf, code_bytes + (addr - 0x1000), len);
    return 0;
}

static int is_return(void *ctx, uint64_t ret)
{
    return kp_erlang_stack_after_call(read_code, ctx, ret);
}

static void place(uint64_t at, const uint8_t *bytes, size_t n)
{
    memcpy(code_bytes + (at - 0x1000), bytes, n);
}

static kp_perf_map *a_map(void)
{
    kp_perf_map *m = kp_perf_map_create();
    static const char text[] = "0x1000 100 $m:f/1\n"
                               "0x1100 40 $m:g/0-CodeInfoPrologue\n"
                               "0x1140 100 $m:g/0\n"
                               "0x1240 40 $m::codeFooter\n"
                               "0x1300 100 $global::process_main\n";
    assert_int_equal(kp_perf_map_add_text(m, text, sizeof text - 1), 5);
    return m;
}

static void recognises_calls(void **state)
{
    (void)state;
    memset(code_bytes, 0x90, sizeof code_bytes);
    const uint8_t rel32[] = {0xe8, 1, 2, 3, 4}, rip[] = {0xff, 0x15, 1, 2, 3, 4},
                  reg[] = {0x41, 0xff, 0xd3}, mem8[] = {0xff, 0x50, 0x08},
                  rsp8[] = {0xff, 0x54, 0x24, 0x10}, mov[] = {0x48, 0x89, 0xec};
    place(0x1010, rel32, sizeof rel32);
    place(0x1020, rip, sizeof rip);
    place(0x1030, reg, sizeof reg);
    place(0x1040, mem8, sizeof mem8);
    place(0x1050, rsp8, sizeof rsp8);
    place(0x1060, mov, sizeof mov);
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x1015));
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x1026));
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x1033));
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x1043));
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x1054));
    /* through memory, as remote calls through the export table are */
    const uint8_t table[] = {0x42, 0xff, 0x14, 0xe0}, at_reg[] = {0xff, 0x10},
                  sib8[] = {0xff, 0x54, 0xc0, 0x08}, disp32[] = {0xff, 0x90, 1, 0, 0, 0};
    place(0x1080, table, sizeof table);
    place(0x1090, at_reg, sizeof at_reg);
    place(0x10a0, sib8, sizeof sib8);
    place(0x10b0, disp32, sizeof disp32);
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x1084));
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x1092));
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x10a4));
    assert_true(kp_erlang_stack_after_call(read_code, NULL, 0x10b6));
    assert_false(kp_erlang_stack_after_call(read_code, NULL, 0x1063));
    assert_false(kp_erlang_stack_after_call(read_code, NULL, 0x1070)); /* nops */
    assert_false(kp_erlang_stack_after_call(read_code, NULL, 0x9000)); /* unreadable */
}

static void walks_to_normal_exit(void **state)
{
    (void)state;
    memset(code_bytes, 0x90, sizeof code_bytes);
    const uint8_t call[] = {0xe8, 0, 0, 0, 0};
    place(0x1030 - 5, call, sizeof call); /* in m:f/1 */
    place(0x1180 - 5, call, sizeof call); /* in m:g/0 */
    place(0x1110 - 5, call, sizeof call); /* in m:g/0's prologue */
    place(0x1320 - 5, call, sizeof call); /* in the JIT's shared code */
    kp_perf_map *m = a_map();
    const uint64_t normal_exit = 0x1308;
    const uint64_t words[] = {
        0x1031,      /* tag bits: a term, not a return address */
        0x1030,      /* m:f/1, after a call */
        42 << 4,     /* a small integer */
        0x1110,      /* into a prologue */
        0x1320,      /* into global:: */
        0x1090,      /* m:f/1, after no call: a stale value */
        0x9000,      /* outside JIT code */
        0x1180,      /* m:g/0, after a call */
        normal_exit, /* the stack's bottom */
        0x1030,      /* past it: not walked */
    };
    uint64_t out[8];
    int complete = 0;
    size_t n = kp_erlang_stack_walk(m, words, 10, normal_exit, is_return, NULL, out, 8, &complete);
    assert_int_equal(n, 2);
    assert_int_equal(out[0], 0x1030);
    assert_int_equal(out[1], 0x1180);
    assert_int_equal(complete, 1);
    /* without the call check the stale value counts */
    n = kp_erlang_stack_walk(m, words, 10, normal_exit, NULL, NULL, out, 8, &complete);
    assert_int_equal(n, 3);
    assert_int_equal(out[1], 0x1090);
    /* the room, or the words, running out first */
    n = kp_erlang_stack_walk(m, words, 10, normal_exit, is_return, NULL, out, 1, &complete);
    assert_int_equal(n, 1);
    assert_int_equal(complete, 0);
    n = kp_erlang_stack_walk(m, words, 8, normal_exit, is_return, NULL, out, 8, &complete);
    assert_int_equal(n, 2);
    assert_int_equal(complete, 0);
    kp_perf_map_free(m);
}

/* The code a C call returns to tells where E was kept meanwhile (bytes of
 * OTP 25.2.3's JIT code). */
static void tells_saved_e(void **state)
{
    (void)state;
    unsigned offset = 0;
    const uint8_t rbp[] = {0x48, 0x89, 0xec, 0x90}, stop[] = {0x49, 0x8b, 0x65, 0x58},
                  stop32[] = {0x49, 0x8b, 0xa5, 0x10, 0x01, 0, 0},
                  other[] = {0x49, 0xff, 0x8d, 0x08, 0x01, 0, 0};
    assert_int_equal(kp_erlang_stack_saved_e(rbp, sizeof rbp, &offset), KP_SAVED_E_RBP);
    assert_int_equal(kp_erlang_stack_saved_e(stop, sizeof stop, &offset), KP_SAVED_E_PROCESS);
    assert_int_equal(offset, 0x58);
    assert_int_equal(kp_erlang_stack_saved_e(stop32, sizeof stop32, &offset), KP_SAVED_E_PROCESS);
    assert_int_equal(offset, 0x110);
    assert_int_equal(kp_erlang_stack_saved_e(other, sizeof other, &offset), KP_SAVED_E_UNKNOWN);
    /* after FCALLS is updated (global::garbage_collect's return) */
    const uint8_t after_gc[] = {0x49, 0x29, 0xc6, 0x49, 0x8b, 0x65, 0x58, 0x4d};
    assert_int_equal(kp_erlang_stack_saved_e(after_gc, sizeof after_gc, &offset),
                     KP_SAVED_E_PROCESS);
    assert_int_equal(offset, 0x58);
    /* an instruction that writes rsp first: E is not known */
    const uint8_t writes_rsp[] = {0x48, 0x89, 0xc4, 0x49, 0x8b, 0x65, 0x58};
    assert_int_equal(kp_erlang_stack_saved_e(writes_rsp, sizeof writes_rsp, &offset),
                     KP_SAVED_E_UNKNOWN);
    /* too short to tell */
    assert_int_equal(kp_erlang_stack_saved_e(stop, 3, &offset), KP_SAVED_E_UNKNOWN);
    assert_int_equal(kp_erlang_stack_saved_e(rbp, 2, &offset), KP_SAVED_E_UNKNOWN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(recognises_calls),
        cmocka_unit_test(walks_to_normal_exit),
        cmocka_unit_test(tells_saved_e),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

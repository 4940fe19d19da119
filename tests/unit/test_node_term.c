/* The term helpers of sampler/node/term.c: kp_term_check, which bounds every
 * decoder of node data, and kp_term_text, how a node's reply reads in an
 * error message (Erlang text of the term where it starts, cut to the buffer,
 * and the caller's fallback when the bytes are not a term). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "node/term.h"

/* {error, {badarg, "x"}} as an rpc reply carries it: no version byte (ei prints
 * it with a space after each comma) */
static void encode_error(ei_x_buff *b)
{
    ei_x_new(b);
    ei_x_encode_tuple_header(b, 2);
    ei_x_encode_atom(b, "error");
    ei_x_encode_tuple_header(b, 2);
    ei_x_encode_atom(b, "badarg");
    ei_x_encode_string(b, "x");
}

static void prints_the_term(void **state)
{
    (void)state;
    ei_x_buff b;
    encode_error(&b);
    char out[64];
    assert_ptr_equal(kp_term_text(b.buff, 0, "?", out, sizeof out), out);
    assert_string_equal(out, "{error, {badarg, \"x\"}}");
    ei_x_free(&b);
}

static void starts_at_the_index(void **state)
{
    (void)state;
    ei_x_buff b;
    encode_error(&b);
    int inner = 0, arity;
    assert_int_equal(ei_decode_tuple_header(b.buff, &inner, &arity), 0);
    assert_int_equal(ei_skip_term(b.buff, &inner), 0); /* past 'error' */
    char out[64];
    assert_string_equal(kp_term_text(b.buff, inner, "?", out, sizeof out), "{badarg, \"x\"}");
    ei_x_free(&b);
}

static void cuts_to_the_buffer(void **state)
{
    (void)state;
    ei_x_buff b;
    encode_error(&b);
    char out[8];
    assert_string_equal(kp_term_text(b.buff, 0, "?", out, sizeof out), "{error,");
    ei_x_free(&b);
}

static void falls_back_on_garbage(void **state)
{
    (void)state;
    const char junk[] = {(char)0xff, 0, 0, 0};
    char out[64];
    assert_string_equal(kp_term_text(junk, 0, "(no reply)", out, sizeof out), "(no reply)");
}

/* term_to_binary/1 of a tuple holding a term of each kind a node sends (OTP
 * 25): integers, a float, atoms, a string, an improper list, binaries and a
 * bitstring, small and large bignums, a map, a pid, a port, a reference, a
 * fun with a free variable, an external fun, tuples small and large, []. */
static const char every_kind_hex[] =
    "8368146101620000012c463ff800000000000064000461746f6d640004e4746f6d6b00037374726c00000002"
    "61016102640001746d0000000201024d0000000103206e09000000000000000000406f000001070100000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000107400000001"
    "6400016161015864000d6e6f6e6f6465406e6f686f73740000000900000000000000005964000d6e6f6e6f64"
    "65406e6f686f737400000000000000005a000364000d6e6f6e6f6465406e6f686f73740000000000031ebb02"
    "d40002e447577e700000009a00065361aa461590d1bdf1eb62d1a6eb080000002b0000000164000865726c5f"
    "6576616c612b6200329b0d5864000d6e6f6e6f6465406e6f686f737400000009000000000000000068066105"
    "6c0000000168026400015861076a6400046e6f6e656400046e6f6e6574000000006c00000001680564000663"
    "6c6175736561056a6a6c0000000168036400037661726105640001586a6a716400056c697374736400037365"
    "7161026800690000012c610161026103610461056106610761086109610a610b610c610d610e610f61106111"
    "61126113611461156116611761186119611a611b611c611d611e611f61206121612261236124612561266127"
    "61286129612a612b612c612d612e612f6130613161326133613461356136613761386139613a613b613c613d"
    "613e613f6140614161426143614461456146614761486149614a614b614c614d614e614f6150615161526153"
    "615461556156615761586159615a615b615c615d615e615f6160616161626163616461656166616761686169"
    "616a616b616c616d616e616f6170617161726173617461756176617761786179617a617b617c617d617e617f"
    "6180618161826183618461856186618761886189618a618b618c618d618e618f619061916192619361946195"
    "6196619761986199619a619b619c619d619e619f61a061a161a261a361a461a561a661a761a861a961aa61ab"
    "61ac61ad61ae61af61b061b161b261b361b461b561b661b761b861b961ba61bb61bc61bd61be61bf61c061c1"
    "61c261c361c461c561c661c761c861c961ca61cb61cc61cd61ce61cf61d061d161d261d361d461d561d661d7"
    "61d861d961da61db61dc61dd61de61df61e061e161e261e361e461e561e661e761e861e961ea61eb61ec61ed"
    "61ee61ef61f061f161f261f361f461f561f661f761f861f961fa61fb61fc61fd61fe61ff6200000100620000"
    "0101620000010262000001036200000104620000010562000001066200000107620000010862000001096200"
    "00010a620000010b620000010c620000010d620000010e620000010f62000001106200000111620000011262"
    "00000113620000011462000001156200000116620000011762000001186200000119620000011a620000011b"
    "620000011c620000011d620000011e620000011f620000012062000001216200000122620000012362000001"
    "2462000001256200000126620000012762000001286200000129620000012a620000012b620000012c6a";

static size_t every_kind(unsigned char *out, size_t cap)
{
    size_t n = strlen(every_kind_hex) / 2;
    assert_true(n <= cap);
    for (size_t k = 0; k < n; k++) {
        unsigned v;
        assert_int_equal(sscanf(every_kind_hex + 2 * k, "%2x", &v), 1);
        out[k] = (unsigned char)v;
    }
    return n;
}

/* The whole term passes, with or without trailing bytes; every cut of it is
 * refused (kp_term_check is what keeps ei's decoders inside a buffer). */
static void checks_the_extent_of_every_kind(void **state)
{
    (void)state;
    unsigned char t[2048];
    size_t n = every_kind(t, sizeof t - 4);
    assert_int_equal(kp_term_check((const char *)t, n), 0);
    memset(t + n, 0xff, 4);
    assert_int_equal(kp_term_check((const char *)t, n + 4), 0);
    for (size_t len = 0; len < n; len++)
        assert_int_equal(kp_term_check((const char *)t, len), -1);
    /* and ei agrees it is one term of that length */
    int i = 0, version;
    assert_int_equal(ei_decode_version((const char *)t, &i, &version), 0);
    assert_int_equal(ei_skip_term((const char *)t, &i), 0);
    assert_int_equal(i, (int)n);
}

static void refuses_what_kprof_never_gets(void **state)
{
    (void)state;
    const char compressed[] = {(char)131, 80, 0, 0, 0, 1, 0};
    const char cache_ref[] = {82, 0};
    const char list_claiming_more[] = {108, 0, 0, 0, 9, 106}; /* 9 elements, then [] */
    assert_int_equal(kp_term_check(compressed, sizeof compressed), -1);
    assert_int_equal(kp_term_check(cache_ref, sizeof cache_ref), -1);
    assert_int_equal(kp_term_check(list_claiming_more, sizeof list_claiming_more), -1);
    /* an external fun whose module, function or arity is of another kind:
     * ei_decode_fun leaks on it (fuzz_tier_events found it) */
    const char export_int_module[] = {113, 97, 1, 100, 0, 1, 'f', 97, 2};
    const char export_pid_function[] = {113, 100, 0, 1, 'm', 97, 1, 97, 2};
    const char export_big_arity[] = {113, 100, 0, 1, 'm', 100, 0, 1, 'f', 98, 0, 0, 0, 2};
    const char export_ok[] = {113, 100, 0, 1, 'm', 100, 0, 1, 'f', 97, 2};
    assert_int_equal(kp_term_check(export_int_module, sizeof export_int_module), -1);
    assert_int_equal(kp_term_check(export_pid_function, sizeof export_pid_function), -1);
    assert_int_equal(kp_term_check(export_big_arity, sizeof export_big_arity), -1);
    assert_int_equal(kp_term_check(export_ok, sizeof export_ok), 0);
    assert_int_equal(kp_term_check(export_ok, sizeof export_ok - 1), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prints_the_term),
        cmocka_unit_test(starts_at_the_index),
        cmocka_unit_test(cuts_to_the_buffer),
        cmocka_unit_test(falls_back_on_garbage),
        cmocka_unit_test(checks_the_extent_of_every_kind),
        cmocka_unit_test(refuses_what_kprof_never_gets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

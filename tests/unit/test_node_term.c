/* How a node's reply is shown in an error message (sampler/node/term.c,
 * kp_term_text): Erlang text of the term where it starts, cut to the buffer,
 * and the caller's fallback when the bytes are not a term. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prints_the_term),
        cmocka_unit_test(starts_at_the_index),
        cmocka_unit_test(cuts_to_the_buffer),
        cmocka_unit_test(falls_back_on_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

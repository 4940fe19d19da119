/* Decoding of the trace events of `kprof tiers` (sampler/tiers/events.c):
 * tier calls with their token, request entries with their identity,
 * returns and exceptions; other functions and messages are told apart from
 * malformed bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <ei.h>

#include "tiers/events.h"

static const kp_tier_mfa mfas[] = {{"kv", "db_get", 1, 0}, {"kv", "request", 2, 1}};

static erlang_pid pid_of(unsigned num)
{
    erlang_pid p = {.num = num, .serial = 0, .creation = 1};
    strcpy(p.node, "n@h");
    return p;
}

static void encode_token(ei_x_buff *x)
{
    ei_x_encode_tuple_header(x, 5);
    ei_x_encode_long(x, 0);
    erlang_pid label = pid_of(99);
    ei_x_encode_pid(x, &label); /* kprof's requests are labelled by a pid */
    ei_x_encode_long(x, 3);
    erlang_pid from = pid_of(5);
    ei_x_encode_pid(x, &from);
    ei_x_encode_long(x, 2);
}

static void encode_event(ei_x_buff *x, const char *what, const char *f, long arity)
{
    ei_x_new_with_version(x);
    ei_x_encode_tuple_header(x, 6);
    ei_x_encode_atom(x, "trace_ts");
    erlang_pid p = pid_of(42);
    ei_x_encode_pid(x, &p);
    ei_x_encode_atom(x, what);
    ei_x_encode_tuple_header(x, 3);
    ei_x_encode_atom(x, "kv");
    ei_x_encode_atom(x, f);
    ei_x_encode_long(x, arity);
}

static kp_tier_decoder decoder(void)
{
    kp_tier_decoder d;
    memset(&d, 0, sizeof d);
    d.mfas = mfas;
    d.n = 2;
    return d;
}

static void a_tier_call(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_event(&x, "call", "db_get", 1);
    encode_token(&x);
    ei_x_encode_longlong(&x, 1000);
    kp_tier_decoder d = decoder();
    kp_tier_event ev;
    assert_int_equal(kp_tier_decode(&d, x.buff, (size_t)x.index, &ev), 1);
    assert_int_equal(ev.kind, KP_TEV_CALL);
    assert_int_equal((int)ev.fn, 0);
    assert_true(ev.pid == ((uint64_t)42 << 32));
    assert_int_equal(ev.has_label, 1);
    assert_true(ev.label == ((uint64_t)99 << 32));
    assert_true(ev.ts_ns == 1000);
    for (int len = 0; len < x.index; len++)
        assert_int_equal(kp_tier_decode(&d, x.buff, (size_t)len, &ev), -1);
    ei_x_free(&x);
}

static void an_entry_with_its_identity(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_event(&x, "call", "request", 2);
    ei_x_encode_list_header(&x, 2);
    ei_x_encode_binary(&x, "GET k1", 6);
    encode_token(&x);
    ei_x_encode_empty_list(&x);
    ei_x_encode_longlong(&x, 2000);
    kp_tier_decoder d = decoder();
    kp_tier_event ev;
    assert_int_equal(kp_tier_decode(&d, x.buff, (size_t)x.index, &ev), 1);
    assert_int_equal((int)ev.fn, 1);
    assert_int_equal((int)ev.identity_len, 3); /* first_word: "GET" */
    assert_memory_equal(ev.identity, "GET", 3);
    ei_x_free(&x);
}

static void returns_and_others(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_event(&x, "return_from", "db_get", 1);
    ei_x_encode_atom(&x, "ok");
    ei_x_encode_longlong(&x, 3000);
    kp_tier_decoder d = decoder();
    kp_tier_event ev;
    assert_int_equal(kp_tier_decode(&d, x.buff, (size_t)x.index, &ev), 1);
    assert_int_equal(ev.kind, KP_TEV_RETURN);
    ei_x_free(&x);
    encode_event(&x, "return_from", "other", 0); /* not a tier function */
    ei_x_encode_atom(&x, "ok");
    ei_x_encode_longlong(&x, 3000);
    assert_int_equal(kp_tier_decode(&d, x.buff, (size_t)x.index, &ev), 0);
    ei_x_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_tier_call),
        cmocka_unit_test(an_entry_with_its_identity),
        cmocka_unit_test(returns_and_others),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Decoding of the trace events of `kprof tiers` (sampler/tiers/events.c):
 * tier calls with their token, request entries with their identity,
 * returns and exceptions; other functions and messages are told apart from
 * malformed bytes. The same events from the kprof_tracer NIF's records
 * (kp_tier_from_nif) come out alike. */
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

/* A decoder of the two functions of `table`. */
static kp_tier_decoder decoder_of(const kp_tier_mfa *table)
{
    kp_tier_decoder d;
    memset(&d, 0, sizeof d);
    d.mfas = table;
    d.n = 2;
    return d;
}

static kp_tier_decoder decoder(void)
{
    return decoder_of(mfas);
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

/* The NIF's tier functions: a request entry whose identity is a text
 * argument, and a tier call. */
static const kp_tier_mfa nif_mfas[] = {{"kv", "request", 1, 1}, {"db", "get", 1, 0}};

static kp_tier_decoder nif_decoder(void)
{
    return decoder_of(nif_mfas);
}

/* An event as the NIF reader hands it over, of process <0.42.3>. */
static kp_trace_event nif_event(kp_trace_event_kind kind, const char *m, const char *f,
                                unsigned arity, int64_t ts)
{
    kp_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.pid = pid_of(42);
    ev.pid.serial = 3;
    strcpy(ev.module, m);
    strcpy(ev.function, f);
    ev.arity = arity;
    ev.ts_ns = ts;
    return ev;
}

static void a_nif_request_entry(void **state)
{
    (void)state;
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_binary(&x, "GET k1", 6);
    kp_trace_event nif = nif_event(KP_TRACE_SEQ_CALL, "kv", "request", 1, 1000);
    nif.has_label = 1;
    nif.label = pid_of(77);
    nif.label.serial = 5;
    nif.identity = x.buff;
    nif.identity_len = (size_t)x.index;
    kp_tier_decoder d = nif_decoder();
    kp_tier_event ev;
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 1);
    assert_int_equal(ev.kind, KP_TEV_CALL);
    assert_int_equal((int)ev.fn, 0);
    assert_true(ev.pid == (((uint64_t)42 << 32) | 3));
    assert_true(ev.ts_ns == 1000);
    assert_int_equal(ev.has_label, 1);
    assert_true(ev.label == (((uint64_t)77 << 32) | 5));
    assert_int_equal((int)ev.identity_len, 3); /* first_word: "GET" */
    assert_memory_equal(ev.identity, "GET", 3);
    ei_x_free(&x);

    /* a tuple identity is named by its first element */
    ei_x_new_with_version(&x);
    ei_x_encode_tuple_header(&x, 3);
    ei_x_encode_atom(&x, "put");
    ei_x_encode_atom(&x, "k");
    ei_x_encode_atom(&x, "v");
    nif.identity = x.buff;
    nif.identity_len = (size_t)x.index;
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 1);
    assert_int_equal((int)ev.identity_len, 3);
    assert_memory_equal(ev.identity, "put", 3);
    ei_x_free(&x);
}

static void a_nif_call_inside_a_request(void **state)
{
    (void)state;
    kp_trace_event nif = nif_event(KP_TRACE_SEQ_CALL, "db", "get", 1, 1100);
    nif.has_label = 1;
    nif.label = pid_of(77);
    kp_tier_decoder d = nif_decoder();
    kp_tier_event ev;
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 1);
    assert_int_equal(ev.kind, KP_TEV_CALL);
    assert_int_equal((int)ev.fn, 1);
    assert_true(ev.label == ((uint64_t)77 << 32));
    assert_null(ev.identity); /* not an opening call */
    assert_int_equal((int)ev.identity_len, 0);

    nif.has_label = 0; /* another user's seq_trace label, or none */
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 1);
    assert_int_equal(ev.has_label, 0);
}

static void nif_returns_and_others(void **state)
{
    (void)state;
    kp_tier_decoder d = nif_decoder();
    kp_tier_event ev;
    kp_trace_event nif = nif_event(KP_TRACE_RETURN_FROM, "db", "get", 1, 1200);
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 1);
    assert_int_equal(ev.kind, KP_TEV_RETURN);
    assert_int_equal((int)ev.fn, 1);
    assert_true(ev.pid == (((uint64_t)42 << 32) | 3));
    assert_true(ev.ts_ns == 1200);

    nif = nif_event(KP_TRACE_EXCEPTION_FROM, "kv", "request", 1, 1300);
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 1);
    assert_int_equal(ev.kind, KP_TEV_EXCEPTION);
    assert_int_equal((int)ev.fn, 0);
    assert_true(ev.ts_ns == 1300);

    /* not a tier function: another arity, another function */
    nif = nif_event(KP_TRACE_SEQ_CALL, "kv", "request", 2, 1400);
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 0);
    nif = nif_event(KP_TRACE_SEQ_CALL, "db", "put", 1, 1400);
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 0);
    nif = nif_event(KP_TRACE_RETURN_FROM, "", "", 0, 1400); /* the NIF could not name it */
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 0);

    /* request-trace events of a tier function are not tier events */
    nif = nif_event(KP_TRACE_IN, "kv", "request", 1, 1500);
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 0);
    nif = nif_event(KP_TRACE_CALL, "kv", "request", 1, 1500);
    assert_int_equal(kp_tier_from_nif(&d, &nif, &ev), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_tier_call),
        cmocka_unit_test(an_entry_with_its_identity),
        cmocka_unit_test(returns_and_others),
        cmocka_unit_test(a_nif_request_entry),
        cmocka_unit_test(a_nif_call_inside_a_request),
        cmocka_unit_test(nif_returns_and_others),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

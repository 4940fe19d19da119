/* Decoding of request-trace events and marks (sampler/node/trace_event.c):
 * trace messages as the node's trace port frames them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "node/trace_event.h"

static void encode_head(ei_x_buff *x, int arity, const char *what)
{
    ei_x_new_with_version(x);
    ei_x_encode_tuple_header(x, arity);
    ei_x_encode_atom(x, "trace_ts");
    erlang_pid p = {.num = 42, .serial = 1, .creation = 1};
    strcpy(p.node, "n@h");
    ei_x_encode_pid(x, &p);
    ei_x_encode_atom(x, what);
}

static void encode_mfa(ei_x_buff *x, const char *m, const char *f, long a)
{
    ei_x_encode_tuple_header(x, 3);
    ei_x_encode_atom(x, m);
    ei_x_encode_atom(x, f);
    ei_x_encode_long(x, a);
}

static void a_call(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_head(&x, 5, "call");
    encode_mfa(&x, "lists", "seq", 2);
    ei_x_encode_longlong(&x, 123456789);
    kp_trace_event ev;
    assert_int_equal(kp_trace_decode(x.buff, (size_t)x.index, &ev), 1);
    assert_int_equal(ev.kind, KP_TRACE_CALL);
    assert_int_equal(ev.pid.num, 42);
    assert_string_equal(ev.module, "lists");
    assert_string_equal(ev.function, "seq");
    assert_int_equal(ev.arity, 2);
    assert_true(ev.ts_ns == 123456789);
    /* cut anywhere: refused, never read past */
    for (int len = 0; len < x.index; len++)
        assert_int_equal(kp_trace_decode(x.buff, (size_t)len, &ev), -1);
    ei_x_free(&x);
}

static void an_end_mark_cut_by_the_node(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_head(&x, 6, "call");
    encode_mfa(&x, "kprof_rtrace_mark", "end_trace", 1);
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_binary(&x, "abc", 3);
    ei_x_encode_atom(&x, "node_backlog");
    ei_x_encode_longlong(&x, 5);
    kp_trace_event ev;
    assert_int_equal(kp_trace_decode(x.buff, (size_t)x.index, &ev), 1);
    assert_int_equal(ev.kind, KP_TRACE_END);
    assert_string_equal(ev.id, "abc");
    assert_int_equal(ev.cut, KP_RTRACE_CUT_NODE_BACKLOG);
    assert_string_equal(kp_rtrace_cut_name(ev.cut), "node_backlog");
    ei_x_free(&x);
}

static void a_spawn_and_other_messages(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_head(&x, 6, "spawn");
    erlang_pid child = {.num = 7, .serial = 0, .creation = 1};
    strcpy(child.node, "n@h");
    ei_x_encode_pid(&x, &child);
    encode_mfa(&x, "m", "f", 0);
    ei_x_encode_longlong(&x, 9);
    kp_trace_event ev;
    assert_int_equal(kp_trace_decode(x.buff, (size_t)x.index, &ev), 1);
    assert_int_equal(ev.kind, KP_TRACE_SPAWN);
    assert_int_equal(ev.child.num, 7);
    ei_x_free(&x);
    ei_x_new_with_version(&x); /* a term that is no trace message */
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, "hello");
    ei_x_encode_atom(&x, "world");
    assert_int_equal(kp_trace_decode(x.buff, (size_t)x.index, &ev), 0);
    ei_x_free(&x);
}

static void a_begin_mark(void **state)
{
    (void)state;
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_binary(&x, "t9", 2);
    ei_x_encode_map_header(&x, 2);
    ei_x_encode_atom(&x, "max_events");
    ei_x_encode_long(&x, 10);
    ei_x_encode_atom(&x, "max_duration_ms");
    ei_x_encode_long(&x, 250);
    kp_trace_event ev;
    memset(&ev, 0, sizeof ev);
    assert_int_equal(kp_trace_decode_mark(x.buff, (size_t)x.index, 1, &ev), 0);
    assert_int_equal(ev.kind, KP_TRACE_BEGIN);
    assert_string_equal(ev.id, "t9");
    assert_int_equal((int)ev.max_events, 10);
    assert_int_equal((int)ev.max_duration_ms, 250);
    for (int len = 0; len < x.index; len++)
        assert_int_equal(kp_trace_decode_mark(x.buff, (size_t)len, 1, &ev), -1);
    ei_x_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_call),
        cmocka_unit_test(an_end_mark_cut_by_the_node),
        cmocka_unit_test(a_spawn_and_other_messages),
        cmocka_unit_test(a_begin_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The sample wire protocol of kprof record (sampler/samples/sample_wire.c):
 * a reply built as kprof_agent builds it decodes into the callbacks in
 * order, with every metric of kp/metrics.h in its place; stale replies
 * are skipped; malformed ones and truncated bytes are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "samples/sample_wire.h"

typedef struct {
    int resets, mfas, labels, samples, same, unchanged;
    kp_wire_sample last;
    uint32_t frames[4];
    char mfa[64], label[64];
} seen;

static int on_reset(void *ctx)
{
    return ((seen *)ctx)->resets++, 0;
}

static int on_mfa(void *ctx, uint32_t id, const char *m, const char *f, unsigned arity)
{
    seen *s = ctx;
    s->mfas++;
    snprintf(s->mfa, sizeof s->mfa, "%u %s:%s/%u", id, m, f, arity);
    return 0;
}

static int on_label(void *ctx, uint32_t num, uint32_t serial, int registered, const char *text,
                    size_t len)
{
    seen *s = ctx;
    s->labels++;
    snprintf(s->label, sizeof s->label, "<0.%u.%u> %d %.*s", num, serial, registered, (int)len,
             text);
    return 0;
}

static int on_sample(void *ctx, const kp_wire_sample *w)
{
    seen *s = ctx;
    s->samples++;
    s->same += w->same;
    s->unchanged += w->unchanged;
    s->last = *w;
    if (w->frames && w->depth <= 2)
        memcpy(s->frames, w->frames, w->depth * 2 * sizeof *w->frames);
    return 0;
}

static void encode_pid(ei_x_buff *x, unsigned num)
{
    erlang_pid p = {.num = num, .serial = 0, .creation = 1};
    strcpy(p.node, "n@h");
    ei_x_encode_pid(x, &p);
}

/* {kprof_samples, Seq, Missed, [Tick]} with one tick of two samples: a full
 * one with a two-frame stack, then a bare pid (unchanged). `arity` is the
 * sample tuple's, to build a malformed one. */
static void encode_reply(ei_x_buff *x, long seq, int arity)
{
    ei_x_new_with_version(x);
    ei_x_encode_tuple_header(x, 4);
    ei_x_encode_atom(x, "kprof_samples");
    ei_x_encode_long(x, seq);
    ei_x_encode_long(x, 3);
    ei_x_encode_list_header(x, 1);
    ei_x_encode_tuple_header(x, 6);
    ei_x_encode_longlong(x, -576460751234567LL);
    ei_x_encode_list_header(x, 1); /* NewMfas */
    ei_x_encode_tuple_header(x, 4);
    ei_x_encode_long(x, 7);
    ei_x_encode_atom(x, "lists");
    ei_x_encode_atom(x, "seq");
    ei_x_encode_long(x, 2);
    ei_x_encode_empty_list(x);
    ei_x_encode_list_header(x, 1); /* Labels */
    ei_x_encode_tuple_header(x, 2);
    encode_pid(x, 42);
    ei_x_encode_tuple_header(x, 2);
    ei_x_encode_atom(x, "registered");
    ei_x_encode_binary(x, "hot", 3);
    ei_x_encode_empty_list(x);
    ei_x_encode_list_header(x, 2); /* Samples */
    ei_x_encode_tuple_header(x, arity);
    encode_pid(x, 42);
    ei_x_encode_atom(x, "running");
    for (int m = 0; m < arity - 3; m++)
        ei_x_encode_long(x, 100 + m);
    const unsigned char stack[16] = {0, 0, 0, 7, 0, 0, 0, 10, 0, 0, 0, 8, 0, 0, 0, 0};
    ei_x_encode_binary(x, stack, sizeof stack);
    encode_pid(x, 43);
    ei_x_encode_empty_list(x);
    ei_x_encode_atom(x, "true"); /* Reset */
    ei_x_encode_tuple_header(x, 4);
    for (int k = 0; k < 4; k++)
        ei_x_encode_long(x, k + 1);
    ei_x_encode_empty_list(x);
}

static int take(kp_sample_wire *w, ei_x_buff *x, long seq, size_t len)
{
    memset(w, 0, sizeof *w);
    w->seq = seq;
    w->reply = *x;
    return kp_sample_wire_take_reply(w, len);
}

static void decodes_a_tick(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_reply(&x, 5, KP_SAMPLE_TUPLE_ARITY);
    kp_sample_wire w;
    assert_int_equal(take(&w, &x, 5, (size_t)x.index), 1);
    assert_int_equal(w.ticks_left, 1);
    assert_int_equal((int)w.missed, 3);
    int64_t t;
    assert_int_equal(kp_sample_wire_tick_time(&w, &t), 1);
    assert_true(t == -576460751234567LL);
    seen s = {0};
    kp_wire_handler h = {&s, on_reset, on_mfa, on_label, on_sample};
    assert_int_equal(kp_sample_wire_next_tick(&w, &h), 0);
    assert_int_equal(s.resets, 1);
    assert_string_equal(s.mfa, "7 lists:seq/2");
    assert_string_equal(s.label, "<0.42.0> 1 hot");
    assert_int_equal(s.samples, 2);
    assert_int_equal(s.unchanged, 1); /* the bare pid */
    assert_int_equal(s.last.num, 43);
    /* the stats of the tick */
    assert_int_equal((int)w.ticks, 1);
    assert_int_equal((int)w.stacks_queried, 1);
    assert_int_equal((int)w.tick_busy_us, 3);
    assert_int_equal((int)w.tick_delay_us, 4);
    assert_int_equal(kp_sample_wire_tick_time(&w, &t), 0);
    ei_x_free(&x);
}

static int first_sample(void *ctx, const kp_wire_sample *w)
{
    kp_wire_sample *out = ctx;
    if (!out->num)
        *out = *w;
    return 0;
}
static int ok_reset(void *c)
{
    (void)c;
    return 0;
}
static int ok_mfa(void *c, uint32_t i, const char *m, const char *f, unsigned a)
{
    (void)c, (void)i, (void)m, (void)f, (void)a;
    return 0;
}
static int ok_label(void *c, uint32_t n, uint32_t s, int r, const char *t, size_t l)
{
    (void)c, (void)n, (void)s, (void)r, (void)t, (void)l;
    return 0;
}

/* Each metric lands in the slot of its row in kp/metrics.h. */
static void metrics_in_table_order(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_reply(&x, 1, KP_SAMPLE_TUPLE_ARITY);
    kp_sample_wire w;
    assert_int_equal(take(&w, &x, 1, (size_t)x.index), 1);
    kp_wire_sample first = {0};
    kp_wire_handler h = {&first, ok_reset, ok_mfa, ok_label, first_sample};
    assert_int_equal(kp_sample_wire_next_tick(&w, &h), 0);
    assert_string_equal(first.status, "running");
    for (int m = 0; m < KP_METRIC_COUNT; m++)
        assert_int_equal((int)first.metrics[m], 100 + m);
    assert_int_equal((int)first.depth, 2);
    assert_int_equal((int)first.frames[0], 7); /* leaf first, host order */
    assert_int_equal((int)first.frames[1], 10);
    assert_string_equal(kp_metrics[KP_METRIC_REDUCTIONS].name, "reductions");
    assert_true(kp_metrics[KP_METRIC_TOTAL_HEAP].in_words);
    ei_x_free(&x);
}

static void skips_stale_replies(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_reply(&x, 4, KP_SAMPLE_TUPLE_ARITY);
    kp_sample_wire w;
    assert_int_equal(take(&w, &x, 5, (size_t)x.index), 0);
    assert_int_equal(w.ticks_left, 0);
    ei_x_free(&x);
}

static void refuses_a_wrong_arity(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_reply(&x, 1, KP_SAMPLE_TUPLE_ARITY + 1); /* an agent with one more metric */
    kp_sample_wire w;
    assert_int_equal(take(&w, &x, 1, (size_t)x.index), 1);
    kp_wire_sample first = {0};
    kp_wire_handler h = {&first, ok_reset, ok_mfa, ok_label, first_sample};
    assert_int_equal(kp_sample_wire_next_tick(&w, &h), -2);
    assert_int_equal(w.ticks_left, 0); /* the rest of the reply is dropped */
    ei_x_free(&x);
}

/* Every cut of a reply is refused before ei reads past it. */
static void refuses_every_truncation(void **state)
{
    (void)state;
    ei_x_buff x;
    encode_reply(&x, 1, KP_SAMPLE_TUPLE_ARITY);
    for (int len = 0; len < x.index; len++) {
        kp_sample_wire w;
        assert_int_equal(take(&w, &x, 1, (size_t)len), -1);
    }
    ei_x_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decodes_a_tick),           cmocka_unit_test(metrics_in_table_order),
        cmocka_unit_test(skips_stale_replies),      cmocka_unit_test(refuses_a_wrong_arity),
        cmocka_unit_test(refuses_every_truncation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

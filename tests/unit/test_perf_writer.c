/* kp_perf_writer: exact text (golden), FORMATS.md compliance of every output
 * (kp_check_perf), timestamp ordering, metric fields, name validation and
 * out-of-memory behaviour. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "format_check.h"
#include "kp/perf_writer.h"

typedef struct {
    kp_frames *frames;
    kp_stacks *stacks;
    uint32_t
        stack; /* running;<0.123.0>;proc_lib:init_p_do_apply/3;my_mod:loop/1;my_mod:collect/1 */
    uint32_t empty; /* no frame at all */
    kp_perf_writer *w;
    kp_buf out;
} fixture;

static uint32_t mfa(kp_frames *f, const char *mod, const char *fun, unsigned arity)
{
    kp_mfa m = {mod, strlen(mod), fun, strlen(fun), arity, 0};
    uint32_t id;
    assert_int_equal(kp_frames_intern_mfa(f, &m, &id), KP_OK);
    return id;
}

static uint32_t pseudo(kp_frames *f, const char *text, const char *kind)
{
    uint32_t id;
    assert_int_equal(kp_frames_intern_pseudo(f, text, strlen(text), kind, &id), KP_OK);
    return id;
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    fx->frames = kp_frames_create(0);
    fx->stacks = kp_stacks_create();
    assert_non_null(fx->frames);
    assert_non_null(fx->stacks);
    uint32_t ids[5] = {
        pseudo(fx->frames, "running", "status"), pseudo(fx->frames, "<0.123.0>", "process"),
        mfa(fx->frames, "proc_lib", "init_p_do_apply", 3), mfa(fx->frames, "my_mod", "loop", 1),
        mfa(fx->frames, "my_mod", "collect", 1)};
    assert_int_equal(kp_stacks_intern(fx->stacks, ids, 5, &fx->stack), KP_OK);
    assert_int_equal(kp_stacks_intern(fx->stacks, NULL, 0, &fx->empty), KP_OK);
    assert_int_equal(kp_perf_writer_create("beam.smp", "cpu-clock", fx->frames, fx->stacks, &fx->w),
                     KP_OK);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    kp_perf_writer_free(fx->w);
    kp_stacks_free(fx->stacks);
    kp_frames_free(fx->frames);
    kp_buf_free(&fx->out);
    free(fx);
    return 0;
}

static kp_perf_record record_at(const fixture *fx, uint64_t time_us)
{
    kp_perf_record r = {4242, 123, 0, time_us, 1, NULL, 0, fx->stack};
    return r;
}

static void assert_text(const kp_buf *b, const char *expected)
{
    if (b->len != strlen(expected) || memcmp(b->data, expected, b->len) != 0)
        fail_msg("got:\n%.*s\nwant:\n%s", (int)b->len, b->data, expected);
}

static int contains(const kp_buf *b, const char *text, size_t len)
{
    for (size_t i = 0; i + len <= b->len; i++)
        if (memcmp(b->data + i, text, len) == 0)
            return 1;
    return 0;
}

static void assert_valid_perf(const kp_buf *b)
{
    char why[256];
    if (kp_check_perf(b->data, b->len, why, sizeof why) != 0)
        fail_msg("kp_check_perf: %s\n%.*s", why, (int)b->len, b->data);
}

/* Golden: the sample of FORMATS.md, and one without frames. */
static void test_golden(void **state)
{
    fixture *fx = *state;
    kp_metric m1[] = {{"reductions", 81234, 2001}};
    kp_metric m2[] = {{"reductions", 500, 0}, {"memory", 2048, -6144}};
    kp_perf_record r1 = {4242, 123, 1, 1700000000012345u, 1, m1, 1, fx->stack};
    kp_perf_record r2 = {4242, 130, 0, 1700000000022345u, 1, m2, 2, fx->empty};
    assert_int_equal(kp_perf_writer_format(fx->w, &r1, &fx->out), KP_OK);
    assert_int_equal(kp_perf_writer_format(fx->w, &r2, &fx->out), KP_OK);
    assert_text(
        &fx->out,
        "beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\tmetric_reductions: 81234, 2001\n"
        "\t4 my_mod:collect/1 (my_mod.beam)\n"
        "\t3 my_mod:loop/1 (my_mod.beam)\n"
        "\t2 proc_lib:init_p_do_apply/3 (proc_lib.beam)\n"
        "\t1 <0.123.0> (process)\n"
        "\t0 running (status)\n"
        "\n"
        "beam.smp 4242/130 [000] 1700000000.022345: 1 cpu-clock:"
        "\tmetric_reductions: 500, 0\tmetric_memory: 2048, -6144\n"
        "\n");
    assert_valid_perf(&fx->out);
    assert_int_equal(kp_perf_writer_last_time(fx->w), 1700000000022345u);
}

static void test_columns(void **state)
{
    fixture *fx = *state;
    static const struct {
        uint32_t pid, tid, cpu;
        uint64_t period;
        const char *header;
    } cases[] = {
        {1, 0, 7, 1, "beam.smp 1/0 [007] 0.000005: 1 cpu-clock:\n"},
        {1, 2, 42, 1, "beam.smp 1/2 [042] 0.000005: 1 cpu-clock:\n"},
        {1, 2, 999, 1, "beam.smp 1/2 [999] 0.000005: 1 cpu-clock:\n"},
        {1, 2, 1234, 81234, "beam.smp 1/2 [1234] 0.000005: 81234 cpu-clock:\n"},
        {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT64_MAX,
         "beam.smp 4294967295/4294967295 [4294967295] 0.000005: 18446744073709551615 cpu-clock:\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kp_perf_record r = {cases[i].pid, cases[i].tid, cases[i].cpu, 5, cases[i].period, NULL, 0,
                            fx->empty};
        kp_buf_clear(&fx->out);
        assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_OK);
        assert_true(fx->out.len == strlen(cases[i].header) + 1);
        assert_memory_equal(fx->out.data, cases[i].header, fx->out.len - 1);
    }
}

/* Writes a sample at `in` and checks the timestamp it carries. */
static void expect_time(fixture *fx, uint64_t in, const char *expected)
{
    kp_perf_record r = record_at(fx, in);
    size_t start = fx->out.len;
    assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_OK);
    const char *header = fx->out.data + start;
    const char *ts = memchr(header, ']', fx->out.len - start) + 2;
    size_t n = strlen(expected);
    if (memcmp(ts, expected, n) != 0 || ts[n] != ':')
        fail_msg("time %llu written as %.*s, want %s", (unsigned long long)in, (int)n + 1, ts,
                 expected);
}

static void test_timestamps_ordered_never_whole_second(void **state)
{
    fixture *fx = *state;
    expect_time(fx, 5000000, "5.000001");
    assert_int_equal(kp_perf_writer_last_time(fx->w), 5000001);
    expect_time(fx, 4000000, "5.000001"); /* earlier: raised */
    assert_int_equal(kp_perf_writer_clamped(fx->w), 1);
    expect_time(fx, 5000001, "5.000001");
    expect_time(fx, 5000002, "5.000002");
    expect_time(fx, 3, "5.000002"); /* earlier: raised */
    assert_int_equal(kp_perf_writer_clamped(fx->w), 2);
    expect_time(fx, 6999999, "6.999999");
    expect_time(fx, 7000000, "7.000001");
    expect_time(fx, 7000000, "7.000001");
    assert_int_equal(kp_perf_writer_last_time(fx->w), 7000001);
    assert_valid_perf(&fx->out);
    assert_false(contains(&fx->out, ".000000", 7));
}

static void test_reset_time(void **state)
{
    fixture *fx = *state;
    expect_time(fx, 0, "0.000001");
    expect_time(fx, UINT64_MAX, "18446744073709.551615");
    kp_perf_writer_reset_time(fx->w);
    assert_int_equal(kp_perf_writer_last_time(fx->w), 0);
    kp_buf_clear(&fx->out); /* a new file */
    expect_time(fx, 1000, "0.001000");
    expect_time(fx, 2000000, "2.000001");
    assert_int_equal(kp_perf_writer_clamped(fx->w), 0);
    assert_valid_perf(&fx->out);
}

static void test_metric_fields(void **state)
{
    fixture *fx = *state;
    kp_metric m[] = {{"reductions", INT64_MIN, INT64_MAX}, {"A_1", 0, -1}};
    kp_perf_record r = {7, 8, 9, 1500000, 1, m, 2, fx->empty};
    assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_OK);
    r.time_us++;
    assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_OK);
    assert_valid_perf(&fx->out);
    static const char header[] = "beam.smp 7/8 [009] 1.500000: 1 cpu-clock:"
                                 "\tmetric_reductions: -9223372036854775808, 9223372036854775807"
                                 "\tmetric_A_1: 0, -1\n\n";
    assert_memory_equal(fx->out.data, header, sizeof header - 1);
}

static void test_invalid_metric_or_stack_changes_nothing(void **state)
{
    fixture *fx = *state;
    static const char *const bad[] = {"", "a-b", "a b", "x:y", "a.b", "caf\xc3\xa9", "a\tb", NULL};
    expect_time(fx, 10000000, "10.000001");
    size_t len = fx->out.len;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kp_metric m[] = {{"ok", 1, 1}, {bad[i], 1, 2}};
        kp_perf_record r = {1, 1, 1, 1, 1, m, 2, fx->stack}; /* earlier time, too */
        assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_ERR_INVAL);
    }
    kp_perf_record r = record_at(fx, 1);
    r.stack = kp_stacks_count(fx->stacks);
    assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_ERR_INVAL);
    r.stack = UINT32_MAX;
    assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_ERR_INVAL);
    assert_int_equal(fx->out.len, len);
    assert_int_equal(kp_perf_writer_clamped(fx->w), 0);
    assert_int_equal(kp_perf_writer_last_time(fx->w), 10000001);
}

static void test_invalid_names_rejected(void **state)
{
    fixture *fx = *state;
    static const char *const bad_comm[] = {"",    "b",      "beam2",   "beam smp",
                                           "a;b", "tab\tx", "del\x7f", "abcdefghijklmnop" /* 16 */};
    static const char *const bad_event[] = {"", "cpu clock", "cpu:clock", "cpu;x", "\xc3\xa9"};
    kp_perf_writer *sentinel = (kp_perf_writer *)&sentinel, *w = sentinel;
    for (size_t i = 0; i < sizeof bad_comm / sizeof *bad_comm; i++) {
        if (kp_perf_writer_create(bad_comm[i], "cpu-clock", fx->frames, fx->stacks, &w) !=
            KP_ERR_INVAL)
            fail_msg("comm \"%s\" accepted", bad_comm[i]);
        assert_ptr_equal(w, sentinel);
    }
    for (size_t i = 0; i < sizeof bad_event / sizeof *bad_event; i++) {
        if (kp_perf_writer_create("beam.smp", bad_event[i], fx->frames, fx->stacks, &w) !=
            KP_ERR_INVAL)
            fail_msg("event \"%s\" accepted", bad_event[i]);
        assert_ptr_equal(w, sentinel);
    }
    static const char *const good[][2] = {{"ab", "e"},
                                          {"abcdefghijklmno", "a.b_c-1"},
                                          {"beam.smp", "cpu-clock"},
                                          {"erl_child_setup", "reductions"}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        assert_int_equal(kp_perf_writer_create(good[i][0], good[i][1], fx->frames, fx->stacks, &w),
                         KP_OK);
        kp_buf_clear(&fx->out);
        kp_perf_record r = record_at(fx, 1);
        assert_int_equal(kp_perf_writer_format(w, &r, &fx->out), KP_OK);
        assert_int_equal(kp_perf_writer_format(w, &r, &fx->out), KP_OK);
        assert_valid_perf(&fx->out);
        kp_perf_writer_free(w);
    }
}

/* Names that need encoding still give a valid file: an Elixir module that is
 * not an alias is a quoted atom, and so is a function name that is no
 * identifier (frame_name.h). */
static void test_encoded_frames(void **state)
{
    fixture *fx = *state;
    uint32_t ids[] = {pseudo(fx->frames, "", "status"), pseudo(fx->frames, "[unknown]", "process"),
                      mfa(fx->frames, "Elixir.My Mod", "a->b", 0),
                      mfa(fx->frames, "erlang", "++", 2),
                      mfa(fx->frames, "m", "-f/1-fun-0- 1.5: x:", 1)};
    uint32_t stack;
    assert_int_equal(kp_stacks_intern(fx->stacks, ids, 5, &stack), KP_OK);
    for (int i = 0; i < 2; i++) {
        kp_perf_record r = {1, 2, 3, 4, 1, NULL, 0, stack};
        assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_OK);
    }
    assert_valid_perf(&fx->out);
    static const char frames[] =
        "\t9 m:-f/1-fun-0-%201.5:%20x:/1 (m.beam)\n"
        "\t8 erlang:%2B%2B/2 (erlang.beam)\n"
        "\t7 :%22Elixir.My%20Mod%22.%22a-%3Eb%22/0 (Elixir.My%20Mod.beam)\n"
        "\t6 %5Bunknown] (process)\n"
        "\t5 %00 (status)\n\n";
    assert_true(contains(&fx->out, frames, sizeof frames - 1));
}

static void test_create_out_of_memory(void **state)
{
    fixture *fx = *state;
    kp_perf_writer *sentinel = (kp_perf_writer *)&sentinel, *w = sentinel;
    long n = 0;
    for (;; n++) {
        kp_fault_alloc_after(n);
        kp_status st = kp_perf_writer_create("beam.smp", "cpu-clock", fx->frames, fx->stacks, &w);
        kp_fault_alloc_reset();
        if (st == KP_OK)
            break;
        assert_int_equal(st, KP_ERR_NOMEM);
        assert_ptr_equal(w, sentinel);
    }
    assert_int_equal(n, 1);
    kp_perf_writer_free(w);
}

/* Each failing format returns KP_ERR_NOMEM and changes neither the buffer nor
 * the writer's clock; the first success writes what a writer that never
 * failed writes. */
static void test_format_out_of_memory(void **state)
{
    fixture *fx = *state;
    uint32_t ids[60];
    char name[64];
    for (unsigned i = 0; i < 60; i++) {
        snprintf(name, sizeof name, "function_with_a_rather_long_name_%u", i);
        ids[i] = mfa(fx->frames, "module_with_a_long_name", name, i);
    }
    uint32_t stack;
    assert_int_equal(kp_stacks_intern(fx->stacks, ids, 60, &stack), KP_OK);
    kp_perf_writer *ref;
    assert_int_equal(kp_perf_writer_create("beam.smp", "cpu-clock", fx->frames, fx->stacks, &ref),
                     KP_OK);
    kp_buf expected = KP_BUF_INIT;
    kp_perf_record first = record_at(fx, 10000000);
    kp_perf_record late = {1, 2, 3, 9000000, 1, (kp_metric[]){{"m", -5, 5}}, 1, stack};
    assert_int_equal(kp_perf_writer_format(ref, &first, &expected), KP_OK);
    kp_buf_clear(&expected);
    assert_int_equal(kp_perf_writer_format(ref, &late, &expected), KP_OK);
    assert_int_equal(kp_perf_writer_format(fx->w, &first, &fx->out), KP_OK);
    while (fx->out.len < fx->out.cap) /* full: the sample needs new memory */
        assert_int_equal(kp_buf_append_char(&fx->out, '#'), KP_OK);
    size_t fill_len = fx->out.len;
    char *fill = malloc(fill_len);
    assert_non_null(fill);
    memcpy(fill, fx->out.data, fill_len);
    long n = 0;
    for (;; n++) {
        kp_fault_alloc_after(n);
        kp_status st = kp_perf_writer_format(fx->w, &late, &fx->out);
        kp_fault_alloc_reset();
        if (st == KP_OK)
            break;
        assert_int_equal(st, KP_ERR_NOMEM);
        assert_int_equal(fx->out.len, fill_len);
        assert_memory_equal(fx->out.data, fill, fill_len);
        assert_int_equal(kp_perf_writer_clamped(fx->w), 0);
        assert_int_equal(kp_perf_writer_last_time(fx->w), 10000001);
    }
    assert_true(n >= 2); /* the sample grew the buffer more than once */
    assert_int_equal(fx->out.len, fill_len + expected.len);
    assert_memory_equal(fx->out.data + fill_len, expected.data, expected.len);
    assert_int_equal(kp_perf_writer_clamped(fx->w), 1);
    assert_int_equal(kp_perf_writer_last_time(fx->w), 10000001);
    kp_buf_free(&expected);
    free(fill);
    kp_perf_writer_free(ref);
}

/* A repeated sample (same everything but the time) is written from the
 * writer's cache of recent texts: its text must be exactly what formatting
 * from scratch gives, with the time rules applied, and any difference in
 * what the record says (value, delta, metric name, stack, tid) must not be
 * served from the cache. */
static kp_buf fresh_text(fixture *fx, const kp_perf_record *r)
{
    kp_perf_writer *w;
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_perf_writer_create("beam.smp", "cpu-clock", fx->frames, fx->stacks, &w),
                     KP_OK);
    assert_int_equal(kp_perf_writer_format(w, r, &b), KP_OK);
    kp_perf_writer_free(w);
    return b;
}

static void assert_same_as_fresh(fixture *fx, const kp_perf_record *r)
{
    kp_buf_clear(&fx->out);
    assert_int_equal(kp_perf_writer_format(fx->w, r, &fx->out), KP_OK);
    kp_buf want = fresh_text(fx, r);
    if (want.len != fx->out.len || memcmp(want.data, fx->out.data, want.len) != 0)
        fail_msg("got:\n%.*s\nwant:\n%.*s", (int)fx->out.len, fx->out.data, (int)want.len,
                 want.data);
    kp_buf_free(&want);
}

static void test_repeated_samples_same_text(void **state)
{
    fixture *fx = *state;
    kp_metric m[] = {{"reductions", 500, 0}, {"memory", 2048, 0}};
    kp_perf_record r = {4242, 123, 0, 1700000000012345u, 1, m, 2, fx->stack};
    assert_same_as_fresh(fx, &r);
    r.time_us += 10000;
    assert_same_as_fresh(fx, &r);  /* from the cache */
    r.time_us = 1700000001000000u; /* whole second: bumped by 1 us */
    assert_same_as_fresh(fx, &r);
    assert_true(contains(&fx->out, "1700000001.000001:", 18));
    r.time_us = 1700000001000002u;
    m[1].value = 4096; /* a changed value */
    assert_same_as_fresh(fx, &r);
    assert_true(contains(&fx->out, "metric_memory: 4096, 0", 22));
    m[0].delta = 7; /* a changed delta */
    assert_same_as_fresh(fx, &r);
    assert_true(contains(&fx->out, "metric_reductions: 500, 7", 25));
    m[0].name = "reds"; /* a changed name, same values */
    assert_same_as_fresh(fx, &r);
    assert_true(contains(&fx->out, "metric_reds: 500, 7", 19));
    m[0].name = "bad name"; /* invalid, even where a valid one was cached */
    assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_ERR_INVAL);
    m[0].name = "reds";
    r.stack = fx->empty; /* another stack */
    assert_same_as_fresh(fx, &r);
    r.tid = 124; /* another process */
    assert_same_as_fresh(fx, &r);
    r.n_metrics = 1; /* fewer metrics */
    assert_same_as_fresh(fx, &r);
    r.time_us -= 5; /* earlier than the last one: raised, cache or not */
    kp_buf_clear(&fx->out);
    assert_int_equal(kp_perf_writer_format(fx->w, &r, &fx->out), KP_OK);
    assert_true(contains(&fx->out, "1700000001.000002:", 18));
    assert_int_equal(kp_perf_writer_clamped(fx->w), 1);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_golden),
        T(test_columns),
        T(test_timestamps_ordered_never_whole_second),
        T(test_reset_time),
        T(test_metric_fields),
        T(test_invalid_metric_or_stack_changes_nothing),
        T(test_invalid_names_rejected),
        T(test_encoded_frames),
        T(test_create_out_of_memory),
        T(test_format_out_of_memory),
        T(test_repeated_samples_same_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

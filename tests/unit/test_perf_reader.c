/* kp_perf_reader: folds samples exactly as FlameGraph's stackcollapse-perf.pl
 * (default options) does. Each *_want below is what stackcollapse-perf.pl
 * printed for the *_in next to it; collapse() turns our samples into the same
 * form (distinct stacks sorted bytewise, counts summed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/perf_reader.h"

static int reset_faults(void **state)
{
    (void)state;
    kp_fault_alloc_reset();
    return 0;
}

/* ---- inputs and what stackcollapse-perf.pl prints for them ---- */

/* own */
static const char own_in[] =
    "# kprof 0.1.0 test\n"
    "beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\tmetric_reductions: 81234, 2001\tmetric_memory: -5, -10\n"
    "\t7f0000000000 my_mod:collect/1 (my_mod.beam)\n"
    "\t7f0000000010 my_mod:loop/1 (my_mod.beam)\n"
    "\t1 <0.123.0> (process)\n"
    "\t2 running (status)\n"
    "\n"
    "beam.smp 4242/124 [000] 1700000000.012346: 1 cpu-clock:\tmetric_reductions: 7, 7\n"
    "\t7f0000000010 my_mod:loop/1 (my_mod.beam)\n"
    "\t1 <0.124.0> (process)\n"
    "\t2 waiting (status)\n"
    "\n"
    "beam.smp 4242/123 [001] 1700000000.012347: 1 cpu-clock:\tmetric_reductions: 0, -3\tmetric_memory: 9, 0\n"
    "\t7f0000000000 my_mod:collect/1 (my_mod.beam)\n"
    "\t7f0000000010 my_mod:loop/1 (my_mod.beam)\n"
    "\t1 <0.123.0> (process)\n"
    "\t2 running (status)\n"
    "\n";
static const char own_want[] = "beam.smp;running;<0.123.0>;my_mod:loop/1;my_mod:collect/1 2\n"
                               "beam.smp;waiting;<0.124.0>;my_mod:loop/1 1\n";
/* perf_script */
static const char perf_script_in[] =
    "# ========\n"
    "# cmdline : /usr/bin/perf record -F 99 -g -p 1234\n"
    "# ========\n"
    "#\n"
    "beam.smp  1234 [000] 12345.678901:     250000 cpu-clock:pppH: \n"
    "\t    7f12 $my_mod:loop/1+0x1e (/tmp/perf-1234.map)\n"
    "\t    7f13 erts_schedule+0x1a2 (/usr/lib/erlang/erts-13/bin/beam.smp)\n"
    "\t    7f14 [unknown] (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
    "\n"
    "1_scheduler 1234/1240 [001] 12345.679001:     250000 cpu-clock:pppH: \n"
    "\t    7f12 $my_mod:loop/1+0x1e (/tmp/perf-1234.map)\n"
    "\t    7f13 erts_schedule+0x1a2 (/usr/lib/erlang/erts-13/bin/beam.smp)\n"
    "\t    7f14 [unknown] (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
    "\n"
    "V8 WorkerThread 25607 4794564.109216:     250000 cpu-clock:pppH: \n"
    "\tffffffff8103ce3b native_safe_halt+0x6 ([kernel.kallsyms])\n"
    "\n"
    "beam.smp  1234 [000] 12345.680001:     250000 cpu-clock:pppH: \n"
    "\t    7f12 $my_mod:loop/1+0x1e (/tmp/perf-1234.map)\n"
    "\t    7f13 erts_schedule+0x1a2 (/usr/lib/erlang/erts-13/bin/beam.smp)\n"
    "\t    7f14 [unknown] (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
    "\n";
static const char perf_script_want[] =
    "1_scheduler;[libc.so.6];erts_schedule;$my_mod:loop/1 250000\n"
    "V8_WorkerThread;native_safe_halt 250000\n"
    "beam.smp;[libc.so.6];erts_schedule;$my_mod:loop/1 500000\n";
/* periods */
static const char periods_in[] = "comm 1 1.000001: cycles:\n"
                                 "\t1 absent (m)\n"
                                 "\n"
                                 "comm 1 1.000002: 0 cycles:\n"
                                 "\t1 zero (m)\n"
                                 "\n"
                                 "comm 1 1.000003: 00 cycles:\n"
                                 "\t1 double_zero (m)\n"
                                 "\n"
                                 "comm 1 1.000004: 007 cycles:\n"
                                 "\t1 leading_zeros (m)\n"
                                 "\n"
                                 "comm 1 1.000005: 5 cycles:\tmetric_x: 1, 2\n"
                                 "\t1 metrics_after_event (m)\n"
                                 "\n"
                                 "comm 1 1.000006:5 cycles:\n"
                                 "\t1 no_space (m)\n"
                                 "\n"
                                 "comm 1 1.000007: 3 cycles:  \n"
                                 "\t1 trailing_space (m)\n"
                                 "\n"
                                 "comm 1 1.000008: 3 4 cycles:\n"
                                 "\t1 two_numbers (m)\n"
                                 "\n"
                                 "comm 1 1.000009: 4294967296 cycles:\n"
                                 "\t1 over_32_bits (m)\n"
                                 "\n";
static const char periods_want[] = "comm;absent 1\n"
                                   "comm;double_zero 0\n"
                                   "comm;leading_zeros 7\n"
                                   "comm;metrics_after_event 1\n"
                                   "comm;no_space 5\n"
                                   "comm;over_32_bits 4294967296\n"
                                   "comm;trailing_space 3\n"
                                   "comm;two_numbers 1\n"
                                   "comm;zero 1\n";
/* events */
static const char events_in[] = "comm 1 1.000001: 10 cycles:\n"
                                "\t1 first (m)\n"
                                "\n"
                                "comm 1 1.000002: 20 instructions:\n"
                                "\t1 other_event (m)\n"
                                "\n"
                                "comm 1 1.000003: 30 cycles:ppp:\n"
                                "\t1 modified_event (m)\n"
                                "\n"
                                "comm 1 1.000004: 40 cycles:\tmetric_x: 1, 2\n"
                                "\t1 no_event_match (m)\n"
                                "\n"
                                "comm 1 1.000005: 50 cycles:\n"
                                "\t1 first (m)\n"
                                "\n";
static const char events_want[] = "comm;first 60\n"
                                  "comm;no_event_match 1\n";
/* symbols */
static const char symbols_in[] = "comm 1 1.0: 1 ev:\n"
                                 "\t1 plain+0x1e (m)\n"
                                 "\t2 upper+0x1E (m)\n"
                                 "\t3 bare+0x (m)\n"
                                 "\t4 twice+0x1e+0x2f (m)\n"
                                 "\t5 a+b (m)\n"
                                 "\t6 in->lined->deep (m)\n"
                                 "\t7 pre->x_[i] (m)\n"
                                 "\t8 ->lead (m)\n"
                                 "\t9 trail-> (m)\n"
                                 "\ta a->->b (m)\n"
                                 "\tb -> (m)\n"
                                 "\tc [unknown] (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
                                 "\td [unknown] ([unknown])\n"
                                 "\te [unknown]+0x12 (/x/y.so)\n"
                                 "\tf f->[unknown] (/lib/z.so)\n"
                                 "\t10 a;b;c (m)\n"
                                 "\t11 foo(int, char) (m)\n"
                                 "\t12 ns::(anonymous namespace)::f(int) (m)\n"
                                 "\t13 net/http.(*Client).Do (m)\n"
                                 "\t14 erlang:'++'/2 (m)\n"
                                 "\t15 say\"hi\" (m)\n"
                                 "\t16 (skipped) (m)\n"
                                 "\t17 +0x10 (m)\n"
                                 "\t18 [unknown] (/lib/libfoo.so (deleted))\n"
                                 "\n";
static const char symbols_want[] =
    "comm;[unknown] ;sayhi;erlang:++/2;net/http.(*Client).Do;ns::(anonymous namespace)::f;foo;a:b:c;f;[z.so]_[i];[y.so];[unknown];[libc.so.6];a;_[i];b_[i];trail;;lead_[i];pre;x_[i];in;lined_[i];deep_[i];a+b;twice+0x1e;bare+0x;upper+0x1E;plain 1\n";
/* frames */
static const char frames_in[] = "\t1 before_any_header (m)\n"
                                "\n"
                                "comm 1 1.0: 1 ev:\n"
                                "\t1 foo bar (baz) (mod)\n"
                                "\t2 f (a (b))\n"
                                "\t7f12 (mod)\n"
                                "\t3 g () (m)\n"
                                "\t4  spaced  (m)\n"
                                "\t5 h (m) trailing\n"
                                "5 no_indent (m)\n"
                                "\t6 no_module\n"
                                "\n"
                                "comm 1 1.1: 1 ev:\n"
                                "\n"
                                "comm 1 1.2: 1 ev:\n"
                                "\t1 one (m)\n"
                                "comm 1 1.3: 2 ev:\n"
                                "\t1 two (m)\n"
                                "\n"
                                "comm 1 1.4: 1 ev:\n"
                                "\t1 dropped (m)";
static const char frames_want[] = "comm 1\n"
                                  "comm;no_indent;h;spaced ;g ;2;f ;foo bar  1\n"
                                  "comm;two;one 2\n";
/* malformed */
static const char malformed_in[] = "comm 1 1.0: 1 ev:\n"
                                   "\t1 a (m)\n"
                                   "garbage\n"
                                   "   \n"
                                   "\n"
                                   "\r\n"
                                   "comm 1 1.1: 1 ev:\n"
                                   "\t1 b (m)\n"
                                   "x\n"
                                   "\n";
static const char malformed_want[] = "comm;a 1\n"
                                     "comm;b 1\n";
/* crlf */
static const char crlf_in[] = "comm 1 1.0: 1 ev:\r\n"
                              "\t1 a (m)\r\n"
                              "\r\n"
                              "comm 1 1.1: 1 ev:\r\n"
                              "\t1 b (m)\r\n"
                              "\r\n";
static const char crlf_want[] = "";
/* java */
static const char java_in[] = "java 1 1.0: 1 ev:\n"
                              "\t1 Lorg/a/B;.c (m)\n"
                              "\t2 LNoSlash;.x (m)\n"
                              "\t3 \"Lq/x\" (m)\n"
                              "\n"
                              "javac 1 1.1: 1 ev:\n"
                              "\t1 Lp/Q (m)\n"
                              "\n"
                              "myjava 1 1.2: 1 ev:\n"
                              "\t1 Lp/Q (m)\n"
                              "\n";
static const char java_want[] = "java;q/x;LNoSlash:.x;org/a/B:.c 1\n"
                                "javac;p/Q 1\n"
                                "myjava;Lp/Q 1\n";

/* ---- helpers ---- */

typedef struct {
    char *stack; /* "stack count" */
    size_t stack_len;
    uint64_t count;
} folded_line;

static int by_stack(const void *a, const void *b)
{
    const folded_line *x = a, *y = b;
    size_t n = x->stack_len < y->stack_len ? x->stack_len : y->stack_len;
    int c = memcmp(x->stack, y->stack, n);
    return c ? c : (x->stack_len > y->stack_len) - (x->stack_len < y->stack_len);
}

/* Feeds `input` to `reader` line by line, as kp_source hands lines out (a
 * last line without '\n' included), calling `each` for every sample. */
static void feed(kp_perf_reader *reader, const char *input,
                 void (*each)(const kp_perf_sample *, void *), void *ctx)
{
    const char *p = input, *end = input + strlen(input);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        const kp_perf_sample *s = (const kp_perf_sample *)1;
        assert_int_equal(kp_perf_reader_line(reader, p, len, &s), KP_OK);
        if (s)
            each(s, ctx);
        p += len + (nl != NULL);
    }
}

typedef struct {
    folded_line *lines;
    size_t n;
} folded;

static void add_sample(const kp_perf_sample *s, void *ctx)
{
    folded *f = ctx;
    f->lines = realloc(f->lines, (f->n + 1) * sizeof *f->lines);
    folded_line *l = &f->lines[f->n++];
    l->stack = malloc(s->stack_len + 1);
    memcpy(l->stack, s->stack, s->stack_len);
    l->stack_len = s->stack_len;
    l->count = s->period;
}

/* What stackcollapse-perf.pl would print for `input`, from our reader. */
static char *collapse(const char *input, kp_perf_reader_stats *stats)
{
    kp_perf_reader *r = kp_perf_reader_create();
    assert_non_null(r);
    folded f = {NULL, 0};
    feed(r, input, add_sample, &f);
    if (stats)
        *stats = *kp_perf_reader_stats_get(r);
    kp_perf_reader_free(r);
    if (f.n)
        qsort(f.lines, f.n, sizeof *f.lines, by_stack);
    size_t cap = 1, len = 0;
    for (size_t i = 0; i < f.n; i++)
        cap += f.lines[i].stack_len + 24;
    char *out = malloc(cap);
    for (size_t i = 0; i < f.n; i++) {
        uint64_t count = f.lines[i].count;
        while (i + 1 < f.n && by_stack(&f.lines[i], &f.lines[i + 1]) == 0)
            count += f.lines[++i].count;
        memcpy(out + len, f.lines[i].stack, f.lines[i].stack_len);
        len += f.lines[i].stack_len;
        len += (size_t)snprintf(out + len, cap - len, " %llu\n", (unsigned long long)count);
    }
    out[len] = '\0';
    for (size_t i = 0; i < f.n; i++)
        free(f.lines[i].stack);
    free(f.lines);
    return out;
}

static void assert_collapses_to(const char *input, const char *want)
{
    char *got = collapse(input, NULL);
    assert_string_equal(got, want);
    free(got);
}

/* ---- tests ---- */

static void test_own_format(void **state)
{
    (void)state;
    assert_collapses_to(own_in, own_want);
}

static void test_perf_script_output(void **state)
{
    (void)state;
    assert_collapses_to(perf_script_in, perf_script_want);
}

static void test_period_rules(void **state)
{
    (void)state;
    assert_collapses_to(periods_in, periods_want);
}

static void test_first_event_wins(void **state)
{
    (void)state;
    kp_perf_reader_stats st;
    char *got = collapse(events_in, &st);
    assert_string_equal(got, events_want);
    assert_int_equal(st.skipped_events, 2);
    assert_int_equal(st.samples, 3);
    free(got);
}

static void test_symbol_cleanup(void **state)
{
    (void)state;
    assert_collapses_to(symbols_in, symbols_want);
    assert_collapses_to(java_in, java_want);
}

static void test_frame_lines_and_sample_boundaries(void **state)
{
    (void)state;
    kp_perf_reader_stats st;
    char *got = collapse(frames_in, &st);
    assert_string_equal(got, frames_want);
    /* the final sample has no empty line: dropped, as stackcollapse drops it */
    assert_int_equal(st.samples, 3);
    assert_int_equal(st.lines, 21);
    assert_int_equal(st.malformed, 1); /* "\t6 no_module" */
    assert_int_equal(st.first_malformed, 11);
    free(got);
}

static void test_malformed_lines(void **state)
{
    (void)state;
    kp_perf_reader_stats st;
    char *got = collapse(malformed_in, &st);
    assert_string_equal(got, malformed_want);
    assert_int_equal(st.malformed, 4); /* "garbage", "   ", "\r", "x" */
    assert_int_equal(st.first_malformed, 3);
    free(got);
    /* CRLF: the "\r" lines are not empty, so no sample ever completes */
    got = collapse(crlf_in, &st);
    assert_string_equal(got, crlf_want);
    assert_int_equal(st.samples, 0);
    assert_int_equal(st.malformed, 2);
    assert_int_equal(st.first_malformed, 3);
    free(got);
    got = collapse("", &st);
    assert_string_equal(got, "");
    assert_int_equal(st.lines, 0);
    free(got);
}

/* The metric fields of our headers: names, values, deltas, header line. */
typedef struct {
    size_t n;
    char text[8][128];
} metric_log;

static void log_metrics(const kp_perf_sample *s, void *ctx)
{
    metric_log *log = ctx;
    assert_true(log->n < 8);
    int len = snprintf(log->text[log->n], 128,
                       "line %llu period %llu:", (unsigned long long)s->header_line,
                       (unsigned long long)s->period);
    for (size_t i = 0; i < s->n_metrics; i++)
        len += snprintf(log->text[log->n] + len, 128 - (size_t)len, " %.*s=%lld/%lld",
                        (int)s->metrics[i].name_len, s->metrics[i].name,
                        (long long)s->metrics[i].value, (long long)s->metrics[i].delta);
    log->n++;
}

static void test_metric_fields(void **state)
{
    (void)state;
    kp_perf_reader *r = kp_perf_reader_create();
    assert_non_null(r);
    metric_log log = {0};
    feed(r, own_in, log_metrics, &log);
    feed(r,
         "beam.smp 1/2 [0] 5.000001: 1 cpu-clock:\tmetric_big: 9223372036854775807, "
         "-9223372036854775808\n"
         "\n"
         "beam.smp 1/2 [0] 5.000002: 1 cpu-clock:\tmetric_float: 1000.5, 1\tmetric_ok: 1, 2\n"
         "\n"
         "beam.smp 1/2 [0] 5.000003: 1 cpu-clock:\tmetric_over: 9223372036854775808, 0"
         "\tmetric_long: 1, 123456789012345678901\tmetric_: 1, 1\tmetric_x:1, 1\n"
         "\n"
         "beam.smp 1/2 [0] 5.000004: 1 cpu-clock:\n"
         "\n",
         log_metrics, &log);
    assert_int_equal(log.n, 7);
    assert_string_equal(log.text[0], "line 2 period 1: reductions=81234/2001 memory=-5/-10");
    assert_string_equal(log.text[1], "line 8 period 1: reductions=7/7");
    assert_string_equal(log.text[2], "line 13 period 1: reductions=0/-3 memory=9/0");
    assert_string_equal(log.text[3],
                        "line 19 period 1: big=9223372036854775807/-9223372036854775808");
    /* not integers, out of range or without a name: not metrics */
    assert_string_equal(log.text[4], "line 21 period 1: ok=1/2");
    assert_string_equal(log.text[5], "line 23 period 1:");
    assert_string_equal(log.text[6], "line 25 period 1:");
    kp_perf_reader_free(r);
}

static int is(const char *text, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(text, want, len) == 0;
}

/* Checks that a sample from own_in is one of its two stacks, whole, with its
 * metric fields intact. */
static void check_own_sample(const kp_perf_sample *s, void *ctx)
{
    size_t *count = ctx;
    int a = is(s->stack, s->stack_len, "beam.smp;running;<0.123.0>;my_mod:loop/1;my_mod:collect/1");
    int b = is(s->stack, s->stack_len, "beam.smp;waiting;<0.124.0>;my_mod:loop/1");
    assert_true(a || b);
    assert_int_equal(s->n_metrics, a ? 2 : 1);
    for (size_t i = 0; i < s->n_metrics; i++) {
        const kp_perf_metric *m = &s->metrics[i];
        assert_true(is(m->name, m->name_len, "reductions") || is(m->name, m->name_len, "memory"));
    }
    ++*count;
}

/* Allocation failures while one line is read (every line in turn, after n
 * successful allocations): KP_ERR_NOMEM loses the sample that line belongs
 * to, whole, and nothing else; the reader goes on with the next sample. */
static void test_out_of_memory(void **state)
{
    (void)state;
    const size_t n_lines = 18; /* in own_in; 3 samples */
    size_t failures = 0;
    for (size_t target = 0; target < n_lines; target++) {
        for (long n = 0; n < 4; n++) {
            kp_perf_reader *r = kp_perf_reader_create();
            assert_non_null(r);
            const char *p = own_in;
            size_t samples = 0;
            kp_status failed = KP_OK;
            for (size_t i = 0; *p; i++) {
                const char *nl = strchr(p, '\n');
                const kp_perf_sample *s;
                if (i == target)
                    kp_fault_alloc_after(n);
                kp_status st = kp_perf_reader_line(r, p, (size_t)(nl - p), &s);
                kp_fault_alloc_reset();
                p = nl + 1;
                if (i == target)
                    failed = st;
                else
                    assert_int_equal(st, KP_OK);
                if (st == KP_OK && s)
                    check_own_sample(s, &samples);
            }
            if (failed != KP_OK) {
                assert_int_equal(failed, KP_ERR_NOMEM);
                failures++;
            }
            assert_int_equal(samples, failed == KP_OK ? 3 : 2);
            kp_perf_reader_free(r);
        }
    }
    assert_true(failures > 3); /* header, frame and empty lines allocate at first */
    /* creation itself */
    for (long n = 0;; n++) {
        kp_fault_alloc_after(n);
        kp_perf_reader *r = kp_perf_reader_create();
        kp_fault_alloc_reset();
        if (r) {
            kp_perf_reader_free(r);
            break;
        }
    }
}

static void collect_time(const kp_perf_sample *s, void *ctx)
{
    uint64_t *t = ctx;
    t[t[0] + 1] = s->has_time ? s->time_ns : UINT64_MAX;
    t[0]++;
}

/* The TIME column, in ns, whatever its precision; none when absent; a number
 * in COMM or a "secs.frac" not followed by ':' is not taken for it. */
static void test_sample_time(void **state)
{
    (void)state;
    kp_perf_reader *r = kp_perf_reader_create();
    uint64_t t[8] = {0};
    feed(r,
         "beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\n\t1 a (m)\n\n"
         "java 12.5 77 42.000000001: 3 cpu-clock:\n\t1 b (m)\n\n"
         "comm 1 2.5 cpu-clock:\n\t1 c (m)\n\n"
         "comm 1 3: 1 cpu-clock:\n\t1 d (m)\n\n",
         collect_time, t);
    assert_int_equal(t[0], 4);
    assert_true(t[1] == 1700000000012345000ull);
    assert_true(t[2] == 42000000001ull);
    assert_true(t[3] == UINT64_MAX);
    assert_true(t[4] == UINT64_MAX);
    kp_perf_reader_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_own_format, reset_faults),
        cmocka_unit_test_teardown(test_perf_script_output, reset_faults),
        cmocka_unit_test_teardown(test_period_rules, reset_faults),
        cmocka_unit_test_teardown(test_first_event_wins, reset_faults),
        cmocka_unit_test_teardown(test_symbol_cleanup, reset_faults),
        cmocka_unit_test_teardown(test_frame_lines_and_sample_boundaries, reset_faults),
        cmocka_unit_test_teardown(test_malformed_lines, reset_faults),
        cmocka_unit_test_teardown(test_metric_fields, reset_faults),
        cmocka_unit_test_teardown(test_sample_time, reset_faults),
        cmocka_unit_test_teardown(test_out_of_memory, reset_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The format checker itself: it accepts files that follow FORMATS.md and
 * rejects each rule's violation, for the reason given (the first violation's
 * description must name the rule). Each bad input breaks exactly one rule of
 * an otherwise good file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "format_check.h"

typedef struct {
    const char *text;
    size_t len;
    const char *why; /* a fragment of the expected description */
} bad_case;

/* clang-format 14 and 19 lay out a braced macro differently: kept as is */
/* clang-format off */
#define CASE(lit, why) {lit, sizeof(lit) - 1, why}
/* clang-format on */

/* ---- perf-script ---- */

#define H1 "beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\n"
#define H2 "beam.smp 4242/124 [002] 1700000000.012346: 1 cpu-clock:\n"
#define F "\t1 m:f/1 (m.beam)\n"
#define S1 H1 F "\n"
#define S2 H2 F "\n"
#define FRAME(line) H1 line "\n\n" S2

static const char *const good_perf[] = {
    /* the example of FORMATS.md, twice */
    "# kprof\n"
    "beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\tmetric_reductions: 81234, 2001\n"
    "\t7f0000000000 my_mod:collect/1 (my_mod.beam)\n"
    "\t7f0000000010 my_mod:loop/1 (my_mod.beam)\n"
    "\t7f0000000020 proc_lib:init_p_do_apply/3 (proc_lib.beam)\n"
    "\t1 <0.123.0> (process)\n"
    "\t2 running (status)\n"
    "\n"
    "beam.smp 4242/123 [001] 1700000000.022345: 1 cpu-clock:\tmetric_reductions: 81234, 2001\n"
    "\t7f0000000000 my_mod:collect/1 (my_mod.beam)\n"
    "\t2 running (status)\n"
    "\n",
    /* no comment, equal times, a sample without frames, negative metrics */
    H1 "\n" H1 "\n",
    "beam.smp 1/2 [0] 5.000001: 7 ev_1.x-y:\tmetric_a: -1, -2\tmetric_B_2: 0, 0\n\n"
    "beam.smp 1/2 [0] 5.000002: 7 ev_1.x-y:\n\n",
    /* escapes, '>' not after '-', UTF-8 of 2 and 4 bytes */
    FRAME("\t3 erlang:%2B%2B/2 (erlang.beam)\n\t4 m:%27-f/1-fun-0-%27/1 (m.beam)\n"
          "\t5 m:a%2d%3eb/0 (m.beam)\n\t6 <0.1.0> (process)\n\t7 m:a>b/0 (m.beam)\n"
          "\t8 m:h\xc3\xa9llo\xf0\x9f\x98\x80/0 (m.beam)\n\t9 %5Bunknown] (x)"),
};

static const bad_case bad_perf[] = {
    CASE(S1 "beam.smp 4242/124 [002] 1700000000.012346: 1 cpu-clock:\r\n" F "\n", "CR byte"),
    CASE(FRAME("\t1 m:f\0/1 (m.beam)"), "control byte"),
    CASE("#\x01\n" S1 S2, "control byte"),
    CASE(FRAME("\t1 m:f\xff/1 (m.beam)"), "UTF-8"),
    CASE(FRAME("\t1 m:f\xc0\xaf/1 (m.beam)"), "UTF-8"),     /* overlong */
    CASE(FRAME("\t1 m:f\xed\xa0\x80/1 (m.beam)"), "UTF-8"), /* surrogate */
    CASE(FRAME("\t1 m:f\xe2\x82/1 (m.beam)"), "UTF-8"),     /* truncated */
    CASE("#c\n\n" S1 S2, "first non-# line is empty"),
    CASE("#include <x.h>\n" S1 S2, "#include"),
    CASE("#!/bin/sh\n" S1 S2, "#!"),
    CASE(" beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\n\n" S2, "column 0"),
    CASE("b 4242/123 [001] 1700000000.012345: 1 cpu-clock:\n\n" S2, "fewer than 2"),
    CASE("beam2 4242/123 [001] 1700000000.012345: 1 cpu-clock:\n\n" S2, "COMM has a digit"),
    CASE("a;b 4242/123 [001] 1700000000.012345: 1 cpu-clock:\n\n" S2, "COMM has ';'"),
    CASE("beam.smp <0.123.0> [001] 1700000000.012345: 1 cpu-clock:\n\n" S2, "not decimal"),
    CASE("beam.smp 4242 [001] 1700000000.012345: 1 cpu-clock:\n\n" S2, "PID/TID"),
    CASE("beam.smp 4242/0.123.0 [001] 1700000000.012345: 1 cpu-clock:\n\n" S2, "PID/TID"),
    CASE("beam.smp 4242/123 1700000000.012345: 1 cpu-clock:\n\n" S2, "[CPU]"),
    CASE("beam.smp 4242/123 [001] 1700000000.01234: 1 cpu-clock:\n\n" S2, "6 decimals"),
    CASE("beam.smp 4242/123 [001] 1700000000.0123450: 1 cpu-clock:\n\n" S2, "6 decimals"),
    CASE("beam.smp 4242/123 [001] 1700000000: 1 cpu-clock:\n\n" S2, "6 decimals"),
    CASE(S2 S1, "backwards"),
    CASE(S1 "beam.smp 4242/124 [002] 1700000001.000000: 1 cpu-clock:\n\n", "whole second"),
    CASE("beam.smp 4242/123 [001] 1700000000.012345: 1.5 cpu-clock:\n\n" S2, "PERIOD"),
    CASE(S1 "beam.smp 4242/124 [002] 1700000000.012346: 1 cycles:\n\n", "second EVENT"),
    CASE("beam.smp 4242/123 [001] 1700000000.012345: 1 cpu clock:\n\n" S2, "EVENT must be"),
    CASE("beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\tmetric_r: 1000.5, 1\n\n" S2,
         "integers"),
    CASE("beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\tmetric_r: 10\n\n" S2,
         "metric_NAME"),
    CASE("beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock:\tmetric_a-b: 1, 2\n\n" S2,
         "metric_NAME"),
    CASE("beam.smp 4242/123 [001] 1700000000.012345: 1 cpu-clock: metric_r: 1, 2\n\n" S2,
         "metric_NAME"),
    CASE(FRAME("    1 m:f/1 (m.beam)"), "frames start with TAB"),
    CASE(FRAME("\t7F00 m:f/1 (m.beam)"), "lowercase hex"),
    CASE(FRAME("\tzz m:f/1 (m.beam)"), "lowercase hex"),
    CASE(FRAME("\t1\tm:f/1 (m.beam)"), "one space"),
    CASE(FRAME("\t1 m:f/1"), "(MODULE)"),
    CASE(FRAME("\t1 m:f/1 m.beam"), "(MODULE)"),
    CASE(FRAME("\t1 m:f/1(m.beam)"), "(MODULE)"),
    CASE(FRAME("\t1 m:f/1 (my mod)"), "MODULE has a space"),
    CASE(FRAME("\t1 m:f/1 (a)b)"), "MODULE has a space or a parenthesis"),
    CASE(FRAME("\t1 m:f/1 ([kernel])"), "starts with '['"),
    CASE(FRAME("\t1 m:f/1 ()"), "empty MODULE"),
    CASE(FRAME("\t1 m:f;g/1 (m.beam)"), "0x3b"),
    CASE(FRAME("\t1 erlang:++/2 (erlang.beam)"), "0x2b"),
    CASE(FRAME("\t1 m:f(x)/1 (m.beam)"), "0x28"),
    CASE(FRAME("\t1 m:f)/1 (m.beam)"), "0x29"),
    CASE(FRAME("\t1 erlang:'++'/2 (erlang.beam)"), "0x27"),
    CASE(FRAME("\t1 m:\"f\"/1 (m.beam)"), "0x22"),
    CASE(FRAME("\t1 m:f\\/1 (m.beam)"), "0x5c"),
    CASE(FRAME("\t1 m:f /1 (m.beam)"), "0x20"),
    CASE(FRAME("\t1 m:f\t/1 (m.beam)"), "0x09"),
    CASE(FRAME("\t1 m:100%/1 (m.beam)"), "%XX"),
    CASE(FRAME("\t1 m:f%2/1 (m.beam)"), "%XX"),
    CASE(FRAME("\t1 m:f%zz/1 (m.beam)"), "%XX"),
    CASE(FRAME("\t1 m:a->b/1 (m.beam)"), "'->'"),
    CASE(FRAME("\t1 [unknown] (m.beam)"), "[unknown]"),
    CASE(FRAME("\t1 5: (a:b)"), "FlameScope's sample pattern"),
    CASE("#c\n" F S1 S2, "outside a sample"),
    CASE(S1 H2 F, "not followed by an empty line"),
    CASE(S1 H2 "\t1 m:f/1 (m.beam)", "does not end with LF"),
    CASE(H1 F H2 F "\n", "no empty line before"),
    CASE(S1 "\n" S2, "extra empty line"),
    CASE(S1 "# late\n" S2, "comment after the first sample"),
    CASE(S1, "1 sample(s)"),
    CASE("", "0 sample(s)"),
    CASE("# only a comment\n", "0 sample(s)"),
};

static void test_perf_accepts_good_files(void **state)
{
    (void)state;
    char why[256];
    for (size_t i = 0; i < sizeof good_perf / sizeof *good_perf; i++) {
        int n = kp_check_perf(good_perf[i], strlen(good_perf[i]), why, sizeof why);
        if (n != 0)
            fail_msg("good perf file %zu rejected: %s", i, why);
        assert_string_equal(why, "");
    }
}

static void expect_rejected(int (*check)(const char *, size_t, char *, size_t), const char *kind,
                            const bad_case *cases, size_t n_cases)
{
    char why[256];
    for (size_t i = 0; i < n_cases; i++) {
        int n = check(cases[i].text, cases[i].len, why, sizeof why);
        if (n == 0)
            fail_msg("bad %s case %zu accepted (expected \"%s\")", kind, i, cases[i].why);
        if (!strstr(why, cases[i].why))
            fail_msg("bad %s case %zu: \"%s\" does not mention \"%s\"", kind, i, why, cases[i].why);
    }
}

static void test_perf_rejects_each_rule(void **state)
{
    (void)state;
    expect_rejected(kp_check_perf, "perf", bad_perf, sizeof bad_perf / sizeof *bad_perf);
}

static void test_perf_counts_and_locates_violations(void **state)
{
    (void)state;
    char why[256];
    /* line 3 has a '+', line 6 an uppercase address: two violations */
    static const char text[] = H1 F "\t1 a+b (m)\n\n" H2 "\t1A m:f/1 (m.beam)\n\n";
    assert_int_equal(kp_check_perf(text, sizeof text - 1, why, sizeof why), 2);
    assert_non_null(strstr(why, "line 3: "));
    /* a short or absent `why` is fine */
    char tiny[4];
    assert_int_equal(kp_check_perf(text, sizeof text - 1, tiny, sizeof tiny), 2);
    assert_int_equal(strlen(tiny), 3);
    assert_int_equal(kp_check_perf(text, sizeof text - 1, NULL, 0), 2);
}

/* ---- folded ---- */

static const char *const good_folded[] = {
    "<0.1.0>;m:f/1;sleep 12\n"
    "beam.smp;running;<0.123.0>;m:f/1 70\n"
    "beam.smp;running;<0.123.0>;m:g/1 5\n",
    "a 1\na;b 2\na;b;c 18446744073709551615\nb 1\n",
    "m:h\xc3\xa9llo/0;x%20y 3\nm:z12 4\n",
};

static const bad_case bad_folded[] = {
    CASE("a\t5\n", "TAB"),
    CASE("a;b\tc 5\n", "TAB"),
    CASE("a  5\n", "trailing space"),
    CASE("a 12.5\n", "integer count"),
    CASE("a -3\n", "integer count"),
    CASE("a\n", "integer count"),
    CASE("a \n", "integer count"),
    CASE("a 0\n", "positive"),
    CASE("a 07\n", "leading zero"),
    CASE(" 5\n", "empty stack"),
    CASE("a;;b 1\n", "empty frame"),
    CASE(";a 1\n", "empty frame"),
    CASE("a; 1\n", "empty frame"),
    CASE("a; b 1\n", "leading or trailing space"),
    CASE("a ;b 1\n", "leading or trailing space"),
    CASE("a;'b' 1\n", "quote"),
    CASE("a;\"b\" 1\n", "quote"),
    CASE("b 1\na 1\n", "not sorted"),
    CASE("a;b 1\na 1\n", "not sorted"),
    CASE("a 1\na 2\n", "same stack twice"),
    CASE("a;b 12 5\n", "<number>"),
    CASE("a;x 1.5 3\n", "<number>"),
    CASE("a 1\r\n", "CR byte"),
    CASE("a\x01 1\n", "control byte"),
    CASE("a\xff 1\n", "UTF-8"),
    CASE("a 1\n\nb 1\n", "empty line"),
    CASE("a 1", "does not end with LF"),
    CASE("", "empty file"),
};

static void test_folded_accepts_good_files(void **state)
{
    (void)state;
    char why[256];
    for (size_t i = 0; i < sizeof good_folded / sizeof *good_folded; i++) {
        if (kp_check_folded(good_folded[i], strlen(good_folded[i]), why, sizeof why) != 0)
            fail_msg("good folded file %zu rejected: %s", i, why);
    }
}

static void test_folded_rejects_each_rule(void **state)
{
    (void)state;
    expect_rejected(kp_check_folded, "folded", bad_folded, sizeof bad_folded / sizeof *bad_folded);
}

/* ---- file names ---- */

static void test_file_names(void **state)
{
    (void)state;
    char why[256];
    assert_int_equal(kp_check_file_name("samples-000001.perf.gz", why, sizeof why), 0);
    assert_int_equal(kp_check_file_name("A_b,c%2B+d:e@f-1.folded", why, sizeof why), 0);
    static const char *const bad[] = {"a~b", "a^b", "a\\b", "a`b",  "a{b",   "a|b",        "a}b",
                                      "a]b", "a[b", "a b",  "a\tb", "dir/a", "caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (kp_check_file_name(bad[i], why, sizeof why) == 0)
            fail_msg("bad file name \"%s\" accepted", bad[i]);
        assert_non_null(strstr(why, "outside"));
    }
    assert_int_equal(kp_check_file_name("caf\xc3\xa9", NULL, 0), 2);
    assert_int_not_equal(kp_check_file_name("", why, sizeof why), 0);
    assert_non_null(strstr(why, "empty"));
    assert_int_not_equal(kp_check_file_name(".samples.perf.1.tmp", why, sizeof why), 0);
    assert_non_null(strstr(why, "starts with '.'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_perf_accepts_good_files),
        cmocka_unit_test(test_perf_rejects_each_rule),
        cmocka_unit_test(test_perf_counts_and_locates_violations),
        cmocka_unit_test(test_folded_accepts_good_files),
        cmocka_unit_test(test_folded_rejects_each_rule),
        cmocka_unit_test(test_file_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

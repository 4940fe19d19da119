/* A slow request of tier tracing written as a request trace
 * (sampler/tiers/slow_trace.c): a root per process, the entry function
 * under the request's own process for its whole time, tier calls nested
 * as they ran, a call that outlasts its parent cut at the parent's end,
 * the marker frame of a truncated request, and files the project's format
 * checker accepts. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format_check.h"
#include "slurp.h"
#include "tiers/slow_trace.h"

#define US 1000LL

/* 0: the entry; 1 handle, 2 db, 3 accounting: tiers */
static const kp_tier_mfa mfas[] = {{"kv", "request", 1, 0},
                                   {"kv_handler", "handle", 1, 0},
                                   {"kv_db", "query", 1, 0},
                                   {"kv_accounting", "record", 2, 0}};

static kp_tier_pid pid(unsigned num)
{
    return (kp_tier_pid)num << 32;
}

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/kp_test_slow.XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* writes `r`, checks the folded file against `want` and the format */
static void write_and_check(const kp_tier_request *r, const char *want)
{
    char folded[4400], why[512] = "";
    assert_int_equal(
        kp_tier_slow_trace_write(r, mfas, 4, dir, "GET-1", folded, sizeof folded, why, sizeof why),
        KP_OK);
    const char *text = kp_test_slurp(folded);
    assert_string_equal(text, want);
    assert_int_equal(kp_check_folded(text, strlen(text), why, sizeof why), 0);
    char perf[4400];
    snprintf(perf, sizeof perf, "%.*s.perf", (int)(strlen(folded) - 7), folded);
    const char *timeline = kp_test_slurp(perf);
    if (kp_check_perf(timeline, strlen(timeline), why, sizeof why) != 0)
        fail_msg("%s: %s", perf, why);
}

/* The request in <0.10.0> for 1000 us: handle (100..900) calls the db's
 * server, whose query (200..700) and accounting (700..800) run in <0.20.0>. */
static void two_processes_nested_as_they_ran(void **state)
{
    (void)state;
    kp_tier_interval iv[] = {{2, pid(20), 200 * US, 700 * US},
                             {1, pid(10), 100 * US, 900 * US},
                             {3, pid(20), 700 * US, 800 * US}};
    kp_tier_request r = {.label = pid(10),
                         .entry_fn = 0,
                         .start = 0,
                         .end = 1000 * US,
                         .identity = "GET",
                         .identity_len = 3,
                         .iv = iv,
                         .n_iv = 3};
    write_and_check(&r, "<0.10.0>;kv:request/1 200\n"
                        "<0.10.0>;kv:request/1;kv_handler:handle/1 800\n"
                        "<0.20.0>;kv_accounting:record/2 100\n"
                        "<0.20.0>;kv_db:query/1 500\n");
}

/* A tier call inside another in one process, one that ends after its
 * parent (cut at the parent's end), and a truncated request's marker.
 * The folded file's lines come sorted. */
static void out_of_order_and_truncated(void **state)
{
    (void)state;
    kp_tier_interval iv[] = {{1, pid(10), 100 * US, 500 * US},
                             {2, pid(10), 200 * US, 300 * US},
                             {3, pid(10), 400 * US, 600 * US}};
    kp_tier_request r = {.label = pid(10),
                         .entry_fn = 0,
                         .start = 0,
                         .end = 1000 * US,
                         .truncated = 1,
                         .iv = iv,
                         .n_iv = 3};
    write_and_check(&r, "<0.10.0>;kprof_trace_cut:max_intervals 1\n"
                        "<0.10.0>;kv:request/1 600\n"
                        "<0.10.0>;kv:request/1;kv_handler:handle/1 200\n"
                        "<0.10.0>;kv:request/1;kv_handler:handle/1;kv_accounting:record/2 100\n"
                        "<0.10.0>;kv:request/1;kv_handler:handle/1;kv_db:query/1 100\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(two_processes_nested_as_they_ran, setup, teardown),
        cmocka_unit_test_setup_teardown(out_of_order_and_truncated, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* kp/weights.h: each weight computed from a sample's metrics as its row of
 * the table says, the same from the live metrics (kprof record) and from a
 * perf-script header read back (report, pprof); the table's text complete. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "kp/weights.h"

static void test_compute(void **state)
{
    (void)state;
    int64_t value[KP_METRIC_COUNT] = {0}, delta[KP_METRIC_COUNT] = {0}, w[KP_WEIGHT_COUNT];
    value[KP_METRIC_REDUCTIONS] = 123456;
    delta[KP_METRIC_REDUCTIONS] = 500;
    value[KP_METRIC_MEMORY] = 4096;
    delta[KP_METRIC_MEMORY] = -8;
    value[KP_METRIC_QUEUE] = 3;
    value[KP_METRIC_BIN_VHEAP] = 100;
    delta[KP_METRIC_BIN_VHEAP] = 30;
    value[KP_METRIC_BIN_OLD_VHEAP] = 1000;
    delta[KP_METRIC_BIN_OLD_VHEAP] = -50;
    value[KP_METRIC_TOTAL_HEAP] = 77777; /* weighs nothing */
    kp_weights_compute(value, delta, w);
    assert_int_equal(w[KP_WEIGHT_SAMPLES], 1);
    assert_int_equal(w[KP_WEIGHT_REDUCTIONS], 500);
    assert_int_equal(w[KP_WEIGHT_MEMORY], 4096);
    assert_int_equal(w[KP_WEIGHT_QUEUE], 3);
    assert_int_equal(w[KP_WEIGHT_BIN_VHEAP], 1100);
    assert_int_equal(w[KP_WEIGHT_BIN_GROWTH], -20);
    assert_int_equal(w[KP_WEIGHT_BIN_RELEASE], 20);
}

static kp_perf_metric field(const char *name, int64_t value, int64_t delta)
{
    return (kp_perf_metric){name, strlen(name), value, delta};
}

/* The same sample as a perf-script header gives it: a field of another
 * name is ignored (a newer kprof's metric), a missing one is 0. */
static void test_from_perf(void **state)
{
    (void)state;
    kp_perf_metric m[] = {field("reductions", 123456, 500),       field("memory", 4096, -8),
                          field("reductions_total", 9, 9),        field("message_queue_len", 3, 0),
                          field("bin_old_vheap_size", 1000, -50), field("bin_vheap_size", 100, 30),
                          field("total_heap_size", 77777, 0)};
    int64_t w[KP_WEIGHT_COUNT];
    kp_weights_from_perf(m, sizeof m / sizeof *m, w);
    const int64_t want[KP_WEIGHT_COUNT] = {1, 500, 4096, 3, 1100, -20, 20};
    for (int k = 0; k < KP_WEIGHT_COUNT; k++)
        assert_int_equal(w[k], want[k]);
    kp_weights_from_perf(NULL, 0, w);
    for (int k = 0; k < KP_WEIGHT_COUNT; k++)
        assert_int_equal(w[k], k == KP_WEIGHT_SAMPLES);
}

/* Every weight has its words, and a name of its own (a file name). */
static void test_table(void **state)
{
    (void)state;
    for (int k = 0; k < KP_WEIGHT_COUNT; k++) {
        assert_true(kp_weight_names[k][0] && kp_weight_units[k][0]);
        assert_true(kp_weight_titles[k][0] && kp_weight_helps[k][0]);
        assert_null(strpbrk(kp_weight_names[k], "/ ;"));
        for (int j = 0; j < k; j++)
            assert_string_not_equal(kp_weight_names[j], kp_weight_names[k]);
    }
    assert_string_equal(kp_weight_names[KP_WEIGHT_SAMPLES], "samples");
    assert_string_equal(kp_weight_names[KP_WEIGHT_QUEUE], "message_queue_len");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compute),
        cmocka_unit_test(test_from_perf),
        cmocka_unit_test(test_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

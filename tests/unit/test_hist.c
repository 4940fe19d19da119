#define _POSIX_C_SOURCE 200809L
/* kp_hist: quantiles within the promised relative error of the exact ones,
 * exact count/min/max/mean, merge, reset, extremes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "kp/hist.h"

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The exact value of rank ceil(q * n) in sorted `v`. */
static uint64_t exact_quantile(const uint64_t *v, size_t n, double q)
{
    size_t rank = (size_t)(q * (double)n + 0.999999999);
    if (rank < 1)
        rank = 1;
    return v[rank - 1];
}

static void assert_close(uint64_t got, uint64_t want)
{
    double err = want ? ((double)got - (double)want) / (double)want : (double)got;
    if (err < 0)
        err = -err;
    if (err > 1.0 / 128)
        fail_msg("quantile %llu is %.3f%% away from %llu", (unsigned long long)got, err * 100,
                 (unsigned long long)want);
}

static void check_distribution(uint64_t (*gen)(unsigned *), size_t n)
{
    kp_hist *h = kp_hist_create();
    assert_non_null(h);
    uint64_t *v = malloc(n * sizeof *v);
    unsigned seed = 42;
    long double sum = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = gen(&seed);
        sum += v[i];
        kp_hist_record(h, v[i]);
    }
    qsort(v, n, sizeof *v, compare_u64);
    assert_int_equal(kp_hist_count(h), n);
    assert_int_equal(kp_hist_min(h), v[0]);
    assert_int_equal(kp_hist_max(h), v[n - 1]);
    double mean = (double)(sum / n);
    assert_true(kp_hist_mean(h) > mean * 0.999999 && kp_hist_mean(h) < mean * 1.000001);
    static const double qs[] = {0.001, 0.1, 0.5, 0.9, 0.99, 0.999};
    for (size_t i = 0; i < sizeof qs / sizeof *qs; i++)
        assert_close(kp_hist_quantile(h, qs[i]), exact_quantile(v, n, qs[i]));
    assert_int_equal(kp_hist_quantile(h, 0), v[0]);
    assert_int_equal(kp_hist_quantile(h, 1), v[n - 1]);
    free(v);
    kp_hist_free(h);
}

static uint64_t uniform_us(unsigned *seed)
{
    return (uint64_t)(rand_r(seed) % 100000);
}

static uint64_t long_tail(unsigned *seed)
{
    /* mostly fast calls, a few very slow ones: latency-like */
    uint64_t base = 50 + (uint64_t)(rand_r(seed) % 200);
    int r = rand_r(seed) % 1000;
    return r == 0 ? base * 100000 : r < 10 ? base * 100 : base;
}

static uint64_t huge(unsigned *seed)
{
    return ((uint64_t)rand_r(seed) << 33) ^ (uint64_t)rand_r(seed);
}

static void test_uniform(void **state)
{
    (void)state;
    check_distribution(uniform_us, 200000);
}

static void test_long_tail(void **state)
{
    (void)state;
    check_distribution(long_tail, 200000);
}

static void test_huge_values(void **state)
{
    (void)state;
    check_distribution(huge, 50000);
}

static void test_small_values_are_exact(void **state)
{
    (void)state;
    kp_hist *h = kp_hist_create();
    for (uint64_t v = 0; v < 256; v++)
        kp_hist_record(h, v);
    assert_int_equal(kp_hist_quantile(h, 0.5), 127);
    assert_int_equal(kp_hist_quantile(h, 1.0 / 256), 0);
    assert_int_equal(kp_hist_quantile(h, 0.999), 255);
    kp_hist_free(h);
}

static void test_empty_and_extremes(void **state)
{
    (void)state;
    kp_hist *h = kp_hist_create();
    assert_int_equal(kp_hist_count(h), 0);
    assert_int_equal(kp_hist_quantile(h, 0.5), 0);
    assert_true(kp_hist_mean(h) == 0.0);
    kp_hist_record(h, UINT64_MAX);
    kp_hist_record(h, 0);
    assert_int_equal(kp_hist_min(h), 0);
    assert_int_equal(kp_hist_max(h), UINT64_MAX);
    assert_int_equal(kp_hist_quantile(h, 1), UINT64_MAX);
    assert_int_equal(kp_hist_quantile(h, 0.5), 0);
    kp_hist_reset(h);
    assert_int_equal(kp_hist_count(h), 0);
    assert_int_equal(kp_hist_max(h), 0);
    kp_hist_free(h);
}

static void test_merge_equals_recording_both(void **state)
{
    (void)state;
    kp_hist *a = kp_hist_create(), *b = kp_hist_create(), *all = kp_hist_create();
    unsigned seed = 7;
    for (int i = 0; i < 10000; i++) {
        uint64_t v = long_tail(&seed);
        kp_hist_record(i % 3 ? a : b, v);
        kp_hist_record(all, v);
    }
    kp_hist_merge(a, b);
    assert_int_equal(kp_hist_count(a), kp_hist_count(all));
    assert_int_equal(kp_hist_min(a), kp_hist_min(all));
    assert_int_equal(kp_hist_max(a), kp_hist_max(all));
    for (double q = 0.05; q < 1; q += 0.05)
        assert_int_equal(kp_hist_quantile(a, q), kp_hist_quantile(all, q));
    kp_hist *empty = kp_hist_create();
    kp_hist_merge(a, empty);
    assert_int_equal(kp_hist_count(a), kp_hist_count(all));
    kp_hist_merge(empty, a);
    assert_int_equal(kp_hist_min(empty), kp_hist_min(all));
    kp_hist_free(a);
    kp_hist_free(b);
    kp_hist_free(all);
    kp_hist_free(empty);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_long_tail),
        cmocka_unit_test(test_huge_values),
        cmocka_unit_test(test_small_values_are_exact),
        cmocka_unit_test(test_empty_and_extremes),
        cmocka_unit_test(test_merge_equals_recording_both),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

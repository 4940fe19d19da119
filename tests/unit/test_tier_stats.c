/* kp_tier_stats: recording and percentiles, the "_other" bound, interval vs
 * since start, counter changes in interval lines, the exact JSON line and
 * text table of small data sets, and allocation failures that change
 * nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/tier_stats.h"

static const char *const tiers[] = {"db", "cache"};
enum { DB, CACHE, TOTAL };

static kp_tier_stats *create(size_t n_tiers, size_t max_identities)
{
    kp_tier_stats *s = kp_tier_stats_create(tiers, n_tiers, max_identities);
    assert_non_null(s);
    return s;
}

static size_t identity(kp_tier_stats *s, const char *name)
{
    size_t id = kp_tier_stats_identity(s, name, strlen(name));
    assert_true(id != SIZE_MAX);
    return id;
}

static void record(kp_tier_stats *s, size_t tier, size_t id, uint64_t us, uint32_t calls)
{
    assert_int_equal(kp_tier_stats_record(s, tier, id, us, calls), KP_OK);
}

static void assert_text(const kp_buf *b, const char *want)
{
    if (b->len != strlen(want) || memcmp(b->data, want, b->len) != 0)
        fail_msg("got:\n%.*s\nwant:\n%s", (int)b->len, b->data, want);
}

static void assert_json(kp_tier_stats *s, kp_tier_scope scope, const char *want)
{
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_tier_stats_json(s, scope, "2024-05-01T12:00:00Z", "app@host", 1000, &b),
                     KP_OK);
    assert_text(&b, want);
    kp_buf_free(&b);
}

static void test_record_and_percentiles(void **state)
{
    (void)state;
    kp_tier_stats *s = create(2, 16);
    assert_int_equal(kp_tier_stats_tiers(s), 3);
    size_t put = identity(s, "put"), get = identity(s, "get");
    assert_int_equal(put, 0);
    assert_int_equal(get, 1);
    assert_int_equal(identity(s, "put"), 0);
    for (uint64_t v = 1; v <= 1000; v++)
        record(s, DB, put, v, 1);
    uint64_t count = 0, p50 = 0, mean = 0;
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, DB, put, &count, &p50, &mean), 0);
    assert_int_equal(count, 1000);
    assert_in_range(p50, 496, 504); /* 500, within the histogram's 0.8% */
    assert_int_equal(mean, 501);    /* 500.5 rounded */
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_INTERVAL, DB, put, &count, NULL, NULL), 0);
    assert_int_equal(count, 1000);
    /* cells without data, indexes out of range */
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, CACHE, put, NULL, NULL, NULL), -1);
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, DB, get, NULL, NULL, NULL), -1);
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, 3, put, NULL, NULL, NULL), -1);
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, DB, 2, NULL, NULL, NULL), -1);
    assert_int_equal(kp_tier_stats_record(s, 3, put, 1, 1), KP_ERR_INVAL);
    assert_int_equal(kp_tier_stats_record(s, DB, 2, 1, 1), KP_ERR_INVAL);
    assert_int_equal(kp_tier_stats_record(s, DB, put, 1, 0), KP_ERR_INVAL);
    kp_tier_stats_free(s);
    kp_tier_stats_free(NULL);
}

static void test_create_arguments(void **state)
{
    (void)state;
    assert_null(kp_tier_stats_create(tiers, 2, 1));
    assert_null(kp_tier_stats_create(tiers, 2, 0));
    kp_tier_stats *s = kp_tier_stats_create(NULL, 0, 2); /* only _total */
    assert_non_null(s);
    assert_int_equal(kp_tier_stats_tiers(s), 1);
    record(s, 0, identity(s, "undefined"), 7, 1);
    assert_json(s, KP_TIER_SINCE_START,
                "{\"time\":\"2024-05-01T12:00:00Z\",\"node\":\"app@host\",\"scope\":"
                "\"since_start\",\"interval_ms\":1000,\"requests\":0,\"events\":0,"
                "\"dropped_events\":0,\"unattributed_events\":0,\"cut_requests\":0,"
                "\"pauses\":0,\"paused_ms\":0,\"rearms\":0,\"paused\":false,\"rows\":["
                "{\"tier\":\"_total\",\"identity\":\"undefined\",\"count\":1,\"calls\":1,"
                "\"min_us\":7,\"mean_us\":7,\"p50_us\":7,\"p90_us\":7,\"p99_us\":7,"
                "\"p999_us\":7,\"max_us\":7},"
                "{\"tier\":\"_total\",\"identity\":\"_all\",\"count\":1,\"calls\":1,"
                "\"min_us\":7,\"mean_us\":7,\"p50_us\":7,\"p90_us\":7,\"p99_us\":7,"
                "\"p999_us\":7,\"max_us\":7}]}\n");
    kp_tier_stats_free(s);
}

/* max_identities 3: two identities of their own, then "_other" for the rest. */
static void test_other_bound(void **state)
{
    (void)state;
    kp_tier_stats *s = create(2, 3);
    assert_int_equal(identity(s, "a"), 0);
    assert_int_equal(identity(s, ""), 1); /* any bytes, even none */
    assert_int_equal(kp_tier_stats_identity(s, NULL, 0), 1);
    size_t other = identity(s, "c");
    assert_int_equal(other, 2);
    assert_int_equal(identity(s, "d"), other);
    assert_int_equal(identity(s, "_other"), other);
    assert_int_equal(identity(s, "a"), 0);
    size_t len = 0;
    const char *name = kp_tier_stats_identity_name(s, other, &len);
    assert_non_null(name);
    assert_memory_equal(name, "_other", 6);
    assert_int_equal(len, 6);
    assert_null(kp_tier_stats_identity_name(s, 3, &len)); /* none such */
    record(s, TOTAL, identity(s, "c"), 10, 1);
    record(s, TOTAL, identity(s, "d"), 30, 1);
    uint64_t count = 0;
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, TOTAL, other, &count, NULL, NULL),
                     0);
    assert_int_equal(count, 2);
    kp_tier_stats_free(s);

    /* the smallest bound, and "_other" named before the bound is reached */
    s = create(2, 2);
    assert_int_equal(identity(s, "_other"), 0);
    assert_int_equal(identity(s, "x"), 1);
    assert_int_equal(identity(s, "y"), 0);
    kp_tier_stats_free(s);
    s = create(2, 2);
    assert_int_equal(identity(s, "x"), 0);
    assert_int_equal(identity(s, "y"), 1);
    assert_int_equal(identity(s, "_other"), 1);
    kp_tier_stats_free(s);
}

static void test_interval_reset_keeps_since_start(void **state)
{
    (void)state;
    kp_tier_stats *s = create(2, 8);
    size_t put = identity(s, "put");
    for (int i = 0; i < 10; i++)
        record(s, DB, put, 100, 3);
    kp_tier_stats_end_interval(s);
    uint64_t count = 0;
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_INTERVAL, DB, put, &count, NULL, NULL), -1);
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, DB, put, &count, NULL, NULL), 0);
    assert_int_equal(count, 10);
    record(s, DB, put, 300, 1);
    uint64_t p50 = 0;
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_INTERVAL, DB, put, &count, &p50, NULL), 0);
    assert_int_equal(count, 1);
    assert_int_equal(p50, 300);
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, DB, put, &count, &p50, NULL), 0);
    assert_int_equal(count, 11);
    assert_int_equal(p50, 100);
    /* calls too */
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_tier_stats_json(s, KP_TIER_INTERVAL, "t", "n", 1, &b), KP_OK);
    assert_non_null(strstr(b.data, "\"identity\":\"put\",\"count\":1,\"calls\":1,"));
    kp_buf_clear(&b);
    assert_int_equal(kp_tier_stats_json(s, KP_TIER_SINCE_START, "t", "n", 1, &b), KP_OK);
    assert_non_null(strstr(b.data, "\"identity\":\"put\",\"count\":11,\"calls\":31,"));
    kp_buf_free(&b);
    kp_tier_stats_free(s);
}

/* The exact line of a tiny data set; counters in interval lines are the
 * changes since the interval began, cumulative in since_start lines. */
static void test_json_lines(void **state)
{
    (void)state;
    static const char *const one[] = {"db"};
    kp_tier_stats *s = kp_tier_stats_create(one, 1, 8);
    assert_non_null(s);
    size_t put = identity(s, "put"), get = identity(s, "get\"\n");
    record(s, 0, put, 100, 2);
    record(s, 0, put, 101, 1);
    record(s, 1, put, 150, 1);
    record(s, 1, get, 7, 1);
    kp_tier_counters c = {.requests = 2,
                          .events = 8,
                          .dropped_events = 1,
                          .pauses = 1,
                          .paused_ms = 40,
                          .rearms = 1,
                          .unattributed_events = 3,
                          .cut_requests = 1};
    kp_tier_stats_set_counters(s, &c);
    const char *head = "{\"time\":\"2024-05-01T12:00:00Z\",\"node\":\"app@host\",\"scope\":"
                       "\"interval\",\"interval_ms\":1000,";
    char want[2048];
    snprintf(want, sizeof want,
             "%s\"requests\":2,\"events\":8,\"dropped_events\":1,\"unattributed_events\":3,"
             "\"cut_requests\":1,\"pauses\":1,\"paused_ms\":40,\"rearms\":1,\"paused\":false,"
             "\"rows\":["
             "{\"tier\":\"db\",\"identity\":\"put\",\"count\":2,\"calls\":3,\"min_us\":100,"
             "\"mean_us\":100.5,\"p50_us\":100,\"p90_us\":101,\"p99_us\":101,\"p999_us\":101,"
             "\"max_us\":101},"
             "{\"tier\":\"_total\",\"identity\":\"put\",\"count\":1,\"calls\":1,\"min_us\":150,"
             "\"mean_us\":150,\"p50_us\":150,\"p90_us\":150,\"p99_us\":150,\"p999_us\":150,"
             "\"max_us\":150},"
             "{\"tier\":\"_total\",\"identity\":\"get\\\"\\n\",\"count\":1,\"calls\":1,"
             "\"min_us\":7,\"mean_us\":7,\"p50_us\":7,\"p90_us\":7,\"p99_us\":7,"
             "\"p999_us\":7,\"max_us\":7},"
             "{\"tier\":\"db\",\"identity\":\"_all\",\"count\":2,\"calls\":3,\"min_us\":100,"
             "\"mean_us\":100.5,\"p50_us\":100,\"p90_us\":101,\"p99_us\":101,\"p999_us\":101,"
             "\"max_us\":101},"
             "{\"tier\":\"_total\",\"identity\":\"_all\",\"count\":2,\"calls\":2,\"min_us\":7,"
             "\"mean_us\":78.5,\"p50_us\":7,\"p90_us\":150,\"p99_us\":150,\"p999_us\":150,"
             "\"max_us\":150}]}\n",
             head);
    assert_json(s, KP_TIER_INTERVAL, want);
    /* writing twice gives the same line: writing changes nothing */
    assert_json(s, KP_TIER_INTERVAL, want);

    kp_tier_stats_end_interval(s);
    c.requests = 5;
    c.events = 20;
    c.pauses = 2;
    c.paused_ms = 100;
    c.paused = 1;
    kp_tier_stats_set_counters(s, &c);
    snprintf(want, sizeof want,
             "%s\"requests\":3,\"events\":12,\"dropped_events\":0,\"unattributed_events\":0,"
             "\"cut_requests\":0,\"pauses\":1,\"paused_ms\":60,\"rearms\":0,\"paused\":true,"
             "\"rows\":[]}\n",
             head);
    assert_json(s, KP_TIER_INTERVAL, want);
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_tier_stats_json(s, KP_TIER_SINCE_START, "t", "n", 5, &b), KP_OK);
    const char *cumulative = "\"scope\":\"since_start\",\"interval_ms\":5,\"requests\":5,"
                             "\"events\":20,\"dropped_events\":1,\"unattributed_events\":3,"
                             "\"cut_requests\":1,\"pauses\":2,\"paused_ms\":100,\"rearms\":1,"
                             "\"paused\":true,\"rows\":[{\"tier\":\"db\",\"identity\":\"put\"";
    assert_non_null(strstr(b.data, cumulative));
    assert_true(b.len > 0 && b.data[b.len - 1] == '\n');
    assert_null(memchr(b.data, '\n', b.len - 1)); /* one line */
    kp_buf_free(&b);

    /* a counter that went down (the caller reset it) counts from 0 */
    kp_tier_stats_end_interval(s);
    c.events = 4;
    kp_tier_stats_set_counters(s, &c);
    b = (kp_buf)KP_BUF_INIT;
    assert_int_equal(kp_tier_stats_json(s, KP_TIER_INTERVAL, "t", "n", 5, &b), KP_OK);
    assert_non_null(strstr(b.data, "\"requests\":0,\"events\":4,"));
    assert_int_equal(kp_tier_stats_json(s, 2, "t", "n", 5, &b), KP_ERR_INVAL);
    kp_buf_free(&b);
    kp_tier_stats_free(s);
}

static kp_tier_stats *table_data(void)
{
    kp_tier_stats *s = create(2, 8);
    size_t put = identity(s, "put"), get = identity(s, "get");
    identity(s, "idle"); /* no data: no row */
    const uint64_t put_db[] = {100, 120, 140}, put_total[] = {170, 180, 250};
    const uint64_t get_cache[] = {8, 8, 10}, get_total[] = {20, 22, 30};
    for (int i = 0; i < 3; i++) {
        record(s, DB, put, put_db[i], 2);
        record(s, TOTAL, put, put_total[i], 1);
        record(s, CACHE, get, get_cache[i], 1);
        record(s, TOTAL, get, get_total[i], 1);
    }
    record(s, CACHE, put, 15, 1);
    return s;
}

static void assert_table(kp_tier_stats *s, kp_tier_scope scope, kp_tier_stat stat, const char *want)
{
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_tier_stats_table(s, scope, stat, &b), KP_OK);
    assert_text(&b, want);
    kp_buf_free(&b);
}

static void test_table_golden(void **state)
{
    (void)state;
    kp_tier_stats *s = table_data();
    assert_table(s, KP_TIER_SINCE_START, KP_TIER_P50,
                 "p50 (us) per tier, since start\n"
                 "identity  requests   db  cache  _total\n"
                 "put              3  120     15     180\n"
                 "get              3    -      8      22\n"
                 "_all             6  120      8      30\n");
    assert_table(s, KP_TIER_INTERVAL, KP_TIER_MEAN,
                 "mean (us) per tier, interval\n"
                 "identity  requests   db  cache  _total\n"
                 "put              3  120     15     200\n"
                 "get              3    -      9      24\n"
                 "_all             6  120     10     112\n");
    assert_table(s, KP_TIER_SINCE_START, KP_TIER_MAX,
                 "max (us) per tier, since start\n"
                 "identity  requests   db  cache  _total\n"
                 "put              3  140     15     250\n"
                 "get              3    -     10      30\n"
                 "_all             6  140     15     250\n");
    assert_table(s, KP_TIER_SINCE_START, KP_TIER_COUNT_STAT,
                 "count per tier, since start\n"
                 "identity  requests  db  cache  _total\n"
                 "put              3   3      1       3\n"
                 "get              3   -      3       3\n"
                 "_all             6   3      4       6\n");

    /* health line; the interval shows changes, since start the totals */
    kp_tier_counters c = {.dropped_events = 5, .pauses = 1, .paused_ms = 200, .cut_requests = 2};
    kp_tier_stats_set_counters(s, &c);
    kp_tier_stats_end_interval(s);
    c.dropped_events = 7;
    kp_tier_stats_set_counters(s, &c);
    record(s, TOTAL, identity(s, "a much longer identity"), 123456, 1);
    assert_table(s, KP_TIER_INTERVAL, KP_TIER_P99,
                 "p99 (us) per tier, interval\n"
                 "identity                requests  db  cache  _total\n"
                 "a much longer identity         1   -      -  123456\n"
                 "_all                           1   -      -  123456\n"
                 "dropped 2 events, paused 0 times (0 ms), cut 0 requests\n");
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_tier_stats_table(s, KP_TIER_SINCE_START, KP_TIER_P50, &b), KP_OK);
    const char *tail = "dropped 7 events, paused 1 times (200 ms), cut 2 requests\n";
    assert_true(b.len > strlen(tail));
    assert_memory_equal(b.data + b.len - strlen(tail), tail, strlen(tail));
    assert_int_equal(kp_tier_stats_table(s, 2, KP_TIER_P50, &b), KP_ERR_INVAL);
    assert_int_equal(kp_tier_stats_table(s, KP_TIER_INTERVAL, 6, &b), KP_ERR_INVAL);
    kp_buf_free(&b);
    kp_tier_stats_free(s);
}

/* Names are aligned by characters, not bytes; control characters show as '?'. */
static void test_table_names(void **state)
{
    (void)state;
    static const char *const odd[] = {"caf\xc3\xa9"};
    kp_tier_stats *s = kp_tier_stats_create(odd, 1, 4);
    assert_non_null(s);
    record(s, 0, identity(s, "\xc3\xa9t\xc3\xa9\t"), 5, 1);
    assert_table(s, KP_TIER_SINCE_START, KP_TIER_P50,
                 "p50 (us) per tier, since start\n"
                 "identity  requests  caf\xc3\xa9  _total\n"
                 "\xc3\xa9t\xc3\xa9?             0     5       -\n"
                 "_all             0     5       -\n");
    /* nothing recorded at all */
    kp_tier_stats_end_interval(s);
    assert_table(s, KP_TIER_INTERVAL, KP_TIER_P50,
                 "p50 (us) per tier, interval\n"
                 "identity  requests  caf\xc3\xa9  _total\n"
                 "_all             0     -       -\n");
    kp_tier_stats_free(s);
}

static void test_out_of_memory(void **state)
{
    (void)state;
    long n;
    kp_tier_stats *s;
    for (n = 0;; n++) {
        kp_fault_alloc_after(n);
        s = kp_tier_stats_create(tiers, 2, 3);
        kp_fault_alloc_reset();
        if (s)
            break;
    }
    assert_true(n >= 4);

    /* a new identity, then "_other", each added whole or not at all */
    size_t id = SIZE_MAX;
    for (n = 0; id == SIZE_MAX; n++) {
        kp_fault_alloc_after(n);
        id = kp_tier_stats_identity(s, "a", 1);
        kp_fault_alloc_reset();
    }
    assert_true(n >= 2);
    assert_int_equal(id, 0);
    assert_int_equal(identity(s, "b"), 1);
    id = SIZE_MAX;
    for (n = 0; id == SIZE_MAX; n++) {
        kp_fault_alloc_after(n);
        id = kp_tier_stats_identity(s, "c", 1);
        kp_fault_alloc_reset();
    }
    assert_int_equal(id, 2);
    assert_int_equal(identity(s, "d"), 2);

    /* the first record of a cell creates its histograms */
    kp_status st;
    for (n = 0;; n++) {
        kp_fault_alloc_after(n);
        st = kp_tier_stats_record(s, DB, 0, 42, 1);
        kp_fault_alloc_reset();
        if (st == KP_OK)
            break;
        assert_int_equal(st, KP_ERR_NOMEM);
        assert_int_equal(kp_tier_stats_cell(s, KP_TIER_SINCE_START, DB, 0, NULL, NULL, NULL), -1);
        assert_int_equal(kp_tier_stats_cell(s, KP_TIER_INTERVAL, DB, 0, NULL, NULL, NULL), -1);
    }
    assert_true(n >= 1);
    uint64_t count = 0;
    assert_int_equal(kp_tier_stats_cell(s, KP_TIER_INTERVAL, DB, 0, &count, NULL, NULL), 0);
    assert_int_equal(count, 1);

    /* reports: the buffer is left as it was */
    kp_buf b = KP_BUF_INIT;
    assert_int_equal(kp_buf_append_str(&b, "before\n"), KP_OK);
    for (int table = 0; table < 2; table++) {
        for (n = 0;; n++) {
            kp_fault_alloc_after(n);
            st = table ? kp_tier_stats_table(s, KP_TIER_SINCE_START, KP_TIER_P50, &b)
                       : kp_tier_stats_json(s, KP_TIER_SINCE_START, "t", "n", 1, &b);
            kp_fault_alloc_reset();
            if (st == KP_OK)
                break;
            assert_int_equal(st, KP_ERR_NOMEM);
            assert_text(&b, "before\n");
        }
        assert_true(n >= 1);
        assert_true(b.len > 7);
        b.len = 7; /* back to "before\n" for the next report */
    }
    kp_buf_free(&b);
    kp_tier_stats_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_and_percentiles),
        cmocka_unit_test(test_create_arguments),
        cmocka_unit_test(test_other_bound),
        cmocka_unit_test(test_interval_reset_keeps_since_start),
        cmocka_unit_test(test_json_lines),
        cmocka_unit_test(test_table_golden),
        cmocka_unit_test(test_table_names),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

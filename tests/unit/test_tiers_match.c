/* The tier matcher (sampler/tiers/match.c): calls paired with returns per
 * process, attribution to requests by token label, union of a tier's call
 * intervals per request, grace before finalizing, bounds and counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tiers/match.h"
#include "common/u64_map.h"

enum { FN_A, FN_B, FN_ENTRY, FN_BEGIN, FN_END, N_FNS };
#define MS 1000000LL
#define P(n) ((kp_tier_pid)(n) << 32)

typedef struct {
    kp_tier_stats *stats;
    kp_tier_match *m;
    char trees[4096];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    const char *names[] = {"a", "b"};
    f->stats = kp_tier_stats_create(names, 2, 16);
    kp_tier_fn fns[N_FNS] = {{KP_TIER_FN_TIER, 0, "a"},
                             {KP_TIER_FN_TIER, 1, "b"},
                             {KP_TIER_FN_ENTRY, 0, "entry"},
                             {KP_TIER_FN_BEGIN, 0, "begin"},
                             {KP_TIER_FN_END, 0, "end"}};
    kp_tier_match_limits lim = kp_tier_match_default_limits();
    lim.max_requests = 4;
    f->m = kp_tier_match_create(f->stats, fns, N_FNS, &lim);
    assert_non_null(f->m);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kp_tier_match_free(f->m);
    kp_tier_stats_free(f->stats);
    free(f);
    return 0;
}

static void ev(fixture *f, kp_tier_event_kind kind, kp_tier_pid pid, size_t fn, int64_t ts,
               kp_tier_pid label, const char *identity)
{
    kp_tier_event e = {.kind = kind,
                       .pid = pid,
                       .fn = fn,
                       .ts_ns = ts,
                       .has_label = label != 0,
                       .label = label,
                       .identity = identity,
                       .identity_len = identity ? strlen(identity) : 0};
    assert_int_equal(kp_tier_match_event(f->m, &e), KP_OK);
}

#define CALL(pid, fn, ts, label) ev(f, KP_TEV_CALL, pid, fn, ts, label, NULL)
#define RET(pid, fn, ts) ev(f, KP_TEV_RETURN, pid, fn, ts, 0, NULL)
#define ENTER(pid, ts, id) ev(f, KP_TEV_CALL, pid, FN_ENTRY, ts, pid, id)

/* count and mean (us) of a cell since start; count 0 when empty */
static uint64_t cell(fixture *f, size_t tier, const char *identity, uint64_t *mean)
{
    size_t id = kp_tier_stats_identity(f->stats, identity, strlen(identity));
    uint64_t count = 0, p50 = 0, m = 0;
    if (kp_tier_stats_cell(f->stats, KP_TIER_SINCE_START, tier, id, &count, &p50, &m) != 0)
        return 0;
    if (mean)
        *mean = m;
    return count;
}

static void one_request_each_tier_once(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "put");
    CALL(P(1), FN_A, 1 * MS, P(1));
    RET(P(1), FN_A, 4 * MS);
    CALL(P(2), FN_B, 5 * MS, P(1)); /* another process, same token */
    RET(P(2), FN_B, 7 * MS);
    RET(P(1), FN_ENTRY, 10 * MS);
    assert_int_equal(kp_tier_match_flush(f->m, 1), KP_OK);
    uint64_t mean;
    assert_int_equal(cell(f, 0, "put", &mean), 1);
    assert_int_equal(mean, 3000);
    assert_int_equal(cell(f, 1, "put", &mean), 1);
    assert_int_equal(mean, 2000);
    assert_int_equal(cell(f, 2, "put", &mean), 1); /* _total */
    assert_int_equal(mean, 10000);
    kp_tier_match_counters c = kp_tier_match_counts(f->m);
    assert_int_equal(c.requests, 1);
    assert_int_equal(c.unattributed, 0);
}

static void repeated_and_recursive_calls_count_once_in_time(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "get");
    for (int k = 0; k < 3; k++) { /* three separate 2 ms calls */
        CALL(P(1), FN_A, (1 + 3 * k) * MS, P(1));
        RET(P(1), FN_A, (3 + 3 * k) * MS);
    }
    CALL(P(1), FN_B, 20 * MS, P(1)); /* b recursing into itself: 20..30 */
    CALL(P(1), FN_B, 21 * MS, P(1));
    CALL(P(1), FN_B, 22 * MS, P(1));
    RET(P(1), FN_B, 23 * MS);
    RET(P(1), FN_B, 24 * MS);
    RET(P(1), FN_B, 30 * MS);
    RET(P(1), FN_ENTRY, 40 * MS);
    kp_tier_match_flush(f->m, 1);
    uint64_t mean;
    assert_int_equal(cell(f, 0, "get", &mean), 1);
    assert_int_equal(mean, 6000);
    assert_int_equal(cell(f, 1, "get", &mean), 1);
    assert_int_equal(mean, 10000);
}

static void parallel_calls_in_two_processes_overlap(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "put");
    CALL(P(2), FN_A, 1 * MS, P(1)); /* 1..5 and 3..8: 7 ms busy */
    CALL(P(3), FN_A, 3 * MS, P(1));
    RET(P(2), FN_A, 5 * MS);
    RET(P(3), FN_A, 8 * MS);
    RET(P(1), FN_ENTRY, 9 * MS);
    kp_tier_match_flush(f->m, 1);
    uint64_t mean;
    assert_int_equal(cell(f, 0, "put", &mean), 1);
    assert_int_equal(mean, 7000);
}

static void calls_outside_requests_are_unattributed(void **state)
{
    fixture *f = *state;
    CALL(P(5), FN_A, 1 * MS, P(9)); /* label of no open request */
    RET(P(5), FN_A, 2 * MS);
    RET(P(6), FN_B, 3 * MS); /* a return without its call */
    kp_tier_match_flush(f->m, 1);
    kp_tier_match_counters c = kp_tier_match_counts(f->m);
    assert_int_equal(c.unattributed, 2);
    assert_int_equal(c.requests, 0);
}

static void grace_waits_for_late_events(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "put");
    CALL(P(2), FN_A, 1 * MS, P(1));
    RET(P(1), FN_ENTRY, 5 * MS);
    kp_tier_match_flush(f->m, 0);
    assert_int_equal(cell(f, 2, "put", NULL), 0); /* not yet: within the grace */
    RET(P(2), FN_A, 6 * MS);                      /* arrives after the entry's return */
    CALL(P(7), FN_B, 100 * MS, 0);                /* time moves on */
    kp_tier_match_flush(f->m, 0);
    uint64_t mean;
    assert_int_equal(cell(f, 2, "put", &mean), 1);
    assert_int_equal(cell(f, 0, "put", &mean), 1);
    assert_int_equal(mean, 5000);
}

static void returns_after_finalizing_are_late(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "put");
    CALL(P(2), FN_A, 1 * MS, P(1));
    RET(P(1), FN_ENTRY, 5 * MS);
    kp_tier_match_flush(f->m, 1);
    RET(P(2), FN_A, 500 * MS); /* fire-and-forget work that outlived the request */
    assert_int_equal(kp_tier_match_counts(f->m).late, 1);
    assert_int_equal(cell(f, 0, "put", NULL), 0);
}

static void marks_begin_and_end(void **state)
{
    fixture *f = *state;
    ev(f, KP_TEV_CALL, P(1), FN_BEGIN, 0, P(1), "read");
    CALL(P(1), FN_A, 1 * MS, P(1));
    RET(P(1), FN_A, 2 * MS);
    ev(f, KP_TEV_CALL, P(1), FN_END, 3 * MS, P(1), NULL);
    kp_tier_match_flush(f->m, 1);
    uint64_t mean;
    assert_int_equal(cell(f, 2, "read", &mean), 1);
    assert_int_equal(mean, 3000);
}

static void nested_entry_stays_one_request(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "put");
    ENTER(P(1), 1 * MS, "put"); /* the entry calling itself */
    RET(P(1), FN_ENTRY, 2 * MS);
    RET(P(1), FN_ENTRY, 3 * MS);
    kp_tier_match_flush(f->m, 1);
    uint64_t mean;
    assert_int_equal(cell(f, 2, "put", &mean), 1);
    assert_int_equal(mean, 3000);
    assert_int_equal(kp_tier_match_counts(f->m).requests, 1);
}

static void exception_closes_and_sequential_requests_reuse_label(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "put");
    ev(f, KP_TEV_EXCEPTION, P(1), FN_ENTRY, 1 * MS, 0, NULL);
    ENTER(P(1), 2 * MS, "put"); /* the same process serves the next request */
    RET(P(1), FN_ENTRY, 4 * MS);
    kp_tier_match_flush(f->m, 1);
    assert_int_equal(cell(f, 2, "put", NULL), 2);
}

static void cut_drops_open_requests(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "put");
    CALL(P(1), FN_A, 1 * MS, P(1));
    kp_tier_match_cut(f->m);
    RET(P(1), FN_A, 2 * MS);
    RET(P(1), FN_ENTRY, 3 * MS);
    kp_tier_match_flush(f->m, 1);
    kp_tier_match_counters c = kp_tier_match_counts(f->m);
    assert_int_equal(c.cut, 1);
    assert_int_equal(cell(f, 2, "put", NULL), 0);
}

static void bounded_requests(void **state)
{
    fixture *f = *state;
    for (int k = 1; k <= 6; k++) /* the fixture allows 4 at a time */
        ENTER(P(k), k, "put");
    kp_tier_match_counters c = kp_tier_match_counts(f->m);
    assert_int_equal(c.requests, 0); /* none finished yet */
    assert_int_equal(c.unattributed, 2);
    for (int k = 1; k <= 6; k++)
        RET(P(k), FN_ENTRY, 10 * MS + k);
    kp_tier_match_flush(f->m, 1);
    assert_int_equal(cell(f, 2, "put", NULL), 4);
    assert_int_equal(kp_tier_match_counts(f->m).requests, 4); /* as the _total row */
    ENTER(P(1), 20 * MS, "put");                              /* slots are free again */
    RET(P(1), FN_ENTRY, 21 * MS);
    kp_tier_match_flush(f->m, 1);
    assert_int_equal(kp_tier_match_counts(f->m).requests, 5);
}

/* The last request before the node goes idle: no newer event comes to pass
 * its grace, the quiet stream does (by the node's clock), not earlier. */
static void quiet_stream_finalizes_the_last_request(void **state)
{
    fixture *f = *state;
    ENTER(P(1), 0, "put");
    RET(P(1), FN_ENTRY, 1 * MS);
    kp_tier_match_flush(f->m, 0);
    assert_int_equal(cell(f, 2, "put", NULL), 0); /* within its grace */
    kp_tier_match_quiet(f->m, 15 * MS);
    kp_tier_match_flush(f->m, 0);
    assert_int_equal(cell(f, 2, "put", NULL), 0); /* still within it */
    kp_tier_match_quiet(f->m, 22 * MS);
    kp_tier_match_flush(f->m, 0);
    assert_int_equal(cell(f, 2, "put", NULL), 1);
    assert_int_equal(kp_tier_match_counts(f->m).requests, 1);
    kp_tier_match_quiet(f->m, 5 * MS); /* time never goes back */
    ENTER(P(2), 23 * MS, "get");
    RET(P(2), FN_ENTRY, 24 * MS);
    kp_tier_match_flush(f->m, 0);
    assert_int_equal(cell(f, 2, "get", NULL), 0);
}

static void on_tree(void *ctx, const char *text, size_t len)
{
    fixture *f = ctx;
    size_t have = strlen(f->trees);
    if (have + len < sizeof f->trees) {
        memcpy(f->trees + have, text, len);
        f->trees[have + len] = '\0';
    }
}

static void call_tree_indents_by_time(void **state)
{
    fixture *f = *state;
    kp_tier_match_trees(f->m, 1, 0, on_tree, f);
    ENTER(P(1), 0, "put");
    CALL(P(1), FN_A, 1 * MS, P(1));
    CALL(P(2), FN_B, 2 * MS, P(1));
    RET(P(2), FN_B, 3 * MS);
    RET(P(1), FN_A, 4 * MS);
    RET(P(1), FN_ENTRY, 5 * MS);
    kp_tier_match_flush(f->m, 1);
    assert_string_equal(f->trees, "request <0.1.0> 5000 us\n"
                                  "  a <0.1.0> 3000 us (at +1000 us)\n"
                                  "    b <0.2.0> 1000 us (at +2000 us)\n");
}

static void u64_map_matches_a_reference(void **state)
{
    (void)state;
    enum { N = 4096 };
    static uint32_t ref[N];
    static unsigned char present[N];
    memset(present, 0, sizeof present);
    kp_u64_map m = {0};
    srand(7);
    for (int k = 0; k < 200000; k++) {
        uint64_t key = (uint64_t)(rand() % N);
        uint32_t v;
        if (rand() % 3 == 0) {
            kp_u64_map_del(&m, key << 32);
            present[key] = 0;
        } else {
            v = (uint32_t)rand();
            assert_int_equal(kp_u64_map_put(&m, key << 32, v), 0);
            ref[key] = v;
            present[key] = 1;
        }
        if (k % 1000 == 0) {
            size_t count = 0;
            for (uint64_t q = 0; q < N; q++) {
                int got = kp_u64_map_get(&m, q << 32, &v);
                assert_int_equal(got, present[q]);
                if (got)
                    assert_int_equal(v, ref[q]);
                count += present[q];
            }
            assert_int_equal(m.count, count);
        }
    }
    kp_u64_map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(one_request_each_tier_once, setup, teardown),
        cmocka_unit_test_setup_teardown(repeated_and_recursive_calls_count_once_in_time, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(parallel_calls_in_two_processes_overlap, setup, teardown),
        cmocka_unit_test_setup_teardown(calls_outside_requests_are_unattributed, setup, teardown),
        cmocka_unit_test_setup_teardown(grace_waits_for_late_events, setup, teardown),
        cmocka_unit_test_setup_teardown(returns_after_finalizing_are_late, setup, teardown),
        cmocka_unit_test_setup_teardown(marks_begin_and_end, setup, teardown),
        cmocka_unit_test_setup_teardown(nested_entry_stays_one_request, setup, teardown),
        cmocka_unit_test_setup_teardown(exception_closes_and_sequential_requests_reuse_label, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(cut_drops_open_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(bounded_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(quiet_stream_finalizes_the_last_request, setup, teardown),
        cmocka_unit_test_setup_teardown(call_tree_indents_by_time, setup, teardown),
        cmocka_unit_test(u64_map_matches_a_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

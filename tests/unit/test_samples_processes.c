/* What kprof record knows of a node's processes (sampler/samples/processes.c): decoded
 * agent samples become full stacks (status ; pid ; label ; code, root first)
 * with per-process deltas, across thousands of processes, an unchanged
 * sample repeats the previous one with zero deltas, and a running sample whose
 * leaf is a receive point is marked as read at the next receive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "samples/processes.h"

#define MAX_SEEN 20000

typedef struct {
    kp_frames *frames;
    kp_stacks *stacks;
    kp_processes *profile;
    const kp_wire_handler *h;
    kp_proc_sample seen[MAX_SEEN];
    size_t n_seen;
} fixture;

static int on_out(void *ctx, const kp_proc_sample *s)
{
    fixture *f = ctx;
    assert_true(f->n_seen < MAX_SEEN);
    f->seen[f->n_seen++] = *s;
    return 0;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->frames = kp_frames_create(0);
    f->stacks = kp_stacks_create();
    f->profile = kp_processes_create(f->frames, f->stacks, 8, NULL, on_out, f);
    assert_non_null(f->profile);
    f->h = kp_processes_wire_handler(f->profile);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kp_processes_free(f->profile);
    kp_stacks_free(f->stacks);
    kp_frames_free(f->frames);
    free(f);
    return 0;
}

/* A full sample of <0.num.0>, reductions `reds`, stack of agent MFA ids, the
 * leaf at line `leaf_line`. */
static void sample_at(fixture *f, uint32_t num, const char *status, int64_t reds,
                      const uint32_t *mfa_ids, size_t depth, uint32_t leaf_line)
{
    uint32_t frames[2 * 16];
    kp_wire_sample s;
    memset(&s, 0, sizeof s);
    s.num = num;
    snprintf(s.status, sizeof s.status, "%s", status);
    s.metrics[KP_METRIC_REDUCTIONS] = reds;
    s.metrics[KP_METRIC_TOTAL_HEAP] = 100; /* words */
    for (size_t d = 0; d < depth; d++) {
        frames[2 * d] = mfa_ids[d];
        frames[2 * d + 1] = 0;
    }
    if (depth)
        frames[1] = leaf_line;
    s.frames = frames;
    s.depth = depth;
    assert_int_equal(f->h->on_sample(f->h->ctx, &s), 0);
}

static void sample(fixture *f, uint32_t num, const char *status, int64_t reds,
                   const uint32_t *mfa_ids, size_t depth)
{
    sample_at(f, num, status, reds, mfa_ids, depth, 0);
}

static void unchanged(fixture *f, uint32_t num)
{
    kp_wire_sample s;
    memset(&s, 0, sizeof s);
    s.num = num;
    s.unchanged = 1;
    assert_int_equal(f->h->on_sample(f->h->ctx, &s), 0);
}

/* The symbol of frame k (root first) of a stack; symbols are not
 * NUL-terminated. */
static const char *frame_text(fixture *f, uint32_t stack, size_t k)
{
    static char text[128];
    size_t n, len;
    const uint32_t *ids = kp_stacks_get(f->stacks, stack, &n);
    assert_true(k < n);
    const char *sym = kp_frames_symbol(f->frames, ids[k], &len);
    snprintf(text, sizeof text, "%.*s", (int)len, sym);
    return text;
}

static void test_stack_root_first_with_pseudo_frames(void **state)
{
    fixture *f = *state;
    assert_int_equal(f->h->on_mfa(f->h->ctx, 0, "m", "leaf", 1), 0);
    assert_int_equal(f->h->on_mfa(f->h->ctx, 1, "m", "root", 0), 0);
    assert_int_equal(f->h->on_label(f->h->ctx, 7, 0, 1, "my_server", 9), 0);
    uint32_t leaf_first[] = {0, 1};
    sample(f, 7, "running", 50, leaf_first, 2);
    assert_int_equal(f->n_seen, 1);
    size_t n;
    kp_stacks_get(f->stacks, f->seen[0].stack, &n);
    assert_int_equal(n, 5);
    assert_string_equal(frame_text(f, f->seen[0].stack, 0), "running");
    assert_string_equal(frame_text(f, f->seen[0].stack, 1), "<0.7.0>");
    assert_string_equal(frame_text(f, f->seen[0].stack, 2), "my_server");
    assert_string_equal(frame_text(f, f->seen[0].stack, 3), "m:root/0");
    assert_string_equal(frame_text(f, f->seen[0].stack, 4), "m:leaf/1");
    /* words become bytes */
    assert_int_equal(f->seen[0].value[KP_METRIC_TOTAL_HEAP], 800);
}

/* Thousands of processes whose pids differ only in their number (the
 * serial is 0 for nearly every process): each keeps its own previous
 * values, and the table holds them all. */
static void test_many_processes_keep_their_own_deltas(void **state)
{
    fixture *f = *state;
    enum { N = 5000 };
    assert_int_equal(f->h->on_mfa(f->h->ctx, 0, "m", "loop", 1), 0);
    uint32_t stack[] = {0};
    for (uint32_t p = 0; p < N; p++)
        sample(f, 100 + p, "waiting", 1000 * p, stack, 1);
    for (uint32_t p = 0; p < N; p++)
        sample(f, 100 + p, "waiting", 1000 * p + p, stack, 1);
    assert_int_equal(kp_processes_count(f->profile), N);
    assert_int_equal(f->n_seen, 2 * N);
    for (uint32_t p = 0; p < N; p++) {
        assert_int_equal(f->seen[p].num, 100 + p);
        assert_int_equal(f->seen[p].delta[KP_METRIC_REDUCTIONS], 0); /* first: never a jump */
        assert_int_equal(f->seen[N + p].num, 100 + p);
        assert_int_equal(f->seen[N + p].value[KP_METRIC_REDUCTIONS], 1000 * p + p);
        assert_int_equal(f->seen[N + p].delta[KP_METRIC_REDUCTIONS], p);
    }
}

static void test_unchanged_repeats_previous_with_zero_deltas(void **state)
{
    fixture *f = *state;
    assert_int_equal(f->h->on_mfa(f->h->ctx, 0, "m", "wait", 0), 0);
    uint32_t stack[] = {0};
    sample(f, 9, "waiting", 10, stack, 1);
    sample(f, 9, "waiting", 25, stack, 1);
    unchanged(f, 9);
    unchanged(f, 12345); /* never seen: nothing to repeat, skipped */
    assert_int_equal(f->n_seen, 3);
    const kp_proc_sample *again = &f->seen[2];
    assert_int_equal(again->num, 9);
    assert_int_equal(again->stack, f->seen[1].stack);
    assert_string_equal(again->status, "waiting");
    assert_int_equal(again->value[KP_METRIC_REDUCTIONS], 25);
    for (int m = 0; m < KP_METRIC_COUNT; m++)
        assert_int_equal(again->delta[m], 0);
}

/* The receive bias: a running process answers at its next receive. Its
 * sample is marked when its leaf (function and line) is where some process
 * was seen waiting; other lines of that function and other functions are
 * not, nor running samples before the receive point was learnt. */
static void test_running_at_a_receive_point_is_marked(void **state)
{
    fixture *f = *state;
    assert_int_equal(f->h->on_mfa(f->h->ctx, 0, "gen_server", "loop", 7), 0);
    assert_int_equal(f->h->on_mfa(f->h->ctx, 1, "m", "init", 1), 0);
    assert_int_equal(f->h->on_mfa(f->h->ctx, 2, "m", "work", 1), 0);
    uint32_t in_loop[] = {0, 1}, in_work[] = {2, 0, 1};
    sample_at(f, 1, "running", 10, in_loop, 2, 437);  /* not learnt yet */
    sample_at(f, 2, "waiting", 10, in_loop, 2, 437);  /* learnt */
    sample_at(f, 1, "running", 20, in_loop, 2, 437);  /* marked */
    unchanged(f, 1);                                  /* marked again */
    sample_at(f, 1, "running", 30, in_loop, 2, 440);  /* another line */
    sample_at(f, 3, "running", 10, in_work, 3, 437);  /* another function */
    sample_at(f, 1, "runnable", 40, in_loop, 2, 437); /* not running */
    assert_int_equal(f->n_seen, 7);
    size_t n0, n2;
    kp_stacks_get(f->stacks, f->seen[0].stack, &n0);
    kp_stacks_get(f->stacks, f->seen[2].stack, &n2);
    assert_int_equal(n2, n0 + 1);
    assert_string_equal(frame_text(f, f->seen[2].stack, 0), "running");
    assert_string_equal(frame_text(f, f->seen[2].stack, 1), "stack_read_at_next_receive");
    assert_string_equal(frame_text(f, f->seen[2].stack, 2), "<0.1.0>");
    assert_string_equal(frame_text(f, f->seen[2].stack, 4), "gen_server:loop/7");
    assert_int_equal(f->seen[3].stack, f->seen[2].stack);
    assert_int_equal(f->seen[4].stack, f->seen[0].stack);
    assert_string_equal(frame_text(f, f->seen[5].stack, 1), "<0.3.0>");
    assert_string_equal(frame_text(f, f->seen[6].stack, 1), "<0.1.0>");
    uint64_t running, at_receive;
    kp_processes_receive_counts(f->profile, &running, &at_receive);
    assert_int_equal(running, 5);
    assert_int_equal(at_receive, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stack_root_first_with_pseudo_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_processes_keep_their_own_deltas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unchanged_repeats_previous_with_zero_deltas, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_running_at_a_receive_point_is_marked, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

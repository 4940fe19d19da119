/* The report's data (formats/src/report.c, report_set.c) and page
 * (report_html.c): one tree of call paths without the processes, which go
 * to a table of their own, samples placed in 20 ms slices, merged per
 * (slice, path) and per (slice, process, path), weights of 0 or less adding
 * nothing, each set's slices grown past the budget with every sample kept,
 * samples before the first one's second, the page self-contained, and out
 * of memory handled. The page's rendering is tested
 * in Chromium (tests/integration/report). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/report.h"
#include "report_internal.h"

#define MS 1000000ull
#define SEC 1000000000ull

static const int64_t one[KP_WEIGHT_COUNT] = {1, 0, 0, 0, 0, 0, 0};

static int reset_faults(void **state)
{
    (void)state;
    kp_fault_alloc_reset();
    return 0;
}

static kp_status add(kp_report *r, kp_report_source *s, uint64_t t, const char *stack,
                     const int64_t *w)
{
    return kp_report_add(r, s, t, stack, strlen(stack), w);
}

/* The entry of (slice, a, b) in `set`, or -1. */
static long entry(const kp_report_set *set, uint32_t slice, uint32_t a, uint32_t b)
{
    for (uint64_t i = 0; i < set->n; i++)
        if (set->slice[i] == slice && set->a[i] == a && set->b[i] == b)
            return (long)i;
    return -1;
}

/* The text of frame `id`. */
static const char *frame(const kp_report *r, uint32_t id, char *text, size_t cap)
{
    size_t len;
    const char *f = kp_strtab_get(r->frames, id, &len);
    snprintf(text, cap, "%.*s", (int)len, f);
    return text;
}

static void test_tree_and_slices(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
    assert_non_null(s);
    uint64_t t0 = 1000 * SEC + 990 * MS; /* 10 ms before the second ends */
    assert_int_equal(add(r, s, t0, "beam.smp;running;<0.1.0>;worker;m:f/1", one), KP_OK);
    assert_int_equal(add(r, s, t0 + 5 * MS, "beam.smp;running;<0.1.0>;worker;m:f/1", one), KP_OK);
    assert_int_equal(add(r, s, t0 + 15 * MS, "beam.smp;running;<0.1.0>;worker;m:f/1", one), KP_OK);
    assert_int_equal(add(r, s, t0 + 15 * MS, "beam.smp;waiting;<0.1.0>;worker;m:g/0", one), KP_OK);
    /* one tree of paths: beam.smp, running, m:f/1, waiting, m:g/0; the pid
     * and the name are the process's */
    assert_int_equal(r->n_nodes, 5);
    assert_int_equal(r->node_parent[0], UINT32_MAX);
    assert_int_equal(r->node_parent[1], 0);
    assert_int_equal(r->node_parent[2], 1);
    assert_int_equal(r->node_parent[3], 0);
    assert_int_equal(kp_strtab_count(r->frames), 7);
    assert_int_equal(kp_strtab_count(r->process_keys), 1);
    char text[64];
    assert_string_equal(frame(r, r->proc_pid[0], text, sizeof text), "<0.1.0>");
    assert_string_equal(frame(r, r->proc_name[0], text, sizeof text), "worker");
    assert_int_equal(r->proc_node[0], KP_REPORT_NONE);
    kp_report_source_stats st;
    kp_report_source_stats_get(s, &st);
    assert_int_equal(st.samples, 4);
    assert_int_equal(st.slice_ms, 20);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.process_entries, 3);
    /* slice 49 (990-1000 ms) holds the first two, slice 50 (the next
     * second's first 20 ms) the others */
    assert_int_equal(s->origin_s, 1000);
    long e = entry(&s->paths, 49, 2, 0);
    assert_true(e >= 0);
    assert_int_equal(s->paths.count[e], 2);
    assert_true(entry(&s->paths, 50, 2, 0) >= 0);
    assert_true(entry(&s->paths, 50, 4, 0) >= 0);
    e = entry(&s->processes, 49, 0, 2);
    assert_true(e >= 0);
    assert_int_equal(s->processes.count[e], 2);
    assert_true(entry(&s->processes, 50, 0, 4) >= 0);
    /* the timeline: the process per status (frames 1 running, 5 waiting) */
    e = entry(&s->timeline, 49, 0, 1);
    assert_true(e >= 0);
    assert_int_equal(s->timeline.count[e], 2);
    assert_true(entry(&s->timeline, 50, 0, 1) >= 0 && entry(&s->timeline, 50, 0, 5) >= 0);
    assert_int_equal(s->timeline.n, 3);
    kp_report_free(r);
}

/* Processes are told apart by recording, node and pid; a native CPU
 * sample's process is the cooperative samples' of that pid, and keeps
 * the code after its pid; a stack without a pid has the process NONE. */
static void test_processes(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
    kp_report_source *c = kp_report_get_source(r, 0, KP_REPORT_CPU);
    kp_report_source *b = kp_report_get_source(r, 1, KP_REPORT_SAMPLES);
    assert_int_equal(add(r, s, SEC, "beam.smp;a@h;running;<0.9.0>;srv;m:f/1", one), KP_OK);
    assert_int_equal(add(r, s, SEC, "beam.smp;b@h;running;<0.9.0>;srv;m:f/1", one), KP_OK);
    assert_int_equal(add(r, c, SEC, "beam.smp;a@h;scheduler;<0.9.0>;m:f/1", one), KP_OK);
    assert_int_equal(add(r, b, SEC, "beam.smp;a@h;running;<0.9.0>;srv;m:f/1", one), KP_OK);
    assert_int_equal(add(r, s, SEC, "beam.smp;a@h;running;m:g/1", one), KP_OK);
    assert_int_equal(add(r, s, SEC, "beam.smp;a@h;running;<0.9>;x;y", one), KP_OK); /* no pid */
    assert_int_equal(kp_strtab_count(r->process_keys), 4);
    char text[64];
    assert_string_equal(frame(r, r->proc_node[0], text, sizeof text), "a@h");
    assert_string_equal(frame(r, r->proc_node[1], text, sizeof text), "b@h");
    assert_int_equal(r->proc_recording[2], 1);
    assert_int_equal(r->proc_pid[3], KP_REPORT_NONE);
    assert_int_equal(c->processes.a[0], 0); /* the CPU sample's process is a@h's <0.9.0> */
    assert_string_equal(frame(r, r->node_frame[c->processes.b[0]], text, sizeof text), "m:f/1");
    assert_int_equal(s->processes.a[3], 3);
    kp_report_free(r);
}

static void test_weights(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
    const int64_t a[KP_WEIGHT_COUNT] = {1, 500, 4096, 0, 100, 20, -20};
    const int64_t b[KP_WEIGHT_COUNT] = {1, 0, 1024, 3, 80, -20, 20};
    assert_int_equal(add(r, s, 5 * SEC, "beam.smp;running;m:f/1", a), KP_OK);
    assert_int_equal(add(r, s, 5 * SEC + MS, "beam.smp;running;m:f/1", b), KP_OK);
    assert_int_equal(s->paths.n, 1);
    assert_int_equal(s->processes.n, 1);
    const uint64_t want[KP_WEIGHT_COUNT] = {2, 500, 5120, 3, 180, 20, 20};
    for (int k = 0; k < KP_WEIGHT_COUNT; k++) {
        assert_int_equal(s->paths.w[k][0], want[k]);
        assert_int_equal(s->processes.w[k][0], want[k]);
    }
    /* the CPU source has one weight */
    kp_report_source *c = kp_report_get_source(r, 0, KP_REPORT_CPU);
    assert_int_equal(c->n_weights, 1);
    assert_int_equal(add(r, c, 5 * SEC, "beam.smp;scheduler;m:f/1", one), KP_OK);
    assert_int_equal(r->n_nodes, 5); /* beam.smp shared, then scheduler;m:f/1 */
    assert_null(kp_report_get_source(r, 2, KP_REPORT_CPU));
    kp_report_free(r);
}

/* Past twice the budget a set's slices grow (20 ms, 40 ms, 200 ms, 1 s...);
 * counts and weights are kept whole. */
static void test_coarsening_keeps_every_sample(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_report_set_budget(r, 8);
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
    const int64_t w[KP_WEIGHT_COUNT] = {1, 7, 0, 0, 0, 0, 0};
    for (unsigned i = 0; i < 400; i++) /* 4 s, a sample every 10 ms, two stacks */
        assert_int_equal(add(r, s, 100 * SEC + i * 10 * MS,
                             i % 2 ? "beam.smp;running;m:f/1" : "beam.smp;running;m:g/1", w),
                         KP_OK);
    kp_report_source_stats st;
    kp_report_source_stats_get(s, &st);
    assert_int_equal(st.slice_ms, 1000);
    assert_int_equal(st.entries, 8); /* 4 seconds x 2 stacks */
    uint64_t count = 0, red = 0;
    for (uint64_t i = 0; i < s->paths.n; i++) {
        count += s->paths.count[i];
        red += s->paths.w[KP_WEIGHT_REDUCTIONS][i];
        assert_int_equal(s->paths.count[i], 50);
        assert_true(s->paths.slice[i] < 4);
    }
    assert_int_equal(count, 400);
    assert_int_equal(red, 400 * 7);
    /* the heat map keeps its 50 rows a second: two samples a 20 ms cell */
    assert_int_equal(s->heat_cells, 4 * KP_REPORT_HEAT_ROWS);
    for (uint64_t c = 0; c < s->heat_cells; c++) {
        assert_int_equal(s->heat[KP_WEIGHT_SAMPLES][c], 2);
        assert_int_equal(s->heat[KP_WEIGHT_REDUCTIONS][c], 14);
    }
    kp_report_free(r);
}

/* Many processes on one path: the tree keeps one path, the paths stay
 * fine while the processes' set grows its slices on its own. */
static void test_processes_coarsen_apart(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_report_set_budget(r, 8);
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
    char stack[64];
    for (unsigned i = 0; i < 100; i++) /* 2 s, every 20 ms, 10 processes */
        for (unsigned p = 0; p < 10; p++) {
            snprintf(stack, sizeof stack, "beam.smp;running;<0.%u.0>;w%u;m:f/1", 80 + p, p);
            assert_int_equal(add(r, s, 7 * SEC + i * 20 * MS, stack, one), KP_OK);
        }
    assert_int_equal(r->n_nodes, 3);
    assert_int_equal(kp_strtab_count(r->process_keys), 10);
    kp_report_source_stats st;
    kp_report_source_stats_get(s, &st);
    assert_int_equal(st.slice_ms, 200);          /* 10 slices of 1 path */
    assert_int_equal(st.process_slice_ms, 5000); /* 1 slice of 10 processes */
    assert_int_equal(st.process_entries, 10);
    /* a quarter of the budget, 2: the ten processes of a slice are past it
     * whatever the slice, up to an hour */
    assert_int_equal(st.timeline_slice_ms, 3600000);
    assert_int_equal(st.timeline_entries, 10);
    for (uint64_t i = 0; i < s->processes.n; i++)
        assert_int_equal(s->processes.count[i], 100);
    kp_report_free(r);
}

/* A sample from a second before the first sample's moves every slice. */
static void test_earlier_sample(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_CPU);
    assert_int_equal(add(r, s, 10 * SEC + 500 * MS, "a;b", one), KP_OK);
    assert_int_equal(add(r, s, 8 * SEC + 100 * MS, "a;c", one), KP_OK);
    assert_int_equal(add(r, s, 10 * SEC + 500 * MS, "a;b", one), KP_OK);
    assert_int_equal(s->origin_s, 8);
    assert_int_equal(s->paths.n, 2);
    long e = entry(&s->paths, 2 * 50 + 25, 1, 0);
    assert_true(e >= 0);
    assert_int_equal(s->paths.count[e], 2);
    assert_true(entry(&s->paths, 5, 2, 0) >= 0);
    e = entry(&s->processes, 2 * 50 + 25, 0, 1);
    assert_true(e >= 0 && s->processes.count[e] == 2);
    /* heat map cells moved with the slices: 10.5 s is cell 125 from 8 s */
    assert_int_equal(s->heat_cells, 126);
    assert_int_equal(s->heat[0][125], 2);
    assert_int_equal(s->heat[0][5], 1);
    kp_report_source_stats st;
    kp_report_source_stats_get(s, &st);
    assert_true(st.first_ns == 8 * SEC + 100 * MS && st.last_ns == 10 * SEC + 500 * MS);
    kp_report_free(r);
}

static char *write_page(kp_report *r, kp_status *st, size_t *len)
{
    char *dir = kp_test_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/report.html", dir);
    kp_sink *sink;
    assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
    kp_report_options o = {"a <title> & more", NULL, NULL};
    *st = kp_report_write_html(r, &o, sink);
    char *text = NULL;
    if (*st == KP_OK) {
        assert_int_equal(kp_sink_commit(sink), KP_OK);
        text = kp_test_read_text(path, len);
    } else {
        kp_sink_abort(sink);
    }
    kp_test_rmdir(dir);
    free(dir);
    return text;
}

/* Past its budget a heat map's rows grow to 100 ms, then to a second, the
 * sets' slices to whole rows (the page counts slices in rows), and every
 * sample stays counted, in memory that stops growing with the length. */
static void test_heat_rows_grow(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_report_set_heat_budget(r, 100);
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
    const int64_t w[KP_WEIGHT_COUNT] = {1, 7, 0, 0, 0, 0, 0};
    kp_report_source_stats st;
    unsigned i = 0;
    for (; i < 150; i++) /* 1.5 s, a sample every 10 ms: 75 rows of 20 ms */
        assert_int_equal(add(r, s, 100 * SEC + i * 10 * MS, "beam.smp;running;m:f/1", w), KP_OK);
    kp_report_source_stats_get(s, &st);
    assert_int_equal(st.heat_rows, 50);
    assert_int_equal(st.slice_ms, 20);
    for (; i < 300; i++) /* 3 s: 150 rows of 20 ms, 30 of 100 ms */
        assert_int_equal(add(r, s, 100 * SEC + i * 10 * MS, "beam.smp;running;m:f/1", w), KP_OK);
    kp_report_source_stats_get(s, &st);
    assert_int_equal(st.heat_rows, 10);
    assert_int_equal(s->heat_cells, 30);
    assert_int_equal(st.slice_ms, 100); /* whole rows: 40 ms is not */
    for (uint64_t c = 0; c < s->heat_cells; c++) {
        assert_int_equal(s->heat[KP_WEIGHT_SAMPLES][c], 10);
        assert_int_equal(s->heat[KP_WEIGHT_REDUCTIONS][c], 70);
    }
    size_t room = s->heat_cap;
    for (; i < 1500; i++) /* 15 s: 150 rows of 100 ms, 15 of a second */
        assert_int_equal(add(r, s, 100 * SEC + i * 10 * MS, "beam.smp;running;m:f/1", w), KP_OK);
    kp_report_source_stats_get(s, &st);
    assert_int_equal(st.heat_rows, 1);
    assert_int_equal(s->heat_cells, 15);
    assert_int_equal(st.slice_ms, 1000);
    assert_int_equal(s->heat_cap, room); /* the room of the first rows */
    uint64_t count = 0;
    for (uint64_t c = 0; c < s->heat_cells; c++) {
        assert_int_equal(s->heat[KP_WEIGHT_SAMPLES][c], 100);
        count += s->heat[KP_WEIGHT_SAMPLES][c];
    }
    assert_int_equal(count, 1500);
    /* an earlier sample moves the origin by whole seconds, in rows */
    assert_int_equal(add(r, s, 98 * SEC + 500 * MS, "beam.smp;running;m:f/1", w), KP_OK);
    assert_int_equal(s->heat_cells, 17);
    assert_int_equal(s->heat[KP_WEIGHT_SAMPLES][0], 1);
    assert_int_equal(s->heat[KP_WEIGHT_SAMPLES][2], 100);
    /* the page counts slices in the heat map's rows */
    kp_status pst;
    size_t len;
    char *page = write_page(r, &pst, &len);
    assert_int_equal(pst, KP_OK);
    assert_non_null(strstr(page, "\"heatRows\":1,"));
    assert_non_null(strstr(page, "{\"sliceCells\":1,"));
    assert_null(strstr(page, "{\"sliceCells\":50,"));
    free(page);
    kp_report_free(r);
}

/* A native CPU stack's status is its state, the frame right under its
 * thread kind, when that is a state's name; its thread kind without one
 * (recorded before states). The pid is the process's either way. */
static void test_cpu_states(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_report_source *c = kp_report_get_source(r, 0, KP_REPORT_CPU);
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
    const char *stacks[][2] = {
        {"beam.smp;scheduler;busy_wait;[vm]erts_schedule", "busy_wait"},
        {"beam.smp;scheduler;emulator;<0.9.0>;m:f/1", "emulator"},
        {"beam.smp;dirty_cpu;gc;<0.9.0>;[vm]erts_garbage_collect", "gc"},
        {"beam.smp;other;other;[vm]aux_thread", "other"},
        {"beam.smp;scheduler;<0.9.0>;m:f/1", "scheduler"},       /* no state */
        {"beam.smp;scheduler;m:g/0;gc", "scheduler"},            /* not under the kind */
        {"beam.smp;1_scheduler;gc;m:g/0", "1_scheduler"},        /* not a thread kind */
        {"beam.smp;a@h;dirty_io;check_io;[vm]poll", "check_io"}, /* under the node */
    };
    size_t n = sizeof stacks / sizeof *stacks;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(add(r, c, SEC, stacks[i][0], one), KP_OK);
    /* a cooperative stack keeps its status, whatever follows it */
    assert_int_equal(add(r, s, SEC, "beam.smp;scheduler;gc;m:f/1", one), KP_OK);
    assert_int_equal(kp_strtab_count(r->stacks), n + 1);
    char text[64];
    for (size_t i = 0; i < n; i++)
        assert_string_equal(frame(r, r->stack_status[i], text, sizeof text), stacks[i][1]);
    assert_string_equal(frame(r, r->stack_status[n], text, sizeof text), "scheduler");
    /* the timeline keys the processes by state */
    assert_int_equal(c->timeline.n, 8); /* (process, state): one each, in one slice */
    kp_status st;
    size_t len;
    char *page = write_page(r, &st, &len);
    assert_int_equal(st, KP_OK);
    assert_non_null(
        strstr(page, "\"threadKinds\":[\"scheduler\",\"dirty_cpu\",\"dirty_io\",\"other\"]"));
    assert_non_null(strstr(page, "\"cpuStates\":[[\"emulator\",\"emulator\","));
    assert_non_null(strstr(page, "[\"busy_wait\",\"other\","));
    free(page);
    kp_report_free(r);
}

/* Ticks of `per_tick` processes every `interval` ms for `seconds` s from
 * `phase` ms into second 100, each moved by up to `jitter` ms either way
 * (as the agent does, by a tenth of the interval), but for the ticks of
 * seconds `pause_from` to `pause_to`. */
static void add_ticks(kp_report *r, kp_report_source *s, unsigned interval, unsigned phase,
                      unsigned jitter, unsigned seconds, unsigned pause_from, unsigned pause_to)
{
    uint32_t x = 12345;
    for (uint64_t t = phase; t < seconds * 1000ull; t += interval) {
        x = x * 1103515245u + 12345u;
        long off = jitter ? (long)(x >> 16) % (2 * (long)jitter + 1) - (long)jitter : 0;
        uint64_t ms = (uint64_t)((long)t + off);
        if (ms / 1000 >= pause_from && ms / 1000 < pause_to)
            continue;
        for (unsigned p = 0; p < 3; p++) {
            char stack[64];
            snprintf(stack, sizeof stack, "beam.smp;running;<0.%u.0>;w;m:f/1", 80 + p);
            assert_int_equal(add(r, s, 100 * SEC + ms * MS, stack, one), KP_OK);
        }
    }
}

/* The rows a recording's heat map gets once written, and whether it has
 * empty rows between its first and last sample (in seconds with samples). */
static unsigned rows_of(kp_report *r, kp_report_source *s, uint64_t *empty)
{
    kp_status st;
    size_t len;
    free(write_page(r, &st, &len));
    assert_int_equal(st, KP_OK);
    kp_report_source_stats stats;
    kp_report_source_stats_get(s, &stats);
    uint64_t per_s = stats.heat_rows, first = 0, last = s->heat_cells;
    const uint64_t *h = s->heat[KP_WEIGHT_SAMPLES];
    while (!h[first])
        first++;
    while (!h[last - 1])
        last--;
    *empty = 0;
    for (uint64_t i = first; i < last; i++) {
        uint64_t sec = i / per_s, sum = 0;
        for (uint64_t j = sec * per_s; j < (sec + 1) * per_s && j < s->heat_cells; j++)
            sum += h[j];
        *empty += sum && !h[i];
    }
    /* the sets' slices stay whole rows: the page counts them in rows */
    assert_int_equal(s->paths.slice_cells % s->row_cells, 0);
    assert_int_equal(s->timeline.slice_cells % s->row_cells, 0);
    return stats.heat_rows;
}

/* A cooperative source's heat map rows are as long as its sampling
 * interval, found in the data: a 10 Hz recording has 10 rows a second,
 * none empty, rather than 50 of which four in five are; rows twice as
 * long when jittered ticks straddle the rows' edges; 50 rows at 50 Hz; a
 * pause of seconds does not make them longer. Native CPU samples keep
 * 50 rows, however sparse. */
static void test_rows_fit_sampling(void **state)
{
    (void)state;
    const struct {
        unsigned interval, phase, jitter, pause_to, rows;
    } cases[] = {
        {100, 50, 10, 0, 10}, /* 10 Hz (--rate's default), ticks mid-row */
        {100, 47, 10, 9, 10}, /* the same with a pause from second 5 to 9 */
        {100, 0, 10, 0, 5},   /* 10 Hz, ticks jittered across the rows' edges */
        {20, 10, 2, 0, 50},   /* 50 Hz */
        {250, 120, 25, 0, 2}, /* 4 Hz */
        {200, 100, 20, 0, 5}, /* 5 Hz */
        {1000, 500, 100, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kp_report *r = kp_report_create();
        kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
        add_ticks(r, s, cases[i].interval, cases[i].phase, cases[i].jitter, 20, 5,
                  cases[i].pause_to);
        uint64_t empty, count = 0;
        unsigned rows = rows_of(r, s, &empty);
        print_message("%u ms ticks from %u ms: %u rows a second, %llu empty\n", cases[i].interval,
                      cases[i].phase, rows, (unsigned long long)empty);
        assert_int_equal(rows, cases[i].rows);
        assert_int_equal(empty, 0);
        for (uint64_t c = 0; c < s->heat_cells; c++)
            count += s->heat[KP_WEIGHT_SAMPLES][c];
        assert_int_equal(count, s->samples);
        kp_report_free(r);
    }
    kp_report *r = kp_report_create();
    kp_report_source *c = kp_report_get_source(r, 0, KP_REPORT_CPU);
    for (unsigned i = 0; i < 20; i++)
        assert_int_equal(
            add(r, c, 100 * SEC + i * 330 * MS, "beam.smp;scheduler;emulator;m:f/1", one), KP_OK);
    kp_status st;
    size_t len;
    free(write_page(r, &st, &len));
    kp_report_source_stats stats;
    kp_report_source_stats_get(c, &stats);
    assert_int_equal(stats.heat_rows, 50);
    kp_report_free(r);
}

static void test_page(void **state)
{
    (void)state;
    kp_report *r = kp_report_create();
    kp_status st;
    size_t len;
    assert_null(write_page(r, &st, &len));
    assert_int_equal(st, KP_ERR_EMPTY);
    kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
    assert_int_equal(add(r, s, SEC, "beam.smp;waiting;<0.1.0>;</script>;m:f/1", one), KP_OK);
    char *page = write_page(r, &st, &len);
    assert_int_equal(st, KP_OK);
    assert_non_null(page);
    assert_true(strncmp(page, "<!DOCTYPE html>", 15) == 0);
    assert_non_null(strstr(page, "<title>a &lt;title> &amp; more</title>"));
    assert_non_null(strstr(page, "id=\"kprof-meta\""));
    assert_non_null(strstr(page, "id=\"kprof-data\""));
    assert_non_null(strstr(page, "\"\\u003c0.1.0>\""));
    /* a frame cannot close the script element; nothing from outside */
    assert_null(strstr(page, "<0.1.0>"));
    const char *meta = strstr(page, "id=\"kprof-meta\"");
    const char *frame = strstr(meta, "\"\\u003c/script>\"");
    assert_true(frame && frame < strstr(meta, "</script>"));
    assert_null(strstr(page, "http://"));
    assert_null(strstr(page, "https://"));
    assert_null(strstr(page, " src="));
    free(page);
    kp_report_free(r);
}

/* Every allocation failing in turn: an error, never a crash or a leak, and
 * the report stays usable: the same samples added again once memory is
 * back leave every entry on a node of the tree, every node's parent before
 * it, and the counts equal to the samples taken. */
static void test_out_of_memory(void **state)
{
    (void)state;
    for (long n = 0;; n++) {
        kp_fault_alloc_after(n);
        kp_report *r = kp_report_create();
        kp_report_source *s = NULL;
        kp_status st = KP_ERR_NOMEM;
        if (r) {
            kp_report_set_budget(r, 2);
            kp_report_set_heat_budget(r, 5); /* 600 ms: rows of 100 ms, then 1 s */
            s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
            st = s ? KP_OK : KP_ERR_NOMEM;
            for (unsigned i = 0; i < 20 && st == KP_OK; i++)
                st = add(r, s, SEC + i * 30 * MS, i % 3 ? "a;b;<0.1.0>;n;c" : "a;d", one);
        }
        long attempts = kp_fault_alloc_attempts();
        kp_fault_alloc_reset();
        if (st != KP_OK)
            assert_int_equal(st, KP_ERR_NOMEM);
        if (s) {
            for (unsigned i = 0; i < 20; i++)
                assert_int_equal(
                    add(r, s, SEC + i * 30 * MS, i % 3 ? "a;b;<0.1.0>;n;c" : "a;d", one), KP_OK);
            const kp_report_set *sets[3] = {&s->paths, &s->processes, &s->timeline};
            for (int k = 0; k < 3; k++) {
                uint64_t count = 0;
                for (uint64_t e = 0; e < sets[k]->n; e++) {
                    if (k < 2)
                        assert_true((k ? sets[k]->b : sets[k]->a)[e] < r->n_nodes);
                    count += sets[k]->count[e];
                }
                assert_int_equal(count, s->samples);
            }
            for (uint32_t i = 0; i < r->n_nodes; i++)
                assert_true(r->node_parent[i] == UINT32_MAX || r->node_parent[i] < i);
        }
        kp_report_free(r);
        if (st == KP_OK && attempts <= n)
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_tree_and_slices, reset_faults),
        cmocka_unit_test_teardown(test_processes, reset_faults),
        cmocka_unit_test_teardown(test_weights, reset_faults),
        cmocka_unit_test_teardown(test_coarsening_keeps_every_sample, reset_faults),
        cmocka_unit_test_teardown(test_heat_rows_grow, reset_faults),
        cmocka_unit_test_teardown(test_processes_coarsen_apart, reset_faults),
        cmocka_unit_test_teardown(test_earlier_sample, reset_faults),
        cmocka_unit_test_teardown(test_cpu_states, reset_faults),
        cmocka_unit_test_teardown(test_rows_fit_sampling, reset_faults),
        cmocka_unit_test_teardown(test_page, reset_faults),
        cmocka_unit_test_teardown(test_out_of_memory, reset_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

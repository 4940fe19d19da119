/* kprof top's table model (sampler/top/): self and total weights of
 * functions (recursion counted once per sample), windows and the cumulative
 * view, the order of both tables under each sort key, and lines that never
 * pass the width, with long names cut and control bytes replaced. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "top/view.h"

static int setup(void **state)
{
    *state = kp_top_create(0);
    assert_non_null(*state);
    return 0;
}

static int teardown(void **state)
{
    kp_top_free(*state);
    return 0;
}

/* Adds a stack given as "a;b;c" (root first) with `weight`. */
static void add(kp_top *t, const char *folded, uint64_t weight)
{
    kp_top_text frames[32];
    size_t n = 0;
    const char *s = folded;
    while (*s && n < 32) {
        const char *end = strchr(s, ';');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        frames[n++] = (kp_top_text){s, len};
        s += len + (end ? 1 : 0);
    }
    assert_int_equal(kp_top_add_stack(t, frames, n, weight), KP_OK);
}

static void add_proc(kp_top *t, uint32_t num, const char *label, const char *current,
                     uint64_t reductions, int64_t queue, int64_t memory)
{
    kp_top_process_sample s = {
        num, 0, {label, strlen(label)}, {current, strlen(current)}, reductions, queue, memory};
    assert_int_equal(kp_top_add_process(t, &s), KP_OK);
}

static void weights(kp_top *t, const char *name, int cumulative, uint64_t self, uint64_t total,
                    uint64_t all)
{
    uint64_t s, to, a;
    assert_int_equal(kp_top_function_weights(t, name, cumulative, &s, &to, &a), 1);
    assert_int_equal(s, self);
    assert_int_equal(to, total);
    assert_int_equal(a, all);
}

static void self_and_total(void **state)
{
    kp_top *t = *state;
    add(t, "m:main/0;m:loop/1;m:hot/2", 10);
    add(t, "m:main/0;m:loop/1;m:cold/0", 5);
    add(t, "m:main/0;m:loop/1", 1);
    add(t, "m:main/0;m:zero/0", 0); /* weighs nothing: not even seen */
    kp_top_close_window(t, 1000000);
    weights(t, "m:hot/2", 0, 10, 10, 16);
    weights(t, "m:cold/0", 0, 5, 5, 16);
    weights(t, "m:loop/1", 0, 1, 16, 16);
    weights(t, "m:main/0", 0, 0, 16, 16);
    uint64_t s, to, a;
    assert_int_equal(kp_top_function_weights(t, "m:zero/0", 0, &s, &to, &a), 0);
}

static void recursion_counts_once(void **state)
{
    kp_top *t = *state;
    add(t, "m:main/0;m:fib/1;m:fib/1;m:fib/1", 7);
    add(t, "m:main/0;m:fib/1;m:other/0;m:fib/1", 3);
    kp_top_close_window(t, 1000000);
    weights(t, "m:fib/1", 0, 10, 10, 10);
    weights(t, "m:other/0", 0, 0, 3, 10);
}

static void windows_and_cumulative(void **state)
{
    kp_top *t = *state;
    add(t, "m:a/0", 4);
    kp_top_close_window(t, 1000000);
    add(t, "m:b/0", 6);
    weights(t, "m:a/0", 0, 4, 4, 4); /* the open window does not show yet */
    kp_top_close_window(t, 1000000);
    weights(t, "m:a/0", 0, 0, 0, 6);
    weights(t, "m:b/0", 0, 6, 6, 6);
    weights(t, "m:a/0", 1, 4, 4, 10);
    weights(t, "m:b/0", 1, 6, 6, 10);
}

/* Renders into a NUL-terminated string the caller frees. */
static char *render(kp_top *t, const kp_top_layout *l)
{
    kp_buf out = KP_BUF_INIT;
    assert_int_equal(kp_top_render(t, l, &out), KP_OK);
    char *text = malloc(out.len + 1);
    assert_non_null(text);
    memcpy(text, out.data, out.len);
    text[out.len] = '\0';
    kp_buf_free(&out);
    return text;
}

/* The line after the one starting with `heading`, skipping column headers:
 * the first row of that table. */
static const char *first_row(const char *text, const char *heading)
{
    const char *at = strstr(text, heading);
    assert_non_null(at);
    at = strchr(at, '\n');
    assert_non_null(at);
    at = strchr(at + 1, '\n'); /* the column header */
    assert_non_null(at);
    return at + 1;
}

static int row_starts_with_field(const char *row, const char *field)
{
    const char *nl = strchr(row, '\n');
    const char *hit = strstr(row, field);
    return hit && (!nl || hit < nl);
}

static void check_widths(const char *text, size_t width, size_t max_lines)
{
    size_t lines = 0;
    for (const char *s = text; *s;) {
        const char *nl = strchr(s, '\n');
        assert_non_null(nl);
        size_t cols = 0;
        for (const char *c = s; c < nl; c++) {
            unsigned char b = (unsigned char)*c;
            assert_true(b >= 0x20 && b != 0x7f); /* no escape, no control byte */
            cols += (b & 0xC0) != 0x80;
        }
        if (cols > width)
            fail_msg("line of %zu columns, over %zu: %.*s", cols, width, (int)(nl - s), s);
        lines++;
        s = nl + 1;
    }
    if (max_lines)
        assert_true(lines <= max_lines);
}

static void sorting(void **state)
{
    kp_top *t = *state;
    add(t, "m:main/0;m:deep/0;m:leaf_a/0", 3);
    add(t, "m:main/0;m:leaf_b/0", 5);
    add_proc(t, 10, "busy_server", "m:leaf_b/0", 900, 2, 1000);
    add_proc(t, 11, "fat_server", "m:leaf_a/0", 100, 50, 1 << 30);
    add_proc(t, 12, "queued", "m:main/0", 10, 5000, 2000);
    kp_top_close_window(t, 1000000);
    kp_top_layout l = {
        80, 0, 5, "kprof top test@host", "reductions", NULL, KP_TOP_BY_SELF, KP_TOP_BY_CPU, 0, 0};
    char *text = render(t, &l);
    assert_true(row_starts_with_field(first_row(text, "FUNCTIONS by self"), "m:leaf_b/0"));
    assert_non_null(strstr(text, "PROCESSES by reductions (no CPU samples)"));
    assert_true(row_starts_with_field(first_row(text, "PROCESSES by"), "busy_server"));
    check_widths(text, 80, 0);
    free(text);

    l.function_sort = KP_TOP_BY_TOTAL;
    l.process_sort = KP_TOP_BY_MEMORY;
    text = render(t, &l);
    assert_true(row_starts_with_field(first_row(text, "FUNCTIONS by total"), "m:main/0"));
    assert_non_null(strstr(text, "*TOTAL%"));
    assert_true(row_starts_with_field(first_row(text, "PROCESSES by memory"), "fat_server"));
    assert_non_null(strstr(text, "1.0G"));
    free(text);

    l.process_sort = KP_TOP_BY_QUEUE;
    text = render(t, &l);
    assert_true(row_starts_with_field(first_row(text, "PROCESSES by message queue"), "queued"));
    free(text);
}

static void cpu_share(void **state)
{
    (void)state;
    kp_top *t = kp_top_create(100);
    assert_non_null(t);
    add_proc(t, 20, "spinner", "m:spin/1", 10, 0, 0);
    add_proc(t, 21, "talker", "m:talk/1", 5000, 0, 0);
    assert_int_equal(kp_top_add_cpu(t, 20, 0, 200), KP_OK); /* 2 s of one core at 100 Hz */
    assert_int_equal(kp_top_add_cpu(t, 21, 0, 10), KP_OK);
    kp_top_close_window(t, 2000000);
    kp_top_layout l = {80, 0, 5, "t", "native CPU samples", NULL, KP_TOP_BY_SELF, KP_TOP_BY_CPU,
                       0,  0};
    char *text = render(t, &l);
    const char *row = first_row(text, "PROCESSES by CPU");
    assert_true(row_starts_with_field(row, "spinner"));
    assert_true(row_starts_with_field(row, "100.0"));
    free(text);
    l.process_sort = KP_TOP_BY_REDUCTIONS;
    text = render(t, &l);
    row = first_row(text, "PROCESSES by reductions");
    assert_true(row_starts_with_field(row, "talker"));
    assert_true(row_starts_with_field(row, "2500")); /* 5000 in 2 s */
    free(text);
    kp_top_free(t);
}

static void narrow_and_long_names(void **state)
{
    kp_top *t = *state;
    char name[300];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    memcpy(name, "a_module_with_a_very_long_name:", 31);
    add(t, name, 3);
    add(t, "caf\xc3\xa9:\xc3\xa9t\xc3\xa9/1", 2); /* UTF-8: one column a character */
    add_proc(t, 1, "evil\x1b[2Jname", name, 5, 0, 0);
    kp_top_close_window(t, 1000000);
    static const unsigned widths[] = {80, 100, 60, 132};
    for (size_t i = 0; i < sizeof widths / sizeof *widths; i++) {
        kp_top_layout l = {widths[i],
                           30,
                           0,
                           "kprof top test@host",
                           "reductions",
                           "q quit  p pause  s/t sort functions  c/r/m/l sort processes",
                           KP_TOP_BY_SELF,
                           KP_TOP_BY_CPU,
                           0,
                           1};
        char *text = render(t, &l);
        check_widths(text, widths[i], 30);
        assert_non_null(strstr(text, "[PAUSED]"));
        /* cut in the middle, and says so: the start and the end stay */
        assert_non_null(strstr(text, "a_module_with_a"));
        assert_non_null(strstr(text, "...xxx"));
        assert_non_null(strstr(text, "caf\xc3\xa9:\xc3\xa9t\xc3\xa9/1"));
        assert_null(strstr(text, "\x1b"));
        /* short tables are padded: the keys stay on the screen's last line */
        size_t lines = 0;
        for (const char *c = text; (c = strchr(c, '\n')) != NULL; c++)
            lines++;
        assert_int_equal(lines, 30);
        const char *last = text + strlen(text) - 1;
        while (last > text && last[-1] != '\n')
            last--;
        assert_memory_equal(last, "q quit", 6);
        free(text);
    }
}

static void screen_height(void **state)
{
    kp_top *t = *state;
    char name[32];
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof name, "m:f%d/0", i);
        add(t, name, (uint64_t)i + 1);
        add_proc(t, (uint32_t)i, "p", name, (uint64_t)i, 0, 0);
    }
    kp_top_close_window(t, 1000000);
    kp_top_layout l = {80, 30, 0, "t", "reductions", "keys", KP_TOP_BY_SELF, KP_TOP_BY_CPU, 0, 0};
    char *text = render(t, &l);
    check_widths(text, 80, 30);
    size_t lines = 0;
    for (const char *s = text; (s = strchr(s, '\n')) != NULL; s++)
        lines++;
    assert_int_equal(lines, 30); /* the screen, filled */
    assert_true(row_starts_with_field(first_row(text, "FUNCTIONS"), "m:f49/0"));
    free(text);
    l.height = 0; /* no screen: --rows or 10 per table */
    l.footer = NULL;
    text = render(t, &l);
    lines = 0;
    for (const char *s = text; (s = strchr(s, '\n')) != NULL; s++)
        lines++;
    assert_int_equal(lines, 6 + 10 + 10);
    free(text);
}

/* Native samples' states: one line under the title, per window, and the
 * screen still filled to its height, no more. */
static void states_line(void **state)
{
    kp_top *t = *state;
    char name[32];
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof name, "m:f%d/0", i);
        add(t, name, 1);
    }
    kp_top_add_state(t, KP_THREAD_SCHEDULER, KP_CPU_BUSY_WAIT, 62);
    kp_top_add_state(t, KP_THREAD_SCHEDULER, KP_CPU_EMULATOR, 38);
    kp_top_add_state(t, KP_THREAD_OTHER, KP_CPU_CHECK_IO, 5);
    kp_top_layout l = {100,           30, 0, "t", "native CPU samples", "keys", KP_TOP_BY_SELF,
                       KP_TOP_BY_CPU, 0,  0};
    char *text = render(t, &l);
    assert_null(strstr(text, "CPU by state")); /* the open window does not show yet */
    free(text);
    kp_top_close_window(t, 1000000);
    text = render(t, &l);
    const char *second = strchr(text, '\n') + 1;
    assert_true(strncmp(second,
                        "CPU by state: scheduler: 62% busy_wait, 38% emulator; other: 100% "
                        "check_io\n",
                        strlen("CPU by state: scheduler: 62% busy_wait, 38% emulator; other: "
                               "100% check_io\n")) == 0);
    check_widths(text, 100, 30);
    size_t lines = 0;
    for (const char *c = text; (c = strchr(c, '\n')) != NULL; c++)
        lines++;
    assert_int_equal(lines, 30);
    free(text);
    kp_top_close_window(t, 1000000); /* nothing since: no line; all since the start: the line */
    text = render(t, &l);
    assert_null(strstr(text, "CPU by state"));
    free(text);
    l.cumulative = 1;
    text = render(t, &l);
    assert_non_null(strstr(text, "CPU by state: scheduler: 62% busy_wait"));
    free(text);
}

/* A process only native CPU samples saw has no name until the caller asks
 * the node; each is handed out for asking once. */
static void naming_native_only_processes(void **state)
{
    kp_top *t = *state;
    add_proc(t, 1, "known", "m:f/0", 10, 0, 0);
    assert_int_equal(kp_top_add_cpu(t, 2, 5, 50), KP_OK);
    kp_top_close_window(t, 1000000);
    uint32_t nums[4], serials[4];
    assert_int_equal(kp_top_unnamed(t, nums, serials, 4), 1);
    assert_int_equal(nums[0], 2);
    assert_int_equal(serials[0], 5);
    assert_int_equal(kp_top_unnamed(t, nums, serials, 4), 0);
    kp_top_text label = {"code_server", 11};
    assert_int_equal(kp_top_name(t, 2, 5, &label), KP_OK);
    assert_int_equal(kp_top_name(t, 9, 9, &label), KP_OK); /* unknown: ignored */
    kp_top_layout l = {80, 0, 5, "t", "reductions", NULL, KP_TOP_BY_SELF, KP_TOP_BY_CPU, 0, 0};
    char *text = render(t, &l);
    const char *row = strstr(text, "<0.2.5>      code_server");
    assert_non_null(row);
    /* the agent never sampled it: no reductions, queue or memory to show */
    char want[128];
    snprintf(want, sizeof want, "%-28s %6s %7s %6s %7s", "<0.2.5>      code_server", "-", "-", "-",
             "-");
    assert_memory_equal(row, want, strlen(want));
    free(text);
}

/* Names come as frame symbols, percent-encoded; the tables show them
 * readable: an Elixir anonymous function with its spaces, an Erlang
 * operator with its pluses, and never a control byte. */
static void names_shown_readable(void **state)
{
    kp_top *t = *state;
    add(t, "MyApp.Hot.run/0;anonymous%20fn/1%20in%20MyApp.Hot.spin/2", 5);
    add(t, "erlang:%2B%2B/2", 3);
    add_proc(t, 1, "MyApp.Hot.%22a%0Ab%22/0", "anonymous%20fn/1%20in%20MyApp.Hot.spin/2", 10, 0, 0);
    kp_top_close_window(t, 1000000);
    kp_top_layout l = {120, 0, 5, "t", "reductions", NULL, KP_TOP_BY_SELF, KP_TOP_BY_CPU, 0, 0};
    char *text = render(t, &l);
    assert_non_null(strstr(text, "  anonymous fn/1 in MyApp.Hot.spin/2\n"));
    assert_non_null(strstr(text, "  erlang:++/2\n"));
    assert_non_null(strstr(text, "<0.1.0>      MyApp.Hot.\"a?b\"/0"));
    assert_null(strstr(text, "%20"));
    free(text);
}

static void forgets_gone_processes(void **state)
{
    kp_top *t = *state;
    add_proc(t, 7, "short_lived", "m:f/0", 100, 0, 0);
    kp_top_close_window(t, 1000000);
    kp_top_layout l = {80, 0, 5, "t", "reductions", NULL, KP_TOP_BY_SELF, KP_TOP_BY_CPU, 0, 0};
    char *text = render(t, &l);
    assert_non_null(strstr(text, "short_lived"));
    free(text);
    add_proc(t, 8, "newcomer", "m:f/0", 100, 0, 0);
    text = render(t, &l); /* samples in the open window change nothing shown */
    assert_non_null(strstr(text, "short_lived"));
    assert_null(strstr(text, "newcomer"));
    free(text);
    kp_top_close_window(t, 1000000);
    text = render(t, &l); /* not sampled in the last window */
    assert_null(strstr(text, "short_lived"));
    free(text);
    l.cumulative = 1;
    text = render(t, &l); /* still there since the start */
    assert_non_null(strstr(text, "short_lived"));
    free(text);
    for (int i = 0; i < 60; i++)
        kp_top_close_window(t, 1000000);
    text = render(t, &l);
    assert_null(strstr(text, "short_lived"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(self_and_total, setup, teardown),
        cmocka_unit_test_setup_teardown(recursion_counts_once, setup, teardown),
        cmocka_unit_test_setup_teardown(windows_and_cumulative, setup, teardown),
        cmocka_unit_test_setup_teardown(sorting, setup, teardown),
        cmocka_unit_test(cpu_share),
        cmocka_unit_test_setup_teardown(narrow_and_long_names, setup, teardown),
        cmocka_unit_test_setup_teardown(screen_height, setup, teardown),
        cmocka_unit_test_setup_teardown(naming_native_only_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(forgets_gone_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(names_shown_readable, setup, teardown),
        cmocka_unit_test_setup_teardown(states_line, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

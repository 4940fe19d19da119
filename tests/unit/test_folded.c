/* kp_folded: aggregation, bytewise order, saturation, interned stacks, the
 * line parser, and behaviour when memory or the disk runs out. Every output
 * is read back from the file a kp_sink wrote and checked by kp_check_folded. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "faults.h"
#include "format_check.h"
#include "kp/folded.h"
#include "kp/perf_reader.h"
#include "kp/perf_writer.h"

/* Writes `f` through a file sink and returns the file's text (caller frees). */
static char *written_text(const kp_folded *f, size_t *len)
{
    char *dir = kp_test_tmpdir();
    assert_non_null(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.folded", dir);
    kp_sink *sink;
    assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
    assert_int_equal(kp_folded_write(f, sink), KP_OK);
    assert_int_equal(kp_sink_commit(sink), KP_OK);
    char *text = kp_test_read_text(path, len);
    assert_non_null(text);
    kp_test_rmdir(dir);
    free(dir);
    return text;
}

static void assert_written(const kp_folded *f, const char *expected)
{
    size_t len;
    char *text = written_text(f, &len);
    if (len != strlen(expected) || memcmp(text, expected, len) != 0)
        fail_msg("got:\n%s\nwant:\n%s", text, expected);
    char why[256];
    if (len && kp_check_folded(text, len, why, sizeof why) != 0)
        fail_msg("kp_check_folded: %s\n%s", why, text);
    free(text);
}

static kp_folded *create(void)
{
    kp_folded *f = kp_folded_create();
    assert_non_null(f);
    return f;
}

static void add(kp_folded *f, const char *stack, uint64_t weight)
{
    assert_int_equal(kp_folded_add(f, stack, strlen(stack), weight), KP_OK);
}

static void test_merges_identical_text(void **state)
{
    (void)state;
    kp_folded *f = create();
    add(f, "a;b", 3);
    add(f, "a;c", 1);
    add(f, "a;b", 4);
    assert_int_equal(kp_folded_add(f, "a;bXYZ", 3, 1), KP_OK); /* only `len` bytes count */
    assert_int_equal(kp_folded_lines(f), 2);
    assert_int_equal(kp_folded_total(f), 9);
    assert_written(f, "a;b 8\na;c 1\n");
    kp_folded_free(f);
}

static void test_sorted_bytewise(void **state)
{
    (void)state;
    kp_folded *f = create();
    static const char *const order[] = {"b",     "\xc3\xa9t\xc3\xa9", "a;b", "a", "B", "a~",
                                        "a;b;c", "<0.1.0>;sleep"};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        add(f, order[i], i + 1);
    /* what `LC_ALL=C sort` gives: bytes compared unsigned, a prefix first */
    assert_written(f, "<0.1.0>;sleep 8\nB 5\na 4\na;b 3\na;b;c 7\na~ 6\nb 1\n"
                      "\xc3\xa9t\xc3\xa9 2\n");
    kp_folded_free(f);
}

static void test_weights_saturate(void **state)
{
    (void)state;
    kp_folded *f = create();
    add(f, "x", UINT64_MAX - 1);
    add(f, "x", 5);
    assert_int_equal(kp_folded_total(f), UINT64_MAX);
    add(f, "y", UINT64_MAX);
    assert_int_equal(kp_folded_total(f), UINT64_MAX);
    assert_int_equal(kp_folded_lines(f), 2);
    assert_written(f, "x 18446744073709551615\ny 18446744073709551615\n");
    kp_folded_free(f);
}

static void test_zero_weights_and_empty_output(void **state)
{
    (void)state;
    kp_folded *f = create();
    assert_written(f, "");
    add(f, "z", 0);
    assert_int_equal(kp_folded_lines(f), 0);
    assert_written(f, "");
    add(f, "a", 1);
    assert_written(f, "a 1\n");
    add(f, "z", 2);
    assert_int_equal(kp_folded_lines(f), 2);
    assert_written(f, "a 1\nz 2\n");
    kp_folded_free(f);
}

/* Interned frames: running;<0.123.0>;erlang:'++'/2;my_mod:loop/1 (root first). */
typedef struct {
    kp_frames *frames;
    kp_stacks *stacks;
    uint32_t full, empty;
} tables;

static void tables_init(tables *t)
{
    t->frames = kp_frames_create(0);
    t->stacks = kp_stacks_create();
    assert_non_null(t->frames);
    assert_non_null(t->stacks);
    kp_mfa m1 = {"erlang", 6, "++", 2, 2, 0}, m2 = {"my_mod", 6, "loop", 4, 1, 0};
    uint32_t ids[4];
    assert_int_equal(kp_frames_intern_pseudo(t->frames, "running", 7, "status", &ids[0]), KP_OK);
    assert_int_equal(kp_frames_intern_pseudo(t->frames, "<0.123.0>", 9, "process", &ids[1]), KP_OK);
    assert_int_equal(kp_frames_intern_mfa(t->frames, &m1, &ids[2]), KP_OK);
    assert_int_equal(kp_frames_intern_mfa(t->frames, &m2, &ids[3]), KP_OK);
    assert_int_equal(kp_stacks_intern(t->stacks, ids, 4, &t->full), KP_OK);
    assert_int_equal(kp_stacks_intern(t->stacks, NULL, 0, &t->empty), KP_OK);
}

static void tables_free(tables *t)
{
    kp_stacks_free(t->stacks);
    kp_frames_free(t->frames);
}

static void test_add_stack_with_and_without_root(void **state)
{
    (void)state;
    tables t;
    tables_init(&t);
    kp_folded *f = create();
    assert_int_equal(kp_folded_add_stack(f, t.frames, t.stacks, t.full, "beam.smp", 2), KP_OK);
    assert_int_equal(kp_folded_add_stack(f, t.frames, t.stacks, t.full, NULL, 3), KP_OK);
    assert_int_equal(kp_folded_add_stack(f, t.frames, t.stacks, t.full, "", 4), KP_OK);
    assert_int_equal(kp_folded_add_stack(f, t.frames, t.stacks, t.empty, "beam.smp", 5), KP_OK);
    add(f, "beam.smp;running;<0.123.0>;erlang:%2B%2B/2;my_mod:loop/1", 10); /* same text */
    assert_written(f, "beam.smp 5\n"
                      "beam.smp;running;<0.123.0>;erlang:%2B%2B/2;my_mod:loop/1 12\n"
                      "running;<0.123.0>;erlang:%2B%2B/2;my_mod:loop/1 7\n");
    /* no frame at all, or a stack id out of range: nothing is added */
    assert_int_equal(kp_folded_add_stack(f, t.frames, t.stacks, t.empty, NULL, 1), KP_ERR_INVAL);
    assert_int_equal(kp_folded_add_stack(f, t.frames, t.stacks, t.empty, "", 1), KP_ERR_INVAL);
    assert_int_equal(
        kp_folded_add_stack(f, t.frames, t.stacks, kp_stacks_count(t.stacks), "beam.smp", 1),
        KP_ERR_INVAL);
    assert_int_equal(kp_folded_lines(f), 3);
    assert_int_equal(kp_folded_total(f), 24);
    kp_folded_free(f);
    tables_free(&t);
}

/* FORMATS.md: stackcollapse of the perf file and the folded writer on the
 * same samples give the same lines (kp_perf_reader folds as stackcollapse). */
static void test_same_lines_as_folding_the_perf_file(void **state)
{
    (void)state;
    tables t;
    tables_init(&t);
    uint32_t ids[3], other;
    assert_int_equal(kp_frames_intern_pseudo(t.frames, "[unknown]", 9, "process", &ids[0]), KP_OK);
    kp_mfa m = {"Elixir.My Mod", 13, "a->b", 4, 0, 0};
    assert_int_equal(kp_frames_intern_mfa(t.frames, &m, &ids[1]), KP_OK);
    assert_int_equal(kp_frames_intern_pseudo(t.frames, "", 0, "status", &ids[2]), KP_OK);
    assert_int_equal(kp_stacks_intern(t.stacks, ids, 3, &other), KP_OK);
    kp_perf_writer *w;
    assert_int_equal(kp_perf_writer_create("beam.smp", "cpu-clock", t.frames, t.stacks, &w), KP_OK);
    kp_folded *direct = create(), *via_perf = create();
    kp_buf text = KP_BUF_INIT;
    const uint32_t order[] = {t.full, other, t.empty, t.full, other, t.full};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        kp_perf_record r = {1, 2, 3, 1000 + i, 1, NULL, 0, order[i]};
        assert_int_equal(kp_perf_writer_format(w, &r, &text), KP_OK);
        assert_int_equal(kp_folded_add_stack(direct, t.frames, t.stacks, order[i], "beam.smp", 1),
                         KP_OK);
    }
    kp_perf_reader *reader = kp_perf_reader_create();
    assert_non_null(reader);
    for (size_t pos = 0; pos < text.len;) {
        const char *line = text.data + pos, *nl = memchr(line, '\n', text.len - pos);
        const kp_perf_sample *s;
        assert_int_equal(kp_perf_reader_line(reader, line, (size_t)(nl - line), &s), KP_OK);
        if (s)
            assert_int_equal(kp_folded_add(via_perf, s->stack, s->stack_len, s->period), KP_OK);
        pos = (size_t)(nl - text.data) + 1;
    }
    size_t len1, len2;
    char *a = written_text(direct, &len1), *b = written_text(via_perf, &len2);
    assert_int_equal(kp_folded_lines(direct), 3);
    assert_string_equal(a, b);
    free(a);
    free(b);
    kp_perf_reader_free(reader);
    kp_buf_free(&text);
    kp_folded_free(direct);
    kp_folded_free(via_perf);
    kp_perf_writer_free(w);
    tables_free(&t);
}

static void test_large_output(void **state)
{
    (void)state;
    kp_folded *f = create();
    char stack[64];
    for (int i = 4999; i >= 0; i--) { /* 5000 lines, over 64 KiB */
        snprintf(stack, sizeof stack, "beam.smp;mod_%05d:function/1", i);
        add(f, stack, (uint64_t)i + 1);
    }
    size_t len;
    char *text = written_text(f, &len);
    assert_true(len > 128 * 1024);
    char why[256];
    if (kp_check_folded(text, len, why, sizeof why) != 0)
        fail_msg("%s", why);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    assert_int_equal(lines, 5000);
    assert_memory_equal(text, "beam.smp;mod_00000:function/1 1\n", 32);
    assert_string_equal(text + len - 35, "beam.smp;mod_04999:function/1 5000\n");
    free(text);
    kp_folded_free(f);
}

static void test_parse_line(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int len; /* -1: strlen */
        int ret;
        const char *stack;
        uint64_t count;
    } cases[] = {
        {"a;b 12", -1, 1, "a;b", 12},
        {"a;b 12\r", -1, 1, "a;b", 12},
        {"a;b\t12", -1, 1, "a;b", 12},
        {"a;b \t 12", -1, 1, "a;b", 12},
        {"a b;c d 3", -1, 1, "a b;c d", 3},
        {"a 0", -1, 1, "a", 0},
        {"a 007", -1, 1, "a", 7},
        {"a 18446744073709551615", -1, 1, "a", UINT64_MAX},
        {"a 12345", 5, 1, "a", 123}, /* not NUL-terminated */
        {"", -1, 0, NULL, 0},
        {"\r", -1, 0, NULL, 0},
        {"a 18446744073709551616", -1, -1, NULL, 0},
        {"a 99999999999999999999", -1, -1, NULL, 0},
        {"a;b", -1, -1, NULL, 0},
        {"a;b12", -1, -1, NULL, 0},
        {"12", -1, -1, NULL, 0},
        {" 12", -1, -1, NULL, 0},
        {"\t12", -1, -1, NULL, 0},
        {"a 12.5", -1, -1, NULL, 0},
        {"a -3", -1, -1, NULL, 0},
        {"a 12 ", -1, -1, NULL, 0},
        {"a 1\r\r", -1, -1, NULL, 0},
    };
    kp_folded_reader_stats stats = {0, 0, 0, 0};
    uint64_t records = 0, malformed = 0, first_malformed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t len = cases[i].len < 0 ? strlen(cases[i].line) : (size_t)cases[i].len;
        const char *stack = NULL;
        size_t stack_len = 0;
        uint64_t count = 0;
        int ret = kp_folded_parse_line(cases[i].line, len, &stack, &stack_len, &count, &stats);
        if (ret != cases[i].ret)
            fail_msg("\"%s\": returned %d, want %d", cases[i].line, ret, cases[i].ret);
        if (ret == 1) {
            assert_ptr_equal(stack, cases[i].line);
            assert_int_equal(stack_len, strlen(cases[i].stack));
            assert_memory_equal(stack, cases[i].stack, stack_len);
            assert_int_equal(count, cases[i].count);
            records++;
        } else if (ret < 0) {
            malformed++;
            if (!first_malformed)
                first_malformed = i + 1;
        }
    }
    assert_int_equal(stats.lines, sizeof cases / sizeof *cases);
    assert_int_equal(stats.records, records);
    assert_int_equal(stats.malformed, malformed);
    assert_int_equal(stats.first_malformed, first_malformed);
}

static void test_create_out_of_memory(void **state)
{
    (void)state;
    long n = 0;
    kp_folded *f;
    for (;; n++) {
        kp_fault_alloc_after(n);
        f = kp_folded_create();
        kp_fault_alloc_reset();
        if (f)
            break;
    }
    assert_true(n >= 1);
    add(f, "a", 1);
    assert_written(f, "a 1\n");
    kp_folded_free(f);
}

/* A failing add returns KP_ERR_NOMEM and adds nothing. The aggregate holds 256
 * stacks first, so the new one needs every table to grow. */
static void test_add_out_of_memory(void **state)
{
    (void)state;
    tables t;
    tables_init(&t);
    kp_folded *f = create();
    char stack[32];
    for (int i = 0; i < 256; i++) {
        snprintf(stack, sizeof stack, "s%03d", i);
        add(f, stack, 1);
    }
    long n = 0;
    kp_status st;
    for (;; n++) {
        kp_fault_alloc_after(n);
        st = kp_folded_add(f, "new", 3, 7);
        kp_fault_alloc_reset();
        if (st == KP_OK)
            break;
        assert_int_equal(st, KP_ERR_NOMEM);
        assert_int_equal(kp_folded_lines(f), 256);
        assert_int_equal(kp_folded_total(f), 256);
    }
    assert_true(n >= 2);
    for (n = 0;; n++) { /* the scratch text of an interned stack, too */
        kp_fault_alloc_after(n);
        st = kp_folded_add_stack(f, t.frames, t.stacks, t.full, "beam.smp", 1);
        kp_fault_alloc_reset();
        if (st == KP_OK)
            break;
        assert_int_equal(st, KP_ERR_NOMEM);
        assert_int_equal(kp_folded_lines(f), 257);
    }
    assert_true(n >= 1);
    assert_int_equal(kp_folded_lines(f), 258);
    assert_int_equal(kp_folded_total(f), 264);
    size_t len;
    char *text = written_text(f, &len);
    assert_non_null(strstr(text, "\nnew 7\n"));
    assert_ptr_equal(strstr(text, "beam.smp;running;<0.123.0>;erlang:%2B%2B/2;my_mod:loop/1 1\n"),
                     text);
    free(text);
    kp_folded_free(f);
    tables_free(&t);
}

/* A failing write returns KP_ERR_NOMEM; the aborted sink leaves no file. */
static void test_write_out_of_memory(void **state)
{
    (void)state;
    kp_folded *f = create();
    add(f, "b", 2);
    add(f, "a", 1);
    char *dir = kp_test_tmpdir();
    assert_non_null(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.folded", dir);
    long n = 0;
    for (;; n++) {
        kp_sink *sink;
        assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
        kp_fault_alloc_after(n);
        kp_status st = kp_folded_write(f, sink);
        kp_fault_alloc_reset();
        if (st == KP_OK) {
            assert_int_equal(kp_sink_commit(sink), KP_OK);
            break;
        }
        assert_int_equal(st, KP_ERR_NOMEM);
        kp_sink_abort(sink);
        assert_int_equal(kp_test_count_files(dir, ""), 0);
    }
    assert_true(n >= 1);
    char *text = kp_test_read_text(path, NULL);
    assert_string_equal(text, "a 1\nb 2\n");
    free(text);
    kp_test_rmdir(dir);
    free(dir);
    kp_folded_free(f);
}

/* Disk full while writing: the error comes back (from kp_folded_write when
 * the sink's buffer overflows, else from kp_sink_commit) and no file is left
 * under the final name or a temporary one. */
static void test_write_failure_leaves_no_file(void **state)
{
    (void)state;
    kp_folded *big = create(), *small = create();
    char stack[64];
    for (int i = 0; i < 5000; i++) {
        snprintf(stack, sizeof stack, "beam.smp;mod_%05d:function/1", i);
        add(big, stack, 1);
    }
    add(small, "a", 1);
    char *dir = kp_test_tmpdir();
    assert_non_null(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.folded", dir);
    const long long budgets[] = {0, 1000, 100000};
    for (size_t i = 0; i < sizeof budgets / sizeof *budgets; i++) {
        kp_sink *sink;
        assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
        kp_fault_write_after(budgets[i], ENOSPC);
        assert_int_equal(kp_folded_write(big, sink), KP_ERR_IO);
        kp_sink_abort(sink);
        kp_fault_write_reset();
        assert_int_equal(kp_test_count_files(dir, ""), 0);
    }
    kp_sink *sink;
    assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
    kp_fault_write_after(0, ENOSPC);
    assert_int_equal(kp_folded_write(small, sink), KP_OK); /* still in the sink's buffer */
    assert_int_equal(kp_sink_commit(sink), KP_ERR_IO);
    assert_int_equal(errno, ENOSPC);
    kp_fault_write_reset();
    assert_int_equal(kp_test_count_files(dir, ""), 0);
    kp_test_rmdir(dir);
    free(dir);
    kp_folded_free(big);
    kp_folded_free(small);
}

static kp_status collect_visit(void *ctx, const char *stack, size_t len, uint64_t weight)
{
    char *out = ctx;
    size_t used = strlen(out);
    snprintf(out + used, 256 - used, "%.*s %llu\n", (int)len, stack, (unsigned long long)weight);
    return strncmp(stack, "stop", 4) == 0 ? KP_ERR_LIMIT : KP_OK;
}

/* Frame order: the stacks under one run of frames come together, whereas
 * bytewise "a;b-x" falls between "a;b" and "a;b;c"; zero weights are skipped;
 * the visitor's error stops the walk and is returned. */
static void test_each_by_frame(void **state)
{
    (void)state;
    kp_folded *f = create();
    add(f, "a;b-x", 1);
    add(f, "a;b;c", 2);
    add(f, "a;b", 3);
    add(f, "a", 4);
    add(f, "zero", 0);
    char out[256] = "";
    assert_int_equal(kp_folded_each_by_frame(f, collect_visit, out), KP_OK);
    assert_string_equal(out, "a 4\na;b 3\na;b;c 2\na;b-x 1\n");
    assert_written(f, "a 4\na;b 3\na;b-x 1\na;b;c 2\n");
    add(f, "stop", 1);
    add(f, "zz", 1);
    out[0] = '\0';
    assert_int_equal(kp_folded_each_by_frame(f, collect_visit, out), KP_ERR_LIMIT);
    assert_string_equal(out, "a 4\na;b 3\na;b;c 2\na;b-x 1\nstop 1\n");
    kp_folded_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_by_frame),
        cmocka_unit_test(test_merges_identical_text),
        cmocka_unit_test(test_sorted_bytewise),
        cmocka_unit_test(test_weights_saturate),
        cmocka_unit_test(test_zero_weights_and_empty_output),
        cmocka_unit_test(test_add_stack_with_and_without_root),
        cmocka_unit_test(test_same_lines_as_folding_the_perf_file),
        cmocka_unit_test(test_large_output),
        cmocka_unit_test(test_parse_line),
        cmocka_unit_test(test_create_out_of_memory),
        cmocka_unit_test(test_add_out_of_memory),
        cmocka_unit_test(test_write_out_of_memory),
        cmocka_unit_test(test_write_failure_leaves_no_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

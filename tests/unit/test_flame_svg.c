/* kp_flame_svg_write: which boxes a flame graph has and where (read back from
 * the file), one box per frame per path even where bytewise order would split
 * it, the 0.1 pixel cut, labels cut to fit, XML escaping of any input, and
 * errors: empty input, bad width, no memory, a full disk. */
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
#include "kp/flame_svg.h"
#include "kp/folded.h"

static kp_folded *folded_of(const char *const *lines, size_t n)
{
    kp_folded *f = kp_folded_create();
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) {
        const char *space = strrchr(lines[i], ' ');
        assert_non_null(space);
        assert_int_equal(
            kp_folded_add(f, lines[i], (size_t)(space - lines[i]), strtoull(space + 1, NULL, 10)),
            KP_OK);
    }
    return f;
}

/* Draws `f` into a file and returns the file's text (caller frees). */
static char *draw(const kp_folded *f, const kp_flame_options *o)
{
    char *dir = kp_test_tmpdir();
    assert_non_null(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.svg", dir);
    kp_sink *sink;
    assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
    assert_int_equal(kp_flame_svg_write(f, o, sink), KP_OK);
    assert_int_equal(kp_sink_commit(sink), KP_OK);
    size_t len;
    char *text = kp_test_read_text(path, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    kp_test_rmdir(dir);
    free(dir);
    return text;
}

/* The boxes of a drawing as "NAME DEPTH X W" lines, in file order: row by
 * row from the root, left to right (the attributes the script reads). */
static char *boxes(const char *svg)
{
    size_t cap = strlen(svg) + 1, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    for (const char *p = strstr(svg, "<g class=\"f\""); p; p = strstr(p + 1, "<g class=\"f\"")) {
        const char *n = strstr(p, "data-n=\"") + 8;
        const char *n_end = strchr(n, '"');
        unsigned long long d, x, w;
        const char *rest = strstr(n_end, "data-d=");
        assert_int_equal(
            sscanf(rest, "data-d=\"%llu\" data-x=\"%llu\" data-w=\"%llu\"", &d, &x, &w), 3);
        len += (size_t)snprintf(out + len, cap - len, "%.*s %llu %llu %llu\n", (int)(n_end - n), n,
                                d, x, w);
    }
    return out;
}

static void assert_boxes(const char *svg, const char *expected)
{
    char *got = boxes(svg);
    if (strcmp(got, expected) != 0)
        fail_msg("boxes:\n%s\nwant:\n%s", got, expected);
    free(got);
}

/* Well-formed enough for a browser: one root, the frames group closed, every
 * box closed, no raw markup character or control byte inside a name. */
static void assert_svg_shape(const char *svg)
{
    assert_true(strncmp(svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"", 36) == 0);
    assert_non_null(strstr(svg, "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\""));
    size_t len = strlen(svg);
    assert_true(len > 12 && strcmp(svg + len - 12, "</g>\n</svg>\n") == 0);
    size_t open = 0, close = 0;
    for (const char *p = svg; (p = strstr(p, "<g class=\"f\"")); p++)
        open++;
    for (const char *p = svg; (p = strstr(p, "</text></g>\n")); p++)
        close++;
    assert_int_equal(open, close);
    for (const char *p = svg; (p = strstr(p, "data-n=\"")); p++) {
        for (const char *c = p + 8; *c != '"'; c++) {
            assert_true(*c != '<' && *c != '>' && *c != '\0');
            assert_true((unsigned char)*c >= 0x20);
        }
    }
}

/* One box per frame on each path from the root, as wide as what passes
 * through it, children left to right in frame order; "all" under them. */
static void test_boxes(void **state)
{
    (void)state;
    static const char *const lines[] = {"a;d 4", "a;b;c 3", "a;b-x;c 1", "a;b 2", "e 10"};
    kp_folded *f = folded_of(lines, 5);
    char *svg = draw(f, NULL);
    assert_svg_shape(svg);
    /* In bytewise order "a;b-x;c" sorts between "a;b" and "a;b;c", which would
     * draw a;b as two boxes: frame order keeps it one. */
    assert_boxes(svg, "all 0 0 20\n"
                      "a 1 0 10\n"
                      "e 1 10 10\n"
                      "b 2 0 5\n"
                      "b-x 2 5 1\n"
                      "d 2 6 4\n"
                      "c 3 2 3\n"
                      "c 3 5 1\n");
    assert_non_null(strstr(svg, "<title>a (10 samples, 50.00%)</title>"));
    assert_non_null(strstr(svg, "<title>all (20 samples, 100.00%)</title>"));
    assert_non_null(strstr(svg, ">Flame graph</text>"));
    free(svg);
    kp_folded_free(f);
}

/* The deepest box is at the top, "all" at the bottom, one row apart each. */
static void test_rows(void **state)
{
    (void)state;
    static const char *const lines[] = {"a;b;c 1"};
    kp_folded *f = folded_of(lines, 1);
    char *svg = draw(f, NULL);
    assert_non_null(strstr(svg, "height=\"140\"")); /* 50 + 4 rows of 16 + 26 */
    const char *c = strstr(svg, "data-n=\"c\"");
    const char *all = strstr(svg, "data-n=\"all\"");
    assert_true(strstr(c, "y=\"50\"") < strstr(c, "</g>"));
    assert_true(strstr(all, "y=\"98\"") < strstr(all, "</g>"));
    free(svg);
    kp_folded_free(f);
}

/* Title, subtitle and unit as given, escaped. */
static void test_options(void **state)
{
    (void)state;
    static const char *const lines[] = {"m:f/1 3"};
    kp_folded *f = folded_of(lines, 1);
    kp_flame_options o = {"Memory of app@host", "<2 & 3>", "bytes", 600};
    char *svg = draw(f, &o);
    assert_non_null(strstr(svg, "width=\"600\""));
    assert_non_null(strstr(svg, ">Memory of app@host</text>"));
    assert_non_null(strstr(svg, ">&lt;2 &amp; 3&gt;</text>"));
    assert_non_null(strstr(svg, "<title>m:f/1 (3 bytes, 100.00%)</title>"));
    free(svg);
    kp_folded_free(f);
}

/* A box narrower than 0.1 pixel is left out with what is above it. */
static void test_narrow_boxes_left_out(void **state)
{
    (void)state;
    static const char *const lines[] = {"a;big 1000000", "a;tiny;above 1", "a;edge 100"};
    kp_folded *f = folded_of(lines, 3);
    char *svg = draw(f, NULL);
    /* 1180 px for 1,000,101: 1 is 0.001 px, 100 is 0.12 px */
    assert_boxes(svg, "all 0 0 1000101\n"
                      "a 1 0 1000101\n"
                      "big 2 0 1000000\n"
                      "edge 2 1000000 100\n");
    free(svg);
    kp_folded_free(f);
}

/* Names are escaped for XML; control bytes and invalid UTF-8 become '?', so
 * that no input can make the file unreadable; valid UTF-8 stays. */
static void test_escaping(void **state)
{
    (void)state;
    static const char *const lines[] = {"<0.12.0>;a&b\"c 1", "bad\xff\x01;caf\xc3\xa9 2"};
    kp_folded *f = folded_of(lines, 2);
    char *svg = draw(f, NULL);
    assert_svg_shape(svg);
    assert_non_null(strstr(svg, "data-n=\"&lt;0.12.0&gt;\""));
    assert_non_null(strstr(svg, "data-n=\"a&amp;b&quot;c\""));
    assert_non_null(strstr(svg, "data-n=\"bad??\""));
    assert_non_null(strstr(svg, "data-n=\"caf\xc3\xa9\""));
    free(svg);
    kp_folded_free(f);
}

/* The fill of the box whose data-n is `name` (the first such box). */
static void fill_of(const char *svg, const char *name, char *out, size_t cap)
{
    char key[256];
    snprintf(key, sizeof key, "data-n=\"%s\"", name);
    const char *box = strstr(svg, key);
    assert_non_null(box);
    const char *fill = strstr(box, "fill=\"") + 6;
    size_t len = (size_t)(strchr(fill, '"') - fill);
    assert_true(len < cap);
    memcpy(out, fill, len);
    out[len] = '\0';
}

/* Frames are shown readable, their percent-encoding undone (and the text
 * XML-escaped after); Elixir functions are code, coloured by module like
 * Erlang ones: warm, the red channel from 205 up. */
static void test_readable_names_and_code_colours(void **state)
{
    (void)state;
    static const char *const lines[] = {
        "<0.1.0>;MyApp.Hot.run/0;anonymous%20fn/1%20in%20MyApp.Hot.spin/2 3",
        "<0.1.0>;MyApp.Hot.%22a%3Cb%22/0 1", "<0.1.0>;erlang:%2B%2B/2 1", "<0.1.0>;sleep 1"};
    kp_folded *f = folded_of(lines, 4);
    char *svg = draw(f, NULL);
    assert_svg_shape(svg);
    assert_non_null(strstr(svg, "data-n=\"anonymous fn/1 in MyApp.Hot.spin/2\""));
    assert_non_null(strstr(svg, "<title>anonymous fn/1 in MyApp.Hot.spin/2 (3 samples"));
    assert_non_null(strstr(svg, "data-n=\"MyApp.Hot.&quot;a&lt;b&quot;/0\""));
    assert_non_null(strstr(svg, "data-n=\"erlang:++/2\""));
    assert_null(strstr(svg, "%20"));
    char code[64], other[64];
    unsigned r, g, b;
    static const char *const functions[] = {"MyApp.Hot.run/0", "anonymous fn/1 in MyApp.Hot.spin/2",
                                            "erlang:++/2"};
    for (size_t i = 0; i < 3; i++) {
        fill_of(svg, functions[i], code, sizeof code);
        assert_int_equal(sscanf(code, "rgb(%u,%u,%u)", &r, &g, &b), 3);
        assert_true(r >= 205);
    }
    fill_of(svg, "sleep", other, sizeof other);
    assert_int_equal(sscanf(other, "rgb(%u,%u,%u)", &r, &g, &b), 3);
    assert_true(r < 205);
    /* one module, one shade: the green channel follows the module alone */
    char run[64], spin[64];
    unsigned g1, g2;
    fill_of(svg, "MyApp.Hot.run/0", run, sizeof run);
    fill_of(svg, "anonymous fn/1 in MyApp.Hot.spin/2", spin, sizeof spin);
    assert_int_equal(sscanf(run, "rgb(%*u,%u,", &g1), 1);
    assert_int_equal(sscanf(spin, "rgb(%*u,%u,", &g2), 1);
    assert_int_equal(g1, g2);
    free(svg);
    kp_folded_free(f);
}

/* A label is cut to what fits its box (7.2 px a character, 3 px margins),
 * ending in "..", and left out below 3 characters. */
static void test_labels(void **state)
{
    (void)state;
    static const char *const lines[] = {"a_long_module_name:a_long_function_name/3 1",
                                        "short:f/0 1", "x 198"};
    kp_folded *f = folded_of(lines, 3);
    char *svg = draw(f, NULL);
    /* 1180 px for 200: 5.9 px each; the long frame gets no label */
    const char *lng = strstr(svg, "data-n=\"a_long_module_name");
    assert_non_null(strstr(lng, "\"></text></g>"));
    assert_true(strstr(lng, "\"></text></g>") < strstr(lng, "</g>"));
    free(svg);
    kp_folded_free(f);

    static const char *const two[] = {"a_long_module_name:a_long_function_name/3 1", "x 9"};
    f = folded_of(two, 2);
    svg = draw(f, NULL);
    /* 118 px: (118 - 6) / 7.2 = 15 characters, 13 of the name and ".." */
    assert_non_null(strstr(svg, ">a_long_module..</text>"));
    free(svg);
    kp_folded_free(f);
}

static void test_errors(void **state)
{
    (void)state;
    kp_folded *f = kp_folded_create();
    assert_non_null(f);
    char *dir = kp_test_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/out.svg", dir);
    kp_sink *sink;
    assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
    assert_int_equal(kp_flame_svg_write(f, NULL, sink), KP_ERR_EMPTY);
    assert_int_equal(kp_folded_add(f, "a", 1, 1), KP_OK);
    kp_flame_options narrow = {NULL, NULL, NULL, 199};
    assert_int_equal(kp_flame_svg_write(f, &narrow, sink), KP_ERR_INVAL);
    kp_sink_abort(sink);
    assert_int_equal(kp_test_count_files(dir, ""), 0);
    kp_test_rmdir(dir);
    free(dir);
    kp_folded_free(f);
}

/* Out of memory at any allocation: KP_ERR_NOMEM, nothing leaked (the
 * sanitizer build checks that), and the same drawing once memory is back. */
static void test_out_of_memory(void **state)
{
    (void)state;
    static const char *const lines[] = {"a;b;c 3", "a;b 2", "a;d 4"};
    kp_folded *f = folded_of(lines, 3);
    char *dir = kp_test_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/out.svg", dir);
    long n = 0;
    for (;; n++) {
        kp_sink *sink;
        assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
        kp_fault_alloc_after(n);
        kp_status st = kp_flame_svg_write(f, NULL, sink);
        kp_fault_alloc_reset();
        kp_sink_abort(sink);
        if (st == KP_OK)
            break;
        assert_int_equal(st, KP_ERR_NOMEM);
    }
    assert_true(n >= 3);
    kp_test_rmdir(dir);
    free(dir);
    kp_folded_free(f);
}

/* A full disk: the sink's error, and no file left behind once aborted. */
static void test_disk_full(void **state)
{
    (void)state;
    static const char *const lines[] = {"a;b 1"};
    kp_folded *f = folded_of(lines, 1);
    char *dir = kp_test_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/out.svg", dir);
    kp_sink *sink;
    assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink), KP_OK);
    kp_fault_write_after(100, ENOSPC);
    kp_status st = kp_flame_svg_write(f, NULL, sink);
    if (st == KP_OK)
        st = kp_sink_commit(sink);
    else
        kp_sink_abort(sink);
    kp_fault_write_reset();
    assert_int_equal(st, KP_ERR_IO);
    assert_int_equal(kp_test_count_files(dir, ""), 0);
    kp_test_rmdir(dir);
    free(dir);
    kp_folded_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boxes),     cmocka_unit_test(test_rows),
        cmocka_unit_test(test_options),   cmocka_unit_test(test_narrow_boxes_left_out),
        cmocka_unit_test(test_escaping),  cmocka_unit_test(test_labels),
        cmocka_unit_test(test_errors),    cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_disk_full), cmocka_unit_test(test_readable_names_and_code_colours),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

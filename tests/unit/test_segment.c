/* kp_segment: rotating perf-script files. Every visible segment, at any
 * moment, is a complete file that FORMATS.md accepts; nothing else (no
 * temporaries, no single-sample files) is ever left behind. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "faults.h"
#include "format_check.h"
#include "kp/segment.h"

#define HEADER "# kprof test recording\n# clock: monotonic\n"
#define MAX_FILES 64

static int setup_dir(void **state)
{
    *state = kp_test_tmpdir();
    return *state ? 0 : -1;
}

static int teardown_dir(void **state)
{
    kp_fault_alloc_reset();
    kp_fault_write_reset();
    kp_test_rmdir(*state);
    free(*state);
    return 0;
}

/* Removes every file of `dir`, which stays (teardown removes it). */
static void empty_dir(const char *dir)
{
    kp_test_rmdir(dir);
    assert_int_equal(mkdir(dir, 0700), 0);
}

static kp_segment_config config(const char *dir, kp_compression c)
{
    kp_segment_config cfg = {dir, "samples", "perf", c, 0, 0, 0, 0, HEADER};
    return cfg;
}

/* Sample `i` at 100 ms intervals (never on a whole second), with frames that
 * name it, so every sample's text is distinct. */
static size_t sample(char *buf, size_t cap, unsigned i, uint64_t *time_us)
{
    uint64_t t = 1700000000000001ull + (uint64_t)i * 100000u;
    *time_us = t;
    int n = snprintf(buf, cap,
                     "beam.smp 4242/%u [000] %llu.%06llu: 1 cpu-clock:\n"
                     "\t7f0000000000 my_mod:work_%u/1 (my_mod.beam)\n"
                     "\t%x <0.%u.0> (process)\n"
                     "\n",
                     100 + i % 7, (unsigned long long)(t / 1000000),
                     (unsigned long long)(t % 1000000), i, i % 7 + 1, 100 + i % 7);
    return (size_t)n;
}

/* Visible (not dot-prefixed) files of `dir`, sorted by name. */
typedef struct {
    size_t n;
    char name[MAX_FILES][64];
    char *text[MAX_FILES]; /* decompressed content */
    size_t len[MAX_FILES];
} listing;

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void list_files(const char *dir, listing *l)
{
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        assert_true(l->n < MAX_FILES);
        assert_true(strlen(e->d_name) < sizeof l->name[0]);
        strcpy(l->name[l->n++], e->d_name);
    }
    closedir(d);
    qsort(l->name, l->n, sizeof l->name[0], by_name);
    for (size_t i = 0; i < l->n; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, l->name[i]);
        l->text[i] = kp_test_read_text(path, &l->len[i]);
        assert_non_null(l->text[i]);
    }
}

static void free_listing(listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->text[i]);
    l->n = 0;
}

static size_t count_samples(const char *text)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, "\n\n")) != NULL; p += 2)
        n++;
    return n;
}

/* A segment as FORMATS.md wants it: the checker passes, our header comes
 * first, 2 samples or more, and the text ends with an empty line. */
static void assert_valid_segment(const char *name, const char *text, size_t len)
{
    char why[256] = "";
    int violations = kp_check_perf(text, len, why, sizeof why);
    if (violations)
        fail_msg("%s: %d violations, first: %s", name, violations, why);
    assert_true(len > strlen(HEADER));
    assert_memory_equal(text, HEADER, strlen(HEADER));
    assert_true(count_samples(text) >= 2);
    assert_true(len >= 2 && text[len - 2] == '\n' && text[len - 1] == '\n');
    assert_int_equal(kp_check_file_name(name, why, sizeof why), 0);
}

/* Every visible file is a valid segment named samples-NNNNNN.perf[.gz|.zst],
 * numbered consecutively from `first`. */
static void assert_segments(const listing *l, unsigned first, kp_compression c)
{
    const char *suffix = kp_compression_suffix(c);
    for (size_t i = 0; i < l->n; i++) {
        char want[64];
        snprintf(want, sizeof want, "samples-%06u.perf%s", first + (unsigned)i, suffix);
        assert_string_equal(l->name[i], want);
        assert_valid_segment(l->name[i], l->text[i], l->len[i]);
    }
}

/* After close: the segments and nothing else (no dot-prefixed temporary). */
static void assert_closed(const char *dir, const listing *l, unsigned first, kp_compression c)
{
    assert_segments(l, first, c);
    assert_int_equal(kp_test_count_files(dir, "."), 0);
    assert_int_equal(kp_test_count_files(dir, ""), l->n);
}

/* The samples of all segments, in order, without the headers. */
static char *joined_samples(const listing *l)
{
    size_t total = 1;
    for (size_t i = 0; i < l->n; i++)
        total += l->len[i];
    char *out = malloc(total), *p = out;
    for (size_t i = 0; i < l->n; i++) {
        size_t h = strlen(HEADER);
        memcpy(p, l->text[i] + h, l->len[i] - h);
        p += l->len[i] - h;
    }
    *p = '\0';
    return out;
}

/* Writes samples [from, to) and returns their text joined. */
static char *write_samples(kp_segment_writer *w, unsigned from, unsigned to)
{
    size_t cap = (size_t)(to - from) * 256 + 1, len = 0;
    char *all = malloc(cap);
    all[0] = '\0';
    for (unsigned i = from; i < to; i++) {
        uint64_t t;
        size_t n = sample(all + len, cap - len, i, &t);
        assert_int_equal(kp_segment_write(w, all + len, n, t), KP_OK);
        len += n;
    }
    return all;
}

static void test_rotation_by_size(void **state)
{
    const char *dir = *state;
    kp_segment_config cfg = config(dir, KP_COMPRESS_NONE);
    cfg.rotate_bytes = 1000;
    kp_segment_writer *w;
    assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
    assert_string_equal(kp_segment_last_path(w), "");
    char buf[256], all[100 * 256] = "";
    size_t all_len = 0, max_sample = 0;
    listing l;
    for (unsigned i = 0; i < 100; i++) {
        uint64_t t;
        size_t n = sample(buf, sizeof buf, i, &t);
        max_sample = n > max_sample ? n : max_sample;
        assert_int_equal(kp_segment_write(w, buf, n, t), KP_OK);
        memcpy(all + all_len, buf, n + 1);
        all_len += n;
        /* at every moment, what a viewer can see is complete */
        list_files(dir, &l);
        assert_segments(&l, 1, KP_COMPRESS_NONE);
        assert_true(kp_test_count_files(dir, ".") <= 2); /* current and next */
        if (l.n) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", dir, l.name[l.n - 1]);
            assert_string_equal(kp_segment_last_path(w), path);
        }
        free_listing(&l);
    }
    const kp_segment_stats *live = kp_segment_stats_get(w);
    assert_int_equal(live->samples, 100);
    assert_true(live->segments >= 10);
    kp_segment_stats stats;
    assert_int_equal(kp_segment_close(w, &stats), KP_OK);

    list_files(dir, &l);
    assert_closed(dir, &l, 1, KP_COMPRESS_NONE);
    assert_int_equal(stats.segments, l.n);
    assert_int_equal(stats.samples, 100);
    assert_int_equal(stats.removed, 0);
    assert_int_equal(stats.dropped, 0);
    size_t bytes = 0;
    for (size_t i = 0; i < l.n; i++) {
        bytes += l.len[i];
        /* a segment closes at the first sample that takes it past the size */
        if (i + 1 < l.n) {
            assert_true(l.len[i] >= 1000);
            assert_true(l.len[i] < 1000 + max_sample);
        }
    }
    assert_int_equal(stats.bytes, bytes);
    char *joined = joined_samples(&l);
    assert_string_equal(joined, all); /* every sample once, in order */
    free(joined);
    free_listing(&l);
}

static void test_rotation_by_time(void **state)
{
    const char *dir = *state;
    kp_segment_config cfg = config(dir, KP_COMPRESS_NONE);
    cfg.rotate_us = 1000000; /* samples come every 100 ms */
    kp_segment_writer *w;
    assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
    char *all = write_samples(w, 0, 55);
    kp_segment_stats stats;
    assert_int_equal(kp_segment_close(w, &stats), KP_OK);
    listing l;
    list_files(dir, &l);
    assert_closed(dir, &l, 1, KP_COMPRESS_NONE);
    assert_int_equal(l.n, 6);
    assert_int_equal(stats.segments, 6);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(count_samples(l.text[i]), 10); /* one second each */
    assert_int_equal(count_samples(l.text[5]), 5);
    /* the first sample of segment 2 is sample 10, at 1700000001.000001 */
    assert_non_null(strstr(l.text[1], HEADER "beam.smp 4242/103 [000] 1700000001.000001:"));
    char *joined = joined_samples(&l);
    assert_string_equal(joined, all);
    free(joined);
    free(all);
    free_listing(&l);
}

/* With rotation after every 2 samples: a lone last sample joins the segment
 * before it, so no segment ever has fewer than 2. */
static void test_single_trailing_sample(void **state)
{
    const char *dir = *state;
    static const size_t want[][4] = {
        /* samples written, then samples in segments 1, 2, 3 */
        {2, 2, 0, 0}, {3, 3, 0, 0}, {4, 2, 2, 0}, {5, 2, 3, 0}, {7, 2, 2, 3},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        kp_segment_config cfg = config(dir, KP_COMPRESS_NONE);
        cfg.rotate_bytes = 1;
        kp_segment_writer *w;
        assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
        char *all = write_samples(w, 0, (unsigned)want[k][0]);
        kp_segment_stats stats;
        assert_int_equal(kp_segment_close(w, &stats), KP_OK);
        listing l;
        list_files(dir, &l);
        assert_closed(dir, &l, 1, KP_COMPRESS_NONE);
        size_t n_segments = want[k][3] ? 3 : want[k][2] ? 2 : 1;
        assert_int_equal(l.n, n_segments);
        assert_int_equal(stats.segments, n_segments);
        assert_int_equal(stats.dropped, 0);
        for (size_t i = 0; i < n_segments; i++)
            assert_int_equal(count_samples(l.text[i]), want[k][i + 1]);
        char *joined = joined_samples(&l);
        assert_string_equal(joined, all);
        free(joined);
        free(all);
        free_listing(&l);
        empty_dir(dir);
    }
}

static void test_one_sample_leaves_nothing(void **state)
{
    const char *dir = *state;
    kp_segment_config cfg = config(dir, KP_COMPRESS_GZIP);
    kp_segment_writer *w;
    assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
    assert_int_equal(kp_test_count_files(dir, ""), 0); /* nothing before a sample */
    free(write_samples(w, 0, 1));
    kp_segment_stats stats;
    assert_int_equal(kp_segment_close(w, &stats), KP_ERR_EMPTY);
    assert_int_equal(stats.dropped, 1);
    assert_int_equal(stats.segments, 0);
    assert_int_equal(kp_test_count_files(dir, ""), 0);

    /* no sample at all: no file either */
    assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
    kp_status st = kp_segment_close(w, &stats);
    assert_true(st == KP_OK || st == KP_ERR_EMPTY);
    assert_int_equal(stats.segments, 0);
    assert_int_equal(kp_test_count_files(dir, ""), 0);
}

static void test_keep_newest(void **state)
{
    const char *dir = *state;
    kp_segment_config cfg = config(dir, KP_COMPRESS_ZSTD);
    cfg.rotate_us = 1; /* a segment every 2 samples: 10 segments */
    cfg.keep = 3;
    kp_segment_writer *w;
    assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
    listing l;
    for (unsigned i = 0; i < 21; i++) {
        free(write_samples(w, i, i + 1));
        list_files(dir, &l);
        assert_true(l.n <= 3);
        free_listing(&l);
    }
    kp_segment_stats stats;
    assert_int_equal(kp_segment_close(w, &stats), KP_OK);
    assert_int_equal(stats.segments, 10);
    assert_int_equal(stats.removed, 7);
    assert_int_equal(stats.samples, 21);
    list_files(dir, &l);
    assert_int_equal(l.n, 3);
    assert_closed(dir, &l, 8, KP_COMPRESS_ZSTD); /* the newest: 8, 9, 10 */
    assert_int_equal(count_samples(l.text[2]), 3);
    free_listing(&l);
}

static void test_compressed_segments(void **state)
{
    const char *dir = *state;
    const kp_compression cs[] = {KP_COMPRESS_GZIP, KP_COMPRESS_ZSTD};
    for (size_t k = 0; k < 2; k++) {
        kp_segment_config cfg = config(dir, cs[k]);
        cfg.rotate_bytes = 4096; /* compressed bytes */
        cfg.level = 1;
        kp_segment_writer *w;
        assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
        char *all = write_samples(w, 0, 20000);
        kp_segment_stats stats;
        assert_int_equal(kp_segment_close(w, &stats), KP_OK);
        listing l;
        list_files(dir, &l);
        assert_true(l.n >= 2);
        assert_int_equal(stats.segments, l.n);
        assert_closed(dir, &l, 1, cs[k]);
        char *joined = joined_samples(&l);
        assert_string_equal(joined, all);
        free(joined);
        free(all);
        free_listing(&l);
        empty_dir(dir);
    }
}

static void test_invalid_config(void **state)
{
    const char *dir = *state;
    kp_segment_config bad[12];
    for (size_t i = 0; i < 12; i++)
        bad[i] = config(dir, KP_COMPRESS_NONE);
    bad[0].dir = NULL;
    bad[1].prefix = "";
    bad[2].prefix = "a/b";    /* would write elsewhere */
    bad[3].prefix = "my run"; /* space */
    bad[4].prefix = "x~1";    /* breaks FlameScope's listing */
    bad[5].extension = "";
    bad[6].extension = "pe/rf";
    bad[7].header = "no comment\n";
    bad[8].header = "# no newline";
    bad[9].header = "#!/bin/sh\n";      /* libmagic: a script */
    bad[10].header = "# ok\n\n# gap\n"; /* an empty line ends a sample */
    bad[11].header = "#include <x>\n";  /* libmagic: C source */
    for (size_t i = 0; i < 12; i++) {
        kp_segment_writer *w = NULL;
        assert_int_equal(kp_segment_open(&bad[i], &w), KP_ERR_INVAL);
        assert_null(w);
    }
    assert_int_equal(kp_test_count_files(dir, ""), 0);
    /* no header at all is fine */
    kp_segment_config ok = config(dir, KP_COMPRESS_NONE);
    ok.header = NULL;
    kp_segment_writer *w;
    assert_int_equal(kp_segment_open(&ok, &w), KP_OK);
    assert_int_equal(kp_segment_close(w, NULL), KP_OK);
}

/* Bytes stored in the files of `dir`. */
static long long disk_bytes(const char *dir, const listing *l)
{
    long long total = 0;
    for (size_t i = 0; i < l->n; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, l->name[i]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        total += ftell(f);
        fclose(f);
    }
    return total;
}

/* Records 60 samples (a segment every 10, 1 second) on a disk that fills
 * after `budget` bytes (never when negative) and checks the outcome: the
 * error is KP_ERR_IO, sticky, returned by close too; the segments completed
 * before it are still there, unchanged; no temporary and no partial file.
 * Returns the bytes on disk at the end. */
static long long record_on_full_disk(const char *dir, kp_compression c, long long budget)
{
    kp_segment_config cfg = config(dir, c);
    cfg.rotate_us = 1000000;
    kp_segment_writer *w;
    assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
    if (budget >= 0)
        kp_fault_write_after(budget, ENOSPC);
    listing before, now;
    memset(&before, 0, sizeof before);
    uint64_t segments = 0;
    kp_status error = KP_OK;
    char buf[256];
    for (unsigned i = 0; i < 60; i++) {
        uint64_t t;
        size_t n = sample(buf, sizeof buf, i, &t);
        kp_status st = kp_segment_write(w, buf, n, t);
        if (error != KP_OK) {
            assert_int_equal(st, error); /* sticky */
        } else if (st != KP_OK) {
            assert_int_equal(st, KP_ERR_IO);
            error = st;
        } else if (kp_segment_stats_get(w)->segments != segments) {
            segments = kp_segment_stats_get(w)->segments;
            free_listing(&before);
            list_files(dir, &before); /* the segments complete so far */
        }
    }
    kp_segment_stats stats;
    kp_status closed = kp_segment_close(w, &stats);
    kp_fault_write_reset();
    if (error != KP_OK)
        assert_int_equal(closed, error);
    else if (budget < 0)
        assert_int_equal(closed, KP_OK);
    else if (closed != KP_OK)
        assert_int_equal(closed, KP_ERR_IO); /* only the last segment failed */

    list_files(dir, &now);
    assert_closed(dir, &now, 1, c);
    assert_int_equal(stats.segments, now.n);
    if (closed != KP_OK) {
        assert_int_equal(now.n, before.n);
        for (size_t i = 0; i < now.n; i++) {
            assert_string_equal(now.name[i], before.name[i]);
            assert_int_equal(now.len[i], before.len[i]);
            assert_memory_equal(now.text[i], before.text[i], now.len[i]);
        }
    } else {
        char *joined = joined_samples(&now);
        assert_int_equal(count_samples(joined), 60);
        free(joined);
    }
    long long total = disk_bytes(dir, &now);
    free_listing(&before);
    free_listing(&now);
    empty_dir(dir);
    return total;
}

static void test_disk_full(void **state)
{
    const char *dir = *state;
    const kp_compression cs[] = {KP_COMPRESS_NONE, KP_COMPRESS_GZIP, KP_COMPRESS_ZSTD};
    for (size_t k = 0; k < 3; k++) {
        long long total = record_on_full_disk(dir, cs[k], -1);
        assert_true(total > 600);
        /* from nothing written to the last bytes of the last segment */
        for (long long b = 0; b < total; b += total / 23 + 1)
            record_on_full_disk(dir, cs[k], b);
        record_on_full_disk(dir, cs[k], total - 1);
        assert_int_equal(record_on_full_disk(dir, cs[k], total), total);
    }
}

static void test_open_out_of_memory(void **state)
{
    const char *dir = *state;
    kp_segment_config cfg = config(dir, KP_COMPRESS_NONE);
    for (long n = 0;; n++) {
        assert_true(n < 100);
        kp_segment_writer *w = NULL;
        kp_fault_alloc_after(n);
        kp_status st = kp_segment_open(&cfg, &w);
        kp_fault_alloc_reset();
        if (st == KP_OK) {
            char *all = write_samples(w, 0, 3);
            assert_int_equal(kp_segment_close(w, NULL), KP_OK);
            free(all);
            break;
        }
        assert_int_equal(st, KP_ERR_NOMEM);
    }
    listing l;
    list_files(dir, &l);
    assert_int_equal(l.n, 1);
    assert_closed(dir, &l, 1, KP_COMPRESS_NONE);
    free_listing(&l);
}

/* A second recording into the same directory continues the numbering and
 * leaves the first recording's segments as they were. */
static void test_second_run_does_not_overwrite(void **state)
{
    const char *dir = *state;
    kp_segment_config cfg = config(dir, KP_COMPRESS_NONE);
    kp_segment_writer *w;
    assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
    char *first = write_samples(w, 0, 3);
    assert_int_equal(kp_segment_close(w, NULL), KP_OK);
    assert_int_equal(kp_segment_open(&cfg, &w), KP_OK);
    char *second = write_samples(w, 10, 14);
    assert_int_equal(kp_segment_close(w, NULL), KP_OK);
    listing l;
    list_files(dir, &l);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.name[0], "samples-000001.perf");
    assert_string_equal(l.name[1], "samples-000002.perf");
    assert_non_null(strstr(l.text[0], first));
    assert_non_null(strstr(l.text[1], second));
    free(first);
    free(second);
    free_listing(&l);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_rotation_by_size),
        T(test_rotation_by_time),
        T(test_single_trailing_sample),
        T(test_one_sample_leaves_nothing),
        T(test_keep_newest),
        T(test_compressed_segments),
        T(test_invalid_config),
        T(test_disk_full),
        T(test_open_out_of_memory),
        T(test_second_run_does_not_overwrite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

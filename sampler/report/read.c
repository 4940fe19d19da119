#define _GNU_SOURCE
#include "report/read.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/batches.h"
#include "common/cli.h"
#include "cpu/debug_names.h"
#include "kp/perf_reader.h"
#include "kp/source.h"
#include "kp/weights.h"

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The header comments kprof writes: "# kprof sampling of NODE" (or "# kprof
 * native CPU sampling of NODE: ...") and "# clock: ...; MONO = WALL seconds
 * since the epoch (UTC)". */
static void header_comment(const char *line, size_t len, kp_report_read_stats *st)
{
    char text[512];
    if (len >= sizeof text)
        return;
    memcpy(text, line, len);
    text[len] = 0;
    if (has_prefix(text, "# kprof sampling of ") && !st->node[0])
        snprintf(st->node, sizeof st->node, "%.255s", text + strlen("# kprof sampling of "));
    const char *c = strstr(text, "# clock: ");
    unsigned long long mono, wall;
    const char *semi = c ? strchr(c, ';') : NULL;
    if (semi && sscanf(semi + 1, " %llu = %llu seconds", &mono, &wall) == 2 &&
        !st->wall_minus_clock_us)
        st->wall_minus_clock_us = (int64_t)wall * 1000000 - (int64_t)mono;
}

/* A sample as the reader thread hands it to the aggregating one, in a
 * batch: this head, then the stack's bytes, padded to 8. */
typedef struct {
    uint64_t time_ns;
    uint32_t stack_len;
    uint32_t cpu; /* of a cpu-NNNNNN segment */
    int64_t w[KP_WEIGHT_COUNT];
} sample_head;

#define BATCH_BYTES (1u << 20)
#define BATCHES 4

/* What the reader thread reads, and what it found. */
typedef struct {
    const char *dir;
    char **names; /* the segments, in time order */
    size_t n;
    kp_batches *batches;
    kp_report_read_stats *st; /* the reader's until it is joined */
    int rc;
    char err[4400]; /* a path and why */
    /* names the native samples' unnamed functions from debug files
     * installed since; NULL when the recording lists no files */
    kp_debug_names *debug_names;
    kp_buf renamed;
} reader;

/* Parses segment `path` into the batches. Returns an exit code, with its
 * message in rd->err; KP_EXIT_OK too when the taker stopped. */
static int read_segment(reader *rd, int cpu, const char *path, kp_buf **batch)
{
    kp_report_read_stats *st = rd->st;
    kp_source *in;
    kp_status s = kp_source_open(path, &in);
    if (s != KP_OK) {
        snprintf(rd->err, sizeof rd->err, "cannot read %s: %s; check the path and its permissions",
                 path, strerror(errno));
        return KP_EXIT_FAILURE;
    }
    kp_perf_reader *parser = kp_perf_reader_create();
    if (!parser) {
        kp_source_close(in);
        snprintf(rd->err, sizeof rd->err, "out of memory reading %s", path);
        return KP_EXIT_FAILURE;
    }
    const char *line;
    size_t len;
    int rc = KP_EXIT_OK;
    while (*batch && (s = kp_source_next_line(in, &line, &len)) == KP_OK) {
        if (len && line[0] == '#') {
            header_comment(line, len, st);
            continue;
        }
        const kp_perf_sample *sample;
        s = kp_perf_reader_line(parser, line, len, &sample);
        const char *stack = sample ? sample->stack : NULL;
        size_t stack_len = sample ? sample->stack_len : 0;
        if (s == KP_OK && sample && cpu && rd->debug_names) {
            int r = kp_debug_names_rewrite(rd->debug_names, stack, stack_len, &rd->renamed);
            if (r < 0)
                s = KP_ERR_NOMEM;
            else if (r > 0) {
                stack = rd->renamed.data;
                stack_len = rd->renamed.len;
            }
        }
        if (s == KP_OK && sample && sample->has_time) {
            sample_head h = {sample->time_ns, (uint32_t)stack_len, (uint32_t)cpu, {1}};
            if (!cpu)
                kp_weights_from_perf(sample->metrics, sample->n_metrics, h.w);
            static const char pad[8];
            s = kp_buf_append(*batch, &h, sizeof h);
            if (s == KP_OK)
                s = kp_buf_append(*batch, stack, stack_len);
            if (s == KP_OK)
                s = kp_buf_append(*batch, pad, (8 - stack_len % 8) % 8);
            *(cpu ? &st->cpu_samples : &st->samples) += 1;
            if (s == KP_OK && (*batch)->len >= BATCH_BYTES) {
                kp_batches_pass(rd->batches);
                *batch = kp_batches_fill(rd->batches);
            }
        }
        if (s != KP_OK)
            break;
    }
    if (*batch && s != KP_ERR_EMPTY) {
        snprintf(rd->err, sizeof rd->err, "%s: %s", path,
                 s == KP_ERR_COMPRESS ? "corrupt or truncated compressed data; a segment being "
                                        "written is complete only when kprof record ends"
                 : s == KP_ERR_NOMEM  ? "out of memory"
                                      : "read error");
        rc = s == KP_ERR_COMPRESS || s == KP_ERR_LIMIT ? KP_EXIT_DATA : KP_EXIT_FAILURE;
    }
    st->malformed += kp_perf_reader_stats_get(parser)->malformed;
    kp_perf_reader_free(parser);
    kp_source_close(in);
    return rc;
}

/* The reader thread: every segment, in order, into the batches. */
static void *read_segments(void *arg)
{
    reader *rd = arg;
    kp_buf *batch = kp_batches_fill(rd->batches);
    for (size_t i = 0; i < rd->n && batch && rd->rc == KP_EXIT_OK; i++) {
        int cpu = has_prefix(rd->names[i], "cpu-");
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", rd->dir, rd->names[i]);
        rd->rc = read_segment(rd, cpu, path, &batch);
        *(cpu ? &rd->st->cpu_segments : &rd->st->segments) += 1;
    }
    if (batch)
        kp_batches_pass(rd->batches);
    kp_batches_close(rd->batches);
    return NULL;
}

/* Adds the samples of the batches to recording `recording` of `r` until
 * the last batch or an error (then it stops the reader). Returns KP_OK or
 * kp_report_add's error. */
static kp_status aggregate(kp_report *r, unsigned recording, kp_batches *batches)
{
    kp_report_source *src[2] = {NULL, NULL};
    kp_status s = KP_OK;
    const kp_buf *b;
    while (s == KP_OK && (b = kp_batches_take(batches))) {
        for (size_t at = 0; s == KP_OK && at < b->len;) {
            sample_head h;
            memcpy(&h, b->data + at, sizeof h);
            const char *stack = b->data + at + sizeof h;
            at += sizeof h + h.stack_len + (8 - h.stack_len % 8) % 8;
            if (!src[h.cpu] && !(src[h.cpu] = kp_report_get_source(
                                     r, recording, h.cpu ? KP_REPORT_CPU : KP_REPORT_SAMPLES)))
                s = KP_ERR_NOMEM;
            if (s == KP_OK)
                s = kp_report_add(r, src[h.cpu], h.time_ns, stack, h.stack_len, h.w);
        }
        kp_batches_done(batches);
    }
    if (s != KP_OK)
        kp_batches_stop(batches);
    while (kp_batches_take(batches)) /* until the reader sees the stop */
        kp_batches_done(batches);
    return s;
}

/* Reads the segments `names[0..n)` of `dir`: a thread parses them while
 * this one aggregates (about half of the work each). */
static int read_segments_into(kp_report *r, unsigned recording, const char *dir, char **names,
                              size_t n, kp_report_read_stats *st, char *err, size_t err_len)
{
    reader rd = {dir,        names,      n,  kp_batches_create(BATCHES),
                 st,         KP_EXIT_OK, "", kp_debug_names_open(dir, getenv("KPROF_DEBUG_ROOT")),
                 KP_BUF_INIT};
    pthread_t t;
    if (!rd.batches || pthread_create(&t, NULL, read_segments, &rd) != 0) {
        kp_batches_free(rd.batches);
        kp_debug_names_free(rd.debug_names);
        snprintf(err, err_len, "out of memory reading %s", dir);
        return KP_EXIT_FAILURE;
    }
    kp_status s = aggregate(r, recording, rd.batches);
    pthread_join(t, NULL);
    kp_batches_free(rd.batches);
    if (rd.debug_names)
        kp_debug_names_counts(rd.debug_names, &st->debug_files, &st->debug_named);
    kp_debug_names_free(rd.debug_names);
    kp_buf_free(&rd.renamed);
    if (s != KP_OK) {
        snprintf(err, err_len, "%s: %s", dir,
                 s == KP_ERR_LIMIT ? "too large a recording for one report (2^32 frames, paths "
                                     "or slices); give a part of its segments"
                                   : "out of memory");
        return s == KP_ERR_LIMIT ? KP_EXIT_DATA : KP_EXIT_FAILURE;
    }
    if (rd.rc != KP_EXIT_OK)
        snprintf(err, err_len, "%s", rd.err);
    return rd.rc;
}

int kp_report_read_dir(kp_report *r, unsigned recording, const char *dir, kp_report_read_stats *st,
                       char *err, size_t err_len)
{
    memset(st, 0, sizeof *st);
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, err_len, "cannot open %s: %s; give the directory kprof record wrote", dir,
                 strerror(errno));
        return errno == ENOENT || errno == ENOTDIR ? KP_EXIT_DATA : KP_EXIT_FAILURE;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = KP_EXIT_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (!(has_prefix(nm, "samples-") || has_prefix(nm, "cpu-")) || !strstr(nm, ".perf"))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **p = realloc(names, cap * sizeof *names);
            if (!p) {
                rc = KP_EXIT_FAILURE;
                break;
            }
            names = p;
        }
        if (!(names[n] = strdup(nm))) {
            rc = KP_EXIT_FAILURE;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc != KP_EXIT_OK)
        snprintf(err, err_len, "out of memory listing %s", dir);
    else if (n == 0) {
        snprintf(err, err_len,
                 "%s holds no samples-*.perf* or cpu-*.perf* segment; give the directory "
                 "kprof record wrote",
                 dir);
        rc = KP_EXIT_DATA;
    }
    if (n)
        qsort(names, n, sizeof *names, by_name);
    if (rc == KP_EXIT_OK)
        rc = read_segments_into(r, recording, dir, names, n, st, err, err_len);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc == KP_EXIT_OK && st->samples + st->cpu_samples == 0) {
        snprintf(err, err_len, "no sample with a time parses in the segments of %s", dir);
        rc = KP_EXIT_DATA;
    }
    return rc;
}

static const char *base_name(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    const char *s = path + n;
    while (s > path && s[-1] != '/')
        s--;
    return s;
}

int kp_report_write_page(kp_report *r, const char *const *dirs, const kp_report_read_stats *st,
                         size_t n, const char *out, int quiet)
{
    char title[600], subtitle[1200];
    for (size_t i = 0; i < n; i++)
        if (kp_report_set_name(r, (unsigned)i, base_name(dirs[i])) != KP_OK) {
            kp_error("out of memory");
            return KP_EXIT_FAILURE;
        }
    /* "kprof report: NODE" and "recorded 2026-11-26 03:20:50 UTC, 10 s, ..." */
    const char *node = st[0].node[0] ? st[0].node : base_name(dirs[0]);
    if (n > 1)
        snprintf(title, sizeof title, "kprof report: %s compared with %s", base_name(dirs[1]),
                 base_name(dirs[0]));
    else
        snprintf(title, sizeof title, "kprof report: %s", node);
    subtitle[0] = 0;
    for (size_t i = 0; i < n; i++) {
        kp_report_source_stats ss = {0};
        kp_report_source *src =
            kp_report_get_source(r, (unsigned)i, st[i].samples ? KP_REPORT_SAMPLES : KP_REPORT_CPU);
        if (src)
            kp_report_source_stats_get(src, &ss);
        char when[64] = "";
        if (st[i].wall_minus_clock_us) {
            time_t t =
                (time_t)(((int64_t)(ss.first_ns / 1000) + st[i].wall_minus_clock_us) / 1000000);
            struct tm tm;
            gmtime_r(&t, &tm);
            strftime(when, sizeof when, "recorded %Y-%m-%d %H:%M:%S UTC, ", &tm);
        }
        size_t used = strlen(subtitle);
        snprintf(subtitle + used, sizeof subtitle - used, "%s%s%s: %s%.0f s; %u segments",
                 i ? " \xc2\xb7 " : "", n > 1 ? (i ? "B " : "A ") : "", base_name(dirs[i]), when,
                 (double)(ss.last_ns - ss.first_ns) / 1e9, st[i].segments + st[i].cpu_segments);
    }
    kp_report_options o = {title, subtitle, st[0].busy_flags[0] ? st[0].busy_flags : NULL};
    kp_sink *sink;
    kp_status s = kp_sink_open_file(out, KP_COMPRESS_NONE, 0, &sink);
    if (s == KP_OK) {
        s = kp_report_write_html(r, &o, sink);
        kp_status c = s == KP_OK ? kp_sink_commit(sink) : (kp_sink_abort(sink), s);
        s = c;
    }
    if (s != KP_OK) {
        kp_error("cannot write %s: %s", out, kp_status_reason(s, errno));
        return KP_EXIT_FAILURE;
    }
    if (!quiet) {
        uint64_t samples = 0, cpu = 0;
        size_t files = 0, named = 0;
        for (size_t i = 0; i < n; i++) {
            samples += st[i].samples;
            cpu += st[i].cpu_samples;
            files += st[i].debug_files;
            named += st[i].debug_named;
        }
        char names[128] = "";
        if (named)
            snprintf(names, sizeof names, "; %zu unnamed function%s named from %zu debug file%s",
                     named, named == 1 ? "" : "s", files, files == 1 ? "" : "s");
        fprintf(stderr,
                "kprof: wrote %s: %" PRIu64 " samples and %" PRIu64
                " native CPU samples from %zu recording%s%s\n",
                out, samples, cpu, n, n > 1 ? "s" : "", names);
    }
    return KP_EXIT_OK;
}

int kp_report_build(const char *const *dirs, size_t n, const char *out, int quiet)
{
    kp_report *r = kp_report_create();
    if (!r) {
        kp_error("out of memory");
        return KP_EXIT_FAILURE;
    }
    kp_report_read_stats st[2];
    char err[1024];
    int rc = KP_EXIT_OK;
    for (size_t i = 0; i < n && rc == KP_EXIT_OK; i++) {
        rc = kp_report_read_dir(r, (unsigned)i, dirs[i], &st[i], err, sizeof err);
        if (rc != KP_EXIT_OK)
            kp_error("%s", err);
    }
    if (rc == KP_EXIT_OK)
        rc = kp_report_write_page(r, dirs, st, n, out, quiet);
    kp_report_free(r);
    return rc;
}

#define _GNU_SOURCE
#include "record/files.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/flame_files.h"
#include "kp/alloc.h"
#include "kp/flame_svg.h"
#include "kp/folded.h"
#include "kp/perf_writer.h"
#include "record/segment_pprof.h"

struct kp_record_files {
    const kp_frames *frames;
    const kp_stacks *stacks;
    char dir[4096];
    kp_perf_writer *perf;
    kp_segment_writer *segments;
    kp_buf text;
    uint64_t *weights[KP_WEIGHT_COUNT]; /* by full stack id */
    size_t weights_cap;
    uint64_t samples;
    kp_status error;
    int error_errno;
    kp_compression compression;
    kp_segment_pprof *pprof; /* --pprof */
    unsigned keep;           /* --keep: the profiles go with their segments */
    uint64_t pprof_segments; /* segments with their profile written */
    char pprof_error[512];   /* the first profile that could not be written */
    kp_report_live *live;    /* report.html's model, fed as the segments */
};

kp_record_files *kp_record_files_open(const kp_segment_config *segments, const kp_frames *frames,
                                      const kp_stacks *stacks, int pprof, kp_report_live *live)
{
    kp_record_files *o = kp_calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->frames = frames;
    o->live = live;
    o->stacks = stacks;
    snprintf(o->dir, sizeof o->dir, "%s", segments->dir);
    o->compression = segments->compression;
    o->keep = segments->keep;
    if (pprof)
        o->pprof = kp_segment_pprof_create(frames, stacks);
    if (kp_perf_writer_create("beam.smp", "cpu-clock", frames, stacks, &o->perf) != KP_OK ||
        kp_segment_open(segments, &o->segments) != KP_OK || (pprof && !o->pprof)) {
        kp_perf_writer_free(o->perf);
        kp_segment_pprof_free(o->pprof);
        kp_free(o);
        return NULL;
    }
    return o;
}

static int add_weight(kp_record_files *o, int out, uint32_t stack, int64_t w)
{
    if (w <= 0)
        return 0;
    if (stack >= o->weights_cap) {
        size_t cap = o->weights_cap ? o->weights_cap : 1024;
        while (cap <= stack)
            cap *= 2;
        for (int k = 0; k < KP_WEIGHT_COUNT; k++) {
            uint64_t *a = kp_realloc_array(o->weights[k], cap, sizeof *a);
            if (!a)
                return -1;
            memset(a + o->weights_cap, 0, (cap - o->weights_cap) * sizeof *a);
            o->weights[k] = a;
        }
        o->weights_cap = cap;
    }
    o->weights[out][stack] += (uint64_t)w;
    return 0;
}

int kp_record_files_add(void *node, const kp_proc_sample *s)
{
    const kp_record_files_node *n = node;
    kp_record_files *o = n->files;
    uint64_t time_us = n->time_us;
    kp_metric metrics[KP_METRIC_COUNT];
    for (int m = 0; m < KP_METRIC_COUNT; m++) {
        metrics[m].name = kp_metrics[m].name;
        metrics[m].value = s->value[m];
        metrics[m].delta = s->delta[m];
    }
    kp_perf_record rec = {n->os_pid, s->num, 0, time_us, 1, metrics, KP_METRIC_COUNT, s->stack};
    kp_buf_clear(&o->text);
    if (kp_perf_writer_format(o->perf, &rec, &o->text) != KP_OK)
        return -1;
    if (o->error == KP_OK) {
        kp_status st = kp_segment_write(o->segments, o->text.data, o->text.len, time_us);
        if (st != KP_OK) {
            o->error = st;
            o->error_errno = errno;
        }
    }
    int64_t w[KP_WEIGHT_COUNT];
    kp_weights_compute(s->value, s->delta, w);
    if (o->live)
        kp_report_live_add(o->live, KP_REPORT_SAMPLES, o->frames, o->stacks, s->stack,
                           time_us * 1000, w);
    for (int k = 0; k < KP_WEIGHT_COUNT; k++)
        if (add_weight(o, k, s->stack, w[k]))
            return -1;
    o->samples++;
    if (o->pprof && o->error == KP_OK) {
        if (kp_segment_pprof_add(o->pprof, s->stack, w, time_us) != 0)
            return -1;
        const kp_segment_stats *ss = kp_segment_stats_get(o->segments);
        /* a segment completed with this write: the two newest samples are
         * the next one's (kp/segment.h) */
        if (ss->segments > o->pprof_segments) {
            o->pprof_segments = ss->segments;
            char err[512];
            if (kp_segment_pprof_write(o->pprof, kp_segment_last_path(o->segments), 2, o->keep, err,
                                       sizeof err) != 0 &&
                !o->pprof_error[0])
                snprintf(o->pprof_error, sizeof o->pprof_error, "%s", err);
        }
    }
    return 0;
}

kp_status kp_record_files_error(const kp_record_files *o, int *saved_errno)
{
    if (saved_errno)
        *saved_errno = o->error_errno;
    return o->error;
}

uint64_t kp_record_files_samples(const kp_record_files *o)
{
    return o->samples;
}

const kp_segment_stats *kp_record_files_segment_stats(const kp_record_files *o)
{
    return kp_segment_stats_get(o->segments);
}

/* Writes OUT.folded and its flame graph OUT.svg; returns 1 if written, 0 if
 * they would be empty, -1 on error. */
static int write_folded(kp_record_files *o, int out, const char *caption, char *err, size_t err_len)
{
    size_t used = 0;
    for (size_t id = 0; id < o->weights_cap; id++)
        used += o->weights[out][id] != 0;
    if (!used)
        return 0;
    kp_folded *f = kp_folded_create();
    kp_status st = f ? KP_OK : KP_ERR_NOMEM;
    for (size_t id = 0; id < o->weights_cap && st == KP_OK; id++)
        if (o->weights[out][id])
            st = kp_folded_add_stack(f, o->frames, o->stacks, (uint32_t)id, "beam.smp",
                                     o->weights[out][id]);
    kp_flame_options flame = {kp_weight_titles[out], caption, kp_weight_units[out], 0};
    int rc = st == KP_OK
                 ? kp_flame_files_save(f, o->dir, kp_weight_names[out], &flame, err, err_len)
                 : -1;
    if (st != KP_OK)
        snprintf(err, err_len, "cannot write %s/%s.folded: %s", o->dir, kp_weight_names[out],
                 kp_status_reason(st, 0));
    kp_folded_free(f);
    return rc == 0 ? 1 : -1;
}

static int write_text(const char *dir, const char *name, const char *text, char *err,
                      size_t err_len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    kp_status st = kp_sink_write_file(path, text, strlen(text));
    if (st != KP_OK) {
        snprintf(err, err_len, "cannot write %s: %s", path, kp_status_reason(st, errno));
        return -1;
    }
    return 0;
}

/* Formats at text[n] (text holds `cap` bytes); the new length, at most
 * cap - 1 (cut, still terminated). */
static size_t put(char *text, size_t cap, size_t n, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int w = vsnprintf(text + n, cap - n, format, ap);
    va_end(ap);
    return w < 0 ? n : (size_t)w >= cap - n ? cap - 1 : n + (size_t)w;
}

/* README.txt: what each file is and how to view it; the folded files
 * listed from the weights' table (kp/weights.h). */
static void readme_text(char *text, size_t cap, const char *caption, const char *cpu_note,
                        kp_compression compression)
{
    size_t n =
        put(text, cap, 0,
            "%s.\n"
            "\n"
            "%s"
            "\n"
            "report.html  open this first, in any web browser (one file, nothing to\n"
            "    install). With native CPU samples it opens on the CPU by state per\n"
            "    thread kind, the top functions and processes and their flame graph.\n"
            "    A heat map per metric and of the native CPU samples (a column\n"
            "    per second, a row per offset within it); drag on one for the flame\n"
            "    graph of that range, by samples or any metric; filter by process status\n"
            "    and by process; search; Shift+drag a second range to compare the two.\n"
            "    'kprof report A B' compares two recordings.\n"
            "\n"
            "samples-NNNNNN.perf%s  perf-script segments, one sample per process per tick.\n"
            "    FlameScope: point it at this directory (it lists the segments).\n"
            "    speedscope: open a segment (one timeline per Erlang process).\n"
            "    Each header carries metric_NAME: VALUE, DELTA fields (reductions,\n"
            "    message_queue_len, memory, total_heap_size, heap_size, stack_size,\n"
            "    bin_vheap_size, bin_old_vheap_size in bytes, minor_gcs) that the\n"
            "    flame_prof FlameScope fork draws as heat maps. Stacks end (at the root)\n"
            "    with the process status, the pid and its registered name or initial call\n"
            "    (and the node name, when several nodes were recorded).\n"
            "    With --pprof, samples-NNNNNN.pb.gz beside each: the segment as a pprof\n"
            "    profile (go tool pprof -top samples-000001.pb.gz; Pyroscope, Parca).\n"
            "%s"
            "\n"
            "Folded stacks for flamegraph.pl (FlameGraph) or speedscope:\n",
            caption, cpu_note, kp_compression_suffix(compression),
            compression == KP_COMPRESS_ZSTD
                ? "    zstd segments are a compact archive no viewer reads: unpack them with\n"
                  "    'zstd -d' or fold them with 'kprof convert'.\n"
                : "");
    for (int k = 0; k < KP_WEIGHT_COUNT; k++) {
        char file[64];
        snprintf(file, sizeof file, "%s.folded", kp_weight_names[k]);
        n = put(text, cap, n, "  %-26s%s\n", file, kp_weight_helps[k]);
    }
    put(text, cap, n,
        "(a file is left out when all its weights are zero)\n"
        "A sample's reductions are those burned since that process's previous\n"
        "sample, put on the stack it has now: a process that ran in between and\n"
        "waits again shows that work under its waiting stack. The code caught\n"
        "burning them is under the running and runnable roots.\n"
        "\n"
        "Flame graphs: each folded file has one beside it, drawn by kprof\n"
        "(samples.svg, reductions.svg, ...). Open them in a web browser: the\n"
        "mouse shows a frame's weight, a click zooms in, Escape zooms out, Ctrl-F\n"
        "highlights the frames matching a regular expression. In samples.svg a\n"
        "click on 'running' shows the code that was on a CPU. Or draw them with\n"
        "FlameGraph:\n"
        "  flamegraph.pl --hash --countname=samples samples.folded > fg-samples.svg\n"
        "  flamegraph.pl --hash --countname=bytes memory.folded > fg-memory.svg\n"
        "\n"
        "Re-fold the segments with another weight, or draw them:\n"
        "  kprof convert samples-*.perf* -o heap.folded --weight total_heap_size\n"
        "  kprof convert samples-*.perf* -o heap.svg --weight total_heap_size\n");
}

int kp_record_files_close(kp_record_files *o, const char *caption, const char *cpu_note,
                          int written[KP_WEIGHT_COUNT], kp_segment_stats *stats, char *err,
                          size_t err_len)
{
    int rc = 0;
    char last[4096];
    snprintf(last, sizeof last, "%s", kp_segment_current_path(o->segments));
    kp_segment_stats closed;
    kp_status st = kp_segment_close(o->segments, &closed);
    if (stats)
        *stats = closed;
    /* the last segment's profile, unless it was dropped (a single sample);
     * a profile that could not be written is reported once the rest is */
    if (o->pprof && o->error == KP_OK && closed.segments > o->pprof_segments && last[0] &&
        !o->pprof_error[0])
        kp_segment_pprof_write(o->pprof, last, 0, o->keep, o->pprof_error, sizeof o->pprof_error);
    if (st != KP_OK && st != KP_ERR_EMPTY && o->error == KP_OK) {
        snprintf(err, err_len, "cannot complete the last segment in %s: %s", o->dir,
                 kp_status_reason(st, errno));
        rc = -1;
    }
    for (int out = 0; out < KP_WEIGHT_COUNT; out++) {
        written[out] = 0;
        if (rc == 0 && o->samples && caption) {
            written[out] = write_folded(o, out, caption, err, err_len);
            if (written[out] < 0)
                rc = -1;
        }
    }
    if (rc == 0 && caption) {
        char readme[8192];
        readme_text(readme, sizeof readme, caption, cpu_note ? cpu_note : "", o->compression);
        rc = write_text(o->dir, "README.txt", readme, err, err_len);
    }
    if (rc == 0 && o->pprof_error[0]) {
        snprintf(err, err_len, "%s", o->pprof_error);
        rc = -1;
    }
    for (int k = 0; k < KP_WEIGHT_COUNT; k++)
        kp_free(o->weights[k]);
    kp_segment_pprof_free(o->pprof);
    kp_buf_free(&o->text);
    kp_perf_writer_free(o->perf);
    kp_free(o);
    return rc;
}

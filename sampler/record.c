/* The sampling loop: absolute deadlines with jitter, one batch request in
 * flight, a deadline on every wait, lateness reported instead of assumed
 * away. Samples go to perf-script segments as they arrive and into per-metric
 * folded aggregates written at the end. */
#define _GNU_SOURCE
#include "record.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "cli.h"
#include "kp/folded.h"
#include "kp/perf_writer.h"
#include "kp/segment.h"
#include "node.h"
#include "profile.h"

enum { OUT_SAMPLES, OUT_REDUCTIONS, OUT_MEMORY, OUT_QUEUE, OUT_BIN_VHEAP, OUT_BIN_GROWTH,
       OUT_BIN_RELEASE, OUT_COUNT };

static const char *const out_names[OUT_COUNT] = {
    "samples", "reductions", "memory", "message_queue_len", "bin_vheap", "bin_vheap_growth",
    "bin_vheap_release"};
static const char *const out_units[OUT_COUNT] = {
    "samples", "reductions", "bytes", "messages", "bytes", "bytes", "bytes"};

typedef struct {
    kp_profile *profile;
    kp_perf_writer *perf;
    kp_segment_writer *segments;
    kp_buf text;
    uint64_t *weights[OUT_COUNT]; /* by full stack id */
    size_t weights_cap;
    uint32_t os_pid;
    uint64_t batch_time_us; /* our clock, for the perf file */
    uint64_t samples;
    kp_status write_error;
    int write_errno;
} recorder;

static volatile sig_atomic_t stop_requested;

/* The latest batch latencies, for the median and 99th percentile. */
#define LATENCY_RING 4096
typedef struct {
    uint32_t us[LATENCY_RING];
    size_t n;
} latencies;

static void latency_add(latencies *l, uint64_t us)
{
    l->us[l->n++ % LATENCY_RING] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int compare_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of the recorded latencies, in milliseconds. */
static double latency_quantile(latencies *l, double q)
{
    size_t n = l->n < LATENCY_RING ? l->n : LATENCY_RING;
    if (!n)
        return 0;
    qsort(l->us, n, sizeof *l->us, compare_u32);
    return l->us[(size_t)(q * (double)(n - 1))] / 1e3;
}

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_until(uint64_t deadline_us)
{
    struct timespec ts = {(time_t)(deadline_us / 1000000u), (long)(deadline_us % 1000000u) * 1000};
    while (!stop_requested &&
           clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int add_weight(recorder *r, int out, uint32_t stack, int64_t w)
{
    if (w <= 0)
        return 0;
    if (stack >= r->weights_cap) {
        size_t cap = r->weights_cap ? r->weights_cap : 1024;
        while (cap <= stack)
            cap *= 2;
        for (int o = 0; o < OUT_COUNT; o++) {
            uint64_t *a = realloc(r->weights[o], cap * sizeof *a);
            if (!a)
                return -1;
            memset(a + r->weights_cap, 0, (cap - r->weights_cap) * sizeof *a);
            r->weights[o] = a;
        }
        r->weights_cap = cap;
    }
    r->weights[out][stack] += (uint64_t)w;
    return 0;
}

static int on_profile_sample(void *ctx, const kp_profile_sample *s)
{
    recorder *r = ctx;
    kp_metric metrics[KP_METRIC_COUNT];
    for (int m = 0; m < KP_METRIC_COUNT; m++) {
        metrics[m].name = kp_metric_names[m];
        metrics[m].value = s->value[m];
        metrics[m].delta = s->delta[m];
    }
    kp_perf_record rec = {r->os_pid, s->num, 0, r->batch_time_us, 1, metrics, KP_METRIC_COUNT,
                          s->stack};
    kp_buf_clear(&r->text);
    if (kp_perf_writer_format(r->perf, &rec, &r->text) != KP_OK)
        return -1;
    if (r->write_error == KP_OK) {
        kp_status st = kp_segment_write(r->segments, r->text.data, r->text.len, r->batch_time_us);
        if (st != KP_OK) {
            r->write_error = st;
            r->write_errno = errno;
        }
    }
    int64_t bin = s->value[KP_METRIC_BIN_VHEAP] + s->value[KP_METRIC_BIN_OLD_VHEAP];
    int64_t bin_delta = s->delta[KP_METRIC_BIN_VHEAP] + s->delta[KP_METRIC_BIN_OLD_VHEAP];
    if (add_weight(r, OUT_SAMPLES, s->stack, 1) ||
        add_weight(r, OUT_REDUCTIONS, s->stack, s->delta[KP_METRIC_REDUCTIONS]) ||
        add_weight(r, OUT_MEMORY, s->stack, s->value[KP_METRIC_MEMORY]) ||
        add_weight(r, OUT_QUEUE, s->stack, s->value[KP_METRIC_QUEUE]) ||
        add_weight(r, OUT_BIN_VHEAP, s->stack, bin) ||
        add_weight(r, OUT_BIN_GROWTH, s->stack, bin_delta) ||
        add_weight(r, OUT_BIN_RELEASE, s->stack, -bin_delta))
        return -1;
    r->samples++;
    return 0;
}

/* Writes OUT.folded; returns 1 if written, 0 if it would be empty, -1 on error. */
static int write_folded(recorder *r, const char *dir, int out, char *err, size_t err_len)
{
    size_t used = 0;
    for (size_t id = 0; id < r->weights_cap; id++)
        used += r->weights[out][id] != 0;
    if (!used)
        return 0;
    kp_folded *f = kp_folded_create();
    if (!f)
        return -1;
    kp_status st = KP_OK;
    for (size_t id = 0; id < r->weights_cap && st == KP_OK; id++)
        if (r->weights[out][id])
            st = kp_folded_add_stack(f, kp_profile_frames(r->profile),
                                     kp_profile_stacks(r->profile), (uint32_t)id, "beam.smp",
                                     r->weights[out][id]);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.folded", dir, out_names[out]);
    kp_sink *sink = NULL;
    if (st == KP_OK)
        st = kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink);
    if (st == KP_OK) {
        st = kp_folded_write(f, sink);
        if (st == KP_OK)
            st = kp_sink_commit(sink);
        else
            kp_sink_abort(sink);
    }
    kp_folded_free(f);
    if (st != KP_OK) {
        snprintf(err, err_len, "cannot write %s: %s", path,
                 st == KP_ERR_IO ? strerror(errno) : kp_strerror(st));
        return -1;
    }
    return 1;
}

static void write_readme(const char *dir, const kp_record_options *o, const char *target)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/README.txt", dir);
    kp_sink *sink;
    if (kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink) != KP_OK)
        return;
    char text[8192];
    int n = snprintf(
        text, sizeof text,
        "kprof recording of %s: top %u processes by %s, %.6g samples/s per process.\n"
        "\n"
        "samples-NNNNNN.perf%s  perf-script segments, one sample per process per tick.\n"
        "    FlameScope: point it at this directory (it lists the segments).\n"
        "    speedscope: open a segment (one timeline per Erlang process).\n"
        "    Each header carries metric_NAME: VALUE, DELTA fields (reductions,\n"
        "    message_queue_len, memory, total_heap_size, heap_size, stack_size,\n"
        "    bin_vheap_size, bin_old_vheap_size in bytes, minor_gcs) that the\n"
        "    flame_prof FlameScope fork draws as heat maps. Stacks end (at the root)\n"
        "    with the process status, the pid and its registered name or initial call.\n"
        "%s"
        "\n"
        "Folded stacks for flamegraph.pl (FlameGraph) or speedscope:\n"
        "  samples.folded            sample counts: where processes spend their time\n"
        "  reductions.folded         reductions burned since the previous sample\n"
        "  memory.folded             process memory held (bytes)\n"
        "  message_queue_len.folded  messages waiting\n"
        "  bin_vheap.folded          off-heap binaries referenced (bytes)\n"
        "  bin_vheap_growth.folded   growth of those binaries since the previous sample\n"
        "  bin_vheap_release.folded  their release since the previous sample\n"
        "\n"
        "  flamegraph.pl --hash --countname=samples samples.folded > samples.svg\n"
        "  flamegraph.pl --hash --countname=reductions reductions.folded > reductions.svg\n"
        "  flamegraph.pl --hash --countname=bytes memory.folded > memory.svg\n"
        "\n"
        "Re-fold any segment with another weight:\n"
        "  kprof convert samples-*.perf* -o heap.folded --weight total_heap_size\n",
        target, o->n_pids ? (unsigned)o->n_pids : o->top, o->n_pids ? "--pid" : o->select_by,
        o->rate, kp_compression_suffix(o->compression),
        o->compression == KP_COMPRESS_ZSTD
            ? "    zstd segments are a compact archive no viewer reads: unpack them with\n"
              "    'zstd -d' or fold them with 'kprof convert'.\n"
            : "");
    kp_sink_write(sink, text, (size_t)n);
    kp_sink_commit(sink);
}

/* Creates the output directory; `*created` tells whether it is new, so that
 * a run that fails before writing anything can remove it again. */
static int make_output_dir(const kp_record_options *o, const char *target, char *dir, size_t cap,
                           int *created, char *err, size_t err_len)
{
    if (o->output_dir) {
        snprintf(dir, cap, "%s", o->output_dir);
    } else {
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
        snprintf(dir, cap, "kprof-%s-%s", target, stamp);
    }
    *created = mkdir(dir, 0755) == 0;
    if (!*created && errno != EEXIST) {
        snprintf(err, err_len, "cannot create the output directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (access(dir, W_OK) != 0) {
        snprintf(err, err_len, "cannot write to the output directory %s: %s", dir,
                 strerror(errno));
        return -1;
    }
    return 0;
}

static void status_line(const recorder *r, uint64_t elapsed_us, double rate, uint64_t batches,
                        uint64_t late, int tty)
{
    if (!tty)
        return;
    double secs = (double)elapsed_us / 1e6;
    const kp_segment_stats *st = kp_segment_stats_get(r->segments);
    fprintf(stderr,
            "\r%.1fs  %llu samples (%.0f/s)  batches %.1f/s of %.6g  late %llu  written %.1f MB   ",
            secs, (unsigned long long)r->samples, secs > 0 ? (double)r->samples / secs : 0.0,
            secs > 0 ? (double)batches / secs : 0.0, rate, (unsigned long long)late,
            (double)st->bytes / 1e6);
    fflush(stderr);
}

int kp_record_run(const kp_record_options *o)
{
    char err[8192], target[512], cookie[512], dir[4096];
    if (kp_node_name(o->node, target, sizeof target, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_USAGE;
    }
    if (kp_cookie_load(o->cookie_file, cookie, sizeof cookie, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_USAGE;
    }
    int created;
    if (make_output_dir(o, target, dir, sizeof dir, &created, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_FAILURE;
    }
    kp_node node;
    if (kp_node_connect(&node, target, cookie, o->connect_timeout_ms, err, sizeof err) != 0) {
        kp_error("%s", err);
        if (created)
            rmdir(dir);
        return KP_EXIT_NODE;
    }
    memset(cookie, 0, sizeof cookie);
    kp_agent agent;
    uint64_t interval = (uint64_t)(1e6 / o->rate);
    kp_agent_options ao = {o->top, o->select_by, (unsigned)(o->reselect_us / 1000), o->pids,
                           o->n_pids, o->depth,
                           (unsigned)(interval / 1000 * 20 > 10000 ? interval / 1000 * 20 : 10000)};
    if (kp_agent_attach(&agent, &node, &ao, err, sizeof err) != 0) {
        kp_error("%s", err);
        kp_node_close(&node);
        if (created)
            rmdir(dir);
        return KP_EXIT_NODE;
    }

    int rc = KP_EXIT_OK;
    recorder r;
    memset(&r, 0, sizeof r);
    r.os_pid = (uint32_t)agent.os_pid;
    r.profile = kp_profile_create(agent.wordsize, on_profile_sample, &r);
    char header[1024];
    time_t wall = time(NULL);
    uint64_t mono0 = now_us();
    snprintf(header, sizeof header,
             "# kprof %s recording of %s\n# clock: CLOCK_MONOTONIC microseconds; %llu = %ld "
             "seconds since the epoch (UTC)\n",
             "sampling", target, (unsigned long long)mono0, (long)wall);
    kp_segment_config sc = {dir, "samples", "perf", o->compression, 0, o->rotate_bytes,
                            o->rotate_us, o->keep, header};
    if (!r.profile ||
        kp_perf_writer_create("beam.smp", "cpu-clock", kp_profile_frames(r.profile),
                              kp_profile_stacks(r.profile), &r.perf) != KP_OK ||
        kp_segment_open(&sc, &r.segments) != KP_OK) {
        kp_error("out of memory");
        kp_agent_detach(&agent);
        kp_node_close(&node);
        return KP_EXIT_FAILURE;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int tty = isatty(STDERR_FILENO) && !o->quiet;
    if (!o->quiet) {
        fprintf(stderr, "kprof: sampling the top %u processes of %s by %s, %.6g times a second",
                o->n_pids ? (unsigned)o->n_pids : o->top, target,
                o->n_pids ? "--pid" : o->select_by, o->rate);
        if (o->duration_us)
            fprintf(stderr, " for %.1f s", (double)o->duration_us / 1e6);
        fprintf(stderr, "; Ctrl-C stops and writes the files to %s/\n", dir);
    }

    uint64_t start = now_us(), base = start, last_status = start, batches = 0, late = 0;
    uint64_t slow_since = 0;
    int warned = 0;
    static latencies lat;
    unsigned seed = (unsigned)start;
    const char *lost = NULL;
    while (!stop_requested) {
        uint64_t t = now_us();
        if (o->duration_us && t - start >= o->duration_us)
            break;
        /* jitter of up to +-10% keeps the schedule from aliasing with
         * periodic work in the node, while `base` keeps the average rate */
        int64_t jitter = (int64_t)(rand_r(&seed) % (interval / 5 + 1)) - (int64_t)(interval / 10);
        sleep_until((uint64_t)((int64_t)base + jitter));
        if (stop_requested)
            break;
        uint64_t sent = now_us();
        /* one timestamp per batch, taken when it was asked for */
        r.batch_time_us = sent;
        if (kp_agent_request(&agent) != 0) {
            lost = "sending a request";
            break;
        }
        int64_t node_time;
        int got = 0;
        uint64_t wait_start = now_us();
        while (!got) {
            int res = kp_agent_receive(&agent, 200, kp_profile_handler(r.profile), &node_time);
            if (res == 1) {
                got = 1;
            } else if (res == -1) {
                lost = "waiting for samples";
                break;
            } else if (res == -2) {
                kp_error("malformed reply from the agent on %s; please report this", target);
                rc = KP_EXIT_FAILURE;
                break;
            } else if (now_us() - wait_start > 10000000u) {
                lost = "waiting for samples (no answer for 10 s)";
                break;
            } else if (stop_requested && now_us() - wait_start > 1000000u) {
                break;
            }
        }
        if (!got)
            break;
        batches++;
        uint64_t done = now_us();
        latency_add(&lat, done - sent);
        if (r.write_error != KP_OK)
            break;
        base += interval;
        if (done > base) {
            /* late: skip the ticks that passed instead of bursting */
            uint64_t missed = (done - base) / interval + 1;
            late += missed;
            base += missed * interval;
            if (!slow_since)
                slow_since = done;
        } else {
            slow_since = 0;
        }
        if (slow_since && done - slow_since > 3000000u && !warned && !o->quiet) {
            fprintf(stderr, "%skprof: warning: sampling falls behind: a batch takes %.1f ms, "
                    "the interval is %.1f ms; lower --rate or --top\n",
                    tty ? "\n" : "", (double)(done - sent) / 1e3, (double)interval / 1e3);
            warned = 1;
        }
        if (done - last_status >= 500000u) {
            status_line(&r, done - start, o->rate, batches, late, tty);
            last_status = done;
        }
    }
    uint64_t elapsed = now_us() - start;
    if (tty)
        fputc('\n', stderr);
    kp_agent_detach(&agent);
    kp_node_close(&node);

    if (lost) {
        kp_error("lost the connection to %s while %s (the node stopped or the network failed); "
                 "the files written so far are complete",
                 target, lost);
        rc = KP_EXIT_NODE;
    }
    if (r.write_error != KP_OK) {
        kp_error("cannot write to %s: %s; the segments already written are complete", dir,
                 r.write_error == KP_ERR_IO ? strerror(r.write_errno)
                                            : kp_strerror(r.write_error));
        rc = KP_EXIT_FAILURE;
    }
    kp_segment_stats st;
    kp_status close_st = kp_segment_close(r.segments, &st);
    if (close_st != KP_OK && close_st != KP_ERR_EMPTY && rc == KP_EXIT_OK) {
        kp_error("cannot complete the last segment in %s: %s", dir,
                 close_st == KP_ERR_IO ? strerror(errno) : kp_strerror(close_st));
        rc = KP_EXIT_FAILURE;
    }
    int written[OUT_COUNT] = {0};
    for (int out = 0; out < OUT_COUNT && r.samples; out++) {
        written[out] = write_folded(&r, dir, out, err, sizeof err);
        if (written[out] < 0) {
            kp_error("%s", err);
            rc = KP_EXIT_FAILURE;
            break;
        }
    }
    write_readme(dir, o, target);
    if (!o->quiet) {
        double secs = (double)elapsed / 1e6;
        fprintf(stderr,
                "kprof: %llu samples of %zu processes in %.1f s (%.1f batches/s of %.6g "
                "requested, %llu late)\n",
                (unsigned long long)r.samples, kp_profile_processes(r.profile), secs,
                secs > 0 ? (double)batches / secs : 0.0, o->rate, (unsigned long long)late);
        if (batches)
            fprintf(stderr, "kprof: batch latency: median %.2f ms, 99th percentile %.2f ms\n",
                    latency_quantile(&lat, 0.5), latency_quantile(&lat, 0.99));
        if (r.samples < 2)
            fprintf(stderr, "kprof: too few samples for a profile; is the node idle? try "
                            "--select-by or a longer --duration\n");
        fprintf(stderr, "kprof: wrote %llu segment%s and the folded files to %s/ (see "
                "README.txt there)\n",
                (unsigned long long)st.segments, st.segments == 1 ? "" : "s", dir);
        for (int out = 0; out < OUT_COUNT; out++)
            if (written[out] > 0)
                fprintf(stderr, "  %s/%s.folded  (%s)\n", dir, out_names[out], out_units[out]);
    }
    for (int out = 0; out < OUT_COUNT; out++)
        free(r.weights[out]);
    kp_buf_free(&r.text);
    kp_perf_writer_free(r.perf);
    kp_profile_free(r.profile);
    return rc;
}

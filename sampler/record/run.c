/* The sampling loop: rounds of ticks that each agent takes on its own clock
 * (with jitter), one request in flight per node, a deadline on every wait,
 * lateness reported instead of assumed away. Samples go to perf-script
 * segments as they arrive and into per-metric folded aggregates written at
 * the end (record/files.c). */
#define _GNU_SOURCE
#include "record/run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/signals.h"
#include "cpu/attach.h"
#include "cpu/state_summary.h"
#include "node/connection.h"
#include "record/files.h"
#include "samples/processes.h"
#include "samples/sample_wire.h"
#include "report/live.h"
#include "report/read.h"

#define MAX_NODES 64

/* One attached node. */
typedef struct {
    char target[512];
    kp_node node;
    kp_sample_wire wire;
    kp_processes *procs;
    kp_record_files_node to_files; /* where its process table puts its samples */
    int64_t offset_us;             /* our clock minus the node's */
    int attached;
    /* with a sink: its number, and the run's sink and tables */
    size_t index;
    const kp_record_sink *sink;
    const kp_frames *frames;
    const kp_stacks *stacks;
} attached_node;

/* The latest ticks' latencies in the node (how late each started plus its
 * run time), for the median and 99th percentile. */
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

/* One recording: its nodes, its schedule on our clock and its outputs. */
typedef struct {
    const kp_record_options *o;
    attached_node nodes[MAX_NODES];
    size_t n;
    char dir[4096];
    char targets[4096]; /* "a@h, b@h": for messages and file headers */
    int created_dir;    /* removed again when nothing could be attached */
    kp_frames *frames;
    kp_stacks *stacks;
    kp_record_files *out;
    uint64_t interval;  /* between ticks */
    unsigned per_round; /* ticks asked for at once (kp_sample_round_ticks) */
    uint64_t wanted;    /* ticks in all; 0 = until stopped */
    uint64_t start;
    uint64_t next_round; /* when the next round's first tick is due */
    uint64_t requested;  /* ticks asked for or skipped so far */
    uint64_t skipped;    /* ticks kprof was too late to ask for */
    uint64_t last_status, slow_since;
    int warned, tty;
    const char *lost;      /* what kprof was doing when a node went away */
    const char *lost_node; /* that node */
    int rc;
    kp_native *native;    /* NULL: the CPU view is the cooperative one */
    char native_off[512]; /* why not, when asked for */
    char busy_flags[256]; /* the node's busy-wait settings, for the report */
    latencies lat;
    kp_report_live *live;        /* report.html's model, fed as it samples; NULL: --no-report */
    kp_native_tap live_cpu;      /* the native samples into it */
    int64_t wall_minus_clock_us; /* UTC = kprof's monotonic clock + this, for the page */
    int sink_ended;              /* the sink asked to end the run */
} recording;

/* Asks every node for the next round of up to `per_round` ticks (fewer when
 * `wanted` would be passed), due from `next_round`, which moves past the
 * round. The rounds of all nodes cover the same span of time, so that
 * merging their ticks keeps a file in time order. Returns the ticks asked
 * for (0: none left), with `lost_node` set when a request could not be
 * sent. */
static unsigned send_round(recording *r)
{
    uint64_t interval = r->interval, wanted = r->wanted;
    if (wanted && r->requested >= wanted)
        return 0;
    uint64_t now = kp_now_us();
    if (now > r->next_round + interval) {
        /* kprof itself fell behind (a slow disk, a descheduled process):
         * the ticks that passed are late, not made up for in a burst */
        uint64_t behind = (now - r->next_round) / interval;
        if (wanted && behind > wanted - r->requested)
            behind = wanted - r->requested;
        r->skipped += behind;
        r->requested += behind;
        r->next_round += behind * interval;
    }
    unsigned round = r->per_round;
    if (wanted && wanted - r->requested < round) /* 0 when kprof skipped to the end */
        round = (unsigned)(wanted - r->requested);
    if (!round)
        return 0;
    for (size_t i = 0; i < r->n; i++) {
        attached_node *node = &r->nodes[i];
        if (kp_sample_wire_request(&node->wire, round, interval,
                                   (int64_t)r->next_round - node->offset_us) != 0) {
            r->lost_node = node->target;
            return 0;
        }
    }
    r->next_round += (uint64_t)round * interval;
    r->requested += round;
    return round;
}

/* Writes the ticks of the latest round of every node, oldest first on our
 * clock, so that files stay in time order. Returns 0, or -1 with the error
 * printed when a reply cannot be decoded. */
static int write_ticks(attached_node *s, size_t n, latencies *lat)
{
    for (;;) {
        attached_node *next = NULL;
        int64_t next_time = 0, t;
        for (size_t i = 0; i < n; i++) {
            if (kp_sample_wire_tick_time(&s[i].wire, &t) &&
                (t += s[i].offset_us, !next || t < next_time)) {
                next = &s[i];
                next_time = t;
            }
        }
        if (!next)
            return 0;
        next->to_files.time_us = next_time > 0 ? (uint64_t)next_time : 0;
        if (kp_sample_wire_next_tick(&next->wire, kp_processes_wire_handler(next->procs)) != 0) {
            kp_error("malformed reply from the agent on %s; please report this", next->target);
            return -1;
        }
        latency_add(lat, next->wire.tick_delay_us + next->wire.tick_busy_us);
    }
}

/* "kprof recording of app@host: top 100 processes by reductions, 10 samples/s
 * per process": the README's first line, and the flame graphs' second. */
static void caption_text(char *text, size_t cap, const kp_record_options *o, const char *targets)
{
    snprintf(text, cap, "kprof recording of %s: top %u processes by %s, %.6g samples/s per process",
             targets, o->n_pids ? (unsigned)o->n_pids : o->top, o->n_pids ? "--pid" : o->select_by,
             o->rate);
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
        snprintf(err, err_len, "cannot write to the output directory %s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int kp_record_connected_nodes(kp_node *first, char names[][512], size_t cap)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_empty_list(&args);
    int n = -1;
    if (kp_node_rpc(first, "erlang", "nodes", &args, &reply) == 0) {
        int i = 0, len;
        if (ei_decode_list_header(reply.buff, &i, &len) == 0) {
            n = 0;
            for (int k = 0; k < len && (size_t)n < cap; k++) {
                char atom[MAXATOMLEN_UTF8];
                if (ei_decode_atom_as(reply.buff, &i, atom, sizeof atom, ERLANG_UTF8, NULL, NULL) <
                    0)
                    break;
                snprintf(names[n++], 512, "%.511s", atom);
            }
        }
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    return n;
}

/* The segments PREFIX-NNNNNN.perf in `dir`, rotated and compressed as the
 * options say; their header (built in `header`) is `title` and the clock
 * their times are on, with its offset to wall-clock time. */
static kp_segment_config segment_config(const kp_record_options *o, const char *dir,
                                        const char *prefix, const char *title, char *header,
                                        size_t cap)
{
    snprintf(header, cap,
             "# %s\n# clock: CLOCK_MONOTONIC microseconds; %llu = %ld seconds since the epoch "
             "(UTC)\n",
             title, (unsigned long long)kp_now_us(), (long)time(NULL));
    return (kp_segment_config){dir,          prefix,  "perf", o->compression, 0, o->rotate_bytes,
                               o->rotate_us, o->keep, header};
}

/* Opens the segments and folded aggregates in `dir` and gives every attached node
 * its process table, writing to them. Returns NULL when out of memory. */
static kp_record_files *open_outputs(const kp_record_options *o, const char *dir,
                                     const char *targets, kp_frames *frames, kp_stacks *stacks,
                                     attached_node *s, size_t n, kp_report_live *live)
{
    char header[5000], title[4100], err[256];
    snprintf(title, sizeof title, "kprof sampling of %.4000s", targets);
    kp_segment_config sc = segment_config(o, dir, "samples", title, header, sizeof header);
    kp_record_files *out = kp_record_files_open(&sc, frames, stacks, o->pprof, live);
    for (size_t i = 0; i < n && out; i++) {
        s[i].to_files = (kp_record_files_node){out, (uint32_t)s[i].wire.agent.os_pid, 0};
        s[i].procs =
            kp_processes_create(frames, stacks, s[i].wire.agent.wordsize,
                                n > 1 ? s[i].target : NULL, kp_record_files_add, &s[i].to_files);
        if (!s[i].procs) {
            kp_record_files_close(out, NULL, NULL, (int[KP_WEIGHT_COUNT]){0}, NULL, err,
                                  sizeof err);
            out = NULL;
        }
    }
    return out;
}

/* Ticks taken (or, with `late`, skipped) per node, averaged over the nodes. */
static double node_average(const attached_node *s, size_t n, int late)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += late ? s[i].wire.missed : s[i].wire.ticks;
    return n ? (double)sum / (double)n : 0.0;
}

/* What a run did, for its summary. */
typedef struct {
    double secs, ticks, late; /* ticks taken and late, averaged over the nodes */
    size_t processes;
    uint64_t agent_ticks, queried, reused, busy_us; /* summed over the nodes */
    uint64_t running, at_receive; /* running samples, those read at the next receive */
} run_totals;

static run_totals totals_of(const attached_node *s, size_t n, uint64_t elapsed_us, uint64_t skipped)
{
    run_totals t = {(double)elapsed_us / 1e6,
                    node_average(s, n, 0),
                    node_average(s, n, 1) + (double)skipped,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0};
    for (size_t i = 0; i < n; i++) {
        uint64_t running, at_receive;
        kp_processes_receive_counts(s[i].procs, &running, &at_receive);
        t.running += running;
        t.at_receive += at_receive;
        t.processes += kp_processes_count(s[i].procs);
        t.agent_ticks += s[i].wire.ticks;
        t.queried += s[i].wire.stacks_queried;
        t.reused += s[i].wire.stacks_reused;
        t.busy_us += s[i].wire.busy_us;
    }
    return t;
}

static void print_summary(const kp_record_options *o, const char *dir, const run_totals *t,
                          uint64_t samples, const kp_segment_stats *st,
                          const int written[KP_WEIGHT_COUNT], latencies *lat)
{
    fprintf(stderr,
            "kprof: %llu samples of %zu processes in %.1f s (%.1f ticks/s of %.6g "
            "requested, %.0f late)\n",
            (unsigned long long)samples, t->processes, t->secs,
            t->secs > 0 ? t->ticks / t->secs : 0.0, o->rate, t->late);
    if (t->ticks > 0)
        fprintf(stderr,
                "kprof: tick latency in the node: median %.2f ms, 99th percentile %.2f ms\n",
                latency_quantile(lat, 0.5), latency_quantile(lat, 0.99));
    if (t->agent_ticks)
        fprintf(stderr,
                "kprof: in the node: %.0f%% of stacks reused, %llu queried; the agent "
                "spent %.2f ms per tick\n",
                t->queried + t->reused
                    ? 100.0 * (double)t->reused / (double)(t->queried + t->reused)
                    : 0.0,
                (unsigned long long)t->queried, (double)t->busy_us / 1e3 / (double)t->agent_ticks);
    if (t->running)
        fprintf(stderr,
                "kprof: in the node: %.0f%% of running samples were read at the process's next "
                "receive, marked stack_read_at_next_receive\n",
                100.0 * (double)t->at_receive / (double)t->running);
    if (samples < 2)
        fprintf(stderr, "kprof: too few samples for a profile; is the node idle? try "
                        "--select-by or a longer --duration\n");
    fprintf(stderr,
            "kprof: wrote %llu segment%s, the folded files and their flame graphs to %s/ "
            "(see README.txt there)\n",
            (unsigned long long)st->segments, st->segments == 1 ? "" : "s", dir);
    int any = 0;
    for (int k = 0; k < KP_WEIGHT_COUNT; k++)
        if (written[k] > 0) {
            fprintf(stderr, "  %s/%s.folded  (%s)\n", dir, kp_weight_names[k], kp_weight_units[k]);
            any = 1;
        }
    if (any)
        fprintf(stderr, "  %s/*.svg  (their flame graphs: open one in a web browser)\n", dir);
}

static void status_line(const kp_record_files *out, uint64_t elapsed_us, double rate,
                        const attached_node *s, size_t n, uint64_t skipped)
{
    double secs = (double)elapsed_us / 1e6;
    uint64_t samples = kp_record_files_samples(out);
    fprintf(stderr,
            "\r%.1fs  %llu samples (%.0f/s)  ticks %.1f/s of %.6g  late %.0f  written %.1f MB   ",
            secs, (unsigned long long)samples, secs > 0 ? (double)samples / secs : 0.0,
            secs > 0 ? node_average(s, n, 0) / secs : 0.0, rate,
            node_average(s, n, 1) + (double)skipped,
            (double)kp_record_files_segment_stats(out)->bytes / 1e6);
    fflush(stderr);
}

static void detach_all(attached_node *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i].attached)
            kp_sample_wire_stop(&s[i].wire);
        kp_node_close(&s[i].node);
        kp_processes_free(s[i].procs);
        s[i].procs = NULL;
        s[i].attached = 0;
    }
}

/* An error of attaching: printed, or with a sink kept for the caller,
 * which says it once however often it tries again. */
static void attach_error(const kp_record_options *o, const char *err)
{
    if (o->sink && o->native_off_len) /* the same buffer: native has not started yet */
        snprintf(o->native_off, o->native_off_len, "%s", err);
    else
        kp_error("%s", err);
}

/* Connects and attaches to the `n` nodes in `names` (completed names; with
 * --all-nodes, room for MAX_NODES); returns how many nodes, or 0 with the
 * error printed. */
static size_t attach_all(const kp_record_options *o, const char *cookie, attached_node *s,
                         char names[][512], size_t n, uint64_t interval)
{
    char err[2048];
    kp_sampling_options ao = {o->top,
                              o->select_by,
                              (unsigned)(o->reselect_us / 1000),
                              o->pids,
                              o->n_pids,
                              o->depth,
                              (unsigned)(interval / 50 > 10000 ? interval / 50 : 10000)};
    for (size_t i = 0; i < n; i++) {
        attached_node *se = &s[i];
        snprintf(se->target, sizeof se->target, "%s", names[i]);
        if (kp_node_connect(&se->node, se->target, cookie, o->connect_timeout_ms, err,
                            sizeof err) != 0) {
            attach_error(o, err);
            detach_all(s, i + 1);
            return 0;
        }
        if (o->all_nodes && i == 0 && n == 1) {
            int more = kp_record_connected_nodes(&se->node, names + 1, MAX_NODES - 1);
            n += more > 0 ? (size_t)more : 0;
        }
        if (kp_sample_wire_start(&se->wire, &se->node, &ao, err, sizeof err) != 0) {
            attach_error(o, err);
            detach_all(s, i + 1);
            return 0;
        }
        se->attached = 1;
        if (kp_node_clock_offset(&se->node, &se->offset_us, err, sizeof err) != 0) {
            attach_error(o, err);
            detach_all(s, i + 1);
            return 0;
        }
    }
    return n;
}

/* A kp_proc_sample_fn: a cooperative sample into the run's sink. */
static int sink_add(void *ctx, const kp_proc_sample *sample)
{
    const attached_node *node = ctx;
    return node->sink->sample(node->sink->ctx, node->index, node->to_files.time_us, node->frames,
                              node->stacks, sample);
}

/* With a sink: every attached node's process table hands its samples to
 * it. Returns KP_EXIT_OK, or KP_EXIT_FAILURE with the error printed and
 * the nodes detached. */
static int open_sink(recording *r)
{
    int ok = r->frames && r->stacks;
    for (size_t i = 0; i < r->n && ok; i++) {
        attached_node *node = &r->nodes[i];
        node->index = i;
        node->sink = r->o->sink;
        node->frames = r->frames;
        node->stacks = r->stacks;
        node->to_files = (kp_record_files_node){NULL, (uint32_t)node->wire.agent.os_pid, 0};
        node->procs = kp_processes_create(r->frames, r->stacks, node->wire.agent.wordsize,
                                          r->n > 1 ? node->target : NULL, sink_add, node);
        ok = node->procs != NULL;
    }
    if (ok)
        return KP_EXIT_OK;
    kp_error("out of memory");
    detach_all(r->nodes, r->n);
    kp_frames_free(r->frames);
    kp_stacks_free(r->stacks);
    return KP_EXIT_FAILURE;
}

/* Checks every name and the cookie, creates the output directory, attaches
 * to the nodes and opens the outputs. Returns KP_EXIT_OK, or an exit code
 * with the error printed and nothing left behind. */
static int start_recording(recording *r)
{
    const kp_record_options *o = r->o;
    char err[8192], cookie[512];
    /* every name is checked before anything is created or connected */
    static char names[MAX_NODES][512];
    size_t n_names = 0;
    for (size_t i = 0; i < o->n_nodes && n_names < MAX_NODES; i++, n_names++) {
        if (kp_node_name(o->nodes[i], names[i], sizeof names[i], err, sizeof err) != 0) {
            kp_error("%s", err);
            return KP_EXIT_USAGE;
        }
    }
    if (kp_cookie_load(o->cookie_file, cookie, sizeof cookie, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_USAGE;
    }
    if (!o->sink && make_output_dir(o, names[0], r->dir, sizeof r->dir, &r->created_dir, err,
                                    sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_FAILURE;
    }
    r->n = attach_all(o, cookie, r->nodes, names, n_names, r->interval);
    memset(cookie, 0, sizeof cookie);
    if (r->n == 0) {
        if (r->created_dir)
            rmdir(r->dir);
        return KP_EXIT_NODE;
    }
    for (size_t i = 0; i < r->n; i++)
        snprintf(r->targets + strlen(r->targets), sizeof r->targets - strlen(r->targets), "%s%.60s",
                 i ? ", " : "", r->nodes[i].target);
    r->frames = kp_frames_create(kp_record_frame_flags(o));
    r->stacks = kp_stacks_create();
    if (o->sink)
        return open_sink(r);
    r->live = o->no_report ? NULL : kp_report_live_create();
    r->live_cpu = (kp_native_tap){kp_report_live_add_cpu, r->live};
    r->wall_minus_clock_us = (int64_t)time(NULL) * 1000000 - (int64_t)kp_now_us();
    r->out =
        r->frames && r->stacks && (r->live || o->no_report)
            ? open_outputs(o, r->dir, r->targets, r->frames, r->stacks, r->nodes, r->n, r->live)
            : NULL;
    if (!r->out) {
        kp_error("out of memory");
        detach_all(r->nodes, r->n);
        kp_frames_free(r->frames);
        kp_stacks_free(r->stacks);
        kp_report_live_free(r->live);
        return KP_EXIT_FAILURE;
    }
    return KP_EXIT_OK;
}

/* Waits for the round in flight (`in_flight` ticks) from every node, each
 * within a deadline. Returns 0 when all arrived, or -1 with `lost` or `rc`
 * set. */
static int await_round(recording *r, unsigned in_flight)
{
    for (size_t i = 0; i < r->n; i++) {
        attached_node *node = &r->nodes[i];
        uint64_t wait_start = kp_now_us();
        for (;;) {
            int res = kp_sample_wire_receive(&node->wire, 200);
            if (res == 1)
                break;
            if (res == -1) {
                r->lost = "waiting for samples";
            } else if (res == -2) {
                kp_error("malformed reply from the agent on %s; please report this", node->target);
                r->rc = KP_EXIT_FAILURE;
                return -1;
            } else if (kp_now_us() - wait_start > (uint64_t)in_flight * r->interval + 10000000u) {
                r->lost = "waiting for samples (no answer for 10 s)";
            } else if (kp_stop_requested() && kp_now_us() - wait_start > 1000000u) {
                break;
            } else {
                continue;
            }
            r->lost_node = node->target;
            return -1;
        }
    }
    return 0;
}

/* After a round is written: warns once when sampling has fallen behind for
 * 3 s, and refreshes the status line on a terminal. */
static void watch_pace(recording *r, double missed_before, uint64_t skipped_before)
{
    uint64_t done = kp_now_us();
    if (node_average(r->nodes, r->n, 1) > missed_before || r->skipped > skipped_before) {
        if (!r->slow_since)
            r->slow_since = done;
    } else {
        r->slow_since = 0;
    }
    if (r->slow_since && done - r->slow_since > 3000000u && !r->warned && !r->o->quiet) {
        fprintf(stderr,
                "%skprof: warning: sampling falls behind: a tick takes %.1f ms in "
                "the node, the interval is %.1f ms; lower --rate or --top\n",
                r->tty ? "\n" : "", (double)r->nodes[0].wire.tick_busy_us / 1e3,
                (double)r->interval / 1e3);
        r->warned = 1;
    }
    if (r->tty && r->out && done - r->last_status >= 500000u) {
        status_line(r->out, done - r->start, r->o->rate, r->nodes, r->n, r->skipped);
        r->last_status = done;
    }
}

/* Takes rounds of ticks until the duration is over, a stop is asked for or
 * a node is lost. The next round goes out before this one is written: the
 * agents sample while kprof formats. */
static void sample(recording *r)
{
    r->start = r->last_status = r->next_round = kp_now_us();
    unsigned in_flight = send_round(r);
    if (r->lost_node)
        r->lost = "sending a request";
    while (in_flight && !r->lost && r->rc == KP_EXIT_OK) {
        double missed_before = node_average(r->nodes, r->n, 1);
        if (await_round(r, in_flight) != 0)
            break;
        uint64_t skipped_before = r->skipped;
        /* no round in flight: the one moment a call to the node gets its
         * own answer */
        if (r->native)
            kp_native_learn_ports(r->native, &r->nodes[0].node);
        in_flight = kp_stop_requested() || r->sink_ended ? 0 : send_round(r);
        if (r->lost_node) {
            r->lost = "sending a request";
            break;
        }
        if (write_ticks(r->nodes, r->n, &r->lat) != 0) {
            r->rc = KP_EXIT_FAILURE;
            break;
        }
        if (r->out && kp_record_files_error(r->out, NULL) != KP_OK)
            break;
        if (r->o->sink && r->o->sink->round &&
            r->o->sink->round(r->o->sink->ctx, &r->nodes[0].node, r->native))
            r->sink_ended = 1;
        watch_pace(r, missed_before, skipped_before);
    }
    uint64_t duration = r->o->duration_us;
    if (duration && !r->lost && r->rc == KP_EXIT_OK) {
        /* the last tick's interval is part of the recording: a run of
         * --duration lasts that long, at any rate */
        while (!kp_stop_requested() && kp_now_us() - r->start < duration) {
            uint64_t left = duration - (kp_now_us() - r->start);
            struct timespec nap = {(time_t)(left / 1000000u), (long)(left % 1000000u) * 1000};
            nanosleep(&nap, NULL);
        }
    }
}

/* Native CPU sampling of the node, on by default where it is possible;
 * where it is not, kprof says why once and samples cooperatively. */
static void start_native(recording *r)
{
    const kp_record_options *o = r->o;
    if (!o->cpu_rate)
        return;
    if (r->n > 1) {
        snprintf(r->native_off, sizeof r->native_off,
                 "native CPU sampling covers one node; record one --node for it");
    } else {
        attached_node *node = &r->nodes[0];
        char header[1024], title[600];
        snprintf(title, sizeof title,
                 "kprof native CPU sampling of %.500s: every thread of beam.smp, %u Hz",
                 node->target, o->cpu_rate);
        kp_segment_config sc = segment_config(o, r->dir, "cpu", title, header, sizeof header);
        const kp_native_observer *cpu = o->sink && o->sink->cpu.fn ? &o->sink->cpu : NULL;
        r->native = kp_native_attach(&node->node, node->wire.agent.os_pid, o->cpu_rate,
                                     o->sink ? NULL : &sc, cpu, r->live ? &r->live_cpu : NULL,
                                     kp_record_frame_flags(o), r->native_off, sizeof r->native_off);
    }
    if (o->native_off && o->native_off_len)
        snprintf(o->native_off, o->native_off_len, "%s", r->native ? "" : r->native_off);
    if (o->quiet)
        return;
    if (r->native) {
        kp_pid_layout layout;
        int slot;
        char how[128];
        kp_native_learned(r->native, &layout, &slot);
        kp_pid_layout_describe(&layout, how, sizeof how);
        fprintf(stderr,
                "kprof: CPU: every thread of the node sampled natively, %u times a second "
                "(cpu.folded); %s; learned from the node: pids laid out as %s, light BIFs' "
                "callers %s\n",
                o->cpu_rate, kp_native_describe(r->native), how,
                slot >= 0 ? "found" : "not found (their samples end at the BIF)");
    } else
        fprintf(stderr, "kprof: CPU: no native sampling: %s\n", r->native_off);
}

/* README.txt's paragraph on the CPU view. */
static void cpu_note(const recording *r, char *text, size_t cap)
{
    if (r->native)
        snprintf(text, cap,
                 "CPU: cpu.folded and cpu.svg show where the node's CPU went, exactly:\n"
                 "every thread of beam.smp sampled natively %u times a second (Linux\n"
                 "perf_events; what Linux perf shows). Stacks, root first: the thread kind\n"
                 "(scheduler, dirty_cpu, dirty_io, other); its state, in the words of\n"
                 "msacc (emulator, bif, nif, gc, port, check_io, aux, busy_wait, other,\n"
                 "sleep); the Erlang process and its name where the sample could be\n"
                 "attributed to one; Erlang functions; the VM's C functions as [vm]name,\n"
                 "other libraries' as [LIBRARY]name, a function without a symbol as\n"
                 "[vm]FILE@0xSTART (its start in the file); [kernel]. Open cpu.svg first.\n"
                 "cpu-NNNNNN.perf%s: the same samples in time order as perf-script\n"
                 "segments (real thread ids, cpu-clock periods in ns): in FlameScope, a\n"
                 "heat map of the node's CPU over time. %s: the build id of each\n"
                 "file of native code, for `kprof report` to name FILE@0xSTART from a\n"
                 "debug file installed later (Debian's -dbgsym packages).\n",
                 r->o->cpu_rate, kp_compression_suffix(r->o->compression), KP_NATIVE_FILES_NAME);
    else
        snprintf(text, cap,
                 "CPU: native sampling did not run (%s).\n"
                 "The CPU view is then the cooperative one below (samples.svg, under\n"
                 "'running'): a stack is read when the process next handles a signal,\n"
                 "often at its next receive rather than in the code that burned the CPU.\n"
                 "Such samples are marked: under 'running', stack_read_at_next_receive\n"
                 "holds the samples whose leaf is a receive where processes were seen\n"
                 "waiting.\n",
                 r->o->cpu_rate ? r->native_off : "--cpu-rate 0");
}

/* Stops native sampling and names its processes while the node is still
 * connected. */
static void stop_native(recording *r, kp_native_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    if (!r->native)
        return;
    kp_native_stop(r->native, stats);
    if (kp_native_name_processes(r->native, &r->nodes[0].node) != 0 && !r->o->quiet)
        kp_warn("could not name the processes of the native CPU samples");
}

/* Writes cpu.folded and cpu.svg and says what native sampling saw. */
static void finish_native(recording *r, const kp_native_stats *st, const char *caption)
{
    if (!r->native)
        return;
    char err[4500];
    int written = kp_native_write(r->native, r->dir, caption, err, sizeof err);
    if (written < 0) {
        kp_error("%s", err);
        r->rc = KP_EXIT_FAILURE;
    }
    if (st->write_error) {
        kp_error("cannot write the cpu segments to %s: %s; those already written are complete",
                 r->dir, strerror(st->write_error));
        r->rc = KP_EXIT_FAILURE;
    }
    if (!r->o->quiet && st->samples)
        fprintf(stderr,
                "kprof: CPU: %llu native samples of %zu threads, %.0f%% attributed to an "
                "Erlang process, %.0f%% in C code (%.0f%% of those unwound to their Erlang "
                "caller), %.0f%% in the kernel, %.1f%% ending in a named function, %llu lost; "
                "%s/cpu.svg and %llu segment%s cpu-NNNNNN.perf%s\n",
                (unsigned long long)st->samples, st->threads,
                100.0 * (double)st->attributed / (double)st->samples,
                100.0 * (double)st->c_leaf / (double)st->samples,
                st->c_leaf ? 100.0 * (double)st->unwound / (double)st->c_leaf : 0.0,
                100.0 * (double)st->in_kernel / (double)st->samples,
                100.0 * (double)st->named_leaf / (double)st->samples, (unsigned long long)st->lost,
                r->dir, (unsigned long long)st->segments.segments,
                st->segments.segments == 1 ? "" : "s", kp_compression_suffix(r->o->compression));
    else if (!r->o->quiet)
        fprintf(stderr, "kprof: CPU: no native sample (the node was idle)\n");
    if (!r->o->quiet && st->samples) {
        const char *kernel = kp_native_kernel_note(r->native);
        if (kernel && kernel[0])
            fprintf(stderr, "kprof: CPU: kernel frames stay [kernel]: %s\n", kernel);
        else if (!kernel)
            fprintf(stderr, "kprof: CPU: kernel frames named from /proc/kallsyms\n");
        if (st->port_tasks)
            fprintf(stderr,
                    "kprof: CPU: %llu samples in port tasks, %.0f%% of them counted to the "
                    "process their port is connected to, under a [port]NAME frame\n",
                    (unsigned long long)st->port_tasks,
                    100.0 * (double)st->port_owned / (double)st->port_tasks);
        char line[1024], flags[256];
        kp_state_summary(st->by_state, line, sizeof line);
        fprintf(stderr, "kprof: CPU by state: %s\n", line);
        kp_busy_wait_flags_of(kp_native_os_pid(r->native), flags, sizeof flags);
        snprintf(r->busy_flags, sizeof r->busy_flags, "%s", flags);
        if (kp_busy_wait_note(st->by_state, flags, line, sizeof line))
            fprintf(stderr, "kprof: %s\n", line);
    }
    kp_native_free(r->native);
    r->native = NULL;
}

/* Detaches, reports what went wrong, writes the aggregates and README and
 * prints the summary. Returns the exit code. */
static int finish(recording *r)
{
    const kp_record_options *o = r->o;
    if (o->sink) {
        kp_native_stats native;
        if (r->native)
            kp_native_stop(r->native, &native);
        kp_native_free(r->native);
        r->native = NULL;
        detach_all(r->nodes, r->n);
        if (r->lost && r->rc == KP_EXIT_OK)
            r->rc = KP_EXIT_NODE;
        kp_frames_free(r->frames);
        kp_stacks_free(r->stacks);
        return r->rc;
    }
    char err[8192];
    uint64_t elapsed = kp_now_us() - r->start;
    if (r->tty)
        fputc('\n', stderr);
    run_totals totals = totals_of(r->nodes, r->n, elapsed, r->skipped);
    kp_native_stats native;
    stop_native(r, &native);
    detach_all(r->nodes, r->n);
    if (r->lost) {
        kp_error("lost the connection to %s while %s (the node stopped or the network failed); "
                 "the files written so far are complete",
                 r->lost_node, r->lost);
        r->rc = KP_EXIT_NODE;
    }
    int write_errno;
    kp_status write_error = kp_record_files_error(r->out, &write_errno);
    if (write_error != KP_OK) {
        kp_error("cannot write to %s: %s; the segments already written are complete", r->dir,
                 kp_status_reason(write_error, write_errno));
        r->rc = KP_EXIT_FAILURE;
    }
    uint64_t samples = kp_record_files_samples(r->out);
    char caption[4200], note[1024];
    caption_text(caption, sizeof caption, o, r->targets);
    cpu_note(r, note, sizeof note);
    int written[KP_WEIGHT_COUNT];
    kp_segment_stats st;
    if (kp_record_files_close(r->out, caption, note, written, &st, err, sizeof err) != 0) {
        kp_error("%s", err);
        r->rc = KP_EXIT_FAILURE;
    }
    if (!o->quiet)
        print_summary(o, r->dir, &totals, samples, &st, written, &r->lat);
    finish_native(r, &native, caption);
    /* the page to open first, from the model fed as it sampled (every
     * sample, also with --keep); from the segments if the model ran out of
     * memory. Its memory is bounded (kp/report.h; about 270 MB for an hour
     * at 10,000 samples a second, tests/bench/report_scale) */
    if (samples > 0 && r->rc != KP_EXIT_FAILURE && r->live) {
        char page[4200];
        const char *dirs[1] = {r->dir};
        snprintf(page, sizeof page, "%s/report.html", r->dir);
        kp_report_read_stats rs = {0};
        rs.segments = (unsigned)st.segments;
        rs.cpu_segments = (unsigned)native.segments.segments;
        snprintf(rs.node, sizeof rs.node, "%.255s", r->targets);
        rs.wall_minus_clock_us = r->wall_minus_clock_us;
        snprintf(rs.busy_flags, sizeof rs.busy_flags, "%s", r->busy_flags);
        int rc = kp_report_live_write(r->live, r->dir, &rs, page, o->quiet);
        if (rc < 0)
            rc = kp_report_build(dirs, 1, page, o->quiet);
        if (rc != KP_EXIT_OK && r->rc == KP_EXIT_OK)
            r->rc = KP_EXIT_FAILURE;
    }
    kp_report_live_free(r->live);
    r->live = NULL;
    kp_frames_free(r->frames);
    kp_stacks_free(r->stacks);
    return r->rc;
}

int kp_record_run(const kp_record_options *o)
{
    static recording r; /* the nodes and latencies are too large for a stack */
    memset(&r, 0, sizeof r);
    r.o = o;
    r.interval = (uint64_t)(1e6 / o->rate);
    r.per_round = kp_sample_round_ticks(r.interval, o->n_pids ? (unsigned)o->n_pids : o->top);
    r.wanted = o->duration_us ? (o->duration_us + r.interval - 1) / r.interval : 0;
    r.rc = start_recording(&r);
    if (r.rc != KP_EXIT_OK)
        return r.rc;
    if (o->sink && o->sink->attached &&
        o->sink->attached(o->sink->ctx, &r.nodes[0].node, r.nodes[0].wire.agent.os_pid) != 0) {
        r.rc = KP_EXIT_FAILURE;
        return finish(&r);
    }
    kp_stop_on_signals();
    r.tty = isatty(STDERR_FILENO) && !o->quiet;
    if (!o->quiet) {
        fprintf(stderr, "kprof: sampling the top %u processes of %s by %s, %.6g times a second",
                o->n_pids ? (unsigned)o->n_pids : o->top, r.targets,
                o->n_pids ? "--pid" : o->select_by, o->rate);
        if (o->duration_us)
            fprintf(stderr, " for %.1f s", (double)o->duration_us / 1e6);
        fprintf(stderr, "; Ctrl-C stops and writes the files to %s/\n", r.dir);
    }
    start_native(&r);
    /* the agent ranks processes by their activity since it started: give
     * that first window time to see every busy process switched out */
    struct timespec window = {0, 250 * 1000 * 1000};
    nanosleep(&window, NULL);
    sample(&r);
    return finish(&r);
}

unsigned kp_record_frame_flags(const kp_record_options *o)
{
    return o->erlang_names ? KP_FRAMES_ERLANG_NAMES : 0;
}

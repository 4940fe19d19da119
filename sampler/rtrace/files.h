/* Writing one finished request trace (rtrace/collect.h): the eflame-compatible
 * folded file, its flame graph, the perf-script timeline and the
 * trace-event timeline (timeline.c), each complete
 * or not at all (kp_sink: temporary name, then rename). */
#ifndef KP_RTRACE_FILES_H
#define KP_RTRACE_FILES_H

#include <ei.h>
#include <stddef.h>
#include <stdint.h>

#include <kp/intern.h>
#include <kp/status.h>

/* The time one process spent in one stack. */
typedef struct {
    uint32_t stack;     /* id in the trace's kp_stacks */
    uint32_t pid_frame; /* the process's pseudo-frame, "<0.N.S>" */
    int64_t start, dur; /* node monotonic ns */
} kp_rtrace_interval;

/* One process spawning another within the trace (at `ts`; `ts_to` is the
 * same), or sending it a message of the request at `ts` that it took in at
 * `ts_to`. */
typedef struct {
    uint32_t from, to; /* the processes' pseudo-frames */
    int64_t ts, ts_to;
    int message; /* 0: a spawn */
} kp_rtrace_link;

/* How far another node's clock is from this one's, for its part. */
typedef struct {
    char name[256];
    int64_t offset_ns; /* its monotonic time minus this node's */
    int64_t error_ns;  /* within +- this */
} kp_rtrace_clock;

/* A trace's time as it grows: ns spent per stack id, and the intervals in
 * event order. Zeroed is empty; kp_rtrace_times_free releases it. */
typedef struct {
    uint64_t *ns;
    size_t n_ns;
    kp_rtrace_interval *iv;
    size_t n_iv, cap_iv;
} kp_rtrace_times;

/* Process `pid_frame` spent `dur` ns from `start` in stack `stack`: added to
 * the stack's time and as an interval. KP_OK or KP_ERR_NOMEM (nothing
 * added). */
kp_status kp_rtrace_times_add(kp_rtrace_times *times, uint32_t stack, uint32_t pid_frame,
                              int64_t start, int64_t dur);
void kp_rtrace_times_free(kp_rtrace_times *times);

typedef struct {
    const kp_frames *frames;
    const kp_stacks *stacks;
    const uint64_t *ns; /* ns spent per stack id */
    size_t n_ns;
    kp_rtrace_interval *iv; /* in event order; kp_rtrace_write_perf sorts them */
    size_t n_iv;
    int64_t start, last; /* of the trace */
    erlang_pid root;
    const char *cut;             /* why the trace was cut, or NULL */
    const kp_rtrace_link *links; /* spawns and messages, for the timeline's flow arrows */
    size_t n_links;
    /* the other nodes whose parts are in (their processes' frames are
     * named NODE:<0.N.S>), with how their clocks were aligned */
    const kp_rtrace_clock *clocks;
    size_t n_clocks;
    uint64_t events; /* the trace events it was built from (this node's) */
} kp_rtrace_data;

/* The folded file at `path`: each stack with its microseconds (at least 1,
 * so that no part of the request vanishes), and for a cut trace a last line
 * `<0.N.S>;kprof_trace_cut:REASON 1`; and, unless `svg_path` is NULL, first
 * its flame graph there, headed "Request trace ID". */
kp_status kp_rtrace_write_folded(const kp_rtrace_data *trace, const char *path,
                                 const char *svg_path, const char *id);

/* The perf-script file: every process's stack sampled every tick (10 us, or
 * 1/100,000 of the trace when longer), PERIOD in microseconds; a trace too
 * short for two ticks gets a sample per interval instead. */
kp_status kp_rtrace_write_perf(kp_rtrace_data *trace, const char *path);

/* The timeline at `path` in the Chrome trace-event format (JSON; Perfetto,
 * chrome://tracing and speedscope open it): one lane per process, named
 * "<0.N.S>", with a complete event per stretch of time each frame spent on
 * its stack, nested as the calls were, and a flow arrow from each spawn to
 * the new process's lane (category "spawn") and from each message that
 * carried the request on to where its receiver took it in ("message"); frames `sleep` (scheduled out or
 * waiting to run) and `garbage_collection` have the categories "sleep" and
 * "gc", function frames "call". Times in microseconds from the trace's
 * start. Past 200,000 intervals, slices shorter than 1/200,000 of the trace
 * are left out (their time shows in their parent). `id` names the trace;
 * "otherData" holds it, the cut's reason if any, and the count of events
 * (what the trace cost the node is about that many times 0.4 us). */
kp_status kp_rtrace_write_timeline(const kp_rtrace_data *trace, const char *path, const char *id);

/* Writes a finished trace's files into `dir` (created if missing), each
 * named DIR/TIME-ID with its extension (TIME: now, UTC, to the millisecond):
 * .folded with its .svg, .perf and .trace.json. Returns KP_OK with the
 * folded file's path in `folded`, or an error with `why` saying what
 * failed (files written before the failure stay whole). */
kp_status kp_rtrace_write_files(kp_rtrace_data *trace, const char *dir, const char *id,
                                char *folded, size_t folded_len, char *why, size_t why_len);

#endif

/* `kprof record`: the sampling loop and its outputs. */
#ifndef KP_RECORD_RUN_H
#define KP_RECORD_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "kp/sink.h"

typedef struct {
    const char **nodes; /* as given; at least one */
    size_t n_nodes;
    int all_nodes;           /* also every node connected to the first */
    const char *cookie_file; /* NULL: $KPROF_COOKIE or ~/.erlang.cookie */
    unsigned connect_timeout_ms;
    unsigned top;
    const char *select_by;
    uint64_t reselect_us;
    const char **pids;
    size_t n_pids;
    double rate;            /* ticks per second = samples/s per process */
    uint64_t duration_us;   /* 0 = until Ctrl-C */
    const char *output_dir; /* NULL = kprof-<node>-<UTC time> */
    uint64_t rotate_bytes;
    uint64_t rotate_us;
    unsigned keep;
    int pprof;     /* --pprof: a profile beside each segment */
    int no_report; /* --no-report: no report.html at the end */
    kp_compression compression;
    unsigned depth;
    unsigned cpu_rate; /* native CPU samples per second per thread; 0 = off */
    int erlang_names;  /* --erlang-names: Elixir frames as Elixir.Mod:fun/1 */
    int quiet;
} kp_record_options;

/* The kp_frames_create flags the options ask for. */
unsigned kp_record_frame_flags(const kp_record_options *options);

/* Runs a recording; returns the process exit code. */
int kp_record_run(const kp_record_options *options);

/* One-shot stacks of the top processes, printed on stdout. */
int kp_dump_run(const kp_record_options *options);

#endif

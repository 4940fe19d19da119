/* `kprof record`: the sampling loop and its outputs. */
#ifndef KP_RECORD_RUN_H
#define KP_RECORD_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/native.h"
#include "kp/intern.h"
#include "kp/sink.h"
#include "node/connection.h"
#include "samples/processes.h"

/* Where a run's samples go instead of files: kprof push's windows. With a
 * sink, a run creates no directory and writes nothing; it samples until a
 * stop is asked for (--duration aside) or a node is lost. */
typedef struct {
    /* A cooperative sample of the run's node number `node` (in the order
     * attached), taken at `time_us` on kprof's clock (common/clock.h); its
     * stack in `frames` and `stacks` (samples/processes.h). Returns 0, or
     * -1 when out of memory (the run then stops). Called on the run's
     * thread. */
    int (*sample)(void *ctx, size_t node, uint64_t time_us, const kp_frames *frames,
                  const kp_stacks *stacks, const kp_proc_sample *sample);
    /* Once the nodes are attached, before any sample: the first node,
     * and its OS pid as it sees itself. Returns 0, or -1 to stop the run
     * (out of memory). */
    int (*attached)(void *ctx, kp_node *node, long os_pid);
    /* Sees every native CPU sample, on the sampler's thread (cpu/native.h);
     * its fn NULL for none. */
    kp_native_observer cpu;
    /* After each round of ticks, where no answer of an agent is on its way:
     * the moment to call the first node (`node`) and to hand on what the
     * samples so far make. `native` is NULL without native sampling.
     * Returns 1 to end the run once the round in flight is in (the run then
     * returns KP_EXIT_OK), else 0. */
    int (*round)(void *ctx, kp_node *node, kp_native *native);
    void *ctx;
} kp_record_sink;

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
    /* NULL: files in output_dir; else the samples go there (see above) */
    const kp_record_sink *sink;
    /* with a sink: why the nodes could not be attached (the run then
     * returns KP_EXIT_NODE, or KP_EXIT_USAGE for a bad name or cookie, and
     * prints nothing), or else why native sampling did not start ("" when
     * it runs or was not asked for); filled by the run */
    char *native_off;
    size_t native_off_len;
} kp_record_options;

/* The kp_frames_create flags the options ask for. */
unsigned kp_record_frame_flags(const kp_record_options *options);

/* The names of the visible nodes connected to `first` (erlang:nodes()),
 * for --all-nodes: at most `cap` into `names`; how many, or -1 when the
 * node did not answer. */
int kp_record_connected_nodes(kp_node *first, char names[][512], size_t cap);

/* Runs a recording; returns the process exit code. */
int kp_record_run(const kp_record_options *options);

/* One-shot stacks of the top processes, printed on stdout. */
int kp_dump_run(const kp_record_options *options);

#endif

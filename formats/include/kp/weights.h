/* What a cooperative sample of `kprof record` weighs: one weight per folded
 * file it writes (samples.folded, reductions.folded, ...), in this order.
 * The same weights serve the pprof profiles and the HTML report, so that
 * every view of a recording agrees with its folded files. A weight of 0 or
 * less adds nothing to a stack.
 *
 * KP_WEIGHT_TABLE is the one place a weight is defined: its name (of its
 * folded file, its pprof sample type, its report view), unit, title (of its
 * flame graph), help line (a recording's README) and how it is computed
 * from a sample's metrics (kp/metrics.h): how (ONE, VALUE, DELTA or
 * RELEASE, the delta negated) applied to the sum of metrics A and B (B is
 * A when there is one). Every output takes them from here. */
#ifndef KP_WEIGHTS_H
#define KP_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "kp/metrics.h"
#include "kp/perf_reader.h"

/* X(ID, name, unit, title, help, how, A, B) */
#define KP_WEIGHT_TABLE(X)                                                                     \
    X(SAMPLES, "samples", "samples", "Where the processes spend their time (samples)",         \
      "sample counts: where processes spend their time", ONE, REDUCTIONS, REDUCTIONS)          \
    X(REDUCTIONS, "reductions", "reductions", "Reductions burned since the previous sample",   \
      "reductions burned since the previous sample", DELTA, REDUCTIONS, REDUCTIONS)            \
    X(MEMORY, "memory", "bytes", "Process memory held (bytes)", "process memory held (bytes)", \
      VALUE, MEMORY, MEMORY)                                                                   \
    X(QUEUE, "message_queue_len", "messages", "Messages waiting", "messages waiting", VALUE,   \
      QUEUE, QUEUE)                                                                            \
    X(BIN_VHEAP, "bin_vheap", "bytes", "Off-heap binaries referenced (bytes)",                 \
      "off-heap binaries referenced (bytes)", VALUE, BIN_VHEAP, BIN_OLD_VHEAP)                 \
    X(BIN_GROWTH, "bin_vheap_growth", "bytes",                                                 \
      "Growth of off-heap binaries since the previous sample (bytes)",                         \
      "growth of those binaries since the previous sample", DELTA, BIN_VHEAP, BIN_OLD_VHEAP)   \
    X(BIN_RELEASE, "bin_vheap_release", "bytes",                                               \
      "Release of off-heap binaries since the previous sample (bytes)",                        \
      "their release since the previous sample", RELEASE, BIN_VHEAP, BIN_OLD_VHEAP)

enum {
#define KP_WEIGHT_ENUM(id, name, unit, title, help, how, a, b) KP_WEIGHT_##id,
    KP_WEIGHT_TABLE(KP_WEIGHT_ENUM)
#undef KP_WEIGHT_ENUM
        KP_WEIGHT_COUNT
};

/* A native CPU sample weighs one: its name, unit and title wherever it is
 * drawn (cpu.svg, the report). */
#define KP_CPU_WEIGHT_NAME "cpu samples"
#define KP_CPU_WEIGHT_UNIT "samples"
#define KP_CPU_WEIGHT_TITLE "CPU of the node's threads"

/* By weight, from the table: "samples", "reductions", ... */
extern const char *const kp_weight_names[KP_WEIGHT_COUNT];
extern const char *const kp_weight_units[KP_WEIGHT_COUNT];
extern const char *const kp_weight_titles[KP_WEIGHT_COUNT];
extern const char *const kp_weight_helps[KP_WEIGHT_COUNT];

/* The weights of a sample whose metrics are `value` and `delta` (the
 * change since that process's previous sample), by KP_METRIC_ index. */
void kp_weights_compute(const int64_t value[KP_METRIC_COUNT], const int64_t delta[KP_METRIC_COUNT],
                        int64_t w[KP_WEIGHT_COUNT]);

/* The weights of a sample read back from a perf-script segment, from its
 * `metric_NAME` fields named as in kp/metrics.h; a missing field is 0,
 * a field of another name is ignored. */
void kp_weights_from_perf(const kp_perf_metric *metrics, size_t n, int64_t w[KP_WEIGHT_COUNT]);

#endif

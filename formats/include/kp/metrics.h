/* The metrics `kprof record` samples per process, one row each, in the
 * order kprof_agent's sample_tuple/7 sends them after the pid and status;
 * by these names they are the `metric_NAME` fields of the perf-script
 * segments, which every reader of a recording (report, convert, pprof)
 * takes them back from.
 *
 * To add a metric, add it to that tuple in the agent and a row here: the
 * decoder (sampler/samples/sample_wire.c), the conversion to bytes
 * (sampler/samples/processes.c) and the perf-script fields
 * (sampler/record/files.c) follow from this table. A weight computed from
 * it (a folded file, a report view) is one more row of kp/weights.h. */
#ifndef KP_METRICS_H
#define KP_METRICS_H

#include <stddef.h>

/* X(ID, name in outputs, 1 if the agent sends it in words) */
#define KP_METRIC_TABLE(X)                    \
    X(REDUCTIONS, "reductions", 0)            \
    X(QUEUE, "message_queue_len", 0)          \
    X(MEMORY, "memory", 0)                    \
    X(TOTAL_HEAP, "total_heap_size", 1)       \
    X(HEAP, "heap_size", 1)                   \
    X(STACK, "stack_size", 1)                 \
    X(BIN_VHEAP, "bin_vheap_size", 1)         \
    X(BIN_OLD_VHEAP, "bin_old_vheap_size", 1) \
    X(MINOR_GCS, "minor_gcs", 0)

enum {
#define KP_METRIC_ENUM(id, name, in_words) KP_METRIC_##id,
    KP_METRIC_TABLE(KP_METRIC_ENUM)
#undef KP_METRIC_ENUM
        KP_METRIC_COUNT
};

typedef struct {
    const char *name; /* "reductions", ... as in metric_NAME fields */
    size_t name_len;  /* strlen(name): fields are matched by it once per sample */
    int in_words;     /* the agent sends words; kprof converts to bytes */
} kp_metric_def;

extern const kp_metric_def kp_metrics[KP_METRIC_COUNT];

#endif

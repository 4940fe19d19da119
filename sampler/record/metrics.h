/* The metrics `kprof record` samples per process: one row each, in the
 * order kprof_agent's sample_tuple/7 sends them after the pid and status.
 *
 * To add a metric, add it to that tuple in the agent and a row here: the
 * decoder (record/sample_wire.c), the conversion to bytes
 * (record/processes.c) and the perf-script `metric_NAME` fields
 * (record/files.c) follow from this table. A folded file weighted by it is
 * one more row of the weights in record/files.c. */
#ifndef KP_RECORD_METRICS_H
#define KP_RECORD_METRICS_H

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
    int in_words;     /* the agent sends words; kprof converts to bytes */
} kp_metric_def;

extern const kp_metric_def kp_metrics[KP_METRIC_COUNT];

/* A sample on the wire: {Pid, Status, Metric..., Stack}. */
#define KP_SAMPLE_TUPLE_ARITY (2 + KP_METRIC_COUNT + 1)

#endif

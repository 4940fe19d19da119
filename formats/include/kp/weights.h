/* What a cooperative sample of `kprof record` weighs: one weight per folded
 * file it writes (samples.folded, reductions.folded, ...), in this order.
 * The same weights serve the pprof profiles and the HTML report, so that
 * every view of a recording agrees with its folded files. A weight of 0 or
 * less adds nothing to a stack. */
#ifndef KP_WEIGHTS_H
#define KP_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "kp/perf_reader.h"

enum {
    KP_WEIGHT_SAMPLES,     /* 1 */
    KP_WEIGHT_REDUCTIONS,  /* reductions since the process's previous sample */
    KP_WEIGHT_MEMORY,      /* process memory, bytes */
    KP_WEIGHT_QUEUE,       /* messages waiting */
    KP_WEIGHT_BIN_VHEAP,   /* off-heap binaries referenced (young + old), bytes */
    KP_WEIGHT_BIN_GROWTH,  /* their growth since the previous sample */
    KP_WEIGHT_BIN_RELEASE, /* their release since the previous sample */
    KP_WEIGHT_COUNT
};

/* "samples", "reductions", "memory", "message_queue_len", "bin_vheap",
 * "bin_vheap_growth", "bin_vheap_release": the folded files' names. */
extern const char *const kp_weight_names[KP_WEIGHT_COUNT];
/* "samples", "reductions", "bytes", "messages", "bytes", "bytes", "bytes". */
extern const char *const kp_weight_units[KP_WEIGHT_COUNT];

/* The weights of a sample read back from a perf-script segment, from its
 * metric fields (metric_reductions, metric_memory, metric_message_queue_len,
 * metric_bin_vheap_size, metric_bin_old_vheap_size); a missing field weighs 0. */
void kp_weights_from_perf(const kp_perf_metric *metrics, size_t n, int64_t w[KP_WEIGHT_COUNT]);

#endif

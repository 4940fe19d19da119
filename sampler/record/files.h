/* What `kprof record` writes: perf-script segments as samples arrive, and at
 * the end one folded file per weight with its flame graph (.svg), plus a
 * README.txt saying what each file is and how to view it. */
#ifndef KP_OUTPUTS_H
#define KP_OUTPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "kp/intern.h"
#include "kp/segment.h"
#include "record/processes.h"

enum { KP_OUT_SAMPLES, KP_OUT_REDUCTIONS, KP_OUT_MEMORY, KP_OUT_QUEUE, KP_OUT_BIN_VHEAP,
       KP_OUT_BIN_GROWTH, KP_OUT_BIN_RELEASE, KP_OUT_COUNT };

typedef struct kp_outputs kp_outputs;

/* Opens the segment writer in `segments->dir` over shared frames and stacks
 * (borrowed). Returns NULL when out of memory or for a bad configuration. */
kp_outputs *kp_outputs_open(const kp_segment_config *segments, const kp_frames *frames,
                            const kp_stacks *stacks);

/* Records one sample of the BEAM whose OS pid is `os_pid`, at `time_us`
 * (monotonic). Returns 0, or -1 when out of memory. A failed segment write
 * (disk full...) does not fail the call: it is kept for kp_outputs_error(). */
int kp_outputs_add(kp_outputs *outputs, uint32_t os_pid, uint64_t time_us,
                   const kp_profile_sample *sample);

/* The first write error (KP_OK if none) and its errno. */
kp_status kp_outputs_error(const kp_outputs *outputs, int *saved_errno);
uint64_t kp_outputs_samples(const kp_outputs *outputs);
const kp_segment_stats *kp_outputs_segment_stats(const kp_outputs *outputs);

/* Completes the last segment, writes the non-empty folded files and their
 * flame graphs (NAME.folded and NAME.svg, for the names whose `written[i]`
 * is non-zero; `caption` is the graphs' second heading line) and README.txt
 * (`readme` text), frees the outputs. Returns 0, or -1 with a message in
 * `err`. */
int kp_outputs_close(kp_outputs *outputs, const char *readme, const char *caption,
                     int written[KP_OUT_COUNT], kp_segment_stats *stats, char *err,
                     size_t err_len);

/* "samples", "reductions", ... and their units. */
extern const char *const kp_out_names[KP_OUT_COUNT];
extern const char *const kp_out_units[KP_OUT_COUNT];

#endif

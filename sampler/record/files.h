/* What `kprof record` writes: perf-script segments as samples arrive, and at
 * the end one folded file per weight with its flame graph (.svg), plus a
 * README.txt saying what each file is and how to view it. */
#ifndef KP_RECORD_FILES_H
#define KP_RECORD_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "kp/intern.h"
#include "kp/segment.h"
#include "kp/weights.h"
#include "report/live.h"
#include "samples/processes.h"

typedef struct kp_record_files kp_record_files;

/* Opens the segment writer in `segments->dir` over shared frames and stacks
 * (borrowed); with `pprof`, each completed segment gets its pprof profile
 * (record/segment_pprof.h); with `live` (borrowed; NULL for none), every
 * sample goes into that report too. Returns NULL when out of memory or for
 * a bad configuration. */
kp_record_files *kp_record_files_open(const kp_segment_config *segments, const kp_frames *frames,
                                      const kp_stacks *stacks, int pprof, kp_report_live *live);

/* One node's samples on their way into the files: the context of
 * kp_record_files_add, which the node's process table calls for each
 * sample. The sampling loop sets `time_us` before it decodes each tick. */
typedef struct {
    kp_record_files *files; /* shared by the nodes of a recording */
    uint32_t os_pid;        /* the node's BEAM */
    uint64_t time_us;       /* of the tick being decoded, monotonic, on kprof's clock */
} kp_record_files_node;

/* A kp_proc_sample_fn (samples/processes.h): records `sample` of node
 * `node` (a kp_record_files_node). Returns 0, or -1 when out of memory. A
 * failed segment write (disk full...) does not fail the call: it is kept
 * for kp_record_files_error(). */
int kp_record_files_add(void *node, const kp_proc_sample *sample);

/* The first write error (KP_OK if none) and its errno. */
kp_status kp_record_files_error(const kp_record_files *outputs, int *saved_errno);
uint64_t kp_record_files_samples(const kp_record_files *outputs);
const kp_segment_stats *kp_record_files_segment_stats(const kp_record_files *outputs);

/* Completes the last segment, writes the non-empty folded files and their
 * flame graphs (NAME.folded and NAME.svg, for the names whose `written[i]`
 * is non-zero; `caption`, "kprof recording of ...", is the graphs' second
 * heading line and README.txt's first) and README.txt, frees the outputs.
 * `cpu_note` is README.txt's paragraph on the CPU view (which mode ran).
 * With a NULL `caption` (a run abandoned before sampling) only the segment
 * is completed. Returns 0, or -1 with a message in `err`. */
int kp_record_files_close(kp_record_files *outputs, const char *caption, const char *cpu_note,
                          int written[KP_WEIGHT_COUNT], kp_segment_stats *stats, char *err,
                          size_t err_len);

#endif

/* kprof record --pprof: beside each completed segment SEGMENT.perf[.gz|.zst],
 * SEGMENT.pb.gz, the pprof profile of the same samples (formats' kp/pprof.h)
 * with one value per weight of record/files.h: samples, reductions, memory,
 * message_queue_len, bin_vheap and its growth and release.
 *
 * The segment writer completes a segment once the second sample of the next
 * one arrives (kp/segment.h): the two newest samples are held back here, so
 * that a profile holds exactly its segment's samples. */
#ifndef KP_RECORD_SEGMENT_PPROF_H
#define KP_RECORD_SEGMENT_PPROF_H

#include <stddef.h>
#include <stdint.h>

#include "kp/intern.h"
#include "record/files.h"

typedef struct kp_segment_pprof kp_segment_pprof;

/* Over shared frames and stacks (borrowed); NULL when out of memory. */
kp_segment_pprof *kp_segment_pprof_create(const kp_frames *frames, const kp_stacks *stacks);
void kp_segment_pprof_free(kp_segment_pprof *profiles);

/* One sample on `stack` at `time_us`, its weights (KP_WEIGHT_COUNT values;
 * those not above 0 add nothing). Returns 0, or -1 when out of memory. */
int kp_segment_pprof_add(kp_segment_pprof *profiles, uint32_t stack,
                         const int64_t weights[KP_WEIGHT_COUNT], uint64_t time_us);

/* The segment at `segment_path` (PREFIX-NNNNNN.perf...) is complete:
 * writes its profile beside it from the samples added before the `held`
 * newest ones (2 while recording, 0 at the end), which then start the next.
 * With `keep` (--keep N), the profile of segment NNNNNN - N goes, as the
 * segment writer removed that segment. Returns 0, or -1 with a message in
 * `err`. */
int kp_segment_pprof_write(kp_segment_pprof *profiles, const char *segment_path, size_t held,
                           unsigned keep, char *err, size_t err_len);

#endif

/* The report fed as `kprof record` samples: each sample goes into the
 * report's model as it is written to its segment, so that report.html is
 * written at the end without reading the segments back. The cooperative
 * samples come from the sampling loop, the native CPU samples from the
 * sampler thread: kp_report_live_add may be called from both (one thread a
 * kind). */
#ifndef KP_REPORT_LIVE_H
#define KP_REPORT_LIVE_H

#include <stdint.h>

#include "kp/intern.h"
#include "kp/report.h"
#include "report/read.h"

typedef struct kp_report_live kp_report_live;

/* A new empty feed; NULL when out of memory. */
kp_report_live *kp_report_live_create(void);
void kp_report_live_free(kp_report_live *live);

/* Adds a sample of `kind` taken at `time_ns` (kprof's monotonic clock),
 * of interned stack `stack` (its folded text after "beam.smp", as its
 * segment reads back) and weights `w` (KP_WEIGHT_COUNT, or 1 for CPU).
 * A feed that fails (out of memory) takes no more samples, and says so at
 * kp_report_live_write. */
void kp_report_live_add(kp_report_live *live, kp_report_kind kind, const kp_frames *frames,
                        const kp_stacks *stacks, uint32_t stack, uint64_t time_ns,
                        const int64_t *w);

/* The same for a native CPU sample, as a kp_native_tap (cpu/native.h):
 * `live` is the feed. */
void kp_report_live_add_cpu(void *live, const kp_frames *frames, const kp_stacks *stacks,
                            uint32_t stack, uint64_t time_us);

/* Writes the page `out` of the recording `dir` (its segments counted in
 * `stats`, samples counted here), as kp_report_build would from the
 * segments. Returns a process exit code, or -1 when the feed failed: then
 * build the page from the segments. */
int kp_report_live_write(kp_report_live *live, const char *dir, kp_report_read_stats *stats,
                         const char *out, int quiet);

#endif

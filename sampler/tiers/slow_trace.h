/* A slow request of tier tracing as a request trace: the files `kprof
 * trace` writes for one request (rtrace/files.h: folded stacks with their
 * flame graph, perf-script, the trace-event timeline), built from the tier
 * calls tier tracing saw, not from every call.
 *
 * Each process the request reached is a root ("<0.N.S>"), under it the tier
 * functions that ran there, nested as they were called; the request's own
 * process has its entry function (or kprof_tier_mark's) at the bottom, over
 * the request's whole time, so its time outside tier calls is the entry's.
 * In other processes only the tier calls' time is the request's. Times in
 * microseconds, as `kprof trace` writes them; the timeline has a lane per
 * process. A request whose tier calls passed the matcher's bound
 * (max_intervals) ends with the marker frame kprof_trace_cut:max_intervals.
 */
#ifndef KP_TIERS_SLOW_TRACE_H
#define KP_TIERS_SLOW_TRACE_H

#include <stddef.h>

#include <kp/status.h>

#include "tiers/events.h"
#include "tiers/match.h"

/* Writes request `r` as DIR/TIME-ID.folded (.svg, .perf, .trace.json),
 * `mfas[fn]` naming each function of the matcher's table (`n_fns` of
 * them). Returns KP_OK with the folded file's path in `folded`, or an
 * error with `why` saying what failed (files written before stay whole). */
kp_status kp_tier_slow_trace_write(const kp_tier_request *r, const kp_tier_mfa *mfas, size_t n_fns,
                                   const char *dir, const char *id, char *folded, size_t folded_len,
                                   char *why, size_t why_len);

#endif

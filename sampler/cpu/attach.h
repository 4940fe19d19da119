/* Native CPU sampling of a node kprof is connected to: the checks that make
 * it safe and possible, and the naming of processes through the agent. */
#ifndef KP_CPU_ATTACH_H
#define KP_CPU_ATTACH_H

#include <stddef.h>

#include "cpu/native.h"
#include "node/connection.h"

/* Starts native sampling of the node behind `node`, whose agent reported OS
 * pid `os_pid`. First checks, and refuses with one line naming the cause
 * and the fix in `err`:
 *   - that process `os_pid` here is that node (same boot and start time as
 *     the node reads for itself): kprof never samples another process, and
 *     a node on another host or in another pid namespace fails this;
 *   - that the node runs the JIT on x86-64, of a release whose process
 *     layout kprof knows, with a perf map (+JPperf true).
 * `segments`, `observer`: as kp_native_options (NULL for none). Returns the
 * running sampler, or NULL. */
kp_native *kp_native_attach(kp_node *node, long os_pid, unsigned rate_hz,
                            const kp_segment_config *segments, const kp_native_observer *observer,
                            char *err, size_t err_len);

/* After kp_native_stop(): asks the node (kprof_agent:labels/1) for the
 * registered name or initial call of each process samples were attributed
 * to. Returns 0, or -1 when the node could not be asked (the processes
 * then stay unnamed). */
int kp_native_name_processes(kp_native *native, kp_node *node);

#endif

/* Native CPU sampling of a node kprof is connected to: the checks that make
 * it safe and possible, and the naming of processes through the agent. */
#ifndef KP_CPU_ATTACH_H
#define KP_CPU_ATTACH_H

#include <stddef.h>

#include "cpu/native.h"
#include "node/connection.h"

/* Starts native sampling of the node behind `node`, whose agent reported
 * its own OS pid `own_pid` (os:getpid(), in the node's pid namespace).
 * First checks, and refuses with one line naming the cause and the fix in
 * `err`:
 *   - that the node runs the JIT on x86-64;
 *   - which process here is the node: same kernel (boot id), and a process
 *     whose innermost pid, pid namespace and start time are the node's, so
 *     a node in a container is found from the host, and a node on another
 *     host, or in a pid namespace that kprof cannot see, is refused;
 *   - that its JIT code can be named (its perf map, or the JIT's
 *     registrations in its memory) and perf_events may sample it.
 * Then learns the node's layout (kp_native_learn) from known work that
 * kprof_calibrate runs in it while it samples (0.2 s on an idle node, at
 * most 2.5 s on a busy one), and
 * refuses when it cannot be sure. `segments`, `observer`, `frame_flags`:
 * as kp_native_options (NULL for none). Returns the running sampler, or
 * NULL. */
kp_native *kp_native_attach(kp_node *node, long own_pid, unsigned rate_hz,
                            const kp_segment_config *segments, const kp_native_observer *observer,
                            const kp_native_tap *tap, unsigned frame_flags, char *err,
                            size_t err_len);

/* After kp_native_stop(): asks the node (kprof_agent:labels/1) for the
 * registered name or initial call of each process samples were attributed
 * to. Returns 0, or -1 when the node could not be asked (the processes
 * then stay unnamed). */
int kp_native_name_processes(kp_native *native, kp_node *node);

/* While samples in port tasks wait to learn where a port keeps its
 * connected process and name (kp_native_ports_wanted), asks the agent for
 * the node's ports and teaches them to the sampler; else does nothing.
 * Called from the caller's loop where no answer of the agent is on its
 * way (between rounds of ticks). Returns 1 when learned now, 0 when
 * nothing was wanted or not learned yet, -1 when the node could not be
 * asked or learning gave up (the caller goes on: port work then stays
 * with the bare scheduler). */
int kp_native_learn_ports(kp_native *native, kp_node *node);

#endif

/* What kprof knows of a node's processes while it samples: the agent's MFA
 * ids mapped to interned frames, and per process its pseudo-frames, its last
 * stack and its last metric values (for deltas). Turns each decoded agent
 * sample into a full interned stack, root first:
 *   [node (node) ;] status (status) ; <0.N.S> (process) ;
 *   name (registered|initial) ; code...
 * (the node frame only when several nodes are recorded at once).
 * and metric values with deltas since that process's previous sample (0 on
 * the first one, never a bogus jump).
 *
 * A running process answers the agent's stack query itself, at its next
 * signal-handling point: for a burst shorter than a time slice that is the
 * receive it returns to, so its stack names the receive, not where the CPU
 * went. Such samples are marked: a running sample whose leaf (function and
 * line) is a receive point, a leaf where some process was seen waiting, gets
 * the pseudo-frame stack_read_at_next_receive (status) under its status:
 *   running ; stack_read_at_next_receive ; <0.N.S> ; ...
 * A leaf is learnt from the first waiting sample there, so running samples
 * before it are not marked. */
#ifndef KP_SAMPLES_PROCESSES_H
#define KP_SAMPLES_PROCESSES_H

#include <stddef.h>
#include <stdint.h>

#include "kp/metrics.h"
#include "samples/sample_wire.h"
#include "kp/intern.h"

typedef struct {
    uint32_t num, serial;
    const char *status;
    uint32_t stack;                 /* full stack id in the table's kp_stacks */
    int64_t value[KP_METRIC_COUNT]; /* sizes in bytes */
    int64_t delta[KP_METRIC_COUNT];
} kp_proc_sample;

typedef int (*kp_proc_sample_fn)(void *ctx, const kp_proc_sample *sample);

typedef struct kp_processes kp_processes;

/* A process table of one node over frames and stacks that several tables may
 * share (borrowed). `wordsize` converts the agent's word counts to bytes;
 * `node` (NULL for none) becomes the root pseudo-frame. NULL when out of
 * memory. */
kp_processes *kp_processes_create(kp_frames *frames, kp_stacks *stacks, unsigned wordsize,
                                  const char *node, kp_proc_sample_fn sink, void *ctx);
void kp_processes_free(kp_processes *procs);

/* The handler to pass to kp_sample_wire_next_tick(). */
const kp_wire_handler *kp_processes_wire_handler(kp_processes *procs);

/* Processes currently tracked. */
size_t kp_processes_count(const kp_processes *procs);

/* Samples with status running so far, and how many of them were marked as
 * read at the process's next receive. */
void kp_processes_receive_counts(const kp_processes *procs, uint64_t *running,
                                 uint64_t *at_receive);

#endif

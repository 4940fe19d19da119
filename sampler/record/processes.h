/* What kprof knows of a node's processes while it samples: the agent's MFA
 * ids mapped to interned frames, and per process its pseudo-frames, its last
 * stack and its last metric values (for deltas). Turns each decoded agent
 * sample into a full interned stack, root first:
 *   [node (node) ;] status (status) ; <0.N.S> (process) ;
 *   name (registered|initial) ; code...
 * (the node frame only when several nodes are recorded at once).
 * and metric values with deltas since that process's previous sample (0 on
 * the first one, never a bogus jump). */
#ifndef KP_PROFILE_H
#define KP_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "node/agent.h"
#include "kp/intern.h"

typedef struct {
    uint32_t num, serial;
    const char *status;
    uint32_t stack; /* full stack id in the profile's kp_stacks */
    int64_t value[KP_METRIC_COUNT]; /* sizes in bytes */
    int64_t delta[KP_METRIC_COUNT];
} kp_profile_sample;

typedef int (*kp_profile_sink)(void *ctx, const kp_profile_sample *sample);

typedef struct kp_profile kp_profile;

/* A profile of one node over frames and stacks that several profiles may
 * share (borrowed). `wordsize` converts the agent's word counts to bytes;
 * `node` (NULL for none) becomes the root pseudo-frame. NULL when out of
 * memory. */
kp_profile *kp_profile_create(kp_frames *frames, kp_stacks *stacks, unsigned wordsize,
                              const char *node, kp_profile_sink sink, void *ctx);
void kp_profile_free(kp_profile *profile);

/* The handler to pass to kp_agent_next_tick(). */
const kp_batch_handler *kp_profile_handler(kp_profile *profile);

/* Processes currently tracked. */
size_t kp_profile_processes(const kp_profile *profile);

/* The names of the metrics, in kp_agent order ("reductions", ...). */
extern const char *const kp_metric_names[KP_METRIC_COUNT];

#endif

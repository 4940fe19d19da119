/* Loading kprof's agent into a node: every capability starts here. The
 * agent's modules are embedded in the kprof binary (node/agent_modules.h)
 * and loaded with code:load_binary/3 over the distribution when the node
 * does not have this build's code, so a node needs no preparation. */
#ifndef KP_NODE_AGENT_H
#define KP_NODE_AGENT_H

#include "node/connection.h"

typedef struct {
    kp_node *node;
    long os_pid;       /* the BEAM's OS pid */
    unsigned wordsize; /* bytes in a word of the node */
    int loaded;        /* 1 if this kprof loaded some of the agent's code */
} kp_agent;

/* Makes sure the node has this kprof's agent modules (loading the embedded
 * ones with code:load_binary/3 when missing or of another version) and reads
 * the node's OS pid and word size; starts nothing. Returns 0, or -1 with one
 * sentence in `err`. */
int kp_agent_load(kp_agent *agent, kp_node *node, char *err, size_t err_len);

#endif

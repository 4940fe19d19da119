/* Loading kprof's agent into a node: every capability starts here. The
 * agent's modules are embedded in the kprof binary (node/agent_modules.h)
 * and loaded with code:atomic_load/1 over the distribution when the node
 * does not have this build's code, so a node needs no preparation. */
#ifndef KP_NODE_AGENT_H
#define KP_NODE_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "node/connection.h"

typedef struct {
    kp_node *node;
    long os_pid;       /* the BEAM's OS pid, in its own pid namespace */
    unsigned wordsize; /* bytes in a word of the node */
    int loaded;        /* 1 if this kprof loaded some of the agent's code */
} kp_agent;

/* Which of kprof's modules a command runs in the node (kp_agent_code):
 * KP_AGENT_SAMPLING (record, top, push), KP_AGENT_TIERS, KP_AGENT_TRACE or
 * KP_AGENT_NIF (the tracer NIF alone), each the modules the program calls
 * and those they call, as KPROF_AGENT_SETS in CMakeLists.txt names them.
 * Each one loaded is one more purge when kprof leaves, and a purge waits
 * for every process of the node to check its code: 5 ms a module on a
 * quiet node, 25 to 100 ms on a loaded host. */
#include "kprof_agent_sets.h"

/* Makes sure the node has this kprof's agent modules named by `code`
 * (loading the embedded ones in one code:atomic_load/1 when missing or of
 * another version), has the node's unloader (kprof_unload) keep them while
 * this kprof is attached, and reads the node's OS pid and word size; starts
 * nothing. kp_node_close() then releases them: the modules kprof loaded are
 * unloaded, unless another kprof still holds them (after a kill -9, the
 * unloader sees the nodedown). Returns 0, or -1 with one sentence in `err`. */
int kp_agent_load(kp_agent *agent, kp_node *node, kp_agent_code code, char *err, size_t err_len);

/* Called for each process named by kp_agent_labels(): `registered` 1 for a
 * registered name, 0 for an initial call ("m:f/a"); `text` is not
 * NUL-terminated. Returns 0 to go on. */
typedef int (*kp_label_fn)(void *ctx, uint32_t num, uint32_t serial, int registered,
                           const char *text, size_t len);

/* Asks the agent (kprof_agent:labels/1) for the registered name or initial
 * call of the `n` local processes <0.nums[i].serials[i]> (at most 10,000;
 * more are not asked), and calls `fn` for each one still alive. The agent
 * must be loaded. Returns 0, or -1 when the node could not be asked, the
 * reply is malformed or `fn` failed. */
int kp_agent_labels(kp_node *node, const uint32_t *nums, const uint32_t *serials, size_t n,
                    kp_label_fn fn, void *ctx);

/* Called for each port listed by kp_agent_ports(): its name (`name`, not
 * NUL-terminated) and the local process <0.num.serial> it is connected
 * to. Returns 0 to go on. */
typedef int (*kp_port_fn)(void *ctx, const char *name, size_t len, uint32_t num, uint32_t serial);

/* Asks the agent (kprof_agent:ports/0) for the node's ports, at most
 * 4,096, and calls `fn` for each one connected to a local process. The
 * agent must be loaded. Returns 0, or -1 when the node could not be asked,
 * the reply is malformed or `fn` failed. */
int kp_agent_ports(kp_node *node, kp_port_fn fn, void *ctx);

#endif

/* Which OS process on this host a connected node is, told by what the
 * node is rather than by a pid that happens to match: a node in a container
 * (its own pid and mount namespaces, its own root) is found from the host. */
#ifndef KP_NODE_LOCATE_H
#define KP_NODE_LOCATE_H

#include <stddef.h>

#include "node/connection.h"

/* The node's OS process as this host sees it. The node tells what it is:
 * its boot id (the same kernel), its own pid `own_pid` (os:getpid()), its
 * pid namespace and its start time; the process here with all four is the
 * node, whether it runs in kprof's pid namespace (the same pid) or in a
 * container's (another pid here, found through NSpid). A pid that only
 * happens to match is never taken. Returns the pid and its start in
 * `*start_ticks` (clock ticks since boot), or -1 with the reason, one line,
 * in `err`. */
long kp_node_locate(kp_node *node, long own_pid, unsigned long long *start_ticks, char *err,
                    size_t err_len);

/* The node's own pid (os:getpid(), in its pid namespace) in `*pid` (0 if
 * its answer was no pid). Returns 0, or -1 with the reason in `err` when
 * the node could not be asked. */
int kp_node_own_pid(kp_node *node, long *pid, char *err, size_t err_len);

#endif

/* Bringing kprof's erl_tracer NIF (kprof_tracer.so) into a node that lacks
 * the kprof application. A NIF loads from a file on the node's host, not
 * over the distribution: kprof writes the .so it carries (node/nif_embed.h)
 * under the node's /tmp and the node loads it from there, which works only
 * when the node runs on kprof's host. A node in a container has a /tmp of
 * its own, which kprof reaches as /proc/PID/root/tmp once it has found the
 * node's process (node/locate.h). */
#ifndef KP_NODE_NIF_H
#define KP_NODE_NIF_H

#include <stddef.h>

#include "node/connection.h"

/* Makes sure the node's kprof_tracer module has its NIF loaded: asks the
 * node (kprof_tracer:loaded/0) and, when it has not, writes the embedded .so
 * into a fresh /tmp/kprof-nif-XXXXXX directory of the node's root (its
 * container's, seen through /proc, or this host's) readable by any user
 * (the node may run as another one), has the node load it
 * (kprof_tracer:load/2, which checks the file's MD5 first) and removes the
 * file and the directory whatever the outcome (the node's loader keeps its
 * mapping). The agent's modules must already be on the node (kp_agent_load),
 * or the node has no kprof_tracer to ask. Returns 0 when the NIF is loaded,
 * or -1 with one sentence in `why`: the node is on another host or cannot
 * read kprof's /tmp, the node refused the NIF, a local file error, or the
 * connection was lost. */
int kp_nif_bring(kp_node *node, char *why, size_t why_len);

#endif

/* Which port a native sample's port task ran, and the process the port is
 * connected to. A scheduler runs a port's work (a socket's input ready, a
 * file's reply, a command queued while the port was busy) in
 * erts_port_task_execute, from the scheduler loop and not from a process:
 * no process register names it, and its samples would belong to nobody.
 * The port is the `Port *` that erts_port_task_execute keeps across the
 * driver's callbacks, so it is in that frame: in a callee-saved register
 * or a stack slot of the frame, which the sample's unwinding recovers
 * (cpu/unwind.h). A Port begins, as a Process does, with its id term,
 * whose tag tells a port (kp_port_owner_find).
 *
 * Where a Port keeps its connected process and its name (what
 * erlang:port_info/2 calls `connected` and `name`: "tcp_inet", "efile",
 * a spawned command) differs between releases and builds; kprof learns
 * the two offsets from the node's own ports as the agent lists them
 * (kp_port_owner_learn), and then reads them at each sample from the
 * node's memory (process_vm_readv): nothing runs in the node per sample,
 * and a port that changes owner (erlang:port_connect/2) is told right.
 *
 * Not thread-safe: the caller locks (cpu/native.c does). */
#ifndef KP_CPU_PORT_OWNER_H
#define KP_CPU_PORT_OWNER_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/current_process.h"
#include "cpu/unwind.h"

typedef struct kp_port_owner kp_port_owner;

/* Reads the 8-byte words at the `n` addresses `addrs` of the node into
 * `words`; `ok[i]` says whether words[i] could be read. Returns 0, or -1
 * when the node cannot be read at all. (kp_current_process_terms, or a
 * test's memory.) */
typedef int (*kp_port_read_fn)(void *ctx, const uint64_t *addrs, size_t n, uint64_t *words,
                               unsigned char *ok);

/* A port of the node as the agent lists it (kprof_agent:ports/0). */
typedef struct {
    const char *name; /* port_info(Port, name); not NUL-terminated */
    size_t name_len;
    kp_pid_numbers connected;
} kp_port_fact;

/* The longest port name kept, in bytes; a longer one (a spawned command
 * line) is cut there. */
#define KP_PORT_NAME_MAX 48

/* Words of a Port searched for the two fields when learning: the struct
 * is a few hundred bytes in OTP 24 to 29. */
#define KP_PORT_WORDS 128

/* An owner finder for a node whose pid terms are laid out as `layout`,
 * reading the node's memory with `read`. NULL when out of memory. */
kp_port_owner *kp_port_owner_create(const kp_pid_layout *layout, kp_port_read_fn read, void *ctx);
void kp_port_owner_free(kp_port_owner *owner);

/* Most candidate words of one frame kept (registers, then stack slots). */
#define KP_PORT_CANDIDATES 40

/* The words that may hold the Port in frame `frame` of unwound sample `s`
 * (`r`, the erts_port_task_execute frame): its callee-saved registers as
 * the CFI restored them, then its stack slots from the sample's stack
 * copy, into `out` (KP_PORT_CANDIDATES). Returns how many. */
size_t kp_port_owner_candidates(const kp_cpu_sample *s, const kp_unwind_result *r, size_t frame,
                                uint64_t *out);

/* The Port among the `n` candidate words of an erts_port_task_execute
 * frame (its callee-saved registers first, then its stack slots): the
 * first that points to a word with a port's tag. 1 with `*port` set, 0
 * when none does, -1 when the node cannot be read. Until the offsets are
 * learned, a Port found is kept as an example to learn from (a few). */
int kp_port_owner_find(kp_port_owner *owner, const uint64_t *candidates, size_t n, uint64_t *port);

/* 1 once the offsets are learned; 0 before, or after learning failed for
 * good (kp_port_owner_learn said so). */
int kp_port_owner_learned(const kp_port_owner *owner);

/* 1 when examples wait to be learned from: the caller should fetch the
 * node's ports and call kp_port_owner_learn. */
int kp_port_owner_wants_facts(const kp_port_owner *owner);

/* Reads the examples found so far again and learns the two offsets from
 * them and the node's ports `facts[0..n)`: the one offset pair at which
 * every reading (of all calls) of an example found one port's connected
 * process and a pointer to its name. Pairs no reading has parted yet wait
 * for more readings, and after many are taken to be one field twice.
 * Returns 1 when learned, 0 when not yet (call again with new facts), -1
 * when given up after many calls, or the node cannot be read. */
int kp_port_owner_learn(kp_port_owner *owner, const kp_port_fact *facts, size_t n);

/* Port `port`'s connected process and name, read now; `name` holds at
 * least KP_PORT_NAME_MAX + 1 bytes and is NUL-terminated. Returns 0, or
 * -1 when not learned, unreadable, or the connected word is no pid (a
 * port being closed). */
int kp_port_owner_describe(kp_port_owner *owner, uint64_t port, kp_pid_numbers *connected,
                           char *name, size_t name_len);

#endif

/* The request-trace collector: the node's trace events (node/trace_event.h)
 * rebuilt into request traces, each handed whole to the handler when it
 * ends (the writer, rtrace/files.h, makes its files). It writes nothing.
 *
 * Stacks are rebuilt from call and return_to events per process: a call
 * pushes, a return_to pops back to the function returned to. Tail calls
 * have no return_to, so a call to a function already on the stack goes back
 * to that frame (a server loop stays one loop; recursion shows once, as in
 * current_stacktrace), and the depth is bounded; when the function returned
 * to is not on the stack, the trace began below it and the stack restarts
 * there; but when no CALL ever named its module, which then has no pattern
 * (OTP's, with otp_calls off), only the returning frame ends. The time
 * between two events of a process goes to its stack at the first one.
 *
 * Following: a trace whose BEGIN has a trace_no (its process's seq_trace
 * token is labelled {kprof, N}) takes in the processes its messages reach
 * (SEND events; at most max_processes of them), each for the stretches
 * during which it works for the trace: from taking in a message of the
 * request (RECEIVE) until it is back in its receive loop (LABEL 0, which
 * the NIF tells). Such a process may serve several traces; its time goes to
 * the one whose message it took in, and its work for anything else to
 * none. What it spawns during a stretch is the trace's own. A message of
 * the request taken in by a process of the trace is an arrow from its
 * sender's lane: from the send (SEND), or, for a message sent to an alias
 * (a reply), from the sender's last event before.
 *
 * A trace begins with the mark of kprof_rtrace_mark:begin_trace/1 in its
 * process (its call's event, or through the NIF kprof_tracer:mark/2's
 * record; kp_rtrace_open() for a process traced from the shell), takes in
 * the processes it spawns, and ends with the end mark, or is cut past its
 * bounds (events, duration: kp_rtrace_cut). */
#ifndef KP_RTRACE_COLLECT_H
#define KP_RTRACE_COLLECT_H

#include <ei.h>
#include <stddef.h>
#include <stdint.h>

#include "node/trace_event.h"
#include "rtrace/files.h"

typedef struct kp_rtrace kp_rtrace;

/* A message of the trace that a process of it took in from a process on
 * another node (a reply from a server there): its arrow is drawn once that
 * node's part is in. */
typedef struct {
    uint32_t to; /* the receiver's pseudo-frame */
    erlang_pid from;
    int64_t ts;
} kp_rtrace_remote_in;

/* A trace that ended, complete or cut; valid during on_done. */
typedef struct {
    const char *id;
    const erlang_pid *pids; /* every process of the trace, the one that began it first */
    size_t n_pids;
    kp_rtrace_data *data; /* what the trace's writer writes (rtrace/files.h) */
    /* a part (see kp_rtrace_part_encode): the node whose trace it is part
     * of, and its number there; NULL for a trace of this node's */
    const char *origin;
    uint32_t no;
    const kp_rtrace_remote_in *remote_in; /* messages taken in from other nodes */
    size_t n_remote_in;
    /* faster than its threshold (--slower-than, or the bounds' slower_than_us):
     * not to be written, its processes' flags cleared all the same */
    int dropped;
} kp_rtrace_done;

typedef struct {
    void *ctx;
    /* a trace ended: the handler writes it; its processes other than the
     * one that began it may still carry the trace flags */
    void (*on_done)(void *ctx, const kp_rtrace_done *done);
    /* after on_done: the processes messages with a token reached since the
     * last call (SEND events): the send pattern gave them the trace flags,
     * which they keep until no trace runs; `all` when there were too many
     * to list (every process kprof traces should then lose its flags). May
     * be NULL. */
    void (*on_reached)(void *ctx, const erlang_pid *pids, size_t n_pids, int all);
} kp_rtrace_handler;

typedef struct {
    uint64_t max_events; /* defaults for traces that give none */
    uint64_t max_duration_ms;
    unsigned max_depth;     /* frames kept per process */
    uint64_t max_processes; /* followed per trace, for traces that give none; 0: 16 */
    unsigned frame_flags;   /* how frames are named: kp_frames_create's flags */
} kp_rtrace_options;

/* Returns a collector, or NULL when out of memory. */
kp_rtrace *kp_rtrace_create(const kp_rtrace_options *options, const kp_rtrace_handler *handler);
void kp_rtrace_free(kp_rtrace *rtrace);

/* Feeds one decoded event. Returns 0, or -1 when out of memory (the event's
 * trace is then cut). */
int kp_rtrace_event(kp_rtrace *rtrace, const kp_trace_event *ev);

/* Traces of calls of one function (kprof trace --mfa), until `max_traces`
 * have started, each under a first frame for the function, from the call
 * until it returns (its return_from; a call of the function inside it
 * does not end it). Through the NIF a call begins with a mark (a BEGIN
 * with `call`), whose trace may follow the call's messages; through the
 * trace port, at the call's meta event (a CALL without time) of a process
 * no trace holds. A trace shorter than `slower_than_us` (0: none) is
 * dropped (kp_rtrace_done.dropped). Returns 0, or -1 when out of memory. */
int kp_rtrace_adopt(kp_rtrace *rtrace, const char *module, const char *function, unsigned arity,
                    uint64_t max_traces, uint64_t slower_than_us);

/* How many traces adoption has started. */
uint64_t kp_rtrace_adopted(const kp_rtrace *rtrace);

/* Starts a trace of `pid` from outside (kprof trace --pid). */
int kp_rtrace_open(kp_rtrace *rtrace, const char *id, const erlang_pid *pid, int64_t ts_ns);

/* Ends trace `id` now, or every trace (`id` NULL), cut for `cut`, or
 * complete (KP_RTRACE_COMPLETE). */
void kp_rtrace_close(kp_rtrace *rtrace, const char *id, kp_rtrace_cut cut);

/* Cuts traces older than their duration bound at node time `now_ns`. */
void kp_rtrace_sweep(kp_rtrace *rtrace, int64_t now_ns);

/* Traces running. */
size_t kp_rtrace_running(const kp_rtrace *rtrace);

#endif

/* Following a request's messages into the processes they reach
 * (rtrace/follow.c), for rtrace/collect.c; the contracts are those of
 * rtrace/collect.h. */
#ifndef KP_RTRACE_FOLLOW_H
#define KP_RTRACE_FOLLOW_H

#include "rtrace/state.h"

/* A SEND: its receiver may be taken in by the sender's trace. */
void kp_rtrace_follow_send(kp_rtrace *rtrace, const kp_trace_event *ev);
/* A RECEIVE: a followed process works for the trace from here; the
 * message's arrow ends here. 0, or -1 when out of memory. */
int kp_rtrace_follow_receive(kp_rtrace *rtrace, const kp_trace_event *ev);
/* `pid` got the trace flags from kprof (listed for on_reached). */
void kp_rtrace_note_reached(kp_rtrace *rtrace, const erlang_pid *pid);
/* Trace `t` takes in `pid` (slot `p`), within its bound: 1, else 0. */
int kp_rtrace_take_in(trace *t, proc *p, const erlang_pid *pid);
/* An event (LABEL included) of a process taken in by following. Returns 0,
 * -1 when out of memory, 1 when trace `*cut` is to end now: cut (see
 * kp_rtrace_timed_event), or a part whose processes are all back in their
 * loops (`p` may go with it), or 2 when trace `*cut`, draining, has no
 * process at work for it any more. */
int kp_rtrace_follow_event(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev, uint32_t *cut);
/* The trace that drains while `k`, of the same number, runs (its
 * process's last call), or -1. */
int kp_rtrace_prev(kp_rtrace *rtrace, uint32_t k);
/* Whether a process trace `k` took in works for it now, or has a message
 * of it on the way. */
int kp_rtrace_follow_busy(kp_rtrace *rtrace, uint32_t k);
/* Whether `p` (`pid`) is the process of a trace that drains (see
 * end_trace in rtrace/collect.c): its events and messages from here on
 * are not the trace's. */
int kp_rtrace_after_end(kp_rtrace *rtrace, const proc *p, const erlang_pid *pid);
/* Trace `k` ends: its followed processes no other trace holds go. */
void kp_rtrace_follow_release(kp_rtrace *rtrace, uint32_t k);

#endif

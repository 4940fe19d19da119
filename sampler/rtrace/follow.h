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
/* An event (LABEL included) of a process taken in by following. Returns 0,
 * -1 when out of memory, or 1 when trace `*cut` is to end now, cut (see
 * kp_rtrace_timed_event; `p` may go with it). */
int kp_rtrace_follow_event(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev, uint32_t *cut);
/* Trace `k` ends: its followed processes no other trace holds go. */
void kp_rtrace_follow_release(kp_rtrace *rtrace, uint32_t k);

#endif

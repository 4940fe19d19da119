/* The request-trace collector's state: its traces, the slots of their
 * processes, the stacks rebuilt in them and the time given to the traces
 * (rtrace/state.c). Below rtrace/collect.c (traces begin, end and take
 * events) and rtrace/follow.c (processes a request's messages reach), which
 * both include it and nothing else does; it calls neither. The contracts
 * are those of rtrace/collect.h. */
#ifndef KP_RTRACE_STATE_H
#define KP_RTRACE_STATE_H

#include <kp/intern.h>
#include <kp/strtab.h>
#include <stdint.h>

#include "common/u64_map.h"
#include "rtrace/collect.h"
#include "rtrace/files.h"

#define MAX_TRACES 1024
#define MAX_LINKS 16384 /* spawns and messages kept per trace, for the timeline */
#define NOT_A_MEMBER UINT32_MAX
#define MAX_REACHED 65536 /* listed for on_reached between two calls; then "all" */

enum { RUNNING, OUT, GC };

typedef struct {
    char id[64];
    int used;
    int untimed; /* adopted: the start is the first timed event */
    erlang_pid root;
    int64_t start, last;
    uint64_t events, max_events, max_duration_ns;
    kp_rtrace_cut cut;
    kp_stacks *stacks;
    kp_rtrace_times times;
    erlang_pid *pids; /* every process of the trace, root first */
    size_t n_pids, cap_pids;
    kp_rtrace_link *links; /* its spawns and messages (at most MAX_LINKS kept) */
    size_t n_links, cap_links;
    uint32_t no; /* N of its processes' token label {kprof, N}; 0: not followed */
    /* a part: this node's processes' work for a trace of node `origin`
     * (its requests's messages reached them); "" for a trace begun here */
    char origin[256];
    int remote;     /* its messages went to other nodes: it waits for their parts */
    int ending;     /* its end came; it is finished at end_by, its parts in */
    int64_t end_by; /* node time */
    kp_rtrace_remote_in *remote_in;
    size_t n_remote_in, cap_remote_in;
    kp_rtrace_clock *clocks; /* of the nodes whose parts are in */
    size_t n_clocks;
    uint64_t max_followed;
    erlang_pid *followed; /* processes its messages reached, taken in */
    size_t n_followed, cap_followed;
    /* a traced call (kprof trace --mfa): calls of the function its root is
     * in (it ends when the first returns); 0: not a call's trace */
    unsigned call_depth;
    uint64_t slower_than_ns; /* written only when it lasts this long; 0: always */
    int64_t returned;        /* when its call returned or its end mark came; 0: not yet */
    /* past its end, processes its messages reached still work for it (a
     * cast's receiver): it takes their time until they are back in their
     * loops, or until end_by; its own process is no longer its */
    int draining;
    /* its messages to processes here that have not taken them in yet (of
     * them, from its own process) */
    uint32_t in_flight, root_in_flight;
    /* 1 + the trace of the same number (its process's last call, --mfa)
     * that drains while this one runs; 0: none */
    uint32_t prev;
} trace;

typedef struct {
    uint32_t trace;   /* NOT_A_MEMBER for a followed process */
    int followed;     /* reached by a trace's message: `label` says which trace has its time */
    uint32_t label;   /* the trace whose message it took in last (no); 0: back in its loop */
    uint32_t work;    /* 1 + that trace's index, when known (two share a no: see prev) */
    uint32_t holders; /* followed: the traces that took it in */
    uint32_t link, link_trace; /* 1 + the message link whose arrival it waits for; 0: none */
    int state;
    int timed; /* `last` holds a time (an adopted call starts without) */
    int64_t last;
    uint32_t *frames; /* [0] is the process's pseudo-frame */
    size_t depth;
} proc;

struct kp_rtrace {
    kp_rtrace_options o;
    kp_rtrace_handler h;
    kp_frames *frames;
    /* the modules a CALL named: theirs have call patterns, those of a
     * function returned to that is in none have none (kp_rtrace_pop_to);
     * `fn_called`, per frame id, whether its module is in already, so that
     * a call hashes its module once per function, not once per call */
    kp_strtab *called;
    unsigned char *fn_called;
    size_t n_fn_called;
    uint32_t sleep_frame, gc_frame;
    trace traces[MAX_TRACES];
    kp_u64_map procs;       /* packed pid -> index into ps */
    kp_u64_map by_no;       /* a followed trace's no -> its index */
    kp_u64_map reached_set; /* the processes in `reached` */
    erlang_pid *reached;    /* SEND receivers since the last on_reached */
    size_t n_reached, cap_reached;
    int reached_all; /* more than MAX_REACHED */
    proc *ps;        /* slots; free ones are listed in `free` */
    size_t n_ps, cap_ps;
    uint32_t *free;
    size_t n_free;
    /* kp_rtrace_adopt */
    int adopting;
    kp_trace_event adopt_fn;
    uint64_t adopted, max_adopted;
    uint64_t adopt_slower_than_ns; /* the adopted calls' slower_than_ns */
};

static inline uint64_t pack(const erlang_pid *p)
{
    return ((uint64_t)p->num << 32) | p->serial;
}

/* Whether `d` ns exceed `limit` ns (unsigned: a bound may be huge). */
static inline int kp_rtrace_longer_than(int64_t d, uint64_t limit)
{
    return d > 0 && (uint64_t)d > limit;
}

/* Frees what a trace holds and marks its slot unused. */
void kp_rtrace_trace_free(trace *t);
/* The process's slot, or NULL when it is in no trace. */
proc *kp_rtrace_proc_of(kp_rtrace *rtrace, const erlang_pid *pid);
/* A slot for `pid`, in no trace yet (NULL when out of memory); slots move
 * when one is added: pointers to others are stale after. */
proc *kp_rtrace_new_proc(kp_rtrace *rtrace, const erlang_pid *pid, int64_t ts, int state);
/* A slot for `pid` as a process of trace `k`, listed in its pids (NULL when
 * out of memory). */
proc *kp_rtrace_add_proc(kp_rtrace *rtrace, uint32_t k, const erlang_pid *pid, int64_t ts,
                         int state);
/* `pid`, spawned at `ts` by the process whose pseudo-frame is `parent`, is
 * a process of trace `k` from here (runnable until it first runs), with
 * the spawn's arrow. Returns it, or NULL when out of memory. */
proc *kp_rtrace_add_member(kp_rtrace *rtrace, uint32_t k, uint32_t parent, const erlang_pid *pid,
                           int64_t ts);
/* The slot goes (kept, with its frame array, for the next process). */
void kp_rtrace_remove_proc(kp_rtrace *rtrace, const erlang_pid *pid);
/* The time since the process's last event to its stack in trace `t` (NULL:
 * to none). Returns 0, or -1 when out of memory. */
int kp_rtrace_account(kp_rtrace *rtrace, proc *p, trace *t, int64_t ts);
/* `dur` ns more in `stack` of trace `t`, an interval of process
 * `pid_frame` from `start` (this node's clock). 0, or -1 when out of
 * memory (nothing added). */
int kp_rtrace_add_time(trace *t, uint32_t stack, uint32_t pid_frame, int64_t start, int64_t dur);
/* A timed event of the process in trace `k`: the time since its last event
 * to the trace, counted against the trace's bounds. Returns 0, or 1 when
 * the trace is to end now, cut (its `cut` says why: a bound, or out of
 * memory): the caller finishes it. */
int kp_rtrace_timed_event(kp_rtrace *rtrace, proc *p, uint32_t k, int64_t ts);
/* Scheduled out or in, collecting garbage or done: the state its time
 * shows in (sleep, garbage_collection); other kinds change nothing. */
void kp_rtrace_set_state(proc *p, kp_trace_event_kind kind);
/* Keeps an arrow for the timeline; returns 1 if kept. */
int kp_rtrace_add_link(trace *t, uint32_t from, uint32_t to, int64_t ts, int message);
/* A call pushes its frame, a return_to pops back to it. 0, or -1. */
int kp_rtrace_push(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev);
int kp_rtrace_pop_to(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev);

#endif

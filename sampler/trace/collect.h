/* Single-request traces: the events of kprof_rtrace turned into stacks, and
 * each finished trace written as DIR/TIME-ID.folded (eflame-compatible:
 * root `<0.N.0>`, frames `mod:fun/arity`, `sleep` as the leaf for time
 * scheduled out, `garbage_collection` for collections; counts in
 * microseconds) and DIR/TIME-ID.perf (the same trace as samples every TICK
 * microseconds, so FlameScope shows its timeline).
 *
 * Stacks are rebuilt from call and return_to events per process: a call
 * pushes, a return_to pops back to the function returned to. Tail calls
 * have no return_to, so a call to a function already on the stack goes back
 * to that frame (a server loop stays one loop; recursion shows once, as in
 * current_stacktrace), and the depth is bounded; when the function returned
 * to is not on the stack (the trace began below it) the stack restarts
 * there. The time
 * between two events of a process goes to its stack at the first one.
 *
 * A trace begins with the mark of kprof_rtrace_mark:begin_trace/1 in its
 * process (or kp_rtrace_open() for a process traced from the shell), takes in
 * the processes it spawns, and ends with the end mark, or is cut past its
 * bounds (events, duration; the file then ends with a marker frame). */
#ifndef KP_RTRACE_H
#define KP_RTRACE_H

#include <ei.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KP_RT_CALL, KP_RT_RETURN_TO, KP_RT_IN, KP_RT_OUT, KP_RT_GC_START, KP_RT_GC_END,
    KP_RT_SPAWN, KP_RT_EXIT, KP_RT_BEGIN, KP_RT_END, KP_RT_RETURN_FROM, KP_RT_OTHER
} kp_rt_kind;

typedef struct {
    kp_rt_kind kind;
    erlang_pid pid;
    char module[256], function[256]; /* CALL, RETURN_TO, RETURN_FROM */
    unsigned arity;
    erlang_pid child;                /* SPAWN */
    char id[64];                     /* BEGIN, END */
    char cut[32];                    /* END sent by the node's server: why it cut */
    uint64_t max_events, max_duration_ms; /* BEGIN; 0 = the collector's default */
    int64_t ts_ns;                   /* 0 when the event has none (meta events) */
    uint32_t dropped;                /* KP_RT_OTHER from the NIF: events it dropped */
} kp_rt_event;

/* Decodes one event (term_to_binary bytes from the trace port). Returns 1,
 * 0 for a term that is not a trace event, -1 for malformed bytes. */
int kp_rt_decode(const char *buf, size_t len, kp_rt_event *ev);

/* Decodes the message of a begin (`begin` 1: {Id, Bounds}) or end mark
 * (Id, or {Id, Why}), term_to_binary bytes, into `ev` (kind, id, bounds,
 * cut; the caller sets pid and time). Returns 0 or -1. */
int kp_rt_decode_mark(const char *buf, size_t len, int begin, kp_rt_event *ev);

typedef struct kp_rtrace kp_rtrace;

typedef struct {
    void *ctx;
    /* a trace ended: its processes other than the one that began it may
     * still carry the trace flags; `written` is the folded file's path, or
     * NULL when writing failed (`why` says why) */
    void (*on_done)(void *ctx, const char *id, const erlang_pid *pids, size_t n_pids,
                    const char *written, const char *why);
} kp_rtrace_handler;

typedef struct {
    const char *dir;            /* where files go; created if missing */
    uint64_t max_events;        /* defaults for traces that give none */
    uint64_t max_duration_ms;
    unsigned max_depth;         /* frames kept per process */
} kp_rtrace_options;

/* Returns a collector, or NULL when out of memory. */
kp_rtrace *kp_rtrace_create(const kp_rtrace_options *options, const kp_rtrace_handler *handler);
void kp_rtrace_free(kp_rtrace *rt);

/* Feeds one decoded event. Returns 0, or -1 when out of memory (the event's
 * trace is then cut). */
int kp_rtrace_event(kp_rtrace *rt, const kp_rt_event *ev);

/* Traces of calls of one function (kprof trace --mfa): a process not in a
 * trace that sends events starts a trace of its own, under a first frame
 * for the function, until `max_traces` have started; the return_from of
 * that function ends it. Returns 0, or -1 when out of memory. */
int kp_rtrace_adopt(kp_rtrace *rt, const char *module, const char *function, unsigned arity,
                    uint64_t max_traces);

/* How many traces adoption has started. */
uint64_t kp_rtrace_adopted(const kp_rtrace *rt);

/* Starts a trace of `pid` from outside (kprof trace --pid). */
int kp_rtrace_open(kp_rtrace *rt, const char *id, const erlang_pid *pid, int64_t ts_ns);

/* Ends trace `id` now (written as complete) or every trace (`id` NULL),
 * with `cut` naming why they were cut (NULL: complete). */
void kp_rtrace_close(kp_rtrace *rt, const char *id, const char *cut);

/* Cuts traces older than their duration bound at node time `now_ns`. */
void kp_rtrace_sweep(kp_rtrace *rt, int64_t now_ns);

/* Traces written and running. */
uint64_t kp_rtrace_written(const kp_rtrace *rt);
size_t kp_rtrace_running(const kp_rtrace *rt);

#endif

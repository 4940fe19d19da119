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
 * process (or kp_trace_collector_open() for a process traced from the shell), takes in
 * the processes it spawns, and ends with the end mark, or is cut past its
 * bounds (events, duration; the file then ends with a marker frame). */
#ifndef KP_TRACE_COLLECT_H
#define KP_TRACE_COLLECT_H

#include <ei.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KP_TRACE_CALL,
    KP_TRACE_RETURN_TO,
    KP_TRACE_IN,
    KP_TRACE_OUT,
    KP_TRACE_GC_START,
    KP_TRACE_GC_END,
    KP_TRACE_SPAWN,
    KP_TRACE_EXIT,
    KP_TRACE_BEGIN,
    KP_TRACE_END,
    KP_TRACE_RETURN_FROM,
    KP_TRACE_SEQ_CALL,       /* tier tracing's NIF records; the collector skips them */
    KP_TRACE_EXCEPTION_FROM, /* as RETURN_FROM, by an exception */
    KP_TRACE_LABEL,          /* a followed process works for no request (trace_no 0) */
    KP_TRACE_SEND,           /* pid sent child a message, with token trace_no */
    KP_TRACE_RECEIVE,        /* pid took in child's message of request trace_no */
    KP_TRACE_OTHER
} kp_trace_event_kind;

typedef struct {
    kp_trace_event_kind kind;
    erlang_pid pid;
    char module[256], function[256]; /* CALL, RETURN_TO, RETURN_FROM */
    unsigned arity;
    erlang_pid child; /* SPAWN; SEND: the receiver; RECEIVE: the sender (node "": unknown) */
    /* LABEL, SEND: the request trace the process's seq_trace token is for
     * (N of its label {kprof, N}; 0: none); BEGIN: the trace's own N (0:
     * its messages are not followed) */
    uint32_t trace_no;
    char id[64];                          /* BEGIN, END */
    char cut[32];                         /* END sent by the node's server: why it cut */
    uint64_t max_events, max_duration_ms; /* BEGIN; 0 = the collector's default */
    uint64_t max_processes;               /* BEGIN: followed at most; 0 = default */
    int64_t ts_ns;                        /* 0 when the event has none (meta events) */
    uint32_t dropped;                     /* KP_TRACE_OTHER from the NIF: events it dropped */
    /* SEQ_CALL: the seq_trace token's label when a pid, and the identity of
     * a call that opens a request (external term format, valid during the
     * callback; NULL for a call inside a request) */
    int has_label;
    erlang_pid label;
    const char *identity;
    size_t identity_len;
} kp_trace_event;

/* Decodes one event (term_to_binary bytes from the trace port). Returns 1,
 * 0 for a term that is not a trace event, -1 for malformed bytes. */
int kp_trace_decode(const char *buf, size_t len, kp_trace_event *ev);

/* Decodes the message of a begin (`begin` 1: {Id, Bounds}) or end mark
 * (Id, or {Id, Why}), term_to_binary bytes, into `ev` (kind, id, bounds,
 * cut; the caller sets pid and time). Returns 0 or -1. */
int kp_trace_decode_mark(const char *buf, size_t len, int begin, kp_trace_event *ev);

typedef struct kp_trace_collector kp_trace_collector;

typedef struct {
    void *ctx;
    /* a trace ended: its processes other than the one that began it may
     * still carry the trace flags; `written` is the folded file's path, or
     * NULL when writing failed (`why` says why) */
    void (*on_done)(void *ctx, const char *id, const erlang_pid *pids, size_t n_pids,
                    const char *written, const char *why);
    /* after on_done: the processes messages with a token reached since the
     * last call (SEND events): the send pattern gave them the trace flags,
     * which they keep until no trace runs; `all` when there were too many
     * to list (every process kprof traces should then lose its flags). May
     * be NULL. */
    void (*on_reached)(void *ctx, const erlang_pid *pids, size_t n_pids, int all);
} kp_trace_collector_handler;

typedef struct {
    const char *dir;     /* where files go; created if missing */
    uint64_t max_events; /* defaults for traces that give none */
    uint64_t max_duration_ms;
    unsigned max_depth;     /* frames kept per process */
    uint64_t max_processes; /* followed per trace, for traces that give none; 0: 16 */
    unsigned frame_flags;   /* how frames are named: kp_frames_create's flags */
} kp_trace_collector_options;

/* Returns a collector, or NULL when out of memory. */
kp_trace_collector *kp_trace_collector_create(const kp_trace_collector_options *options,
                                              const kp_trace_collector_handler *handler);
void kp_trace_collector_free(kp_trace_collector *rt);

/* Feeds one decoded event. Returns 0, or -1 when out of memory (the event's
 * trace is then cut). */
int kp_trace_collector_event(kp_trace_collector *rt, const kp_trace_event *ev);

/* Traces of calls of one function (kprof trace --mfa): a process not in a
 * trace that sends events starts a trace of its own, under a first frame
 * for the function, until `max_traces` have started; the return_from of
 * that function ends it. Returns 0, or -1 when out of memory. */
int kp_trace_collector_adopt(kp_trace_collector *rt, const char *module, const char *function,
                             unsigned arity, uint64_t max_traces);

/* How many traces adoption has started. */
uint64_t kp_trace_collector_adopted(const kp_trace_collector *rt);

/* Starts a trace of `pid` from outside (kprof trace --pid). */
int kp_trace_collector_open(kp_trace_collector *rt, const char *id, const erlang_pid *pid,
                            int64_t ts_ns);

/* Ends trace `id` now (written as complete) or every trace (`id` NULL),
 * with `cut` naming why they were cut (NULL: complete). */
void kp_trace_collector_close(kp_trace_collector *rt, const char *id, const char *cut);

/* Cuts traces older than their duration bound at node time `now_ns`. */
void kp_trace_collector_sweep(kp_trace_collector *rt, int64_t now_ns);

/* Traces written and running. */
uint64_t kp_trace_collector_written(const kp_trace_collector *rt);
size_t kp_trace_collector_running(const kp_trace_collector *rt);

#endif

/* The events of the node's tracing, as kprof reads them from the ip trace
 * port's terms (kp_trace_decode) and the kprof_tracer NIF's records
 * (node/nif_reader.h): one struct for tier tracing and request traces. */
#ifndef KP_NODE_TRACE_EVENT_H
#define KP_NODE_TRACE_EVENT_H

#include <ei.h>
#include <stddef.h>
#include <stdint.h>

/* Why a request trace ended before its end mark. The trace's folded file
 * ends with the frame kprof_trace_cut:NAME (kp_rtrace_cut_name). */
typedef enum {
    KP_RTRACE_COMPLETE,              /* not cut */
    KP_RTRACE_CUT_MAX_EVENTS,        /* past its max_events */
    KP_RTRACE_CUT_MAX_DURATION,      /* past its max_duration_ms */
    KP_RTRACE_CUT_OUT_OF_MEMORY,     /* in the collector */
    KP_RTRACE_CUT_NODE_BACKLOG,      /* the node's trace queue grew past max_backlog_mb */
    KP_RTRACE_CUT_BY_NODE,           /* the node's server cut it for another reason */
    KP_RTRACE_CUT_EVENTS_DROPPED,    /* the node dropped events */
    KP_RTRACE_CUT_COLLECTOR_STOPPED, /* running when the collector stopped */
} kp_rtrace_cut;

/* The NAME of a cut ("max_events", ...); NULL for KP_RTRACE_COMPLETE. */
const char *kp_rtrace_cut_name(kp_rtrace_cut cut);

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
    /* SPAWN: the child; SEND: the receiver (node "": a name on another
     * node); RECEIVE: the sender (node "": unknown) */
    erlang_pid child;
    /* LABEL, SEND: the request trace the process's seq_trace token is for
     * (N of its label {kprof, N}; 0: none); BEGIN: the trace's own N (0:
     * its messages are not followed) */
    uint32_t trace_no;
    char id[64];                          /* BEGIN, END */
    kp_rtrace_cut cut;                    /* END sent by the node's server: why it cut */
    uint64_t max_events, max_duration_ms; /* BEGIN; 0 = the collector's default */
    uint64_t max_processes;               /* BEGIN: followed at most; 0 = default */
    /* BEGIN: kept only when it lasts this long (0: always) */
    uint64_t slower_than_us;
    /* BEGIN of a traced call (kprof trace --mfa through the NIF): the
     * call's return_from ends it */
    int call;
    int64_t ts_ns;    /* 0 when the event has none (meta events) */
    uint32_t dropped; /* KP_TRACE_OTHER from the NIF: events it dropped */
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

#endif

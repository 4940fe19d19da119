/* Decoding of the node's trace events (node/trace_event.h): the messages of
 * the trace flags kprof sets, as term_to_binary bytes from the node's trace
 * port or the NIF's records, checked whole (kp_term_check) before ei decodes
 * them. */
#include "node/trace_event.h"

#include <stdint.h>
#include <string.h>

#include "node/term.h"

const char *kp_rtrace_cut_name(kp_rtrace_cut cut)
{
    switch (cut) {
    case KP_RTRACE_COMPLETE: return NULL;
    case KP_RTRACE_CUT_MAX_EVENTS: return "max_events";
    case KP_RTRACE_CUT_MAX_DURATION: return "max_duration";
    case KP_RTRACE_CUT_OUT_OF_MEMORY: return "out_of_memory";
    case KP_RTRACE_CUT_NODE_BACKLOG: return "node_backlog";
    case KP_RTRACE_CUT_BY_NODE: return "cut_by_node";
    case KP_RTRACE_CUT_EVENTS_DROPPED: return "events_dropped";
    case KP_RTRACE_CUT_COLLECTOR_STOPPED: return "collector_stopped";
    }
    return "unknown";
}

/* An end mark's message: Id from the traced process, or {Id, Why} from
 * kprof_rtrace when it cuts the trace. */
static int decode_end(const char *buf, int *i, kp_trace_event *ev)
{
    int type, size, arity;
    char why[32];
    ev->kind = KP_TRACE_END;
    if (ei_get_type(buf, i, &type, &size) != 0 || type != ERL_SMALL_TUPLE_EXT)
        return kp_term_decode_text(buf, i, ev->id, sizeof ev->id);
    if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 2 ||
        kp_term_decode_text(buf, i, ev->id, sizeof ev->id) != 0 ||
        kp_term_decode_atom(buf, i, why, sizeof why) != 0)
        return -1;
    ev->cut = strcmp(why, "node_backlog") == 0 ? KP_RTRACE_CUT_NODE_BACKLOG : KP_RTRACE_CUT_BY_NODE;
    return 0;
}

/* {M, F, Arity}, or {M, F, Args} (meta trace events carry the arguments) */
static int decode_mfa(const char *buf, int *i, kp_trace_event *ev)
{
    int arity, type, size;
    long a;
    if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 3 ||
        ei_decode_atom(buf, i, ev->module) != 0 || ei_decode_atom(buf, i, ev->function) != 0 ||
        ei_get_type(buf, i, &type, &size) != 0)
        return -1;
    if (type == ERL_LIST_EXT || type == ERL_STRING_EXT || type == ERL_NIL_EXT) {
        ev->arity = (unsigned)size;
        return ei_skip_term(buf, i);
    }
    if (ei_decode_long(buf, i, &a) != 0)
        return -1;
    ev->arity = (unsigned)a;
    return 0;
}

/* {Id, #{max_events => N, max_duration_ms => N, follow => N, call => 1,
 * slower_than_us => N, ...}} */
static int decode_begin(const char *buf, int *i, kp_trace_event *ev)
{
    int arity, n;
    if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 2 ||
        kp_term_decode_text(buf, i, ev->id, sizeof ev->id) != 0 ||
        ei_decode_map_header(buf, i, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        char key[MAXATOMLEN_UTF8];
        unsigned long long v;
        if (ei_decode_atom(buf, i, key) != 0)
            return -1;
        if (ei_decode_ulonglong(buf, i, &v) != 0) {
            if (ei_skip_term(buf, i) != 0)
                return -1;
            continue;
        }
        if (strcmp(key, "max_events") == 0)
            ev->max_events = v;
        else if (strcmp(key, "max_duration_ms") == 0)
            ev->max_duration_ms = v;
        else if (strcmp(key, "max_processes") == 0)
            ev->max_processes = v;
        else if (strcmp(key, "follow") == 0 && v < UINT32_MAX)
            ev->trace_no = (uint32_t)v;
        else if (strcmp(key, "call") == 0)
            ev->call = v == 1;
        else if (strcmp(key, "slower_than_us") == 0)
            ev->slower_than_us = v;
    }
    return 0;
}

static kp_trace_event_kind kind_of(const char *tag)
{
    static const struct {
        const char *tag;
        kp_trace_event_kind kind;
    } kinds[] = {{"call", KP_TRACE_CALL},
                 {"return_to", KP_TRACE_RETURN_TO},
                 {"in", KP_TRACE_IN},
                 {"out", KP_TRACE_OUT},
                 {"gc_minor_start", KP_TRACE_GC_START},
                 {"gc_major_start", KP_TRACE_GC_START},
                 {"gc_minor_end", KP_TRACE_GC_END},
                 {"gc_major_end", KP_TRACE_GC_END},
                 {"spawn", KP_TRACE_SPAWN},
                 {"exit", KP_TRACE_EXIT},
                 {"return_from", KP_TRACE_RETURN_FROM}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (strcmp(tag, kinds[k].tag) == 0)
            return kinds[k].kind;
    return KP_TRACE_OTHER;
}

/* The arity of each kind of trace message, with its timestamp last:
 * {trace_ts, Pid, call, MFA[, Message], Ts}, {trace_ts, Pid, return_to, MFA,
 * Ts}, {trace_ts, Pid, return_from, MFA, Value, Ts}, {trace_ts, Pid, spawn,
 * Child, MFA, Ts}; the others are skipped element by element. */
static int arity_fits(kp_trace_event_kind kind, int arity)
{
    switch (kind) {
    case KP_TRACE_CALL: return arity == 5 || arity == 6;
    case KP_TRACE_RETURN_TO: return arity == 5;
    case KP_TRACE_RETURN_FROM:
    case KP_TRACE_SPAWN: return arity == 6;
    default: return 1;
    }
}

int kp_trace_decode(const char *buf, size_t len, kp_trace_event *ev)
{
    int i = 0, version, arity;
    char tag[MAXATOMLEN_UTF8];
    long long ts;
    memset(ev, 0, sizeof *ev);
    if (len > INT32_MAX || kp_term_check(buf, len) != 0 ||
        ei_decode_version(buf, &i, &version) != 0 || ei_decode_tuple_header(buf, &i, &arity) != 0)
        return -1;
    if (arity < 4 || ei_decode_atom(buf, &i, tag) != 0 || strcmp(tag, "trace_ts") != 0 ||
        ei_decode_pid(buf, &i, &ev->pid) != 0 || ei_decode_atom(buf, &i, tag) != 0)
        return 0;
    ev->kind = kind_of(tag);
    if (!arity_fits(ev->kind, arity))
        return -1; /* the code below reads the elements this kind has */
    int rc = 0;
    switch (ev->kind) {
    case KP_TRACE_CALL:
        rc = decode_mfa(buf, &i, ev);
        if (rc == 0 && arity == 6) { /* a mark: the pattern's message follows */
            if (strcmp(ev->module, "kprof_rtrace_mark") == 0 &&
                strcmp(ev->function, "begin_trace") == 0) {
                ev->kind = KP_TRACE_BEGIN;
                rc = decode_begin(buf, &i, ev);
            } else if (strcmp(ev->module, "kprof_rtrace_mark") == 0 &&
                       strcmp(ev->function, "end_trace") == 0) {
                rc = decode_end(buf, &i, ev);
            } else {
                rc = ei_skip_term(buf, &i);
            }
        }
        break;
    case KP_TRACE_RETURN_TO: {
        int type, size;
        if (ei_get_type(buf, &i, &type, &size) == 0 &&
            (type == ERL_SMALL_TUPLE_EXT || type == ERL_LARGE_TUPLE_EXT))
            rc = decode_mfa(buf, &i, ev);
        else
            rc = ei_skip_term(buf, &i); /* undefined: returned to no function we know */
        break;
    }
    case KP_TRACE_RETURN_FROM: /* {trace_ts, Pid, return_from, MFA, Value, Ts} */
        rc = decode_mfa(buf, &i, ev) != 0 || ei_skip_term(buf, &i) != 0 ? -1 : 0;
        break;
    case KP_TRACE_SPAWN:
        rc = ei_decode_pid(buf, &i, &ev->child) != 0 || ei_skip_term(buf, &i) != 0 ? -1 : 0;
        break;
    default: /* in/out carry the current function, gc a list, exit a reason */
        for (int k = 3; k < arity - 1 && rc == 0; k++)
            rc = ei_skip_term(buf, &i);
        break;
    }
    if (rc != 0)
        return -1;
    /* meta trace events carry erlang:now() tuples: no time of ours */
    if (ei_decode_longlong(buf, &i, &ts) != 0) {
        ts = 0;
        if (ei_skip_term(buf, &i) != 0)
            return -1;
    }
    if ((size_t)i > len)
        return -1;
    ev->ts_ns = ts;
    return 1;
}

int kp_trace_decode_mark(const char *buf, size_t len, int begin, kp_trace_event *ev)
{
    int i = 0, version;
    if (len > INT32_MAX || kp_term_check(buf, len) != 0 ||
        ei_decode_version(buf, &i, &version) != 0)
        return -1;
    if (begin) {
        ev->kind = KP_TRACE_BEGIN;
        return decode_begin(buf, &i, ev) == 0 && (size_t)i <= len ? 0 : -1;
    }
    return decode_end(buf, &i, ev) == 0 && (size_t)i <= len ? 0 : -1;
}

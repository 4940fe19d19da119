/* Following a request's messages: the processes a traced process's messages
 * reach are taken in by its trace (at most max_processes of them), and their
 * time goes to the trace their seq_trace token names (see trace/collect.h). */
#include <string.h>

#include "kp/alloc.h"
#include "trace/collect_internal.h"

static int follows(const trace *t, const erlang_pid *pid)
{
    for (size_t f = 0; f < t->n_followed; f++)
        if (pack(&t->followed[f]) == pack(pid))
            return 1;
    return 0;
}

/* The index of the trace a followed process works for now: the one its
 * token names, if that trace took it in; else -1. */
static int working_for(kp_trace_collector *rt, const proc *p, const erlang_pid *pid)
{
    uint32_t k;
    if (!p->label || p->replied || !kp_u64_map_get(&rt->by_no, p->label, &k) ||
        !follows(&rt->traces[k], pid))
        return -1;
    return (int)k;
}

/* Whether trace `k` holds `pid` now, or takes it in within its bound. */
static int take_in(trace *t, const erlang_pid *pid)
{
    if (follows(t, pid))
        return 1;
    if (t->n_followed >= t->max_followed)
        return 0;
    if (t->n_followed == t->cap_followed) {
        size_t cap = t->cap_followed ? t->cap_followed * 2 : 8;
        erlang_pid *f = kp_realloc_array(t->followed, cap, sizeof *f);
        if (!f)
            return 0;
        t->followed = f;
        t->cap_followed = cap;
    }
    t->followed[t->n_followed++] = *pid;
    return 1;
}

/* A message of trace `no` from ev->pid to ev->child: when the sender works
 * for that trace, the receiver is taken in (within the trace's bound) and
 * the message becomes an arrow of the timeline, ending where the receiver
 * takes it in (its token becomes the trace's: on_label). */
static void note_reached(kp_trace_collector *rt, const erlang_pid *pid)
{
    uint32_t seen;
    if (rt->reached_all || kp_u64_map_get(&rt->reached_set, pack(pid), &seen))
        return;
    if (rt->n_reached == rt->cap_reached) {
        size_t cap = rt->cap_reached ? rt->cap_reached * 2 : 64;
        erlang_pid *r = cap <= MAX_REACHED ? kp_realloc_array(rt->reached, cap, sizeof *r) : NULL;
        if (!r) {
            rt->reached_all = 1;
            return;
        }
        rt->reached = r;
        rt->cap_reached = cap;
    }
    if (kp_u64_map_put(&rt->reached_set, pack(pid), 1) != 0) {
        rt->reached_all = 1;
        return;
    }
    rt->reached[rt->n_reached++] = *pid;
}

void kp_tc_follow_send(kp_trace_collector *rt, const kp_trace_event *ev)
{
    uint32_t k;
    note_reached(rt, &ev->child);
    if (!ev->trace_no || !kp_u64_map_get(&rt->by_no, ev->trace_no, &k))
        return;
    trace *t = &rt->traces[k];
    proc *s = kp_tc_proc_of(rt, &ev->pid);
    if (!s || t->cut || (s->followed ? working_for(rt, s, &ev->pid) != (int)k : s->trace != k))
        return;
    uint32_t from = s->frames[0]; /* s moves if new_proc grows the slots */
    proc *r = kp_tc_proc_of(rt, &ev->child);
    if (r && !r->followed) { /* a process of a trace: its own or another's */
        if (r->trace == k)
            kp_tc_add_link(t, from, r->frames[0], ev->ts_ns, 1);
        return;
    }
    if (!take_in(t, &ev->child))
        return;
    if (!r) {
        r = kp_tc_new_proc(rt, &ev->child, ev->ts_ns, RUNNING);
        if (!r)
            return;
        uint32_t label;
        r->followed = 1;
        r->label = kp_u64_map_get(&rt->labels, pack(&ev->child), &label) ? label : 0;
        kp_u64_map_del(&rt->labels, pack(&ev->child));
    }
    int linked = kp_tc_add_link(t, from, r->frames[0], ev->ts_ns, 1);
    if (r->label == t->no && r->replied) {
        /* it replied, and waits: a new message of the request, which its
         * token will not tell (it stays the trace's), makes it work for it
         * again from here */
        r->replied = 0;
        r->last = ev->ts_ns;
        r->link = 0;
    } else if (r->label == t->no) { /* it took the message in already */
        r->link = 0;
    } else if (linked) {
        r->link = (uint32_t)t->n_links;
        r->link_trace = k;
    }
}

/* The process's token changed (it took in a message): what it worked for
 * until now has the time up to here. */
static int on_label(kp_trace_collector *rt, proc *p, const kp_trace_event *ev)
{
    int k = working_for(rt, p, &ev->pid);
    if (kp_tc_account(rt, p, k >= 0 ? &rt->traces[k] : NULL, ev->ts_ns) != 0)
        return -1;
    p->label = ev->trace_no;
    p->replied = 0;
    k = working_for(rt, p, &ev->pid);
    if (k >= 0 && p->link && p->link_trace == (uint32_t)k) {
        trace *t = &rt->traces[k];
        if (p->link <= t->n_links)
            t->links[p->link - 1].ts_to = ev->ts_ns;
        p->link = 0;
    }
    return 0;
}

/* A finished trace's followed processes: those no other trace holds leave
 * the collector. Their flags stay until no trace runs (on_reached): then no
 * request's message can be on its way to them, giving them the flags anew
 * while they are taken away. */
void kp_tc_follow_release(kp_trace_collector *rt, uint32_t k)
{
    trace *t = &rt->traces[k];
    for (size_t f = 0; f < t->n_followed; f++) {
        int elsewhere = 0;
        for (uint32_t o = 0; o < MAX_TRACES && !elsewhere; o++)
            elsewhere = o != k && rt->traces[o].used && follows(&rt->traces[o], &t->followed[f]);
        proc *p = kp_tc_proc_of(rt, &t->followed[f]);
        if (elsewhere || !p || !p->followed)
            continue;
        kp_tc_remove_proc(rt, &t->followed[f]);
    }
    if (t->no)
        kp_u64_map_del(&rt->by_no, t->no);
}

/* An event of a followed process: its stack and state always follow it;
 * its time goes to the trace it works for, if any. */
int kp_tc_follow_event(kp_trace_collector *rt, proc *p, const kp_trace_event *ev)
{
    if (ev->kind == KP_TRACE_LABEL)
        return on_label(rt, p, ev);
    if (!ev->ts_ns)
        return 0;
    int k = working_for(rt, p, &ev->pid);
    if (k < 0) {
        kp_tc_account(rt, p, NULL, ev->ts_ns);
    } else {
        int cut = kp_tc_timed_event(rt, p, (uint32_t)k, ev->ts_ns);
        if (cut)
            return cut < 0 ? -1 : 0; /* p may be gone */
    }
    switch (ev->kind) {
    case KP_TRACE_CALL:
        /* a server's reply ends what it does for the request: its wait for
         * the next message is not the request's */
        if (k >= 0 && strcmp(ev->function, "reply") == 0 && ev->arity == 2 &&
            strcmp(ev->module, "gen") == 0)
            p->replied = 1;
        return kp_tc_push(rt, p, ev);
    case KP_TRACE_RETURN_TO: return kp_tc_pop_to(rt, p, ev);
    case KP_TRACE_EXIT: kp_tc_remove_proc(rt, &ev->pid); break;
    default: kp_tc_set_state(p, ev->kind); break;
    }
    return 0;
}

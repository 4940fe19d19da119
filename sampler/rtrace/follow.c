/* Following a request's messages: the processes a traced process's messages
 * reach are taken in by its trace (at most max_processes of them), and their
 * time goes to the trace whose message they took in, until they are back in
 * their receive loop (see rtrace/collect.h). */
#include "rtrace/follow.h"

#include <string.h>

#include "kp/alloc.h"

static int follows(const trace *t, const erlang_pid *pid)
{
    for (size_t f = 0; f < t->n_followed; f++)
        if (pack(&t->followed[f]) == pack(pid))
            return 1;
    return 0;
}

/* The index of the trace a followed process works for now: the one whose
 * message it took in last, if that trace took it in; else -1. */
static int working_for(kp_rtrace *rtrace, const proc *p, const erlang_pid *pid)
{
    uint32_t k;
    if (!p->label)
        return -1;
    if (p->work) { /* the trace whose message it took in */
        const trace *w = &rtrace->traces[p->work - 1];
        if (w->used && w->no == p->label && follows(w, pid))
            return (int)p->work - 1;
    }
    if (!kp_u64_map_get(&rtrace->by_no, p->label, &k))
        return -1;
    if (follows(&rtrace->traces[k], pid))
        return (int)k;
    int j = kp_rtrace_prev(rtrace, k);
    return j >= 0 && follows(&rtrace->traces[j], pid) ? j : -1;
}

int kp_rtrace_prev(kp_rtrace *rtrace, uint32_t k)
{
    const trace *t = &rtrace->traces[k];
    if (!t->prev)
        return -1;
    const trace *j = &rtrace->traces[t->prev - 1];
    return j->used && j->draining && j->no == t->no ? (int)t->prev - 1 : -1;
}

/* Whether trace `k` holds `pid` now, or takes it in within its bound; `p`
 * counts the traces that hold it. */
int kp_rtrace_take_in(trace *t, proc *p, const erlang_pid *pid)
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
    p->holders++;
    return 1;
}

/* The receivers of SEND events since the last on_reached: the send pattern
 * gave them the trace flags. */
void kp_rtrace_note_reached(kp_rtrace *rtrace, const erlang_pid *pid)
{
    uint32_t seen;
    if (rtrace->reached_all || kp_u64_map_get(&rtrace->reached_set, pack(pid), &seen))
        return;
    if (rtrace->n_reached == rtrace->cap_reached) {
        size_t cap = rtrace->cap_reached ? rtrace->cap_reached * 2 : 64;
        erlang_pid *r =
            cap <= MAX_REACHED ? kp_realloc_array(rtrace->reached, cap, sizeof *r) : NULL;
        if (!r) {
            rtrace->reached_all = 1;
            return;
        }
        rtrace->reached = r;
        rtrace->cap_reached = cap;
    }
    if (kp_u64_map_put(&rtrace->reached_set, pack(pid), 1) != 0) {
        rtrace->reached_all = 1;
        return;
    }
    rtrace->reached[rtrace->n_reached++] = *pid;
}

/* Whether process `s` works for trace `k`: one of its own, or followed and
 * at work for it. */
static int works_for(kp_rtrace *rtrace, const proc *s, const erlang_pid *pid, uint32_t k)
{
    return s->followed ? working_for(rtrace, s, pid) == (int)k : s->trace == k;
}

/* A message of trace `no` from ev->pid to ev->child: when the sender works
 * for that trace, the receiver is taken in (within the trace's bound) and
 * the message becomes an arrow of the timeline, ending where the receiver
 * takes it in (its RECEIVE). */
void kp_rtrace_follow_send(kp_rtrace *rtrace, const kp_trace_event *ev)
{
    uint32_t k;
    int here = ev->child.node[0] && strcmp(ev->child.node, ev->pid.node) == 0;
    if (here) /* a process on another node got no flags */
        kp_rtrace_note_reached(rtrace, &ev->child);
    if (!ev->trace_no || !kp_u64_map_get(&rtrace->by_no, ev->trace_no, &k))
        return;
    trace *t = &rtrace->traces[k];
    proc *s = kp_rtrace_proc_of(rtrace, &ev->pid);
    if (!s || t->cut || !works_for(rtrace, s, &ev->pid, k) ||
        kp_rtrace_after_end(rtrace, s, &ev->pid))
        return;
    if (!here) {
        t->remote = 1; /* to another node: the trace waits for its part */
        return;
    }
    uint32_t from = s->frames[0]; /* s moves if new_proc grows the slots */
    proc *r = kp_rtrace_proc_of(rtrace, &ev->child);
    if (r && !r->followed && r->trace != k)
        return; /* another trace's own process */
    if (!r) {
        r = kp_rtrace_new_proc(rtrace, &ev->child, ev->ts_ns, RUNNING);
        if (!r)
            return;
        r->followed = 1;
    }
    if (r->followed && !kp_rtrace_take_in(t, r, &ev->child)) {
        if (!r->holders)
            kp_rtrace_remove_proc(rtrace, &ev->child);
        return;
    }
    t->in_flight++;
    if (pack(&ev->pid) == pack(&t->root))
        t->root_in_flight++;
    if (kp_rtrace_add_link(t, from, r->frames[0], ev->ts_ns, 1)) {
        r->link = (uint32_t)t->n_links;
        r->link_trace = k;
    }
}

/* The arrow of a message of trace `k` that `p` took in at `ts`: the one its
 * SEND began, or, for a message sent without one (a reply to an alias),
 * one from the sender's lane at its last event. */
static void arrow_in(kp_rtrace *rtrace, proc *p, uint32_t k, const kp_trace_event *ev)
{
    trace *t = &rtrace->traces[k];
    proc *s;
    if (p->link && p->link_trace == k && p->link <= t->n_links && ev->child.node[0] &&
        (s = kp_rtrace_proc_of(rtrace, &ev->child)) && t->links[p->link - 1].from == s->frames[0]) {
        t->links[p->link - 1].ts_to = ev->ts_ns;
        p->link = 0;
        return;
    }
    s = ev->child.node[0] ? kp_rtrace_proc_of(rtrace, &ev->child) : NULL;
    if (!s || s == p || !(s->followed ? follows(t, &ev->child) : s->trace == k))
        return;
    uint32_t from = s->frames[0], to = p->frames[0];
    int64_t sent = s->last < ev->ts_ns ? s->last : ev->ts_ns;
    if (kp_rtrace_add_link(t, from, to, sent, 1))
        t->links[t->n_links - 1].ts_to = ev->ts_ns;
}

/* What the process worked for until `ts` has the time up to there; from
 * there it works for trace `label` (0: none). */
static int relabel(kp_rtrace *rtrace, proc *p, const erlang_pid *pid, uint32_t label, int64_t ts)
{
    int k = working_for(rtrace, p, pid);
    if (kp_rtrace_account(rtrace, p, k >= 0 ? &rtrace->traces[k] : NULL, ts) != 0)
        return -1;
    p->label = label;
    p->work = 0;
    return 0;
}

/* A message from another node's process, taken in by a process of the
 * trace: kept for the arrow from that process once its node's part is in.
 * 0, or -1 when out of memory. */
static int remote_in(trace *t, uint32_t to, const kp_trace_event *ev)
{
    if (t->n_remote_in == t->cap_remote_in) {
        size_t cap = t->cap_remote_in ? t->cap_remote_in * 2 : 8;
        kp_rtrace_remote_in *r =
            cap <= MAX_LINKS ? kp_realloc_array(t->remote_in, cap, sizeof *r) : NULL;
        if (!r)
            return cap <= MAX_LINKS ? -1 : 0; /* past MAX_LINKS the arrow is left out */
        t->remote_in = r;
        t->cap_remote_in = cap;
    }
    t->remote_in[t->n_remote_in++] = (kp_rtrace_remote_in){to, ev->child, ev->ts_ns};
    return 0;
}

int kp_rtrace_follow_receive(kp_rtrace *rtrace, const kp_trace_event *ev)
{
    uint32_t k;
    proc *p = kp_rtrace_proc_of(rtrace, &ev->pid);
    if (!p || !kp_u64_map_get(&rtrace->by_no, ev->trace_no, &k))
        return 0;
    trace *t = &rtrace->traces[k];
    int from_root = ev->child.node[0] && pack(&ev->child) == pack(&t->root);
    int j = kp_rtrace_prev(rtrace, k);
    if (j >= 0 && from_root && rtrace->traces[j].root_in_flight) {
        /* its process's last call sent it, before this call's messages */
        k = (uint32_t)j;
        t = &rtrace->traces[k];
    }
    /* from its own process, after its end, unless sent before (some are
     * on their way): that process's token outlives a call (--mfa), its
     * messages after it are not the call's */
    if (t->draining && from_root && !t->root_in_flight)
        return 0;
    if (p->followed) {
        if ((p->label != ev->trace_no || (p->work && p->work != k + 1)) &&
            relabel(rtrace, p, &ev->pid, ev->trace_no, ev->ts_ns) != 0)
            return -1;
        if (follows(t, &ev->pid))
            p->work = k + 1;
        if (working_for(rtrace, p, &ev->pid) != (int)k)
            return 0; /* a trace that did not take it in */
    } else if (p->trace != k) {
        return 0;
    }
    t->in_flight -= t->in_flight > 0;
    t->root_in_flight -= from_root && t->root_in_flight > 0;
    if (ev->child.node[0] && strcmp(ev->child.node, ev->pid.node) != 0)
        return remote_in(&rtrace->traces[k], p->frames[0], ev);
    arrow_in(rtrace, p, k, ev);
    return 0;
}

/* A finished trace's followed processes: those no other trace holds leave
 * the collector. Their flags stay until no trace runs (on_reached): then no
 * request's message can be on its way to them, giving them the flags anew
 * while they are taken away. */
void kp_rtrace_follow_release(kp_rtrace *rtrace, uint32_t k)
{
    trace *t = &rtrace->traces[k];
    for (size_t f = 0; f < t->n_followed; f++) {
        proc *p = kp_rtrace_proc_of(rtrace, &t->followed[f]);
        if (p && p->followed && p->holders-- <= 1)
            kp_rtrace_remove_proc(rtrace, &t->followed[f]);
    }
    uint32_t mapped;
    if (t->no && kp_u64_map_get(&rtrace->by_no, t->no, &mapped) && mapped == k)
        kp_u64_map_del(&rtrace->by_no, t->no);
}

/* Whether a process trace `k` took in works for it now. */
static int anyone_working(kp_rtrace *rtrace, uint32_t k)
{
    trace *t = &rtrace->traces[k];
    for (size_t f = 0; f < t->n_followed; f++) {
        proc *p = kp_rtrace_proc_of(rtrace, &t->followed[f]);
        if (p && p->followed && working_for(rtrace, p, &t->followed[f]) == (int)k)
            return 1;
    }
    return 0;
}

int kp_rtrace_after_end(kp_rtrace *rtrace, const proc *p, const erlang_pid *pid)
{
    if (p->followed || p->trace >= MAX_TRACES) /* a followed process is no trace's own */
        return 0;
    const trace *t = &rtrace->traces[p->trace];
    return t->draining && pack(pid) == pack(&t->root);
}

int kp_rtrace_follow_busy(kp_rtrace *rtrace, uint32_t k)
{
    return rtrace->traces[k].in_flight > 0 || anyone_working(rtrace, k);
}

/* An event of a followed process: its stack and state always follow it;
 * its time goes to the trace it works for, if any. */
int kp_rtrace_follow_event(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev, uint32_t *cut)
{
    if (ev->kind == KP_TRACE_LABEL) {
        int k = working_for(rtrace, p, &ev->pid);
        if (relabel(rtrace, p, &ev->pid, ev->trace_no, ev->ts_ns) != 0)
            return -1;
        /* a part whose processes are all back in their loops is done */
        if (k >= 0 && rtrace->traces[k].origin[0] && !anyone_working(rtrace, (uint32_t)k)) {
            *cut = (uint32_t)k;
            return 1;
        }
        if (k >= 0 && rtrace->traces[k].draining && !kp_rtrace_follow_busy(rtrace, (uint32_t)k)) {
            *cut = (uint32_t)k;
            return 2;
        }
        return 0;
    }
    if (!ev->ts_ns)
        return 0;
    int k = working_for(rtrace, p, &ev->pid);
    if (k < 0) {
        kp_rtrace_account(rtrace, p, NULL, ev->ts_ns);
    } else {
        if (kp_rtrace_timed_event(rtrace, p, (uint32_t)k, ev->ts_ns)) {
            *cut = (uint32_t)k;
            return 1;
        }
    }
    switch (ev->kind) {
    case KP_TRACE_CALL: return kp_rtrace_push(rtrace, p, ev);
    case KP_TRACE_RETURN_TO: return kp_rtrace_pop_to(rtrace, p, ev);
    case KP_TRACE_SPAWN:
        /* what it spawns at work for a request is the request's */
        if (k >= 0 && !kp_rtrace_proc_of(rtrace, &ev->child))
            kp_rtrace_add_member(rtrace, (uint32_t)k, p->frames[0], &ev->child, ev->ts_ns);
        return 0;
    case KP_TRACE_EXIT:
        /* the traces that hold it keep its pid; its slot goes */
        kp_rtrace_remove_proc(rtrace, &ev->pid);
        return 0;
    default: kp_rtrace_set_state(p, ev->kind); return 0;
    }
}

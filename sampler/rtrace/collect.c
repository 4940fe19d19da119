/* The request-trace collector (rtrace/collect.h): traces begin, take their
 * events, and end; the state they work on is rtrace/state.c's, following
 * rtrace/follow.c's. */
#include "rtrace/collect.h"

#include <kp/intern.h>
#include <stdio.h>
#include <string.h>

#include "kp/alloc.h"
#include "rtrace/follow.h"
#include "rtrace/state.h"

/* A node's monotonic clock in ns starts near -2^59 and would take a
 * century to pass 2^61: a reading beyond +-2^61 comes from a broken stream
 * only. Such events are dropped, which keeps every difference of two
 * readings, and the sums the writers make of them, within int64_t. */
#define CLOCK_LIMIT ((int64_t)1 << 61)

static void end_trace(kp_rtrace *rtrace, uint32_t k, int64_t ts, int drained);

static uint64_t us_to_ns(uint64_t us)
{
    return us > UINT64_MAX / 1000 ? UINT64_MAX : us * 1000;
}

kp_rtrace *kp_rtrace_create(const kp_rtrace_options *o, const kp_rtrace_handler *h)
{
    kp_rtrace *rtrace = kp_calloc(1, sizeof *rtrace);
    if (!rtrace)
        return NULL;
    rtrace->o = *o;
    rtrace->h = *h;
    if (!rtrace->o.max_processes)
        rtrace->o.max_processes = 16;
    if (!rtrace->o.max_depth || rtrace->o.max_depth > 1000)
        rtrace->o.max_depth = 512; /* kp_rtrace_account() builds stacks on the C stack */
    rtrace->frames = kp_frames_create(o->frame_flags);
    rtrace->called = kp_strtab_create();
    if (!rtrace->frames || !rtrace->called ||
        kp_frames_intern_pseudo(rtrace->frames, "sleep", 5, "state", &rtrace->sleep_frame) ||
        kp_frames_intern_pseudo(rtrace->frames, "garbage_collection", 18, "state",
                                &rtrace->gc_frame)) {
        kp_rtrace_free(rtrace);
        return NULL;
    }
    return rtrace;
}

void kp_rtrace_free(kp_rtrace *rtrace)
{
    if (!rtrace)
        return;
    for (size_t k = 0; k < MAX_TRACES; k++)
        kp_rtrace_trace_free(&rtrace->traces[k]);
    for (size_t k = 0; k < rtrace->n_ps; k++)
        kp_free(rtrace->ps[k].frames);
    kp_free(rtrace->ps);
    kp_free(rtrace->free);
    kp_u64_map_free(&rtrace->procs);
    kp_u64_map_free(&rtrace->by_no);
    kp_u64_map_free(&rtrace->reached_set);
    kp_free(rtrace->reached);
    kp_frames_free(rtrace->frames);
    kp_strtab_free(rtrace->called);
    kp_free(rtrace->fn_called);
    kp_free(rtrace);
}

size_t kp_rtrace_running(const kp_rtrace *rtrace)
{
    size_t n = 0;
    for (size_t k = 0; k < MAX_TRACES; k++)
        n += rtrace->traces[k].used;
    return n;
}

/* How long a trace whose messages went to other nodes waits, past its end,
 * for their parts (they come when the processes there are back in their
 * loops, through two nodes' servers). */
#define PART_GRACE_NS 500000000LL

/* Trace `k` ends: the handler writes it, the processes following took in
 * for it alone go, and so does the trace. */
static void finish(kp_rtrace *rtrace, uint32_t k)
{
    trace *t = &rtrace->traces[k];
    kp_rtrace_data d = {.frames = rtrace->frames,
                        .stacks = t->stacks,
                        .ns = t->times.ns,
                        .n_ns = t->times.n_ns,
                        .iv = t->times.iv,
                        .n_iv = t->times.n_iv,
                        .start = t->start,
                        .last = t->last,
                        .root = t->root,
                        .cut = kp_rtrace_cut_name(t->cut),
                        .links = t->links,
                        .n_links = t->n_links,
                        .clocks = t->clocks,
                        .n_clocks = t->n_clocks,
                        .events = t->events};
    kp_rtrace_follow_release(rtrace, k);
    /* from its start to its return or end mark: the time its caller saw */
    int64_t took = (t->returned ? t->returned : t->last) - t->start;
    int dropped =
        !t->cut && t->slower_than_ns && !kp_rtrace_longer_than(took + 1, t->slower_than_ns);
    if (rtrace->h.on_done) {
        kp_rtrace_done done = {.id = t->id,
                               .pids = t->pids,
                               .n_pids = t->n_pids,
                               .data = &d,
                               .origin = t->origin[0] ? t->origin : NULL,
                               .no = t->no,
                               .remote_in = t->remote_in,
                               .n_remote_in = t->n_remote_in,
                               .dropped = dropped};
        rtrace->h.on_done(rtrace->h.ctx, &done);
    }
    if (rtrace->h.on_reached && (rtrace->n_reached || rtrace->reached_all))
        rtrace->h.on_reached(rtrace->h.ctx, rtrace->reached, rtrace->n_reached,
                             rtrace->reached_all);
    rtrace->n_reached = 0;
    rtrace->reached_all = 0;
    kp_u64_map_clear(&rtrace->reached_set);
    for (size_t p = 0; p < t->n_pids; p++) {
        /* not a process that has begun another trace since (draining) */
        proc *q = kp_rtrace_proc_of(rtrace, &t->pids[p]);
        if (q && !q->followed && q->trace == k)
            kp_rtrace_remove_proc(rtrace, &t->pids[p]);
    }
    kp_rtrace_trace_free(t);
}

/* Trace `k` was cut by an event (kp_rtrace_timed_event): it ends. Returns
 * -1 when it was cut for want of memory, else 0. */
static int finish_cut(kp_rtrace *rtrace, uint32_t k)
{
    int oom = rtrace->traces[k].cut == KP_RTRACE_CUT_OUT_OF_MEMORY;
    finish(rtrace, k);
    return oom ? -1 : 0;
}

/* ------------------------------------------------------------------ */

/* A free trace slot, begun at `ts` with `root`, its bounds (0: the
 * collector's defaults) and its stack table; its index, or -1 when every
 * slot is taken or out of memory. */
static int new_trace(kp_rtrace *rtrace, const char *id, const erlang_pid *root, int64_t ts,
                     uint64_t max_events, uint64_t max_duration_ms, uint64_t max_followed)
{
    int k = 0;
    while (k < MAX_TRACES && rtrace->traces[k].used)
        k++;
    if (k == MAX_TRACES)
        return -1;
    trace *t = &rtrace->traces[k];
    memset(t, 0, sizeof *t);
    snprintf(t->id, sizeof t->id, "%s", id);
    t->used = 1;
    t->root = *root;
    t->start = t->last = ts;
    t->max_events = max_events ? max_events : rtrace->o.max_events;
    uint64_t ms = max_duration_ms ? max_duration_ms : rtrace->o.max_duration_ms;
    t->max_duration_ns = ms > UINT64_MAX / 2000000 ? UINT64_MAX / 2 : ms * 1000000;
    t->max_followed = max_followed ? max_followed : rtrace->o.max_processes;
    t->stacks = kp_stacks_create();
    if (!t->stacks) {
        kp_rtrace_trace_free(t);
        return -1;
    }
    return k;
}

static int open_trace(kp_rtrace *rtrace, const char *id, const erlang_pid *pid, int64_t ts,
                      uint64_t max_events, uint64_t max_duration_ms, int untimed, uint32_t no,
                      uint64_t max_followed)
{
    proc *was = kp_rtrace_proc_of(rtrace, pid);
    if (was && !was->followed)
        return -1;
    int k = new_trace(rtrace, id, pid, ts, max_events, max_duration_ms, max_followed);
    if (k < 0)
        return -1;
    if (was) /* followed for others' requests until now: from here, its own */
        kp_rtrace_remove_proc(rtrace, pid);
    trace *t = &rtrace->traces[k];
    t->untimed = untimed;
    if (!kp_rtrace_add_proc(rtrace, (uint32_t)k, pid, ts, RUNNING)) {
        kp_rtrace_trace_free(t);
        return -1;
    }
    /* a number in use (a stale mark) is not followed twice */
    uint32_t other;
    if (no && !kp_u64_map_get(&rtrace->by_no, no, &other) &&
        kp_u64_map_put(&rtrace->by_no, no, (uint32_t)k) == 0)
        t->no = no;
    return 0;
}

/* A process here took in a message of trace `no` of another node (ev->child
 * is its sender there) that no trace here knows: this node's part of it
 * begins, with that process taken in. 0, or -1. */
static int open_part(kp_rtrace *rtrace, const kp_trace_event *ev)
{
    uint32_t other;
    char id[16];
    snprintf(id, sizeof id, "%u", ev->trace_no);
    int k = kp_u64_map_get(&rtrace->by_no, ev->trace_no, &other)
                ? -1
                : new_trace(rtrace, id, &ev->pid, ev->ts_ns, 0, 0, 0);
    if (k < 0)
        return -1;
    trace *t = &rtrace->traces[k];
    snprintf(t->origin, sizeof t->origin, "%.255s", ev->child.node); /* an atom: 255 at most */
    proc *p = kp_rtrace_new_proc(rtrace, &ev->pid, ev->ts_ns, RUNNING);
    if (!p || kp_u64_map_put(&rtrace->by_no, ev->trace_no, (uint32_t)k) != 0) {
        if (p)
            kp_rtrace_remove_proc(rtrace, &ev->pid);
        kp_rtrace_trace_free(t);
        return -1;
    }
    t->no = ev->trace_no;
    p->followed = 1;
    kp_rtrace_take_in(t, p, &ev->pid);
    kp_rtrace_note_reached(rtrace, &ev->pid); /* its flags go with the others' */
    return 0;
}

int kp_rtrace_open(kp_rtrace *rtrace, const char *id, const erlang_pid *pid, int64_t ts_ns)
{
    return open_trace(rtrace, id, pid, ts_ns, 0, 0, 0, 0, 0);
}

void kp_rtrace_close(kp_rtrace *rtrace, const char *id, kp_rtrace_cut cut)
{
    for (uint32_t k = 0; k < MAX_TRACES; k++) {
        trace *t = &rtrace->traces[k];
        if (t->used && (!id || strcmp(t->id, id) == 0)) {
            /* a draining trace's request is whole; what it waited for is
             * left out */
            if (!t->cut && !t->draining)
                t->cut = cut;
            finish(rtrace, k);
        }
    }
}

void kp_rtrace_sweep(kp_rtrace *rtrace, int64_t now_ns)
{
    for (uint32_t k = 0; k < MAX_TRACES; k++) {
        trace *t = &rtrace->traces[k];
        if (t->used && t->ending && now_ns >= t->end_by) {
            finish(rtrace, k);
            continue;
        }
        if (t->used && t->draining && now_ns >= t->end_by) {
            end_trace(rtrace, k, 0, 1);
            continue;
        }
        /* a second of grace: the node's own timer stops the trace first */
        if (t->used && !t->untimed &&
            kp_rtrace_longer_than(now_ns - t->start, t->max_duration_ns + 1000000000)) {
            if (!t->cut)
                t->cut = KP_RTRACE_CUT_MAX_DURATION;
            finish(rtrace, k);
        }
    }
}

int kp_rtrace_adopt(kp_rtrace *rtrace, const char *module, const char *function, unsigned arity,
                    uint64_t max_traces, uint64_t slower_than_us)
{
    rtrace->adopt_slower_than_ns = us_to_ns(slower_than_us);
    rtrace->adopting = 1;
    snprintf(rtrace->adopt_fn.module, sizeof rtrace->adopt_fn.module, "%s", module);
    snprintf(rtrace->adopt_fn.function, sizeof rtrace->adopt_fn.function, "%s", function);
    rtrace->adopt_fn.arity = arity;
    rtrace->max_adopted = max_traces;
    return 0;
}

uint64_t kp_rtrace_adopted(const kp_rtrace *rtrace)
{
    return rtrace->adopted;
}

static int same_fn(const kp_trace_event *a, const kp_trace_event *b)
{
    return a->arity == b->arity && strcmp(a->module, b->module) == 0 &&
           strcmp(a->function, b->function) == 0;
}

/* The trace of a call of the adopted function that `ev` begins (at
 * `ev->ts_ns`, 0 for a meta event; followed as trace `no`, 0: not): its
 * own, under a frame for that function. */
static void open_call(kp_rtrace *rtrace, const kp_trace_event *ev, uint32_t no)
{
    if (rtrace->adopted >= rtrace->max_adopted)
        return;
    /* the number is the process's: its last call's trace may drain still;
     * it keeps draining beside this one (two at most: an older one ends) */
    uint32_t j = NOT_A_MEMBER;
    if (no && kp_u64_map_get(&rtrace->by_no, no, &j)) {
        int older = kp_rtrace_prev(rtrace, j);
        if (!rtrace->traces[j].draining)
            j = NOT_A_MEMBER; /* a running trace has it: this one is not followed */
        else if (older >= 0)
            end_trace(rtrace, (uint32_t)older, 0, 1);
    }
    char id[64];
    snprintf(id, sizeof id, "%s.%u.%llu", "CALL", ev->pid.num,
             (unsigned long long)rtrace->adopted + 1);
    if (open_trace(rtrace, id, &ev->pid, ev->ts_ns, ev->max_events, ev->max_duration_ms, !ev->ts_ns,
                   j == NOT_A_MEMBER ? no : 0, ev->max_processes) != 0)
        return;
    rtrace->adopted++;
    proc *p = kp_rtrace_proc_of(rtrace, &ev->pid);
    if (!p)
        return;
    trace *t = &rtrace->traces[p->trace];
    if (j != NOT_A_MEMBER && rtrace->traces[j].used &&
        kp_u64_map_put(&rtrace->by_no, no, p->trace) == 0) {
        t->no = no;
        t->prev = j + 1;
    }
    t->call_depth = 1;
    t->slower_than_ns = rtrace->adopt_slower_than_ns;
    kp_rtrace_push(rtrace, p, &rtrace->adopt_fn);
}

/* `p` (NULL: no trace holds it) calls the adopted function, as `ev` says:
 * a mark through the NIF (BEGIN with `call`), or through the trace port a
 * meta CALL (no time of ours; the next event starts the clock). A call of
 * the function inside a traced one of its process deepens that one. Other
 * events of a process that is not in a trace (a finished call's, before
 * its flags are cleared) start nothing. */
static void adopt(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev)
{
    int meta = ev->kind == KP_TRACE_CALL && !ev->ts_ns && same_fn(ev, &rtrace->adopt_fn);
    if (!rtrace->adopting || !(meta || (ev->kind == KP_TRACE_BEGIN && ev->call)))
        return;
    if (p && !p->followed && rtrace->traces[p->trace].draining) {
        /* its last call's trace drains on without it (see open_call) */
        kp_rtrace_remove_proc(rtrace, &ev->pid);
        p = NULL;
    }
    if (!p || p->followed) {
        open_call(rtrace, ev, ev->kind == KP_TRACE_BEGIN ? ev->trace_no : 0);
        return;
    }
    trace *t = &rtrace->traces[p->trace];
    if (t->call_depth && pack(&t->root) == pack(&ev->pid))
        t->call_depth++;
}

/* Trace `k` ended at node time `ts` (0: not known). While processes its
 * messages reached still work for it (a gen_server it cast to), or have
 * not taken them in yet, it drains: it goes on taking their time, until
 * its duration bound, and no longer its own process's. Then it is
 * finished, or, if its messages went to other nodes, at the latest
 * PART_GRACE_NS from there, once their parts are in. `drained`: the
 * draining is over (or is not waited for). */
static void end_trace(kp_rtrace *rtrace, uint32_t k, int64_t ts, int drained)
{
    trace *t = &rtrace->traces[k];
    if (!t->returned)
        t->returned = ts ? ts : t->last;
    if (!drained && !t->draining && kp_rtrace_follow_busy(rtrace, k)) {
        t->draining = 1;
        t->end_by = t->start + (int64_t)(t->max_duration_ns > INT64_MAX / 2 ? INT64_MAX / 4
                                                                            : t->max_duration_ns);
        return;
    }
    t->draining = 0;
    if (!t->remote) {
        finish(rtrace, k);
        return;
    }
    t->ending = 1;
    t->end_by = (t->last > t->returned ? t->last : t->returned) + PART_GRACE_NS;
}

/* The return_from of the adopted function in the root of its trace: the
 * call's trace ends when its outermost call returns. 0, or -1 (as
 * kp_rtrace_event). */
static int call_returned(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev)
{
    uint32_t k = p->trace;
    trace *t = &rtrace->traces[k];
    if (!t->call_depth || pack(&ev->pid) != pack(&t->root) || !same_fn(ev, &rtrace->adopt_fn))
        return 0;
    if (ev->ts_ns && kp_rtrace_timed_event(rtrace, p, k, ev->ts_ns))
        return finish_cut(rtrace, k);
    if (--t->call_depth == 0)
        end_trace(rtrace, k, ev->ts_ns, 0);
    return 0;
}

int kp_rtrace_event(kp_rtrace *rtrace, const kp_trace_event *ev)
{
    if (ev->ts_ns > CLOCK_LIMIT || ev->ts_ns < -CLOCK_LIMIT)
        return 0; /* no node's clock: see CLOCK_LIMIT */
    if (ev->kind == KP_TRACE_BEGIN && ev->call) {
        adopt(rtrace, kp_rtrace_proc_of(rtrace, &ev->pid), ev);
        return 0;
    }
    if (ev->kind == KP_TRACE_BEGIN) {
        proc *p;
        if (open_trace(rtrace, ev->id, &ev->pid, ev->ts_ns, ev->max_events, ev->max_duration_ms, 0,
                       ev->trace_no, ev->max_processes) == 0 &&
            (p = kp_rtrace_proc_of(rtrace, &ev->pid)))
            rtrace->traces[p->trace].slower_than_ns = us_to_ns(ev->slower_than_us);
        return 0;
    }
    if (ev->kind == KP_TRACE_END && ev->cut) { /* the node cut it: by id, from its server */
        kp_rtrace_close(rtrace, ev->id, ev->cut);
        return 0;
    }
    if (ev->kind == KP_TRACE_SEND) {
        kp_rtrace_follow_send(rtrace, ev);
        return 0;
    }
    if (ev->kind == KP_TRACE_RECEIVE) {
        uint32_t known;
        if (ev->child.node[0] && strcmp(ev->child.node, ev->pid.node) != 0 &&
            !kp_rtrace_proc_of(rtrace, &ev->pid) &&
            !kp_u64_map_get(&rtrace->by_no, ev->trace_no, &known) && open_part(rtrace, ev) != 0)
            return 0; /* no room for it: its part is lost */
        return kp_rtrace_follow_receive(rtrace, ev);
    }
    proc *p = kp_rtrace_proc_of(rtrace, &ev->pid);
    uint32_t k;
    if (p && p->followed) {
        switch (kp_rtrace_follow_event(rtrace, p, ev, &k)) {
        case 0: return 0;
        case 1: return finish_cut(rtrace, k);
        case 2: end_trace(rtrace, k, ev->ts_ns, 1); return 0; /* drained */
        default: return -1;
        }
    }
    if (ev->kind == KP_TRACE_LABEL)
        return 0; /* of a process no trace holds */
    if (ev->kind == KP_TRACE_CALL && !ev->ts_ns) {
        adopt(rtrace, p, ev); /* a meta event, through the trace port */
        return 0;
    }
    if (!p)
        return 0; /* not (or no longer) part of a trace */
    if (kp_rtrace_after_end(rtrace, p, &ev->pid))
        return 0; /* its trace drains: what it does now is not the request's */
    if (ev->kind == KP_TRACE_RETURN_FROM)
        return call_returned(rtrace, p, ev);
    if (!ev->ts_ns)
        return 0; /* no time of ours: nothing to count */
    k = p->trace;
    trace *t = &rtrace->traces[k];
    if (kp_rtrace_timed_event(rtrace, p, k, ev->ts_ns))
        return finish_cut(rtrace, k);
    int rc = 0;
    switch (ev->kind) {
    case KP_TRACE_CALL: rc = kp_rtrace_push(rtrace, p, ev); break;
    case KP_TRACE_RETURN_TO: rc = kp_rtrace_pop_to(rtrace, p, ev); break;
    case KP_TRACE_SPAWN:
        if (!kp_rtrace_proc_of(rtrace, &ev->child))
            kp_rtrace_add_member(rtrace, k, p->frames[0], &ev->child, ev->ts_ns);
        break;
    case KP_TRACE_EXIT:
        if (pack(&ev->pid) != pack(&t->root))
            kp_rtrace_remove_proc(rtrace, &ev->pid);
        break;
    case KP_TRACE_END:
        if (strcmp(ev->id, t->id) == 0)
            end_trace(rtrace, k, ev->ts_ns, 0);
        break;
    default: kp_rtrace_set_state(p, ev->kind); break;
    }
    return rc;
}

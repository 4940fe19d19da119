/* The request-trace collector's state (rtrace/state.h): process slots, their
 * stacks, and the time they spend in them, given to their traces. */
#include "rtrace/state.h"

#include <kp/intern.h>
#include <stdio.h>
#include <string.h>

#include "common/pid_text.h"
#include "kp/alloc.h"

void kp_rtrace_trace_free(trace *t)
{
    kp_free(t->followed);
    kp_stacks_free(t->stacks);
    kp_rtrace_times_free(&t->times);
    kp_free(t->pids);
    kp_free(t->links);
    kp_free(t->remote_in);
    kp_free(t->clocks);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------------ */
/* processes */

proc *kp_rtrace_proc_of(kp_rtrace *rtrace, const erlang_pid *pid)
{
    uint32_t k;
    return kp_u64_map_get(&rtrace->procs, pack(pid), &k) ? &rtrace->ps[k] : NULL;
}

/* A process slot for `pid`, not yet in any trace. */
proc *kp_rtrace_new_proc(kp_rtrace *rtrace, const erlang_pid *pid, int64_t ts, int state)
{
    size_t slot;
    if (rtrace->n_free) {
        slot = rtrace->free[--rtrace->n_free];
    } else {
        if (rtrace->n_ps == rtrace->cap_ps) {
            size_t cap = rtrace->cap_ps ? rtrace->cap_ps * 2 : 64;
            proc *ps = kp_realloc_array(rtrace->ps, cap, sizeof *ps);
            uint32_t *fr = kp_realloc_array(rtrace->free, cap, sizeof *fr);
            if (ps)
                rtrace->ps = ps;
            if (fr)
                rtrace->free = fr;
            if (!ps || !fr)
                return NULL;
            rtrace->cap_ps = cap;
        }
        slot = rtrace->n_ps++;
        rtrace->ps[slot].frames = NULL;
    }
    proc *p = &rtrace->ps[slot];
    char text[KP_PID_TEXT_MAX];
    int n = kp_pid_text(text, pid->num, pid->serial);
    if (!p->frames)
        p->frames = kp_malloc(rtrace->o.max_depth * sizeof(uint32_t));
    if (!p->frames ||
        kp_frames_intern_pseudo(rtrace->frames, text, (size_t)n, "process", &p->frames[0]) ||
        kp_u64_map_put(&rtrace->procs, pack(pid), (uint32_t)slot) != 0) {
        rtrace->free[rtrace->n_free++] = (uint32_t)slot;
        return NULL;
    }
    p->trace = NOT_A_MEMBER;
    p->followed = 0;
    p->label = p->work = p->link = p->link_trace = p->holders = 0;
    p->state = state;
    p->last = ts;
    p->timed = 1;
    p->depth = 1;
    return p;
}

proc *kp_rtrace_add_proc(kp_rtrace *rtrace, uint32_t t, const erlang_pid *pid, int64_t ts,
                         int state)
{
    proc *p = kp_rtrace_new_proc(rtrace, pid, ts, state);
    if (!p)
        return NULL;
    p->trace = t;
    p->timed = !rtrace->traces[t].untimed;
    trace *tr = &rtrace->traces[t];
    if (tr->n_pids == tr->cap_pids) {
        size_t cap = tr->cap_pids ? tr->cap_pids * 2 : 8;
        erlang_pid *pids = kp_realloc_array(tr->pids, cap, sizeof *pids);
        if (pids) {
            tr->pids = pids;
            tr->cap_pids = cap;
        }
    }
    if (tr->n_pids < tr->cap_pids)
        tr->pids[tr->n_pids++] = *pid;
    return p;
}

proc *kp_rtrace_add_member(kp_rtrace *rtrace, uint32_t k, uint32_t parent, const erlang_pid *pid,
                           int64_t ts)
{
    proc *child = kp_rtrace_add_proc(rtrace, k, pid, ts, OUT);
    if (child)
        kp_rtrace_add_link(&rtrace->traces[k], parent, child->frames[0], ts, 0);
    return child;
}

/* The slot is kept (with its frame array) for the next process. */
void kp_rtrace_remove_proc(kp_rtrace *rtrace, const erlang_pid *pid)
{
    uint32_t k;
    if (!kp_u64_map_get(&rtrace->procs, pack(pid), &k))
        return;
    kp_u64_map_del(&rtrace->procs, pack(pid));
    rtrace->free[rtrace->n_free++] = k;
}

/* ------------------------------------------------------------------ */
/* time attribution */

/* The time since the process's last event goes to its stack in trace `t`
 * (a followed process's time outside the trace's stretches: to none, NULL). */
int kp_rtrace_account(kp_rtrace *rtrace, proc *p, trace *t, int64_t ts)
{
    if (!t) {
        p->last = ts;
        return 0;
    }
    if (!p->timed) { /* an adopted call: its first timed event */
        p->last = ts;
        p->timed = 1;
        if (t->untimed) {
            t->start = t->last = ts;
            t->untimed = 0;
        }
    }
    int64_t dt = ts - p->last;
    p->last = ts;
    if (dt <= 0 || t->cut || t->ending)
        return 0;
    uint32_t ids[1024];
    size_t n = p->depth;
    memcpy(ids, p->frames, n * sizeof *ids);
    if (p->state == OUT)
        ids[n++] = rtrace->sleep_frame;
    else if (p->state == GC)
        ids[n++] = rtrace->gc_frame;
    uint32_t stack;
    if (kp_stacks_intern(t->stacks, ids, n, &stack) != KP_OK)
        return -1;
    return kp_rtrace_add_time(t, stack, p->frames[0], p->last - dt, dt);
}

int kp_rtrace_add_time(trace *t, uint32_t stack, uint32_t pid_frame, int64_t start, int64_t dur)
{
    return kp_rtrace_times_add(&t->times, stack, pid_frame, start, dur) == KP_OK ? 0 : -1;
}

int kp_rtrace_timed_event(kp_rtrace *rtrace, proc *p, uint32_t k, int64_t ts)
{
    trace *t = &rtrace->traces[k];
    if (ts > t->last)
        t->last = ts;
    if (kp_rtrace_account(rtrace, p, t, ts) != 0) {
        if (!t->cut)
            t->cut = KP_RTRACE_CUT_OUT_OF_MEMORY;
        return 1;
    }
    if (++t->events > t->max_events && !t->cut)
        t->cut = KP_RTRACE_CUT_MAX_EVENTS;
    else if (kp_rtrace_longer_than(ts - t->start, t->max_duration_ns) && !t->cut)
        t->cut = KP_RTRACE_CUT_MAX_DURATION;
    return t->cut != KP_RTRACE_COMPLETE;
}

void kp_rtrace_set_state(proc *p, kp_trace_event_kind kind)
{
    switch (kind) {
    case KP_TRACE_OUT: p->state = OUT; break;
    case KP_TRACE_IN: p->state = RUNNING; break;
    case KP_TRACE_GC_START: p->state = GC; break;
    case KP_TRACE_GC_END: p->state = RUNNING; break;
    default: break;
    }
}

/* Keeps a spawn or a message for the timeline's arrows; past MAX_LINKS, or
 * out of memory, the arrow is left out (the lanes stay). Returns 1 if kept. */
int kp_rtrace_add_link(trace *t, uint32_t from, uint32_t to, int64_t ts, int message)
{
    if (t->n_links == t->cap_links) {
        size_t cap = t->cap_links ? t->cap_links * 2 : 16;
        kp_rtrace_link *l = cap <= MAX_LINKS ? kp_realloc_array(t->links, cap, sizeof *l) : NULL;
        if (!l)
            return 0;
        t->links = l;
        t->cap_links = cap;
    }
    t->links[t->n_links++] = (kp_rtrace_link){from, to, ts, ts, message};
    return 1;
}

/* kprof's own tracing machinery (trace_request, the marks, the server
 * calls) is left out of the stacks: the trace starts at the request's code. */
static int machinery(const kp_trace_event *ev)
{
    return strcmp(ev->module, "kprof") == 0 || strncmp(ev->module, "kprof_rtrace", 12) == 0;
}

static int frame_of(kp_rtrace *rtrace, const kp_trace_event *ev, uint32_t *id)
{
    kp_mfa mfa = {.module = ev->module,
                  .module_len = strlen(ev->module),
                  .function = ev->function,
                  .function_len = strlen(ev->function),
                  .arity = ev->arity};
    return kp_frames_intern_mfa(rtrace->frames, &mfa, id) == KP_OK ? 0 : -1;
}

/* Function `id` (of `module`) was called: its module goes into
 * rtrace->called, the first time. 0, or -1 when out of memory. */
static int note_called(kp_rtrace *rtrace, uint32_t id, const char *module)
{
    if (id >= rtrace->n_fn_called) {
        size_t cap = rtrace->n_fn_called ? rtrace->n_fn_called * 2 : 256;
        while (cap <= id)
            cap *= 2;
        unsigned char *seen = kp_realloc_array(rtrace->fn_called, cap, 1);
        if (!seen)
            return -1;
        memset(seen + rtrace->n_fn_called, 0, cap - rtrace->n_fn_called);
        rtrace->fn_called = seen;
        rtrace->n_fn_called = cap;
    }
    uint32_t called;
    if (!rtrace->fn_called[id] &&
        kp_strtab_intern(rtrace->called, module, strlen(module), &called, NULL) != KP_OK)
        return -1;
    rtrace->fn_called[id] = 1;
    return 0;
}

int kp_rtrace_push(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev)
{
    uint32_t id;
    if (machinery(ev))
        return 0;
    if (frame_of(rtrace, ev, &id) != 0 || note_called(rtrace, id, ev->module) != 0)
        return -1;
    /* A function already on the stack is entered again: taken as a tail
     * call back to it (a server loop: loop -> handle_msg -> loop ...), which
     * no return_to would ever pop. Real recursion is folded the same way,
     * as current_stacktrace shows it. */
    for (size_t at = p->depth; at > 1; at--)
        if (p->frames[at - 1] == id) {
            p->depth = at;
            return 0;
        }
    if (p->depth < rtrace->o.max_depth)
        p->frames[p->depth++] = id;
    return 0;
}

int kp_rtrace_pop_to(kp_rtrace *rtrace, proc *p, const kp_trace_event *ev)
{
    uint32_t id, called;
    if (!ev->module[0])
        return 0;
    if (machinery(ev)) { /* back in kprof's code, below the request's: none of its frames */
        p->depth = 1;
        return 0;
    }
    if (frame_of(rtrace, ev, &id) != 0)
        return -1;
    size_t at = p->depth, len = strlen(ev->module);
    while (at > 1 && p->frames[at - 1] != id)
        at--;
    if (at > 1) {
        p->depth = at;
    } else if (p->depth > 2 && !kp_strtab_find(rtrace->called, ev->module, len,
                                               kp_strtab_hash(ev->module, len), &called)) {
        /* back in a module no CALL named, which has no pattern (OTP's, with
         * the setting otp_calls off): the returning frame ends, its callers
         * stay (a fun that lists:map called returns into lists:map_1, below
         * the function that called lists:map). A frame that tail-called it
         * stays too, until its function is entered again or one below it
         * returns. */
        p->depth--;
    } else { /* returned below where the trace began: restart the stack there */
        p->frames[1] = id;
        p->depth = 2;
    }
    return 0;
}

#define _GNU_SOURCE
#include "trace/collect.h"

#include <errno.h>
#include <kp/intern.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/pid_text.h"
#include "kp/alloc.h"

#include "trace/collect_internal.h"

/* A node's monotonic clock in ns starts near -2^59 and would take a
 * century to pass 2^61: a reading beyond +-2^61 comes from a broken stream
 * only. Such events are dropped, which keeps every difference of two
 * readings, and the sums the writers make of them, within int64_t. */
#define CLOCK_LIMIT ((int64_t)1 << 61)

/* Whether `d` ns exceed `limit` ns (unsigned: a bound may be huge). */
static int longer_than(int64_t d, uint64_t limit)
{
    return d > 0 && (uint64_t)d > limit;
}

kp_trace_collector *kp_trace_collector_create(const kp_trace_collector_options *o,
                                              const kp_trace_collector_handler *h)
{
    kp_trace_collector *rt = kp_calloc(1, sizeof *rt);
    if (!rt)
        return NULL;
    rt->o = *o;
    rt->h = *h;
    if (!rt->o.max_processes)
        rt->o.max_processes = 16;
    if (!rt->o.max_depth || rt->o.max_depth > 1000)
        rt->o.max_depth = 512; /* kp_tc_account() builds stacks on the C stack */
    rt->frames = kp_frames_create(o->frame_flags);
    if (!rt->frames || kp_frames_intern_pseudo(rt->frames, "sleep", 5, "state", &rt->sleep_frame) ||
        kp_frames_intern_pseudo(rt->frames, "garbage_collection", 18, "state", &rt->gc_frame)) {
        kp_trace_collector_free(rt);
        return NULL;
    }
    return rt;
}

static void free_trace(trace *t)
{
    kp_free(t->followed);
    kp_stacks_free(t->stacks);
    kp_free(t->ns);
    kp_free(t->iv);
    kp_free(t->pids);
    kp_free(t->links);
    memset(t, 0, sizeof *t);
}

void kp_trace_collector_free(kp_trace_collector *rt)
{
    if (!rt)
        return;
    for (size_t k = 0; k < MAX_TRACES; k++)
        free_trace(&rt->traces[k]);
    for (size_t k = 0; k < rt->n_ps; k++)
        kp_free(rt->ps[k].frames);
    kp_free(rt->ps);
    kp_free(rt->free);
    kp_u64_map_free(&rt->procs);
    kp_u64_map_free(&rt->by_no);
    kp_u64_map_free(&rt->reached_set);
    kp_free(rt->reached);
    kp_frames_free(rt->frames);
    kp_free(rt);
}

uint64_t kp_trace_collector_written(const kp_trace_collector *rt)
{
    return rt->written;
}

size_t kp_trace_collector_running(const kp_trace_collector *rt)
{
    size_t n = 0;
    for (size_t k = 0; k < MAX_TRACES; k++)
        n += rt->traces[k].used;
    return n;
}

/* ------------------------------------------------------------------ */
/* processes */

proc *kp_tc_proc_of(kp_trace_collector *rt, const erlang_pid *pid)
{
    uint32_t k;
    return kp_u64_map_get(&rt->procs, pack(pid), &k) ? &rt->ps[k] : NULL;
}

/* A process slot for `pid`, not yet in any trace. */
proc *kp_tc_new_proc(kp_trace_collector *rt, const erlang_pid *pid, int64_t ts, int state)
{
    size_t slot;
    if (rt->n_free) {
        slot = rt->free[--rt->n_free];
    } else {
        if (rt->n_ps == rt->cap_ps) {
            size_t cap = rt->cap_ps ? rt->cap_ps * 2 : 64;
            proc *ps = kp_realloc_array(rt->ps, cap, sizeof *ps);
            uint32_t *fr = kp_realloc_array(rt->free, cap, sizeof *fr);
            if (ps)
                rt->ps = ps;
            if (fr)
                rt->free = fr;
            if (!ps || !fr)
                return NULL;
            rt->cap_ps = cap;
        }
        slot = rt->n_ps++;
        rt->ps[slot].frames = NULL;
    }
    proc *p = &rt->ps[slot];
    char text[KP_PID_TEXT_MAX];
    int n = kp_pid_text(text, pid->num, pid->serial);
    if (!p->frames)
        p->frames = kp_malloc(rt->o.max_depth * sizeof(uint32_t));
    if (!p->frames ||
        kp_frames_intern_pseudo(rt->frames, text, (size_t)n, "process", &p->frames[0]) ||
        kp_u64_map_put(&rt->procs, pack(pid), (uint32_t)slot) != 0) {
        rt->free[rt->n_free++] = (uint32_t)slot;
        return NULL;
    }
    p->trace = NOT_A_MEMBER;
    p->followed = 0;
    p->label = p->link = p->link_trace = p->holders = 0;
    p->state = state;
    p->last = ts;
    p->timed = 1;
    p->depth = 1;
    return p;
}

/* A process of trace `t`: the one that began it or one it spawned. */
static proc *add_proc(kp_trace_collector *rt, uint32_t t, const erlang_pid *pid, int64_t ts,
                      int state)
{
    proc *p = kp_tc_new_proc(rt, pid, ts, state);
    if (!p)
        return NULL;
    p->trace = t;
    p->timed = !rt->traces[t].untimed;
    trace *tr = &rt->traces[t];
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

proc *kp_tc_add_member(kp_trace_collector *rt, uint32_t k, uint32_t parent, const erlang_pid *pid,
                       int64_t ts)
{
    proc *child = add_proc(rt, k, pid, ts, OUT);
    if (child)
        kp_tc_add_link(&rt->traces[k], parent, child->frames[0], ts, 0);
    return child;
}

/* The slot is kept (with its frame array) for the next process. */
void kp_tc_remove_proc(kp_trace_collector *rt, const erlang_pid *pid)
{
    uint32_t k;
    if (!kp_u64_map_get(&rt->procs, pack(pid), &k))
        return;
    kp_u64_map_del(&rt->procs, pack(pid));
    rt->free[rt->n_free++] = k;
}

/* ------------------------------------------------------------------ */
/* time attribution */

/* The time since the process's last event goes to its stack in trace `t`
 * (a followed process's time outside the trace's stretches: to none, NULL). */
int kp_tc_account(kp_trace_collector *rt, proc *p, trace *t, int64_t ts)
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
    if (dt <= 0 || t->cut)
        return 0;
    uint32_t ids[1024];
    size_t n = p->depth;
    memcpy(ids, p->frames, n * sizeof *ids);
    if (p->state == OUT)
        ids[n++] = rt->sleep_frame;
    else if (p->state == GC)
        ids[n++] = rt->gc_frame;
    uint32_t stack;
    if (kp_stacks_intern(t->stacks, ids, n, &stack) != KP_OK)
        return -1;
    if (stack >= t->n_ns) {
        size_t cap = t->n_ns ? t->n_ns * 2 : 64;
        while (cap <= stack)
            cap *= 2;
        uint64_t *ns = kp_realloc_array(t->ns, cap, sizeof *ns);
        if (!ns)
            return -1;
        memset(ns + t->n_ns, 0, (cap - t->n_ns) * sizeof *ns);
        t->ns = ns;
        t->n_ns = cap;
    }
    t->ns[stack] += (uint64_t)dt;
    if (t->n_iv == t->cap_iv) {
        size_t cap = t->cap_iv ? t->cap_iv * 2 : 256;
        kp_trace_interval *iv = kp_realloc_array(t->iv, cap, sizeof *iv);
        if (!iv)
            return -1;
        t->iv = iv;
        t->cap_iv = cap;
    }
    t->iv[t->n_iv++] = (kp_trace_interval){stack, p->frames[0], p->last - dt, dt};
    return 0;
}

int kp_tc_timed_event(kp_trace_collector *rt, proc *p, uint32_t k, int64_t ts)
{
    trace *t = &rt->traces[k];
    if (ts > t->last)
        t->last = ts;
    if (kp_tc_account(rt, p, t, ts) != 0) {
        t->cut = "out_of_memory";
        kp_tc_finish(rt, k);
        return -1;
    }
    if (++t->events > t->max_events && !t->cut)
        t->cut = "max_events";
    else if (longer_than(ts - t->start, t->max_duration_ns) && !t->cut)
        t->cut = "max_duration";
    if (!t->cut)
        return 0;
    kp_tc_finish(rt, k);
    return 1;
}

void kp_tc_set_state(proc *p, kp_trace_event_kind kind)
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
int kp_tc_add_link(trace *t, uint32_t from, uint32_t to, int64_t ts, int message)
{
    if (t->n_links == t->cap_links) {
        size_t cap = t->cap_links ? t->cap_links * 2 : 16;
        kp_trace_link *l = cap <= MAX_LINKS ? kp_realloc_array(t->links, cap, sizeof *l) : NULL;
        if (!l)
            return 0;
        t->links = l;
        t->cap_links = cap;
    }
    t->links[t->n_links++] = (kp_trace_link){from, to, ts, ts, message};
    return 1;
}

/* kprof's own tracing machinery (trace_request, the marks, the server
 * calls) is left out of the stacks: the trace starts at the request's code. */
static int machinery(const kp_trace_event *ev)
{
    return strcmp(ev->module, "kprof") == 0 || strncmp(ev->module, "kprof_rtrace", 12) == 0;
}

static int frame_of(kp_trace_collector *rt, const kp_trace_event *ev, uint32_t *id)
{
    kp_mfa mfa = {.module = ev->module,
                  .module_len = strlen(ev->module),
                  .function = ev->function,
                  .function_len = strlen(ev->function),
                  .arity = ev->arity};
    return kp_frames_intern_mfa(rt->frames, &mfa, id) == KP_OK ? 0 : -1;
}

int kp_tc_push(kp_trace_collector *rt, proc *p, const kp_trace_event *ev)
{
    uint32_t id;
    if (machinery(ev))
        return 0;
    if (frame_of(rt, ev, &id) != 0)
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
    if (p->depth < rt->o.max_depth)
        p->frames[p->depth++] = id;
    return 0;
}

int kp_tc_pop_to(kp_trace_collector *rt, proc *p, const kp_trace_event *ev)
{
    uint32_t id;
    if (!ev->module[0] || machinery(ev))
        return 0;
    if (frame_of(rt, ev, &id) != 0)
        return -1;
    size_t at = p->depth;
    while (at > 1 && p->frames[at - 1] != id)
        at--;
    if (at > 1) {
        p->depth = at;
    } else { /* returned below where the trace began: restart the stack there */
        p->frames[1] = id;
        p->depth = 2;
    }
    return 0;
}

void kp_tc_finish(kp_trace_collector *rt, uint32_t k)
{
    trace *t = &rt->traces[k];
    char stamp[32], base[4200], folded[4300], perf[4300], svg[4300], timeline[4320], why[4500] = "";
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
    snprintf(base, sizeof base, "%s/%s.%03ldZ-%s", rt->o.dir, stamp, now.tv_nsec / 1000000, t->id);
    snprintf(folded, sizeof folded, "%s.folded", base);
    snprintf(perf, sizeof perf, "%s.perf", base);
    snprintf(svg, sizeof svg, "%s.svg", base);
    snprintf(timeline, sizeof timeline, "%s.trace.json", base);
    if (mkdir(rt->o.dir, 0700) != 0 && errno != EEXIST)
        snprintf(why, sizeof why, "cannot create %s: %s", rt->o.dir, strerror(errno));
    kp_trace_data d = {.frames = rt->frames,
                       .stacks = t->stacks,
                       .ns = t->ns,
                       .n_ns = t->n_ns,
                       .iv = t->iv,
                       .n_iv = t->n_iv,
                       .start = t->start,
                       .last = t->last,
                       .root = t->root,
                       .cut = t->cut,
                       .links = t->links,
                       .n_links = t->n_links};
    kp_status st = why[0] ? KP_ERR_IO : kp_trace_write_folded(&d, folded, svg, t->id);
    if (st == KP_OK)
        st = kp_trace_write_perf(&d, perf);
    if (st == KP_OK)
        st = kp_trace_write_timeline(&d, timeline, t->id);
    if (st != KP_OK && !why[0])
        snprintf(why, sizeof why, "writing %s: %s", folded,
                 st == KP_ERR_IO ? strerror(errno) : kp_strerror(st));
    if (st == KP_OK)
        rt->written++;
    kp_tc_follow_release(rt, k);
    if (rt->h.on_done)
        rt->h.on_done(rt->h.ctx, t->id, t->pids, t->n_pids, st == KP_OK ? folded : NULL, why);
    if (rt->h.on_reached && (rt->n_reached || rt->reached_all))
        rt->h.on_reached(rt->h.ctx, rt->reached, rt->n_reached, rt->reached_all);
    rt->n_reached = 0;
    rt->reached_all = 0;
    kp_u64_map_clear(&rt->reached_set);
    for (size_t p = 0; p < t->n_pids; p++)
        kp_tc_remove_proc(rt, &t->pids[p]);
    free_trace(t);
}

/* ------------------------------------------------------------------ */

static int open_trace(kp_trace_collector *rt, const char *id, const erlang_pid *pid, int64_t ts,
                      uint64_t max_events, uint64_t max_duration_ms, int untimed, uint32_t no,
                      uint64_t max_followed)
{
    int k = 0;
    while (k < MAX_TRACES && rt->traces[k].used)
        k++;
    proc *was = kp_tc_proc_of(rt, pid);
    if (k == MAX_TRACES || (was && !was->followed))
        return -1;
    if (was) /* followed for others' requests until now: from here, its own */
        kp_tc_remove_proc(rt, pid);
    trace *t = &rt->traces[k];
    memset(t, 0, sizeof *t);
    snprintf(t->id, sizeof t->id, "%s", id);
    t->used = 1;
    t->untimed = untimed;
    t->root = *pid;
    t->start = t->last = ts;
    t->max_events = max_events ? max_events : rt->o.max_events;
    uint64_t ms = max_duration_ms ? max_duration_ms : rt->o.max_duration_ms;
    t->max_duration_ns = ms > UINT64_MAX / 2000000 ? UINT64_MAX / 2 : ms * 1000000;
    t->max_followed = max_followed ? max_followed : rt->o.max_processes;
    t->stacks = kp_stacks_create();
    if (!t->stacks || !add_proc(rt, (uint32_t)k, pid, ts, RUNNING)) {
        free_trace(t);
        return -1;
    }
    /* a number in use (a stale mark) is not followed twice */
    uint32_t other;
    if (no && !kp_u64_map_get(&rt->by_no, no, &other) &&
        kp_u64_map_put(&rt->by_no, no, (uint32_t)k) == 0)
        t->no = no;
    return 0;
}

int kp_trace_collector_open(kp_trace_collector *rt, const char *id, const erlang_pid *pid,
                            int64_t ts_ns)
{
    return open_trace(rt, id, pid, ts_ns, 0, 0, 0, 0, 0);
}

void kp_trace_collector_close(kp_trace_collector *rt, const char *id, const char *cut)
{
    for (uint32_t k = 0; k < MAX_TRACES; k++) {
        trace *t = &rt->traces[k];
        if (t->used && (!id || strcmp(t->id, id) == 0)) {
            if (cut && !t->cut)
                t->cut = cut;
            kp_tc_finish(rt, k);
        }
    }
}

void kp_trace_collector_sweep(kp_trace_collector *rt, int64_t now_ns)
{
    for (uint32_t k = 0; k < MAX_TRACES; k++) {
        trace *t = &rt->traces[k];
        /* a second of grace: the node's own timer stops the trace first */
        if (t->used && !t->untimed &&
            longer_than(now_ns - t->start, t->max_duration_ns + 1000000000)) {
            if (!t->cut)
                t->cut = "max_duration";
            kp_tc_finish(rt, k);
        }
    }
}

int kp_trace_collector_adopt(kp_trace_collector *rt, const char *module, const char *function,
                             unsigned arity, uint64_t max_traces)
{
    rt->adopting = 1;
    snprintf(rt->adopt_fn.module, sizeof rt->adopt_fn.module, "%s", module);
    snprintf(rt->adopt_fn.function, sizeof rt->adopt_fn.function, "%s", function);
    rt->adopt_fn.arity = arity;
    rt->max_adopted = max_traces;
    return 0;
}

uint64_t kp_trace_collector_adopted(const kp_trace_collector *rt)
{
    return rt->adopted;
}

static int same_fn(const kp_trace_event *a, const kp_trace_event *b)
{
    return a->arity == b->arity && strcmp(a->module, b->module) == 0 &&
           strcmp(a->function, b->function) == 0;
}

/* A process that called the adopted function: its own trace, under a frame
 * for that function. */
static proc *adopt(kp_trace_collector *rt, const kp_trace_event *ev)
{
    /* only the meta event of the call itself (no time of ours) starts one:
     * events a finished call's process sends before its flags are cleared
     * must not */
    if (!rt->adopting || rt->adopted >= rt->max_adopted || ev->ts_ns || ev->kind != KP_TRACE_CALL ||
        !same_fn(ev, &rt->adopt_fn))
        return NULL;
    char id[64];
    snprintf(id, sizeof id, "%s.%u.%llu", "CALL", ev->pid.num, (unsigned long long)rt->adopted + 1);
    if (open_trace(rt, id, &ev->pid, 0, 0, 0, 1, 0, 0) != 0)
        return NULL;
    rt->adopted++;
    proc *p = kp_tc_proc_of(rt, &ev->pid);
    if (p)
        kp_tc_push(rt, p, &rt->adopt_fn);
    return NULL; /* this event has no time: the next one starts the clock */
}

int kp_trace_collector_event(kp_trace_collector *rt, const kp_trace_event *ev)
{
    if (ev->ts_ns > CLOCK_LIMIT || ev->ts_ns < -CLOCK_LIMIT)
        return 0; /* no node's clock: see CLOCK_LIMIT */
    if (ev->kind == KP_TRACE_BEGIN) {
        open_trace(rt, ev->id, &ev->pid, ev->ts_ns, ev->max_events, ev->max_duration_ms, 0,
                   ev->trace_no, ev->max_processes);
        return 0;
    }
    if (ev->kind == KP_TRACE_END && ev->cut[0]) { /* the node cut it: by id, from its server */
        for (uint32_t k = 0; k < MAX_TRACES; k++)
            if (rt->traces[k].used && strcmp(rt->traces[k].id, ev->id) == 0) {
                rt->traces[k].cut =
                    strcmp(ev->cut, "node_backlog") == 0 ? "node_backlog" : "cut_by_node";
                kp_tc_finish(rt, k);
            }
        return 0;
    }
    if (ev->kind == KP_TRACE_SEND) {
        kp_tc_follow_send(rt, ev);
        return 0;
    }
    if (ev->kind == KP_TRACE_RECEIVE)
        return kp_tc_follow_receive(rt, ev);
    proc *p = kp_tc_proc_of(rt, &ev->pid);
    if (p && p->followed)
        return kp_tc_follow_event(rt, p, ev);
    if (ev->kind == KP_TRACE_LABEL)
        return 0; /* of a process no trace holds */
    if (!p && ev->kind != KP_TRACE_RETURN_FROM)
        p = adopt(rt, ev);
    if (!p)
        return 0;                           /* not (or no longer) part of a trace */
    if (ev->kind == KP_TRACE_RETURN_FROM) { /* meta: no time; ends an adopted trace */
        uint32_t k = p->trace;
        if (rt->adopting && pack(&ev->pid) == pack(&rt->traces[k].root) &&
            same_fn(ev, &rt->adopt_fn))
            kp_tc_finish(rt, k);
        return 0;
    }
    if (!ev->ts_ns)
        return 0; /* another meta event (a nested call of the function) */
    uint32_t k = p->trace;
    trace *t = &rt->traces[k];
    int cut = kp_tc_timed_event(rt, p, k, ev->ts_ns);
    if (cut)
        return cut < 0 ? -1 : 0;
    int rc = 0;
    switch (ev->kind) {
    case KP_TRACE_CALL: rc = kp_tc_push(rt, p, ev); break;
    case KP_TRACE_RETURN_TO: rc = kp_tc_pop_to(rt, p, ev); break;
    case KP_TRACE_SPAWN:
        if (!kp_tc_proc_of(rt, &ev->child))
            kp_tc_add_member(rt, k, p->frames[0], &ev->child, ev->ts_ns);
        break;
    case KP_TRACE_EXIT:
        if (pack(&ev->pid) != pack(&t->root))
            kp_tc_remove_proc(rt, &ev->pid);
        break;
    case KP_TRACE_END:
        if (strcmp(ev->id, t->id) == 0)
            kp_tc_finish(rt, k);
        break;
    default: kp_tc_set_state(p, ev->kind); break;
    }
    return rc;
}

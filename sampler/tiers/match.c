#include "tiers/match.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pid_text.h"
#include "common/u64_map.h"
#include "kp/alloc.h"

#define NO_REQ UINT32_MAX

typedef struct {
    uint32_t fn;
    uint32_t req, req_gen; /* the request it runs for, or NO_REQ */
    int nested;            /* an entry call inside an open request */
    int64_t start;
} frame;

typedef struct {
    frame *frames;
    size_t n, cap;
} proc_stack;

typedef kp_tier_interval interval;

enum { REQ_FREE, REQ_OPEN, REQ_CLOSING };

typedef struct {
    int state;
    uint32_t gen;
    kp_tier_pid label;
    size_t identity, entry_fn;
    int64_t start, end;
    int exception, truncated;
    interval *iv;
    size_t n_iv, cap_iv;
    uint32_t *calls; /* per tier */
    uint32_t next;   /* free list or closing queue */
} request;

struct kp_tier_match {
    kp_tier_stats *stats;
    kp_tier_fn *fns;
    size_t n_fns, n_tiers;
    kp_tier_match_limits lim;
    kp_u64_map procs; /* pid -> index into stacks */
    proc_stack *stacks;
    size_t n_stacks; /* slots in use or free-listed */
    uint32_t *free_stacks;
    size_t n_free_stacks;
    kp_u64_map open; /* label -> open request */
    request *reqs;
    size_t n_reqs;
    uint32_t free_req, closing_head, closing_tail;
    int64_t newest;
    kp_tier_match_counters c;
    int trees_all;
    uint64_t slow_us;
    kp_tier_tree_fn tree_fn;
    uint64_t slow_request_us;
    kp_tier_request_fn request_fn;
    void *request_ctx;
    void *tree_ctx;
    kp_buf tree;
};

kp_tier_match_limits kp_tier_match_default_limits(void)
{
    return (kp_tier_match_limits){.max_processes = 100000,
                                  .max_requests = 100000,
                                  .max_depth = 256,
                                  .max_intervals = 10000,
                                  .grace_ns = 20 * 1000000LL};
}

kp_tier_match *kp_tier_match_create(kp_tier_stats *stats, const kp_tier_fn *fns, size_t n_fns,
                                    const kp_tier_match_limits *lim)
{
    kp_tier_match *m = kp_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->stats = stats;
    m->n_tiers = kp_tier_stats_tiers(stats) - 1;
    m->lim = *lim;
    m->fns = kp_realloc_array(NULL, (n_fns ? n_fns : 1), sizeof *m->fns);
    m->reqs = kp_calloc(lim->max_requests, sizeof *m->reqs);
    m->stacks = kp_calloc(lim->max_processes, sizeof *m->stacks);
    m->free_stacks = kp_malloc(lim->max_processes * sizeof *m->free_stacks);
    if (!m->fns || !m->reqs || !m->stacks || !m->free_stacks) {
        kp_tier_match_free(m);
        return NULL;
    }
    memcpy(m->fns, fns, n_fns * sizeof *fns);
    m->n_fns = n_fns;
    m->free_req = m->closing_head = m->closing_tail = NO_REQ;
    m->newest = INT64_MIN;
    return m;
}

static void release_request(kp_tier_match *m, uint32_t r)
{
    request *q = &m->reqs[r];
    kp_free(q->iv);
    kp_free(q->calls);
    uint32_t gen = q->gen + 1;
    memset(q, 0, sizeof *q);
    q->gen = gen;
    q->state = REQ_FREE;
    q->next = m->free_req;
    m->free_req = r;
}

void kp_tier_match_free(kp_tier_match *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_stacks; i++)
        kp_free(m->stacks[i].frames);
    for (size_t i = 0; i < m->n_reqs; i++) {
        kp_free(m->reqs[i].iv);
        kp_free(m->reqs[i].calls);
    }
    kp_u64_map_free(&m->procs);
    kp_u64_map_free(&m->open);
    kp_buf_free(&m->tree);
    kp_free(m->stacks);
    kp_free(m->free_stacks);
    kp_free(m->reqs);
    kp_free(m->fns);
    kp_free(m);
}

void kp_tier_match_trees(kp_tier_match *m, int all, uint64_t slow_us, kp_tier_tree_fn fn, void *ctx)
{
    m->trees_all = all;
    m->slow_us = slow_us;
    m->tree_fn = fn;
    m->tree_ctx = ctx;
}

void kp_tier_match_slow(kp_tier_match *m, uint64_t slow_us, kp_tier_request_fn fn, void *ctx)
{
    m->slow_request_us = slow_us;
    m->request_fn = fn;
    m->request_ctx = ctx;
}

kp_tier_match_counters kp_tier_match_counts(const kp_tier_match *m)
{
    return m->c;
}

/* ------------------------------------------------------------------ */
/* requests */

static uint32_t open_request(kp_tier_match *m, kp_tier_pid label, const kp_tier_event *ev)
{
    uint32_t r;
    if (m->free_req != NO_REQ) {
        r = m->free_req;
        m->free_req = m->reqs[r].next;
    } else if (m->n_reqs < m->lim.max_requests) {
        r = (uint32_t)m->n_reqs++;
    } else {
        return NO_REQ;
    }
    request *q = &m->reqs[r];
    q->calls = kp_calloc(m->n_tiers ? m->n_tiers : 1, sizeof *q->calls);
    size_t identity =
        kp_tier_stats_identity(m->stats, ev->identity_len ? ev->identity : "undefined",
                               ev->identity_len ? ev->identity_len : 9);
    if (!q->calls || identity == SIZE_MAX || kp_u64_map_put(&m->open, label, r) != 0) {
        kp_free(q->calls);
        q->calls = NULL;
        q->next = m->free_req;
        m->free_req = r;
        return NO_REQ;
    }
    q->state = REQ_OPEN;
    q->label = label;
    q->identity = identity;
    q->entry_fn = ev->fn;
    q->start = ev->ts_ns;
    return r;
}

static void close_request(kp_tier_match *m, uint32_t r, int64_t end, int exception)
{
    request *q = &m->reqs[r];
    uint32_t current;
    if (kp_u64_map_get(&m->open, q->label, &current) && current == r)
        kp_u64_map_del(&m->open, q->label);
    q->state = REQ_CLOSING;
    q->end = end;
    q->exception = exception;
    q->next = NO_REQ;
    if (m->closing_tail == NO_REQ)
        m->closing_head = r;
    else
        m->reqs[m->closing_tail].next = r;
    m->closing_tail = r;
}

static void add_interval(kp_tier_match *m, request *q, uint32_t fn, kp_tier_pid pid, int64_t start,
                         int64_t end)
{
    q->calls[m->fns[fn].tier_index]++;
    if (q->n_iv == q->cap_iv) {
        size_t cap = q->cap_iv ? q->cap_iv * 2 : 8;
        if (cap > m->lim.max_intervals)
            cap = m->lim.max_intervals;
        interval *iv = cap > q->cap_iv ? kp_realloc_array(q->iv, cap, sizeof *iv) : NULL;
        if (!iv) {
            q->truncated = 1;
            return;
        }
        q->iv = iv;
        q->cap_iv = cap;
    }
    q->iv[q->n_iv++] = (interval){.fn = fn, .pid = pid, .start = start, .end = end};
}

static const kp_tier_match *sort_ctx;

static int by_tier_then_start(const void *a, const void *b)
{
    const interval *x = a, *y = b;
    size_t tx = sort_ctx->fns[x->fn].tier_index, ty = sort_ctx->fns[y->fn].tier_index;
    if (tx != ty)
        return tx < ty ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

static int by_start(const void *a, const void *b)
{
    const interval *x = a, *y = b;
    if (x->start != y->start)
        return (x->start > y->start) - (x->start < y->start);
    return (y->end > x->end) - (y->end < x->end); /* the enclosing one first */
}

static uint64_t to_us(int64_t ns)
{
    return ns > 0 ? (uint64_t)(ns + 500) / 1000 : 0;
}

static void pid_text(kp_tier_pid pid, char out[KP_PID_TEXT_MAX])
{
    kp_pid_text(out, (uint32_t)(pid >> 32), (uint32_t)(pid & 0xffffffffu));
}

/* The request as an indented tree: each call under the calls that enclose
 * it in time, whatever process ran it. */
static void emit_tree(kp_tier_match *m, request *q, uint64_t total_us)
{
    kp_buf *b = &m->tree;
    kp_buf_clear(b);
    char pid[KP_PID_TEXT_MAX];
    pid_text(q->label, pid);
    char head[160];
    snprintf(head, sizeof head, "request %s %llu us%s%s\n", pid, (unsigned long long)total_us,
             q->exception ? " (exception)" : "", q->truncated ? " (truncated)" : "");
    kp_buf_append_str(b, head);
    if (q->n_iv)
        qsort(q->iv, q->n_iv, sizeof *q->iv, by_start);
    int64_t open_end[64];
    size_t depth = 0;
    for (size_t i = 0; i < q->n_iv; i++) {
        const interval *v = &q->iv[i];
        while (depth > 0 && v->start >= open_end[depth - 1])
            depth--;
        for (size_t d = 0; d <= depth; d++)
            kp_buf_append_str(b, "  ");
        pid_text(v->pid, pid);
        char line[320];
        snprintf(line, sizeof line, "%s %s %llu us (at +%llu us)\n", m->fns[v->fn].name, pid,
                 (unsigned long long)to_us(v->end - v->start),
                 (unsigned long long)to_us(v->start - q->start));
        kp_buf_append_str(b, line);
        if (depth < 64)
            open_end[depth++] = v->end;
    }
    if (b->len)
        m->tree_fn(m->tree_ctx, b->data, b->len);
}

static kp_status finalize(kp_tier_match *m, uint32_t r)
{
    request *q = &m->reqs[r];
    kp_status st = KP_OK;
    sort_ctx = m;
    if (q->n_iv)
        qsort(q->iv, q->n_iv, sizeof *q->iv, by_tier_then_start);
    for (size_t i = 0; i < q->n_iv && st == KP_OK;) {
        size_t tier = m->fns[q->iv[i].fn].tier_index;
        int64_t busy = 0, run_start = q->iv[i].start, run_end = q->iv[i].end;
        for (; i < q->n_iv && m->fns[q->iv[i].fn].tier_index == tier; i++) {
            if (q->iv[i].start > run_end) {
                busy += run_end - run_start;
                run_start = q->iv[i].start;
                run_end = q->iv[i].end;
            } else if (q->iv[i].end > run_end) {
                run_end = q->iv[i].end;
            }
        }
        busy += run_end - run_start;
        st = kp_tier_stats_record(m->stats, tier, q->identity, to_us(busy), q->calls[tier]);
    }
    /* tiers reached only past the interval bound still count their calls */
    if (q->truncated)
        m->c.truncated++;
    uint64_t total = to_us(q->end - q->start);
    m->c.requests++; /* finished: what the _total rows count */
    if (st == KP_OK)
        st = kp_tier_stats_record(m->stats, m->n_tiers, q->identity, total, 1);
    if (m->tree_fn && (m->trees_all || (m->slow_us && total >= m->slow_us)))
        emit_tree(m, q, total);
    if (m->request_fn && m->slow_request_us && total >= m->slow_request_us) {
        size_t len;
        const char *identity = kp_tier_stats_identity_name(m->stats, q->identity, &len);
        kp_tier_request view = {.label = q->label,
                                .entry_fn = q->entry_fn,
                                .start = q->start,
                                .end = q->end,
                                .exception = q->exception,
                                .truncated = q->truncated,
                                .identity = identity,
                                .identity_len = identity ? len : 0,
                                .iv = q->iv,
                                .n_iv = q->n_iv};
        m->request_fn(m->request_ctx, &view);
    }
    release_request(m, r);
    return st;
}

kp_status kp_tier_match_flush(kp_tier_match *m, int all)
{
    kp_status st = KP_OK;
    while (m->closing_head != NO_REQ) {
        request *q = &m->reqs[m->closing_head];
        if (!all && q->end + m->lim.grace_ns > m->newest)
            break;
        uint32_t r = m->closing_head;
        m->closing_head = q->next;
        if (m->closing_head == NO_REQ)
            m->closing_tail = NO_REQ;
        kp_status s = finalize(m, r);
        if (st == KP_OK)
            st = s;
    }
    return st;
}

void kp_tier_match_quiet(kp_tier_match *m, int64_t node_ns)
{
    if (node_ns > m->newest)
        m->newest = node_ns;
}

void kp_tier_match_cut(kp_tier_match *m)
{
    for (size_t i = 0; i < m->n_stacks; i++)
        m->stacks[i].n = 0;
    for (size_t i = 0; i < m->n_reqs; i++) {
        if (m->reqs[i].state == REQ_OPEN) {
            m->c.cut++;
            release_request(m, (uint32_t)i);
        }
    }
    /* stacks are emptied, so every process slot is free again */
    kp_u64_map_clear(&m->procs);
    m->n_free_stacks = 0;
    for (size_t i = m->n_stacks; i-- > 0;)
        m->free_stacks[m->n_free_stacks++] = (uint32_t)i;
    kp_u64_map_clear(&m->open);
}

/* ------------------------------------------------------------------ */
/* per-process call stacks */

static proc_stack *stack_of(kp_tier_match *m, kp_tier_pid pid, int create, uint32_t *index)
{
    if (kp_u64_map_get(&m->procs, pid, index))
        return &m->stacks[*index];
    if (!create)
        return NULL;
    uint32_t s;
    if (m->n_free_stacks)
        s = m->free_stacks[--m->n_free_stacks];
    else if (m->n_stacks < m->lim.max_processes)
        s = (uint32_t)m->n_stacks++;
    else
        return NULL;
    if (kp_u64_map_put(&m->procs, pid, s) != 0) {
        m->free_stacks[m->n_free_stacks++] = s;
        return NULL;
    }
    m->stacks[s].n = 0;
    *index = s;
    return &m->stacks[s];
}

static void drop_if_empty(kp_tier_match *m, kp_tier_pid pid, proc_stack *st, uint32_t s)
{
    if (st->n)
        return;
    /* keep small frame arrays for reuse; free big ones to stay bounded */
    if (st->cap > 64) {
        kp_free(st->frames);
        st->frames = NULL;
        st->cap = 0;
    }
    kp_u64_map_del(&m->procs, pid);
    m->free_stacks[m->n_free_stacks++] = s;
}

static kp_status push(kp_tier_match *m, const kp_tier_event *ev, uint32_t req, int nested)
{
    uint32_t s;
    proc_stack *st = stack_of(m, ev->pid, 1, &s);
    if (!st || st->n >= m->lim.max_depth) {
        m->c.unattributed++;
        return KP_OK;
    }
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 8;
        frame *f = kp_realloc_array(st->frames, cap, sizeof *f);
        if (!f) {
            m->c.unattributed++;
            drop_if_empty(m, ev->pid, st, s);
            return KP_ERR_NOMEM;
        }
        st->frames = f;
        st->cap = cap;
    }
    st->frames[st->n++] = (frame){.fn = (uint32_t)ev->fn,
                                  .req = req,
                                  .req_gen = req == NO_REQ ? 0 : m->reqs[req].gen,
                                  .nested = nested,
                                  .start = ev->ts_ns};
    return KP_OK;
}

static uint32_t open_of(kp_tier_match *m, const kp_tier_event *ev)
{
    uint32_t r;
    if (ev->has_label && kp_u64_map_get(&m->open, ev->label, &r))
        return r;
    return NO_REQ;
}

static kp_status on_call(kp_tier_match *m, const kp_tier_event *ev)
{
    kp_tier_pid label = ev->has_label ? ev->label : ev->pid;
    uint32_t r;
    switch (m->fns[ev->fn].role) {
    case KP_TIER_FN_TIER:
        r = open_of(m, ev);
        if (r == NO_REQ)
            m->c.unattributed++;
        return push(m, ev, r, 0);
    case KP_TIER_FN_ENTRY:
        if (kp_u64_map_get(&m->open, label, &r))
            return push(m, ev, r, 1);
        r = open_request(m, label, ev);
        if (r == NO_REQ)
            m->c.unattributed++;
        return push(m, ev, r, 0);
    case KP_TIER_FN_BEGIN:
        if (kp_u64_map_get(&m->open, label, &r))
            close_request(m, r, ev->ts_ns, 0);
        if (open_request(m, label, ev) == NO_REQ)
            m->c.unattributed++;
        return KP_OK;
    case KP_TIER_FN_END:
        if (kp_u64_map_get(&m->open, label, &r))
            close_request(m, r, ev->ts_ns, 0);
        else
            m->c.unattributed++;
        return KP_OK;
    }
    return KP_OK;
}

static void on_return(kp_tier_match *m, const kp_tier_event *ev)
{
    uint32_t s;
    proc_stack *st = stack_of(m, ev->pid, 0, &s);
    size_t at = st ? st->n : 0;
    while (at > 0 && st->frames[at - 1].fn != ev->fn)
        at--;
    if (at == 0) {
        m->c.unattributed++;
        return;
    }
    if (at != st->n)
        m->c.mismatched++; /* calls above it lost their returns */
    frame f = st->frames[at - 1];
    st->n = at - 1;
    drop_if_empty(m, ev->pid, st, s);
    if (f.req == NO_REQ)
        return;
    request *q = &m->reqs[f.req];
    if (q->gen != f.req_gen || q->state == REQ_FREE) {
        m->c.late++;
        return;
    }
    if (m->fns[f.fn].role == KP_TIER_FN_TIER)
        add_interval(m, q, f.fn, ev->pid, f.start, ev->ts_ns);
    else if (m->fns[f.fn].role == KP_TIER_FN_ENTRY && !f.nested && q->state == REQ_OPEN)
        close_request(m, f.req, ev->ts_ns, ev->kind == KP_TEV_EXCEPTION);
}

kp_status kp_tier_match_event(kp_tier_match *m, const kp_tier_event *ev)
{
    m->c.events++;
    if (ev->fn >= m->n_fns) {
        m->c.unattributed++;
        return KP_OK;
    }
    if (ev->ts_ns > m->newest)
        m->newest = ev->ts_ns;
    if (ev->kind == KP_TEV_CALL)
        return on_call(m, ev);
    on_return(m, ev);
    return KP_OK;
}

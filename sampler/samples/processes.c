#define _GNU_SOURCE
#include "samples/processes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pid_text.h"
#include "common/u64_map.h"
#include "kp/alloc.h"

#define NO_FRAME UINT32_MAX
/* A leaf is keyed by its interned function and its line (processes.h says why). */
#define NO_LEAF UINT64_MAX
/* Receive points are few (the receives of the code that runs); this bounds a
 * pathological node. Past it no new one is learnt. */
#define RECEIVE_POINT_LIMIT 100000

typedef struct {
    uint32_t pid_frame;
    uint32_t label_frame;
    uint32_t code_stack; /* NO_FRAME until a stack arrived */
    uint32_t status_frame;
    uint32_t full_stack; /* cache for (status_frame, at_receive, code_stack) */
    uint64_t leaf;       /* key of code_stack's leaf, NO_LEAF when it has none */
    int at_receive;      /* full_stack has the at-receive frame */
    int has_previous;
    int64_t previous[KP_METRIC_COUNT];
    char status[32]; /* of the previous sample */
} proc;

struct kp_processes {
    kp_frames *frames;
    kp_stacks *stacks;
    uint32_t node_frame; /* NO_FRAME for a single-node recording */
    uint32_t at_receive_frame;
    uint32_t running_frame, waiting_frame; /* the statuses the marking compares */
    kp_u64_map receive_points;             /* leaf keys where some process was seen waiting */
    uint64_t running, at_receive;          /* running samples, and those marked */
    unsigned wordsize;
    kp_proc_sample_fn sink;
    void *ctx;
    uint32_t *mfa_frames; /* agent MFA id -> frame id */
    size_t mfa_cap;
    kp_u64_map index; /* process key -> its place in procs */
    proc *procs;
    size_t proc_cap, n_procs;
    uint32_t *ids; /* scratch for building stacks */
    size_t ids_cap;
    kp_wire_handler handler;
};

static uint64_t proc_key(uint32_t num, uint32_t serial)
{
    return (uint64_t)num << 32 | serial;
}

/* Processes come and go over a long run: past this many, the table starts
 * afresh (the next sample of each process then has delta 0, as a first one). */
#define PROC_LIMIT 200000

static proc *find_proc(kp_processes *p, uint32_t num, uint32_t serial, int create)
{
    uint64_t key = proc_key(num, serial);
    uint32_t at;
    if (kp_u64_map_get(&p->index, key, &at))
        return &p->procs[at];
    if (!create)
        return NULL;
    if (p->n_procs >= PROC_LIMIT) {
        kp_u64_map_clear(&p->index);
        p->n_procs = 0;
    }
    if (p->n_procs == p->proc_cap) {
        size_t cap = p->proc_cap ? p->proc_cap * 2 : 256;
        proc *t = kp_realloc_array(p->procs, cap, sizeof *t);
        if (!t)
            return NULL;
        p->procs = t;
        p->proc_cap = cap;
    }
    proc *n = &p->procs[p->n_procs];
    memset(n, 0, sizeof *n);
    n->label_frame = NO_FRAME;
    n->code_stack = NO_FRAME;
    n->full_stack = NO_FRAME;
    n->status_frame = NO_FRAME;
    n->leaf = NO_LEAF;
    char text[KP_PID_TEXT_MAX];
    int len = kp_pid_text(text, num, serial);
    if (kp_frames_intern_pseudo(p->frames, text, (size_t)len, "process", &n->pid_frame) != KP_OK ||
        kp_u64_map_put(&p->index, key, (uint32_t)p->n_procs) != 0)
        return NULL;
    p->n_procs++;
    return n;
}

static int reserve_ids(kp_processes *p, size_t n)
{
    if (n <= p->ids_cap)
        return 0;
    uint32_t *ids = kp_realloc_array(p->ids, n, sizeof *ids);
    if (!ids)
        return -1;
    p->ids = ids;
    p->ids_cap = n;
    return 0;
}

static int on_reset(void *ctx)
{
    kp_processes *p = ctx;
    /* frames stay interned; only the agent's id numbering starts again */
    for (size_t i = 0; i < p->mfa_cap; i++)
        p->mfa_frames[i] = NO_FRAME;
    return 0;
}

static int on_mfa(void *ctx, uint32_t id, const char *module, const char *function, unsigned arity)
{
    kp_processes *p = ctx;
    if (id >= 10000000)
        return -1; /* the agent bounds its dictionary far below this */
    if (id >= p->mfa_cap) {
        size_t cap = p->mfa_cap ? p->mfa_cap : 1024;
        while (cap <= id)
            cap *= 2;
        uint32_t *m = kp_realloc_array(p->mfa_frames, cap, sizeof *m);
        if (!m)
            return -1;
        for (size_t i = p->mfa_cap; i < cap; i++)
            m[i] = NO_FRAME;
        p->mfa_frames = m;
        p->mfa_cap = cap;
    }
    kp_mfa mfa = {module, strlen(module), function, strlen(function), arity, 0};
    return kp_frames_intern_mfa(p->frames, &mfa, &p->mfa_frames[id]) == KP_OK ? 0 : -1;
}

static int on_label(void *ctx, uint32_t num, uint32_t serial, int registered, const char *text,
                    size_t len)
{
    kp_processes *p = ctx;
    proc *pr = find_proc(p, num, serial, 1);
    if (!pr)
        return -1;
    pr->full_stack = NO_FRAME;
    return kp_frames_intern_label(p->frames, registered, text, len, &pr->label_frame) == KP_OK ? 0
                                                                                               : -1;
}

/* The code stack of a sample that brought one, interned into pr->code_stack;
 * pr->leaf follows it. */
static int take_code_stack(kp_processes *p, proc *pr, const kp_wire_sample *s)
{
    if (reserve_ids(p, s->depth + 4) != 0)
        return -1;
    size_t n = 0;
    for (size_t d = s->depth; d-- > 0;) {
        uint32_t mfa = s->frames[2 * d];
        if (mfa >= p->mfa_cap || p->mfa_frames[mfa] == NO_FRAME)
            return -1; /* the agent defines every id before using it */
        p->ids[n++] = p->mfa_frames[mfa];
    }
    uint32_t code;
    if (kp_stacks_intern(p->stacks, p->ids, n, &code) != KP_OK)
        return -1;
    if (code != pr->code_stack)
        pr->full_stack = NO_FRAME;
    pr->code_stack = code;
    pr->leaf = s->depth ? (uint64_t)p->mfa_frames[s->frames[0]] << 32 | s->frames[1] : NO_LEAF;
    return 0;
}

/* Learns receive points from waiting samples and tells whether a running
 * sample's leaf is one; counts running samples and marked ones. */
static int read_at_receive(kp_processes *p, const proc *pr, uint32_t status)
{
    uint32_t seen;
    if (pr->leaf == NO_LEAF)
        return 0;
    if (status == p->waiting_frame) {
        if (p->receive_points.count < RECEIVE_POINT_LIMIT)
            (void)kp_u64_map_put(&p->receive_points, pr->leaf, 1); /* a hint: may fail */
        return 0;
    }
    if (status != p->running_frame)
        return 0;
    p->running++;
    int marked = kp_u64_map_get(&p->receive_points, pr->leaf, &seen);
    p->at_receive += (uint64_t)marked;
    return marked;
}

/* pr->full_stack: [node;] status; [at-receive;] process; [label;] code. */
static int build_full_stack(kp_processes *p, proc *pr, uint32_t status, int at_receive)
{
    size_t n = 0, code_len = 0;
    const uint32_t *code = NULL;
    if (pr->code_stack != NO_FRAME)
        code = kp_stacks_get(p->stacks, pr->code_stack, &code_len);
    if (reserve_ids(p, code_len + 5) != 0)
        return -1;
    /* kp_stacks_get's pointer dies at the next intern: copy first */
    if (p->node_frame != NO_FRAME)
        p->ids[n++] = p->node_frame;
    p->ids[n++] = status;
    if (at_receive)
        p->ids[n++] = p->at_receive_frame;
    p->ids[n++] = pr->pid_frame;
    if (pr->label_frame != NO_FRAME)
        p->ids[n++] = pr->label_frame;
    if (code_len)
        memcpy(p->ids + n, code, code_len * sizeof *code);
    n += code_len;
    if (kp_stacks_intern(p->stacks, p->ids, n, &pr->full_stack) != KP_OK)
        return -1;
    pr->status_frame = status;
    pr->at_receive = at_receive;
    return 0;
}

static int on_sample(void *ctx, const kp_wire_sample *s)
{
    kp_processes *p = ctx;
    proc *pr = find_proc(p, s->num, s->serial, 1);
    if (!pr)
        return -1;
    if (s->unchanged) {
        if (!pr->has_previous || pr->full_stack == NO_FRAME)
            return 0; /* forgotten here (the table is bounded): skip this tick */
        if (pr->status_frame == p->running_frame) {
            p->running++;
            p->at_receive += (uint64_t)pr->at_receive;
        }
        kp_proc_sample out = {
            .num = s->num, .serial = s->serial, .status = pr->status, .stack = pr->full_stack};
        memcpy(out.value, pr->previous, sizeof out.value);
        memset(out.delta, 0, sizeof out.delta);
        return p->sink(p->ctx, &out);
    }
    snprintf(pr->status, sizeof pr->status, "%s", s->status);
    uint32_t status;
    if (kp_frames_intern_pseudo(p->frames, s->status, strlen(s->status), "status", &status) !=
        KP_OK)
        return -1;
    if (!s->same && take_code_stack(p, pr, s) != 0)
        return -1;
    int at_receive = read_at_receive(p, pr, status);
    if ((status != pr->status_frame || at_receive != pr->at_receive ||
         pr->full_stack == NO_FRAME) &&
        build_full_stack(p, pr, status, at_receive) != 0)
        return -1;
    kp_proc_sample out;
    out.num = s->num;
    out.serial = s->serial;
    out.status = s->status;
    out.stack = pr->full_stack;
    for (int m = 0; m < KP_METRIC_COUNT; m++) {
        int64_t v = s->metrics[m] * (kp_metrics[m].in_words ? (int64_t)p->wordsize : 1);
        out.value[m] = v;
        out.delta[m] = pr->has_previous ? v - pr->previous[m] : 0;
        pr->previous[m] = v;
    }
    pr->has_previous = 1;
    return p->sink(p->ctx, &out);
}

kp_processes *kp_processes_create(kp_frames *frames, kp_stacks *stacks, unsigned wordsize,
                                  const char *node, kp_proc_sample_fn sink, void *ctx)
{
    kp_processes *p = kp_calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->frames = frames;
    p->stacks = stacks;
    p->node_frame = NO_FRAME;
    if (node &&
        kp_frames_intern_pseudo(frames, node, strlen(node), "node", &p->node_frame) != KP_OK) {
        kp_free(p);
        return NULL;
    }
    static const char at_receive[] = "stack_read_at_next_receive";
    if (kp_frames_intern_pseudo(frames, at_receive, sizeof at_receive - 1, "status",
                                &p->at_receive_frame) != KP_OK ||
        kp_frames_intern_pseudo(frames, "running", 7, "status", &p->running_frame) != KP_OK ||
        kp_frames_intern_pseudo(frames, "waiting", 7, "status", &p->waiting_frame) != KP_OK) {
        kp_free(p);
        return NULL;
    }
    p->wordsize = wordsize ? wordsize : 8;
    p->sink = sink;
    p->ctx = ctx;
    p->handler.ctx = p;
    p->handler.on_reset = on_reset;
    p->handler.on_mfa = on_mfa;
    p->handler.on_label = on_label;
    p->handler.on_sample = on_sample;
    return p;
}

void kp_processes_free(kp_processes *p)
{
    if (!p)
        return;
    kp_free(p->mfa_frames);
    kp_u64_map_free(&p->index);
    kp_u64_map_free(&p->receive_points);
    kp_free(p->procs);
    kp_free(p->ids);
    kp_free(p);
}

const kp_wire_handler *kp_processes_wire_handler(kp_processes *p)
{
    return &p->handler;
}

size_t kp_processes_count(const kp_processes *p)
{
    return p->n_procs;
}

void kp_processes_receive_counts(const kp_processes *p, uint64_t *running, uint64_t *at_receive)
{
    *running = p->running;
    *at_receive = p->at_receive;
}

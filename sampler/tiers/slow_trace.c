/* A slow request of tier tracing as a request trace: see slow_trace.h. */
#include "tiers/slow_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kp/alloc.h>
#include <kp/intern.h>

#include "common/pid_text.h"
#include "rtrace/files.h"

#define MAX_DEPTH 64 /* tier calls open at once in one process */

typedef struct {
    const kp_tier_mfa *mfas;
    size_t n_fns;
    kp_frames *frames;
    kp_stacks *stacks;
    uint32_t *fn_frame; /* per function, UINT32_MAX until interned */
    kp_rtrace_times times;
    kp_status st;
} builder;

static int by_pid_then_start(const void *a, const void *b)
{
    const kp_tier_interval *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return (y->end > x->end) - (y->end < x->end); /* the enclosing one first */
}

static uint32_t fn_frame(builder *b, uint32_t fn)
{
    if (b->fn_frame[fn] != UINT32_MAX || b->st != KP_OK)
        return b->fn_frame[fn];
    const kp_tier_mfa *m = &b->mfas[fn];
    kp_mfa mfa = {.module = m->module,
                  .module_len = strlen(m->module),
                  .function = m->function,
                  .function_len = strlen(m->function),
                  .arity = m->arity};
    b->st = kp_frames_intern_mfa(b->frames, &mfa, &b->fn_frame[fn]);
    return b->fn_frame[fn];
}

/* The stack `ids[0..n)` held the process from `from` to `to`. */
static void stretch(builder *b, const uint32_t *ids, size_t n, int64_t from, int64_t to)
{
    if (to <= from || b->st != KP_OK)
        return;
    uint32_t stack;
    b->st = kp_stacks_intern(b->stacks, ids, n, &stack);
    if (b->st == KP_OK)
        b->st = kp_rtrace_times_add(&b->times, stack, ids[0], from, to - from);
}

/* One process's calls `v[0..n)`, sorted by start, enclosing ones first: a
 * stretch for each time its stack of open calls stayed the same. A call
 * that outlasts the one it started in (its events came out of order) is
 * cut at that one's end; calls past MAX_DEPTH count for the one below. */
static void process(builder *b, kp_tier_pid pid, const kp_tier_interval *v, size_t n)
{
    char text[KP_PID_TEXT_MAX];
    kp_pid_text(text, (uint32_t)(pid >> 32), (uint32_t)(pid & 0xffffffffu));
    uint32_t ids[MAX_DEPTH + 1];
    int64_t ends[MAX_DEPTH + 1];
    if (b->st == KP_OK)
        b->st = kp_frames_intern_pseudo(b->frames, text, strlen(text), "process", &ids[0]);
    size_t depth = 0;
    int64_t at = 0;
    for (size_t k = 0; k <= n && b->st == KP_OK; k++) {
        int64_t next = k < n ? v[k].start : INT64_MAX;
        while (depth > 0 && ends[depth] <= next) {
            stretch(b, ids, depth + 1, at, ends[depth]);
            at = ends[depth--];
        }
        if (k == n || depth == MAX_DEPTH)
            continue;
        if (depth > 0)
            stretch(b, ids, depth + 1, at, next);
        at = next;
        ids[depth + 1] = fn_frame(b, v[k].fn);
        ends[depth + 1] = depth > 0 && v[k].end > ends[depth] ? ends[depth] : v[k].end;
        depth++;
    }
}

kp_status kp_tier_slow_trace_write(const kp_tier_request *r, const kp_tier_mfa *mfas, size_t n_fns,
                                   const char *dir, const char *id, char *folded, size_t folded_len,
                                   char *why, size_t why_len)
{
    builder b = {.mfas = mfas, .n_fns = n_fns, .st = KP_OK};
    /* the request's own span in its process, then its tier calls */
    kp_tier_interval *v = kp_realloc_array(NULL, r->n_iv + 1, sizeof *v);
    b.frames = kp_frames_create(0);
    b.stacks = kp_stacks_create();
    b.fn_frame = kp_realloc_array(NULL, n_fns ? n_fns : 1, sizeof *b.fn_frame);
    if (!v || !b.frames || !b.stacks || !b.fn_frame || r->entry_fn >= n_fns) {
        b.st = r->entry_fn >= n_fns ? KP_ERR_INVAL : KP_ERR_NOMEM;
        goto out;
    }
    memset(b.fn_frame, 0xff, n_fns * sizeof *b.fn_frame);
    v[0] = (kp_tier_interval){
        .fn = (uint32_t)r->entry_fn, .pid = r->label, .start = r->start, .end = r->end};
    size_t n = 1;
    for (size_t k = 0; k < r->n_iv; k++)
        if (r->iv[k].fn < n_fns && r->iv[k].end >= r->iv[k].start)
            v[n++] = r->iv[k];
    qsort(v, n, sizeof *v, by_pid_then_start);
    int64_t last = r->end;
    for (size_t k = 0, e; k < n && b.st == KP_OK; k = e) {
        for (e = k; e < n && v[e].pid == v[k].pid; e++)
            if (v[e].end > last)
                last = v[e].end;
        process(&b, v[k].pid, v + k, e - k);
    }
    if (b.st == KP_OK) {
        kp_rtrace_data d = {.frames = b.frames,
                            .stacks = b.stacks,
                            .ns = b.times.ns,
                            .n_ns = b.times.n_ns,
                            .iv = b.times.iv,
                            .n_iv = b.times.n_iv,
                            .start = r->start,
                            .last = last,
                            .root = {.num = (unsigned)(r->label >> 32),
                                     .serial = (unsigned)(r->label & 0xffffffffu)},
                            .cut = r->truncated ? "max_intervals" : NULL,
                            .events = 2 * (uint64_t)n};
        b.st = kp_rtrace_write_files(&d, dir, id, folded, folded_len, why, why_len);
        goto done;
    }
out:
    snprintf(why, why_len, "%s", b.st == KP_ERR_INVAL ? "no such entry function" : "out of memory");
done:
    kp_free(v);
    kp_free(b.fn_frame);
    kp_rtrace_times_free(&b.times);
    kp_stacks_free(b.stacks);
    kp_frames_free(b.frames);
    return b.st;
}

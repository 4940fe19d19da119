/* The loop of `kprof top`: the agent's rounds of samples (as for kprof
 * record and dump, through samples/sample_wire.h and the process table of
 * samples/processes.h) and, where possible, native CPU samples on their own
 * thread (cpu/attach.h), both counted into the table model (top/view.h);
 * a window closed and drawn every --interval; keys read in between. */
#define _GNU_SOURCE
#include "top/run.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/signals.h"
#include "cpu/attach.h"
#include "node/agent.h"
#include "samples/processes.h"
#include "samples/sample_wire.h"
#include "top/terminal.h"
#include "top/view.h"

/* Deepest stack counted; deeper ones keep their leaf end. */
#define MAX_DEPTH 1024

typedef struct {
    const kp_top_options *o;
    kp_node node;
    kp_sample_wire wire;
    int64_t offset_us; /* our clock minus the node's */
    kp_frames *frames;
    kp_stacks *stacks;
    kp_processes *procs;
    pthread_mutex_t lock; /* over `top`: the native thread adds to it too */
    kp_top *top;
    int failed;      /* out of memory while counting */
    int write_errno; /* of the failed write to stdout */
    kp_native *native;
    kp_native_observer observer;
    int name_wanted; /* a window closed: name the processes only native samples saw */
    uint64_t tick_us, next_round;
    unsigned per_round;
    int screen;
    kp_top_layout layout;
    char name[512];
} session;

/* The code frames of a sample's full stack (status ; process ; label ;
 * code, root first; see samples/processes.h) and its label. Returns the
 * number of code frames put in `code`. */
static size_t code_frames(const session *t, uint32_t stack, kp_top_text *code, kp_top_text *label)
{
    size_t n, k = 0, len;
    const uint32_t *ids = kp_stacks_get(t->stacks, stack, &n);
    for (size_t i = 0; i < n; i++) {
        const char *module = kp_frames_module(t->frames, ids[i], &len);
        kp_top_text symbol;
        symbol.text = kp_frames_symbol(t->frames, ids[i], &symbol.len);
        if (len > 5 && memcmp(module + len - 5, ".beam", 5) == 0) {
            if (k == MAX_DEPTH) { /* keep the leaf end */
                memmove(code, code + 1, (MAX_DEPTH - 1) * sizeof *code);
                k--;
            }
            code[k++] = symbol;
        } else if ((len == 10 && memcmp(module, "registered", 10) == 0) ||
                   (len == 7 && memcmp(module, "initial", 7) == 0)) {
            *label = symbol;
        }
    }
    return k;
}

/* Each process sample of the agent: the process table, and the functions
 * weighted by its reductions when there are no native samples. */
static int on_proc_sample(void *ctx, const kp_proc_sample *s)
{
    session *t = ctx;
    static kp_top_text code[MAX_DEPTH];
    kp_top_text label = {NULL, 0};
    size_t depth = code_frames(t, s->stack, code, &label);
    int64_t delta = s->delta[KP_METRIC_REDUCTIONS];
    kp_top_process_sample p = {s->num,
                               s->serial,
                               label,
                               depth ? code[depth - 1] : (kp_top_text){NULL, 0},
                               delta > 0 ? (uint64_t)delta : 0,
                               s->value[KP_METRIC_QUEUE],
                               s->value[KP_METRIC_MEMORY]};
    pthread_mutex_lock(&t->lock);
    if (kp_top_add_process(t->top, &p) != KP_OK ||
        (!t->native && kp_top_add_stack(t->top, code, depth, p.reductions) != KP_OK))
        t->failed = 1;
    pthread_mutex_unlock(&t->lock);
    return 0;
}

/* Each native CPU sample, on the sampler's thread. */
static void on_native_sample(void *ctx, const kp_native_sample *s)
{
    session *t = ctx;
    static kp_top_text code[MAX_DEPTH];
    size_t skip = s->depth > MAX_DEPTH ? s->depth - MAX_DEPTH : 0;
    for (size_t i = skip; i < s->depth; i++)
        code[i - skip].text = kp_frames_symbol(s->frames, s->code[i], &code[i - skip].len);
    pthread_mutex_lock(&t->lock);
    kp_top_add_state(t->top, s->kind, s->state, 1);
    if (kp_top_add_stack(t->top, code, s->depth - skip, 1) != KP_OK ||
        (s->attributed && kp_top_add_cpu(t->top, s->pid.num, s->pid.serial, 1) != KP_OK))
        t->failed = 1;
    pthread_mutex_unlock(&t->lock);
}

/* Asks for the next round of ticks. A round that is due already (kprof was
 * held up) starts now: the ticks in between are not taken, not made up. */
static int send_round(session *t)
{
    uint64_t now = kp_now_us();
    if (t->next_round < now)
        t->next_round = now;
    if (kp_sample_wire_request(&t->wire, t->per_round, t->tick_us,
                               (int64_t)t->next_round - t->offset_us) != 0)
        return -1;
    t->next_round += (uint64_t)t->per_round * t->tick_us;
    return 0;
}

static int on_label(void *ctx, uint32_t num, uint32_t serial, int registered, const char *text,
                    size_t len)
{
    session *t = ctx;
    /* through the frame table, as the sampled processes' labels: named in
     * the same notation, and encoded as they are for render's name_cell */
    uint32_t id;
    if (kp_frames_intern_label(t->frames, registered, text, len, &id) != KP_OK)
        return -1;
    kp_top_text label;
    label.text = kp_frames_symbol(t->frames, id, &label.len);
    pthread_mutex_lock(&t->lock);
    kp_top_name(t->top, num, serial, &label);
    pthread_mutex_unlock(&t->lock);
    return 0;
}

/* Asks the agent to name the processes the native samples attributed CPU
 * to outside the sampled top. Only between a reply and the next request:
 * no sample reply can then arrive in the middle of the call. */
static void name_processes(session *t)
{
    static uint32_t nums[1000], serials[1000];
    t->name_wanted = 0;
    pthread_mutex_lock(&t->lock);
    size_t n = kp_top_unnamed(t->top, nums, serials, 1000);
    pthread_mutex_unlock(&t->lock);
    /* a failed call shows as a lost connection at the next receive */
    if (n)
        (void)kp_agent_labels(&t->node, nums, serials, n, on_label, t);
}

static const char footer[] = "q quit  p pause  s/t sort functions  c/r/m/l sort processes  "
                             "a window/all";

/* Renders the closed window: on the screen, or as a block of plain lines.
 * Returns 0, or -1 when stdout cannot be written. */
static int draw(session *t)
{
    char title[700], stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    kp_top_layout *l = &t->layout;
    if (t->screen) {
        strftime(stamp, sizeof stamp, "%H:%M:%SZ", &tm);
        snprintf(title, sizeof title, "kprof top %s  %s", t->name, stamp);
        kp_terminal_size(&l->width, &l->height);
        l->footer = footer;
    } else {
        strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(title, sizeof title, "%s kprof top %s", stamp, t->name);
        l->width = 80;
        l->height = 0;
        l->footer = NULL;
    }
    l->title = title;
    l->rows = t->o->rows;
    kp_buf text = KP_BUF_INIT;
    pthread_mutex_lock(&t->lock);
    kp_status st = kp_top_render(t->top, l, &text);
    pthread_mutex_unlock(&t->lock);
    int rc = 0;
    errno = 0;
    if (st != KP_OK)
        t->failed = 1;
    else if (t->screen)
        rc = kp_terminal_draw(text.data, text.len);
    else if (fwrite(text.data, 1, text.len, stdout) != text.len || fputc('\n', stdout) == EOF ||
             fflush(stdout) != 0)
        rc = -1;
    t->write_errno = errno ? errno : EIO;
    kp_buf_free(&text);
    return rc;
}

/* Applies key `c`. Returns 1 for quit, else 0. */
static int key(session *t, int c)
{
    kp_top_layout *l = &t->layout;
    switch (c) {
    case 'q':
    case 'Q': return 1;
    case 'p':
    case ' ': l->paused = !l->paused; break;
    case 's': l->function_sort = KP_TOP_BY_SELF; break;
    case 't': l->function_sort = KP_TOP_BY_TOTAL; break;
    case 'c': l->process_sort = KP_TOP_BY_CPU; break;
    case 'r': l->process_sort = KP_TOP_BY_REDUCTIONS; break;
    case 'm': l->process_sort = KP_TOP_BY_MEMORY; break;
    case 'l': l->process_sort = KP_TOP_BY_QUEUE; break;
    case 'a': l->cumulative = !l->cumulative; break;
    default: break;
    }
    return 0;
}

/* Why the loop ended. */
enum { STOPPED, LOST, MALFORMED, OUTPUT_FAILED, NO_MEMORY };

static int loop(session *t)
{
    const kp_top_options *o = t->o;
    uint64_t start = kp_now_us(), closed = start, next_draw = start + o->interval_us;
    uint64_t asked = start;
    t->next_round = start;
    if (send_round(t) != 0)
        return LOST;
    if (t->screen && draw(t) != 0)
        return OUTPUT_FAILED;
    for (;;) {
        uint64_t now = kp_now_us();
        if (kp_stop_requested() || (o->duration_us && now - start >= o->duration_us))
            return STOPPED;
        int c, redraw = kp_terminal_resized();
        while ((c = kp_terminal_key()) >= 0) {
            if (key(t, c))
                return STOPPED;
            redraw = 1;
        }
        if (redraw && draw(t) != 0)
            return OUTPUT_FAILED;
        int res = kp_sample_wire_receive(&t->wire, 50);
        if (res == -1) /* a signal that broke the wait is no lost node */
            return kp_stop_requested() ? STOPPED : LOST;
        if (res == -2)
            return MALFORMED;
        if (res == 1) {
            asked = kp_now_us();
            int64_t at;
            while (kp_sample_wire_tick_time(&t->wire, &at))
                if (kp_sample_wire_next_tick(&t->wire, kp_processes_wire_handler(t->procs)) != 0)
                    return MALFORMED;
            if (t->native && t->name_wanted)
                name_processes(t);
            if (t->native)
                kp_native_learn_ports(t->native, &t->node);
            if (send_round(t) != 0)
                return LOST;
        } else if (kp_now_us() - asked > (uint64_t)t->per_round * t->tick_us + 10000000u) {
            return LOST; /* no answer for 10 s past the round */
        }
        if (t->failed)
            return NO_MEMORY;
        now = kp_now_us();
        if (now >= next_draw) {
            /* paused: the window stays open, the screen as it was */
            if (!t->layout.paused) {
                pthread_mutex_lock(&t->lock);
                kp_top_close_window(t->top, now - closed);
                pthread_mutex_unlock(&t->lock);
                closed = now;
                t->name_wanted = 1;
                if (draw(t) != 0)
                    return OUTPUT_FAILED;
            }
            next_draw += o->interval_us;
            if (next_draw <= now)
                next_draw = now + o->interval_us;
        }
    }
}

/* Native CPU sampling where it can run, with one line saying how the code
 * is named (as kprof record says it); else one line saying why not. */
static void start_native(session *t)
{
    char why[512];
    if (!t->o->cpu_rate)
        return;
    t->observer = (kp_native_observer){on_native_sample, t};
    t->native =
        kp_native_attach(&t->node, t->wire.agent.os_pid, t->o->cpu_rate, NULL, &t->observer, NULL,
                         t->o->erlang_names ? KP_FRAMES_ERLANG_NAMES : 0, why, sizeof why);
    if (t->native)
        fprintf(stderr,
                "kprof: CPU: every thread of the node sampled natively, %u times a second; %s\n",
                t->o->cpu_rate, kp_native_describe(t->native));
    else
        fprintf(stderr,
                "kprof: CPU: no native sampling (%s); functions and processes by "
                "reductions\n",
                why);
}

static void finish(session *t)
{
    kp_terminal_leave();
    if (t->native) {
        kp_native_stop(t->native, NULL); /* joins its thread: no more samples */
        kp_native_free(t->native);
    }
    kp_sample_wire_stop(&t->wire);
    kp_node_close(&t->node);
    kp_processes_free(t->procs);
    kp_frames_free(t->frames);
    kp_stacks_free(t->stacks);
    kp_top_free(t->top);
    pthread_mutex_destroy(&t->lock);
}

int kp_top_run(const kp_top_options *o)
{
    static session t; /* off the stack: the node connection holds buffers of a few KB */
    memset(&t, 0, sizeof t);
    t.o = o;
    t.tick_us = (uint64_t)(1e6 / o->rate);
    /* short rounds: a window closes every --interval, as short as 100 ms */
    t.per_round = kp_sample_round_ticks(t.tick_us, 0);
    pthread_mutex_init(&t.lock, NULL);
    char err[2048];
    /* re-ranked every 2 s: a process that turns hot shows up soon */
    kp_sampling_options ao = {o->top, "reductions", 2000, NULL, 0, o->depth, 10000};
    int rc = kp_sample_wire_attach(&t.wire, &t.node, o->node, o->cookie_file, o->connect_timeout_ms,
                                   &ao, err, sizeof err);
    if (rc != KP_EXIT_OK) {
        kp_error("%s", err);
        pthread_mutex_destroy(&t.lock);
        return rc;
    }
    snprintf(t.name, sizeof t.name, "%s", t.node.target);
    kp_stop_on_signals();
    if (kp_node_clock_offset(&t.node, &t.offset_us, err, sizeof err) != 0) {
        kp_error("%s", err);
        finish(&t);
        return KP_EXIT_NODE;
    }
    t.frames = kp_frames_create(o->erlang_names ? KP_FRAMES_ERLANG_NAMES : 0);
    t.stacks = kp_stacks_create();
    t.top = kp_top_create(o->cpu_rate); /* before the native thread counts into it */
    if (t.top)
        start_native(&t);
    if (t.top && !t.native) { /* no CPU samples: no CPU share either */
        kp_top_free(t.top);
        t.top = kp_top_create(0);
    }
    if (t.frames && t.stacks)
        t.procs = kp_processes_create(t.frames, t.stacks, t.wire.agent.wordsize, NULL,
                                      on_proc_sample, &t);
    if (!t.procs || !t.top) {
        kp_error("out of memory");
        finish(&t);
        return KP_EXIT_FAILURE;
    }
    t.layout = (kp_top_layout){.width = 80,
                               .title = "",
                               .weight = t.native ? "native CPU samples" : "reductions",
                               .function_sort = KP_TOP_BY_SELF,
                               .process_sort = KP_TOP_BY_CPU};
    t.screen = kp_terminal_enter() == 0;
    int why = loop(&t);
    finish(&t);
    switch (why) {
    case LOST:
        kp_error("lost the connection to %s (the node stopped or the network failed)", t.name);
        return KP_EXIT_NODE;
    case MALFORMED:
        kp_error("malformed reply from the agent on %s; please report this", t.name);
        return KP_EXIT_FAILURE;
    case OUTPUT_FAILED:
        if (t.write_errno == EPIPE)
            return KP_EXIT_OK; /* the reader is gone (kprof top | head) */
        kp_error("cannot write to stdout: %s", strerror(t.write_errno));
        return KP_EXIT_FAILURE;
    case NO_MEMORY: kp_error("out of memory"); return KP_EXIT_FAILURE;
    default: return KP_EXIT_OK;
    }
}

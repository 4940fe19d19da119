/* `kprof dump`: attach, let the agent rank processes over a short window,
 * take one batch, print each process's metrics and stack, detach. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/pid_text.h"
#include "kp/symbol.h"
#include "node/connection.h"
#include "samples/processes.h"
#include "record/run.h"
#include "samples/sample_wire.h"

typedef struct {
    kp_frames *frames;
    kp_stacks *stacks;
    kp_processes *procs;
    int printed;
    kp_buf name;
} dumper;

/* Prints a frame's readable name (its symbol decoded, as kprof top shows
 * it: anonymous fn/1 in MyApp.Hot.spin/2), control bytes as '?' so that no
 * name moves the cursor. */
static void print_name(dumper *d, const char *symbol, size_t len)
{
    kp_buf_clear(&d->name);
    if (kp_symbol_decode(&d->name, symbol, len) != KP_OK) {
        fwrite(symbol, 1, len, stdout); /* out of memory: encoded, still one line */
        return;
    }
    for (size_t i = 0; i < d->name.len; i++) {
        unsigned char c = (unsigned char)d->name.data[i];
        putchar(c < 0x20 || c == 0x7f ? '?' : c);
    }
}

static int print_sample(void *ctx, const kp_proc_sample *s)
{
    dumper *d = ctx;
    size_t n;
    const kp_frames *frames = d->frames;
    const uint32_t *ids = kp_stacks_get(d->stacks, s->stack, &n);
    size_t len;
    const char *label = n > 2 ? kp_frames_module(frames, ids[2], &len) : "";
    int has_label =
        n > 2 && (strncmp(label, "registered", len) == 0 || strncmp(label, "initial", len) == 0);
    char pid[KP_PID_TEXT_MAX];
    kp_pid_text(pid, s->num, s->serial);
    fputs(pid, stdout);
    if (has_label) {
        const char *text = kp_frames_symbol(frames, ids[2], &len);
        putchar(' ');
        print_name(d, text, len);
    }
    printf("  %s  reductions %lld  memory %lld  queue %lld\n", s->status,
           (long long)s->value[KP_METRIC_REDUCTIONS], (long long)s->value[KP_METRIC_MEMORY],
           (long long)s->value[KP_METRIC_QUEUE]);
    for (size_t i = n; i-- > (size_t)(has_label ? 3 : 2);) {
        const char *sym = kp_frames_symbol(frames, ids[i], &len);
        fputs("    ", stdout);
        print_name(d, sym, len);
        putchar('\n');
    }
    putchar('\n');
    d->printed++;
    return 0;
}

int kp_dump_run(const kp_record_options *o)
{
    char err[1024];
    kp_node node;
    kp_sample_wire wire;
    kp_sampling_options ao = {o->top, o->select_by, 60000, o->pids, o->n_pids, o->depth, 10000};
    int rc = kp_sample_wire_attach(&wire, &node, o->nodes[0], o->cookie_file, o->connect_timeout_ms,
                                   &ao, err, sizeof err);
    if (rc != KP_EXIT_OK) {
        kp_error("%s", err);
        return rc;
    }
    char target[sizeof node.target];
    snprintf(target, sizeof target, "%s", node.target); /* for messages after the close */
    dumper d = {kp_frames_create(kp_record_frame_flags(o)), kp_stacks_create(), NULL, 0,
                KP_BUF_INIT};
    if (d.frames && d.stacks)
        d.procs =
            kp_processes_create(d.frames, d.stacks, wire.agent.wordsize, NULL, print_sample, &d);
    /* the ranking needs a window: the agent took its first snapshot at start */
    struct timespec window = {0, 250 * 1000 * 1000};
    nanosleep(&window, NULL);
    /* one tick, now on the node's clock (the interval does not matter) */
    int64_t offset = 0;
    int res = d.procs && kp_node_clock_offset(&node, &offset, err, sizeof err) == 0 &&
                      kp_sample_wire_request(&wire, 1, 1000000, (int64_t)kp_now_us() - offset) == 0
                  ? kp_sample_wire_receive(&wire, 10000)
                  : -1;
    if (res == 1 && kp_sample_wire_next_tick(&wire, kp_processes_wire_handler(d.procs)) != 0)
        res = -2;
    kp_sample_wire_stop(&wire);
    kp_node_close(&node);
    kp_processes_free(d.procs);
    kp_frames_free(d.frames);
    kp_stacks_free(d.stacks);
    kp_buf_free(&d.name);
    if (res != 1) {
        kp_error("no answer from the agent on %s", target);
        return KP_EXIT_NODE;
    }
    if (d.printed == 0)
        fprintf(stderr, "kprof: no process of %s ran during the 250 ms window\n", target);
    return KP_EXIT_OK;
}

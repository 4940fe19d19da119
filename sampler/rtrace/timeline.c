/* The request trace as a timeline in the Chrome trace-event format (see
 * files.h): one lane ("thread") per process, a complete event ("X") per
 * stretch of time a frame spent on that process's stack. The intervals
 * already hold the whole stack at every moment, so the nesting follows from
 * comparing each interval's stack with the one before it: frames past the
 * common part end there, the new ones begin. */
#include <kp/buf.h>
#include <kp/json.h>
#include <kp/sink.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"
#include "kp/symbol.h"
#include "rtrace/files.h"

#define MAX_DEPTH 1024    /* as the collector's stacks */
#define MAX_SLICES 200000 /* then slices shorter than span / this are left out */

static int by_process(const void *a, const void *b)
{
    const kp_rtrace_interval *x = a, *y = b;
    if (x->pid_frame != y->pid_frame)
        return (x->pid_frame > y->pid_frame) - (x->pid_frame < y->pid_frame);
    return (x->start > y->start) - (x->start < y->start);
}

typedef struct {
    const kp_rtrace_data *t;
    kp_buf *out;
    uint32_t lane;
    unsigned node;   /* the lane's node: its "pid" (1: this node, 2...: t->clocks') */
    int64_t min_dur; /* shorter slices are left out: their time stays in their parent */
    kp_status st;
    kp_buf name; /* a frame's name, decoded */
} writer;

static void us(writer *w, int64_t ns)
{
    if (w->st == KP_OK)
        w->st = kp_json_double(w->out, (double)ns / 1000.0);
}

static void text(writer *w, const char *s)
{
    if (w->st == KP_OK)
        w->st = kp_buf_append_str(w->out, s);
}

static void string(writer *w, const char *s, size_t len)
{
    if (w->st == KP_OK)
        w->st = kp_json_string(w->out, s, len);
}

/* A frame's name as a JSON string, readable: frame symbols are
 * percent-encoded for folded and perf files (kp/symbol.h), which JSON does
 * not need, so a trace viewer shows "anonymous fn/1 in MyApp.Hot.spin/2". */
static void frame_name(writer *w, const char *symbol, size_t len)
{
    kp_buf_clear(&w->name);
    if (w->st == KP_OK)
        w->st = kp_symbol_decode(&w->name, symbol, len);
    string(w, w->name.data, w->name.len);
}

/* The node of a process frame: 1 for this node's "<0.N.S>", 2 + k for
 * "NODE:<0.N.S>" of t->clocks[k]'s node (another node's part). */
static unsigned node_of(const kp_rtrace_data *t, uint32_t pid_frame)
{
    size_t len;
    const char *s = kp_frames_symbol(t->frames, pid_frame, &len);
    const char *at = memchr(s, '<', len);
    if (!at || at == s || at[-1] != ':')
        return 1;
    size_t n = (size_t)(at - s) - 1;
    for (size_t k = 0; k < t->n_clocks; k++)
        if (strlen(t->clocks[k].name) == n && memcmp(t->clocks[k].name, s, n) == 0)
            return (unsigned)k + 2;
    return 1;
}

/* "pid":NODE,"tid":LANE of the lane being written */
static void lane_number(writer *w)
{
    char n[64];
    snprintf(n, sizeof n, "%u,\"tid\":%u", w->node, w->lane);
    text(w, n);
}

/* One frame's stretch on the lane's stack. */
static void slice(writer *w, uint32_t frame, int64_t start, int64_t end)
{
    if (end - start < w->min_dur || end <= start)
        return;
    size_t len;
    const char *name = kp_frames_symbol(w->t->frames, frame, &len);
    int sleep = len == 5 && memcmp(name, "sleep", 5) == 0;
    int gc = len == 18 && memcmp(name, "garbage_collection", 18) == 0;
    text(w, ",\n{\"ph\":\"X\",\"pid\":");
    lane_number(w);
    text(w, ",\"ts\":");
    us(w, start - w->t->start);
    text(w, ",\"dur\":");
    us(w, end - start);
    text(w, ",\"cat\":");
    text(w, sleep ? "\"sleep\"" : gc ? "\"gc\"" : "\"call\"");
    text(w, ",\"name\":");
    frame_name(w, name, len);
    text(w, "}");
}

/* The lane of one process: its intervals iv[0..n), sorted by start. */
static void lane(writer *w, const kp_rtrace_interval *iv, size_t n)
{
    uint32_t open[MAX_DEPTH];
    int64_t since[MAX_DEPTH];
    size_t depth = 0;
    size_t len;
    const char *name = kp_frames_symbol(w->t->frames, iv[0].pid_frame, &len);
    w->node = node_of(w->t, iv[0].pid_frame);
    text(w, ",\n{\"ph\":\"M\",\"pid\":");
    lane_number(w);
    text(w, ",\"name\":\"thread_name\",\"args\":{\"name\":");
    frame_name(w, name, len);
    text(w, "}}");
    for (size_t k = 0; k < n; k++) {
        size_t sn;
        const uint32_t *frames = kp_stacks_get(w->t->stacks, iv[k].stack, &sn);
        /* frames[0] is the process's pseudo-frame: the lane itself */
        frames++;
        sn = sn ? sn - 1 : 0;
        if (sn > MAX_DEPTH)
            sn = MAX_DEPTH;
        size_t common = 0;
        while (common < depth && common < sn && open[common] == frames[common])
            common++;
        while (depth > common) {
            depth--;
            slice(w, open[depth], since[depth], iv[k].start);
        }
        for (; depth < sn; depth++) {
            open[depth] = frames[depth];
            since[depth] = iv[k].start;
        }
    }
    int64_t end = iv[n - 1].start + iv[n - 1].dur;
    while (depth > 0) {
        depth--;
        slice(w, open[depth], since[depth], end);
    }
}

static int by_frame(const void *key, const void *elem)
{
    uint32_t a = *(const uint32_t *)key, b = *(const uint32_t *)elem;
    return (a > b) - (a < b);
}

/* Link k: an arrow from the spawn in the parent's lane to the child's lane
 * (both ends at the spawn; the child's lane begins there), or from the send
 * of a message of the request to where its receiver took it in. */
static void arrow(writer *w, const uint32_t *lanes, size_t k)
{
    const kp_rtrace_link *l = &w->t->links[k];
    const uint32_t *from = bsearch(&l->from, lanes, w->lane, sizeof *lanes, by_frame);
    const uint32_t *to = bsearch(&l->to, lanes, w->lane, sizeof *lanes, by_frame);
    if (!from || !to) /* a process with no time in the trace has no lane */
        return;
    for (int end = 0; end < 2; end++) {
        char head[128];
        const uint32_t *at = end ? to : from;
        snprintf(head, sizeof head, ",\n{\"ph\":\"%s\",\"id\":%zu,\"pid\":%u,\"tid\":%zu,\"ts\":",
                 end ? "f\",\"bp\":\"e" : "s", k + 1, node_of(w->t, *at), (size_t)(at - lanes) + 1);
        text(w, head);
        us(w, (end ? l->ts_to : l->ts) - w->t->start);
        text(w, l->message ? ",\"cat\":\"message\",\"name\":\"message\"}"
                           : ",\"cat\":\"spawn\",\"name\":\"spawn\"}");
    }
}

kp_status kp_rtrace_write_timeline(const kp_rtrace_data *t, const char *path, const char *id)
{
    kp_rtrace_interval *iv = NULL;
    if (t->n_iv) {
        iv = kp_realloc_array(NULL, t->n_iv, sizeof *iv);
        if (!iv)
            return KP_ERR_NOMEM;
        memcpy(iv, t->iv, t->n_iv * sizeof *iv);
        qsort(iv, t->n_iv, sizeof *iv, by_process);
    }
    kp_buf out = KP_BUF_INIT;
    writer w = {.t = t, .out = &out, .st = KP_OK};
    if (t->n_iv > MAX_SLICES)
        w.min_dur = (t->last - t->start) / MAX_SLICES;
    text(&w, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"trace\":");
    string(&w, id, strlen(id));
    if (t->cut) {
        text(&w, ",\"cut\":");
        string(&w, t->cut, strlen(t->cut));
    }
    char events[48];
    snprintf(events, sizeof events, ",\"events\":%" PRIu64, t->events);
    text(&w, events);
    text(&w, "},\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{"
             "\"name\":");
    char title[160];
    snprintf(title, sizeof title, "request trace %s", id);
    string(&w, title, strlen(title));
    text(&w, "}}");
    /* a process ("pid") per other node whose part is in, its clock's error */
    for (size_t k = 0; k < t->n_clocks; k++) {
        char head[64], name[400];
        snprintf(head, sizeof head, ",\n{\"ph\":\"M\",\"pid\":%zu,\"name\":\"process_name\",",
                 k + 2);
        text(&w, head);
        text(&w, "\"args\":{\"name\":");
        snprintf(name, sizeof name, "%s (clock aligned within %.1f us)", t->clocks[k].name,
                 (double)t->clocks[k].error_ns / 1000.0);
        string(&w, name, strlen(name));
        text(&w, "}}");
    }
    /* lanes[i]: the pid frame of lane i + 1, ascending as the sort made them */
    uint32_t *lanes = t->n_iv ? kp_realloc_array(NULL, t->n_iv, sizeof *lanes) : NULL;
    if (t->n_iv && !lanes)
        w.st = KP_ERR_NOMEM;
    for (size_t k = 0; k < t->n_iv && w.st == KP_OK;) {
        size_t e = k;
        while (e < t->n_iv && iv[e].pid_frame == iv[k].pid_frame)
            e++;
        lanes[w.lane++] = iv[k].pid_frame;
        lane(&w, iv + k, e - k);
        k = e;
    }
    for (size_t k = 0; k < t->n_links && w.st == KP_OK; k++)
        arrow(&w, lanes, k);
    text(&w, "\n]}\n");
    kp_free(lanes);
    kp_free(iv);
    kp_buf_free(&w.name);
    kp_sink *sink = NULL;
    kp_status st = w.st;
    if (st == KP_OK)
        st = kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink);
    if (st == KP_OK) {
        st = kp_sink_write(sink, out.data, out.len);
        st = st == KP_OK ? kp_sink_commit(sink) : (kp_sink_abort(sink), st);
    }
    kp_buf_free(&out);
    return st;
}

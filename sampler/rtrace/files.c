#define _GNU_SOURCE
#include "rtrace/files.h"

#include <errno.h>
#include <kp/flame_svg.h>
#include <kp/folded.h>
#include <kp/perf_writer.h>
#include <kp/sink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/pid_text.h"
#include "kp/alloc.h"

#define MIN_TICK_NS 10000 /* perf samples every 10 us at most */
#define MAX_TICKS 100000  /* ... and at most this many per process and trace */

static int by_start(const void *a, const void *b)
{
    const kp_rtrace_interval *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

typedef struct {
    int64_t time;
    uint32_t stack, pid_frame;
    uint64_t period_us;
} tick;

static int by_time(const void *a, const void *b)
{
    const tick *x = a, *y = b;
    return (x->time > y->time) - (x->time < y->time);
}

static uint32_t pid_number(const kp_frames *frames, uint32_t pid_frame)
{
    size_t len;
    const char *s = kp_frames_symbol(frames, pid_frame, &len);
    const char *at = memchr(s, '<', len); /* "<0.N.S>", or another node's "NODE:<0.N.S>" */
    return at && (size_t)(at - s) + 3 < len ? (uint32_t)strtoul(at + 3, NULL, 10) : 0;
}

kp_status kp_rtrace_times_add(kp_rtrace_times *t, uint32_t stack, uint32_t pid_frame, int64_t start,
                              int64_t dur)
{
    if (stack >= t->n_ns) {
        size_t cap = t->n_ns ? t->n_ns * 2 : 64;
        while (cap <= stack)
            cap *= 2;
        uint64_t *ns = kp_realloc_array(t->ns, cap, sizeof *ns);
        if (!ns)
            return KP_ERR_NOMEM;
        memset(ns + t->n_ns, 0, (cap - t->n_ns) * sizeof *ns);
        t->ns = ns;
        t->n_ns = cap;
    }
    if (t->n_iv == t->cap_iv) {
        size_t cap = t->cap_iv ? t->cap_iv * 2 : 256;
        kp_rtrace_interval *iv = kp_realloc_array(t->iv, cap, sizeof *iv);
        if (!iv)
            return KP_ERR_NOMEM;
        t->iv = iv;
        t->cap_iv = cap;
    }
    t->ns[stack] += (uint64_t)dur;
    t->iv[t->n_iv++] = (kp_rtrace_interval){stack, pid_frame, start, dur};
    return KP_OK;
}

void kp_rtrace_times_free(kp_rtrace_times *t)
{
    kp_free(t->ns);
    kp_free(t->iv);
    memset(t, 0, sizeof *t);
}

kp_status kp_rtrace_write_perf(kp_rtrace_data *t, const char *path)
{
    if (t->n_iv)
        qsort(t->iv, t->n_iv, sizeof *t->iv, by_start);
    int64_t span = t->last - t->start, tick_ns = span / MAX_TICKS;
    if (tick_ns < MIN_TICK_NS)
        tick_ns = MIN_TICK_NS;
    size_t cap = 1024, n = 0;
    tick *ticks = kp_realloc_array(NULL, cap, sizeof *ticks);
    if (!ticks)
        return KP_ERR_NOMEM;
    for (size_t k = 0; k < t->n_iv; k++) {
        const kp_rtrace_interval *v = &t->iv[k];
        /* ticks fall within the trace's span: a process whose clock reading
         * came before the trace's first (events of other schedulers arrive
         * a little out of order; a broken stream's, far before) would
         * otherwise get a tick every 10 us of its whole interval, without
         * bound */
        int64_t from = v->start > t->start ? v->start : t->start;
        int64_t to = v->start + v->dur < t->last ? v->start + v->dur : t->last;
        int64_t first = ((from - t->start + tick_ns - 1) / tick_ns) * tick_ns + t->start;
        for (int64_t at = first; at < to; at += tick_ns) {
            if (n == cap) {
                tick *more = kp_realloc(ticks, cap * 2 * sizeof *ticks);
                if (!more) {
                    kp_free(ticks);
                    return KP_ERR_NOMEM;
                }
                ticks = more;
                cap *= 2;
            }
            ticks[n++] = (tick){at, v->stack, v->pid_frame, (uint64_t)tick_ns / 1000};
        }
    }
    /* short traces: a sample per interval instead, so that there are two */
    if (n < 2) {
        n = 0;
        for (size_t k = 0; k < t->n_iv && n < cap; k++)
            ticks[n++] = (tick){t->iv[k].start, t->iv[k].stack, t->iv[k].pid_frame,
                                (uint64_t)(t->iv[k].dur + 999) / 1000};
        if (n == 1) {
            ticks[1] = ticks[0];
            ticks[1].time += 1000;
            n = 2;
        }
    }
    qsort(ticks, n, sizeof *ticks, by_time);
    kp_perf_writer *w = NULL;
    kp_sink *sink = NULL;
    kp_buf text = {0};
    kp_status st = kp_perf_writer_create("beam.smp", "cpu-clock", t->frames, t->stacks, &w);
    if (st == KP_OK)
        st = kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink);
    if (st == KP_OK)
        st = kp_sink_write(sink, "# kprof request trace; samples every tick, PERIOD in us\n", 56);
    for (size_t k = 0; k < n && st == KP_OK; k++) {
        kp_perf_record r = {.pid = 0,
                            .tid = pid_number(t->frames, ticks[k].pid_frame),
                            .cpu = 0,
                            .time_us = (uint64_t)(ticks[k].time - t->start) / 1000 + 1000000,
                            .period = ticks[k].period_us ? ticks[k].period_us : 1,
                            .stack = ticks[k].stack};
        kp_buf_clear(&text);
        st = kp_perf_writer_format(w, &r, &text);
        if (st == KP_OK)
            st = kp_sink_write(sink, text.data, text.len);
    }
    if (sink)
        st = st == KP_OK ? kp_sink_commit(sink) : (kp_sink_abort(sink), st);
    kp_buf_free(&text);
    kp_perf_writer_free(w);
    kp_free(ticks);
    return st;
}

kp_status kp_rtrace_write_folded(const kp_rtrace_data *t, const char *path, const char *svg_path,
                                 const char *id)
{
    kp_folded *f = kp_folded_create();
    if (!f)
        return KP_ERR_NOMEM;
    kp_status st = KP_OK;
    for (size_t s = 0; s < t->n_ns && st == KP_OK; s++)
        if (t->ns[s]) /* at least 1 us, so that no part of the request vanishes */
            st = kp_folded_add_stack(f, t->frames, t->stacks, (uint32_t)s, NULL,
                                     t->ns[s] < 1000 ? 1 : (t->ns[s] + 500) / 1000);
    if (st == KP_OK && kp_folded_lines(f) == 0) {
        /* a trace that ended as it began (`kprof trace --pid` stopped at
         * once): its root, so that the files say whose it was */
        char root[KP_PID_TEXT_MAX];
        int len = kp_pid_text(root, t->root.num, t->root.serial);
        st = kp_folded_add(f, root, (size_t)len, 1);
    }
    if (st == KP_OK && t->cut) {
        /* the marker: the root process, then why the trace stops here */
        char root[KP_PID_TEXT_MAX], marker[160];
        kp_pid_text(root, t->root.num, t->root.serial);
        int len = snprintf(marker, sizeof marker, "%s;kprof_trace_cut:%s", root, t->cut);
        st = kp_folded_add(f, marker, (size_t)len, 1);
    }
    if (st == KP_OK && svg_path) {
        /* drawn first, so that it is there once the folded file is */
        char title[200], caption[200], root[KP_PID_TEXT_MAX];
        kp_pid_text(root, t->root.num, t->root.serial);
        snprintf(title, sizeof title, "Request trace %.100s", id ? id : "");
        snprintf(caption, sizeof caption,
                 "from %s, in microseconds; 'sleep': scheduled out, waiting", root);
        kp_flame_options flame = {title, caption, "us", 0};
        st = kp_flame_svg_save(f, &flame, svg_path);
    }
    if (st == KP_OK)
        st = kp_folded_save(f, path);
    kp_folded_free(f);
    return st;
}

kp_status kp_rtrace_write_files(kp_rtrace_data *d, const char *dir, const char *id, char *folded,
                                size_t folded_len, char *why, size_t why_len)
{
    char stamp[32], base[4200], perf[4300], svg[4300], timeline[4320];
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
    snprintf(base, sizeof base, "%s/%s.%03ldZ-%s", dir, stamp, now.tv_nsec / 1000000, id);
    snprintf(folded, folded_len, "%s.folded", base);
    snprintf(perf, sizeof perf, "%s.perf", base);
    snprintf(svg, sizeof svg, "%s.svg", base);
    snprintf(timeline, sizeof timeline, "%s.trace.json", base);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, why_len, "cannot create %s: %s", dir, strerror(errno));
        return KP_ERR_IO;
    }
    kp_status st = kp_rtrace_write_folded(d, folded, svg, id);
    if (st == KP_OK)
        st = kp_rtrace_write_perf(d, perf);
    if (st == KP_OK)
        st = kp_rtrace_write_timeline(d, timeline, id);
    if (st != KP_OK)
        snprintf(why, why_len, "writing %s: %s", folded,
                 st == KP_ERR_IO ? strerror(errno) : kp_strerror(st));
    return st;
}

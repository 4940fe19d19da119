/* The table model of `kprof top`, apart from any node or terminal so that
 * it can be tested alone: samples go in, a window is closed once a refresh
 * interval, and the closed window (or everything since the start) comes out
 * as lines of text that fit a given width.
 *
 * Functions: each sample's code stack counts its weight once as the self
 * weight of its leaf and once as the total weight of every distinct function
 * on it (a recursive function counts once per sample). The weight is what
 * the caller says: reductions, or native CPU samples.
 *
 * States: native CPU samples per kind of thread and state, shown as one
 * line under the title ("CPU by state: scheduler: 62% busy_wait, ...").
 *
 * Processes: what the agent last said of each sampled process (its name,
 * current function, queue, memory) and what it did in the window:
 * reductions, and native CPU samples attributed to it.
 *
 *     kp_top *t = kp_top_create(997);
 *     kp_top_add_stack(t, frames, depth, weight);   ... for each sample
 *     kp_top_close_window(t, 1000000);               ... each refresh
 *     kp_top_render(t, &layout, &buf);
 *     kp_top_free(t);
 *
 * Not thread-safe: a caller feeding it from two threads locks around it. */
#ifndef KP_TOP_VIEW_H
#define KP_TOP_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/perf_events.h"
#include "kp/buf.h"
#include "kp/cpu_state.h"
#include "kp/status.h"

typedef struct kp_top kp_top;

/* Text that need not be NUL-terminated. */
typedef struct {
    const char *text;
    size_t len;
} kp_top_text;

typedef enum { KP_TOP_BY_SELF, KP_TOP_BY_TOTAL } kp_top_function_sort;

typedef enum {
    KP_TOP_BY_CPU, /* native CPU samples; reductions when there are none */
    KP_TOP_BY_REDUCTIONS,
    KP_TOP_BY_MEMORY,
    KP_TOP_BY_QUEUE
} kp_top_process_sort;

/* What the agent said of one process in one sample. */
typedef struct {
    uint32_t num, serial;  /* <0.num.serial> */
    kp_top_text label;     /* registered name or initial call; len 0: none */
    kp_top_text current;   /* leaf function; len 0: none */
    uint64_t reductions;   /* since that process's previous sample */
    int64_t queue, memory; /* message queue length, bytes */
} kp_top_process_sample;

/* A new model. `cpu_rate` is the native sampling rate per thread (Hz), 0
 * when there is none: it turns CPU samples into a share of one core.
 * NULL when out of memory. */
kp_top *kp_top_create(unsigned cpu_rate);
void kp_top_free(kp_top *top); /* NULL is allowed */

/* Counts one sample's code stack, `frames[0..depth)` root first, with
 * `weight` (0 counts nothing). Returns KP_OK or KP_ERR_NOMEM (the model is
 * then unchanged but for functions interned). */
kp_status kp_top_add_stack(kp_top *top, const kp_top_text *frames, size_t depth, uint64_t weight);

/* Records a sample of a process: adds its reductions to the window and keeps
 * the rest as the latest. Returns KP_OK or KP_ERR_NOMEM. */
kp_status kp_top_add_process(kp_top *top, const kp_top_process_sample *sample);

/* Adds `samples` native CPU samples to process <0.num.serial>. Returns
 * KP_OK or KP_ERR_NOMEM. */
kp_status kp_top_add_cpu(kp_top *top, uint32_t num, uint32_t serial, uint64_t samples);

/* Counts `samples` native CPU samples of a thread of `kind` in `state`
 * (cpu/states.h), for the view's line of CPU by state. */
void kp_top_add_state(kp_top *top, kp_thread_kind kind, kp_cpu_state state, uint64_t samples);

/* The processes of the shown window that have no name (only native CPU
 * samples saw them) and were not returned here before: up to `cap` of
 * them into `nums` and `serials`, for the caller to ask the node. Returns
 * how many. */
size_t kp_top_unnamed(kp_top *top, uint32_t *nums, uint32_t *serials, size_t cap);

/* Names process <0.num.serial>, if the model knows it. Returns KP_OK. */
kp_status kp_top_name(kp_top *top, uint32_t num, uint32_t serial, const kp_top_text *label);

/* Ends the open window, `us` long: it becomes the one rendered, and a new
 * one opens. Processes not sampled for 60 windows are forgotten. */
void kp_top_close_window(kp_top *top, uint64_t us);

/* How to render. */
typedef struct {
    unsigned width;     /* columns; no line is wider (at least 20 is useful) */
    unsigned height;    /* lines of the screen; 0: no screen, see rows */
    unsigned rows;      /* rows per table; 0: as many as the height allows
                            * (10 without a screen) */
    const char *title;  /* the first line's start: "kprof top app@host" */
    const char *weight; /* what the functions are weighted by: "reductions" */
    const char *footer; /* the last line (the keys), NULL for none */
    kp_top_function_sort function_sort;
    kp_top_process_sort process_sort;
    int cumulative; /* everything since the start, not the last window */
    int paused;     /* says so in the first line */
} kp_top_layout;

/* Appends the view to `out`: lines ending in '\n', none wider than
 * layout->width columns (a UTF-8 character is one column; a name that does
 * not fit is cut and ends in "..."), and with a screen no more than
 * layout->height lines. Only printable text: no escape codes. Returns
 * KP_OK or KP_ERR_NOMEM. */
kp_status kp_top_render(const kp_top *top, const kp_top_layout *layout, kp_buf *out);

/* For tests: the shown (or cumulative) weights of the
 * function named `name`: its self and total weight, and the sum of all
 * weights. Returns 1 when the function is known, else 0. */
int kp_top_function_weights(const kp_top *top, const char *name, int cumulative, uint64_t *self,
                            uint64_t *total, uint64_t *all);

#endif

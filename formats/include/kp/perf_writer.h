/* Writer of perf-script text that FlameScope (stock and the flame_prof fork),
 * stackcollapse-perf.pl and speedscope all read the same way (FORMATS.md,
 * section 1). It formats one sample at a time into a buffer; where the text
 * goes (a segment, a file) is the caller's business.
 *
 * A sample looks like this (frames leaf first, as perf prints them):
 *
 *   beam.smp 4242/123 [000] 1700000000.012345: 1 cpu-clock:\tmetric_reductions: 81234, 2001
 *   \t1c my_mod:collect/1 (my_mod.beam)
 *   \t3 <0.123.0> (process)
 *   \t2 running (status)
 *   (empty line)
 */
#ifndef KP_PERF_WRITER_H
#define KP_PERF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "kp/buf.h"
#include "kp/intern.h"
#include "kp/status.h"

typedef struct {
    const char *name; /* NUL-terminated; [A-Za-z0-9_]+, e.g. "reductions" */
    int64_t value;
    int64_t delta;
} kp_metric;

typedef struct {
    uint32_t pid;     /* PID column: the BEAM's OS pid */
    uint32_t tid;     /* TID column: N of the Erlang pid <0.N.0> */
    uint32_t cpu;     /* CPU column, e.g. the scheduler */
    uint64_t time_us; /* monotonic microseconds; one clock per file */
    uint64_t period;  /* PERIOD column: 1 for sample counts */
    const kp_metric *metrics;
    size_t n_metrics;
    uint32_t stack; /* id in the writer's kp_stacks, ROOT first */
} kp_perf_record;

typedef struct kp_perf_writer kp_perf_writer;

/* Creates a writer over interned frames and stacks (borrowed; they must
 * outlive the writer). `comm` is the COMM column: 2 to 15 characters, no digit,
 * no whitespace or control byte (FlameScope cuts the root frame at the first
 * digit), e.g. "beam.smp". `event` is the single event name of the file:
 * [A-Za-z0-9_.-]+, e.g. "cpu-clock". Returns KP_ERR_INVAL for a bad name,
 * KP_ERR_NOMEM, or KP_OK with the writer in `*out`. */
kp_status kp_perf_writer_create(const char *comm, const char *event, const kp_frames *frames,
                                const kp_stacks *stacks, kp_perf_writer **out);
void kp_perf_writer_free(kp_perf_writer *writer);

/* Appends the text of one sample, its empty line included, to `out`.
 * A sample equal to a recent one but for its time is written from a copy of
 * that one's text: the writer keeps up to 2048 such copies of at most 4 KB
 * each (by tid and stack), freed with the writer; out of memory, it formats
 * from scratch. The output is the same either way.
 * Timestamps never go backwards in one writer: an earlier time is raised to
 * the last one written (counted in kp_perf_writer_clamped). A time that is a
 * whole second is written one microsecond later, because FlameScope fails on
 * a last sample at "x.000000". Returns KP_OK, KP_ERR_INVAL (bad metric name or
 * stack id; `out` unchanged) or KP_ERR_NOMEM (`out` unchanged). */
kp_status kp_perf_writer_format(kp_perf_writer *writer, const kp_perf_record *record, kp_buf *out);

/* The timestamp (microseconds) that the last formatted sample carries. */
uint64_t kp_perf_writer_last_time(const kp_perf_writer *writer);
/* Number of samples whose time was raised to keep the file ordered. */
uint64_t kp_perf_writer_clamped(const kp_perf_writer *writer);

/* Resets ordering so that a new file can start at any time (used at each new
 * segment when the caller starts a new clock). */
void kp_perf_writer_reset_time(kp_perf_writer *writer);

#endif

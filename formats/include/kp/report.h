/* The data of kprof's HTML report: samples placed in time, aggregated for a
 * heat map and for the flame graph of any range of it, of all processes or
 * of some.
 *
 * A report holds one or two recordings (two for a comparison, `kprof report
 * A B`), each with up to two sources: the cooperative samples (perf-script
 * segments with metric fields) and the native CPU samples. The process is
 * a dimension of its own, not a frame: kprof's stacks begin
 *     COMM ; [node ;] status ; ... ; <0.N.S> ; name ; code...
 * (no name in native CPU samples; their status is the thread's state,
 *     beam.smp ; THREAD_KIND ; STATE ; [<0.N.S> ; [label ;]] code...
 * as kp/cpu_state.h has it, or the thread kind in stacks recorded before
 * states) and the pid and the name go to a table
 * of processes (per recording, keyed by node and pid), the rest to ONE tree
 * of call paths (a node per distinct path from the root), shared by every
 * source, so that the page can compare any two selections node by node.
 * The tree holds the distinct call paths whatever the number of processes.
 *
 * Samples are not shipped one by one. Each source sums them in three entry
 * sets, per time slice: (slice, path) for the views of all processes,
 * (slice, process, path) for the flame graphs of some processes, and
 * (slice, process, status) for their heat maps and the process table. A
 * slice is FlameScope's 20 ms while a set is small, longer (40 ms, 200 ms,
 * 1 s, 5 s, ... up to an hour) when it grows past twice
 * `KP_REPORT_ENTRY_BUDGET` entries, each set on its own: an hour of a
 * thousand processes, each over 200 paths, keeps its paths per 5 s, its
 * processes' paths for the whole hour and its processes per minute (the
 * third set has a quarter of the budget), in a page of about 12 MB. Each source
 * also sums its weights per row of its heat map: 50 rows a second (20 ms)
 * whatever the slices while the map is short, 10 then 1 past
 * `KP_REPORT_HEAT_BUDGET` rows (the slices then at least as long), so that
 * a recording of any length holds in bounded memory. When the page is
 * written, the cooperative samples' rows grow to their sampling interval
 * (10 rows a second at --rate 10), found in the sample times. A range picked on the
 * heat map covers whole slices of the set drawn, so the flame graph of a
 * range always weighs what its cells hold.
 *
 *     kp_report *r = kp_report_create();
 *     kp_report_source *s = kp_report_get_source(r, 0, KP_REPORT_SAMPLES);
 *     kp_report_add(r, s, time_ns, "beam.smp;running;<0.1.0>;name;m:f/1", len, w);
 *     kp_report_write_html(r, &options, sink);
 *     kp_report_free(r);
 */
#ifndef KP_REPORT_H
#define KP_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "kp/sink.h"
#include "kp/status.h"
#include "kp/weights.h"

typedef enum { KP_REPORT_SAMPLES, KP_REPORT_CPU, KP_REPORT_KINDS } kp_report_kind;

/* Entries an entry set keeps (twice this) before its slices grow. */
#define KP_REPORT_ENTRY_BUDGET (1u << 18)
/* Rows a second of the heat maps themselves while they are short:
 * FlameScope's 20 ms. */
#define KP_REPORT_HEAT_ROWS 50
/* Rows a heat map keeps (per weight) before its rows grow from 20 ms to
 * 100 ms, then to a second: 2^17 rows are 43.7 minutes at 50 rows a
 * second, 3.6 hours at 10; past that a second costs a row. */
#define KP_REPORT_HEAT_BUDGET (1u << 17)

typedef struct kp_report kp_report;
typedef struct kp_report_source kp_report_source;

/* A new empty report; NULL when out of memory. */
kp_report *kp_report_create(void);
void kp_report_free(kp_report *report);

/* The source of `kind` of recording `recording` (0 or 1), created empty on
 * first use; NULL when out of memory or out of range. */
kp_report_source *kp_report_get_source(kp_report *report, unsigned recording, kp_report_kind kind);

/* Sets the entry budget of the sources created from now on (default
 * KP_REPORT_ENTRY_BUDGET): an entry set grows its slices when it holds
 * twice this many entries (before its arrays grow past that), up to an
 * hour. For tests, and for callers short of memory (an entry takes 80
 * bytes in a cooperative source, 32 in a CPU source; a source has two sets
 * of this budget and one of a quarter of it). */
void kp_report_set_budget(kp_report *report, uint64_t entries);

/* Sets the heat map budget of the sources created from now on (default
 * KP_REPORT_HEAT_BUDGET rows), for tests. */
void kp_report_set_heat_budget(kp_report *report, uint64_t rows);
/* Names recording `recording` (a directory name, shown in the page). */
kp_status kp_report_set_name(kp_report *report, unsigned recording, const char *name);

/* Adds one sample taken at `time_ns` (any clock, the same for the whole
 * source) with folded stack `stack[0..len)` (root first, ';'-separated, as
 * kp_perf_reader gives it; its first pid frame among the first five is its
 * process, and in cooperative samples the frame after it the process's
 * name) and weights `w` (KP_WEIGHT_COUNT of them (kp/weights.h) for
 * the cooperative source, 1 for CPU; a weight of 0 or less adds nothing, as in
 * the folded files). Samples may come in any order. Returns KP_OK,
 * KP_ERR_NOMEM or KP_ERR_LIMIT (more than 2^32 - 1 frames or nodes). */
kp_status kp_report_add(kp_report *report, kp_report_source *source, uint64_t time_ns,
                        const char *stack, size_t len, const int64_t *w);

/* What a source holds, for messages and tests. */
typedef struct {
    uint64_t samples;
    uint64_t entries, process_entries, timeline_entries;    /* of the three sets */
    unsigned slice_ms, process_slice_ms, timeline_slice_ms; /* their slices: 20, 40, 200, 1000... */
    unsigned heat_rows; /* the heat map's rows a second: 50, 25, 10, 5, 2, 1 */
    uint64_t first_ns, last_ns;
} kp_report_source_stats;
void kp_report_source_stats_get(const kp_report_source *source, kp_report_source_stats *stats);

typedef struct {
    const char *title;    /* heading; NULL for "kprof report" */
    const char *subtitle; /* e.g. the node and the time; NULL for none */
    /* the node's busy-wait settings ("+sbwt very_long +sbwtdcpu short
     * ..."), named where the page says that busy waiting takes over a
     * tenth of the CPU; NULL when unknown */
    const char *busy_flags;
} kp_report_options;

/* Writes the report as one self-contained HTML page (no network, no external
 * file): the page's script and style, and the data, gzip-compressed and
 * base64-encoded, that it decodes in the browser. The cooperative sources'
 * heat map rows are first made as long as their sampling interval (their
 * sets' slices then whole rows); samples added after that go to those
 * rows. Returns KP_OK, KP_ERR_EMPTY
 * when no source has a sample, KP_ERR_NOMEM, or the sink's error. The sink is
 * neither committed nor aborted. */
kp_status kp_report_write_html(kp_report *report, const kp_report_options *options, kp_sink *sink);

#endif

/* Reader of perf-script text: ours, and real `perf script` output.
 *
 * It folds each sample exactly as FlameGraph's stackcollapse-perf.pl does with
 * its default options, so that `kprof convert x.perf -o x.folded` prints the
 * same lines as `stackcollapse-perf.pl x.perf`:
 * - the root frame is the COMM column with spaces turned into '_';
 * - the count is the PERIOD when the header ends with "PERIOD EVENT:",
 *   otherwise 1 (a header followed by metric fields counts 1);
 * - only the first event name seen is kept; samples of other events are skipped;
 * - symbols lose a "+0xOFFSET" suffix; a symbol starting with '(' is skipped;
 *   "a->b" becomes the frames "a;b_[i]"; "[unknown]" becomes "[MODULE]" (the
 *   module's base name) or "[unknown]"; ';' becomes ':'; everything from the
 *   first '(' is cut (unless the symbol has ".(...)."); quotes are removed;
 * - a sample is complete at its empty line: a sample left without one at the
 *   end of the input is dropped, as stackcollapse drops it.
 * Lines that are neither comments, headers, frames nor empty are counted as
 * malformed (stackcollapse warns "Unrecognized line") and otherwise ignored.
 *
 * The `metric_NAME: VALUE, DELTA` fields of a header (FORMATS.md) are parsed
 * too, so a caller can weight stacks by a metric, and so is its TIME column
 * (the first "DIGITS.DIGITS:" after COMM), so a caller can place it in time.
 */
#ifndef KP_PERF_READER_H
#define KP_PERF_READER_H

#include <stddef.h>
#include <stdint.h>

#include "kp/status.h"

typedef struct {
    const char *name; /* without "metric_"; not NUL-terminated */
    size_t name_len;
    int64_t value;
    int64_t delta;
} kp_perf_metric;

typedef struct {
    const char *stack; /* folded form, root first: "comm;f1;f2" (not NUL-terminated) */
    size_t stack_len;
    uint64_t period;               /* the count stackcollapse-perf.pl would add */
    const kp_perf_metric *metrics; /* from the header line, in file order */
    size_t n_metrics;
    uint64_t header_line; /* 1-based line number of the sample's header */
    uint64_t time_ns;     /* the header's TIME ("secs.frac:"), in ns; 0 when absent */
    int has_time;         /* the header had a TIME column */
} kp_perf_sample;

typedef struct {
    uint64_t lines;
    uint64_t samples;         /* samples returned */
    uint64_t skipped_events;  /* headers skipped for another event name */
    uint64_t malformed;       /* unrecognised lines */
    uint64_t first_malformed; /* line number of the first, 0 if none */
} kp_perf_reader_stats;

typedef struct kp_perf_reader kp_perf_reader;

/* Returns a new reader, or NULL when out of memory. */
kp_perf_reader *kp_perf_reader_create(void);
void kp_perf_reader_free(kp_perf_reader *reader);

/* Feeds the next line (without its '\n'). When the line completes a sample,
 * `*sample` points to it until the next call; otherwise it is set to NULL.
 * Returns KP_OK or KP_ERR_NOMEM (the reader stays usable; the sample being
 * built is lost). */
kp_status kp_perf_reader_line(kp_perf_reader *reader, const char *line, size_t len,
                              const kp_perf_sample **sample);

/* Counters so far. */
const kp_perf_reader_stats *kp_perf_reader_stats_get(const kp_perf_reader *reader);

#endif

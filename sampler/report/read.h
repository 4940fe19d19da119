/* Reading recording directories of `kprof record` into a report page, and
 * writing the page. */
#ifndef KP_REPORT_READ_H
#define KP_REPORT_READ_H

#include <stddef.h>
#include <stdint.h>

#include "kp/report.h"

typedef struct {
    unsigned segments;     /* samples-NNNNNN.perf* files read */
    unsigned cpu_segments; /* cpu-NNNNNN.perf* files read */
    uint64_t samples, cpu_samples;
    uint64_t malformed;          /* lines the perf reader did not recognise */
    char node[256];              /* from the segments' "# kprof sampling of NODE" line */
    int64_t wall_minus_clock_us; /* UTC = the segments' clock + this; 0 if unknown */
    /* debug files found for the recording's native code, and the unnamed
     * functions they named (cpu/debug_names.h) */
    size_t debug_files, debug_named;
    /* the node's busy-wait settings ("+sbwt very_long ..."), where known:
     * kprof record knows them, a report of a directory does not */
    char busy_flags[256];
} kp_report_read_stats;

/* Reads every samples-*.perf* and cpu-*.perf* segment of `dir` (any
 * compression; in name order, which is time order) into recording
 * `recording` of `report`. Returns a process exit code: 0; 3 (unusable input:
 * no segment, nothing that parses, corrupt data) or 1 (I/O, memory), with
 * a one-line message naming the cause and what to do in `err`. */
int kp_report_read_dir(kp_report *report, unsigned recording, const char *dir,
                       kp_report_read_stats *stats, char *err, size_t err_len);

/* Writes `report` of the recordings `dirs[0..n)` (read with `stats`) as the
 * page `out` (complete or not at all), each recording named after its
 * directory, titled as kp_report_build does.
 * Prints one line of summary unless `quiet`, and the cause of a failure.
 * Returns a process exit code: 0 or 1 (I/O, memory). */
int kp_report_write_page(kp_report *report, const char *const *dirs,
                         const kp_report_read_stats *stats, size_t n, const char *out, int quiet);

/* Reads the recordings `dirs[0..n)` (n is 1, or 2 for B compared with A)
 * and writes the report page to `out` (complete or not at all). Prints one
 * line of summary unless `quiet`, and the cause of a failure. Returns a
 * process exit code: 0, 1 (I/O, memory), 3 (unusable recording). */
int kp_report_build(const char *const *dirs, size_t n, const char *out, int quiet);

#endif

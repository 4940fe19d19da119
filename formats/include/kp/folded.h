/* Folded stacks: aggregation, reading and writing (FORMATS.md, section 3).
 *
 * A folded line is "frame;frame;frame COUNT": root first, one space, a
 * positive integer. kp_folded aggregates weights by stack text and writes each
 * distinct stack once, sorted bytewise (the order stackcollapse-perf.pl and
 * `LC_ALL=C sort` give), so flamegraph.pl, eflame's copy of it and speedscope
 * all read the same graph.
 */
#ifndef KP_FOLDED_H
#define KP_FOLDED_H

#include <stddef.h>
#include <stdint.h>

#include "kp/buf.h"
#include "kp/intern.h"
#include "kp/sink.h"
#include "kp/status.h"

typedef struct kp_folded kp_folded;

/* Returns an empty aggregate, or NULL when out of memory. */
kp_folded *kp_folded_create(void);
void kp_folded_free(kp_folded *folded);

/* Adds `weight` to the stack whose folded text is `stack` (frames already
 * encoded and joined with ';'). Weights saturate at UINT64_MAX instead of
 * wrapping. Returns KP_OK, KP_ERR_NOMEM or KP_ERR_LIMIT; on error nothing is
 * added. */
kp_status kp_folded_add(kp_folded *folded, const char *stack, size_t len, uint64_t weight);

/* The folded text of interned stack `stack_id`: its frames' symbols joined
 * with ';', after `root` (e.g. "beam.smp"; NULL or "" for none), replacing
 * what `out` held. Returns KP_OK, KP_ERR_NOMEM, or KP_ERR_INVAL for an
 * unknown id or a text with no frame. */
kp_status kp_folded_stack_text(const kp_frames *frames, const kp_stacks *stacks, uint32_t stack_id,
                               const char *root, kp_buf *out);

/* Adds `weight` to interned stack `stack_id`: its text as
 * kp_folded_stack_text() makes it. */
kp_status kp_folded_add_stack(kp_folded *folded, const kp_frames *frames, const kp_stacks *stacks,
                              uint32_t stack_id, const char *root, uint64_t weight);

/* Number of distinct stacks with a non-zero weight, and the sum of weights
 * (saturating). */
size_t kp_folded_lines(const kp_folded *folded);
uint64_t kp_folded_total(const kp_folded *folded);

/* Writes every stack with a non-zero weight, sorted bytewise, as
 * "STACK WEIGHT\n". Returns KP_OK, KP_ERR_NOMEM or the sink's error. The sink
 * is neither committed nor aborted. */
kp_status kp_folded_write(const kp_folded *folded, kp_sink *sink);

/* Writes `folded` as kp_folded_write does to a new plain file at `path`,
 * complete or not at all (kp_sink_open_file: a temporary name, then
 * rename). Returns KP_OK, KP_ERR_NOMEM or KP_ERR_IO (errno kept). */
kp_status kp_folded_save(const kp_folded *folded, const char *path);

/* Calls `visit` for every stack with a non-zero weight, in frame order:
 * bytewise, except that the ';' between frames sorts before any other byte,
 * so that all the stacks under one run of frames from the root come together
 * (what a flame graph drawn line by line needs). `stack` stays valid as long
 * as `folded` is unchanged. Stops at the first status other than KP_OK from
 * `visit` and returns it; else KP_OK, or KP_ERR_NOMEM. */
typedef kp_status (*kp_folded_visit)(void *ctx, const char *stack, size_t len, uint64_t weight);
kp_status kp_folded_each_by_frame(const kp_folded *folded, kp_folded_visit visit, void *ctx);

/* Parsing of one folded line. */
typedef struct {
    uint64_t lines;
    uint64_t records;
    uint64_t malformed;
    uint64_t first_malformed; /* 1-based line number, 0 if none */
} kp_folded_reader_stats;

/* Parses `line` (without '\n') as "STACK COUNT": the count is the run of
 * digits after the last space or TAB, the stack what precedes it with trailing
 * spaces and TABs removed; a trailing '\r' is ignored. Empty lines are
 * skipped. Returns 1 with the record, 0 for an empty line, -1 for a malformed
 * line (no count, empty stack, count over 2^64-1); `stats` is updated. */
int kp_folded_parse_line(const char *line, size_t len, const char **stack, size_t *stack_len,
                         uint64_t *count, kp_folded_reader_stats *stats);

#endif

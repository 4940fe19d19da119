/* Flame graphs as SVG, drawn from folded stacks.
 *
 * kprof writes these beside its folded files so that a profile can be looked
 * at in any web browser on any machine, without fetching flamegraph.pl (what
 * py-spy and async-profiler users get from their tools). The drawing follows
 * the usual convention: the root at the bottom, one box per frame on each
 * distinct path from the root, as wide as the weight of the stacks through
 * it, siblings in alphabetical order, so that it looks like what
 * flamegraph.pl draws from the same file. The file is self-contained: a small
 * script of our own gives each box a tooltip, zooms on click (Escape or
 * "Reset zoom" to undo) and highlights the frames matching a regular
 * expression (Ctrl-F or "Search"), with the share of the graph they cover.
 */
#ifndef KP_FLAME_SVG_H
#define KP_FLAME_SVG_H

#include "kp/folded.h"
#include "kp/sink.h"
#include "kp/status.h"

typedef struct {
    const char *title;     /* heading; NULL or "" for "Flame graph" */
    const char *subtitle;  /* a second line, e.g. the node and the time; NULL for none */
    const char *countname; /* what the weights count, e.g. "samples", "bytes"; NULL: "samples" */
    unsigned width;        /* image width in pixels, 200 to 100000; 0 for 1200 */
} kp_flame_options;

/* Writes `folded` to `sink` as a flame graph (UTF-8 SVG 1.1). Frame text is
 * shown readable: the folded file's percent-encoding undone (kp_symbol_decode,
 * so "anonymous%20fn/1%20in%20M.f/2" reads "anonymous fn/1 in M.f/2"), then
 * XML-escaped; a box narrower than 0.1
 * pixel at full width is left out with everything above it, as flamegraph.pl
 * does, so the size of the file follows what can be seen. The whole drawing
 * is built in memory before the first byte is written.
 * Returns KP_OK; KP_ERR_EMPTY when `folded` has no weight; KP_ERR_INVAL for a
 * width out of range; KP_ERR_NOMEM; or the sink's error. The sink is neither
 * committed nor aborted. */
kp_status kp_flame_svg_write(const kp_folded *folded, const kp_flame_options *options,
                             kp_sink *sink);

/* The same, to a new plain file at `path`, complete or not at all
 * (kp_sink_open_file: a temporary name, then rename). Returns what
 * kp_flame_svg_write returns, or KP_ERR_IO (errno kept). */
kp_status kp_flame_svg_save(const kp_folded *folded, const kp_flame_options *options,
                            const char *path);

#endif

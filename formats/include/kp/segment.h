/* Rotating segment files for a long recording (FORMATS.md, section 2).
 *
 * Samples (already formatted, e.g. by kp_perf_writer) go into the current
 * segment; a new segment starts when the current one reaches a size or a time
 * span. Each segment:
 * - is written under a dot-prefixed temporary name and renamed when complete,
 *   so every visible segment is a complete, valid file;
 * - starts with the configured comment header and holds at least 2 samples
 *   (FlameScope needs 2): a segment never closes with fewer. When the input
 *   ends with a single sample in a fresh segment, that sample is appended to
 *   the previous segment, which is kept open until its successor has 2;
 * - is named PREFIX-NNNNNN.EXT[.gz|.zst] with NNNNNN counting from 000001, or
 *   from after the highest number already in the directory, so that a second
 *   recording into the same directory never overwrites the first.
 * Only the newest `keep` segments written by this writer are kept.
 */
#ifndef KP_SEGMENT_H
#define KP_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "kp/sink.h"
#include "kp/status.h"

typedef struct {
    const char *dir;       /* existing directory */
    const char *prefix;    /* [A-Za-z0-9._,%+:@-]+, e.g. "samples" */
    const char *extension; /* e.g. "perf" (no dot) */
    kp_compression compression;
    int level;             /* 0 = library default */
    uint64_t rotate_bytes; /* 0 = no size limit; compressed segments are
                               measured by compressed bytes flushed so far, so
                               they may exceed it by the compressor's buffer */
    uint64_t rotate_us;    /* 0 = no time limit; measured on sample times */
    unsigned keep;         /* 0 = keep every segment */
    const char *header;    /* written first in every segment; NULL for none */
} kp_segment_config;

typedef struct {
    uint64_t samples;  /* samples accepted */
    uint64_t segments; /* segments completed and renamed */
    uint64_t removed;  /* old segments deleted for `keep` */
    uint64_t bytes;    /* uncompressed bytes in completed segments */
    uint64_t dropped;  /* samples lost: a recording of a single sample */
} kp_segment_stats;

typedef struct kp_segment_writer kp_segment_writer;

/* Validates the configuration (KP_ERR_INVAL for a bad prefix or extension, a
 * header line not starting with '#' or not ending in '\n') and returns a
 * writer. No file is created until the first sample. The configuration's
 * strings are copied. */
kp_status kp_segment_open(const kp_segment_config *config, kp_segment_writer **out);

/* Adds one sample's text (ending with its empty line) with its timestamp.
 * Returns KP_OK, KP_ERR_NOMEM, or the sink's KP_ERR_IO / KP_ERR_COMPRESS, in
 * which case the segment being written is discarded and every earlier one
 * stays valid; later calls return the same error. */
kp_status kp_segment_write(kp_segment_writer *writer, const char *text, size_t len,
                           uint64_t time_us);

/* Completes the current segment and frees the writer. A recording of a single
 * sample leaves no file (counted in `dropped`, KP_ERR_EMPTY). Returns the first
 * error met, if any. `stats`, when not NULL, receives the final counters. */
kp_status kp_segment_close(kp_segment_writer *writer, kp_segment_stats *stats);

/* Counters so far, and the path of the newest completed segment ("" if none). */
const kp_segment_stats *kp_segment_stats_get(const kp_segment_writer *writer);
const char *kp_segment_last_path(const kp_segment_writer *writer);
/* The path of the segment being written ("" if none): the one
 * kp_segment_close() completes. */
const char *kp_segment_current_path(const kp_segment_writer *writer);

#endif

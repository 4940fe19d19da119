/* Output streams: a file written whole or not at all, optionally compressed.
 *
 * kp_sink_open_file() writes to a dot-prefixed temporary name in the target's
 * directory (".NAME.PID.tmp") and kp_sink_commit() renames it to NAME only
 * after every byte is written, the compressor is finished and the file is
 * closed. So a reader never sees a half-written file under its final name, and
 * a failed write leaves nothing behind (kp_sink_abort removes the temporary).
 *
 * Errors are sticky: after the first failure every call returns it again, and
 * kp_sink_commit() removes the temporary file and returns it.
 *
 *     kp_sink *s;
 *     if (kp_sink_open_file("out.perf.gz", KP_COMPRESS_GZIP, 0, &s) != KP_OK) ...
 *     kp_sink_write(s, text, len);
 *     kp_status st = kp_sink_commit(s);   // frees s whatever the outcome
 */
#ifndef KP_SINK_H
#define KP_SINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kp/status.h"

typedef enum {
    KP_COMPRESS_NONE = 0,
    KP_COMPRESS_GZIP = 1, /* read directly by FlameScope and speedscope */
    KP_COMPRESS_ZSTD = 2  /* compact archive; no viewer reads it: kprof convert does */
} kp_compression;

typedef struct kp_sink kp_sink;

/* Opens a sink that will become `path` on commit. `level` 0 picks the
 * fast default: gzip level 1, zstd level 3. Returns KP_OK, KP_ERR_IO (errno set: directory
 * missing or not writable...), KP_ERR_NOMEM or KP_ERR_COMPRESS. */
kp_status kp_sink_open_file(const char *path, kp_compression compression, int level, kp_sink **out);

/* Opens a sink on an already open descriptor (e.g. standard output). Commit
 * finishes and flushes but neither closes nor renames anything. */
kp_status kp_sink_open_fd(int fd, kp_compression compression, int level, kp_sink **out);

/* Queues `len` bytes. Returns KP_OK or the sticky error. */
kp_status kp_sink_write(kp_sink *sink, const void *data, size_t len);

/* Uncompressed bytes accepted so far, and bytes handed to the file so far
 * (compressed output lags behind the input: 64 KB of input is gathered
 * before it is compressed, and the compressor keeps its own buffer). */
uint64_t kp_sink_bytes_in(const kp_sink *sink);
uint64_t kp_sink_bytes_out(const kp_sink *sink);

/* Completes the file (see top) and frees the sink. On error the temporary is
 * removed and errno describes an I/O failure. */
kp_status kp_sink_commit(kp_sink *sink);

/* Writes `len` bytes as the whole uncompressed file `path`, with the same
 * all-or-nothing guarantee: open, write, commit. Returns KP_OK or the first
 * error (KP_ERR_IO with errno set, KP_ERR_NOMEM). */
kp_status kp_sink_write_file(const char *path, const void *data, size_t len);

/* Drops everything written, removes the temporary file, frees the sink. NULL is
 * allowed. */
void kp_sink_abort(kp_sink *sink);

/* The compression named "none", "gzip" or "zstd"; returns -1 for another name. */
int kp_compression_from_name(const char *name);
/* The file-name suffix of a compression: "", ".gz" or ".zst". */
const char *kp_compression_suffix(kp_compression compression);

/* For fault-injection tests: replaces write(2) for every sink (NULL restores
 * it). The function must behave like write(2). */
typedef ssize_t (*kp_write_fn)(int fd, const void *data, size_t len);
void kp_sink_set_write_fn(kp_write_fn fn);

#endif

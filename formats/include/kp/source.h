/* Input streams read line by line, with transparent decompression.
 *
 * The compression is recognised from the first bytes (gzip 1f 8b, zstd
 * 28 b5 2f fd), not from the file name, so a renamed file still reads.
 * Concatenated gzip members and zstd frames are read as one stream.
 *
 *     kp_source *src;
 *     if (kp_source_open("in.perf.zst", &src) != KP_OK) ...
 *     const char *line; size_t len;
 *     while ((st = kp_source_next_line(src, &line, &len)) == KP_OK) ...
 *     // st == KP_ERR_EMPTY at the end, another code on error
 *     kp_source_close(src);
 */
#ifndef KP_SOURCE_H
#define KP_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "kp/sink.h"
#include "kp/status.h"

typedef struct kp_source kp_source;

/* Longest line accepted; a longer one makes next_line return KP_ERR_LIMIT. */
#define KP_SOURCE_MAX_LINE (16u << 20)

/* Opens `path` ("-" = standard input). KP_ERR_IO with errno on failure. */
kp_status kp_source_open(const char *path, kp_source **out);

/* Opens a source over a memory buffer (not copied; must outlive the source). */
kp_status kp_source_open_memory(const void *data, size_t len, kp_source **out);

/* Returns the next line without its '\n' (a last line without one is returned
 * too). The pointer stays valid until the next call. Returns KP_OK,
 * KP_ERR_EMPTY at the end of input, KP_ERR_IO (errno set), KP_ERR_COMPRESS
 * (corrupt or truncated compressed data), KP_ERR_LIMIT or KP_ERR_NOMEM. */
kp_status kp_source_next_line(kp_source *src, const char **line, size_t *len);

/* The compression detected (valid after the first read). */
kp_compression kp_source_compression(const kp_source *src);
/* Bytes of decompressed input consumed so far. */
uint64_t kp_source_bytes(const kp_source *src);

/* Closes the file and frees the source; NULL is allowed. */
void kp_source_close(kp_source *src);

#endif

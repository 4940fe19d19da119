/* A growable byte buffer, the unit in which writers hand text to sinks. */
#ifndef KP_BUF_H
#define KP_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "kp/status.h"

typedef struct {
    char *data; /* not NUL-terminated */
    size_t len;
    size_t cap;
} kp_buf;

/* clang-format 14 and 19 lay out a braced macro differently: kept as is */
/* clang-format off */
#define KP_BUF_INIT {NULL, 0, 0}
/* clang-format on */

/* Makes room for `extra` more bytes. KP_ERR_NOMEM leaves the buffer as it was. */
kp_status kp_buf_reserve(kp_buf *buf, size_t extra);
/* Appends bytes; on failure the buffer is unchanged. */
kp_status kp_buf_append(kp_buf *buf, const void *data, size_t len);
kp_status kp_buf_append_str(kp_buf *buf, const char *str);
kp_status kp_buf_append_char(kp_buf *buf, char c);
/* Appends the decimal form of an integer. */
kp_status kp_buf_append_u64(kp_buf *buf, uint64_t value);
kp_status kp_buf_append_i64(kp_buf *buf, int64_t value);
/* Appends lowercase hexadecimal without prefix. */
kp_status kp_buf_append_hex(kp_buf *buf, uint64_t value);
/* Forgets the content, keeps the memory. */
void kp_buf_clear(kp_buf *buf);
/* Releases the memory; the buffer is then empty and reusable. */
void kp_buf_free(kp_buf *buf);

#endif

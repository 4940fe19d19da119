/* Minimal JSON output: the two value kinds whose text is not trivial, a
 * string and a floating-point number, appended to a kp_buf. Objects, arrays,
 * integers and literals are plain text the caller appends itself.
 *
 *     kp_buf b = KP_BUF_INIT;
 *     kp_buf_append_str(&b, "{\"name\":");
 *     kp_json_string(&b, name, name_len);
 *     kp_buf_append_str(&b, ",\"mean\":");
 *     kp_json_double(&b, mean);
 *     kp_buf_append_char(&b, '}');
 */
#ifndef KP_JSON_H
#define KP_JSON_H

#include <stddef.h>

#include "kp/buf.h"
#include "kp/status.h"

/* Appends `s[0..len)` (any bytes, NUL included; `s` may be NULL when `len` is
 * 0) as a quoted JSON string. '"' and '\\' are escaped, \b \f \n \r \t get
 * their short escapes and the other control characters (0x00-0x1f, 0x7f) the
 * \u00XX form. Valid UTF-8 passes through unchanged; each byte that does not
 * belong to a valid UTF-8 sequence (overlong forms, surrogates, code points
 * over U+10FFFF, truncated sequences, stray continuation bytes) becomes one
 * \ufffd, so the output is always valid JSON in valid UTF-8.
 * Returns KP_OK or KP_ERR_NOMEM; on error `out` is unchanged. */
kp_status kp_json_string(kp_buf *out, const char *s, size_t len);

/* Appends a finite `v` rounded to 3 decimals with trailing zeros and a
 * trailing dot removed ("2", "1.5", "1234.568", "-0.25"; a value that rounds
 * to zero is "0"), whatever the C locale's decimal point. NaN and infinities,
 * which JSON cannot express, are appended as null.
 * Returns KP_OK or KP_ERR_NOMEM; on error `out` is unchanged. */
kp_status kp_json_double(kp_buf *out, double v);

#endif

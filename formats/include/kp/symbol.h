/* Encoding of names so that every consumer of our files reads them the same.
 *
 * FlameScope cuts names at '+', stackcollapse-perf.pl rewrites ';', strips
 * quotes and everything from '(', and splits on "->"; speedscope drops lines
 * with a TAB before the count. Percent-encoding those bytes (%XX of the byte,
 * uppercase hex) keeps names intact and readable. See FORMATS.md, section 1.
 */
#ifndef KP_SYMBOL_H
#define KP_SYMBOL_H

#include <stddef.h>

#include "kp/buf.h"

/* Appends `text` encoded for use as a frame symbol (perf-script SYMBOL column
 * and folded frame): percent-encodes ; + ( ) ' " % \ space, every control byte
 * (0x00-0x1f, 0x7f) and the '>' of "->". Bytes 0x80 and above (UTF-8) pass
 * unchanged. An empty `text` becomes "%00" so no frame is ever empty, and the
 * text "[unknown]" becomes "%5Bunknown]" (stackcollapse special-cases it).
 * Returns KP_OK or KP_ERR_NOMEM (buffer unchanged). */
kp_status kp_symbol_encode(kp_buf *out, const char *text, size_t len);

/* Appends `text` encoded for the perf-script MODULE column, which must hold no
 * space or parenthesis and must not start with '['; it encodes what
 * kp_symbol_encode does plus '[' and ']'. Empty text becomes "%00". */
kp_status kp_module_encode(kp_buf *out, const char *text, size_t len);

/* Appends `text` with each "%XX" (two hex digits, either case) turned back
 * into its byte: the readable name of an encoded symbol, for kprof's own
 * viewers (SVG flame graphs, kprof top). Other bytes, and a '%' not followed
 * by two hex digits, are copied. The result may hold any byte, NUL too ("%00"
 * is the empty frame): a viewer escapes what it cannot show.
 * Returns KP_OK or KP_ERR_NOMEM (buffer unchanged). */
kp_status kp_symbol_decode(kp_buf *out, const char *text, size_t len);

#endif

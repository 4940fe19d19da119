#include "kp/symbol.h"

#include <stdint.h>
#include <string.h>

#include "kp/hex.h"

/* 1 where a byte must be percent-encoded in a symbol, 2 for '>' (only after
 * '-'), 3 for '[' and ']' (module column only). */
static unsigned char encode_class(unsigned char c)
{
    if (c < 0x20 || c == 0x7f)
        return 1;
    switch (c) {
    case ';':
    case '+':
    case '(':
    case ')':
    case '\'':
    case '"':
    case '%':
    case '\\':
    case ' ': return 1;
    case '>': return 2;
    case '[':
    case ']': return 3;
    default: return 0;
    }
}

static kp_status encode(kp_buf *out, const char *text, size_t len, int module)
{
    static const char hex[] = "0123456789ABCDEF";
    if (len == 0)
        return kp_buf_append(out, "%00", 3);
    /* worst case every byte triples */
    if (len > SIZE_MAX / 3)
        return KP_ERR_NOMEM;
    kp_status st = kp_buf_reserve(out, len * 3);
    if (st != KP_OK)
        return st;
    const unsigned char *s = (const unsigned char *)text;
    char *d = out->data + out->len;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = s[i];
        unsigned char cls = encode_class(c);
        int escape = cls == 1 || (cls == 2 && i > 0 && s[i - 1] == '-') || (cls == 3 && module);
        if (escape) {
            *d++ = '%';
            *d++ = hex[c >> 4];
            *d++ = hex[c & 15];
        } else {
            *d++ = (char)c;
        }
    }
    out->len = (size_t)(d - out->data);
    return KP_OK;
}

kp_status kp_symbol_encode(kp_buf *out, const char *text, size_t len)
{
    if (len == 9 && memcmp(text, "[unknown]", 9) == 0)
        return kp_buf_append(out, "%5Bunknown]", 11);
    return encode(out, text, len, 0);
}

kp_status kp_module_encode(kp_buf *out, const char *text, size_t len)
{
    return encode(out, text, len, 1);
}

kp_status kp_symbol_decode(kp_buf *out, const char *text, size_t len)
{
    kp_status st = kp_buf_reserve(out, len);
    if (st != KP_OK)
        return st;
    char *d = out->data + out->len;
    for (size_t i = 0; i < len; i++) {
        int hi = text[i] == '%' && i + 2 < len ? kp_hex_digit(text[i + 1]) : -1;
        int lo = hi >= 0 ? kp_hex_digit(text[i + 2]) : -1;
        if (lo >= 0) {
            *d++ = (char)(hi << 4 | lo);
            i += 2;
        } else {
            *d++ = text[i];
        }
    }
    out->len = (size_t)(d - out->data);
    return KP_OK;
}

#include "kp/json.h"

#include <math.h>
#include <stdio.h>

/* The length of the valid UTF-8 sequence at `p` (RFC 3629: no overlong
 * forms, no surrogates, nothing over U+10FFFF), or 0 when there is none. */
static size_t utf8_sequence(const unsigned char *p, size_t avail)
{
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    size_t n;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        n = 2;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        if (p[0] == 0xe0)
            lo = 0xa0; /* overlong below U+0800 */
        if (p[0] == 0xed)
            hi = 0x9f; /* surrogates U+D800..U+DFFF */
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        if (p[0] == 0xf0)
            lo = 0x90; /* overlong below U+10000 */
        if (p[0] == 0xf4)
            hi = 0x8f; /* over U+10FFFF */
    } else {
        return 0;
    }
    if (avail < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < n; k++)
        if ((p[k] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* The escape for ASCII byte `c` into `esc` (NUL-terminated), or NULL when
 * `c` passes through. */
static const char *ascii_escape(unsigned char c, char esc[7])
{
    static const char hex[] = "0123456789abcdef";
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
    }
    if (c >= 0x20 && c != 0x7f)
        return NULL;
    esc[0] = '\\';
    esc[1] = 'u';
    esc[2] = '0';
    esc[3] = '0';
    esc[4] = hex[c >> 4];
    esc[5] = hex[c & 15];
    esc[6] = '\0';
    return esc;
}

kp_status kp_json_string(kp_buf *out, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    const size_t start = out->len;
    size_t run = 0; /* first byte not yet appended */
    size_t i = 0;
    kp_status st = kp_buf_append_char(out, '"');
    while (st == KP_OK && i < len) {
        char buf[7];
        const char *esc = NULL;
        size_t n = 1;
        if (p[i] < 0x80)
            esc = ascii_escape(p[i], buf);
        else if ((n = utf8_sequence(p + i, len - i)) == 0)
            esc = "\\ufffd";
        if (!esc) {
            i += n;
            continue;
        }
        /* bytes that pass through are appended by runs, not one by one */
        st = kp_buf_append(out, s + run, i - run);
        if (st == KP_OK)
            st = kp_buf_append_str(out, esc);
        run = ++i;
    }
    if (st == KP_OK)
        st = kp_buf_append(out, s + run, len - run);
    if (st == KP_OK)
        st = kp_buf_append_char(out, '"');
    if (st != KP_OK)
        out->len = start;
    return st;
}

kp_status kp_json_double(kp_buf *out, double v)
{
    if (!isfinite(v))
        return kp_buf_append_str(out, "null");
    /* %.3f of DBL_MAX is 309 digits, a sign, a radix character (up to a few
     * bytes in some locales) and 3 decimals */
    char text[400];
    int n = snprintf(text, sizeof text, "%.3f", v);
    if (n < 0 || (size_t)n >= sizeof text)
        return KP_ERR_INVAL; /* not reached: the size covers every double */
    /* Rewrite in place: the locale's radix character (whatever its bytes)
     * becomes '.', the decimals lose their trailing zeros. */
    size_t len = 0, dot = 0;
    for (int i = 0; i < n; i++) {
        char c = text[i];
        if (c == '-' || (c >= '0' && c <= '9'))
            text[len++] = c;
        else if (!dot)
            text[dot = len++] = '.';
    }
    if (dot) {
        while (text[len - 1] == '0')
            len--;
        if (len - 1 == dot)
            len--;
    }
    if (len == 2 && text[0] == '-' && text[1] == '0')
        return kp_buf_append_char(out, '0'); /* -0.0001 rounds to 0, not -0 */
    return kp_buf_append(out, text, len);
}

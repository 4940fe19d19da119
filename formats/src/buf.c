#include "kp/buf.h"

#include <string.h>

#include "kp/alloc.h"

kp_status kp_buf_reserve(kp_buf *buf, size_t extra)
{
    if (buf->cap - buf->len >= extra)
        return KP_OK;
    if (extra > SIZE_MAX / 2 - buf->len)
        return KP_ERR_NOMEM;
    size_t need = buf->len + extra;
    size_t cap = buf->cap ? buf->cap : 256;
    while (cap < need)
        cap *= 2;
    char *data = kp_realloc(buf->data, cap);
    if (!data)
        return KP_ERR_NOMEM;
    buf->data = data;
    buf->cap = cap;
    return KP_OK;
}

kp_status kp_buf_append(kp_buf *buf, const void *data, size_t len)
{
    kp_status st = kp_buf_reserve(buf, len);
    if (st != KP_OK)
        return st;
    if (len)
        memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    return KP_OK;
}

kp_status kp_buf_append_str(kp_buf *buf, const char *str)
{
    return kp_buf_append(buf, str, strlen(str));
}

kp_status kp_buf_append_char(kp_buf *buf, char c)
{
    return kp_buf_append(buf, &c, 1);
}

kp_status kp_buf_append_u64(kp_buf *buf, uint64_t value)
{
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    return kp_buf_append(buf, tmp + i, sizeof tmp - i);
}

kp_status kp_buf_append_i64(kp_buf *buf, int64_t value)
{
    if (value >= 0)
        return kp_buf_append_u64(buf, (uint64_t)value);
    kp_status st = kp_buf_reserve(buf, 21);
    if (st != KP_OK)
        return st;
    buf->data[buf->len++] = '-';
    /* negate in unsigned arithmetic: -INT64_MIN overflows int64_t */
    return kp_buf_append_u64(buf, 0 - (uint64_t)value);
}

kp_status kp_buf_append_hex(kp_buf *buf, uint64_t value)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = digits[value & 15];
        value >>= 4;
    } while (value);
    return kp_buf_append(buf, tmp + i, sizeof tmp - i);
}

void kp_buf_clear(kp_buf *buf)
{
    buf->len = 0;
}

void kp_buf_free(kp_buf *buf)
{
    kp_free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

#include "kp/protobuf.h"

kp_status kp_pb_varint(kp_buf *b, uint64_t v)
{
    unsigned char t[10];
    size_t n = 0;
    do {
        t[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v)
            t[n] |= 0x80;
        n++;
    } while (v);
    return kp_buf_append(b, t, n);
}

kp_status kp_pb_field_varint(kp_buf *b, unsigned field, uint64_t v)
{
    kp_status st = kp_pb_varint(b, (uint64_t)field << 3);
    return st == KP_OK ? kp_pb_varint(b, v) : st;
}

kp_status kp_pb_field_fixed64(kp_buf *b, unsigned field, uint64_t v)
{
    unsigned char t[8];
    for (int k = 0; k < 8; k++)
        t[k] = (unsigned char)(v >> (8 * k)); /* little-endian, whatever the host */
    kp_status st = kp_pb_varint(b, (uint64_t)field << 3 | 1);
    return st == KP_OK ? kp_buf_append(b, t, sizeof t) : st;
}

kp_status kp_pb_field_bytes(kp_buf *b, unsigned field, const void *data, size_t len)
{
    kp_status st = kp_pb_varint(b, (uint64_t)field << 3 | 2);
    if (st == KP_OK)
        st = kp_pb_varint(b, len);
    return st == KP_OK && len ? kp_buf_append(b, data, len) : st;
}

kp_status kp_pb_field_packed_u32(kp_buf *b, unsigned field, const uint32_t *v, size_t n)
{
    if (!n)
        return KP_OK;
    size_t len = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t x = v[k];
        do {
            len++;
            x >>= 7;
        } while (x);
    }
    kp_status st = kp_pb_varint(b, (uint64_t)field << 3 | 2);
    if (st == KP_OK)
        st = kp_pb_varint(b, len);
    for (size_t k = 0; k < n && st == KP_OK; k++)
        st = kp_pb_varint(b, v[k]);
    return st;
}

/* The protocol buffer wire format, as far as kprof's encoders need it
 * (pprof's profile, OTLP's profiles): varints, fixed 64-bit fields,
 * length-delimited fields and packed repeated varints. Each call appends
 * to `b` and returns KP_OK or KP_ERR_NOMEM (`b` may then hold part of the
 * field; the caller discards the buffer). Field numbers are those of the
 * .proto the caller encodes; a field of value 0 is the caller's to leave
 * out (proto3 reads a missing field as 0). */
#ifndef KP_PROTOBUF_H
#define KP_PROTOBUF_H

#include <stddef.h>
#include <stdint.h>

#include "kp/buf.h"
#include "kp/status.h"

/* A bare varint (no tag). */
kp_status kp_pb_varint(kp_buf *b, uint64_t v);
/* Field `field` of wire type 0: int32, int64, uint32, uint64, bool, enum.
 * A negative int32 or int64 is passed as (uint64_t)(int64_t)v, as protobuf
 * encodes it (ten bytes). */
kp_status kp_pb_field_varint(kp_buf *b, unsigned field, uint64_t v);
/* Field `field` of wire type 1: fixed64, sfixed64. */
kp_status kp_pb_field_fixed64(kp_buf *b, unsigned field, uint64_t v);
/* Field `field` of wire type 2: bytes, string, an embedded message (its
 * encoding in `data`), or a packed repeated field (its varints). */
kp_status kp_pb_field_bytes(kp_buf *b, unsigned field, const void *data, size_t len);
/* A packed repeated int32/uint32 field of `n` values; nothing when n is 0. */
kp_status kp_pb_field_packed_u32(kp_buf *b, unsigned field, const uint32_t *v, size_t n);

#endif

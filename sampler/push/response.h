/* What an OTLP backend answers, decoded without libcurl's help so that it
 * can be unit-tested and fuzzed: the protobuf replies, the gRPC status
 * headers, Retry-After, and the outcome each status means. */
#ifndef KP_PUSH_RESPONSE_H
#define KP_PUSH_RESPONSE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef enum { KP_SEND_OK, KP_SEND_RETRY, KP_SEND_REJECTED } kp_send_outcome;

/* What an HTTP status means for an OTLP/HTTP export: 2xx OK; 429, 502,
 * 503, 504 RETRY (the OTLP spec's retryable codes); anything else
 * REJECTED. */
kp_send_outcome kp_push_http_outcome(long status);

/* What a gRPC status code means: 0 OK; CANCELLED, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS RETRY;
 * anything else REJECTED. */
kp_send_outcome kp_push_grpc_outcome(long code);

/* The name of a gRPC status code ("UNAVAILABLE"), or "UNKNOWN". */
const char *kp_push_grpc_code_name(long code);

/* Decodes an ExportProfilesServiceResponse: partial_success (1) {
 * rejected_profiles (1), error_message (2) }. Sets `*rejected` (0 when
 * absent) and `msg` (sanitized, "" when absent). Returns 0, or -1 when the
 * bytes are not such a message (then `*rejected` is 0 and `msg` ""). */
int kp_push_decode_export_response(const uint8_t *p, size_t n, int64_t *rejected, char *msg,
                                   size_t cap);

/* Decodes a google.rpc.Status: code (1), message (2), details (3, Any);
 * a google.rpc.RetryInfo among the details sets `*retry_ms` (left as is
 * when there is none). Returns 0, or -1 when malformed (outputs then
 * unreliable, `msg` still a string). */
int kp_push_decode_status(const uint8_t *p, size_t n, long *code, char *msg, size_t cap,
                          long *retry_ms);

/* A Retry-After value: delta-seconds or an HTTP-date, relative to `now`.
 * Returns milliseconds (0 for a date past), or -1 when malformed. */
long kp_push_parse_retry_after(const char *value, time_t now);

/* Decodes base64 (standard or URL alphabet, padding optional: gRPC's
 * -bin headers) into `out`. Returns the decoded length, or -1 when
 * malformed or longer than `cap`. */
long kp_push_base64_decode(const char *s, size_t n, uint8_t *out, size_t cap);

/* Copies `n` bytes of `src` into `dst` as one printable ASCII line:
 * percent escapes decoded when `percent` (grpc-message), whitespace runs
 * made one space, other bytes '?', trimmed, cut to `cap` with "...". */
void kp_push_sanitize(char *dst, size_t cap, const char *src, size_t n, int percent);

#endif

/* One OTLP export over libcurl: HTTP/1.1 or HTTP/2 (ALPN) for
 * http/protobuf, HTTP/2 for gRPC (h2c with prior knowledge on http://),
 * TLS with the system's or a given CA, mTLS, gzip. A transport keeps one
 * connection open between exports. Not thread-safe: one thread sends. */
#ifndef KP_PUSH_TRANSPORT_H
#define KP_PUSH_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "push/config.h"
#include "push/response.h"

typedef struct kp_push_transport kp_push_transport;

typedef struct {
    kp_send_outcome outcome;
    /* from Retry-After (seconds or HTTP-date) or gRPC RetryInfo; -1: none */
    long retry_after_ms;
    /* the HTTP status, or with status_is_grpc the gRPC status code; 0 when
     * no answer came (then `message` is curl's) */
    long status;
    int status_is_grpc;
    /* ExportProfilesPartialSuccess.rejected_profiles, 0 when none */
    int64_t rejected;
    /* one printable ASCII line: the server's words (partial success
     * error_message, google.rpc.Status message, grpc-message, or the start
     * of a text body), or why no answer came; "" when none */
    char message[512];
} kp_send_result;

/* Prepares sending to c->endpoint as c says (copied: `c` may be freed
 * after). Calls curl_global_init once per process. Returns the transport,
 * or NULL with one line in `err`. */
kp_push_transport *kp_push_transport_create(const kp_push_config *c, char *err, size_t err_len);

/* Sends `len` bytes of `body`, an encoded ExportProfilesServiceRequest
 * (compressed here when the config says gzip), and waits at most the
 * config's timeout_ms. Connection failures and timeouts are RETRY with
 * curl's message; a certificate that cannot be verified says which
 * setting gives the CA. */
kp_send_result kp_push_transport_send(kp_push_transport *t, const void *body, size_t len);

/* While a send runs, `cancel(ctx)` is asked about once a second and more
 * often; when it returns nonzero, the send ends as RETRY ("cancelled").
 * NULL: never. For a bounded drain at exit. */
void kp_push_transport_set_cancel(kp_push_transport *t, int (*cancel)(void *ctx), void *ctx);

/* Closes the connection and frees; NULL is fine. */
void kp_push_transport_free(kp_push_transport *t);

#endif

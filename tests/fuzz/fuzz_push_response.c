/* Fuzz target: what an OTLP backend may answer kprof push
 * (sampler/push/response.c), any bytes as an ExportProfilesServiceResponse,
 * a google.rpc.Status, a Retry-After value, a grpc-status-details-bin
 * (base64 of a Status) and a grpc-message. Every decoder stays within its
 * input and leaves one printable line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "push/response.h"

static void check_line(const char *s, size_t cap)
{
    size_t n = strlen(s);
    FUZZ_CHECK(n < cap);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(s[i] >= 0x20 && s[i] < 0x7f);
    FUZZ_CHECK(n == 0 || (s[0] != ' ' && s[n - 1] != ' '));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[64];
    int64_t rejected = -7;
    int rc = kp_push_decode_export_response(data, size, &rejected, msg, sizeof msg);
    check_line(msg, sizeof msg);
    FUZZ_CHECK(rc == 0 || (rejected == 0 && msg[0] == '\0'));

    long code = 0, retry = -1;
    kp_push_decode_status(data, size, &code, msg, sizeof msg, &retry);
    check_line(msg, sizeof msg);
    FUZZ_CHECK(retry >= -1 && retry <= 86400000L);

    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    long ms = kp_push_parse_retry_after(text, 1700000000);
    FUZZ_CHECK(ms >= -1 && ms <= 86400000L);

    uint8_t bin[256];
    long n = kp_push_base64_decode(text, size, bin, sizeof bin);
    FUZZ_CHECK(n >= -1 && n <= (long)sizeof bin && (n < 0 || (size_t)n <= size));
    if (n > 0) {
        kp_push_decode_status(bin, (size_t)n, &code, msg, sizeof msg, &retry);
        check_line(msg, sizeof msg);
    }
    kp_push_sanitize(msg, sizeof msg, text, size, 1);
    check_line(msg, sizeof msg);
    kp_push_sanitize(msg, 1 + size % 8, text, size, 0);
    check_line(msg, 1 + size % 8);
    free(text);
    return 0;
}

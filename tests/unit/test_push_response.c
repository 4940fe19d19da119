/* Decoding OTLP replies (sampler/push/response.c): partial successes,
 * google.rpc.Status with RetryInfo, Retry-After, base64, the outcome of
 * each status, and messages made one printable line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "push/response.h"

static void outcomes(void **state)
{
    (void)state;
    assert_int_equal(kp_push_http_outcome(200), KP_SEND_OK);
    assert_int_equal(kp_push_http_outcome(204), KP_SEND_OK);
    for (long s = 0; s < 1000; s++) {
        kp_send_outcome o = kp_push_http_outcome(s);
        int retry = s == 429 || s == 502 || s == 503 || s == 504;
        assert_int_equal(o, s >= 200 && s < 300 ? KP_SEND_OK
                            : retry             ? KP_SEND_RETRY
                                                : KP_SEND_REJECTED);
    }
    const long retry[] = {1, 4, 8, 10, 11, 14, 15};
    const long reject[] = {2, 3, 5, 6, 7, 9, 12, 13, 16, 17, -1};
    assert_int_equal(kp_push_grpc_outcome(0), KP_SEND_OK);
    for (size_t i = 0; i < sizeof retry / sizeof retry[0]; i++)
        assert_int_equal(kp_push_grpc_outcome(retry[i]), KP_SEND_RETRY);
    for (size_t i = 0; i < sizeof reject / sizeof reject[0]; i++)
        assert_int_equal(kp_push_grpc_outcome(reject[i]), KP_SEND_REJECTED);
    assert_string_equal(kp_push_grpc_code_name(14), "UNAVAILABLE");
    assert_string_equal(kp_push_grpc_code_name(16), "UNAUTHENTICATED");
    assert_string_equal(kp_push_grpc_code_name(99), "UNKNOWN");
}

static void partial_success(void **state)
{
    (void)state;
    /* an unknown field 7 first, then partial_success { rejected 3, "bad ids" } */
    const uint8_t msg[] = {0x38, 0x01, 0x0a, 0x0b, 0x08, 0x03, 0x12, 0x07,
                           'b',  'a',  'd',  ' ',  'i',  'd',  's'};
    int64_t rejected;
    char text[64];
    assert_int_equal(kp_push_decode_export_response(msg, sizeof msg, &rejected, text, sizeof text),
                     0);
    assert_int_equal(rejected, 3);
    assert_string_equal(text, "bad ids");
    assert_int_equal(kp_push_decode_export_response(msg, 0, &rejected, text, sizeof text), 0);
    assert_int_equal(rejected, 0);
    assert_string_equal(text, "");
    /* every cut of the message is either whole or refused, never read past */
    for (size_t n = 1; n < sizeof msg; n++) {
        uint8_t *copy = malloc(n);
        memcpy(copy, msg, n);
        int rc = kp_push_decode_export_response(copy, n, &rejected, text, sizeof text);
        assert_true(rc == 0 || (rc == -1 && rejected == 0 && text[0] == '\0'));
        free(copy);
    }
    const uint8_t group[] = {0x0b};
    assert_int_equal(kp_push_decode_export_response(group, 1, &rejected, text, sizeof text), -1);
}

static void status_with_retry_info(void **state)
{
    (void)state;
    static const char type[] = "type.googleapis.com/google.rpc.RetryInfo";
    uint8_t any[128], msg[256];
    size_t a = 0, m = 0;
    any[a++] = 0x0a;
    any[a++] = (uint8_t)(sizeof type - 1);
    memcpy(any + a, type, sizeof type - 1);
    a += sizeof type - 1;
    /* value: RetryInfo { retry_delay { seconds 2, nanos 500000000 } } */
    const uint8_t value[] = {0x12, 0x0a, 0x0a, 0x08, 0x08, 0x02,
                             0x10, 0x80, 0xca, 0xb5, 0xee, 0x01};
    memcpy(any + a, value, sizeof value);
    a += sizeof value;
    msg[m++] = 0x08;
    msg[m++] = 14;
    msg[m++] = 0x12;
    msg[m++] = 4;
    memcpy(msg + m, "busy", 4);
    m += 4;
    msg[m++] = 0x1a;
    msg[m++] = (uint8_t)a;
    memcpy(msg + m, any, a);
    m += a;
    long code = 0, retry = -1;
    char text[64];
    assert_int_equal(kp_push_decode_status(msg, m, &code, text, sizeof text, &retry), 0);
    assert_int_equal(code, 14);
    assert_string_equal(text, "busy");
    assert_int_equal(retry, 2500);
    for (size_t n = 0; n < m; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, msg, n);
        kp_push_decode_status(copy, n, &code, text, sizeof text, &retry);
        assert_true(strlen(text) < sizeof text);
        free(copy);
    }
}

static void retry_after(void **state)
{
    (void)state;
    time_t now = 1700000000; /* Tue, 14 Nov 2023 22:13:20 GMT */
    assert_int_equal(kp_push_parse_retry_after("1", now), 1000);
    assert_int_equal(kp_push_parse_retry_after(" 120 ", now), 120000);
    assert_int_equal(kp_push_parse_retry_after("99999999999999999999", now), 86400000);
    assert_int_equal(kp_push_parse_retry_after("Tue, 14 Nov 2023 22:13:50 GMT", now), 30000);
    assert_int_equal(kp_push_parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now), 0);
    assert_int_equal(kp_push_parse_retry_after("soon", now), -1);
    assert_int_equal(kp_push_parse_retry_after("5s", now), -1);
    assert_int_equal(kp_push_parse_retry_after("", now), -1);
}

static void base64(void **state)
{
    (void)state;
    uint8_t out[16];
    assert_int_equal(kp_push_base64_decode("aGVsbG8=", 8, out, sizeof out), 5);
    assert_memory_equal(out, "hello", 5);
    assert_int_equal(kp_push_base64_decode("aGVsbG8", 7, out, sizeof out), 5);
    assert_int_equal(kp_push_base64_decode("-_-_", 4, out, sizeof out), 3);
    assert_int_equal(out[0], 0xfb);
    assert_int_equal(kp_push_base64_decode("a", 1, out, sizeof out), -1);
    assert_int_equal(kp_push_base64_decode("a*==", 4, out, sizeof out), -1);
    assert_int_equal(kp_push_base64_decode("aGVsbG8=", 8, out, 4), -1);
    assert_int_equal(kp_push_base64_decode("", 0, out, sizeof out), 0);
}

static void sanitize(void **state)
{
    (void)state;
    char out[16];
    kp_push_sanitize(out, sizeof out, "  a\r\n\tb\x01\xc3\xa9 ", 11, 0);
    assert_string_equal(out, "a b???");
    kp_push_sanitize(out, sizeof out, "bad%20request%0A%zz", 19, 1);
    assert_string_equal(out, "bad request %zz");
    kp_push_sanitize(out, sizeof out, "0123456789abcdefghij", 20, 0);
    assert_string_equal(out, "0123456789ab...");
    kp_push_sanitize(out, 2, "abc", 3, 0);
    assert_string_equal(out, "a");
    kp_push_sanitize(out, sizeof out, "", 0, 0);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(outcomes),
        cmocka_unit_test(partial_success),
        cmocka_unit_test(status_with_retry_info),
        cmocka_unit_test(retry_after),
        cmocka_unit_test(base64),
        cmocka_unit_test(sanitize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

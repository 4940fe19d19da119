/* kprof push's transport and sender against a real HTTP server on
 * loopback (tests/support/push_stub_server.py, python3's http.server):
 * outcomes of each answer, Retry-After honoured, gzip bodies that arrive
 * whole, a rejected window logged once and not retried, the drain's
 * deadline, the oldest windows dropped. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "common/clock.h"
#include "push/sender.h"
#include "push/transport.h"

static pid_t server_pid;
static int server_stdin = -1;
static int port;

/* Starts `script` with `python`; 0 with `port` set, 77 when it exited at once saying it
 * cannot run (python3-h2 missing), -1 on failure. */
static int spawn(const char *python, const char *script)
{
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
        return -1;
    server_pid = fork();
    if (server_pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execlp(python, python, script, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    server_stdin = in[1];
    char line[32] = "";
    FILE *f = fdopen(out[0], "r");
    int got = f && fgets(line, sizeof line, f);
    if (f)
        fclose(f);
    if (!got) {
        int status = 0;
        close(server_stdin);
        waitpid(server_pid, &status, 0);
        return WIFEXITED(status) && WEXITSTATUS(status) == 77 ? 77 : -1;
    }
    port = atoi(line);
    return port > 0 ? 0 : -1;
}

static int start_server(void **state)
{
    (void)state;
    return spawn("python3", KP_PUSH_STUB_SERVER);
}

static int grpc_server_missing;

static int start_grpc_server(void **state)
{
    (void)state;
    /* Debian's python3, where the python3-h2 package installs, even when
     * another python3 comes first in PATH */
    int rc = spawn(access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3",
                   KP_PUSH_GRPC_STUB_SERVER);
    grpc_server_missing = rc == 77;
    return rc == 77 ? 0 : rc;
}

static int stop_server(void **state)
{
    (void)state;
    if (grpc_server_missing)
        return 0;
    close(server_stdin); /* the server exits when its stdin closes */
    kill(server_pid, SIGTERM);
    waitpid(server_pid, NULL, 0);
    return 0;
}

static void config(kp_push_config *c, const char *scenario, int gzip, unsigned timeout_ms)
{
    memset(c, 0, sizeof *c);
    char url[128], err[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/%s/v1development/profiles", port, scenario);
    c->timeout_ms = timeout_ms;
    c->gzip = gzip;
    assert_int_equal(kp_push_config_set_endpoint(c, url, 0, "test", err, sizeof err), 0);
    if (gzip)
        assert_int_equal(kp_push_config_parse_list(c, "X-Test-Gzip=1", 1, "test", err, sizeof err),
                         0);
}

/* A body the server checks: its length, big-endian, then a pattern. */
static uint8_t *body(size_t n)
{
    uint8_t *b = malloc(n);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 31 + 7);
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(n >> (24 - 8 * i));
    return b;
}

static kp_send_result send_once(const char *scenario, int gzip, size_t len, unsigned timeout_ms)
{
    kp_push_config c;
    char err[256];
    config(&c, scenario, gzip, timeout_ms);
    kp_push_transport *t = kp_push_transport_create(&c, err, sizeof err);
    kp_push_config_free(&c);
    assert_non_null(t);
    uint8_t *b = body(len);
    kp_send_result r = kp_push_transport_send(t, b, len);
    free(b);
    kp_push_transport_free(t);
    return r;
}

static long server_count(const char *scenario)
{
    char url[128], text[32] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/count/%s", port, scenario);
    FILE *f = fmemopen(text, sizeof text - 1, "w");
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_cleanup(h);
    fclose(f);
    return atol(text);
}

static void outcomes(void **state)
{
    (void)state;
    kp_send_result r = send_once("ok", 0, 1000, 5000);
    if (r.outcome != KP_SEND_OK)
        fail_msg("ok: %d %ld %s", r.outcome, r.status, r.message);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.rejected, 0);

    r = send_once("bad", 0, 100, 5000);
    assert_int_equal(r.outcome, KP_SEND_REJECTED);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.message, "profile has no samples");

    r = send_once("status", 0, 100, 5000);
    assert_int_equal(r.outcome, KP_SEND_REJECTED);
    assert_string_equal(r.message, "invalid profile");

    r = send_once("partial", 0, 100, 5000);
    assert_int_equal(r.outcome, KP_SEND_OK);
    assert_int_equal(r.rejected, 2);
    assert_string_equal(r.message, "2 profiles had no samples");

    r = send_once("redirect", 0, 100, 5000);
    assert_int_equal(r.outcome, KP_SEND_REJECTED);
    assert_non_null(strstr(r.message, "redirected to http://127.0.0.1"));

    r = send_once("unavailable", 0, 100, 5000);
    assert_int_equal(r.outcome, KP_SEND_RETRY);
    assert_int_equal(r.retry_after_ms, -1);
}

static void gzip_and_size(void **state)
{
    (void)state;
    const size_t sizes[] = {4, 1000, 3u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int gzip = 0; gzip <= 1; gzip++) {
            kp_send_result r = send_once("ok", gzip, sizes[i], 10000);
            if (r.outcome != KP_SEND_OK)
                fail_msg("%zu bytes, gzip %d: %ld %s", sizes[i], gzip, r.status, r.message);
        }
    }
}

static void retry_after_and_connection(void **state)
{
    (void)state;
    kp_push_config c;
    char err[256];
    config(&c, "retry-t", 1, 5000);
    kp_push_transport *t = kp_push_transport_create(&c, err, sizeof err);
    assert_non_null(t);
    uint8_t *b = body(500);
    kp_send_result r = kp_push_transport_send(t, b, 500);
    assert_int_equal(r.outcome, KP_SEND_RETRY);
    assert_int_equal(r.status, 503);
    assert_int_equal(r.retry_after_ms, 1000);
    assert_string_equal(r.message, "try later");
    r = kp_push_transport_send(t, b, 500); /* the same handle, its connection reused */
    assert_int_equal(r.outcome, KP_SEND_OK);
    kp_push_transport_free(t);
    kp_push_config_free(&c);

    /* a slow server: the export's timeout */
    r = send_once("slow", 0, 100, 300);
    assert_int_equal(r.outcome, KP_SEND_RETRY);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.message, "timed out"));

    /* nothing listening: a port just closed */
    int saved = port;
    port = 1;
    r = send_once("ok", 0, 100, 2000);
    port = saved;
    assert_int_equal(r.outcome, KP_SEND_RETRY);
    assert_int_equal(r.status, 0);
    assert_true(strlen(r.message) > 0);
    free(b);
}

/* stderr into a file while the sender runs, to count its lines */
static int saved_stderr = -1;
static char log_path[] = "/tmp/kp_push_logXXXXXX";

static void capture(void)
{
    fflush(stderr);
    int fd = mkstemp(log_path);
    assert_true(fd >= 0);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

static char *captured(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    FILE *f = fopen(log_path, "r");
    static char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(log_path);
    strcpy(log_path, "/tmp/kp_push_logXXXXXX");
    fputs(text, stderr); /* shown in the test's output as well */
    return text;
}

static int occurrences(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

static kp_push_sender *start(const char *scenario, size_t max_windows, uint64_t min_ms)
{
    kp_push_config c;
    char err[256];
    config(&c, scenario, 0, 5000);
    kp_push_limits l = kp_push_default_limits();
    l.max_windows = max_windows;
    l.backoff_min_ms = min_ms;
    l.backoff_max_ms = min_ms * 4;
    kp_push_sender *s = kp_push_sender_start(&c, &l, err, sizeof err);
    kp_push_config_free(&c);
    assert_non_null(s);
    return s;
}

static void put(kp_push_sender *s, uint64_t id)
{
    kp_push_window w = {body(200), 200, id, id + 1};
    kp_push_sender_put(s, &w);
    assert_null(w.data);
}

static void sender_rejected_once(void **state)
{
    (void)state;
    long before = server_count("bad");
    capture();
    kp_push_sender *s = start("bad", 10, 50);
    for (uint64_t i = 0; i < 3; i++)
        put(s, i);
    assert_int_equal(kp_push_sender_drain(s, 5000), 0);
    kp_push_stats st;
    kp_push_sender_stats(s, &st);
    kp_push_sender_free(s);
    char *log = captured();
    assert_int_equal(st.rejected, 3);
    assert_int_equal(st.sent, 0);
    assert_int_equal(st.retries, 0);
    assert_int_equal(server_count("bad") - before, 3); /* each once, none retried */
    assert_int_equal(occurrences(log, "rejected a window"), 1);
    assert_int_equal(occurrences(log, "\n"), 1);
    assert_non_null(strstr(log, "kprof: push: "));
    assert_non_null(strstr(log, "HTTP 400 (profile has no samples)"));
}

static void sender_retry_after(void **state)
{
    (void)state;
    capture();
    kp_push_sender *s = start("retry-s", 10, 50);
    int64_t t0 = kp_now_ns();
    put(s, 1);
    kp_push_stats st = {0};
    while (st.sent == 0 && kp_now_ns() - t0 < 10000000000LL) {
        nanosleep(&(struct timespec){0, 10000000}, NULL);
        kp_push_sender_stats(s, &st);
    }
    int64_t took_ms = (kp_now_ns() - t0) / 1000000;
    assert_int_equal(kp_push_sender_drain(s, 1000), 0);
    kp_push_sender_free(s);
    char *log = captured();
    assert_int_equal(st.sent, 1);
    assert_int_equal(st.retries, 1);
    assert_int_equal(st.backend_down, 0);
    /* Retry-After: 1 beats the 50 ms backoff */
    assert_true(took_ms >= 950);
    assert_true(took_ms < 5000);
    assert_int_equal(occurrences(log, "answers HTTP 503 (try later)"), 1);
    assert_int_equal(occurrences(log, "answers again after 1 s: 1 window waited"), 1);
    assert_int_equal(occurrences(log, "\n"), 2);
}

static void sender_drain_deadline_and_drops(void **state)
{
    (void)state;
    capture();
    kp_push_sender *s = start("unavailable", 2, 60000);
    for (uint64_t i = 0; i < 6; i++)
        put(s, i);
    int64_t t0 = kp_now_ns();
    size_t left = kp_push_sender_drain(s, 300);
    int64_t took_ms = (kp_now_ns() - t0) / 1000000;
    kp_push_stats st;
    kp_push_sender_stats(s, &st);
    put(s, 99); /* after the drain: dropped */
    kp_push_stats after;
    kp_push_sender_stats(s, &after);
    kp_push_sender_free(s);
    char *log = captured();
    assert_true(took_ms < 2000);
    assert_int_equal(left, 2);
    assert_int_equal(st.queued, 2);
    assert_int_equal(st.dropped, 4);
    assert_int_equal(after.dropped, 5);
    assert_int_equal(st.backend_down, 1);
    assert_true(st.retries >= 1);
    assert_int_equal(occurrences(log, "does not answer") + occurrences(log, "answers HTTP 503"), 1);
    assert_non_null(strstr(log, "oldest window"));
}

/* gRPC over h2c: framing, gzip, trailers, trailers-only answers,
 * grpc-status-details-bin's RetryInfo, and a second export on the same
 * transport */
static void grpc(void **state)
{
    (void)state;
    if (grpc_server_missing) {
        fprintf(stderr, "python3-h2 is not installed: the gRPC transport is not tested\n");
        skip();
    }
    const struct {
        const char *scenario;
        kp_send_outcome outcome;
        long status;
        long retry_ms;
        int64_t rejected;
        const char *message;
    } want[] = {
        {"ok", KP_SEND_OK, 0, -1, 2, "2 had no samples"},
        {"unavail", KP_SEND_RETRY, 14, 2500, 0, "busy"},
        {"invalid", KP_SEND_REJECTED, 3, -1, 0, "bad profile"},
        {"notrailers", KP_SEND_RETRY, 200, -1, 0, "the gRPC answer has no grpc-status"},
    };
    for (int gzip = 0; gzip <= 1; gzip++) {
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            kp_push_config c = {0};
            char url[128], err[256];
            c.timeout_ms = 5000;
            c.gzip = gzip;
            assert_int_equal(kp_push_config_set_protocol(&c, "grpc", "p", err, sizeof err), 0);
            snprintf(url, sizeof url, "http://127.0.0.1:%d/%s", port, want[i].scenario);
            assert_int_equal(kp_push_config_set_endpoint(&c, url, 0, "e", err, sizeof err), 0);
            kp_push_transport *t = kp_push_transport_create(&c, err, sizeof err);
            kp_push_config_free(&c);
            assert_non_null(t);
            uint8_t *b = body(100000);
            for (int rep = 0; rep < 2; rep++) {
                kp_send_result r = kp_push_transport_send(t, b, 100000);
                if (r.outcome != want[i].outcome || r.status != want[i].status ||
                    r.retry_after_ms != want[i].retry_ms || r.rejected != want[i].rejected ||
                    strncmp(r.message, want[i].message, strlen(want[i].message)) != 0)
                    fail_msg("%s gzip %d: outcome %d status %ld retry %ld rejected %lld '%s'",
                             want[i].scenario, gzip, r.outcome, r.status, r.retry_after_ms,
                             (long long)r.rejected, r.message);
            }
            free(b);
            kp_push_transport_free(t);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(outcomes),
        cmocka_unit_test(gzip_and_size),
        cmocka_unit_test(retry_after_and_connection),
        cmocka_unit_test(sender_rejected_once),
        cmocka_unit_test(sender_retry_after),
        cmocka_unit_test(sender_drain_deadline_and_drops),
    };
    const struct CMUnitTest grpc_tests[] = {cmocka_unit_test(grpc)};
    int failed = cmocka_run_group_tests(tests, start_server, stop_server);
    return failed + cmocka_run_group_tests(grpc_tests, start_grpc_server, stop_server);
}

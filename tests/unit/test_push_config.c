/* kprof push's settings (sampler/push/config.c, lists.c): the OTLP
 * exporter variables, signal-specific over generic, endpoint resolution,
 * defaults, header and resource lists, headers files, and errors that name
 * the variable but never a header's value. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "push/config.h"

/* A fake environment: NULL-terminated name, value pairs. */
static const char *lookup(const char *name, void *ctx)
{
    const char *const *env = ctx;
    for (size_t i = 0; env[i]; i += 2)
        if (strcmp(env[i], name) == 0)
            return env[i + 1];
    return NULL;
}

static int load(kp_push_config *c, const char *const *env, char *err)
{
    return kp_push_config_from_env(c, lookup, (void *)env, err, 256);
}

static void defaults(void **state)
{
    (void)state;
    const char *env[] = {NULL};
    kp_push_config c;
    char err[256];
    assert_int_equal(load(&c, env, err), 0);
    assert_string_equal(c.endpoint, "http://localhost:4318/v1development/profiles");
    assert_int_equal(c.protocol, KP_OTLP_HTTP_PROTOBUF);
    assert_int_equal(c.gzip, 0);
    assert_int_equal(c.timeout_ms, 10000);
    assert_null(c.ca_file);
    assert_null(c.service_name);
    assert_int_equal(c.n_headers, 0);
    assert_int_equal(kp_push_config_set_protocol(&c, "grpc", "--protocol", err, sizeof err), 0);
    assert_string_equal(c.endpoint, "http://localhost:4317");
    kp_push_config_free(&c);
    kp_push_config_free(&c); /* zeroed: safe again */
}

static void endpoint_resolution(void **state)
{
    (void)state;
    char err[256];
    kp_push_config c;
    const char *base[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example:4318", NULL};
    assert_int_equal(load(&c, base, err), 0);
    assert_string_equal(c.endpoint, "https://otel.example:4318/v1development/profiles");
    /* gRPC takes the base as it is */
    assert_int_equal(kp_push_config_set_protocol(&c, "grpc", "--protocol", err, sizeof err), 0);
    assert_string_equal(c.endpoint, "https://otel.example:4318");
    kp_push_config_free(&c);

    const char *slash[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318/prefix/", NULL};
    assert_int_equal(load(&c, slash, err), 0);
    assert_string_equal(c.endpoint, "http://h:4318/prefix/v1development/profiles");
    kp_push_config_free(&c);

    /* the signal-specific endpoint wins, as is */
    const char *both[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318",
                          "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "http://special:9999/ingest",
                          NULL};
    assert_int_equal(load(&c, both, err), 0);
    assert_string_equal(c.endpoint, "http://special:9999/ingest");
    /* --endpoint behaves the same */
    assert_int_equal(
        kp_push_config_set_endpoint(&c, "https://cli:4318/x", 0, "--endpoint", err, sizeof err), 0);
    assert_string_equal(c.endpoint, "https://cli:4318/x");
    kp_push_config_free(&c);

    /* gRPC without a scheme: TLS unless INSECURE */
    const char *grpc[] = {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT",
                          "collector:4317", NULL};
    assert_int_equal(load(&c, grpc, err), 0);
    assert_string_equal(c.endpoint, "https://collector:4317");
    kp_push_config_free(&c);
    const char *grpc_plain[] = {"OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL",
                                "grpc",
                                "OTEL_EXPORTER_OTLP_INSECURE",
                                "TRUE",
                                "OTEL_EXPORTER_OTLP_ENDPOINT",
                                "collector:4317/",
                                NULL};
    assert_int_equal(load(&c, grpc_plain, err), 0);
    assert_string_equal(c.endpoint, "http://collector:4317");
    kp_push_config_free(&c);

    /* HTTP needs a scheme; no spaces; a host */
    const char *bad[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", NULL};
    assert_int_equal(load(&c, bad, err), -1);
    assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_ENDPOINT"));
    assert_non_null(strstr(err, "http://"));
    assert_null(c.endpoint);
    const char *space[] = {"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "http://a b", NULL};
    assert_int_equal(load(&c, space, err), -1);
    assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"));
    const char *nohost[] = {"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "https:///x", NULL};
    assert_int_equal(load(&c, nohost, err), -1);
    assert_non_null(strstr(err, "no host"));
    /* credentials in a URL stay out of errors */
    const char *cred[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://user:s3cret@h/", NULL};
    assert_int_equal(load(&c, cred, err), -1);
    assert_null(strstr(err, "s3cret"));
    /* empty counts as unset */
    const char *empty[] = {"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "",
                           "OTEL_EXPORTER_OTLP_ENDPOINT", "http://g:1", NULL};
    assert_int_equal(load(&c, empty, err), 0);
    assert_string_equal(c.endpoint, "http://g:1/v1development/profiles");
    kp_push_config_free(&c);
}

static void settings(void **state)
{
    (void)state;
    char err[256];
    kp_push_config c;
    const char *env[] = {"OTEL_EXPORTER_OTLP_COMPRESSION",
                         "none",
                         "OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION",
                         "gzip",
                         "OTEL_EXPORTER_OTLP_TIMEOUT",
                         "2500",
                         "OTEL_SERVICE_NAME",
                         "shop",
                         "OTEL_RESOURCE_ATTRIBUTES",
                         " deployment.environment = prod , host.name=a%2Cb,service.version=1.2 ",
                         NULL};
    assert_int_equal(load(&c, env, err), 0);
    assert_int_equal(c.gzip, 1);
    assert_int_equal(c.timeout_ms, 2500);
    assert_string_equal(c.service_name, "shop");
    assert_int_equal(c.n_resource, 3);
    assert_string_equal(c.resource[0].key, "deployment.environment");
    assert_string_equal(c.resource[0].value, "prod");
    assert_string_equal(c.resource[1].value, "a,b");
    assert_string_equal(c.resource[2].key, "service.version");
    kp_push_config_free(&c);

    const char *json[] = {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", NULL};
    assert_int_equal(load(&c, json, err), -1);
    assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_PROTOCOL"));
    assert_non_null(strstr(err, "http/protobuf"));
    const char *proto[] = {"OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL", "udp", NULL};
    assert_int_equal(load(&c, proto, err), -1);
    assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL"));
    const char *zstd[] = {"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", NULL};
    assert_int_equal(load(&c, zstd, err), -1);
    assert_non_null(strstr(err, "gzip or none"));
    const char *timeout[] = {"OTEL_EXPORTER_OTLP_TIMEOUT", "10s", NULL};
    assert_int_equal(load(&c, timeout, err), -1);
    assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_TIMEOUT"));
    const char *zero[] = {"OTEL_EXPORTER_OTLP_TIMEOUT", "0", NULL};
    assert_int_equal(load(&c, zero, err), -1);
    const char *insecure[] = {"OTEL_EXPORTER_OTLP_INSECURE", "yes", NULL};
    assert_int_equal(load(&c, insecure, err), -1);
    const char *cert[] = {"OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", NULL};
    assert_int_equal(load(&c, cert, err), -1);
    assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_CERTIFICATE"));
    assert_non_null(strstr(err, "/nonexistent/ca.pem"));
    const char *attr[] = {"OTEL_RESOURCE_ATTRIBUTES", "a=1,novalue", NULL};
    assert_int_equal(load(&c, attr, err), -1);
    assert_non_null(strstr(err, "OTEL_RESOURCE_ATTRIBUTES"));
    assert_null(c.endpoint);
}

static void headers_from_env(void **state)
{
    (void)state;
    char err[256];
    kp_push_config c;
    const char *env[] = {"OTEL_EXPORTER_OTLP_HEADERS", "x-generic=1",
                         "OTEL_EXPORTER_OTLP_PROFILES_HEADERS",
                         "Authorization=Basic%20dXNlcjpwYXNz , X-Scope-OrgID=tenant-1,,", NULL};
    assert_int_equal(load(&c, env, err), 0);
    assert_int_equal(c.n_headers, 2); /* the signal-specific list replaces the generic one */
    assert_string_equal(c.headers[0].name, "Authorization");
    assert_string_equal(c.headers[0].value, "Basic dXNlcjpwYXNz");
    assert_string_equal(c.headers[1].name, "X-Scope-OrgID");
    assert_string_equal(c.headers[1].value, "tenant-1");
    char line[512];
    kp_push_config_describe(&c, line, sizeof line);
    assert_non_null(strstr(line, "Authorization"));
    assert_non_null(strstr(line, "X-Scope-OrgID"));
    assert_null(strstr(line, "dXNlcjpwYXNz"));
    assert_null(strstr(line, "tenant-1"));
    /* a later list replaces a name already there, in any case */
    assert_int_equal(
        kp_push_config_parse_list(&c, "authorization=Bearer%20x", 1, "--header", err, sizeof err),
        0);
    assert_int_equal(c.n_headers, 2);
    assert_string_equal(c.headers[0].value, "Bearer x");
    kp_push_config_free(&c);

    /* malformed members: the variable is named, the value never */
    const struct {
        const char *text, *want;
    } bad[] = {
        {"Authorization: Bearer s3cret", "no '='"}, {"Bad Name=s3cret", "not a header name"},
        {"X-Token=s3cret%zz", "X-Token"},           {"X-Token=s3cret%0Aevil", "control character"},
        {"X-Token=s3cret%00", "X-Token"},           {"=s3cret", "empty"},
        {"Content-Type=s3cret", "kprof's to set"},  {"grpc-timeout=s3cret", "kprof's to set"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *e[] = {"OTEL_EXPORTER_OTLP_HEADERS", bad[i].text, NULL};
        assert_int_equal(load(&c, e, err), -1);
        assert_non_null(strstr(err, "OTEL_EXPORTER_OTLP_HEADERS"));
        if (!strstr(err, bad[i].want))
            fail_msg("'%s': error '%s' lacks '%s'", bad[i].text, err, bad[i].want);
        assert_null(strstr(err, "s3cret"));
        assert_null(c.headers);
    }
}

static void headers_file(void **state)
{
    (void)state;
    char err[256], path[] = "/tmp/kp_push_headersXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "# tenant and token\r\n"
                        "\r\n"
                        "X-Scope-OrgID: tenant-1\r\n"
                        "  Authorization:   Bearer abc def  \n"
                        "X-Empty:\n"
                        "x-scope-orgid: tenant-2";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    kp_push_config c = {0};
    assert_int_equal(kp_push_config_read_headers_file(&c, path, err, sizeof err), 0);
    assert_int_equal(c.n_headers, 3);
    assert_string_equal(c.headers[0].name, "x-scope-orgid");
    assert_string_equal(c.headers[0].value, "tenant-2");
    assert_string_equal(c.headers[1].name, "Authorization");
    assert_string_equal(c.headers[1].value, "Bearer abc def");
    assert_string_equal(c.headers[2].value, "");
    unlink(path);
    assert_int_equal(kp_push_config_read_headers_file(&c, path, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_int_equal(c.n_headers, 3);

    const struct {
        const char *text, *want;
    } bad[] = {
        {"X-A: 1\nAuthorization Bearer s3cret\n", "headers:2: no ':'"},
        {"Bad Name: s3cret\n", "headers:1: the header name is not valid"},
        {": s3cret\n", "empty"},
        {"X-A: s3\x01"
         "cret\n",
         "control character"},
        {"Host: s3cret\n", "kprof's to set"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(kp_push_config_parse_headers_text(&c, bad[i].text, strlen(bad[i].text),
                                                           "headers", err, sizeof err),
                         -1);
        if (!strstr(err, bad[i].want))
            fail_msg("'%s': error '%s' lacks '%s'", bad[i].text, err, bad[i].want);
        assert_null(strstr(err, "s3cret"));
        assert_int_equal(c.n_headers, 3);
    }
    /* a NUL inside a value */
    const char nul[] = "X-A: a\0b\n";
    assert_int_equal(
        kp_push_config_parse_headers_text(&c, nul, sizeof nul - 1, "headers", err, sizeof err), -1);
    kp_push_config_free(&c);
}

static void limits(void **state)
{
    (void)state;
    char err[256];
    kp_push_config c = {0};
    char text[4096] = "";
    for (int i = 0; i <= KP_PUSH_MAX_HEADERS; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "x-h%d=v,", i);
    assert_int_equal(kp_push_config_parse_list(&c, text, 1, "V", err, sizeof err), -1);
    assert_non_null(strstr(err, "more than"));
    assert_int_equal(c.n_headers, 0);
    kp_push_config_free(&c);
}

static void describe_and_urls(void **state)
{
    (void)state;
    char out[256];
    kp_push_url_for_messages("https://user:pw@h:1/p/a?token=x#f", out, sizeof out);
    assert_string_equal(out, "https://h:1/p/a");
    kp_push_url_for_messages("http://h", out, sizeof out);
    assert_string_equal(out, "http://h");
    kp_push_config c = {0};
    char err[256];
    const char *env[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "https://u:secret@h:4318", NULL};
    assert_int_equal(load(&c, env, err), 0);
    kp_push_config_describe(&c, out, sizeof out);
    assert_null(strstr(out, "secret"));
    assert_non_null(strstr(out, "https://h:4318/v1development/profiles"));
    assert_non_null(strstr(out, "system's CAs"));
    char tiny[8];
    kp_push_config_describe(&c, tiny, sizeof tiny);
    assert_int_equal(strlen(tiny), 7);
    kp_push_config_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),          cmocka_unit_test(endpoint_resolution),
        cmocka_unit_test(settings),          cmocka_unit_test(headers_from_env),
        cmocka_unit_test(headers_file),      cmocka_unit_test(limits),
        cmocka_unit_test(describe_and_urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

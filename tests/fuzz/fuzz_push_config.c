/* Fuzz target: kprof push's setting parsers (sampler/push/lists.c,
 * config.c). The first byte chooses what the rest is: an
 * OTEL_EXPORTER_OTLP_HEADERS list, an OTEL_RESOURCE_ATTRIBUTES list, a
 * headers file, or an endpoint under each protocol. Whatever parses must
 * hold only what may go into a request (header names as tokens, values
 * without CR, LF or NUL, bounded counts); what fails must leave the config
 * as it was, with a one-line error. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz_check.h"
#include "push/config.h"

static void check_text(const char *s, int one_line)
{
    FUZZ_CHECK(s != NULL);
    for (; *s; s++)
        FUZZ_CHECK(!one_line || (*s != '\n' && *s != '\r'));
}

static void check_config(const kp_push_config *c)
{
    FUZZ_CHECK(c->n_headers <= KP_PUSH_MAX_HEADERS);
    FUZZ_CHECK(c->n_resource <= KP_PUSH_MAX_ATTRIBUTES);
    for (size_t i = 0; i < c->n_headers; i++) {
        const char *n = c->headers[i].name;
        FUZZ_CHECK(n[0] != '\0');
        FUZZ_CHECK(strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "!#$%&'*+-.^_`|~") == strlen(n));
        for (const char *v = c->headers[i].value; *v; v++)
            FUZZ_CHECK((unsigned char)*v >= 0x20 || *v == '\t');
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcasecmp(c->headers[j].name, n) != 0);
    }
    for (size_t i = 0; i < c->n_resource; i++)
        FUZZ_CHECK(c->resource[i].key[0] != '\0' && c->resource[i].value != NULL);
    char line[512];
    kp_push_config_describe(c, line, sizeof line);
    check_text(line, 1);
}

static const char *no_env(const char *name, void *ctx)
{
    (void)name, (void)ctx;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = malloc(size);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    kp_push_config c = {0};
    char err[256] = "";
    /* something there already, to see that a failure keeps it */
    FUZZ_CHECK(kp_push_config_parse_list(&c, "x-first=1", 1, "seed", err, sizeof err) == 0);
    size_t before = c.n_headers, before_res = c.n_resource;
    int rc;
    switch (data[0] % 6) {
    case 0: rc = kp_push_config_parse_list(&c, text, 1, "V", err, sizeof err); break;
    case 1: rc = kp_push_config_parse_list(&c, text, 0, "V", err, sizeof err); break;
    case 2:
        /* the raw bytes, NULs and all */
        rc = kp_push_config_parse_headers_text(&c, (const char *)data + 1, size - 1, "F", err,
                                               sizeof err);
        break;
    default: {
        kp_push_config_free(&c);
        FUZZ_CHECK(kp_push_config_from_env(&c, no_env, NULL, err, sizeof err) == 0);
        before = before_res = 0;
        c.insecure = data[0] & 8;
        if (data[0] % 6 == 5)
            FUZZ_CHECK(kp_push_config_set_protocol(&c, "grpc", "P", err, sizeof err) == 0);
        char *old = strdup(c.endpoint);
        rc = kp_push_config_set_endpoint(&c, text, data[0] % 6 == 4, "E", err, sizeof err);
        if (rc == 0) {
            FUZZ_CHECK(strncasecmp(c.endpoint, "http://", 7) == 0 ||
                       strncasecmp(c.endpoint, "https://", 8) == 0);
            for (const char *s = c.endpoint; *s; s++)
                FUZZ_CHECK((unsigned char)*s > ' ' && *s != 0x7f);
            /* switching protocols resolves the same URL again */
            rc = kp_push_config_set_protocol(&c, data[0] % 6 == 5 ? "http/protobuf" : "grpc", "P",
                                             err, sizeof err);
            FUZZ_CHECK(rc == 0 || c.endpoint != NULL);
        } else {
            FUZZ_CHECK(strcmp(old, c.endpoint) == 0);
        }
        free(old);
        break;
    }
    }
    if (rc != 0) {
        check_text(err, 1);
        FUZZ_CHECK(err[0] != '\0');
        FUZZ_CHECK(c.n_headers == before && c.n_resource == before_res);
    }
    check_config(&c);
    kp_push_config_free(&c);
    free(text);
    return 0;
}

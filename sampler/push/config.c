/* kprof push's settings from the OTLP exporter environment, and the
 * command line's overrides of them. The endpoint is kept as given and
 * resolved again whenever the protocol changes, since the generic variable
 * is a base that only HTTP extends with the signal's path. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "push/config.h"

#define SIGNAL_PATH "v1development/profiles"

const char *kp_push_getenv(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

/* The signal-specific variable, else the generic one; empty counts as
 * unset. `*which` names the one used, for errors. */
static const char *setting(kp_push_lookup lookup, void *ctx, const char *suffix, char *which,
                           size_t which_len)
{
    static const char *const prefixes[] = {"OTEL_EXPORTER_OTLP_PROFILES_", "OTEL_EXPORTER_OTLP_"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(which, which_len, "%s%s", prefixes[i], suffix);
        const char *v = lookup(which, ctx);
        if (v && *v)
            return v;
    }
    return NULL;
}

static int has_scheme(const char *url, const char *scheme)
{
    size_t n = strlen(scheme);
    return strncasecmp(url, scheme, n) == 0 && strncmp(url + n, "://", 3) == 0;
}

/* `s` cut to `cap` with what is not printable ASCII as '?': values echoed
 * in errors stay on one line. Returns `out`. */
static const char *printable(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; s[n] && n + 1 < cap; n++)
        out[n] = s[n] >= 0x20 && s[n] < 0x7f ? s[n] : '?';
    out[n] = '\0';
    return out;
}

void kp_push_url_for_messages(const char *url, char *out, size_t cap)
{
    if (cap == 0)
        return;
    const char *sep = strstr(url, "://");
    const char *auth = sep ? sep + 3 : url;
    size_t auth_len = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < auth_len; i++)
        if (auth[i] == '@')
            at = auth + i;
    const char *host = at ? at + 1 : auth;
    size_t rest = strcspn(host, "?#");
    snprintf(out, cap, "%.*s%.*s", (int)(auth - url), url, (int)rest, host);
    for (char *c = out; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            *c = '?';
}

/* The URL to send to, from the endpoint as given; NULL with `err` set when
 * it cannot be one. */
static char *resolve(const char *given, kp_endpoint_kind kind, kp_otlp_protocol protocol,
                     int insecure, const char *what, char *err, size_t err_len)
{
    if (kind == KP_ENDPOINT_DEFAULT || !given)
        return strdup(protocol == KP_OTLP_GRPC ? "http://localhost:4317"
                                               : "http://localhost:4318/" SIGNAL_PATH);
    char shown[256];
    kp_push_url_for_messages(given, shown, sizeof shown);
    for (const char *s = given; *s; s++) {
        if ((unsigned char)*s <= ' ' || *s == 0x7f) {
            snprintf(err, err_len, "%s '%s': a URL cannot hold spaces or control characters", what,
                     shown);
            return NULL;
        }
    }
    const char *scheme = "";
    if (!has_scheme(given, "http") && !has_scheme(given, "https")) {
        if (protocol != KP_OTLP_GRPC || strstr(given, "://")) {
            snprintf(err, err_len, "%s '%s': write a URL starting with http:// or https://", what,
                     shown);
            return NULL;
        }
        /* OTel: a gRPC endpoint without a scheme is TLS unless INSECURE */
        scheme = insecure ? "http://" : "https://";
    }
    const char *auth = strstr(given, "://");
    auth = auth ? auth + 3 : given;
    if (strcspn(auth, "/?#") == 0) {
        snprintf(err, err_len, "%s '%s': the URL names no host", what, shown);
        return NULL;
    }
    size_t len = strlen(given);
    const char *suffix = "";
    if (protocol == KP_OTLP_GRPC) {
        while (len > 0 && given[len - 1] == '/' && given + len > auth + strcspn(auth, "/"))
            len--;
    } else if (kind == KP_ENDPOINT_BASE) {
        suffix = len > 0 && given[len - 1] == '/' ? SIGNAL_PATH : "/" SIGNAL_PATH;
    }
    size_t need = strlen(scheme) + len + strlen(suffix) + 1;
    char *url = malloc(need);
    if (!url) {
        snprintf(err, err_len, "%s: out of memory", what);
        return NULL;
    }
    snprintf(url, need, "%s%.*s%s", scheme, (int)len, given, suffix);
    return url;
}

int kp_push_config_set_endpoint(kp_push_config *c, const char *url, int is_base, const char *what,
                                char *err, size_t err_len)
{
    kp_endpoint_kind kind = is_base ? KP_ENDPOINT_BASE : KP_ENDPOINT_EXACT;
    char *resolved = resolve(url, kind, c->protocol, c->insecure, what, err, err_len);
    char *given = resolved ? strdup(url) : NULL;
    if (!resolved || !given) {
        if (resolved)
            snprintf(err, err_len, "%s: out of memory", what);
        free(resolved);
        return -1;
    }
    free(c->endpoint);
    free(c->endpoint_given);
    c->endpoint = resolved;
    c->endpoint_given = given;
    c->endpoint_kind = kind;
    return 0;
}

int kp_push_config_set_protocol(kp_push_config *c, const char *name, const char *what, char *err,
                                size_t err_len)
{
    kp_otlp_protocol protocol;
    if (strcmp(name, "grpc") == 0) {
        protocol = KP_OTLP_GRPC;
    } else if (strcmp(name, "http/protobuf") == 0) {
        protocol = KP_OTLP_HTTP_PROTOBUF;
    } else if (strcmp(name, "http/json") == 0) {
        snprintf(err, err_len,
                 "%s 'http/json': kprof sends protobuf only: use http/protobuf or grpc", what);
        return -1;
    } else {
        char shown[64];
        snprintf(err, err_len, "invalid %s '%s': use http/protobuf or grpc", what,
                 printable(name, shown, sizeof shown));
        return -1;
    }
    char *resolved =
        resolve(c->endpoint_given, c->endpoint_kind, protocol, c->insecure, what, err, err_len);
    if (!resolved)
        return -1;
    free(c->endpoint);
    c->endpoint = resolved;
    c->protocol = protocol;
    return 0;
}

int kp_push_config_set_file(char **field, const char *path, const char *what, char *err,
                            size_t err_len)
{
    if (access(path, R_OK) != 0) {
        char shown[256];
        snprintf(err, err_len, "%s '%s': %s", what, printable(path, shown, sizeof shown),
                 strerror(errno));
        return -1;
    }
    char *copy = strdup(path);
    if (!copy) {
        snprintf(err, err_len, "%s: out of memory", what);
        return -1;
    }
    free(*field);
    *field = copy;
    return 0;
}

static int parse_timeout(const char *text, unsigned *ms)
{
    unsigned long v = 0;
    if (!*text)
        return -1;
    for (const char *s = text; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (unsigned long)(*s - '0');
        if (v > KP_PUSH_MAX_TIMEOUT_MS)
            return -1;
    }
    if (v == 0)
        return -1;
    *ms = (unsigned)v;
    return 0;
}

static int from_env(kp_push_config *c, kp_push_lookup lookup, void *ctx, char *err, size_t err_len)
{
    char which[64], shown[32];
    const char *v;
    if ((v = setting(lookup, ctx, "INSECURE", which, sizeof which))) {
        if (strcasecmp(v, "true") == 0) {
            c->insecure = 1;
        } else if (strcasecmp(v, "false") != 0) {
            snprintf(err, err_len, "invalid %s '%s': use true or false", which,
                     printable(v, shown, sizeof shown));
            return -1;
        }
    }
    if ((v = setting(lookup, ctx, "PROTOCOL", which, sizeof which)) &&
        kp_push_config_set_protocol(c, v, which, err, err_len) != 0)
        return -1;
    const char *exact = lookup("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", ctx);
    const char *base = lookup("OTEL_EXPORTER_OTLP_ENDPOINT", ctx);
    if (exact && *exact) {
        if (kp_push_config_set_endpoint(c, exact, 0, "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", err,
                                        err_len) != 0)
            return -1;
    } else if (base && *base) {
        if (kp_push_config_set_endpoint(c, base, 1, "OTEL_EXPORTER_OTLP_ENDPOINT", err, err_len) !=
            0)
            return -1;
    }
    if ((v = setting(lookup, ctx, "HEADERS", which, sizeof which)) &&
        kp_push_config_parse_list(c, v, 1, which, err, err_len) != 0)
        return -1;
    if ((v = setting(lookup, ctx, "CERTIFICATE", which, sizeof which)) &&
        kp_push_config_set_file(&c->ca_file, v, which, err, err_len) != 0)
        return -1;
    if ((v = setting(lookup, ctx, "CLIENT_CERTIFICATE", which, sizeof which)) &&
        kp_push_config_set_file(&c->client_cert, v, which, err, err_len) != 0)
        return -1;
    if ((v = setting(lookup, ctx, "CLIENT_KEY", which, sizeof which)) &&
        kp_push_config_set_file(&c->client_key, v, which, err, err_len) != 0)
        return -1;
    if ((v = setting(lookup, ctx, "COMPRESSION", which, sizeof which))) {
        if (strcmp(v, "gzip") == 0) {
            c->gzip = 1;
        } else if (strcmp(v, "none") != 0) {
            snprintf(err, err_len, "invalid %s '%s': use gzip or none", which,
                     printable(v, shown, sizeof shown));
            return -1;
        }
    }
    if ((v = setting(lookup, ctx, "TIMEOUT", which, sizeof which)) &&
        parse_timeout(v, &c->timeout_ms) != 0) {
        snprintf(err, err_len, "invalid %s '%s': milliseconds, from 1 to %d", which,
                 printable(v, shown, sizeof shown), KP_PUSH_MAX_TIMEOUT_MS);
        return -1;
    }
    if ((v = lookup("OTEL_SERVICE_NAME", ctx)) && *v && !(c->service_name = strdup(v))) {
        snprintf(err, err_len, "OTEL_SERVICE_NAME: out of memory");
        return -1;
    }
    if ((v = lookup("OTEL_RESOURCE_ATTRIBUTES", ctx)) && *v &&
        kp_push_config_parse_list(c, v, 0, "OTEL_RESOURCE_ATTRIBUTES", err, err_len) != 0)
        return -1;
    return 0;
}

int kp_push_config_from_env(kp_push_config *c, kp_push_lookup lookup, void *ctx, char *err,
                            size_t err_len)
{
    memset(c, 0, sizeof *c);
    c->protocol = KP_OTLP_HTTP_PROTOBUF;
    c->timeout_ms = 10000;
    c->endpoint = resolve(NULL, KP_ENDPOINT_DEFAULT, c->protocol, 0, "", err, err_len);
    if (!c->endpoint) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    if (from_env(c, lookup, ctx, err, err_len) != 0) {
        kp_push_config_free(c);
        return -1;
    }
    return 0;
}

void kp_push_config_describe(const kp_push_config *c, char *out, size_t cap)
{
    if (cap == 0)
        return;
    char url[256], path[256];
    kp_push_url_for_messages(c->endpoint ? c->endpoint : "", url, sizeof url);
    size_t n = 0;
#define ADD(...)                                             \
    do {                                                     \
        if (n < cap) {                                       \
            int k = snprintf(out + n, cap - n, __VA_ARGS__); \
            n = k < 0 ? cap : n + (size_t)k;                 \
        }                                                    \
    } while (0)
    ADD("%s (%s, %s, timeout %u ms", url, c->protocol == KP_OTLP_GRPC ? "grpc" : "http/protobuf",
        c->gzip ? "gzip" : "uncompressed", c->timeout_ms);
    if (has_scheme(url, "https"))
        ADD(", TLS with %s%s%s", c->ca_file ? "CA file " : "the system's CAs",
            c->ca_file ? printable(c->ca_file, path, sizeof path) : "",
            c->client_cert ? " and a client certificate" : "");
    for (size_t i = 0; i < c->n_headers; i++)
        ADD("%s%s", i == 0 ? ", headers: " : " ", c->headers[i].name);
    ADD(")");
#undef ADD
}

void kp_push_config_free(kp_push_config *c)
{
    for (size_t i = 0; i < c->n_headers; i++) {
        free(c->headers[i].name);
        free(c->headers[i].value);
    }
    for (size_t i = 0; i < c->n_resource; i++) {
        free(c->resource[i].key);
        free(c->resource[i].value);
    }
    free(c->headers);
    free(c->resource);
    free(c->endpoint);
    free(c->endpoint_given);
    free(c->ca_file);
    free(c->client_cert);
    free(c->client_key);
    free(c->service_name);
    memset(c, 0, sizeof *c);
}

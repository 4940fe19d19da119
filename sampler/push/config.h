/* Where and how `kprof push` sends its profiles: the OpenTelemetry OTLP
 * exporter settings, read from the environment as every OTel SDK reads
 * them, then overridden by the command line.
 *
 * The signal-specific OTEL_EXPORTER_OTLP_PROFILES_X wins over the generic
 * OTEL_EXPORTER_OTLP_X; an empty variable counts as unset (OTel spec).
 * Secrets travel in headers: no function here ever puts a header's value
 * in an error message or a description. */
#ifndef KP_PUSH_CONFIG_H
#define KP_PUSH_CONFIG_H

#include <stddef.h>

typedef enum { KP_OTLP_HTTP_PROTOBUF, KP_OTLP_GRPC } kp_otlp_protocol;

typedef struct {
    char *name, *value; /* owned */
} kp_push_header;

typedef struct {
    char *key, *value; /* owned */
} kp_push_attribute;

/* How the endpoint was given, to resolve it again when the protocol changes. */
typedef enum {
    KP_ENDPOINT_DEFAULT, /* none: localhost, the protocol's port */
    KP_ENDPOINT_BASE,    /* OTEL_EXPORTER_OTLP_ENDPOINT: HTTP appends the signal's path */
    KP_ENDPOINT_EXACT    /* OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or --endpoint: as is */
} kp_endpoint_kind;

typedef struct {
    /* resolved: HTTP: the full URL to POST; gRPC: scheme://host:port[/prefix] */
    char *endpoint;
    kp_otlp_protocol protocol;
    kp_push_header *headers;
    size_t n_headers;
    char *ca_file;     /* NULL: the system's CAs */
    char *client_cert; /* mTLS; NULL: none */
    char *client_key;  /* NULL: none, or in client_cert's file */
    /* gRPC to an endpoint without a scheme: 1 plaintext (http://), 0 TLS */
    int insecure;
    int gzip;                    /* compression gzip; default none, as the OTel spec says */
    unsigned timeout_ms;         /* per export; default 10000 */
    char *service_name;          /* OTEL_SERVICE_NAME, NULL when unset; wins over service.name */
    kp_push_attribute *resource; /* OTEL_RESOURCE_ATTRIBUTES, in their order */
    size_t n_resource;

    /* the endpoint as given, before resolution (private to config.c) */
    char *endpoint_given;
    kp_endpoint_kind endpoint_kind;
} kp_push_config;

/* Limits on what the lists may hold, so that a runaway variable or file
 * cannot make every export carry megabytes of headers. */
enum {
    KP_PUSH_MAX_HEADERS = 64,
    KP_PUSH_MAX_ATTRIBUTES = 128,
    KP_PUSH_MAX_LIST_TEXT = 65536, /* bytes of one variable or headers file */
    KP_PUSH_MAX_TIMEOUT_MS = 600000
};

/* getenv-like: the value of `name`, or NULL when unset. */
typedef const char *(*kp_push_lookup)(const char *name, void *ctx);

/* A kp_push_lookup over the process's environment (getenv; ctx unused). */
const char *kp_push_getenv(const char *name, void *ctx);

/* Fills `c` (overwritten, not freed first) from the OTLP exporter variables
 * that `lookup` answers: ..._ENDPOINT, _PROTOCOL (grpc, http/protobuf),
 * _HEADERS, _CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY, _COMPRESSION
 * (gzip, none), _TIMEOUT (ms), _INSECURE (true, false), OTEL_SERVICE_NAME
 * and OTEL_RESOURCE_ATTRIBUTES. Certificate files must be readable.
 * Returns 0, or -1 with one line in `err` naming the variable at fault and
 * what it should hold; then `c` is freed and zeroed. */
int kp_push_config_from_env(kp_push_config *c, kp_push_lookup lookup, void *ctx, char *err,
                            size_t err_len);

/* --endpoint URL: `is_base` 0 behaves like OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT
 * (used as is), 1 like OTEL_EXPORTER_OTLP_ENDPOINT (HTTP appends
 * "v1development/profiles"). A URL needs http:// or https://, except for
 * gRPC, where host:port takes the scheme of `insecure`. `what` names the
 * source in errors (e.g. "--endpoint"). Returns 0, or -1 with `err` set and
 * `c` unchanged. */
int kp_push_config_set_endpoint(kp_push_config *c, const char *url, int is_base, const char *what,
                                char *err, size_t err_len);

/* --protocol: "grpc" or "http/protobuf"; the endpoint is resolved again
 * (a default endpoint takes the protocol's port). Returns 0, or -1 with
 * `err` set ("http/json" is refused: kprof sends protobuf only) and `c`
 * unchanged. */
int kp_push_config_set_protocol(kp_push_config *c, const char *name, const char *what, char *err,
                                size_t err_len);

/* Replaces `*field` (ca_file, client_cert or client_key) with a copy of
 * `path`, which must be a readable file. Returns 0, or -1 with `err` naming
 * `what` and the reason, and `*field` unchanged. */
int kp_push_config_set_file(char **field, const char *path, const char *what, char *err,
                            size_t err_len);

/* Reads a file of "Name: value" lines (blank lines and lines starting with
 * '#' skipped, CRLF tolerated, spaces around the value trimmed) into
 * c->headers, a name already there (any case) being replaced. Returns 0, or
 * -1 with `err` naming the file and line, never the value; then c->headers
 * is unchanged. */
int kp_push_config_read_headers_file(kp_push_config *c, const char *path, char *err,
                                     size_t err_len);

/* The same on `len` bytes of text; `source` names them in errors. */
int kp_push_config_parse_headers_text(kp_push_config *c, const char *text, size_t len,
                                      const char *source, char *err, size_t err_len);

/* Parses a W3C Baggage-like list "k1=v1,k2=v2" (spaces around keys and
 * values trimmed, values percent-decoded, empty members skipped) as OTLP
 * headers (`as_headers` 1: names checked as RFC 7230 tokens, values free of
 * CR, LF and NUL; a name already there is replaced) or as resource
 * attributes (0: appended in order). `variable` names the source in errors,
 * which name at most the key of a bad member, never a value. Returns 0, or
 * -1 with `err` set and `c` unchanged. */
int kp_push_config_parse_list(kp_push_config *c, const char *text, int as_headers,
                              const char *variable, char *err, size_t err_len);

/* One line for the start of a run: endpoint (without credentials or query),
 * protocol, compression, TLS trust, and the header NAMES only. Always
 * NUL-terminated, cut to `cap`. */
void kp_push_config_describe(const kp_push_config *c, char *out, size_t cap);

/* `url` without user info, query or fragment, for messages: secrets are
 * sometimes put there. Always NUL-terminated, cut to `cap`. */
void kp_push_url_for_messages(const char *url, char *out, size_t cap);

/* Frees what `c` owns and zeroes it; safe on a zeroed config and after an
 * error. */
void kp_push_config_free(kp_push_config *c);

#endif

/* OTLP exports over one libcurl easy handle, reused so that each window
 * does not pay a new TCP and TLS handshake. libcurl does HTTP/1.1, HTTP/2
 * and TLS; this file frames, compresses and reads the answers. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <zlib.h>

#include "kprof_version.h"
#include "push/transport.h"

#define GRPC_PATH "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
/* a reply worth reading is small; the rest is counted, not kept */
#define MAX_REPLY 65536

struct kp_push_transport {
    CURL *curl;
    struct curl_slist *headers;
    int grpc, gzip;
    char *url;
    char shown[256]; /* the URL for messages */
    z_stream z;
    int z_ready;
    uint8_t *buf; /* the body as sent: framed and/or compressed */
    size_t buf_cap;
    int (*cancel)(void *);
    void *cancel_ctx;
    /* the answer being read */
    uint8_t reply[MAX_REPLY];
    size_t reply_len;
    int have_grpc_status;
    long grpc_status;
    char grpc_message[512];
    char details[1024]; /* grpc-status-details-bin, base64 */
    char retry_after[64];
    char content_type[128];
    char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void init_curl(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void reset_answer(kp_push_transport *t)
{
    t->reply_len = 0;
    t->have_grpc_status = 0;
    t->grpc_status = 0;
    t->grpc_message[0] = t->details[0] = t->retry_after[0] = t->content_type[0] = '\0';
}

static void keep(char *dst, size_t cap, const char *v, size_t n)
{
    n = n < cap - 1 ? n : cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* Headers, and HTTP/2 trailers, which libcurl hands here too: gRPC's
 * status comes in the trailers, or in the headers of a trailers-only
 * answer. */
static size_t on_header(char *line, size_t size, size_t count, void *ctx)
{
    kp_push_transport *t = ctx;
    size_t n = size * count;
    if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        reset_answer(t); /* a new answer: after 100 Continue, say */
        return n;
    }
    const char *colon = memchr(line, ':', n);
    if (!colon)
        return n;
    size_t name_len = (size_t)(colon - line);
    const char *v = colon + 1;
    size_t vn = n - name_len - 1;
    while (vn > 0 && (*v == ' ' || *v == '\t'))
        v++, vn--;
    while (vn > 0 && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' '))
        vn--;
#define IS(name) (name_len == sizeof(name) - 1 && strncasecmp(line, name, name_len) == 0)
    if (IS("grpc-status")) {
        char digits[16];
        keep(digits, sizeof digits, v, vn);
        char *end;
        long code = strtol(digits, &end, 10);
        if (vn > 0 && *end == '\0' && code >= 0) {
            t->have_grpc_status = 1;
            t->grpc_status = code;
        }
    } else if (IS("grpc-message")) {
        kp_push_sanitize(t->grpc_message, sizeof t->grpc_message, v, vn, 1);
    } else if (IS("grpc-status-details-bin")) {
        keep(t->details, sizeof t->details, v, vn);
    } else if (IS("retry-after")) {
        keep(t->retry_after, sizeof t->retry_after, v, vn);
    } else if (IS("content-type")) {
        keep(t->content_type, sizeof t->content_type, v, vn);
    }
#undef IS
    return n;
}

static size_t on_body(char *data, size_t size, size_t count, void *ctx)
{
    kp_push_transport *t = ctx;
    size_t n = size * count, room = MAX_REPLY - t->reply_len;
    memcpy(t->reply + t->reply_len, data, n < room ? n : room);
    t->reply_len += n < room ? n : room;
    return n;
}

static int on_progress(void *ctx, curl_off_t dl_total, curl_off_t dl_now, curl_off_t ul_total,
                       curl_off_t ul_now)
{
    (void)dl_total, (void)dl_now, (void)ul_total, (void)ul_now;
    kp_push_transport *t = ctx;
    return t->cancel && t->cancel(t->cancel_ctx);
}

static int add_header(kp_push_transport *t, const char *name, const char *value)
{
    size_t need = strlen(name) + strlen(value) + 3;
    char *line = malloc(need);
    if (!line)
        return -1;
    /* "Name;" is libcurl's way to send a header with an empty value */
    snprintf(line, need, *value ? "%s: %s" : "%s;", name, value);
    struct curl_slist *l = curl_slist_append(t->headers, line);
    free(line);
    if (!l)
        return -1;
    t->headers = l;
    return 0;
}

static int set_options(kp_push_transport *t, const kp_push_config *c)
{
    CURL *h = t->curl;
    unsigned connect_ms = c->timeout_ms < 5000 ? c->timeout_ms : 5000;
    long version = CURL_HTTP_VERSION_2TLS; /* h2 when TLS offers it, else 1.1 */
    if (t->grpc)
        version = strncasecmp(t->url, "http://", 7) == 0 ? CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE
                                                         : CURL_HTTP_VERSION_2_0;
    int bad = 0;
    bad |= curl_easy_setopt(h, CURLOPT_URL, t->url) != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
    bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
#else
    bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS)) !=
           CURLE_OK;
#endif
    bad |= curl_easy_setopt(h, CURLOPT_HTTP_VERSION, version) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_POST, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, t->headers) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_USERAGENT, "kprof/" KPROF_VERSION) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, t->errbuf) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_HEADERDATA, t) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_WRITEDATA, t) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_XFERINFODATA, t) != CURLE_OK;
    bad |= curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L) != CURLE_OK;
    /* libcurl before 8.0.0 (Debian 12's 7.88) fails the next request on
     * an HTTP/2 connection whose last stream ended in gRPC's trailers
     * ("Error in the HTTP2 framing layer", curl issue 10634; seen against
     * the Collector's receiver): there, a gRPC export, one an interval,
     * takes a connection of its own */
    if (t->grpc && curl_version_info(CURLVERSION_NOW)->version_num < 0x080000)
        bad |= curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L) != CURLE_OK;
    if (c->ca_file)
        bad |= curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file) != CURLE_OK;
    if (c->client_cert)
        bad |= curl_easy_setopt(h, CURLOPT_SSLCERT, c->client_cert) != CURLE_OK;
    if (c->client_key)
        bad |= curl_easy_setopt(h, CURLOPT_SSLKEY, c->client_key) != CURLE_OK;
    return bad ? -1 : 0;
}

static int build_headers(kp_push_transport *t, const kp_push_config *c)
{
    int bad = 0;
    char timeout[32];
    if (t->grpc) {
        snprintf(timeout, sizeof timeout, "%um", c->timeout_ms);
        bad |= add_header(t, "Content-Type", "application/grpc");
        bad |= add_header(t, "TE", "trailers");
        bad |= add_header(t, "grpc-timeout", timeout);
        if (t->gzip)
            bad |= add_header(t, "grpc-encoding", "gzip");
    } else {
        bad |= add_header(t, "Content-Type", "application/x-protobuf");
        if (t->gzip)
            bad |= add_header(t, "Content-Encoding", "gzip");
    }
    /* libcurl's "Expect: 100-continue" before large bodies costs a round
     * trip on HTTP/1.1, and some proxies mishandle it */
    struct curl_slist *l = curl_slist_append(t->headers, "Expect:");
    if (l)
        t->headers = l;
    bad |= !l;
    for (size_t i = 0; i < c->n_headers; i++)
        bad |= add_header(t, c->headers[i].name, c->headers[i].value);
    return bad ? -1 : 0;
}

kp_push_transport *kp_push_transport_create(const kp_push_config *c, char *err, size_t err_len)
{
    pthread_once(&curl_once, init_curl);
    if (curl_init_rc != CURLE_OK) {
        snprintf(err, err_len, "cannot start libcurl: %s", curl_easy_strerror(curl_init_rc));
        return NULL;
    }
    if (c->client_key && !c->client_cert) {
        snprintf(err, err_len,
                 "a client key without a client certificate: give both "
                 "(OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE)");
        return NULL;
    }
    kp_push_transport *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    t->grpc = c->protocol == KP_OTLP_GRPC;
    t->gzip = c->gzip;
    kp_push_url_for_messages(c->endpoint, t->shown, sizeof t->shown);
    size_t need = strlen(c->endpoint) + sizeof GRPC_PATH;
    t->url = malloc(need);
    if (t->url)
        snprintf(t->url, need, "%s%s", c->endpoint, t->grpc ? GRPC_PATH : "");
    t->curl = curl_easy_init();
    if (t->gzip && deflateInit2(&t->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK)
        t->z_ready = 1;
    if (!t->url || !t->curl || (t->gzip && !t->z_ready) || build_headers(t, c) != 0 ||
        set_options(t, c) != 0) {
        snprintf(err, err_len,
                 "cannot set up sending to %s: out of memory or a libcurl without "
                 "HTTP/2 (install libcurl4 with nghttp2)",
                 t->shown);
        kp_push_transport_free(t);
        return NULL;
    }
    return t;
}

void kp_push_transport_set_cancel(kp_push_transport *t, int (*cancel)(void *ctx), void *ctx)
{
    t->cancel = cancel;
    t->cancel_ctx = ctx;
}

/* The body as sent in t->buf; its length, or 0 when out of memory. */
static size_t frame(kp_push_transport *t, const void *body, size_t len)
{
    size_t prefix = t->grpc ? 5 : 0;
    size_t most = t->gzip ? deflateBound(&t->z, (uLong)len) : len;
    if (prefix + most > t->buf_cap) {
        uint8_t *b = realloc(t->buf, prefix + most);
        if (!b)
            return 0;
        t->buf = b;
        t->buf_cap = prefix + most;
    }
    size_t n = len;
    if (t->gzip) {
        deflateReset(&t->z);
        t->z.next_in = (Bytef *)(uintptr_t)body;
        t->z.avail_in = (uInt)len;
        t->z.next_out = t->buf + prefix;
        t->z.avail_out = (uInt)most;
        if (deflate(&t->z, Z_FINISH) != Z_STREAM_END)
            return 0;
        n = t->z.total_out;
    } else if (prefix) {
        memcpy(t->buf + prefix, body, len);
    }
    if (prefix) {
        t->buf[0] = t->gzip ? 1 : 0; /* the compressed flag */
        for (int i = 0; i < 4; i++)
            t->buf[1 + i] = (uint8_t)(n >> (24 - 8 * i));
    }
    return prefix + n;
}

static void curl_failure(kp_push_transport *t, CURLcode rc, kp_send_result *r)
{
    const char *why = t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc);
    if (rc == CURLE_ABORTED_BY_CALLBACK)
        snprintf(r->message, sizeof r->message, "cancelled: kprof is stopping");
    else if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE)
        snprintf(r->message, sizeof r->message,
                 "the server's certificate could not be verified (%.300s): give its CA with "
                 "OTEL_EXPORTER_OTLP_CERTIFICATE or --ca-file",
                 why);
    else
        kp_push_sanitize(r->message, sizeof r->message, why, strlen(why), 0);
}

/* The reply of an accepted export: a partial success, if any. */
static void read_success(const uint8_t *p, size_t n, kp_send_result *r)
{
    if (kp_push_decode_export_response(p, n, &r->rejected, r->message, sizeof r->message) != 0)
        r->rejected = 0; /* an answer we cannot read does not undo the success */
}

static void read_grpc(kp_push_transport *t, kp_send_result *r)
{
    r->status = t->grpc_status;
    r->status_is_grpc = 1;
    r->outcome = kp_push_grpc_outcome(t->grpc_status);
    if (r->outcome == KP_SEND_OK) {
        /* one message after its 5-byte prefix; a compressed one we did
         * not ask for is left unread */
        if (t->reply_len >= 5 && t->reply[0] == 0)
            read_success(t->reply + 5, t->reply_len - 5, r);
        return;
    }
    snprintf(r->message, sizeof r->message, "%s", t->grpc_message);
    if (t->details[0]) {
        uint8_t bin[768];
        long n = kp_push_base64_decode(t->details, strlen(t->details), bin, sizeof bin);
        long code = 0;
        char msg[sizeof r->message];
        if (n > 0 &&
            kp_push_decode_status(bin, (size_t)n, &code, msg, sizeof msg, &r->retry_after_ms) ==
                0 &&
            !r->message[0])
            snprintf(r->message, sizeof r->message, "%s", msg);
    }
}

static void read_http(kp_push_transport *t, long status, kp_send_result *r)
{
    r->status = status;
    r->outcome = kp_push_http_outcome(status);
    if (t->retry_after[0])
        r->retry_after_ms = kp_push_parse_retry_after(t->retry_after, time(NULL));
    if (r->outcome == KP_SEND_OK) {
        read_success(t->reply, t->reply_len, r);
        return;
    }
    char *location = NULL;
    if (status >= 300 && status < 400 &&
        curl_easy_getinfo(t->curl, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location) {
        char to[256];
        kp_push_url_for_messages(location, to, sizeof to);
        snprintf(r->message, sizeof r->message, "redirected to %s: give that URL as the endpoint",
                 to);
        return;
    }
    long code = 0;
    if (strncasecmp(t->content_type, "application/x-protobuf", 22) == 0 &&
        kp_push_decode_status(t->reply, t->reply_len, &code, r->message, sizeof r->message,
                              &r->retry_after_ms) == 0)
        return;
    /* text, JSON or HTML: its start says enough, on one line */
    kp_push_sanitize(r->message, 200, (const char *)t->reply, t->reply_len, 0);
}

kp_send_result kp_push_transport_send(kp_push_transport *t, const void *body, size_t len)
{
    kp_send_result r = {.outcome = KP_SEND_RETRY, .retry_after_ms = -1};
    size_t n = frame(t, body, len);
    const void *data = t->grpc || t->gzip ? (const void *)t->buf : body;
    if (n == 0 && (t->grpc || t->gzip)) {
        snprintf(r.message, sizeof r.message, "out of memory framing %zu bytes", len);
        return r;
    }
    reset_answer(t);
    t->errbuf[0] = '\0';
    curl_easy_setopt(t->curl, CURLOPT_POSTFIELDS, data);
    curl_easy_setopt(t->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
    CURLcode rc = curl_easy_perform(t->curl);
    if (rc != CURLE_OK) {
        curl_failure(t, rc, &r);
        return r;
    }
    long status = 0, version = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(t->curl, CURLINFO_HTTP_VERSION, &version);
    if (t->grpc && version != CURL_HTTP_VERSION_2_0) {
        r.status = status;
        r.outcome = KP_SEND_REJECTED;
        snprintf(r.message, sizeof r.message,
                 "%s answered HTTP/1.x, not gRPC's HTTP/2: is it an OTLP/HTTP endpoint "
                 "(then use http/protobuf)?",
                 t->shown);
        return r;
    }
    if (!t->grpc || status != 200) {
        read_http(t, status, &r);
        return r;
    }
    if (!t->have_grpc_status) {
        r.status = 200;
        snprintf(r.message, sizeof r.message,
                 "the gRPC answer has no grpc-status: the stream ended early (a proxy?)");
        return r;
    }
    read_grpc(t, &r);
    return r;
}

void kp_push_transport_free(kp_push_transport *t)
{
    if (!t)
        return;
    if (t->curl)
        curl_easy_cleanup(t->curl);
    curl_slist_free_all(t->headers);
    if (t->z_ready)
        deflateEnd(&t->z);
    free(t->buf);
    free(t->url);
    free(t);
}

/* The lists of kprof push's settings: OTEL_EXPORTER_OTLP_HEADERS and
 * OTEL_RESOURCE_ATTRIBUTES ("k1=v1,k2=v2", values percent-encoded), and
 * headers files ("Name: value" lines). Every error names the source and at
 * most a member's key: a header's value is often a token. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kp/hex.h"
#include "push/config.h"

static int is_ows(char ch)
{
    return ch == ' ' || ch == '\t';
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && is_ows(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && is_ows((*s)[*n - 1]))
        (*n)--;
}

/* RFC 7230 tchar */
static int is_tchar(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return 1;
    return ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static int is_token(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i]))
            return 0;
    return 1;
}

/* A field value: visible characters, spaces, tabs and bytes >= 0x80; no CR,
 * LF, NUL or other control character, which could split the request. */
static int is_field_value(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return 0;
    }
    return 1;
}

/* Headers that kprof sets itself, or that HTTP/2 forbids. */
static int is_reserved(const char *name)
{
    static const char *const reserved[] = {
        "content-type", "content-length", "content-encoding", "transfer-encoding",
        "te",           "host",           "connection",       "keep-alive",
        "upgrade",      "expect",         "proxy-connection"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcasecmp(name, reserved[i]) == 0)
            return 1;
    return strncasecmp(name, "grpc-", 5) == 0;
}

/* Percent-decodes `n` bytes into a new string; NULL with *bad set when an
 * escape is malformed or decodes to NUL, NULL alone when out of memory. */
static char *percent_decode(const char *s, size_t n, int *bad)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            out[o++] = s[i];
            continue;
        }
        int hi = i + 2 < n ? kp_hex_digit(s[i + 1]) : -1;
        int lo = i + 2 < n ? kp_hex_digit(s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(out);
            *bad = 1;
            return NULL;
        }
        out[o++] = (char)(hi << 4 | lo);
        i += 2;
    }
    out[o] = '\0';
    return out;
}

static char *copy_n(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    if (out) {
        memcpy(out, s, n);
        out[n] = '\0';
    }
    return out;
}

static void free_pairs(kp_push_header *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(p[i].name);
        free(p[i].value);
    }
    free(p);
}

static size_t find_header(const kp_push_header *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(h[i].name, name) == 0)
            return i;
    return n;
}

/* Moves `add` into c->headers, a name already there being replaced; all or
 * nothing. Frees `add` either way. */
static int merge_headers(kp_push_config *c, kp_push_header *add, size_t n_add, const char *source,
                         char *err, size_t err_len)
{
    size_t total = c->n_headers;
    for (size_t i = 0; i < n_add; i++)
        if (find_header(c->headers, c->n_headers, add[i].name) == c->n_headers &&
            find_header(add, i, add[i].name) == i)
            total++;
    if (total > KP_PUSH_MAX_HEADERS) {
        snprintf(err, err_len, "%s: more than %d headers", source, KP_PUSH_MAX_HEADERS);
        free_pairs(add, n_add);
        return -1;
    }
    kp_push_header *all = malloc((total ? total : 1) * sizeof *all);
    if (!all) {
        snprintf(err, err_len, "%s: out of memory", source);
        free_pairs(add, n_add);
        return -1;
    }
    if (c->n_headers)
        memcpy(all, c->headers, c->n_headers * sizeof *all);
    size_t n = c->n_headers;
    for (size_t i = 0; i < n_add; i++) {
        size_t j = find_header(all, n, add[i].name);
        kp_push_header old = j < n ? all[j] : (kp_push_header){NULL, NULL};
        all[j < n ? j : n++] = add[i];
        add[i] = old; /* the replaced one, freed below */
    }
    free_pairs(add, n_add);
    free(c->headers);
    c->headers = all;
    c->n_headers = n;
    return 0;
}

int kp_push_config_parse_list(kp_push_config *c, const char *text, int as_headers,
                              const char *variable, char *err, size_t err_len)
{
    size_t len = strlen(text);
    if (len > KP_PUSH_MAX_LIST_TEXT) {
        snprintf(err, err_len, "%s is longer than %d bytes", variable, KP_PUSH_MAX_LIST_TEXT);
        return -1;
    }
    size_t max = as_headers ? KP_PUSH_MAX_HEADERS : KP_PUSH_MAX_ATTRIBUTES;
    size_t room = max - (as_headers ? 0 : c->n_resource);
    /* both lists are pairs of owned strings: one array type for both */
    kp_push_header *got = calloc(max, sizeof *got);
    if (!got) {
        snprintf(err, err_len, "%s: out of memory", variable);
        return -1;
    }
    size_t n = 0, member = 0;
    const char *p = text, *end = text + len;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        const char *m = p;
        size_t mlen = (size_t)(stop - p);
        p = stop + 1;
        member++;
        trim(&m, &mlen);
        if (mlen == 0)
            continue;
        const char *eq = memchr(m, '=', mlen);
        if (!eq) {
            snprintf(err, err_len,
                     "%s: member %zu has no '=': write key=value pairs separated by commas",
                     variable, member);
            goto fail;
        }
        const char *k = m, *v = eq + 1;
        size_t klen = (size_t)(eq - m), vlen = mlen - klen - 1;
        trim(&k, &klen);
        trim(&v, &vlen);
        if (as_headers ? !is_token(k, klen) : (klen == 0 || !is_field_value(k, klen))) {
            snprintf(err, err_len, "%s: member %zu's key is %s", variable, member,
                     klen == 0    ? "empty"
                     : as_headers ? "not a header name (letters, digits and !#$%&'*+-.^_`|~ only)"
                                  : "not text");
            goto fail;
        }
        if (n == room) {
            snprintf(err, err_len, "%s: more than %zu members", variable, max);
            goto fail;
        }
        int bad = 0;
        got[n].name = copy_n(k, klen);
        got[n].value = percent_decode(v, vlen, &bad);
        if (!got[n].name || !got[n].value) {
            n++;
            if (!bad || !got[n - 1].name)
                snprintf(err, err_len, "%s: out of memory", variable);
            else
                snprintf(
                    err, err_len,
                    "%s: the value of '%s' has a malformed %%-escape (write %%XY, two hex digits, not %%00)",
                    variable, got[n - 1].name);
            goto fail;
        }
        n++;
        if (as_headers && is_reserved(got[n - 1].name)) {
            snprintf(err, err_len, "%s: header '%s' is kprof's to set: remove it", variable,
                     got[n - 1].name);
            goto fail;
        }
        if (!is_field_value(got[n - 1].value, strlen(got[n - 1].value))) {
            snprintf(err, err_len, "%s: the value of '%s' holds a control character", variable,
                     got[n - 1].name);
            goto fail;
        }
    }
    if (as_headers)
        return merge_headers(c, got, n, variable, err, err_len);
    if (n > 0) {
        kp_push_attribute *all = realloc(c->resource, (c->n_resource + n) * sizeof *all);
        if (!all) {
            snprintf(err, err_len, "%s: out of memory", variable);
            goto fail;
        }
        for (size_t i = 0; i < n; i++)
            all[c->n_resource + i] = (kp_push_attribute){got[i].name, got[i].value};
        c->resource = all;
        c->n_resource += n;
    }
    free(got);
    return 0;
fail:
    free_pairs(got, n);
    return -1;
}

int kp_push_config_parse_headers_text(kp_push_config *c, const char *text, size_t len,
                                      const char *source, char *err, size_t err_len)
{
    if (len > KP_PUSH_MAX_LIST_TEXT) {
        snprintf(err, err_len, "%s is longer than %d bytes: is it a headers file?", source,
                 KP_PUSH_MAX_LIST_TEXT);
        return -1;
    }
    kp_push_header *got = calloc(KP_PUSH_MAX_HEADERS, sizeof *got);
    if (!got) {
        snprintf(err, err_len, "%s: out of memory", source);
        return -1;
    }
    size_t n = 0, line = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        const char *s = p;
        size_t slen = (size_t)(stop - p);
        p = stop + 1;
        line++;
        if (slen > 0 && s[slen - 1] == '\r')
            slen--;
        trim(&s, &slen);
        if (slen == 0 || s[0] == '#')
            continue;
        const char *colon = memchr(s, ':', slen);
        if (!colon) {
            snprintf(err, err_len, "%s:%zu: no ':': write one 'Name: value' header a line", source,
                     line);
            goto fail;
        }
        const char *k = s, *v = colon + 1;
        size_t klen = (size_t)(colon - s), vlen = slen - klen - 1;
        trim(&v, &vlen);
        if (!is_token(k, klen)) {
            snprintf(err, err_len, "%s:%zu: the header name is %s", source, line,
                     klen == 0 ? "empty" : "not valid (letters, digits and !#$%&'*+-.^_`|~ only)");
            goto fail;
        }
        if (n == KP_PUSH_MAX_HEADERS) {
            snprintf(err, err_len, "%s: more than %d headers", source, KP_PUSH_MAX_HEADERS);
            goto fail;
        }
        got[n].name = copy_n(k, klen);
        got[n].value = copy_n(v, vlen);
        n++;
        if (!got[n - 1].name || !got[n - 1].value) {
            snprintf(err, err_len, "%s: out of memory", source);
            goto fail;
        }
        if (is_reserved(got[n - 1].name)) {
            snprintf(err, err_len, "%s:%zu: header '%s' is kprof's to set: remove it", source, line,
                     got[n - 1].name);
            goto fail;
        }
        if (!is_field_value(v, vlen)) {
            snprintf(err, err_len, "%s:%zu: the value of '%s' holds a control character", source,
                     line, got[n - 1].name);
            goto fail;
        }
    }
    return merge_headers(c, got, n, source, err, err_len);
fail:
    free_pairs(got, n);
    return -1;
}

int kp_push_config_read_headers_file(kp_push_config *c, const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open the headers file %s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = malloc(KP_PUSH_MAX_LIST_TEXT + 1);
    if (!buf) {
        fclose(f);
        snprintf(err, err_len, "%s: out of memory", path);
        return -1;
    }
    size_t len = fread(buf, 1, KP_PUSH_MAX_LIST_TEXT + 1, f);
    int failed = ferror(f);
    int saved = errno;
    fclose(f);
    int rc;
    if (failed) {
        snprintf(err, err_len, "cannot read the headers file %s: %s", path, strerror(saved));
        rc = -1;
    } else {
        rc = kp_push_config_parse_headers_text(c, buf, len, path, err, err_len);
    }
    free(buf);
    return rc;
}

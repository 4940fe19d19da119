/* Decoding OTLP replies: protobuf read by hand (three small messages do
 * not justify a protobuf runtime), every length checked against the bytes
 * there are. */
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "push/response.h"

kp_send_outcome kp_push_http_outcome(long status)
{
    if (status >= 200 && status < 300)
        return KP_SEND_OK;
    if (status == 429 || status == 502 || status == 503 || status == 504)
        return KP_SEND_RETRY;
    return KP_SEND_REJECTED;
}

kp_send_outcome kp_push_grpc_outcome(long code)
{
    switch (code) {
    case 0: return KP_SEND_OK;
    case 1:  /* CANCELLED */
    case 4:  /* DEADLINE_EXCEEDED */
    case 8:  /* RESOURCE_EXHAUSTED */
    case 10: /* ABORTED */
    case 11: /* OUT_OF_RANGE */
    case 14: /* UNAVAILABLE */
    case 15: /* DATA_LOSS */ return KP_SEND_RETRY;
    default: return KP_SEND_REJECTED;
    }
}

const char *kp_push_grpc_code_name(long code)
{
    static const char *const names[] = {"OK",
                                        "CANCELLED",
                                        "UNKNOWN",
                                        "INVALID_ARGUMENT",
                                        "DEADLINE_EXCEEDED",
                                        "NOT_FOUND",
                                        "ALREADY_EXISTS",
                                        "PERMISSION_DENIED",
                                        "RESOURCE_EXHAUSTED",
                                        "FAILED_PRECONDITION",
                                        "ABORTED",
                                        "OUT_OF_RANGE",
                                        "UNIMPLEMENTED",
                                        "INTERNAL",
                                        "UNAVAILABLE",
                                        "DATA_LOSS",
                                        "UNAUTHENTICATED"};
    if (code < 0 || code >= (long)(sizeof names / sizeof names[0]))
        return "UNKNOWN";
    return names[code];
}

typedef struct {
    const uint8_t *p, *end;
} pb_reader;

static int pb_varint(pb_reader *r, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (r->p == r->end)
            return -1;
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* The next field's number and wire type; 0 at the end, -1 when malformed. */
static int pb_field(pb_reader *r, uint64_t *num, unsigned *wire)
{
    if (r->p == r->end)
        return 0;
    uint64_t key;
    if (pb_varint(r, &key) != 0 || key >> 3 == 0)
        return -1;
    *num = key >> 3;
    *wire = (unsigned)(key & 7);
    return 1;
}

static int pb_bytes(pb_reader *r, const uint8_t **p, size_t *n)
{
    uint64_t len;
    if (pb_varint(r, &len) != 0 || len > (uint64_t)(r->end - r->p))
        return -1;
    *p = r->p;
    *n = (size_t)len;
    r->p += len;
    return 0;
}

static int pb_skip(pb_reader *r, unsigned wire)
{
    uint64_t v;
    const uint8_t *p;
    size_t n;
    switch (wire) {
    case 0: return pb_varint(r, &v);
    case 1: n = 8; break;
    case 2: return pb_bytes(r, &p, &n);
    case 5: n = 4; break;
    default: return -1; /* groups: never in these messages */
    }
    if ((size_t)(r->end - r->p) < n)
        return -1;
    r->p += n;
    return 0;
}

int kp_push_decode_export_response(const uint8_t *p, size_t n, int64_t *rejected, char *msg,
                                   size_t cap)
{
    *rejected = 0;
    if (cap)
        msg[0] = '\0';
    pb_reader r = {p, p + n};
    uint64_t num, v;
    unsigned wire;
    int more;
    while ((more = pb_field(&r, &num, &wire)) > 0) {
        if (num != 1 || wire != 2) {
            if (pb_skip(&r, wire) != 0)
                goto bad;
            continue;
        }
        const uint8_t *sp;
        size_t sn;
        if (pb_bytes(&r, &sp, &sn) != 0)
            goto bad;
        pb_reader s = {sp, sp + sn};
        while ((more = pb_field(&s, &num, &wire)) > 0) {
            const uint8_t *tp;
            size_t tn;
            if (num == 1 && wire == 0) {
                if (pb_varint(&s, &v) != 0)
                    goto bad;
                *rejected = (int64_t)v;
            } else if (num == 2 && wire == 2) {
                if (pb_bytes(&s, &tp, &tn) != 0)
                    goto bad;
                kp_push_sanitize(msg, cap, (const char *)tp, tn, 0);
            } else if (pb_skip(&s, wire) != 0) {
                goto bad;
            }
        }
        if (more < 0)
            goto bad;
    }
    if (more == 0)
        return 0;
bad:
    *rejected = 0;
    if (cap)
        msg[0] = '\0';
    return -1;
}

/* google.rpc.RetryInfo { retry_delay (1): Duration { seconds (1), nanos (2) } } */
static int decode_retry_info(const uint8_t *p, size_t n, long *retry_ms)
{
    pb_reader r = {p, p + n};
    uint64_t num, v;
    unsigned wire;
    int more;
    while ((more = pb_field(&r, &num, &wire)) > 0) {
        if (num != 1 || wire != 2) {
            if (pb_skip(&r, wire) != 0)
                return -1;
            continue;
        }
        const uint8_t *dp;
        size_t dn;
        if (pb_bytes(&r, &dp, &dn) != 0)
            return -1;
        pb_reader d = {dp, dp + dn};
        int64_t seconds = 0, nanos = 0;
        while ((more = pb_field(&d, &num, &wire)) > 0) {
            if (wire == 0 && (num == 1 || num == 2)) {
                if (pb_varint(&d, &v) != 0)
                    return -1;
                *(num == 1 ? &seconds : &nanos) = (int64_t)v;
            } else if (pb_skip(&d, wire) != 0) {
                return -1;
            }
        }
        if (more < 0 || seconds < 0 || nanos < 0 || nanos >= 1000000000)
            return -1;
        /* beyond a day is as good as a day: the backoff caps it anyway */
        *retry_ms = seconds > 86400 ? 86400000L : (long)(seconds * 1000 + nanos / 1000000);
    }
    return more;
}

int kp_push_decode_status(const uint8_t *p, size_t n, long *code, char *msg, size_t cap,
                          long *retry_ms)
{
    if (cap)
        msg[0] = '\0';
    pb_reader r = {p, p + n};
    uint64_t num, v;
    unsigned wire;
    int more;
    while ((more = pb_field(&r, &num, &wire)) > 0) {
        const uint8_t *fp;
        size_t fn;
        if (num == 1 && wire == 0) {
            if (pb_varint(&r, &v) != 0)
                return -1;
            *code = (long)(int32_t)v;
        } else if (num == 2 && wire == 2) {
            if (pb_bytes(&r, &fp, &fn) != 0)
                return -1;
            kp_push_sanitize(msg, cap, (const char *)fp, fn, 0);
        } else if (num == 3 && wire == 2) {
            if (pb_bytes(&r, &fp, &fn) != 0)
                return -1;
            /* google.protobuf.Any { type_url (1), value (2) } */
            pb_reader a = {fp, fp + fn};
            const uint8_t *type = NULL, *val = NULL, *bp;
            size_t type_n = 0, val_n = 0, bn;
            while ((more = pb_field(&a, &num, &wire)) > 0) {
                if ((num == 1 || num == 2) && wire == 2) {
                    if (pb_bytes(&a, &bp, &bn) != 0)
                        return -1;
                    if (num == 1)
                        type = bp, type_n = bn;
                    else
                        val = bp, val_n = bn;
                } else if (pb_skip(&a, wire) != 0) {
                    return -1;
                }
            }
            if (more < 0)
                return -1;
            static const char retry_info[] = "google.rpc.RetryInfo";
            size_t rn = sizeof retry_info - 1;
            if (type && type_n >= rn && memcmp(type + type_n - rn, retry_info, rn) == 0 &&
                decode_retry_info(val ? val : fp, val_n, retry_ms) != 0)
                return -1;
        } else if (pb_skip(&r, wire) != 0) {
            return -1;
        }
    }
    return more;
}

long kp_push_parse_retry_after(const char *value, time_t now)
{
    while (*value == ' ' || *value == '\t')
        value++;
    if (*value >= '0' && *value <= '9') {
        long s = 0;
        const char *c = value;
        for (; *c >= '0' && *c <= '9'; c++)
            if (s < 86400)
                s = s * 10 + (*c - '0');
        while (*c == ' ' || *c == '\t')
            c++;
        if (*c)
            return -1;
        return (s > 86400 ? 86400 : s) * 1000;
    }
    time_t when = curl_getdate(value, NULL);
    if (when == (time_t)-1)
        return -1;
    if (when <= now)
        return 0;
    return when - now > 86400 ? 86400000L : (long)(when - now) * 1000;
}

static int b64_value(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+' || ch == '-')
        return 62;
    if (ch == '/' || ch == '_')
        return 63;
    return -1;
}

long kp_push_base64_decode(const char *s, size_t n, uint8_t *out, size_t cap)
{
    while (n > 0 && s[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    unsigned bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value(s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6 | (uint32_t)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == cap)
                return -1;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    return (long)o;
}

static int hex(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = (char)(ch | 0x20);
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

void kp_push_sanitize(char *dst, size_t cap, const char *src, size_t n, int percent)
{
    if (cap == 0)
        return;
    size_t o = 0;
    int space = 0, cut = 0;
    for (size_t i = 0; i < n && !cut; i++) {
        unsigned char ch = (unsigned char)src[i];
        if (percent && ch == '%' && i + 2 < n && hex(src[i + 1]) >= 0 && hex(src[i + 2]) >= 0) {
            ch = (unsigned char)(hex(src[i + 1]) << 4 | hex(src[i + 2]));
            i += 2;
        }
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') {
            space = o > 0;
            continue;
        }
        if (o + space + 1 >= cap) {
            cut = 1;
            break;
        }
        if (space)
            dst[o++] = ' ';
        space = 0;
        dst[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    if (cut && cap >= 4) {
        o = o > cap - 4 ? cap - 4 : o;
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
}

#define _GNU_SOURCE
#include "node/nif_reader.h"

#include <ei.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kp/alloc.h"
#include "kprof_tracer_records.h"
#include "node/term.h"

typedef struct {
    char module[256], function[256];
    unsigned arity;
} mfa;

struct kp_nif_reader {
    int fd;
    unsigned char *buf;
    size_t len, cap;
    erlang_pid *pids;
    mfa *mfas;
};

kp_nif_reader *kp_nif_reader_create(int fd)
{
    kp_nif_reader *s = kp_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->fd = fd;
    s->cap = 1 << 20;
    s->buf = kp_malloc(s->cap);
    s->pids = kp_calloc(KPT_MAX_IDS, sizeof *s->pids);
    s->mfas = kp_calloc(KPT_MAX_IDS, sizeof *s->mfas);
    if (!s->buf || !s->pids || !s->mfas) {
        kp_nif_reader_free(s);
        return NULL;
    }
    return s;
}

void kp_nif_reader_free(kp_nif_reader *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    kp_free(s->buf);
    kp_free(s->pids);
    kp_free(s->mfas);
    kp_free(s);
}

void kp_nif_reader_restart(kp_nif_reader *s)
{
    s->len = 0;
}

int kp_nif_reader_fd(const kp_nif_reader *s)
{
    return s->fd;
}

static uint32_t u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static int64_t i64(const unsigned char *p)
{
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

static const kp_trace_event_kind kinds[] = {[KPT_CALL] = KP_TRACE_CALL,
                                            [KPT_RETURN_TO] = KP_TRACE_RETURN_TO,
                                            [KPT_IN] = KP_TRACE_IN,
                                            [KPT_OUT] = KP_TRACE_OUT,
                                            [KPT_GC_START] = KP_TRACE_GC_START,
                                            [KPT_GC_END] = KP_TRACE_GC_END,
                                            [KPT_SPAWN] = KP_TRACE_SPAWN,
                                            [KPT_EXIT] = KP_TRACE_EXIT,
                                            [KPT_RETURN_FROM] = KP_TRACE_RETURN_FROM,
                                            [KPT_EXCEPTION_FROM] = KP_TRACE_EXCEPTION_FROM};

/* Each reader below takes the record at `p` with `n` bytes available and
 * returns its size, 0 when it is not complete yet, or -1 when malformed. */

static long read_event(kp_nif_reader *s, const unsigned char *p, size_t n, kp_event_fn on_event,
                       void *ctx)
{
    if (n < KPT_EVENT_SIZE)
        return 0;
    uint32_t pid = u32(p + 1), arg = u32(p + 5);
    if (pid >= KPT_MAX_IDS)
        return -1;
    kp_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kinds[p[0]];
    ev.pid = s->pids[pid];
    ev.ts_ns = i64(p + 9);
    if (p[0] == KPT_SPAWN) {
        if (arg < KPT_MAX_IDS)
            ev.child = s->pids[arg];
        else
            ev.kind = KP_TRACE_OTHER; /* the child could not be named (the NIF was full) */
    } else if (arg < KPT_MAX_IDS) {
        memcpy(ev.module, s->mfas[arg].module, sizeof ev.module);
        memcpy(ev.function, s->mfas[arg].function, sizeof ev.function);
        ev.arity = s->mfas[arg].arity;
    } else if (ev.kind == KP_TRACE_CALL) {
        ev.kind = KP_TRACE_OTHER; /* its function could not be named (the NIF was full) */
    }
    return on_event(ctx, &ev) == 0 ? KPT_EVENT_SIZE : -1;
}

static long read_pid(kp_nif_reader *s, const unsigned char *p, size_t n)
{
    if (n < KPT_PID_HEAD)
        return 0;
    uint32_t id = u32(p + 1);
    size_t len = (size_t)p[5] | (size_t)p[6] << 8;
    if (n < KPT_PID_HEAD + len)
        return 0;
    const char *term = (const char *)p + KPT_PID_HEAD;
    int i = 0, version;
    if (id >= KPT_MAX_IDS || kp_term_check(term, len) != 0 ||
        ei_decode_version(term, &i, &version) != 0 || ei_decode_pid(term, &i, &s->pids[id]) != 0)
        return -1;
    return (long)(KPT_PID_HEAD + len);
}

static long read_mfa(kp_nif_reader *s, const unsigned char *p, size_t n)
{
    if (n < KPT_MFA_MIN)
        return 0;
    size_t ml = p[5];
    if (n < KPT_MFA_MIN + ml)
        return 0;
    size_t fl = p[6 + ml];
    if (n < KPT_MFA_MIN + ml + fl)
        return 0;
    uint32_t id = u32(p + 1);
    if (id >= KPT_MAX_IDS)
        return -1;
    memcpy(s->mfas[id].module, p + 6, ml);
    s->mfas[id].module[ml] = '\0';
    memcpy(s->mfas[id].function, p + 7 + ml, fl);
    s->mfas[id].function[fl] = '\0';
    s->mfas[id].arity = p[7 + ml + fl];
    return (long)(KPT_MFA_MIN + ml + fl);
}

static long read_mark(kp_nif_reader *s, const unsigned char *p, size_t n, kp_event_fn on_event,
                      void *ctx)
{
    if (n < KPT_MARK_HEAD)
        return 0;
    uint32_t pid = u32(p + 2), len = u32(p + 14);
    if (len > KPT_MARK_TERM_MAX || pid >= KPT_MAX_IDS ||
        (p[1] != KPT_MARK_BEGIN && p[1] != KPT_MARK_END))
        return -1;
    if (n < KPT_MARK_HEAD + (size_t)len)
        return 0;
    kp_trace_event ev;
    memset(&ev, 0, sizeof ev);
    if (kp_trace_decode_mark((const char *)p + KPT_MARK_HEAD, len, p[1] == KPT_MARK_BEGIN, &ev) !=
        0)
        return -1;
    ev.pid = s->pids[pid];
    ev.ts_ns = i64(p + 6);
    return on_event(ctx, &ev) == 0 ? (long)(KPT_MARK_HEAD + len) : -1;
}

static long read_seq_call(kp_nif_reader *s, const unsigned char *p, size_t n, kp_event_fn on_event,
                          void *ctx)
{
    if (n < KPT_SEQ_CALL_HEAD)
        return 0;
    uint32_t pid = u32(p + 1), fn = u32(p + 5), label = u32(p + 17), len = u32(p + 21);
    if (pid >= KPT_MAX_IDS || fn >= KPT_MAX_IDS || (label >= KPT_MAX_IDS && label != KPT_NO_ID) ||
        len > KPT_IDENTITY_TERM_MAX + 64)
        return -1;
    if (n < KPT_SEQ_CALL_HEAD + (size_t)len)
        return 0;
    kp_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = KP_TRACE_SEQ_CALL;
    ev.pid = s->pids[pid];
    ev.ts_ns = i64(p + 9);
    memcpy(ev.module, s->mfas[fn].module, sizeof ev.module);
    memcpy(ev.function, s->mfas[fn].function, sizeof ev.function);
    ev.arity = s->mfas[fn].arity;
    if (label != KPT_NO_ID) {
        ev.has_label = 1;
        ev.label = s->pids[label];
    }
    if (len) {
        /* checked whole here: ei's decoders, which the user runs on it, do
         * not check bounds */
        ev.identity = (const char *)p + KPT_SEQ_CALL_HEAD;
        ev.identity_len = len;
        if (p[KPT_SEQ_CALL_HEAD] != 131 || kp_term_check(ev.identity, len) != 0)
            return -1; /* the NIF writes whole external terms, version byte first */
    }
    return on_event(ctx, &ev) == 0 ? (long)(KPT_SEQ_CALL_HEAD + len) : -1;
}

/* LABEL: the followed process works for no request from here (trace_no 0) */
static long read_label(kp_nif_reader *s, const unsigned char *p, size_t n, kp_event_fn on_event,
                       void *ctx)
{
    if (n < KPT_LABEL_SIZE)
        return 0;
    uint32_t pid = u32(p + 1);
    if (pid >= KPT_MAX_IDS)
        return -1;
    kp_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = KP_TRACE_LABEL;
    ev.pid = s->pids[pid];
    ev.trace_no = u32(p + 5);
    ev.ts_ns = i64(p + 9);
    return on_event(ctx, &ev) == 0 ? KPT_LABEL_SIZE : -1;
}

/* SEND and RECEIVE share a layout: the process of the event, the other
 * process (KPT_NO_ID: unnamed, its node left empty: for SEND a name on
 * another node, for RECEIVE a sender the NIF could not name), the label
 * and the time. SEND: pid sent child a message of request trace
 * `trace_no`; RECEIVE: pid took one in from child. */
static long read_pair(kp_nif_reader *s, const unsigned char *p, size_t n, kp_trace_event_kind kind,
                      kp_event_fn on_event, void *ctx)
{
    if (n < KPT_SEND_SIZE)
        return 0;
    uint32_t pid = u32(p + 1), other = u32(p + 5);
    if (pid >= KPT_MAX_IDS || (other >= KPT_MAX_IDS && other != KPT_NO_ID))
        return -1;
    kp_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.pid = s->pids[pid];
    if (other != KPT_NO_ID)
        ev.child = s->pids[other];
    ev.trace_no = u32(p + 9);
    ev.ts_ns = i64(p + 13);
    return on_event(ctx, &ev) == 0 ? KPT_SEND_SIZE : -1;
}

static long read_drop(const unsigned char *p, size_t n, kp_event_fn on_event, void *ctx)
{
    if (n < KPT_DROP_SIZE)
        return 0;
    kp_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = KP_TRACE_OTHER;
    ev.dropped = u32(p + 1);
    return on_event(ctx, &ev) == 0 ? KPT_DROP_SIZE : -1;
}

static long read_record(kp_nif_reader *s, const unsigned char *p, size_t n, kp_event_fn on_event,
                        void *ctx)
{
    if (p[0] >= KPT_CALL && p[0] <= KPT_EXCEPTION_FROM)
        return read_event(s, p, n, on_event, ctx);
    switch (p[0]) {
    case KPT_PID: return read_pid(s, p, n);
    case KPT_MFA: return read_mfa(s, p, n);
    case KPT_MARK: return read_mark(s, p, n, on_event, ctx);
    case KPT_SEQ_CALL: return read_seq_call(s, p, n, on_event, ctx);
    case KPT_RESET: return 1;
    case KPT_DROP: return read_drop(p, n, on_event, ctx);
    case KPT_LABEL: return read_label(s, p, n, on_event, ctx);
    case KPT_SEND: return read_pair(s, p, n, KP_TRACE_SEND, on_event, ctx);
    case KPT_RECEIVE: return read_pair(s, p, n, KP_TRACE_RECEIVE, on_event, ctx);
    default: return -1;
    }
}

/* Hands every complete record buffered to `on_event` and keeps the rest
 * for more bytes. Returns 0, or -1 for a malformed record. */
static int read_buffered(kp_nif_reader *s, kp_event_fn on_event, void *ctx)
{
    size_t at = 0;
    while (at < s->len) {
        long used = read_record(s, s->buf + at, s->len - at, on_event, ctx);
        if (used < 0)
            return -1;
        if (used == 0)
            break;
        at += (size_t)used;
    }
    memmove(s->buf, s->buf + at, s->len - at);
    s->len -= at;
    return 0;
}

int kp_nif_reader_feed(kp_nif_reader *s, const void *data, size_t n, kp_event_fn on_event,
                       void *ctx)
{
    const unsigned char *d = data;
    while (n) {
        size_t take = s->cap - s->len < n ? s->cap - s->len : n;
        memcpy(s->buf + s->len, d, take);
        s->len += take;
        d += take;
        n -= take;
        if (read_buffered(s, on_event, ctx) != 0)
            return -1;
        if (take == 0 && s->len == s->cap)
            return -1; /* a record larger than the buffer */
    }
    return 0;
}

int kp_nif_reader_read(kp_nif_reader *s, kp_event_fn on_event, void *ctx)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        ssize_t n = recv(s->fd, s->buf + s->len, s->cap - s->len, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 1;
        if (n <= 0)
            return n == 0 ? 0 : -1;
        s->len += (size_t)n;
        if (read_buffered(s, on_event, ctx) != 0)
            return -1;
    }
    return 1;
}

#define _GNU_SOURCE
#include "trace/nif_reader.h"

#include <ei.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* record kinds, as kprof_tracer.c writes them */
enum { EV_CALL = 1, EV_RETURN_TO, EV_IN, EV_OUT, EV_GC_START, EV_GC_END, EV_SPAWN, EV_EXIT,
       EV_RETURN_FROM, REC_PID = 100, REC_MFA = 101, REC_MARK = 102, REC_RESET = 104,
       REC_DROP = 105 };

#define MAX_IDS 65536 /* the NIF resets its ids before that */

typedef struct {
    char module[256], function[256];
    unsigned arity;
} mfa;

struct kp_nif_stream {
    int fd;
    unsigned char *buf;
    size_t len, cap;
    erlang_pid *pids;
    mfa *mfas;
};

kp_nif_stream *kp_nif_stream_create(int fd)
{
    kp_nif_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->fd = fd;
    s->cap = 1 << 20;
    s->buf = malloc(s->cap);
    s->pids = calloc(MAX_IDS, sizeof *s->pids);
    s->mfas = calloc(MAX_IDS, sizeof *s->mfas);
    if (!s->buf || !s->pids || !s->mfas) {
        kp_nif_stream_free(s);
        return NULL;
    }
    return s;
}

void kp_nif_stream_free(kp_nif_stream *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    free(s->buf);
    free(s->pids);
    free(s->mfas);
    free(s);
}

int kp_nif_stream_fd(const kp_nif_stream *s)
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

static const kp_rt_kind kinds[] = {
    [EV_CALL] = KP_RT_CALL,       [EV_RETURN_TO] = KP_RT_RETURN_TO, [EV_IN] = KP_RT_IN,
    [EV_OUT] = KP_RT_OUT,         [EV_GC_START] = KP_RT_GC_START,   [EV_GC_END] = KP_RT_GC_END,
    [EV_SPAWN] = KP_RT_SPAWN,     [EV_EXIT] = KP_RT_EXIT,           [EV_RETURN_FROM] = KP_RT_RETURN_FROM};

/* One record at p (n bytes available): its size, 0 when incomplete, -1 when
 * malformed. */
static long one(kp_nif_stream *s, const unsigned char *p, size_t n,
                int (*on_event)(void *, const kp_rt_event *), void *ctx)
{
    kp_rt_event ev;
    if (p[0] >= EV_CALL && p[0] <= EV_RETURN_FROM) {
        if (n < 17)
            return 0;
        uint32_t pid = u32(p + 1), arg = u32(p + 5);
        if (pid >= MAX_IDS)
            return -1;
        memset(&ev, 0, sizeof ev);
        ev.kind = kinds[p[0]];
        ev.pid = s->pids[pid];
        ev.ts_ns = i64(p + 9);
        if (p[0] == EV_SPAWN) {
            if (arg < MAX_IDS)
                ev.child = s->pids[arg];
            else
                ev.kind = KP_RT_OTHER; /* the child could not be named (the NIF was full) */
        } else if (arg < MAX_IDS) {
            memcpy(ev.module, s->mfas[arg].module, sizeof ev.module);
            memcpy(ev.function, s->mfas[arg].function, sizeof ev.function);
            ev.arity = s->mfas[arg].arity;
        } else if (ev.kind == KP_RT_CALL) {
            ev.kind = KP_RT_OTHER; /* its function could not be named (the NIF was full) */
        }
        return on_event(ctx, &ev) == 0 ? 17 : -1;
    }
    switch (p[0]) {
    case REC_PID: {
        if (n < 7)
            return 0;
        uint32_t id = u32(p + 1);
        size_t len = (size_t)p[5] | (size_t)p[6] << 8;
        if (n < 7 + len)
            return 0;
        int i = 0, version;
        if (id >= MAX_IDS || ei_decode_version((const char *)p + 7, &i, &version) != 0 ||
            ei_decode_pid((const char *)p + 7, &i, &s->pids[id]) != 0 || (size_t)i > len)
            return -1;
        return (long)(7 + len);
    }
    case REC_MFA: {
        if (n < 7)
            return 0;
        size_t ml = p[5];
        if (n < 6 + ml + 1)
            return 0;
        size_t fl = p[6 + ml];
        if (n < 7 + ml + fl + 1)
            return 0;
        uint32_t id = u32(p + 1);
        if (id >= MAX_IDS)
            return -1;
        memcpy(s->mfas[id].module, p + 6, ml);
        s->mfas[id].module[ml] = '\0';
        memcpy(s->mfas[id].function, p + 7 + ml, fl);
        s->mfas[id].function[fl] = '\0';
        s->mfas[id].arity = p[7 + ml + fl];
        return (long)(8 + ml + fl);
    }
    case REC_MARK: {
        if (n < 18)
            return 0;
        uint32_t pid = u32(p + 2), len = u32(p + 14);
        if (len > (1u << 20) || pid >= MAX_IDS)
            return -1;
        if (n < 18 + (size_t)len)
            return 0;
        memset(&ev, 0, sizeof ev);
        if (kp_rt_decode_mark((const char *)p + 18, len, p[1] == 1, &ev) != 0)
            return -1;
        ev.pid = s->pids[pid];
        ev.ts_ns = i64(p + 6);
        return on_event(ctx, &ev) == 0 ? (long)(18 + len) : -1;
    }
    case REC_RESET:
        return 1;
    case REC_DROP:
        if (n < 5)
            return 0;
        memset(&ev, 0, sizeof ev);
        ev.kind = KP_RT_OTHER;
        ev.dropped = u32(p + 1);
        return on_event(ctx, &ev) == 0 ? 5 : -1;
    default:
        return -1;
    }
}

int kp_nif_stream_read(kp_nif_stream *s, int (*on_event)(void *, const kp_rt_event *), void *ctx)
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
        size_t at = 0;
        for (;;) {
            if (at == s->len)
                break;
            long used = one(s, s->buf + at, s->len - at, on_event, ctx);
            if (used < 0)
                return -1;
            if (used == 0)
                break;
            at += (size_t)used;
        }
        memmove(s->buf, s->buf + at, s->len - at);
        s->len -= at;
    }
    return 1;
}

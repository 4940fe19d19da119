/* Parts of request traces across nodes (rtrace/part.h): encoded where the
 * processes ran, merged where the trace began. */
#include "rtrace/part.h"

#include <kp/buf.h>
#include <kp/intern.h>
#include <kp/symbol.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pid_text.h"
#include "kp/alloc.h"
#include "rtrace/state.h"

#define MAX_PART_ITEMS 10000000 /* per list: a part past it is malformed */

/* ------------------------------------------------------------------ */
/* encoding, where the part's processes ran */

static int frame_term(char *buf, int *index, const kp_frames *frames, uint32_t id)
{
    size_t slen, mlen;
    const char *sym = kp_frames_symbol(frames, id, &slen);
    if (ei_encode_tuple_header(buf, index, 2) != 0 ||
        ei_encode_binary(buf, index, sym, (long)slen) != 0)
        return -1;
    const char *mod = kp_frames_module(frames, id, &mlen);
    return ei_encode_binary(buf, index, mod, (long)mlen);
}

int kp_rtrace_part_encode(const kp_rtrace_done *done, char *buf, int *index)
{
    const kp_rtrace_data *d = done->data;
    uint32_t n_frames = kp_frames_count(d->frames), n_stacks = kp_stacks_count(d->stacks);
    uint32_t *fmap = kp_calloc(n_frames + 1, sizeof *fmap); /* 1 + dense index; 0: unused */
    uint32_t *smap = kp_calloc(n_stacks + 1, sizeof *smap);
    int rc = fmap && smap ? 0 : -1;
    uint32_t nf = 0, ns = 0;
    for (size_t k = 0; rc == 0 && k < d->n_iv; k++) {
        const kp_rtrace_interval *v = &d->iv[k];
        size_t n;
        const uint32_t *ids = kp_stacks_get(d->stacks, v->stack, &n);
        if (!smap[v->stack])
            smap[v->stack] = ++ns;
        for (size_t i = 0; i < n; i++)
            if (!fmap[ids[i]])
                fmap[ids[i]] = ++nf;
        if (!fmap[v->pid_frame])
            fmap[v->pid_frame] = ++nf;
    }
    for (size_t k = 0; rc == 0 && k < d->n_links; k++) {
        if (!fmap[d->links[k].from])
            fmap[d->links[k].from] = ++nf;
        if (!fmap[d->links[k].to])
            fmap[d->links[k].to] = ++nf;
    }
    for (size_t k = 0; rc == 0 && k < done->n_remote_in; k++)
        if (!fmap[done->remote_in[k].to])
            fmap[done->remote_in[k].to] = ++nf;
    rc = rc == 0 ? ei_encode_tuple_header(buf, index, 5) : -1;
    /* frames and stacks in the order of their dense indices */
    uint32_t *order = rc == 0 ? kp_calloc((nf > ns ? nf : ns) + 1, sizeof *order) : NULL;
    if (!order)
        rc = -1;
    for (uint32_t id = 0; rc == 0 && id < n_frames; id++)
        if (fmap[id])
            order[fmap[id] - 1] = id;
    rc = rc == 0 && nf ? ei_encode_list_header(buf, index, nf) : rc;
    for (uint32_t i = 0; rc == 0 && i < nf; i++)
        rc = frame_term(buf, index, d->frames, order[i]);
    rc = rc == 0 ? ei_encode_empty_list(buf, index) : rc;
    for (uint32_t id = 0; rc == 0 && id < n_stacks; id++)
        if (smap[id])
            order[smap[id] - 1] = id;
    rc = rc == 0 && ns ? ei_encode_list_header(buf, index, ns) : rc;
    for (uint32_t i = 0; rc == 0 && i < ns; i++) {
        size_t n;
        const uint32_t *ids = kp_stacks_get(d->stacks, order[i], &n);
        rc = n ? ei_encode_list_header(buf, index, (long)n) : 0;
        for (size_t f = 0; rc == 0 && f < n; f++)
            rc = ei_encode_ulong(buf, index, fmap[ids[f]] - 1);
        rc = rc == 0 ? ei_encode_empty_list(buf, index) : rc;
    }
    rc = rc == 0 ? ei_encode_empty_list(buf, index) : rc;
    rc = rc == 0 && d->n_iv ? ei_encode_list_header(buf, index, (long)d->n_iv) : rc;
    for (size_t k = 0; rc == 0 && k < d->n_iv; k++) {
        const kp_rtrace_interval *v = &d->iv[k];
        rc = ei_encode_tuple_header(buf, index, 4) ||
                     ei_encode_ulong(buf, index, smap[v->stack] - 1) ||
                     ei_encode_ulong(buf, index, fmap[v->pid_frame] - 1) ||
                     ei_encode_longlong(buf, index, v->start) ||
                     ei_encode_longlong(buf, index, v->dur)
                 ? -1
                 : 0;
    }
    rc = rc == 0 ? ei_encode_empty_list(buf, index) : rc;
    rc = rc == 0 && d->n_links ? ei_encode_list_header(buf, index, (long)d->n_links) : rc;
    for (size_t k = 0; rc == 0 && k < d->n_links; k++) {
        const kp_rtrace_link *l = &d->links[k];
        rc = ei_encode_tuple_header(buf, index, 5) ||
                     ei_encode_ulong(buf, index, fmap[l->from] - 1) ||
                     ei_encode_ulong(buf, index, fmap[l->to] - 1) ||
                     ei_encode_longlong(buf, index, l->ts) ||
                     ei_encode_longlong(buf, index, l->ts_to) ||
                     ei_encode_ulong(buf, index, l->message ? 1 : 0)
                 ? -1
                 : 0;
    }
    rc = rc == 0 ? ei_encode_empty_list(buf, index) : rc;
    rc = rc == 0 && done->n_remote_in ? ei_encode_list_header(buf, index, (long)done->n_remote_in)
                                      : rc;
    for (size_t k = 0; rc == 0 && k < done->n_remote_in; k++) {
        const kp_rtrace_remote_in *r = &done->remote_in[k];
        rc = ei_encode_tuple_header(buf, index, 5) ||
                     ei_encode_ulong(buf, index, fmap[r->to] - 1) ||
                     ei_encode_binary(buf, index, r->from.node, (long)strlen(r->from.node)) ||
                     ei_encode_ulong(buf, index, r->from.num) ||
                     ei_encode_ulong(buf, index, r->from.serial) ||
                     ei_encode_longlong(buf, index, r->ts)
                 ? -1
                 : 0;
    }
    rc = rc == 0 ? ei_encode_empty_list(buf, index) : rc;
    kp_free(order);
    kp_free(fmap);
    kp_free(smap);
    return rc;
}

/* ------------------------------------------------------------------ */
/* merging, where the trace began */

typedef struct {
    kp_rtrace *rtrace;
    trace *t;
    const char *node;
    int64_t offset;
    const char *buf;
    int *i;
    uint32_t *frames; /* the part's frame index -> this table's id */
    size_t n_frames;
    uint32_t *stacks;
    size_t n_stacks;
    kp_buf text, kind;
} merge;

/* A binary of at most `cap` - 1 bytes into `out`, NUL-terminated. */
static int binary(merge *m, char *out, size_t cap, size_t *len)
{
    int type, size;
    long n;
    if (ei_get_type(m->buf, m->i, &type, &size) != 0 || type != ERL_BINARY_EXT || size < 0 ||
        (size_t)size >= cap || ei_decode_binary(m->buf, m->i, out, &n) != 0)
        return -1;
    out[n] = '\0';
    *len = (size_t)n;
    return 0;
}

static int index_of(merge *m, size_t limit, uint32_t *out)
{
    unsigned long v;
    if (ei_decode_ulong(m->buf, m->i, &v) != 0 || v >= limit)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int list(merge *m, int *n)
{
    int type, size;
    if (ei_get_type(m->buf, m->i, &type, &size) != 0)
        return -1;
    if (type == ERL_NIL_EXT) {
        *n = 0;
        return ei_decode_list_header(m->buf, m->i, n);
    }
    if (ei_decode_list_header(m->buf, m->i, n) != 0 || *n < 0 || *n > MAX_PART_ITEMS)
        return -1;
    return 0;
}

static int list_end(merge *m, int n)
{
    int tail;
    return n ? ei_decode_list_header(m->buf, m->i, &tail) : 0;
}

/* A process of the part's node: its pseudo-frame NODE:<0.N.S>. */
static int remote_process(merge *m, const char *node, const char *pid, size_t len, uint32_t *id)
{
    kp_buf_clear(&m->text);
    if (kp_buf_append_str(&m->text, node) != KP_OK || kp_buf_append_char(&m->text, ':') != KP_OK ||
        kp_buf_append(&m->text, pid, len) != KP_OK)
        return -1;
    return kp_frames_intern_pseudo(m->rtrace->frames, m->text.data, m->text.len, "process", id) ==
                   KP_OK
               ? 0
               : -1;
}

static int frames(merge *m)
{
    int n;
    if (list(m, &n) != 0 || !(m->frames = kp_calloc((size_t)n + 1, sizeof *m->frames)))
        return -1;
    m->n_frames = (size_t)n;
    for (int k = 0; k < n; k++) {
        char sym[4096], kind[512];
        size_t slen, klen;
        int arity;
        if (ei_decode_tuple_header(m->buf, m->i, &arity) != 0 || arity != 2 ||
            binary(m, sym, sizeof sym, &slen) != 0 || binary(m, kind, sizeof kind, &klen) != 0)
            return -1;
        kp_buf_clear(&m->text);
        kp_buf_clear(&m->kind);
        if (kp_symbol_decode(&m->text, sym, slen) != KP_OK ||
            kp_symbol_decode(&m->kind, kind, klen) != KP_OK ||
            kp_buf_append_char(&m->kind, '\0') != KP_OK)
            return -1;
        int rc;
        if (strcmp(m->kind.data, "process") == 0) {
            char pid[256];
            size_t len = m->text.len < sizeof pid ? m->text.len : sizeof pid - 1;
            memcpy(pid, m->text.data, len);
            rc = remote_process(m, m->node, pid, len, &m->frames[k]);
        } else {
            rc = kp_frames_intern_pseudo(m->rtrace->frames, m->text.data, m->text.len, m->kind.data,
                                         &m->frames[k]) == KP_OK
                     ? 0
                     : -1;
        }
        if (rc != 0)
            return -1;
    }
    return list_end(m, n);
}

static int stacks(merge *m)
{
    int n;
    if (list(m, &n) != 0 || !(m->stacks = kp_calloc((size_t)n + 1, sizeof *m->stacks)))
        return -1;
    m->n_stacks = (size_t)n;
    uint32_t ids[1024];
    for (int k = 0; k < n; k++) {
        int depth, type, size;
        /* a list of indices below 256 crosses distribution as a string */
        if (ei_get_type(m->buf, m->i, &type, &size) != 0)
            return -1;
        if (type == ERL_STRING_EXT) {
            unsigned char bytes[1025];
            if (size < 0 || size > 1024 || ei_decode_string(m->buf, m->i, (char *)bytes) != 0)
                return -1;
            depth = size;
            for (int f = 0; f < depth; f++) {
                if (bytes[f] >= m->n_frames)
                    return -1;
                ids[f] = m->frames[bytes[f]];
            }
        } else {
            if (list(m, &depth) != 0 || depth > 1024)
                return -1;
            for (int f = 0; f < depth; f++) {
                uint32_t fi;
                if (index_of(m, m->n_frames, &fi) != 0)
                    return -1;
                ids[f] = m->frames[fi];
            }
            if (list_end(m, depth) != 0)
                return -1;
        }
        if (kp_stacks_intern(m->t->stacks, ids, (size_t)depth, &m->stacks[k]) != KP_OK)
            return -1;
    }
    return list_end(m, n);
}

static int intervals(merge *m)
{
    int n;
    if (list(m, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        int arity;
        uint32_t s, p;
        long long start, dur;
        if (ei_decode_tuple_header(m->buf, m->i, &arity) != 0 || arity != 4 ||
            index_of(m, m->n_stacks, &s) != 0 || index_of(m, m->n_frames, &p) != 0 ||
            ei_decode_longlong(m->buf, m->i, &start) != 0 ||
            ei_decode_longlong(m->buf, m->i, &dur) != 0 || dur < 0)
            return -1;
        int64_t from = (int64_t)start - m->offset;
        if (kp_rtrace_add_time(m->t, m->stacks[s], m->frames[p], from, (int64_t)dur) != 0)
            return -1;
        if (from + (int64_t)dur > m->t->last)
            m->t->last = from + (int64_t)dur;
    }
    return list_end(m, n);
}

static int links(merge *m)
{
    int n;
    if (list(m, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        int arity;
        uint32_t from, to;
        long long ts, ts_to;
        unsigned long message;
        if (ei_decode_tuple_header(m->buf, m->i, &arity) != 0 || arity != 5 ||
            index_of(m, m->n_frames, &from) != 0 || index_of(m, m->n_frames, &to) != 0 ||
            ei_decode_longlong(m->buf, m->i, &ts) != 0 ||
            ei_decode_longlong(m->buf, m->i, &ts_to) != 0 ||
            ei_decode_ulong(m->buf, m->i, &message) != 0)
            return -1;
        if (kp_rtrace_add_link(m->t, m->frames[from], m->frames[to], (int64_t)ts - m->offset,
                               message != 0))
            m->t->links[m->t->n_links - 1].ts_to = (int64_t)ts_to - m->offset;
    }
    return list_end(m, n);
}

/* When process `from` sent what was taken in at `ts`: the start of its
 * stretch that holds `ts` (it waits in it for the answer), else `ts`. */
static int64_t sent_at(const trace *t, uint32_t from, int64_t ts)
{
    for (size_t k = 0; k < t->times.n_iv; k++) {
        const kp_rtrace_interval *v = &t->times.iv[k];
        if (v->pid_frame == from && v->start <= ts && ts < v->start + v->dur)
            return v->start;
    }
    return ts;
}

/* An arrow of a message from process `from` to `to`, taken in at `ts`. */
static void arrow(trace *t, uint32_t from, uint32_t to, int64_t ts)
{
    if (kp_rtrace_add_link(t, from, to, sent_at(t, from, ts), 1))
        t->links[t->n_links - 1].ts_to = ts;
}

/* What the part's processes took in from this node's processes: arrows. */
static int received(merge *m)
{
    int n;
    if (list(m, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        int arity;
        uint32_t to, id;
        char node[1024];
        size_t len;
        unsigned long num, serial;
        long long ts;
        if (ei_decode_tuple_header(m->buf, m->i, &arity) != 0 || arity != 5 ||
            index_of(m, m->n_frames, &to) != 0 || binary(m, node, sizeof node, &len) != 0 ||
            ei_decode_ulong(m->buf, m->i, &num) != 0 ||
            ei_decode_ulong(m->buf, m->i, &serial) != 0 ||
            ei_decode_longlong(m->buf, m->i, &ts) != 0)
            return -1;
        if (strcmp(node, m->t->root.node) != 0)
            continue; /* from a third node: its own part draws nothing here */
        char pid[KP_PID_TEXT_MAX];
        int plen = kp_pid_text(pid, (uint32_t)num, (uint32_t)serial);
        if (kp_frames_intern_pseudo(m->rtrace->frames, pid, (size_t)plen, "process", &id) != KP_OK)
            return -1;
        arrow(m->t, id, m->frames[to], (int64_t)ts - m->offset);
    }
    return list_end(m, n);
}

/* What this node's processes took in from the part's: arrows back. */
static int answered(merge *m)
{
    trace *t = m->t;
    for (size_t k = 0; k < t->n_remote_in; k++) {
        kp_rtrace_remote_in *r = &t->remote_in[k];
        if (strcmp(r->from.node, m->node) != 0)
            continue;
        r->from.node[0] = '\0'; /* drawn: not again with another part */
        char pid[KP_PID_TEXT_MAX];
        int plen = kp_pid_text(pid, r->from.num, r->from.serial);
        uint32_t from;
        if (remote_process(m, m->node, pid, (size_t)plen, &from) != 0)
            return -1;
        arrow(t, from, r->to, r->ts);
    }
    return 0;
}

static int add_clock(trace *t, const char *node, int64_t offset, int64_t error)
{
    for (size_t k = 0; k < t->n_clocks; k++)
        if (strcmp(t->clocks[k].name, node) == 0)
            return 0;
    kp_rtrace_clock *c = kp_realloc_array(t->clocks, t->n_clocks + 1, sizeof *c);
    if (!c)
        return -1;
    t->clocks = c;
    c = &t->clocks[t->n_clocks++];
    snprintf(c->name, sizeof c->name, "%s", node);
    c->offset_ns = offset;
    c->error_ns = error;
    return 0;
}

int kp_rtrace_merge_part(kp_rtrace *rtrace, uint32_t no, const char *node, int64_t offset_ns,
                         int64_t error_ns, const char *buf, int *index)
{
    uint32_t k;
    if (!kp_u64_map_get(&rtrace->by_no, no, &k) || rtrace->traces[k].origin[0]) {
        ei_skip_term(buf, index);
        return 0;
    }
    merge m = {.rtrace = rtrace,
               .t = &rtrace->traces[k],
               .node = node,
               .offset = offset_ns,
               .buf = buf,
               .i = index,
               .text = KP_BUF_INIT,
               .kind = KP_BUF_INIT};
    int arity;
    int rc = ei_decode_tuple_header(buf, index, &arity) != 0 || arity != 5 || frames(&m) != 0 ||
                     stacks(&m) != 0 || intervals(&m) != 0 || links(&m) != 0 || received(&m) != 0 ||
                     answered(&m) != 0 || add_clock(m.t, node, offset_ns, error_ns) != 0
                 ? -1
                 : 1;
    kp_free(m.frames);
    kp_free(m.stacks);
    kp_buf_free(&m.text);
    kp_buf_free(&m.kind);
    return rc;
}

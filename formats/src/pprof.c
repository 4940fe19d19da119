#include "kp/pprof.h"

#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"
#include "kp/protobuf.h"
#include "kp/strtab.h"
#include "kp/symbol.h"

#define MAX_TYPES 16

struct kp_pprof {
    size_t n_types;
    uint32_t type_ids[MAX_TYPES], unit_ids[MAX_TYPES];
    kp_strtab *strings;      /* string_table: "" is 0 */
    unsigned char *is_frame; /* per string id: a frame's name (a function) */
    uint32_t *shown;         /* per frame's string id: its Function's name */
    size_t cap_frame;
    uint32_t *frames; /* every sample's frames, leaf first */
    size_t n_frames, cap_frames;
    size_t *ends;    /* sample k's frames end at ends[k] */
    int64_t *values; /* n_types per sample */
    size_t n_samples, cap_samples;
};

kp_pprof *kp_pprof_create(const kp_pprof_type *types, size_t n_types)
{
    if (n_types == 0 || n_types > MAX_TYPES)
        return NULL;
    kp_pprof *p = kp_calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n_types = n_types;
    uint32_t empty;
    p->strings = kp_strtab_create();
    if (!p->strings || kp_strtab_intern(p->strings, "", 0, &empty, NULL) != KP_OK)
        goto fail;
    for (size_t k = 0; k < n_types; k++)
        if (kp_strtab_intern(p->strings, types[k].type, strlen(types[k].type), &p->type_ids[k],
                             NULL) != KP_OK ||
            kp_strtab_intern(p->strings, types[k].unit, strlen(types[k].unit), &p->unit_ids[k],
                             NULL) != KP_OK)
            goto fail;
    return p;
fail:
    kp_pprof_free(p);
    return NULL;
}

void kp_pprof_free(kp_pprof *p)
{
    if (!p)
        return;
    kp_strtab_free(p->strings);
    kp_free(p->is_frame);
    kp_free(p->shown);
    kp_free(p->frames);
    kp_free(p->ends);
    kp_free(p->values);
    kp_free(p);
}

size_t kp_pprof_samples(const kp_pprof *p)
{
    return p->n_samples;
}

/* Marks string `id` (`name`, `len` bytes) a frame's, with the name its
 * Function shows: the frame readable, its percent-encoding undone
 * (kp_symbol_decode: "anonymous fn/1 in MyApp.Hot.spin/2"), and since pprof
 * takes <...> for C++ template arguments and drops them (a process's frame
 * <0.85.0> would show as <unknown>), those brackets become [...]; the
 * system_name keeps the frame as it is. */
static kp_status mark_frame(kp_pprof *p, uint32_t id, const char *name, size_t len)
{
    if (id >= p->cap_frame) {
        size_t cap = p->cap_frame ? p->cap_frame : 256;
        while (cap <= id)
            cap *= 2;
        unsigned char *f = kp_realloc_array(p->is_frame, cap, 1);
        if (f)
            p->is_frame = f;
        uint32_t *s = kp_realloc_array(p->shown, cap, sizeof *s);
        if (s)
            p->shown = s;
        if (!f || !s)
            return KP_ERR_NOMEM;
        memset(f + p->cap_frame, 0, cap - p->cap_frame);
        p->cap_frame = cap;
    }
    if (p->is_frame[id])
        return KP_OK;
    uint32_t shown = id;
    if (memchr(name, '<', len) || memchr(name, '>', len) || memchr(name, '%', len)) {
        kp_buf copy = KP_BUF_INIT;
        kp_status st = kp_symbol_decode(&copy, name, len);
        for (size_t k = 0; k < copy.len; k++)
            copy.data[k] = copy.data[k] == '<' ? '[' : copy.data[k] == '>' ? ']' : copy.data[k];
        if (st == KP_OK)
            st = kp_strtab_intern(p->strings, copy.len ? copy.data : "", copy.len, &shown, NULL);
        kp_buf_free(&copy);
        if (st != KP_OK)
            return st;
    }
    p->shown[id] = shown;
    p->is_frame[id] = 1;
    return KP_OK;
}

kp_status kp_pprof_add(kp_pprof *p, const char *stack, size_t len, const int64_t *values)
{
    if (len == 0 || stack[0] == ';' || stack[len - 1] == ';')
        return KP_ERR_FORMAT;
    for (size_t k = 1; k < len; k++)
        if (stack[k] == ';' && stack[k - 1] == ';')
            return KP_ERR_FORMAT;
    if (p->n_samples == p->cap_samples) {
        size_t cap = p->cap_samples ? p->cap_samples * 2 : 64;
        size_t *e = kp_realloc_array(p->ends, cap, sizeof *e);
        if (e)
            p->ends = e;
        int64_t *v = kp_realloc_array(p->values, cap * p->n_types, sizeof *v);
        if (v)
            p->values = v;
        if (!e || !v)
            return KP_ERR_NOMEM;
        p->cap_samples = cap;
    }
    size_t start = p->n_frames;
    /* leaf first, as pprof wants: the frames from the last one back */
    for (size_t end = len; end > 0;) {
        size_t begin = end;
        while (begin > 0 && stack[begin - 1] != ';')
            begin--;
        if (p->n_frames == p->cap_frames) {
            size_t cap = p->cap_frames ? p->cap_frames * 2 : 1024;
            uint32_t *f = kp_realloc_array(p->frames, cap, sizeof *f);
            if (!f) {
                p->n_frames = start;
                return KP_ERR_NOMEM;
            }
            p->frames = f;
            p->cap_frames = cap;
        }
        uint32_t id;
        kp_status st = kp_strtab_intern(p->strings, stack + begin, end - begin, &id, NULL);
        if (st == KP_OK)
            st = mark_frame(p, id, stack + begin, end - begin);
        if (st != KP_OK) {
            p->n_frames = start;
            return st;
        }
        p->frames[p->n_frames++] = id;
        end = begin > 0 ? begin - 1 : 0;
    }
    p->ends[p->n_samples] = p->n_frames;
    memcpy(p->values + p->n_samples * p->n_types, values, p->n_types * sizeof *values);
    p->n_samples++;
    return KP_OK;
}

/* Sample: location_id (1) leaf first, value (2), both packed. */
static kp_status sample(const kp_pprof *p, size_t k, kp_buf *ids, kp_buf *vals, kp_buf *msg)
{
    size_t begin = k ? p->ends[k - 1] : 0;
    kp_buf_clear(ids);
    kp_buf_clear(vals);
    kp_buf_clear(msg);
    kp_status st = KP_OK;
    for (size_t f = begin; f < p->ends[k] && st == KP_OK; f++)
        st = kp_pb_varint(ids, p->frames[f]); /* a frame's location id is its name's */
    for (size_t t = 0; t < p->n_types && st == KP_OK; t++)
        st = kp_pb_varint(vals, (uint64_t)p->values[k * p->n_types + t]);
    if (st == KP_OK)
        st = kp_pb_field_bytes(msg, 1, ids->data, ids->len);
    if (st == KP_OK)
        st = kp_pb_field_bytes(msg, 2, vals->data, vals->len);
    return st;
}

kp_status kp_pprof_encode(const kp_pprof *p, int64_t time_ns, int64_t duration_ns, kp_buf *out)
{
    kp_buf msg = KP_BUF_INIT, inner = KP_BUF_INIT, ids = KP_BUF_INIT, vals = KP_BUF_INIT;
    kp_status st = KP_OK;
    for (size_t t = 0; t < p->n_types && st == KP_OK; t++) { /* sample_type (1) */
        kp_buf_clear(&msg);
        st = kp_pb_field_varint(&msg, 1, p->type_ids[t]);
        if (st == KP_OK)
            st = kp_pb_field_varint(&msg, 2, p->unit_ids[t]);
        if (st == KP_OK)
            st = kp_pb_field_bytes(out, 1, msg.data, msg.len);
    }
    for (size_t k = 0; k < p->n_samples && st == KP_OK; k++) { /* sample (2) */
        st = sample(p, k, &ids, &vals, &msg);
        if (st == KP_OK)
            st = kp_pb_field_bytes(out, 2, msg.data, msg.len);
    }
    /* location (4) and function (5): one each per frame name, both with the
     * name's string id as their id (never 0: "" is string 0) */
    uint32_t n = kp_strtab_count(p->strings);
    for (uint32_t id = 1; id < n && st == KP_OK; id++) {
        if (id >= p->cap_frame || !p->is_frame[id])
            continue;
        kp_buf_clear(&inner); /* Line: function_id (1) */
        kp_buf_clear(&msg);   /* Location: id (1), line (4) */
        st = kp_pb_field_varint(&inner, 1, id);
        if (st == KP_OK)
            st = kp_pb_field_varint(&msg, 1, id);
        if (st == KP_OK)
            st = kp_pb_field_bytes(&msg, 4, inner.data, inner.len);
        if (st == KP_OK)
            st = kp_pb_field_bytes(out, 4, msg.data, msg.len);
    }
    for (uint32_t id = 1; id < n && st == KP_OK; id++) {
        if (id >= p->cap_frame || !p->is_frame[id])
            continue;
        kp_buf_clear(&msg); /* Function: id (1), name (2), system_name (3) */
        st = kp_pb_field_varint(&msg, 1, id);
        if (st == KP_OK)
            st = kp_pb_field_varint(&msg, 2, p->shown[id]);
        if (st == KP_OK)
            st = kp_pb_field_varint(&msg, 3, id);
        if (st == KP_OK)
            st = kp_pb_field_bytes(out, 5, msg.data, msg.len);
    }
    for (uint32_t id = 0; id < n && st == KP_OK; id++) { /* string_table (6) */
        size_t len;
        const void *s = kp_strtab_get(p->strings, id, &len);
        st = kp_pb_field_bytes(out, 6, s, len);
    }
    if (st == KP_OK && time_ns)
        st = kp_pb_field_varint(out, 9, (uint64_t)time_ns);
    if (st == KP_OK && duration_ns)
        st = kp_pb_field_varint(out, 10, (uint64_t)duration_ns);
    if (st == KP_OK) { /* period_type (11): the first sample type */
        kp_buf_clear(&msg);
        st = kp_pb_field_varint(&msg, 1, p->type_ids[0]);
        if (st == KP_OK)
            st = kp_pb_field_varint(&msg, 2, p->unit_ids[0]);
        if (st == KP_OK)
            st = kp_pb_field_bytes(out, 11, msg.data, msg.len);
    }
    /* default_sample_type (14): the first type; pprof would show the last */
    if (st == KP_OK)
        st = kp_pb_field_varint(out, 14, p->type_ids[0]);
    kp_buf_free(&msg);
    kp_buf_free(&inner);
    kp_buf_free(&ids);
    kp_buf_free(&vals);
    return st;
}

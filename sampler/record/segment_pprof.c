#define _GNU_SOURCE
#include "record/segment_pprof.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "kp/alloc.h"
#include "kp/folded.h"
#include "kp/pprof.h"
#include "kp/sink.h"

typedef struct {
    uint32_t stack;
    int64_t w[KP_WEIGHT_COUNT];
    uint64_t time_us;
} held_sample;

struct kp_segment_pprof {
    const kp_frames *frames;
    const kp_stacks *stacks;
    held_sample held[2]; /* the newest samples, oldest first */
    size_t n_held;
    int64_t *sums; /* KP_WEIGHT_COUNT per stack id, of the segment so far */
    size_t cap;
    uint32_t *used; /* stack ids with a sum */
    size_t n_used, cap_used;
    uint64_t first_us, last_us;
    kp_buf text;
};

kp_segment_pprof *kp_segment_pprof_create(const kp_frames *frames, const kp_stacks *stacks)
{
    kp_segment_pprof *s = kp_calloc(1, sizeof *s);
    if (s) {
        s->frames = frames;
        s->stacks = stacks;
    }
    return s;
}

void kp_segment_pprof_free(kp_segment_pprof *s)
{
    if (!s)
        return;
    kp_free(s->sums);
    kp_free(s->used);
    kp_buf_free(&s->text);
    kp_free(s);
}

/* Into the segment's sums. */
static int sum(kp_segment_pprof *s, const held_sample *h)
{
    if (h->stack >= s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (cap <= h->stack)
            cap *= 2;
        int64_t *a = kp_realloc_array(s->sums, cap * KP_WEIGHT_COUNT, sizeof *a);
        if (!a)
            return -1;
        memset(a + s->cap * KP_WEIGHT_COUNT, 0, (cap - s->cap) * KP_WEIGHT_COUNT * sizeof *a);
        s->sums = a;
        s->cap = cap;
    }
    int64_t *row = s->sums + (size_t)h->stack * KP_WEIGHT_COUNT;
    int fresh = 1;
    for (int k = 0; k < KP_WEIGHT_COUNT; k++)
        fresh &= row[k] == 0;
    if (fresh) {
        if (s->n_used == s->cap_used) {
            size_t cap = s->cap_used ? s->cap_used * 2 : 256;
            uint32_t *u = kp_realloc_array(s->used, cap, sizeof *u);
            if (!u)
                return -1;
            s->used = u;
            s->cap_used = cap;
        }
        s->used[s->n_used++] = h->stack;
    }
    for (int k = 0; k < KP_WEIGHT_COUNT; k++)
        if (h->w[k] > 0)
            row[k] = h->w[k] > INT64_MAX - row[k] ? INT64_MAX : row[k] + h->w[k];
    if (!s->first_us)
        s->first_us = h->time_us;
    s->last_us = h->time_us;
    return 0;
}

int kp_segment_pprof_add(kp_segment_pprof *s, uint32_t stack,
                         const int64_t weights[KP_WEIGHT_COUNT], uint64_t time_us)
{
    if (s->n_held == 2) {
        if (sum(s, &s->held[0]) != 0)
            return -1;
        s->held[0] = s->held[1];
        s->n_held = 1;
    }
    held_sample *h = &s->held[s->n_held++];
    h->stack = stack;
    memcpy(h->w, weights, sizeof h->w);
    h->time_us = time_us;
    return 0;
}

/* SEGMENT.pb.gz for SEGMENT.perf[.gz|.zst] */
static void profile_path(const char *segment, char *out, size_t cap)
{
    const char *ext = strstr(segment, ".perf");
    int base = ext ? (int)(ext - segment) : (int)strlen(segment);
    snprintf(out, cap, "%.*s.pb.gz", base, segment);
}

/* The profile of the segment `keep` before PREFIX-NNNNNN.perf..., which
 * --keep removed: its path in `out`, or 0 when there is none. */
static int removed_profile(const char *segment, unsigned keep, char *out, size_t cap)
{
    const char *ext = strstr(segment, ".perf");
    if (!ext || ext - segment < 7 || ext[-7] != '-')
        return 0;
    unsigned long long n = strtoull(ext - 6, NULL, 10);
    if (n <= keep)
        return 0;
    snprintf(out, cap, "%.*s%06llu.pb.gz", (int)(ext - 6 - segment), segment, n - keep);
    return 1;
}

int kp_segment_pprof_write(kp_segment_pprof *s, const char *segment_path, size_t held,
                           unsigned keep, char *err, size_t err_len)
{
    for (size_t k = 0; k + held < s->n_held; k++) /* what stays held starts the next */
        if (sum(s, &s->held[k]) != 0) {
            snprintf(err, err_len, "out of memory");
            return -1;
        }
    size_t drop = s->n_held > held ? s->n_held - held : 0;
    memmove(s->held, s->held + drop, (s->n_held - drop) * sizeof *s->held);
    s->n_held -= drop;
    kp_pprof_type types[KP_WEIGHT_COUNT];
    for (int k = 0; k < KP_WEIGHT_COUNT; k++)
        types[k] = (kp_pprof_type){kp_weight_names[k], kp_weight_units[k]};
    kp_pprof *p = kp_pprof_create(types, KP_WEIGHT_COUNT);
    kp_status st = p ? KP_OK : KP_ERR_NOMEM;
    for (size_t u = 0; u < s->n_used && st == KP_OK; u++) {
        st = kp_folded_stack_text(s->frames, s->stacks, s->used[u], "beam.smp", &s->text);
        if (st == KP_OK)
            st = kp_pprof_add(p, s->text.data, s->text.len,
                              s->sums + (size_t)s->used[u] * KP_WEIGHT_COUNT);
    }
    char path[4300];
    profile_path(segment_path, path, sizeof path);
    kp_buf out = KP_BUF_INIT;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t duration = (int64_t)(s->last_us - s->first_us) * 1000;
    int64_t wall = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - duration;
    if (st == KP_OK)
        st = kp_pprof_encode(p, wall, duration, &out);
    kp_sink *sink = NULL;
    if (st == KP_OK)
        st = kp_sink_open_file(path, KP_COMPRESS_GZIP, 0, &sink);
    if (st == KP_OK) {
        st = kp_sink_write(sink, out.data, out.len);
        st = st == KP_OK ? kp_sink_commit(sink) : (kp_sink_abort(sink), st);
    }
    if (st != KP_OK)
        snprintf(err, err_len, "cannot write %s: %s", path, kp_status_reason(st, errno));
    char old[4300];
    if (keep && removed_profile(segment_path, keep, old, sizeof old))
        unlink(old); /* already gone, if it never was written */
    kp_buf_free(&out);
    kp_pprof_free(p);
    for (size_t u = 0; u < s->n_used; u++)
        memset(s->sums + (size_t)s->used[u] * KP_WEIGHT_COUNT, 0,
               KP_WEIGHT_COUNT * sizeof *s->sums);
    s->n_used = 0;
    s->first_us = s->last_us = 0;
    return st == KP_OK ? 0 : -1;
}

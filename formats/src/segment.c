#define _POSIX_C_SOURCE 200809L
#include "kp/segment.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kp/alloc.h"
#include "kp/buf.h"

struct kp_segment_writer {
    kp_segment_config config;
    char *dir, *prefix, *extension, *header; /* owned copies */
    kp_status error;
    kp_sink *current;
    uint64_t current_samples;
    uint64_t current_first_time;
    char current_path[4096];
    uint64_t next_number;
    /* the first sample of the next segment, held until a second one comes */
    kp_buf pending;
    uint64_t pending_time;
    int has_pending;
    char **kept; /* completed segment paths, oldest first */
    size_t n_kept, kept_cap;
    char last_path[4096];
    kp_segment_stats stats;
};

static int valid_file_word(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("._,%+:@-", c)))
            return 0;
    }
    return 1;
}

static int valid_header(const char *h)
{
    size_t len = strlen(h);
    if (len == 0)
        return 1;
    if (h[len - 1] != '\n')
        return 0;
    for (const char *line = h; *line; line = strchr(line, '\n') + 1)
        if (line[0] != '#' || strncmp(line, "#!", 2) == 0 || strncmp(line, "#include", 8) == 0)
            return 0;
    return 1;
}

/* Numbers continue after the highest PREFIX-NNNNNN already in `dir`, so a
 * second recording into the same directory never overwrites the first. */
static uint64_t first_free_number(const char *dir, const char *prefix)
{
    uint64_t next = 1;
    DIR *d = opendir(dir);
    if (!d)
        return next;
    size_t plen = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        if (strncmp(name, prefix, plen) != 0 || name[plen] != '-')
            continue;
        char *end;
        unsigned long long n = strtoull(name + plen + 1, &end, 10);
        if (end != name + plen + 1 && *end == '.' && n >= next)
            next = n + 1;
    }
    closedir(d);
    return next;
}

static void free_writer(kp_segment_writer *w)
{
    kp_sink_abort(w->current);
    for (size_t i = 0; i < w->n_kept; i++)
        kp_free(w->kept[i]);
    kp_free(w->kept);
    kp_free(w->dir);
    kp_free(w->prefix);
    kp_free(w->extension);
    kp_free(w->header);
    kp_buf_free(&w->pending);
    kp_free(w);
}

kp_status kp_segment_open(const kp_segment_config *c, kp_segment_writer **out)
{
    const char *header = c->header ? c->header : "";
    if (!c->dir || !*c->dir || !c->prefix || !valid_file_word(c->prefix) || !c->extension ||
        !valid_file_word(c->extension) || !valid_header(header) ||
        strlen(c->dir) + strlen(c->prefix) + strlen(c->extension) > 4000)
        return KP_ERR_INVAL;
    kp_segment_writer *w = kp_calloc(1, sizeof *w);
    if (!w)
        return KP_ERR_NOMEM;
    w->config = *c;
    w->dir = kp_strdup(c->dir);
    w->prefix = kp_strdup(c->prefix);
    w->extension = kp_strdup(c->extension);
    w->header = kp_strdup(header);
    w->kept_cap = 16;
    w->kept = kp_calloc(w->kept_cap, sizeof *w->kept);
    if (!w->dir || !w->prefix || !w->extension || !w->header || !w->kept) {
        free_writer(w);
        return KP_ERR_NOMEM;
    }
    w->next_number = first_free_number(c->dir, c->prefix);
    *out = w;
    return KP_OK;
}

static kp_status fail(kp_segment_writer *w, kp_status st)
{
    if (w->error == KP_OK)
        w->error = st;
    kp_sink_abort(w->current);
    w->current = NULL;
    return w->error;
}

static kp_status start_segment(kp_segment_writer *w, uint64_t time_us)
{
    snprintf(w->current_path, sizeof w->current_path, "%s/%s-%06llu.%s%s", w->dir, w->prefix,
             (unsigned long long)w->next_number, w->extension,
             kp_compression_suffix(w->config.compression));
    kp_status st =
        kp_sink_open_file(w->current_path, w->config.compression, w->config.level, &w->current);
    if (st != KP_OK)
        return st;
    w->next_number++;
    w->current_samples = 0;
    w->current_first_time = time_us;
    return kp_sink_write(w->current, w->header, strlen(w->header));
}

/* Records a completed segment and deletes the oldest beyond `keep`. */
static kp_status remember(kp_segment_writer *w, const char *path)
{
    if (w->n_kept == w->kept_cap) {
        size_t cap = w->kept_cap * 2;
        char **k = kp_realloc_array(w->kept, cap, sizeof *k);
        if (!k)
            return KP_ERR_NOMEM;
        w->kept = k;
        w->kept_cap = cap;
    }
    char *copy = kp_strdup(path);
    if (!copy)
        return KP_ERR_NOMEM;
    w->kept[w->n_kept++] = copy;
    if (w->config.keep && w->n_kept > w->config.keep) {
        unlink(w->kept[0]);
        kp_free(w->kept[0]);
        memmove(w->kept, w->kept + 1, (w->n_kept - 1) * sizeof *w->kept);
        w->n_kept--;
        w->stats.removed++;
    }
    return KP_OK;
}

static kp_status finish_segment(kp_segment_writer *w)
{
    uint64_t bytes = kp_sink_bytes_in(w->current);
    kp_status st = kp_sink_commit(w->current);
    w->current = NULL;
    if (st != KP_OK)
        return st;
    w->stats.segments++;
    w->stats.bytes += bytes;
    snprintf(w->last_path, sizeof w->last_path, "%s", w->current_path);
    return remember(w, w->current_path);
}

static int should_rotate(const kp_segment_writer *w, uint64_t time_us)
{
    if (w->current_samples < 2)
        return 0;
    if (w->config.rotate_bytes && kp_sink_bytes_out(w->current) >= w->config.rotate_bytes)
        return 1;
    if (w->config.compression == KP_COMPRESS_NONE && w->config.rotate_bytes &&
        kp_sink_bytes_in(w->current) >= w->config.rotate_bytes)
        return 1;
    return w->config.rotate_us && time_us >= w->current_first_time + w->config.rotate_us;
}

kp_status kp_segment_write(kp_segment_writer *w, const char *text, size_t len, uint64_t time_us)
{
    if (w->error != KP_OK)
        return w->error;
    kp_status st;
    if (w->has_pending) {
        /* the second sample of the next segment: the next segment can now
         * exist, and the previous one can be completed */
        kp_sink *previous = w->current;
        char previous_path[sizeof w->current_path];
        memcpy(previous_path, w->current_path, sizeof previous_path);
        w->current = NULL;
        st = start_segment(w, w->pending_time);
        if (st == KP_OK)
            st = kp_sink_write(w->current, w->pending.data, w->pending.len);
        if (st == KP_OK)
            st = kp_sink_write(w->current, text, len);
        kp_sink *next = w->current;
        char next_path[sizeof w->current_path];
        memcpy(next_path, w->current_path, sizeof next_path);
        /* complete the previous segment whatever happened to the next one */
        w->current = previous;
        memcpy(w->current_path, previous_path, sizeof previous_path);
        kp_status finished = finish_segment(w);
        w->current = next;
        memcpy(w->current_path, next_path, sizeof next_path);
        w->current_samples = 2;
        w->has_pending = 0;
        if (st == KP_OK)
            st = finished;
        if (st != KP_OK)
            return fail(w, st);
        w->stats.samples++;
        return KP_OK;
    }
    if (w->current && should_rotate(w, time_us)) {
        kp_buf_clear(&w->pending);
        st = kp_buf_append(&w->pending, text, len);
        if (st != KP_OK)
            return st;
        w->pending_time = time_us;
        w->has_pending = 1;
        w->stats.samples++;
        return KP_OK;
    }
    if (!w->current && (st = start_segment(w, time_us)) != KP_OK)
        return fail(w, st);
    st = kp_sink_write(w->current, text, len);
    if (st != KP_OK)
        return fail(w, st);
    w->current_samples++;
    w->stats.samples++;
    return KP_OK;
}

kp_status kp_segment_close(kp_segment_writer *w, kp_segment_stats *stats)
{
    kp_status st = w->error;
    if (st == KP_OK && w->has_pending) {
        st = kp_sink_write(w->current, w->pending.data, w->pending.len);
        w->current_samples++;
    }
    if (st == KP_OK && w->current) {
        if (w->current_samples < 2) {
            w->stats.dropped += w->current_samples;
            kp_sink_abort(w->current);
            w->current = NULL;
            st = KP_ERR_EMPTY;
        } else {
            st = finish_segment(w);
        }
    }
    if (stats)
        *stats = w->stats;
    free_writer(w);
    return st;
}

const char *kp_segment_current_path(const kp_segment_writer *w)
{
    return w->current ? w->current_path : "";
}

const kp_segment_stats *kp_segment_stats_get(const kp_segment_writer *w)
{
    return &w->stats;
}

const char *kp_segment_last_path(const kp_segment_writer *w)
{
    return w->last_path;
}

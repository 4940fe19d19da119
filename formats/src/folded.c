#include "kp/folded.h"

#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"
#include "kp/buf.h"
#include "kp/strtab.h"

struct kp_folded {
    kp_strtab *stacks;
    uint64_t *weights; /* by id in `stacks` */
    uint32_t weights_cap;
    kp_buf scratch;
};

kp_folded *kp_folded_create(void)
{
    kp_folded *f = kp_calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->stacks = kp_strtab_create();
    if (!f->stacks) {
        kp_free(f);
        return NULL;
    }
    return f;
}

void kp_folded_free(kp_folded *f)
{
    if (!f)
        return;
    kp_strtab_free(f->stacks);
    kp_free(f->weights);
    kp_buf_free(&f->scratch);
    kp_free(f);
}

kp_status kp_folded_add(kp_folded *f, const char *stack, size_t len, uint64_t weight)
{
    uint32_t count = kp_strtab_count(f->stacks);
    if (count == f->weights_cap) {
        /* grown before interning so that a failure adds nothing */
        if (f->weights_cap > UINT32_MAX / 2)
            return KP_ERR_LIMIT;
        uint32_t cap = f->weights_cap ? f->weights_cap * 2 : 256;
        uint64_t *w = kp_realloc_array(f->weights, cap, sizeof *w);
        if (!w)
            return KP_ERR_NOMEM;
        f->weights = w;
        f->weights_cap = cap;
    }
    uint32_t id;
    int is_new;
    kp_status st = kp_strtab_intern(f->stacks, stack, len, &id, &is_new);
    if (st != KP_OK)
        return st;
    if (is_new)
        f->weights[id] = 0;
    uint64_t *w = &f->weights[id];
    *w = weight > UINT64_MAX - *w ? UINT64_MAX : *w + weight;
    return KP_OK;
}

kp_status kp_folded_stack_text(const kp_frames *frames, const kp_stacks *stacks, uint32_t stack_id,
                               const char *root, kp_buf *b)
{
    if (stack_id >= kp_stacks_count(stacks))
        return KP_ERR_INVAL;
    kp_buf_clear(b);
    kp_status st = KP_OK;
    if (root && *root)
        st = kp_buf_append_str(b, root);
    size_t n;
    const uint32_t *ids = kp_stacks_get(stacks, stack_id, &n);
    for (size_t i = 0; i < n && st == KP_OK; i++) {
        size_t len;
        const char *sym = kp_frames_symbol(frames, ids[i], &len);
        if (b->len)
            st = kp_buf_append_char(b, ';');
        if (st == KP_OK)
            st = kp_buf_append(b, sym, len);
    }
    if (st != KP_OK)
        return st;
    if (b->len == 0) /* no root and no frame: the line would have no frame */
        return KP_ERR_INVAL;
    return KP_OK;
}

kp_status kp_folded_add_stack(kp_folded *f, const kp_frames *frames, const kp_stacks *stacks,
                              uint32_t stack_id, const char *root, uint64_t weight)
{
    kp_status st = kp_folded_stack_text(frames, stacks, stack_id, root, &f->scratch);
    return st == KP_OK ? kp_folded_add(f, f->scratch.data, f->scratch.len, weight) : st;
}

size_t kp_folded_lines(const kp_folded *f)
{
    size_t n = 0;
    for (uint32_t i = 0; i < kp_strtab_count(f->stacks); i++)
        n += f->weights[i] != 0;
    return n;
}

uint64_t kp_folded_total(const kp_folded *f)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < kp_strtab_count(f->stacks); i++)
        total = f->weights[i] > UINT64_MAX - total ? UINT64_MAX : total + f->weights[i];
    return total;
}

typedef struct {
    const char *text;
    size_t len;
    uint64_t weight;
} line_ref;

static int compare_lines(const void *a, const void *b)
{
    const line_ref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->text, y->text, n);
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* Bytewise, except that ';' comes before every other byte: the stacks under
 * one run of frames are then adjacent ("a;b", "a;b;c", "a;b-x", whereas
 * bytewise order puts "a;b-x" between the first two). */
static int compare_by_frame(const void *a, const void *b)
{
    const line_ref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char p = (unsigned char)x->text[i], q = (unsigned char)y->text[i];
        if (p != q) {
            if (p == ';' || q == ';')
                return p == ';' ? -1 : 1;
            return p < q ? -1 : 1;
        }
    }
    return x->len < y->len ? -1 : x->len > y->len;
}

/* The stacks with a non-zero weight, sorted with `compare` (free with kp_free). */
static kp_status sorted_lines(const kp_folded *f, int (*compare)(const void *, const void *),
                              line_ref **out, size_t *out_n)
{
    uint32_t count = kp_strtab_count(f->stacks);
    line_ref *lines = kp_calloc(count ? count : 1, sizeof *lines);
    if (!lines)
        return KP_ERR_NOMEM;
    size_t n = 0;
    for (uint32_t id = 0; id < count; id++) {
        if (!f->weights[id])
            continue;
        lines[n].text = kp_strtab_get(f->stacks, id, &lines[n].len);
        lines[n].weight = f->weights[id];
        n++;
    }
    qsort(lines, n, sizeof *lines, compare);
    *out = lines;
    *out_n = n;
    return KP_OK;
}

kp_status kp_folded_write(const kp_folded *f, kp_sink *sink)
{
    line_ref *lines;
    size_t n;
    kp_status st = sorted_lines(f, compare_lines, &lines, &n);
    if (st != KP_OK)
        return st;
    kp_buf out = KP_BUF_INIT;
    for (size_t i = 0; i < n && st == KP_OK; i++) {
        if ((st = kp_buf_append(&out, lines[i].text, lines[i].len)) == KP_OK &&
            (st = kp_buf_append_char(&out, ' ')) == KP_OK &&
            (st = kp_buf_append_u64(&out, lines[i].weight)) == KP_OK &&
            (st = kp_buf_append_char(&out, '\n')) == KP_OK && out.len >= 64 * 1024) {
            st = kp_sink_write(sink, out.data, out.len);
            kp_buf_clear(&out);
        }
    }
    if (st == KP_OK && out.len)
        st = kp_sink_write(sink, out.data, out.len);
    kp_buf_free(&out);
    kp_free(lines);
    return st;
}

kp_status kp_folded_save(const kp_folded *f, const char *path)
{
    kp_sink *sink;
    kp_status st = kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink);
    if (st != KP_OK)
        return st;
    st = kp_folded_write(f, sink);
    if (st == KP_OK)
        return kp_sink_commit(sink);
    kp_sink_abort(sink);
    return st;
}

kp_status kp_folded_each_by_frame(const kp_folded *f, kp_folded_visit visit, void *ctx)
{
    line_ref *lines;
    size_t n;
    kp_status st = sorted_lines(f, compare_by_frame, &lines, &n);
    if (st != KP_OK)
        return st;
    for (size_t i = 0; i < n && st == KP_OK; i++)
        st = visit(ctx, lines[i].text, lines[i].len, lines[i].weight);
    kp_free(lines);
    return st;
}

int kp_folded_parse_line(const char *line, size_t len, const char **stack, size_t *stack_len,
                         uint64_t *count, kp_folded_reader_stats *stats)
{
    stats->lines++;
    if (len && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return 0;
    size_t digits_end = len, i = len;
    while (i > 0 && line[i - 1] >= '0' && line[i - 1] <= '9')
        i--;
    uint64_t value = 0;
    int ok = i < digits_end && i > 0 && (line[i - 1] == ' ' || line[i - 1] == '\t');
    for (size_t k = i; ok && k < digits_end; k++) {
        unsigned d = (unsigned)(line[k] - '0');
        if (value > (UINT64_MAX - d) / 10)
            ok = 0;
        else
            value = value * 10 + d;
    }
    size_t end = i;
    while (ok && end > 0 && (line[end - 1] == ' ' || line[end - 1] == '\t'))
        end--;
    if (!ok || end == 0) {
        stats->malformed++;
        if (!stats->first_malformed)
            stats->first_malformed = stats->lines;
        return -1;
    }
    *stack = line;
    *stack_len = end;
    *count = value;
    stats->records++;
    return 1;
}

#include "kp/perf_writer.h"

#include <string.h>

#include "kp/alloc.h"

struct kp_perf_writer {
    char comm[16];
    char event[64];
    const kp_frames *frames;
    const kp_stacks *stacks;
    uint64_t last_time;    /* ordering floor: the last time before the .000000 bump */
    uint64_t last_written; /* the time the last sample carries */
    uint64_t clamped;
};

static int valid_comm(const char *s)
{
    size_t len = strlen(s);
    if (len < 2 || len > 15)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        /* ';' would split the root frame once folded */
        if (c <= ' ' || c == 0x7f || c == ';' || (c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

static int is_name_char(unsigned char c, int dots)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || (dots && (c == '.' || c == '-'));
}

static int valid_name(const char *s, size_t max, int dots)
{
    size_t len = strlen(s);
    if (len == 0 || len > max)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!is_name_char((unsigned char)s[i], dots))
            return 0;
    return 1;
}

kp_status kp_perf_writer_create(const char *comm, const char *event, const kp_frames *frames,
                                const kp_stacks *stacks, kp_perf_writer **out)
{
    if (!valid_comm(comm) || !valid_name(event, 63, 1))
        return KP_ERR_INVAL;
    kp_perf_writer *w = kp_calloc(1, sizeof *w);
    if (!w)
        return KP_ERR_NOMEM;
    strcpy(w->comm, comm);
    strcpy(w->event, event);
    w->frames = frames;
    w->stacks = stacks;
    *out = w;
    return KP_OK;
}

void kp_perf_writer_free(kp_perf_writer *w)
{
    kp_free(w);
}

static kp_status append_time(kp_buf *b, uint64_t us)
{
    char tmp[32];
    size_t i = sizeof tmp;
    uint64_t frac = us % 1000000, secs = us / 1000000;
    for (int k = 0; k < 6; k++) {
        tmp[--i] = (char)('0' + frac % 10);
        frac /= 10;
    }
    tmp[--i] = '.';
    do {
        tmp[--i] = (char)('0' + secs % 10);
        secs /= 10;
    } while (secs);
    return kp_buf_append(b, tmp + i, sizeof tmp - i);
}

/* The CPU column as perf prints it: at least 3 digits ("[000]"). */
static kp_status append_cpu(kp_buf *b, uint32_t cpu)
{
    kp_status st = KP_OK;
    if (cpu < 100)
        st = kp_buf_append(b, cpu < 10 ? "00" : "0", cpu < 10 ? 2 : 1);
    return st != KP_OK ? st : kp_buf_append_u64(b, cpu);
}

kp_status kp_perf_writer_format(kp_perf_writer *w, const kp_perf_record *r, kp_buf *out)
{
    if (r->stack >= kp_stacks_count(w->stacks))
        return KP_ERR_INVAL;
    for (size_t i = 0; i < r->n_metrics; i++)
        if (!r->metrics[i].name || !valid_name(r->metrics[i].name, 64, 0))
            return KP_ERR_INVAL;
    uint64_t t = r->time_us;
    int raised = t < w->last_time;
    if (raised)
        t = w->last_time;
    uint64_t ordered = t;
    if (t % 1000000 == 0)
        t++;
    size_t start = out->len;
    kp_status st;
    /* the header */
    if ((st = kp_buf_append_str(out, w->comm)) != KP_OK || (st = kp_buf_append_char(out, ' ')) ||
        (st = kp_buf_append_u64(out, r->pid)) || (st = kp_buf_append_char(out, '/')) ||
        (st = kp_buf_append_u64(out, r->tid)) || (st = kp_buf_append(out, " [", 2)) ||
        (st = append_cpu(out, r->cpu)) || (st = kp_buf_append(out, "] ", 2)) ||
        (st = append_time(out, t)) || (st = kp_buf_append(out, ": ", 2)) ||
        (st = kp_buf_append_u64(out, r->period)) || (st = kp_buf_append_char(out, ' ')) ||
        (st = kp_buf_append_str(out, w->event)) || (st = kp_buf_append_char(out, ':')))
        goto fail;
    for (size_t i = 0; i < r->n_metrics; i++) {
        const kp_metric *m = &r->metrics[i];
        if ((st = kp_buf_append(out, "\tmetric_", 8)) || (st = kp_buf_append_str(out, m->name)) ||
            (st = kp_buf_append(out, ": ", 2)) || (st = kp_buf_append_i64(out, m->value)) ||
            (st = kp_buf_append(out, ", ", 2)) || (st = kp_buf_append_i64(out, m->delta)))
            goto fail;
    }
    if ((st = kp_buf_append_char(out, '\n')))
        goto fail;
    /* the frames, leaf first */
    size_t n;
    const uint32_t *ids = kp_stacks_get(w->stacks, r->stack, &n);
    /* one reservation for every frame line, then plain copies */
    size_t need = 1;
    for (size_t i = 0; i < n; i++) {
        size_t sym_len, mod_len;
        kp_frames_symbol(w->frames, ids[i], &sym_len);
        kp_frames_module(w->frames, ids[i], &mod_len);
        need += 1 + 8 + 1 + sym_len + 2 + mod_len + 2;
    }
    if ((st = kp_buf_reserve(out, need)))
        goto fail;
    char *d = out->data + out->len;
    for (size_t i = n; i-- > 0;) {
        size_t sym_len, mod_len;
        const char *sym = kp_frames_symbol(w->frames, ids[i], &sym_len);
        const char *mod = kp_frames_module(w->frames, ids[i], &mod_len);
        static const char hex[] = "0123456789abcdef";
        char tmp[8];
        size_t k = sizeof tmp;
        uint32_t v = ids[i];
        do {
            tmp[--k] = hex[v & 15];
            v >>= 4;
        } while (v);
        *d++ = '\t';
        memcpy(d, tmp + k, sizeof tmp - k);
        d += sizeof tmp - k;
        *d++ = ' ';
        memcpy(d, sym, sym_len);
        d += sym_len;
        *d++ = ' ';
        *d++ = '(';
        memcpy(d, mod, mod_len);
        d += mod_len;
        *d++ = ')';
        *d++ = '\n';
    }
    out->len = (size_t)(d - out->data);
    if ((st = kp_buf_append_char(out, '\n')))
        goto fail;
    w->last_time = ordered;
    w->last_written = t;
    w->clamped += raised;
    return KP_OK;
fail:
    out->len = start;
    return st;
}

uint64_t kp_perf_writer_last_time(const kp_perf_writer *w)
{
    return w->last_written;
}

uint64_t kp_perf_writer_clamped(const kp_perf_writer *w)
{
    return w->clamped;
}

void kp_perf_writer_reset_time(kp_perf_writer *w)
{
    w->last_time = 0;
    w->last_written = 0;
}

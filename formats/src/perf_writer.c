#include "kp/perf_writer.h"

#include <string.h>

#include "kp/alloc.h"

/* Recent samples' text, for repeats. A recorder writes the same sample again
 * and again for every process that has not run (same stack, same values,
 * zero deltas): only the time differs, so the text around it is kept and
 * reused, which skips formatting, name checks and frame lookups. */
#define CACHE_SLOTS 2048    /* direct-mapped by (tid, stack) */
#define CACHE_METRICS 16    /* records with more metrics are not cached */
#define CACHE_TEXT_MAX 4096 /* nor samples longer than this */

typedef struct {
    char *blob; /* the metric names, each NUL-terminated, then head and tail */
    uint32_t pid, tid, cpu, stack;
    uint64_t period;
    uint32_t n_metrics, names_len, head_len, tail_len;
    int64_t value[CACHE_METRICS], delta[CACHE_METRICS];
} cached;

struct kp_perf_writer {
    char comm[16];
    char event[64];
    const kp_frames *frames;
    const kp_stacks *stacks;
    uint64_t last_time;    /* ordering floor: the last time before the .000000 bump */
    uint64_t last_written; /* the time the last sample carries */
    uint64_t clamped;
    cached *cache; /* CACHE_SLOTS entries, allocated at the first sample */
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
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           (dots && (c == '.' || c == '-'));
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
    if (!w)
        return;
    if (w->cache)
        for (size_t i = 0; i < CACHE_SLOTS; i++)
            kp_free(w->cache[i].blob);
    kp_free(w->cache);
    kp_free(w);
}

static size_t cache_slot(const kp_perf_record *r)
{
    uint64_t h = ((uint64_t)r->tid << 32 | r->stack) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 40) & (CACHE_SLOTS - 1);
}

/* The cached entry for a record with exactly this content but the time. */
static const cached *cache_find(const kp_perf_writer *w, const kp_perf_record *r)
{
    if (!w->cache || r->n_metrics > CACHE_METRICS)
        return NULL;
    const cached *c = &w->cache[cache_slot(r)];
    if (!c->blob || c->pid != r->pid || c->tid != r->tid || c->cpu != r->cpu ||
        c->stack != r->stack || c->period != r->period || c->n_metrics != r->n_metrics)
        return NULL;
    const char *name = c->blob;
    for (size_t i = 0; i < r->n_metrics; i++) {
        const kp_metric *m = &r->metrics[i];
        if (m->value != c->value[i] || m->delta != c->delta[i] || !m->name ||
            strcmp(m->name, name) != 0)
            return NULL;
        name += strlen(name) + 1;
    }
    return c;
}

/* Keeps the text of a formatted record, without its time (`head` is what
 * comes before it, `tail` what comes after). Out of memory, nothing is kept:
 * the cache only saves time. */
static void cache_store(kp_perf_writer *w, const kp_perf_record *r, const char *head,
                        size_t head_len, const char *tail, size_t tail_len)
{
    if (r->n_metrics > CACHE_METRICS || head_len + tail_len > CACHE_TEXT_MAX)
        return;
    if (!w->cache && !(w->cache = kp_calloc(CACHE_SLOTS, sizeof *w->cache)))
        return;
    size_t names_len = 0;
    for (size_t i = 0; i < r->n_metrics; i++)
        names_len += strlen(r->metrics[i].name) + 1;
    cached *c = &w->cache[cache_slot(r)];
    kp_free(c->blob);
    c->blob = kp_malloc(names_len + head_len + tail_len + 1);
    if (!c->blob)
        return;
    char *d = c->blob;
    for (size_t i = 0; i < r->n_metrics; i++) {
        size_t len = strlen(r->metrics[i].name) + 1;
        memcpy(d, r->metrics[i].name, len);
        d += len;
        c->value[i] = r->metrics[i].value;
        c->delta[i] = r->metrics[i].delta;
    }
    memcpy(d, head, head_len);
    memcpy(d + head_len, tail, tail_len);
    c->pid = r->pid;
    c->tid = r->tid;
    c->cpu = r->cpu;
    c->stack = r->stack;
    c->period = r->period;
    c->n_metrics = (uint32_t)r->n_metrics;
    c->names_len = (uint32_t)names_len;
    c->head_len = (uint32_t)head_len;
    c->tail_len = (uint32_t)tail_len;
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

/* The event line: "COMM PID/TID [CPU] TIME: PERIOD EVENT:" and the
 * metrics; `*time_at`..`*time_end` is where the time went, for the cache. */
static kp_status append_event_line(const kp_perf_writer *w, const kp_perf_record *r, uint64_t t,
                                   kp_buf *out, size_t *time_at, size_t *time_end)
{
    kp_status st;
    if ((st = kp_buf_append_str(out, w->comm)) != KP_OK || (st = kp_buf_append_char(out, ' ')) ||
        (st = kp_buf_append_u64(out, r->pid)) || (st = kp_buf_append_char(out, '/')) ||
        (st = kp_buf_append_u64(out, r->tid)) || (st = kp_buf_append(out, " [", 2)) ||
        (st = append_cpu(out, r->cpu)) || (st = kp_buf_append(out, "] ", 2)))
        return st;
    *time_at = out->len;
    if ((st = append_time(out, t)))
        return st;
    *time_end = out->len;
    if ((st = kp_buf_append(out, ": ", 2)) || (st = kp_buf_append_u64(out, r->period)) ||
        (st = kp_buf_append_char(out, ' ')) || (st = kp_buf_append_str(out, w->event)) ||
        (st = kp_buf_append_char(out, ':')))
        return st;
    for (size_t i = 0; i < r->n_metrics; i++) {
        const kp_metric *m = &r->metrics[i];
        if ((st = kp_buf_append(out, "\tmetric_", 8)) || (st = kp_buf_append_str(out, m->name)) ||
            (st = kp_buf_append(out, ": ", 2)) || (st = kp_buf_append_i64(out, m->value)) ||
            (st = kp_buf_append(out, ", ", 2)) || (st = kp_buf_append_i64(out, m->delta)))
            return st;
    }
    return kp_buf_append_char(out, '\n');
}

/* The frame lines, leaf first ("\tID SYMBOL (MODULE)"), and the blank line
 * that ends the sample. */
static kp_status append_frames(const kp_perf_writer *w, uint32_t stack, kp_buf *out)
{
    size_t n;
    const uint32_t *ids = kp_stacks_get(w->stacks, stack, &n);
    /* one reservation for every frame line, then plain copies */
    size_t need = 1;
    for (size_t i = 0; i < n; i++) {
        size_t sym_len, mod_len;
        kp_frames_symbol(w->frames, ids[i], &sym_len);
        kp_frames_module(w->frames, ids[i], &mod_len);
        need += 1 + 8 + 1 + sym_len + 2 + mod_len + 2;
    }
    kp_status st = kp_buf_reserve(out, need);
    if (st)
        return st;
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
    return kp_buf_append_char(out, '\n');
}

kp_status kp_perf_writer_format(kp_perf_writer *w, const kp_perf_record *r, kp_buf *out)
{
    if (r->stack >= kp_stacks_count(w->stacks))
        return KP_ERR_INVAL;
    const cached *c = cache_find(w, r);
    for (size_t i = 0; i < r->n_metrics && !c; i++)
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
    if (c) {
        /* the same sample as one written before: only the time differs */
        const char *head = c->blob + c->names_len;
        if ((st = kp_buf_append(out, head, c->head_len)) != KP_OK ||
            (st = append_time(out, t)) != KP_OK ||
            (st = kp_buf_append(out, head + c->head_len, c->tail_len)) != KP_OK)
            goto fail;
    } else {
        size_t time_at = 0, time_end = 0;
        if ((st = append_event_line(w, r, t, out, &time_at, &time_end)) != KP_OK ||
            (st = append_frames(w, r->stack, out)) != KP_OK)
            goto fail;
        cache_store(w, r, out->data + start, time_at - start, out->data + time_end,
                    out->len - time_end);
    }
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

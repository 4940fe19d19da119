/* Rendering of kprof top's tables (top/view.h): sorted rows cut to the
 * width, plain text only, so that the same lines serve a terminal (the
 * caller adds the escape codes) and a pipe. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"
#include "kp/symbol.h"
#include "top/view_internal.h"

/* Columns of `text`: a UTF-8 character is one (continuation bytes count
 * nothing), which holds for the names kprof shows (ASCII, accented
 * letters), not for wide CJK characters. */
static size_t columns(const char *text, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)text[i] & 0xC0) != 0x80;
    return n;
}

/* The bytes of the first `cols` columns of `text`. */
static size_t bytes_for(const char *text, size_t len, size_t cols)
{
    size_t i = 0, n = 0;
    for (; i < len; i++) {
        if (((unsigned char)text[i] & 0xC0) != 0x80 && n++ == cols)
            break;
    }
    return i;
}

/* Appends `text` in a cell of `width` columns, padded with spaces after it
 * when it is shorter. When it does not fit, its middle gives way to "...":
 * the end of a name is what tells kprof_sample_handler_3 from
 * kprof_sample_handler_4, and a function's arity ends it.
 * Control bytes become '?': a name never moves the cursor. */
static kp_status cell(kp_buf *line, const char *text, size_t width)
{
    size_t len = strlen(text), cols = columns(text, len);
    int cut = cols > width && width > 3;
    /* the bytes shown: text[0..head) and, when cut, text[tail..len) */
    size_t head = len, tail = len, used = cols;
    if (cols > width && !cut) {
        head = bytes_for(text, len, width);
        used = width;
    } else if (cut) {
        size_t keep = width - 3, front = (keep + 1) / 2;
        head = bytes_for(text, len, front);
        tail = bytes_for(text, len, cols - (keep - front));
        used = width;
    }
    size_t pad = width > used ? width - used : 0;
    kp_status st = KP_OK;
    for (size_t i = 0; i < len && st == KP_OK; i++) {
        if (i == head && cut)
            st = kp_buf_append_str(line, "...");
        if (i >= head && i < tail)
            continue;
        unsigned char c = (unsigned char)text[i];
        if (st == KP_OK)
            st = kp_buf_append_char(line, c < 0x20 || c == 0x7f ? '?' : (char)c);
    }
    for (size_t i = 0; i < pad && st == KP_OK; i++)
        st = kp_buf_append_char(line, ' ');
    return st;
}

/* A cell of a function's or a process's name, shown readable: the names
 * are frame symbols, percent-encoded for kprof's files (kp/symbol.h), so
 * anonymous%20fn/1%20in%20MyApp.Hot.spin/2 shows as anonymous fn/1 in
 * MyApp.Hot.spin/2. */
static kp_status name_cell(kp_buf *line, const char *text, size_t width)
{
    kp_buf plain = KP_BUF_INIT;
    kp_status st = kp_symbol_decode(&plain, text, strlen(text));
    if (st == KP_OK)
        st = kp_buf_append_char(&plain, '\0');
    if (st == KP_OK)
        st = cell(line, plain.data, width);
    kp_buf_free(&plain);
    return st;
}

/* Ends `line` into `out` at most `width` columns wide (trailing blanks
 * dropped) and clears it. */
static kp_status emit(kp_buf *out, kp_buf *line, size_t width)
{
    size_t len = bytes_for(line->data ? line->data : "", line->len, width);
    while (len && line->data[len - 1] == ' ')
        len--;
    kp_status st = kp_buf_append(out, line->data ? line->data : "", len);
    if (st == KP_OK)
        st = kp_buf_append_char(out, '\n');
    kp_buf_clear(line);
    return st;
}

/* printf into a line. */
static kp_status linef(kp_buf *line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static kp_status linef(kp_buf *line, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return kp_buf_append_str(line, text);
}

/* 1234 -> "1234", 12345 -> "12.3K", 1234567 -> "1.2M"; `base` 1000 or
 * 1024 (bytes). */
static void human(char *text, size_t cap, double v, double base)
{
    static const char units[] = "KMGTP";
    if (v < 10000) {
        snprintf(text, cap, "%.0f", v);
        return;
    }
    int u = -1;
    while (v >= base && u < 4) {
        v /= base;
        u++;
    }
    snprintf(text, cap, v < 100 ? "%.1f%c" : "%.0f%c", v, units[u]);
}

/* On a screen, a table keeps its height whatever its rows, so that the
 * keys stay on the last line: blank lines after the `used` rows. */
static kp_status pad(kp_buf *out, const kp_top_layout *l, size_t rows, size_t used)
{
    kp_status st = KP_OK;
    for (size_t i = used; l->height && i < rows && st == KP_OK; i++)
        st = kp_buf_append_char(out, '\n');
    return st;
}

typedef struct {
    uint64_t key, tie;
    size_t at;
} ranked;

static int by_rank(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    if (x->tie != y->tie)
        return x->tie > y->tie ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

static kp_status function_rows(const kp_top *t, const kp_top_layout *l, size_t rows, kp_buf *line,
                               kp_buf *out)
{
    int cum = l->cumulative, by = l->function_sort == KP_TOP_BY_TOTAL ? TOTAL : SELF;
    uint64_t all = cum ? t->all_weight : t->shown_weight;
    size_t n = kp_strtab_count(t->names), k = 0;
    if (n > t->functions_cap)
        n = t->functions_cap;
    ranked *r = kp_calloc(n ? n : 1, sizeof *r);
    if (!r)
        return KP_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        const uint64_t *w = cum ? t->functions[i].all : t->functions[i].shown;
        if (w[TOTAL])
            r[k++] = (ranked){w[by], w[!by], i};
    }
    qsort(r, k, sizeof *r, by_rank);
    size_t name_width = l->width > 19 ? l->width - 19 : 1;
    kp_status st = KP_OK;
    for (size_t i = 0; i < rows && i < k && st == KP_OK; i++) {
        const uint64_t *w = cum ? t->functions[r[i].at].all : t->functions[r[i].at].shown;
        size_t len;
        const char *name = kp_strtab_get(t->names, (uint32_t)r[i].at, &len);
        char text[TOP_TEXT_MAX * 2];
        snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1), name);
        st = linef(line, "%7.1f  %7.1f  ", 100.0 * (double)w[SELF] / (double)all,
                   100.0 * (double)w[TOTAL] / (double)all);
        if (st == KP_OK)
            st = name_cell(line, text, name_width);
        if (st == KP_OK)
            st = emit(out, line, l->width);
    }
    if (k == 0 && rows && st == KP_OK && (st = linef(line, "  (no samples yet)")) == KP_OK)
        st = emit(out, line, l->width);
    kp_free(r);
    if (st == KP_OK)
        st = pad(out, l, rows, k ? k : 1);
    return st;
}

/* Does the view show process `p`: sampled in the last window, or ever
 * (and not forgotten) in the cumulative view. */
static int shown(const top_process *p, int cumulative)
{
    return cumulative || p->in_shown;
}

static uint64_t process_key(const top_process *p, kp_top_process_sort by, int cum, int has_cpu)
{
    switch (by) {
    case KP_TOP_BY_CPU:
        /* with no CPU samples, reductions stand for them */
        if (has_cpu)
            return cum ? p->all_cpu : p->shown_cpu;
        return cum ? p->all_reductions : p->shown_reductions;
    case KP_TOP_BY_REDUCTIONS: return cum ? p->all_reductions : p->shown_reductions;
    case KP_TOP_BY_MEMORY: return p->memory > 0 ? (uint64_t)p->memory : 0;
    case KP_TOP_BY_QUEUE: return p->queue > 0 ? (uint64_t)p->queue : 0;
    }
    return 0;
}

static kp_status process_row(const kp_top *t, const top_process *p, const kp_top_layout *l,
                             size_t name_w, size_t current_w, kp_buf *line, kp_buf *out)
{
    int cum = l->cumulative;
    double secs = (double)(cum ? t->all_us : t->shown_us) / 1e6;
    char pid[32], cpu[16], reds[16], queue[16], memory[16];
    snprintf(pid, sizeof pid, "<0.%u.%u>", (unsigned)p->num, (unsigned)p->serial);
    if (t->cpu_rate && secs > 0)
        snprintf(cpu, sizeof cpu, "%.1f",
                 100.0 * (double)(cum ? p->all_cpu : p->shown_cpu) / ((double)t->cpu_rate * secs));
    else
        snprintf(cpu, sizeof cpu, "-");
    human(reds, sizeof reds,
          secs > 0 ? (double)(cum ? p->all_reductions : p->shown_reductions) / secs : 0, 1000);
    human(queue, sizeof queue, (double)(p->queue > 0 ? p->queue : 0), 1000);
    human(memory, sizeof memory, (double)(p->memory > 0 ? p->memory : 0), 1024);
    if (!p->sampled) { /* only native CPU samples saw it */
        snprintf(reds, sizeof reds, "-");
        snprintf(queue, sizeof queue, "-");
        snprintf(memory, sizeof memory, "-");
    }
    kp_status st = cell(line, pid, 12);
    if (st == KP_OK && (st = kp_buf_append_char(line, ' ')) == KP_OK)
        st = name_cell(line, p->label[0] ? p->label : "-", name_w);
    if (st == KP_OK)
        st = linef(line, " %6s %7s %6s %7s  ", cpu, reds, queue, memory);
    if (st == KP_OK)
        st = name_cell(line, p->current[0] ? p->current : "-", current_w);
    return st == KP_OK ? emit(out, line, l->width) : st;
}

static kp_status process_rows(const kp_top *t, const kp_top_layout *l, size_t rows, kp_buf *line,
                              kp_buf *out)
{
    int cum = l->cumulative;
    ranked *r = kp_calloc(t->n_processes ? t->n_processes : 1, sizeof *r);
    if (!r)
        return KP_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < t->n_processes; i++) {
        const top_process *p = &t->processes[i];
        if (shown(p, cum))
            r[k++] = (ranked){process_key(p, l->process_sort, cum, t->cpu_rate != 0),
                              cum ? p->all_reductions : p->shown_reductions, i};
    }
    qsort(r, k, sizeof *r, by_rank);
    /* fixed columns take 46 (pid 12, the numbers, the spaces); the name
     * and current function share the rest, the function a little more */
    size_t flex = l->width > 46 + 8 ? l->width - 46 : 8;
    size_t name_w = flex * 9 / 20, current_w = flex - name_w;
    kp_status st = KP_OK;
    for (size_t i = 0; i < rows && i < k && st == KP_OK; i++)
        st = process_row(t, &t->processes[r[i].at], l, name_w, current_w, line, out);
    if (k == 0 && rows && st == KP_OK && (st = linef(line, "  (no process sampled yet)")) == KP_OK)
        st = emit(out, line, l->width);
    kp_free(r);
    if (st == KP_OK)
        st = pad(out, l, rows, k ? k : 1);
    return st;
}

static const char *process_sort_name(kp_top_process_sort by, int has_cpu)
{
    switch (by) {
    case KP_TOP_BY_CPU: return has_cpu ? "CPU" : "reductions (no CPU samples)";
    case KP_TOP_BY_REDUCTIONS: return "reductions";
    case KP_TOP_BY_MEMORY: return "memory";
    case KP_TOP_BY_QUEUE: return "message queue";
    }
    return "";
}

kp_status kp_top_render(const kp_top *t, const kp_top_layout *l, kp_buf *out)
{
    kp_buf line = KP_BUF_INIT;
    int cum = l->cumulative;
    char states[512];
    size_t has_states =
        kp_state_summary(cum ? t->all_states : t->shown_states, states, sizeof states) > 0;
    /* title, CPU by state, 2 + 2 table headings, a blank line, the footer */
    size_t fixed = 6 + has_states + (l->footer ? 1 : 0);
    size_t fn_rows = l->rows ? l->rows : 10, proc_rows = fn_rows;
    if (l->height) {
        size_t room = l->height > fixed + 2 ? l->height - fixed : 2;
        fn_rows = room / 2;
        proc_rows = room - fn_rows;
        if (l->rows && l->rows < fn_rows)
            fn_rows = l->rows;
        if (l->rows && l->rows < proc_rows)
            proc_rows = l->rows;
    }
    double secs = (double)(cum ? t->all_us : t->shown_us) / 1e6;
    uint64_t all = cum ? t->all_weight : t->shown_weight;
    char total[16];
    human(total, sizeof total, (double)all, 1000);
    kp_status st = linef(&line, "%s  %s %.1f s%s", l->title, cum ? "since start," : "last", secs,
                         l->paused ? "  [PAUSED]" : "");
    if (st == KP_OK)
        st = emit(out, &line, l->width);
    if (st == KP_OK && has_states && (st = linef(&line, "CPU by state: %s", states)) == KP_OK)
        st = emit(out, &line, l->width);
    if (st == KP_OK)
        st = linef(&line, "FUNCTIONS by %s, share of %s %s",
                   l->function_sort == KP_TOP_BY_TOTAL ? "total" : "self", total, l->weight);
    if (st == KP_OK)
        st = emit(out, &line, l->width);
    int by_total = l->function_sort == KP_TOP_BY_TOTAL;
    if (st == KP_OK && (st = linef(&line, "%7s  %7s  FUNCTION", by_total ? "SELF%" : "*SELF%",
                                   by_total ? "*TOTAL%" : "TOTAL%")) == KP_OK)
        st = emit(out, &line, l->width);
    if (st == KP_OK)
        st = function_rows(t, l, fn_rows, &line, out);
    if (st == KP_OK)
        st = emit(out, &line, l->width);
    if (st == KP_OK)
        st = linef(&line, "PROCESSES by %s", process_sort_name(l->process_sort, t->cpu_rate));
    if (st == KP_OK)
        st = emit(out, &line, l->width);
    if (st == KP_OK) {
        size_t flex = l->width > 46 + 8 ? l->width - 46 : 8, name_w = flex * 9 / 20;
        static const char *const marks[] = {"*CPU%", "*REDS/S", "*MEMORY", "*QUEUE"};
        const char *cpu = l->process_sort == KP_TOP_BY_CPU ? marks[0] : "CPU%";
        const char *reds = l->process_sort == KP_TOP_BY_REDUCTIONS ? marks[1] : "REDS/S";
        const char *mem = l->process_sort == KP_TOP_BY_MEMORY ? marks[2] : "MEMORY";
        const char *queue = l->process_sort == KP_TOP_BY_QUEUE ? marks[3] : "QUEUE";
        st = cell(&line, "PID", 12);
        if (st == KP_OK && (st = kp_buf_append_char(&line, ' ')) == KP_OK)
            st = cell(&line, "NAME", name_w);
        if (st == KP_OK)
            st = linef(&line, " %6s %7s %6s %7s  CURRENT", cpu, reds, queue, mem);
        if (st == KP_OK)
            st = emit(out, &line, l->width);
    }
    if (st == KP_OK)
        st = process_rows(t, l, proc_rows, &line, out);
    if (st == KP_OK && l->footer && (st = kp_buf_append_str(&line, l->footer)) == KP_OK)
        st = emit(out, &line, l->width);
    kp_buf_free(&line);
    return st;
}

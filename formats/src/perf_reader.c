/* The rules below reproduce, regex by regex, what stackcollapse-perf.pl does
 * with its default options; each helper names the Perl expression it stands
 * for. Perl's \s is [ \t\n\r\f\v] and \w is [A-Za-z0-9_] on byte strings. */
#include "kp/perf_reader.h"

#include <string.h>

#include "kp/alloc.h"
#include "kp/buf.h"

typedef struct {
    size_t offset;
    size_t len;
} span;

struct kp_perf_reader {
    kp_perf_reader_stats stats;
    int have_pname;
    kp_buf pname;    /* COMM with ' ' -> '_' */
    uint64_t period; /* $m_period */
    uint64_t header_line;
    uint64_t time_ns; /* of the header being read */
    int has_time;
    kp_buf event_filter; /* "" until the first event is seen */
    int have_filter;
    kp_buf frames;  /* cleaned frame groups of the current sample */
    kp_buf unknown; /* "[unknown]" replaced by "[module]" */
    span *groups;   /* one per frame line, file order (leaf first) */
    size_t n_groups, groups_cap;
    kp_buf metric_names;
    kp_perf_metric *metrics;
    size_t n_metrics, metrics_cap;
    kp_buf stack; /* the folded stack handed out */
    kp_perf_sample sample;
};

static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int is_word(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

kp_perf_reader *kp_perf_reader_create(void)
{
    return kp_calloc(1, sizeof(kp_perf_reader));
}

void kp_perf_reader_free(kp_perf_reader *r)
{
    if (!r)
        return;
    kp_buf_free(&r->pname);
    kp_buf_free(&r->event_filter);
    kp_buf_free(&r->frames);
    kp_buf_free(&r->unknown);
    kp_buf_free(&r->metric_names);
    kp_buf_free(&r->stack);
    kp_free(r->groups);
    kp_free(r->metrics);
    kp_free(r);
}

const kp_perf_reader_stats *kp_perf_reader_stats_get(const kp_perf_reader *r)
{
    return &r->stats;
}

// /^(\S.+?)\s+(\d+)\/*(\d+)*\s+/ : returns the length of COMM, or 0.
static size_t match_header(const unsigned char *s, size_t len)
{
    if (len == 0 || is_ws(s[0]))
        return 0;
    for (size_t i = 2; i < len; i++) {
        if (!is_ws(s[i]))
            continue;
        size_t j = i;
        while (j < len && is_ws(s[j]))
            j++;
        if (j == len || !is_digit(s[j]))
            continue;
        while (j < len && is_digit(s[j]))
            j++;
        while (j < len && s[j] == '/')
            j++;
        while (j < len && is_digit(s[j]))
            j++;
        if (j < len && is_ws(s[j]))
            return i;
    }
    return 0;
}

/* /:\s*(\d+)*\s+(\S+):\s*$/ on a header line. Returns 1 on a match, with the
 * event name and the PERIOD digits (period_len 0 when absent). */
static int match_event(const unsigned char *s, size_t len, const unsigned char **event,
                       size_t *event_len, const unsigned char **period, size_t *period_len)
{
    size_t end = len;
    while (end > 0 && is_ws(s[end - 1]))
        end--;
    size_t start = end;
    while (start > 0 && !is_ws(s[start - 1]))
        start--;
    /* the last token is (\S+): and must be preceded by whitespace */
    if (end - start < 2 || s[end - 1] != ':' || start == 0)
        return 0;
    for (size_t p = 0; p < start; p++) {
        if (s[p] != ':')
            continue;
        /* line[p+1 .. start) must be \s*(\d+)*\s+ */
        size_t j = p + 1;
        while (j < start && is_ws(s[j]))
            j++;
        size_t d = j;
        while (j < start && is_digit(s[j]))
            j++;
        size_t d_end = j;
        size_t w = j;
        while (j < start && is_ws(s[j]))
            j++;
        if (j != start)
            continue;
        if (d_end == d ? start == p + 1 : w == start)
            continue; /* \s+ needs at least one whitespace */
        *event = s + start;
        *event_len = end - 1 - start;
        *period = s + d;
        *period_len = d_end - d;
        return 1;
    }
    return 0;
}

/* /^\s*(\w+)\s*(.+) \((.*)\)/ with Perl's backtracking: returns 1 and the
 * spans of the raw function and the module on a match. */
static int match_frame(const unsigned char *s, size_t len, size_t *func, size_t *func_len,
                       size_t *mod, size_t *mod_len)
{
    size_t a = 0;
    while (a < len && is_ws(s[a]))
        a++;
    if (a == len || !is_word(s[a]))
        return 0;
    size_t word_end = a;
    while (word_end < len && is_word(s[word_end]))
        word_end++;
    size_t after_ws = word_end;
    while (after_ws < len && is_ws(s[after_ws]))
        after_ws++;
    /* (.*)\) takes the last ')'; the greedy (.+) then takes the last " ("
     * that still leaves that ')' after it */
    const unsigned char *close = NULL;
    for (size_t i = len; i > 0; i--)
        if (s[i - 1] == ')') {
            close = s + i - 1;
            break;
        }
    if (!close)
        return 0;
    size_t paren = (size_t)(close - s);
    if (paren < 2)
        return 0;
    size_t q = paren - 2 + 1;
    int found = 0;
    while (q-- > 0) {
        if (s[q] == ' ' && s[q + 1] == '(') {
            found = 1;
            break;
        }
    }
    if (!found || q == 0)
        return 0;
    /* (\w+) and \s* give back characters only as far as (.+) needs one */
    size_t rs;
    if (q - 1 >= word_end)
        rs = after_ws < q - 1 ? after_ws : q - 1;
    else if (q - 1 >= a + 1)
        rs = q - 1;
    else
        return 0;
    *func = rs;
    *func_len = q - rs;
    *mod = q + 2;
    *mod_len = paren - (q + 2);
    return 1;
}

static kp_status push_group(kp_perf_reader *r, size_t offset)
{
    if (r->n_groups == r->groups_cap) {
        size_t cap = r->groups_cap ? r->groups_cap * 2 : 64;
        span *g = kp_realloc_array(r->groups, cap, sizeof *g);
        if (!g)
            return KP_ERR_NOMEM;
        r->groups = g;
        r->groups_cap = cap;
    }
    r->groups[r->n_groups].offset = offset;
    r->groups[r->n_groups].len = r->frames.len - offset;
    r->n_groups++;
    return KP_OK;
}

static int contains(const unsigned char *s, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(s + i, needle, n) == 0)
            return 1;
    return 0;
}

/* One element of split /\->/, cleaned as stackcollapse does, appended to
 * r->frames. */
static kp_status add_func(kp_perf_reader *r, const unsigned char *f, size_t len,
                          const unsigned char *mod, size_t mod_len, int inlined)
{
    kp_status st;
    if (len == 9 && memcmp(f, "[unknown]", 9) == 0) {
        kp_buf *u = &r->unknown;
        kp_buf_clear(u);
        if (mod_len == 9 && memcmp(mod, "[unknown]", 9) == 0) {
            st = kp_buf_append(u, "[unknown]", 9);
        } else {
            // s/.*\/// keeps what follows the last '/' of the module
            size_t base = 0;
            for (size_t i = 0; i < mod_len; i++)
                if (mod[i] == '/')
                    base = i + 1;
            if ((st = kp_buf_append_char(u, '[')) == KP_OK &&
                (st = kp_buf_append(u, mod + base, mod_len - base)) == KP_OK)
                st = kp_buf_append_char(u, ']');
        }
        if (st != KP_OK)
            return st;
        f = (const unsigned char *)u->data;
        len = u->len;
    }
    // tidy_generic: s/;/:/g; unless /\.\(.*\)\./ then s/\((?!anonymous namespace\)).*//;
    // and tr/"'//d
    size_t keep = len;
    size_t first_dot_paren = len, last_paren_dot = 0;
    int has_paren_dot = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (f[i] == '.' && f[i + 1] == '(' && first_dot_paren == len)
            first_dot_paren = i;
        if (f[i] == ')' && f[i + 1] == '.') {
            last_paren_dot = i;
            has_paren_dot = 1;
        }
    }
    int dotted = first_dot_paren < len && has_paren_dot && last_paren_dot >= first_dot_paren + 2;
    if (!dotted) {
        static const char anon[] = "anonymous namespace)";
        for (size_t i = 0; i < len; i++) {
            if (f[i] != '(')
                continue;
            if (len - i - 1 >= sizeof anon - 1 && memcmp(f + i + 1, anon, sizeof anon - 1) == 0)
                continue;
            keep = i;
            break;
        }
    }
    kp_buf *out = &r->frames;
    size_t start = out->len;
    if ((st = kp_buf_reserve(out, keep + 4)) != KP_OK)
        return st;
    char *d = out->data + out->len;
    for (size_t i = 0; i < keep; i++) {
        unsigned char c = f[i];
        if (c == '"' || c == '\'')
            continue;
        *d++ = (char)(c == ';' ? ':' : c);
    }
    out->len = (size_t)(d - out->data);
    char *text = out->data + start;
    size_t text_len = out->len - start;
    /* tidy_java: s/^L// if m:/: when COMM starts with "java" */
    if (r->pname.len >= 4 && memcmp(r->pname.data, "java", 4) == 0 && text_len > 0 &&
        text[0] == 'L' && memchr(text, '/', text_len)) {
        memmove(text, text + 1, --text_len);
        out->len--;
    }
    if (inlined && !contains((const unsigned char *)text, text_len, "_[i]"))
        memcpy(out->data + out->len, "_[i]", 4), out->len += 4;
    return KP_OK;
}

/* Finds the next "->" at or after `from` (returns len when none). */
static size_t find_arrow(const unsigned char *f, size_t len, size_t from)
{
    for (size_t i = from; i + 1 < len; i++)
        if (f[i] == '-' && f[i + 1] == '>')
            return i;
    return len;
}

/* Bytes that some rule below acts on: without any of them (and not
 * "[unknown]", not a java "L...\/..." symbol) a symbol is kept as it is. */
static const unsigned char needs_rules[256] = {
    ['+'] = 1, ['>'] = 1, ['('] = 1, ['"'] = 1, ['\''] = 1, [';'] = 1, ['['] = 1};

static kp_status add_frame_line(kp_perf_reader *r, const unsigned char *s, size_t func,
                                size_t func_len, size_t mod, size_t mod_len)
{
    const unsigned char *f = s + func;
    if (func_len > 0 &&
        !(f[0] == 'L' && r->pname.len >= 4 && memcmp(r->pname.data, "java", 4) == 0)) {
        size_t i = 0;
        while (i < func_len && !needs_rules[f[i]])
            i++;
        if (i == func_len) {
            size_t start = r->frames.len;
            kp_status st = kp_buf_append(&r->frames, f, func_len);
            if (st == KP_OK)
                st = push_group(r, start);
            if (st != KP_OK)
                r->frames.len = start;
            return st;
        }
    }
    /* s/\+0x[\da-f]+$//: only the last '+' can start such a suffix */
    for (size_t i = func_len; i > 0; i--) {
        if (f[i - 1] != '+')
            continue;
        size_t k = i + 2;
        if (k < func_len && f[i] == '0' && f[i + 1] == 'x') {
            while (k < func_len && (is_digit(f[k]) || (f[k] >= 'a' && f[k] <= 'f')))
                k++;
            if (k == func_len)
                func_len = i - 1;
        }
        break;
    }
    if (func_len > 0 && f[0] == '(')
        return KP_OK; /* "next if $rawfunc =~ /^\(/": process names */
    /* split /\->/ drops trailing empty fields: find where the last non-empty
     * field ends */
    size_t end = 0;
    for (size_t pos = 0;;) {
        size_t arrow = find_arrow(f, func_len, pos);
        if (arrow > pos)
            end = arrow;
        if (arrow == func_len)
            break;
        pos = arrow + 2;
    }
    if (end == 0)
        return KP_OK; /* every field empty: split returns nothing */
    size_t group_start = r->frames.len;
    kp_status st = KP_OK;
    int n = 0;
    for (size_t pos = 0; st == KP_OK;) {
        size_t arrow = find_arrow(f, end, pos);
        if (n > 0)
            st = kp_buf_append_char(&r->frames, ';');
        if (st == KP_OK)
            st = add_func(r, f + pos, arrow - pos, s + mod, mod_len, n > 0);
        n++;
        if (arrow >= end)
            break;
        pos = arrow + 2;
    }
    if (st == KP_OK)
        st = push_group(r, group_start);
    if (st != KP_OK)
        r->frames.len = group_start;
    return st;
}

static int64_t parse_int(const char *p, size_t len, size_t *used)
{
    size_t i = 0;
    int neg = 0;
    if (i < len && p[i] == '-') {
        neg = 1;
        i++;
    }
    size_t d = i;
    uint64_t v = 0;
    int over = 0; /* more digits than any int64_t, e.g. a 20-digit number */
    while (i < len && is_digit((unsigned char)p[i])) {
        if (i - d == 19)
            over = 1;
        else
            v = v * 10 + (uint64_t)(p[i] - '0');
        i++;
    }
    *used = i > d ? i : 0;
    /* out of int64_t range: not an integer field (and no signed overflow) */
    if (over || v > (uint64_t)INT64_MAX + (uint64_t)neg) {
        *used = 0;
        return 0;
    }
    return neg ? (v ? -(int64_t)(v - 1) - 1 : 0) : (int64_t)v;
}

/* \tmetric_NAME: VALUE, DELTA fields anywhere on the header line */
static kp_status parse_metrics(kp_perf_reader *r, const char *s, size_t len)
{
    static const char tag[] = "\tmetric_";
    const size_t tag_len = sizeof tag - 1;
    r->n_metrics = 0;
    kp_buf_clear(&r->metric_names);
    const char *p = s, *end = s + len;
    while ((p = memchr(p, '\t', (size_t)(end - p))) != NULL) {
        if ((size_t)(end - p) < tag_len || memcmp(p, tag, tag_len) != 0) {
            p++;
            continue;
        }
        const char *name = p + tag_len;
        const char *colon = memchr(name, ':', (size_t)(end - name));
        if (!colon || colon == name || colon + 2 > end || colon[1] != ' ') {
            p++;
            continue;
        }
        size_t used;
        const char *v = colon + 2;
        int64_t value = parse_int(v, (size_t)(end - v), &used);
        if (!used || v + used + 2 > end || v[used] != ',' || v[used + 1] != ' ') {
            p++;
            continue;
        }
        const char *dp = v + used + 2;
        int64_t delta = parse_int(dp, (size_t)(end - dp), &used);
        if (!used) {
            p++;
            continue;
        }
        if (r->n_metrics == r->metrics_cap) {
            size_t cap = r->metrics_cap ? r->metrics_cap * 2 : 8;
            kp_perf_metric *m = kp_realloc_array(r->metrics, cap, sizeof *m);
            if (!m)
                return KP_ERR_NOMEM;
            r->metrics = m;
            r->metrics_cap = cap;
        }
        kp_perf_metric *m = &r->metrics[r->n_metrics++];
        /* names point into metric_names once it stops moving: store offsets */
        m->name = (const char *)(uintptr_t)r->metric_names.len;
        m->name_len = (size_t)(colon - name);
        m->value = value;
        m->delta = delta;
        kp_status st = kp_buf_append(&r->metric_names, name, m->name_len);
        if (st != KP_OK) {
            r->n_metrics--;
            return st;
        }
        p = dp + used;
    }
    for (size_t i = 0; i < r->n_metrics; i++)
        r->metrics[i].name = r->metric_names.data + (uintptr_t)r->metrics[i].name;
    return KP_OK;
}

/* The TIME column: the first whitespace-separated token after COMM of the
 * form DIGITS.DIGITS: (perf prints microseconds, or nanoseconds with --ns).
 * Returns 1 with the time in ns, 0 when there is none. */
static int parse_time(const unsigned char *s, size_t len, size_t from, uint64_t *ns)
{
    size_t i = from;
    while (i < len) {
        while (i < len && is_ws(s[i]))
            i++;
        size_t t = i;
        uint64_t secs = 0, frac = 0;
        unsigned frac_digits = 0;
        while (i < len && is_digit(s[i]) && secs < UINT64_MAX / 10 / 1000000000u)
            secs = secs * 10 + (uint64_t)(s[i++] - '0');
        if (i > t && i < len && s[i] == '.') {
            size_t f = ++i;
            while (i < len && is_digit(s[i])) {
                if (frac_digits < 9) {
                    frac = frac * 10 + (uint64_t)(s[i] - '0');
                    frac_digits++;
                }
                i++;
            }
            if (i > f && i < len && s[i] == ':' && (i + 1 == len || is_ws(s[i + 1]))) {
                while (frac_digits++ < 9)
                    frac *= 10;
                *ns = secs * 1000000000u + frac;
                return 1;
            }
        }
        while (i < len && !is_ws(s[i]))
            i++;
    }
    return 0;
}

static kp_status on_header(kp_perf_reader *r, const unsigned char *s, size_t len, size_t comm_len)
{
    const unsigned char *event, *period;
    size_t event_len, period_len;
    uint64_t value = 0;
    int has_period = 0;
    if (match_event(s, len, &event, &event_len, &period, &period_len)) {
        if (!r->have_filter) {
            kp_buf_clear(&r->event_filter);
            kp_status st = kp_buf_append(&r->event_filter, event, event_len);
            if (st != KP_OK)
                return st;
            r->have_filter = 1;
        } else if (event_len != r->event_filter.len ||
                   memcmp(event, r->event_filter.data, event_len) != 0) {
            r->stats.skipped_events++;
            return KP_OK;
        }
        /* Perl: "" and "0" are false, so both count 1; "00" counts 0 */
        if (period_len && !(period_len == 1 && period[0] == '0')) {
            has_period = 1;
            for (size_t i = 0; i < period_len; i++)
                value = value > (UINT64_MAX - 9) / 10 ? UINT64_MAX
                                                      : value * 10 + (uint64_t)(period[i] - '0');
        }
    }
    r->period = has_period ? value : 1;
    r->header_line = r->stats.lines;
    r->time_ns = 0;
    r->has_time = parse_time(s, len, comm_len, &r->time_ns);
    kp_buf_clear(&r->pname);
    kp_status st = kp_buf_append(&r->pname, s, comm_len);
    if (st != KP_OK)
        return st;
    for (size_t i = 0; i < comm_len; i++)
        if (r->pname.data[i] == ' ')
            r->pname.data[i] = '_';
    r->have_pname = 1;
    return parse_metrics(r, (const char *)s, len);
}

static kp_status on_blank(kp_perf_reader *r, const kp_perf_sample **sample)
{
    if (!r->have_pname)
        return KP_OK;
    kp_buf *b = &r->stack;
    kp_buf_clear(b);
    kp_status st = kp_buf_reserve(b, r->pname.len + r->frames.len + r->n_groups + 1);
    if (st == KP_OK) {
        kp_buf_append(b, r->pname.data, r->pname.len);
        for (size_t i = r->n_groups; i-- > 0;) {
            kp_buf_append_char(b, ';');
            kp_buf_append(b, r->frames.data + r->groups[i].offset, r->groups[i].len);
        }
        r->sample.stack = b->data;
        r->sample.stack_len = b->len;
        r->sample.period = r->period;
        r->sample.metrics = r->metrics;
        r->sample.n_metrics = r->n_metrics;
        r->sample.header_line = r->header_line;
        r->sample.time_ns = r->time_ns;
        r->sample.has_time = r->has_time;
        r->stats.samples++;
        *sample = &r->sample;
    }
    r->have_pname = 0;
    r->n_groups = 0;
    kp_buf_clear(&r->frames);
    return st;
}

/* After a failure the sample being built is lost whole: its later frame
 * lines are ignored as if its header had been filtered out. */
static kp_status drop_on_error(kp_perf_reader *r, kp_status st)
{
    if (st != KP_OK) {
        r->have_pname = 0;
        r->n_groups = 0;
        r->n_metrics = 0;
        kp_buf_clear(&r->frames);
    }
    return st;
}

kp_status kp_perf_reader_line(kp_perf_reader *r, const char *line, size_t len,
                              const kp_perf_sample **sample)
{
    const unsigned char *s = (const unsigned char *)line;
    *sample = NULL;
    r->stats.lines++;
    if (len > 0 && s[0] == '#')
        return KP_OK;
    if (len == 0)
        return drop_on_error(r, on_blank(r, sample));
    /* headers never start with whitespace; a line that is not one may be a frame */
    size_t func, func_len, mod, mod_len;
    if (!is_ws(s[0])) {
        size_t comm_len = match_header(s, len);
        if (comm_len)
            return drop_on_error(r, on_header(r, s, len, comm_len));
    }
    if (match_frame(s, len, &func, &func_len, &mod, &mod_len))
        return r->have_pname ? drop_on_error(r, add_frame_line(r, s, func, func_len, mod, mod_len))
                             : KP_OK;
    r->stats.malformed++;
    if (!r->stats.first_malformed)
        r->stats.first_malformed = r->stats.lines;
    return KP_OK;
}

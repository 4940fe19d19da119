/* kprof's own checker of FORMATS.md (sections 1, 2 and 3), see format_check.h.
 *
 * Each checker walks the text line by line and counts every violation; the
 * first one is described in `why` as "line N: ..." (no line number for rules
 * about the whole file). The checks are deliberately strict: they follow the
 * grammar of FORMATS.md, not the most lenient consumer. Where FORMATS.md leaves
 * a choice open, the stricter reading is taken and marked "(strict)".
 */
#include "format_check.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- reporting ---------------------------------------------------------- */

typedef struct {
    int count;
    char *why;
    size_t why_len;
} report;

static report report_start(char *why, size_t why_len)
{
    report r = {0, why, why_len};
    if (why && why_len)
        why[0] = '\0';
    return r;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
violation(report *r, size_t line, const char *fmt, ...)
{
    if (r->count++ > 0 || !r->why || r->why_len == 0)
        return;
    int n = line ? snprintf(r->why, r->why_len, "line %zu: ", line) : 0;
    if (n < 0 || (size_t)n >= r->why_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why + n, r->why_len - (size_t)n, fmt, ap);
    va_end(ap);
}

/* ---- lines and bytes ---------------------------------------------------- */

typedef struct {
    const char *p;
    size_t len; /* without the LF */
    size_t no;  /* 1-based */
    int has_lf;
} line_t;

/* Moves `l` to the next line of text[*pos..len); returns 0 at the end. */
static int next_line(const char *text, size_t len, size_t *pos, line_t *l)
{
    if (*pos >= len)
        return 0;
    const char *p = text + *pos;
    const char *nl = memchr(p, '\n', len - *pos);
    l->p = p;
    l->len = nl ? (size_t)(nl - p) : len - *pos;
    l->has_lf = nl != NULL;
    l->no++;
    *pos += l->len + (nl != NULL);
    return 1;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int is_alnum(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static size_t count_digits(const char *p, const char *end)
{
    size_t n = 0;
    while (p + n < end && is_digit(p[n]))
        n++;
    return n;
}

/* Consumes the literal `lit` at *p; returns 0 (and leaves *p) if absent. */
static int eat(const char **p, const char *end, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(end - *p) < n || memcmp(*p, lit, n) != 0)
        return 0;
    *p += n;
    return 1;
}

/* Length of the well-formed UTF-8 sequence at s[0..n) (n > 0), 0 if none:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* LF line endings, UTF-8, no NUL or control byte (TAB is judged by the
 * line's own grammar). */
static void check_bytes(report *r, const line_t *l)
{
    const unsigned char *s = (const unsigned char *)l->p;
    int cr = 0, control = 0, bad_utf8 = 0;
    for (size_t i = 0; i < l->len;) {
        if (s[i] == '\r')
            cr = 1;
        else if ((s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
            control = 1;
        size_t n = utf8_len(s + i, l->len - i);
        if (n == 0) {
            bad_utf8 = 1;
            n = 1;
        }
        i += n;
    }
    if (cr)
        violation(r, l->no, "CR byte (line endings must be LF only)");
    if (control)
        violation(r, l->no, "NUL or control byte");
    if (bad_utf8)
        violation(r, l->no, "not valid UTF-8");
    if (!l->has_lf)
        violation(r, l->no, "the last line does not end with LF");
}

/* ---- section 1: perf-script --------------------------------------------- */

/* SYMBOL: no byte that FORMATS.md says must be percent-encoded, '%' only as
 * a %XX escape, never "[unknown]". One violation per symbol. */
static void check_symbol(report *r, size_t line, const char *s, size_t len)
{
    if (len == 0) {
        violation(r, line, "empty SYMBOL");
        return;
    }
    if (len == 9 && memcmp(s, "[unknown]", 9) == 0) {
        violation(r, line, "SYMBOL is [unknown]");
        return;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c != 0 && strchr(";+()'\"\\ \t\r\n", c)) {
            violation(r, line, "SYMBOL has byte 0x%02x, which must be percent-encoded", c);
            return;
        }
        if (c == '%' && (len - i < 3 || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))) {
            violation(r, line, "SYMBOL has a '%%' that is not a %%XX escape");
            return;
        }
        if (c == '>' && i > 0 && s[i - 1] == '-') {
            violation(r, line, "SYMBOL has '->' (its '>' must be encoded)");
            return;
        }
    }
}

static void check_module(report *r, size_t line, const char *s, size_t len)
{
    if (len == 0) /* (strict) */
        violation(r, line, "empty MODULE");
    else if (s[0] == '[')
        violation(r, line, "MODULE starts with '['");
    else if (memchr(s, ' ', len) || memchr(s, '\t', len) || memchr(s, ')', len))
        violation(r, line, "MODULE has a space or a parenthesis");
}

/* FlameScope counts any line matching " +([0-9.]+): .+?:" as a sample. */
static int looks_like_event(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != ' ')
            continue;
        size_t j = i;
        while (j < len && p[j] == ' ')
            j++;
        size_t k = j;
        while (k < len && (is_digit(p[k]) || p[k] == '.'))
            k++;
        if (k > j && k + 1 < len && p[k] == ':' && p[k + 1] == ' ' && k + 3 < len &&
            memchr(p + k + 3, ':', len - k - 3))
            return 1;
    }
    return 0;
}

/* frame := TAB HEX ' ' SYMBOL ' (' MODULE ')' */
static void check_frame(report *r, const line_t *l)
{
    const char *p = l->p + 1, *end = l->p + l->len;
    size_t n = 0;
    while (p + n < end && ((p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'f')))
        n++;
    if (n == 0 || (p + n < end && is_hex(p[n]))) {
        violation(r, l->no, "frame must start with TAB and a lowercase hex address");
        return;
    }
    p += n;
    if (!eat(&p, end, " ")) {
        violation(r, l->no, "one space must follow the frame address");
        return;
    }
    /* MODULE holds no '(', so it starts after the last one */
    const char *open = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == '(')
            open = q;
    if (end == p || end[-1] != ')' || !open || open == p || open[-1] != ' ') {
        violation(r, l->no, "frame must end with ' (MODULE)'");
        return;
    }
    check_symbol(r, l->no, p, (size_t)(open - 1 - p));
    check_module(r, l->no, open + 1, (size_t)(end - 1 - (open + 1)));
    if (looks_like_event(l->p, l->len))
        violation(r, l->no, "frame line matches FlameScope's sample pattern ' N.N: x:'");
}

typedef struct {
    size_t samples;
    int have_time;
    uint64_t max_time_us;
    const char *event; /* the file's event name, in the text */
    size_t event_len;
} perf_state;

/* Parses "-?[0-9]+" at *p. */
static int eat_int(const char **p, const char *end)
{
    const char *q = *p;
    eat(&q, end, "-");
    size_t n = count_digits(q, end);
    if (n == 0)
        return 0;
    *p = q + n;
    return 1;
}

/* header := COMM ' ' PID '/' TID ' [' CPU '] ' SECS '.' USEC6 ': ' PERIOD ' '
 *           EVENT ':' ( TAB 'metric_' NAME ': ' INT ', ' INT )* */
static void check_header(perf_state *st, report *r, const line_t *l)
{
    const char *p = l->p, *end = l->p + l->len;
    size_t no = l->no;
    /* COMM has no digit, so the first digit starts the PID */
    const char *pid = p;
    while (pid < end && !is_digit(*pid))
        pid++;
    if (pid == end) {
        violation(r, no, "sample header without a decimal PID");
        return;
    }
    if (pid == p || pid[-1] != ' ') {
        violation(r, no, "COMM has a digit, or the PID is not decimal");
        return;
    }
    size_t comm_len = (size_t)(pid - 1 - p);
    if (comm_len < 2)
        violation(r, no, "COMM has fewer than 2 characters");
    else if (p[comm_len - 1] == ' ' || memchr(p, '\t', comm_len))
        violation(r, no, "COMM ends with a space or has a TAB");
    else if (memchr(p, ';', comm_len))
        violation(r, no, "COMM has ';' (a frame separator once folded)");
    p = pid + count_digits(pid, end);
    size_t n;
    if (!eat(&p, end, "/") || (n = count_digits(p, end)) == 0 || (p + n < end && p[n] != ' ')) {
        violation(r, no, "PID/TID must be two decimal integers");
        return;
    }
    p += n;
    if (!eat(&p, end, " [") || (n = count_digits(p, end)) == 0 || (p += n, !eat(&p, end, "] "))) {
        violation(r, no, "expected ' [CPU] ' after PID/TID");
        return;
    }
    /* SECS.USEC6 */
    const char *secs = p;
    size_t secs_len = count_digits(p, end);
    p += secs_len;
    size_t usec_len = 0;
    if (secs_len == 0 || !eat(&p, end, ".") || (usec_len = count_digits(p, end)) != 6 ||
        (p += 6, !eat(&p, end, ": "))) {
        violation(r, no, "timestamp must be SECS.USEC with exactly 6 decimals, then ': '");
        return;
    }
    uint64_t time_us = 0;
    int too_big = 0;
    for (size_t i = 0; i < secs_len; i++) {
        unsigned d = (unsigned)(secs[i] - '0');
        if (time_us > (UINT64_MAX / 1000000 - 1 - d) / 10)
            too_big = 1;
        else
            time_us = time_us * 10 + d;
    }
    uint64_t usec = 0;
    for (size_t i = 0; i < 6; i++)
        usec = usec * 10 + (unsigned)(secs[secs_len + 1 + i] - '0');
    time_us = time_us * 1000000 + usec;
    if (too_big)
        violation(r, no, "timestamp too large");
    else if (st->have_time && time_us < st->max_time_us)
        violation(r, no, "timestamp goes backwards");
    if (usec == 0)
        violation(r, no, "timestamp is a whole second (.000000)");
    if (!st->have_time || time_us > st->max_time_us)
        st->max_time_us = time_us;
    st->have_time = 1;
    /* PERIOD ' ' EVENT ':' */
    if ((n = count_digits(p, end)) == 0 || (p += n, !eat(&p, end, " "))) {
        violation(r, no, "PERIOD must be an integer followed by one space");
        return;
    }
    const char *event = p;
    while (p < end && (is_alnum(*p) || *p == '_' || *p == '.' || *p == '-'))
        p++;
    size_t event_len = (size_t)(p - event);
    if (event_len == 0 || !eat(&p, end, ":")) {
        violation(r, no, "EVENT must be [A-Za-z0-9_.-]+ followed by ':'");
        return;
    }
    if (!st->event) {
        st->event = event;
        st->event_len = event_len;
    } else if (event_len != st->event_len || memcmp(event, st->event, event_len) != 0) {
        violation(r, no, "a second EVENT name (%.*s after %.*s)", (int)event_len, event,
                  (int)st->event_len, st->event);
    }
    while (p < end) {
        const char *name = p;
        if (eat(&p, end, "\tmetric_")) {
            name = p;
            while (p < end && (is_alnum(*p) || *p == '_'))
                p++;
        }
        if (p == name || !eat(&p, end, ": ") || !eat_int(&p, end) || !eat(&p, end, ", ") ||
            !eat_int(&p, end) || (p < end && *p != '\t')) {
            violation(r, no, "after EVENT only '\\tmetric_NAME: INT, INT' fields (integers)");
            return;
        }
    }
}

int kp_check_perf(const char *text, size_t len, char *why, size_t why_len)
{
    report r = report_start(why, why_len);
    enum { START, IN_SAMPLE, BETWEEN } state = START;
    perf_state st = {0};
    line_t l = {0};
    size_t pos = 0;
    while (next_line(text, len, &pos, &l)) {
        check_bytes(&r, &l);
        if (l.len > 0 && l.p[0] == '#') {
            if (state != START) /* (strict: the grammar puts comments first) */
                violation(&r, l.no, "comment after the first sample");
            if ((l.len >= 8 && memcmp(l.p, "#include", 8) == 0) ||
                (l.len >= 2 && memcmp(l.p, "#!", 2) == 0))
                violation(&r, l.no, "comment starts with #include or #!");
        } else if (l.len == 0) {
            if (state == IN_SAMPLE)
                state = BETWEEN;
            else if (state == START)
                violation(&r, l.no, "the first non-# line is empty, not a sample header");
            else /* (strict) */
                violation(&r, l.no, "extra empty line between samples");
        } else if (l.p[0] == ' ') {
            violation(&r, l.no,
                      "line starts with a space (COMM is in column 0, frames start "
                      "with TAB)");
        } else if (l.p[0] == '\t') {
            if (state != IN_SAMPLE)
                violation(&r, l.no, "frame line outside a sample");
            check_frame(&r, &l);
        } else {
            if (state == IN_SAMPLE)
                violation(&r, l.no, "no empty line before this sample header");
            check_header(&st, &r, &l);
            st.samples++;
            state = IN_SAMPLE;
        }
    }
    if (state == IN_SAMPLE)
        violation(&r, 0, "the last sample is not followed by an empty line");
    if (st.samples < 2)
        violation(&r, 0, "%zu sample(s): at least 2 are needed", st.samples);
    return r.count;
}

/* ---- section 3: folded stacks ------------------------------------------- */

/* 1 when `s` ends in whitespace + number ("x 12", "x 1.5"): flamegraph.pl
 * then reads a differential profile. */
static int ends_with_number(const char *s, size_t n)
{
    size_t i = n;
    while (i > 0 && is_digit(s[i - 1]))
        i--;
    if (i > 0 && s[i - 1] == '.') {
        size_t dot = --i;
        while (i > 0 && is_digit(s[i - 1]))
            i--;
        if (i == dot)
            return 0;
    } else if (i == n) {
        return 0;
    }
    return i > 0 && (s[i - 1] == ' ' || s[i - 1] == '\t');
}

static int bytewise_compare(const char *a, size_t a_len, const char *b, size_t b_len)
{
    int c = memcmp(a, b, a_len < b_len ? a_len : b_len);
    if (c)
        return c;
    return a_len < b_len ? -1 : a_len > b_len;
}

/* Frames: not empty, no leading or trailing space, no quote. */
static void check_folded_frames(report *r, size_t no, const char *stack, size_t len)
{
    const char *p = stack, *end = stack + len;
    for (;;) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *f_end = semi ? semi : end;
        size_t n = (size_t)(f_end - p);
        if (n == 0)
            violation(r, no, "empty frame");
        else if (p[0] == ' ' || f_end[-1] == ' ')
            violation(r, no,
                      "frame with a leading or trailing space (or 2+ spaces before the count)");
        else if (memchr(p, '\'', n) || memchr(p, '"', n))
            violation(r, no, "quote in a frame");
        if (!semi)
            break;
        p = semi + 1;
    }
}

int kp_check_folded(const char *text, size_t len, char *why, size_t why_len)
{
    report r = report_start(why, why_len);
    if (len == 0)
        violation(&r, 0, "empty file: no stack at all");
    const char *prev = NULL;
    size_t prev_len = 0;
    line_t l = {0};
    size_t pos = 0;
    while (next_line(text, len, &pos, &l)) {
        check_bytes(&r, &l);
        if (l.len == 0) {
            violation(&r, l.no, "empty line");
            continue;
        }
        if (memchr(l.p, '\t', l.len))
            violation(&r, l.no, "TAB (one space, and only before the count)");
        const char *sp = NULL;
        for (size_t i = l.len; i-- > 0;)
            if (l.p[i] == ' ') {
                sp = l.p + i;
                break;
            }
        const char *count = sp ? sp + 1 : NULL, *end = l.p + l.len;
        if (!sp || count == end || count_digits(count, end) != (size_t)(end - count)) {
            violation(&r, l.no, "line must end with one space and an integer count");
            continue;
        }
        if (count[0] == '0')
            violation(&r, l.no, "count must be positive, without leading zero");
        size_t stack_len = (size_t)(sp - l.p);
        if (stack_len == 0) {
            violation(&r, l.no, "empty stack");
            continue;
        }
        check_folded_frames(&r, l.no, l.p, stack_len);
        if (ends_with_number(l.p, stack_len))
            violation(&r, l.no, "the last frame ends in ' <number>'");
        if (prev) {
            int c = bytewise_compare(prev, prev_len, l.p, stack_len);
            if (c == 0)
                violation(&r, l.no, "the same stack twice");
            else if (c > 0)
                violation(&r, l.no, "stacks not sorted bytewise");
        }
        prev = l.p;
        prev_len = stack_len;
    }
    return r.count;
}

/* ---- section 2: file names ---------------------------------------------- */

int kp_check_file_name(const char *name, char *why, size_t why_len)
{
    report r = report_start(why, why_len);
    if (name[0] == '\0')
        violation(&r, 0, "empty file name");
    else if (name[0] == '.') /* hidden: FlameScope does not list it */
        violation(&r, 0, "file name starts with '.'");
    for (const char *p = name; *p; p++)
        if (!is_alnum(*p) && !strchr("._,%+:@-", *p))
            violation(&r, 0, "file name has byte 0x%02x, outside [A-Za-z0-9._,%%+:@-]",
                      (unsigned char)*p);
    return r.count;
}

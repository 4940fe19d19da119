#include "kp/flame_svg.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"
#include "kp/buf.h"
#include "kp/frame_name.h"
#include "kp/symbol.h"

/* Geometry, in pixels. The font is monospace so that a box's label can be cut
 * to fit here and in the script alike: 12 px characters are 0.6 em wide. */
#define PAD 10
#define TOP 50
#define BOTTOM 26
#define FRAME_H 16
#define CHAR_W 7.2
#define MIN_W 0.1

/* One box: a frame at a depth (0: "all"), over weights [x, x + w). */
typedef struct {
    const char *name;
    size_t len;
    uint32_t depth;
    uint64_t x, w;
} box;

/* A frame of the line being drawn that is still open: it goes on as long as
 * the next lines begin with the same frames. */
typedef struct {
    const char *name;
    size_t len;
    uint64_t start;
} open_frame;

typedef struct {
    double px_per_unit;
    uint64_t x; /* weight drawn so far */
    open_frame *open;
    size_t n_open, open_cap;
    box *boxes;
    size_t n_boxes, boxes_cap;
    uint32_t max_depth;
} layout;

static kp_status close_frames(layout *l, size_t keep)
{
    while (l->n_open > keep) {
        open_frame *f = &l->open[--l->n_open];
        uint64_t w = l->x - f->start;
        if ((double)w * l->px_per_unit < MIN_W)
            continue;
        if (l->n_boxes == l->boxes_cap) {
            size_t cap = l->boxes_cap ? 2 * l->boxes_cap : 256;
            box *b = kp_realloc_array(l->boxes, cap, sizeof *b);
            if (!b)
                return KP_ERR_NOMEM;
            l->boxes = b;
            l->boxes_cap = cap;
        }
        uint32_t depth = (uint32_t)l->n_open + 1;
        l->boxes[l->n_boxes++] = (box){f->name, f->len, depth, f->start, w};
        if (depth > l->max_depth)
            l->max_depth = depth;
    }
    return KP_OK;
}

/* One folded stack, in frame order (kp_folded_each_by_frame): the frames it
 * shares with the open ones go on, the others close, its own open. */
static kp_status add_line(void *ctx, const char *stack, size_t len, uint64_t weight)
{
    layout *l = ctx;
    size_t depth = 0, pos = 0;
    size_t shared = SIZE_MAX; /* frames in common with the open ones, once known */
    while (pos <= len) {
        const char *end = memchr(stack + pos, ';', len - pos);
        size_t flen = end ? (size_t)(end - (stack + pos)) : len - pos;
        const char *name = stack + pos;
        if (shared == SIZE_MAX && (depth >= l->n_open || l->open[depth].len != flen ||
                                   memcmp(l->open[depth].name, name, flen) != 0)) {
            shared = depth;
            kp_status st = close_frames(l, shared);
            if (st != KP_OK)
                return st;
        }
        if (shared != SIZE_MAX) {
            if (l->n_open == l->open_cap) {
                size_t cap = l->open_cap ? 2 * l->open_cap : 64;
                open_frame *o = kp_realloc_array(l->open, cap, sizeof *o);
                if (!o)
                    return KP_ERR_NOMEM;
                l->open = o;
                l->open_cap = cap;
            }
            l->open[l->n_open++] = (open_frame){name, flen, l->x};
        }
        depth++;
        pos += flen + 1;
    }
    /* a stack that is a prefix of the open frames closes those above it */
    if (shared == SIZE_MAX) {
        kp_status st = close_frames(l, depth);
        if (st != KP_OK)
            return st;
    }
    l->x = weight > UINT64_MAX - l->x ? UINT64_MAX : l->x + weight;
    return KP_OK;
}

static kp_status append_fmt_double(kp_buf *b, const char *fmt, double v)
{
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, fmt, v);
    return kp_buf_append(b, tmp, n > 0 ? (size_t)n : 0);
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80             ? 1
                 : (s[0] & 0xE0) == 0xC0 ? 2
                 : (s[0] & 0xF0) == 0xE0 ? 3
                 : (s[0] & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0 || len > n || (len == 2 && s[0] < 0xC2) || (len == 4 && s[0] > 0xF4))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((len == 3 && s[0] == 0xE0 && s[1] < 0xA0) || (len == 4 && s[0] == 0xF0 && s[1] < 0x90) ||
        (len == 3 && s[0] == 0xED && s[1] >= 0xA0) || (len == 4 && s[0] == 0xF4 && s[1] >= 0x90))
        return 0; /* overlong, surrogate or past U+10FFFF */
    return len;
}

/* Appends at most `max_chars` characters of `text` as XML character data or
 * attribute text: markup characters escaped, control bytes and invalid UTF-8
 * (which would make the whole file unreadable) shown as '?'. */
static kp_status append_xml(kp_buf *b, const char *text, size_t len, size_t max_chars)
{
    const unsigned char *s = (const unsigned char *)text;
    kp_status st = KP_OK;
    for (size_t i = 0, chars = 0; i < len && chars < max_chars && st == KP_OK; chars++) {
        size_t n = utf8_len(s + i, len - i);
        if (n == 0 || s[i] < 0x20 || s[i] == 0x7F) {
            st = kp_buf_append_char(b, '?');
            i += n ? n : 1;
            continue;
        }
        switch (s[i]) {
        case '&': st = kp_buf_append_str(b, "&amp;"); break;
        case '<': st = kp_buf_append_str(b, "&lt;"); break;
        case '>': st = kp_buf_append_str(b, "&gt;"); break;
        case '"': st = kp_buf_append_str(b, "&quot;"); break;
        default: st = kp_buf_append(b, s + i, n);
        }
        i += n;
    }
    return st;
}

static size_t char_count(const char *text, size_t len)
{
    size_t chars = 0;
    for (size_t i = 0; i < len; chars++) {
        size_t n = utf8_len((const unsigned char *)text + i, len - i);
        i += n ? n : 1;
    }
    return chars;
}

static uint32_t fnv1a(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Warm colours for code (mod:fun/arity), the shade chosen by the module so
 * that one module's frames look alike, and varied a little by the function;
 * cool ones for the other frames: status, process, registered name. Stable
 * from one graph to the next, as flamegraph.pl --hash. */
static kp_status append_fill(kp_buf *b, const box *f)
{
    size_t start = 0, len = f->len;
    int code = kp_frame_name_module(f->name, f->len, &start, &len);
    uint32_t mod = fnv1a(f->name + start, len);
    uint32_t fun = fnv1a(f->name, f->len);
    double v1 = (mod % 1000) / 1000.0, v2 = (fun % 1000) / 1000.0;
    int r, g, bl;
    if (f->depth == 0) {
        r = g = bl = 210;
    } else if (code) {
        r = 205 + (int)(50 * v2);
        g = 80 + (int)(150 * v1);
        bl = 30 + (int)(40 * v2);
    } else {
        r = 110 + (int)(60 * v1);
        g = 170 + (int)(50 * v2);
        bl = 215 + (int)(40 * v1);
    }
    char tmp[48];
    int n = snprintf(tmp, sizeof tmp, "rgb(%d,%d,%d)", r, g, bl);
    return kp_buf_append(b, tmp, (size_t)n);
}

/* A box: its frame's readable name (kp_symbol_decode: the folded file's
 * "anonymous%20fn/1%20in%20MyApp.Hot.spin/2" shows as "anonymous fn/1 in
 * MyApp.Hot.spin/2") in its tooltip, its label and the data-n that search
 * matches; `plain` is scratch space for it. */
static kp_status append_box(kp_buf *b, const box *f, const layout *l, uint64_t total,
                            const char *countname, kp_buf *plain)
{
    kp_buf_clear(plain);
    kp_status decoded = kp_symbol_decode(plain, f->name, f->len);
    if (decoded != KP_OK)
        return decoded;
    const char *name = plain->data ? plain->data : "";
    size_t name_len = plain->len;
    double x = PAD + (double)f->x * l->px_per_unit, w = (double)f->w * l->px_per_unit;
    double y = TOP + (double)(l->max_depth - f->depth) * FRAME_H;
    long fit = (long)((w - 6) / CHAR_W);
    kp_status st = kp_buf_append_str(b, "<g class=\"f\" data-n=\"");
    if (st == KP_OK)
        st = append_xml(b, name, name_len, SIZE_MAX);
    if (st == KP_OK)
        st = kp_buf_append_str(b, "\" data-d=\"");
    if (st == KP_OK)
        st = kp_buf_append_u64(b, f->depth);
    if (st == KP_OK)
        st = kp_buf_append_str(b, "\" data-x=\"");
    if (st == KP_OK)
        st = kp_buf_append_u64(b, f->x);
    if (st == KP_OK)
        st = kp_buf_append_str(b, "\" data-w=\"");
    if (st == KP_OK)
        st = kp_buf_append_u64(b, f->w);
    if (st == KP_OK)
        st = kp_buf_append_str(b, "\"><title>");
    if (st == KP_OK)
        st = append_xml(b, name, name_len, SIZE_MAX);
    if (st == KP_OK)
        st = kp_buf_append_str(b, " (");
    if (st == KP_OK)
        st = kp_buf_append_u64(b, f->w);
    if (st == KP_OK)
        st = kp_buf_append_char(b, ' ');
    if (st == KP_OK)
        st = append_xml(b, countname, strlen(countname), SIZE_MAX);
    double share = 100.0 * (double)f->w / (double)total;
    if (st == KP_OK)
        st = append_fmt_double(b, ", %.2f%%)</title><rect x=\"", share);
    if (st == KP_OK)
        st = append_fmt_double(b, "%.1f\" y=\"", x);
    if (st == KP_OK)
        st = append_fmt_double(b, "%.0f\" width=\"", y);
    if (st == KP_OK)
        st = append_fmt_double(b, "%.1f\" height=\"15\" rx=\"2\" fill=\"", w);
    if (st == KP_OK)
        st = append_fill(b, f);
    if (st == KP_OK)
        st = append_fmt_double(b, "\"/><text x=\"%.1f\" y=\"", x + 3);
    if (st == KP_OK)
        st = append_fmt_double(b, "%.0f\">", y + 11.5);
    if (st == KP_OK && fit >= 3) {
        if (char_count(name, name_len) <= (size_t)fit) {
            st = append_xml(b, name, name_len, SIZE_MAX);
        } else {
            st = append_xml(b, name, name_len, (size_t)fit - 2);
            if (st == KP_OK)
                st = kp_buf_append_str(b, "..");
        }
    }
    if (st == KP_OK)
        st = kp_buf_append_str(b, "</text></g>\n");
    return st;
}

/* The script: tooltips, zoom and search (see the header). Boxes keep their
 * place in weight units (data-x, data-w, exact integers), so that telling
 * what lies inside a box never depends on rounded pixels. */
static const char script[] =
    "<script type=\"text/ecmascript\"><![CDATA[\n"
    "\"use strict\";\n"
    "var PAD = 10, CHAR_W = 7.2, width, total, frames = [], zoomed = null, query = null;\n"
    "function $(id) { return document.getElementById(id); }\n"
    "function kpInit() {\n"
    "  width = Number(document.documentElement.getAttribute(\"width\"));\n"
    "  var gs = $(\"frames\").getElementsByTagName(\"g\");\n"
    "  for (var i = 0; i < gs.length; i++) {\n"
    "    var g = gs[i], f = {g: g, n: g.getAttribute(\"data-n\"),\n"
    "      d: Number(g.getAttribute(\"data-d\")),\n"
    "      x: Number(g.getAttribute(\"data-x\")), w: Number(g.getAttribute(\"data-w\")),\n"
    "      info: g.getElementsByTagName(\"title\")[0].textContent,\n"
    "      rect: g.getElementsByTagName(\"rect\")[0], text: g.getElementsByTagName(\"text\")[0]};\n"
    "    if (f.d === 0) total = f.w;\n"
    "    frames.push(f);\n"
    "    g.addEventListener(\"click\", zoom.bind(null, f));\n"
    "    g.addEventListener(\"mouseover\", show.bind(null, f.info));\n"
    "    g.addEventListener(\"mouseout\", show.bind(null, \" \"));\n"
    "  }\n"
    "  $(\"reset\").addEventListener(\"click\", zoom.bind(null, null));\n"
    "  $(\"search\").addEventListener(\"click\", function () { query ? find(null) : ask(); });\n"
    "  document.addEventListener(\"keydown\", function (e) {\n"
    "    if (e.key === \"Escape\") { zoom(null); find(null); }\n"
    "    else if ((e.ctrlKey || e.metaKey) && e.key === \"f\") { e.preventDefault(); ask(); }\n"
    "  });\n"
    "}\n"
    "function show(text) { $(\"details\").textContent = text; }\n"
    "function label(f, w) {\n"
    "  var fit = Math.floor((w - 6) / CHAR_W);\n"
    "  if (fit < 3) return \"\";\n"
    "  return f.n.length <= fit ? f.n : f.n.substring(0, fit - 2) + \"..\";\n"
    "}\n"
    "function place(f, x, w) {\n"
    "  f.rect.setAttribute(\"x\", x.toFixed(1));\n"
    "  f.rect.setAttribute(\"width\", w.toFixed(1));\n"
    "  f.text.setAttribute(\"x\", (x + 3).toFixed(1));\n"
    "  f.text.textContent = label(f, w);\n"
    "}\n"
    "function zoom(z) {\n"
    "  zoomed = z;\n"
    "  var full = width - 2 * PAD, x0 = z ? z.x : 0, w0 = z ? z.w : total, d0 = z ? z.d : 0;\n"
    "  var k = full / w0;\n"
    "  frames.forEach(function (f) {\n"
    "    var inside = f.d >= d0 && f.x >= x0 && f.x + f.w <= x0 + w0;\n"
    "    var below = f.d < d0 && f.x <= x0 && f.x + f.w >= x0 + w0;\n"
    "    f.g.classList.toggle(\"h\", !inside && !below);\n"
    "    f.g.classList.toggle(\"a\", below);\n"
    "    if (inside) place(f, PAD + (f.x - x0) * k, f.w * k);\n"
    "    else if (below) place(f, PAD, full);\n"
    "  });\n"
    "  $(\"reset\").classList.toggle(\"h\", !z);\n"
    "}\n"
    "function ask() {\n"
    "  var q = window.prompt(\"Frames to highlight (a regular expression):\",\n"
    "    query ? query.source : \"\");\n"
    "  if (q !== null) find(q === \"\" ? null : q);\n"
    "}\n"
    "function find(q) {\n"
    "  var re = null;\n"
    "  if (q !== null) {\n"
    "    try { re = new RegExp(q); } catch (err) {\n"
    "      $(\"matched\").textContent = \"not a regular expression: \" + q;\n"
    "      return;\n"
    "    }\n"
    "  }\n"
    "  query = re;\n"
    "  var spans = [];\n"
    "  frames.forEach(function (f) {\n"
    "    var hit = re !== null && re.test(f.n);\n"
    "    f.g.classList.toggle(\"m\", hit);\n"
    "    if (hit) spans.push([f.x, f.x + f.w]);\n"
    "  });\n"
    "  /* nested matches count once */\n"
    "  spans.sort(function (a, b) { return a[0] - b[0]; });\n"
    "  var sum = 0, end = 0;\n"
    "  spans.forEach(function (s) {\n"
    "    if (s[1] > end) { sum += s[1] - Math.max(s[0], end); end = s[1]; }\n"
    "  });\n"
    "  $(\"search\").textContent = re ? \"Clear search\" : \"Search\";\n"
    "  $(\"matched\").textContent =\n"
    "    re ? \"Matched: \" + (100 * sum / total).toFixed(2) + \"%\" : \" \";\n"
    "}\n"
    "]]></script>\n";

static const char style[] = "<style type=\"text/css\">\n"
                            "text { font-family: monospace; font-size: 12px; fill: rgb(0,0,0); }\n"
                            "#title { font-size: 17px; text-anchor: middle; }\n"
                            "#subtitle { fill: rgb(90,90,90); text-anchor: middle; }\n"
                            ".f { cursor: pointer; }\n"
                            ".f:hover rect { stroke: rgb(0,0,0); stroke-width: 0.5; }\n"
                            ".f text { pointer-events: none; }\n"
                            ".m rect { fill: rgb(230,0,230); }\n"
                            ".a { opacity: 0.6; }\n"
                            ".h { display: none; }\n"
                            ".button { cursor: pointer; fill: rgb(0,0,160); }\n"
                            "</style>\n";

static kp_status append_header(kp_buf *b, const kp_flame_options *o, unsigned width,
                               unsigned height)
{
    const char *title = o && o->title && *o->title ? o->title : "Flame graph";
    char tmp[512];
    kp_status st =
        kp_buf_append_str(b, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n");
    snprintf(tmp, sizeof tmp,
             "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" "
             "height=\"%u\" viewBox=\"0 0 %u %u\" onload=\"kpInit()\">\n"
             "<!-- Flame graph drawn by kprof: click a box to zoom, Escape to undo; "
             "Ctrl-F to highlight frames. -->\n",
             width, height, width, height);
    if (st == KP_OK)
        st = kp_buf_append_str(b, tmp);
    if (st == KP_OK)
        st = kp_buf_append_str(b, style);
    if (st == KP_OK)
        st = kp_buf_append_str(b, script);
    snprintf(tmp, sizeof tmp,
             "<rect x=\"0\" y=\"0\" width=\"%u\" height=\"%u\" fill=\"rgb(250,250,242)\"/>\n"
             "<text id=\"title\" x=\"%u\" y=\"24\">",
             width, height, width / 2);
    if (st == KP_OK)
        st = kp_buf_append_str(b, tmp);
    if (st == KP_OK)
        st = append_xml(b, title, strlen(title), SIZE_MAX);
    snprintf(tmp, sizeof tmp, "</text>\n<text id=\"subtitle\" x=\"%u\" y=\"42\">", width / 2);
    if (st == KP_OK)
        st = kp_buf_append_str(b, tmp);
    if (st == KP_OK && o && o->subtitle)
        st = append_xml(b, o->subtitle, strlen(o->subtitle), SIZE_MAX);
    snprintf(tmp, sizeof tmp,
             "</text>\n"
             "<text id=\"reset\" class=\"button h\" x=\"%d\" y=\"24\">Reset zoom</text>\n"
             "<text id=\"search\" class=\"button\" x=\"%u\" y=\"24\" "
             "text-anchor=\"end\">Search</text>\n"
             "<text id=\"details\" x=\"%d\" y=\"%u\"> </text>\n"
             "<text id=\"matched\" x=\"%u\" y=\"%u\" text-anchor=\"end\"> </text>\n"
             "<g id=\"frames\">\n",
             PAD, width - PAD, PAD, height - 9, width - PAD, height - 9);
    if (st == KP_OK)
        st = kp_buf_append_str(b, tmp);
    return st;
}

/* Root row first, left to right. */
static int by_row(const void *a, const void *b)
{
    const box *x = a, *y = b;
    if (x->depth != y->depth)
        return x->depth < y->depth ? -1 : 1;
    return x->x < y->x ? -1 : x->x > y->x;
}

kp_status kp_flame_svg_write(const kp_folded *folded, const kp_flame_options *options,
                             kp_sink *sink)
{
    unsigned width = options && options->width ? options->width : 1200;
    if (width < 200 || width > 100000)
        return KP_ERR_INVAL;
    uint64_t total = kp_folded_total(folded);
    if (total == 0)
        return KP_ERR_EMPTY;
    const char *countname = options && options->countname ? options->countname : "samples";
    layout l = {.px_per_unit = (width - 2.0 * PAD) / (double)total};
    kp_status st = kp_folded_each_by_frame(folded, add_line, &l);
    if (st == KP_OK)
        st = close_frames(&l, 0);
    kp_buf out = KP_BUF_INIT, plain = KP_BUF_INIT;
    if (st == KP_OK) {
        unsigned height = TOP + (l.max_depth + 1) * FRAME_H + BOTTOM;
        st = append_header(&out, options, width, height);
        box all = {"all", 3, 0, 0, total};
        if (st == KP_OK)
            st = append_box(&out, &all, &l, total, countname, &plain);
        /* they closed leaf first: the file reads better row by row */
        if (l.n_boxes)
            qsort(l.boxes, l.n_boxes, sizeof *l.boxes, by_row);
        for (size_t i = 0; i < l.n_boxes && st == KP_OK; i++)
            st = append_box(&out, &l.boxes[i], &l, total, countname, &plain);
        if (st == KP_OK)
            st = kp_buf_append_str(&out, "</g>\n</svg>\n");
        if (st == KP_OK)
            st = kp_sink_write(sink, out.data, out.len);
    }
    kp_buf_free(&out);
    kp_buf_free(&plain);
    kp_free(l.open);
    kp_free(l.boxes);
    return st;
}

kp_status kp_flame_svg_save(const kp_folded *folded, const kp_flame_options *options,
                            const char *path)
{
    kp_sink *sink;
    kp_status st = kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink);
    if (st != KP_OK)
        return st;
    st = kp_flame_svg_write(folded, options, sink);
    if (st == KP_OK)
        return kp_sink_commit(sink);
    kp_sink_abort(sink);
    return st;
}

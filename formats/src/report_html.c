/* Writing the report page: the embedded style, body and script
 * (formats/report/, compiled in as report_assets.c), a JSON description of
 * the data, and the data itself, columns of little-endian numbers gzipped
 * and base64-encoded, which the page inflates with the browser's own
 * DecompressionStream. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "kp/alloc.h"
#include "kp/buf.h"
#include "kp/cpu_state.h"
#include "kp/json.h"
#include "report_assets.h"
#include "report_internal.h"
#include "zlib_alloc.h"

/* The binary columns, and their layout for the JSON. */
typedef struct {
    kp_buf bin;  /* the columns, each padded to 8 bytes */
    kp_buf json; /* meta being written */
    kp_status st;
} page;

static void json_str(page *p, const char *s)
{
    if (p->st == KP_OK)
        p->st = kp_json_string(&p->json, s, strlen(s));
}

static void json_raw(page *p, const char *s)
{
    if (p->st == KP_OK)
        p->st = kp_buf_append_str(&p->json, s);
}

static void json_u64(page *p, uint64_t v)
{
    if (p->st == KP_OK)
        p->st = kp_buf_append_u64(&p->json, v);
}

/* Appends a column of `n` values, as uint32 when every value fits (and
 * `force64` is 0), else as float64 (exact up to 2^53), and describes it in
 * the JSON as ["u32"|"f64", byte offset, length]. */
static void column(page *p, const uint64_t *v, size_t n, int force64)
{
    int wide = force64;
    for (size_t i = 0; i < n && !wide; i++)
        wide = v[i] > UINT32_MAX;
    size_t size = wide ? 8 : 4;
    while (p->st == KP_OK && p->bin.len % 8)
        p->st = kp_buf_append_char(&p->bin, 0);
    size_t offset = p->bin.len;
    if (p->st == KP_OK)
        p->st = kp_buf_reserve(&p->bin, n * size);
    if (p->st != KP_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        unsigned char b[8];
        if (wide) {
            double d = (double)v[i];
            uint64_t u;
            memcpy(&u, &d, 8);
            for (int k = 0; k < 8; k++)
                b[k] = (unsigned char)(u >> (8 * k));
        } else {
            for (int k = 0; k < 4; k++)
                b[k] = (unsigned char)(v[i] >> (8 * k));
        }
        kp_buf_append(&p->bin, b, size);
    }
    json_raw(p, wide ? "[\"f64\"," : "[\"u32\",");
    json_u64(p, offset);
    json_raw(p, ",");
    json_u64(p, n);
    json_raw(p, "]");
}

typedef struct {
    uint32_t slice, a, b;
    uint64_t index;
} order;

/* A frame, node or process id + 1, none (KP_REPORT_NONE) as 0. */
static uint64_t plus1(uint32_t v)
{
    return v == KP_REPORT_NONE ? 0 : (uint64_t)v + 1;
}

static int by_key(const void *x, const void *y)
{
    const order *p = x, *q = y;
    if (p->slice != q->slice)
        return p->slice < q->slice ? -1 : 1;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    return (p->b > q->b) - (p->b < q->b);
}

/* An entry set sorted by (slice, a, b), as columns: slice as the
 * difference from the previous entry's, `a` as the difference from the
 * previous entry's in the same slice, `b` (when `b_name`, its name) from the
 * previous entry's of the same slice and `a` (small numbers gzip well),
 * count and one column per weight. */
static void set_columns(page *p, const kp_report_set *s, unsigned row_cells, const char *a_name,
                        const char *b_name)
{
    size_t n = s->n;
    order *o = kp_malloc((n ? n : 1) * sizeof *o);
    uint64_t *v = kp_malloc((n ? n : 1) * sizeof *v);
    if (!o || !v) {
        p->st = KP_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        o[i] = (order){s->slice[i], s->a[i], s->b[i], i};
    qsort(o, n, sizeof *o, by_key);
    json_raw(p, "{\"sliceCells\":"); /* in heat map rows, as the page counts */
    json_u64(p, s->slice_cells / row_cells);
    json_raw(p, ",\"slice\":");
    for (size_t i = 0; i < n; i++)
        v[i] = o[i].slice - (i ? o[i - 1].slice : 0);
    column(p, v, n, 0);
    json_raw(p, ",\"");
    json_raw(p, a_name);
    json_raw(p, "\":");
    for (size_t i = 0; i < n; i++) {
        int same = i && o[i].slice == o[i - 1].slice;
        v[i] = o[i].a - (same ? o[i - 1].a : 0);
    }
    column(p, v, n, 0);
    if (b_name) {
        json_raw(p, ",\"");
        json_raw(p, b_name);
        json_raw(p, "\":");
        for (size_t i = 0; i < n; i++) {
            int same = i && o[i].slice == o[i - 1].slice && o[i].a == o[i - 1].a;
            v[i] = o[i].b - (same ? o[i - 1].b : 0);
        }
        column(p, v, n, 0);
    }
    json_raw(p, ",\"count\":");
    for (size_t i = 0; i < n; i++)
        v[i] = s->count[o[i].index];
    column(p, v, n, 0);
    json_raw(p, ",\"weights\":[");
    for (unsigned k = 0; k < s->n_weights; k++) {
        json_raw(p, k ? "," : "");
        for (size_t i = 0; i < n; i++)
            v[i] = s->w[k][o[i].index];
        column(p, v, n, 0);
    }
    json_raw(p, "]}");
out:
    kp_free(o);
    kp_free(v);
}

static void source_meta(page *p, const kp_report_source *s, kp_report_kind kind)
{
    json_raw(p, "{\"kind\":");
    json_str(p, kind == KP_REPORT_CPU ? "cpu" : "samples");
    json_raw(p, ",\"originS\":");
    json_u64(p, s->origin_s);
    json_raw(p, ",\"firstUs\":");
    json_u64(p, s->first_ns / 1000);
    json_raw(p, ",\"lastUs\":");
    json_u64(p, s->last_ns / 1000);
    json_raw(p, ",\"samples\":");
    json_u64(p, s->samples);
    json_raw(p, ",\"weightNames\":[");
    for (unsigned k = 0; k < s->n_weights; k++) {
        json_raw(p, k ? "," : "");
        json_str(p, kind == KP_REPORT_CPU ? KP_CPU_WEIGHT_NAME : kp_weight_names[k]);
    }
    json_raw(p, "],\"weightUnits\":[");
    for (unsigned k = 0; k < s->n_weights; k++) {
        json_raw(p, k ? "," : "");
        json_str(p, kind == KP_REPORT_CPU ? KP_CPU_WEIGHT_UNIT : kp_weight_units[k]);
    }
    json_raw(p, "],\"weightTitles\":[");
    for (unsigned k = 0; k < s->n_weights; k++) {
        json_raw(p, k ? "," : "");
        json_str(p, kind == KP_REPORT_CPU ? KP_CPU_WEIGHT_TITLE : kp_weight_titles[k]);
    }
    json_raw(p, "],\"heatRows\":");
    json_u64(p, KP_REPORT_HEAT_ROWS / s->row_cells);
    json_raw(p, ",\"heat\":[");
    for (unsigned k = 0; k < s->n_weights; k++) {
        json_raw(p, k ? "," : "");
        column(p, s->heat[k], s->heat_cells, 0);
    }
    json_raw(p, "],\"paths\":");
    set_columns(p, &s->paths, s->row_cells, "node", NULL);
    json_raw(p, ",\"processes\":");
    set_columns(p, &s->processes, s->row_cells, "process", "node");
    json_raw(p, ",\"timeline\":");
    set_columns(p, &s->timeline, s->row_cells, "process", "status");
    json_raw(p, "}");
}

static void build(page *p, const kp_report *r, const kp_report_options *o)
{
    json_raw(p, "{\"version\":2,\"title\":");
    json_str(p, o && o->title ? o->title : "kprof report");
    json_raw(p, ",\"subtitle\":");
    json_str(p, o && o->subtitle ? o->subtitle : "");
    json_raw(p, ",\"busyFlags\":");
    json_str(p, o && o->busy_flags ? o->busy_flags : "");
    /* what the page needs to tell a native CPU stack's state frame */
    json_raw(p, ",\"threadKinds\":[");
    for (int k = 0; k < KP_REPORT_THREAD_KINDS; k++) {
        json_raw(p, k ? "," : "");
        json_str(p, kp_report_thread_kinds[k]);
    }
    json_raw(p, "],\"cpuStates\":[");
    for (int k = 0; k < KP_CPU_STATE_COUNT; k++) {
        json_raw(p, "[");
        json_str(p, kp_cpu_state_name((kp_cpu_state)k));
        json_raw(p, ",");
        json_str(p, kp_cpu_state_msacc((kp_cpu_state)k));
        json_raw(p, ",");
        json_str(p, kp_cpu_state_help((kp_cpu_state)k));
        json_raw(p, k + 1 < KP_CPU_STATE_COUNT ? "]," : "]");
    }
    json_raw(p, "],\"frames\":[");
    uint32_t nf = kp_strtab_count(r->frames);
    for (uint32_t i = 0; i < nf && p->st == KP_OK; i++) {
        size_t len;
        const char *f = kp_strtab_get(r->frames, i, &len);
        json_raw(p, i ? "," : "");
        if (p->st == KP_OK)
            p->st = kp_json_string(&p->json, f, len);
    }
    json_raw(p, "],\"nodeParent\":");
    uint64_t *v = kp_malloc((r->n_nodes ? r->n_nodes : 1) * sizeof *v);
    if (!v) {
        p->st = KP_ERR_NOMEM;
        return;
    }
    /* parent + 1, so that the root's children have 0 */
    for (uint32_t i = 0; i < r->n_nodes; i++)
        v[i] = plus1(r->node_parent[i]);
    column(p, v, r->n_nodes, 0);
    json_raw(p, ",\"nodeFrame\":");
    for (uint32_t i = 0; i < r->n_nodes; i++)
        v[i] = r->node_frame[i];
    column(p, v, r->n_nodes, 0);
    kp_free(v);
    /* the processes: recording, and frame + 1 of pid, node and name (0: none) */
    uint32_t np = kp_strtab_count(r->process_keys);
    v = kp_malloc((np ? np : 1) * sizeof *v);
    if (!v) {
        p->st = KP_ERR_NOMEM;
        return;
    }
    const char *names[4] = {
        ",\"procRecording\":", ",\"procPid\":", ",\"procNode\":", ",\"procName\":"};
    const uint32_t *cols[4] = {r->proc_recording, r->proc_pid, r->proc_node, r->proc_name};
    for (int c = 0; c < 4; c++) {
        for (uint32_t i = 0; i < np; i++)
            v[i] = c == 0                         ? cols[c][i]
                   : cols[c][i] == KP_REPORT_NONE ? 0
                                                  : (uint64_t)cols[c][i] + 1;
        json_raw(p, names[c]);
        column(p, v, np, 0);
    }
    kp_free(v);
    json_raw(p, ",\"recordings\":[");
    for (unsigned i = 0; i < 2; i++) {
        if (!r->sources[i][KP_REPORT_SAMPLES] && !r->sources[i][KP_REPORT_CPU])
            continue;
        json_raw(p, i ? ",{\"name\":" : "{\"name\":");
        json_str(p, r->names[i] ? r->names[i] : "");
        json_raw(p, ",\"sources\":[");
        int first = 1;
        for (unsigned k = 0; k < KP_REPORT_KINDS; k++) {
            const kp_report_source *s = r->sources[i][k];
            if (!s || s->samples == 0)
                continue;
            json_raw(p, first ? "" : ",");
            first = 0;
            source_meta(p, s, (kp_report_kind)k);
        }
        json_raw(p, "]}");
    }
    json_raw(p, "]}");
}

static kp_status gzip(const kp_buf *in, kp_buf *out)
{
    z_stream z = {0};
    z.zalloc = kp_zlib_alloc;
    z.zfree = kp_zlib_free;
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return KP_ERR_COMPRESS;
    kp_status st = kp_buf_reserve(out, deflateBound(&z, in->len));
    if (st == KP_OK) {
        z.next_in = (Bytef *)in->data;
        z.avail_in = (uInt)in->len; /* under 4 GiB: columns of a bounded budget */
        z.next_out = (Bytef *)out->data + out->len;
        z.avail_out = (uInt)(out->cap - out->len);
        if (deflate(&z, Z_FINISH) != Z_STREAM_END)
            st = KP_ERR_COMPRESS;
        else
            out->len += z.total_out;
    }
    deflateEnd(&z);
    return st;
}

/* Writes `data` as base64 in lines of 76 characters. */
static kp_status base64(kp_sink *sink, const unsigned char *data, size_t len)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char line[80];
    kp_status st = KP_OK;
    for (size_t i = 0; i < len && st == KP_OK;) {
        size_t n = 0;
        for (int g = 0; g < 19 && i < len; g++, i += 3) {
            uint32_t v = (uint32_t)data[i] << 16;
            size_t left = len - i;
            if (left > 1)
                v |= (uint32_t)data[i + 1] << 8;
            if (left > 2)
                v |= data[i + 2];
            line[n++] = abc[v >> 18 & 63];
            line[n++] = abc[v >> 12 & 63];
            line[n++] = left > 1 ? abc[v >> 6 & 63] : '=';
            line[n++] = left > 2 ? abc[v & 63] : '=';
        }
        line[n++] = '\n';
        st = kp_sink_write(sink, line, n);
    }
    return st;
}

static kp_status put(kp_sink *sink, const char *s)
{
    return kp_sink_write(sink, s, strlen(s));
}

kp_status kp_report_write_html(kp_report *r, const kp_report_options *o, kp_sink *sink)
{
    int any = 0;
    for (unsigned i = 0; i < 2; i++)
        for (unsigned k = 0; k < KP_REPORT_KINDS; k++)
            any |= r->sources[i][k] && r->sources[i][k]->samples;
    if (!any)
        return KP_ERR_EMPTY;
    for (unsigned i = 0; i < 2; i++) {
        kp_status st = r->sources[i][KP_REPORT_SAMPLES]
                           ? kp_report_fit_rows(r->sources[i][KP_REPORT_SAMPLES])
                           : KP_OK;
        if (st != KP_OK)
            return st;
    }
    page p = {KP_BUF_INIT, KP_BUF_INIT, KP_OK};
    kp_buf gz = KP_BUF_INIT;
    build(&p, r, o);
    kp_status st = p.st;
    if (st == KP_OK)
        st = gzip(&p.bin, &gz);
    kp_buf_free(&p.bin);
    if (st == KP_OK) {
        kp_buf title = KP_BUF_INIT;
        /* the JSON string's escapes are HTML-safe but for '<' and '&' */
        const char *t = o && o->title ? o->title : "kprof report";
        for (const char *c = t; *c && st == KP_OK; c++)
            st = *c == '<'   ? kp_buf_append_str(&title, "&lt;")
                 : *c == '&' ? kp_buf_append_str(&title, "&amp;")
                             : kp_buf_append_char(&title, *c);
        if (st == KP_OK)
            st = kp_buf_append_char(&title, 0);
        if (st == KP_OK) {
            put(sink, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>");
            put(sink, title.data);
            put(sink, "</title>\n<style>\n");
            put(sink, kp_report_css);
            put(sink, "</style></head>\n<body>\n");
            put(sink, kp_report_body);
            put(sink, "<script id=\"kprof-meta\" type=\"application/json\">\n");
            /* '<' occurs only inside JSON strings (pids: "<0.1.0>"); as
             * \u003c it cannot close the script element */
            for (size_t i = 0, from = 0; i <= p.json.len; i++) {
                if (i < p.json.len && p.json.data[i] != '<')
                    continue;
                kp_sink_write(sink, p.json.data + from, i - from);
                if (i < p.json.len)
                    put(sink, "\\u003c");
                from = i + 1;
            }
            put(sink,
                "\n</script>\n<script id=\"kprof-data\" type=\"application/octet-stream\">\n");
            base64(sink, (const unsigned char *)gz.data, gz.len);
            put(sink, "</script>\n<script>\n");
            put(sink, kp_report_js);
            st = put(sink, "</script>\n</body></html>\n");
        }
        kp_buf_free(&title);
    }
    kp_buf_free(&p.json);
    kp_buf_free(&gz);
    return st;
}

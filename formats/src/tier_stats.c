#include "kp/tier_stats.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kp/alloc.h"
#include "kp/hist.h"
#include "kp/json.h"
#include "kp/strtab.h"

#define SCOPES 2 /* indexes are kp_tier_scope values */
#define OTHER "_other"

typedef struct {
    kp_hist *hist[SCOPES]; /* NULL until the cell's first observation */
    uint64_t calls[SCOPES];
} cell;

struct kp_tier_stats {
    char **tier_names; /* `tiers` names, "_total" last */
    size_t tiers;
    size_t max_ids;
    kp_strtab *ids;             /* identity names; a name's strtab id is its index */
    size_t other;               /* index of "_other", SIZE_MAX until it is needed */
    cell *cells;                /* [identity * tiers + tier] */
    size_t cells_ids;           /* identities `cells` has room for */
    kp_hist *scratch;           /* the "_all" rows, merged on demand */
    kp_tier_counters now, base; /* base: the counters when the interval began */
};

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

kp_tier_stats *kp_tier_stats_create(const char *const *tier_names, size_t n_tiers,
                                    size_t max_identities)
{
    if (max_identities < 2 || n_tiers > SIZE_MAX / sizeof(char *) - 1)
        return NULL;
    kp_tier_stats *s = kp_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->tiers = n_tiers + 1;
    s->max_ids = max_identities;
    s->other = SIZE_MAX;
    s->tier_names = kp_calloc(s->tiers, sizeof *s->tier_names);
    s->ids = kp_strtab_create();
    s->scratch = kp_hist_create();
    int ok = s->tier_names && s->ids && s->scratch;
    for (size_t t = 0; ok && t < s->tiers; t++)
        ok = (s->tier_names[t] = kp_strdup(t < n_tiers ? tier_names[t] : "_total")) != NULL;
    if (!ok) {
        kp_tier_stats_free(s);
        return NULL;
    }
    return s;
}

void kp_tier_stats_free(kp_tier_stats *s)
{
    if (!s)
        return;
    for (size_t t = 0; s->tier_names && t < s->tiers; t++)
        kp_free(s->tier_names[t]);
    kp_free(s->tier_names);
    for (size_t i = 0; i < s->cells_ids * s->tiers; i++)
        for (int k = 0; k < SCOPES; k++)
            kp_hist_free(s->cells[i].hist[k]);
    kp_free(s->cells);
    kp_strtab_free(s->ids);
    kp_hist_free(s->scratch);
    kp_free(s);
}

size_t kp_tier_stats_tiers(const kp_tier_stats *s)
{
    return s->tiers;
}

static size_t identities(const kp_tier_stats *s)
{
    return kp_strtab_count(s->ids);
}

static cell *cell_at(const kp_tier_stats *s, size_t tier, size_t identity)
{
    return &s->cells[identity * s->tiers + tier];
}

/* Adds a new identity, cells first so that a failure leaves both unchanged. */
static kp_status add_identity(kp_tier_stats *s, const char *name, size_t len, uint64_t hash,
                              uint32_t *id)
{
    size_t need = identities(s) + 1;
    if (need > s->cells_ids) {
        size_t cap = s->cells_ids ? s->cells_ids * 2 : 8;
        if (cap > s->max_ids)
            cap = s->max_ids;
        if (cap > SIZE_MAX / s->tiers)
            return KP_ERR_NOMEM;
        cell *cells = kp_realloc_array(s->cells, cap * s->tiers, sizeof *cells);
        if (!cells)
            return KP_ERR_NOMEM;
        memset(cells + s->cells_ids * s->tiers, 0, (cap - s->cells_ids) * s->tiers * sizeof *cells);
        s->cells = cells;
        s->cells_ids = cap;
    }
    return kp_strtab_intern_hashed(s->ids, name, len, hash, id, NULL);
}

const char *kp_tier_stats_identity_name(const kp_tier_stats *s, size_t identity, size_t *len)
{
    if (identity >= identities(s))
        return NULL;
    return kp_strtab_get(s->ids, (uint32_t)identity, len);
}

size_t kp_tier_stats_identity(kp_tier_stats *s, const char *identity, size_t len)
{
    if (len == 0)
        identity = ""; /* may be NULL */
    uint64_t hash = kp_strtab_hash(identity, len);
    uint32_t id;
    if (kp_strtab_find(s->ids, identity, len, hash, &id))
        return id;
    size_t real = identities(s) - (s->other != SIZE_MAX);
    int is_other = len == strlen(OTHER) && memcmp(identity, OTHER, len) == 0;
    if (!is_other && real < s->max_ids - 1) {
        kp_status st = add_identity(s, identity, len, hash, &id);
        if (st == KP_OK)
            return id;
        if (st != KP_ERR_LIMIT) /* past the table's limits: "_other" */
            return SIZE_MAX;
    }
    if (s->other == SIZE_MAX) {
        if (add_identity(s, OTHER, strlen(OTHER), kp_strtab_hash(OTHER, strlen(OTHER)), &id) !=
            KP_OK)
            return SIZE_MAX;
        s->other = id;
    }
    return s->other;
}

kp_status kp_tier_stats_record(kp_tier_stats *s, size_t tier, size_t identity, uint64_t us,
                               uint32_t calls)
{
    if (tier >= s->tiers || identity >= identities(s) || calls == 0)
        return KP_ERR_INVAL;
    cell *c = cell_at(s, tier, identity);
    for (int k = 0; k < SCOPES; k++)
        if (!c->hist[k] && !(c->hist[k] = kp_hist_create()))
            return KP_ERR_NOMEM;
    for (int k = 0; k < SCOPES; k++) {
        kp_hist_record(c->hist[k], us);
        c->calls[k] = add_sat(c->calls[k], calls);
    }
    return KP_OK;
}

void kp_tier_stats_set_counters(kp_tier_stats *s, const kp_tier_counters *c)
{
    s->now = *c;
}

void kp_tier_stats_end_interval(kp_tier_stats *s)
{
    for (size_t i = 0; i < identities(s) * s->tiers; i++) {
        if (s->cells[i].hist[KP_TIER_INTERVAL])
            kp_hist_reset(s->cells[i].hist[KP_TIER_INTERVAL]);
        s->cells[i].calls[KP_TIER_INTERVAL] = 0;
    }
    s->base = s->now;
}

/* The counters a report of `scope` shows. A counter below its base was reset
 * by the caller: it counts from 0. */
static kp_tier_counters counters_of(const kp_tier_stats *s, kp_tier_scope scope)
{
    kp_tier_counters c = s->now;
    if (scope == KP_TIER_SINCE_START)
        return c;
    uint64_t *now[] = {&c.requests,     &c.events, &c.dropped_events, &c.unattributed_events,
                       &c.cut_requests, &c.pauses, &c.paused_ms,      &c.rearms};
    const uint64_t *base[] = {&s->base.requests,       &s->base.events,
                              &s->base.dropped_events, &s->base.unattributed_events,
                              &s->base.cut_requests,   &s->base.pauses,
                              &s->base.paused_ms,      &s->base.rearms};
    for (size_t i = 0; i < sizeof now / sizeof *now; i++)
        if (*now[i] >= *base[i])
            *now[i] -= *base[i];
    return c;
}

static const kp_hist *hist_of(const kp_tier_stats *s, kp_tier_scope scope, size_t tier,
                              size_t identity)
{
    const kp_hist *h = cell_at(s, tier, identity)->hist[scope];
    return h && kp_hist_count(h) ? h : NULL;
}

/* Merges `tier` of every identity into the scratch histogram; NULL when no
 * identity has data there. */
static const kp_hist *merge_all(kp_tier_stats *s, kp_tier_scope scope, size_t tier, uint64_t *calls)
{
    kp_hist_reset(s->scratch);
    *calls = 0;
    for (size_t i = 0; i < identities(s); i++) {
        const kp_hist *h = hist_of(s, scope, tier, i);
        if (h) {
            kp_hist_merge(s->scratch, h);
            *calls = add_sat(*calls, cell_at(s, tier, i)->calls[scope]);
        }
    }
    return kp_hist_count(s->scratch) ? s->scratch : NULL;
}

static uint64_t round_u64(double v)
{
    return v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)(v + 0.5);
}

int kp_tier_stats_cell(const kp_tier_stats *s, kp_tier_scope scope, size_t tier, size_t identity,
                       uint64_t *count, uint64_t *p50_us, uint64_t *mean_us)
{
    if ((scope != KP_TIER_INTERVAL && scope != KP_TIER_SINCE_START) || tier >= s->tiers ||
        identity >= identities(s))
        return -1;
    const kp_hist *h = hist_of(s, scope, tier, identity);
    if (!h)
        return -1;
    if (count)
        *count = kp_hist_count(h);
    if (p50_us)
        *p50_us = kp_hist_quantile(h, 0.5);
    if (mean_us)
        *mean_us = round_u64(kp_hist_mean(h));
    return 0;
}

/* ---- JSON Lines -------------------------------------------------------- */

typedef struct {
    const char *key;
    uint64_t v;
} json_field;

/* Appends ,"key":v for each field. */
static kp_status json_fields(kp_buf *out, const json_field *f, size_t n)
{
    kp_status st = KP_OK;
    for (size_t i = 0; st == KP_OK && i < n; i++) {
        st = kp_buf_append_str(out, ",\"");
        if (st == KP_OK)
            st = kp_buf_append_str(out, f[i].key);
        if (st == KP_OK)
            st = kp_buf_append_str(out, "\":");
        if (st == KP_OK)
            st = kp_buf_append_u64(out, f[i].v);
    }
    return st;
}

static kp_status json_head(kp_buf *out, kp_tier_scope scope, const char *time_iso, const char *node,
                           uint64_t interval_ms, const kp_tier_counters *c)
{
    kp_status st = kp_buf_append_str(out, "{\"time\":");
    if (st == KP_OK)
        st = kp_json_string(out, time_iso, strlen(time_iso));
    if (st == KP_OK)
        st = kp_buf_append_str(out, ",\"node\":");
    if (st == KP_OK)
        st = kp_json_string(out, node, strlen(node));
    if (st == KP_OK)
        st = kp_buf_append_str(out, scope == KP_TIER_INTERVAL ? ",\"scope\":\"interval\""
                                                              : ",\"scope\":\"since_start\"");
    const json_field f[] = {{"interval_ms", interval_ms},
                            {"requests", c->requests},
                            {"events", c->events},
                            {"dropped_events", c->dropped_events},
                            {"unattributed_events", c->unattributed_events},
                            {"cut_requests", c->cut_requests},
                            {"pauses", c->pauses},
                            {"paused_ms", c->paused_ms},
                            {"rearms", c->rearms}};
    if (st == KP_OK)
        st = json_fields(out, f, sizeof f / sizeof *f);
    if (st == KP_OK)
        st = kp_buf_append_str(out, c->paused ? ",\"paused\":true,\"rows\":["
                                              : ",\"paused\":false,\"rows\":[");
    return st;
}

static kp_status json_row(kp_buf *out, int first, const char *tier, const char *identity,
                          size_t identity_len, const kp_hist *h, uint64_t calls)
{
    kp_status st = kp_buf_append_str(out, first ? "{\"tier\":" : ",{\"tier\":");
    if (st == KP_OK)
        st = kp_json_string(out, tier, strlen(tier));
    if (st == KP_OK)
        st = kp_buf_append_str(out, ",\"identity\":");
    if (st == KP_OK)
        st = kp_json_string(out, identity, identity_len);
    const json_field before_mean[] = {
        {"count", kp_hist_count(h)}, {"calls", calls}, {"min_us", kp_hist_min(h)}};
    const json_field after_mean[] = {{"p50_us", kp_hist_quantile(h, 0.5)},
                                     {"p90_us", kp_hist_quantile(h, 0.9)},
                                     {"p99_us", kp_hist_quantile(h, 0.99)},
                                     {"p999_us", kp_hist_quantile(h, 0.999)},
                                     {"max_us", kp_hist_max(h)}};
    if (st == KP_OK)
        st = json_fields(out, before_mean, sizeof before_mean / sizeof *before_mean);
    if (st == KP_OK)
        st = kp_buf_append_str(out, ",\"mean_us\":");
    if (st == KP_OK)
        st = kp_json_double(out, kp_hist_mean(h));
    if (st == KP_OK)
        st = json_fields(out, after_mean, sizeof after_mean / sizeof *after_mean);
    return st == KP_OK ? kp_buf_append_char(out, '}') : st;
}

static kp_status json_rows(kp_tier_stats *s, kp_tier_scope scope, kp_buf *out)
{
    kp_status st = KP_OK;
    int first = 1;
    for (size_t i = 0; st == KP_OK && i < identities(s); i++) {
        size_t len;
        const char *name = kp_strtab_get(s->ids, (uint32_t)i, &len);
        for (size_t t = 0; st == KP_OK && t < s->tiers; t++) {
            const kp_hist *h = hist_of(s, scope, t, i);
            if (h) {
                st = json_row(out, first, s->tier_names[t], name, len, h,
                              cell_at(s, t, i)->calls[scope]);
                first = 0;
            }
        }
    }
    for (size_t t = 0; st == KP_OK && t < s->tiers; t++) {
        uint64_t calls;
        const kp_hist *h = merge_all(s, scope, t, &calls);
        if (h) {
            st = json_row(out, first, s->tier_names[t], "_all", 4, h, calls);
            first = 0;
        }
    }
    return st;
}

kp_status kp_tier_stats_json(kp_tier_stats *s, kp_tier_scope scope, const char *time_iso,
                             const char *node, uint64_t interval_ms, kp_buf *out)
{
    if (scope != KP_TIER_INTERVAL && scope != KP_TIER_SINCE_START)
        return KP_ERR_INVAL;
    const size_t start = out->len;
    const kp_tier_counters c = counters_of(s, scope);
    kp_status st = json_head(out, scope, time_iso, node, interval_ms, &c);
    if (st == KP_OK)
        st = json_rows(s, scope, out);
    if (st == KP_OK)
        st = kp_buf_append_str(out, "]}\n");
    if (st != KP_OK)
        out->len = start;
    return st;
}

/* ---- text table -------------------------------------------------------- */

/* One cell of the table: a name (not NUL-terminated) or a number in `num`. */
typedef struct {
    const char *name;
    size_t len;
    char num[24];
} table_cell;

static void set_name(table_cell *c, const char *name, size_t len)
{
    c->name = name;
    c->len = len;
}

static void set_number(table_cell *c, uint64_t v)
{
    c->name = NULL;
    c->len = (size_t)snprintf(c->num, sizeof c->num, "%" PRIu64, v);
}

static void set_stat(table_cell *c, const kp_hist *h, kp_tier_stat stat)
{
    static const double q[] = {[KP_TIER_P50] = 0.5, [KP_TIER_P90] = 0.9, [KP_TIER_P99] = 0.99};
    if (!h)
        set_name(c, "-", 1);
    else if (stat == KP_TIER_MEAN)
        set_number(c, round_u64(kp_hist_mean(h)));
    else if (stat == KP_TIER_MAX)
        set_number(c, kp_hist_max(h));
    else if (stat == KP_TIER_COUNT_STAT)
        set_number(c, kp_hist_count(h));
    else
        set_number(c, kp_hist_quantile(h, q[stat]));
}

static const char *cell_text(const table_cell *c)
{
    return c->name ? c->name : c->num;
}

/* Columns on a terminal: UTF-8 continuation bytes take none. */
static size_t display_width(const table_cell *c)
{
    const char *text = cell_text(c);
    size_t w = 0;
    for (size_t i = 0; i < c->len; i++)
        w += ((unsigned char)text[i] & 0xc0) != 0x80;
    return w;
}

static kp_status append_cell(kp_buf *out, const table_cell *c, size_t width, int left)
{
    size_t pad = width - display_width(c);
    kp_status st = kp_buf_reserve(out, c->len + pad);
    if (st != KP_OK)
        return st;
    if (!left)
        for (; pad; pad--)
            out->data[out->len++] = ' ';
    const char *text = cell_text(c);
    for (size_t i = 0; i < c->len; i++) {
        unsigned char b = (unsigned char)text[i];
        out->data[out->len++] = b < 0x20 || b == 0x7f ? '?' : (char)b; /* no terminal escapes */
    }
    for (; pad; pad--)
        out->data[out->len++] = ' ';
    return KP_OK;
}

static int identity_has_data(const kp_tier_stats *s, kp_tier_scope scope, size_t identity)
{
    for (size_t t = 0; t < s->tiers; t++)
        if (hist_of(s, scope, t, identity))
            return 1;
    return 0;
}

/* Fills `grid` (rows of `tiers + 2` cells): column names, identities with
 * data, "_all". Returns the number of rows. */
static size_t fill_grid(kp_tier_stats *s, kp_tier_scope scope, kp_tier_stat stat, table_cell *grid)
{
    const size_t cols = s->tiers + 2, total = s->tiers - 1;
    size_t rows = 0;
    table_cell *row = grid;
    set_name(&row[0], "identity", 8);
    set_name(&row[1], "requests", 8);
    for (size_t t = 0; t < s->tiers; t++)
        set_name(&row[t + 2], s->tier_names[t], strlen(s->tier_names[t]));
    rows++;
    uint64_t requests = 0;
    for (size_t i = 0; i < identities(s); i++) {
        if (!identity_has_data(s, scope, i))
            continue;
        row = grid + rows++ * cols;
        row[0].name = kp_strtab_get(s->ids, (uint32_t)i, &row[0].len);
        const kp_hist *h = hist_of(s, scope, total, i);
        set_number(&row[1], h ? kp_hist_count(h) : 0);
        requests += h ? kp_hist_count(h) : 0;
        for (size_t t = 0; t < s->tiers; t++)
            set_stat(&row[t + 2], hist_of(s, scope, t, i), stat);
    }
    row = grid + rows++ * cols;
    set_name(&row[0], "_all", 4);
    set_number(&row[1], requests);
    for (size_t t = 0; t < s->tiers; t++) {
        uint64_t calls;
        set_stat(&row[t + 2], merge_all(s, scope, t, &calls), stat);
    }
    return rows;
}

static kp_status table_lines(const table_cell *grid, size_t rows, size_t cols, size_t *width,
                             kp_buf *out)
{
    for (size_t c = 0; c < cols; c++) {
        width[c] = 0;
        for (size_t r = 0; r < rows; r++) {
            size_t w = display_width(&grid[r * cols + c]);
            width[c] = w > width[c] ? w : width[c];
        }
    }
    kp_status st = KP_OK;
    for (size_t r = 0; st == KP_OK && r < rows; r++) {
        for (size_t c = 0; st == KP_OK && c < cols; c++) {
            if (c)
                st = kp_buf_append_str(out, "  ");
            if (st == KP_OK)
                st = append_cell(out, &grid[r * cols + c], width[c], c == 0);
        }
        if (st == KP_OK)
            st = kp_buf_append_char(out, '\n');
    }
    return st;
}

static kp_status table_health(const kp_tier_counters *c, kp_buf *out)
{
    if (!c->dropped_events && !c->pauses && !c->cut_requests)
        return KP_OK;
    char line[160];
    int n = snprintf(line, sizeof line,
                     "dropped %" PRIu64 " events, paused %" PRIu64 " times (%" PRIu64
                     " ms), cut %" PRIu64 " requests\n",
                     c->dropped_events, c->pauses, c->paused_ms, c->cut_requests);
    return kp_buf_append(out, line, (size_t)n);
}

kp_status kp_tier_stats_table(kp_tier_stats *s, kp_tier_scope scope, kp_tier_stat stat, kp_buf *out)
{
    static const char *const stat_names[] = {"mean (us)", "p50 (us)", "p90 (us)",
                                             "p99 (us)",  "max (us)", "count"};
    if ((scope != KP_TIER_INTERVAL && scope != KP_TIER_SINCE_START) || stat < KP_TIER_MEAN ||
        stat > KP_TIER_COUNT_STAT)
        return KP_ERR_INVAL;
    const size_t cols = s->tiers + 2, start = out->len;
    /* rows: column names, every identity at most, "_all" */
    table_cell *grid = kp_calloc(identities(s) + 2, cols * sizeof *grid);
    size_t *width = kp_calloc(cols, sizeof *width);
    kp_status st = grid && width ? KP_OK : KP_ERR_NOMEM;
    if (st == KP_OK)
        st = kp_buf_append_str(out, stat_names[stat]);
    if (st == KP_OK)
        st = kp_buf_append_str(out, scope == KP_TIER_INTERVAL ? " per tier, interval\n"
                                                              : " per tier, since start\n");
    if (st == KP_OK)
        st = table_lines(grid, fill_grid(s, scope, stat, grid), cols, width, out);
    if (st == KP_OK) {
        const kp_tier_counters c = counters_of(s, scope);
        st = table_health(&c, out);
    }
    kp_free(grid);
    kp_free(width);
    if (st != KP_OK)
        out->len = start;
    return st;
}

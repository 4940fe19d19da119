/* The report's data: one tree of frames for every source, and per source
 * the (slice, node) entries that the heat map and the range flame graphs are
 * drawn from (kp/report.h). Writing the page is report_html.c's. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kp/alloc.h"
#include "kp/strtab.h"
#include "report_internal.h"

/* Slices per second, finest first: each divides the previous, so a slice
 * never straddles two coarser ones. */
static const unsigned rows_steps[] = {50, 25, 5, 1};

kp_report *kp_report_create(void)
{
    kp_report *r = kp_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->frames = kp_strtab_create();
    r->node_keys = kp_strtab_create();
    r->stacks = kp_strtab_create();
    r->budget = KP_REPORT_ENTRY_BUDGET;
    if (!r->frames || !r->node_keys || !r->stacks) {
        kp_report_free(r);
        return NULL;
    }
    return r;
}

static void source_free(kp_report_source *s)
{
    if (!s)
        return;
    kp_strtab_free(s->keys);
    kp_free(s->slice);
    kp_free(s->node);
    kp_free(s->count);
    for (unsigned k = 0; k < KP_WEIGHT_COUNT; k++) {
        kp_free(s->w[k]);
        kp_free(s->heat[k]);
    }
    kp_free(s);
}

void kp_report_free(kp_report *r)
{
    if (!r)
        return;
    for (unsigned i = 0; i < 2; i++) {
        for (unsigned k = 0; k < KP_REPORT_KINDS; k++)
            source_free(r->sources[i][k]);
        kp_free(r->names[i]);
    }
    kp_strtab_free(r->frames);
    kp_strtab_free(r->node_keys);
    kp_strtab_free(r->stacks);
    kp_free(r->node_parent);
    kp_free(r->node_frame);
    kp_free(r->stack_leaf);
    kp_free(r);
}

kp_report_source *kp_report_get_source(kp_report *r, unsigned recording, kp_report_kind kind)
{
    if (recording > 1 || (unsigned)kind >= KP_REPORT_KINDS)
        return NULL;
    kp_report_source **slot = &r->sources[recording][kind];
    if (!*slot) {
        kp_report_source *s = kp_calloc(1, sizeof *s);
        if (!s)
            return NULL;
        s->keys = kp_strtab_create();
        if (!s->keys) {
            kp_free(s);
            return NULL;
        }
        s->n_weights = kind == KP_REPORT_SAMPLES ? KP_WEIGHT_COUNT : 1;
        s->rows_per_second = rows_steps[0];
        s->budget = r->budget;
        *slot = s;
    }
    return *slot;
}

void kp_report_set_budget(kp_report *r, uint64_t entries)
{
    r->budget = entries;
}

kp_status kp_report_set_name(kp_report *r, unsigned recording, const char *name)
{
    if (recording > 1)
        return KP_ERR_INVAL;
    size_t n = strlen(name);
    char *copy = kp_malloc(n + 1);
    if (!copy)
        return KP_ERR_NOMEM;
    memcpy(copy, name, n + 1);
    kp_free(r->names[recording]);
    r->names[recording] = copy;
    return KP_OK;
}

/* Grows `*array` (elements of `size` bytes) to hold index `need`. */
static int grow(void *array, size_t *cap, size_t need, size_t size)
{
    if (need < *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n <= need)
        n *= 2;
    void *p = kp_realloc_array(*(void **)array, n, size);
    if (!p)
        return -1;
    *(void **)array = p;
    *cap = n;
    return 0;
}

/* The node of frame `frame` under `parent` (UINT32_MAX: the root). */
static kp_status node_of(kp_report *r, uint32_t parent, uint32_t frame, uint32_t *node)
{
    uint32_t key[2] = {parent, frame};
    int is_new = 0;
    /* room for a new node first: a key interned without it would name a
     * node that has no parent or frame */
    uint32_t next = kp_strtab_count(r->node_keys);
    if (grow(&r->node_parent, &r->nodes_cap, next, sizeof *r->node_parent) ||
        grow(&r->node_frame, &r->node_frame_cap, next, sizeof *r->node_frame))
        return KP_ERR_NOMEM;
    kp_status st = kp_strtab_intern(r->node_keys, key, sizeof key, node, &is_new);
    if (st != KP_OK || !is_new)
        return st;
    r->node_parent[*node] = parent;
    r->node_frame[*node] = frame;
    r->n_nodes = *node + 1;
    return KP_OK;
}

/* The leaf node of folded stack `stack`, interning its frames and path. */
static kp_status leaf_of(kp_report *r, const char *stack, size_t len, uint32_t *leaf)
{
    uint32_t sid;
    /* stacks are keyed by their 128-bit XXH3, not their text: a long
     * recording of many processes has hundreds of thousands of distinct
     * stacks of hundreds of bytes each; two stacks sharing a 128-bit hash
     * would have to collide by chance (about 2^-128 a pair) */
    XXH128_hash_t h = XXH3_128bits(stack, len);
    uint64_t key[2] = {h.low64, h.high64};
    if (kp_strtab_find(r->stacks, key, sizeof key, kp_strtab_hash(key, sizeof key), &sid)) {
        *leaf = r->stack_leaf[sid];
        return KP_OK;
    }
    /* a stack is interned only once its leaf is known and has its slot, so
     * that every interned stack has a leaf, whatever fails on the way */
    if (grow(&r->stack_leaf, &r->stack_leaf_cap, kp_strtab_count(r->stacks), sizeof *r->stack_leaf))
        return KP_ERR_NOMEM;
    kp_status st;
    uint32_t node = UINT32_MAX;
    size_t i = 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && stack[j] != ';')
            j++;
        uint32_t frame;
        st = kp_strtab_intern(r->frames, stack + i, j - i, &frame, NULL);
        if (st == KP_OK)
            st = node_of(r, node, frame, &node);
        if (st != KP_OK)
            return st;
        i = j + 1;
    }
    st = kp_strtab_intern(r->stacks, key, sizeof key, &sid, NULL);
    if (st != KP_OK)
        return st;
    r->stack_leaf[sid] = node;
    *leaf = node;
    return KP_OK;
}

/* Grows every entry array of `s` to hold index `need`. An array grown before
 * a failure stays grown; `cap` moves only when all are. */
static int grow_entries(kp_report_source *s, uint64_t need)
{
    if (need < s->cap)
        return 0;
    size_t n = s->cap ? s->cap * 2 : 1024;
    void **arrays[3 + KP_WEIGHT_COUNT] = {(void **)&s->slice, (void **)&s->node,
                                          (void **)&s->count};
    size_t sizes[3 + KP_WEIGHT_COUNT] = {sizeof *s->slice, sizeof *s->node, sizeof *s->count};
    for (unsigned k = 0; k < s->n_weights; k++) {
        arrays[3 + k] = (void **)&s->w[k];
        sizes[3 + k] = sizeof *s->w[k];
    }
    for (unsigned i = 0; i < 3 + s->n_weights; i++) {
        void *p = kp_realloc_array(*arrays[i], n, sizes[i]);
        if (!p)
            return -1;
        *arrays[i] = p;
    }
    s->cap = n;
    return 0;
}

static kp_status entry_of(kp_report_source *s, uint32_t slice, uint32_t node, uint32_t *e)
{
    uint32_t key[2] = {slice, node};
    int is_new = 0;
    if (grow_entries(s, s->n_entries))
        return KP_ERR_NOMEM;
    kp_status st = kp_strtab_intern(s->keys, key, sizeof key, e, &is_new);
    if (st != KP_OK || !is_new)
        return st;
    s->slice[*e] = slice;
    s->node[*e] = node;
    s->count[*e] = 0;
    for (unsigned k = 0; k < s->n_weights; k++)
        s->w[k][*e] = 0;
    s->n_entries = *e + 1;
    return KP_OK;
}

/* Merges the entries into slices `factor` times longer. The new keys are
 * all interned first, so that running out of memory changes nothing; then
 * the entries merge in place: keys are numbered in the order they first
 * appear, so an entry's new index is never above its old one. */
static kp_status coarsen(kp_report_source *s, unsigned factor)
{
    kp_strtab *keys = kp_strtab_create();
    if (!keys)
        return KP_ERR_NOMEM;
    for (uint64_t i = 0; i < s->n_entries; i++) {
        uint32_t key[2] = {s->slice[i] / factor, s->node[i]}, e;
        if (kp_strtab_intern(keys, key, sizeof key, &e, NULL) != KP_OK) {
            kp_strtab_free(keys);
            return KP_ERR_NOMEM;
        }
    }
    uint64_t n = 0;
    for (uint64_t i = 0; i < s->n_entries; i++) {
        uint32_t key[2] = {s->slice[i] / factor, s->node[i]}, e;
        kp_strtab_find(keys, key, sizeof key, kp_strtab_hash(key, sizeof key), &e);
        if (e == n) { /* its first entry */
            s->slice[e] = key[0];
            s->node[e] = key[1];
            s->count[e] = s->count[i];
            for (unsigned k = 0; k < s->n_weights; k++)
                s->w[k][e] = s->w[k][i];
            n++;
        } else {
            s->count[e] += s->count[i];
            for (unsigned k = 0; k < s->n_weights; k++)
                s->w[k][e] += s->w[k][i];
        }
    }
    kp_strtab_free(s->keys);
    s->keys = keys;
    s->n_entries = n;
    s->rows_per_second /= factor;
    return KP_OK;
}

/* Grows the heat map's cells (zeroed) to `need`. */
static int grow_heat(kp_report_source *s, uint64_t need)
{
    if (need > s->heat_cap) {
        size_t cap = s->heat_cap ? s->heat_cap : 64 * KP_REPORT_HEAT_ROWS;
        while (cap < need)
            cap *= 2;
        for (unsigned k = 0; k < s->n_weights; k++) {
            uint64_t *p = kp_realloc_array(s->heat[k], cap, sizeof *p);
            if (!p)
                return -1; /* those grown stay grown; heat_cap moves when all are */
            memset(p + s->heat_cap, 0, (cap - s->heat_cap) * sizeof *p);
            s->heat[k] = p;
        }
        s->heat_cap = cap;
    }
    if (need > s->heat_cells)
        s->heat_cells = need;
    return 0;
}

/* A sample from `back` seconds before the source's first second: moves
 * every slice and heat map cell that much later. Nothing changes on error. */
static kp_status shift_back(kp_report_source *s, uint64_t back)
{
    uint64_t by = back * s->rows_per_second, cells = back * KP_REPORT_HEAT_ROWS;
    kp_strtab *keys = kp_strtab_create();
    if (!keys)
        return KP_ERR_NOMEM;
    for (uint64_t i = 0; i < s->n_entries; i++) {
        uint32_t key[2] = {(uint32_t)(s->slice[i] + by), s->node[i]}, e;
        if (kp_strtab_intern(keys, key, sizeof key, &e, NULL) != KP_OK) {
            kp_strtab_free(keys);
            return KP_ERR_NOMEM;
        }
    }
    uint64_t used = s->heat_cells;
    if (grow_heat(s, used + cells)) {
        kp_strtab_free(keys);
        return KP_ERR_NOMEM;
    }
    for (unsigned k = 0; k < s->n_weights; k++) {
        memmove(s->heat[k] + cells, s->heat[k], used * sizeof *s->heat[k]);
        memset(s->heat[k], 0, cells * sizeof *s->heat[k]);
    }
    for (uint64_t i = 0; i < s->n_entries; i++)
        s->slice[i] += (uint32_t)by;
    kp_strtab_free(s->keys);
    s->keys = keys;
    s->origin_s -= back;
    return KP_OK;
}

/* The row, counted from slice 0, of `rel_ns` after the source's origin in
 * a grid of `rows` a second. */
static uint64_t row_of(uint64_t rel_ns, unsigned rows)
{
    return rel_ns / 1000000000u * rows + rel_ns % 1000000000u * rows / 1000000000u;
}

kp_status kp_report_add(kp_report *r, kp_report_source *s, uint64_t time_ns, const char *stack,
                        size_t len, const int64_t *w)
{
    uint32_t leaf;
    kp_status st = leaf_of(r, stack, len, &leaf);
    if (st != KP_OK)
        return st;
    if (s->samples == 0) {
        s->first_ns = s->last_ns = time_ns;
        s->origin_s = time_ns / 1000000000u;
    } else if (time_ns < s->origin_s * 1000000000u) {
        st = shift_back(s, s->origin_s - time_ns / 1000000000u);
        if (st != KP_OK)
            return st;
    }
    if (time_ns < s->first_ns)
        s->first_ns = time_ns;
    if (time_ns > s->last_ns)
        s->last_ns = time_ns;
    uint64_t rel = time_ns - s->origin_s * 1000000000u;
    uint64_t slice = row_of(rel, s->rows_per_second), cell = row_of(rel, KP_REPORT_HEAT_ROWS);
    if (slice > UINT32_MAX - 1)
        return KP_ERR_LIMIT;
    if (grow_heat(s, cell + 1))
        return KP_ERR_NOMEM;
    uint32_t e;
    st = entry_of(s, (uint32_t)slice, leaf, &e);
    if (st != KP_OK)
        return st;
    s->count[e]++;
    s->samples++;
    for (unsigned k = 0; k < s->n_weights; k++)
        if (w[k] > 0) {
            s->w[k][e] += (uint64_t)w[k];
            s->heat[k][cell] += (uint64_t)w[k];
        }
    /* coarsen as far as it takes, before the arrays grow past the budget:
     * slices half as long may merge nothing (one sample per process per
     * slice already) */
    unsigned step = 0;
    while (rows_steps[step] != s->rows_per_second)
        step++;
    const unsigned last = sizeof rows_steps / sizeof *rows_steps - 1;
    for (; s->n_entries >= 2 * s->budget && step < last; step++) {
        st = coarsen(s, rows_steps[step] / rows_steps[step + 1]);
        if (st != KP_OK)
            return st;
    }
    return KP_OK;
}

void kp_report_source_stats_get(const kp_report_source *s, kp_report_source_stats *stats)
{
    stats->samples = s->samples;
    stats->entries = s->n_entries;
    stats->rows_per_second = s->rows_per_second;
    stats->first_ns = s->first_ns;
    stats->last_ns = s->last_ns;
}

/* The report's data: one tree of call paths for every source, the
 * processes, and per source the entry sets that the heat maps and the range
 * flame graphs are drawn from (kp/report.h). Writing the page is
 * report_html.c's, the entry sets report_set.c's. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kp/alloc.h"
#include "kp/cpu_state.h"
#include "kp/strtab.h"
#include "report_internal.h"

kp_report *kp_report_create(void)
{
    kp_report *r = kp_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->frames = kp_strtab_create();
    r->node_keys = kp_strtab_create();
    r->stacks = kp_strtab_create();
    r->process_keys = kp_strtab_create();
    r->budget = KP_REPORT_ENTRY_BUDGET;
    r->heat_budget = KP_REPORT_HEAT_BUDGET;
    if (!r->frames || !r->node_keys || !r->stacks || !r->process_keys) {
        kp_report_free(r);
        return NULL;
    }
    return r;
}

static void source_free(kp_report_source *s)
{
    if (!s)
        return;
    kp_report_set_free(&s->paths);
    kp_report_set_free(&s->processes);
    kp_report_set_free(&s->timeline);
    for (unsigned k = 0; k < KP_WEIGHT_COUNT; k++)
        kp_free(s->heat[k]);
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
    kp_free(r->stack_process);
    kp_free(r->stack_status);
    kp_free(r->stack_hints);
    kp_strtab_free(r->process_keys);
    kp_free(r->proc_recording);
    kp_free(r->proc_pid);
    kp_free(r->proc_node);
    kp_free(r->proc_name);
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
        s->n_weights = kind == KP_REPORT_SAMPLES ? KP_WEIGHT_COUNT : 1;
        s->recording = recording;
        s->kind = kind;
        s->row_cells = 1;
        s->heat_budget = r->heat_budget;
        kp_report_set_init(&s->paths, s->n_weights, r->budget);
        kp_report_set_init(&s->processes, s->n_weights, r->budget);
        kp_report_set_init(&s->timeline, s->n_weights, r->budget / 4 ? r->budget / 4 : 1);
        *slot = s;
    }
    return *slot;
}

void kp_report_set_budget(kp_report *r, uint64_t entries)
{
    r->budget = entries;
}

void kp_report_set_heat_budget(kp_report *r, uint64_t rows)
{
    r->heat_budget = rows;
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

/* A pid frame, "<0.123.0>": it and the name after it leave the path for the
 * process table. */
static int is_pid(const char *f, size_t n)
{
    if (n < 7 || f[0] != '<' || f[n - 1] != '>')
        return 0;
    int dots = 0;
    for (size_t i = 1; i + 1 < n; i++) {
        if (f[i] == '.') {
            if (f[i - 1] == '.' || f[i - 1] == '<')
                return 0;
            dots++;
        } else if (f[i] < '0' || f[i] > '9') {
            return 0;
        }
    }
    return dots == 2 && f[n - 2] != '.';
}

const char *const kp_report_thread_kinds[KP_REPORT_THREAD_KINDS] = {"scheduler", "dirty_cpu",
                                                                    "dirty_io", "other"};

/* A native CPU stack's thread kind frame (the CPU source's status when its
 * stack has no state frame). */
static int is_thread_kind(const char *f, size_t n)
{
    for (int k = 0; k < KP_REPORT_THREAD_KINDS; k++)
        if (strlen(kp_report_thread_kinds[k]) == n && memcmp(kp_report_thread_kinds[k], f, n) == 0)
            return 1;
    return 0;
}

/* The process of (recording, node frame, pid frame), created on first
 * use; a name frame it lacks is set. */
static kp_status process_of(kp_report *r, unsigned recording, uint32_t node, uint32_t pid,
                            uint32_t name, uint32_t *process)
{
    uint32_t key[3] = {recording, node, pid};
    uint32_t next = kp_strtab_count(r->process_keys);
    uint32_t **arrays[4] = {&r->proc_recording, &r->proc_pid, &r->proc_node, &r->proc_name};
    for (int i = 0; i < 4; i++)
        if (grow(arrays[i], &r->proc_cap[i], next, sizeof **arrays[i]))
            return KP_ERR_NOMEM;
    int is_new = 0;
    kp_status st = kp_strtab_intern(r->process_keys, key, sizeof key, process, &is_new);
    if (st != KP_OK)
        return st;
    if (is_new) {
        r->proc_recording[*process] = recording;
        r->proc_node[*process] = node;
        r->proc_pid[*process] = pid;
        r->proc_name[*process] = KP_REPORT_NONE;
    }
    if (r->proc_name[*process] == KP_REPORT_NONE)
        r->proc_name[*process] = name;
    return KP_OK;
}

/* The stack id of folded stack `stack` of a source of
 * `kind` of recording `recording`, interning its frames, path and
 * process. kprof's stacks begin COMM ; [node ;] status ; ... ; pid ; and,
 * in cooperative samples, the process's name (kp/report.h): the pid and
 * the name are the process's, the rest is the path. A native CPU stack's
 * status is its state (kp/cpu_state.h), the frame right under its thread
 * kind, and its thread kind when it has none (recorded before states). */
static kp_status stack_of(kp_report *r, unsigned recording, kp_report_kind kind, const char *stack,
                          size_t len, uint32_t *sid_out)
{
    uint32_t sid;
    /* stacks are keyed by their 128-bit XXH3, not their text: a long
     * recording of many processes has hundreds of thousands of distinct
     * stacks of hundreds of bytes each; two stacks sharing a 128-bit hash
     * would have to collide by chance (about 2^-128 a pair) */
    XXH128_hash_t h = XXH3_128bits(stack, len);
    uint64_t key[3] = {h.low64, h.high64, recording << 8 | (unsigned)kind};
    if (kp_strtab_find(r->stacks, key, sizeof key, kp_strtab_hash(key, sizeof key), sid_out))
        return KP_OK;
    /* a stack is interned only once its leaf is known and has its slot, so
     * that every interned stack has a leaf, whatever fails on the way */
    uint32_t next = kp_strtab_count(r->stacks);
    if (grow(&r->stack_leaf, &r->stack_leaf_cap, next, sizeof *r->stack_leaf) ||
        grow(&r->stack_process, &r->stack_process_cap, next, sizeof *r->stack_process) ||
        grow(&r->stack_status, &r->stack_status_cap, next, sizeof *r->stack_status) ||
        grow(&r->stack_hints, &r->stack_hints_cap, next, sizeof *r->stack_hints))
        return KP_ERR_NOMEM;
    kp_status st;
    uint32_t node = KP_REPORT_NONE, node_frame = KP_REPORT_NONE, pid = KP_REPORT_NONE;
    uint32_t name = KP_REPORT_NONE, status = KP_REPORT_NONE;
    int name_next = 0, kind_at = -1; /* the depth of a thread kind frame */
    unsigned path_depth = 0;         /* the tree's depth of the next path frame */
    size_t i = 0;
    for (unsigned depth = 0; i <= len; depth++) {
        size_t j = i;
        while (j < len && stack[j] != ';')
            j++;
        uint32_t frame;
        st = kp_strtab_intern(r->frames, stack + i, j - i, &frame, NULL);
        if (st != KP_OK)
            return st;
        /* the node's name, when several were recorded (as the page tells it) */
        int is_node = j - i > 1 && memchr(stack + i + 1, '@', j - i - 1);
        if (depth == 1 && is_node)
            node_frame = frame;
        if (name_next) {
            name = frame;
            name_next = 0;
        } else if (pid == KP_REPORT_NONE && depth <= 4 && is_pid(stack + i, j - i)) {
            pid = frame;
            name_next = kind == KP_REPORT_SAMPLES;
        } else if ((st = node_of(r, node, frame, &node)) != KP_OK) {
            return st;
        } else {
            /* the status (or thread kind): under COMM, or under the node */
            if ((path_depth == 1 && !is_node) ||
                (path_depth == 2 && node_frame != KP_REPORT_NONE)) {
                status = frame;
                if (kind == KP_REPORT_CPU && is_thread_kind(stack + i, j - i))
                    kind_at = (int)depth;
            } else if (kind_at >= 0 && (int)depth == kind_at + 1 &&
                       kp_cpu_state_of(stack + i, j - i) >= 0) {
                status = frame; /* the state, right under the thread kind */
            }
            path_depth++;
        }
        i = j + 1;
    }
    uint32_t proc;
    st = process_of(r, recording, pid == KP_REPORT_NONE ? KP_REPORT_NONE : node_frame, pid, name,
                    &proc);
    if (st == KP_OK)
        st = kp_strtab_intern(r->stacks, key, sizeof key, &sid, NULL);
    if (st != KP_OK)
        return st;
    r->stack_leaf[sid] = node;
    r->stack_process[sid] = proc;
    r->stack_status[sid] = status;
    memset(r->stack_hints[sid], 0, sizeof r->stack_hints[sid]);
    *sid_out = sid;
    return KP_OK;
}

/* Grows the heat map's rows (zeroed) to `need`; no further than its
 * budget and a row (or `need`, samples coming a little out of order) while
 * its rows can grow: past that they grow instead. */
static int grow_heat(kp_report_source *s, uint64_t need)
{
    if (need > s->heat_cap) {
        size_t cap = s->heat_cap ? s->heat_cap : 64 * KP_REPORT_HEAT_ROWS;
        while (cap < need)
            cap *= 2;
        if (s->row_cells < KP_REPORT_HEAT_ROWS && cap > s->heat_budget + 1)
            cap = need > s->heat_budget + 1 ? need : s->heat_budget + 1;
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
 * the origin that much earlier, rounded to whole slices of the coarser
 * set, and every slice and heat map cell later. Nothing changes on error
 * but the heat map's room. */
static kp_status shift_back(kp_report_source *s, uint64_t back)
{
    kp_report_set *sets[KP_REPORT_SETS] = {&s->paths, &s->processes, &s->timeline};
    unsigned slice = 1;
    for (int k = 0; k < KP_REPORT_SETS; k++)
        slice = sets[k]->slice_cells > slice ? sets[k]->slice_cells : slice;
    unsigned slice_s = slice > KP_REPORT_HEAT_ROWS ? slice / KP_REPORT_HEAT_ROWS : 1;
    back = (back + slice_s - 1) / slice_s * slice_s;
    if (back > s->origin_s)
        return KP_ERR_LIMIT;
    uint64_t cells = back * KP_REPORT_HEAT_ROWS, used = s->heat_cells;
    uint64_t rows = cells / s->row_cells;
    if (grow_heat(s, used + rows))
        return KP_ERR_NOMEM;
    kp_report_index index[KP_REPORT_SETS] = {{NULL, 0}};
    kp_status st = KP_OK;
    for (int k = 0; k < KP_REPORT_SETS && st == KP_OK; k++)
        st = kp_report_set_shift_index(sets[k], cells, &index[k]);
    if (st != KP_OK) {
        for (int k = 0; k < KP_REPORT_SETS; k++)
            kp_free(index[k].slots);
        s->heat_cells = used;
        return st;
    }
    for (int k = 0; k < KP_REPORT_SETS; k++)
        kp_report_set_shift(sets[k], cells, index[k]);
    for (unsigned k = 0; k < s->n_weights; k++) {
        memmove(s->heat[k] + rows, s->heat[k], used * sizeof *s->heat[k]);
        memset(s->heat[k], 0, rows * sizeof *s->heat[k]);
    }
    s->origin_s -= back;
    return KP_OK;
}

/* Rows of `cells` cells (a multiple of the rows', dividing a second): every
 * set's slices made whole rows first (those grown stay grown on error),
 * then the rows summed in place. The room stays: the map grows into it
 * again, `cells / row_cells` times slower. */
static kp_status coarser_rows(kp_report_source *s, unsigned cells)
{
    unsigned f = cells / s->row_cells;
    kp_report_set *sets[KP_REPORT_SETS] = {&s->paths, &s->processes, &s->timeline};
    for (int k = 0; k < KP_REPORT_SETS; k++) {
        kp_status st = kp_report_set_fit(sets[k], cells);
        if (st != KP_OK)
            return st;
    }
    uint64_t rows = (s->heat_cells + f - 1) / f;
    for (unsigned k = 0; k < s->n_weights; k++) {
        uint64_t *h = s->heat[k];
        for (uint64_t i = 0; i < rows; i++) {
            uint64_t v = 0;
            for (uint64_t j = i * f; j < (i + 1) * f && j < s->heat_cells; j++)
                v += h[j];
            h[i] = v;
        }
        memset(h + rows, 0, (s->heat_cells - rows) * sizeof *h);
    }
    s->heat_cells = rows;
    s->row_cells = cells;
    return KP_OK;
}

/* Rows a heat map can have, in cells (20 ms): those that divide a second. */
static const unsigned row_steps[] = {1, 2, 5, 10, 25, KP_REPORT_HEAT_ROWS};
#define N_ROW_STEPS (sizeof row_steps / sizeof *row_steps)

/* The rows past the heat map's budget: 100 ms from 20 ms, 200 ms from 40,
 * then a second. */
static unsigned longer_rows(unsigned row_cells)
{
    return row_cells < 5 ? (5 % row_cells ? 10 : 5) : KP_REPORT_HEAT_ROWS;
}

/* Of the heat map's rows grouped `f` by `f` from row 0, those between the
 * first and the last sample's that fall in a second holding samples:
 * `*rows` of them, `*empty` without a sample. */
static void empty_rows(const kp_report_source *s, unsigned f, uint64_t *rows, uint64_t *empty)
{
    const uint64_t *h = s->heat[KP_WEIGHT_SAMPLES];
    uint64_t per_s = KP_REPORT_HEAT_ROWS / s->row_cells, first = 0, last = s->heat_cells;
    while (first < s->heat_cells && !h[first])
        first++;
    while (last > first && !h[last - 1])
        last--;
    *rows = *empty = 0;
    for (uint64_t sec = first / per_s; sec * per_s < last; sec++) {
        uint64_t a = sec * per_s, b = a + per_s < s->heat_cells ? a + per_s : s->heat_cells,
                 sum = 0;
        for (uint64_t i = a; i < b; i++)
            sum += h[i];
        if (!sum)
            continue; /* a second without samples: a pause, not the rows' */
        for (uint64_t g = a; g < b; g += f) {
            if (g + f <= first || g >= last)
                continue;
            uint64_t v = 0;
            for (uint64_t i = g; i < g + f && i < b; i++)
                v += h[i];
            *rows += 1;
            *empty += v == 0;
        }
    }
}

kp_status kp_report_fit_rows(kp_report_source *s)
{
    /* The cooperative samples come in ticks, every process of a tick at the
     * same time, at --rate ticks a second (10 by default): at 20 ms rows a
     * 10 Hz recording shows four empty rows of every five, stripes. The
     * rate is taken from the data, not from the recording: the segments'
     * headers do not hold --rate (older recordings neither), the agent
     * jitters each tick by a tenth of the interval and skips the ticks it
     * is late for, and several nodes tick apart, so what was sampled is
     * what the times say. The rows are the finest, of those dividing a
     * second, of which at most one in a hundred is empty (in the seconds
     * that hold samples): the interval or longer (a tick jittered across a
     * row's edge leaves one empty, a row twice as long is never), with a
     * rare skipped tick left showing. Seconds without a sample (a pause)
     * count for no rows. Native CPU samples, at 997 Hz a thread, keep
     * 20 ms. */
    if (s->kind != KP_REPORT_SAMPLES || s->samples == 0)
        return KP_OK;
    for (unsigned k = 0; k < N_ROW_STEPS; k++) {
        unsigned cells = row_steps[k];
        if (cells < s->row_cells || cells % s->row_cells)
            continue;
        uint64_t rows, empty;
        empty_rows(s, cells / s->row_cells, &rows, &empty);
        if (empty * 100 <= rows)
            return cells == s->row_cells ? KP_OK : coarser_rows(s, cells);
    }
    return KP_OK;
}

/* The cell (20 ms), counted from cell 0, of `rel_ns` after the source's
 * origin. */
static uint64_t cell_of(uint64_t rel_ns)
{
    return rel_ns / 1000000000u * KP_REPORT_HEAT_ROWS +
           rel_ns % 1000000000u * KP_REPORT_HEAT_ROWS / 1000000000u;
}

kp_status kp_report_add(kp_report *r, kp_report_source *s, uint64_t time_ns, const char *stack,
                        size_t len, const int64_t *w)
{
    uint32_t sid;
    kp_status st = stack_of(r, s->recording, s->kind, stack, len, &sid);
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
    uint64_t cell = cell_of(time_ns - s->origin_s * 1000000000u), row = cell / s->row_cells;
    if (grow_heat(s, row + 1))
        return KP_ERR_NOMEM;
    /* the sets take the sample together or not at all (report_set.c) */
    kp_report_set *sets[KP_REPORT_SETS] = {&s->paths, &s->processes, &s->timeline};
    const uint32_t keys[KP_REPORT_SETS][2] = {{r->stack_leaf[sid], 0},
                                              {r->stack_process[sid], r->stack_leaf[sid]},
                                              {r->stack_process[sid], r->stack_status[sid]}};
    uint32_t e[KP_REPORT_SETS];
    for (int k = 0; k < KP_REPORT_SETS && st == KP_OK; k++)
        st = kp_report_set_entry(sets[k], cell, keys[k][0], keys[k][1], &r->stack_hints[sid][k],
                                 &e[k]);
    if (st != KP_OK)
        return st; /* an empty entry may stay: it weighs nothing */
    for (int k = 0; k < KP_REPORT_SETS; k++)
        kp_report_set_count(sets[k], e[k], w);
    if (time_ns < s->first_ns)
        s->first_ns = time_ns;
    if (time_ns > s->last_ns)
        s->last_ns = time_ns;
    s->samples++;
    for (unsigned k = 0; k < s->n_weights; k++)
        if (w[k] > 0)
            s->heat[k][row] += (uint64_t)w[k];
    /* the sample is in: a set that cannot grow its slices stays whole, and
     * so does a heat map that cannot grow its rows */
    for (int k = 0; k < KP_REPORT_SETS; k++) {
        kp_status fit = kp_report_set_fit(sets[k], s->row_cells);
        st = st != KP_OK ? st : fit;
    }
    while (st == KP_OK && s->heat_cells > s->heat_budget && s->row_cells < KP_REPORT_HEAT_ROWS)
        st = coarser_rows(s, longer_rows(s->row_cells));
    return st;
}

void kp_report_source_stats_get(const kp_report_source *s, kp_report_source_stats *stats)
{
    stats->samples = s->samples;
    stats->entries = s->paths.n;
    stats->process_entries = s->processes.n;
    stats->slice_ms = s->paths.slice_cells * (1000u / KP_REPORT_HEAT_ROWS);
    stats->process_slice_ms = s->processes.slice_cells * (1000u / KP_REPORT_HEAT_ROWS);
    stats->timeline_entries = s->timeline.n;
    stats->timeline_slice_ms = s->timeline.slice_cells * (1000u / KP_REPORT_HEAT_ROWS);
    stats->heat_rows = KP_REPORT_HEAT_ROWS / s->row_cells;
    stats->first_ns = s->first_ns;
    stats->last_ns = s->last_ns;
}

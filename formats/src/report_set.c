/* A report's entry sets: weights summed per (slice, a, b), the slices
 * growing as the set outgrows its budget (report_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"
#include "kp/strtab.h"
#include "report_internal.h"

/* Slice lengths in heat map cells (20 ms), finest first: 20 ms, 40 ms,
 * 100 ms, 200 ms, 500 ms, 1 s, 5 s, 10 s, 30 s, 1 min, 5 min, 1 h. A slice
 * grows to the next that it divides, and that the heat map's rows divide,
 * so that a slice never straddles two coarser ones nor a row: 20 ms, 40 ms,
 * 200 ms, 1 s, 5 s... with rows of 20 ms; 100 ms, 200 ms, 1 s... with rows
 * of 100 ms. */
static const unsigned steps[] = {1, 2, 5, 10, 25, 50, 250, 500, 1500, 3000, 15000, 180000};
#define N_STEPS (sizeof steps / sizeof *steps)

void kp_report_set_init(kp_report_set *s, unsigned n_weights, uint64_t budget)
{
    memset(s, 0, sizeof *s);
    s->slice_cells = steps[0];
    s->generation = 1;
    s->budget = budget;
    s->n_weights = n_weights;
}

void kp_report_set_free(kp_report_set *s)
{
    kp_free(s->index.slots);
    kp_free(s->slice);
    kp_free(s->a);
    kp_free(s->b);
    kp_free(s->count);
    for (unsigned k = 0; k < KP_WEIGHT_COUNT; k++)
        kp_free(s->w[k]);
    memset(s, 0, sizeof *s);
}

static uint64_t hash_of(uint32_t slice, uint32_t a, uint32_t b)
{
    const uint32_t key[3] = {slice, a, b};
    return kp_strtab_hash(key, sizeof key);
}

/* An empty index of `slots` (a power of two), or 0 slots when out of
 * memory. */
static kp_report_index index_create(size_t slots)
{
    uint32_t *p = kp_calloc(slots, sizeof *p);
    return (kp_report_index){p, p ? slots - 1 : 0};
}

/* Puts every entry of `s` in the empty index `x`, its slice `by` later:
 * the keys are distinct, so each takes the first free slot of its key. */
static void index_fill(const kp_report_set *s, kp_report_index *x, uint64_t by)
{
    for (uint64_t e = 0; e < s->n; e++) {
        size_t i = hash_of((uint32_t)(s->slice[e] + by), s->a[e], s->b[e]) & x->mask;
        while (x->slots[i])
            i = (i + 1) & x->mask;
        x->slots[i] = (uint32_t)e + 1;
    }
}

/* The slot of `x` that holds key (slice, a, b), or the free slot where it
 * goes; the keys are the set's arrays at the entries the slots name. */
static uint32_t *slot_of(const kp_report_set *s, const kp_report_index *x, uint32_t slice,
                         uint32_t a, uint32_t b)
{
    for (size_t i = hash_of(slice, a, b) & x->mask;; i = (i + 1) & x->mask) {
        uint32_t e = x->slots[i];
        if (!e || (s->slice[e - 1] == slice && s->a[e - 1] == a && s->b[e - 1] == b))
            return &x->slots[i];
    }
}

/* Grows every array to hold index `need`, and the index to twice that. An
 * array grown before a failure stays grown; `cap` and the index move only
 * when all are. */
static int grow(kp_report_set *s, uint64_t need)
{
    if (need < s->cap)
        return 0;
    size_t n = s->cap ? s->cap * 2 : 1024;
    void **arrays[4 + KP_WEIGHT_COUNT] = {(void **)&s->slice, (void **)&s->a, (void **)&s->b,
                                          (void **)&s->count};
    size_t sizes[4 + KP_WEIGHT_COUNT] = {sizeof *s->slice, sizeof *s->a, sizeof *s->b,
                                         sizeof *s->count};
    for (unsigned k = 0; k < s->n_weights; k++) {
        arrays[4 + k] = (void **)&s->w[k];
        sizes[4 + k] = sizeof *s->w[k];
    }
    for (unsigned i = 0; i < 4 + s->n_weights; i++) {
        void *p = kp_realloc_array(*arrays[i], n, sizes[i]);
        if (!p)
            return -1;
        *arrays[i] = p;
    }
    kp_report_index x = index_create(2 * n);
    if (!x.slots)
        return -1;
    index_fill(s, &x, 0);
    kp_free(s->index.slots);
    s->index = x;
    s->cap = n;
    return 0;
}

/* Re-keys every entry with its slice divided by `div`, merging those that
 * meet. Only the new index is allocated, so that running out of memory
 * changes nothing; then the entries merge in place, numbered in the order
 * their new keys first appear: an entry's new index is never above its old
 * one, and the entries below the next new one hold new keys already, the
 * ones the index looks at. */
static kp_status rekey(kp_report_set *s, unsigned div)
{
    kp_report_index x = index_create(s->index.mask + 1);
    if (!x.slots)
        return KP_ERR_NOMEM;
    uint64_t n = 0;
    for (uint64_t i = 0; i < s->n; i++) {
        uint32_t slice = s->slice[i] / div, a = s->a[i], b = s->b[i];
        uint32_t *slot = slot_of(s, &x, slice, a, b);
        if (!*slot) { /* its first entry */
            uint64_t e = n++;
            *slot = (uint32_t)e + 1;
            s->slice[e] = slice;
            s->a[e] = a;
            s->b[e] = b;
            s->count[e] = s->count[i];
            for (unsigned k = 0; k < s->n_weights; k++)
                s->w[k][e] = s->w[k][i];
        } else {
            uint32_t e = *slot - 1;
            s->count[e] += s->count[i];
            for (unsigned k = 0; k < s->n_weights; k++)
                s->w[k][e] += s->w[k][i];
        }
    }
    kp_free(s->index.slots);
    s->index = x;
    s->n = n;
    s->generation++;
    return KP_OK;
}

kp_status kp_report_set_shift_index(const kp_report_set *s, uint64_t cells, kp_report_index *out)
{
    uint64_t by = cells / s->slice_cells;
    *out = (kp_report_index){NULL, 0};
    if (!s->index.slots)
        return KP_OK; /* no entry yet */
    for (uint64_t e = 0; e < s->n; e++)
        if (s->slice[e] + by > UINT32_MAX - 1)
            return KP_ERR_LIMIT;
    kp_report_index x = index_create(s->index.mask + 1);
    if (!x.slots)
        return KP_ERR_NOMEM;
    index_fill(s, &x, by); /* no two slices meet: each entry keeps its index */
    *out = x;
    return KP_OK;
}

void kp_report_set_shift(kp_report_set *s, uint64_t cells, kp_report_index index)
{
    uint64_t by = cells / s->slice_cells;
    for (uint64_t i = 0; i < s->n; i++)
        s->slice[i] += (uint32_t)by;
    if (index.slots) {
        kp_free(s->index.slots);
        s->index = index;
    }
    s->generation++;
}

kp_status kp_report_set_entry(kp_report_set *s, uint64_t cell, uint32_t a, uint32_t b,
                              kp_report_hint *hint, uint32_t *e)
{
    uint64_t slice = cell / s->slice_cells;
    if (slice > UINT32_MAX - 1)
        return KP_ERR_LIMIT;
    if (hint && hint->generation == s->generation && hint->slice == slice) {
        *e = hint->entry;
        return KP_OK;
    }
    if (s->n >= UINT32_MAX - 1)
        return KP_ERR_LIMIT;
    if (grow(s, s->n))
        return KP_ERR_NOMEM;
    uint32_t *slot = slot_of(s, &s->index, (uint32_t)slice, a, b);
    if (!*slot) {
        *e = (uint32_t)s->n;
        *slot = *e + 1;
        s->slice[*e] = (uint32_t)slice;
        s->a[*e] = a;
        s->b[*e] = b;
        s->count[*e] = 0;
        for (unsigned k = 0; k < s->n_weights; k++)
            s->w[k][*e] = 0;
        s->n = *e + 1;
    } else
        *e = *slot - 1;
    if (hint)
        *hint = (kp_report_hint){s->generation, (uint32_t)slice, *e};
    return KP_OK;
}

void kp_report_set_count(kp_report_set *s, uint32_t e, const int64_t *w)
{
    s->count[e]++;
    for (unsigned k = 0; k < s->n_weights; k++)
        if (w[k] > 0)
            s->w[k][e] += (uint64_t)w[k];
}

kp_status kp_report_set_fit(kp_report_set *s, unsigned row_cells)
{
    /* as far as it takes: slices twice as long may merge nothing (one
     * sample per process per slice already) */
    while (s->n >= 2 * s->budget || s->slice_cells % row_cells != 0) {
        unsigned next = 0;
        for (unsigned k = 0; k < N_STEPS && !next; k++)
            if (steps[k] > s->slice_cells && steps[k] % s->slice_cells == 0 &&
                steps[k] % row_cells == 0)
                next = steps[k];
        if (!next)
            return KP_OK; /* an hour */
        kp_status st = rekey(s, next / s->slice_cells);
        if (st != KP_OK)
            return st;
        s->slice_cells = next;
    }
    return KP_OK;
}

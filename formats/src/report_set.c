/* A report's entry sets: weights summed per (slice, a, b), the slices
 * growing as the set outgrows its budget (report_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"
#include "report_internal.h"

/* Slice lengths in heat map cells (20 ms), finest first: 20 ms, 40 ms,
 * 200 ms, 1 s, 5 s, 10 s, 30 s, 1 min, 5 min, 1 h. Each divides the next,
 * so that a slice never straddles two coarser ones. */
static const unsigned steps[] = {1, 2, 10, 50, 250, 500, 1500, 3000, 15000, 180000};
#define N_STEPS (sizeof steps / sizeof *steps)

kp_status kp_report_set_init(kp_report_set *s, unsigned n_weights, uint64_t budget)
{
    memset(s, 0, sizeof *s);
    s->slice_cells = steps[0];
    s->generation = 1;
    s->budget = budget;
    s->n_weights = n_weights;
    s->keys = kp_strtab_create();
    return s->keys ? KP_OK : KP_ERR_NOMEM;
}

void kp_report_set_free(kp_report_set *s)
{
    kp_strtab_free(s->keys);
    kp_free(s->slice);
    kp_free(s->a);
    kp_free(s->b);
    kp_free(s->count);
    for (unsigned k = 0; k < KP_WEIGHT_COUNT; k++)
        kp_free(s->w[k]);
    memset(s, 0, sizeof *s);
}

/* Grows every array to hold index `need`. An array grown before a failure
 * stays grown; `cap` moves only when all are. */
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
    s->cap = n;
    return 0;
}

/* Re-keys every entry with its slice divided by `div`, merging those that
 * meet. The new keys are all
 * interned first, so that running out of memory changes nothing; then the
 * entries merge in place: keys are numbered in the order they first
 * appear, so an entry's new index is never above its old one. */
static kp_status rekey(kp_report_set *s, unsigned div)
{
    kp_strtab *keys = kp_strtab_create();
    if (!keys)
        return KP_ERR_NOMEM;
    for (uint64_t i = 0; i < s->n; i++) {
        uint32_t key[3] = {s->slice[i] / div, s->a[i], s->b[i]}, e;
        if (kp_strtab_intern(keys, key, sizeof key, &e, NULL) != KP_OK) {
            kp_strtab_free(keys);
            return KP_ERR_NOMEM;
        }
    }
    uint64_t n = 0;
    for (uint64_t i = 0; i < s->n; i++) {
        uint32_t key[3] = {s->slice[i] / div, s->a[i], s->b[i]}, e;
        kp_strtab_find(keys, key, sizeof key, kp_strtab_hash(key, sizeof key), &e);
        if (e == n) { /* its first entry */
            s->slice[e] = key[0];
            s->a[e] = key[1];
            s->b[e] = key[2];
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
    s->n = n;
    s->generation++;
    return KP_OK;
}

kp_status kp_report_set_shift_keys(const kp_report_set *s, uint64_t cells, kp_strtab **out)
{
    uint64_t by = cells / s->slice_cells;
    kp_strtab *keys = kp_strtab_create();
    if (!keys)
        return KP_ERR_NOMEM;
    /* no two slices meet: each entry keeps its index */
    for (uint64_t i = 0; i < s->n; i++) {
        uint32_t key[3] = {(uint32_t)(s->slice[i] + by), s->a[i], s->b[i]}, e;
        kp_status st = s->slice[i] + by > UINT32_MAX - 1
                           ? KP_ERR_LIMIT
                           : kp_strtab_intern(keys, key, sizeof key, &e, NULL);
        if (st != KP_OK) {
            kp_strtab_free(keys);
            return st;
        }
    }
    *out = keys;
    return KP_OK;
}

void kp_report_set_shift(kp_report_set *s, uint64_t cells, kp_strtab *keys)
{
    uint64_t by = cells / s->slice_cells;
    for (uint64_t i = 0; i < s->n; i++)
        s->slice[i] += (uint32_t)by;
    kp_strtab_free(s->keys);
    s->keys = keys;
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
    uint32_t key[3] = {(uint32_t)slice, a, b};
    int is_new = 0;
    if (grow(s, s->n))
        return KP_ERR_NOMEM;
    kp_status st = kp_strtab_intern(s->keys, key, sizeof key, e, &is_new);
    if (st == KP_OK && is_new) {
        s->slice[*e] = key[0];
        s->a[*e] = a;
        s->b[*e] = b;
        s->count[*e] = 0;
        for (unsigned k = 0; k < s->n_weights; k++)
            s->w[k][*e] = 0;
        s->n = *e + 1;
    }
    if (st == KP_OK && hint)
        *hint = (kp_report_hint){s->generation, (uint32_t)slice, *e};
    return st;
}

void kp_report_set_count(kp_report_set *s, uint32_t e, const int64_t *w)
{
    s->count[e]++;
    for (unsigned k = 0; k < s->n_weights; k++)
        if (w[k] > 0)
            s->w[k][e] += (uint64_t)w[k];
}

kp_status kp_report_set_fit(kp_report_set *s)
{
    /* as far as it takes: slices twice as long may merge nothing (one
     * sample per process per slice already) */
    unsigned step = 0;
    while (steps[step] != s->slice_cells)
        step++;
    for (; s->n >= 2 * s->budget && step + 1 < N_STEPS; step++) {
        kp_status st = rekey(s, steps[step + 1] / steps[step]);
        if (st != KP_OK)
            return st;
        s->slice_cells = steps[step + 1];
    }
    return KP_OK;
}

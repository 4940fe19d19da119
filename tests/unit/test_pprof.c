/* kp_pprof: the profile is read back field by field with a protocol buffer
 * reader written for this test (the wire format: varints, length-delimited
 * fields), and checked against profile.proto's field numbers: sample types,
 * samples (locations leaf first, values), one location and one function per
 * frame name, the string table with "" first. `go tool pprof` reads what
 * kprof convert writes (tests/cli/pprof_go). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kp/pprof.h"

typedef struct {
    const unsigned char *p, *end;
} reader;

static uint64_t varint(reader *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        assert_true(r->p < r->end);
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    fail_msg("varint longer than 10 bytes");
    return 0;
}

/* The next field: its number, and its value (varint) or bytes (length-
 * delimited, as a sub-reader). Returns 0 at the end. */
static int next(reader *r, unsigned *field, uint64_t *value, reader *bytes)
{
    if (r->p == r->end)
        return 0;
    uint64_t key = varint(r);
    *field = (unsigned)(key >> 3);
    if ((key & 7) == 0) {
        *value = varint(r);
    } else {
        assert_int_equal(key & 7, 2);
        uint64_t len = varint(r);
        assert_true(len <= (uint64_t)(r->end - r->p));
        bytes->p = r->p;
        bytes->end = r->p + len;
        r->p += len;
    }
    return 1;
}

typedef struct {
    char strings[32][32];
    int n_strings;
    uint64_t type[2], unit[2];
    int n_types;
    uint64_t loc[8][8]; /* per sample, leaf first */
    int n_loc[8];
    int64_t value[8][2];
    int n_samples;
    uint64_t fn_id[16], fn_name[16], loc_id[16], loc_fn[16];
    int n_fns, n_locs;
    uint64_t period_type;
    uint64_t default_type;
} decoded;

static void decode(const kp_buf *b, decoded *d)
{
    memset(d, 0, sizeof *d);
    reader r = {(const unsigned char *)b->data, (const unsigned char *)b->data + b->len}, m, s;
    unsigned f, g;
    uint64_t v, w;
    while (next(&r, &f, &v, &m)) {
        switch (f) {
        case 1: /* ValueType */
            while (next(&m, &g, &w, &s))
                (g == 1 ? d->type : d->unit)[d->n_types] = w;
            d->n_types++;
            break;
        case 2: /* Sample: packed location_id (1) and value (2) */
            while (next(&m, &g, &w, &s)) {
                while (s.p < s.end) {
                    uint64_t x = varint(&s);
                    if (g == 1)
                        d->loc[d->n_samples][d->n_loc[d->n_samples]++] = x;
                    else
                        d->value[d->n_samples][0] = (int64_t)x;
                }
            }
            d->n_samples++;
            break;
        case 4: /* Location: id (1), Line (4) with function_id (1) */
            while (next(&m, &g, &w, &s)) {
                if (g == 1)
                    d->loc_id[d->n_locs] = w;
                else if (g == 4) {
                    reader line = s, unused;
                    unsigned h;
                    uint64_t fid;
                    assert_true(next(&line, &h, &fid, &unused) && h == 1);
                    d->loc_fn[d->n_locs] = fid;
                }
            }
            d->n_locs++;
            break;
        case 5: /* Function: id (1), name (2), system_name (3) */
            while (next(&m, &g, &w, &s)) {
                if (g == 1)
                    d->fn_id[d->n_fns] = w;
                else if (g == 2)
                    d->fn_name[d->n_fns] = w;
            }
            d->n_fns++;
            break;
        case 6:
            assert_true(m.end - m.p < 32);
            memcpy(d->strings[d->n_strings], m.p, (size_t)(m.end - m.p));
            d->n_strings++;
            break;
        case 11:
            while (next(&m, &g, &w, &s))
                if (g == 1)
                    d->period_type = w;
            break;
        case 14: /* default_sample_type */ d->default_type = v; break;
        case 9: /* time_nanos */
        case 10: /* duration_nanos */ break;
        default: fail_msg("unexpected field %u", f);
        }
    }
}

/* The name of sample k's frame i (leaf first), through location and function. */
static const char *frame(const decoded *d, int k, int i)
{
    uint64_t loc = d->loc[k][i];
    for (int l = 0; l < d->n_locs; l++)
        if (d->loc_id[l] == loc)
            for (int fn = 0; fn < d->n_fns; fn++)
                if (d->fn_id[fn] == d->loc_fn[l])
                    return d->strings[d->fn_name[fn]];
    fail_msg("location %llu has no function", (unsigned long long)loc);
    return NULL;
}

static void encodes_stacks_leaf_first(void **state)
{
    (void)state;
    kp_pprof_type t = {"samples", "count"};
    kp_pprof *p = kp_pprof_create(&t, 1);
    assert_non_null(p);
    int64_t five = 5, three = 3;
    assert_int_equal(kp_pprof_add(p, "main;a;b", 8, &five), KP_OK);
    assert_int_equal(kp_pprof_add(p, "main;a;main", 11, &three), KP_OK); /* recursion */
    assert_int_equal(kp_pprof_samples(p), 2);
    kp_buf out = KP_BUF_INIT;
    assert_int_equal(kp_pprof_encode(p, 0, 0, &out), KP_OK);
    decoded d;
    decode(&out, &d);
    assert_string_equal(d.strings[0], "");
    assert_int_equal(d.n_types, 1);
    assert_string_equal(d.strings[d.type[0]], "samples");
    assert_string_equal(d.strings[d.unit[0]], "count");
    assert_int_equal(d.period_type, d.type[0]);
    assert_int_equal(d.default_type, d.type[0]);
    assert_int_equal(d.n_samples, 2);
    assert_int_equal(d.n_loc[0], 3);
    assert_string_equal(frame(&d, 0, 0), "b");
    assert_string_equal(frame(&d, 0, 1), "a");
    assert_string_equal(frame(&d, 0, 2), "main");
    assert_int_equal(d.value[0][0], 5);
    assert_string_equal(frame(&d, 1, 0), "main");
    assert_string_equal(frame(&d, 1, 2), "main");
    assert_int_equal(d.value[1][0], 3);
    /* one function and one location per frame name, ids never 0 */
    assert_int_equal(d.n_fns, 3);
    assert_int_equal(d.n_locs, 3);
    for (int k = 0; k < d.n_fns; k++)
        assert_true(d.fn_id[k] != 0 && d.loc_id[k] != 0);
    kp_buf_free(&out);
    kp_pprof_free(p);
}

static void refuses_empty_frames_and_bad_types(void **state)
{
    (void)state;
    kp_pprof_type t = {"cpu", "nanoseconds"};
    assert_null(kp_pprof_create(&t, 0));
    kp_pprof *p = kp_pprof_create(&t, 1);
    int64_t one = 1;
    assert_int_equal(kp_pprof_add(p, "", 0, &one), KP_ERR_FORMAT);
    assert_int_equal(kp_pprof_add(p, "a;;b", 4, &one), KP_ERR_FORMAT);
    assert_int_equal(kp_pprof_add(p, ";a", 2, &one), KP_ERR_FORMAT);
    assert_int_equal(kp_pprof_add(p, "a;", 2, &one), KP_ERR_FORMAT);
    assert_int_equal(kp_pprof_samples(p), 0);
    /* a large value survives as the varint of its two's complement */
    int64_t big = INT64_MAX;
    assert_int_equal(kp_pprof_add(p, "x", 1, &big), KP_OK);
    kp_buf out = KP_BUF_INIT;
    assert_int_equal(kp_pprof_encode(p, 1700000000000000000, 5000000000, &out), KP_OK);
    reader r = {(const unsigned char *)out.data, (const unsigned char *)out.data + out.len}, m;
    unsigned f;
    uint64_t v;
    int64_t time_ns = 0, duration_ns = 0;
    while (next(&r, &f, &v, &m)) {
        if (f == 9)
            time_ns = (int64_t)v;
        if (f == 10)
            duration_ns = (int64_t)v;
    }
    assert_true(time_ns == 1700000000000000000);
    assert_true(duration_ns == 5000000000);
    decoded d;
    decode(&out, &d);
    assert_true(d.value[0][0] == INT64_MAX);
    kp_buf_free(&out);
    kp_pprof_free(p);
}

/* pprof drops <...> from names (C++ templates): a process's frame shows
 * with [...] as its name, and keeps its form as the system name. */
static void process_frames_are_named_with_brackets(void **state)
{
    (void)state;
    kp_pprof_type t = {"samples", "count"};
    kp_pprof *p = kp_pprof_create(&t, 1);
    int64_t one = 1;
    assert_int_equal(kp_pprof_add(p, "<0.85.0>;gen_server:loop/7", 26, &one), KP_OK);
    kp_buf out = KP_BUF_INIT;
    assert_int_equal(kp_pprof_encode(p, 0, 0, &out), KP_OK);
    decoded d;
    decode(&out, &d);
    assert_string_equal(frame(&d, 0, 0), "gen_server:loop/7");
    assert_string_equal(frame(&d, 0, 1), "[0.85.0]");
    kp_buf_free(&out);
    kp_pprof_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encodes_stacks_leaf_first),
        cmocka_unit_test(refuses_empty_frames_and_bad_types),
        cmocka_unit_test(process_frames_are_named_with_brackets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

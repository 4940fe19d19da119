/* kp/otlp.h: the request read back field by field, by the field numbers
 * and wire types of opentelemetry-proto 1.10+ (profiles/v1development),
 * with a decoder written for this test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kp/otlp.h"

/* ------------------------------------------------------------------ */
/* a protobuf reader: a message is a span of bytes */

typedef struct {
    const unsigned char *p;
    size_t n;
} span;

static uint64_t read_varint(span *s)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        assert_true(s->n > 0 && shift < 64);
        unsigned char b = *s->p++;
        s->n--;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
}

/* The next field of `s`: its number and wire type; a varint's or
 * fixed64's value in `*v`, a length-delimited field's bytes in `*bytes`.
 * 0 at the end. */
static int next_field(span *s, unsigned *field, unsigned *wire, uint64_t *v, span *bytes)
{
    if (!s->n)
        return 0;
    uint64_t tag = read_varint(s);
    *field = (unsigned)(tag >> 3);
    *wire = (unsigned)(tag & 7);
    assert_true(*field > 0);
    if (*wire == 0) {
        *v = read_varint(s);
    } else if (*wire == 1) {
        assert_true(s->n >= 8);
        *v = 0;
        for (int k = 7; k >= 0; k--)
            *v = *v << 8 | s->p[k];
        s->p += 8;
        s->n -= 8;
    } else {
        assert_int_equal(*wire, 2); /* nothing else is ours */
        uint64_t len = read_varint(s);
        assert_true(len <= s->n);
        *bytes = (span){s->p, (size_t)len};
        s->p += len;
        s->n -= len;
    }
    return 1;
}

/* How many times field `f` occurs in `m`, each of wire type `wire`. */
static size_t count(span m, unsigned f, unsigned wire)
{
    unsigned field, w;
    uint64_t v;
    span b;
    size_t n = 0;
    while (next_field(&m, &field, &w, &v, &b))
        if (field == f) {
            assert_int_equal(w, wire);
            n++;
        }
    return n;
}

/* The k-th occurrence of length-delimited field `f` of `m`. */
static span nth(span m, unsigned f, size_t k)
{
    unsigned field, w;
    uint64_t v;
    span b;
    while (next_field(&m, &field, &w, &v, &b))
        if (field == f && k-- == 0) {
            assert_int_equal(w, 2);
            return b;
        }
    fail_msg("field %u has no occurrence %zu", f, k);
    return (span){NULL, 0};
}

/* Scalar field `f` of `m` (the last occurrence, as protobuf reads it); 0
 * when missing. */
static uint64_t scalar(span m, unsigned f, unsigned wire)
{
    unsigned field, w;
    uint64_t v, got = 0;
    span b;
    while (next_field(&m, &field, &w, &v, &b))
        if (field == f) {
            assert_int_equal(w, wire);
            got = v;
        }
    return got;
}

/* A packed repeated varint field, into `out` (at most `cap`); how many. */
static size_t packed(span m, unsigned f, uint64_t *out, size_t cap)
{
    if (!count(m, f, 2))
        return 0;
    span p = nth(m, f, 0);
    size_t n = 0;
    while (p.n) {
        assert_true(n < cap);
        out[n++] = read_varint(&p);
    }
    return n;
}

static int span_is(span s, const char *text)
{
    return s.n == strlen(text) && memcmp(s.p, text, s.n) == 0;
}

/* ------------------------------------------------------------------ */
/* the request of the tests */

typedef struct {
    span request, dict, profiles_of_scope, resource;
} decoded;

static decoded decode(const kp_buf *out)
{
    decoded d;
    d.request = (span){(const unsigned char *)out->data, out->len};
    assert_int_equal(count(d.request, 1, 2), 1); /* resource_profiles */
    assert_int_equal(count(d.request, 2, 2), 1); /* dictionary */
    d.dict = nth(d.request, 2, 0);
    span rp = nth(d.request, 1, 0);
    d.resource = nth(rp, 1, 0);
    d.profiles_of_scope = nth(rp, 2, 0); /* ScopeProfiles */
    return d;
}

static span string_at(const decoded *d, uint64_t index)
{
    return nth(d->dict, 5, (size_t)index);
}

/* The name of the function of location `loc`. */
static span location_name(const decoded *d, uint64_t loc)
{
    span location = nth(d->dict, 2, (size_t)loc);
    span line = nth(location, 3, 0);
    span function = nth(d->dict, 3, (size_t)scalar(line, 1, 0));
    return string_at(d, scalar(function, 1, 0));
}

static void every_table_starts_empty(void **state)
{
    (void)state;
    kp_otlp *o = kp_otlp_create("kprof", "1.2.3");
    assert_non_null(o);
    kp_buf out = KP_BUF_INIT;
    assert_int_equal(kp_otlp_encode(o, &out), KP_OK);
    decoded d = decode(&out);
    for (unsigned table = 1; table <= 7; table++) {
        assert_true(count(d.dict, table, 2) >= 1);
        assert_int_equal(nth(d.dict, table, 0).n, 0); /* entry 0: the empty message */
    }
    span scope = nth(d.profiles_of_scope, 1, 0);
    assert_true(span_is(nth(scope, 1, 0), "kprof"));
    assert_true(span_is(nth(scope, 2, 0), "1.2.3"));
    assert_int_equal(count(d.profiles_of_scope, 2, 2), 0); /* no profile without samples */
    kp_buf_free(&out);
    kp_otlp_free(o);
}

static void resource_attributes(void **state)
{
    (void)state;
    kp_otlp *o = kp_otlp_create("kprof", "1");
    assert_int_equal(kp_otlp_resource_string(o, "service.name", "app"), KP_OK);
    assert_int_equal(kp_otlp_resource_int(o, "process.pid", 4242), KP_OK);
    kp_buf out = KP_BUF_INIT;
    assert_int_equal(kp_otlp_encode(o, &out), KP_OK);
    decoded d = decode(&out);
    assert_int_equal(count(d.resource, 1, 2), 2);
    span kv = nth(d.resource, 1, 0); /* KeyValue: key 1, value 2 */
    assert_true(span_is(nth(kv, 1, 0), "service.name"));
    assert_true(span_is(nth(nth(kv, 2, 0), 1, 0), "app")); /* AnyValue.string_value */
    kv = nth(d.resource, 1, 1);
    assert_true(span_is(nth(kv, 1, 0), "process.pid"));
    assert_int_equal(scalar(nth(kv, 2, 0), 3, 0), 4242); /* AnyValue.int_value */
    kp_buf_free(&out);
    kp_otlp_free(o);
}

static void samples_stacks_and_attributes(void **state)
{
    (void)state;
    kp_otlp *o = kp_otlp_create("kprof", "1");
    uint32_t cpu, samples, leaf, mid, root, vm, kind, st1, st2;
    assert_int_equal(kp_otlp_profile(o, "cpu", "nanoseconds", 1003009, 1700000000000000000ull,
                                     10000000000ull, &cpu),
                     KP_OK);
    assert_int_equal(kp_otlp_profile(o, "samples", "count", 0, 1, 2, &samples), KP_OK);
    kp_otlp_frame f_leaf = {"[kernel]do_syscall_64", 21, KP_OTLP_FRAME_KERNEL, NULL, NULL, 0};
    kp_otlp_frame f_vm = {"erts_gc", 7, KP_OTLP_FRAME_NATIVE, "beam.smp", "abcdef01", 0x1234};
    kp_otlp_frame f_mid = {"lists:sort/1", 12, KP_OTLP_FRAME_BEAM, NULL, NULL, 0};
    kp_otlp_frame f_root = {"anonymous fn%2F1 in A.b%2F2", 27, KP_OTLP_FRAME_NONE, NULL, NULL, 0};
    assert_int_equal(kp_otlp_location(o, &f_leaf, &leaf), KP_OK);
    assert_int_equal(kp_otlp_location(o, &f_vm, &vm), KP_OK);
    assert_int_equal(kp_otlp_location(o, &f_mid, &mid), KP_OK);
    assert_int_equal(kp_otlp_location(o, &f_root, &root), KP_OK);
    uint32_t again;
    assert_int_equal(kp_otlp_location(o, &f_mid, &again), KP_OK);
    assert_int_equal(again, mid); /* interned */
    assert_int_equal(kp_otlp_attribute(o, "beam.thread.kind", "scheduler", 9, &kind), KP_OK);
    assert_int_equal(kp_otlp_attribute(o, "beam.state", "emulator", 8, &st1), KP_OK);
    assert_int_equal(kp_otlp_attribute(o, "beam.state", "gc", 2, &st2), KP_OK);
    assert_int_not_equal(st1, st2);
    uint32_t stack1[] = {leaf, mid, root}, stack2[] = {vm, mid, root};
    uint32_t attrs1[] = {kind, st1}, attrs2[] = {kind, st2};
    assert_int_equal(kp_otlp_sample(o, cpu, stack1, 3, attrs1, 2, 100), KP_OK);
    assert_int_equal(kp_otlp_sample(o, cpu, stack1, 3, attrs1, 2, 50), KP_OK); /* summed */
    assert_int_equal(kp_otlp_sample(o, cpu, stack2, 3, attrs2, 2, 7), KP_OK);
    assert_int_equal(kp_otlp_sample(o, samples, stack2, 3, NULL, 0, 1), KP_OK);
    assert_int_equal(kp_otlp_sample(o, 9, stack2, 3, NULL, 0, 1), KP_ERR_INVAL);
    uint32_t bad[] = {leaf, 999};
    assert_int_equal(kp_otlp_sample(o, cpu, bad, 2, NULL, 0, 1), KP_ERR_INVAL);
    assert_int_equal(kp_otlp_samples(o), 3);

    kp_buf out = KP_BUF_INIT;
    assert_int_equal(kp_otlp_encode(o, &out), KP_OK);
    decoded d = decode(&out);
    assert_int_equal(count(d.profiles_of_scope, 2, 2), 2);
    span p = nth(d.profiles_of_scope, 2, 0);
    span type = nth(p, 1, 0);
    assert_true(span_is(string_at(&d, scalar(type, 1, 0)), "cpu"));
    assert_true(span_is(string_at(&d, scalar(type, 2, 0)), "nanoseconds"));
    assert_int_equal(scalar(p, 3, 1), 1700000000000000000ull); /* time_unix_nano: fixed64 */
    assert_int_equal(scalar(p, 4, 0), 10000000000ull);         /* duration_nano */
    span period_type = nth(p, 5, 0);
    assert_true(span_is(string_at(&d, scalar(period_type, 1, 0)), "cpu"));
    assert_int_equal(scalar(p, 6, 0), 1003009); /* period */
    assert_int_equal(nth(p, 7, 0).n, 16);       /* profile_id */
    assert_int_equal(count(p, 2, 2), 2);        /* two distinct samples */
    span s = nth(p, 2, 0);
    uint64_t values[4], attrs[4], locs[8];
    assert_int_equal(packed(s, 4, values, 4), 1); /* values: packed, field 4 */
    assert_int_equal(values[0], 150);
    assert_int_equal(packed(s, 2, attrs, 4), 2); /* attribute_indices: field 2 */
    span kv = nth(d.dict, 6, (size_t)attrs[1]);  /* KeyValueAndUnit */
    assert_true(span_is(string_at(&d, scalar(kv, 1, 0)), "beam.state"));
    assert_true(span_is(nth(nth(kv, 2, 0), 1, 0), "emulator"));
    span stack = nth(d.dict, 7, (size_t)scalar(s, 1, 0)); /* stack_index: field 1 */
    assert_int_equal(packed(stack, 1, locs, 8), 3);
    assert_true(span_is(location_name(&d, locs[0]), "[kernel]do_syscall_64")); /* leaf first */
    assert_true(span_is(location_name(&d, locs[1]), "lists:sort/1"));
    assert_true(span_is(location_name(&d, locs[2]), "anonymous fn/1 in A.b/2")); /* readable */
    /* frame types: a location attribute; none on the pseudo-frame */
    span loc = nth(d.dict, 2, (size_t)locs[1]);
    assert_int_equal(packed(loc, 4, attrs, 4), 1);
    kv = nth(d.dict, 6, (size_t)attrs[0]);
    assert_true(span_is(string_at(&d, scalar(kv, 1, 0)), "profile.frame.type"));
    assert_true(span_is(nth(nth(kv, 2, 0), 1, 0), "beam"));
    assert_int_equal(count(nth(d.dict, 2, (size_t)locs[2]), 4, 2), 0);
    /* native code: its mapping's file and build id, its address */
    loc = nth(d.dict, 2, vm);
    assert_int_equal(scalar(loc, 2, 0), 0x1234);
    span mapping = nth(d.dict, 1, (size_t)scalar(loc, 1, 0));
    assert_true(span_is(string_at(&d, scalar(mapping, 4, 0)), "beam.smp"));
    assert_int_equal(packed(mapping, 5, attrs, 4), 1);
    kv = nth(d.dict, 6, (size_t)attrs[0]);
    assert_true(span_is(string_at(&d, scalar(kv, 1, 0)), "process.executable.build_id.gnu"));
    assert_true(span_is(nth(nth(kv, 2, 0), 1, 0), "abcdef01"));
    /* the second profile: not periodic, its one sample */
    p = nth(d.profiles_of_scope, 2, 1);
    assert_int_equal(scalar(p, 6, 0), 0);
    assert_int_equal(count(p, 2, 2), 1);
    kp_buf_free(&out);
    kp_otlp_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_table_starts_empty),
        cmocka_unit_test(resource_attributes),
        cmocka_unit_test(samples_stacks_and_attributes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

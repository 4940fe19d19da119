/* The reader of the kprof_tracer NIF's records (sampler/trace/nif_reader.c),
 * fed records built with the layout both sides share
 * (erlang_agent/c_src/kprof_tracer_records.h): events name their process
 * and function, a record split anywhere decodes whole, drops and marks come
 * through, and malformed records are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kprof_tracer_records.h"
#include "trace/nif_reader.h"

typedef struct {
    unsigned char b[4096];
    size_t n;
} rec;

static void put(rec *r, const void *p, size_t n)
{
    memcpy(r->b + r->n, p, n), r->n += n;
}
static void put8(rec *r, unsigned v)
{
    r->b[r->n++] = (unsigned char)v;
}
static void put16(rec *r, uint16_t v)
{
    put(r, &v, 2);
}
static void put32(rec *r, uint32_t v)
{
    put(r, &v, 4);
}
static void put64(rec *r, int64_t v)
{
    put(r, &v, 8);
}

static void pid_record(rec *r, uint32_t id, unsigned num)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    erlang_pid p = {.num = num, .serial = 0, .creation = 1};
    strcpy(p.node, "n@h");
    ei_x_encode_pid(&x, &p);
    put8(r, KPT_PID);
    put32(r, id);
    put16(r, (uint16_t)x.index);
    put(r, x.buff, (size_t)x.index);
    ei_x_free(&x);
}

static void mfa_record(rec *r, uint32_t id, const char *m, const char *f, unsigned arity)
{
    put8(r, KPT_MFA);
    put32(r, id);
    put8(r, (unsigned)strlen(m));
    put(r, m, strlen(m));
    put8(r, (unsigned)strlen(f));
    put(r, f, strlen(f));
    put8(r, arity);
}

static void event_record(rec *r, unsigned kind, uint32_t pid, uint32_t arg, int64_t ts)
{
    put8(r, kind);
    put32(r, pid);
    put32(r, arg);
    put64(r, ts);
}

static void mark_record(rec *r, unsigned which, uint32_t pid, const char *id)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    if (which == KPT_MARK_BEGIN) {
        ei_x_encode_tuple_header(&x, 2);
        ei_x_encode_binary(&x, id, (long)strlen(id));
        ei_x_encode_map_header(&x, 0);
    } else {
        ei_x_encode_binary(&x, id, (long)strlen(id));
    }
    put8(r, KPT_MARK);
    put8(r, which);
    put32(r, pid);
    put64(r, 500);
    put32(r, (uint32_t)x.index);
    put(r, x.buff, (size_t)x.index);
    ei_x_free(&x);
}

typedef struct {
    kp_trace_event ev[16];
    int n;
} got;

static int collect(void *ctx, const kp_trace_event *ev)
{
    got *g = ctx;
    if (g->n < 16)
        g->ev[g->n] = *ev;
    g->n++;
    return 0;
}

static void a_trace(rec *r)
{
    pid_record(r, 0, 42);
    mark_record(r, KPT_MARK_BEGIN, 0, "t1");
    mfa_record(r, 3, "lists", "seq", 2);
    event_record(r, KPT_CALL, 0, 3, 1000);
    event_record(r, KPT_OUT, 0, 3, 1100);
    event_record(r, KPT_SPAWN, 0, KPT_NO_ID, 1200); /* a child the NIF could not name */
    put8(r, KPT_DROP);
    put32(r, 9);
    put8(r, KPT_RESET);
    mark_record(r, KPT_MARK_END, 0, "t1");
}

static void check_trace(const got *g)
{
    assert_int_equal(g->n, 6);
    assert_int_equal(g->ev[0].kind, KP_TRACE_BEGIN);
    assert_string_equal(g->ev[0].id, "t1");
    assert_int_equal(g->ev[0].pid.num, 42);
    assert_int_equal(g->ev[1].kind, KP_TRACE_CALL);
    assert_string_equal(g->ev[1].module, "lists");
    assert_string_equal(g->ev[1].function, "seq");
    assert_int_equal(g->ev[1].arity, 2);
    assert_int_equal((int)g->ev[1].ts_ns, 1000);
    assert_int_equal(g->ev[2].kind, KP_TRACE_OUT);
    assert_int_equal(g->ev[3].kind, KP_TRACE_OTHER);
    assert_int_equal(g->ev[4].kind, KP_TRACE_OTHER);
    assert_int_equal(g->ev[4].dropped, 9);
    assert_int_equal(g->ev[5].kind, KP_TRACE_END);
    assert_int_equal((int)g->ev[5].ts_ns, 500);
}

static void decodes_records(void **state)
{
    (void)state;
    rec r = {.n = 0};
    a_trace(&r);
    kp_nif_reader *rd = kp_nif_reader_create(-1);
    got g = {.n = 0};
    assert_int_equal(kp_nif_reader_feed(rd, r.b, r.n, collect, &g), 0);
    check_trace(&g);
    kp_nif_reader_free(rd);
}

/* The socket may cut a record anywhere: every split gives the same events. */
static void splits_anywhere(void **state)
{
    (void)state;
    rec r = {.n = 0};
    a_trace(&r);
    for (size_t cut = 0; cut <= r.n; cut++) {
        kp_nif_reader *rd = kp_nif_reader_create(-1);
        got g = {.n = 0};
        assert_int_equal(kp_nif_reader_feed(rd, r.b, cut, collect, &g), 0);
        assert_int_equal(kp_nif_reader_feed(rd, r.b + cut, r.n - cut, collect, &g), 0);
        check_trace(&g);
        kp_nif_reader_free(rd);
    }
}

static void refuses_malformed(void **state)
{
    (void)state;
    rec bad_kind = {.n = 0}, big_id = {.n = 0}, bad_pid = {.n = 0}, bad_mark = {.n = 0};
    put8(&bad_kind, 99);
    event_record(&big_id, KPT_CALL, KPT_MAX_IDS, 0, 1);
    put8(&bad_pid, KPT_PID); /* a pid record whose term claims more than it holds */
    put32(&bad_pid, 0);
    put16(&bad_pid, 3);
    put8(&bad_pid, 131);
    put8(&bad_pid, 109); /* a binary of 2^32-1 bytes, in one byte */
    put8(&bad_pid, 255);
    mark_record(&bad_mark, 7, 0, "x"); /* neither begin nor end */
    rec *all[] = {&bad_kind, &big_id, &bad_pid, &bad_mark};
    for (size_t k = 0; k < 4; k++) {
        kp_nif_reader *rd = kp_nif_reader_create(-1);
        got g = {.n = 0};
        assert_int_equal(kp_nif_reader_feed(rd, all[k]->b, all[k]->n, collect, &g), -1);
        assert_int_equal(g.n, 0);
        kp_nif_reader_free(rd);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decodes_records),
        cmocka_unit_test(splits_anywhere),
        cmocka_unit_test(refuses_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

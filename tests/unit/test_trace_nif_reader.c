/* The reader of the kprof_tracer NIF's records (sampler/node/nif_reader.c),
 * fed records built with the layout both sides share
 * (erlang_agent/c_src/kprof_tracer_records.h): events name their process
 * and function, a record split anywhere decodes whole, drops and marks come
 * through, and malformed records are refused. Tier tracing's SEQ_CALL
 * records carry the request's label and identity term; EXCEPTION_FROM
 * events come through like RETURN_FROM. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kprof_tracer_records.h"
#include "node/nif_reader.h"

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

static void pid_record_serial(rec *r, uint32_t id, unsigned num, unsigned serial)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    erlang_pid p = {.num = num, .serial = serial, .creation = 1};
    strcpy(p.node, "n@h");
    ei_x_encode_pid(&x, &p);
    put8(r, KPT_PID);
    put32(r, id);
    put16(r, (uint16_t)x.index);
    put(r, x.buff, (size_t)x.index);
    ei_x_free(&x);
}

static void pid_record(rec *r, uint32_t id, unsigned num)
{
    pid_record_serial(r, id, num, 0);
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

/* The head of a SEQ_CALL whose identity claims `len` bytes. */
static void seq_call_head(rec *r, uint32_t pid, uint32_t fn, int64_t ts, uint32_t label,
                          uint32_t len)
{
    put8(r, KPT_SEQ_CALL);
    put32(r, pid);
    put32(r, fn);
    put64(r, ts);
    put32(r, label);
    put32(r, len);
}

static void seq_call_record(rec *r, uint32_t pid, uint32_t fn, int64_t ts, uint32_t label,
                            const void *identity, uint32_t len)
{
    seq_call_head(r, pid, fn, ts, label, len);
    if (len)
        put(r, identity, len);
}

typedef struct {
    kp_trace_event ev[16];
    /* the identity bytes as they were during the callback (the event's
     * pointer is only valid then) */
    char identity[16][128];
    int n;
} got;

static int collect(void *ctx, const kp_trace_event *ev)
{
    got *g = ctx;
    if (g->n < 16) {
        g->ev[g->n] = *ev;
        if (ev->identity && ev->identity_len <= sizeof g->identity[0])
            memcpy(g->identity[g->n], ev->identity, ev->identity_len);
    }
    g->n++;
    return 0;
}

static void a_trace(rec *r)
{
    pid_record(r, 0, 42);
    mark_record(r, KPT_MARK_BEGIN, 0, "t1");
    mfa_record(r, 3, "lists", "seq", 2);
    event_record(r, KPT_CALL, 0, 3, 1000);
    pid_record(r, 1, 43);
    put8(r, KPT_LABEL); /* it works for no request */
    put32(r, 0);
    put32(r, 0);
    put64(r, 1050);
    put8(r, KPT_SEND); /* it sends <0.43.0> a message of trace 7 */
    put32(r, 0);
    put32(r, 1);
    put32(r, 7);
    put64(r, 1060);
    put8(r, KPT_RECEIVE); /* <0.43.0> takes it in */
    put32(r, 1);
    put32(r, 0);
    put32(r, 7);
    put64(r, 1070);
    put8(r, KPT_RECEIVE); /* from a sender the NIF could not name */
    put32(r, 0);
    put32(r, KPT_NO_ID);
    put32(r, 7);
    put64(r, 1080);
    event_record(r, KPT_OUT, 0, 3, 1100);
    event_record(r, KPT_SPAWN, 0, KPT_NO_ID, 1200); /* a child the NIF could not name */
    put8(r, KPT_DROP);
    put32(r, 9);
    put8(r, KPT_RESET);
    mark_record(r, KPT_MARK_END, 0, "t1");
}

static void check_trace(const got *g)
{
    assert_int_equal(g->n, 10);
    assert_int_equal(g->ev[0].kind, KP_TRACE_BEGIN);
    assert_string_equal(g->ev[0].id, "t1");
    assert_int_equal(g->ev[0].pid.num, 42);
    assert_int_equal(g->ev[1].kind, KP_TRACE_CALL);
    assert_string_equal(g->ev[1].module, "lists");
    assert_string_equal(g->ev[1].function, "seq");
    assert_int_equal(g->ev[1].arity, 2);
    assert_int_equal((int)g->ev[1].ts_ns, 1000);
    assert_int_equal(g->ev[2].kind, KP_TRACE_LABEL);
    assert_int_equal(g->ev[2].pid.num, 42);
    assert_int_equal(g->ev[2].trace_no, 0);
    assert_int_equal((int)g->ev[2].ts_ns, 1050);
    assert_int_equal(g->ev[3].kind, KP_TRACE_SEND);
    assert_int_equal(g->ev[3].pid.num, 42);
    assert_int_equal(g->ev[3].child.num, 43);
    assert_int_equal(g->ev[3].trace_no, 7);
    assert_int_equal((int)g->ev[3].ts_ns, 1060);
    assert_int_equal(g->ev[4].kind, KP_TRACE_RECEIVE);
    assert_int_equal(g->ev[4].pid.num, 43);
    assert_int_equal(g->ev[4].child.num, 42);
    assert_string_not_equal(g->ev[4].child.node, "");
    assert_int_equal(g->ev[4].trace_no, 7);
    assert_int_equal((int)g->ev[4].ts_ns, 1070);
    assert_int_equal(g->ev[5].kind, KP_TRACE_RECEIVE);
    assert_string_equal(g->ev[5].child.node, ""); /* no sender */
    assert_int_equal(g->ev[6].kind, KP_TRACE_OUT);
    assert_int_equal(g->ev[7].kind, KP_TRACE_OTHER);
    assert_int_equal(g->ev[8].kind, KP_TRACE_OTHER);
    assert_int_equal(g->ev[8].dropped, 9);
    assert_int_equal(g->ev[9].kind, KP_TRACE_END);
    assert_int_equal((int)g->ev[9].ts_ns, 500);
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
    rec bad_kind = {.n = 0}, big_id = {.n = 0}, bad_pid = {.n = 0}, bad_mark = {.n = 0},
        bad_send = {.n = 0};
    put8(&bad_kind, 99);
    event_record(&big_id, KPT_CALL, KPT_MAX_IDS, 0, 1);
    put8(&bad_pid, KPT_PID); /* a pid record whose term claims more than it holds */
    put32(&bad_pid, 0);
    put16(&bad_pid, 3);
    put8(&bad_pid, 131);
    put8(&bad_pid, 109); /* a binary of 2^32-1 bytes, in one byte */
    put8(&bad_pid, 255);
    mark_record(&bad_mark, 7, 0, "x"); /* neither begin nor end */
    put8(&bad_send, KPT_SEND);         /* to a pid id past the tables */
    put32(&bad_send, 0);
    put32(&bad_send, KPT_MAX_IDS);
    put32(&bad_send, 1);
    put64(&bad_send, 1);
    rec *all[] = {&bad_kind, &big_id, &bad_pid, &bad_mark, &bad_send};
    for (size_t k = 0; k < 5; k++) {
        kp_nif_reader *rd = kp_nif_reader_create(-1);
        got g = {.n = 0};
        assert_int_equal(kp_nif_reader_feed(rd, all[k]->b, all[k]->n, collect, &g), -1);
        assert_int_equal(g.n, 0);
        kp_nif_reader_free(rd);
    }
}

/* A request as tier tracing streams it: the entry call opens it (its label,
 * the request's pid, and its identity term), a call inside it has only the
 * label, then a return and an exception. */
typedef struct {
    ei_x_buff identity; /* <<"GET k1">> */
    rec r;
} tier_stream;

static void a_tier_stream(tier_stream *t)
{
    ei_x_new_with_version(&t->identity);
    ei_x_encode_binary(&t->identity, "GET k1", 6);
    t->r.n = 0;
    rec *r = &t->r;
    pid_record_serial(r, 0, 42, 0);
    pid_record_serial(r, 1, 77, 5); /* the label: kprof's request pid */
    mfa_record(r, 0, "kv", "request", 1);
    mfa_record(r, 1, "db", "get", 1);
    seq_call_record(r, 0, 0, 1000, 1, t->identity.buff, (uint32_t)t->identity.index);
    seq_call_record(r, 0, 1, 1100, KPT_NO_ID, NULL, 0);
    event_record(r, KPT_RETURN_FROM, 0, 1, 1200);
    event_record(r, KPT_EXCEPTION_FROM, 0, 0, 1300);
}

/* An event of process <0.42.x>: its kind, function and time. */
static void assert_fn_event(const kp_trace_event *ev, kp_trace_event_kind kind, const char *module,
                            const char *function, int64_t ts)
{
    assert_int_equal(ev->kind, kind);
    assert_int_equal(ev->pid.num, 42);
    assert_string_equal(ev->module, module);
    assert_string_equal(ev->function, function);
    assert_int_equal(ev->arity, 1);
    assert_int_equal((int)ev->ts_ns, (int)ts);
}

static void check_tier_stream(const got *g, const tier_stream *t)
{
    assert_int_equal(g->n, 4);
    const kp_trace_event *open = &g->ev[0], *inner = &g->ev[1];
    assert_fn_event(open, KP_TRACE_SEQ_CALL, "kv", "request", 1000);
    assert_int_equal(open->has_label, 1);
    assert_int_equal(open->label.num, 77);
    assert_int_equal(open->label.serial, 5);
    assert_int_equal((int)open->identity_len, t->identity.index);
    assert_memory_equal(g->identity[0], t->identity.buff, (size_t)t->identity.index);

    assert_fn_event(inner, KP_TRACE_SEQ_CALL, "db", "get", 1100);
    assert_int_equal(inner->has_label, 0); /* KPT_NO_ID: no pid label */
    assert_null(inner->identity);
    assert_int_equal((int)inner->identity_len, 0);

    assert_fn_event(&g->ev[2], KP_TRACE_RETURN_FROM, "db", "get", 1200);
    assert_fn_event(&g->ev[3], KP_TRACE_EXCEPTION_FROM, "kv", "request", 1300);
}

static void decodes_tier_records(void **state)
{
    (void)state;
    tier_stream t;
    a_tier_stream(&t);
    kp_nif_reader *rd = kp_nif_reader_create(-1);
    got g = {.n = 0};
    assert_int_equal(kp_nif_reader_feed(rd, t.r.b, t.r.n, collect, &g), 0);
    check_tier_stream(&g, &t);
    kp_nif_reader_free(rd);
    ei_x_free(&t.identity);
}

/* A SEQ_CALL cut anywhere waits for its identity: byte by byte, the same
 * events come out, each only once whole. */
static void tier_records_byte_by_byte(void **state)
{
    (void)state;
    tier_stream t;
    a_tier_stream(&t);
    kp_nif_reader *rd = kp_nif_reader_create(-1);
    got g = {.n = 0};
    for (size_t k = 0; k < t.r.n; k++)
        assert_int_equal(kp_nif_reader_feed(rd, t.r.b + k, 1, collect, &g), 0);
    check_tier_stream(&g, &t);
    kp_nif_reader_free(rd);
    ei_x_free(&t.identity);
}

/* An identity as long as the NIF may send whose bytes have not all come
 * yet is held back, not refused. */
static void holds_back_a_long_identity(void **state)
{
    (void)state;
    rec r = {.n = 0};
    seq_call_head(&r, 0, 0, 1, KPT_NO_ID, KPT_IDENTITY_TERM_MAX + 64); /* none here yet */
    kp_nif_reader *rd = kp_nif_reader_create(-1);
    got g = {.n = 0};
    assert_int_equal(kp_nif_reader_feed(rd, r.b, r.n, collect, &g), 0);
    assert_int_equal(g.n, 0);
    kp_nif_reader_free(rd);
}

static void refuses_malformed_seq_calls(void **state)
{
    (void)state;
    rec big_label = {.n = 0}, long_identity = {.n = 0}, bad_identity = {.n = 0}, big_fn = {.n = 0};
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_atom(&x, "ok");
    /* a label id past the tables that is not "no label" */
    seq_call_record(&big_label, 0, 0, 1, KPT_MAX_IDS, x.buff, (uint32_t)x.index);
    /* longer than the NIF ever sends: refused from the head alone */
    seq_call_head(&long_identity, 0, 0, 1, KPT_NO_ID, KPT_IDENTITY_TERM_MAX + 65);
    /* a binary claiming 2^32-1 bytes in one byte: not a term */
    const unsigned char not_a_term[] = {131, 109, 255, 255, 255, 255, 'G'};
    seq_call_record(&bad_identity, 0, 0, 1, KPT_NO_ID, not_a_term, sizeof not_a_term);
    seq_call_record(&big_fn, 0, KPT_MAX_IDS, 1, KPT_NO_ID, NULL, 0);
    ei_x_free(&x);
    rec *all[] = {&big_label, &long_identity, &bad_identity, &big_fn};
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
        cmocka_unit_test(decodes_tier_records),
        cmocka_unit_test(tier_records_byte_by_byte),
        cmocka_unit_test(holds_back_a_long_identity),
        cmocka_unit_test(refuses_malformed_seq_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

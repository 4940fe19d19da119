/* The request-trace collector (sampler/rtrace/collect.c): stacks rebuilt from
 * call/return_to events, sleep and garbage-collection leaves, spawned
 * processes, cuts with their marker frame, adopted calls (--mfa), processes
 * followed by the request's messages, and the files it writes (checked with the project's format checker). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "format_check.h"
#include "slurp.h"
#include "rtrace/collect.h"
#include "rtrace/part.h"

#define US 1000LL

typedef struct {
    char dir[64];
    kp_rtrace *rtrace;
    char written[8][4400];
    int n_written;
    char last_id[64];
    size_t last_pids;
    int n_dropped; /* faster than their threshold: not written */
} fixture;

/* the handler writes each trace, as `kprof trace` does */
static void on_done(void *ctx, const kp_rtrace_done *done)
{
    fixture *f = ctx;
    char why[4600] = "";
    if (done->dropped) {
        f->n_dropped++;
        return;
    }
    assert_int_equal(kp_rtrace_write_files(done->data, f->dir, done->id,
                                           f->written[f->n_written % 8], sizeof f->written[0], why,
                                           sizeof why),
                     KP_OK);
    f->n_written++;
    snprintf(f->last_id, sizeof f->last_id, "%s", done->id);
    f->last_pids = done->n_pids;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kp_test_rtrace.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    kp_rtrace_options o = {.max_events = 1000, .max_duration_ms = 5000};
    kp_rtrace_handler h = {.ctx = f, .on_done = on_done};
    f->rtrace = kp_rtrace_create(&o, &h);
    assert_non_null(f->rtrace);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kp_rtrace_free(f->rtrace);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

static erlang_pid pid(unsigned num)
{
    erlang_pid p;
    memset(&p, 0, sizeof p);
    snprintf(p.node, sizeof p.node, "n@h");
    p.num = num;
    return p;
}

static void ev(fixture *f, kp_trace_event_kind kind, unsigned p, const char *mfa, int64_t ts)
{
    kp_trace_event e;
    memset(&e, 0, sizeof e);
    e.kind = kind;
    e.pid = pid(p);
    e.ts_ns = ts;
    if (mfa) {
        assert_int_equal(sscanf(mfa, "%255[^:]:%255[^/]/%u", e.module, e.function, &e.arity), 3);
    }
    assert_int_equal(kp_rtrace_event(f->rtrace, &e), 0);
}

/* a trace begins; with `no`, its messages are followed (see followed()) */
static void begin_following(fixture *f, unsigned p, const char *id, int64_t ts, uint64_t max_events,
                            uint32_t no, uint64_t max_processes)
{
    kp_trace_event e;
    memset(&e, 0, sizeof e);
    e.kind = KP_TRACE_BEGIN;
    e.pid = pid(p);
    e.ts_ns = ts;
    e.max_events = max_events;
    e.trace_no = no;
    e.max_processes = max_processes;
    snprintf(e.id, sizeof e.id, "%s", id);
    assert_int_equal(kp_rtrace_event(f->rtrace, &e), 0);
}

static void begin(fixture *f, unsigned p, const char *id, int64_t ts, uint64_t max_events)
{
    begin_following(f, p, id, ts, max_events, 0, 0);
}

static void end(fixture *f, unsigned p, const char *id, int64_t ts)
{
    kp_trace_event e;
    memset(&e, 0, sizeof e);
    e.kind = KP_TRACE_END;
    e.pid = pid(p);
    e.ts_ns = ts;
    snprintf(e.id, sizeof e.id, "%s", id);
    assert_int_equal(kp_rtrace_event(f->rtrace, &e), 0);
}

static void a_request_with_a_call_a_sleep_and_a_child(void **state)
{
    fixture *f = *state;
    begin(f, 10, "T1", 0, 0);
    ev(f, KP_TRACE_CALL, 10, "h:handle/1", 100 * US);       /* 0..100 us: root only */
    ev(f, KP_TRACE_CALL, 10, "db:get/1", 300 * US);         /* 200 us in handle */
    ev(f, KP_TRACE_OUT, 10, NULL, 400 * US);                /* 100 us in get */
    ev(f, KP_TRACE_IN, 10, NULL, 1400 * US);                /* 1000 us asleep in get */
    ev(f, KP_TRACE_RETURN_TO, 10, "h:handle/1", 1500 * US); /* 100 us in get */
    kp_trace_event spawn;
    memset(&spawn, 0, sizeof spawn);
    spawn.kind = KP_TRACE_SPAWN;
    spawn.pid = pid(10);
    spawn.child = pid(11);
    spawn.ts_ns = 1600 * US; /* 100 us in handle */
    assert_int_equal(kp_rtrace_event(f->rtrace, &spawn), 0);
    ev(f, KP_TRACE_IN, 11, NULL, 1700 * US); /* child: 100 us runnable */
    ev(f, KP_TRACE_CALL, 11, "w:work/0", 1700 * US);
    ev(f, KP_TRACE_GC_START, 11, NULL, 1800 * US); /* 100 us in work */
    ev(f, KP_TRACE_GC_END, 11, NULL, 1850 * US);   /* 50 us collecting */
    ev(f, KP_TRACE_EXIT, 11, NULL, 1900 * US);     /* 50 us in work */
    end(f, 10, "T1", 2000 * US);                   /* 400 us in handle */
    assert_int_equal(f->n_written, 1);
    assert_string_equal(f->last_id, "T1");
    assert_int_equal(f->last_pids, 2);
    const char *text = kp_test_slurp(f->written[0]);
    assert_string_equal(text, "<0.10.0> 100\n"
                              "<0.10.0>;h:handle/1 700\n"
                              "<0.10.0>;h:handle/1;db:get/1 200\n"
                              "<0.10.0>;h:handle/1;db:get/1;sleep 1000\n"
                              "<0.11.0>;sleep 100\n"
                              "<0.11.0>;w:work/0 150\n"
                              "<0.11.0>;w:work/0;garbage_collection 50\n");
    char why[256] = "";
    assert_int_equal(kp_check_folded(text, strlen(text), why, sizeof why), 0);
    char perf[4400];
    snprintf(perf, sizeof perf, "%.*s.perf", (int)(strlen(f->written[0]) - 7), f->written[0]);
    const char *timeline = kp_test_slurp(perf);
    if (kp_check_perf(timeline, strlen(timeline), why, sizeof why) != 0)
        fail_msg("%s: %s", perf, why);
    /* its timeline: a lane per process, each frame's stretch nested, an
     * arrow from the spawn to the child's lane */
    char json[4400];
    snprintf(json, sizeof json, "%.*s.trace.json", (int)(strlen(f->written[0]) - 7), f->written[0]);
    assert_string_equal(
        kp_test_slurp(json),
        "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"trace\":\"T1\",\"events\":12},\"traceEvents\":[\n"
        "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"request trace T1\"}},\n"
        "{\"ph\":\"M\",\"pid\":1,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"<0.10.0>\"}},\n"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":400,\"dur\":1000,\"cat\":\"sleep\",\"name\":\"sleep\"},\n"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":300,\"dur\":1200,\"cat\":\"call\",\"name\":\"db:get/1\"},\n"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":100,\"dur\":1900,\"cat\":\"call\",\"name\":\"h:handle/1\"},\n"
        "{\"ph\":\"M\",\"pid\":1,\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"<0.11.0>\"}},\n"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":1600,\"dur\":100,\"cat\":\"sleep\",\"name\":\"sleep\"},\n"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":1800,\"dur\":50,\"cat\":\"gc\",\"name\":\"garbage_collection\"},\n"
        "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":1700,\"dur\":200,\"cat\":\"call\",\"name\":\"w:work/0\"},\n"
        "{\"ph\":\"s\",\"id\":1,\"pid\":1,\"tid\":1,\"ts\":1600,\"cat\":\"spawn\",\"name\":\"spawn\"},\n"
        "{\"ph\":\"f\",\"bp\":\"e\",\"id\":1,\"pid\":1,\"tid\":2,\"ts\":1600,\"cat\":\"spawn\",\"name\":\"spawn\"}\n"
        "]}\n");
    /* and its flame graph: the whole request, in microseconds */
    char svg[4400];
    snprintf(svg, sizeof svg, "%.*s.svg", (int)(strlen(f->written[0]) - 7), f->written[0]);
    const char *drawing = kp_test_slurp(svg);
    assert_non_null(strstr(drawing, ">Request trace T1</text>"));
    assert_non_null(strstr(drawing, "<title>all (2300 us, 100.00%)</title>"));
    assert_non_null(strstr(drawing, "<title>db:get/1 (1200 us, 52.17%)</title>"));
}

static void loops_and_returns_below_the_start(void **state)
{
    fixture *f = *state;
    begin(f, 20, "T2", 0, 0);
    /* returned below where the trace began: the stack restarts there */
    ev(f, KP_TRACE_RETURN_TO, 20, "s:loop/1", 10 * US);
    ev(f, KP_TRACE_CALL, 20, "s:handle/1", 20 * US); /* 10 us in loop */
    ev(f, KP_TRACE_CALL, 20, "s:loop/1", 30 * US);   /* 10 us in handle; tail call back */
    ev(f, KP_TRACE_CALL, 20, "s:handle/1", 40 * US); /* 10 us in loop, not loop;handle;loop */
    end(f, 20, "T2", 50 * US);                       /* 10 us in handle */
    const char *text = kp_test_slurp(f->written[0]);
    assert_string_equal(text, "<0.20.0> 10\n"
                              "<0.20.0>;s:loop/1 20\n"
                              "<0.20.0>;s:loop/1;s:handle/1 20\n");
}

static void returns_into_untraced_code_end_one_frame(void **state)
{
    fixture *f = *state;
    begin(f, 21, "T2b", 0, 0);
    ev(f, KP_TRACE_CALL, 21, "h:handle/1", 10 * US);
    /* lists has no pattern (otp_calls off; no CALL named it): the fun is
     * handle's */
    ev(f, KP_TRACE_CALL, 21, "h:each/1", 20 * US);
    ev(f, KP_TRACE_RETURN_TO, 21, "lists:map_1/2", 30 * US);
    ev(f, KP_TRACE_CALL, 21, "h:each/1", 40 * US);
    ev(f, KP_TRACE_RETURN_TO, 21, "lists:map_1/2", 50 * US);
    end(f, 21, "T2b", 60 * US); /* back in handle: 10 us after the map */
    const char *text = kp_test_slurp(f->written[0]);
    assert_string_equal(text, "<0.21.0> 10\n"
                              "<0.21.0>;h:handle/1 30\n"
                              "<0.21.0>;h:handle/1;h:each/1 20\n");
}

static void returns_below_the_start_after_a_tail_call_restart(void **state)
{
    fixture *f = *state;
    begin(f, 22, "T2c", 0, 0);
    ev(f, KP_TRACE_CALL, 22, "w:work/1", 10 * US);
    ev(f, KP_TRACE_CALL, 22, "w:delete_work/0", 20 * US); /* work/1's tail call */
    /* w has patterns (a CALL named it): back in its loop, below the start */
    ev(f, KP_TRACE_RETURN_TO, 22, "w:plain_loop/0", 30 * US);
    end(f, 22, "T2c", 40 * US);
    const char *text = kp_test_slurp(f->written[0]);
    assert_string_equal(text, "<0.22.0> 10\n"
                              "<0.22.0>;w:plain_loop/0 10\n"
                              "<0.22.0>;w:work/1 10\n"
                              "<0.22.0>;w:work/1;w:delete_work/0 10\n");
}

static void cut_past_max_events_with_a_marker(void **state)
{
    fixture *f = *state;
    begin(f, 30, "T3", 0, 3);
    ev(f, KP_TRACE_CALL, 30, "a:b/0", 10 * US);
    ev(f, KP_TRACE_CALL, 30, "a:c/0", 20 * US);
    ev(f, KP_TRACE_CALL, 30, "a:d/0", 30 * US);
    assert_int_equal(f->n_written, 0);
    ev(f, KP_TRACE_CALL, 30, "a:e/0", 40 * US); /* the 4th event: past the bound */
    assert_int_equal(f->n_written, 1);
    assert_non_null(
        strstr(kp_test_slurp(f->written[0]), "<0.30.0>;kprof_trace_cut:max_events 1\n"));
    ev(f, KP_TRACE_CALL, 30, "a:f/0", 50 * US); /* ignored: the trace is over */
    assert_int_equal(kp_rtrace_running(f->rtrace), 0);
}

static void sub_microsecond_parts_count_one(void **state)
{
    fixture *f = *state;
    begin(f, 40, "T4", 0, 0);
    ev(f, KP_TRACE_CALL, 40, "f:x/0", 300);
    end(f, 40, "T4", 700);
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.40.0> 1\n<0.40.0>;f:x/0 1\n");
}

static void a_trace_that_ends_as_it_begins_names_its_root(void **state)
{
    fixture *f = *state;
    erlang_pid p = pid(45);
    assert_int_equal(kp_rtrace_open(f->rtrace, "T45", &p, 1000), 0);
    kp_rtrace_close(f->rtrace, NULL, KP_RTRACE_COMPLETE);
    assert_int_equal(f->n_written, 1);
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.45.0> 1\n");
}

static void adopted_calls_start_and_end_with_the_function(void **state)
{
    fixture *f = *state;
    assert_int_equal(kp_rtrace_adopt(f->rtrace, "kv", "request", 1, 1, 0), 0);
    ev(f, KP_TRACE_CALL, 50, "other:fun/0", 10 * US); /* not the call: not adopted */
    assert_int_equal(kp_rtrace_running(f->rtrace), 0);
    ev(f, KP_TRACE_CALL, 50, "kv:request/1", 0); /* the meta call event: no time */
    assert_int_equal(kp_rtrace_running(f->rtrace), 1);
    ev(f, KP_TRACE_CALL, 50, "kv:parse/1", 100 * US);
    ev(f, KP_TRACE_RETURN_TO, 50, "kv:request/1", 130 * US);
    ev(f, KP_TRACE_CALL, 51, "kv:request/1", 0); /* past --count 1 */
    assert_int_equal(kp_rtrace_running(f->rtrace), 1);
    ev(f, KP_TRACE_RETURN_FROM, 50, "kv:request/1", 0);
    assert_int_equal(kp_rtrace_running(f->rtrace), 0);
    assert_int_equal(kp_rtrace_adopted(f->rtrace), 1);
    /* the clock starts at the first timed event, inside the call */
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.50.0>;kv:request/1;kv:parse/1 30\n");
}

/* following: a trace whose process's token is labelled {kprof, no}; its
 * messages to other processes (SEND), which they take in (RECEIVE) and work
 * for until they are back in their loop (LABEL 0) */
static void followed(fixture *f, unsigned p, const char *id, uint32_t no, uint64_t max_processes)
{
    begin_following(f, p, id, 0, 0, no, max_processes);
}

static void ev_to(kp_rtrace *rtrace, kp_trace_event_kind kind, erlang_pid p, erlang_pid child,
                  uint32_t no, const char *mfa, int64_t ts)
{
    kp_trace_event e;
    memset(&e, 0, sizeof e);
    e.kind = kind;
    e.pid = p;
    e.child = child;
    e.trace_no = no;
    e.ts_ns = ts;
    if (mfa)
        assert_int_equal(sscanf(mfa, "%255[^:]:%255[^/]/%u", e.module, e.function, &e.arity), 3);
    assert_int_equal(kp_rtrace_event(rtrace, &e), 0);
}

static void send_to(fixture *f, unsigned from, unsigned to, uint32_t no, int64_t ts)
{
    ev_to(f->rtrace, KP_TRACE_SEND, pid(from), pid(to), no, NULL, ts);
}

static void receive_from(fixture *f, unsigned p, unsigned from, uint32_t no, int64_t ts)
{
    ev_to(f->rtrace, KP_TRACE_RECEIVE, pid(p), pid(from), no, NULL, ts);
}

/* back in its loop: it works for no request (the NIF's LABEL 0) */
static void idle(fixture *f, unsigned p, int64_t ts)
{
    ev_to(f->rtrace, KP_TRACE_LABEL, pid(p), pid(0), 0, NULL, ts);
}

static void spawn(fixture *f, unsigned parent, unsigned child, int64_t ts)
{
    ev_to(f->rtrace, KP_TRACE_SPAWN, pid(parent), pid(child), 0, NULL, ts);
}

static const char *timeline_of(const char *folded)
{
    static char json[4400];
    snprintf(json, sizeof json, "%.*s.trace.json", (int)(strlen(folded) - 7), folded);
    return kp_test_slurp(json);
}

/* a traced call's begin mark through the NIF (BEGIN with `call`) */
static void call_begin(fixture *f, unsigned p, uint32_t no, int64_t ts)
{
    kp_trace_event e;
    memset(&e, 0, sizeof e);
    e.kind = KP_TRACE_BEGIN;
    e.call = 1;
    e.pid = pid(p);
    e.ts_ns = ts;
    e.trace_no = no;
    snprintf(e.id, sizeof e.id, "call");
    assert_int_equal(kp_rtrace_event(f->rtrace, &e), 0);
}

/* kprof trace --mfa through the NIF: the call's mark begins its trace,
 * which follows its message into a server; a call of the function inside
 * it does not end it; its outermost return does, with the time up to it */
static void a_call_mark_begins_a_followed_trace(void **state)
{
    fixture *f = *state;
    assert_int_equal(kp_rtrace_adopt(f->rtrace, "kv", "request", 1, 5, 0), 0);
    call_begin(f, 50, 0x80000007u, 10 * US);
    ev(f, KP_TRACE_CALL, 50, "kv:parse/1", 20 * US); /* 10 us in request */
    send_to(f, 50, 60, 0x80000007u, 30 * US);        /* 10 us in parse */
    receive_from(f, 60, 50, 0x80000007u, 40 * US);
    ev(f, KP_TRACE_CALL, 60, "srv:work/0", 40 * US);
    ev(f, KP_TRACE_CALL, 60, "srv:loop/1", 70 * US); /* 30 us of work */
    idle(f, 60, 70 * US);
    ev(f, KP_TRACE_RETURN_TO, 50, "kv:request/1", 80 * US); /* 50 in parse */
    call_begin(f, 50, 0x80000007u, 85 * US);                /* a nested call */
    ev(f, KP_TRACE_RETURN_FROM, 50, "kv:request/1", 90 * US);
    assert_int_equal(kp_rtrace_running(f->rtrace), 1);
    ev(f, KP_TRACE_RETURN_FROM, 50, "kv:request/1", 100 * US); /* 20 more in request */
    assert_int_equal(kp_rtrace_running(f->rtrace), 0);
    assert_int_equal(f->n_written, 1);
    assert_string_equal(f->last_id, "CALL.50.1");
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.50.0>;kv:request/1 30\n"
                                                      "<0.50.0>;kv:request/1;kv:parse/1 60\n"
                                                      "<0.60.0>;srv:work/0 30\n");
}

/* A call that casts and returns: its trace waits for the receiver to take
 * the message in and finish its work; what its process sends after the
 * return (its token outlives the call) is not the call's. */
static void a_cast_is_followed_past_the_return(void **state)
{
    fixture *f = *state;
    assert_int_equal(kp_rtrace_adopt(f->rtrace, "kv", "cast", 1, 5, 0), 0);
    call_begin(f, 50, 0x80000009u, 10 * US);
    send_to(f, 50, 80, 0x80000009u, 20 * US);
    ev(f, KP_TRACE_RETURN_FROM, 50, "kv:cast/1", 30 * US);
    assert_int_equal(f->n_written, 0);        /* its message is on its way */
    send_to(f, 50, 80, 0x80000009u, 40 * US); /* after the return */
    ev(f, KP_TRACE_CALL, 50, "kv:other/0", 45 * US);
    receive_from(f, 80, 50, 0x80000009u, 50 * US);
    ev(f, KP_TRACE_CALL, 80, "srv:work/0", 50 * US);
    ev(f, KP_TRACE_CALL, 80, "srv:loop/0", 70 * US);
    idle(f, 80, 70 * US);
    assert_int_equal(f->n_written, 1);
    assert_string_equal(kp_test_slurp(f->written[0]),
                        "<0.50.0>;kv:cast/1 20\n<0.80.0>;srv:work/0 20\n");
    receive_from(f, 80, 50, 0x80000009u, 80 * US); /* the later message: no trace's */
    ev(f, KP_TRACE_CALL, 80, "srv:work/0", 80 * US);
    assert_int_equal(kp_rtrace_running(f->rtrace), 0);
}

/* Two calls of one process cast to a busy server: the first's trace
 * drains while the second's runs (one number, their process's), and each
 * gets the server's work for its own message. */
static void two_calls_of_one_process_drain_apart(void **state)
{
    fixture *f = *state;
    assert_int_equal(kp_rtrace_adopt(f->rtrace, "kv", "cast", 1, 5, 0), 0);
    call_begin(f, 50, 0x8000000bu, 10 * US);
    send_to(f, 50, 80, 0x8000000bu, 20 * US);
    ev(f, KP_TRACE_RETURN_FROM, 50, "kv:cast/1", 30 * US);
    call_begin(f, 50, 0x8000000bu, 40 * US);
    send_to(f, 50, 80, 0x8000000bu, 45 * US);
    ev(f, KP_TRACE_RETURN_FROM, 50, "kv:cast/1", 50 * US);
    assert_int_equal(kp_rtrace_running(f->rtrace), 2);
    receive_from(f, 80, 50, 0x8000000bu, 60 * US); /* the first call's */
    ev(f, KP_TRACE_CALL, 80, "srv:work/0", 60 * US);
    ev(f, KP_TRACE_CALL, 80, "srv:loop/0", 70 * US);
    idle(f, 80, 70 * US);
    assert_int_equal(f->n_written, 1);
    assert_string_equal(f->last_id, "CALL.50.1");
    assert_string_equal(kp_test_slurp(f->written[0]),
                        "<0.50.0>;kv:cast/1 20\n<0.80.0>;srv:work/0 10\n");
    receive_from(f, 80, 50, 0x8000000bu, 80 * US); /* the second's */
    ev(f, KP_TRACE_CALL, 80, "srv:work/0", 80 * US);
    ev(f, KP_TRACE_CALL, 80, "srv:loop/0", 95 * US);
    idle(f, 80, 95 * US);
    assert_int_equal(f->n_written, 2);
    assert_string_equal(kp_test_slurp(f->written[1]),
                        "<0.50.0>;kv:cast/1 10\n<0.80.0>;srv:work/0 15\n");
}

/* --slower-than: only the calls that took that long, from call to return */
static void calls_faster_than_the_threshold_are_dropped(void **state)
{
    fixture *f = *state;
    assert_int_equal(kp_rtrace_adopt(f->rtrace, "kv", "request", 1, 10, 100), 0);
    call_begin(f, 50, 0, 0);
    ev(f, KP_TRACE_RETURN_FROM, 50, "kv:request/1", 99 * US); /* 99 us: dropped */
    call_begin(f, 51, 0, 200 * US);
    ev(f, KP_TRACE_RETURN_FROM, 51, "kv:request/1", 300 * US); /* 100 us: kept */
    /* through the trace port, the time is that of its first and last events */
    ev(f, KP_TRACE_CALL, 52, "kv:request/1", 0);
    ev(f, KP_TRACE_CALL, 52, "kv:parse/1", 400 * US);
    ev(f, KP_TRACE_RETURN_TO, 52, "kv:request/1", 450 * US);
    ev(f, KP_TRACE_RETURN_FROM, 52, "kv:request/1", 0); /* 50 us: dropped */
    assert_int_equal(f->n_dropped, 2);
    assert_int_equal(f->n_written, 1);
    assert_string_equal(f->last_id, "CALL.51.2");
    assert_int_equal(kp_rtrace_adopted(f->rtrace), 3);
}

/* A server serves trace 1, then trace 2, then an untraced request: each
 * trace holds its own stretch, from taking the message in to its return to
 * its loop; the reply the first trace's process takes in is an arrow back
 * from the server. */
static void two_traces_share_a_server(void **state)
{
    fixture *f = *state;
    followed(f, 10, "F1", 1, 0);
    followed(f, 20, "F2", 2, 0);
    send_to(f, 10, 30, 1, 100 * US);
    receive_from(f, 30, 10, 1, 150 * US); /* takes it in */
    ev(f, KP_TRACE_CALL, 30, "s:handle_call/3", 150 * US);
    ev(f, KP_TRACE_CALL, 30, "w:work/0", 200 * US); /* 50 us in handle_call */
    ev(f, KP_TRACE_CALL, 30, "s:loop/1", 400 * US); /* 200 us in work; replied */
    idle(f, 30, 400 * US);
    receive_from(f, 10, 30, 1, 420 * US);    /* the reply, sent to an alias: no SEND */
    ev(f, KP_TRACE_OUT, 30, NULL, 450 * US); /* waits: no trace's */
    send_to(f, 20, 30, 2, 500 * US);
    ev(f, KP_TRACE_IN, 30, NULL, 600 * US);
    receive_from(f, 30, 20, 2, 600 * US);
    ev(f, KP_TRACE_CALL, 30, "s:handle_call/3", 600 * US);
    ev(f, KP_TRACE_CALL, 30, "w:work/0", 650 * US); /* 50 us */
    ev(f, KP_TRACE_CALL, 30, "s:loop/1", 950 * US); /* 300 us */
    idle(f, 30, 950 * US);
    /* an untraced request (the NIF drops an idle process's events; were
     * they read, they would be nobody's) */
    ev(f, KP_TRACE_CALL, 30, "s:handle_call/3", 1000 * US);
    ev(f, KP_TRACE_CALL, 30, "w:other/0", 1050 * US);
    send_to(f, 30, 31, 0, 1100 * US); /* not for a trace: 31 is not taken in */
    ev(f, KP_TRACE_CALL, 31, "x:y/0", 1150 * US);
    end(f, 10, "F1", 2000 * US);
    assert_int_equal(f->last_pids, 1); /* the server stays: trace 2 holds it */
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.10.0> 2000\n"
                                                      "<0.30.0>;s:handle_call/3 50\n"
                                                      "<0.30.0>;s:handle_call/3;w:work/0 200\n");
    /* the request's arrow, from its send to its take-in, and the reply's,
     * from the server's last event before the caller took it in */
    const char *timeline = timeline_of(f->written[0]);
    assert_non_null(strstr(timeline, "{\"ph\":\"s\",\"id\":1,\"pid\":1,\"tid\":1,\"ts\":100,"));
    assert_non_null(strstr(timeline, "{\"ph\":\"f\",\"bp\":\"e\",\"id\":1,\"pid\":1,\"tid\":2,"
                                     "\"ts\":150,"));
    assert_non_null(strstr(timeline, "{\"ph\":\"s\",\"id\":2,\"pid\":1,\"tid\":2,\"ts\":400,"));
    assert_non_null(strstr(timeline, "{\"ph\":\"f\",\"bp\":\"e\",\"id\":2,\"pid\":1,\"tid\":1,"
                                     "\"ts\":420,"));
    end(f, 20, "F2", 2100 * US);
    assert_int_equal(f->last_pids, 1); /* its flags are the NIF's to remove */
    assert_string_equal(kp_test_slurp(f->written[1]), "<0.20.0> 2100\n"
                                                      "<0.30.0>;s:handle_call/3 50\n"
                                                      "<0.30.0>;s:handle_call/3;w:work/0 300\n");
    timeline = timeline_of(f->written[1]);
    assert_non_null(strstr(timeline, "{\"ph\":\"s\",\"id\":1,\"pid\":1,\"tid\":1,\"ts\":500,"
                                     "\"cat\":\"message\",\"name\":\"message\"}"));
    assert_non_null(strstr(timeline, "{\"ph\":\"f\",\"bp\":\"e\",\"id\":1,\"pid\":1,\"tid\":2,"
                                     "\"ts\":600,\"cat\":\"message\",\"name\":\"message\"}"));
}

/* max_processes: past it, a process the request's messages reach is not
 * taken in. */
static void at_most_max_processes_are_followed(void **state)
{
    fixture *f = *state;
    followed(f, 10, "F3", 7, 1);
    send_to(f, 10, 41, 7, 100 * US);
    receive_from(f, 41, 10, 7, 100 * US);
    ev(f, KP_TRACE_CALL, 41, "a:b/0", 100 * US);
    send_to(f, 10, 42, 7, 200 * US);
    receive_from(f, 42, 10, 7, 210 * US);
    ev(f, KP_TRACE_CALL, 42, "c:d/0", 210 * US);
    ev(f, KP_TRACE_CALL, 41, "a:e/0", 300 * US); /* 200 us in a:b */
    ev(f, KP_TRACE_CALL, 42, "c:f/0", 400 * US);
    end(f, 10, "F3", 500 * US);
    assert_int_equal(f->n_written, 0); /* 41 works for it still: it drains */
    idle(f, 41, 550 * US);
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.10.0> 500\n"
                                                      "<0.41.0>;a:b/0 200\n"
                                                      "<0.41.0>;a:b/0;a:e/0 250\n");
}

/* A process followed for another trace's request begins its own trace:
 * it is that trace's from then on. */
static void a_followed_process_begins_its_own_trace(void **state)
{
    fixture *f = *state;
    followed(f, 10, "F4", 3, 0);
    send_to(f, 10, 50, 3, 100 * US);
    receive_from(f, 50, 10, 3, 100 * US);
    ev(f, KP_TRACE_CALL, 50, "s:handle_call/3", 100 * US);
    ev(f, KP_TRACE_CALL, 50, "s:loop/1", 200 * US);
    idle(f, 50, 200 * US);
    begin(f, 50, "F5", 300 * US, 0);
    ev(f, KP_TRACE_CALL, 50, "own:work/0", 400 * US);
    end(f, 50, "F5", 600 * US);
    assert_string_equal(f->last_id, "F5");
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.50.0> 100\n<0.50.0>;own:work/0 200\n");
    end(f, 10, "F4", 700 * US);
    assert_string_equal(kp_test_slurp(f->written[1]),
                        "<0.10.0> 700\n<0.50.0>;s:handle_call/3 100\n");
}

/* What a followed process spawns while it works for a request is the
 * request's, under its own root, until it exits; what it spawns for
 * others is not. */
static void a_followed_process_spawns_for_the_request(void **state)
{
    fixture *f = *state;
    followed(f, 10, "F6", 4, 0);
    send_to(f, 10, 60, 4, 100 * US);
    receive_from(f, 60, 10, 4, 100 * US);
    ev(f, KP_TRACE_CALL, 60, "w:handle/1", 100 * US);
    spawn(f, 60, 61, 150 * US);
    ev(f, KP_TRACE_IN, 61, NULL, 200 * US); /* runnable until here */
    ev(f, KP_TRACE_CALL, 61, "job:run/0", 200 * US);
    ev(f, KP_TRACE_CALL, 60, "w:loop/0", 300 * US);
    idle(f, 60, 300 * US);
    spawn(f, 60, 62, 350 * US); /* for nobody */
    ev(f, KP_TRACE_CALL, 62, "other:run/0", 360 * US);
    ev(f, KP_TRACE_EXIT, 61, NULL, 500 * US);
    end(f, 10, "F6", 700 * US);
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.10.0> 700\n"
                                                      "<0.60.0>;w:handle/1 200\n"
                                                      "<0.61.0>;job:run/0 300\n"
                                                      "<0.61.0>;sleep 50\n");
    assert_int_equal(f->last_pids, 2); /* the child's flags go with the trace */
}

/* The followed process is released when the last trace that holds it ends. */
static void a_server_two_traces_hold_goes_with_the_last(void **state)
{
    fixture *f = *state;
    followed(f, 10, "F7", 5, 0);
    followed(f, 20, "F8", 6, 0);
    send_to(f, 10, 70, 5, 100 * US);
    send_to(f, 20, 70, 6, 110 * US);
    ev(f, KP_TRACE_CALL, 70, "s:loop/0", 115 * US); /* nobody's yet */
    receive_from(f, 70, 10, 5, 120 * US);
    ev(f, KP_TRACE_CALL, 70, "s:a/0", 130 * US);
    ev(f, KP_TRACE_CALL, 70, "s:loop/0", 140 * US);
    idle(f, 70, 140 * US);
    end(f, 10, "F7", 200 * US);
    receive_from(f, 70, 20, 6, 300 * US);
    ev(f, KP_TRACE_CALL, 70, "s:b/0", 300 * US);
    ev(f, KP_TRACE_CALL, 70, "s:loop/0", 340 * US);
    idle(f, 70, 340 * US);
    end(f, 20, "F8", 400 * US);
    assert_string_equal(kp_test_slurp(f->written[0]), "<0.10.0> 200\n<0.70.0>;s:loop/0 10\n"
                                                      "<0.70.0>;s:loop/0;s:a/0 10\n");
    assert_string_equal(kp_test_slurp(f->written[1]), "<0.20.0> 400\n<0.70.0>;s:loop/0;s:b/0 40\n");
    /* a new trace takes it in afresh: its stack was let go */
    followed(f, 30, "F9", 8, 0);
    send_to(f, 30, 70, 8, 500 * US);
    receive_from(f, 70, 30, 8, 510 * US);
    ev(f, KP_TRACE_CALL, 70, "s:c/0", 520 * US);
    end(f, 30, "F9", 600 * US);
    /* the server works on past the end: the trace takes its time until
     * it is back in its loop */
    assert_int_equal(f->n_written, 2);
    ev(f, KP_TRACE_CALL, 30, "own:after/0", 620 * US); /* not the trace's any more */
    idle(f, 70, 650 * US);
    assert_string_equal(kp_test_slurp(f->written[2]),
                        "<0.30.0> 600\n<0.70.0> 10\n<0.70.0>;s:c/0 130\n");
}

/* Across nodes: node B's collector makes its part of a trace of node A
 * (n@h) that its process took a message of; A's collector merges it, its
 * clock 5 ms ahead, into the trace, which waited for it past its end. */
static erlang_pid pid_on(unsigned num, const char *node)
{
    erlang_pid p = pid(num);
    snprintf(p.node, sizeof p.node, "%s", node);
    return p;
}

typedef struct {
    char *buf;
    int len;
} encoded;

/* Counted, then encoded into a buffer of exactly that size. */
static void on_part(void *ctx, const kp_rtrace_done *done)
{
    encoded *e = ctx;
    int n = 0;
    assert_non_null(done->origin);
    assert_string_equal(done->origin, "n@h");
    assert_int_equal(done->no, 9);
    assert_int_equal(kp_rtrace_part_encode(done, NULL, &n), 0);
    e->buf = malloc((size_t)n);
    assert_non_null(e->buf);
    assert_int_equal(kp_rtrace_part_encode(done, e->buf, &e->len), 0);
    assert_int_equal(e->len, n);
}

static void a_part_from_another_node_is_merged(void **state)
{
    fixture *f = *state;
    const int64_t ahead = 5000 * US; /* B's clock */
    erlang_pid a = pid(10), server = pid_on(90, "b@h"), none;
    memset(&none, 0, sizeof none);
    followed(f, 10, "X1", 9, 0);
    ev(f, KP_TRACE_CALL, 10, "c:call/0", 50 * US);
    ev_to(f->rtrace, KP_TRACE_SEND, a, server, 9, NULL, 100 * US); /* to B */
    ev(f, KP_TRACE_OUT, 10, NULL, 110 * US);

    encoded part = {0};
    kp_rtrace_options o = {.max_events = 1000, .max_duration_ms = 5000};
    kp_rtrace_handler h = {.ctx = &part, .on_done = on_part};
    kp_rtrace *b = kp_rtrace_create(&o, &h);
    assert_non_null(b);
    ev_to(b, KP_TRACE_RECEIVE, server, a, 9, NULL, ahead + 120 * US);
    ev_to(b, KP_TRACE_CALL, server, none, 0, "s:handle_call/3", ahead + 120 * US);
    ev_to(b, KP_TRACE_CALL, server, none, 0, "s:work/0", ahead + 150 * US);
    ev_to(b, KP_TRACE_RETURN_TO, server, none, 0, "s:handle_call/3", ahead + 400 * US);
    ev_to(b, KP_TRACE_LABEL, server, none, 0, NULL, ahead + 400 * US); /* back in its loop */
    assert_true(part.len > 0);
    kp_rtrace_free(b);

    ev(f, KP_TRACE_IN, 10, NULL, 430 * US);
    ev_to(f->rtrace, KP_TRACE_RECEIVE, a, server, 9, NULL, 430 * US); /* the reply */
    end(f, 10, "X1", 500 * US);
    assert_int_equal(f->n_written, 0); /* it waits for B's part */
    int index = 0;
    assert_int_equal(kp_rtrace_merge_part(f->rtrace, 9, "b@h", ahead, 20 * US, part.buf, &index),
                     1);
    assert_int_equal(index, part.len);
    free(part.buf);
    kp_rtrace_sweep(f->rtrace, 499 * 1000 * US); /* past the grace */
    assert_int_equal(f->n_written, 0);
    kp_rtrace_sweep(f->rtrace, 1100 * 1000 * US);
    assert_int_equal(f->n_written, 1);
    assert_string_equal(kp_test_slurp(f->written[0]),
                        "<0.10.0> 50\n"
                        "<0.10.0>;c:call/0 130\n"
                        "<0.10.0>;c:call/0;sleep 320\n"
                        "b@h:<0.90.0>;s:handle_call/3 30\n"
                        "b@h:<0.90.0>;s:handle_call/3;s:work/0 250\n");
    const char *timeline = timeline_of(f->written[0]);
    assert_non_null(strstr(timeline, "\"name\":\"b@h (clock aligned within 20.0 us)\""));
    /* into B's server from the request, at its take-in; and back */
    assert_non_null(strstr(timeline, "\"ph\":\"f\",\"bp\":\"e\",\"id\":1,\"pid\":2,"));
    assert_non_null(strstr(timeline, "\"ph\":\"s\",\"id\":2,\"pid\":2,"));
    assert_non_null(strstr(timeline, "\"ph\":\"f\",\"bp\":\"e\",\"id\":2,\"pid\":1,"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_request_with_a_call_a_sleep_and_a_child, setup, teardown),
        cmocka_unit_test_setup_teardown(loops_and_returns_below_the_start, setup, teardown),
        cmocka_unit_test_setup_teardown(returns_into_untraced_code_end_one_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(a_trace_that_ends_as_it_begins_names_its_root, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(returns_below_the_start_after_a_tail_call_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(cut_past_max_events_with_a_marker, setup, teardown),
        cmocka_unit_test_setup_teardown(sub_microsecond_parts_count_one, setup, teardown),
        cmocka_unit_test_setup_teardown(adopted_calls_start_and_end_with_the_function, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(two_traces_share_a_server, setup, teardown),
        cmocka_unit_test_setup_teardown(at_most_max_processes_are_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(a_followed_process_begins_its_own_trace, setup, teardown),
        cmocka_unit_test_setup_teardown(a_followed_process_spawns_for_the_request, setup, teardown),
        cmocka_unit_test_setup_teardown(a_server_two_traces_hold_goes_with_the_last, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_part_from_another_node_is_merged, setup, teardown),
        cmocka_unit_test_setup_teardown(a_call_mark_begins_a_followed_trace, setup, teardown),
        cmocka_unit_test_setup_teardown(a_cast_is_followed_past_the_return, setup, teardown),
        cmocka_unit_test_setup_teardown(two_calls_of_one_process_drain_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(calls_faster_than_the_threshold_are_dropped, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

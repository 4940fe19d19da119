#define _GNU_SOURCE
#include "samples/sample_wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "kp/alloc.h"
#include "node/term.h"

static void encode_options(ei_x_buff *x, const kp_sampling_options *o)
{
    ei_x_encode_map_header(x, 6);
    ei_x_encode_atom(x, "top");
    ei_x_encode_ulong(x, o->top);
    ei_x_encode_atom(x, "select_by");
    ei_x_encode_atom(x, o->select_by);
    ei_x_encode_atom(x, "reselect_ms");
    ei_x_encode_ulong(x, o->reselect_ms);
    ei_x_encode_atom(x, "depth");
    ei_x_encode_ulong(x, o->depth);
    ei_x_encode_atom(x, "idle_timeout_ms");
    ei_x_encode_ulong(x, o->idle_timeout_ms);
    ei_x_encode_atom(x, "pids");
    if (o->n_pids) {
        ei_x_encode_list_header(x, (long)o->n_pids);
        for (size_t i = 0; i < o->n_pids; i++)
            ei_x_encode_string(x, o->pids[i]);
    }
    ei_x_encode_empty_list(x);
}

int kp_sample_wire_start(kp_sample_wire *a, kp_node *node, const kp_sampling_options *o, char *err,
                         size_t err_len)
{
    memset(a, 0, sizeof *a);
    if (kp_agent_load(&a->agent, node, KP_AGENT_SAMPLING, err, err_len) != 0)
        return -1;

    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 2);
    ei_x_encode_pid(&args, &node->self);
    encode_options(&args, o);
    ei_x_encode_empty_list(&args);
    int rc = kp_node_call(node, "kprof_agent", "start", &args, &reply, err, err_len);
    if (rc == 0) {
        int i = 0, arity;
        char tag[MAXATOMLEN];
        if (ei_decode_tuple_header(reply.buff, &i, &arity) == 0 && arity == 2 &&
            ei_decode_atom(reply.buff, &i, tag) == 0 && strcmp(tag, "ok") == 0 &&
            ei_decode_pid(reply.buff, &i, &a->pid) == 0) {
            rc = 0;
        } else {
            char what[512];
            kp_term_text(reply.buff, 0, "(unprintable term)", what, sizeof what);
            if (strstr(what, "busy"))
                snprintf(err, err_len,
                         "another kprof is already attached to %s (%s); stop it first",
                         node->target, what);
            else if (strstr(what, "no_process") || strstr(what, "bad_pid"))
                snprintf(err, err_len, "--pid: %s on %s", what, node->target);
            else
                snprintf(err, err_len, "the agent did not start on %s: %s", node->target, what);
            rc = -1;
        }
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

int kp_sample_wire_attach(kp_sample_wire *wire, kp_node *node, const char *given,
                          const char *cookie_file, unsigned timeout_ms,
                          const kp_sampling_options *options, char *err, size_t err_len)
{
    char target[512], cookie[512];
    if (kp_node_name(given, target, sizeof target, err, err_len) != 0 ||
        kp_cookie_load(cookie_file, cookie, sizeof cookie, err, err_len) != 0)
        return KP_EXIT_USAGE;
    int rc = kp_node_connect(node, target, cookie, timeout_ms, err, err_len);
    memset(cookie, 0, sizeof cookie); /* no copy of it outlives the handshake */
    if (rc != 0)
        return KP_EXIT_NODE;
    if (kp_sample_wire_start(wire, node, options, err, err_len) != 0) {
        kp_node_close(node);
        return KP_EXIT_NODE;
    }
    return KP_EXIT_OK;
}

int kp_sample_wire_request(kp_sample_wire *a, unsigned ticks, uint64_t interval_us,
                           int64_t first_us)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_tuple_header(&x, 6);
    ei_x_encode_atom(&x, "sample");
    ei_x_encode_pid(&x, &a->agent.node->self);
    ei_x_encode_long(&x, ++a->seq);
    ei_x_encode_ulong(&x, ticks ? ticks : 1);
    ei_x_encode_ulonglong(&x, interval_us);
    ei_x_encode_longlong(&x, first_us);
    int rc = ei_send(a->agent.node->fd, &a->pid, x.buff, x.index) < 0 ? -1 : 0;
    ei_x_free(&x);
    return rc;
}

void kp_sample_wire_stop(kp_sample_wire *a)
{
    if (a->reply.buff) {
        ei_x_free(&a->reply);
        a->reply.buff = NULL;
    }
    a->ticks_left = 0;
    if (!a->agent.node || a->agent.node->fd < 0)
        return;
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_atom(&x, "stop");
    ei_send(a->agent.node->fd, &a->pid, x.buff, x.index);
    ei_x_free(&x);
}

static int decode_mfas(const char *buf, int *i, const kp_wire_handler *h)
{
    int n, arity;
    if (ei_decode_list_header(buf, i, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        long id, ar;
        char mod[MAXATOMLEN_UTF8], fun[MAXATOMLEN_UTF8];
        if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 4 ||
            ei_decode_long(buf, i, &id) != 0 ||
            ei_decode_atom_as(buf, i, mod, sizeof mod, ERLANG_UTF8, NULL, NULL) < 0 ||
            ei_decode_atom_as(buf, i, fun, sizeof fun, ERLANG_UTF8, NULL, NULL) < 0 ||
            ei_decode_long(buf, i, &ar) != 0 || id < 0 || ar < 0)
            return -1;
        if (h->on_mfa(h->ctx, (uint32_t)id, mod, fun, (unsigned)ar) != 0)
            return -2;
    }
    return n ? ei_decode_list_header(buf, i, &n) : 0; /* the tail [] */
}

static int decode_labels(const char *buf, int *i, const kp_wire_handler *h)
{
    int n, arity, type, size;
    if (ei_decode_list_header(buf, i, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        uint32_t num, serial;
        char kind[MAXATOMLEN];
        char text[1024];
        long len;
        if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 2 ||
            kp_term_decode_pid_numbers(buf, i, &num, &serial) != 0 ||
            ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 2 ||
            ei_decode_atom(buf, i, kind) != 0 || ei_get_type(buf, i, &type, &size) != 0 ||
            type != ERL_BINARY_EXT || size >= (int)sizeof text ||
            ei_decode_binary(buf, i, text, &len) != 0)
            return -1;
        if (h->on_label(h->ctx, num, serial, strcmp(kind, "registered") == 0, text, (size_t)len) !=
            0)
            return -2;
    }
    return n ? ei_decode_list_header(buf, i, &n) : 0;
}

static int decode_samples(const char *buf, int *i, const kp_wire_handler *h)
{
    static unsigned char *stack;
    static size_t stack_cap;
    static uint32_t *frames;
    int n, arity, type, size;
    if (ei_decode_list_header(buf, i, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        kp_wire_sample s;
        memset(&s, 0, sizeof s);
        if (ei_get_type(buf, i, &type, &size) != 0)
            return -1;
        if (type == ERL_PID_EXT || type == ERL_NEW_PID_EXT) { /* unchanged since last time */
            if (kp_term_decode_pid_numbers(buf, i, &s.num, &s.serial) != 0)
                return -1;
            s.unchanged = 1;
            if (h->on_sample(h->ctx, &s) != 0)
                return -2;
            continue;
        }
        if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != KP_SAMPLE_TUPLE_ARITY ||
            kp_term_decode_pid_numbers(buf, i, &s.num, &s.serial) != 0 ||
            kp_term_decode_atom(buf, i, s.status, sizeof s.status) != 0)
            return -1;
        for (int m = 0; m < KP_METRIC_COUNT; m++)
            if (kp_term_decode_int(buf, i, &s.metrics[m]) != 0)
                return -1;
        if (ei_get_type(buf, i, &type, &size) != 0)
            return -1;
        if (type == ERL_BINARY_EXT) {
            if ((size_t)size + 8 > stack_cap) {
                size_t cap = (size_t)size + 4096;
                unsigned char *st = kp_realloc(stack, cap);
                uint32_t *fr = kp_realloc(frames, cap);
                if (st)
                    stack = st;
                if (fr)
                    frames = fr;
                if (!st || !fr)
                    return -2;
                stack_cap = cap;
            }
            long len;
            if (ei_decode_binary(buf, i, stack, &len) != 0 || len % 8)
                return -1;
            for (long b = 0; b < len / 4; b++)
                frames[b] = (uint32_t)stack[4 * b] << 24 | (uint32_t)stack[4 * b + 1] << 16 |
                            (uint32_t)stack[4 * b + 2] << 8 | stack[4 * b + 3];
            s.frames = frames;
            s.depth = (size_t)len / 8;
        } else {
            char same[MAXATOMLEN];
            if (ei_decode_atom(buf, i, same) != 0 || strcmp(same, "same") != 0)
                return -1;
            s.same = 1;
        }
        if (h->on_sample(h->ctx, &s) != 0)
            return -2;
    }
    return n ? ei_decode_list_header(buf, i, &n) : 0;
}

/* One tick (see samples/sample_wire.h) at *i. */
static int decode_tick(kp_sample_wire *a, const char *buf, int *i, const kp_wire_handler *h)
{
    int arity, rc;
    int64_t time_us;
    char reset[MAXATOMLEN];
    if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 6 ||
        kp_term_decode_int(buf, i, &time_us) != 0)
        return -1;
    /* the reset flag is last on the wire but must act first: look ahead */
    int j = *i;
    if (ei_skip_term(buf, &j) || ei_skip_term(buf, &j) || ei_skip_term(buf, &j) ||
        ei_decode_atom(buf, &j, reset) != 0)
        return -1;
    if (strcmp(reset, "true") == 0 && h->on_reset(h->ctx) != 0)
        return -2;
    if ((rc = decode_mfas(buf, i, h)) != 0 || (rc = decode_labels(buf, i, h)) != 0 ||
        (rc = decode_samples(buf, i, h)) != 0)
        return rc;
    int64_t queried, reused, busy, delay;
    if (ei_skip_term(buf, i) != 0 || /* the reset flag, already acted on */
        ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 4 ||
        kp_term_decode_int(buf, i, &queried) != 0 || kp_term_decode_int(buf, i, &reused) != 0 ||
        kp_term_decode_int(buf, i, &busy) != 0 || kp_term_decode_int(buf, i, &delay) != 0)
        return -1;
    a->ticks++;
    a->stacks_queried += (uint64_t)queried;
    a->stacks_reused += (uint64_t)reused;
    a->busy_us += (uint64_t)busy;
    a->tick_busy_us = (uint64_t)busy;
    a->tick_delay_us = (uint64_t)delay;
    return 0;
}

int kp_sample_wire_tick_time(const kp_sample_wire *a, int64_t *time_us)
{
    if (a->ticks_left <= 0)
        return 0;
    int i = a->reply_index, arity;
    *time_us = 0; /* when malformed: kp_sample_wire_next_tick() reports it */
    if (ei_decode_tuple_header(a->reply.buff, &i, &arity) == 0)
        kp_term_decode_int(a->reply.buff, &i, time_us);
    return 1;
}

int kp_sample_wire_next_tick(kp_sample_wire *a, const kp_wire_handler *h)
{
    if (a->ticks_left <= 0)
        return 0;
    a->ticks_left--;
    if (decode_tick(a, a->reply.buff, &a->reply_index, h) != 0) {
        a->ticks_left = 0;
        return -2;
    }
    return 0;
}

/* The header of a reply (see samples/sample_wire.h) to request `seq`, up to its tick
 * list. Returns 1 for ours, 0 for another message (or a stale reply), -1 for
 * a malformed one. */
static int decode_reply_header(kp_sample_wire *a, const char *buf, int *i)
{
    int version, arity, n;
    long seq;
    char tag[MAXATOMLEN];
    if (ei_decode_version(buf, i, &version) != 0 || ei_decode_tuple_header(buf, i, &arity) != 0 ||
        arity != 4 || ei_decode_atom(buf, i, tag) != 0 || strcmp(tag, "kprof_samples") != 0 ||
        ei_decode_long(buf, i, &seq) != 0)
        return 0; /* not ours */
    if (seq != a->seq)
        return 0; /* a late answer to an abandoned request */
    int64_t missed;
    if (kp_term_decode_int(buf, i, &missed) != 0 || ei_decode_list_header(buf, i, &n) != 0)
        return -1;
    a->missed += (uint64_t)missed;
    a->ticks_left = n;
    return 1;
}

int kp_sample_wire_take_reply(kp_sample_wire *a, size_t len)
{
    a->reply_index = 0;
    a->ticks_left = 0;
    if (len > INT32_MAX || kp_term_check(a->reply.buff, len) != 0)
        return -1;
    return decode_reply_header(a, a->reply.buff, &a->reply_index);
}

int kp_sample_wire_receive(kp_sample_wire *a, unsigned ms)
{
    if (!a->reply.buff)
        ei_x_new(&a->reply);
    a->ticks_left = 0;
    for (;;) {
        erlang_msg msg;
        int rc = ei_xreceive_msg_tmo(a->agent.node->fd, &msg, &a->reply, ms);
        if (rc == ERL_TICK)
            continue;
        if (rc == ERL_ERROR)
            return erl_errno == ETIMEDOUT ? 0 : -1;
        if (msg.msgtype != ERL_SEND && msg.msgtype != ERL_REG_SEND)
            continue;
        /* ei sets index to the message's length (older releases: to the
         * buffer's size, which holds it too) */
        int ours = kp_sample_wire_take_reply(a, (size_t)a->reply.index);
        if (ours == 0)
            continue;
        return ours == 1 ? 1 : -2;
    }
}

#define _GNU_SOURCE
#include "node/agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/agent_modules.h"
#include "common/clock.h"

static int decode_int(const char *buf, int *i, int64_t *v)
{
    long long x;
    if (ei_decode_longlong(buf, i, &x) != 0)
        return -1;
    *v = x;
    return 0;
}

static int rpc(kp_agent *a, const char *mod, const char *fun, ei_x_buff *args, ei_x_buff *reply,
               char *err, size_t err_len)
{
    if (kp_node_rpc(a->node, mod, fun, args, reply) != 0) {
        snprintf(err, err_len, "lost the connection to %s during %s:%s", a->node->target, mod,
                 fun);
        return -1;
    }
    return 0;
}

/* rpc of mod:fun() with no argument (`atom` NULL) or with the one atom
 * `atom`. `reply` is initialised here and the caller frees it, whatever the
 * outcome. */
static int rpc_atom(kp_agent *a, const char *mod, const char *fun, const char *atom,
                    ei_x_buff *reply, char *err, size_t err_len)
{
    ei_x_buff args;
    ei_x_new(&args);
    ei_x_new(reply);
    if (atom) {
        ei_x_encode_list_header(&args, 1);
        ei_x_encode_atom(&args, atom);
    }
    ei_x_encode_empty_list(&args);
    int rc = rpc(a, mod, fun, &args, reply, err, err_len);
    ei_x_free(&args);
    return rc;
}

/* 1 if the node has module `m` loaded with exactly this build's code (a
 * version string would not tell two builds of one version apart), 0 if
 * not, -1 if the connection failed. */
static int module_is_current(kp_agent *a, const kp_agent_module *m, char *err, size_t err_len)
{
    ei_x_buff reply;
    int rc = rpc_atom(a, m->name, "module_info", "md5", &reply, err, err_len);
    if (rc == 0) {
        /* a 16-byte binary; anything else ({badrpc, ...}: not loaded) differs */
        unsigned char md5[16];
        int i = 0, type, size;
        long len;
        rc = ei_get_type(reply.buff, &i, &type, &size) == 0 && type == ERL_BINARY_EXT &&
                     size == 16 && ei_decode_binary(reply.buff, &i, md5, &len) == 0 &&
                     memcmp(md5, m->md5, 16) == 0
                 ? 1
                 : 0;
    }
    ei_x_free(&reply);
    return rc;
}

/* code:soft_purge(Module): 1 when no process runs its old code any more
 * (or there was none), 0 when some still does, -1 on a lost connection. */
static int soft_purge(kp_agent *a, const char *module, char *err, size_t err_len)
{
    ei_x_buff reply;
    int rc = rpc_atom(a, "code", "soft_purge", module, &reply, err, err_len);
    if (rc == 0) {
        int i = 0;
        char tag[MAXATOMLEN];
        rc = ei_decode_atom(reply.buff, &i, tag) == 0 && strcmp(tag, "true") == 0 ? 1 : 0;
    }
    ei_x_free(&reply);
    return rc;
}

/* Loads every embedded module the node does not have in this build's
 * version. A module whose previous old code some process still runs is not
 * replaced: loading would make the current code old, and the next purge
 * would kill the processes running it (e.g. a request inside
 * kprof:do_apply/3 of the node's own kprof release); the node keeps its
 * version of it. Only the agent itself must be this build's. */
static int load_modules(kp_agent *a, char *err, size_t err_len)
{
    for (size_t m = 0; m < kp_agent_module_count; m++) {
        const kp_agent_module *mod = &kp_agent_modules[m];
        int current = module_is_current(a, mod, err, err_len);
        if (current < 0)
            return -1;
        if (current)
            continue;
        int purged = soft_purge(a, mod->name, err, err_len);
        if (purged < 0)
            return -1;
        if (!purged) {
            if (strcmp(mod->name, "kprof_agent") == 0) {
                snprintf(err, err_len, "an earlier kprof agent's code is still running on %s; "
                         "try again in a few seconds", a->node->target);
                return -1;
            }
            continue;
        }
        ei_x_buff args, reply;
        char file[300];
        snprintf(file, sizeof file, "%s.beam", mod->name);
        ei_x_new(&args);
        ei_x_new(&reply);
        ei_x_encode_list_header(&args, 3);
        ei_x_encode_atom(&args, mod->name);
        ei_x_encode_string(&args, file);
        ei_x_encode_binary(&args, mod->beam, (long)mod->size);
        ei_x_encode_empty_list(&args);
        int rc = rpc(a, "code", "load_binary", &args, &reply, err, err_len);
        if (rc == 0) {
            int i = 0, arity;
            char tag[MAXATOMLEN];
            if (ei_decode_tuple_header(reply.buff, &i, &arity) != 0 || arity != 2 ||
                ei_decode_atom(reply.buff, &i, tag) != 0 || strcmp(tag, "module") != 0) {
                char what[256];
                kp_term_text(reply.buff, 0, "(unprintable term)", what, sizeof what);
                snprintf(err, err_len, "node %s refused to load kprof's agent module %s: %s",
                         a->node->target, mod->name, what);
                rc = -1;
            }
        }
        ei_x_free(&args);
        ei_x_free(&reply);
        if (rc)
            return -1;
        a->loaded = 1;
    }
    return 0;
}

static int node_facts(kp_agent *a, char *err, size_t err_len)
{
    ei_x_buff reply;
    int rc = rpc_atom(a, "os", "getpid", NULL, &reply, err, err_len);
    if (rc == 0) {
        char text[32];
        int i = 0;
        if (ei_decode_string(reply.buff, &i, text) == 0)
            a->os_pid = strtol(text, NULL, 10);
    }
    ei_x_free(&reply);
    if (rc != 0)
        return rc;
    rc = rpc_atom(a, "erlang", "system_info", "wordsize", &reply, err, err_len);
    if (rc == 0) {
        long w = 8;
        int i = 0;
        ei_decode_long(reply.buff, &i, &w);
        a->wordsize = (unsigned)w;
    }
    ei_x_free(&reply);
    return rc;
}

static void encode_options(ei_x_buff *x, const kp_agent_options *o)
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

int kp_agent_load(kp_agent *a, kp_node *node, char *err, size_t err_len)
{
    memset(a, 0, sizeof *a);
    a->node = node;
    a->wordsize = 8;
    if (load_modules(a, err, err_len) != 0)
        return -1;
    return node_facts(a, err, err_len);
}

int kp_agent_attach(kp_agent *a, kp_node *node, const kp_agent_options *o, char *err,
                    size_t err_len)
{
    if (kp_agent_load(a, node, err, err_len) != 0)
        return -1;

    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 2);
    ei_x_encode_pid(&args, &node->self);
    encode_options(&args, o);
    ei_x_encode_empty_list(&args);
    int rc = rpc(a, "kprof_agent", "start", &args, &reply, err, err_len);
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
                snprintf(err, err_len, "another kprof is already attached to %s (%s); stop it "
                         "first", node->target, what);
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

int kp_agent_clock_offset(kp_agent *a, int64_t *offset_us, char *err, size_t err_len)
{
    uint64_t best_rtt = UINT64_MAX;
    for (int k = 0; k < 3; k++) {
        ei_x_buff reply;
        uint64_t t0 = kp_now_us();
        int rc = rpc_atom(a, "erlang", "monotonic_time", "microsecond", &reply, err, err_len);
        uint64_t t1 = kp_now_us();
        int i = 0;
        int64_t node_now;
        if (rc == 0 && decode_int(reply.buff, &i, &node_now) != 0) {
            snprintf(err, err_len, "unexpected reply from erlang:monotonic_time/1 on %s",
                     a->node->target);
            rc = -1;
        }
        ei_x_free(&reply);
        if (rc != 0)
            return -1;
        if (t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            *offset_us = (int64_t)(t0 + (t1 - t0) / 2) - node_now;
        }
    }
    return 0;
}

int kp_agent_request(kp_agent *a, unsigned ticks, uint64_t interval_us, int64_t first_us)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_tuple_header(&x, 6);
    ei_x_encode_atom(&x, "sample");
    ei_x_encode_pid(&x, &a->node->self);
    ei_x_encode_long(&x, ++a->seq);
    ei_x_encode_ulong(&x, ticks ? ticks : 1);
    ei_x_encode_ulonglong(&x, interval_us);
    ei_x_encode_longlong(&x, first_us);
    int rc = ei_send(a->node->fd, &a->pid, x.buff, x.index) < 0 ? -1 : 0;
    ei_x_free(&x);
    return rc;
}

void kp_agent_detach(kp_agent *a)
{
    if (a->reply.buff) {
        ei_x_free(&a->reply);
        a->reply.buff = NULL;
    }
    a->ticks_left = 0;
    if (!a->node || a->node->fd < 0)
        return;
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_atom(&x, "stop");
    ei_send(a->node->fd, &a->pid, x.buff, x.index);
    ei_x_free(&x);
}

static int decode_pid_numbers(const char *buf, int *i, uint32_t *num, uint32_t *serial)
{
    erlang_pid p;
    if (ei_decode_pid(buf, i, &p) != 0)
        return -1;
    *num = p.num;
    *serial = p.serial;
    return 0;
}

static int decode_mfas(const char *buf, int *i, const kp_batch_handler *h)
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

static int decode_labels(const char *buf, int *i, const kp_batch_handler *h)
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
            decode_pid_numbers(buf, i, &num, &serial) != 0 ||
            ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 2 ||
            ei_decode_atom(buf, i, kind) != 0 || ei_get_type(buf, i, &type, &size) != 0 ||
            type != ERL_BINARY_EXT || size >= (int)sizeof text ||
            ei_decode_binary(buf, i, text, &len) != 0)
            return -1;
        if (h->on_label(h->ctx, num, serial, strcmp(kind, "registered") == 0, text,
                        (size_t)len) != 0)
            return -2;
    }
    return n ? ei_decode_list_header(buf, i, &n) : 0;
}

static int decode_samples(const char *buf, int *i, const kp_batch_handler *h)
{
    static unsigned char *stack;
    static size_t stack_cap;
    static uint32_t *frames;
    int n, arity, type, size;
    if (ei_decode_list_header(buf, i, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        kp_raw_sample s;
        memset(&s, 0, sizeof s);
        if (ei_get_type(buf, i, &type, &size) != 0)
            return -1;
        if (type == ERL_PID_EXT || type == ERL_NEW_PID_EXT) { /* unchanged since last time */
            if (decode_pid_numbers(buf, i, &s.num, &s.serial) != 0)
                return -1;
            s.unchanged = 1;
            if (h->on_sample(h->ctx, &s) != 0)
                return -2;
            continue;
        }
        if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 12 ||
            decode_pid_numbers(buf, i, &s.num, &s.serial) != 0 ||
            ei_decode_atom(buf, i, s.status) != 0)
            return -1;
        for (int m = 0; m < KP_METRIC_COUNT; m++)
            if (decode_int(buf, i, &s.metrics[m]) != 0)
                return -1;
        if (ei_get_type(buf, i, &type, &size) != 0)
            return -1;
        if (type == ERL_BINARY_EXT) {
            if ((size_t)size + 8 > stack_cap) {
                size_t cap = (size_t)size + 4096;
                unsigned char *st = realloc(stack, cap);
                uint32_t *fr = realloc(frames, cap);
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

/* One tick (see agent.h) at *i. */
static int decode_tick(kp_agent *a, const char *buf, int *i, const kp_batch_handler *h)
{
    int arity, rc;
    int64_t time_us;
    char reset[MAXATOMLEN];
    if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 6 ||
        decode_int(buf, i, &time_us) != 0)
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
        decode_int(buf, i, &queried) != 0 || decode_int(buf, i, &reused) != 0 ||
        decode_int(buf, i, &busy) != 0 || decode_int(buf, i, &delay) != 0)
        return -1;
    a->ticks++;
    a->stacks_queried += (uint64_t)queried;
    a->stacks_reused += (uint64_t)reused;
    a->busy_us += (uint64_t)busy;
    a->tick_busy_us = (uint64_t)busy;
    a->tick_delay_us = (uint64_t)delay;
    return 0;
}

int kp_agent_tick_time(const kp_agent *a, int64_t *time_us)
{
    if (a->ticks_left <= 0)
        return 0;
    int i = a->reply_index, arity;
    *time_us = 0; /* when malformed: kp_agent_next_tick() reports it */
    if (ei_decode_tuple_header(a->reply.buff, &i, &arity) == 0)
        decode_int(a->reply.buff, &i, time_us);
    return 1;
}

int kp_agent_next_tick(kp_agent *a, const kp_batch_handler *h)
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

/* The header of a reply (see agent.h) to request `seq`, up to its tick
 * list. Returns 1 for ours, 0 for another message (or a stale reply), -1 for
 * a malformed one. */
static int decode_reply_header(kp_agent *a, const char *buf, int *i)
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
    if (decode_int(buf, i, &missed) != 0 || ei_decode_list_header(buf, i, &n) != 0)
        return -1;
    a->missed += (uint64_t)missed;
    a->ticks_left = n;
    return 1;
}

int kp_agent_receive(kp_agent *a, unsigned ms)
{
    if (!a->reply.buff)
        ei_x_new(&a->reply);
    a->ticks_left = 0;
    for (;;) {
        erlang_msg msg;
        int rc = ei_xreceive_msg_tmo(a->node->fd, &msg, &a->reply, ms);
        if (rc == ERL_TICK)
            continue;
        if (rc == ERL_ERROR)
            return erl_errno == ETIMEDOUT ? 0 : -1;
        if (msg.msgtype != ERL_SEND && msg.msgtype != ERL_REG_SEND)
            continue;
        a->reply_index = 0;
        int ours = decode_reply_header(a, a->reply.buff, &a->reply_index);
        if (ours == 0)
            continue;
        return ours == 1 ? 1 : -2;
    }
}

/* `kprof trace`: the collector of request traces.
 *
 * --session: started by kprof_rtrace in the node (kprof:trace_request/1 and
 *   the HTTP toggles); collects until the node closes the trace port.
 * --pid PID: from a shell, traces one process for --duration and writes its
 *   trace to --output.
 * --mfa M:F/A: from a shell, traces the next --count calls of a function,
 *   each in whatever process makes it, from the call to its return. */
#define _GNU_SOURCE
#include "rtrace/run.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/signals.h"
#include "kp/alloc.h"
#include "kp/intern.h"
#include "node/agent.h"
#include "node/connection.h"
#include "node/nif.h"
#include "node/nif_reader.h"
#include "node/term.h"
#include "node/trace_port.h"
#include "rtrace/collect.h"
#include "rtrace/part.h"

typedef struct {
    const kp_rtrace_run_options *o;
    kp_node node;
    kp_rtrace *rtrace;
    kp_trace_port stream;
    kp_nif_reader *nif;    /* the kprof_tracer NIF's records, when it runs */
    char nif_refused[512]; /* else why not, when it was asked for */
    int64_t offset;        /* node monotonic time = local - offset */
    char dir[4096];
    unsigned port;
    uint64_t written, failed;
    int started; /* this run started request tracing in the node: it stops it */
    int lost;    /* the connection to the node is gone: nothing more to ask it */
    int usage;   /* the node refused an option's value (--match) */
} run;

/* {rtrace_part_out, No, Origin, Part} at buf[*index] (see send_part). */
static int encode_part_out(const kp_rtrace_done *done, char *buf, int *index)
{
    return ei_encode_version(buf, index) || ei_encode_tuple_header(buf, index, 4) ||
                   ei_encode_atom(buf, index, "rtrace_part_out") ||
                   ei_encode_ulong(buf, index, done->no) ||
                   ei_encode_atom(buf, index, done->origin) ||
                   kp_rtrace_part_encode(done, buf, index)
               ? -1
               : 0;
}

/* This node's part of another node's trace: to the server, which sends it
 * there. Counted first, then encoded in one buffer of that size. */
static void send_part(run *r, const kp_rtrace_done *done)
{
    int n = 0, i = 0;
    char *buf = encode_part_out(done, NULL, &n) == 0 ? kp_malloc((size_t)n) : NULL;
    if (buf && encode_part_out(done, buf, &i) == 0)
        ei_reg_send(&r->node.ec, r->node.fd, "kprof_rtrace", buf, i);
    else
        kp_warn("out of memory: the part of trace %u of %s is lost", done->no, done->origin);
    kp_free(buf);
}

/* {rtrace_part, No, From, Part, Offset, Error} from the server: node From's
 * part of trace No, merged into it (see rtrace/part.h); anything else is
 * not for this collector. Also the node's on_message: a part may come
 * while the collector waits for a call's reply. */
static void take_part(void *ctx, const char *buf, int len)
{
    run *r = ctx;
    int i = 0, version, arity;
    char tag[MAXATOMLEN], from[MAXATOMLEN_UTF8];
    unsigned long no;
    long long offset = 0, error = 0;
    if (len < 0 || kp_term_check(buf, (size_t)len) != 0 ||
        ei_decode_version(buf, &i, &version) != 0 || ei_decode_tuple_header(buf, &i, &arity) != 0 ||
        arity != 6 || ei_decode_atom(buf, &i, tag) != 0 || strcmp(tag, "rtrace_part") != 0 ||
        ei_decode_ulong(buf, &i, &no) != 0 || ei_decode_atom(buf, &i, from) != 0)
        return;
    int part = i;
    if (ei_skip_term(buf, &i) != 0 || ei_decode_longlong(buf, &i, &offset) != 0 ||
        ei_decode_longlong(buf, &i, &error) != 0 || i > len)
        return;
    if (kp_rtrace_merge_part(r->rtrace, (uint32_t)no, from, offset, error, buf, &part) < 0)
        kp_warn("the part %s sent of trace %lu is malformed; the trace goes without it", from, no);
}

/* {Tag, Pids} to kprof_rtrace: the `n' pids at `pids', or {Tag, all}. */
static void send_pids(run *r, const char *tag, const erlang_pid *pids, size_t n, int all)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, tag);
    if (all) {
        ei_x_encode_atom(&x, "all");
    } else {
        if (n)
            ei_x_encode_list_header(&x, (long)n);
        for (size_t k = 0; k < n; k++)
            ei_x_encode_pid(&x, &pids[k]);
        ei_x_encode_empty_list(&x);
    }
    ei_reg_send(&r->node.ec, r->node.fd, "kprof_rtrace", x.buff, x.index);
    ei_x_free(&x);
}

/* Writes the files of a trace and says where, or why not. */
static void write_trace(run *r, const kp_rtrace_done *done)
{
    char folded[4400], why[4600] = "";
    if (kp_rtrace_write_files(done->data, r->dir, done->id, folded, sizeof folded, why,
                              sizeof why) == KP_OK) {
        r->written++;
        printf("kprof: trace %s: %s\n", done->id, folded);
    } else {
        r->failed++;
        printf("kprof: trace %s not written: %s\n", done->id, why);
    }
    fflush(stdout);
}

/* A trace ended: writes its files, then asks kprof_rtrace to clear the
 * flags of its processes (its root's are cleared by the root itself); a
 * part of another node's trace goes there instead. */
static void on_done(void *ctx, const kp_rtrace_done *done)
{
    run *r = ctx;
    if (done->origin) {
        send_part(r, done);
        return;
    }
    /* faster than --slower-than, or one past --count of them: not written */
    if (!done->dropped && !(r->o->slower_than_us && r->written + r->failed >= r->o->count))
        write_trace(r, done);
    /* the process that began a trace clears its own flags (it may already
     * run its next trace); a traced call's process is cleared here */
    size_t first = r->o->mfa ? 0 : 1;
    size_t n = done->n_pids > first ? done->n_pids - first : 0;
    send_pids(r, "untrace", n ? done->pids + first : NULL, n, 0);
}

/* {reached, Pids | all}: processes the send pattern gave the trace flags
 * (following); kprof_rtrace clears them when no trace runs. */
static void on_reached(void *ctx, const erlang_pid *pids, size_t n, int all)
{
    send_pids(ctx, "reached", pids, n, all);
}

static void on_drop(void *ctx, uint32_t count);

static int on_nif_event(void *ctx, const kp_trace_event *ev)
{
    run *r = ctx;
    if (ev->kind == KP_TRACE_OTHER && ev->dropped)
        on_drop(ctx, ev->dropped); /* the NIF's buffer was full */
    else
        kp_rtrace_event(r->rtrace, ev);
    return 0;
}

/* Offers the node's kprof_tracer NIF a socket; from then on the node
 * traces new requests through it (0.4 us a call instead of 2). Failing
 * that, the ip trace port goes on serving: not an error (why is in
 * nif_refused). */
static void start_nif(run *r)
{
    unsigned port;
    int l = kp_loopback_listen(&port);
    if (l < 0)
        return;
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 1);
    ei_x_encode_ulong(&args, port);
    ei_x_encode_empty_list(&args);
    int i = 0;
    char tag[MAXATOMLEN] = "";
    int called = kp_node_rpc(&r->node, "kprof_rtrace", "use_nif", &args, &reply) == 0;
    int ok = called && ei_decode_atom(reply.buff, &i, tag) == 0 && strcmp(tag, "ok") == 0;
    if (called && !ok)
        kp_term_text(reply.buff, 0, "?", r->nif_refused, sizeof r->nif_refused);
    if (ok) {
        /* the NIF connected before the rpc returned */
        int fd = kp_loopback_accept(l, 2000);
        if (fd >= 0 && !(r->nif = kp_nif_reader_create(fd)))
            close(fd);
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    close(l);
}

static int on_event(void *ctx, const char *term, size_t len)
{
    run *r = ctx;
    kp_trace_event ev;
    int rc = kp_trace_decode(term, len, &ev);
    if (rc < 0)
        return -1;
    if (rc == 1)
        kp_rtrace_event(r->rtrace, &ev);
    return 0;
}

static void on_drop(void *ctx, uint32_t count)
{
    run *r = ctx;
    /* events are missing from whatever traces run: cut them all */
    kp_warn("the node dropped %u trace events (kprof fell behind); cutting the running traces",
            count);
    kp_rtrace_close(r->rtrace, NULL, KP_RTRACE_CUT_EVENTS_DROPPED);
}

/* rpc M:F(Args) returning a proplist; decodes port, dir and time. */
/* Whether `reply` is {error, timeout}: kprof_rtrace's server gave its
 * caller no answer in 10 s (kprof_rtrace:call/2). */
static int timed_out(const ei_x_buff *reply)
{
    int i = 0, arity = 0;
    char tag[MAXATOMLEN] = "", why[MAXATOMLEN] = "";
    return ei_decode_tuple_header(reply->buff, &i, &arity) == 0 && arity == 2 &&
           ei_decode_atom(reply->buff, &i, tag) == 0 && strcmp(tag, "error") == 0 &&
           ei_decode_atom(reply->buff, &i, why) == 0 && strcmp(why, "timeout") == 0;
}

/* The one line for timed_out/1: the node, not kprof, is too slow now. */
static void too_slow(const run *r, char *err, size_t err_len)
{
    snprintf(err, err_len,
             "%s is too slow: its request-trace server gave no answer in 10 s (its schedulers or "
             "the host are overloaded); try again when it is less busy",
             r->node.target);
}

static int config_call(run *r, const char *mod, const char *fun, ei_x_buff *args, char *err,
                       size_t err_len)
{
    ei_x_buff reply;
    ei_x_new(&reply);
    int rc = kp_node_rpc(&r->node, mod, fun, args, &reply);
    int i = 0, n, arity;
    long long time = 0;
    if (rc != 0) {
        snprintf(err, err_len, "lost the connection to %s", r->node.target);
        r->lost = 1;
    } else if (timed_out(&reply)) {
        too_slow(r, err, err_len);
        rc = -1;
    } else if (ei_decode_list_header(reply.buff, &i, &n) != 0 || n == 0) {
        char s[512];
        snprintf(err, err_len, "request tracing did not start on %s: %s", r->node.target,
                 kp_term_text(reply.buff, 0, "(no reply)", s, sizeof s));
        rc = -1;
    } else {
        for (int k = 0; k < n && rc == 0; k++) {
            char key[MAXATOMLEN];
            unsigned long v;
            long len;
            if (ei_decode_tuple_header(reply.buff, &i, &arity) != 0 || arity != 2 ||
                ei_decode_atom(reply.buff, &i, key) != 0)
                rc = -1;
            else if (strcmp(key, "port") == 0 && ei_decode_ulong(reply.buff, &i, &v) == 0)
                r->port = (unsigned)v;
            else if (strcmp(key, "time") == 0 && ei_decode_longlong(reply.buff, &i, &time) == 0)
                r->offset = kp_now_ns() - time;
            else if (strcmp(key, "dir") == 0 &&
                     ei_decode_binary(reply.buff, &i, r->dir, &len) == 0 &&
                     (size_t)len < sizeof r->dir)
                r->dir[len] = '\0';
            else if (ei_skip_term(reply.buff, &i) != 0)
                rc = -1;
        }
        if (rc != 0 || !r->port)
            snprintf(err, err_len, "unexpected reply from %s:%s on %s", mod, fun, r->node.target);
        rc = rc != 0 || !r->port ? -1 : 0;
    }
    ei_x_free(&reply);
    return rc;
}

/* Starts the server with this kprof as its collector. */
static int start_external(run *r, char *err, size_t err_len)
{
    ei_x_buff args;
    ei_x_new(&args);
    ei_x_encode_list_header(&args, 1);
    ei_x_encode_pid(&args, &r->node.self);
    ei_x_encode_empty_list(&args);
    int rc = config_call(r, "kprof_rtrace", "start_external", &args, err, err_len);
    ei_x_free(&args);
    snprintf(r->dir, sizeof r->dir, "%s", r->o->output_dir); /* not the node's setting */
    if (rc != 0)
        return rc;
    r->started = 1;
    rc = kp_trace_port_connect(&r->stream, r->node.target, r->port, err, err_len);
    if (rc != 0)
        return rc;
    /* on the node's host, the NIF kprof brings: 0.5 us a call instead of 2-3 */
    char why[512];
    if (kp_nif_bring(&r->node, why, sizeof why) == 0)
        start_nif(r);
    else
        snprintf(r->nif_refused, sizeof r->nif_refused, "%s", why);
    if (r->nif)
        fprintf(stderr, "kprof: events come through kprof's tracer NIF in %s\n", r->node.target);
    else if (r->nif_refused[0])
        fprintf(stderr, "kprof: events come through the node's trace port: %s\n", r->nif_refused);
    return 0;
}

/* {M, F, A} of --mfa at x's index */
static void encode_mfa(ei_x_buff *x, const kp_rtrace_run_options *o)
{
    ei_x_encode_tuple_header(x, 3);
    ei_x_encode_atom(x, o->mfa_module);
    ei_x_encode_atom(x, o->mfa_function);
    ei_x_encode_ulong(x, o->mfa_arity);
}

/* What kprof_rtrace:trace_calls/2 said: `ok` and how calls are traced
 * (printed), or why not (into err). 0 when it said ok. */
static int calls_said(run *r, const ei_x_buff *reply, char *err, size_t err_len)
{
    int i = 0, arity = 0;
    char tag[MAXATOMLEN] = "", how[MAXATOMLEN] = "", why[512] = "";
    if (ei_decode_tuple_header(reply->buff, &i, &arity) == 0 && arity == 2 &&
        ei_decode_atom(reply->buff, &i, tag) == 0 && strcmp(tag, "error") == 0 &&
        ei_decode_tuple_header(reply->buff, &i, &arity) == 0 && arity == 2 &&
        ei_decode_atom(reply->buff, &i, tag) == 0 && strcmp(tag, "usage") == 0 &&
        kp_term_decode_text(reply->buff, &i, why, sizeof why) == 0) {
        snprintf(err, err_len, "%s", why); /* names the option and what to write */
        r->usage = 1;
        return -1;
    }
    if (timed_out(reply)) {
        too_slow(r, err, err_len);
        return -1;
    }
    i = 0;
    if (ei_decode_tuple_header(reply->buff, &i, &arity) != 0 || arity < 2 ||
        ei_decode_atom(reply->buff, &i, tag) != 0 || strcmp(tag, "ok") != 0 ||
        ei_decode_atom(reply->buff, &i, how) != 0) {
        char s[512];
        snprintf(err, err_len, "cannot trace calls of %s on %s: %s", r->o->mfa, r->node.target,
                 kp_term_text(reply->buff, 0, "(no reply)", s, sizeof s));
        return -1;
    }
    if (arity == 3)
        kp_term_text(reply->buff, i, "", why, sizeof why);
    const char *mode = strcmp(how, "follow") == 0
                           ? "each in its process and those its messages reach"
                           : "each in its own process only";
    fprintf(stderr, "kprof: tracing calls of %s, %s%s%s\n", r->o->mfa, mode, why[0] ? ": " : "",
            why);
    return 0;
}

/* With --no-otp-calls, the pair otp_calls => false of a settings map
 * (kprof_rtrace:settings(): read when this trace arms the patterns). */
static void encode_otp_calls(ei_x_buff *x, const kp_rtrace_run_options *o)
{
    if (!o->no_otp_calls)
        return;
    ei_x_encode_atom(x, "otp_calls");
    ei_x_encode_boolean(x, 0);
}

/* kprof_rtrace:trace_calls({M, F, A}, Options). 0 when it said ok. */
static int trace_calls(run *r, char *err, size_t err_len)
{
    const kp_rtrace_run_options *o = r->o;
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 2);
    encode_mfa(&args, o);
    ei_x_encode_map_header(&args, 3 + (o->no_otp_calls != 0));
    encode_otp_calls(&args, o);
    ei_x_encode_atom(&args, "match");
    ei_x_encode_binary(&args, o->match ? o->match : "", o->match ? (long)strlen(o->match) : 0);
    ei_x_encode_atom(&args, "follow");
    ei_x_encode_boolean(&args, !o->no_follow);
    ei_x_encode_atom(&args, "max_duration_ms");
    ei_x_encode_ulong(&args, (unsigned long)(o->duration_us / 1000 + 1000));
    ei_x_encode_empty_list(&args);
    int rc = kp_node_rpc(&r->node, "kprof_rtrace", "trace_calls", &args, &reply);
    if (rc == 0) {
        rc = calls_said(r, &reply, err, err_len);
    } else {
        snprintf(err, err_len, "lost the connection to %s", r->node.target);
        r->lost = 1;
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

/* kprof_rtrace:stop_calls({M, F, A}); the reply is not read */
static void stop_calls(run *r)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 1);
    encode_mfa(&args, r->o);
    ei_x_encode_empty_list(&args);
    kp_node_rpc(&r->node, "kprof_rtrace", "stop_calls", &args, &reply);
    ei_x_free(&args);
    ei_x_free(&reply);
}

/* --pid: begin a trace of that process */
static int begin_pid_trace(run *r, char *id, size_t id_len, char *err, size_t err_len)
{
    ei_x_buff args, reply;
    int rc = start_external(r, err, err_len);
    if (rc != 0)
        return rc;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 2);
    ei_x_encode_string(&args, r->o->pid);
    ei_x_encode_map_header(&args, 1 + (r->o->no_otp_calls != 0));
    encode_otp_calls(&args, r->o);
    ei_x_encode_atom(&args, "max_duration_ms");
    ei_x_encode_ulong(&args, (unsigned long)(r->o->duration_us / 1000 + 1000));
    ei_x_encode_empty_list(&args);
    rc = kp_node_rpc(&r->node, "kprof_rtrace", "trace_pid", &args, &reply);
    int i = 0, arity;
    char tag[MAXATOMLEN];
    erlang_pid pid;
    long len;
    if (rc == 0 && ei_decode_tuple_header(reply.buff, &i, &arity) == 0 && arity == 3 &&
        ei_decode_atom(reply.buff, &i, tag) == 0 && strcmp(tag, "ok") == 0 &&
        ei_decode_binary(reply.buff, &i, id, &len) == 0 && (size_t)len < id_len &&
        ei_decode_pid(reply.buff, &i, &pid) == 0) {
        id[len] = '\0';
        rc = kp_rtrace_open(r->rtrace, id, &pid, kp_now_ns() - r->offset);
        if (rc != 0)
            snprintf(err, err_len, "out of memory");
        else /* the trace runs from here: what a script waits for */
            fprintf(stderr, "kprof: tracing %s as trace %s until --duration ends or Ctrl-C\n",
                    r->o->pid, id);
    } else if (rc == 0 && timed_out(&reply)) {
        too_slow(r, err, err_len);
        rc = -1;
    } else {
        char s[512];
        snprintf(err, err_len, "cannot trace %s on %s: %s", r->o->pid, r->node.target,
                 rc ? "connection lost" : kp_term_text(reply.buff, 0, "(no reply)", s, sizeof s));
        rc = -1;
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

static int loop(run *r, int64_t deadline)
{
    kp_trace_port_handler h = {.ctx = r, .on_event = on_event, .on_drop = on_drop};
    int calls_stopped = 0;
    while (!kp_stop_requested() && kp_now_ns() < deadline) {
        /* enough calls started, or, with --slower-than, written */
        uint64_t done =
            r->o->slower_than_us ? r->written + r->failed : kp_rtrace_adopted(r->rtrace);
        if (r->o->mfa && done >= r->o->count) {
            if (!calls_stopped) { /* no new ones */
                stop_calls(r);
                calls_stopped = 1;
            }
            if (kp_rtrace_running(r->rtrace) == 0)
                break;
        }
        struct pollfd fds[3] = {{.fd = r->stream.fd, .events = POLLIN},
                                {.fd = r->node.fd, .events = POLLIN},
                                {.fd = r->nif ? kp_nif_reader_fd(r->nif) : -1, .events = POLLIN}};
        if (poll(fds, 3, 100) < 0 && errno != EINTR)
            return -1;
        if (fds[2].revents && r->nif) {
            int rc = kp_nif_reader_read(r->nif, on_nif_event, r);
            if (rc <= 0) { /* the NIF went away or sent nonsense: the port still serves */
                if (rc < 0)
                    kp_warn("the node's trace records are malformed; reading them no more");
                kp_nif_reader_free(r->nif);
                r->nif = NULL;
            }
        }
        if (fds[1].revents) {
            erlang_msg msg;
            ei_x_buff x;
            ei_x_new(&x);
            int rc = ei_xreceive_msg_tmo(r->node.fd, &msg, &x, 10);
            if (rc == ERL_MSG && (msg.msgtype == ERL_SEND || msg.msgtype == ERL_REG_SEND))
                take_part(r, x.buff, x.index);
            ei_x_free(&x);
            if (rc == ERL_ERROR && erl_errno != ETIMEDOUT && erl_errno != EAGAIN)
                return -2;
        }
        if (fds[0].revents) {
            int rc = kp_trace_port_read(&r->stream, &h);
            if (rc <= 0)
                return rc;
        }
        kp_rtrace_sweep(r->rtrace, kp_now_ns() - r->offset);
    }
    return 1;
}

/* Connects to the node and, outside a session, makes sure it has this
 * kprof's agent (a session runs the node's own kprof code: loading other
 * code over it would purge the session's processes). Returns KP_EXIT_OK,
 * or the exit code with the error already printed. */
static int attach(run *r)
{
    const kp_rtrace_run_options *o = r->o;
    char err[4096], target[512], cookie[512];
    if (kp_node_name(o->node, target, sizeof target, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_USAGE;
    }
    if (kp_cookie_load(o->cookie_file, cookie, sizeof cookie, err, sizeof err) != 0 ||
        kp_node_connect(&r->node, target, cookie, o->connect_timeout_ms, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_NODE;
    }
    kp_agent agent;
    if (!o->session && kp_agent_load(&agent, &r->node, KP_AGENT_TRACE, err, sizeof err) != 0) {
        kp_error("%s", err);
        kp_node_close(&r->node);
        return KP_EXIT_NODE;
    }
    return KP_EXIT_OK;
}

/* --session: takes the collector's settings from the node's kprof_rtrace
 * server, connects to its trace port and offers the tracer NIF a socket.
 * Returns 0, or nonzero with `err` set. */
static int start_session(run *r, char *err, size_t err_len)
{
    /* other nodes' parts may come from here on, even during a call */
    r->node.on_message = take_part;
    r->node.message_ctx = r;
    ei_x_buff args;
    ei_x_new(&args);
    ei_x_encode_list_header(&args, 1); /* this collector takes other nodes' parts */
    ei_x_encode_pid(&args, &r->node.self);
    ei_x_encode_empty_list(&args);
    int rc = config_call(r, "kprof_rtrace", "collector_config", &args, err, err_len);
    ei_x_free(&args);
    if (rc == 0)
        rc = kp_trace_port_connect(&r->stream, r->node.target, r->port, err, err_len);
    if (rc == 0)
        start_nif(r);
    if (rc == 0 && r->nif_refused[0]) { /* the node's log */
        printf("kprof: traces go through the trace port (the tracer NIF: %s)\n", r->nif_refused);
        fflush(stdout);
    }
    return rc;
}

/* --mfa: starts the server, lets the collector adopt the processes that
 * make the next `count` calls, then sets the call pattern in the node.
 * Returns 0, or nonzero with `err` set. */
static int start_calls(run *r, char *err, size_t err_len)
{
    const kp_rtrace_run_options *o = r->o;
    int rc = start_external(r, err, err_len);
    /* with --slower-than, as many as come: --count bounds those written */
    uint64_t max = o->slower_than_us ? UINT64_MAX : o->count;
    if (rc == 0 && kp_rtrace_adopt(r->rtrace, o->mfa_module, o->mfa_function, o->mfa_arity, max,
                                   o->slower_than_us)) {
        snprintf(err, err_len, "out of memory");
        rc = -1;
    }
    if (rc == 0)
        rc = trace_calls(r, err, err_len);
    return rc;
}

/* Starts what the options ask for: a session's collector, traces of calls,
 * or the trace of one process (its id goes to `id`). Returns 0, or nonzero
 * with `err` set. */
static int start_tracing(run *r, char *id, size_t id_len, char *err, size_t err_len)
{
    if (r->o->session)
        return start_session(r, err, err_len);
    if (r->o->mfa)
        return start_calls(r, err, err_len);
    return begin_pid_trace(r, id, id_len, err, err_len);
}

/* --pid: ends trace `id` in the node, then reads for 200 ms more what the
 * node emitted until then. */
static void end_pid_trace(run *r, const char *id)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 1);
    ei_x_encode_binary(&args, id, (long)strlen(id));
    ei_x_encode_empty_list(&args);
    kp_node_rpc(&r->node, "kprof_rtrace", "end_trace", &args, &reply);
    ei_x_free(&args);
    ei_x_free(&reply);
    loop(r, kp_now_ns() + 200000000);
}

/* Collects until the end of --duration, the end of the last --mfa call,
 * the end of the trace stream or a signal, then ends the traces still
 * running; those are written even when the node or its stream was lost.
 * Returns KP_EXIT_OK, KP_EXIT_NODE (connection lost) or KP_EXIT_DATA
 * (stream broken), the error already printed. */
static int collect(run *r, const char *id)
{
    const kp_rtrace_run_options *o = r->o;
    int code = KP_EXIT_OK;
    int64_t deadline = o->session ? INT64_MAX : kp_now_ns() + (int64_t)o->duration_us * 1000;
    int rc = loop(r, deadline);
    if (rc == -2) {
        kp_error("lost the connection to %s; the traces so far are written", r->node.target);
        r->lost = 1;
        code = KP_EXIT_NODE;
    } else if (rc < 0) {
        kp_error("the trace stream from %s is malformed or broken", r->node.target);
        code = KP_EXIT_DATA;
    } else if (o->mfa) {
        stop_calls(r);
        if (kp_rtrace_running(r->rtrace)) /* calls still running at the end */
            kp_rtrace_close(r->rtrace, NULL, KP_RTRACE_CUT_MAX_DURATION);
    } else if (!o->session) {
        end_pid_trace(r, id);
    }
    kp_rtrace_close(r->rtrace, NULL,
                    o->session ? KP_RTRACE_CUT_COLLECTOR_STOPPED : KP_RTRACE_COMPLETE);
    if (o->mfa && o->slower_than_us)
        fprintf(stderr, "kprof: %llu calls traced, %llu as slow as --slower-than\n",
                (unsigned long long)kp_rtrace_adopted(r->rtrace),
                (unsigned long long)(r->written + r->failed));
    if (!o->session && !r->failed && r->written == 0)
        kp_warn("no trace was written");
    return code;
}

/* Outside a session: stops request tracing in the node (kprof_rtrace:stop/0
 * ends its traces and removes their patterns and flags); the reply is not
 * read. */
static void stop_server(run *r)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_empty_list(&args);
    kp_node_rpc(&r->node, "kprof_rtrace", "stop", &args, &reply);
    ei_x_free(&args);
    ei_x_free(&reply);
}

/* Frees what the run holds; any part may be missing. */
static void teardown(run *r)
{
    kp_rtrace_free(r->rtrace);
    kp_nif_reader_free(r->nif);
    kp_trace_port_close(&r->stream);
    kp_node_close(&r->node);
}

int kp_rtrace_run(const kp_rtrace_run_options *o)
{
    run r = {.o = o, .stream = {.fd = -1}};
    r.node.fd = -1;
    kp_stop_on_signals();
    int code = attach(&r);
    if (code != KP_EXIT_OK)
        return code;
    kp_rtrace_options ro = {.max_events = 1000000,
                            .max_duration_ms = 5000,
                            .max_processes = 16,
                            .frame_flags = o->erlang_names ? KP_FRAMES_ERLANG_NAMES : 0};
    kp_rtrace_handler h = {.ctx = &r, .on_done = on_done, .on_reached = on_reached};
    r.rtrace = kp_rtrace_create(&ro, &h);
    char err[4096], id[64] = "";
    if (!r.rtrace) {
        kp_error("out of memory");
        code = KP_EXIT_FAILURE;
    } else if (start_tracing(&r, id, sizeof id, err, sizeof err) != 0) {
        kp_error("%s", err);
        code = r.usage ? KP_EXIT_USAGE : KP_EXIT_NODE;
    } else {
        code = collect(&r, id);
    }
    /* only what this run started: request tracing that was already running
     * (another kprof, the node's own callers) is left alone. A node too slow
     * to answer in time (exit 4 too) is still there: what this run asked of
     * it (a --mfa's pattern) may be done after the run gave up, and must go
     * with the server */
    if (r.started && !o->session && r.node.fd >= 0 && !r.lost)
        stop_server(&r);
    if (r.failed && code == KP_EXIT_OK)
        code = KP_EXIT_FAILURE;
    teardown(&r);
    return code;
}

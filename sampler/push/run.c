#define _GNU_SOURCE
#include "push/run.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/signals.h"
#include "common/units.h"
#include "node/agent.h"
#include "push/window.h"

#define GRACE_US 2000000u      /* a window closes this long after its end */
#define REATTACH_MIN_MS 1000u  /* a lost node is tried again after 1 s, */
#define REATTACH_MAX_MS 60000u /* doubling up to a minute */
#define MAX_NODES 64
/* A run is renewed (detached and attached again) this often: the frame,
 * stack and process tables of record's loop and of native sampling grow
 * with every process a node ever had, which a node spawning a process per
 * request would make grow for months. A renewal costs a second or two of
 * samples (native sampling learns the node again) in one window. */
#define RENEW_US (3600ull * 1000000u)

/* One node's push: its windows, and what is said of it. */
typedef struct {
    const kp_push_options *o;
    const char *target; /* name@host */
    kp_push_sender *sender;
    kp_push_windows *windows;
    char service_name[256];
    char host[256];
    char release[64];
    uint64_t last_status;
    uint64_t lost_at; /* when the node was lost; 0: attached */
    uint64_t attached_at;
    int attached_once;
    int renew;       /* the run ended to start afresh */
    int attached;    /* in this run */
    char why[1024];  /* why not attached, or why no native sampling */
    char said[1024]; /* why no native sampling, as said last */
    int native_said; /* native sampling said to run, since it last did not */
    uint64_t renew_us;
} push_node;

static void emit(void *ctx, kp_push_closed *closed)
{
    push_node *p = ctx;
    kp_push_window w = {(uint8_t *)closed->request.data, closed->request.len, closed->start_ns,
                        closed->end_ns};
    closed->request = (kp_buf)KP_BUF_INIT; /* the sender's now */
    kp_push_sender_put(p->sender, &w);
}

/* The node's OTP release ("27"), asked once per attach. */
static void ask_release(kp_node *node, char *out, size_t cap)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 1);
    ei_x_encode_atom(&args, "otp_release");
    ei_x_encode_empty_list(&args);
    out[0] = '\0';
    int i = 0, type, size;
    if (kp_node_rpc(node, "erlang", "system_info", &args, &reply) == 0 &&
        ei_get_type(reply.buff, &i, &type, &size) == 0 && type == ERL_STRING_EXT &&
        (size_t)size < cap)
        ei_decode_string(reply.buff, &i, out);
    ei_x_free(&args);
    ei_x_free(&reply);
}

static void extra_attributes(const kp_push_config *c, const char **pairs)
{
    for (size_t k = 0; k < c->n_resource; k++) {
        pairs[2 * k] = c->resource[k].key;
        pairs[2 * k + 1] = c->resource[k].value;
    }
}

static int on_attached(void *ctx, kp_node *node, long os_pid)
{
    push_node *p = ctx;
    ask_release(node, p->release, sizeof p->release);
    if (p->lost_at) {
        fprintf(stderr, "kprof: push: %s is back after %.0f s: sampling again\n", p->target,
                (double)(kp_now_us() - p->lost_at) / 1e6);
        p->lost_at = 0;
    } else if (!p->attached_once) {
        fprintf(stderr, "kprof: push: sampling %s (OTP %s), a window every %.6g s\n", p->target,
                p->release[0] ? p->release : "?", (double)p->o->interval_us / 1e6);
    }
    p->attached_once = 1;
    p->attached = 1;
    p->attached_at = kp_now_us();
    if (p->windows) /* a window opened from now on names the node's pid and release */
        return kp_push_windows_set_process(p->windows, os_pid, p->release[0] ? p->release : NULL);
    const kp_push_config *c = p->o->config;
    const char *extra[2 * KP_PUSH_MAX_ATTRIBUTES];
    extra_attributes(c, extra);
    kp_push_resource r = {
        p->service_name, p->target,    p->host, os_pid, p->release[0] ? p->release : NULL,
        extra,           c->n_resource};
    p->windows =
        kp_push_windows_create(&r, kp_now_us(), p->o->interval_us, GRACE_US, p->o->record.cpu_rate);
    return p->windows ? 0 : -1;
}

static void on_cpu(void *ctx, const kp_native_sample *s)
{
    push_node *p = ctx;
    kp_push_windows_cpu(p->windows, s);
}

static int on_sample(void *ctx, size_t node, uint64_t time_us, const kp_frames *frames,
                     const kp_stacks *stacks, const kp_proc_sample *s)
{
    push_node *p = ctx;
    return kp_push_windows_sample(p->windows, node, time_us, frames, stacks, s);
}

static void status_line(push_node *p)
{
    kp_push_stats st;
    kp_push_window_stats ws;
    kp_push_sender_stats(p->sender, &st);
    kp_push_windows_stats(p->windows, &ws);
    fprintf(stderr,
            "kprof: push %s: %llu windows sent (%.1f kB), %llu retries, %llu dropped, %llu "
            "rejected, %llu waiting; %llu windows without samples\n",
            p->target, (unsigned long long)st.sent, (double)st.bytes_sent / 1e3,
            (unsigned long long)st.retries, (unsigned long long)st.dropped,
            (unsigned long long)st.rejected, (unsigned long long)st.queued,
            (unsigned long long)ws.empty);
}

#define MAX_ASK 1024

static int on_round(void *ctx, kp_node *node, kp_native *native)
{
    push_node *p = ctx;
    /* once per cause, however often the node is attached again */
    if (!native && p->why[0] && strcmp(p->why, p->said) != 0) {
        fprintf(stderr, "kprof: push: %s: no native CPU samples: %s\n", p->target, p->why);
        snprintf(p->said, sizeof p->said, "%s", p->why);
        p->native_said = 0;
    } else if (native && !p->native_said) {
        fprintf(stderr, "kprof: push: %s: CPU sampled natively, %u times a second per thread; %s\n",
                p->target, p->o->record.cpu_rate, kp_native_describe(native));
        p->said[0] = '\0';
        p->native_said = 1;
    }
    uint64_t now = kp_now_us();
    kp_push_windows_close(p->windows, now, 0, emit, p);
    static uint32_t nums[MAX_ASK], serials[MAX_ASK];
    size_t n = kp_push_windows_unnamed(p->windows, nums, serials, MAX_ASK);
    if (n)
        kp_agent_labels(node, nums, serials, n, kp_push_windows_label, p->windows);
    if (p->o->status_every_us && now - p->last_status >= p->o->status_every_us) {
        status_line(p);
        p->last_status = now;
    }
    p->renew = now - p->attached_at >= p->renew_us;
    return p->renew;
}

/* Sleeps `ms`, or less when a stop is asked for. */
static void nap(uint64_t ms)
{
    for (uint64_t slept = 0; slept < ms && !kp_stop_requested(); slept += 100) {
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
}

/* The wait before attaching again after `failures` failures: doubling,
 * capped, with jitter so that many kprofs of a fleet do not call at once. */
static uint64_t reattach_ms(unsigned failures)
{
    uint64_t base = REATTACH_MIN_MS;
    for (unsigned k = 1; k < failures && base < REATTACH_MAX_MS; k++)
        base *= 2;
    if (base > REATTACH_MAX_MS)
        base = REATTACH_MAX_MS;
    return base / 2 + (uint64_t)rand() % (base / 2 + 1);
}

/* The node's part before the '@', as a service name. */
static void default_service(const char *target, char *out, size_t cap)
{
    const char *at = strchr(target, '@');
    snprintf(out, cap, "%.*s", at ? (int)(at - target) : (int)strlen(target), target);
}

/* Pushes node `target` until a stop. */
static int push_one(const kp_push_options *o, const char *target)
{
    static push_node p;
    memset(&p, 0, sizeof p);
    p.o = o;
    p.target = target;
    if (o->service_name)
        snprintf(p.service_name, sizeof p.service_name, "%s", o->service_name);
    else if (o->config->service_name)
        snprintf(p.service_name, sizeof p.service_name, "%s", o->config->service_name);
    else
        default_service(target, p.service_name, sizeof p.service_name);
    if (gethostname(p.host, sizeof p.host) != 0)
        snprintf(p.host, sizeof p.host, "localhost");
    char err[1024];
    p.sender = kp_push_sender_start(o->config, &o->limits, err, sizeof err);
    if (!p.sender) {
        kp_error("%s", err);
        return KP_EXIT_FAILURE;
    }
    char describe[2048];
    kp_push_config_describe(o->config, describe, sizeof describe);
    fprintf(stderr, "kprof: push: sending to %s\n", describe);
    p.last_status = kp_now_us();
    /* KPROF_PUSH_RENEW (a duration): the tests' shorter renewal */
    const char *renew = getenv("KPROF_PUSH_RENEW");
    if (!renew || kp_parse_duration(renew, &p.renew_us) != 0)
        p.renew_us = RENEW_US;
    kp_record_sink sink = {on_sample, on_attached, {on_cpu, &p}, on_round, &p};
    kp_record_options ro = o->record;
    const char *nodes[1] = {target};
    ro.nodes = nodes;
    ro.n_nodes = 1;
    ro.all_nodes = 0;
    ro.duration_us = 0;
    ro.sink = &sink;
    ro.quiet = 1;
    ro.native_off = p.why;
    ro.native_off_len = sizeof p.why;
    int rc = KP_EXIT_OK;
    unsigned failures = 0;
    kp_stop_on_signals();
    while (!kp_stop_requested()) {
        p.why[0] = '\0';
        p.renew = p.attached = 0;
        rc = kp_record_run(&ro);
        if (rc == KP_EXIT_USAGE || rc == KP_EXIT_FAILURE)
            break;
        if (kp_stop_requested())
            break;
        if (rc == KP_EXIT_OK && p.renew)
            continue;
        /* the node is gone or was never there: the window so far goes,
         * and kprof waits for it, one line per problem */
        if (p.windows)
            kp_push_windows_close(p.windows, kp_now_us(), 1, emit, &p);
        if (!p.lost_at) {
            p.lost_at = kp_now_us();
            fprintf(stderr, "kprof: push: %s %s%s%s; trying again with backoff\n", target,
                    p.attached_once ? "was lost" : "is not reachable",
                    !p.attached && p.why[0] ? ": " : "", !p.attached ? p.why : "");
            failures = 0;
        }
        nap(reattach_ms(++failures));
        rc = KP_EXIT_OK;
    }
    if (p.windows)
        kp_push_windows_close(p.windows, kp_now_us(), 1, emit, &p);
    size_t unsent = kp_push_sender_drain(p.sender, o->flush_ms);
    if (p.windows)
        status_line(&p);
    if (unsent)
        fprintf(stderr, "kprof: push: %zu windows of %s could not be sent before the stop\n",
                unsent, target);
    kp_push_sender_free(p.sender);
    kp_push_windows_free(p.windows);
    return rc;
}

/* With --all-nodes, the first node's cluster is looked at again this
 * often, so that a node joining it later is pushed too: within the
 * node's tick time (60 s by default, a quarter of it between ticks), so
 * that the one connection asking stays up. */
#define DISCOVER_US (15ull * 1000000u)

/* Several nodes: a process of its own for each, which the first process
 * starts, waits for and hands SIGTERM and SIGINT on to. */
static pid_t children[MAX_NODES];
static char child_names[MAX_NODES][512];
static volatile sig_atomic_t n_children;
static volatile sig_atomic_t stopping;

static void forward(int sig)
{
    stopping = 1;
    for (sig_atomic_t k = 0; k < n_children; k++)
        if (children[k] > 0)
            kill(children[k], sig);
}

/* Starts the push of `name` in a process of its own; 0, or -1 said. */
static int start_child(const kp_push_options *o, const char *name)
{
    if (n_children == MAX_NODES) {
        kp_error("cannot push %s: already %d nodes, the most one kprof push takes", name,
                 MAX_NODES);
        return -1;
    }
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        _exit(push_one(o, name));
    }
    if (child < 0) {
        kp_error("cannot start the push of %s: %s", name, strerror(errno));
        return -1;
    }
    snprintf(child_names[n_children], sizeof child_names[n_children], "%s", name);
    children[n_children] = child;
    n_children++; /* after the pid: the handler reads what it counts */
    if (stopping) /* a stop that came while it was being started */
        kill(child, SIGTERM);
    return 0;
}

static int pushed(const char *name)
{
    for (sig_atomic_t k = 0; k < n_children; k++)
        if (strcmp(child_names[k], name) == 0)
            return 1;
    return 0;
}

/* --all-nodes: the nodes now connected to the first (over one connection,
 * kept: each new one would be an atom in the node), each not yet pushed
 * started. Quiet when the first node does not answer: its own push says
 * so. */
static void discover(const kp_push_options *o, const char *first, kp_node *node, int *connected)
{
    char cookie[512], err[1024];
    if (!*connected) {
        if (kp_cookie_load(o->record.cookie_file, cookie, sizeof cookie, err, sizeof err) != 0)
            return;
        *connected = kp_node_connect(node, first, cookie, o->record.connect_timeout_ms, err,
                                     sizeof err) == 0;
        memset(cookie, 0, sizeof cookie);
        if (!*connected)
            return;
    }
    static char found[MAX_NODES][512];
    int n = kp_record_connected_nodes(node, found, MAX_NODES);
    if (n < 0) {
        kp_node_close(node);
        memset(node, 0, sizeof *node);
        *connected = 0;
        return;
    }
    for (int k = 0; k < n && !stopping; k++)
        if (!pushed(found[k]) && start_child(o, found[k]) == 0)
            fprintf(stderr, "kprof: push: %s is connected to %s: pushing it too\n", found[k],
                    first);
}

static int push_many(const kp_push_options *o, char names[][512], size_t n)
{
    struct sigaction sa = {.sa_handler = forward};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    for (size_t k = 0; k < n && !stopping; k++)
        if (start_child(o, names[k]) != 0) {
            forward(SIGTERM);
            break;
        }
    kp_node node;
    memset(&node, 0, sizeof node);
    int connected = 0;
    uint64_t next = 0;
    int rc = KP_EXIT_OK;
    for (sig_atomic_t live = n_children; live > 0;) {
        int status;
        pid_t done = waitpid(-1, &status, WNOHANG);
        if (done > 0) {
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : KP_EXIT_FAILURE;
            if (code != KP_EXIT_OK && rc == KP_EXIT_OK)
                rc = code;
            live--;
            continue;
        }
        if (done < 0 && errno != EINTR)
            break;
        uint64_t now = kp_now_us();
        if (o->record.all_nodes && !stopping && now >= next) {
            sig_atomic_t before = n_children;
            discover(o, names[0], &node, &connected);
            live += n_children - before;
            next = now + DISCOVER_US;
        }
        nap(200);
    }
    if (connected)
        kp_node_close(&node);
    return rc;
}

int kp_push_run(const kp_push_options *o)
{
    static char names[MAX_NODES][512];
    char err[1024];
    size_t n = 0;
    for (size_t k = 0; k < o->record.n_nodes && n < MAX_NODES; k++, n++)
        if (kp_node_name(o->record.nodes[k], names[n], sizeof names[n], err, sizeof err) != 0) {
            kp_error("%s", err);
            return KP_EXIT_USAGE;
        }
    srand((unsigned)kp_now_ns() ^ (unsigned)getpid());
    /* --all-nodes: the first node's push starts at once (and waits for
     * it, as any push does), the others as they are found connected */
    return n == 1 && !o->record.all_nodes ? push_one(o, names[0]) : push_many(o, names, n);
}

/* See attach.h. */
#define _GNU_SOURCE
#include "cpu/attach.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "kp/alloc.h"
#include "cpu/current_process.h"
#include "node/agent.h"
#include "node/locate.h"
#include "node/term.h"

/* erlang:system_info(Item) as text; 0, or nonzero. */
static int system_info(kp_node *node, const char *item, char *out, size_t cap)
{
    char err[256];
    return kp_node_call_text(node, "erlang", "system_info", item, out, cap, err, sizeof err);
}

/* log2 of erlang:system_info(process_limit), which the node rounds to a
 * power of two; -1 when it is not one. */
static int table_bits(kp_node *node)
{
    ei_x_buff reply;
    char err[256];
    int rc =
        kp_node_call_atom(node, "erlang", "system_info", "process_limit", &reply, err, sizeof err);
    int i = 0, bits = -1;
    int64_t limit;
    if (rc == 0 && kp_term_decode_int(reply.buff, &i, &limit) == 0 && limit > 0 &&
        (limit & (limit - 1)) == 0)
        for (bits = 0; (1ll << bits) < limit; bits++)
            ;
    ei_x_free(&reply);
    return bits;
}

/* kprof_calibrate's processes in the node. */
typedef struct {
    erlang_pid spinners[2], caller;
    kp_pid_numbers numbers[2];
} calibration;

/* Runs kprof_calibrate:start/0 in the node. Returns 0 or -1. */
static int calibration_start(kp_node *node, calibration *c)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_empty_list(&args);
    int i = 0, arity, len, rc = 0;
    if (kp_node_rpc(node, "kprof_calibrate", "start", &args, &reply) != 0 ||
        ei_decode_tuple_header(reply.buff, &i, &arity) != 0 || arity != 3 ||
        ei_decode_list_header(reply.buff, &i, &len) != 0 || len != 2 ||
        ei_decode_pid(reply.buff, &i, &c->spinners[0]) != 0 ||
        ei_decode_pid(reply.buff, &i, &c->spinners[1]) != 0 ||
        ei_decode_list_header(reply.buff, &i, &len) != 0 || /* the list's tail */
        ei_decode_pid(reply.buff, &i, &c->caller) != 0 ||
        ei_decode_list_header(reply.buff, &i, &len) != 0 || len != 2)
        rc = -1;
    for (int k = 0; rc == 0 && k < 2; k++) {
        int64_t num, serial;
        if (ei_decode_tuple_header(reply.buff, &i, &arity) != 0 || arity != 2 ||
            kp_term_decode_int(reply.buff, &i, &num) != 0 ||
            kp_term_decode_int(reply.buff, &i, &serial) != 0 || num < 0 || serial < 0 ||
            num > UINT32_MAX || serial > UINT32_MAX)
            rc = -1;
        else
            c->numbers[k] = (kp_pid_numbers){(uint32_t)num, (uint32_t)serial};
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

/* erlang:send(Pid, Atom) in the node. */
static void tell(kp_node *node, const erlang_pid *pid, const char *atom)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 2);
    ei_x_encode_pid(&args, pid);
    ei_x_encode_atom(&args, atom);
    ei_x_encode_empty_list(&args);
    (void)kp_node_rpc(node, "erlang", "send", &args, &reply);
    ei_x_free(&args);
    ei_x_free(&reply);
}

static void nap_ms(long ms)
{
    struct timespec wait = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&wait, &wait) != 0 && errno == EINTR)
        ;
}

/* Calibration: how many samples of each phase make enough, how long a
 * phase may last on a busy node, and how often kprof looks. */
#define SPIN_SAMPLES 100
#define BIF_SAMPLES 50
#define PHASE_MAX_MS 1200
#define POLL_MS 20
/* All of it, within the 3 s the calibration's processes live
 * (kprof_calibrate's MAX_MS): on a node whose schedulers are saturated
 * the spinners get a small share, and the spin phase goes on past
 * PHASE_MAX_MS until it has the fewest samples learning takes. */
#define CALIBRATION_MS 2800

/* Runs the calibration's two phases under the learning sampler (the
 * spinners until it has SPIN_SAMPLES of them, then the BIF caller until
 * BIF_SAMPLES), learns, and lets the processes end. */
static int calibrate(kp_native *native, kp_node *node, unsigned table_bits, char *err,
                     size_t err_len)
{
    calibration c;
    if (calibration_start(node, &c) != 0) {
        snprintf(err, err_len, "the node did not run kprof's calibration (kprof_calibrate)");
        return -1;
    }
    unsigned spin = 0, bif = 0;
    long t = 0;
    for (; t < CALIBRATION_MS - 4 * POLL_MS && spin < SPIN_SAMPLES &&
           (t < PHASE_MAX_MS || spin < KP_NATIVE_LEARN_MIN_SPIN);
         t += POLL_MS) {
        nap_ms(POLL_MS);
        kp_native_learn_progress(native, &spin, &bif);
    }
    tell(node, &c.spinners[0], "stop");
    tell(node, &c.spinners[1], "stop");
    tell(node, &c.caller, "go");
    for (long u = 0; u < PHASE_MAX_MS && t + u < CALIBRATION_MS && bif < BIF_SAMPLES;
         u += POLL_MS) {
        nap_ms(POLL_MS);
        kp_native_learn_progress(native, &spin, &bif);
    }
    tell(node, &c.caller, "stop");
    nap_ms(2 * POLL_MS); /* the last samples drained, the spinners still alive */
    int rc = kp_native_learn(native, c.numbers, 2, table_bits, err, err_len);
    tell(node, &c.spinners[0], "done");
    tell(node, &c.spinners[1], "done");
    tell(node, &c.caller, "done");
    return rc;
}

/* How long a fresh sampler is given to meet port work, and to learn from
 * it (each try reads the node's ports again, see port_owner.h). */
#define PORT_SEEN_MS 200
#define PORT_WAIT_MS 1500

kp_native *kp_native_attach(kp_node *node, long own_pid, unsigned rate_hz,
                            const kp_segment_config *segments, const kp_native_observer *observer,
                            const kp_native_tap *tap, unsigned frame_flags, char *err,
                            size_t err_len)
{
    char flavor[32], arch[256];
    if (system_info(node, "emu_flavor", flavor, sizeof flavor) != 0 ||
        system_info(node, "system_architecture", arch, sizeof arch) != 0) {
        snprintf(err, err_len, "cannot ask the node which emulator it runs");
        return NULL;
    }
    if (strncmp(arch, "x86_64", 6) != 0) {
        snprintf(err, err_len, "native sampling knows x86-64 nodes only; this one is %s", arch);
        return NULL;
    }
    if (strcmp(flavor, "jit") != 0) {
        snprintf(err, err_len,
                 "the node runs the %s emulator: native sampling needs the JIT (OTP 24 or "
                 "later on x86-64)",
                 flavor);
        return NULL;
    }
    int bits = table_bits(node);
    if (bits < 0) {
        snprintf(err, err_len,
                 "the node's process limit is not a power of two: kprof cannot tell how "
                 "its pids are laid out");
        return NULL;
    }
    unsigned long long start_ticks;
    long os_pid = kp_node_locate(node, own_pid, &start_ticks, err, err_len);
    if (os_pid < 0)
        return NULL;
    int unreadable = kp_current_process_readable((int)os_pid);
    if (unreadable) {
        snprintf(err, err_len,
                 "kprof may not read the node's memory (process %ld: %s), which tells a "
                 "sample's Erlang process: run kprof as root, or as the node's user with "
                 "kernel.yama.ptrace_scope 0 or CAP_SYS_PTRACE",
                 os_pid, strerror(unreadable));
        return NULL;
    }
    /* the layout is learned while sampling known work (kprof_calibrate) */
    kp_native_options o = {(int)os_pid, (int)own_pid, start_ticks, {KP_PID_LAYOUT_NONE, 0, 0},
                           -1,          rate_hz,      segments,    observer,
                           tap,         frame_flags};
    kp_native *native = kp_native_start(&o, err, err_len);
    if (!native)
        return NULL;
    if (calibrate(native, node, (unsigned)bits, err, err_len) != 0) {
        kp_native_free(native);
        return NULL;
    }
    /* a node busy with port work shows it within a few samples: its ports
     * are learned now, not at the caller's first pauses between rounds (a
     * second apart), which would leave those seconds' port work ownerless */
    for (int ms = 0; ms < PORT_WAIT_MS; ms += POLL_MS) {
        if (kp_native_learn_ports(native, node) != 0)
            break; /* learned, or cannot be */
        if (ms >= PORT_SEEN_MS && !kp_native_port_tasks_seen(native))
            break; /* no port work here */
        nap_ms(POLL_MS);
    }
    return native;
}

/* The processes samples were attributed to, gathered for one call. */
typedef struct {
    uint32_t *nums, *serials;
    size_t n, cap;
} pid_list;

static void add_pid(void *ctx, kp_pid_numbers pid)
{
    pid_list *l = ctx;
    if (l->n == l->cap)
        return; /* the agent's bound per call; the rest stays unnamed */
    l->nums[l->n] = pid.num;
    l->serials[l->n++] = pid.serial;
}

static int label(void *ctx, uint32_t num, uint32_t serial, int registered, const char *text,
                 size_t len)
{
    kp_pid_numbers pid = {num, serial};
    return kp_native_label(ctx, pid, registered, text, len);
}

int kp_native_name_processes(kp_native *native, kp_node *node)
{
    static uint32_t nums[10000], serials[10000];
    pid_list l = {nums, serials, 0, 10000};
    kp_native_each_process(native, add_pid, &l);
    return kp_agent_labels(node, nums, serials, l.n, label, native);
}

/* The node's ports, gathered for one call. */
typedef struct {
    kp_port_fact *facts;
    char (*names)[KP_PORT_NAME_MAX];
    size_t n, cap;
} port_list;

static int add_port(void *ctx, const char *name, size_t len, uint32_t num, uint32_t serial)
{
    port_list *l = ctx;
    if (l->n == l->cap)
        return 0;
    /* what a sample can compare: the name cut as kprof reads it */
    size_t kept = len < KP_PORT_NAME_MAX ? len : KP_PORT_NAME_MAX;
    memcpy(l->names[l->n], name, kept);
    l->facts[l->n] = (kp_port_fact){l->names[l->n], kept, {num, serial}};
    l->n++;
    return 0;
}

#define MAX_PORT_FACTS 4096 /* the agent's bound */

int kp_native_learn_ports(kp_native *native, kp_node *node)
{
    if (!kp_native_ports_wanted(native))
        return 0;
    port_list l = {kp_calloc(MAX_PORT_FACTS, sizeof *l.facts),
                   kp_calloc(MAX_PORT_FACTS, sizeof *l.names), 0, MAX_PORT_FACTS};
    int rc = -1;
    if (l.facts && l.names && kp_agent_ports(node, add_port, &l) == 0)
        rc = kp_native_port_facts(native, l.facts, l.n);
    kp_free(l.facts);
    kp_free(l.names);
    return rc;
}

#define _GNU_SOURCE
#include "node/agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kprof_version.h"
#include "node/agent_modules.h"
#include "node/locate.h"
#include "node/term.h"

/* Refuses a node older than the release the embedded agent was compiled
 * for (its code would not load, or worse, half of it would): 0 if the node
 * can run it, -1 with the reason in err. */
static int release_supported(kp_agent *a, char *err, size_t err_len)
{
    char text[32];
    int rc = kp_node_call_text(a->node, "erlang", "system_info", "otp_release", text, sizeof text,
                               err, err_len);
    if (rc < 0)
        return -1;
    long release = strtol(text, NULL, 10); /* 0 when the reply was not text: let it try */
    if (release > 0 && release < KPROF_AGENT_OLDEST_OTP) {
        snprintf(err, err_len,
                 "node %s runs OTP %ld; this kprof's agent was compiled by OTP %d for "
                 "OTP %d and later: use a kprof built with OTP %ld to %ld",
                 a->node->target, release, KPROF_BUILD_OTP, KPROF_AGENT_OLDEST_OTP, release,
                 release + 2);
        return -1;
    }
    return 0;
}

/* 1 if the node has module `m` loaded with exactly this build's code (a
 * version string would not tell two builds of one version apart), 0 if
 * not, -1 if the connection failed. */
static int module_is_current(kp_agent *a, const kp_agent_module *m, char *err, size_t err_len)
{
    /* erlang:get_module_info/2, a BIF, and not M:module_info(md5): calling
     * a module that is not loaded makes the node search its code path for
     * it, about 80 ms a module on a busy node, before every recording
     * since kprof unloads its code when it leaves */
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 2);
    ei_x_encode_atom(&args, m->name);
    ei_x_encode_atom(&args, "md5");
    ei_x_encode_empty_list(&args);
    int rc = kp_node_call(a->node, "erlang", "get_module_info", &args, &reply, err, err_len);
    ei_x_free(&args);
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
    int rc = kp_node_call_atom(a->node, "code", "soft_purge", module, &reply, err, err_len);
    if (rc == 0) {
        int i = 0;
        char tag[MAXATOMLEN];
        rc = ei_decode_atom(reply.buff, &i, tag) == 0 && strcmp(tag, "true") == 0 ? 1 : 0;
    }
    ei_x_free(&reply);
    return rc;
}

/* Loads the `n` modules `mods` in one code:atomic_load/1: a node loads
 * each module behind a barrier that every scheduler must pass, which on a
 * busy node takes about 0.1 s; one load of all of them pays it once, where
 * a load per module paid it 20 times (2 s before each recording). */
static int load_all(kp_agent *a, const kp_agent_module **mods, size_t n, char *err, size_t err_len)
{
    if (n == 0)
        return 0;
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 1);
    ei_x_encode_list_header(&args, (long)n);
    for (size_t m = 0; m < n; m++) {
        /* kprof_unload tells kprof's code from the node's own by this name:
         * a module of the code path has its file's whole name */
        char file[300];
        snprintf(file, sizeof file, "%s.beam", mods[m]->name);
        ei_x_encode_tuple_header(&args, 3);
        ei_x_encode_atom(&args, mods[m]->name);
        ei_x_encode_string(&args, file);
        ei_x_encode_binary(&args, mods[m]->beam, (long)mods[m]->size);
    }
    ei_x_encode_empty_list(&args);
    ei_x_encode_empty_list(&args);
    int rc = kp_node_call(a->node, "code", "atomic_load", &args, &reply, err, err_len);
    if (rc == 0) {
        int i = 0;
        char tag[MAXATOMLEN];
        if (ei_decode_atom(reply.buff, &i, tag) != 0 || strcmp(tag, "ok") != 0) {
            char what[512];
            kp_term_text(reply.buff, 0, "(unprintable term)", what, sizeof what);
            snprintf(err, err_len, "node %s refused to load kprof's agent modules: %s",
                     a->node->target, what);
            rc = -1;
        }
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    if (rc == 0)
        a->loaded = 1;
    return rc;
}

static int wanted_by(kp_agent_code code, const kp_agent_module *mod)
{
    return (mod->uses >> code) & 1u;
}

/* Loads every embedded module of `code` the node does not have in this
 * build's version. A module whose previous old code some process still
 * runs is not replaced: loading would make the current code old, and the
 * next purge would kill the processes running it (e.g. a request inside
 * kprof:do_apply/3 of the node's own kprof release); the node keeps its
 * version of it. Only the agent itself must be this build's. */
static int load_modules(kp_agent *a, kp_agent_code code, char *err, size_t err_len)
{
    const kp_agent_module *wanted[64];
    size_t n = 0;
    for (size_t m = 0; m < kp_agent_module_count; m++) {
        const kp_agent_module *mod = &kp_agent_modules[m];
        if (!wanted_by(code, mod))
            continue;
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
                snprintf(err, err_len,
                         "an earlier kprof agent's code is still running on %s; "
                         "try again in a few seconds",
                         a->node->target);
                return -1;
            }
            continue;
        }
        if (n == sizeof wanted / sizeof wanted[0]) {
            if (load_all(a, wanted, n, err, err_len) != 0)
                return -1;
            n = 0;
        }
        wanted[n++] = mod;
    }
    return load_all(a, wanted, n, err, err_len);
}

static int node_facts(kp_agent *a, char *err, size_t err_len)
{
    ei_x_buff reply;
    int rc = kp_node_own_pid(a->node, &a->os_pid, err, err_len);
    if (rc != 0)
        return rc;
    rc = kp_node_call_atom(a->node, "erlang", "system_info", "wordsize", &reply, err, err_len);
    if (rc == 0) {
        long w = 8;
        int i = 0;
        ei_decode_long(reply.buff, &i, &w);
        a->wordsize = (unsigned)w;
    }
    ei_x_free(&reply);
    return rc;
}

static void nap_ms(long ms)
{
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* kprof_unload:release(ThisNode): kprof's code leaves the node unless
 * another kprof still holds it. When the unloader answers `unloading', its
 * own module goes once this call has returned: waits for that (at most
 * RELEASE_WAIT_MS), so that a node this kprof leaves holds nothing of it. A
 * lost connection ends it: the unloader then sees a nodedown. */
#define RELEASE_WAIT_MS 2000
#define RELEASE_POLL_MS 20
static void release(kp_node *node)
{
    char answer[32], err[256];
    if (kp_node_call_text(node, "kprof_unload", "release", ei_thisnodename(&node->ec), answer,
                          sizeof answer, err, sizeof err) != 0 ||
        strcmp(answer, "unloading") != 0)
        return;
    for (int waited = 0; waited < RELEASE_WAIT_MS; waited += RELEASE_POLL_MS) {
        char old[16];
        if (kp_node_call_text(node, "erlang", "check_old_code", "kprof_unload", old, sizeof old,
                              err, sizeof err) != 0 ||
            strcmp(old, "true") != 0)
            return;
        nap_ms(RELEASE_POLL_MS);
    }
}

/* kprof_unload:hold(ThisNode): the node keeps kprof's code until this kprof
 * releases it or goes away. 1 when held, 0 when the code must be loaded
 * again first (an earlier kprof's is being removed at this moment), -1 on a
 * lost connection. */
static int hold(kp_agent *a, char *err, size_t err_len)
{
    char answer[32];
    int rc = kp_node_call_text(a->node, "kprof_unload", "hold", ei_thisnodename(&a->node->ec),
                               answer, sizeof answer, err, err_len);
    if (rc < 0)
        return -1;
    return rc == 0 && strcmp(answer, "ok") == 0;
}

/* An earlier kprof's code being removed takes a few ms, at most the
 * unloader's purge deadline (5 s) when a process still runs it. */
#define HOLD_TRIES 60
#define HOLD_RETRY_MS 100

int kp_agent_load(kp_agent *a, kp_node *node, kp_agent_code code, char *err, size_t err_len)
{
    memset(a, 0, sizeof *a);
    a->node = node;
    a->wordsize = 8;
    if (release_supported(a, err, err_len) != 0)
        return -1;
    for (int tries = 1;; tries++) {
        if (load_modules(a, code, err, err_len) != 0)
            return -1;
        int held = hold(a, err, err_len);
        if (held < 0)
            return -1;
        if (held)
            break;
        if (tries == HOLD_TRIES) {
            snprintf(err, err_len,
                     "an earlier kprof's code is still being removed from %s; try again in a "
                     "few seconds",
                     node->target);
            return -1;
        }
        nap_ms(HOLD_RETRY_MS);
    }
    node->on_close = release;
    return node_facts(a, err, err_len);
}

int kp_agent_labels(kp_node *node, const uint32_t *nums, const uint32_t *serials, size_t n,
                    kp_label_fn fn, void *ctx)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    if (n > 10000)
        n = 10000; /* the agent's bound per call */
    ei_x_encode_list_header(&args, 1);
    if (n) {
        ei_x_encode_list_header(&args, (long)n);
        for (size_t k = 0; k < n; k++) {
            ei_x_encode_tuple_header(&args, 2);
            ei_x_encode_ulong(&args, nums[k]);
            ei_x_encode_ulong(&args, serials[k]);
        }
    }
    ei_x_encode_empty_list(&args);
    ei_x_encode_empty_list(&args);
    int rc = kp_node_rpc(node, "kprof_agent", "labels", &args, &reply);
    int i = 0, len;
    if (rc == 0 && ei_decode_list_header(reply.buff, &i, &len) != 0)
        rc = -1;
    for (int k = 0; rc == 0 && k < len; k++) {
        int arity;
        int64_t num, serial;
        char kind[16], text[512];
        if (ei_decode_tuple_header(reply.buff, &i, &arity) != 0 || arity != 4 ||
            kp_term_decode_int(reply.buff, &i, &num) != 0 ||
            kp_term_decode_int(reply.buff, &i, &serial) != 0 ||
            kp_term_decode_atom(reply.buff, &i, kind, sizeof kind) != 0 ||
            kp_term_decode_text(reply.buff, &i, text, sizeof text) != 0 || num < 0 || serial < 0 ||
            num > UINT32_MAX || serial > UINT32_MAX ||
            fn(ctx, (uint32_t)num, (uint32_t)serial, strcmp(kind, "registered") == 0, text,
               strlen(text)) != 0)
            rc = -1;
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

int kp_agent_ports(kp_node *node, kp_port_fn fn, void *ctx)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_empty_list(&args);
    int rc = kp_node_rpc(node, "kprof_agent", "ports", &args, &reply);
    int i = 0, len;
    if (rc == 0 && ei_decode_list_header(reply.buff, &i, &len) != 0)
        rc = -1;
    for (int k = 0; rc == 0 && k < len; k++) {
        int arity;
        uint32_t num, serial;
        char name[256];
        if (ei_decode_tuple_header(reply.buff, &i, &arity) != 0 || arity != 2 ||
            kp_term_decode_text(reply.buff, &i, name, sizeof name) != 0 ||
            kp_term_decode_pid_numbers(reply.buff, &i, &num, &serial) != 0 ||
            fn(ctx, name, strlen(name), num, serial) != 0)
            rc = -1;
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

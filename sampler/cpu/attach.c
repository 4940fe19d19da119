/* See attach.h. */
#define _GNU_SOURCE
#include "cpu/attach.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/agent.h"
#include "node/term.h"

/* The text of file `path` as the node reads it (file:read_file/1). */
static int node_file(kp_node *node, const char *path, char *out, size_t cap)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 1);
    ei_x_encode_string(&args, path);
    ei_x_encode_empty_list(&args);
    int rc = kp_node_rpc(node, "file", "read_file", &args, &reply);
    int i = 0, arity;
    char tag[16];
    if (rc == 0 && (ei_decode_tuple_header(reply.buff, &i, &arity) != 0 || arity != 2 ||
                    kp_term_decode_atom(reply.buff, &i, tag, sizeof tag) != 0 ||
                    strcmp(tag, "ok") != 0 || kp_term_decode_text(reply.buff, &i, out, cap) != 0))
        rc = -1;
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

static int local_file(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = '\0';
    return 0;
}

/* Field 22 of a /proc/PID/stat line: the start time in clock ticks since
 * boot (counted after the command name, which may hold spaces). */
static unsigned long long start_time(const char *stat)
{
    const char *p = strrchr(stat, ')');
    if (!p)
        return 0;
    for (int field = 2; field < 22 && p; field++) /* p: the space before field + 1 */
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Is process `os_pid` here the node? The node reads its own boot id and
 * stat line; both must match what this host says of `os_pid`. */
static int same_process(kp_node *node, long os_pid, char *err, size_t err_len)
{
    char theirs_boot[64], ours_boot[64], theirs_stat[1024], ours_stat[1024], path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", os_pid);
    int readable =
        node_file(node, "/proc/sys/kernel/random/boot_id", theirs_boot, sizeof theirs_boot) == 0 &&
        node_file(node, "/proc/self/stat", theirs_stat, sizeof theirs_stat) == 0;
    if (readable &&
        local_file("/proc/sys/kernel/random/boot_id", ours_boot, sizeof ours_boot) == 0 &&
        strcmp(theirs_boot, ours_boot) == 0 && local_file(path, ours_stat, sizeof ours_stat) == 0 &&
        start_time(ours_stat) != 0 && start_time(ours_stat) == start_time(theirs_stat))
        return 0;
    snprintf(err, err_len,
             "the node's OS process (%ld) is not visible from here (another host, container "
             "or pid namespace): run kprof on the node's host, in its pid namespace",
             os_pid);
    return -1;
}

/* erlang:system_info(Item) as text. */
static int system_info(kp_node *node, const char *item, char *out, size_t cap)
{
    ei_x_buff reply;
    char err[256];
    int rc = kp_node_call_atom(node, "erlang", "system_info", item, &reply, err, sizeof err);
    int i = 0;
    if (rc == 0 && kp_term_decode_text(reply.buff, &i, out, cap) != 0 &&
        (i = 0, kp_term_decode_atom(reply.buff, &i, out, cap) != 0))
        rc = -1;
    ei_x_free(&reply);
    return rc;
}

kp_native *kp_native_attach(kp_node *node, long os_pid, unsigned rate_hz,
                            const kp_segment_config *segments, const kp_native_observer *observer,
                            char *err, size_t err_len)
{
    char flavor[32], arch[256], release[16];
    if (system_info(node, "emu_flavor", flavor, sizeof flavor) != 0 ||
        system_info(node, "system_architecture", arch, sizeof arch) != 0 ||
        system_info(node, "otp_release", release, sizeof release) != 0) {
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
                 "later) started with +JPperf true",
                 flavor);
        return NULL;
    }
    unsigned otp = (unsigned)strtoul(release, NULL, 10);
    kp_pid_numbers probe;
    if (kp_pid_term_decode(0x3, otp, &probe) != 0) {
        snprintf(err, err_len,
                 "native sampling does not know the process layout of OTP %s (it knows 24 "
                 "and 25)",
                 release);
        return NULL;
    }
    if (same_process(node, os_pid, err, err_len) != 0)
        return NULL;
    kp_native_options o = {(int)os_pid, otp, rate_hz, segments, observer};
    return kp_native_start(&o, err, err_len);
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

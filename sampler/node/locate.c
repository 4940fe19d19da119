/* See locate.h. */
#define _GNU_SOURCE
#include "node/locate.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/term.h"

/* What the node reads at `path` with file:FUN/1 (read_file: the file's
 * text; read_link: the link's target), as text. Returns 0 or -1. */
static int node_file(kp_node *node, const char *fun, const char *path, char *out, size_t cap)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 1);
    ei_x_encode_string(&args, path);
    ei_x_encode_empty_list(&args);
    int rc = kp_node_rpc(node, "file", fun, &args, &reply);
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

/* The last pid of the "NSpid:" line of /proc/PID/status: the process's pid
 * in its own, innermost pid namespace; -1 when there is none. */
static long innermost_pid(long pid)
{
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    if (local_file(path, text, sizeof text) != 0)
        return -1;
    const char *line = strstr(text, "\nNSpid:");
    if (!line)
        return -1;
    long last = -1;
    char *p = (char *)line + 7;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        last = v;
        p = end;
    }
    return last;
}

/* Is process `pid` here the node, which reads itself as `own_pid` in pid
 * namespace `ns` ("" unknown), started at `start`? 1 if so, 0 if not, -1
 * when it has the node's pid and start but kprof may not read its
 * namespace (errno says why: another user's process, no CAP_SYS_PTRACE). */
static int is_node(long pid, long own_pid, const char *ns, unsigned long long start)
{
    char path[64], stat[1024], link[128];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    if (local_file(path, stat, sizeof stat) != 0 || start_time(stat) != start)
        return 0;
    long innermost = innermost_pid(pid);
    if (innermost != own_pid && !(pid == own_pid && innermost < 0))
        return 0;
    snprintf(path, sizeof path, "/proc/%ld/ns/pid", pid);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0 && (errno == EACCES || errno == EPERM) && ns[0])
        return -1;
    if (n < 0)
        return ns[0] == '\0'; /* no namespaces to compare: the pid and start time tell */
    link[n] = '\0';
    return strcmp(link, ns) == 0;
}

long kp_node_locate(kp_node *node, long own_pid, unsigned long long *start_ticks, char *err,
                    size_t err_len)
{
    char theirs_boot[64], ours_boot[64], theirs_stat[1024], ns[128];
    if (node_file(node, "read_file", "/proc/sys/kernel/random/boot_id", theirs_boot,
                  sizeof theirs_boot) != 0 ||
        node_file(node, "read_file", "/proc/self/stat", theirs_stat, sizeof theirs_stat) != 0) {
        snprintf(err, err_len,
                 "the node cannot read its own /proc (is /proc mounted where it runs?): kprof "
                 "cannot tell which OS process it is");
        return -1;
    }
    if (local_file("/proc/sys/kernel/random/boot_id", ours_boot, sizeof ours_boot) != 0 ||
        strcmp(theirs_boot, ours_boot) != 0) {
        snprintf(err, err_len,
                 "the node runs on another host (or kernel): run kprof on the node's host");
        return -1;
    }
    unsigned long long start = start_time(theirs_stat);
    /* its pid namespace ("pid:[4026531836]"); "" when it cannot tell */
    if (node_file(node, "read_link", "/proc/self/ns/pid", ns, sizeof ns) != 0)
        ns[0] = '\0';
    *start_ticks = start;
    int same = start ? is_node(own_pid, own_pid, ns, start) : 0;
    if (same > 0)
        return own_pid;
    long denied = same < 0 ? own_pid : -1;
    DIR *proc = opendir("/proc");
    long found = -1;
    struct dirent *e;
    while (start && proc && found < 0 && (e = readdir(proc)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0 || pid == own_pid)
            continue;
        int is = is_node(pid, own_pid, ns, start);
        if (is > 0)
            found = pid;
        else if (is < 0)
            denied = pid;
    }
    if (proc)
        closedir(proc);
    if (found < 0 && denied > 0)
        snprintf(err, err_len,
                 "kprof may not inspect process %ld, which may be the node (its pid "
                 "namespace: permission denied): run kprof as root, or as the node's user "
                 "with CAP_SYS_PTRACE",
                 denied);
    else if (found < 0)
        snprintf(err, err_len,
                 "the node's OS process (%ld in its pid namespace) is not visible from here "
                 "(a container whose processes this pid namespace cannot see): run kprof "
                 "on the host, or in the node's container",
                 own_pid);
    return found;
}

int kp_node_own_pid(kp_node *node, long *pid, char *err, size_t err_len)
{
    char text[32];
    int rc = kp_node_call_text(node, "os", "getpid", NULL, text, sizeof text, err, err_len);
    *pid = rc == 0 ? strtol(text, NULL, 10) : 0;
    return rc < 0 ? -1 : 0;
}

#define _GNU_SOURCE
#include "node/nif.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node/locate.h"
#include "node/nif_embed.h"
#include "node/term.h"

/* kprof_tracer:loaded() on the node: 1 if true, 0 if anything else (false,
 * or a badrpc when the module is missing: the caller's contract says it is
 * there, and then load/2 says what is wrong), -1 on a lost connection. */
static int nif_loaded(kp_node *node, char *why, size_t why_len)
{
    ei_x_buff reply;
    int rc = kp_node_call_atom(node, "kprof_tracer", "loaded", NULL, &reply, why, why_len);
    if (rc == 0) {
        int i = 0;
        char tag[MAXATOMLEN];
        rc = kp_term_decode_atom(reply.buff, &i, tag, sizeof tag) == 0 && strcmp(tag, "true") == 0;
    }
    ei_x_free(&reply);
    return rc;
}

/* Writes the embedded .so to `path`, readable by all. Returns 0, or -1 with
 * `why` set. */
static int write_nif(const char *path, char *why, size_t why_len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, why_len, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    size_t done = 0;
    int rc = 0;
    /* the mode again: open's was cut by the umask */
    if (fchmod(fd, 0644) != 0)
        rc = -1;
    while (rc == 0 && done < kp_nif_so_size) {
        ssize_t n = write(fd, kp_nif_so + done, kp_nif_so_size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = -1;
        else
            done += (size_t)n;
    }
    if (rc != 0)
        snprintf(why, why_len, "cannot write %s: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == 0) {
        snprintf(why, why_len, "cannot write %s: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* kprof_tracer:load(Path, Md5) on the node. Returns 0 when it answered ok,
 * else -1 with `why` set. */
static int load_on_node(kp_node *node, const char *path, char *why, size_t why_len)
{
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 2);
    ei_x_encode_string(&args, path);
    ei_x_encode_binary(&args, kp_nif_so_md5, 16);
    ei_x_encode_empty_list(&args);
    int rc = kp_node_call(node, "kprof_tracer", "load", &args, &reply, why, why_len);
    if (rc == 0) {
        int i = 0, arity;
        char tag[MAXATOMLEN];
        if (kp_term_decode_atom(reply.buff, &i, tag, sizeof tag) == 0 && strcmp(tag, "ok") == 0)
            goto out;
        rc = -1;
        char what[512];
        kp_term_text(reply.buff, 0, "(unprintable term)", what, sizeof what);
        /* {error, {not_same_host, Why}}: the node did not find our bytes */
        i = 0;
        if (ei_decode_tuple_header(reply.buff, &i, &arity) == 0 && arity == 2 &&
            ei_skip_term(reply.buff, &i) == 0 &&
            ei_decode_tuple_header(reply.buff, &i, &arity) == 0 && arity == 2 &&
            kp_term_decode_atom(reply.buff, &i, tag, sizeof tag) == 0 &&
            strcmp(tag, "not_same_host") == 0) {
            char file_why[256];
            kp_term_text(reply.buff, i, "?", file_why, sizeof file_why);
            snprintf(why, why_len,
                     "node %s cannot read the tracer NIF kprof wrote to %s (%s): it runs on "
                     "another host, or does not see this host's /tmp",
                     node->target, path, file_why);
        } else {
            snprintf(why, why_len, "node %s did not load kprof's tracer NIF: %s", node->target,
                     what);
        }
    }
out:
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

int kp_nif_bring(kp_node *node, char *why, size_t why_len)
{
    int loaded = nif_loaded(node, why, why_len);
    if (loaded != 0)
        return loaded > 0 ? 0 : -1;
    /* the node's root as this host sees it: "" for this host's, where a
     * node that cannot be located (another host) is told to look, and
     * fails with a reason naming that */
    char root[64] = "", dir[96], path[128];
    long own_pid, host_pid;
    unsigned long long start;
    char ignored[256];
    if (kp_node_own_pid(node, &own_pid, why, why_len) != 0)
        return -1;
    if (own_pid > 0 &&
        (host_pid = kp_node_locate(node, own_pid, &start, ignored, sizeof ignored)) > 0)
        snprintf(root, sizeof root, "/proc/%ld/root", host_pid);
    snprintf(dir, sizeof dir, "%s/tmp/kprof-nif-XXXXXX", root);
    if (!mkdtemp(dir)) {
        snprintf(why, why_len, "cannot create a directory under %s/tmp: %s", root, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/kprof_tracer.so", dir);
    int rc = -1;
    /* mkdtemp made it 0700: the node may run as another user */
    if (chmod(dir, 0755) != 0)
        snprintf(why, why_len, "cannot make %s readable: %s", dir, strerror(errno));
    else if (write_nif(path, why, why_len) == 0)
        rc = load_on_node(node, path + strlen(root), why, why_len);
    /* dlopen keeps its mapping of the file: the node needs it no more */
    unlink(path);
    rmdir(dir);
    return rc;
}

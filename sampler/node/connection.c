#define _GNU_SOURCE
#include "node/connection.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "node/term.h"

/* The line after the one `line` is in, or NULL after the last. */
static const char *next_line(const char *line)
{
    const char *nl = strchr(line, '\n');
    return nl && nl[1] ? nl + 1 : NULL;
}

/* The value after "-setcookie" on a line of a vm.args text: 1 found (in
 * `cookie`), 0 no such line, -1 one that holds no usable value (in `err`). */
static int vm_args_cookie(const char *text, const char *path, char *cookie, size_t cap, char *err,
                          size_t err_len)
{
    for (const char *line = *text ? text : NULL; line; line = next_line(line)) {
        line += strspn(line, " \t");
        if (strncmp(line, "-setcookie", 10) != 0 || !strchr(" \t", line[10]))
            continue;
        const char *v = line + 10 + strspn(line + 10, " \t");
        size_t n = strcspn(v, " \t\r\n#");
        if (n >= 2 && (v[0] == '\'' || v[0] == '"') && v[n - 1] == v[0]) {
            v++; /* erl takes the quotes off as a shell does */
            n -= 2;
        }
        if (n == 0 || n >= cap || v[0] == '$') {
            snprintf(err, err_len,
                     "%s sets the cookie with '-setcookie %.*s', which kprof cannot read "
                     "(filled in when the release starts?): set KPROF_COOKIE to the node's cookie",
                     path, (int)(n > 64 ? 64 : n), v);
            return -1;
        }
        memcpy(cookie, v, n);
        cookie[n] = '\0';
        return 1;
    }
    return 0;
}

int kp_cookie_parse(const char *text, const char *path, char *cookie, size_t cap, char *err,
                    size_t err_len)
{
    int found = vm_args_cookie(text, path, cookie, cap, err, err_len);
    if (found != 0)
        return found > 0 ? 0 : -1;
    /* a vm.args that sets no cookie: the node reads its user's cookie file */
    for (const char *line = *text ? text : NULL; line; line = next_line(line)) {
        if (line[strspn(line, " \t")] == '-') {
            snprintf(err, err_len,
                     "%s is a vm.args without -setcookie: the node uses the .erlang.cookie in its "
                     "user's home; pass that file with --cookie-file",
                     path);
            return -1;
        }
    }
    size_t n = strcspn(text, "\r\n");
    while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\t'))
        n--;
    if (n == 0) {
        snprintf(err, err_len, "the cookie file %s is empty", path);
        return -1;
    }
    if (n >= cap) {
        snprintf(err, err_len, "the cookie in %s is longer than %zu bytes", path, cap - 1);
        return -1;
    }
    memcpy(cookie, text, n);
    cookie[n] = '\0';
    return 0;
}

int kp_cookie_load(const char *cookie_file, char *cookie, size_t cap, char *err, size_t err_len)
{
    const char *env = getenv("KPROF_COOKIE");
    if (!cookie_file && env && *env) {
        snprintf(cookie, cap, "%s", env);
        return 0;
    }
    char path[4096];
    if (cookie_file) {
        snprintf(path, sizeof path, "%s", cookie_file);
    } else {
        const char *home = getenv("HOME");
        snprintf(path, sizeof path, "%s/.erlang.cookie", home ? home : "");
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len,
                 "cannot read the cookie file %s: %s; pass --cookie-file FILE or set KPROF_COOKIE",
                 path, strerror(errno));
        return -1;
    }
    /* a cookie file, or a release's vm.args (they are small: a bigger file
     * is neither) */
    char text[16384];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    return kp_cookie_parse(text, path, cookie, cap, err, err_len);
}

int kp_node_name(const char *given, char *out, size_t cap, char *err, size_t err_len)
{
    const char *at = strchr(given, '@');
    if (!*given || at == given || (at && (!at[1] || strchr(at + 1, '@')))) {
        snprintf(err, err_len, "invalid node name '%s': use NAME@HOST or NAME", given);
        return -1;
    }
    for (const char *p = given; *p && p != at; p++) {
        if (!(*p == '_' || *p == '-' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9'))) {
            snprintf(err, err_len,
                     "invalid node name '%s': the part before '@' may hold letters, "
                     "digits, '_' and '-'",
                     given);
            return -1;
        }
    }
    if (at) {
        snprintf(out, cap, "%s", given);
        return 0;
    }
    char host[256];
    if (gethostname(host, sizeof host) != 0) {
        snprintf(err, err_len, "cannot read this machine's host name: %s", strerror(errno));
        return -1;
    }
    host[sizeof host - 1] = '\0';
    char *dot = strchr(host, '.');
    if (dot)
        *dot = '\0';
    snprintf(out, cap, "%s@%s", given, host);
    return 0;
}

/* 1 if something listens on host:port (connect within timeout), 0 if refused
 * or unreachable. */
static int port_open(const struct addrinfo *ai, int port, unsigned timeout_ms)
{
    for (; ai; ai = ai->ai_next) {
        struct sockaddr_storage sa;
        memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
        if (sa.ss_family == AF_INET)
            ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)port);
        else if (sa.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)port);
        else
            continue;
        int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int ok = 0;
        if (connect(fd, (struct sockaddr *)&sa, ai->ai_addrlen) == 0) {
            ok = 1;
        } else if (errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            int soerr = 0;
            socklen_t len = sizeof soerr;
            if (poll(&p, 1, (int)timeout_ms) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
                ok = 1;
        }
        close(fd);
        if (ok)
            return 1;
    }
    return 0;
}

/* Asks epmd on `ai`'s host whether `alive` is registered (PORT_PLEASE2_REQ).
 * Returns 1 yes, 0 no, -1 could not ask. */
static int epmd_knows(const struct addrinfo *ai, const char *alive, unsigned timeout_ms)
{
    for (; ai; ai = ai->ai_next) {
        struct sockaddr_storage sa;
        memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
        if (sa.ss_family == AF_INET)
            ((struct sockaddr_in *)&sa)->sin_port = htons(4369);
        else if (sa.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&sa)->sin6_port = htons(4369);
        else
            continue;
        int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&sa, ai->ai_addrlen) != 0) {
            close(fd);
            continue;
        }
        unsigned char req[300];
        size_t n = strlen(alive);
        if (n > 255) {
            close(fd);
            return -1;
        }
        req[0] = (unsigned char)((n + 1) >> 8);
        req[1] = (unsigned char)(n + 1);
        req[2] = 122; /* PORT_PLEASE2_REQ */
        memcpy(req + 3, alive, n);
        unsigned char resp[2];
        int known = -1;
        if (write(fd, req, n + 3) == (ssize_t)(n + 3) && read(fd, resp, 2) == 2 && resp[0] == 119)
            known = resp[1] == 0;
        close(fd);
        return known;
    }
    return -1;
}

int kp_node_connect(kp_node *node, const char *target, const char *cookie, unsigned timeout_ms,
                    char *err, size_t err_len)
{
    memset(node, 0, sizeof *node);
    node->fd = -1;
    snprintf(node->target, sizeof node->target, "%s", target);
    const char *host = strchr(target, '@') + 1;

    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, NULL, &hints, &ai);
    if (gai != 0) {
        snprintf(err, err_len, "unknown host '%s' in node name %s: %s", host, target,
                 gai_strerror(gai));
        return -1;
    }
    int epmd = port_open(ai, 4369, timeout_ms);
    char alive_name[256];
    snprintf(alive_name, sizeof alive_name, "%.*s", (int)(strchr(target, '@') - target), target);
    int known = epmd ? epmd_knows(ai, alive_name, timeout_ms) : -1;
    freeaddrinfo(ai);
    if (!epmd) {
        snprintf(err, err_len,
                 "epmd is not running on %s (nothing listens on port 4369): is node %s started?",
                 host, target);
        return -1;
    }
    if (known == 0) {
        snprintf(err, err_len,
                 "no node named '%s' is registered with epmd on %s; check the "
                 "name ('epmd -names' lists them)",
                 alive_name, host);
        return -1;
    }

    if (ei_init() != 0) {
        snprintf(err, err_len, "erl_interface failed to initialise");
        return -1;
    }
    /* our name shares the target's host part, so short and long names both
     * work: "kprof_<pid>@host"; later connections of the same kprof (kprof
     * push attaching again) "kprof_<pid>_<n>@host", n from 1 to 3 and round
     * again, as the node may not have let go of the last one yet and would
     * refuse the same name: 4 names at most, as each is an atom the node
     * keeps for good */
    static unsigned connections;
    char alive[64], full[600];
    unsigned k = connections++ % 4;
    if (k == 0)
        snprintf(alive, sizeof alive, "kprof_%ld", (long)getpid());
    else
        snprintf(alive, sizeof alive, "kprof_%ld_%u", (long)getpid(), k);
    snprintf(full, sizeof full, "%s@%s", alive, host);
    struct in_addr addr;
    addr.s_addr = htonl(INADDR_LOOPBACK);
    unsigned creation = (unsigned)time(NULL) + 1u;
    if (ei_connect_xinit(&node->ec, host, alive, full, (Erl_IpAddr)&addr, cookie, creation) < 0) {
        snprintf(err, err_len, "cannot set up the C node %s (host name too long?)", full);
        return -1;
    }
    int fd = ei_connect_tmo(&node->ec, (char *)target, timeout_ms);
    if (fd < 0) {
        int e = erl_errno;
        if (e == ETIMEDOUT)
            snprintf(err, err_len,
                     "timed out connecting to %s after %u ms; raise "
                     "--connect-timeout or check the network",
                     target, timeout_ms);
        else
            snprintf(err, err_len,
                     "node %s refused the connection: wrong cookie? (pass "
                     "--cookie-file FILE or set KPROF_COOKIE)",
                     target);
        return -1;
    }
    node->fd = fd;
    node->self = *ei_self(&node->ec);
    return 0;
}

void kp_node_close(kp_node *node)
{
    void (*on_close)(kp_node *) = node->on_close;
    node->on_close = NULL;
    if (on_close && node->fd >= 0)
        on_close(node);
    if (node->fd >= 0) {
        ei_close_connection(node->fd);
        node->fd = -1;
    }
}

/* Whether `x` holds {rex, Reply}; *at is then Reply's offset. */
static int is_rex(const ei_x_buff *x, int *at)
{
    int i = 0, version, arity;
    char tag[MAXATOMLEN];
    if (ei_decode_version(x->buff, &i, &version) != 0 ||
        ei_decode_tuple_header(x->buff, &i, &arity) != 0 || arity != 2 ||
        ei_decode_atom(x->buff, &i, tag) != 0 || strcmp(tag, "rex") != 0)
        return 0;
    *at = i;
    return 1;
}

int kp_node_rpc(kp_node *node, const char *mod, const char *fun, const ei_x_buff *args,
                ei_x_buff *reply)
{
    if (ei_rpc_to(&node->ec, node->fd, (char *)mod, (char *)fun, args->buff, args->index) < 0)
        return -1;
    for (;;) {
        erlang_msg msg;
        int rc = ei_rpc_from(&node->ec, node->fd, ERL_NO_TIMEOUT, &msg, reply);
        if (rc == ERL_TICK)
            continue;
        if (rc != ERL_MSG)
            return -1;
        /* a link or exit signal carries no message */
        if (msg.msgtype != ERL_SEND && msg.msgtype != ERL_REG_SEND)
            continue;
        int at;
        if (is_rex(reply, &at)) { /* the reply alone, at the buffer's start */
            reply->index -= at;
            memmove(reply->buff, reply->buff + at, (size_t)reply->index);
            return 0;
        }
        if (node->on_message)
            node->on_message(node->message_ctx, reply->buff, reply->index);
    }
}

int kp_node_call(kp_node *node, const char *mod, const char *fun, const ei_x_buff *args,
                 ei_x_buff *reply, char *err, size_t err_len)
{
    if (kp_node_rpc(node, mod, fun, args, reply) != 0) {
        snprintf(err, err_len, "lost the connection to %s during %s:%s", node->target, mod, fun);
        return -1;
    }
    return 0;
}

int kp_node_call_atom(kp_node *node, const char *mod, const char *fun, const char *atom,
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
    int rc = kp_node_call(node, mod, fun, &args, reply, err, err_len);
    ei_x_free(&args);
    return rc;
}

int kp_node_call_text(kp_node *node, const char *mod, const char *fun, const char *atom, char *out,
                      size_t cap, char *err, size_t err_len)
{
    ei_x_buff reply;
    int rc = kp_node_call_atom(node, mod, fun, atom, &reply, err, err_len);
    int i = 0;
    if (rc == 0 && kp_term_decode_text(reply.buff, &i, out, cap) != 0 &&
        (i = 0, kp_term_decode_atom(reply.buff, &i, out, cap) != 0)) {
        if (cap)
            out[0] = '\0';
        snprintf(err, err_len, "unexpected reply from %s:%s on %s", mod, fun, node->target);
        rc = 1;
    }
    ei_x_free(&reply);
    return rc;
}

int kp_node_clock_offset(kp_node *node, int64_t *offset_us, char *err, size_t err_len)
{
    uint64_t best_rtt = UINT64_MAX;
    for (int k = 0; k < 3; k++) {
        ei_x_buff reply;
        uint64_t t0 = kp_now_us();
        int rc = kp_node_call_atom(node, "erlang", "monotonic_time", "microsecond", &reply, err,
                                   err_len);
        uint64_t t1 = kp_now_us();
        int i = 0;
        int64_t node_now;
        if (rc == 0 && kp_term_decode_int(reply.buff, &i, &node_now) != 0) {
            snprintf(err, err_len, "unexpected reply from erlang:monotonic_time/1 on %s",
                     node->target);
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

#define _GNU_SOURCE
#include "node/trace_port.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kp/alloc.h"

#define MAX_FRAME (64u << 20) /* one event: a huge return value at most */
#define READ_ROUNDS 64        /* then give the caller's loop a turn */

int kp_trace_port_connect(kp_trace_port *s, const char *target, unsigned port, char *err,
                          size_t err_len)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->cap = 1 << 20;
    s->buf = kp_malloc(s->cap);
    if (!s->buf) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    const char *host = strchr(target, '@');
    host = host ? host + 1 : "localhost";
    char service[16];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        snprintf(err, err_len, "cannot resolve %s for the trace port: %s", host, gai_strerror(rc));
        return -1;
    }
    for (struct addrinfo *a = res; a && s->fd < 0; a = a->ai_next) {
        s->fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s->fd >= 0 && connect(s->fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(s->fd);
            s->fd = -1;
        }
    }
    freeaddrinfo(res);
    if (s->fd < 0) {
        snprintf(err, err_len,
                 "cannot connect to the trace port %s:%u of the node: %s (a "
                 "firewall between kprof and the node?)",
                 host, port, strerror(errno));
        return -1;
    }
    return 0;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int consume(kp_trace_port *s, const kp_trace_port_handler *h)
{
    size_t at = 0;
    while (s->len - at >= 5) {
        const unsigned char *p = (const unsigned char *)s->buf + at;
        uint32_t n = be32(p + 1);
        if (p[0] == 1) {
            if (h->on_drop)
                h->on_drop(h->ctx, n);
            at += 5;
            continue;
        }
        if (p[0] != 0 || n > MAX_FRAME)
            return -1;
        if (s->len - at - 5 < n) {
            if (n + 5 > s->cap) { /* grow for one big event */
                char *bigger = kp_realloc(s->buf, n + 5);
                if (!bigger)
                    return -1;
                s->buf = bigger;
                s->cap = n + 5;
            }
            break;
        }
        if (h->on_event(h->ctx, s->buf + at + 5, n) != 0)
            return -1;
        at += 5 + n;
    }
    memmove(s->buf, s->buf + at, s->len - at);
    s->len -= at;
    return 0;
}

int kp_trace_port_read(kp_trace_port *s, const kp_trace_port_handler *h)
{
    for (int rounds = 0; rounds < READ_ROUNDS; rounds++) {
        ssize_t n = recv(s->fd, s->buf + s->len, s->cap - s->len, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0)
            return n == 0 ? 0 : -1;
        s->len += (size_t)n;
        if (consume(s, h) != 0)
            return -1;
    }
    return 1;
}

void kp_trace_port_close(kp_trace_port *s)
{
    if (s->fd >= 0)
        close(s->fd);
    kp_free(s->buf);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

int kp_loopback_listen(unsigned *port)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) != 0) {
        if (l >= 0)
            close(l);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return l;
}

int kp_loopback_accept(int listener, int timeout_ms)
{
    struct pollfd p = {.fd = listener, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) != 1)
        return -1;
    return accept4(listener, NULL, NULL, SOCK_CLOEXEC);
}

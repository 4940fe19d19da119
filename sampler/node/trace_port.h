/* The client side of the ip trace port of runtime_tools (trace_ip_drv),
 * which both tier tracing and request traces use as their tracer: a TCP
 * stream of frames, each 1 type byte (0: a term_to_binary event; 1: a drop
 * notice) and a 4-byte big-endian length (or, for a drop notice, the number
 * of events the port dropped because its queue was full). */
#ifndef KP_NODE_TRACE_PORT_H
#define KP_NODE_TRACE_PORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int fd;
    char *buf;
    size_t len, cap;
} kp_trace_port;

typedef struct {
    void *ctx;
    /* one event's term_to_binary bytes; return 0 to go on, -1 to stop with
     * an error */
    int (*on_event)(void *ctx, const char *term, size_t len);
    /* the port dropped `count` events */
    void (*on_drop)(void *ctx, uint32_t count);
} kp_trace_port_handler;

/* Connects to `port` on the host of node `target` ("name@host"). Returns 0,
 * or -1 with one sentence in `err`. */
int kp_trace_port_connect(kp_trace_port *stream, const char *target, unsigned port, char *err,
                          size_t err_len);

/* Reads what is available now (without blocking) and hands every complete
 * frame to `handler`. Returns 1 while the stream is open, 0 at its end (the
 * port was closed), -1 for a read error, a malformed frame or a handler's
 * error. */
int kp_trace_port_read(kp_trace_port *stream, const kp_trace_port_handler *handler);

void kp_trace_port_close(kp_trace_port *stream);

/* The other way round, for the kprof_tracer NIF, which connects to kprof:
 * a socket listening on 127.0.0.1 at a port the kernel picks (in *port).
 * Returns its descriptor, or -1. */
int kp_loopback_listen(unsigned *port);

/* The first connection to `listener` within `timeout_ms`: its descriptor
 * (close-on-exec), or -1. */
int kp_loopback_accept(int listener, int timeout_ms);

#endif

/* The stream of the kprof_tracer NIF (erlang_agent/c_src/kprof_tracer.c):
 * compact binary records, decoded into request-trace events (rtrace.h). */
#ifndef KP_NIF_STREAM_H
#define KP_NIF_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "trace/collect.h"

typedef struct kp_nif_stream kp_nif_stream;

/* A reader of the connected socket `fd` (owned from now on), or NULL. */
kp_nif_stream *kp_nif_stream_create(int fd);
void kp_nif_stream_free(kp_nif_stream *stream);
int kp_nif_stream_fd(const kp_nif_stream *stream);

/* Reads what is there now and hands each event to `on_event`. Returns 1
 * while open, 0 at its end, -1 for a read error or a malformed record. */
int kp_nif_stream_read(kp_nif_stream *stream, int (*on_event)(void *ctx, const kp_rt_event *ev),
                       void *ctx);

#endif

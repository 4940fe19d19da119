/* The stream of the kprof_tracer NIF (erlang_agent/c_src/kprof_tracer.c):
 * compact binary records (their layout is kprof_tracer_records.h, shared
 * with the NIF), decoded into trace events (node/trace_event.h). */
#ifndef KP_NODE_NIF_READER_H
#define KP_NODE_NIF_READER_H

#include <stddef.h>
#include <stdint.h>

#include "node/trace_event.h"

typedef struct kp_nif_reader kp_nif_reader;

/* Takes one event; returns 0 to go on, anything else to stop with an error. */
typedef int (*kp_event_fn)(void *ctx, const kp_trace_event *ev);

/* A reader of the connected socket `fd` (owned from now on; -1 for none,
 * to use kp_nif_reader_feed), or NULL when out of memory. */
kp_nif_reader *kp_nif_reader_create(int fd);
void kp_nif_reader_free(kp_nif_reader *stream);
int kp_nif_reader_fd(const kp_nif_reader *stream);

/* Reads what is there now and hands each event to `on_event`. Returns 1
 * while open, 0 at its end, -1 for a read error or a malformed record. */
int kp_nif_reader_read(kp_nif_reader *stream, kp_event_fn on_event, void *ctx);

/* Decodes `n` bytes as if they came next on the socket: complete records
 * go to `on_event`, an incomplete last one waits for more. Returns 0, or -1
 * for a malformed record or an error of `on_event` (the reader is then
 * unusable). For tests and fuzzing. */
int kp_nif_reader_feed(kp_nif_reader *stream, const void *data, size_t n, kp_event_fn on_event,
                       void *ctx);

/* Drops the bytes of an incomplete record, so that the next bytes fed start
 * a stream of their own (tests and fuzzing feed many streams to one reader:
 * its id tables take about 100 MB of address space). Ids keep their last
 * definitions; a well-formed stream defines each before using it. */
void kp_nif_reader_restart(kp_nif_reader *stream);

#endif

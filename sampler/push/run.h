/* `kprof push`: profiles nodes without end and sends each node's window
 * of samples every interval as one OTLP profiles export (push/window.h),
 * through a sender that never holds sampling up (push/sender.h).
 *
 * Sampling is kprof record's own loop (record/run.h) with the windows as
 * its sink. A node that is not there yet, stops or restarts is attached
 * again, with backoff, and the gap is said; SIGTERM and SIGINT send the
 * last, partial window within a bounded time and end with exit 0. */
#ifndef KP_PUSH_RUN_H
#define KP_PUSH_RUN_H

#include <stdint.h>

#include "push/config.h"
#include "push/sender.h"
#include "record/run.h"

typedef struct {
    /* nodes, cookie, selection, rates; its sink and quiet are push's */
    kp_record_options record;
    uint64_t interval_us;     /* a window */
    uint64_t status_every_us; /* the status line's period; 0: none */
    uint64_t flush_ms;        /* the last windows' time to go, at a stop */
    const char *service_name; /* --service-name; NULL: OTEL_SERVICE_NAME, else the node's name */
    const kp_push_config *config;
    kp_push_limits limits;
} kp_push_options;

/* Runs until SIGTERM or SIGINT; returns the process exit code (0 then). */
int kp_push_run(const kp_push_options *options);

#endif

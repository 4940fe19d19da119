/* How the long-running commands (record, tiers, trace) stop: Ctrl-C or
 * SIGTERM sets a flag that their loops check, so that they finish their
 * files and undo what they set in the node instead of dying mid-write. */
#ifndef KP_STOP_H
#define KP_STOP_H

#include <stdint.h>

/* Catches SIGINT and SIGTERM (setting the flag) and ignores SIGPIPE (a
 * closed connection then shows as a write error). */
void kp_stop_on_signals(void);

/* 1 once SIGINT or SIGTERM came. */
int kp_stop_requested(void);

/* CLOCK_MONOTONIC in nanoseconds and in microseconds. */
int64_t kp_now_ns(void);
uint64_t kp_now_us(void);

#endif

/* The one clock of kprof: CLOCK_MONOTONIC, which is also the Erlang
 * monotonic clock's source on Linux, so that our times and the node's differ
 * by a constant offset (kp_node_clock_offset). */
#ifndef KP_COMMON_CLOCK_H
#define KP_COMMON_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds and in microseconds. */
int64_t kp_now_ns(void);
uint64_t kp_now_us(void);

#endif

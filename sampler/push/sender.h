/* The thread that sends `kprof push`'s windows, so that the sampling loop
 * never waits on the network: it puts each encoded window in a bounded
 * queue and goes on. The thread sends them in order; a backend that does
 * not answer makes them wait (retried with backoff, the oldest dropped
 * when the queue is full); a window the backend rejects is dropped and not
 * retried. Problems are logged to stderr once each, not once per window or
 * retry. Memory stays within the queue's bounds however long it runs. */
#ifndef KP_PUSH_SENDER_H
#define KP_PUSH_SENDER_H

#include <stddef.h>
#include <stdint.h>

#include "push/config.h"
#include "push/queue.h"

typedef struct {
    size_t max_windows;      /* windows queued at most */
    size_t max_bytes;        /* bytes queued at most */
    uint64_t backoff_min_ms; /* first retry delay */
    uint64_t backoff_max_ms; /* retry delays cap, before Retry-After */
} kp_push_limits;

/* 60 windows (10 minutes of 10 s windows), 64 MiB, 1 s to 5 min. */
kp_push_limits kp_push_default_limits(void);

typedef struct {
    uint64_t sent;       /* windows the backend accepted (partial successes too) */
    uint64_t bytes_sent; /* their encoded bytes, before compression */
    uint64_t retries;    /* failed attempts that will be tried again */
    uint64_t dropped;    /* windows dropped unsent: the queue full, or put after drain */
    uint64_t rejected;   /* windows the backend rejected */
    uint64_t queued;     /* windows waiting now, the one being sent included */
    int backend_down;    /* the last attempt failed and will be retried */
} kp_push_stats;

typedef struct kp_push_sender kp_push_sender;

/* Starts the thread, sending to c's endpoint (`c` is copied: it may be
 * freed after). Returns the sender, or NULL with one line in `err`. */
kp_push_sender *kp_push_sender_start(const kp_push_config *c, const kp_push_limits *l, char *err,
                                     size_t err_len);

/* Queues `w`, taking its data (w is zeroed), dropping the oldest windows
 * when full. Never waits on the network. After kp_push_sender_drain, the
 * window is dropped (counted). */
void kp_push_sender_put(kp_push_sender *s, kp_push_window *w);

/* A consistent copy of the counters; any thread. */
void kp_push_sender_stats(kp_push_sender *s, kp_push_stats *out);

/* For the exit: sends what is queued for at most `timeout_ms` (an attempt
 * is made at once, even in the middle of a backoff wait; later waits and a
 * send in flight are cut at the deadline), then stops the thread. Returns
 * how many windows stayed unsent (they stay counted in `queued`). Once. */
size_t kp_push_sender_drain(kp_push_sender *s, uint64_t timeout_ms);

/* Stops the thread if it runs, at once (a send in flight is cancelled),
 * and frees everything, queued windows included. NULL is fine. */
void kp_push_sender_free(kp_push_sender *s);

#endif

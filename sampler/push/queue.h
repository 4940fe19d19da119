/* The windows `kprof push` has encoded and not yet sent: a FIFO bounded by
 * count and by bytes, allocated once, so that a backend down for days costs
 * no more memory than its bounds. When full, the oldest windows give way:
 * recent profiles are worth more than old ones. Not thread-safe (the sender
 * holds its lock around every call). */
#ifndef KP_PUSH_QUEUE_H
#define KP_PUSH_QUEUE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data; /* the encoded export, malloc'ed; owned by the queue once put */
    size_t len;
    uint64_t start_ns, end_ns; /* the profiled time */
} kp_push_window;

typedef struct {
    kp_push_window *ring; /* max_windows slots */
    size_t head, count;
    size_t max_windows, max_bytes;
    size_t bytes;     /* sum of the queued windows' len */
    uint64_t dropped; /* windows dropped since init */
} kp_push_queue;

/* An empty queue of at most `max_windows` (>= 1) windows and `max_bytes`
 * bytes. Returns 0, or -1 when out of memory (then `q` is zeroed). */
int kp_push_queue_init(kp_push_queue *q, size_t max_windows, size_t max_bytes);

/* Appends `w`, taking its data: first drops the oldest windows until it
 * fits. A window larger than max_bytes is dropped itself, the others kept.
 * `w` is zeroed. Returns how many windows were dropped (counted in
 * q->dropped). */
size_t kp_push_queue_put(kp_push_queue *q, kp_push_window *w);

/* Puts `w` back at the head, after a failed send took it out: it is the
 * oldest, so it is dropped itself when it no longer fits. `w` is zeroed.
 * Returns 1 when dropped (counted), else 0. */
int kp_push_queue_put_front(kp_push_queue *q, kp_push_window *w);

/* Takes the oldest window into `*out` (the caller owns its data). Returns
 * 1, or 0 when the queue is empty. */
int kp_push_queue_take(kp_push_queue *q, kp_push_window *out);

/* Frees every queued window and the ring; zeroes `q`. Safe on a zeroed
 * queue. */
void kp_push_queue_free(kp_push_queue *q);

/* The delay before the next attempt after `failures` (>= 1) failed ones in
 * a row: min_ms doubled per failure, capped at max_ms, then jittered
 * ("equal jitter": uniform in [base/2, base]) from `*rng` so that many
 * kprof instances do not retry in step. A Retry-After of `retry_after_ms`
 * (-1: none) wins when longer, capped at KP_PUSH_MAX_RETRY_AFTER_MS. */
enum { KP_PUSH_MAX_RETRY_AFTER_MS = 600000 };
uint64_t kp_push_backoff_ms(unsigned failures, uint64_t min_ms, uint64_t max_ms,
                            long retry_after_ms, uint64_t *rng);

/* The next number of a splitmix64 sequence whose state is `*rng`. */
uint64_t kp_push_random(uint64_t *rng);

#endif

/* The push queue (a ring of windows) and the retry delays. */
#include <stdlib.h>
#include <string.h>

#include "push/queue.h"

int kp_push_queue_init(kp_push_queue *q, size_t max_windows, size_t max_bytes)
{
    memset(q, 0, sizeof *q);
    if (max_windows == 0)
        max_windows = 1;
    q->ring = calloc(max_windows, sizeof *q->ring);
    if (!q->ring)
        return -1;
    q->max_windows = max_windows;
    q->max_bytes = max_bytes;
    return 0;
}

static void drop(kp_push_queue *q, kp_push_window *w)
{
    free(w->data);
    memset(w, 0, sizeof *w);
    q->dropped++;
}

static int fits(const kp_push_queue *q, size_t len)
{
    return q->count < q->max_windows && len <= q->max_bytes - q->bytes;
}

size_t kp_push_queue_put(kp_push_queue *q, kp_push_window *w)
{
    if (w->len > q->max_bytes) {
        drop(q, w);
        return 1;
    }
    size_t dropped = 0;
    kp_push_window old;
    while (!fits(q, w->len) && kp_push_queue_take(q, &old)) {
        drop(q, &old);
        dropped++;
    }
    q->ring[(q->head + q->count) % q->max_windows] = *w;
    q->count++;
    q->bytes += w->len;
    memset(w, 0, sizeof *w);
    return dropped;
}

int kp_push_queue_put_front(kp_push_queue *q, kp_push_window *w)
{
    if (!fits(q, w->len)) {
        drop(q, w);
        return 1;
    }
    q->head = (q->head + q->max_windows - 1) % q->max_windows;
    q->ring[q->head] = *w;
    q->count++;
    q->bytes += w->len;
    memset(w, 0, sizeof *w);
    return 0;
}

int kp_push_queue_take(kp_push_queue *q, kp_push_window *out)
{
    if (q->count == 0)
        return 0;
    *out = q->ring[q->head];
    memset(&q->ring[q->head], 0, sizeof q->ring[q->head]);
    q->head = (q->head + 1) % q->max_windows;
    q->count--;
    q->bytes -= out->len;
    return 1;
}

void kp_push_queue_free(kp_push_queue *q)
{
    kp_push_window w;
    while (q->ring && kp_push_queue_take(q, &w))
        free(w.data);
    free(q->ring);
    memset(q, 0, sizeof *q);
}

uint64_t kp_push_random(uint64_t *rng)
{
    uint64_t z = (*rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

uint64_t kp_push_backoff_ms(unsigned failures, uint64_t min_ms, uint64_t max_ms,
                            long retry_after_ms, uint64_t *rng)
{
    if (min_ms == 0)
        min_ms = 1;
    if (max_ms < min_ms)
        max_ms = min_ms;
    uint64_t base = min_ms;
    for (unsigned i = 1; i < failures && base < max_ms; i++)
        base = base > max_ms / 2 ? max_ms : base * 2;
    if (base > max_ms)
        base = max_ms;
    uint64_t half = base / 2;
    uint64_t delay = base - half + kp_push_random(rng) % (half + 1);
    if (retry_after_ms >= 0) {
        uint64_t ra = (uint64_t)retry_after_ms;
        if (ra > KP_PUSH_MAX_RETRY_AFTER_MS)
            ra = KP_PUSH_MAX_RETRY_AFTER_MS;
        if (ra > delay)
            delay = ra;
    }
    return delay;
}

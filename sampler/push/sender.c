/* The sender thread. One mutex guards the queue, the counters and the
 * flags; the thread never holds it while sending or printing, so that
 * kp_push_sender_put returns at once whatever the network or stderr do. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "push/sender.h"
#include "push/transport.h"

/* After the first, dropped windows are reported at most this often (and
 * when the backend answers again, and at the exit): a backend down for a
 * day drops one window every period, and one line each would bury the
 * rest of the log. */
#define DROP_REPORT_NS (600 * 1000000000LL)
/* Distinct messages remembered, to say each once; the oldest is forgotten. */
#define SEEN 64

struct kp_push_sender {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC */
    kp_push_queue q;
    kp_push_limits lim;
    kp_push_stats st;
    int in_flight;
    int stop, draining, drain_kick, thread_ended;
    int64_t deadline_ns;
    pthread_t thread;
    kp_push_transport *t;
    char url[256];
    /* the thread's own, unlocked */
    unsigned failures;
    int64_t down_since_ns;
    uint64_t rng;
    uint64_t drops_reported;
    int64_t drop_report_ns;
    uint64_t seen[SEEN];
    size_t n_seen, seen_next;
};

kp_push_limits kp_push_default_limits(void)
{
    return (kp_push_limits){60, 64u << 20, 1000, 300000};
}

static void lock(kp_push_sender *s)
{
    pthread_mutex_lock(&s->mu);
}

static void unlock(kp_push_sender *s)
{
    pthread_mutex_unlock(&s->mu);
}

/* One line to stderr, whole, however many threads print. */
static void say(const char *line)
{
    flockfile(stderr);
    kp_error("push: %s", line);
    funlockfile(stderr);
}

/* 1 the first time this message (with its status) comes, 0 after. */
static int first_time(kp_push_sender *s, const kp_send_result *r)
{
    uint64_t h = 1469598103934665603u ^ (uint64_t)r->status;
    for (const char *c = r->message; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211u;
    for (size_t i = 0; i < s->n_seen; i++)
        if (s->seen[i] == h)
            return 0;
    s->seen[s->seen_next] = h;
    s->seen_next = (s->seen_next + 1) % SEEN;
    if (s->n_seen < SEEN)
        s->n_seen++;
    return 1;
}

/* "HTTP 503", "gRPC UNAVAILABLE" or "" (no answer) */
static void status_words(const kp_send_result *r, char *out, size_t cap)
{
    if (r->status == 0)
        snprintf(out, cap, "does not answer");
    else if (r->status_is_grpc)
        snprintf(out, cap, "answers gRPC %s", kp_push_grpc_code_name(r->status));
    else
        snprintf(out, cap, "answers HTTP %ld", r->status);
}

static void report_drops(kp_push_sender *s, int now_anyway)
{
    lock(s);
    uint64_t dropped = s->q.dropped;
    unlock(s);
    int64_t now = kp_now_ns();
    uint64_t n = dropped - s->drops_reported;
    if (n == 0 ||
        (!now_anyway && s->drops_reported > 0 && now - s->drop_report_ns < DROP_REPORT_NS))
        return;
    char line[512];
    snprintf(line, sizeof line,
             "dropped the %" PRIu64 " oldest window%s: the queue was full (%zu windows or %zu MiB "
             "at most)",
             n, n == 1 ? "" : "s", s->lim.max_windows, s->lim.max_bytes >> 20);
    say(line);
    s->drops_reported = dropped;
    s->drop_report_ns = now;
}

/* What an outcome does to the counters and the log; `w` is consumed. */
static void settle(kp_push_sender *s, kp_push_window *w, const kp_send_result *r)
{
    char line[1024], words[64];
    status_words(r, words, sizeof words);
    int was_down = s->failures > 0;
    lock(s);
    s->in_flight = 0;
    size_t waiting = s->q.count;
    if (r->outcome == KP_SEND_RETRY) {
        s->st.retries++;
        s->st.backend_down = 1;
        kp_push_queue_put_front(&s->q, w);
    } else {
        s->st.backend_down = 0;
        if (r->outcome == KP_SEND_OK) {
            s->st.sent++;
            s->st.bytes_sent += w->len;
        } else {
            s->st.rejected++;
        }
        free(w->data);
    }
    unlock(s);
    if (r->outcome == KP_SEND_RETRY) {
        if (s->failures++ == 0) {
            s->down_since_ns = kp_now_ns();
            snprintf(line, sizeof line,
                     "the backend at %s %s (%s); windows wait in the queue (up to %zu) and are "
                     "retried with backoff",
                     s->url, words, r->message[0] ? r->message : "no message", s->lim.max_windows);
            say(line);
        }
        return;
    }
    s->failures = 0;
    if (was_down) {
        report_drops(s, 1);
        snprintf(line, sizeof line,
                 "the backend at %s answers again after %" PRId64 " s: %zu window%s waited", s->url,
                 (kp_now_ns() - s->down_since_ns) / 1000000000, waiting + 1,
                 waiting == 0 ? "" : "s");
        say(line);
    }
    if (r->outcome == KP_SEND_REJECTED && first_time(s, r)) {
        snprintf(line, sizeof line,
                 "the backend at %s rejected a window: it %s (%s); windows it rejects are dropped, "
                 "not retried",
                 s->url, words, r->message[0] ? r->message : "no message");
        say(line);
    } else if (r->outcome == KP_SEND_OK && r->rejected > 0 && first_time(s, r)) {
        snprintf(line, sizeof line,
                 "the backend at %s accepted a window but rejected %" PRId64
                 " of its profiles (%s)",
                 s->url, r->rejected, r->message[0] ? r->message : "no message");
        say(line);
    }
}

/* Waits until `until_ns`, the drain deadline, a stop or a drain's kick;
 * reports drops on the way. Called and returns unlocked. */
static void wait_retry(kp_push_sender *s, int64_t until_ns)
{
    lock(s);
    while (!s->stop && !s->drain_kick) {
        int64_t end = s->draining && s->deadline_ns < until_ns ? s->deadline_ns : until_ns;
        int64_t now = kp_now_ns();
        if (now >= end)
            break;
        struct timespec ts = {(time_t)(end / 1000000000), (long)(end % 1000000000)};
        pthread_cond_timedwait(&s->wake, &s->mu, &ts);
        if (s->q.dropped != s->drops_reported) {
            unlock(s);
            report_drops(s, 0);
            lock(s);
        }
    }
    s->drain_kick = 0;
    unlock(s);
}

static int cancelled(void *ctx)
{
    kp_push_sender *s = ctx;
    lock(s);
    int yes = s->stop || (s->draining && kp_now_ns() >= s->deadline_ns);
    unlock(s);
    return yes;
}

static void *run(void *arg)
{
    kp_push_sender *s = arg;
    for (;;) {
        kp_push_window w;
        lock(s);
        for (;;) {
            if (s->stop || (s->draining && (s->q.count == 0 || kp_now_ns() >= s->deadline_ns)))
                goto out;
            if (kp_push_queue_take(&s->q, &w))
                break;
            pthread_cond_wait(&s->wake, &s->mu);
        }
        s->in_flight = 1;
        s->drain_kick = 0; /* this attempt is the one a drain asks for */
        unlock(s);
        report_drops(s, 0);
        kp_send_result r = kp_push_transport_send(s->t, w.data, w.len);
        settle(s, &w, &r);
        if (r.outcome == KP_SEND_RETRY) {
            uint64_t ms = kp_push_backoff_ms(s->failures, s->lim.backoff_min_ms,
                                             s->lim.backoff_max_ms, r.retry_after_ms, &s->rng);
            wait_retry(s, kp_now_ns() + (int64_t)ms * 1000000);
        }
    }
out:
    s->thread_ended = 1;
    unlock(s);
    report_drops(s, 1);
    return NULL;
}

kp_push_sender *kp_push_sender_start(const kp_push_config *c, const kp_push_limits *l, char *err,
                                     size_t err_len)
{
    kp_push_sender *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    s->lim = l ? *l : kp_push_default_limits();
    kp_push_url_for_messages(c->endpoint, s->url, sizeof s->url);
    s->rng = (uint64_t)kp_now_ns() ^ ((uint64_t)getpid() << 32);
    pthread_condattr_t ca;
    int cond_ok = pthread_condattr_init(&ca) == 0;
    if (cond_ok) {
        cond_ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
                  pthread_cond_init(&s->wake, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!cond_ok || pthread_mutex_init(&s->mu, NULL) != 0) {
        snprintf(err, err_len, "cannot create the sender's lock");
        if (cond_ok)
            pthread_cond_destroy(&s->wake);
        free(s);
        return NULL;
    }
    if (kp_push_queue_init(&s->q, s->lim.max_windows, s->lim.max_bytes) != 0) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    s->t = kp_push_transport_create(c, err, err_len);
    if (!s->t)
        goto fail;
    kp_push_transport_set_cancel(s->t, cancelled, s);
    if (pthread_create(&s->thread, NULL, run, s) != 0) {
        snprintf(err, err_len, "cannot start the sender thread");
        goto fail;
    }
    return s;
fail:
    kp_push_transport_free(s->t);
    kp_push_queue_free(&s->q);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
}

void kp_push_sender_put(kp_push_sender *s, kp_push_window *w)
{
    lock(s);
    if (s->thread_ended || s->draining) {
        free(w->data);
        memset(w, 0, sizeof *w);
        s->q.dropped++;
    } else {
        kp_push_queue_put(&s->q, w);
        pthread_cond_signal(&s->wake);
    }
    unlock(s);
}

void kp_push_sender_stats(kp_push_sender *s, kp_push_stats *out)
{
    lock(s);
    *out = s->st;
    out->dropped = s->q.dropped;
    out->queued = s->q.count + (size_t)s->in_flight;
    unlock(s);
}

static void stop_thread(kp_push_sender *s, int drain, uint64_t timeout_ms)
{
    lock(s);
    int joinable = !s->stop && !s->draining;
    if (drain) {
        s->draining = 1;
        s->drain_kick = 1;
        s->deadline_ns =
            kp_now_ns() + (int64_t)(timeout_ms > 86400000 ? 86400000 : timeout_ms) * 1000000;
    } else {
        s->stop = 1;
    }
    pthread_cond_broadcast(&s->wake);
    unlock(s);
    if (joinable)
        pthread_join(s->thread, NULL);
}

size_t kp_push_sender_drain(kp_push_sender *s, uint64_t timeout_ms)
{
    stop_thread(s, 1, timeout_ms);
    lock(s);
    size_t left = s->q.count;
    unlock(s);
    return left;
}

void kp_push_sender_free(kp_push_sender *s)
{
    if (!s)
        return;
    stop_thread(s, 0, 0);
    kp_push_transport_free(s->t);
    kp_push_queue_free(&s->q);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

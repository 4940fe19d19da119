#include "common/batches.h"

#include <pthread.h>
#include <stdlib.h>

#include "kp/alloc.h"

struct kp_batches {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    kp_buf *bufs;
    unsigned n;
    unsigned head;   /* the next batch to take */
    unsigned filled; /* batches passed on, not yet taken back */
    int filling;     /* the filler holds batch head + filled */
    int closed, stopped;
};

kp_batches *kp_batches_create(unsigned n)
{
    kp_batches *q = kp_calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->n = n < 2 ? 2 : n;
    q->bufs = kp_calloc(q->n, sizeof *q->bufs);
    if (!q->bufs) {
        kp_free(q);
        return NULL;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->changed, NULL);
    return q;
}

void kp_batches_free(kp_batches *q)
{
    if (!q)
        return;
    for (unsigned i = 0; i < q->n; i++)
        kp_buf_free(&q->bufs[i]);
    kp_free(q->bufs);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->changed);
    kp_free(q);
}

kp_buf *kp_batches_fill(kp_batches *q)
{
    pthread_mutex_lock(&q->mu);
    /* a batch is free when fewer than n are passed on or being taken */
    while (!q->stopped && q->filled == q->n)
        pthread_cond_wait(&q->changed, &q->mu);
    kp_buf *b = NULL;
    if (!q->stopped) {
        b = &q->bufs[(q->head + q->filled) % q->n];
        kp_buf_clear(b);
        q->filling = 1;
    }
    pthread_mutex_unlock(&q->mu);
    return b;
}

void kp_batches_pass(kp_batches *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->filling) {
        q->filling = 0;
        q->filled++;
    }
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->mu);
}

void kp_batches_close(kp_batches *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->mu);
}

const kp_buf *kp_batches_take(kp_batches *q)
{
    pthread_mutex_lock(&q->mu);
    while (q->filled == 0 && !q->closed)
        pthread_cond_wait(&q->changed, &q->mu);
    const kp_buf *b = q->filled ? &q->bufs[q->head] : NULL;
    pthread_mutex_unlock(&q->mu);
    return b;
}

void kp_batches_done(kp_batches *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->filled) {
        q->head = (q->head + 1) % q->n;
        q->filled--;
    }
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->mu);
}

void kp_batches_stop(kp_batches *q)
{
    pthread_mutex_lock(&q->mu);
    q->stopped = 1;
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->mu);
}

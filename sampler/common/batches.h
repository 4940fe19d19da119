/* Batches of bytes handed from one thread to another, in order: one thread
 * fills them (kp_batches_fill, kp_batches_pass), the other takes them
 * (kp_batches_take, kp_batches_done). A fixed number of batches exists, so
 * the filler waits while the taker is behind: memory stays bounded. Used
 * to parse segments on one core while another aggregates them. */
#ifndef KP_BATCHES_H
#define KP_BATCHES_H

#include <stddef.h>

#include "kp/buf.h"

typedef struct kp_batches kp_batches;

/* `n` batches (at least 2); NULL when out of memory. */
kp_batches *kp_batches_create(unsigned n);
/* Frees them; both threads must be done with them. */
void kp_batches_free(kp_batches *q);

/* The filler: an empty batch to fill, waiting until one is free; NULL once
 * the taker has stopped (kp_batches_stop): stop filling. */
kp_buf *kp_batches_fill(kp_batches *q);
/* The filler: hands the batch from kp_batches_fill on. */
void kp_batches_pass(kp_batches *q);
/* The filler: no batch follows. */
void kp_batches_close(kp_batches *q);

/* The taker: the next batch passed on, waiting for it; NULL after the
 * last (kp_batches_close). */
const kp_buf *kp_batches_take(kp_batches *q);
/* The taker: gives the batch from kp_batches_take back, to be filled again. */
void kp_batches_done(kp_batches *q);
/* The taker: wants no more batches; the filler's next kp_batches_fill
 * returns NULL. */
void kp_batches_stop(kp_batches *q);

#endif

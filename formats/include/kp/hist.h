/* A log-linear histogram of unsigned integers (e.g. call durations in
 * microseconds) with bounded relative error, for percentiles that cost
 * neither memory per value nor sorting.
 *
 * Values below 256 are counted exactly; above, each power of two is split in
 * 128 buckets, so a reported quantile is within 1/128 (0.8%) of a value that
 * was recorded at that rank. Count, min, max and sum are exact. Memory is
 * fixed (about 58 KiB) whatever the number of values.
 *
 *     kp_hist *h = kp_hist_create();
 *     kp_hist_record(h, 1234);
 *     uint64_t p99 = kp_hist_quantile(h, 0.99);
 *     kp_hist_free(h);
 */
#ifndef KP_HIST_H
#define KP_HIST_H

#include <stdint.h>

typedef struct kp_hist kp_hist;

/* Returns an empty histogram, or NULL when out of memory. */
kp_hist *kp_hist_create(void);
void kp_hist_free(kp_hist *hist);

/* Counts one value. Never fails; counters saturate instead of wrapping. */
void kp_hist_record(kp_hist *hist, uint64_t value);
/* Adds every value counted in `from` to `into`. */
void kp_hist_merge(kp_hist *into, const kp_hist *from);
/* Forgets every value. */
void kp_hist_reset(kp_hist *hist);

uint64_t kp_hist_count(const kp_hist *hist);
/* 0 when empty. */
uint64_t kp_hist_min(const kp_hist *hist);
uint64_t kp_hist_max(const kp_hist *hist);
/* Exact mean (sum / count); 0 when empty. */
double kp_hist_mean(const kp_hist *hist);
/* The value at quantile `q` (0..1; 0.5 = median, 0.999 = p99.9): the value of
 * rank ceil(q * count), within 0.8%, clamped to [min, max]. 0 when empty. */
uint64_t kp_hist_quantile(const kp_hist *hist, double q);

#endif

#include "kp/hist.h"

#include <string.h>

#include "kp/alloc.h"

#define SUB_BITS 7
#define SUB (1u << SUB_BITS)                  /* buckets per power of two */
#define BUCKETS ((64 - SUB_BITS) * SUB + SUB) /* shifts 0..56, each SUB wide, + the exact part */

struct kp_hist {
    uint64_t count;
    uint64_t min, max;
    long double sum; /* exact enough: 64-bit mantissa */
    uint64_t buckets[BUCKETS];
};

/* Below 2*SUB the index is the value; above, the top SUB_BITS+1 bits of the
 * value and its shift select the bucket. */
static unsigned bucket_of(uint64_t v)
{
    if (v < 2 * SUB)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = e - SUB_BITS;
    return shift * SUB + (unsigned)(v >> shift);
}

/* The smallest and largest value of bucket `b`. */
static void bucket_range(unsigned b, uint64_t *lo, uint64_t *hi)
{
    if (b < 2 * SUB) {
        *lo = *hi = b;
        return;
    }
    unsigned shift = b / SUB - 1;
    uint64_t sub = b - shift * SUB;
    *lo = sub << shift;
    *hi = *lo + ((uint64_t)1 << shift) - 1;
}

kp_hist *kp_hist_create(void)
{
    return kp_calloc(1, sizeof(kp_hist));
}

void kp_hist_free(kp_hist *h)
{
    kp_free(h);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

void kp_hist_record(kp_hist *h, uint64_t v)
{
    if (h->count == 0 || v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
    h->count = add_sat(h->count, 1);
    h->sum += v;
    uint64_t *b = &h->buckets[bucket_of(v)];
    *b = add_sat(*b, 1);
}

void kp_hist_merge(kp_hist *into, const kp_hist *from)
{
    if (from->count == 0)
        return;
    if (into->count == 0 || from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
    into->count = add_sat(into->count, from->count);
    into->sum += from->sum;
    for (unsigned i = 0; i < BUCKETS; i++)
        into->buckets[i] = add_sat(into->buckets[i], from->buckets[i]);
}

void kp_hist_reset(kp_hist *h)
{
    memset(h, 0, sizeof *h);
}

uint64_t kp_hist_count(const kp_hist *h)
{
    return h->count;
}

uint64_t kp_hist_min(const kp_hist *h)
{
    return h->min;
}

uint64_t kp_hist_max(const kp_hist *h)
{
    return h->max;
}

double kp_hist_mean(const kp_hist *h)
{
    return h->count ? (double)(h->sum / (long double)h->count) : 0.0;
}

uint64_t kp_hist_quantile(const kp_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    if (!(q > 0))
        return h->min;
    if (q >= 1)
        return h->max;
    /* ceil(q * count), forgiving the binary rounding of q (0.001 * 200000
     * must be rank 200, not 201) */
    long double exact = (long double)q * (long double)h->count;
    uint64_t rank = (uint64_t)exact;
    if (exact - (long double)rank > 1e-9L)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t lo, hi;
            bucket_range(i, &lo, &hi);
            uint64_t mid = lo + (hi - lo) / 2;
            return mid < h->min ? h->min : mid > h->max ? h->max : mid;
        }
    }
    return h->max;
}

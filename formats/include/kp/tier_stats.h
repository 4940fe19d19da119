/* Aggregated timings of tier tracing: how long each request spends in each
 * tier (a traced layer such as "db" or "cache"), per request identity (the
 * kind of request, e.g. "put"), for the current interval and since start.
 *
 * A cell is one (tier, identity) pair. It holds a kp_hist per scope, created
 * when the cell gets its first observation, and the total of its `calls`.
 * The "_all" rows of the reports (each tier across every identity) are merged
 * on demand into one scratch histogram, never stored.
 *
 * Memory bound: a kp_hist is about 58 KiB, so at most
 *     (2 * cells observed + 1) * 58 KiB, cells <= max_identities * (n_tiers + 1)
 * plus 32 bytes per cell and the identity names. For example 64 identities
 * and 4 tiers (5 with "_total"), all observed: 641 histograms, about 36 MiB.
 * Choose max_identities with this in mind. Histograms of the interval are
 * emptied at the end of each interval, not freed, so the bound holds for the
 * whole run.
 *
 *     static const char *const tiers[] = {"db", "cache"};
 *     kp_tier_stats *s = kp_tier_stats_create(tiers, 2, 64);
 *     size_t put = kp_tier_stats_identity(s, "put", 3);
 *     kp_tier_stats_record(s, 0, put, 1200, 2);              // 2 db calls, 1.2 ms
 *     kp_tier_stats_record(s, kp_tier_stats_tiers(s) - 1, put, 1500, 1); // _total
 *     kp_tier_stats_json(s, KP_TIER_INTERVAL, "2024-05-01T12:00:00Z", "app@host",
 *                        60000, &buf);
 *     kp_tier_stats_end_interval(s);
 *     kp_tier_stats_free(s);
 */
#ifndef KP_TIER_STATS_H
#define KP_TIER_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "kp/buf.h"
#include "kp/status.h"

typedef struct kp_tier_stats kp_tier_stats;

/* `tier_names`: `n_tiers` NUL-terminated names, copied. The pseudo-tier
 * "_total" (the whole request, entry call to entry return) gets index
 * `n_tiers`. `max_identities` (>= 2) bounds the distinct identities,
 * "_other" included: the first max_identities - 1 get their own index, every
 * later one is counted under "_other". Returns NULL when out of memory or
 * when max_identities < 2. */
kp_tier_stats *kp_tier_stats_create(const char *const *tier_names, size_t n_tiers,
                                    size_t max_identities);
/* NULL is allowed. */
void kp_tier_stats_free(kp_tier_stats *s);

/* Number of tiers including "_total": n_tiers + 1. */
size_t kp_tier_stats_tiers(const kp_tier_stats *s);

/* Interns an identity (any bytes, not NUL-terminated; the caller passes
 * "undefined" for a request without one) and returns its index. Indexes are
 * dense and in first-seen order. Returns the "_other" index when the bound is
 * reached (and for the identity "_other" itself), SIZE_MAX only on
 * allocation failure, which adds nothing. */
size_t kp_tier_stats_identity(kp_tier_stats *s, const char *identity, size_t len);

/* The name of identity `identity` (an index kp_tier_stats_identity gave),
 * not NUL-terminated, its length in `len`; NULL for an unknown index. */
const char *kp_tier_stats_identity_name(const kp_tier_stats *s, size_t identity, size_t *len);

/* One observation: `us` microseconds spent in `tier` by one request of
 * `identity`, over `calls` (>= 1) calls of that tier. Recorded in the current
 * interval and since start. Returns KP_OK, KP_ERR_INVAL (tier or identity out
 * of range, calls 0) or KP_ERR_NOMEM (the cell's first histograms could not
 * be created; nothing is recorded). */
kp_status kp_tier_stats_record(kp_tier_stats *s, size_t tier, size_t identity, uint64_t us,
                               uint32_t calls);

/* Health counters that go in every report. All are cumulative since start
 * except `paused` (1 while tracing is paused, else 0). `requests` counts
 * finished requests, as the _total rows do: one that is still open at a
 * report is counted in the report where it finishes. */
typedef struct {
    uint64_t requests, events, dropped_events, unattributed_events, cut_requests, pauses, paused_ms,
        rearms;
    int paused;
} kp_tier_counters;

/* Sets the counters the next reports show; the caller calls it before
 * writing. */
void kp_tier_stats_set_counters(kp_tier_stats *s, const kp_tier_counters *c);

typedef enum { KP_TIER_INTERVAL, KP_TIER_SINCE_START } kp_tier_scope;

/* Appends one JSON Lines object (one line, ending in "\n") for `scope`:
 *   {"time":TIME,"node":NODE,"scope":"interval"|"since_start","interval_ms":N,
 *    "requests":N,"events":N,"dropped_events":N,"unattributed_events":N,
 *    "cut_requests":N,"pauses":N,"paused_ms":N,"rearms":N,"paused":true|false,
 *    "rows":[{"tier":"db","identity":"put","count":N,"calls":N,"min_us":N,
 *             "mean_us":X,"p50_us":N,"p90_us":N,"p99_us":N,"p999_us":N,
 *             "max_us":N}, ...]}
 * `time_iso` (an ISO 8601 UTC time) and `node`, NUL-terminated, are the
 * caller's, copied as JSON strings. Rows: every cell with data in the scope, by identity
 * (first-seen order) then tier (config order, "_total" last); then, for each
 * tier with data, a row of identity "_all" merging every identity. mean_us
 * has up to 3 decimals, the other values are integers.
 * The counters of an interval line are the changes since the last
 * kp_tier_stats_end_interval() (since start before the first), a counter that
 * went down counting from 0; a since_start line has them cumulative.
 * Writing changes nothing, so both scopes and the table can be written in any
 * order. Returns KP_OK, KP_ERR_INVAL (bad scope) or KP_ERR_NOMEM; on error
 * `out` is unchanged. */
kp_status kp_tier_stats_json(kp_tier_stats *s, kp_tier_scope scope, const char *time_iso,
                             const char *node, uint64_t interval_ms, kp_buf *out);

typedef enum {
    KP_TIER_MEAN,
    KP_TIER_P50,
    KP_TIER_P90,
    KP_TIER_P99,
    KP_TIER_MAX,
    KP_TIER_COUNT_STAT
} kp_tier_stat;

/* Appends a plain-text table of one stat for `scope`:
 *
 *     p50 (us) per tier, since start
 *     identity  requests   db  cache  _total
 *     put              3  120     15     180
 *     get             10    -      8      20
 *     _all            13  120     10      25
 *     dropped 5 events, paused 1 times (200 ms), cut 2 requests
 *
 * A header line naming the stat and scope; the column names; one row per
 * identity with data in the scope (first-seen order); an "_all" row (each tier
 * across identities). Columns: identity (left-aligned), requests (the count of
 * the identity's "_total" cell), one per tier in config order, "_total"; all
 * but the first right-aligned, each padded to its widest cell, separated by
 * two spaces. Cells are the stat in whole microseconds (the mean rounded), or
 * the count for KP_TIER_COUNT_STAT; "-" when the cell has no data. Control
 * characters in names show as '?'. The last line, only when dropped_events,
 * pauses or cut_requests is non-zero, gives them (changes in the interval, or
 * cumulative, as in the JSON lines). Returns KP_OK, KP_ERR_INVAL (bad scope or
 * stat) or KP_ERR_NOMEM; on error `out` is unchanged. */
kp_status kp_tier_stats_table(kp_tier_stats *s, kp_tier_scope scope, kp_tier_stat stat,
                              kp_buf *out);

/* Ends the interval: the interval's histograms and calls are emptied and the
 * current counters become the base of the next interval's changes. Since-start
 * data is kept. */
void kp_tier_stats_end_interval(kp_tier_stats *s);

/* The stats of one cell, for callers and tests: returns 0 and sets the
 * non-NULL outputs (the mean rounded to whole microseconds) when the cell has
 * data in `scope`, -1 otherwise (no data, or an index out of range). */
int kp_tier_stats_cell(const kp_tier_stats *s, kp_tier_scope scope, size_t tier, size_t identity,
                       uint64_t *count, uint64_t *p50_us, uint64_t *mean_us);

#endif

/* Tier matching: turns the decoded call/return events of tier tracing into
 * per-request timings (kp_tier_stats observations) and call trees.
 *
 * Model. A request is opened by an entry event (the entry function, or
 * kprof_tier_mark:request/2 or begin_request/1) in the process whose pid is
 * the request's seq_trace label; it closes at the entry's return (or
 * exception, or end_request/0). Tier calls carry the label of the token they
 * ran under, in whatever process, and are attributed to the open request of
 * that label. Each process has its own stack of open calls, so repeated and
 * recursive calls pair up with their own returns.
 *
 * What is recorded, per closed request:
 *   - for each tier it reached: the time during which at least one call of
 *     that tier was running for the request (the union of its call
 *     intervals, so recursion and a tier calling itself through another
 *     process are not counted twice; parallel calls count once), and the
 *     number of calls;
 *   - for the pseudo-tier _total: entry call to entry return.
 *
 * Events of different processes can reach the trace port slightly out of
 * order, so a closed request is finalized only when events `grace_ns` newer
 * than its end have been seen, or the stream was quiet up to `grace_ns` past
 * its end (kp_tier_match_quiet: the node went idle after its last request),
 * or at kp_tier_match_flush(all). Returns that
 * arrive later still, or tier calls that start after the request ended
 * (fire-and-forget messages carry the token on), are counted as late or
 * unattributed, never guessed.
 *
 * Memory is bounded: open processes, open requests, frames per process and
 * intervals per request all have limits (kp_tier_match_limits); past them
 * events are counted as unattributed (or the request as truncated). */
#ifndef KP_TIERS_MATCH_H
#define KP_TIERS_MATCH_H

#include <stddef.h>
#include <stdint.h>

#include <kp/buf.h>
#include <kp/tier_stats.h>

typedef enum {
    KP_TIER_FN_TIER,  /* a tier; its index in kp_tier_stats is tier_index */
    KP_TIER_FN_ENTRY, /* opens a request at call, closes it at return */
    KP_TIER_FN_BEGIN, /* opens a request; no return is traced */
    KP_TIER_FN_END    /* closes the request of its token */
} kp_tier_fn_role;

typedef struct {
    kp_tier_fn_role role;
    size_t tier_index; /* for KP_TIER_FN_TIER */
    const char *name;  /* for call trees, e.g. "db" or "kv:request/1" */
} kp_tier_fn;

typedef enum { KP_TEV_CALL, KP_TEV_RETURN, KP_TEV_EXCEPTION } kp_tier_event_kind;

/* A pid of the traced node, packed as (number << 32) | serial. */
typedef uint64_t kp_tier_pid;

typedef struct {
    kp_tier_event_kind kind;
    kp_tier_pid pid; /* the process that called or returned */
    size_t fn;       /* index into the function table */
    int64_t ts_ns;   /* the node's monotonic time */
    int has_label;   /* calls: the token's label is a pid */
    kp_tier_pid label;
    const char *identity; /* opening calls: the identity text */
    size_t identity_len;
} kp_tier_event;

typedef struct {
    size_t max_processes; /* processes with open calls */
    size_t max_requests;  /* open and closing requests */
    size_t max_depth;     /* open calls per process */
    size_t max_intervals; /* tier calls kept per request */
    int64_t grace_ns;     /* see above */
} kp_tier_match_limits;

/* requests: finished ones, finalized (what the _total rows count); a
 * request still open, or closed within its grace, is not in it yet. */
typedef struct {
    uint64_t events, requests, unattributed, late, mismatched, cut, truncated;
} kp_tier_match_counters;

/* Called with each finished request's call tree, as text, when the caller
 * asked for trees (every request, or those at least `slow_us` long). */
typedef void (*kp_tier_tree_fn)(void *ctx, const char *text, size_t len);

/* One tier call of a request: function `fn` ran in process `pid` from
 * `start` to `end` (the node's monotonic ns). */
typedef struct {
    uint32_t fn;
    kp_tier_pid pid;
    int64_t start, end;
} kp_tier_interval;

/* A finished request, as kp_tier_request_fn sees it (valid during the
 * call only): its entry (or mark) function `entry_fn` ran in process
 * `label` from `start` to `end`; its tier calls, in no particular order
 * (at most max_intervals: `truncated` says some were left out). */
typedef struct {
    kp_tier_pid label;
    size_t entry_fn;
    int64_t start, end;
    int exception, truncated;
    const char *identity;
    size_t identity_len;
    const kp_tier_interval *iv;
    size_t n_iv;
} kp_tier_request;

typedef void (*kp_tier_request_fn)(void *ctx, const kp_tier_request *request);

typedef struct kp_tier_match kp_tier_match;

/* Sensible limits: 100k processes and requests, depth 256, 10k intervals,
 * 20 ms grace. */
kp_tier_match_limits kp_tier_match_default_limits(void);

/* Returns a matcher that records into `stats` (not owned) for the functions
 * `fns[0..n_fns)` (copied), or NULL when out of memory. */
kp_tier_match *kp_tier_match_create(kp_tier_stats *stats, const kp_tier_fn *fns, size_t n_fns,
                                    const kp_tier_match_limits *limits);
void kp_tier_match_free(kp_tier_match *m);

/* Asks for call trees: of every request when `all`, else of requests whose
 * total is at least `slow_us` (0 = none). */
void kp_tier_match_trees(kp_tier_match *m, int all, uint64_t slow_us, kp_tier_tree_fn fn,
                         void *ctx);

/* Asks for each request at least `slow_us` long (0 = none), whole. */
void kp_tier_match_slow(kp_tier_match *m, uint64_t slow_us, kp_tier_request_fn fn, void *ctx);

/* Feeds one event. Returns KP_OK, or KP_ERR_NOMEM (the event is lost and
 * counted unattributed; the matcher stays usable). */
kp_status kp_tier_match_event(kp_tier_match *m, const kp_tier_event *ev);

/* Finalizes closed requests: those whose grace has passed (by the newest
 * event time seen), or all of them when `all`. */
kp_status kp_tier_match_flush(kp_tier_match *m, int all);

/* Tells the matcher that the stream is quiet: every event that happened
 * before `node_ns` (the node's monotonic time) has been fed. Closed requests
 * then finalize by that time at the next kp_tier_match_flush, as if a newer
 * event had been seen: the last requests before the node goes idle are not
 * held back until the final flush. */
void kp_tier_match_quiet(kp_tier_match *m, int64_t node_ns);

/* Drops every open request and open call (overload pause: their events are
 * no longer complete); counts them as cut. Closed requests are kept. */
void kp_tier_match_cut(kp_tier_match *m);

kp_tier_match_counters kp_tier_match_counts(const kp_tier_match *m);

#endif

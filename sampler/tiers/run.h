/* `kprof tiers`: tier tracing of a live node, aggregated outside it.
 *
 * kprof loads its agent, has kprof_tiers arm the trace patterns of the tier
 * file, reads the events (from its tracer NIF, which it brings into the
 * node when on the node's host, else from the node's ip trace port) over
 * TCP, matches calls with returns
 * (tier_match.h), and every report interval prints a table and appends a
 * JSON line; at the end it prints and writes the totals. Overload (events
 * older than max_lag, or events the port dropped) pauses tracing for a
 * cool-down; pauses are reported, never silent. */
#ifndef KP_TIERS_RUN_H
#define KP_TIERS_RUN_H

#include <stdint.h>

#include <kp/tier_stats.h>

typedef struct {
    const char *node;        /* as given: name or name@host */
    const char *cookie_file; /* NULL: $KPROF_COOKIE, ~/.erlang.cookie */
    unsigned connect_timeout_ms;
    const char *tiers_file; /* Erlang terms: the tier_config and options */
    int session;            /* started by kprof:start_trace/1 in the node: the
                                   options come from there, the code is there */
    uint64_t duration_us;   /* 0: until Ctrl-C or tracing stops */
    const char *output_dir; /* NULL: no files */
    /* overrides of the tier file; 0 keeps the file's value */
    uint64_t report_interval_us, max_lag_us, cooldown_us, slow_us;
    unsigned queue_size;
    int trace_port;    /* the ip trace port even where the NIF could serve */
    int print_calls;   /* 1 forces on, 0 keeps the file's */
    kp_tier_stat stat; /* what the live table shows */
    int quiet;         /* no live tables */
} kp_tiers_options;

/* Runs a session; returns the process exit code (cli.h). */
int kp_tiers_run(const kp_tiers_options *options);

#endif

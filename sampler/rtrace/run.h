/* `kprof trace`: the request-trace collector attached to a node (see
 * rtrace/run.c and rtrace/collect.h). */
#ifndef KP_RTRACE_RUN_H
#define KP_RTRACE_RUN_H

#include <stdint.h>

typedef struct {
    const char *node;
    const char *cookie_file;
    unsigned connect_timeout_ms;
    int session;     /* started by kprof_rtrace in the node */
    const char *pid; /* "<0.123.0>": trace this process */
    const char *mfa; /* "m:f/a": trace the next `count` calls of it */
    char mfa_module[256], mfa_function[256];
    unsigned mfa_arity;
    const char *match;       /* --match: which calls (kprof_rtrace_calls:selection/2) */
    int no_follow;           /* --no-follow: a call's trace holds its own process only */
    int no_otp_calls;        /* --no-otp-calls: the setting otp_calls false */
    uint64_t slower_than_us; /* --slower-than: only calls that took this long are written */
    uint64_t count;          /* calls traced; with slower_than_us, calls written */
    uint64_t duration_us;    /* of a --pid trace; at most, for --mfa */
    const char *output_dir;
    int erlang_names; /* --erlang-names: Elixir frames as Elixir.Mod:fun/1 */
} kp_rtrace_run_options;

/* Runs the collector; returns the process exit code (cli.h). */
int kp_rtrace_run(const kp_rtrace_run_options *options);

#endif

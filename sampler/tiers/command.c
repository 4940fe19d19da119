/* Options of `kprof tiers`. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "common/units.h"
#include "tiers/run.h"

static const char tiers_usage[] =
    "Usage: kprof tiers --node NODE --tiers FILE [OPTIONS]\n"
    "\n"
    "Times each layer (\"tier\") of the requests of a running node, per kind of\n"
    "request. A request is marked at its entry (the `entry` function of the tier\n"
    "file, or kprof:do_apply/3 and kprof:set_token/1 in the code) with a seq_trace\n"
    "token; the tier functions are traced only under that token, in whatever\n"
    "process the request reaches. Events are matched and aggregated here, not in\n"
    "the node; every trace pattern and flag is removed when kprof stops, even\n"
    "after kill -9.\n"
    "\n"
    "The tier file holds Erlang terms, each ending with a dot:\n"
    "  {parsing, {kv_parser, parse, 1}}.       a tier: {Name, {Module, Function, Arity}}\n"
    "  {entry, {kv, request, 1}}.              mark requests at this function\n"
    "  {identity_arg, 1}.                      its argument naming the request kind\n"
    "                                          (an atom, a string, or a tuple's first element)\n"
    "  {slow_threshold, 50000}.                print requests slower than this (us)\n"
    "and any option of kprof:start_trace/1 (report_interval, print_calls, max_lag,\n"
    "cooldown, queue_size, max_identities).\n"
    "\n"
    "Options:\n"
    "  -n, --node NODE          name@host, or name (this host)\n"
    "      --tiers FILE         the tier file (required)\n"
    "  -d, --duration T         stop after T [until Ctrl-C or tracing stops]\n"
    "  -o, --output DIR         write DIR/tiers.jsonl (a JSON line per interval),\n"
    "                           DIR/tiers.txt (the final table), DIR/calls.log\n"
    "      --report-interval T  a table every T [tier file, else 5s]\n"
    "      --stat S             the table shows mean | p50 | p90 | p99 | max | count [mean]\n"
    "      --print-calls        print each request's call tree with microseconds\n"
    "      --slow-threshold T   print the call tree of requests slower than T; with\n"
    "                           -o, write their request traces into DIR/slow\n"
    "                           (flame graph, timeline: their tier calls)\n"
    "      --max-lag T          pause tracing when events are older than T [1s]\n"
    "      --cooldown T         how long a pause lasts [5s]\n"
    "      --queue-size N       events the node's trace port holds [50000]\n"
    "      --trace-port         send events through runtime_tools' ip trace port,\n"
    "                           as when kprof is not on the node's host [on its\n"
    "                           host: kprof's tracer NIF, whose memory is bounded]\n"
    "      --cookie-file FILE   the cookie, or a release's vm.args that sets it\n"
    "                           [$KPROF_COOKIE, else ~/.erlang.cookie]\n"
    "      --connect-timeout T  [5s]\n"
    "      --session            take the options from kprof:start_trace/1 in the\n"
    "                           node (kprof_session starts kprof this way)\n"
    "  -q, --quiet              print only the final table\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Example:\n"
    "  kprof tiers -n app@host --tiers kv.tiers -d 30s -o tiers-out\n"
    "\n"
    "Exit status: 0 success, 1 I/O failure, 2 usage error, 3 bad tier file,\n"
    "4 node unreachable, busy or lost.\n";

/* Reads a duration from `min_us` to a day; returns KP_EXIT_OK or the usage
 * error it reported, so an option parser can return it as it is. */
static int duration(const char *option, const char *text, uint64_t min_us, uint64_t *us)
{
    if (kp_parse_duration(text, us) != 0 || *us < min_us || *us > 86400ull * 1000000)
        return kp_bad_value(option, text, "a duration such as 500ms, 5s or 2m");
    return KP_EXIT_OK;
}

/* getopt_long's codes for the options without a short form. */
enum {
    OPT_TIERS = 1000,
    OPT_COOKIE,
    OPT_CONNECT,
    OPT_INTERVAL,
    OPT_STAT,
    OPT_PRINT,
    OPT_SLOW,
    OPT_LAG,
    OPT_COOLDOWN,
    OPT_QUEUE,
    OPT_SESSION,
    OPT_TRACE_PORT
};

/* Which node, how to reach it and what to trace there: --node, --tiers,
 * --session, --trace-port, --cookie-file, --connect-timeout. Returns -1 for another
 * option, else KP_EXIT_OK or KP_EXIT_USAGE for a bad value (reported). */
static int parse_target(int opt, const char *arg, kp_tiers_options *o)
{
    switch (opt) {
    case 'n': o->node = arg; return KP_EXIT_OK;
    case OPT_TIERS: o->tiers_file = arg; return KP_EXIT_OK;
    case OPT_SESSION: o->session = 1; return KP_EXIT_OK;
    case OPT_TRACE_PORT: o->trace_port = 1; return KP_EXIT_OK;
    case OPT_COOKIE: o->cookie_file = arg; return KP_EXIT_OK;
    case OPT_CONNECT: return kp_parse_connect_timeout(arg, &o->connect_timeout_ms);
    default: return -1;
    }
}

/* What is printed and written: --output, --report-interval, --stat,
 * --print-calls, --slow-threshold, --quiet. Returns -1 for another option,
 * else KP_EXIT_OK or KP_EXIT_USAGE for a bad value (reported). */
static int parse_report(int opt, const char *arg, kp_tiers_options *o)
{
    static const char *const stat_names[] = {"mean", "p50", "p90", "p99", "max", "count"};
    switch (opt) {
    case 'o': o->output_dir = arg; return KP_EXIT_OK;
    case OPT_INTERVAL: return duration("--report-interval", arg, 100000, &o->report_interval_us);
    case OPT_STAT: {
        size_t k = 0;
        while (k < 6 && strcmp(arg, stat_names[k]) != 0)
            k++;
        if (k == 6)
            return kp_bad_value("--stat", arg, "use mean, p50, p90, p99, max or count");
        o->stat = (kp_tier_stat)k;
        return KP_EXIT_OK;
    }
    case OPT_PRINT: o->print_calls = 1; return KP_EXIT_OK;
    case OPT_SLOW: return duration("--slow-threshold", arg, 1, &o->slow_us);
    case 'q': o->quiet = 1; return KP_EXIT_OK;
    default: return -1;
    }
}

/* When tracing stops or pauses to spare the node: --duration, --max-lag,
 * --cooldown, --queue-size. Returns -1 for another option, else KP_EXIT_OK
 * or KP_EXIT_USAGE for a bad value (reported). */
static int parse_limits(int opt, const char *arg, kp_tiers_options *o)
{
    uint64_t v;
    switch (opt) {
    case 'd': return duration("--duration", arg, 1, &o->duration_us);
    case OPT_LAG: return duration("--max-lag", arg, 1000, &o->max_lag_us);
    case OPT_COOLDOWN: return duration("--cooldown", arg, 100000, &o->cooldown_us);
    case OPT_QUEUE:
        if (kp_parse_uint(arg, 10, 10000000, &v) != 0)
            return kp_bad_value("--queue-size", arg, "a number of events from 10 to 10000000");
        o->queue_size = (unsigned)v;
        return KP_EXIT_OK;
    default: return -1;
    }
}

/* The checks no single option can make, after all are read (--session stands
 * in for --tiers); returns the exit code. */
static int check_options(const kp_tiers_options *o, char **operands, int n_operands)
{
    if (n_operands > 0)
        return kp_unexpected_argument("tiers", operands[0]);
    if (!o->node) {
        kp_error("which node? add --node NAME@HOST");
        return KP_EXIT_USAGE;
    }
    if (!o->tiers_file && !o->session) {
        kp_error("which tiers? add --tiers FILE (see 'kprof tiers --help' for its terms)");
        return KP_EXIT_USAGE;
    }
    return KP_EXIT_OK;
}

int kp_cmd_tiers(int argc, char **argv)
{
    static const struct option options[] = {
        {"node", required_argument, NULL, 'n'},
        {"tiers", required_argument, NULL, OPT_TIERS},
        {"duration", required_argument, NULL, 'd'},
        {"output", required_argument, NULL, 'o'},
        {"report-interval", required_argument, NULL, OPT_INTERVAL},
        {"stat", required_argument, NULL, OPT_STAT},
        {"print-calls", no_argument, NULL, OPT_PRINT},
        {"slow-threshold", required_argument, NULL, OPT_SLOW},
        {"max-lag", required_argument, NULL, OPT_LAG},
        {"cooldown", required_argument, NULL, OPT_COOLDOWN},
        {"queue-size", required_argument, NULL, OPT_QUEUE},
        {"cookie-file", required_argument, NULL, OPT_COOKIE},
        {"connect-timeout", required_argument, NULL, OPT_CONNECT},
        {"session", no_argument, NULL, OPT_SESSION},
        {"trace-port", no_argument, NULL, OPT_TRACE_PORT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    kp_tiers_options o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = 5000;
    o.stat = KP_TIER_MEAN;
    int opt, rc;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":n:d:o:qh", options, NULL)) != -1) {
        if (opt == 'h') {
            fputs(tiers_usage, stdout);
            return KP_EXIT_OK;
        }
        rc = parse_target(opt, optarg, &o);
        if (rc < 0)
            rc = parse_report(opt, optarg, &o);
        if (rc < 0)
            rc = parse_limits(opt, optarg, &o);
        if (rc < 0)
            return kp_bad_option("tiers", opt, argv[optind - 1]);
        if (rc != KP_EXIT_OK)
            return rc;
    }
    rc = check_options(&o, argv + optind, argc - optind);
    return rc != KP_EXIT_OK ? rc : kp_tiers_run(&o);
}

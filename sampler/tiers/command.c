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
    "      --slow-threshold T   print the call tree of requests slower than T\n"
    "      --max-lag T          pause tracing when events are older than T [1s]\n"
    "      --cooldown T         how long a pause lasts [5s]\n"
    "      --queue-size N       events the node's trace port holds [50000]\n"
    "      --cookie-file FILE   cookie [$KPROF_COOKIE, else ~/.erlang.cookie]\n"
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

static int duration(const char *option, const char *text, uint64_t min_us, uint64_t *us)
{
    if (kp_parse_duration(text, us) != 0 || *us < min_us || *us > 86400ull * 1000000)
        return kp_bad_value(option, text, "a duration such as 500ms, 5s or 2m");
    return 0;
}

int kp_cmd_tiers(int argc, char **argv)
{
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
        OPT_SESSION
    };
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
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    static const char *const stat_names[] = {"mean", "p50", "p90", "p99", "max", "count"};
    kp_tiers_options o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = 5000;
    o.stat = KP_TIER_MEAN;
    uint64_t v;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":n:d:o:qh", options, NULL)) != -1) {
        switch (opt) {
        case 'n': o.node = optarg; break;
        case OPT_TIERS: o.tiers_file = optarg; break;
        case 'd':
            if (duration("--duration", optarg, 1, &o.duration_us))
                return KP_EXIT_USAGE;
            break;
        case 'o': o.output_dir = optarg; break;
        case OPT_INTERVAL:
            if (duration("--report-interval", optarg, 100000, &o.report_interval_us))
                return KP_EXIT_USAGE;
            break;
        case OPT_STAT: {
            size_t k = 0;
            while (k < 6 && strcmp(optarg, stat_names[k]) != 0)
                k++;
            if (k == 6)
                return kp_bad_value("--stat", optarg, "use mean, p50, p90, p99, max or count");
            o.stat = (kp_tier_stat)k;
            break;
        }
        case OPT_PRINT: o.print_calls = 1; break;
        case OPT_SLOW:
            if (duration("--slow-threshold", optarg, 1, &o.slow_us))
                return KP_EXIT_USAGE;
            break;
        case OPT_LAG:
            if (duration("--max-lag", optarg, 1000, &o.max_lag_us))
                return KP_EXIT_USAGE;
            break;
        case OPT_COOLDOWN:
            if (duration("--cooldown", optarg, 100000, &o.cooldown_us))
                return KP_EXIT_USAGE;
            break;
        case OPT_QUEUE:
            if (kp_parse_uint(optarg, 10, 10000000, &v) != 0)
                return kp_bad_value("--queue-size", optarg,
                                    "a number of events from 10 to 10000000");
            o.queue_size = (unsigned)v;
            break;
        case OPT_COOKIE: o.cookie_file = optarg; break;
        case OPT_CONNECT:
            if (kp_parse_connect_timeout(optarg, &o.connect_timeout_ms) != 0)
                return KP_EXIT_USAGE;
            break;
        case OPT_SESSION: o.session = 1; break;
        case 'q': o.quiet = 1; break;
        case 'h': fputs(tiers_usage, stdout); return KP_EXIT_OK;
        default: return kp_bad_option("tiers", opt, argv[optind - 1]);
        }
    }
    if (optind < argc)
        return kp_unexpected_argument("tiers", argv[optind]);
    if (!o.node) {
        kp_error("which node? add --node NAME@HOST");
        return KP_EXIT_USAGE;
    }
    if (!o.tiers_file && !o.session) {
        kp_error("which tiers? add --tiers FILE (see 'kprof tiers --help' for its terms)");
        return KP_EXIT_USAGE;
    }
    return kp_tiers_run(&o);
}

/* Options of `kprof top`. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>

#include "commands.h"
#include "common/cli.h"
#include "common/units.h"
#include "top/run.h"

static const char usage[] =
    "Usage: kprof top --node NODE [OPTIONS]\n"
    "\n"
    "A live view of a running Erlang node, refreshed every second: its hottest\n"
    "functions (self and total share of the node's CPU samples, or of the\n"
    "reductions of its busiest processes) and those processes (CPU share,\n"
    "reductions per second, queue, memory, current function).\n"
    "On a terminal it takes the screen and reads keys; otherwise it prints a\n"
    "timestamped block of plain lines each interval. The node needs no\n"
    "preparation and is left as it was, even after kill -9.\n"
    "\n"
    "Options:\n"
    "  -n, --node NODE          node to watch: name@host, or name (this host)\n"
    "      --cookie-file FILE   the cookie, or a release's vm.args that sets it\n"
    "                           [$KPROF_COOKIE, else ~/.erlang.cookie]\n"
    "      --connect-timeout T  [5s]\n"
    "  -t, --top N              processes sampled, the busiest by reductions [50]\n"
    "  -r, --rate HZ            samples per second per process [10]\n"
    "      --depth N            deepest stack read, in frames [64]\n"
    "      --erlang-names       name Elixir functions as Erlang does\n"
    "                           (Elixir.MyApp.Hot:spin/2), not as Elixir does\n"
    "                           (MyApp.Hot.spin/2, anonymous fn/1 in ...)\n"
    "      --cpu-rate HZ        native CPU samples per second per thread of the\n"
    "                           node, 0 = off [997]; needs kprof on the node's\n"
    "                           host, allowed to sample and read it (root, or\n"
    "                           CAP_PERFMON and CAP_SYS_PTRACE), else the view\n"
    "                           falls back to reductions\n"
    "  -i, --interval T         refresh every T [1s]\n"
    "  -d, --duration T         stop after T [until q, Ctrl-C, SIGTERM, SIGHUP]\n"
    "      --rows N             rows per table [as many as fit; 10 when not on\n"
    "                           a terminal]\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Keys:\n"
    "  q quit, p or space pause, s/t functions by self/total share,\n"
    "  c/r/m/l processes by CPU, reductions, memory, message queue length,\n"
    "  a the last interval or everything since the start\n"
    "\n"
    "Examples:\n"
    "  kprof top --node app@host\n"
    "  kprof top -n app --duration 10s | tee top.log\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage error, 4 node unreachable or lost.\n";

enum { OPT_COOKIE = 1000, OPT_CONNECT, OPT_DEPTH, OPT_CPU_RATE, OPT_ROWS, OPT_ERLANG_NAMES };

static const struct option options[] = {{"node", required_argument, NULL, 'n'},
                                        {"cookie-file", required_argument, NULL, OPT_COOKIE},
                                        {"connect-timeout", required_argument, NULL, OPT_CONNECT},
                                        {"top", required_argument, NULL, 't'},
                                        {"rate", required_argument, NULL, 'r'},
                                        {"depth", required_argument, NULL, OPT_DEPTH},
                                        {"cpu-rate", required_argument, NULL, OPT_CPU_RATE},
                                        {"interval", required_argument, NULL, 'i'},
                                        {"duration", required_argument, NULL, 'd'},
                                        {"rows", required_argument, NULL, OPT_ROWS},
                                        {"erlang-names", no_argument, NULL, OPT_ERLANG_NAMES},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};

/* Handles one option. Returns -1 when `opt` is not one, else KP_EXIT_OK or
 * the exit code of a bad value (printed). */
static int parse(int opt, const char *arg, kp_top_options *o)
{
    uint64_t v;
    switch (opt) {
    case 'n': o->node = arg; return KP_EXIT_OK;
    case OPT_COOKIE: o->cookie_file = arg; return KP_EXIT_OK;
    case OPT_CONNECT:
        return kp_parse_connect_timeout(arg, &o->connect_timeout_ms) != 0 ? KP_EXIT_USAGE
                                                                          : KP_EXIT_OK;
    case 't': return kp_parse_top_option(arg, &o->top);
    case 'r':
        if (kp_parse_rate(arg, 1000, &o->rate) != 0)
            return kp_bad_value("--rate", arg, "samples per second, above 0 and up to 1000");
        return KP_EXIT_OK;
    case OPT_DEPTH: return kp_parse_depth_option(arg, &o->depth);
    case OPT_ERLANG_NAMES: o->erlang_names = 1; return KP_EXIT_OK;
    case OPT_CPU_RATE: return kp_parse_cpu_rate_option(arg, &o->cpu_rate);
    case 'i':
        if (kp_parse_duration(arg, &o->interval_us) != 0 || o->interval_us < 100000 ||
            o->interval_us > 3600000000u)
            return kp_bad_value("--interval", arg, "a duration from 100ms to 1h");
        return KP_EXIT_OK;
    case 'd':
        if (kp_parse_duration(arg, &o->duration_us) != 0)
            return kp_bad_value("--duration", arg, "a duration such as 30s, 5m or 1h");
        return KP_EXIT_OK;
    case OPT_ROWS:
        if (kp_parse_uint(arg, 1, 1000, &v) != 0)
            return kp_bad_value("--rows", arg, "a number of rows from 1 to 1000");
        o->rows = (unsigned)v;
        return KP_EXIT_OK;
    default: return -1;
    }
}

int kp_cmd_top(int argc, char **argv)
{
    kp_top_options o = {.connect_timeout_ms = 5000,
                        .top = 50,
                        .rate = 10,
                        .interval_us = 1000000,
                        .cpu_rate = 997,
                        .depth = 64};
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":n:t:r:i:d:h", options, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            return KP_EXIT_OK;
        }
        int rc = parse(opt, optarg, &o);
        if (rc < 0)
            return kp_bad_option("top", opt, argv[optind - 1]);
        if (rc != KP_EXIT_OK)
            return rc;
    }
    if (optind < argc)
        return kp_unexpected_argument("top", argv[optind]);
    if (!o.node) {
        kp_error("which node? add --node NAME@HOST");
        return KP_EXIT_USAGE;
    }
    return kp_top_run(&o);
}

/* Options of `kprof trace`. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "rtrace_run.h"
#include "units.h"

static const char trace_usage[] =
    "Usage: kprof trace --node NODE --pid PID [--duration T] [--output DIR]\n"
    "\n"
    "Traces everything one process does (and the processes it spawns) and\n"
    "writes it as an eflame-compatible folded file (microseconds, `sleep` for\n"
    "time scheduled out) and a perf-script file of its timeline:\n"
    "DIR/TIME-ID.folded and DIR/TIME-ID.perf. Trace patterns exist only while\n"
    "the trace runs.\n"
    "\n"
    "Inside the node, kprof:trace_request(Fun) traces one request from its\n"
    "first instruction, and the HTTP integrations trace requests that carry\n"
    "the header x-trace-request: true; the node then runs 'kprof trace\n"
    "--session' itself.\n"
    "\n"
    "Options:\n"
    "  -n, --node NODE          name@host, or name (this host)\n"
    "  -p, --pid PID            the process to trace, e.g. '<0.123.0>'\n"
    "  -d, --duration T         how long [5s]\n"
    "  -o, --output DIR         where the files go [.]\n"
    "      --session            collect for kprof_rtrace in the node (started by it)\n"
    "      --cookie-file FILE   cookie [$KPROF_COOKIE, else ~/.erlang.cookie]\n"
    "      --connect-timeout T  [5s]\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Exit status: 0 success, 1 a trace could not be written, 2 usage error,\n"
    "3 malformed trace stream, 4 node unreachable, busy or lost.\n";

static int bad_value(const char *option, const char *value, const char *expected)
{
    kp_error("invalid %s '%s': %s", option, value, expected);
    return KP_EXIT_USAGE;
}

int kp_cmd_trace(int argc, char **argv)
{
    enum { OPT_SESSION = 1000, OPT_COOKIE, OPT_CONNECT };
    static const struct option options[] = {
        {"node", required_argument, NULL, 'n'},
        {"pid", required_argument, NULL, 'p'},
        {"duration", required_argument, NULL, 'd'},
        {"output", required_argument, NULL, 'o'},
        {"session", no_argument, NULL, OPT_SESSION},
        {"cookie-file", required_argument, NULL, OPT_COOKIE},
        {"connect-timeout", required_argument, NULL, OPT_CONNECT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    kp_trace_options o = {.connect_timeout_ms = 5000, .duration_us = 5000000, .output_dir = "."};
    uint64_t v;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":n:p:d:o:h", options, NULL)) != -1) {
        switch (opt) {
        case 'n': o.node = optarg; break;
        case 'p': {
            unsigned a, b, c;
            char end;
            if (sscanf(optarg, "<%u.%u.%u%c", &a, &b, &c, &end) != 4 || end != '>' ||
                optarg[strlen(optarg) - 1] != '>')
                return bad_value("--pid", optarg, "write it as <0.123.0>");
            o.pid = optarg;
            break;
        }
        case 'd':
            if (kp_parse_duration(optarg, &o.duration_us) != 0 || o.duration_us > 3600000000u)
                return bad_value("--duration", optarg, "a duration such as 500ms or 5s, up to 1h");
            break;
        case 'o': o.output_dir = optarg; break;
        case OPT_SESSION: o.session = 1; break;
        case OPT_COOKIE: o.cookie_file = optarg; break;
        case OPT_CONNECT:
            if (kp_parse_duration(optarg, &v) != 0 || v < 1000 || v > 600000000u)
                return bad_value("--connect-timeout", optarg, "a duration such as 5s, up to 10m");
            o.connect_timeout_ms = (unsigned)(v / 1000);
            break;
        case 'h': fputs(trace_usage, stdout); return KP_EXIT_OK;
        case ':':
            kp_error("option '%s' needs a value; see 'kprof trace --help'", argv[optind - 1]);
            return KP_EXIT_USAGE;
        default:
            kp_error("unknown option '%s'; see 'kprof trace --help'", argv[optind - 1]);
            return KP_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        kp_error("unexpected argument '%s'; see 'kprof trace --help'", argv[optind]);
        return KP_EXIT_USAGE;
    }
    if (!o.node) {
        kp_error("which node? add --node NAME@HOST");
        return KP_EXIT_USAGE;
    }
    if (!o.session && !o.pid) {
        kp_error("which process? add --pid '<0.123.0>'");
        return KP_EXIT_USAGE;
    }
    return kp_trace_run(&o);
}

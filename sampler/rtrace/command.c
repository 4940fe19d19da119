/* Options of `kprof trace`. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "common/units.h"
#include "rtrace/run.h"

static const char trace_usage[] =
    "Usage: kprof trace --node NODE --pid PID [--no-otp-calls] [--duration T]\n"
    "                   [--output DIR]\n"
    "       kprof trace --node NODE --mfa M:F/A [--match HEAD] [--slower-than T]\n"
    "                   [--no-follow] [--no-otp-calls] [--count K] [--duration T]\n"
    "                   [--output DIR]\n"
    "\n"
    "Traces everything one process does (and the processes it spawns), or\n"
    "the next K calls of a function, each from the call to its return in\n"
    "whatever process makes it and in the processes its messages reach (as\n"
    "request traces are followed), and writes each trace as an eflame-compatible\n"
    "folded file (microseconds, `sleep` for time scheduled out), its flame\n"
    "graph for a web browser and a perf-script file of its timeline:\n"
    "DIR/TIME-ID.folded, DIR/TIME-ID.svg and DIR/TIME-ID.perf. Trace patterns\n"
    "exist only while the trace runs.\n"
    "\n"
    "Inside the node, kprof:trace_request(Fun) traces one request from its\n"
    "first instruction, and the HTTP integrations trace requests that carry\n"
    "the header x-trace-request: true; the node then runs 'kprof trace\n"
    "--session' itself.\n"
    "\n"
    "Options:\n"
    "  -n, --node NODE          name@host, or name (this host)\n"
    "  -p, --pid PID            the process to trace, e.g. '<0.123.0>'\n"
    "  -m, --mfa M:F/A          trace calls of this function, e.g. kv:handle/2\n"
    "                           (Elixir: MyApp.KV.handle/2)\n"
    "      --match HEAD         only calls whose arguments match HEAD, a match\n"
    "                           head as dbg:tp takes it, e.g. \"['_', {get, '_'}]\",\n"
    "                           or a fun as dbg:fun2ms takes it, e.g.\n"
    "                           \"fun([K, _]) when is_binary(K) -> true end\"\n"
    "                           (a record is written as its tuple)\n"
    "      --slower-than T      write only the calls that took T or longer, from\n"
    "                           call to return (every call is traced; the others\n"
    "                           are dropped); --count then counts those written\n"
    "      --no-follow          trace each call in its own process only\n"
    "      --no-otp-calls       no frames of Erlang/OTP's or Elixir's own modules:\n"
    "                           their time is their callers' (far fewer events,\n"
    "                           when this trace arms the patterns)\n"
    "  -c, --count K            how many calls [1]\n"
    "  -d, --duration T         how long (with --mfa: at most) [5s]\n"
    "  -o, --output DIR         where the files go [.]\n"
    "      --erlang-names       name Elixir functions as Erlang does\n"
    "                           (Elixir.MyApp.Hot:spin/2), not as Elixir does\n"
    "                           (MyApp.Hot.spin/2, anonymous fn/1 in ...)\n"
    "      --session            collect for kprof_rtrace in the node (started by it)\n"
    "      --cookie-file FILE   the cookie, or a release's vm.args that sets it\n"
    "                           [$KPROF_COOKIE, else ~/.erlang.cookie]\n"
    "      --connect-timeout T  [5s]\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Exit status: 0 success, 1 a trace could not be written, 2 usage error,\n"
    "3 malformed trace stream, 4 node unreachable, busy or lost.\n";

enum {
    OPT_SESSION = 1000,
    OPT_COOKIE,
    OPT_CONNECT,
    OPT_ERLANG_NAMES,
    OPT_MATCH,
    OPT_SLOWER,
    OPT_NO_FOLLOW,
    OPT_NO_OTP_CALLS
};

static const struct option trace_options[] = {
    {"node", required_argument, NULL, 'n'},
    {"pid", required_argument, NULL, 'p'},
    {"mfa", required_argument, NULL, 'm'},
    {"match", required_argument, NULL, OPT_MATCH},
    {"slower-than", required_argument, NULL, OPT_SLOWER},
    {"no-follow", no_argument, NULL, OPT_NO_FOLLOW},
    {"no-otp-calls", no_argument, NULL, OPT_NO_OTP_CALLS},
    {"count", required_argument, NULL, 'c'},
    {"duration", required_argument, NULL, 'd'},
    {"output", required_argument, NULL, 'o'},
    {"session", no_argument, NULL, OPT_SESSION},
    {"erlang-names", no_argument, NULL, OPT_ERLANG_NAMES},
    {"cookie-file", required_argument, NULL, OPT_COOKIE},
    {"connect-timeout", required_argument, NULL, OPT_CONNECT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

/* --mfa's function into o->mfa_*: Erlang's "kv:handle/2", or Elixir's
 * "MyApp.KV.handle/2" (module Elixir.MyApp.KV, as the node knows it).
 * Returns 0, or -1 when it is neither. */
static int parse_mfa(const char *arg, kp_rtrace_run_options *o)
{
    int used = 0;
    if (strchr(arg, ':'))
        return sscanf(arg, "%255[^:]:%255[^/]/%u%n", o->mfa_module, o->mfa_function, &o->mfa_arity,
                      &used) == 3 &&
                       arg[used] == '\0' && o->mfa_arity <= 255
                   ? 0
                   : -1;
    const char *slash = strrchr(arg, '/'), *dot = NULL;
    for (const char *c = arg; slash && c < slash; c++)
        if (*c == '.')
            dot = c;
    if (arg[0] < 'A' || arg[0] > 'Z' || !dot || dot + 1 == slash || !slash[1] ||
        strspn(slash + 1, "0123456789") != strlen(slash + 1) || strlen(slash + 1) > 3)
        return -1;
    int n = snprintf(o->mfa_module, sizeof o->mfa_module, "Elixir.%.*s", (int)(dot - arg), arg);
    if (n < 0 || (size_t)n >= sizeof o->mfa_module ||
        (size_t)(slash - dot - 1) >= sizeof o->mfa_function)
        return -1;
    snprintf(o->mfa_function, sizeof o->mfa_function, "%.*s", (int)(slash - dot - 1), dot + 1);
    o->mfa_arity = (unsigned)atoi(slash + 1);
    return o->mfa_arity <= 255 ? 0 : -1;
}

/* What to trace: --node, --pid, --mfa, --session. Returns -1 when `opt` is
 * none of these, else KP_EXIT_OK or the exit code of a bad value (already
 * reported). */
static int parse_target(int opt, const char *arg, kp_rtrace_run_options *o)
{
    switch (opt) {
    case 'n': o->node = arg; return KP_EXIT_OK;
    case 'p':
        if (!kp_looks_like_pid(arg))
            return kp_bad_value("--pid", arg, "write it as <0.123.0>");
        o->pid = arg;
        return KP_EXIT_OK;
    case 'm':
        if (parse_mfa(arg, o) != 0)
            return kp_bad_value(
                "--mfa", arg,
                "write it as module:function/arity or, in Elixir, Module.function/arity");
        o->mfa = arg;
        return KP_EXIT_OK;
    case OPT_SESSION: o->session = 1; return KP_EXIT_OK;
    default: return -1;
    }
}

/* Which calls of --mfa and how: --match, --slower-than, --no-follow.
 * Returns as parse_target does. */
static int parse_calls(int opt, const char *arg, kp_rtrace_run_options *o)
{
    switch (opt) {
    case OPT_MATCH:
        if (strlen(arg) > 4096)
            return kp_bad_value("--match", "(longer than 4096 characters)",
                                "a match head such as \"['_', {get, '_'}]\"");
        o->match = arg;
        return KP_EXIT_OK;
    case OPT_SLOWER:
        if (kp_parse_duration(arg, &o->slower_than_us) != 0 || o->slower_than_us == 0 ||
            o->slower_than_us > 3600000000u)
            return kp_bad_value("--slower-than", arg, "a duration such as 50ms or 2s, up to 1h");
        return KP_EXIT_OK;
    case OPT_NO_FOLLOW: o->no_follow = 1; return KP_EXIT_OK;
    case OPT_NO_OTP_CALLS: o->no_otp_calls = 1; return KP_EXIT_OK;
    default: return -1;
    }
}

/* How much and where: --count, --duration, --output, --erlang-names. Returns as
 * parse_target does. */
static int parse_bounds(int opt, const char *arg, kp_rtrace_run_options *o)
{
    uint64_t v;
    switch (opt) {
    case 'c':
        if (kp_parse_uint(arg, 1, 1000, &v) != 0)
            return kp_bad_value("--count", arg, "a number of calls from 1 to 1000");
        o->count = v;
        return KP_EXIT_OK;
    case 'd':
        if (kp_parse_duration(arg, &o->duration_us) != 0 || o->duration_us > 3600000000u)
            return kp_bad_value("--duration", arg, "a duration such as 500ms or 5s, up to 1h");
        return KP_EXIT_OK;
    case 'o': o->output_dir = arg; return KP_EXIT_OK;
    case OPT_ERLANG_NAMES: o->erlang_names = 1; return KP_EXIT_OK;
    default: return -1;
    }
}

/* Reaching the node: --cookie-file, --connect-timeout. Returns as
 * parse_target does. */
static int parse_connection(int opt, const char *arg, kp_rtrace_run_options *o)
{
    switch (opt) {
    case OPT_COOKIE: o->cookie_file = arg; return KP_EXIT_OK;
    case OPT_CONNECT:
        /* kp_parse_connect_timeout reports a bad value itself */
        return kp_parse_connect_timeout(arg, &o->connect_timeout_ms) != 0 ? KP_EXIT_USAGE
                                                                          : KP_EXIT_OK;
    default: return -1;
    }
}

/* Checks that need all the options: a node, and outside a session exactly
 * one of --pid and --mfa. Returns KP_EXIT_OK, or KP_EXIT_USAGE with the
 * error printed. */
static int check_options(const kp_rtrace_run_options *o)
{
    if (!o->node) {
        kp_error("which node? add --node NAME@HOST");
        return KP_EXIT_USAGE;
    }
    if (!o->session && !o->pid == !o->mfa) {
        kp_error(
            "what to trace? add --pid '<0.123.0>' or --mfa module:function/arity (one of them)");
        return KP_EXIT_USAGE;
    }
    if (!o->mfa && (o->match || o->slower_than_us || o->no_follow)) {
        kp_error("--match, --slower-than and --no-follow choose calls of --mfa: add --mfa "
                 "module:function/arity");
        return KP_EXIT_USAGE;
    }
    return KP_EXIT_OK;
}

int kp_cmd_trace(int argc, char **argv)
{
    kp_rtrace_run_options o = {
        .connect_timeout_ms = 5000, .duration_us = 5000000, .output_dir = ".", .count = 1};
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":n:p:m:c:d:o:h", trace_options, NULL)) != -1) {
        if (opt == 'h') {
            fputs(trace_usage, stdout);
            return KP_EXIT_OK;
        }
        int rc = parse_target(opt, optarg, &o);
        if (rc < 0)
            rc = parse_calls(opt, optarg, &o);
        if (rc < 0)
            rc = parse_bounds(opt, optarg, &o);
        if (rc < 0)
            rc = parse_connection(opt, optarg, &o);
        if (rc < 0)
            return kp_bad_option("trace", opt, argv[optind - 1]);
        if (rc != KP_EXIT_OK)
            return rc;
    }
    if (optind < argc)
        return kp_unexpected_argument("trace", argv[optind]);
    int code = check_options(&o);
    return code != KP_EXIT_OK ? code : kp_rtrace_run(&o);
}

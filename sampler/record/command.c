/* Options of `kprof record` and `kprof dump`. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "common/units.h"
#include "record/node_options.h"
#include "record/run.h"

static const char record_usage[] =
    "Usage: kprof record --node NODE [OPTIONS]\n"
    "\n"
    "Samples the busiest processes of a running Erlang node: their stacks and\n"
    "metrics, many times a second, into perf-script segments (FlameScope,\n"
    "speedscope), folded stacks weighted by each metric (flamegraph.pl) and\n"
    "their flame graphs (.svg, for a web browser).\n"
    "kprof attaches as a hidden node and loads its agent; the node needs no\n"
    "preparation, and every setting changed in it is undone when kprof stops,\n"
    "even after kill -9.\n"
    "\n"
    "Connection:\n"
    "  -n, --node NODE          node to profile: name@host, or name (this host);\n"
    "                           repeat it to record several nodes at once\n"
    "      --all-nodes          also record every node connected to the first\n"
    "      --cookie-file FILE   the cookie, or a release's vm.args that sets it\n"
    "                           [$KPROF_COOKIE, else ~/.erlang.cookie]\n"
    "      --connect-timeout T  [5s]\n"
    "Selection:\n"
    "  -t, --top N              sample the N busiest processes [100]\n"
    "      --select-by WHAT     reductions | memory (ranked by change), or\n"
    "                           message_queue_len | bin_vheap | total_heap_size\n"
    "                           (ranked by current value) [reductions]\n"
    "      --reselect T         re-rank processes every T [5s]; every second\n"
    "                           at first, while fewer than N have run\n"
    "  -p, --pid PID            sample this process ('<0.123.0>'); repeatable;\n"
    "                           replaces --top\n"
    "      --depth N            deepest stack kept, in frames [64]\n"
    "      --erlang-names       name Elixir functions as Erlang does\n"
    "                           (Elixir.MyApp.Hot:spin/2), not as Elixir does\n"
    "                           (MyApp.Hot.spin/2, anonymous fn/1 in ...)\n"
    "Rate and length:\n"
    "  -r, --rate HZ            samples per second per process [10]\n"
    "  -d, --duration T         stop after T (e.g. 30s, 5m) [until Ctrl-C]\n"
    "      --cpu-rate HZ        native CPU samples per second per thread of the\n"
    "                           node (cpu.folded), 0 = off [997]; needs kprof on\n"
    "                           the node's host, allowed to sample and read it\n"
    "                           (root, or CAP_PERFMON and CAP_SYS_PTRACE)\n"
    "Output:\n"
    "  -o, --output DIR         [kprof-NODE-UTCTIME]\n"
    "      --rotate-size SIZE   start a new segment after SIZE (e.g. 64M) [64M]\n"
    "      --rotate-time T      start a new segment after T of samples [60s]\n"
    "      --keep N             keep the newest N segments, 0 = all [0]\n"
    "      --compress C         none | gzip | zstd [gzip]\n"
    "      --pprof              beside each segment, its pprof profile (SEGMENT.pb.gz:\n"
    "                           samples and every metric, for go tool pprof,\n"
    "                           Pyroscope, Parca, Grafana)\n"
    "      --no-report          do not write report.html at the end (kprof report\n"
    "                           DIR writes it later, on any machine)\n"
    "  -q, --quiet              print errors only\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Examples:\n"
    "  kprof record --node app@host --duration 30s\n"
    "  kprof record -n app --top 20 --rate 100 --compress zstd -o prof\n"
    "  kprof record -n app --select-by message_queue_len --top 10\n"
    "  kprof dump -n app --top 5\n"
    "\n"
    "Exit status: 0 success, 1 I/O failure, 2 usage error, 4 node unreachable or lost.\n";

static const char dump_usage[] =
    "Usage: kprof dump --node NODE [--top N] [--select-by WHAT] [--pid PID]...\n"
    "\n"
    "Prints the stacks and metrics of the busiest processes of a node, once.\n"
    "Options as for kprof record: --node, --cookie-file, --connect-timeout,\n"
    "--top [10], --select-by, --pid, --depth, --erlang-names.\n";

enum {
    OPT_RESELECT = KP_OPT_NODE_END,
    OPT_RSIZE,
    OPT_RTIME,
    OPT_KEEP,
    OPT_COMPRESS,
    OPT_CPU_RATE,
    OPT_PPROF,
    OPT_NO_REPORT
};

static const struct option options[] = {KP_NODE_OPTIONS,
                                        {"reselect", required_argument, NULL, OPT_RESELECT},
                                        {"pid", required_argument, NULL, 'p'},
                                        {"rate", required_argument, NULL, 'r'},
                                        {"duration", required_argument, NULL, 'd'},
                                        {"output", required_argument, NULL, 'o'},
                                        {"rotate-size", required_argument, NULL, OPT_RSIZE},
                                        {"rotate-time", required_argument, NULL, OPT_RTIME},
                                        {"keep", required_argument, NULL, OPT_KEEP},
                                        {"compress", required_argument, NULL, OPT_COMPRESS},
                                        {"cpu-rate", required_argument, NULL, OPT_CPU_RATE},
                                        {"pprof", no_argument, NULL, OPT_PPROF},
                                        {"no-report", no_argument, NULL, OPT_NO_REPORT},
                                        {"quiet", no_argument, NULL, 'q'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};

/* The --node and --pid values, kept until the run ends. */
typedef struct {
    const char *nodes[KP_MAX_NODE_OPTIONS];
    const char *pids[256];
} named;

/* Handles an option of the nodes or the selection. Returns -1 when `opt`
 * is not one of them, else KP_EXIT_OK or the exit code of a bad value. */
static int parse_selection(int opt, const char *arg, kp_record_options *o, named *names)
{
    switch (opt) {
    case OPT_RESELECT:
        if (kp_parse_duration(arg, &o->reselect_us) != 0 || o->reselect_us < 100000)
            return kp_bad_value("--reselect", arg, "a duration of at least 100ms");
        return KP_EXIT_OK;
    case 'p':
        if (o->n_pids == sizeof names->pids / sizeof *names->pids)
            return kp_bad_value("--pid", arg, "at most 256 --pid options");
        if (!kp_looks_like_pid(arg))
            return kp_bad_value("--pid", arg, "write it as <0.123.0>");
        names->pids[o->n_pids++] = arg;
        return KP_EXIT_OK;
    default: return kp_node_option(opt, arg, o, names->nodes);
    }
}

/* Handles an option of the rate, the length or the output, as
 * parse_selection() does. */
static int parse_output(int opt, const char *arg, kp_record_options *o)
{
    uint64_t v;
    switch (opt) {
    case 'r':
        if (kp_parse_rate(arg, 10000, &o->rate) != 0)
            return kp_bad_value("--rate", arg, "samples per second, above 0 and up to 10000");
        return KP_EXIT_OK;
    case 'd':
        if (kp_parse_duration(arg, &o->duration_us) != 0)
            return kp_bad_value("--duration", arg, "a duration such as 30s, 5m or 1h");
        return KP_EXIT_OK;
    case 'o': o->output_dir = arg; return KP_EXIT_OK;
    case OPT_RSIZE:
        if (kp_parse_size(arg, &o->rotate_bytes) != 0 || o->rotate_bytes < 4096)
            return kp_bad_value("--rotate-size", arg, "a size such as 64M, at least 4K");
        return KP_EXIT_OK;
    case OPT_RTIME:
        if (kp_parse_duration(arg, &o->rotate_us) != 0 || o->rotate_us < 1000000)
            return kp_bad_value("--rotate-time", arg, "a duration of at least 1s");
        return KP_EXIT_OK;
    case OPT_KEEP:
        if (kp_parse_uint(arg, 0, 1000000, &v) != 0)
            return kp_bad_value("--keep", arg, "a number of segments (0 = all)");
        o->keep = (unsigned)v;
        return KP_EXIT_OK;
    case OPT_COMPRESS: {
        int c = kp_compression_from_name(arg);
        if (c < 0)
            return kp_bad_value("--compress", arg, "use none, gzip or zstd");
        o->compression = (kp_compression)c;
        return KP_EXIT_OK;
    }
    case OPT_PPROF: o->pprof = 1; return KP_EXIT_OK;
    case OPT_NO_REPORT: o->no_report = 1; return KP_EXIT_OK;
    case OPT_CPU_RATE: return kp_parse_cpu_rate_option(arg, &o->cpu_rate);
    case 'q': o->quiet = 1; return KP_EXIT_OK;
    default: return -1;
    }
}

/* The checks across options, once all are read. Returns KP_EXIT_OK or
 * KP_EXIT_USAGE with the error printed. */
static int check_options(const kp_record_options *o, int dump)
{
    if (!o->n_nodes) {
        kp_error("which node? add --node NAME@HOST");
        return KP_EXIT_USAGE;
    }
    if (dump && (o->n_nodes > 1 || o->all_nodes)) {
        kp_error("kprof dump takes one --node");
        return KP_EXIT_USAGE;
    }
    if (o->n_pids && (o->n_nodes > 1 || o->all_nodes)) {
        kp_error("--pid names a process of one node: use it with a single --node");
        return KP_EXIT_USAGE;
    }
    return KP_EXIT_OK;
}

static int run(int argc, char **argv, int dump)
{
    const char *command = dump ? "dump" : "record";
    kp_record_options o = {.connect_timeout_ms = 5000,
                           .top = dump ? 10 : 100,
                           .select_by = "reductions",
                           .reselect_us = 5000000,
                           .rate = 10,
                           .rotate_bytes = 64u << 20,
                           .rotate_us = 60000000,
                           .compression = KP_COMPRESS_GZIP,
                           .depth = 64,
                           .cpu_rate = dump ? 0 : 997};
    static named names;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":n:t:p:r:d:o:qh", options, NULL)) != -1) {
        if (opt == 'h') {
            fputs(dump ? dump_usage : record_usage, stdout);
            return KP_EXIT_OK;
        }
        int rc = parse_selection(opt, optarg, &o, &names);
        if (rc < 0)
            rc = parse_output(opt, optarg, &o);
        if (rc < 0)
            return kp_bad_option(command, opt, argv[optind - 1]);
        if (rc != KP_EXIT_OK)
            return rc;
    }
    if (optind < argc)
        return kp_unexpected_argument(command, argv[optind]);
    int rc = check_options(&o, dump);
    if (rc != KP_EXIT_OK)
        return rc;
    o.nodes = names.nodes;
    o.pids = names.pids;
    return dump ? kp_dump_run(&o) : kp_record_run(&o);
}

int kp_cmd_record(int argc, char **argv)
{
    return run(argc, argv, 0);
}

int kp_cmd_dump(int argc, char **argv)
{
    return run(argc, argv, 1);
}

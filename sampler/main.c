/* kprof: a profiler for Erlang/BEAM systems. This file only dispatches to the
 * subcommands and prints the global help and version. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "kprof_version.h"

static const char usage[] =
    "Usage: kprof COMMAND [OPTIONS]\n"
    "\n"
    "A profiler for Erlang/BEAM systems in production.\n"
    "\n"
    "Commands:\n"
    "  record --node NODE           sample a live node's busiest processes\n"
    "  report DIR [DIR_B]           one HTML page: heat maps, range flame graphs, diffs\n"
    "  dump --node NODE             print the stacks of its busiest processes, once\n"
    "  top --node NODE              a live view of its hottest functions and processes\n"
    "  push --node NODE             profile nodes without end, to an OpenTelemetry backend\n"
    "  tiers --node NODE --tiers F  time each layer of its requests, per kind of request\n"
    "  trace --node NODE --pid PID  trace one process into an eflame-compatible flame graph\n"
    "  convert INPUT... -o OUTPUT   convert and merge profiles (perf-script, folded, svg)\n"
    "\n"
    "Options:\n"
    "  -h, --help      show this help and exit\n"
    "  -V, --version   show the version and exit\n"
    "\n"
    "Run 'kprof COMMAND --help' for the options of a command.\n"
    "\n"
    "Exit status:\n"
    "  0  success\n"
    "  1  failure: I/O error, out of memory, disk full\n"
    "  2  usage error: unknown command or option, bad option value\n"
    "  3  unusable input: no sample parses, corrupt compressed data, bad tier file\n"
    "  4  node unreachable (unknown host, no epmd, no such node, wrong cookie), lost,\n"
    "     or too slow to answer now (its schedulers or the host overloaded)\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return KP_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return KP_EXIT_OK;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("kprof %s\n", KPROF_VERSION);
        return KP_EXIT_OK;
    }
    if (strcmp(cmd, "convert") == 0)
        return kp_cmd_convert(argc - 1, argv + 1);
    if (strcmp(cmd, "record") == 0)
        return kp_cmd_record(argc - 1, argv + 1);
    if (strcmp(cmd, "report") == 0)
        return kp_cmd_report(argc - 1, argv + 1);
    if (strcmp(cmd, "dump") == 0)
        return kp_cmd_dump(argc - 1, argv + 1);
    if (strcmp(cmd, "top") == 0)
        return kp_cmd_top(argc - 1, argv + 1);
    if (strcmp(cmd, "push") == 0)
        return kp_cmd_push(argc - 1, argv + 1);
    if (strcmp(cmd, "tiers") == 0)
        return kp_cmd_tiers(argc - 1, argv + 1);
    if (strcmp(cmd, "trace") == 0)
        return kp_cmd_trace(argc - 1, argv + 1);
    if (strcmp(cmd, "internal") == 0)
        return kp_cmd_internal(argc - 1, argv + 1);
    kp_error("unknown command '%s'; run 'kprof --help' for the list", cmd);
    return KP_EXIT_USAGE;
}

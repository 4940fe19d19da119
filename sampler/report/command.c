/* `kprof report DIR [DIR_B] [-o FILE]`: one self-contained HTML page to look
 * at a recording (heat maps, range flame graphs, filters, comparisons), or
 * at recording B compared with recording A. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "report/read.h"

static const char report_usage[] =
    "Usage: kprof report [OPTIONS] DIR [DIR_B]\n"
    "\n"
    "Writes one self-contained HTML page (no network, nothing to install) to look\n"
    "at a recording of kprof record. With native CPU samples it opens on them: the\n"
    "CPU by state per thread kind (msacc's states), the top functions and\n"
    "processes, their flame graph. Then a heat map per metric and one of the\n"
    "native CPU samples (a column per second, a row per offset within it); drag on\n"
    "one to see the flame graph of that range, weighted by samples or any metric;\n"
    "filter by process status (or CPU state) and by process; search; Shift+drag a\n"
    "second range to see how it differs from the first. With DIR_B, the page\n"
    "compares recording DIR_B with DIR: red where B spends a larger share, blue\n"
    "where a smaller one. kprof record writes DIR/report.html itself at the end of\n"
    "a run.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE   where to write [DIR/report.html; with DIR_B,\n"
    "                      DIR_B/compared.html]\n"
    "  -q, --quiet         print errors only\n"
    "  -h, --help          show this help and exit\n"
    "\n"
    "Examples:\n"
    "  kprof report kprof-app@host-20261126T101500Z\n"
    "  kprof report before/ after/ -o diff.html\n"
    "\n"
    "Exit status: 0 success, 1 I/O failure, 2 usage error, 3 unusable recording.\n";

int kp_cmd_report(int argc, char **argv)
{
    static const struct option longs[] = {{"output", required_argument, NULL, 'o'},
                                          {"quiet", no_argument, NULL, 'q'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    const char *out = NULL;
    int quiet = 0, opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":o:qh", longs, NULL)) != -1) {
        switch (opt) {
        case 'o': out = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': fputs(report_usage, stdout); return KP_EXIT_OK;
        default: return kp_bad_option("report", opt, argv[optind - 1]);
        }
    }
    int n = argc - optind;
    if (n < 1) {
        kp_error("give the directory kprof record wrote; see 'kprof report --help'");
        return KP_EXIT_USAGE;
    }
    if (n > 2)
        return kp_unexpected_argument("report", argv[optind + 2]);
    const char *dirs[2] = {argv[optind], n > 1 ? argv[optind + 1] : NULL};
    char path[4096];
    if (!out) {
        snprintf(path, sizeof path, "%s/%s", dirs[n - 1], n > 1 ? "compared.html" : "report.html");
        out = path;
    }
    return kp_report_build(dirs, (size_t)n, out, quiet);
}

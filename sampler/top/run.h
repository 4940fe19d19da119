/* `kprof top`: a live view of a node's hottest functions and processes. */
#ifndef KP_TOP_RUN_H
#define KP_TOP_RUN_H

#include <stdint.h>

typedef struct {
    const char *node;        /* as given */
    const char *cookie_file; /* NULL: $KPROF_COOKIE or ~/.erlang.cookie */
    unsigned connect_timeout_ms;
    unsigned top;         /* processes the agent samples */
    double rate;          /* samples per second per process */
    uint64_t interval_us; /* between refreshes */
    uint64_t duration_us; /* 0: until q, Ctrl-C or SIGTERM */
    unsigned cpu_rate;    /* native CPU samples per second per thread; 0 = off */
    unsigned rows;        /* rows per table; 0: fit the screen (10 without one) */
    unsigned depth;       /* deepest stack read */
    int erlang_names;     /* --erlang-names: Elixir frames as Elixir.Mod:fun/1 */
} kp_top_options;

/* Attaches to the node, shows the tables until asked to stop, leaves the
 * node as it was. On a terminal it takes the screen and reads keys; else it
 * prints a timestamped block of plain lines each interval. Returns the exit
 * code (common/cli.h), errors printed. */
int kp_top_run(const kp_top_options *options);

#endif

/* The options that kprof record (and dump) and kprof push share: which
 * nodes, how to reach them, which of their processes are sampled and how
 * deep. One parser and one table, so that the commands take them alike. */
#ifndef KP_RECORD_NODE_OPTIONS_H
#define KP_RECORD_NODE_OPTIONS_H

#include <getopt.h>

#include "record/run.h"

/* Their getopt_long keys beyond the letters -n and -t; a command's own
 * keys start past KP_OPT_NODE_END. */
enum {
    KP_OPT_ALL_NODES = 900,
    KP_OPT_COOKIE,
    KP_OPT_CONNECT,
    KP_OPT_SELECT,
    KP_OPT_DEPTH,
    KP_OPT_ERLANG_NAMES,
    KP_OPT_NODE_END
};

/* The most --node options one command takes. */
#define KP_MAX_NODE_OPTIONS 64

/* Their getopt_long entries, for a command's table. */
// clang-format off
#define KP_NODE_OPTIONS                                                   \
    {"node", required_argument, NULL, 'n'},                               \
    {"all-nodes", no_argument, NULL, KP_OPT_ALL_NODES},                   \
    {"cookie-file", required_argument, NULL, KP_OPT_COOKIE},              \
    {"connect-timeout", required_argument, NULL, KP_OPT_CONNECT},         \
    {"top", required_argument, NULL, 't'},                                \
    {"select-by", required_argument, NULL, KP_OPT_SELECT},                \
    {"depth", required_argument, NULL, KP_OPT_DEPTH},                     \
    {"erlang-names", no_argument, NULL, KP_OPT_ERLANG_NAMES}
// clang-format on

/* Handles option `opt` (argument `arg`) into `o` if it is one of them;
 * each --node's value goes into `nodes[o->n_nodes++]` (room for
 * KP_MAX_NODE_OPTIONS). Returns -1 when `opt` is not one of them, else
 * KP_EXIT_OK, or KP_EXIT_USAGE with the bad value said. */
int kp_node_option(int opt, const char *arg, kp_record_options *o, const char **nodes);

#endif

/* The options record and push share; see node_options.h. */
#include "record/node_options.h"

#include "common/cli.h"

int kp_node_option(int opt, const char *arg, kp_record_options *o, const char **nodes)
{
    switch (opt) {
    case 'n':
        if (o->n_nodes == KP_MAX_NODE_OPTIONS)
            return kp_bad_value("--node", arg, "at most 64 --node options");
        nodes[o->n_nodes++] = arg;
        return KP_EXIT_OK;
    case KP_OPT_ALL_NODES: o->all_nodes = 1; return KP_EXIT_OK;
    case KP_OPT_COOKIE: o->cookie_file = arg; return KP_EXIT_OK;
    case KP_OPT_CONNECT:
        return kp_parse_connect_timeout(arg, &o->connect_timeout_ms) != 0 ? KP_EXIT_USAGE
                                                                          : KP_EXIT_OK;
    case 't': return kp_parse_top_option(arg, &o->top);
    case KP_OPT_SELECT: return kp_parse_select_by_option(arg, &o->select_by);
    case KP_OPT_DEPTH: return kp_parse_depth_option(arg, &o->depth);
    case KP_OPT_ERLANG_NAMES: o->erlang_names = 1; return KP_EXIT_OK;
    default: return -1;
    }
}

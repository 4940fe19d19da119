/* `kprof internal ...`: hidden helpers for tests and debugging.
 *   kprof internal extract-agent DIR   write the embedded agent's .beam files
 *   kprof internal bring-nif --node NODE [--cookie-file FILE] [--hold]
 *                                      load the agent and the tracer NIF into
 *                                      NODE; prints "loaded"; with --hold,
 *                                      stays attached until stdin ends, as a
 *                                      command runs, then leaves as they do
 *                                      (kprof's code leaves the node) */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "kp/sink.h"
#include "node/agent.h"
#include "node/agent_modules.h"
#include "node/connection.h"
#include "node/nif.h"

static int extract_agent(const char *dir)
{
    for (size_t i = 0; i < kp_agent_module_count; i++) {
        const kp_agent_module *m = &kp_agent_modules[i];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.beam", dir, m->name);
        kp_status st = kp_sink_write_file(path, m->beam, m->size);
        if (st != KP_OK) {
            kp_error("cannot write %s: %s", path, kp_status_reason(st, errno));
            return KP_EXIT_FAILURE;
        }
        printf("%s\n", path);
    }
    return KP_EXIT_OK;
}

/* Attaches to `given` as the commands do, loads the agent, then brings the
 * tracer NIF (node/nif.h): prints "loaded" and returns KP_EXIT_OK, or prints
 * why not and returns KP_EXIT_NODE (KP_EXIT_USAGE for a bad name or cookie).
 * With `hold`, the connection stays open until stdin ends, after "loaded". */
static int bring_nif(const char *given, const char *cookie_file, int hold)
{
    char err[1024], target[512], cookie[512];
    if (kp_node_name(given, target, sizeof target, err, sizeof err) != 0 ||
        kp_cookie_load(cookie_file, cookie, sizeof cookie, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_USAGE;
    }
    kp_node node;
    if (kp_node_connect(&node, target, cookie, 5000, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_NODE;
    }
    kp_agent agent;
    int rc = kp_agent_load(&agent, &node, KP_AGENT_NIF, err, sizeof err) == 0 &&
                     kp_nif_bring(&node, err, sizeof err) == 0
                 ? KP_EXIT_OK
                 : KP_EXIT_NODE;
    if (rc == KP_EXIT_OK) {
        printf("loaded\n");
        fflush(stdout);
        while (hold && getchar() != EOF)
            ;
    }
    kp_node_close(&node);
    if (rc != KP_EXIT_OK) {
        kp_error("%s", err);
        return rc;
    }
    return KP_EXIT_OK;
}

int kp_cmd_internal(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "extract-agent") == 0)
        return extract_agent(argv[2]);
    int hold = argc > 4 && strcmp(argv[argc - 1], "--hold") == 0;
    int n = argc - hold;
    if ((n == 4 || n == 6) && strcmp(argv[1], "bring-nif") == 0 && strcmp(argv[2], "--node") == 0 &&
        (n == 4 || strcmp(argv[4], "--cookie-file") == 0))
        return bring_nif(argv[3], n == 6 ? argv[5] : NULL, hold);
    kp_error("usage: kprof internal extract-agent DIR | "
             "bring-nif --node NODE [--cookie-file FILE] [--hold]");
    return KP_EXIT_USAGE;
}

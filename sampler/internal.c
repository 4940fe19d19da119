/* `kprof internal ...`: hidden helpers for tests and debugging.
 *   kprof internal extract-agent DIR   write the embedded agent's .beam files */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "kp/sink.h"
#include "node/agent_modules.h"

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

int kp_cmd_internal(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "extract-agent") == 0)
        return extract_agent(argv[2]);
    kp_error("usage: kprof internal extract-agent DIR");
    return KP_EXIT_USAGE;
}

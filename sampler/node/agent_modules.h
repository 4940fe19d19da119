/* The agent's compiled modules, embedded in the kprof binary by the build
 * (cmake/embed_beams.cmake), so that kprof can load its agent into a node
 * that has never seen it (code:load_binary/3 over the distribution). */
#ifndef KP_NODE_AGENT_MODULES_H
#define KP_NODE_AGENT_MODULES_H

#include <stddef.h>

typedef struct {
    const char *name;          /* module name, e.g. "kprof_agent" */
    const unsigned char *beam; /* the .beam file's bytes */
    size_t size;
    unsigned char md5[16]; /* as Module:module_info(md5) reports it */
    unsigned uses;         /* bit c set: a command of kp_agent_code c loads it */
} kp_agent_module;

extern const kp_agent_module kp_agent_modules[];
extern const size_t kp_agent_module_count;

#endif

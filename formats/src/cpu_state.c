/* The native CPU states' names; see kp/cpu_state.h. */
#include "kp/cpu_state.h"

#include <string.h>

#define NAME(id, name, msacc, help) name,
#define MSACC(id, name, msacc, help) msacc,
#define HELP(id, name, msacc, help) help,
static const char *const names[] = {KP_CPU_STATE_TABLE(NAME)};
static const char *const msaccs[] = {KP_CPU_STATE_TABLE(MSACC)};
static const char *const helps[] = {KP_CPU_STATE_TABLE(HELP)};
#undef NAME
#undef MSACC
#undef HELP

const char *kp_cpu_state_name(kp_cpu_state state)
{
    return (unsigned)state < KP_CPU_STATE_COUNT ? names[state] : NULL;
}

const char *kp_cpu_state_msacc(kp_cpu_state state)
{
    return (unsigned)state < KP_CPU_STATE_COUNT ? msaccs[state] : NULL;
}

const char *kp_cpu_state_help(kp_cpu_state state)
{
    return (unsigned)state < KP_CPU_STATE_COUNT ? helps[state] : NULL;
}

int kp_cpu_state_of(const char *name, size_t len)
{
    for (int k = 0; k < KP_CPU_STATE_COUNT; k++)
        if (strlen(names[k]) == len && memcmp(names[k], name, len) == 0)
            return k;
    return -1;
}

/* The model's tables, shared by its two halves: counting (top/model.c) and
 * rendering (top/render.c). Not for other rooms: they use top/view.h. */
#ifndef KP_TOP_VIEW_INTERNAL_H
#define KP_TOP_VIEW_INTERNAL_H

#include "common/u64_map.h"
#include "cpu/state_summary.h"
#include "kp/strtab.h"
#include "top/view.h"

enum { SELF = 0, TOTAL = 1 };

/* A function's weights: in the open window, the last closed one, and since
 * the start. */
typedef struct {
    uint64_t open[2], shown[2], all[2];
    uint64_t last_sample; /* the sample that last counted its total */
} top_function;

#define TOP_TEXT_MAX 160

typedef struct {
    uint32_t num, serial;
    char label[TOP_TEXT_MAX];   /* NUL-terminated; "" until the agent names it */
    char current[TOP_TEXT_MAX]; /* likewise */
    int64_t queue, memory;
    uint64_t open_reductions, shown_reductions, all_reductions;
    uint64_t open_cpu, shown_cpu, all_cpu;
    uint64_t seen_window; /* the window of its latest sample or CPU sample */
    int in_shown;         /* sampled in the last closed window */
    int asked;            /* its name was asked for (kp_top_unnamed) */
    int sampled;          /* the agent sampled it: its queue and memory are known */
} top_process;

struct kp_top {
    unsigned cpu_rate;
    kp_strtab *names; /* function names; ids index functions[] */
    top_function *functions;
    size_t functions_cap;
    uint64_t samples;                               /* stacks counted, for last_sample */
    uint64_t open_weight, shown_weight, all_weight; /* sums of the stacks' weights */
    kp_u64_map index;                               /* num << 32 | serial -> processes[] */
    top_process *processes;
    size_t n_processes, processes_cap;
    uint64_t window;           /* the open window's number, from 1 */
    uint64_t shown_us, all_us; /* how long the closed window and all closed ones lasted */
    /* native CPU samples per thread kind and state, as the functions' */
    kp_state_counts open_states, shown_states, all_states;
};

/* Processes forgotten after this many windows without a sample. */
#define TOP_FORGET_WINDOWS 60

#endif

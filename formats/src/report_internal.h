/* The report's insides, shared by report.c (the data) and report_html.c
 * (the page). Internal to formats/. */
#ifndef KP_REPORT_INTERNAL_H
#define KP_REPORT_INTERNAL_H

#include <stdint.h>

#include "kp/report.h"
#include "kp/strtab.h"

struct kp_report_source {
    unsigned n_weights;       /* KP_WEIGHT_COUNT, or 1 for CPU */
    unsigned rows_per_second; /* slices a second */
    uint64_t origin_s;        /* slice 0 starts at this second of the source's clock */
    uint64_t first_ns, last_ns;
    uint64_t samples;
    uint64_t budget; /* entries before coarsening (twice this) */
    kp_strtab *keys; /* (slice, node) -> entry */
    uint64_t n_entries;
    size_t cap;
    uint32_t *slice, *node, *count;
    uint64_t *w[KP_WEIGHT_COUNT];
    /* the heat map at full resolution, whatever the slices: the summed
     * weights of cell second * KP_REPORT_HEAT_ROWS + row, from origin_s */
    uint64_t *heat[KP_WEIGHT_COUNT];
    uint64_t heat_cells;
    size_t heat_cap;
};

struct kp_report {
    kp_strtab *frames;                  /* frame text -> frame id */
    kp_strtab *node_keys;               /* (parent node, frame) -> node id */
    kp_strtab *stacks;                  /* folded stack -> stack id */
    uint32_t *node_parent, *node_frame; /* by node; parent UINT32_MAX = the root */
    size_t nodes_cap, node_frame_cap;
    uint32_t n_nodes;
    uint32_t *stack_leaf; /* by stack id */
    size_t stack_leaf_cap;
    kp_report_source *sources[2][KP_REPORT_KINDS];
    char *names[2];
    uint64_t budget; /* for new sources */
};

#endif

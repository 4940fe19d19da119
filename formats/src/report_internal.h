/* The report's insides, shared by report.c (the data), report_set.c (the
 * entry sets) and report_html.c (the page). Internal to formats/. */
#ifndef KP_REPORT_INTERNAL_H
#define KP_REPORT_INTERNAL_H

#include <stdint.h>

#include "kp/report.h"
#include "kp/strtab.h"

#define KP_REPORT_NONE UINT32_MAX /* no node, process or frame */
#define KP_REPORT_SETS 3          /* a source's entry sets: paths, processes, timeline */

/* The thread kinds native CPU stacks begin with, under COMM (cpu/native.h:
 * scheduler, dirty_cpu, dirty_io, other); their states are under them. */
#define KP_REPORT_THREAD_KINDS 4
extern const char *const kp_report_thread_kinds[KP_REPORT_THREAD_KINDS];

/* Where each key (slice, a, b) of a set sits: an open-addressed table of
 * entry + 1 (0: free), at most half full, whose keys are the set's own
 * arrays (8 bytes an entry, where a table of the key bytes took 50). */
typedef struct {
    uint32_t *slots;
    size_t mask; /* slots - 1, a power of two less one */
} kp_report_index;

/* Weights summed per key (slice, a, b), time cut into slices of
 * `slice_cells` heat map cells (20 ms each). When it holds twice `budget`
 * entries the slices grow (kp_report_set_fit), as far as it takes. */
typedef struct {
    unsigned slice_cells; /* 1, 2, 10, 50 (a second), 250, ... */
    uint64_t budget;
    unsigned n_weights;
    uint32_t generation; /* moves when entries move (slices grow or shift) */
    kp_report_index index;
    uint64_t n;
    size_t cap;
    uint32_t *slice, *a, *b, *count;
    uint64_t *w[KP_WEIGHT_COUNT];
} kp_report_set;

/* Makes `set` a new empty set (it allocates on its first entry). */
void kp_report_set_init(kp_report_set *set, unsigned n_weights, uint64_t budget);
void kp_report_set_free(kp_report_set *set);
/* Where a stack's last sample went in a set: its next sample in the same
 * slice goes there too, without a lookup (a process on one path for
 * seconds, slices of seconds). A hint of generation 0 is none. */
typedef struct {
    uint32_t generation, slice, entry;
} kp_report_hint;

/* A sample in three steps, so that a source's sets take it together or
 * not at all: the entry of (a, b) at heat map cell `cell` (`hint`, when not
 * NULL, is the last entry of the same (a, b), and is updated), created empty
 * (KP_ERR_NOMEM, or KP_ERR_LIMIT past slice or entry 2^32 - 2); the sample's
 * weights `w` counted in it; then the slices grown while the set holds
 * twice its budget, and until they are whole heat map rows of `row_cells`
 * cells (KP_ERR_NOMEM leaves it whole, its slices as long as they got). */
kp_status kp_report_set_entry(kp_report_set *set, uint64_t cell, uint32_t a, uint32_t b,
                              kp_report_hint *hint, uint32_t *e);
void kp_report_set_count(kp_report_set *set, uint32_t e, const int64_t *w);
kp_status kp_report_set_fit(kp_report_set *set, unsigned row_cells);
/* Moving every slice `cells` heat map cells later (a multiple of the
 * slice), in two steps so that a source's sets move together or not at
 * all: the index they will have (the set unchanged; KP_ERR_NOMEM, or
 * KP_ERR_LIMIT past slice 2^32 - 2), then the move itself, which cannot
 * fail and takes the index. */
kp_status kp_report_set_shift_index(const kp_report_set *set, uint64_t cells,
                                    kp_report_index *index);
void kp_report_set_shift(kp_report_set *set, uint64_t cells, kp_report_index index);

struct kp_report_source {
    unsigned recording;
    kp_report_kind kind;
    unsigned n_weights; /* KP_WEIGHT_COUNT, or 1 for CPU */
    uint64_t origin_s;  /* cell 0 starts at this second of the source's clock */
    uint64_t first_ns, last_ns;
    uint64_t samples;
    /* (slice, node, 0): what the views of all processes draw, finest */
    kp_report_set paths;
    /* (slice, process, node): the flame graphs of some processes and the
     * towers per process; coarser, as it holds more */
    kp_report_set processes;
    /* (slice, process, status frame): the heat maps of some processes and
     * the process table, finer than `processes`, as it holds less (a
     * quarter of the budget: a process's time, not its paths) */
    kp_report_set timeline;
    /* the heat map, whatever the slices: the summed weights of row
     * second * (KP_REPORT_HEAT_ROWS / row_cells) + offset, from origin_s;
     * a row is `row_cells` cells (1, 2, 5, 10, 25 or 50: 20 ms to a
     * second), more as the map outgrows `heat_budget` rows or to match the
     * sampling (kp_report_fit_rows), and every set's slices are whole rows */
    uint64_t *heat[KP_WEIGHT_COUNT];
    uint64_t heat_cells; /* rows used */
    size_t heat_cap;
    unsigned row_cells;
    uint64_t heat_budget;
};

/* Makes a cooperative source's heat map rows as long as its sampling
 * interval (report.c says how it is found), before the page is written;
 * KP_ERR_NOMEM leaves them as they were, the slices maybe longer. */
kp_status kp_report_fit_rows(kp_report_source *source);

struct kp_report {
    kp_strtab *frames;                  /* frame text -> frame id */
    kp_strtab *node_keys;               /* (parent node, frame) -> node id */
    kp_strtab *stacks;                  /* XXH128 of a folded stack -> stack id */
    uint32_t *node_parent, *node_frame; /* by node; parent KP_REPORT_NONE = the root */
    size_t nodes_cap, node_frame_cap;
    uint32_t n_nodes;
    uint32_t *stack_leaf, *stack_process, *stack_status; /* by stack id; status: a frame */
    kp_report_hint (*stack_hints)[3]; /* by stack id: in paths, processes, timeline */
    size_t stack_leaf_cap, stack_process_cap, stack_status_cap, stack_hints_cap;
    /* processes: (recording, node frame, pid frame) -> process id; a
     * recording's samples without a pid have a process of pid NONE */
    kp_strtab *process_keys;
    uint32_t *proc_recording, *proc_pid, *proc_node, *proc_name; /* frames, or NONE */
    size_t proc_cap[4];
    kp_report_source *sources[2][KP_REPORT_KINDS];
    char *names[2];
    uint64_t budget, heat_budget; /* for new sources */
};

#endif

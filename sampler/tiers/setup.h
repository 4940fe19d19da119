/* Starting tier tracing in a node and reading back its settings. */
#ifndef KP_TIERS_SETUP_H
#define KP_TIERS_SETUP_H

#include <stddef.h>
#include <stdint.h>

#include "node/connection.h"
#include "tiers/events.h"
#include "tiers/match.h"

#define KP_TIERS_MAX_FNS 72 /* 64 tiers, the entry, three marks */

typedef struct {
    unsigned port;         /* the ip trace port's TCP port; 0 with the NIF */
    int via_nif;           /* events come from the kprof_tracer NIF */
    char nif_refused[512]; /* why not, when the NIF was asked for */
    int64_t node_time_ns;  /* the node's monotonic time at start */
    size_t n_tiers;
    char *tier_names[64];
    kp_tier_mfa mfas[KP_TIERS_MAX_FNS];
    kp_tier_fn fns[KP_TIERS_MAX_FNS];
    /* a tier's name is the user's; the entry's and the marks' are their
     * functions' names (kp_frame_name), which no table or call tree shows */
    char fn_names[KP_TIERS_MAX_FNS][300];
    size_t n_fns;
    int print_calls;
    uint64_t slow_us, report_interval_ms, max_lag_ms, cooldown_ms, queue_size, max_identities;
    char stats_file[4096]; /* from {stats_dumper, {file, Path}}, or "" */
} kp_tiers_config;

enum {
    KP_TIERS_START_OK = 0,
    KP_TIERS_START_LOST = -1,
    KP_TIERS_START_REFUSED = -2,
    KP_TIERS_START_BAD_CONFIG = -3
};

/* Calls kprof_tiers:start(Self, {text, Text}, Via) on the node (the agent's
 * code must be loaded), or kprof_tiers:start(Self, session, Via) when `text`
 * is NULL, and decodes the settings it returns. Via is {nif, nif_port} when
 * `nif_port` is not 0 (kprof listens there on 127.0.0.1 for the
 * kprof_tracer NIF, which connects before the call returns; the settings
 * say whether it did), else trace_port. Returns
 * KP_TIERS_START_OK; LOST when the connection failed; BAD_CONFIG when the
 * node found the tier file wrong (the reason in `err`); REFUSED for any other
 * refusal (another tracer, tracing already running; reason in `err`). */
int kp_tiers_start(kp_node *node, const char *text, size_t len, unsigned queue_size,
                   unsigned nif_port, kp_tiers_config *config, char *err, size_t err_len);

/* Frees the tier names. */
void kp_tiers_config_free(kp_tiers_config *config);

/* Sends `message` (an atom) to the node's kprof_tiers process. */
int kp_tiers_send_atom(kp_node *node, const char *message);

/* Sends {clock, Self, Seq} to kprof_tiers. */
int kp_tiers_send_clock(kp_node *node, long seq);

/* Sends {kprof_tier_report, Table, Json} to kprof_tiers, for kprof:stats(). */
int kp_tiers_send_report(kp_node *node, const char *table, size_t table_len, const char *json,
                         size_t json_len);

#endif

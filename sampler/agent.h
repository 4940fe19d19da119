/* The C side of the agent protocol: loading the embedded agent into a node,
 * starting it, asking for batches of samples and decoding them.
 *
 * Wire format of a batch (sent by kprof_agent:sample/1):
 *   {kprof_samples, Seq, {TimeUs, NewMfas, Labels, Samples, Reset,
 *                         {StacksQueried, StacksReused, AgentBusyUs}}}
 *   NewMfas = [{Id, Module, Function, Arity}]      each MFA once per session
 *   Labels  = [{Pid, {registered | initial, Text}}] once per process
 *   Samples = [{Pid, Status, Reductions, QueueLen, Memory, TotalHeap, Heap,
 *               Stack, BinVheap, BinOldVheap, MinorGcs, same | StackBin}
 *              | Pid]       a bare pid: the process's previous sample again
 *                           (it has not run, its status and queue are the same)
 *   StackBin = <<MfaId:32, Line:32, ...>> leaf first
 * Sizes other than Memory are in words. */
#ifndef KP_AGENT_H
#define KP_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"

typedef struct {
    unsigned top;
    const char *select_by; /* atom text */
    unsigned reselect_ms;
    const char *const *pids; /* "<0.123.0>" strings */
    size_t n_pids;
    unsigned depth;
    unsigned idle_timeout_ms;
} kp_agent_options;

typedef struct {
    kp_node *node;
    erlang_pid pid; /* the agent process */
    long seq;       /* of the last request */
    long os_pid;    /* the BEAM's OS pid */
    unsigned wordsize;
    int loaded;     /* 1 if this session loaded the agent's code */
    /* totals over the batches received: what sampling cost in the node */
    uint64_t batches, stacks_queried, stacks_reused, busy_us;
} kp_agent;

enum { KP_METRIC_REDUCTIONS, KP_METRIC_QUEUE, KP_METRIC_MEMORY, KP_METRIC_TOTAL_HEAP,
       KP_METRIC_HEAP, KP_METRIC_STACK, KP_METRIC_BIN_VHEAP, KP_METRIC_BIN_OLD_VHEAP,
       KP_METRIC_MINOR_GCS, KP_METRIC_COUNT };

typedef struct {
    uint32_t num, serial; /* <0.num.serial> */
    char status[32];
    int64_t metrics[KP_METRIC_COUNT];
    int same;              /* the stack is the one of this process's previous sample */
    int unchanged;         /* the whole sample is (status, metrics, stack): only the
                              pid is set */
    const uint32_t *frames; /* depth pairs (mfa id, line), leaf first, host order */
    size_t depth;
} kp_raw_sample;

typedef struct {
    void *ctx;
    int (*on_reset)(void *ctx);
    int (*on_mfa)(void *ctx, uint32_t id, const char *module, const char *function,
                  unsigned arity);
    int (*on_label)(void *ctx, uint32_t num, uint32_t serial, int registered, const char *text,
                    size_t len);
    int (*on_sample)(void *ctx, const kp_raw_sample *sample);
} kp_batch_handler;

/* Makes sure the node has this kprof's agent modules (loading the embedded
 * ones with code:load_binary/3 when missing or of another version) and reads
 * the node's OS pid and word size; starts nothing. Returns 0, or -1 with one
 * sentence in `err`. */
int kp_agent_load(kp_agent *agent, kp_node *node, char *err, size_t err_len);

/* Makes sure the node runs this kprof's agent (loading the embedded modules
 * with code:load_binary/3 when it is missing or of another version) and starts
 * it. Returns 0, or -1 with one sentence in `err`. */
int kp_agent_attach(kp_agent *agent, kp_node *node, const kp_agent_options *options, char *err,
                    size_t err_len);

/* Sends the next sample request. Returns 0 or -1 (connection lost). */
int kp_agent_request(kp_agent *agent);

/* Waits up to `ms` for the reply to the last request and decodes it through
 * `handler`, whose callbacks return 0 to go on. Returns 1 when a batch was
 * handled (`*time_us` = the node's monotonic time of the batch), 0 on timeout,
 * -1 when the connection is lost, -2 for a malformed reply or a callback
 * failure. */
int kp_agent_receive(kp_agent *agent, unsigned ms, const kp_batch_handler *handler,
                     int64_t *time_us);

/* Asks the agent to stop (its guard restores the node's settings). */
void kp_agent_detach(kp_agent *agent);

#endif

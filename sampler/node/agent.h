/* The C side of the agent protocol: loading the embedded agent into a node,
 * starting it, asking for rounds of samples and decoding them.
 *
 * A request asks for a round of ticks, taken on the agent's own clock:
 *   {sample, From, Seq, Ticks, IntervalUs, FirstUs}
 * and its reply holds every tick of the round, oldest first:
 *   {kprof_samples, Seq, MissedTicks, [Tick]}
 *   Tick    = {TimeUs, NewMfas, Labels, Samples, Reset,
 *              {StacksQueried, StacksReused, AgentBusyUs, DelayUs}}
 *   NewMfas = [{Id, Module, Function, Arity}]      each MFA once per session
 *   Labels  = [{Pid, {registered | initial, Text}}] once per process
 *   Samples = [{Pid, Status, Reductions, QueueLen, Memory, TotalHeap, Heap,
 *               Stack, BinVheap, BinOldVheap, MinorGcs, same | StackBin}
 *              | Pid]       a bare pid: the process's previous sample again
 *                           (it has not run, its status and queue are the same)
 *   StackBin = <<MfaId:32, Line:32, ...>> leaf first
 * Times are the node's monotonic clock; sizes other than Memory are in
 * words. */
#ifndef KP_AGENT_H
#define KP_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "node/connection.h"

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
    /* totals over the ticks decoded: what sampling cost in the node */
    uint64_t ticks, stacks_queried, stacks_reused, busy_us;
    /* the last reply: its ticks are decoded one at a time (see
     * kp_agent_next_tick), so that several nodes' ticks can be merged */
    ei_x_buff reply;
    int reply_index;     /* of the next tick in reply.buff */
    int ticks_left;      /* in the reply */
    uint64_t missed;     /* ticks the agent skipped, over every reply */
    /* of the last decoded tick: how late it started and what it cost */
    uint64_t tick_delay_us, tick_busy_us;
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

/* Measures our CLOCK_MONOTONIC (kp_now_us) minus the node's monotonic
 * clock, in microseconds, from the quickest of a few rpc round trips (a
 * fraction of a millisecond off on a local network). Returns 0, or -1 with
 * one sentence in `err`. */
int kp_agent_clock_offset(kp_agent *agent, int64_t *offset_us, char *err, size_t err_len);

/* Asks for the next round: `ticks` samples of every selected process,
 * `interval_us` apart from `first_us` on the node's monotonic clock (the
 * agent caps a round at 10 s). The previous reply stays readable until the
 * next kp_agent_receive(). Returns 0 or -1 (connection lost). */
int kp_agent_request(kp_agent *agent, unsigned ticks, uint64_t interval_us, int64_t first_us);

/* Waits up to `ms` for the reply to the last request and keeps it for
 * kp_agent_next_tick(); replies to abandoned requests are dropped. Returns 1
 * when the reply arrived (agent->ticks_left and missed are updated), 0 on
 * timeout, -1 when the connection is lost, -2 for a malformed
 * reply. */
int kp_agent_receive(kp_agent *agent, unsigned ms);

/* Sets `*time_us` to the node's monotonic time (us; it may be negative) of
 * the next undecoded tick of the reply and returns 1; returns 0 when every
 * tick has been decoded. */
int kp_agent_tick_time(const kp_agent *agent, int64_t *time_us);

/* Decodes the next tick of the reply through `handler`, whose callbacks
 * return 0 to go on. Returns 0, or -2 for a malformed tick or a callback
 * failure (the rest of the reply is then dropped). */
int kp_agent_next_tick(kp_agent *agent, const kp_batch_handler *handler);

/* Asks the agent to stop (its guard restores the node's settings) and frees
 * the last reply. */
void kp_agent_detach(kp_agent *agent);

#endif

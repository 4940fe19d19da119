/* The sample wire protocol of `kprof record`: starting kprof_agent's
 * sampling process, asking it for rounds of samples and decoding them. The
 * Erlang side of this contract is kprof_agent (sample_tuple/7 builds a
 * sample); the metrics' order is kp/metrics.h.
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
#ifndef KP_SAMPLES_SAMPLE_WIRE_H
#define KP_SAMPLES_SAMPLE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "node/agent.h"
#include "kp/metrics.h"

/* A sample on the wire: {Pid, Status, Metric..., Stack}. */
#define KP_SAMPLE_TUPLE_ARITY (2 + KP_METRIC_COUNT + 1)

typedef struct {
    unsigned top;
    const char *select_by; /* atom text */
    unsigned reselect_ms;
    const char *const *pids; /* "<0.123.0>" strings */
    size_t n_pids;
    unsigned depth;
    unsigned idle_timeout_ms;
} kp_sampling_options;

typedef struct {
    kp_agent agent; /* the loaded agent: node, OS pid, word size */
    erlang_pid pid; /* the sampling process */
    long seq;       /* of the last request */
    /* totals over the ticks decoded: what sampling cost in the node */
    uint64_t ticks, stacks_queried, stacks_reused, busy_us;
    /* the last reply: its ticks are decoded one at a time (see
     * kp_sample_wire_next_tick), so that several nodes' ticks can be merged */
    ei_x_buff reply;
    int reply_index; /* of the next tick in reply.buff */
    int ticks_left;  /* in the reply */
    uint64_t missed; /* ticks the agent skipped, over every reply */
    /* of the last decoded tick: how late it started and what it cost */
    uint64_t tick_delay_us, tick_busy_us;
} kp_sample_wire;

typedef struct {
    uint32_t num, serial; /* <0.num.serial> */
    char status[32];
    int64_t metrics[KP_METRIC_COUNT]; /* as sent: sizes but memory in words */
    int same;                         /* the stack is the one of this process's previous sample */
    int unchanged;                    /* the whole sample is (status, metrics, stack): only the
                              pid is set */
    const uint32_t *frames;           /* depth pairs (mfa id, line), leaf first, host order */
    size_t depth;
} kp_wire_sample;

typedef struct {
    void *ctx;
    int (*on_reset)(void *ctx);
    int (*on_mfa)(void *ctx, uint32_t id, const char *module, const char *function, unsigned arity);
    int (*on_label)(void *ctx, uint32_t num, uint32_t serial, int registered, const char *text,
                    size_t len);
    int (*on_sample)(void *ctx, const kp_wire_sample *sample);
} kp_wire_handler;

/* Loads the agent (kp_agent_load) and starts its sampling process with
 * `options`. Returns 0, or -1 with one sentence in `err` (another kprof is
 * attached, a --pid is not a live process, the agent refused). */
int kp_sample_wire_start(kp_sample_wire *wire, kp_node *node, const kp_sampling_options *options,
                         char *err, size_t err_len);

/* One node, as `kprof dump` and `kprof top` attach to it: completes the
 * name `given` (kp_node_name), reads the cookie (`cookie_file`, NULL for
 * the default places), connects within `timeout_ms` and starts sampling
 * (kp_sample_wire_start). Returns KP_EXIT_OK (common/cli.h) with `node`
 * connected, or an exit code with one sentence in `err` and nothing left
 * open: KP_EXIT_USAGE for a bad name or no cookie, KP_EXIT_NODE when the
 * node cannot be reached or the agent refused. */
int kp_sample_wire_attach(kp_sample_wire *wire, kp_node *node, const char *given,
                          const char *cookie_file, unsigned timeout_ms,
                          const kp_sampling_options *options, char *err, size_t err_len);

/* A round of ticks lasts at least KP_SAMPLE_ROUND_US: the agent keeps the
 * schedule, and kprof wakes once a round instead of once a tick. Where a
 * round of that length holds few samples, it lasts up to
 * KP_SAMPLE_ROUND_MAX_US, as long as it holds at most KP_SAMPLE_ROUND_SAMPLES:
 * each round costs the node a request to decode and a reply to send, and
 * kprof and the agent a wake-up, which at top 100 x 10 Hz (2 ticks in
 * 200 ms) did not amortize. */
#define KP_SAMPLE_ROUND_US 200000u
#define KP_SAMPLE_ROUND_MAX_US 1000000u
#define KP_SAMPLE_ROUND_SAMPLES 1000u

/* The ticks of a round at `interval_us` a tick of `processes` processes
 * each (0: unknown, rounds of KP_SAMPLE_ROUND_US): at least 1. */
static inline unsigned kp_sample_round_ticks(uint64_t interval_us, unsigned processes)
{
    if (interval_us >= KP_SAMPLE_ROUND_US)
        return 1u;
    unsigned ticks = (unsigned)(KP_SAMPLE_ROUND_US / interval_us);
    if (processes) {
        uint64_t longest = KP_SAMPLE_ROUND_MAX_US / interval_us;
        uint64_t fit = KP_SAMPLE_ROUND_SAMPLES / processes;
        uint64_t more = fit < longest ? fit : longest;
        if (more > ticks)
            ticks = (unsigned)more;
    }
    return ticks;
}

/* Asks for the next round: `ticks` samples of every selected process,
 * `interval_us` apart from `first_us` on the node's monotonic clock (the
 * agent caps a round at 10 s). The previous reply stays readable until the
 * next kp_sample_wire_receive(). Returns 0 or -1 (connection lost). */
int kp_sample_wire_request(kp_sample_wire *wire, unsigned ticks, uint64_t interval_us,
                           int64_t first_us);

/* Waits up to `ms` for the reply to the last request and keeps it for
 * kp_sample_wire_next_tick(); replies to abandoned requests are dropped.
 * Returns 1 when the reply arrived (wire->ticks_left and missed are
 * updated), 0 on timeout, -1 when the connection is lost, -2 for a
 * malformed reply. */
int kp_sample_wire_receive(kp_sample_wire *wire, unsigned ms);

/* Sets `*time_us` to the node's monotonic time (us; it may be negative) of
 * the next undecoded tick of the reply and returns 1; returns 0 when every
 * tick has been decoded. */
int kp_sample_wire_tick_time(const kp_sample_wire *wire, int64_t *time_us);

/* Decodes the next tick of the reply through `handler`, whose callbacks
 * return 0 to go on. Returns 0, or -2 for a malformed tick or a callback
 * failure (the rest of the reply is then dropped). */
int kp_sample_wire_next_tick(kp_sample_wire *wire, const kp_wire_handler *handler);

/* Takes the message in wire->reply.buff (`len` bytes, with its version
 * byte) as kp_sample_wire_receive() does: 1 for a reply to the last request
 * (its ticks are then read with kp_sample_wire_next_tick), 0 for another
 * message or a stale reply, -1 for bytes that are not a whole term or a
 * malformed reply. Also for tests and fuzzing. */
int kp_sample_wire_take_reply(kp_sample_wire *wire, size_t len);

/* Asks the agent to stop (its guard restores the node's settings) and frees
 * the last reply. */
void kp_sample_wire_stop(kp_sample_wire *wire);

#endif

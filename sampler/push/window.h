/* kprof push's windows: a node's samples of each --interval, as one OTLP
 * profiles export (kp/otlp.h).
 *
 * Window k covers [start + k * interval, start + (k + 1) * interval) on
 * kprof's clock, and a sample belongs to the window its time falls in:
 * windows are contiguous, and no sample is in two of them or between them.
 * A window is closed a grace period after its end, as native samples reach
 * kprof some milliseconds after they were taken and cooperative ones a
 * round of ticks later; a sample later still (a stalled kprof) is counted
 * in the oldest window still open, and counted as late.
 *
 * What one export holds:
 *   - with native sampling, the profile "cpu" in nanoseconds: every
 *     sample's cpu-clock period, Erlang, C and kernel frames, each location
 *     with its profile.frame.type (beam, native, kernel);
 *   - the cooperative samples' profiles, each of its own type:
 *     beam_samples, beam_reductions, beam_memory, beam_message_queue_len,
 *     beam_bin_vheap (kp/weights.h): not CPU time.
 * The Erlang process a sample ran in is the frame at its stack's root (its
 * registered name or initial call; a pid never, whose number would make a
 * new series of every process); what can be grouped by is a sample
 * attribute, of a few values each: beam.thread.kind and beam.thread.state
 * (msacc's words) on CPU samples, beam.process.status on cooperative ones.
 *
 * Thread-safe: CPU samples arrive on the native sampler's thread, the rest
 * on the run's. */
#ifndef KP_PUSH_WINDOW_H
#define KP_PUSH_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/native.h"
#include "kp/buf.h"
#include "kp/intern.h"
#include "samples/processes.h"

/* The resource of a node's exports: its attributes as strings, but
 * process.pid; `extra` are OTEL_RESOURCE_ATTRIBUTES (keys and values in
 * turn, `n_extra` pairs), which may override the others. */
typedef struct {
    const char *service_name; /* service.name */
    const char *node;         /* service.instance.id: name@host */
    const char *host;         /* host.name */
    long os_pid;              /* process.pid, as this host sees it; 0: none */
    const char *otp_release;  /* process.runtime.version; NULL: none */
    const char *const *extra;
    size_t n_extra;
} kp_push_resource;

typedef struct kp_push_windows kp_push_windows;

/* Windows of `interval_us` from `start_us` (kprof's clock), closed
 * `grace_us` after their end; CPU samples taken `cpu_rate` times a second
 * (0: none: the exports hold no CPU profile). The resource is copied.
 * NULL when out of memory. */
kp_push_windows *kp_push_windows_create(const kp_push_resource *resource, uint64_t start_us,
                                        uint64_t interval_us, uint64_t grace_us, unsigned cpu_rate);
void kp_push_windows_free(kp_push_windows *windows);

/* The node was attached again: its OS pid and OTP release (NULL: unknown)
 * for the windows opened from now on. When the pid is another (the node
 * restarted), the names learnt of its processes are forgotten, as its pids
 * now name other processes. Returns 0, or -1 when out of memory (the
 * release then stays as it was). */
int kp_push_windows_set_process(kp_push_windows *windows, long os_pid, const char *otp_release);

/* A kp_native_observer's fn: one native CPU sample (ctx: the windows). */
void kp_push_windows_cpu(void *ctx, const kp_native_sample *sample);

/* A kp_record_sink's sample (record/run.h): one cooperative sample. */
int kp_push_windows_sample(void *ctx, size_t node, uint64_t time_us, const kp_frames *frames,
                           const kp_stacks *stacks, const kp_proc_sample *sample);

/* A closed window, encoded. */
typedef struct {
    kp_buf request;    /* the ExportProfilesServiceRequest */
    uint64_t start_ns; /* wall clock, ns since the epoch */
    uint64_t end_ns;
    uint64_t samples; /* CPU and cooperative samples in it */
} kp_push_closed;

/* Closes every window whose end is `grace` before `now_us` or earlier (all
 * of them with `all`, the last one then ending at `now_us`), oldest first,
 * handing each to `emit`, which takes its request's buffer. A window
 * without a sample is closed and not handed on. Returns the number handed
 * on, or -1 when out of memory (that window is lost, and counted). */
int kp_push_windows_close(kp_push_windows *windows, uint64_t now_us, int all,
                          void (*emit)(void *ctx, kp_push_closed *closed), void *ctx);

/* Processes seen in CPU samples whose name is not known yet: up to `cap`
 * of them into `nums`/`serials`, each asked for once. Returns how many. */
size_t kp_push_windows_unnamed(kp_push_windows *windows, uint32_t *nums, uint32_t *serials,
                               size_t cap);

/* A kp_label_fn (node/agent.h): the registered name or initial call of a
 * process, as the agent says it (ctx: the windows). Returns 0. */
int kp_push_windows_label(void *ctx, uint32_t num, uint32_t serial, int registered,
                          const char *text, size_t len);

typedef struct {
    uint64_t windows;      /* handed on */
    uint64_t empty;        /* closed without a sample */
    uint64_t late;         /* samples later than their window's grace */
    uint64_t lost_windows; /* not encoded: out of memory */
} kp_push_window_stats;

void kp_push_windows_stats(kp_push_windows *windows, kp_push_window_stats *stats);

#endif

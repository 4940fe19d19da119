/* Native CPU sampling of a node's OS process, the exact CPU view of
 * `kprof record`: every thread of beam.smp sampled through perf_events
 * (cpu/perf_events.h) on a thread of kprof's own, each sample's callchain
 * named from the JIT's perf map or its registrations (Erlang functions,
 * cpu/jit_code.h; the callers read from the stack where the node keeps no
 * frame pointers) and the ELF symbols of
 * beam.smp and its libraries (C functions), and attributed to the Erlang
 * process that ran (cpu/current_process.h) where that can be told.
 *
 * Stacks, root first: the thread kind (scheduler, dirty_cpu, dirty_io,
 * other); the state, what the thread was doing in msacc's terms
 * (kp/cpu_state.h, told by cpu/states.h); the process (<0.N.S>) and its
 * label where attributed; Erlang
 * frames as mod:fun/arity; C frames as [vm]name (beam.smp) or
 * [LIBRARY]name; [kernel] for time in the kernel. */
#ifndef KP_CPU_NATIVE_H
#define KP_CPU_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/current_process.h"
#include "cpu/perf_events.h"
#include "cpu/port_owner.h"
#include "kp/cpu_state.h"
#include "kp/intern.h"
#include "kp/segment.h"

typedef struct kp_native kp_native;

/* One kept sample as the sampler thread named it, for a live consumer
 * (kprof top). `code` is the code stack, root first (Erlang frames,
 * [vm]/[LIBRARY] C frames, [jit] fragments, [kernel] last when the sample
 * was in the kernel), `depth` frames of `frames`; both valid only during
 * the call. `attributed` tells whether `pid` is the process that ran. */
typedef struct {
    const kp_frames *frames;
    const uint32_t *code;
    size_t depth;
    kp_thread_kind kind;
    kp_cpu_state state; /* what the thread was doing (cpu/states.h) */
    int attributed;
    kp_pid_numbers pid;
    uint64_t time_ns;  /* when it was taken, CLOCK_MONOTONIC */
    uint64_t period;   /* ns of CPU time it stands for (cpu-clock's period) */
    kp_native *native; /* the sampler: for kp_native_build_id during the call */
} kp_native_sample;

/* Called on the sampler thread, once per kept sample: it must be quick and
 * do its own locking. */
typedef struct {
    void (*fn)(void *ctx, const kp_native_sample *sample);
    void *ctx;
} kp_native_observer;

/* Called on the sampler thread for every sample as it is written to its
 * segment, with its rooted stack (as the segment reads back; valid during
 * the call) and its time as written (us): for a consumer of the same
 * samples as the segments (kprof record's report, report/live.h). */
typedef struct {
    void (*fn)(void *ctx, const kp_frames *frames, const kp_stacks *stacks, uint32_t stack,
               uint64_t time_us);
    void *ctx;
} kp_native_tap;

typedef struct {
    int os_pid; /* the node's beam.smp as this host sees it, checked by the caller */
    /* the same as the node sees itself (os:getpid()): other in a pid
     * namespace; its perf map is /tmp/perf-OWN_PID.map */
    int own_pid;
    /* when the node started, in clock ticks since boot (/proc/PID/stat); a
     * perf map written before is another process's. 0: unknown */
    unsigned long long start_ticks;
    kp_pid_layout layout; /* of the node's pid terms, learned (attach.h) */
    /* Where call_light_bif_shared spills the calling Erlang function's
     * address, in bytes above the runtime stack pointer at the C call;
     * learned (attach.h); -1: unknown, such samples keep the fragment. */
    int light_bif_slot;
    unsigned rate_hz; /* samples per second per thread */
    /* Where to write cpu-NNNNNN.perf segments as samples arrive (perf-script
     * text in time order, the thread's real TID, cpu-clock periods in ns,
     * the same stacks as cpu.folded but for process names, which come at the
     * end); NULL for none. */
    const kp_segment_config *segments;
    /* Sees every kept sample as it is named; NULL for none. */
    const kp_native_observer *observer;
    /* Sees every sample written to the segments; NULL for none. */
    const kp_native_tap *tap;
    /* How Erlang and Elixir frames are named: kp_frames_create's flags,
     * KP_FRAMES_ERLANG_NAMES or 0 */
    unsigned frame_flags;
} kp_native_options;

/* Opens the events and starts sampling. While `options->layout` is NONE
 * the sampler only learns (kp_native_learn): it keeps no sample. Returns
 * NULL with one line naming
 * the cause and the fix in `err`: neither a perf map nor the JIT's
 * registrations readable (kp_jit_code_open), perf_event_open refused, out
 * of memory. */
kp_native *kp_native_start(const kp_native_options *options, char *err, size_t err_len);

/* The fewest samples of the spinners kp_native_learn learns from. */
#define KP_NATIVE_LEARN_MIN_SPIN 20

/* While learning: how many samples of the spinners (kprof_calibrate:spin)
 * and of the BIF caller under call_light_bif_shared were studied so far. */
void kp_native_learn_progress(kp_native *native, unsigned *spin_samples, unsigned *bif_samples);

/* Ends the learning that kp_native_start began for a layout of NONE, once
 * the node has run kprof_calibrate's work under the sampler, and while its
 * spinners still live: `spinners` are their pids, `table_bits` the log2
 * of the node's process table size. Learns the pid layout from the words
 * their samples read at the current-process register (it must be exactly
 * one that kprof knows) and the light-BIF slot from the samples of the BIF
 * caller (kprof_calibrate:hash/2; or leaves it unknown, -1); sampling then
 * goes on with them. Returns 0, or -1 with one line naming the cause in
 * `err` (too few samples of the spinners, no layout or several fit them):
 * the caller stops and says so. */
int kp_native_learn(kp_native *native, const kp_pid_numbers *spinners, size_t n_spinners,
                    unsigned table_bits, char *err, size_t err_len);

/* 1 when samples in port tasks wait for the node's ports to learn where
 * a port keeps its connected process and name (cpu/port_owner.h), and the
 * last facts came 100 ms ago or more: the caller then asks the
 * agent and calls kp_native_port_facts (kp_native_learn_ports does).
 * Any thread. */
int kp_native_ports_wanted(kp_native *native);

/* 1 once a sample in a port task was seen. Any thread. */
int kp_native_port_tasks_seen(kp_native *native);

/* The node's ports as the agent listed them (kprof_agent:ports/0), to
 * learn from; copied. Returns 1 when learned, 0 when not yet, -1 when given
 * up (port work then stays with the bare scheduler). Any thread. */
int kp_native_port_facts(kp_native *native, const kp_port_fact *facts, size_t n);

/* The GNU build id, in hex, of the node's mapped file `file` (its
 * basename, as a C frame names it: "beam.smp", "libc.so.6"), into `out`.
 * Returns 1, or 0 when no such file with a build id is known. Only from an
 * observer's call (the sampler's thread), which the libraries it reads
 * belong to. */
int kp_native_build_id(kp_native *native, const char *file, char *out, size_t cap);

/* The node's beam.smp as this host sees it. */
int kp_native_os_pid(const kp_native *native);

/* NULL when the kernel's frames are named (from /proc/kallsyms); else one
 * line saying why they stay [kernel] and what would allow it (kernel time
 * or its call chain not sampled, kernel addresses hidden). */
const char *kp_native_kernel_note(const kp_native *native);

/* One line: where the JIT code's names come from and how Erlang callers
 * are found (kp_jit_code_describe). */
const char *kp_native_describe(const kp_native *native);

/* What was learned: the pid layout and the light-BIF slot (-1: none). */
void kp_native_learned(const kp_native *native, kp_pid_layout *layout, int *light_bif_slot);

/* What a run saw, for the summary. */
typedef struct {
    kp_segment_stats segments;
    int write_error;      /* errno of the first failed segment write, 0 if none */
    uint64_t samples;     /* kept */
    uint64_t attributed;  /* of those, to an Erlang process */
    uint64_t in_kernel;   /* of those, in the kernel */
    uint64_t lost;        /* lost in full rings */
    uint64_t c_leaf;      /* kept samples whose leaf is not JIT code */
    uint64_t unwound;     /* of those, unwound by CFI to the JIT code that called */
    uint64_t rbp_kept;    /* of those, the JIT's rbp was the sampled rbp: the
                           * kernel's chain gave the Erlang frames above */
    uint64_t rbp_in_copy; /* ... frame pointers walked in the stack copy */
    uint64_t light_bif;   /* ... the caller of a light BIF from its spill slot */
    uint64_t unwind_ns;   /* time kprof spent unwinding */
    uint64_t named_leaf;  /* kept samples whose leaf is a function named by its
                           * symbol: not FILE@0xSTART, not bare [kernel] */
    uint64_t port_tasks;  /* kept samples in a port task (erts_port_task_execute) */
    uint64_t port_owned;  /* of those, named with their port and its connected
                           * process (cpu/port_owner.h) */
    /* kept samples per thread kind and state */
    uint64_t by_state[KP_THREAD_OTHER + 1][KP_CPU_STATE_COUNT];
    size_t threads;
    int with_kernel; /* kernel time sampled */
} kp_native_stats;

/* Stops sampling (joins the thread) and fills `stats`. The samples stay for
 * kp_native_write(). */
void kp_native_stop(kp_native *native, kp_native_stats *stats);

/* Calls `fn` for each process samples were attributed to, so that the
 * caller can name it (kp_native_label()). Only after kp_native_stop(). */
void kp_native_each_process(kp_native *native, void (*fn)(void *ctx, kp_pid_numbers pid),
                            void *ctx);

/* Names process `pid` (its registered name, else its initial call). */
int kp_native_label(kp_native *native, kp_pid_numbers pid, int registered, const char *text,
                    size_t len);

/* The file of a recording that says which build of each file of the
 * node's native code the samples named. */
#define KP_NATIVE_FILES_NAME "cpu-files.tsv"

/* Writes DIR/cpu.folded and its flame graph DIR/cpu.svg, and
 * DIR/KP_NATIVE_FILES_NAME (`caption` is the
 * graph's second heading line). Returns 1 when written, 0 when there were
 * no samples, -1 with a message in `err`. */
int kp_native_write(kp_native *native, const char *dir, const char *caption, char *err,
                    size_t err_len);

void kp_native_free(kp_native *native);

#endif

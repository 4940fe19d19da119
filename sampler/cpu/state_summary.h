/* What the native samples' states say, in the words of `kprof record`'s
 * summary: CPU by state per kind of thread ("scheduler: 62% busy_wait,
 * 21% emulator, ..."), and, where schedulers spinning for work take more
 * than a tenth of the node's CPU, the note that says so and names the
 * emulator flags that decide it with the node's own settings, read from
 * its command line (no erlang:system_info/1 item holds them). */
#ifndef KP_CPU_STATE_SUMMARY_H
#define KP_CPU_STATE_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/perf_events.h"
#include "kp/cpu_state.h"

/* Samples per thread kind and state, as kp_native_stats.by_state. */
typedef uint64_t kp_state_counts[KP_THREAD_OTHER + 1][KP_CPU_STATE_COUNT];

/* Writes "scheduler: 62% busy_wait, 21% emulator, 9% gc; other: 80%
 * check_io, ..." into `out`: each kind of thread with samples, its states
 * of at least 1% of its samples, biggest first, in shares of its samples.
 * Returns the length (0: no sample). */
size_t kp_state_summary(const kp_state_counts counts, char *out, size_t out_len);

/* The busy-wait settings of a node's command line (`argv[0..argc)` of its
 * beam.smp, where erlexec passes +sbwt as -sbwt): "+sbwt very_long
 * +sbwtdcpu short (the default) +sbwtdio short (the default)". */
size_t kp_busy_wait_flags(const char *const *argv, size_t argc, char *out, size_t out_len);

/* The same from /proc/PID/cmdline of `os_pid`; "unknown" when unreadable. */
size_t kp_busy_wait_flags_of(int os_pid, char *out, size_t out_len);

/* When busy waiting is more than a tenth of all samples, writes the note
 * (its share of the node's CPU, per kind of scheduler, and the flags
 * `flags` as kp_busy_wait_flags wrote them) and returns its length; else
 * writes nothing and returns 0. */
size_t kp_busy_wait_note(const kp_state_counts counts, const char *flags, char *out,
                         size_t out_len);

#endif

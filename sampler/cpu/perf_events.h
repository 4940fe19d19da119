/* cpu-clock sampling of every thread of one OS process, through
 * perf_event_open(2) and one ring buffer per thread: what Linux perf does
 * with `perf record -p PID`, without the perf tool. Samples carry what
 * cpu/perf_record.h decodes. Only that process's threads are opened: kprof
 * never samples another process. */
#ifndef KP_CPU_PERF_EVENTS_H
#define KP_CPU_PERF_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/perf_record.h"

typedef struct kp_perf_events kp_perf_events;

/* What a thread does in the BEAM, from its name (1_scheduler,
 * 2_dirty_cpu_sch, 1_dirty_io_sche, ... up to OTP 25; erts_sched_1,
 * erts_dcpus_2, erts_dios_1, ... from OTP 26). */
typedef enum {
    KP_THREAD_SCHEDULER,
    KP_THREAD_DIRTY_CPU,
    KP_THREAD_DIRTY_IO,
    KP_THREAD_OTHER
} kp_thread_kind;

kp_thread_kind kp_thread_kind_of(const char *name);
/* "scheduler", "dirty_cpu", "dirty_io", "other" */
const char *kp_thread_kind_name(kp_thread_kind kind);

/* Opens a sampling event at `rate_hz` per thread on each thread of
 * `os_pid`, counting user and, where the system allows it, kernel time
 * (`*with_kernel` says which) with the kernel's call chain
 * (kp_perf_events_kernel_chain); each is tried first and given up when
 * refused (kp_perf_events_kernel_note says why). The events stamp samples
 * with CLOCK_MONOTONIC. Returns NULL with a one-line reason and what to do
 * in `err` (perf_event_paranoid, a missing capability, no such process). */
kp_perf_events *kp_perf_events_open(int os_pid, unsigned rate_hz, int *with_kernel, char *err,
                                    size_t err_len);

/* 1 when samples in kernel code carry the kernel's frames
 * (kp_cpu_sample.kernel_chain), 0 when the kernel refused them or kernel
 * time is not sampled. */
int kp_perf_events_kernel_chain(const kp_perf_events *events);

/* One line that says why kernel time, or the kernel's call chain, is not
 * recorded and what would allow it; NULL when both are. Valid until
 * kp_perf_events_close. */
const char *kp_perf_events_kernel_note(const kp_perf_events *events);

/* Opens events on threads that appeared since the last scan and closes
 * those of threads that ended. Returns the number of threads sampled. */
size_t kp_perf_events_rescan(kp_perf_events *events);

/* Called for each sample; returns 0, or nonzero to stop draining (the
 * sample is consumed either way). */
typedef int (*kp_cpu_sample_fn)(void *ctx, const kp_cpu_sample *sample);

/* Hands every record waiting in the rings to `fn`, oldest first within a
 * ring (rings are not merged: times interleave across threads). Adds lost
 * records (a ring was full) to `*lost`. Returns the samples handed, or -1
 * when a ring held a malformed record (that ring is skipped to its end). */
long kp_perf_events_drain(kp_perf_events *events, kp_cpu_sample_fn fn, void *ctx, uint64_t *lost);

/* Waits until a ring is half full (or a thread ended) or `timeout_ms` has
 * passed, whichever comes first: with a copy of the stack in each sample a
 * busy ring fills in tens of milliseconds. Returns 1 when a ring is ready,
 * 0 on timeout (or a signal), -1 with errno when poll() fails. */
int kp_perf_events_wait(kp_perf_events *events, int timeout_ms);

/* The name and kind of sampled thread `tid`; NULL when it is not sampled. */
const char *kp_perf_events_thread(const kp_perf_events *events, uint32_t tid, kp_thread_kind *kind);

/* Stops sampling and frees everything. */
void kp_perf_events_close(kp_perf_events *events);

#endif

/* The state of a native CPU sample (kp/cpu_state.h), told from its stack
 * as the VM's microstate accounting (msacc) would have counted that
 * moment: msacc switches its state where the VM enters a kind of work
 * (erts_garbage_collect*, erts_port_task_execute, erts_check_io and
 * driver_select, the call of a BIF or a NIF, the scheduler's wait loop, a
 * sleep), and those functions are on the stack of a sample taken inside
 * them.
 *
 * Why the stack and not msacc itself: the stack is read for every sample
 * anyway, and names the state of each sample, so the flame graph, the heat
 * map and each process's row can be cut by state; msacc gives totals per
 * thread only, costs the node a clock read at every switch while on, and
 * is the node's own setting, which a user may have on. It stays the
 * reference that the tests compare with (tests/integration/cpu_states).
 *
 * Debian's beam.smp is stripped: its wait loop (scheduler_wait, static) has
 * no name. The state rules learn it as the samples come: the function
 * that erts_schedule calls and that calls sched_yield, erts_check_io or a
 * sleep is the wait loop, whatever its name.
 *
 * Single-threaded: one per sampler. */
#ifndef KP_CPU_STATES_H
#define KP_CPU_STATES_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/perf_events.h"
#include "kp/cpu_state.h"

/* One frame of a code stack as the rules read it: its text as the frame
 * table holds it ("[vm]erts_schedule", "[jit]global::process_main",
 * "lists:seq/2", "[libc.so.6]__sched_yield", "[kernel]..."). */
typedef struct {
    const char *text;
    size_t len;
} kp_state_frame;

typedef struct kp_states kp_states;

/* NULL when out of memory. */
kp_states *kp_states_create(void);
void kp_states_free(kp_states *states);

/* What the rules need of a thread, as a number below 16: its kind and, for
 * threads of kind KP_THREAD_OTHER, whether its name (its comm: "0_poller",
 * "1_aux", ...; NULL if unknown) makes it a poll or an aux thread, whose
 * time outside other work msacc counts as check_io and aux. */
unsigned kp_states_thread_class(kp_thread_kind kind, const char *thread_name);

/* The state of a sample of a thread of class `thread_class` whose code
 * stack is `frames[0..n)`, ROOT FIRST. May learn from it (a wait loop seen
 * for the first time): then kp_states_generation changes, and states told
 * before may have changed too. */
kp_cpu_state kp_states_classify(kp_states *states, unsigned thread_class,
                                const kp_state_frame *frames, size_t n);

/* Changes each time the rules learn something: a caller caching states
 * per stack empties its cache when it changes. */
uint32_t kp_states_generation(const kp_states *states);

#endif

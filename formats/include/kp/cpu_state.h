/* What a thread of the node was doing when a native CPU sample was taken,
 * in the terms of the VM's own microstate accounting (msacc), so that an
 * operator can set kprof's view beside `msacc:print()`.
 *
 * KP_CPU_STATE_TABLE is the one place a state is defined: its name (the
 * frame a native sample carries, and the word the report, kprof top and
 * the summaries show), the msacc state it counts as with msacc's default
 * states (BIF, NIF and busy-wait time are extra states of an emulator
 * built with --with-microstate-accounting=extra; by default msacc counts
 * them as "emulator" and "other"), and a help line.
 *
 * Native CPU stacks are rooted
 *     beam.smp ; THREAD_KIND ; STATE ; [<0.N.S> ; [label ;]] code...
 * (cpu/native.h): the state is the frame right under the thread kind, so
 * that a flame graph of cpu.folded shows, under each kind of thread, what
 * its time went to, for flamegraph.pl and FlameScope users as well. */
#ifndef KP_CPU_STATE_H
#define KP_CPU_STATE_H

#include <stddef.h>

/* X(ID, name, msacc state, help) */
#define KP_CPU_STATE_TABLE(X)                                                               \
    X(EMULATOR, "emulator", "emulator", "Erlang code, and the VM's C code it calls inline") \
    X(BIF, "bif", "emulator", "built-in functions in C called by Erlang code")              \
    X(NIF, "nif", "emulator", "native functions of NIF libraries")                          \
    X(GC, "gc", "gc", "garbage collection")                                                 \
    X(PORT, "port", "port", "port tasks: drivers (sockets, files) run by a scheduler")      \
    X(CHECK_IO, "check_io", "check_io", "polling for I/O events")                           \
    X(AUX, "aux", "aux", "auxiliary work: thread progress, delayed frees, timers")          \
    X(BUSY_WAIT, "busy_wait", "other", "a thread without work spinning before it sleeps")   \
    X(OTHER, "other", "other", "scheduling and the rest of the VM's own work")              \
    X(SLEEP, "sleep", "sleep", "going to sleep or waking up")

typedef enum {
#define KP_CPU_STATE_ENUM(id, name, msacc, help) KP_CPU_##id,
    KP_CPU_STATE_TABLE(KP_CPU_STATE_ENUM)
#undef KP_CPU_STATE_ENUM
        KP_CPU_STATE_COUNT
} kp_cpu_state;

/* The state's name ("busy_wait"); NULL out of range. */
const char *kp_cpu_state_name(kp_cpu_state state);
/* The msacc state it counts as with msacc's default states ("other"). */
const char *kp_cpu_state_msacc(kp_cpu_state state);
/* The help line. */
const char *kp_cpu_state_help(kp_cpu_state state);
/* The state named `name[0..len)`, or -1 when no state has that name. */
int kp_cpu_state_of(const char *name, size_t len);

#endif

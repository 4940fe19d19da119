/* The state rules; see states.h. A sample's state is the one msacc would
 * have set last on its way down the stack: the rules walk the frames from
 * the root and each frame that enters a kind of work sets the state, so
 * that the deepest one wins (a garbage collection inside a BIF is gc). */
#include "cpu/states.h"

#include <string.h>

#include "kp/alloc.h"

/* Wait loops learned (unnamed functions of a stripped build): a node has
 * one or two (the schedulers' and the dirty schedulers' paths). */
#define MAX_LOOPS 16
#define LOOP_TEXT 64

struct kp_states {
    char loops[MAX_LOOPS][LOOP_TEXT];
    size_t n_loops;
    uint32_t generation;
};

kp_states *kp_states_create(void)
{
    return kp_calloc(1, sizeof(kp_states));
}

void kp_states_free(kp_states *s)
{
    kp_free(s);
}

uint32_t kp_states_generation(const kp_states *s)
{
    return s->generation;
}

static int is(const kp_state_frame *f, const char *text)
{
    size_t n = strlen(text);
    return f->len == n && memcmp(f->text, text, n) == 0;
}

static int starts(const kp_state_frame *f, const char *prefix)
{
    size_t n = strlen(prefix);
    return f->len >= n && memcmp(f->text, prefix, n) == 0;
}

static int contains(const kp_state_frame *f, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; n <= f->len && i <= f->len - n; i++)
        if (memcmp(f->text + i, needle, n) == 0)
            return 1;
    return 0;
}

/* Code the JIT runs: an Erlang function (no bracket) or a [jit] fragment. */
static int is_jit(const kp_state_frame *f)
{
    return f->len > 0 && (f->text[0] != '[' || starts(f, "[jit]"));
}

/* A C frame of a library the VM itself links (libc, the dynamic loader,
 * the vDSO, the C++ runtime), not a NIF's. */
static int is_system_library(const kp_state_frame *f)
{
    static const char *const libs[] = {"[libc.so",  "[libm.so",   "[libpthread", "[ld-linux",
                                       "[[vdso]]",  "[libstdc++", "[libgcc_s",   "[libz.so",
                                       "[libtinfo", "[libsystemd"};
    for (size_t i = 0; i < sizeof libs / sizeof *libs; i++)
        if (starts(f, libs[i]))
            return 1;
    return 0;
}

static int is_c(const kp_state_frame *f)
{
    return f->len > 0 && f->text[0] == '[' && !starts(f, "[jit]") && !starts(f, "[kernel");
}

/* Where a thread goes to sleep: msacc's "sleep" is set just before. */
static int is_sleep(const kp_state_frame *f)
{
    return is(f, "[vm]ethr_event_twait") || is(f, "[vm]ethr_event_wait") ||
           is(f, "[vm]erts_tse_wait") || is(f, "[vm]erts_tse_twait") ||
           contains(f, "futex_abstimed_wait") || is(f, "[libc.so.6]timerfd_settime");
}

/* A kernel frame where the thread waits, leaving the CPU of its own will:
 * msacc's sleep (a poll or a futex that waits, a nap), as the kernel's own
 * frames show it; not a preemption (preempt_schedule_irq calls __schedule,
 * not schedule), not sched_yield (the caller sees to that). */
static int is_kernel_sleep(const kp_state_frame *f)
{
    return is(f, "[kernel]schedule") || starts(f, "[kernel]schedule_hrtimeout") ||
           starts(f, "[kernel]futex_wait") || is(f, "[kernel]do_nanosleep");
}

static int is_yield(const kp_state_frame *f)
{
    return is(f, "[libc.so.6]__sched_yield") || is(f, "[libc.so.6]sched_yield") ||
           is(f, "[vm]erts_thr_yield");
}

/* A wait loop by its name, where the build has names. */
static int is_named_loop(const kp_state_frame *f)
{
    return is(f, "[vm]scheduler_wait") || starts(f, "[vm]sched_spin_") ||
           starts(f, "[vm]sched_busy_wait") || is(f, "[vm]aux_thread") || is(f, "[vm]poll_thread");
}

static int is_learned_loop(const kp_states *s, const kp_state_frame *f)
{
    for (size_t i = 0; i < s->n_loops; i++)
        if (strlen(s->loops[i]) == f->len && memcmp(s->loops[i], f->text, f->len) == 0)
            return 1;
    return 0;
}

/* Learns frames[at] (an unnamed beam.smp function called by erts_schedule)
 * as a wait loop when a frame below it yields, polls or sleeps. */
static void learn_loop(kp_states *s, const kp_state_frame *frames, size_t n, size_t at)
{
    const kp_state_frame *f = &frames[at];
    if (!starts(f, "[vm]beam.smp@") || f->len >= LOOP_TEXT || s->n_loops == MAX_LOOPS ||
        is_learned_loop(s, f))
        return;
    for (size_t i = at + 1; i < n; i++)
        if (is_yield(&frames[i]) || is(&frames[i], "[vm]erts_check_io") || is_sleep(&frames[i])) {
            memcpy(s->loops[s->n_loops], f->text, f->len);
            s->loops[s->n_loops++][f->len] = 0;
            s->generation++;
            return;
        }
}

#define POLL_THREAD 4
#define AUX_THREAD 8

unsigned kp_states_thread_class(kp_thread_kind kind, const char *name)
{
    if (kind != KP_THREAD_OTHER || !name)
        return (unsigned)kind;
    if (strstr(name, "poller"))
        return (unsigned)kind | POLL_THREAD;
    if (strstr(name, "aux"))
        return (unsigned)kind | AUX_THREAD;
    return (unsigned)kind;
}

kp_cpu_state kp_states_classify(kp_states *s, unsigned thread_class, const kp_state_frame *frames,
                                size_t n)
{
    /* outside any kind of work: a poll thread polls, an aux thread does
     * aux work, the rest is "other" */
    kp_cpu_state state = (thread_class & POLL_THREAD)  ? KP_CPU_CHECK_IO
                         : (thread_class & AUX_THREAD) ? KP_CPU_AUX
                                                       : KP_CPU_OTHER;
    int yielding = 0;
    for (size_t i = 0; i < n; i++) {
        const kp_state_frame *f = &frames[i];
        if (is(f, "[jit]global::process_main")) {
            state = KP_CPU_OTHER; /* the scheduler loop, between processes */
        } else if (is(f, "[vm]erts_schedule")) {
            state = KP_CPU_OTHER;
            if (i + 1 < n) {
                learn_loop(s, frames, n, i + 1);
                if (is_named_loop(&frames[i + 1]) || is_learned_loop(s, &frames[i + 1])) {
                    state = KP_CPU_BUSY_WAIT;
                    i++;
                }
            }
        } else if (is_named_loop(f)) {
            state = KP_CPU_BUSY_WAIT;
        } else if (contains(f, "garbage_collect") || starts(f, "[vm]erts_gc_")) {
            state = KP_CPU_GC;
        } else if (is(f, "[vm]erts_port_task_execute") || is(f, "[vm]erts_port_output") ||
                   is(f, "[vm]erts_port_control") || is(f, "[vm]erts_port_call") ||
                   starts(f, "[vm]call_driver_")) {
            /* a port task, or a process calling into the port's driver
             * (port_command, port_control), which msacc counts as port */
            state = KP_CPU_PORT;
        } else if (is(f, "[vm]erts_check_io") || is(f, "[vm]driver_select")) {
            /* driver_select (a driver asking for an fd's events: the
             * epoll_ctl of each {active, false} recv and each send that
             * blocks) is check_io for msacc, inside the port task or
             * port_command that calls it: on a socket ping-pong a fifth
             * of the schedulers' time */
            state = KP_CPU_CHECK_IO;
        } else if (is(f, "[vm]handle_aux_work") || is(f, "[vm]erts_handle_aux_work")) {
            state = KP_CPU_AUX;
        } else if (is(f, "[vm]erts_bump_timers")) {
            state = KP_CPU_OTHER; /* timers: msacc's "other" by default */
        } else if (is_yield(f)) {
            yielding = 1; /* the kernel's schedule() below is a yield, not a sleep */
        } else if (is_sleep(f) || (is_kernel_sleep(f) && !yielding) ||
                   is(f, "[vm]erts_poll_wait")) {
            /* erts_poll_wait sets msacc's sleep before a poll that waits,
             * and then reads the clock to wait again: on an idle node's
             * schedulers msacc counts 1-3% of their awake time as
             * check_io where a fifth of kprof's samples are in
             * erts_poll_wait. What check_io is left is erts_check_io's
             * handling of the events the poll returned. */
            state = KP_CPU_SLEEP;
        } else if (is_jit(f)) {
            /* Erlang code, or the JIT's runtime calling out of it */
            if (starts(f, "[jit]") && contains(f, "nif"))
                state = KP_CPU_NIF;
            else if (starts(f, "[jit]") && contains(f, "bif"))
                state = KP_CPU_BIF;
            else
                state = KP_CPU_EMULATOR;
        } else if (is(f, "[vm]beam_jit_call_bif") || is(f, "[vm]erts_call_dirty_bif")) {
            state = KP_CPU_BIF;
        } else if (is(f, "[vm]beam_jit_call_nif") || is(f, "[vm]erts_call_dirty_nif")) {
            state = KP_CPU_NIF;
        } else if (is_c(f) && !starts(f, "[vm]") && !is_system_library(f) &&
                   (state == KP_CPU_EMULATOR || state == KP_CPU_BIF)) {
            state = KP_CPU_NIF; /* a NIF library's code, called from Erlang */
        }
    }
    return state;
}

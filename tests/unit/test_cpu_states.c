/* The state rules of native CPU samples (sampler/cpu/states.c) on stacks
 * as Debian's beam.smp gives them (stripped: the wait loop unnamed), and
 * the summary and busy-wait note of kprof record (cpu/state_summary.c). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/state_summary.h"
#include "cpu/states.h"

/* The state of the stack `text` (frames joined by ';', root first). */
static kp_cpu_state state_of(kp_states *st, unsigned thread_class, const char *text)
{
    kp_state_frame frames[64];
    size_t n = 0;
    for (const char *p = text; *p && n < 64;) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        frames[n++] = (kp_state_frame){p, len};
        p += len + (end ? 1 : 0);
    }
    return kp_states_classify(st, thread_class, frames, n);
}

#define SCHED kp_states_thread_class(KP_THREAD_SCHEDULER, "1_scheduler")
#define LOOP "[jit]global::process_main;[vm]erts_schedule;[vm]beam.smp@0x73ee0"

static void tells_the_work(void **state)
{
    (void)state;
    kp_states *st = kp_states_create();
    assert_non_null(st);
    assert_int_equal(state_of(st, SCHED, "erlang:apply/2;kpt:spin/1"), KP_CPU_EMULATOR);
    assert_int_equal(state_of(st, SCHED, "erlang:apply/2;[jit]global::arith_compare_shared;[vm]eq"),
                     KP_CPU_EMULATOR);
    assert_int_equal(state_of(st, SCHED, "m:f/1;[jit]global::call_light_bif_shared;[vm]fun_info_2"),
                     KP_CPU_BIF);
    assert_int_equal(state_of(st, SCHED, "m:f/1;[jit]global::call_nif_early;[crypto.so]hash"),
                     KP_CPU_NIF);
    assert_int_equal(state_of(st, SCHED, "m:f/1;[vm]beam_jit_call_nif;[libnif.so]work"),
                     KP_CPU_NIF);
    /* a NIF's own call into libc stays the NIF's */
    assert_int_equal(state_of(st, SCHED, "m:f/1;[libnif.so]work;[libc.so.6]memcpy"), KP_CPU_NIF);
    assert_int_equal(
        state_of(
            st, SCHED,
            "m:f/1;[jit]global::garbage_collect;[vm]erts_garbage_collect_nobump;[vm]beam.smp@0x20380"),
        KP_CPU_GC);
    /* the deepest switch wins: a collection inside a BIF */
    assert_int_equal(state_of(st, SCHED,
                              "m:f/1;[jit]global::call_bif_shared;[vm]beam_jit_call_bif;[vm]"
                              "erts_garbage_collect"),
                     KP_CPU_GC);
    assert_int_equal(
        state_of(st, SCHED,
                 "m:f/1;erlang:port_command/3;[jit]global::call_light_bif_shared;[vm]"
                 "erts_internal_port_command_3;[vm]erts_port_output;[libc.so.6]writev"),
        KP_CPU_PORT);
    /* a driver selecting its fd inside port work is check_io, as msacc
     * counts it; the rest of the port task stays port */
    assert_int_equal(state_of(st, SCHED,
                              "[jit]global::process_main;[vm]erts_schedule;[vm]"
                              "erts_port_task_execute;[vm]driver_select;[vm]erts_poll_control"),
                     KP_CPU_CHECK_IO);
    assert_int_equal(state_of(st, SCHED,
                              "m:f/1;erlang:port_control/3;[jit]global::call_light_bif_shared;[vm]"
                              "erts_port_control;[vm]beam.smp@0x2c1f0;[vm]driver_select"),
                     KP_CPU_CHECK_IO);
    assert_int_equal(state_of(st, SCHED,
                              "[jit]global::process_main;[vm]erts_schedule;[vm]"
                              "erts_port_task_execute;[vm]beam.smp@0x2c1f0"),
                     KP_CPU_PORT);
    assert_int_equal(state_of(st, SCHED, "[jit]global::process_main;[vm]erts_schedule"),
                     KP_CPU_OTHER);
    kp_states_free(st);
}

static void learns_the_wait_loop(void **state)
{
    (void)state;
    kp_states *st = kp_states_create();
    /* before anything shows what 0x73ee0 is, it is the scheduler's own work */
    assert_int_equal(state_of(st, SCHED, LOOP), KP_CPU_OTHER);
    uint32_t gen = kp_states_generation(st);
    assert_int_equal(state_of(st, SCHED, LOOP ";[libc.so.6]__sched_yield"), KP_CPU_BUSY_WAIT);
    assert_int_not_equal(kp_states_generation(st), gen);
    gen = kp_states_generation(st);
    assert_int_equal(state_of(st, SCHED, LOOP), KP_CPU_BUSY_WAIT);
    assert_int_equal(kp_states_generation(st), gen); /* nothing new learned */
    /* work inside the loop is that work's */
    assert_int_equal(state_of(st, SCHED, LOOP ";[vm]erts_check_io"), KP_CPU_CHECK_IO);
    assert_int_equal(state_of(st, SCHED, LOOP ";[vm]erts_check_io;[vm]erts_poll_wait"),
                     KP_CPU_SLEEP);
    assert_int_equal(state_of(st, SCHED, LOOP ";[vm]erts_bump_timers"), KP_CPU_OTHER);
    assert_int_equal(state_of(st, SCHED, LOOP ";[vm]ethr_event_twait"), KP_CPU_SLEEP);
    /* the kernel's frames: a yield's schedule() is still busy waiting, a
     * futex that waits is sleep, a preemption is the work preempted */
    assert_int_equal(state_of(st, SCHED,
                              LOOP
                              ";[libc.so.6]__sched_yield;[kernel]entry_SYSCALL_64_after_hwframe;"
                              "[kernel]do_sched_yield;[kernel]schedule;[kernel]__schedule"),
                     KP_CPU_BUSY_WAIT);
    assert_int_equal(state_of(st, SCHED,
                              LOOP ";[vm]ethr_event_twait;[kernel]do_syscall_64;[kernel]"
                                   "futex_wait_queue;[kernel]schedule"),
                     KP_CPU_SLEEP);
    assert_int_equal(state_of(st, SCHED,
                              "m:f/1;[kernel]asm_sysvec_apic_timer_interrupt;[kernel]"
                              "preempt_schedule_irq;[kernel]__schedule"),
                     KP_CPU_EMULATOR);
    /* another function called by erts_schedule is not the loop */
    assert_int_equal(
        state_of(st, SCHED, "[jit]global::process_main;[vm]erts_schedule;[vm]beam.smp@0x71fa0"),
        KP_CPU_OTHER);
    /* a build with names needs no learning */
    kp_states *named = kp_states_create();
    assert_int_equal(
        state_of(named, SCHED, "[jit]global::process_main;[vm]erts_schedule;[vm]scheduler_wait"),
        KP_CPU_BUSY_WAIT);
    kp_states_free(named);
    kp_states_free(st);
}

static void threads_outside_work(void **state)
{
    (void)state;
    kp_states *st = kp_states_create();
    unsigned poller = kp_states_thread_class(KP_THREAD_OTHER, "0_poller");
    unsigned aux = kp_states_thread_class(KP_THREAD_OTHER, "1_aux");
    unsigned sys = kp_states_thread_class(KP_THREAD_OTHER, "sys_msg_dispatc");
    const char *thread = "[libc.so.6]__GI___clone3;[libc.so.6]start_thread;[vm]beam.smp@0x2e9b00";
    assert_int_equal(state_of(st, poller, thread), KP_CPU_CHECK_IO);
    assert_int_equal(state_of(st, aux, thread), KP_CPU_AUX);
    assert_int_equal(state_of(st, sys, thread), KP_CPU_OTHER);
    char stack[256];
    snprintf(stack, sizeof stack, "%s;[vm]erts_check_io;[vm]erts_poll_wait;[libc.so.6]epoll_wait",
             thread);
    assert_int_equal(state_of(st, poller, stack), KP_CPU_SLEEP);
    assert_int_equal(kp_states_thread_class(KP_THREAD_DIRTY_CPU, "1_dirty_cpu_sch"),
                     (unsigned)KP_THREAD_DIRTY_CPU);
    kp_states_free(st);
}

static void summarises(void **state)
{
    (void)state;
    kp_state_counts c = {{0}};
    char out[512];
    assert_int_equal(kp_state_summary(c, out, sizeof out), 0);
    c[KP_THREAD_SCHEDULER][KP_CPU_BUSY_WAIT] = 62;
    c[KP_THREAD_SCHEDULER][KP_CPU_EMULATOR] = 30;
    c[KP_THREAD_SCHEDULER][KP_CPU_GC] = 8;
    c[KP_THREAD_OTHER][KP_CPU_CHECK_IO] = 10;
    kp_state_summary(c, out, sizeof out);
    assert_string_equal(out, "scheduler: 62% busy_wait, 30% emulator, 8% gc; other: 100% check_io");
    const char *argv[] = {"beam.smp",  "-JPperf", "true",     "-sbwt",
                          "very_long", "--",      "-sbwtdio", "long"};
    char flags[256];
    kp_busy_wait_flags(argv, 8, flags, sizeof flags);
    assert_string_equal(flags, "+sbwt very_long +sbwtdcpu short (the default) +sbwtdio short "
                               "(the default)");
    assert_true(kp_busy_wait_note(c, flags, out, sizeof out) > 0);
    assert_non_null(strstr(out, "busy waiting is 56% of the node's CPU (scheduler threads 62%)"));
    assert_non_null(strstr(out, "+sbwt very_long"));
    c[KP_THREAD_SCHEDULER][KP_CPU_BUSY_WAIT] = 10; /* 10 of 58: over a tenth */
    assert_true(kp_busy_wait_note(c, flags, out, sizeof out) > 0);
    c[KP_THREAD_SCHEDULER][KP_CPU_BUSY_WAIT] = 5; /* 5 of 53: not */
    assert_int_equal(kp_busy_wait_note(c, flags, out, sizeof out), 0);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tells_the_work),
        cmocka_unit_test(learns_the_wait_loop),
        cmocka_unit_test(threads_outside_work),
        cmocka_unit_test(summarises),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

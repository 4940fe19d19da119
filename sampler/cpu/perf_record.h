/* The records kprof reads from a perf_event ring buffer: the layout that the
 * attributes of cpu/perf_events.c select (KP_PERF_SAMPLE_TYPE), decoded
 * without trusting a byte. Pure functions: the unit tests and the fuzz
 * target feed them bytes. */
#ifndef KP_CPU_PERF_RECORD_H
#define KP_CPU_PERF_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <linux/perf_event.h>

/* What each sample carries, in the kernel's order: IP, TID, TIME, CPU,
 * PERIOD, CALLCHAIN, then the user registers of KP_PERF_REGS. */
#define KP_PERF_SAMPLE_TYPE                                                                       \
    (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | \
     PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER)

/* x86-64 user registers taken with each sample: r13, where the BEAM's JIT
 * keeps the current process (c_p) while it runs Erlang code. Bit numbers of
 * asm/perf_regs.h (PERF_REG_X86_R13 = 21). */
#define KP_PERF_REG_C_P 21
#define KP_PERF_REGS (1ull << KP_PERF_REG_C_P)

/* Deepest callchain kept; the kernel's default limit is 127. */
#define KP_CALLCHAIN_MAX 128

typedef struct {
    uint32_t pid, tid;
    uint32_t cpu;
    uint64_t time_ns; /* CLOCK_MONOTONIC (the events use that clock) */
    uint64_t period;  /* ns of cpu-clock this sample stands for */
    uint64_t ip;
    uint64_t c_p;   /* r13 at the sample; 0 when the sample has no user registers */
    int user_regs;  /* the sample carries user registers (it hit user code, or
                     * a system call of user code) */
    int in_kernel;  /* the sample hit kernel code (a system call, a fault):
                     * `ip` is a kernel address, the chain is the user side */
    size_t n_chain; /* user frames, leaf first: the first is the IP, the others
                     * return addresses */
    uint64_t chain[KP_CALLCHAIN_MAX];
} kp_cpu_sample;

typedef enum {
    KP_PERF_RECORD_SAMPLE, /* `sample` filled */
    KP_PERF_RECORD_LOST,   /* `*lost` records were lost here (the ring was full) */
    KP_PERF_RECORD_OTHER,  /* a kind kprof does not use (throttle, ...) */
    KP_PERF_RECORD_BAD     /* malformed: the stream cannot be trusted further */
} kp_perf_record_kind;

/* Decodes the one whole record at `rec[0..len)`, header included (`len` is
 * the header's size, which the caller has checked fits the ring). */
kp_perf_record_kind kp_perf_record_decode(const unsigned char *rec, size_t len,
                                          kp_cpu_sample *sample, uint64_t *lost);

#endif

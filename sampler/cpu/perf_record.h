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
 * PERIOD, CALLCHAIN, the user registers of KP_PERF_REGS, then a copy of the
 * user stack from the sampled rsp (KP_PERF_STACK_SIZE bytes asked for). */
#define KP_PERF_SAMPLE_TYPE                                                                       \
    (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | \
     PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER)

/* x86-64 user registers taken with each sample, as bit numbers of
 * asm/perf_regs.h: what unwinding C code by its CFI needs (ip, sp, and the
 * callee-saved registers its frames save and restore: bx, bp, r12-r15),
 * r13 among them, where the BEAM's JIT keeps the current process (c_p)
 * while it runs Erlang code. The kernel writes them in bit order, which is
 * the order of kp_cpu_reg. */
enum {
    KP_PERF_REG_BX = 1,
    KP_PERF_REG_BP = 6,
    KP_PERF_REG_SP = 7,
    KP_PERF_REG_IP = 8,
    KP_PERF_REG_R12 = 20,
    KP_PERF_REG_R13 = 21,
    KP_PERF_REG_R14 = 22,
    KP_PERF_REG_R15 = 23,
};
#define KP_PERF_REG_C_P KP_PERF_REG_R13
#define KP_PERF_REGS                                                                    \
    ((1ull << KP_PERF_REG_BX) | (1ull << KP_PERF_REG_BP) | (1ull << KP_PERF_REG_SP) |   \
     (1ull << KP_PERF_REG_IP) | (1ull << KP_PERF_REG_R12) | (1ull << KP_PERF_REG_R13) | \
     (1ull << KP_PERF_REG_R14) | (1ull << KP_PERF_REG_R15))

/* Indexes of kp_cpu_sample.regs, in the kernel's (bit) order. */
typedef enum {
    KP_REG_BX,
    KP_REG_BP,
    KP_REG_SP,
    KP_REG_IP,
    KP_REG_R12,
    KP_REG_R13,
    KP_REG_R14,
    KP_REG_R15,
    KP_REG_COUNT
} kp_cpu_reg;

/* Bytes of user stack the kernel copies with each sample, from the sampled
 * rsp up: enough for the C frames between a sample in the VM's C code and
 * the JIT code that called it (see docs/native-cpu.md, "Unwinding C code"). A multiple
 * of 8; the kernel copies at most what is mapped above rsp (dyn_size). */
#define KP_PERF_STACK_SIZE 8192

/* Deepest callchain kept; the kernel's default limit is 127. */
#define KP_CALLCHAIN_MAX 128
/* Deepest kernel callchain kept. The kernel's 127 frames are shared by its
 * part and the user part; a system call from a scheduler goes about 10 to
 * 40 deep (entry_SYSCALL_64 ... tcp_sendmsg ... a device's xmit), an
 * interrupt on top of it adds some 20. Deeper chains lose their roots. */
#define KP_KERNEL_CHAIN_MAX 64

typedef struct {
    uint32_t pid, tid;
    uint32_t cpu;
    uint64_t time_ns; /* CLOCK_MONOTONIC (the events use that clock) */
    uint64_t period;  /* ns of cpu-clock this sample stands for */
    uint64_t ip;
    uint64_t c_p;                /* r13 at the sample; 0 when the sample has no user registers */
    int user_regs;               /* the sample carries user registers (it hit user code, or
                     * a system call of user code) */
    uint64_t regs[KP_REG_COUNT]; /* the user registers, when user_regs; else 0 */
    /* The copy of the user stack from regs[KP_REG_SP] up: `stack_size`
     * bytes (the kernel's dyn_size: what it could copy), pointing into the
     * record given to kp_perf_record_decode, so valid as long as it is.
     * NULL and 0 when the sample has none. */
    const unsigned char *stack;
    size_t stack_size;
    int in_kernel;  /* the sample hit kernel code (a system call, a fault):
                     * `ip` is a kernel address, the chain is the user side */
    size_t n_chain; /* user frames, leaf first: the first is the IP, the others
                     * return addresses */
    uint64_t chain[KP_CALLCHAIN_MAX];
    /* Kernel frames, leaf first (the first is `ip`, the others return
     * addresses, down to the system call's entry), when the sample hit
     * kernel code and the events record the kernel's chain
     * (kp_perf_events_kernel_chain); else none. At most
     * KP_KERNEL_CHAIN_MAX: the frames nearest the leaf are kept. The user
     * frame that entered the kernel is chain[0]. */
    size_t n_kernel_chain;
    uint64_t kernel_chain[KP_KERNEL_CHAIN_MAX];
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

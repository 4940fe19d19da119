/* Unwinding of a sample whose leaf is in C code (the VM's, a library's)
 * back to the JIT code that called it, by the C code's CFI (.eh_frame),
 * with elfutils' libdwfl, from the registers and the copy of the user stack
 * the sample carries (cpu/perf_record.h). The VM's C code has no frame
 * pointers, so the kernel's frame-pointer callchain stops being true after
 * the leaf; its CFI says where each frame saved its caller's registers.
 *
 * Only the copy is read: the live process has moved on since the sample,
 * so an address outside the copy ends the unwinding. JIT code is in no ELF
 * file and has no CFI: the unwinding stops at the first frame in it, whose
 * registers (r13, the JIT's c_p; rbp; rsp) are what the C frames below it
 * restore for it.
 *
 * Single-threaded, like the kp_symbols it shares its Dwfl with. */
#ifndef KP_CPU_UNWIND_H
#define KP_CPU_UNWIND_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/perf_record.h"

struct Dwfl;
typedef struct kp_unwind kp_unwind;

/* Deepest C stack unwound: the VM's calls from the JIT into a BIF, the
 * garbage collector or the copying of a term are a few to a dozen frames. */
#define KP_UNWIND_MAX 64

/* The callee-saved registers a C frame keeps across its calls (rbx, rbp,
 * r12-r15): where a frame's live pointers are, besides its stack slots. */
#define KP_UNWIND_SAVED 6

/* Whether `pc` is JIT code (the perf map has it). */
typedef int (*kp_unwind_is_jit)(void *ctx, uint64_t pc);

typedef struct {
    /* The C frames, leaf first: the sampled ip, then return addresses
     * (pointing after their call). */
    uint64_t pcs[KP_UNWIND_MAX];
    size_t n_pcs;
    /* Each C frame's stack pointer at its pc (its frame spans sps[k] up to
     * sps[k + 1]), and its callee-saved registers (rbx, rbp, r12..r15 in
     * that order) as the CFI restores them; bit i of regs_known[k] says
     * whether regs[k][i] is known. */
    uint64_t sps[KP_UNWIND_MAX];
    uint64_t regs[KP_UNWIND_MAX][KP_UNWIND_SAVED];
    uint8_t regs_known[KP_UNWIND_MAX];
    /* A frame in JIT code was reached: its pc (a return address, after the
     * call into the C code), and its registers as the C frames restore
     * them: rsp always, r13, r15 and rbp when the CFI tells them
     * (`*_known`). */
    int reached_jit;
    uint64_t jit_pc, jit_sp, jit_r13, jit_r15, jit_rbp;
    int r13_known, r15_known, rbp_known;
} kp_unwind_result;

/* An unwinder of the process `os_pid` whose modules `dwfl` holds (reported
 * by the caller and kept up to date by it, as cpu/symbols.c does; see
 * kp_symbols_dwfl). Attaches its own thread state to `dwfl`: libdwfl allows
 * one per Dwfl, for its lifetime, so one unwinder per Dwfl. NULL with a
 * one-line reason in `err` when libdwfl refuses. */
kp_unwind *kp_unwind_create(struct Dwfl *dwfl, int os_pid, char *err, size_t err_len);

/* Frees the unwinder; the Dwfl stays its owner's (and stays attached). */
void kp_unwind_free(kp_unwind *unwind);

/* Unwinds sample `s` (user registers and a stack copy needed) from its
 * user ip, frame by frame, until a frame's pc is JIT code by `is_jit`, or
 * the CFI or the copy ends, or KP_UNWIND_MAX frames. Fills `out` (n_pcs 0
 * when the sample has no registers or no stack). Returns 1 when a JIT frame
 * was reached, 0 when not. */
int kp_unwind_sample(kp_unwind *unwind, const kp_cpu_sample *s, kp_unwind_is_jit is_jit, void *ctx,
                     kp_unwind_result *out);

#endif

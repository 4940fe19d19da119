/* An Erlang process's call chain read from its stack without frame
 * pointers, as on a node started without +JPperf (the JIT's frame_layout
 * 0, cpu/jit_debug.h): on x86-64 Erlang code runs on the native stack, E
 * (the Erlang stack pointer) is rsp in JIT code, and each frame holds the
 * raw return address (its low two bits 0) that a native call pushed, with
 * the frame's Y registers beside it. The bottom of every process's stack
 * holds beam_normal_exit (the emulator entry's normal_exit).
 *
 * So the chain is the words from E up that are return addresses into the
 * body of an Erlang function (not a -CodeInfoPrologue, not a module's
 * header or the JIT's shared code) and directly follow a call instruction
 * (a stale return address left in a Y slot does not, as the code before
 * it is no call, in most cases), up to normal_exit. This is how OTP's own
 * gdb unwinder (erts/etc/unix/jit-reader.c) walks such stacks, with the
 * call check added. Pure: the caller copies the stack and reads the code.
 * Single-threaded. */
#ifndef KP_CPU_ERLANG_STACK_H
#define KP_CPU_ERLANG_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/jit_debug.h"
#include "cpu/perf_map.h"

/* 1 when the instruction ending just before `ret` is a call (call rel32;
 * call [rip + disp32]; call through a register, r8-r15 too; call through
 * memory: [reg], [reg + disp], [base + index * scale + disp], as the
 * JIT's remote calls through the export table are), the node's code read
 * with `code`; 0 when it is not or cannot be read. */
int kp_erlang_stack_after_call(kp_jit_debug_read_fn code, void *ctx, uint64_t ret);

/* Where the JIT keeps E while C code it called runs, as told by the
 * instruction it returns to, which restores rsp (x86-64, frame_layout 0):
 *   48 89 ec        mov %rbp,%rsp        E in rbp (callee-saved in C);
 *   49 8b 65 XX     mov XX(%r13),%rsp    E in the process's `stop`, at
 *                                        offset XX of the Process (c_p
 *                                        in r13), which C code may move
 *                                        (49 8b a5 + disp32 alike).
 * after at most two register-to-register instructions that leave rsp and
 * rbp alone (49 29 c6, sub %rax,%r14, after the garbage collector).
 * Anything else: not known (a call the JIT makes without leaving the
 * Erlang stack, or code of another shape). */
typedef enum {
    KP_SAVED_E_UNKNOWN,
    KP_SAVED_E_RBP,
    KP_SAVED_E_PROCESS,
} kp_saved_e;

/* Tells the above from the code bytes at the return address, `code[0..len)`;
 * sets `*offset` for KP_SAVED_E_PROCESS. */
kp_saved_e kp_erlang_stack_saved_e(const uint8_t *code, size_t len, unsigned *offset);

/* Whether `ret` is a return address after a call: kp_erlang_stack_after_call,
 * or a cache of its answers. */
typedef int (*kp_erlang_stack_is_return_fn)(void *ctx, uint64_t ret);

/* Walks `words[0..n)`, the stack from E up, as said above: the return
 * addresses found go into `out` (room for `cap`), the innermost caller
 * first. `is_return` NULL leaves the call check out. `*complete` is set to
 * 1 when normal_exit was reached (the whole chain), 0 when the words or
 * the room ran out first. Returns how many addresses. */
size_t kp_erlang_stack_walk(const kp_perf_map *map, const uint64_t *words, size_t n,
                            uint64_t normal_exit, kp_erlang_stack_is_return_fn is_return, void *ctx,
                            uint64_t *out, size_t cap, int *complete);

#endif

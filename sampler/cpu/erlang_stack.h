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
 * [reg]), the node's code read with `code`; 0 when it is not or cannot be
 * read. */
int kp_erlang_stack_after_call(kp_jit_debug_read_fn code, void *ctx, uint64_t ret);

/* Walks `words[0..n)`, the stack from E up, as said above: the return
 * addresses found go into `out` (room for `cap`), the innermost caller
 * first. `code` NULL leaves the call check out. `*complete` is set to 1
 * when normal_exit was reached (the whole chain), 0 when the words or the
 * room ran out first. Returns how many addresses. */
size_t kp_erlang_stack_walk(const kp_perf_map *map, const uint64_t *words, size_t n,
                            uint64_t normal_exit, kp_jit_debug_read_fn code, void *ctx,
                            uint64_t *out, size_t cap, int *complete);

#endif

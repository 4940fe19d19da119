/* A node's JIT code, seen from outside: the names of its code ranges and
 * the Erlang call chains on its processes' stacks.
 *
 * Names come from one of two sources, the same either way (cpu/jit_debug.h
 * renders each registration as the perf map's line):
 *   - the perf map (/tmp/perf-PID.map), which a node started with +JPperf
 *     true (or map) writes; followed as it grows, one read() a second;
 *   - else the JIT's registrations with GDB's JIT interface, which every
 *     node on Linux makes with no flag, read from the node's memory; the
 *     descriptor found by its symbol (beam.smp's .dynsym on OTP 25 to 28,
 *     or a debug file) or, where beam.smp hides it (OTP 29), by a scan of
 *     beam.smp's writable segment that validates what it finds.
 * The registrations also say whether Erlang frames keep frame pointers
 * (+JPperf true or fp) and where every process's stack ends
 * (beam_normal_exit), whichever source names the code.
 *
 * Without frame pointers the Erlang callers are read from the process's
 * stack (cpu/erlang_stack.h): from the sample's own stack copy where E is
 * the sampled rsp (the leaf in JIT code), else from the node's memory at
 * once, from the E that the JIT saved when it called C code: in rbp, or in
 * the process's `stop`, as the instruction at the return address tells.
 * Single-threaded: the native sampler's thread owns it. */
#ifndef KP_CPU_JIT_CODE_H
#define KP_CPU_JIT_CODE_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/perf_map.h"
#include "cpu/symbols.h"

typedef struct kp_jit_code kp_jit_code;

/* Where the names come from. */
typedef enum {
    KP_JIT_NAMES_PERF_MAP,
    KP_JIT_NAMES_REGISTRATIONS,
} kp_jit_names;

/* Most bytes of an Erlang stack read from the node for one sample, past
 * its copy: a stack deeper than this (or than the frames a sample keeps)
 * keeps its innermost callers. */
#define KP_JIT_STACK_READ_MAX 65536u

/* Opens the JIT code of node `os_pid` (mapped files already in `symbols`):
 * its perf map at `map_path` when it has one and `map_stale` is 0, else its
 * registrations. Returns NULL with one line naming the cause and the fix in
 * `err` when neither can be read. */
kp_jit_code *kp_jit_code_open(int os_pid, const char *map_path, int map_stale, kp_symbols *symbols,
                              char *err, size_t err_len);

/* Frees everything; NULL does nothing. */
void kp_jit_code_free(kp_jit_code *code);

/* The source of the names. */
kp_jit_names kp_jit_code_names(const kp_jit_code *code);

/* 1 when the node's Erlang frames keep frame pointers (+JPperf true or
 * fp), so that the kernel's callchain is true through JIT code; 0 when
 * they do not and the callers are read from the stack. */
int kp_jit_code_frame_pointers(const kp_jit_code *code);

/* beam_normal_exit: the return address at the bottom of every process's
 * stack, which no frame names; 0 when not known. */
uint64_t kp_jit_code_normal_exit(const kp_jit_code *code);

/* One line for the user: which source names the JIT code and how Erlang
 * callers are found ("JIT code named from the node's perf map; Erlang
 * callers read from each process's stack and its frame pointers"). */
const char *kp_jit_code_describe(const kp_jit_code *code);

/* The entry holding `addr`, or NULL; valid until the next refresh. */
const kp_jit_symbol *kp_jit_code_find(const kp_jit_code *code, uint64_t addr);

/* Takes in code loaded or purged since the last call: the perf map's new
 * lines, or the registrations read again when their list changed. Returns
 * 1 when names changed (addresses looked up before may name other code
 * now), 0 when not, -1 when the node cannot be read (gone). */
int kp_jit_code_refresh(kp_jit_code *code);

/* The Erlang callers of a sample whose Erlang stack pointer was `e`, the
 * innermost first, into `out` (room for `cap`): return addresses (after
 * their call) into Erlang functions' bodies, up to the process's normal
 * exit. `copy[0..copy_len)` holds the stack's bytes from `e` as the
 * sample copied them (NULL, 0 when it has none); past it the stack is read
 * from the node now, up to KP_JIT_STACK_READ_MAX bytes. `*complete` is 1
 * when the normal exit was reached. Returns how many. */
size_t kp_jit_code_callers(kp_jit_code *code, uint64_t e, const uint8_t *copy, size_t copy_len,
                           uint64_t *out, size_t cap, int *complete);

/* The registers of a JIT frame that called C code, as the C frames'
 * CFI restored them at the sample: `*_known` says which are. */
typedef struct {
    uint64_t rbp, c_p, htop; /* rbp; r13 (the process); r15 (its heap top) */
    int rbp_known, c_p_known, htop_known;
} kp_jit_caller_regs;

/* E as the JIT saved it when its code called C code that returns to
 * `ret`: from the JIT frame's rbp, or from the process's `stop`, read from
 * the node now. The process may have moved on since the sample (returned,
 * run other code, been scheduled out), and `stop` with it: its `htop`,
 * which the JIT saves beside `stop`, must still be the r15 of the sample,
 * else the E is not taken. Returns 1 with `*e` set, 0 when the code at
 * `ret` restores E from neither, what it needs is not known, or the
 * process has moved on. */
int kp_jit_code_saved_e(kp_jit_code *code, uint64_t ret, const kp_jit_caller_regs *regs,
                        uint64_t *e);

#endif

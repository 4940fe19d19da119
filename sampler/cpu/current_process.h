/* Which Erlang process a native sample was taken in. While the BEAM's JIT
 * (x86-64, OTP 24 and later) runs Erlang code it keeps the running
 * process's `Process *` in r13 (its `c_p` register), which every sample
 * carries (cpu/perf_record.h). The first word of a Process is its pid term
 * (ErtsPTabElementCommon.id), which kprof reads from the node's memory with
 * process_vm_readv(2): nothing runs in the node for it.
 *
 * r13 means c_p only in JIT code, and C code called from it may reuse the
 * register: what is read there is checked (a pid's tag) and may still be
 * wrong, so the caller attributes only what it can defend (see
 * cpu/native.c). */
#ifndef KP_CPU_CURRENT_PROCESS_H
#define KP_CPU_CURRENT_PROCESS_H

#include <stddef.h>
#include <stdint.h>

/* The two numbers of a local pid <0.NUM.SERIAL>. */
typedef struct {
    uint32_t num, serial;
} kp_pid_numbers;

/* How a node's release lays out an internal pid term (64-bit). Both keep
 * the 4-bit tag 0x3 at the bottom; above it:
 *   - LOW_HALF (OTP 24 and 25): the pid's data in the low 32 bits, 15 bits
 *     of number then 13 of serial; the process table index in the high 32;
 *   - SLOT (OTP 26 and later): the process table slot of the pid's data,
 *     whose low `table_bits` bits (the table holds 2^table_bits slots) are
 *     interleaved so that 2^line_bits neighbours share no cache line; the
 *     data, once restored, holds 28 bits of number then the serial.
 * Which one a node uses, and its bits, kprof learns from the node
 * (kp_pid_layout_learn) rather than from its release number. */
typedef enum { KP_PID_LAYOUT_NONE, KP_PID_LAYOUT_LOW_HALF, KP_PID_LAYOUT_SLOT } kp_pid_layout_kind;

typedef struct {
    kp_pid_layout_kind kind;
    unsigned table_bits, line_bits; /* SLOT only */
} kp_pid_layout;

/* Decodes internal pid term `term` under `layout`. Returns 0, or -1 when
 * `term` is not a pid (or the layout is NONE). */
int kp_pid_term_decode(uint64_t term, const kp_pid_layout *layout, kp_pid_numbers *pid);

/* The layouts kprof knows how to read, for a node whose process table
 * holds 2^table_bits slots (erlang:system_info(process_limit)): the one
 * among them that decodes each of the `n_terms` (at least one) pid terms
 * read at the c_p of known processes to one of the `n_known` pids. (A
 * known process the scheduler hardly ran may have left no term.) Returns the number of layouts that do (`*out` is the
 * first): the caller trusts only an answer of exactly 1. */
int kp_pid_layout_learn(const uint64_t *terms, size_t n_terms, const kp_pid_numbers *known,
                        size_t n_known, unsigned table_bits, kp_pid_layout *out);

/* "OTP 24/25 (number and serial in the low half)" or "OTP 26+ (table
 * slot, 2^18 slots, 8 a cache line)": for the summary. */
void kp_pid_layout_describe(const kp_pid_layout *layout, char *buf, size_t len);

/* 0 if this process may read process `os_pid`'s memory, else the errno
 * that says why not (EPERM: no ptrace access, which kprof needs to tell a
 * sample's Erlang process; ESRCH: gone). Asks with a read of address 0,
 * which fails with EFAULT when reading is allowed. */
int kp_current_process_readable(int os_pid);

/* Reads the words at the `n` addresses `c_p` in process `os_pid` into
 * `words`; `ok[i]` says whether words[i] could be read. Returns 0, or -1
 * with errno when the process cannot be read at all (as below). */
int kp_current_process_terms(int os_pid, const uint64_t *c_p, size_t n, uint64_t *words,
                             unsigned char *ok);

/* Reads the pid terms at the `n` addresses `c_p` in process `os_pid` and
 * decodes them under `layout` into `pids`; `ok[i]` says whether pids[i] is one. Returns
 * the number decoded, or -1 with errno when the process cannot be read at
 * all (EPERM: ptrace access is refused, see kernel.yama.ptrace_scope;
 * ESRCH: it is gone). */
long kp_current_process_read(int os_pid, const kp_pid_layout *layout, const uint64_t *c_p, size_t n,
                             kp_pid_numbers *pids, unsigned char *ok);

#endif

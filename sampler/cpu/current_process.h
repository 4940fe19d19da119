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

/* Decodes an internal pid term of a 64-bit node of OTP release `otp`.
 * Releases 24 and 25 (those checked) lay it out so: the pid's data in the
 * low 32 bits above the 4-bit tag, 15 bits of number then 13 of serial;
 * the process table index in the high 32 bits. Returns 0, or -1 when
 * `term` is not a pid or the release is another. */
int kp_pid_term_decode(uint64_t term, unsigned otp, kp_pid_numbers *pid);

/* Reads the pid terms at the `n` addresses `c_p` in process `os_pid` and
 * decodes them into `pids`; `ok[i]` says whether pids[i] is one. Returns
 * the number decoded, or -1 with errno when the process cannot be read at
 * all (EPERM: ptrace access is refused, see kernel.yama.ptrace_scope;
 * ESRCH: it is gone). */
long kp_current_process_read(int os_pid, unsigned otp, const uint64_t *c_p, size_t n,
                             kp_pid_numbers *pids, unsigned char *ok);

#endif

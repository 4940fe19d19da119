/* CFI unwinding of a sample through libdwfl's thread-state callbacks; see
 * unwind.h. */
#define _GNU_SOURCE
#include "cpu/unwind.h"

#include <elfutils/libdwfl.h>
#include <stdio.h>
#include <string.h>

#include "kp/alloc.h"

/* DWARF register numbers of x86-64 (the psABI's): what the sample's
 * registers are to the CFI. */
enum {
    DW_RBX = 3,
    DW_RBP = 6,
    DW_RSP = 7,
    DW_R12 = 12,
    DW_R13 = 13,
    DW_R14 = 14,
    DW_R15 = 15,
    DW_RIP = 16
};

/* kp_unwind_result.regs' order */
static const unsigned saved_regs[KP_UNWIND_SAVED] = {DW_RBX, DW_RBP, DW_R12,
                                                     DW_R13, DW_R14, DW_R15};

struct kp_unwind {
    Dwfl *dwfl;
    /* the sample being unwound, and where its frames go */
    const kp_cpu_sample *sample;
    kp_unwind_is_jit is_jit;
    void *ctx;
    kp_unwind_result *out;
    uint64_t last_sp;
};

/* The process's threads are never listed: each sample names its own. */
static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_arg)
{
    (void)dwfl, (void)arg, (void)thread_arg;
    return 0;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_arg)
{
    (void)dwfl, (void)tid;
    *thread_arg = arg;
    return true;
}

/* Stack memory, from the sample's copy only: the live stack has changed
 * since the sample was taken, so what is not in the copy is unknown. */
static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    (void)dwfl;
    const kp_unwind *u = arg;
    const kp_cpu_sample *s = u->sample;
    uint64_t base = s->regs[KP_REG_SP];
    if (addr < base || addr - base > s->stack_size || s->stack_size - (addr - base) < 8)
        return false;
    memcpy(result, s->stack + (addr - base), 8);
    return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
    const kp_unwind *u = arg;
    const uint64_t *r = u->sample->regs;
    Dwarf_Word bx = r[KP_REG_BX], bp_sp[2] = {r[KP_REG_BP], r[KP_REG_SP]};
    Dwarf_Word r12_15[4] = {r[KP_REG_R12], r[KP_REG_R13], r[KP_REG_R14], r[KP_REG_R15]};
    Dwarf_Word ip = r[KP_REG_IP];
    /* the others (rax, rcx, ...) stay unknown: the caller-saved registers
     * no CFI of a call site needs */
    if (!dwfl_thread_state_registers(thread, DW_RBX, 1, &bx) ||
        !dwfl_thread_state_registers(thread, DW_RBP, 2, bp_sp) ||
        !dwfl_thread_state_registers(thread, DW_R12, 4, r12_15) ||
        !dwfl_thread_state_registers(thread, DW_RIP, 1, &ip))
        return false;
    dwfl_thread_state_register_pc(thread, ip);
    return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

kp_unwind *kp_unwind_create(struct Dwfl *dwfl, int os_pid, char *err, size_t err_len)
{
    kp_unwind *u = kp_calloc(1, sizeof *u);
    if (!u) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    u->dwfl = dwfl;
    /* no ELF given: libdwfl takes the architecture from the modules */
    if (!dwfl_attach_state(dwfl, NULL, os_pid, &thread_callbacks, u)) {
        snprintf(err, err_len, "cannot unwind the stacks of process %d: %s", os_pid,
                 dwfl_errmsg(-1));
        kp_free(u);
        return NULL;
    }
    return u;
}

void kp_unwind_free(kp_unwind *u)
{
    kp_free(u);
}

/* Each frame, leaf first: a C frame is kept, a JIT frame ends it all. */
static int on_frame(Dwfl_Frame *state, void *arg)
{
    kp_unwind *u = arg;
    kp_unwind_result *out = u->out;
    Dwarf_Addr pc;
    bool activation;
    Dwarf_Word sp;
    if (!dwfl_frame_pc(state, &pc, &activation) || dwfl_frame_reg(state, DW_RSP, &sp) != 0)
        return DWARF_CB_ABORT;
    int leaf = out->n_pcs == 0;
    /* each caller's frame is above its callee's: anything else is a CFI
     * (or libdwfl's frame-pointer guess, where there is no CFI) gone wrong */
    if (!leaf && sp <= u->last_sp)
        return DWARF_CB_ABORT;
    u->last_sp = sp;
    /* a return address points after its call: look up the call */
    uint64_t at = activation ? pc : pc - 1;
    if (!leaf && u->is_jit(u->ctx, at)) {
        Dwarf_Word v;
        out->reached_jit = 1;
        out->jit_pc = pc;
        out->jit_sp = sp;
        if ((out->r13_known = dwfl_frame_reg(state, DW_R13, &v) == 0))
            out->jit_r13 = v;
        if ((out->r15_known = dwfl_frame_reg(state, DW_R15, &v) == 0))
            out->jit_r15 = v;
        if ((out->rbp_known = dwfl_frame_reg(state, DW_RBP, &v) == 0))
            out->jit_rbp = v;
        return DWARF_CB_ABORT;
    }
    /* a return address in no file (nor JIT code) is garbage: libdwfl went
     * past the CFI by frame-pointer guessing */
    if (!leaf && !dwfl_addrmodule(u->dwfl, at))
        return DWARF_CB_ABORT;
    size_t k = out->n_pcs++;
    out->pcs[k] = pc;
    out->sps[k] = sp;
    for (unsigned i = 0; i < KP_UNWIND_SAVED; i++) {
        Dwarf_Word v;
        if (dwfl_frame_reg(state, saved_regs[i], &v) == 0) {
            out->regs[k][i] = v;
            out->regs_known[k] |= (uint8_t)(1u << i);
        }
    }
    return out->n_pcs == KP_UNWIND_MAX ? DWARF_CB_ABORT : DWARF_CB_OK;
}

int kp_unwind_sample(kp_unwind *u, const kp_cpu_sample *s, kp_unwind_is_jit is_jit, void *ctx,
                     kp_unwind_result *out)
{
    out->n_pcs = 0;
    out->reached_jit = out->r13_known = out->r15_known = out->rbp_known = 0;
    memset(out->regs_known, 0, sizeof out->regs_known);
    if (!s->user_regs || !s->stack || s->stack_size < 8)
        return 0;
    u->sample = s;
    u->is_jit = is_jit;
    u->ctx = ctx;
    u->out = out;
    u->last_sp = 0;
    /* the end of the CFI or of the copy is an error to libdwfl, and the
     * usual end here: what was unwound until then is the answer */
    dwfl_getthread_frames(u->dwfl, (pid_t)s->tid, on_frame, u);
    u->sample = NULL;
    u->out = NULL;
    return out->reached_jit;
}

/* Decoding of ring-buffer records; see perf_record.h and the layout of
 * PERF_RECORD_SAMPLE in linux/perf_event.h. */
#include "cpu/perf_record.h"

#include <string.h>

/* A cursor over one record: every read is bounds-checked. */
typedef struct {
    const unsigned char *p, *end;
} cursor;

static int take_u64(cursor *c, uint64_t *v)
{
    if ((size_t)(c->end - c->p) < 8)
        return -1;
    memcpy(v, c->p, 8);
    c->p += 8;
    return 0;
}

static int take_u32_pair(cursor *c, uint32_t *a, uint32_t *b)
{
    if ((size_t)(c->end - c->p) < 8)
        return -1;
    memcpy(a, c->p, 4);
    memcpy(b, c->p + 4, 4);
    c->p += 8;
    return 0;
}

/* The callchain: context markers (PERF_CONTEXT_KERNEL, _USER, ...) say
 * whose frames follow; kprof keeps the kernel's and the user's, each leaf
 * first, and leaves out the others (a guest's). */
static int take_callchain(cursor *c, kp_cpu_sample *s)
{
    uint64_t nr;
    if (take_u64(c, &nr) != 0 || nr > (uint64_t)(c->end - c->p) / 8)
        return -1;
    enum { OTHER, KERNEL, USER } part = OTHER;
    for (uint64_t k = 0; k < nr; k++) {
        uint64_t ip = 0;
        take_u64(c, &ip); /* within the bound checked above */
        if (ip >= (uint64_t)PERF_CONTEXT_MAX) {
            part = ip == (uint64_t)PERF_CONTEXT_USER     ? USER
                   : ip == (uint64_t)PERF_CONTEXT_KERNEL ? KERNEL
                                                         : OTHER;
        } else if (part == USER && s->n_chain < KP_CALLCHAIN_MAX) {
            s->chain[s->n_chain++] = ip;
        } else if (part == KERNEL && s->n_kernel_chain < KP_KERNEL_CHAIN_MAX) {
            s->kernel_chain[s->n_kernel_chain++] = ip;
        }
    }
    return 0;
}

/* The user stack: its size, 0 when the sample has no user registers (then
 * nothing follows), else that many bytes and the part the kernel could
 * copy (dyn_size), which cannot exceed the size. */
static int take_stack(cursor *c, kp_cpu_sample *s)
{
    uint64_t size, dyn_size;
    s->stack = NULL;
    s->stack_size = 0;
    if (take_u64(c, &size) != 0)
        return -1;
    if (size == 0)
        return 0;
    if (size > (uint64_t)(c->end - c->p))
        return -1;
    const unsigned char *data = c->p;
    c->p += size;
    if (take_u64(c, &dyn_size) != 0 || dyn_size > size)
        return -1;
    s->stack = dyn_size ? data : NULL;
    s->stack_size = (size_t)dyn_size;
    return 0;
}

static kp_perf_record_kind decode_sample(cursor *c, uint16_t misc, kp_cpu_sample *s)
{
    uint32_t reserved;
    uint64_t abi;
    s->n_chain = 0;
    s->n_kernel_chain = 0;
    s->in_kernel = (misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_KERNEL;
    s->c_p = 0;
    if (take_u64(c, &s->ip) || take_u32_pair(c, &s->pid, &s->tid) || take_u64(c, &s->time_ns) ||
        take_u32_pair(c, &s->cpu, &reserved) || take_u64(c, &s->period) || take_callchain(c, s) ||
        take_u64(c, &abi))
        return KP_PERF_RECORD_BAD;
    /* abi 0: no user registers (a kernel thread, or user state unknown) */
    s->user_regs = abi != PERF_SAMPLE_REGS_ABI_NONE;
    memset(s->regs, 0, sizeof s->regs);
    for (int r = 0; s->user_regs && r < KP_REG_COUNT; r++)
        if (take_u64(c, &s->regs[r]) != 0)
            return KP_PERF_RECORD_BAD;
    s->c_p = s->regs[KP_REG_R13];
    return take_stack(c, s) != 0 ? KP_PERF_RECORD_BAD : KP_PERF_RECORD_SAMPLE;
}

kp_perf_record_kind kp_perf_record_decode(const unsigned char *rec, size_t len,
                                          kp_cpu_sample *sample, uint64_t *lost)
{
    struct perf_event_header h;
    if (len < sizeof h)
        return KP_PERF_RECORD_BAD;
    memcpy(&h, rec, sizeof h);
    if (h.size != len)
        return KP_PERF_RECORD_BAD;
    cursor c = {rec + sizeof h, rec + len};
    uint64_t id;
    switch (h.type) {
    case PERF_RECORD_SAMPLE: return decode_sample(&c, h.misc, sample);
    case PERF_RECORD_LOST:
        return take_u64(&c, &id) || take_u64(&c, lost) ? KP_PERF_RECORD_BAD : KP_PERF_RECORD_LOST;
    default: return KP_PERF_RECORD_OTHER;
    }
}

/* Ring-buffer records as cpu/perf_events.c asks the kernel for them
 * (cpu/perf_record.c): a sample's fields, its kernel and user callchains
 * without the context markers (each cut at its limit), the user registers (r13 among them), the copy of the
 * user stack; lost records; and refusal of every record that ends early or
 * claims more than it holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/perf_record.h"

typedef struct {
    unsigned char b[4096];
    size_t n;
} rec;

static void put(rec *r, const void *p, size_t n)
{
    memcpy(r->b + r->n, p, n);
    r->n += n;
}

static void put64(rec *r, uint64_t v)
{
    put(r, &v, 8);
}

static void put32(rec *r, uint32_t v)
{
    put(r, &v, 4);
}

/* A sample as the kernel writes it: IP, pid/tid, time, cpu, period, the
 * callchain (`chain` holds markers as given), abi and the registers of
 * KP_PERF_REGS in bit order (r13 given, the others KP_REG_x * 0x100), then
 * the user stack: its size, `stack_size` bytes (0, 1, 2, ...), dyn_size
 * (none of it without registers, as the kernel writes). */
static void sample_with_stack(rec *r, uint16_t misc, const uint64_t *chain, size_t n, uint64_t abi,
                              uint64_t r13, size_t stack_size, uint64_t dyn_size)
{
    r->n = sizeof(struct perf_event_header);
    put64(r, chain && n ? chain[n - 1] : 0x1000);
    put32(r, 467);
    put32(r, 479);
    put64(r, 123456789);
    put32(r, 1);
    put32(r, 0);
    put64(r, 1003009);
    put64(r, n);
    for (size_t i = 0; i < n; i++)
        put64(r, chain[i]);
    put64(r, abi);
    for (int k = 0; abi && k < KP_REG_COUNT; k++)
        put64(r, k == KP_REG_R13 ? r13 : (uint64_t)k * 0x100);
    put64(r, abi ? stack_size : 0);
    if (abi && stack_size) {
        for (size_t i = 0; i < stack_size; i++)
            r->b[r->n + i] = (unsigned char)i;
        r->n += stack_size;
        put64(r, dyn_size);
    }
    struct perf_event_header h = {PERF_RECORD_SAMPLE, misc, (uint16_t)r->n};
    memcpy(r->b, &h, sizeof h);
}

static void sample(rec *r, uint16_t misc, const uint64_t *chain, size_t n, uint64_t abi,
                   uint64_t r13)
{
    sample_with_stack(r, misc, chain, n, abi, r13, 0, 0);
}

static void test_user_sample(void **state)
{
    (void)state;
    static rec r;
    uint64_t chain[] = {(uint64_t)PERF_CONTEXT_USER, 0x7f0000001000, 0x7f0000002000,
                        0x7f0000003000};
    sample(&r, PERF_RECORD_MISC_USER, chain, 4, PERF_SAMPLE_REGS_ABI_64, 0x55978016a2b8);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_int_equal(s.pid, 467);
    assert_int_equal(s.tid, 479);
    assert_int_equal(s.cpu, 1);
    assert_int_equal(s.time_ns, 123456789);
    assert_int_equal(s.period, 1003009);
    assert_int_equal(s.n_chain, 3);
    assert_int_equal(s.chain[0], 0x7f0000001000);
    assert_int_equal(s.chain[2], 0x7f0000003000);
    assert_true(s.user_regs);
    assert_int_equal(s.c_p, 0x55978016a2b8);
    assert_false(s.in_kernel);
    assert_int_equal(s.n_kernel_chain, 0);
}

/* In a system call: kernel frames first, then the user side, each leaf
 * first. */
static void test_kernel_sample(void **state)
{
    (void)state;
    static rec r;
    uint64_t chain[] = {(uint64_t)PERF_CONTEXT_KERNEL,
                        0xffffffff81382749, /* __x64_sys_getpid+0x19 */
                        0xffffffff822575f9, /* do_syscall_64+0x79 */
                        0xffffffff82400130, /* entry_SYSCALL_64_after_hwframe+0x76 */
                        (uint64_t)PERF_CONTEXT_USER,
                        0x7f0000001000,
                        0x7f0000002000};
    sample(&r, PERF_RECORD_MISC_KERNEL, chain, 7, PERF_SAMPLE_REGS_ABI_64, 7);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_true(s.in_kernel);
    assert_int_equal(s.n_kernel_chain, 3);
    assert_int_equal(s.kernel_chain[0], 0xffffffff81382749);
    assert_int_equal(s.kernel_chain[2], 0xffffffff82400130);
    assert_int_equal(s.n_chain, 2);
    assert_int_equal(s.chain[0], 0x7f0000001000);
    assert_int_equal(s.chain[1], 0x7f0000002000);

    /* without the kernel's chain (exclude_callchain_kernel): the user side */
    sample(&r, PERF_RECORD_MISC_KERNEL, chain + 4, 3, PERF_SAMPLE_REGS_ABI_64, 7);
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_true(s.in_kernel);
    assert_int_equal(s.n_kernel_chain, 0);
    assert_int_equal(s.n_chain, 2);

    /* a kernel thread's sample: no user side at all */
    sample(&r, PERF_RECORD_MISC_KERNEL, chain, 4, PERF_SAMPLE_REGS_ABI_NONE, 0);
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_int_equal(s.n_kernel_chain, 3);
    assert_int_equal(s.n_chain, 0);
}

/* A guest's frames (PERF_CONTEXT_GUEST_*) are nobody's here; frames
 * before any marker neither. */
static void test_other_contexts(void **state)
{
    (void)state;
    static rec r;
    uint64_t chain[] = {0x1111,
                        (uint64_t)PERF_CONTEXT_GUEST_KERNEL,
                        0xffffffff81000010,
                        (uint64_t)PERF_CONTEXT_KERNEL,
                        0xffffffff81000020,
                        (uint64_t)PERF_CONTEXT_GUEST_USER,
                        0x7f0000009000,
                        (uint64_t)PERF_CONTEXT_USER,
                        0x7f0000001000};
    sample(&r, PERF_RECORD_MISC_KERNEL, chain, 9, PERF_SAMPLE_REGS_ABI_64, 7);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_int_equal(s.n_kernel_chain, 1);
    assert_int_equal(s.kernel_chain[0], 0xffffffff81000020);
    assert_int_equal(s.n_chain, 1);
    assert_int_equal(s.chain[0], 0x7f0000001000);
}

/* A kernel chain deeper than KP_KERNEL_CHAIN_MAX keeps its leaf side, and
 * the user side after it is whole. */
static void test_deep_kernel_chain_is_cut(void **state)
{
    (void)state;
    static rec r;
    static uint64_t chain[KP_KERNEL_CHAIN_MAX + 20];
    size_t n = 0;
    chain[n++] = (uint64_t)PERF_CONTEXT_KERNEL;
    for (size_t i = 0; i < KP_KERNEL_CHAIN_MAX + 10; i++)
        chain[n++] = 0xffffffff81000000 + i;
    chain[n++] = (uint64_t)PERF_CONTEXT_USER;
    for (size_t i = 0; i < 5; i++)
        chain[n++] = 0x7f0000001000 + i;
    sample(&r, PERF_RECORD_MISC_KERNEL, chain, n, PERF_SAMPLE_REGS_ABI_64, 1);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_int_equal(s.n_kernel_chain, KP_KERNEL_CHAIN_MAX);
    assert_int_equal(s.kernel_chain[0], 0xffffffff81000000);
    assert_int_equal(s.kernel_chain[KP_KERNEL_CHAIN_MAX - 1],
                     0xffffffff81000000 + KP_KERNEL_CHAIN_MAX - 1);
    assert_int_equal(s.n_chain, 5);
    assert_int_equal(s.chain[4], 0x7f0000001004);
}

/* The registers in bit order, and the stack copy: dyn_size bytes of it
 * are the stack, the rest of the reserved size is padding. */
static void test_registers_and_stack(void **state)
{
    (void)state;
    static rec r;
    uint64_t chain[] = {(uint64_t)PERF_CONTEXT_USER, 0x7f0000001000};
    sample_with_stack(&r, PERF_RECORD_MISC_USER, chain, 2, PERF_SAMPLE_REGS_ABI_64, 0x5500, 256,
                      200);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_int_equal(s.regs[KP_REG_BX], 0);
    assert_int_equal(s.regs[KP_REG_SP], 2 * 0x100);
    assert_int_equal(s.regs[KP_REG_IP], 3 * 0x100);
    assert_int_equal(s.regs[KP_REG_R15], 7 * 0x100);
    assert_int_equal(s.regs[KP_REG_R13], 0x5500);
    assert_int_equal(s.c_p, 0x5500);
    assert_int_equal(s.stack_size, 200);
    assert_non_null(s.stack);
    assert_int_equal(s.stack[0], 0);
    assert_int_equal(s.stack[199], 199);
    /* nothing could be copied (rsp unmapped) */
    sample_with_stack(&r, PERF_RECORD_MISC_USER, chain, 2, PERF_SAMPLE_REGS_ABI_64, 1, 64, 0);
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_null(s.stack);
    assert_int_equal(s.stack_size, 0);
    /* dyn_size beyond the size is a lie */
    sample_with_stack(&r, PERF_RECORD_MISC_USER, chain, 2, PERF_SAMPLE_REGS_ABI_64, 1, 64, 65);
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_BAD);
    /* a size beyond the record */
    sample_with_stack(&r, PERF_RECORD_MISC_USER, chain, 2, PERF_SAMPLE_REGS_ABI_64, 1, 64, 64);
    size_t size_at = r.n - 8 - 64 - 8;
    uint64_t huge = 1u << 20;
    memcpy(r.b + size_at, &huge, 8);
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_BAD);
}

/* abi 0: no registers follow (a thread with no user state) */
static void test_no_registers(void **state)
{
    (void)state;
    static rec r;
    sample(&r, PERF_RECORD_MISC_KERNEL, NULL, 0, PERF_SAMPLE_REGS_ABI_NONE, 0);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_false(s.user_regs);
    assert_int_equal(s.c_p, 0);
    assert_int_equal(s.n_chain, 0);
}

/* The kernel's limit is 127 frames; more is kept up to KP_CALLCHAIN_MAX. */
static void test_deep_chain_is_cut(void **state)
{
    (void)state;
    static rec r;
    static uint64_t chain[200];
    chain[0] = (uint64_t)PERF_CONTEXT_USER;
    for (size_t i = 1; i < 200; i++)
        chain[i] = 0x1000 + i;
    sample(&r, PERF_RECORD_MISC_USER, chain, 200, PERF_SAMPLE_REGS_ABI_64, 1);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_SAMPLE);
    assert_int_equal(s.n_chain, KP_CALLCHAIN_MAX);
    assert_int_equal(s.c_p, 1);
}

static void test_lost_and_other(void **state)
{
    (void)state;
    static rec r;
    r.n = sizeof(struct perf_event_header);
    put64(&r, 1);
    put64(&r, 42);
    struct perf_event_header h = {PERF_RECORD_LOST, 0, (uint16_t)r.n};
    memcpy(r.b, &h, sizeof h);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_LOST);
    assert_int_equal(lost, 42);
    h.type = PERF_RECORD_THROTTLE;
    memcpy(r.b, &h, sizeof h);
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_OTHER);
}

/* Every cut of a sample is refused, and so is a callchain length that runs
 * past the record, or a header size that disagrees with the length. */
static void test_truncated(void **state)
{
    (void)state;
    static rec r;
    uint64_t chain[] = {(uint64_t)PERF_CONTEXT_USER, 0x1000, 0x2000};
    sample_with_stack(&r, PERF_RECORD_MISC_USER, chain, 3, PERF_SAMPLE_REGS_ABI_64, 5, 32, 24);
    static kp_cpu_sample s;
    uint64_t lost = 0;
    for (size_t cut = 0; cut < r.n; cut++) {
        struct perf_event_header h;
        memcpy(&h, r.b, sizeof h);
        h.size = (uint16_t)cut;
        static rec t;
        memcpy(t.b, r.b, r.n);
        if (cut >= sizeof h)
            memcpy(t.b, &h, sizeof h);
        assert_int_equal(kp_perf_record_decode(t.b, cut, &s, &lost), KP_PERF_RECORD_BAD);
    }
    assert_int_equal(kp_perf_record_decode(r.b, r.n - 1, &s, &lost), KP_PERF_RECORD_BAD);
    /* nr claims a million frames */
    size_t nr_at = sizeof(struct perf_event_header) + 8 + 8 + 8 + 8 + 8;
    uint64_t huge = 1000000;
    memcpy(r.b + nr_at, &huge, 8);
    assert_int_equal(kp_perf_record_decode(r.b, r.n, &s, &lost), KP_PERF_RECORD_BAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_sample),
        cmocka_unit_test(test_kernel_sample),
        cmocka_unit_test(test_no_registers),
        cmocka_unit_test(test_deep_chain_is_cut),
        cmocka_unit_test(test_lost_and_other),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_registers_and_stack),
        cmocka_unit_test(test_other_contexts),
        cmocka_unit_test(test_deep_kernel_chain_is_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* CFI unwinding (cpu/unwind.c) on this test process itself: three
 * functions written in assembly with their CFI, so that what the frames
 * save is known exactly, stand for a JIT frame (kpt_outer: sets r13, as
 * the JIT keeps c_p there) and the C code it calls (kpt_middle: saves r13
 * and rbx and reuses them; kpt_capture: the sampled leaf, which records the
 * registers and has the stack copied as the kernel would). The unwinder
 * must walk capture -> middle by the CFI, through the copy only, stop at
 * outer ("JIT code") and give back outer's r13 as middle saved it. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu/symbols.h"
#include "cpu/unwind.h"

#define OUTER_R13 0x1313131313ull
#define STACK_COPY 1024

typedef struct {
    uint64_t regs[KP_REG_COUNT]; /* in kp_cpu_reg order: written by kpt_capture */
    unsigned char stack[STACK_COPY];
} capture;

void kpt_outer(capture *c);
extern const char kpt_outer_end[], kpt_middle_ret[], kpt_capture_ip[];
void kpt_snapshot(capture *c);

/* The offsets are those of regs[KP_REG_BX..KP_REG_R15]. */
__asm__(".text\n"
        ".globl kpt_outer, kpt_outer_end, kpt_middle_ret, kpt_capture_ip\n"
        ".hidden kpt_outer, kpt_outer_end, kpt_middle_ret, kpt_capture_ip\n"
        ".type kpt_outer, @function\n"
        "kpt_outer:\n"
        "  .cfi_startproc\n"
        "  push %r13\n"
        "  .cfi_def_cfa_offset 16\n"
        "  .cfi_offset %r13, -16\n"
        "  movabs $0x1313131313, %r13\n"
        "  call kpt_middle\n"
        "  pop %r13\n"
        "  .cfi_def_cfa_offset 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        "kpt_outer_end:\n"
        ".size kpt_outer, . - kpt_outer\n"
        ".type kpt_middle, @function\n"
        "kpt_middle:\n"
        "  .cfi_startproc\n"
        "  push %r13\n"
        "  .cfi_def_cfa_offset 16\n"
        "  .cfi_offset %r13, -16\n"
        "  push %rbx\n"
        "  .cfi_def_cfa_offset 24\n"
        "  .cfi_offset %rbx, -24\n"
        "  sub $8, %rsp\n"
        "  .cfi_def_cfa_offset 32\n"
        "  mov $0x5555, %r13\n"
        "  mov $0x6666, %rbx\n"
        "  call kpt_capture\n"
        "kpt_middle_ret:\n"
        "  add $8, %rsp\n"
        "  .cfi_def_cfa_offset 24\n"
        "  pop %rbx\n"
        "  .cfi_def_cfa_offset 16\n"
        "  pop %r13\n"
        "  .cfi_def_cfa_offset 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size kpt_middle, . - kpt_middle\n"
        ".type kpt_capture, @function\n"
        "kpt_capture:\n"
        "  .cfi_startproc\n"
        "  sub $8, %rsp\n"
        "  .cfi_def_cfa_offset 16\n"
        "kpt_capture_ip:\n"
        "  lea kpt_capture_ip(%rip), %rax\n"
        "  mov %rbx, 0(%rdi)\n"
        "  mov %rbp, 8(%rdi)\n"
        "  mov %rsp, 16(%rdi)\n"
        "  mov %rax, 24(%rdi)\n"
        "  mov %r12, 32(%rdi)\n"
        "  mov %r13, 40(%rdi)\n"
        "  mov %r14, 48(%rdi)\n"
        "  mov %r15, 56(%rdi)\n"
        "  call kpt_snapshot\n"
        "  add $8, %rsp\n"
        "  .cfi_def_cfa_offset 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size kpt_capture, . - kpt_capture\n");

/* The kernel's copy, from the sampled rsp up: the frames of capture,
 * middle and outer and above. Byte by byte, and not instrumented: what is
 * above is other frames' memory, which ASan would call an overflow. */
__attribute__((no_sanitize_address, noinline)) void kpt_snapshot(capture *c)
{
    const volatile unsigned char *sp =
        (const volatile unsigned char *)(uintptr_t)c->regs[KP_REG_SP];
    for (size_t i = 0; i < STACK_COPY; i++)
        c->stack[i] = sp[i];
}

static int in_outer(void *ctx, uint64_t pc)
{
    (void)ctx;
    return pc >= (uint64_t)(uintptr_t)kpt_outer && pc < (uint64_t)(uintptr_t)kpt_outer_end;
}

static int never(void *ctx, uint64_t pc)
{
    (void)ctx, (void)pc;
    return 0;
}

typedef struct {
    kp_symbols *symbols;
    kp_unwind *unwind;
    capture cap;
    kp_cpu_sample sample;
} fixture;

static int setup(void **state)
{
    static fixture f;
    char err[256];
    f.symbols = kp_symbols_open(getpid(), err, sizeof err);
    if (!f.symbols)
        return -1;
    f.unwind = kp_unwind_create(kp_symbols_dwfl(f.symbols), getpid(), err, sizeof err);
    if (!f.unwind)
        return -1;
    kpt_outer(&f.cap);
    memset(&f.sample, 0, sizeof f.sample);
    f.sample.pid = (uint32_t)getpid();
    f.sample.tid = (uint32_t)gettid();
    f.sample.user_regs = 1;
    memcpy(f.sample.regs, f.cap.regs, sizeof f.sample.regs);
    f.sample.c_p = f.cap.regs[KP_REG_R13];
    f.sample.ip = f.cap.regs[KP_REG_IP];
    f.sample.stack = f.cap.stack;
    f.sample.stack_size = STACK_COPY;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kp_unwind_free(f->unwind);
    kp_symbols_close(f->symbols);
    return 0;
}

/* capture -> middle by the CFI, then outer, with r13 as middle saved it. */
static void test_reaches_the_caller(void **state)
{
    fixture *f = *state;
    assert_int_equal(f->sample.regs[KP_REG_R13], 0x5555);
    assert_int_equal(f->sample.regs[KP_REG_BX], 0x6666);
    kp_unwind_result r;
    assert_int_equal(kp_unwind_sample(f->unwind, &f->sample, in_outer, NULL, &r), 1);
    assert_int_equal(r.n_pcs, 2);
    assert_int_equal(r.pcs[0], (uint64_t)(uintptr_t)kpt_capture_ip);
    assert_int_equal(r.pcs[1], (uint64_t)(uintptr_t)kpt_middle_ret);
    assert_true(r.reached_jit);
    assert_true(in_outer(NULL, r.jit_pc - 1));
    assert_true(r.r13_known);
    assert_int_equal(r.jit_r13, OUTER_R13);
    /* outer's rsp: above capture's 16 bytes and middle's 32 */
    assert_int_equal(r.jit_sp, f->sample.regs[KP_REG_SP] + 16 + 32);
    /* rbp: no frame saved it, so outer's is the sampled one */
    assert_true(r.rbp_known);
    assert_int_equal(r.jit_rbp, f->sample.regs[KP_REG_BP]);
}

/* Memory outside the copy is never read: with only capture's own slot
 * copied, its return address is unknown and the walk ends at the leaf. */
static void test_stops_at_the_copy_end(void **state)
{
    fixture *f = *state;
    kp_cpu_sample s = f->sample;
    s.stack_size = 8; /* the return address is at rsp + 8 */
    kp_unwind_result r;
    assert_int_equal(kp_unwind_sample(f->unwind, &s, in_outer, NULL, &r), 0);
    assert_int_equal(r.n_pcs, 1);
    assert_false(r.reached_jit);
    /* middle's return address is the last word of its 32 bytes, above
     * capture's 16: one word short, the walk ends in middle */
    s.stack_size = 16 + 32 - 8;
    assert_int_equal(kp_unwind_sample(f->unwind, &s, in_outer, NULL, &r), 0);
    assert_int_equal(r.n_pcs, 2);
    assert_false(r.reached_jit);
}

/* Without JIT code the walk goes on past outer (which has CFI too), each
 * frame above the previous one, and ends by itself. */
static void test_without_jit(void **state)
{
    fixture *f = *state;
    kp_unwind_result r;
    assert_int_equal(kp_unwind_sample(f->unwind, &f->sample, never, NULL, &r), 0);
    assert_true(r.n_pcs >= 3);
    assert_true(in_outer(NULL, r.pcs[2] - 1));
}

/* No registers or no stack: nothing to unwind. */
static void test_nothing_to_unwind(void **state)
{
    fixture *f = *state;
    kp_cpu_sample s = f->sample;
    kp_unwind_result r;
    s.stack = NULL;
    s.stack_size = 0;
    assert_int_equal(kp_unwind_sample(f->unwind, &s, in_outer, NULL, &r), 0);
    assert_int_equal(r.n_pcs, 0);
    s = f->sample;
    s.user_regs = 0;
    assert_int_equal(kp_unwind_sample(f->unwind, &s, in_outer, NULL, &r), 0);
    assert_int_equal(r.n_pcs, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reaches_the_caller),
        cmocka_unit_test(test_stops_at_the_copy_end),
        cmocka_unit_test(test_without_jit),
        cmocka_unit_test(test_nothing_to_unwind),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

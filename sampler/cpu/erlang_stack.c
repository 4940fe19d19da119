/* Erlang call chains without frame pointers; see erlang_stack.h. */
#include "cpu/erlang_stack.h"

#include <string.h>

int kp_erlang_stack_after_call(kp_jit_debug_read_fn code, void *ctx, uint64_t ret)
{
    uint8_t b[7];
    if (ret < sizeof b || code(ctx, ret - sizeof b, b, sizeof b) != 0)
        return 0;
    /* b[6] is the byte just before `ret` */
    if (b[2] == 0xe8) /* call rel32 */
        return 1;
    if (b[1] == 0xff && b[2] == 0x15) /* call [rip + disp32] */
        return 1;
    /* call through a register: ff /2 with mod 11 (ff d0..d7), with a REX.B
     * prefix for r8-r15 (41 ff d0..d7) */
    if (b[5] == 0xff && (b[6] & 0xf8) == 0xd0)
        return 1;
    /* call through [reg + disp8]: ff /2 with mod 01 (ff 50..57 disp8, 41
     * for r8-r15); [rsp + disp8] takes a SIB byte (ff 54 24 disp8, below) */
    if (b[4] == 0xff && (b[5] & 0xf8) == 0x50 && (b[5] & 7) != 4)
        return 1;
    /* call through [reg] (ff 10..17 but for 14, a SIB, and 15, rip); and
     * through [base + index * scale] (ff 14 SIB): a remote call through the
     * export table, `call *(%rax,%r12,8)` (42 ff 14 e0), r12 holding the
     * active code index */
    if (b[5] == 0xff && (b[6] & 0xf8) == 0x10 && b[6] != 0x14 && b[6] != 0x15)
        return 1;
    if (b[4] == 0xff && b[5] == 0x14 && (b[6] & 7) != 5)
        return 1;
    /* the same with disp8 (ff 54 SIB disp8) and disp32 (ff 90..97 disp32,
     * ff 94 SIB disp32) */
    if (b[3] == 0xff && b[4] == 0x54)
        return 1;
    if (b[1] == 0xff && (b[2] & 0xf8) == 0x90 && b[2] != 0x94)
        return 1;
    if (b[0] == 0xff && b[1] == 0x94)
        return 1;
    return 0;
}

/* The length of the instruction at `code` when it is a register-to-register
 * ALU or move with a REX prefix (REX, opcode, mod 11) that leaves rsp and
 * rbp alone, as the JIT puts before restoring rsp (`sub %rax,%r14` after
 * the garbage collector: FCALLS less what it spent); else 0. */
static size_t plain_reg_op(const uint8_t *code, size_t len)
{
    /* add, or, and, sub, xor, mov: r/m written; then reg written; then
     * test and cmp, nothing written */
    static const uint8_t to_rm[] = {0x01, 0x09, 0x21, 0x29, 0x31, 0x89},
                         to_reg[] = {0x03, 0x0b, 0x23, 0x2b, 0x33, 0x8b},
                         none[] = {0x85, 0x39, 0x3b};
    if (len < 3 || (code[0] & 0xf0) != 0x40 || code[2] < 0xc0)
        return 0;
    unsigned rex = code[0], modrm = code[2], dest;
    if (memchr(to_rm, code[1], sizeof to_rm))
        dest = (modrm & 7) | (rex & 1) << 3;
    else if (memchr(to_reg, code[1], sizeof to_reg))
        dest = (modrm >> 3 & 7) | (rex & 4) << 1;
    else if (memchr(none, code[1], sizeof none))
        return 3;
    else
        return 0;
    return dest == 4 || dest == 5 ? 0 : 3; /* rsp, rbp */
}

kp_saved_e kp_erlang_stack_saved_e(const uint8_t *code, size_t len, unsigned *offset)
{
    /* at most two such instructions before rsp is restored */
    for (int skipped = 0; skipped < 3; skipped++) {
        if (len >= 3 && code[0] == 0x48 && code[1] == 0x89 && code[2] == 0xec)
            return KP_SAVED_E_RBP;
        if (len >= 4 && code[0] == 0x49 && code[1] == 0x8b && code[2] == 0x65) {
            *offset = code[3];
            return KP_SAVED_E_PROCESS;
        }
        if (len >= 7 && code[0] == 0x49 && code[1] == 0x8b && code[2] == 0xa5 && code[6] < 0x80) {
            *offset = (unsigned)code[3] | (unsigned)code[4] << 8 | (unsigned)code[5] << 16 |
                      (unsigned)code[6] << 24; /* disp32, not negative */
            return KP_SAVED_E_PROCESS;
        }
        size_t n = plain_reg_op(code, len);
        if (!n)
            break;
        code += n;
        len -= n;
    }
    return KP_SAVED_E_UNKNOWN;
}

size_t kp_erlang_stack_walk(const kp_perf_map *map, const uint64_t *words, size_t n,
                            uint64_t normal_exit, kp_erlang_stack_is_return_fn is_return, void *ctx,
                            uint64_t *out, size_t cap, int *complete)
{
    size_t k = 0;
    *complete = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t w = words[i];
        if (w == normal_exit && normal_exit) {
            *complete = 1;
            break;
        }
        if ((w & 3) != 0 || w == 0)
            continue;
        /* the call is in the function that returns there */
        const kp_jit_symbol *s = kp_perf_map_find(map, w - 1);
        if (!s || s->kind != KP_JIT_ERLANG)
            continue;
        if (is_return && !is_return(ctx, w))
            continue;
        if (k == cap)
            break;
        out[k++] = w;
    }
    return k;
}

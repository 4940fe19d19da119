/* Erlang call chains without frame pointers; see erlang_stack.h. */
#include "cpu/erlang_stack.h"

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
     * for r8-r15); [rsp + disp8] takes a SIB byte (ff 54 24 disp8) */
    if (b[4] == 0xff && (b[5] & 0xf8) == 0x50 && (b[5] & 7) != 4)
        return 1;
    if (b[3] == 0xff && b[4] == 0x54 && b[5] == 0x24)
        return 1;
    return 0;
}

size_t kp_erlang_stack_walk(const kp_perf_map *map, const uint64_t *words, size_t n,
                            uint64_t normal_exit, kp_jit_debug_read_fn code, void *ctx,
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
        if (code && !kp_erlang_stack_after_call(code, ctx, w))
            continue;
        if (k == cap)
            break;
        out[k++] = w;
    }
    return k;
}

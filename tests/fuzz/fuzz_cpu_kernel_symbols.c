/* Fuzz target: any bytes as /proc/kallsyms (cpu/kernel_symbols.c). The
 * table must hold no more symbols than the text has lines; every symbol
 * found must hold the address asked for, start where the table says, be
 * found again at its start, carry a non-empty name without blanks or
 * control characters (and a module of the same kind, or none) and give a
 * frame name of the length its parts make. A hidden table finds nothing.
 * Addresses asked for: each hex number of the input, its neighbours, and
 * the ends of the space. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "cpu/kernel_symbols.h"

static void check_word(const char *s)
{
    FUZZ_CHECK(s != NULL);
    size_t n = strlen(s);
    FUZZ_CHECK(n > 0 && n <= KP_KERNEL_SYMBOL_MAX);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK((unsigned char)s[i] > ' ' && s[i] != 0x7f);
}

static void look_up(const kp_kernel_symbols *ks, uint64_t addr)
{
    kp_kernel_symbol s;
    if (!kp_kernel_symbols_find(ks, addr, &s))
        return;
    FUZZ_CHECK(!kp_kernel_symbols_hidden(ks));
    FUZZ_CHECK(s.start <= addr && addr - s.start == s.offset);
    check_word(s.name);
    if (s.module) {
        check_word(s.module);
        FUZZ_CHECK(strchr(s.module, ']') == NULL);
    }
    kp_kernel_symbol again;
    FUZZ_CHECK(kp_kernel_symbols_find(ks, s.start, &again));
    FUZZ_CHECK(again.start == s.start && again.offset == 0 && again.name == s.name &&
               again.module == s.module);
    if (s.start > 0 && kp_kernel_symbols_find(ks, s.start - 1, &again))
        FUZZ_CHECK(again.start < s.start);
    static char frame[2 * KP_KERNEL_SYMBOL_MAX + 16];
    int n = kp_kernel_symbols_frame_name(&s, frame, sizeof frame);
    size_t want = strlen("[kernel]") + strlen(s.name) + (s.module ? strlen(s.module) + 1 : 0);
    FUZZ_CHECK(n >= 0 && (size_t)n == want && strlen(frame) == want);
    FUZZ_CHECK(kp_kernel_symbols_frame_name(&s, frame, want) == -1);
}

static int hex_digit(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    kp_kernel_symbols *ks = kp_kernel_symbols_parse(text, size);
    FUZZ_CHECK(ks != NULL);
    size_t lines = 1;
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';
    FUZZ_CHECK(kp_kernel_symbols_count(ks) + kp_kernel_symbols_malformed(ks) <= lines);
    if (kp_kernel_symbols_hidden(ks))
        FUZZ_CHECK(kp_kernel_symbols_count(ks) == 0);
    look_up(ks, 0);
    look_up(ks, UINT64_MAX);
    for (size_t i = 0; i < size; i++) {
        if (!hex_digit(data[i]) || (i > 0 && hex_digit(data[i - 1])))
            continue;
        uint64_t addr = 0;
        for (size_t j = i; j < size && j < i + 16 && hex_digit(data[j]); j++) {
            uint8_t c = data[j];
            addr = addr << 4 | (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        look_up(ks, addr - 1);
        look_up(ks, addr);
        look_up(ks, addr + 1);
        look_up(ks, addr + 0x1000);
    }
    kp_kernel_symbols_free(ks);
    return 0;
}

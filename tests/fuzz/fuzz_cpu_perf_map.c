/* Fuzz target: any bytes as a JIT perf map (cpu/perf_map.c), added at once
 * with kp_perf_map_add_text and read again as a growing file (a memfd
 * written in pieces whose size the first byte chooses, followed with
 * kp_perf_map_refresh). Both must hold the same entries; every entry found
 * must hold the address asked for, be found at its first and last byte and
 * carry well-formed parts. Addresses asked for: each hex number of the input,
 * and its neighbours. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "cpu/perf_map.h"

static void check_entry(const kp_perf_map *m, const kp_jit_symbol *s, uint64_t addr)
{
    FUZZ_CHECK(s->size > 0 && s->start <= UINT64_MAX - s->size);
    FUZZ_CHECK(s->start <= addr && addr - s->start < s->size);
    FUZZ_CHECK(kp_perf_map_find(m, s->start) == s);
    FUZZ_CHECK(kp_perf_map_find(m, s->start + s->size - 1) == s);
    FUZZ_CHECK(s->start == 0 || kp_perf_map_find(m, s->start - 1) != s);
    FUZZ_CHECK(s->text != NULL && s->text[s->text_len] == '\0');
    FUZZ_CHECK(s->text_len <= KP_PERF_MAP_MAX_LINE);
    switch (s->kind) {
    case KP_JIT_ERLANG:
    case KP_JIT_PROLOGUE:
        FUZZ_CHECK(s->module != NULL && s->function != NULL);
        FUZZ_CHECK(s->arity <= 255);
        FUZZ_CHECK((size_t)s->module_len + s->function_len < s->text_len);
        break;
    case KP_JIT_RUNTIME:
        FUZZ_CHECK(s->module == NULL && s->function == NULL && s->arity == 0);
        break;
    default: FUZZ_CHECK(!"kind");
    }
}

static int hex_digit(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static void look_up(const kp_perf_map *a, const kp_perf_map *b, uint64_t addr)
{
    const kp_jit_symbol *sa = kp_perf_map_find(a, addr), *sb = kp_perf_map_find(b, addr);
    FUZZ_CHECK((sa == NULL) == (sb == NULL));
    if (!sa)
        return;
    check_entry(a, sa, addr);
    check_entry(b, sb, addr);
    FUZZ_CHECK(sa->start == sb->start && sa->size == sb->size && sa->kind == sb->kind);
    FUZZ_CHECK(sa->text_len == sb->text_len && memcmp(sa->text, sb->text, sa->text_len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* pieces of 1 to 64 bytes, or up to 12 KB */
    size_t piece = data[0] < 64 ? 1u + data[0] : 1u + (data[0] - 64u) * 64u;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    /* the file is followed line by line: compare with the complete lines */
    size_t whole = len;
    while (whole > 0 && text[whole - 1] != '\n')
        whole--;

    kp_perf_map *once = kp_perf_map_create(), *grown = kp_perf_map_create();
    int fd = memfd_create("fuzz_perf_map", MFD_CLOEXEC);
    FUZZ_CHECK(once && grown && fd >= 0);
    int added = kp_perf_map_add_text(once, text, whole);
    FUZZ_CHECK(added >= 0 && kp_perf_map_count(once) <= (size_t)added);

    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    long total = 0;
    for (size_t off = 0;; off += piece) {
        int n = kp_perf_map_refresh(grown, path);
        FUZZ_CHECK(n >= 0);
        total += n;
        if (off >= len)
            break;
        size_t k = len - off < piece ? len - off : piece;
        FUZZ_CHECK(write(fd, text + off, k) == (ssize_t)k);
    }
    FUZZ_CHECK(total == added);
    FUZZ_CHECK(kp_perf_map_count(grown) == kp_perf_map_count(once));
    FUZZ_CHECK(kp_perf_map_malformed(grown) == kp_perf_map_malformed(once));

    /* the rest of the text, its last line without '\n' included */
    kp_perf_map *all = kp_perf_map_create();
    FUZZ_CHECK(all != NULL);
    FUZZ_CHECK(kp_perf_map_add_text(all, text, len) >= added);

    for (size_t i = 0; i < len; i++) {
        if (!hex_digit(data[1 + i]) || (i > 0 && hex_digit(data[i])))
            continue;
        uint64_t addr = 0;
        for (size_t j = i; j < len && j < i + 16 && hex_digit(data[1 + j]); j++) {
            uint8_t c = data[1 + j];
            addr = addr << 4 | (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        look_up(once, grown, addr - 1);
        look_up(once, grown, addr);
        look_up(once, grown, addr + 1);
        const kp_jit_symbol *s = kp_perf_map_find(all, addr);
        if (s)
            check_entry(all, s, addr);
    }
    close(fd);
    kp_perf_map_free(all);
    kp_perf_map_free(grown);
    kp_perf_map_free(once);
    return 0;
}

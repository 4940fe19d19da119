/* Fuzz target: any bytes as a file's .eh_frame_hdr (cpu/eh_frame_hdr.c),
 * at an address the first 8 bytes choose, searched for each 4-byte word of
 * the rest read as an address near it. An answer is never above the
 * address asked for, is the same when asked again at itself, and no byte
 * outside the table is read (ASan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/eh_frame_hdr.h"

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
    return "halt_on_error=1:print_stacktrace=1";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    uint64_t at;
    memcpy(&at, data, 8);
    at &= 0xffffffffffull; /* where files are mapped */
    /* a copy of exactly the table's bytes, so that ASan sees any read past them */
    size_t len = size - 8;
    unsigned char *hdr = malloc(len ? len : 1);
    if (!hdr)
        return 0;
    memcpy(hdr, data + 8, len);
    for (size_t i = 0; i + 4 <= len; i += 4) {
        int32_t rel;
        memcpy(&rel, hdr + i, 4);
        uint64_t addr = at + (uint64_t)(int64_t)rel, start, again;
        if (kp_eh_frame_hdr_find(hdr, len, at, addr, &start) == 0) {
            CHECK(start <= addr);
            CHECK(kp_eh_frame_hdr_find(hdr, len, at, start, &again) == 0 && again == start);
        }
    }
    free(hdr);
    return 0;
}

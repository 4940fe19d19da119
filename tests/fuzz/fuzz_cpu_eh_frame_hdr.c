/* Fuzz target: any bytes as a file's .eh_frame_hdr (cpu/eh_frame_hdr.c),
 * at an address the first 8 bytes choose, searched for each 4-byte word of
 * the rest read as an address near it. An answer is never above the
 * address asked for; on a sorted table of the layout linkers write it is
 * what a plain scan finds; no byte outside the table is read (ASan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "cpu/eh_frame_hdr.h"

/* For a table in the layout linkers write (version 1, a 4-byte
 * eh_frame_ptr, a udata4 count, datarel sdata4 entries) whose entries are
 * sorted and all present: 1 with the greatest start at or below `addr` in
 * `*start`, 0 when none is; -1 for any other table (no oracle). */
static int linear_find(const unsigned char *hdr, size_t len, uint64_t at, uint64_t addr,
                       uint64_t *start)
{
    if (len < 12 || hdr[0] != 1 || hdr[1] != 0x1b || hdr[2] != 0x03 || hdr[3] != 0x3b)
        return -1;
    uint32_t count;
    memcpy(&count, hdr + 8, 4);
    if (count == 0 || count > (len - 12) / 8)
        return -1;
    int found = 0;
    uint64_t prev = 0;
    for (uint32_t i = 0; i < count; i++) {
        int32_t rel;
        memcpy(&rel, hdr + 12 + 8 * (size_t)i, 4);
        uint64_t loc = at + (uint64_t)(int64_t)rel;
        if (i && loc < prev)
            return -1; /* not sorted: the search promises nothing but bounds */
        prev = loc;
        if (loc <= addr) {
            *start = loc;
            found = 1;
        }
    }
    return found;
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
        uint64_t addr = at + (uint64_t)(int64_t)rel, start = 0, expected = 0;
        int found = kp_eh_frame_hdr_find(hdr, len, at, addr, &start) == 0;
        if (found)
            FUZZ_CHECK(start <= addr);
        /* a sorted table of the layout linkers write: the search is the
         * greatest start at or below the address, found by a plain scan */
        int oracle = linear_find(hdr, len, at, addr, &expected);
        if (oracle >= 0)
            FUZZ_CHECK(found == oracle && (!found || start == expected));
    }
    free(hdr);
    return 0;
}

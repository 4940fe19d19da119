/* The .eh_frame_hdr search; see eh_frame_hdr.h. Layout (LSB Core 5.0,
 * "Exception Frame Header"): version (1), eh_frame_ptr_enc, fde_count_enc,
 * table_enc (one byte each), eh_frame_ptr, fde_count, then fde_count pairs
 * (initial location, FDE address) sorted by location, in table_enc. */
#include "cpu/eh_frame_hdr.h"

#include <string.h>

#define DW_EH_PE_omit 0xff
#define DW_EH_PE_pcrel 0x10
#define DW_EH_PE_datarel 0x30

/* Bytes of a value in `enc` (its low nibble); 0 for a format not read. */
static size_t width(unsigned enc)
{
    switch (enc & 0x0f) {
    case 0x00:           /* absptr, on a 64-bit target */
    case 0x04:           /* udata8 */
    case 0x0c: return 8; /* sdata8 */
    case 0x03:           /* udata4 */
    case 0x0b: return 4; /* sdata4 */
    case 0x02:           /* udata2 */
    case 0x0a: return 2; /* sdata2 */
    default: return 0;
    }
}

/* The value at p (width(enc) bytes, little-endian as x86-64), sign
 * extended for the signed formats, without its application (pcrel, ...). */
static uint64_t raw(const unsigned char *p, unsigned enc)
{
    size_t w = width(enc);
    uint64_t v = 0;
    for (size_t i = 0; i < w; i++)
        v |= (uint64_t)p[i] << (8 * i);
    if ((enc & 0x08) && w < 8 && (v >> (8 * w - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * w);
    return v;
}

int kp_eh_frame_hdr_find(const unsigned char *hdr, size_t len, uint64_t hdr_vaddr, uint64_t vaddr,
                         uint64_t *start)
{
    if (!hdr || len < 4 || hdr[0] != 1)
        return -1;
    unsigned ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
    size_t at = 4;
    /* eh_frame_ptr: skipped, but its width counts */
    if (ptr_enc != DW_EH_PE_omit) {
        size_t w = width(ptr_enc);
        if (!w || len - at < w)
            return -1;
        at += w;
    }
    size_t cw = width(count_enc);
    /* the table is only for a binary search when its entries have one
     * width, relative to the header: what linkers write (datarel sdata4) */
    size_t tw = width(table_enc);
    if (count_enc == DW_EH_PE_omit || !cw || (count_enc & 0x70) || len - at < cw || !tw ||
        (table_enc & 0x70) != DW_EH_PE_datarel)
        return -1;
    uint64_t count = raw(hdr + at, count_enc);
    at += cw;
    size_t entry = 2 * tw;
    if (count == 0 || count > (len - at) / entry)
        return -1;
    /* the last entry whose start is at or below vaddr */
    uint64_t lo = 0, hi = count;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        uint64_t loc = hdr_vaddr + raw(hdr + at + mid * entry, table_enc);
        if (loc <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    *start = hdr_vaddr + raw(hdr + at + (lo - 1) * entry, table_enc);
    return 0;
}

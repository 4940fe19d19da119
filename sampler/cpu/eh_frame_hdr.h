/* The start of the function holding a code address, from a file's
 * .eh_frame_hdr: the table of every .eh_frame entry's start, sorted, that
 * GNU ld and lld build for unwinders' binary search (the LSB's "Exception
 * Frame Header"). Compilers emit one entry per function (and one per
 * ".cold" part), so the greatest start at or below an address is the start
 * of its function, named or not: what lets kprof tell apart the static
 * functions of a stripped build (cpu/native_names.h).
 *
 * Reads only the bytes given: a malformed or truncated table gives no
 * answer, never a read outside them. */
#ifndef KP_CPU_EH_FRAME_HDR_H
#define KP_CPU_EH_FRAME_HDR_H

#include <stddef.h>
#include <stdint.h>

/* Finds in the table `hdr[0..len)`, which the file maps at `hdr_vaddr`
 * (its section's address, in the file's terms), the greatest function
 * start at or below `vaddr` (the file's terms too) into `*start`. Returns
 * 0, or -1 when the table says nothing of `vaddr` (below its first entry,
 * an encoding other than what linkers write, a malformed table). */
int kp_eh_frame_hdr_find(const unsigned char *hdr, size_t len, uint64_t hdr_vaddr, uint64_t vaddr,
                         uint64_t *start);

#endif

/* Hex digits, as perf maps, /proc/kallsyms and percent-encoded names write
 * them: the one parser of them for formats/ and the sampler. */
#ifndef KP_HEX_H
#define KP_HEX_H

#include <stdint.h>

/* The value of the hex digit `c` (0-9, a-f, A-F), or -1 for any other byte. */
int kp_hex_digit(char c);

/* Reads the hex digits that start at `s` (no "0x": the caller skips a prefix
 * its format allows), stopping at `end` or at the first other byte. Stores
 * their value in *out and returns the position after them; returns NULL, with
 * *out untouched, when `s` holds no digit or the value does not fit in 64
 * bits (leading zeros are fine). */
const char *kp_hex_u64(const char *s, const char *end, uint64_t *out);

#endif

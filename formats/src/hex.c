#include "kp/hex.h"

#include <stddef.h>

int kp_hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

const char *kp_hex_u64(const char *s, const char *end, uint64_t *out)
{
    const char *digits = s;
    uint64_t v = 0;
    for (int d; s < end && (d = kp_hex_digit(*s)) >= 0; s++) {
        if (v >> 60)
            return NULL;
        v = v << 4 | (uint64_t)d;
    }
    if (s == digits)
        return NULL;
    *out = v;
    return s;
}

#include "slurp.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

const char *kp_test_slurp(const char *path)
{
    static char buf[1 << 16];
    FILE *in = fopen(path, "rb");
    assert_non_null(in);
    size_t n = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    buf[n] = '\0';
    return buf;
}

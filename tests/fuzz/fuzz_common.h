/* Helpers shared by the fuzz targets (header-only so that each target stays a
 * single source file in tests/CMakeLists.txt).
 *
 * The folded output of every input is written through a kp_sink opened on
 * /dev/null; the sink's write function is replaced by one that also keeps a
 * copy of the bytes, so the output can be checked against the rules of
 * FORMATS.md section 3 (sorted, distinct, positive integer counts). */
#ifndef KP_FUZZ_COMMON_H
#define KP_FUZZ_COMMON_H

#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "kp/folded.h"
#include "kp/sink.h"
#include "kp/source.h"

/* Decompressed bytes read from one input at most: a few bytes of zstd can
 * expand to gigabytes, and the fuzzer wants thousands of inputs a second. */
#define FUZZ_MAX_TEXT (8u << 20)

static int fuzz_null_fd = -1;
static char *fuzz_out;
static size_t fuzz_out_len, fuzz_out_cap;

static ssize_t fuzz_capture_write(int fd, const void *data, size_t len)
{
    if (fd == fuzz_null_fd && len) {
        if (fuzz_out_len + len > fuzz_out_cap) {
            size_t cap = fuzz_out_cap ? fuzz_out_cap : 4096;
            while (cap < fuzz_out_len + len)
                cap *= 2;
            char *p = realloc(fuzz_out, cap);
            FUZZ_CHECK(p != NULL);
            fuzz_out = p;
            fuzz_out_cap = cap;
        }
        memcpy(fuzz_out + fuzz_out_len, data, len);
        fuzz_out_len += len;
    }
    return write(fd, data, len);
}

static void fuzz_init(void)
{
    if (fuzz_null_fd >= 0)
        return;
    fuzz_null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    FUZZ_CHECK(fuzz_null_fd >= 0);
    kp_sink_set_write_fn(fuzz_capture_write);
}

static int fuzz_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Writes `folded` to /dev/null and checks what was written: `lines` lines of
 * "STACK COUNT\n", COUNT a positive integer without leading zero, stacks
 * non-empty and strictly increasing bytewise, counts summing to `total`
 * (saturating). With `clean` the stacks are made of encoded symbols only:
 * no empty frame, no space, TAB or control byte. */
static void fuzz_write_and_check(const kp_folded *folded, int clean)
{
    size_t lines = kp_folded_lines(folded);
    uint64_t total = kp_folded_total(folded);
    kp_sink *sink;
    FUZZ_CHECK(kp_sink_open_fd(fuzz_null_fd, KP_COMPRESS_NONE, 0, &sink) == KP_OK);
    fuzz_out_len = 0;
    kp_status st = kp_folded_write(folded, sink);
    FUZZ_CHECK(st == KP_OK);
    FUZZ_CHECK(kp_sink_commit(sink) == KP_OK);

    const char *p = fuzz_out, *end = fuzz_out ? fuzz_out + fuzz_out_len : NULL;
    const char *prev = NULL;
    size_t prev_len = 0, n = 0;
    uint64_t sum = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        FUZZ_CHECK(nl != NULL); /* every line ends with '\n' */
        const char *sp = nl;
        while (sp > p && fuzz_is_digit(sp[-1]))
            sp--;
        FUZZ_CHECK(sp < nl);                 /* a count */
        FUZZ_CHECK(sp[0] != '0');            /* positive, no leading zero */
        FUZZ_CHECK(sp > p && sp[-1] == ' '); /* one space before it */
        FUZZ_CHECK(nl - sp <= 20);           /* fits in 64 bits */
        uint64_t count = 0;
        for (const char *d = sp; d < nl; d++) {
            unsigned digit = (unsigned)(*d - '0');
            count = count > (UINT64_MAX - digit) / 10 ? UINT64_MAX : count * 10 + digit;
        }
        FUZZ_CHECK(count > 0);
        sum = count > UINT64_MAX - sum ? UINT64_MAX : sum + count;
        size_t stack_len = (size_t)(sp - 1 - p);
        FUZZ_CHECK(stack_len > 0);
        if (prev) {
            size_t m = prev_len < stack_len ? prev_len : stack_len;
            int c = memcmp(prev, p, m);
            FUZZ_CHECK(c < 0 || (c == 0 && prev_len < stack_len)); /* sorted, distinct */
        }
        if (clean) {
            FUZZ_CHECK(p[0] != ';' && p[stack_len - 1] != ';');
            for (size_t i = 0; i < stack_len; i++) {
                unsigned char c = (unsigned char)p[i];
                FUZZ_CHECK(c >= 0x20 && c != 0x7f && c != ' ');
                FUZZ_CHECK(!(c == ';' && i + 1 < stack_len && p[i + 1] == ';'));
            }
        }
        prev = p;
        prev_len = stack_len;
        n++;
        p = nl + 1;
    }
    FUZZ_CHECK(n == lines);
    FUZZ_CHECK(sum == total);
}

#endif

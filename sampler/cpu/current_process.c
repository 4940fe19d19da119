/* See current_process.h. */
#define _GNU_SOURCE
#include "cpu/current_process.h"

#include <errno.h>
#include <stdio.h>
#include <sys/uio.h>

#define PID_TAG 0x3u /* _TAG_IMMED1_PID */
#define BATCH 256    /* iovecs per process_vm_readv call */

#define SLOT_NUM_BITS 28 /* number bits of a restored SLOT pid's data */
#define MAX_LINE_BITS 4  /* up to 16 slots a cache line: 128-byte lines */

int kp_pid_term_decode(uint64_t term, const kp_pid_layout *layout, kp_pid_numbers *pid)
{
    if ((term & 0xf) != PID_TAG)
        return -1;
    if (layout->kind == KP_PID_LAYOUT_LOW_HALF) {
        uint32_t data = (uint32_t)term >> 4;
        pid->num = data & 0x7fff;
        pid->serial = data >> 15;
        return 0;
    }
    if (layout->kind != KP_PID_LAYOUT_SLOT || layout->table_bits > SLOT_NUM_BITS ||
        layout->line_bits > layout->table_bits)
        return -1;
    /* the slot's bits: (data's low bits of the line) << line_bits, plus the
     * place in the line from data's top table bits; undone here */
    uint64_t slot = term >> 4;
    unsigned lines_bits = layout->table_bits - layout->line_bits;
    uint64_t table_mask = (1ull << layout->table_bits) - 1;
    uint64_t data = (slot & ~table_mask) |
                    ((slot >> layout->line_bits) & ((1ull << lines_bits) - 1)) |
                    ((slot & ((1ull << layout->line_bits) - 1)) << lines_bits);
    pid->num = (uint32_t)(data & ((1u << SLOT_NUM_BITS) - 1));
    pid->serial = (uint32_t)(data >> SLOT_NUM_BITS);
    return 0;
}

/* Does `layout` decode every term to one of the known pids? */
static int consistent(const kp_pid_layout *layout, const uint64_t *terms, size_t n_terms,
                      const kp_pid_numbers *known, size_t n_known)
{
    if (n_terms == 0)
        return 0;
    for (size_t i = 0; i < n_terms; i++) {
        kp_pid_numbers p;
        if (kp_pid_term_decode(terms[i], layout, &p) != 0)
            return 0;
        size_t k = 0;
        while (k < n_known && (known[k].num != p.num || known[k].serial != p.serial))
            k++;
        if (k == n_known)
            return 0;
    }
    return 1;
}

int kp_pid_layout_learn(const uint64_t *terms, size_t n_terms, const kp_pid_numbers *known,
                        size_t n_known, unsigned table_bits, kp_pid_layout *out)
{
    kp_pid_layout candidates[2 + MAX_LINE_BITS];
    size_t n = 0;
    candidates[n++] = (kp_pid_layout){KP_PID_LAYOUT_LOW_HALF, 0, 0};
    for (unsigned line = 0; line <= MAX_LINE_BITS && line <= table_bits; line++)
        candidates[n++] = (kp_pid_layout){KP_PID_LAYOUT_SLOT, table_bits, line};
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (!consistent(&candidates[i], terms, n_terms, known, n_known))
            continue;
        if (!found++)
            *out = candidates[i];
    }
    if (!found)
        *out = (kp_pid_layout){KP_PID_LAYOUT_NONE, 0, 0};
    return found;
}

void kp_pid_layout_describe(const kp_pid_layout *layout, char *buf, size_t len)
{
    if (layout->kind == KP_PID_LAYOUT_LOW_HALF)
        snprintf(buf, len, "OTP 24/25 (number and serial in the low half)");
    else if (layout->kind == KP_PID_LAYOUT_SLOT)
        snprintf(buf, len, "OTP 26+ (table slot, 2^%u slots, %u a cache line)", layout->table_bits,
                 1u << layout->line_bits);
    else
        snprintf(buf, len, "unknown");
}

/* Reads words at c_p[0..n) into words[]; one call for the batch, and one
 * per address from the first that fails (a call stops at a fault). */
static long read_words(int os_pid, const uint64_t *c_p, size_t n, uint64_t *words,
                       unsigned char *ok)
{
    struct iovec local[BATCH], remote[BATCH];
    for (size_t i = 0; i < n; i++) {
        local[i] = (struct iovec){&words[i], 8};
        remote[i] = (struct iovec){(void *)(uintptr_t)c_p[i], 8};
        ok[i] = 0;
    }
    ssize_t got = process_vm_readv(os_pid, local, n, remote, n, 0);
    if (got < 0 && (errno == EPERM || errno == ESRCH || errno == ENOSYS))
        return -1;
    size_t whole = got > 0 ? (size_t)got / 8 : 0;
    for (size_t i = 0; i < whole; i++)
        ok[i] = 1;
    for (size_t i = whole + 1; i < n; i++)
        ok[i] = process_vm_readv(os_pid, &local[i], 1, &remote[i], 1, 0) == 8;
    return 0;
}

int kp_current_process_readable(int os_pid)
{
    uint64_t word;
    struct iovec local = {&word, 8}, remote = {NULL, 8};
    if (process_vm_readv(os_pid, &local, 1, &remote, 1, 0) >= 0 || errno == EFAULT)
        return 0;
    return errno;
}

int kp_current_process_terms(int os_pid, const uint64_t *c_p, size_t n, uint64_t *words,
                             unsigned char *ok)
{
    for (size_t at = 0; at < n; at += BATCH) {
        size_t k = n - at < BATCH ? n - at : BATCH;
        if (read_words(os_pid, c_p + at, k, words + at, ok + at) != 0)
            return -1;
        for (size_t i = 0; i < k; i++)
            ok[at + i] = ok[at + i] && (c_p[at + i] & 7) == 0;
    }
    return 0;
}

long kp_current_process_read(int os_pid, const kp_pid_layout *layout, const uint64_t *c_p, size_t n,
                             kp_pid_numbers *pids, unsigned char *ok)
{
    long decoded = 0;
    for (size_t at = 0; at < n; at += BATCH) {
        size_t k = n - at < BATCH ? n - at : BATCH;
        uint64_t words[BATCH];
        if (kp_current_process_terms(os_pid, c_p + at, k, words, ok + at) != 0)
            return -1;
        for (size_t i = 0; i < k; i++) {
            if (ok[at + i] && kp_pid_term_decode(words[i], layout, &pids[at + i]) == 0)
                decoded++;
            else
                ok[at + i] = 0;
        }
    }
    return decoded;
}

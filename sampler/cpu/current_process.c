/* See current_process.h. */
#define _GNU_SOURCE
#include "cpu/current_process.h"

#include <errno.h>
#include <sys/uio.h>

#define PID_TAG 0x3u /* _TAG_IMMED1_PID */
#define BATCH 256    /* iovecs per process_vm_readv call */

int kp_pid_term_decode(uint64_t term, unsigned otp, kp_pid_numbers *pid)
{
    if (otp < 24 || otp > 25 || (term & 0xf) != PID_TAG)
        return -1;
    uint32_t data = (uint32_t)term >> 4;
    pid->num = data & 0x7fff;
    pid->serial = data >> 15;
    return 0;
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

long kp_current_process_read(int os_pid, unsigned otp, const uint64_t *c_p, size_t n,
                             kp_pid_numbers *pids, unsigned char *ok)
{
    long decoded = 0;
    for (size_t at = 0; at < n; at += BATCH) {
        size_t k = n - at < BATCH ? n - at : BATCH;
        uint64_t words[BATCH];
        if (read_words(os_pid, c_p + at, k, words, ok + at) != 0)
            return -1;
        for (size_t i = 0; i < k; i++) {
            if (ok[at + i] && (c_p[at + i] & 7) == 0 &&
                kp_pid_term_decode(words[i], otp, &pids[at + i]) == 0)
                decoded++;
            else
                ok[at + i] = 0;
        }
    }
    return decoded;
}

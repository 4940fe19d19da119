/* Fault injection and file helpers for the unit tests.
 *
 * Allocation failures go through kp_set_allocator(), write failures through
 * kp_sink_set_write_fn(), so the code under test runs unmodified. */
#ifndef KP_TEST_FAULTS_H
#define KP_TEST_FAULTS_H

#include <stddef.h>

/* From now on, the first `n` allocations succeed and every later one fails.
 * kp_fault_alloc_reset() restores the C library's allocator. */
void kp_fault_alloc_after(long n);
void kp_fault_alloc_reset(void);
/* Allocations attempted since the last kp_fault_alloc_after(). */
long kp_fault_alloc_attempts(void);

/* From now on, the first `bytes` bytes written by sinks go through and every
 * later write fails with `error` (e.g. ENOSPC: disk full). */
void kp_fault_write_after(long long bytes, int error);
void kp_fault_write_reset(void);

/* Creates a fresh temporary directory; returns its path (caller frees). */
char *kp_test_tmpdir(void);
/* Removes a directory and every file in it (one level). */
void kp_test_rmdir(const char *dir);
/* Number of directory entries whose name starts with `prefix` ("" = all,
 * dot-files included; "." and ".." excluded). */
size_t kp_test_count_files(const char *dir, const char *prefix);
/* Reads a whole file, decompressing gzip or zstd; returns a NUL-terminated
 * buffer (caller frees) or NULL. */
char *kp_test_read_text(const char *path, size_t *len);

#endif

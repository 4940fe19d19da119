/* Reading back what a test had written, to compare it with what it wants. */
#ifndef KP_TEST_SLURP_H
#define KP_TEST_SLURP_H

/* The first 64 KiB of the file at `path`, NUL-terminated, in a buffer that
 * the next call overwrites (a test compares one file at a time). The
 * running cmocka test fails when the file cannot be opened. */
const char *kp_test_slurp(const char *path);

#endif

/* The project's own checker of FORMATS.md: every rule that our writers must
 * follow, checked on their output. Written for kprof (not a copy of the
 * linters in ../shared/tools, which tests use only when they exist).
 *
 * Each function returns 0 when `text` follows every rule, otherwise the
 * number of violations, and writes a description of the first one (with its
 * line number) into `why` (may be NULL). */
#ifndef KP_TEST_FORMAT_CHECK_H
#define KP_TEST_FORMAT_CHECK_H

#include <stddef.h>

/* perf-script text (FORMATS.md section 1). */
int kp_check_perf(const char *text, size_t len, char *why, size_t why_len);
/* Folded stacks (section 3), sampled profiles or request traces. */
int kp_check_folded(const char *text, size_t len, char *why, size_t why_len);
/* A file name that FlameScope can list (section 2). */
int kp_check_file_name(const char *name, char *why, size_t why_len);

#endif

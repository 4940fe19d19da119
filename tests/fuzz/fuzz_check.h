/* What every fuzz target checks with: an invariant that aborts (a finding
 * for libFuzzer), and undefined behaviour stopping at its first report.
 * Header-only, so that each target stays a single source file. */
#ifndef KP_FUZZ_CHECK_H
#define KP_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* Undefined behaviour is a finding too: with -fsanitize=undefined, stop at
 * the first report instead of printing it and going on. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
    return "halt_on_error=1:print_stacktrace=1";
}

#endif

/* Names of native frames; see native_names.h. */
#include "cpu/native_names.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The C++ runtime's demangler (libstdc++, on every Debian system): the one
 * `c++filt` and perf use, for the Itanium ABI that g++ and clang follow. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* The length snprintf, returning `n`, left in a buffer of `len` bytes. */
static size_t written(int n, size_t len)
{
    return n < 0 || !len ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

static size_t put(char *out, size_t out_len, const char *text)
{
    return written(snprintf(out, out_len, "%s", text), out_len);
}

/* Cuts a demangled function's parameter list and the qualifiers after it
 * ("f(int) const" -> "f"), so that a frame reads as a C function's does
 * and survives the tools that cut at '(' (stackcollapse-perf.pl). The list
 * is the last balanced "(...)" at the end, past trailing qualifiers; a
 * name without one (a variable, "(anonymous namespace)::x") is kept.
 * Returns the new length. */
static size_t without_parameters(char *s, size_t n)
{
    static const char *const qualifiers[] = {" const", " volatile", " &&", " &", " noexcept"};
    size_t end = n;
    for (int again = 1; again;) {
        again = 0;
        for (size_t q = 0; q < sizeof qualifiers / sizeof *qualifiers; q++) {
            size_t ql = strlen(qualifiers[q]);
            if (end >= ql && memcmp(s + end - ql, qualifiers[q], ql) == 0) {
                end -= ql;
                again = 1;
            }
        }
    }
    if (end == 0 || s[end - 1] != ')')
        return n;
    size_t depth = 0, i = end;
    while (i > 0) {
        char c = s[--i];
        if (c == ')')
            depth++;
        else if (c == '(' && --depth == 0)
            break;
    }
    if (depth != 0 || i == 0)
        return n;
    s[i] = 0;
    return i;
}

size_t kp_demangle(const char *name, char *out, size_t out_len)
{
    /* only "_Z..." is a mangled C++ name: a C function's name is kept even
     * where the demangler would read something into it */
    if (strncmp(name, "_Z", 2) != 0)
        return put(out, out_len, name);
    int status = -1;
    char *plain = __cxa_demangle(name, NULL, NULL, &status);
    if (status != 0 || !plain) {
        free(plain);
        return put(out, out_len, name);
    }
    size_t n = put(out, out_len, plain);
    free(plain);
    return n < out_len ? without_parameters(out, n) : n;
}

size_t kp_native_frame_text(const kp_native_symbol *sym, char *out, size_t out_len)
{
    int vm = strcmp(sym->module, "beam.smp") == 0;
    size_t at = written(snprintf(out, out_len, "[%s]", vm ? "vm" : sym->module), out_len);
    int n;
    if (sym->name)
        return at + kp_demangle(sym->name, out + at, out_len - at);
    if (sym->function_start)
        n = snprintf(out + at, out_len - at, "%s@0x%" PRIx64, sym->module, sym->function_start);
    else
        n = snprintf(out + at, out_len - at, "%s@0x%" PRIx64 "?", sym->module, sym->offset);
    return at + written(n, out_len - at);
}

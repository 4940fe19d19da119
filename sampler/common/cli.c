#include "common/cli.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/units.h"

void kp_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kprof: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void kp_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kprof: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int kp_looks_like_pid(const char *text)
{
    unsigned a, b, c;
    char end;
    return sscanf(text, "<%u.%u.%u%c", &a, &b, &c, &end) == 4 && end == '>' &&
           text[strlen(text) - 1] == '>';
}

int kp_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

const char *kp_status_reason(kp_status status, int saved_errno)
{
    return status == KP_ERR_IO ? strerror(saved_errno) : kp_strerror(status);
}

int kp_bad_value(const char *option, const char *value, const char *expected)
{
    kp_error("invalid %s '%s': %s", option, value, expected);
    return KP_EXIT_USAGE;
}

int kp_parse_connect_timeout(const char *text, unsigned *ms)
{
    uint64_t us;
    if (kp_parse_duration(text, &us) != 0 || us < 1000 || us > 600000000u)
        return kp_bad_value("--connect-timeout", text, "a duration from 1ms to 10m, such as 5s");
    *ms = (unsigned)(us / 1000);
    return 0;
}

int kp_bad_option(const char *command, int opt, const char *arg)
{
    if (opt == ':')
        kp_error("option '%s' needs a value; see 'kprof %s --help'", arg, command);
    else
        kp_error("unknown option '%s'; see 'kprof %s --help'", arg, command);
    return KP_EXIT_USAGE;
}

int kp_unexpected_argument(const char *command, const char *arg)
{
    kp_error("unexpected argument '%s'; see 'kprof %s --help'", arg, command);
    return KP_EXIT_USAGE;
}

int kp_parse_top_option(const char *arg, unsigned *top)
{
    uint64_t v;
    if (kp_parse_uint(arg, 1, 100000, &v) != 0)
        return kp_bad_value("--top", arg, "a number of processes from 1 to 100000");
    *top = (unsigned)v;
    return KP_EXIT_OK;
}

int kp_parse_depth_option(const char *arg, unsigned *depth)
{
    uint64_t v;
    if (kp_parse_uint(arg, 1, 1000, &v) != 0)
        return kp_bad_value("--depth", arg, "a number of frames from 1 to 1000");
    *depth = (unsigned)v;
    return KP_EXIT_OK;
}

int kp_parse_cpu_rate_option(const char *arg, unsigned *cpu_rate)
{
    uint64_t v;
    if (kp_parse_uint(arg, 0, 10000, &v) != 0)
        return kp_bad_value("--cpu-rate", arg, "samples per second from 1 to 10000, or 0 (off)");
    *cpu_rate = (unsigned)v;
    return KP_EXIT_OK;
}

int kp_parse_select_by_option(const char *arg, const char **select_by)
{
    static const char *const names[] = {"reductions", "memory", "message_queue_len", "bin_vheap",
                                        "total_heap_size"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (strcmp(arg, names[k]) == 0) {
            *select_by = names[k];
            return KP_EXIT_OK;
        }
    return kp_bad_value("--select-by", arg,
                        "use reductions, memory, message_queue_len, bin_vheap or total_heap_size");
}

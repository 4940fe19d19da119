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

/* The state summary and the busy-wait note; see state_summary.h. */
#define _GNU_SOURCE
#include "cpu/state_summary.h"

#include <stdio.h>
#include <string.h>

/* snprintf at `at` of `out`, never past its end; returns the new length. */
static size_t append(char *out, size_t out_len, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#include <stdarg.h>
static size_t append(char *out, size_t out_len, size_t at, const char *fmt, ...)
{
    if (at + 1 >= out_len)
        return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + at, out_len - at, fmt, ap);
    va_end(ap);
    if (n < 0)
        return at;
    return (size_t)n < out_len - at ? at + (size_t)n : out_len - 1;
}

static uint64_t kind_total(const kp_state_counts counts, int kind)
{
    uint64_t t = 0;
    for (int s = 0; s < KP_CPU_STATE_COUNT; s++)
        t += counts[kind][s];
    return t;
}

size_t kp_state_summary(const kp_state_counts counts, char *out, size_t out_len)
{
    size_t at = 0;
    if (out_len)
        out[0] = 0;
    for (int k = 0; k <= KP_THREAD_OTHER; k++) {
        uint64_t total = kind_total(counts, k);
        if (!total)
            continue;
        at = append(out, out_len, at, "%s%s:", at ? "; " : "", kp_thread_kind_name(k));
        /* biggest first: a selection over at most ten states */
        int done[KP_CPU_STATE_COUNT] = {0}, listed = 0;
        for (;;) {
            int best = -1;
            for (int s = 0; s < KP_CPU_STATE_COUNT; s++)
                if (!done[s] && (best < 0 || counts[k][s] > counts[k][best]))
                    best = s;
            if (best < 0 || counts[k][best] * 100 < total)
                break;
            done[best] = 1;
            at = append(out, out_len, at, "%s %.0f%% %s", listed++ ? "," : "",
                        100.0 * (double)counts[k][best] / (double)total,
                        kp_cpu_state_name((kp_cpu_state)best));
        }
    }
    return at;
}

size_t kp_busy_wait_flags(const char *const *argv, size_t argc, char *out, size_t out_len)
{
    /* the emulator's defaults (erl(1)): medium for the schedulers, short
     * for the dirty ones */
    static const char *const flags[] = {"sbwt", "sbwtdcpu", "sbwtdio"};
    static const char *const defaults[] = {"medium", "short", "short"};
    size_t at = 0;
    if (out_len)
        out[0] = 0;
    for (size_t f = 0; f < 3; f++) {
        const char *value = NULL;
        for (size_t i = 0; i + 1 < argc; i++) {
            /* erlexec hands +FLAG to beam.smp as -FLAG; the last one counts */
            if ((argv[i][0] == '-' || argv[i][0] == '+') && strcmp(argv[i] + 1, flags[f]) == 0)
                value = argv[i + 1];
            if (strcmp(argv[i], "--") == 0)
                break; /* what follows is init's, not the emulator's */
        }
        at = append(out, out_len, at, "%s+%s %s%s", f ? " " : "", flags[f],
                    value ? value : defaults[f], value ? "" : " (the default)");
    }
    return at;
}

size_t kp_busy_wait_flags_of(int os_pid, char *out, size_t out_len)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cmdline", os_pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    if (n == 0)
        return (size_t)snprintf(out, out_len, "unknown");
    buf[n] = 0;
    const char *argv[256];
    size_t argc = 0;
    for (size_t i = 0; i < n && argc < 256; i += strlen(buf + i) + 1)
        argv[argc++] = buf + i;
    return kp_busy_wait_flags(argv, argc, out, out_len);
}

size_t kp_busy_wait_note(const kp_state_counts counts, const char *flags, char *out, size_t out_len)
{
    uint64_t all = 0, busy = 0;
    for (int k = 0; k <= KP_THREAD_OTHER; k++) {
        all += kind_total(counts, k);
        busy += counts[k][KP_CPU_BUSY_WAIT];
    }
    if (out_len)
        out[0] = 0;
    if (!all || busy * 10 <= all)
        return 0;
    size_t at = append(out, out_len, 0, "busy waiting is %.0f%% of the node's CPU (",
                       100.0 * (double)busy / (double)all);
    int listed = 0;
    for (int k = 0; k <= KP_THREAD_OTHER; k++) {
        uint64_t total = kind_total(counts, k);
        if (!counts[k][KP_CPU_BUSY_WAIT])
            continue;
        at = append(out, out_len, at, "%s%s threads %.0f%%", listed++ ? ", " : "",
                    kp_thread_kind_name(k),
                    100.0 * (double)counts[k][KP_CPU_BUSY_WAIT] / (double)total);
    }
    return append(out, out_len, at,
                  "): schedulers without work spin before they sleep; the node runs with %s; "
                  "+sbwt none +sbwtdcpu none +sbwtdio none stop the spinning, at some latency "
                  "when work arrives",
                  flags);
}

/* Fuzz target: any bytes as the kprof_tracer NIF's record stream
 * (trace/nif_reader.c), fed in pieces whose sizes the input's first byte
 * chooses, into a request-trace collector (trace/collect.c) writing to a
 * scratch directory, emptied after each input and removed at exit (traces
 * the fuzzer completes are written there: megabytes each). A record split
 * anywhere must decode as a whole one. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/collect.h"
#include "trace/nif_reader.h"

static int to_collector(void *ctx, const kp_trace_event *ev)
{
    kp_trace_collector_event(ctx, ev);
    return 0;
}

static void done(void *ctx, const char *id, const erlang_pid *pids, size_t n, const char *written,
                 const char *why)
{
    (void)ctx, (void)id, (void)pids, (void)n, (void)written, (void)why;
}

static char dir[] = "/tmp/kprof-fuzz-nif-XXXXXX";

static void empty_dir(void)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[sizeof dir + 300];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
}

static void remove_dir(void)
{
    empty_dir();
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static int made;
    if (!made) {
        if (!mkdtemp(dir))
            return 0;
        atexit(remove_dir);
        made = 1;
    }
    kp_trace_collector_options o = {dir, 1000, 1000, 16, 4, 0};
    kp_trace_collector_handler h = {NULL, done, NULL};
    kp_trace_collector *c = kp_trace_collector_create(&o, &h);
    /* one reader for every input: creating its tables costs more than the
     * input's decoding */
    static kp_nif_reader *r;
    if (!r)
        r = kp_nif_reader_create(-1);
    else
        kp_nif_reader_restart(r);
    size_t piece = (size_t)data[0] % 23 + 1;
    if (c && r)
        for (size_t at = 1; at < size; at += piece) {
            size_t n = size - at < piece ? size - at : piece;
            if (kp_nif_reader_feed(r, data + at, n, to_collector, c) != 0)
                break;
        }
    kp_trace_collector_free(c);
    empty_dir();
    return 0;
}

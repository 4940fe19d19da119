/* Fuzz target: any bytes as the kprof_tracer NIF's record stream
 * (node/nif_reader.c), fed in pieces whose sizes the input's first byte
 * chooses, into a request-trace collector (rtrace/collect.c) writing to a
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

#include "node/nif_reader.h"
#include "node/trace_event.h"
#include "rtrace/collect.h"

static int to_collector(void *ctx, const kp_trace_event *ev)
{
    kp_rtrace_event(ctx, ev);
    return 0;
}

static char dir[] = "/tmp/kprof-fuzz-nif-XXXXXX";

/* each trace is written, as `kprof trace` writes it */
static void done(void *ctx, const kp_rtrace_done *d)
{
    char folded[4400], why[4600];
    (void)ctx;
    kp_rtrace_write_files(d->data, dir, d->id, folded, sizeof folded, why, sizeof why);
}

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
    kp_rtrace_options o = {1000, 1000, 16, 4, 0};
    kp_rtrace_handler h = {NULL, done, NULL};
    kp_rtrace *c = kp_rtrace_create(&o, &h);
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
    kp_rtrace_free(c);
    empty_dir();
    return 0;
}

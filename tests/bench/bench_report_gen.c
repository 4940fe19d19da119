/* Writes a synthetic recording for the report benchmark (tests/bench/
 * report_scale): MINUTES of cooperative samples at RATE samples a second
 * (1,000 processes at RATE / 1000 Hz each), in zstd segments of a minute,
 * in the format kprof record writes: the header comments, metric fields,
 * and stacks ending in status, pid and name. The stacks come from 200
 * call paths of 8 to 24 frames; a process keeps its path for a while and
 * is running a tenth of the time, so the profile has the shape of a busy
 * node's rather than noise.
 *
 * Usage: bench_report_gen DIR MINUTES [RATE]   (RATE defaults to 10000) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kp/buf.h"
#include "kp/sink.h"

#define PROCS 1000
#define PATHS 200

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_report_gen DIR MINUTES [RATE]\n");
        return 2;
    }
    const char *dir = argv[1];
    unsigned minutes = (unsigned)atoi(argv[2]);
    unsigned rate = argc > 3 ? (unsigned)atoi(argv[3]) : 10000;
    unsigned hz = rate / PROCS ? rate / PROCS : 1;
    mkdir(dir, 0755);
    /* the call paths: frames of 40 modules x 30 functions */
    static char paths[PATHS][24][48];
    static unsigned depth[PATHS];
    for (unsigned p = 0; p < PATHS; p++) {
        depth[p] = 8 + (unsigned)(next() % 17);
        for (unsigned d = 0; d < depth[p]; d++)
            snprintf(paths[p][d], sizeof paths[p][d], "app_mod_%u:fun_%u/%u",
                     (unsigned)(next() % 40), (unsigned)(next() % 30), (unsigned)(next() % 4));
    }
    unsigned path_of[PROCS];
    uint64_t reds[PROCS], mem[PROCS];
    for (unsigned i = 0; i < PROCS; i++) {
        path_of[i] = (unsigned)(next() % PATHS);
        reds[i] = next() % 100000;
        mem[i] = 2000 + next() % 200000;
    }
    uint64_t t0 = 5000000000ull; /* the segments' clock, microseconds */
    kp_buf b = KP_BUF_INIT;
    for (unsigned m = 0; m < minutes; m++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/samples-%06u.perf.zst", dir, m + 1);
        kp_sink *sink;
        if (kp_sink_open_file(path, KP_COMPRESS_ZSTD, 0, &sink) != KP_OK) {
            perror(path);
            return 1;
        }
        kp_buf_clear(&b);
        kp_buf_append_str(&b,
                          "# kprof sampling of bench@host\n# clock: CLOCK_MONOTONIC "
                          "microseconds; 5000000000 = 1795000000 seconds since the epoch (UTC)\n");
        for (unsigned tick = 0; tick < 60 * hz; tick++) {
            uint64_t t = t0 + (uint64_t)m * 60000000 + (uint64_t)tick * 1000000 / hz;
            for (unsigned i = 0; i < PROCS; i++) {
                if (next() % 50 == 0)
                    path_of[i] = (unsigned)(next() % PATHS);
                int running = next() % 10 == 0;
                uint64_t dr = running ? next() % 4000 : 0;
                reds[i] += dr;
                int64_t dm = (int64_t)(next() % 200) - 100;
                mem[i] = (uint64_t)((int64_t)mem[i] + dm);
                char line[512];
                int n = snprintf(line, sizeof line,
                                 "beam.smp 4242/%u [000] %" PRIu64 ".%06" PRIu64
                                 ": 1 cpu-clock:\tmetric_reductions: %" PRIu64 ", %" PRIu64
                                 "\tmetric_message_queue_len: %u, 0\tmetric_memory: %" PRIu64
                                 ", %" PRId64 "\tmetric_bin_vheap_size: %u, 0\n",
                                 i + 80, t / 1000000, t % 1000000, reds[i], dr,
                                 (unsigned)(next() % 3 == 0), mem[i], dm, (unsigned)(i * 7 % 5000));
                kp_buf_append(&b, line, (size_t)n);
                unsigned p = path_of[i];
                for (unsigned d = depth[p]; d-- > 0;) {
                    n = snprintf(line, sizeof line, "\t%x %s (app.beam)\n", d + 1, paths[p][d]);
                    kp_buf_append(&b, line, (size_t)n);
                }
                n = snprintf(
                    line, sizeof line,
                    "\t2 worker_%u (registered)\n\t1 <0.%u.0> (process)\n\t0 %s (status)\n\n", i,
                    i + 80, running ? "running" : "waiting");
                kp_buf_append(&b, line, (size_t)n);
            }
            if (b.len > (1u << 20)) {
                kp_sink_write(sink, b.data, b.len);
                kp_buf_clear(&b);
            }
        }
        kp_sink_write(sink, b.data, b.len);
        if (kp_sink_commit(sink) != KP_OK) {
            perror(path);
            return 1;
        }
    }
    kp_buf_free(&b);
    return 0;
}

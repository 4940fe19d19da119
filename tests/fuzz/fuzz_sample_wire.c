/* Fuzz target: any bytes as the agent's reply to a round of samples
 * (samples/sample_wire.c), decoded tick by tick into a process table
 * (samples/processes.c) as `kprof record` does. Whatever the bytes, decoding
 * must stay inside the buffer and end in a verdict. The first byte picks the
 * request's sequence number, so both stale and current replies are tried. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kp/intern.h"
#include "samples/processes.h"
#include "samples/sample_wire.h"

static int count(void *ctx, const kp_proc_sample *s)
{
    (void)s;
    ++*(unsigned long *)ctx;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    kp_sample_wire wire;
    memset(&wire, 0, sizeof wire);
    wire.seq = data[0] & 3;
    wire.reply.buff = malloc(size);
    if (!wire.reply.buff)
        return 0;
    memcpy(wire.reply.buff, data + 1, size - 1);
    wire.reply.buffsz = (int)size;
    kp_frames *frames = kp_frames_create(1);
    kp_stacks *stacks = kp_stacks_create();
    unsigned long samples = 0;
    kp_processes *procs =
        frames && stacks ? kp_processes_create(frames, stacks, 8, NULL, count, &samples) : NULL;
    if (procs && kp_sample_wire_take_reply(&wire, size - 1) == 1)
        while (wire.ticks_left > 0) {
            int64_t t;
            if (kp_sample_wire_tick_time(&wire, &t) != 1 ||
                kp_sample_wire_next_tick(&wire, kp_processes_wire_handler(procs)) != 0)
                break;
        }
    kp_processes_free(procs);
    kp_stacks_free(stacks);
    kp_frames_free(frames);
    free(wire.reply.buff);
    return 0;
}

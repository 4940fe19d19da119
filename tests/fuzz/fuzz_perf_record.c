/* Fuzz target: any bytes as the content of a perf_event ring buffer, read
 * record by record as cpu/perf_events.c reads a ring: each header's size
 * bounds the record handed to kp_perf_record_decode, which must stay inside
 * it and end in a verdict. */
#include <stdint.h>
#include <string.h>

#include "cpu/perf_record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kp_cpu_sample sample;
    size_t at = 0;
    while (size - at >= sizeof(struct perf_event_header)) {
        struct perf_event_header h;
        memcpy(&h, data + at, sizeof h);
        if (h.size < sizeof h || h.size > size - at)
            break;
        uint64_t lost = 0;
        kp_perf_record_kind k = kp_perf_record_decode(data + at, h.size, &sample, &lost);
        if (k == KP_PERF_RECORD_SAMPLE && sample.n_chain > KP_CALLCHAIN_MAX)
            __builtin_trap();
        at += h.size;
    }
    return 0;
}

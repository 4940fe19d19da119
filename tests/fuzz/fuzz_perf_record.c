/* Fuzz target: any bytes as the content of a perf_event ring buffer, read
 * record by record as cpu/perf_events.c reads a ring: each header's size
 * bounds the record handed to kp_perf_record_decode, which must stay inside
 * it and end in a verdict; a sample's stack copy must lie inside the record
 * (every byte of it is read, for ASan to see), c_p must be its r13, and the
 * kernel and user chains within their bounds, free of context markers. */
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
        if (k == KP_PERF_RECORD_SAMPLE) {
            if (sample.n_chain > KP_CALLCHAIN_MAX || sample.n_kernel_chain > KP_KERNEL_CHAIN_MAX ||
                sample.c_p != sample.regs[KP_REG_R13])
                __builtin_trap();
            for (size_t i = 0; i < sample.n_chain; i++)
                if (sample.chain[i] >= (uint64_t)PERF_CONTEXT_MAX)
                    __builtin_trap();
            for (size_t i = 0; i < sample.n_kernel_chain; i++)
                if (sample.kernel_chain[i] >= (uint64_t)PERF_CONTEXT_MAX)
                    __builtin_trap();
            if (sample.stack) {
                const uint8_t *rec = data + at;
                if (sample.stack < rec || sample.stack_size > h.size ||
                    sample.stack + sample.stack_size > rec + h.size)
                    __builtin_trap();
                volatile uint8_t sum = 0;
                for (size_t i = 0; i < sample.stack_size; i++)
                    sum += sample.stack[i];
                (void)sum;
            } else if (sample.stack_size) {
                __builtin_trap();
            }
        }
        at += h.size;
    }
    return 0;
}

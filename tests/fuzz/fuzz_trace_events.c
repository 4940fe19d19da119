/* Fuzz target: any bytes as one request-trace event from the trace port, or
 * as a begin or end mark (node/trace_event.c). Decoding must stay inside the
 * bytes and end in a verdict. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "node/trace_event.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1); /* exactly the bytes: ASan sees any overread */
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    kp_trace_event ev;
    kp_trace_decode(copy, size, &ev);
    memset(&ev, 0, sizeof ev);
    kp_trace_decode_mark(copy, size, 1, &ev);
    memset(&ev, 0, sizeof ev);
    kp_trace_decode_mark(copy, size, 0, &ev);
    free(copy);
    return 0;
}

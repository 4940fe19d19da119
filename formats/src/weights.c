#include "kp/weights.h"

#include <string.h>

const char *const kp_weight_names[KP_WEIGHT_COUNT] = {
    "samples",   "reductions",       "memory",           "message_queue_len",
    "bin_vheap", "bin_vheap_growth", "bin_vheap_release"};
const char *const kp_weight_units[KP_WEIGHT_COUNT] = {"samples", "reductions", "bytes", "messages",
                                                      "bytes",   "bytes",      "bytes"};

static int is(const kp_perf_metric *m, const char *name)
{
    return m->name_len == strlen(name) && memcmp(m->name, name, m->name_len) == 0;
}

void kp_weights_from_perf(const kp_perf_metric *metrics, size_t n, int64_t w[KP_WEIGHT_COUNT])
{
    int64_t bin = 0, bin_delta = 0;
    memset(w, 0, KP_WEIGHT_COUNT * sizeof *w);
    w[KP_WEIGHT_SAMPLES] = 1;
    for (size_t i = 0; i < n; i++) {
        const kp_perf_metric *m = &metrics[i];
        if (is(m, "reductions"))
            w[KP_WEIGHT_REDUCTIONS] = m->delta;
        else if (is(m, "memory"))
            w[KP_WEIGHT_MEMORY] = m->value;
        else if (is(m, "message_queue_len"))
            w[KP_WEIGHT_QUEUE] = m->value;
        else if (is(m, "bin_vheap_size") || is(m, "bin_old_vheap_size")) {
            bin += m->value;
            bin_delta += m->delta;
        }
    }
    w[KP_WEIGHT_BIN_VHEAP] = bin;
    w[KP_WEIGHT_BIN_GROWTH] = bin_delta;
    w[KP_WEIGHT_BIN_RELEASE] = -bin_delta;
}

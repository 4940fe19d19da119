#include "kp/metrics.h"

const kp_metric_def kp_metrics[KP_METRIC_COUNT] = {
#define KP_METRIC_DEF(id, name, in_words) {name, sizeof name - 1, in_words},
    KP_METRIC_TABLE(KP_METRIC_DEF)
#undef KP_METRIC_DEF
};

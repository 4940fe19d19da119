#include "kp/weights.h"

#include <string.h>

enum { ONE, VALUE, DELTA, RELEASE };

#define KP_WEIGHT_name(id, name, unit, title, help, how, a, b) name,
#define KP_WEIGHT_unit(id, name, unit, title, help, how, a, b) unit,
#define KP_WEIGHT_title(id, name, unit, title, help, how, a, b) title,
#define KP_WEIGHT_help(id, name, unit, title, help, how, a, b) help,
const char *const kp_weight_names[KP_WEIGHT_COUNT] = {KP_WEIGHT_TABLE(KP_WEIGHT_name)};
const char *const kp_weight_units[KP_WEIGHT_COUNT] = {KP_WEIGHT_TABLE(KP_WEIGHT_unit)};
const char *const kp_weight_titles[KP_WEIGHT_COUNT] = {KP_WEIGHT_TABLE(KP_WEIGHT_title)};
const char *const kp_weight_helps[KP_WEIGHT_COUNT] = {KP_WEIGHT_TABLE(KP_WEIGHT_help)};

static const struct {
    int how, a, b;
} rules[KP_WEIGHT_COUNT] = {
#define KP_WEIGHT_RULE(id, name, unit, title, help, how, a, b) {how, KP_METRIC_##a, KP_METRIC_##b},
    KP_WEIGHT_TABLE(KP_WEIGHT_RULE)
#undef KP_WEIGHT_RULE
};

void kp_weights_compute(const int64_t value[KP_METRIC_COUNT], const int64_t delta[KP_METRIC_COUNT],
                        int64_t w[KP_WEIGHT_COUNT])
{
    for (int k = 0; k < KP_WEIGHT_COUNT; k++) {
        int a = rules[k].a, b = rules[k].b;
        int64_t v = value[a] + (b != a ? value[b] : 0), d = delta[a] + (b != a ? delta[b] : 0);
        switch (rules[k].how) {
        case ONE: w[k] = 1; break;
        case VALUE: w[k] = v; break;
        case DELTA: w[k] = d; break;
        default: w[k] = -d; break;
        }
    }
}

void kp_weights_from_perf(const kp_perf_metric *metrics, size_t n, int64_t w[KP_WEIGHT_COUNT])
{
    int64_t value[KP_METRIC_COUNT] = {0}, delta[KP_METRIC_COUNT] = {0};
    for (size_t i = 0; i < n; i++)
        for (int m = 0; m < KP_METRIC_COUNT; m++)
            if (metrics[i].name_len == kp_metrics[m].name_len &&
                memcmp(metrics[i].name, kp_metrics[m].name, metrics[i].name_len) == 0) {
                value[m] = metrics[i].value;
                delta[m] = metrics[i].delta;
                break;
            }
    kp_weights_compute(value, delta, w);
}

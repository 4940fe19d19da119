#define _GNU_SOURCE
#include "common/clock.h"

#include <time.h>

int64_t kp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t kp_now_us(void)
{
    return (uint64_t)kp_now_ns() / 1000u;
}

#define _GNU_SOURCE
#include "stop.h"

#include <signal.h>
#include <time.h>

static volatile sig_atomic_t requested;

static void on_signal(int sig)
{
    (void)sig;
    requested = 1;
}

void kp_stop_on_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int kp_stop_requested(void)
{
    return requested;
}

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

#define _GNU_SOURCE
#include "common/signals.h"

#include <signal.h>

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
    /* a closed terminal or a dropped ssh session: the recording so far is
     * as worth keeping as after Ctrl-C */
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int kp_stop_requested(void)
{
    return requested;
}

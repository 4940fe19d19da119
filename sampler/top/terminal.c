#define _GNU_SOURCE
#include "top/terminal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "kp/buf.h"

static struct termios saved;
static int entered, keys, at_exit_set;
static volatile sig_atomic_t resized;

static void on_winch(int sig)
{
    (void)sig;
    resized = 1;
}

/* Written with write(2), not stdio: leaving may happen in exit() after
 * stdout's buffer is gone. */
static void put(const char *s, size_t len)
{
    while (len) {
        ssize_t n = write(STDOUT_FILENO, s, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        s += n;
        len -= (size_t)n;
    }
}

#define PUT(s) put(s, sizeof s - 1)

int kp_terminal_enter(void)
{
    if (entered)
        return 0;
    if (!isatty(STDOUT_FILENO))
        return -1;
    if (!at_exit_set) {
        atexit(kp_terminal_leave);
        at_exit_set = 1;
    }
    keys = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
    if (keys) {
        struct termios raw = saved;
        /* no line editing, no echo; ISIG stays, so that Ctrl-C stops kprof
         * as everywhere else */
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        keys = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
    }
    struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, NULL);
    entered = 1;
    fflush(stdout);
    PUT("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J"); /* alternate screen, no cursor */
    return 0;
}

void kp_terminal_leave(void)
{
    if (!entered)
        return;
    entered = 0;
    PUT("\x1b[?25h\x1b[?1049l");
    if (keys)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
    keys = 0;
}

void kp_terminal_size(unsigned *width, unsigned *height)
{
    struct winsize ws;
    *width = 80;
    *height = 24;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
        *width = ws.ws_col;
        *height = ws.ws_row;
    }
}

int kp_terminal_resized(void)
{
    if (!resized)
        return 0;
    resized = 0;
    return 1;
}

int kp_terminal_key(void)
{
    if (!keys)
        return -1;
    struct pollfd p = {STDIN_FILENO, POLLIN, 0};
    unsigned char c;
    if (poll(&p, 1, 0) != 1 || read(STDIN_FILENO, &c, 1) != 1)
        return -1;
    return c;
}

int kp_terminal_draw(const char *text, size_t len)
{
    kp_buf frame = KP_BUF_INIT;
    kp_status st = kp_buf_append_str(&frame, "\x1b[H");
    for (size_t i = 0; i < len && st == KP_OK;) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        st = kp_buf_append(&frame, text + i, end - i);
        /* erase the rest of the line; no newline after the last one, which
         * would scroll a full screen */
        if (st == KP_OK)
            st = kp_buf_append_str(&frame, end + 1 < len ? "\x1b[K\r\n" : "\x1b[K");
        i = end + 1;
    }
    if (st == KP_OK)
        st = kp_buf_append_str(&frame, "\x1b[J");
    int rc = -1;
    if (st == KP_OK) {
        const char *s = frame.data;
        size_t left = frame.len;
        rc = 0;
        while (left && rc == 0) {
            ssize_t n = write(STDOUT_FILENO, s, left);
            if (n < 0 && errno == EINTR)
                continue; /* a signal: its flag is checked by the loop */
            if (n <= 0)
                rc = -1;
            else {
                s += n;
                left -= (size_t)n;
            }
        }
    }
    kp_buf_free(&frame);
    return rc;
}

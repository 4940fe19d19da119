/* The terminal of `kprof top`, with plain ANSI escape codes and termios:
 * the alternate screen, keys read one at a time without echo, and the
 * terminal put back as it was on every way out that a program can see
 * (return, exit(), SIGINT and SIGTERM through common/signals.h; not
 * kill -9, after which `reset` restores it). */
#ifndef KP_TOP_TERMINAL_H
#define KP_TOP_TERMINAL_H

#include <stddef.h>

/* Takes over the terminal on stdout (alternate screen, cursor hidden) and,
 * when stdin is that terminal too, reads keys from it unbuffered and
 * unechoed; Ctrl-C still sends SIGINT. Returns 0, or -1 when stdout is not
 * a terminal (nothing changed). */
int kp_terminal_enter(void);

/* Puts the terminal back as kp_terminal_enter() found it; safe to call
 * again and when it never entered. Also runs at exit(). */
void kp_terminal_leave(void);

/* The size of the terminal on stdout; 80 x 24 when it cannot be read. */
void kp_terminal_size(unsigned *width, unsigned *height);

/* 1 once the terminal was resized (SIGWINCH) since the last call, else 0:
 * the caller redraws at once instead of at the next refresh. */
int kp_terminal_resized(void);

/* The next key pressed, without waiting: its byte, or -1 for none (also
 * when keys are not read). */
int kp_terminal_key(void);

/* Draws `text` (lines ending in '\n', no wider and no more than the screen)
 * from the top-left corner, clearing what the previous frame left. Returns
 * 0, or -1 when stdout cannot be written. */
int kp_terminal_draw(const char *text, size_t len);

#endif

/* The text of a pid of the profiled node, as its shell prints it. Every
 * output names processes this way (the pseudo-frame of a stack, a trace's
 * root, the dump), so one spelling lives here. */
#ifndef KP_COMMON_PID_TEXT_H
#define KP_COMMON_PID_TEXT_H

#include <stdint.h>
#include <stdio.h>

/* "<0." + 10 digits + "." + 10 digits + ">" + NUL */
#define KP_PID_TEXT_MAX 26

/* Writes "<0.NUM.SERIAL>" to `out` (KP_PID_TEXT_MAX bytes) and returns its
 * length. The node part is always 0: a pid of the node it is read from. */
static inline int kp_pid_text(char out[KP_PID_TEXT_MAX], uint32_t num, uint32_t serial)
{
    return snprintf(out, KP_PID_TEXT_MAX, "<0.%u.%u>", (unsigned)num, (unsigned)serial);
}

#endif

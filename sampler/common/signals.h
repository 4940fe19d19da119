/* How the long-running commands (record, tiers, trace, top) stop: Ctrl-C,
 * SIGTERM or a hang-up (SIGHUP) sets a flag that their loops check, so that they finish their
 * files and undo what they set in the node instead of dying mid-write. */
#ifndef KP_COMMON_SIGNALS_H
#define KP_COMMON_SIGNALS_H

/* Catches SIGINT, SIGTERM and SIGHUP (setting the flag) and ignores SIGPIPE (a
 * closed connection then shows as a write error). */
void kp_stop_on_signals(void);

/* 1 once SIGINT, SIGTERM or SIGHUP came. */
int kp_stop_requested(void);

#endif

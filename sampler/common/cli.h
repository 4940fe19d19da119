/* Conventions shared by every kprof command: exit codes and messages.
 *
 * Every error is one line on stderr, "kprof: CAUSE" naming the file or value
 * at fault and, where there is one, what to do. Only sampler/ prints or exits. */
#ifndef KP_COMMON_CLI_H
#define KP_COMMON_CLI_H

#include <stdarg.h>

#include "kp/status.h"

/* Exit codes, documented in docs/record.md ("Exit status") and in `kprof --help`. */
enum {
    KP_EXIT_OK = 0,
    KP_EXIT_FAILURE = 1, /* I/O error, out of memory, disk full */
    KP_EXIT_USAGE = 2,   /* bad command line */
    KP_EXIT_DATA = 3,    /* input unusable: nothing parses, corrupt file */
    KP_EXIT_NODE = 4     /* cannot reach the node, lost it mid-run, or it is too slow to answer */
};

/* Prints "kprof: " + the message + "\n" to stderr. */
void kp_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "kprof: warning: " + the message + "\n" to stderr. */
void kp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The words for a failed formats/ call: strerror(saved_errno) for an I/O
 * error (pass errno right after the call), kp_strerror(status) otherwise. */
const char *kp_status_reason(kp_status status, int saved_errno);

/* Prints "kprof: invalid OPTION 'VALUE': EXPECTED" and returns
 * KP_EXIT_USAGE, for option parsers. */
int kp_bad_value(const char *option, const char *value, const char *expected);

/* For getopt_long's ':' (`opt`, a value missing) or '?' (an unknown option)
 * on `arg` (argv[optind - 1]): prints "option 'ARG' needs a value" or
 * "unknown option 'ARG'", then "; see 'kprof COMMAND --help'", and returns
 * KP_EXIT_USAGE. */
int kp_bad_option(const char *command, int opt, const char *arg);

/* Prints "unexpected argument 'ARG'; see 'kprof COMMAND --help'" and returns
 * KP_EXIT_USAGE, for an operand a command does not take. */
int kp_unexpected_argument(const char *command, const char *arg);

/* Parses the value of --connect-timeout, the same for every command: a
 * duration from 1ms to 10m, into `*ms`. Returns 0, or prints why not and
 * returns KP_EXIT_USAGE. */
int kp_parse_connect_timeout(const char *text, unsigned *ms);

/* The sampling options `kprof record` and `kprof top` share, checked the
 * same way: --top N (1 to 100000 processes), --depth N (1 to 1000 frames),
 * --cpu-rate HZ (0 = off, up to 10000). Each returns KP_EXIT_OK with the
 * value set, or prints why not and returns KP_EXIT_USAGE. */
int kp_parse_top_option(const char *arg, unsigned *top);
int kp_parse_depth_option(const char *arg, unsigned *depth);
int kp_parse_cpu_rate_option(const char *arg, unsigned *cpu_rate);
/* --select-by WHAT: reductions, memory, message_queue_len, bin_vheap or
 * total_heap_size, into `*select_by` (a static string); as above. */
int kp_parse_select_by_option(const char *arg, const char **select_by);

/* Returns 1 if `text` is written like an Erlang pid, "<A.B.C>", else 0. */
int kp_looks_like_pid(const char *text);

/* Returns 1 if `s` ends with `suffix`. */
int kp_ends_with(const char *s, const char *suffix);

#endif

/* Connection to an Erlang node as a hidden C node (erl_interface).
 *
 * Failures are turned into one sentence that names the cause and what to do
 * (unknown host, epmd not running, no such node, wrong cookie, timeout). */
#ifndef KP_NODE_CONNECTION_H
#define KP_NODE_CONNECTION_H

#include <ei.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kp_node {
    ei_cnode ec;
    int fd;           /* the distribution connection */
    char target[512]; /* "app@host" */
    erlang_pid self;  /* our pid, for replies */
    /* called by kp_node_close while the connection is still open, once
     * (kp_agent_load sets it: kprof's code leaves the node); NULL: none */
    void (*on_close)(struct kp_node *node);
    /* called by kp_node_rpc with any other message that arrives before its
     * reply (`msg` with its version byte, `len` bytes); NULL: such
     * messages are dropped */
    void (*on_message)(void *ctx, const char *msg, int len);
    void *message_ctx;
} kp_node;

/* Reads the cookie: from `cookie_file` when not NULL, else $KPROF_COOKIE, else
 * ~/.erlang.cookie. The file is a cookie file (the cookie on its first line:
 * ~/.erlang.cookie, a Mix release's releases/COOKIE) or a release's vm.args
 * (the value of its -setcookie line). Returns 0, or -1 with a message in
 * `err`. The cookie is never printed. */
int kp_cookie_load(const char *cookie_file, char *cookie, size_t cap, char *err, size_t err_len);

/* kp_cookie_load's reading of a file's NUL-terminated `text` (`path` names
 * it in messages): the -setcookie value of a vm.args, else the first line
 * of a cookie file, without its trailing blanks. A vm.args without
 * -setcookie, an empty file, a cookie of `cap` bytes or more, or a value
 * filled in at start ($VAR) is an error. Returns 0 or -1. */
int kp_cookie_parse(const char *text, const char *path, char *cookie, size_t cap, char *err,
                    size_t err_len);

/* Completes a node name: "app" becomes "app@<short hostname>". Returns 0, or
 * -1 with a message in `err` for an empty or malformed name. */
int kp_node_name(const char *given, char *out, size_t cap, char *err, size_t err_len);

/* Connects to `target` ("app@host") within `timeout_ms`. Returns 0, or -1
 * with a message in `err`. */
int kp_node_connect(kp_node *node, const char *target, const char *cookie, unsigned timeout_ms,
                    char *err, size_t err_len);

/* Calls node->on_close, if set, then closes the connection (safe to call
 * twice). */
void kp_node_close(kp_node *node);

/* Calls M:F(Args) on the node and decodes nothing: `reply` receives the
 * result term (no version byte). `args` is an encoded list (no version byte).
 * Messages that are not the reply ({rex, _}) and arrive first go to
 * node->on_message, or are dropped: ei_rpc alone would take the first
 * message for the reply and leave the reply to whoever reads next.
 * Returns 0, or -1 when the connection failed. */
int kp_node_rpc(kp_node *node, const char *mod, const char *fun, const ei_x_buff *args,
                ei_x_buff *reply);

/* kp_node_rpc that names the call in `err` when the connection failed:
 * "lost the connection to NODE during MOD:FUN". Returns 0 or -1. */
int kp_node_call(kp_node *node, const char *mod, const char *fun, const ei_x_buff *args,
                 ei_x_buff *reply, char *err, size_t err_len);

/* kp_node_call of MOD:FUN() (`atom` NULL) or MOD:FUN(atom). `reply` is
 * initialised here and the caller frees it, whatever the outcome. */
int kp_node_call_atom(kp_node *node, const char *mod, const char *fun, const char *atom,
                      ei_x_buff *reply, char *err, size_t err_len);

/* kp_node_call_atom whose reply is text (a string, binary or atom, e.g.
 * erlang:system_info(otp_release), os:getpid()), NUL-terminated in `out`.
 * Returns 0; 1 when the reply is not text of fewer than `cap` bytes (`out`
 * empty, `err` says so); -1 when the connection failed (`err` says so). */
int kp_node_call_text(kp_node *node, const char *mod, const char *fun, const char *atom, char *out,
                      size_t cap, char *err, size_t err_len);

/* Measures our CLOCK_MONOTONIC (kp_now_us) minus the node's monotonic
 * clock, in microseconds, from the quickest of a few rpc round trips (a
 * fraction of a millisecond off on a local network). Returns 0, or -1 with
 * one sentence in `err`. */
int kp_node_clock_offset(kp_node *node, int64_t *offset_us, char *err, size_t err_len);

#endif

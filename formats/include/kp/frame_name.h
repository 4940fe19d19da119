/* The name of a function frame: (module, function, arity) written as the
 * language of its module writes it. This is the one place kprof turns a
 * function into text; every output (folded, perf-script, SVG, report, top,
 * pprof, tier names, request traces, native CPU frames) gets its names here,
 * so one function reads the same in all of them.
 *
 * Erlang modules keep Erlang's notation: lists:seq/2. Modules whose atom is
 * an Elixir alias (Elixir.MyApp.Hot) are written as Elixir 1.14's
 * Exception.format_mfa/3 writes them:
 *
 *     'Elixir.MyApp.Hot':spin/2                  MyApp.Hot.spin/2
 *     'Elixir.MyApp.Hot':'-spin/2-fun-0-'/1      anonymous fn/1 in MyApp.Hot.spin/2
 *     'Elixir.MyApp.Hot':'--spin/2-fun-0-/1-fun-1-'/0
 *                                                anonymous fn/0 in MyApp.Hot."-spin/2-fun-0-"/1
 *     'Elixir.MyApp.Hot':'-inlined-f/1-'/1       MyApp.Hot."-inlined-f/1-"/1
 *     'Elixir.MyApp.Hot':'foo bar'/0             MyApp.Hot."foo bar"/0
 *     'Elixir.MyApp.Hot':'+'/2                   MyApp.Hot.+/2
 *     'Elixir.my_mod':f/0                        :"Elixir.my_mod".f/0
 *
 * (Macro.inspect_atom/2's rules: a function name that is an identifier or an
 * operator is bare, any other is quoted with Elixir's string escapes; a
 * module that is not an alias is a quoted atom.) Identifiers are checked
 * for ASCII; a byte of 0x80 or above counts as an identifier character, as
 * the letters of the Unicode identifiers Elixir accepts do.
 *
 * The text is the readable name, not encoded: files take it through
 * kp_symbol_encode (symbol.h), where spaces and quotes become %20 and %22.
 */
#ifndef KP_FRAME_NAME_H
#define KP_FRAME_NAME_H

#include <stddef.h>

#include "kp/buf.h"

/* The notation of frames of Elixir modules. */
typedef enum {
    KP_NAMES_ELIXIR = 0, /* MyApp.Hot.spin/2: the default */
    KP_NAMES_ERLANG = 1  /* Elixir.MyApp.Hot:spin/2, as Erlang and older kprof wrote it */
} kp_names;

/* Appends the name of `module`:`function`/`arity` (atom texts, unquoted, not
 * NUL-terminated) in `names`' notation, unencoded. Erlang modules, and every
 * module with KP_NAMES_ERLANG, give "module:function/arity".
 * Returns KP_OK or KP_ERR_NOMEM (`out` may then hold part of the name). */
kp_status kp_frame_name(kp_buf *out, const char *module, size_t module_len, const char *function,
                        size_t function_len, unsigned arity, kp_names names);

/* Appends the name of module `module` (atom text, unquoted, not
 * NUL-terminated) as kp_frame_name writes it before a function, unencoded:
 * as it is for Erlang modules and with KP_NAMES_ERLANG; MyApp.Hot for
 * Elixir.MyApp.Hot; :"Elixir.my_mod" for an Elixir.-module that is not an
 * alias. Returns KP_OK or KP_ERR_NOMEM. */
kp_status kp_module_name(kp_buf *out, const char *module, size_t len, kp_names names);

/* Appends the name of a process label as the agent sends it
 * (kprof_agent:process_label/1): a registered name's atom text when
 * `registered`, else an initial call "module:function/arity" (or "unknown").
 * With KP_NAMES_ELIXIR, a registered Elixir alias reads as Elixir shows it
 * (Elixir.MyApp.Store: MyApp.Store) and an initial call of an Elixir module
 * as kp_frame_name names it (Elixir.MyApp.Load:-start_link/1-fun-0-/0:
 * anonymous fn/0 in MyApp.Load.start_link/1); any other label is copied.
 * Unencoded. Returns KP_OK or KP_ERR_NOMEM. */
kp_status kp_label_name(kp_buf *out, int registered, const char *label, size_t len, kp_names names);

/* Finds the module in a frame's name (one kp_frame_name wrote, encoded or
 * not, perhaps with a ":LINE" after it): returns 1 for a function frame and
 * sets `*start` and `*len` to its module's bytes ("lists" of lists:seq/2,
 * "MyApp.Hot" of MyApp.Hot.spin/2 and of "anonymous fn/1 in
 * MyApp.Hot.spin/2"); returns 0 for any other frame (sleep, <0.1.0>,
 * [vm]name), which is then not a function's. For colours and grouping only:
 * a quoted function name holding '.' gives a longer module. */
int kp_frame_name_module(const char *name, size_t len, size_t *start, size_t *module_len);

#endif

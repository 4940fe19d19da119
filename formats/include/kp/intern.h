/* Frames and stacks of a profile, interned.
 *
 * A frame is an Erlang function (module, function, arity, optional line) or a
 * pseudo-frame such as a process id or a process status. Each distinct frame
 * gets a dense id; its display symbol (percent-encoded per FORMATS.md) and its
 * perf-script module column are built once, when it is first seen.
 *
 * A stack is a sequence of frame ids, ROOT FIRST (the order of folded files).
 * Each distinct sequence gets a dense id. Both tables grow with the number of
 * distinct frames and stacks, never with the number of samples, and ids are
 * stable for the life of the table.
 */
#ifndef KP_INTERN_H
#define KP_INTERN_H

#include <stddef.h>
#include <stdint.h>

#include "kp/status.h"

typedef struct kp_frames kp_frames;
typedef struct kp_stacks kp_stacks;

typedef struct {
    const char *module; /* atom text, unquoted; not NUL-terminated */
    size_t module_len;
    const char *function;
    size_t function_len;
    unsigned arity;
    unsigned line; /* 0 = unknown */
} kp_mfa;

/* How a frame table names function frames, or-ed together. */
enum {
    /* frames that differ only by line are distinct and their symbol ends in
     * ":LINE"; without it the line is ignored */
    KP_FRAMES_LINES = 1,
    /* frames of Elixir modules in Erlang's notation (Elixir.Mod:fun/1);
     * without it in Elixir's (Mod.fun/1; frame_name.h) */
    KP_FRAMES_ERLANG_NAMES = 2
};

/* Creates a frame table naming frames as `flags` (KP_FRAMES_*) say.
 * Returns NULL when out of memory. */
kp_frames *kp_frames_create(unsigned flags);
void kp_frames_free(kp_frames *frames);

/* Interns a function frame; its symbol is its name (kp_frame_name:
 * "module:function/arity", or Elixir's "Module.function/arity") plus
 * ":line", and its module column "module.beam" (the module's file), both
 * encoded.
 * Returns KP_OK, KP_ERR_NOMEM or KP_ERR_LIMIT; on error nothing is added. */
kp_status kp_frames_intern_mfa(kp_frames *frames, const kp_mfa *mfa, uint32_t *id);

/* Interns a pseudo-frame whose symbol is `text` (encoded) and whose module
 * column is `kind` (a short word such as "process" or "status", encoded).
 * A pseudo-frame never equals a function frame. */
kp_status kp_frames_intern_pseudo(kp_frames *frames, const char *text, size_t len, const char *kind,
                                  uint32_t *id);

/* Interns the pseudo-frame of a process label (kind "registered" or
 * "initial"), named by kp_label_name in the table's notation.
 * Returns as kp_frames_intern_pseudo. */
kp_status kp_frames_intern_label(kp_frames *frames, int registered, const char *label, size_t len,
                                 uint32_t *id);

/* Interns the pseudo-frame of code that belongs to a module but to none of
 * its functions, such as the JIT's "$Elixir.MyApp.Hot::codeHeader": its
 * symbol is `prefix`, the module named by kp_module_name in the table's
 * notation, then `suffix[0..suffix_len)` ("[jit]MyApp.Hot::codeHeader"),
 * and its module column `kind`. Returns as kp_frames_intern_pseudo. */
kp_status kp_frames_intern_in_module(kp_frames *frames, const char *prefix, const char *module,
                                     size_t module_len, const char *suffix, size_t suffix_len,
                                     const char *kind, uint32_t *id);

uint32_t kp_frames_count(const kp_frames *frames);
/* The encoded symbol of frame `id` (< count) and its length; valid until the
 * next intern call. */
const char *kp_frames_symbol(const kp_frames *frames, uint32_t id, size_t *len);
/* The encoded perf-script module column of frame `id`. */
const char *kp_frames_module(const kp_frames *frames, uint32_t id, size_t *len);

/* Creates an empty stack table; NULL when out of memory. */
kp_stacks *kp_stacks_create(void);
void kp_stacks_free(kp_stacks *stacks);
/* Interns the frame sequence `ids[0..n)` (root first; n may be 0). */
kp_status kp_stacks_intern(kp_stacks *stacks, const uint32_t *ids, size_t n, uint32_t *id);
uint32_t kp_stacks_count(const kp_stacks *stacks);
/* The frames of stack `id` (root first) and their number; valid until the next
 * intern call. */
const uint32_t *kp_stacks_get(const kp_stacks *stacks, uint32_t id, size_t *n);

/* Bytes of memory held, for reporting. */
size_t kp_frames_memory(const kp_frames *frames);
size_t kp_stacks_memory(const kp_stacks *stacks);

#endif

/* The text of a native code frame, from what cpu/symbols.h found for its
 * address: "[vm]NAME" for beam.smp, "[FILE]NAME" for a library or a NIF,
 * where NAME is
 *   - the symbol, C++ names demangled ("[vm]beam_jit_call_bif", as `c++filt` shows
 *     them but for the parameter list, which tools cut at '(' and which
 *     C names do not have);
 *   - for a function without a symbol (most static functions of a
 *     stripped build, such as Debian's beam.smp), "FILE@0xSTART": its
 *     start in the file's terms from the unwind tables, so that two such
 *     functions are never one frame, and the same function has the same
 *     name in every recording of that build; `addr2line -f -e FILE 0xSTART`
 *     (with the build's debug file) names it. '@', not perf's '+', which
 *     FlameScope cuts names at;
 *   - when not even the unwind tables cover the address,
 *     "FILE@0xOFFSET?": the address itself.
 * Pure functions of their input: no state, no allocation but the
 * demangler's (freed before returning). */
#ifndef KP_CPU_NATIVE_NAMES_H
#define KP_CPU_NATIVE_NAMES_H

#include <stddef.h>

#include "cpu/symbols.h"

/* Writes the frame text of `sym` into `out` (NUL-terminated, cut to
 * `out_len`). Returns its length. */
size_t kp_native_frame_text(const kp_native_symbol *sym, char *out, size_t out_len);

/* Writes the demangled form of C++ symbol `name` into `out` when it is a
 * mangled name that demangles, else `name` itself. Returns the length. */
size_t kp_demangle(const char *name, char *out, size_t out_len);

#endif

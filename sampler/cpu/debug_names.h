/* Naming a recording's unnamed native functions again, from debug files
 * installed after it was made: a frame "[vm]beam.smp@0x73ee0" (a function
 * without a symbol, by its start in the file: cpu/native_names.h) becomes
 * "[vm]scheduler_wait" when the debug file of that build of beam.smp (by
 * the build id the recording's cpu-files.tsv gives, cpu/native.h) is
 * under ROOT/.build-id/XX/REST.debug, where Debian's -dbgsym packages put
 * them (ROOT: /usr/lib/debug). Only the build recorded is used: a file
 * upgraded since is another build, and its names would be wrong.
 * Single-threaded. */
#ifndef KP_CPU_DEBUG_NAMES_H
#define KP_CPU_DEBUG_NAMES_H

#include <stddef.h>

#include "kp/buf.h"

typedef struct kp_debug_names kp_debug_names;

/* Reads DIR's cpu-files.tsv. NULL when the recording has none (made
 * without native samples, or by an older kprof) or out of memory: its
 * frames then stay as they are. `root` NULL means /usr/lib/debug. */
kp_debug_names *kp_debug_names_open(const char *dir, const char *root);
void kp_debug_names_free(kp_debug_names *names);

/* Writes folded stack `stack[0..len)` (frames separated by ';', as perf
 * segments and folded files hold them) into `out` (cleared first) with
 * each frame FILE@0xSTART that a debug file names replaced by
 * "[MODULE]NAME" (demangled as cpu/native_names.h does). Returns 1 when a
 * frame was renamed, 0 when none was (`out` then holds the stack as it
 * was), -1 when out of memory. Each distinct frame is looked up once. */
int kp_debug_names_rewrite(kp_debug_names *names, const char *stack, size_t len, kp_buf *out);

/* Debug files found, and distinct frames they named, so far. */
void kp_debug_names_counts(const kp_debug_names *names, size_t *files, size_t *named);

#endif

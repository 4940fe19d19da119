/* Profiles in pprof's format: the protocol buffer `perftools.profiles.Profile`
 * (github.com/google/pprof, proto/profile.proto) that `go tool pprof`,
 * Pyroscope, Parca and Grafana read, gzip-compressed by the caller (a
 * KP_COMPRESS_GZIP sink). Built from folded stacks: one function and one
 * location per distinct frame name, one sample per stack, its values one
 * per sample type. A function's system_name is its frame; its name is the
 * frame readable (percent-encoding undone: "anonymous fn/1 in M.f/2") with
 * <...> written [...], which pprof would otherwise drop as C++ template
 * arguments (a process's frame <0.85.0> shows as [0.85.0]). The
 * first sample type is the period type and the default one (pprof would
 * otherwise show the last).
 *
 * The encoder is written here rather than generated (protobuf-c): the
 * profile uses five small messages of varints and strings, and generating
 * code would need the .proto file in the tree.
 *
 *     kp_pprof_type t = {"samples", "count"};
 *     kp_pprof *p = kp_pprof_create(&t, 1);
 *     int64_t v = 3;
 *     kp_pprof_add(p, "main;work", 9, &v);
 *     kp_buf out = KP_BUF_INIT;
 *     kp_pprof_encode(p, 0, 0, &out);
 */
#ifndef KP_PPROF_H
#define KP_PPROF_H

#include <stddef.h>
#include <stdint.h>

#include "kp/buf.h"
#include "kp/status.h"

/* A sample type: what a value counts, and its unit ("count", "bytes",
 * "nanoseconds", ...). The strings are copied. */
typedef struct {
    const char *type, *unit;
} kp_pprof_type;

typedef struct kp_pprof kp_pprof;

/* A profile with `n_types` values per sample (1 to 16), or NULL when out of
 * memory or `n_types` is out of range. */
kp_pprof *kp_pprof_create(const kp_pprof_type *types, size_t n_types);

/* Frees the profile; NULL is allowed. */
void kp_pprof_free(kp_pprof *profile);

/* Adds one sample: the folded stack `stack` (`len` bytes, frames separated
 * by ';', root first, none empty) with `values` (one per sample type).
 * Returns KP_OK, KP_ERR_FORMAT for an empty stack or frame (nothing added),
 * KP_ERR_NOMEM or KP_ERR_LIMIT. */
kp_status kp_pprof_add(kp_pprof *profile, const char *stack, size_t len, const int64_t *values);

/* Number of samples added. */
size_t kp_pprof_samples(const kp_pprof *profile);

/* Appends the encoded profile to `out`; `time_ns` (wall clock, ns since the
 * epoch) and `duration_ns` are written when not 0. Returns KP_OK or
 * KP_ERR_NOMEM (`out` may then hold part of it). */
kp_status kp_pprof_encode(const kp_pprof *profile, int64_t time_ns, int64_t duration_ns,
                          kp_buf *out);

#endif

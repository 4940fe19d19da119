/* Profiles in OpenTelemetry's wire format: the protocol buffer
 * `opentelemetry.proto.collector.profiles.v1development.
 * ExportProfilesServiceRequest` (opentelemetry-proto 1.10 and later, whose
 * Sample fields were renumbered: the OpenTelemetry Collector from 0.148,
 * Parca 0.28 and Grafana Pyroscope 2 read it), that OTLP/HTTP posts to
 * /v1development/profiles and OTLP/gRPC sends to ProfilesService/Export.
 *
 * One request holds one resource (a node: its attributes), one scope
 * (kprof), several profiles of one sample type each (CPU time, samples,
 * reductions, ...) and the dictionary they share: strings, mappings,
 * functions, locations, stacks and attributes, each interned once, entry 0
 * of every table the empty one, as the protocol wants. Samples with the
 * same stack and attributes in one profile are one sample whose value is
 * their sum.
 *
 * The encoder is written here, beside pprof's (kp/pprof.h) and on the same
 * wire primitives (kp/protobuf.h), rather than generated with protobuf-c:
 * the request is a dozen small messages of varints and strings, generated
 * code would need opentelemetry-proto's .proto files in the tree, and
 * interning (which a generated encoder does not do) is most of the work.
 *
 *     kp_otlp *o = kp_otlp_create("kprof", "0.1.0");
 *     kp_otlp_resource_string(o, "service.name", "app");
 *     uint32_t cpu, loc, attr;
 *     kp_otlp_profile(o, "cpu", "nanoseconds", 1000000, start_ns, 10e9, &cpu);
 *     kp_otlp_frame f = {"lists:sort/1", 12, KP_OTLP_FRAME_BEAM, NULL, NULL, 0};
 *     kp_otlp_location(o, &f, &loc);
 *     kp_otlp_attribute(o, "beam.thread.kind", "scheduler", 9, &attr);
 *     kp_otlp_sample(o, cpu, &loc, 1, &attr, 1, 1000000);
 *     kp_buf out = KP_BUF_INIT;
 *     kp_otlp_encode(o, &out);
 */
#ifndef KP_OTLP_H
#define KP_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "kp/buf.h"
#include "kp/status.h"

/* What runs at a location, as the location's `profile.frame.type`
 * attribute says it (OpenTelemetry's semantic conventions, which its
 * eBPF profiler's frames also use). KP_OTLP_FRAME_NONE: a frame that is
 * no code, such as the Erlang process kprof puts near the root; it gets
 * no such attribute. */
typedef enum {
    KP_OTLP_FRAME_NONE,
    KP_OTLP_FRAME_BEAM,
    KP_OTLP_FRAME_NATIVE,
    KP_OTLP_FRAME_KERNEL
} kp_otlp_frame_type;

/* The `profile.frame.type` value of `type` ("beam", ...; NULL for NONE). */
const char *kp_otlp_frame_type_name(kp_otlp_frame_type type);

/* A frame: its function's name (readable, `name_len` bytes), what runs
 * there, and for native code its file (the mapping's filename; NULL for
 * none), that file's GNU build id in hex (the mapping's
 * `process.executable.build_id.gnu`; NULL for none) and the address of
 * the code in the file (0 when unknown), so that a backend holding the
 * file's debug symbols can name a function kprof could not. */
typedef struct {
    const char *name;
    size_t name_len;
    kp_otlp_frame_type type;
    const char *file;
    const char *build_id;
    uint64_t address;
} kp_otlp_frame;

typedef struct kp_otlp kp_otlp;

/* An empty request whose scope is `scope_name` at `scope_version` (both
 * copied). NULL when out of memory. */
kp_otlp *kp_otlp_create(const char *scope_name, const char *scope_version);

/* Frees the request; NULL is allowed. */
void kp_otlp_free(kp_otlp *otlp);

/* Adds an attribute to the resource: a string, or an integer (e.g.
 * process.pid). Returns KP_OK or KP_ERR_NOMEM. */
kp_status kp_otlp_resource_string(kp_otlp *otlp, const char *key, const char *value);
kp_status kp_otlp_resource_int(kp_otlp *otlp, const char *key, int64_t value);

/* Adds a profile whose samples count `type` in `unit` ("cpu",
 * "nanoseconds"), which is also its period type, one sample every `period`
 * units (0: not periodic); it covers [time_unix_nano, time_unix_nano +
 * duration_nano). Its index in `*profile`. Returns KP_OK, KP_ERR_NOMEM or
 * KP_ERR_LIMIT (more than 64 profiles). */
kp_status kp_otlp_profile(kp_otlp *otlp, const char *type, const char *unit, int64_t period,
                          uint64_t time_unix_nano, uint64_t duration_nano, uint32_t *profile);

/* Sets every profile's time and duration, as kp_otlp_profile's (a window
 * cut short). */
void kp_otlp_set_time(kp_otlp *otlp, uint64_t time_unix_nano, uint64_t duration_nano);

/* The location of `frame`, interned with its function and mapping: its
 * index in `*location` (never 0). Returns KP_OK, KP_ERR_NOMEM or
 * KP_ERR_INVAL for an empty name. */
kp_status kp_otlp_location(kp_otlp *otlp, const kp_otlp_frame *frame, uint32_t *location);

/* A sample attribute `key` = the string `value` (`value_len` bytes),
 * interned: its index in `*attribute` (never 0). Returns KP_OK or
 * KP_ERR_NOMEM. */
kp_status kp_otlp_attribute(kp_otlp *otlp, const char *key, const char *value, size_t value_len,
                            uint32_t *attribute);

/* Adds `value` to profile `profile`'s sample of the stack
 * `locations[0..n_locations)` (LEAF FIRST, as the protocol orders a
 * stack; indices from kp_otlp_location) with the attributes
 * `attributes[0..n_attributes)` (from kp_otlp_attribute, in an order the
 * caller keeps the same for the same set). Returns KP_OK, KP_ERR_NOMEM, or
 * KP_ERR_INVAL for an unknown profile, location or attribute (nothing
 * added). */
kp_status kp_otlp_sample(kp_otlp *otlp, uint32_t profile, const uint32_t *locations,
                         size_t n_locations, const uint32_t *attributes, size_t n_attributes,
                         int64_t value);

/* Distinct samples so far, over all profiles. */
size_t kp_otlp_samples(const kp_otlp *otlp);

/* Appends the encoded ExportProfilesServiceRequest to `out`. Profiles
 * without samples are left out. Returns KP_OK or KP_ERR_NOMEM (`out` may
 * then hold part of it). */
kp_status kp_otlp_encode(const kp_otlp *otlp, kp_buf *out);

#endif

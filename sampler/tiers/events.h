/* Decoding of the trace events kprof_tiers emits into kp_tier_event: from
 * the ip trace port (term_to_binary bytes, as the port frames them), or
 * from the kprof_tracer NIF (its records, read by node/nif_reader.h).
 *
 *   {trace_ts, Pid, call, {M, F, Arity}, Token, Ts}               a tier call
 *   {trace_ts, Pid, call, {M, F, Arity}, [Identity, Token], Ts}   a request opens
 *   {trace_ts, Pid, return_from, {M, F, Arity}, Value, Ts}
 *   {trace_ts, Pid, exception_from, {M, F, Arity}, {Class, Value}, Ts}
 *   Token = {Flags, Label, Serial, From, LastCnt}; Label is a pid for kprof's
 *   requests (anything else is another user's seq_trace label).
 *
 * The bytes come from the node's term_to_binary through the trace port; they
 * are checked whole (kp_term_check) before ei decodes them, since ei's
 * decoders do not check bounds.
 */
#ifndef KP_TIERS_EVENTS_H
#define KP_TIERS_EVENTS_H

#include <stddef.h>

#include "tiers/match.h"
#include "node/trace_event.h"

typedef struct {
    char module[256], function[256];
    unsigned arity;
    int first_word; /* its identity is an argument: keep a text's first word */
} kp_tier_mfa;

typedef struct {
    const kp_tier_mfa *mfas; /* index = kp_tier_event.fn */
    size_t n;
    char identity[128]; /* holds the text kp_tier_event.identity points to */
} kp_tier_decoder;

/* Decodes one event of `len` bytes. Returns 1 for an event of a known
 * function, 0 for a well-formed term that is not one (another function,
 * another kind of trace message), -1 for bytes that are not a term. */
int kp_tier_decode(kp_tier_decoder *d, const char *buf, size_t len, kp_tier_event *ev);

/* Converts one event of the kprof_tracer NIF's stream (node/nif_reader.h:
 * SEQ_CALL, RETURN_FROM, EXCEPTION_FROM records) into `ev`, as
 * kp_tier_decode does for the trace port's terms. Returns 1 for an event of
 * a known function, 0 for any other. */
int kp_tier_from_nif(kp_tier_decoder *d, const kp_trace_event *nif, kp_tier_event *ev);

/* Writes a request identity term as short text: atoms, integers, strings
 * and binaries as themselves, or with `first_word` strings and binaries up to
 * their first space (an entry argument "GET k1" is a GET); a tuple as its
 * first element (so `{put, K, V}` is `put`); anything else printed. Cut at
 * `cap` - 1 bytes; control characters become '?'. Returns the length. */
size_t kp_tier_identity_text(const char *buf, int *index, char *out, size_t cap, int first_word);

#endif

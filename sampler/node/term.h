/* Helpers for the terms a node sends (ei's external format), shared by every
 * decoder of node data. Each takes `buf` and an index `*i` as ei's decoders
 * do, advances `*i` past the term on success and returns 0, or -1 when the
 * term is not of the expected shape (`*i` is then undefined).
 *
 * ei's decoders trust the lengths inside a term: they read past the end
 * of a buffer whose term claims more than it holds. Every decoder of node
 * data (sample replies, trace-port frames, NIF records) therefore runs
 * kp_term_check over the bytes it was given first; after it, ei's decoders
 * stay inside them. It costs about 16 ns per sample of a reply, 6% of
 * decoding it. */
#ifndef KP_NODE_TERM_H
#define KP_NODE_TERM_H

#include <ei.h>
#include <stddef.h>
#include <stdint.h>

/* 0 when the `len` bytes at `buf` begin with one whole term in the external
 * format (after an optional version byte 131) whose every part lies within
 * them, else -1. Compressed terms, atom cache references and local
 * (OTP 26) terms are refused: kprof's node data has none. Work is bounded
 * by `len`. */
int kp_term_check(const char *buf, size_t len);

/* Any integer that fits 64 bits signed (small, big or bignum). */
int kp_term_decode_int(const char *buf, int *i, int64_t *value);

/* A binary, a string (a list of small integers) or [] as NUL-terminated
 * text; -1 also when it does not fit in `cap` - 1 bytes. */
int kp_term_decode_text(const char *buf, int *i, char *out, size_t cap);

/* An atom as NUL-terminated Latin-1 text; -1 also when it does not fit in
 * `cap` - 1 bytes (ei_decode_atom alone writes up to MAXATOMLEN bytes). */
int kp_term_decode_atom(const char *buf, int *i, char *out, size_t cap);

/* A pid of the connected node: its number and serial. */
int kp_term_decode_pid_numbers(const char *buf, int *i, uint32_t *num, uint32_t *serial);

/* Writes the term at `index` of `buf` (no version byte, e.g. an rpc reply)
 * into `out` as Erlang text, for messages: cut to `cap` - 1 bytes, and
 * `fallback` when it cannot be decoded. Returns `out`. */
const char *kp_term_text(const char *buf, int index, const char *fallback, char *out, size_t cap);

#endif

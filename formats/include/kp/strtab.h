/* Interning of byte strings: each distinct string gets a dense id (0, 1, 2...)
 * that stays the same for the life of the table.
 *
 * Strings are hashed with XXH3 and compared byte for byte on a hash match, so
 * a hash collision never merges two different strings. Memory grows with the
 * number and size of distinct strings, not with the number of lookups.
 *
 *     kp_strtab *t = kp_strtab_create();
 *     uint32_t id;
 *     if (kp_strtab_intern(t, "a;b", 3, &id, NULL) == KP_OK) ...
 *     kp_strtab_free(t);
 */
#ifndef KP_STRTAB_H
#define KP_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "kp/status.h"

typedef struct kp_strtab kp_strtab;

/* Returns a new empty table, or NULL when out of memory. */
kp_strtab *kp_strtab_create(void);
/* Frees the table and every string in it; NULL is allowed. */
void kp_strtab_free(kp_strtab *table);

/* Finds or adds `key` (any bytes, len < 4 GiB) and stores its id in `*id`.
 * When `is_new` is not NULL it is set to 1 if the key was added by this call.
 * Returns KP_OK, KP_ERR_NOMEM (table unchanged) or KP_ERR_LIMIT (2^32-1
 * strings, or a key of 4 GiB or more). */
kp_status kp_strtab_intern(kp_strtab *table, const void *key, size_t len, uint32_t *id,
                           int *is_new);

/* Same as kp_strtab_intern with a precomputed hash: `hash` must be
 * kp_strtab_hash(key, len). Lets a caller that hashes anyway avoid a rehash. */
kp_status kp_strtab_intern_hashed(kp_strtab *table, const void *key, size_t len, uint64_t hash,
                                  uint32_t *id, int *is_new);

/* Looks `key` up without adding it: returns 1 and sets `*id` when present,
 * 0 otherwise. `hash` must be kp_strtab_hash(key, len). Never allocates. */
int kp_strtab_find(const kp_strtab *table, const void *key, size_t len, uint64_t hash,
                   uint32_t *id);

/* The hash kp_strtab uses (XXH3, 64 bits). */
uint64_t kp_strtab_hash(const void *key, size_t len);

/* Returns the bytes of string `id` (4-byte aligned, not NUL-terminated) and its
 * length in `*len`. The pointer stays valid until the next intern call. `id`
 * must be below kp_strtab_count(). */
const void *kp_strtab_get(const kp_strtab *table, uint32_t id, size_t *len);

/* Number of distinct strings. */
uint32_t kp_strtab_count(const kp_strtab *table);

/* Bytes of memory held by the table (arena, index and hash slots). */
size_t kp_strtab_memory(const kp_strtab *table);

#endif

/* A small open-addressing hash map from 64-bit keys to 32-bit values, for
 * the tier matcher's per-process and per-request tables. It grows by
 * doubling; deletion shifts entries back, so there are no tombstones and a
 * map that stays small stays fast however long the run. */
#ifndef KP_COMMON_U64_MAP_H
#define KP_COMMON_U64_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *keys;
    uint32_t *values;
    unsigned char *used;
    size_t cap; /* a power of two, or 0 */
    size_t count;
} kp_u64_map;

/* An empty map needs no allocation: kp_u64_map m = {0}. */
void kp_u64_map_free(kp_u64_map *map);

/* Looks `key` up: 1 with `*value` set when present, else 0. */
int kp_u64_map_get(const kp_u64_map *map, uint64_t key, uint32_t *value);

/* Inserts or replaces. Returns 0, or -1 when out of memory (map unchanged). */
int kp_u64_map_put(kp_u64_map *map, uint64_t key, uint32_t value);

/* Removes `key` if present. */
void kp_u64_map_del(kp_u64_map *map, uint64_t key);

/* Removes everything, keeping the allocation. */
void kp_u64_map_clear(kp_u64_map *map);

#endif

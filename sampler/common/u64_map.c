#include "common/u64_map.h"

#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"

/* Pids are small consecutive numbers: mix them so neighbours spread. */
static size_t slot_of(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

void kp_u64_map_free(kp_u64_map *m)
{
    kp_free(m->keys);
    kp_free(m->values);
    kp_free(m->used);
    memset(m, 0, sizeof *m);
}

int kp_u64_map_get(const kp_u64_map *m, uint64_t key, uint32_t *value)
{
    if (!m->cap)
        return 0;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->used[i])
            return 0;
        if (m->keys[i] == key) {
            *value = m->values[i];
            return 1;
        }
    }
}

static int grow(kp_u64_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    kp_u64_map bigger = {
        .keys = kp_realloc_array(NULL, cap, sizeof *bigger.keys),
        .values = kp_realloc_array(NULL, cap, sizeof *bigger.values),
        .used = kp_calloc(cap, 1),
        .cap = cap,
    };
    if (!bigger.keys || !bigger.values || !bigger.used) {
        kp_u64_map_free(&bigger);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i])
            kp_u64_map_put(&bigger, m->keys[i], m->values[i]);
    kp_u64_map_free(m);
    *m = bigger;
    return 0;
}

int kp_u64_map_put(kp_u64_map *m, uint64_t key, uint32_t value)
{
    /* load factor at most 1/2 keeps probes short */
    if ((m->count + 1) * 2 > m->cap && grow(m) != 0)
        return -1;
    size_t i = slot_of(key, m->cap);
    while (m->used[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->used[i]) {
        m->used[i] = 1;
        m->keys[i] = key;
        m->count++;
    }
    m->values[i] = value;
    return 0;
}

void kp_u64_map_del(kp_u64_map *m, uint64_t key)
{
    if (!m->cap)
        return;
    size_t mask = m->cap - 1, i = slot_of(key, m->cap);
    while (m->used[i] && m->keys[i] != key)
        i = (i + 1) & mask;
    if (!m->used[i])
        return;
    /* backward shift: move later entries of the run into the hole when their
     * home slot does not lie (cyclically) between the hole and them */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->used[j]; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        int movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            m->keys[hole] = m->keys[j];
            m->values[hole] = m->values[j];
            hole = j;
        }
    }
    m->used[hole] = 0;
    m->count--;
}

void kp_u64_map_clear(kp_u64_map *m)
{
    if (m->cap)
        memset(m->used, 0, m->cap);
    m->count = 0;
}
